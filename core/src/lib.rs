//! # `aperture-core`: everything below the HTTP surface
//!
//! The store, the journal, keys, the call runtime, the services and hosted agents, with the
//! configuration they run with. Nothing here knows HTTP, sessions, Leptos or gRPC: the `server`
//! crate puts its surfaces (REST/Connect, MCP, gRPC, the dashboard, `/metrics`, the command
//! line) over it, and the dashboard's server functions (`app`, `ssr`) call it directly. A service
//! takes the handles it needs (the [`Store`], the [`journal::Journal`], or the whole
//! [`services::Services`]), never a surface's state.
//!
//! A module uses only modules on floors below it (the `floors` crate's tests keep it so;
//! `cargo run -p floors -- core/src` prints the floors). From the top:
//!
//! - [`agents`]: hosted agents (turns against a model server, forks, revival).
//! - [`implicit`]: `/mcp` calls without an echo bound to their grant (`binding: "implicit"`).
//! - [`calls`]: `tools/call` in the contract's stages; [`evidence`]: evidence bundles of
//!   sessions; [`transparency`]: checkpoints, proofs and witnesses as a service.
//! - [`services`]: [`services::Services`], what a node's services run with, and their
//!   housekeeping; [`invocations`]: the durable invocation runtime (parked, staged, queued
//!   calls); [`live`]: what a node keeps live for its MCP clients (event logs, `list_changed`
//!   watchers).
//! - [`execution`]: a bound call run through its upstream; [`model`]: the model server client;
//!   [`webhooks`]: approvers hear about parked calls.
//! - [`relay`]: what an upstream asks of the calling client while a tool runs (sampling,
//!   elicitation, roots), decided, journaled and relayed.
//! - [`exposure`]: sessions and manifests; [`items`]: resources and prompts behind the policy; [`upstream`]: upstream MCP servers (connections,
//!   tool import, the SSRF guard).
//! - [`tenants`], [`tokens`], [`users`], [`sign_in`], [`policies`], [`catalog`], [`receipts`], [`replay`],
//!   [`overview`], [`approvals`]: the services behind the API and the dashboard (tokens, users,
//!   people signing in and their session records, policies, the tool catalog, the receipts
//!   browser, policy impact replay, the overview's figures, the approvals queue).
//! - [`mcp_sessions`]: the `Mcp-Session-Id`s of the 2025 eras, whose they are and how long they
//!   live; [`settings`]: a tenant's settings under `/settings/…` (how `/mcp` binds and names).
//! - [`principal`]: the caller, its scopes and environments, bearer-token authentication.
//! - [`journal`]: the signed, hash-chained journal of receipts; [`cancel`]: calls in flight
//!   their caller cancels.
//! - [`events`]: what one node tells every node; [`heartbeat`]: rows that must not run twice;
//!   [`keys`]: the signing keys; [`secrets`]: upstream credentials encrypted at rest.
//! - [`store`]: SQL per domain over SQLite or PostgreSQL, private to this crate (open to the
//!   integration tests with the `test-hooks` feature); [`test_hooks`]: where integration tests
//!   hold the core (`test-hooks` feature only).
//! - Ground: [`config`]: what the server is configured with, and its defaults; [`error`]: the
//!   services' error; [`ids`]: random identifiers and secrets; [`clock`]: the time as the
//!   records write it; [`metrics`]: what a node records for the operator; [`password`]:
//!   argon2id hashing; [`sync`]: locking shared in-memory state.

pub mod agents;
pub mod approvals;
pub mod calls;
pub mod cancel;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod error;
pub mod events;
pub mod evidence;
pub mod execution;
pub mod exposure;
pub mod heartbeat;
pub mod ids;
pub mod implicit;
pub mod invocations;
pub mod items;
pub mod journal;
pub mod keys;
pub mod live;
pub mod mcp_sessions;
pub mod metrics;
pub mod model;
pub mod overview;
pub mod password;
pub mod policies;
pub mod principal;
pub mod receipts;
pub mod relay;
pub mod replay;
pub mod secrets;
pub mod services;
pub mod settings;
pub mod sign_in;
#[cfg(feature = "test-hooks")]
pub mod store;
#[cfg(not(feature = "test-hooks"))]
pub(crate) mod store;
mod sync;
pub mod tenants;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod tokens;
pub mod transparency;
pub mod upstream;
pub mod users;
pub mod webhooks;

pub use config::Config;
/// The database handle the services take; its SQL stays inside this crate.
pub use store::Store;
