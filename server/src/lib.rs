//! # `aperture`: the server
//!
//! The surfaces over the core, in floors: a module uses only modules on floors below it (the
//! `floors` crate's tests keep it so; `cargo run -p floors -- server/src` prints the floors).
//!
//! ## The surfaces (HTTP and the command line), from the top
//! - [`cli`]: the `aperture` command line; `serve` builds a [`startup::Application`].
//! - [`startup`]: wiring of the HTTP surface and start-up bootstrap.
//! - [`dashboard`]: the routes beside the Leptos dashboard (its page guard, its server
//!   functions' statuses, its downloads); [`grpc`]: the service over gRPC; [`scrape`]:
//!   `GET /metrics` for the operator; [`witness`]: `aperture witness`, a pull witness of a
//!   tenant's journal.
//! - [`api`]: the REST mount (`/api/v2/agent-tool-exposure`), every route with its scope, and
//!   Connect; [`deadline`]: request bodies arrive within a deadline.
//! - [`mcp`]: the MCP gateway at `/mcp` (streamable HTTP).
//! - [`state`]: [`state::AppState`], shared by every handler: the services and what only the
//!   surfaces need (`/mcp`'s event streams and `list_changed` watchers).
//! - [`auth`]: callers over HTTP: bearer tokens, cookie sessions, CSRF, security headers,
//!   client addresses.
//! - [`reply`]: how service errors reach an HTTP caller; [`proto`]: the `.proto` at run time,
//!   messages to and from the routes' JSON; [`listener`]: the TCP listener and its
//!   connections; [`bridge`]: `aperture bridge`, a stdio MCP server for stock clients.
//!
//! Below the surfaces lies the core (`aperture-core`): the store, the journal, the call
//! runtime, the services and hosted agents. The surfaces take it as an
//! [`aperture_core::services::Services`] handle inside [`state::AppState`], and never reach its
//! SQL; the dashboard's server functions (`app`) call it directly.

pub mod api;
pub mod auth;
pub mod bridge;
pub mod cli;
pub mod dashboard;
pub mod deadline;
pub mod grpc;
pub mod listener;
pub mod mcp;
pub mod proto;
pub mod reply;
pub mod scrape;
pub mod startup;
pub mod state;
pub mod witness;

pub use aperture_core::Config;
pub use startup::Application;
