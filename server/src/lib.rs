//! # `aperture`: the server
//!
//! A tour, from the outside in:
//! - [`cli`]: the `aperture` command line; `serve` builds an [`startup::Application`].
//! - [`startup`]: wiring of the HTTP surface (REST API, dashboard) and start-up bootstrap;
//!   [`listener`]: the TCP listener and its connections (a request head has a deadline), with
//!   the HTTP parser's bare errors answered as JSON; [`deadline`]: so has a request body.
//! - [`config`]: what the server is configured with.
//! - [`state`]: [`state::AppState`], shared by every handler.
//! - [`api`]: the REST mount (`/api/v2/agent-tool-exposure`), every route with its scope.
//! - [`dashboard`]: the Leptos dashboard's [`app::backend::Backend`], onto the same services.
//! - [`auth`]: principals, bearer tokens, passwords, cookie sessions, CSRF, security headers,
//!   client addresses.
//! - [`tokens`], [`users`], [`policies`], [`catalog`], [`exposure`]: services behind both the
//!   API and the dashboard (tokens, users, policies, the tool catalog, sessions and manifests).
//! - [`journal`]: the signed, hash-chained journal of receipts; [`keys`]: the signing keys.
//! - [`store`]: SQL per domain over SQLite or PostgreSQL.
//! - [`error`]: how service errors reach callers (and what is only logged).
//! - [`ids`]: random identifiers and secrets; [`secrets`]: upstream credentials encrypted at
//!   rest.
//! - [`upstream`]: upstream MCP servers: connections (rmcp), tool import, the SSRF guard.

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
pub mod mcp;
pub mod metrics;
pub mod policies;
pub mod receipts;
pub mod replay;
pub mod secrets;
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
