//! # `aperture`: the server
//!
//! Two storeys, each in floors: a module uses only modules on floors below it (the `floors`
//! crate's tests keep it so; `cargo run -p floors -- server/src` prints the floors).
//!
//! ## The surfaces (HTTP and the command line), from the top
//! - [`cli`]: the `aperture` command line; `serve` builds a [`startup::Application`].
//! - [`startup`]: wiring of the HTTP surface and start-up bootstrap.
//! - [`dashboard`]: the Leptos dashboard's `app::backend::Backend` onto the services, and its
//!   downloads; [`grpc`]: the service over gRPC; [`scrape`]: `GET /metrics` for the operator;
//!   [`witness`]: `aperture witness`, a pull witness of a tenant's journal.
//! - [`api`]: the REST mount (`/api/v2/agent-tool-exposure`), every route with its scope, and
//!   Connect; [`deadline`]: request bodies arrive within a deadline.
//! - [`mcp`]: the MCP gateway at `/mcp` (streamable HTTP).
//! - [`state`]: [`state::AppState`], shared by every handler: the services and what only the
//!   surfaces need; [`live`]: `/mcp`'s event streams and `list_changed` watchers.
//! - [`auth`]: callers over HTTP: bearer tokens, cookie sessions and sign-in, CSRF, security
//!   headers, client addresses, the device cookie.
//! - [`reply`]: how service errors reach an HTTP caller; [`proto`]: the `.proto` at run time,
//!   messages to and from the routes' JSON; [`listener`]: the TCP listener and its
//!   connections; [`bridge`]: `aperture bridge`, a stdio MCP server for stock clients.
//!
//! ## Below the surfaces: the services, from the top
//! - [`agents`]: hosted agents (turns against a model server, forks, revival).
//! - [`calls`]: `tools/call` in the contract's stages; [`evidence`]: evidence bundles of
//!   sessions; [`transparency`]: checkpoints, proofs and witnesses as a service.
//! - [`services`]: [`services::Services`], what a node's services run with;
//!   [`invocations`]: the durable invocation runtime (parked, staged, queued calls).
//! - [`execution`]: a bound call run through its upstream; [`model`]: the model server client;
//!   [`webhooks`]: approvers hear about parked calls.
//! - [`exposure`]: sessions and manifests; [`upstream`]: upstream MCP servers (connections,
//!   tool import, the SSRF guard).
//! - [`tokens`], [`users`], [`policies`], [`catalog`], [`receipts`], [`replay`]: the services
//!   behind the API and the dashboard (tokens, users, policies, the tool catalog, the receipts
//!   browser, policy impact replay).
//! - [`principal`]: the caller, its scopes and environments, bearer-token authentication.
//! - [`journal`]: the signed, hash-chained journal of receipts; [`cancel`]: calls in flight
//!   their caller cancels.
//! - [`events`]: what one node tells every node; [`heartbeat`]: rows that must not run twice;
//!   [`keys`]: the signing keys; [`secrets`]: upstream credentials encrypted at rest.
//! - [`store`]: SQL per domain over SQLite or PostgreSQL; [`test_hooks`]: where integration
//!   tests hold the server (`test-hooks` feature only).
//! - Ground: [`config`]: what the server is configured with, and its defaults; [`error`]: the
//!   services' error; [`ids`]: random identifiers and secrets; [`metrics`]: what a node
//!   records for the operator; [`password`]: argon2id hashing; [`sync`]: locking shared
//!   in-memory state.

pub mod agents;
pub mod api;
pub mod auth;
pub mod bridge;
pub mod calls;
pub mod cancel;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod dashboard;
pub mod deadline;
pub mod error;
pub mod events;
pub mod evidence;
pub mod execution;
pub mod exposure;
pub mod grpc;
pub mod heartbeat;
pub mod ids;
pub mod invocations;
pub mod journal;
pub mod keys;
pub mod listener;
pub mod live;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod password;
pub mod policies;
pub mod principal;
pub mod proto;
pub mod receipts;
pub mod replay;
pub mod reply;
pub mod scrape;
pub mod secrets;
pub mod services;
pub mod startup;
pub mod state;
pub mod store;
mod sync;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod tokens;
pub mod transparency;
pub mod upstream;
pub mod users;
pub mod webhooks;
pub mod witness;

pub use config::Config;
pub use startup::Application;
