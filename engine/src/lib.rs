//! # The Aperture exposure engine
//!
//! The pure, deterministic core of Aperture: it knows nothing of HTTP, databases or async
//! runtimes, so the server and the dashboard (compiled to wasm for the live preview) run the
//! very same code and therefore reach the very same decisions.
//!
//! Modules:
//! - [`scope`]: the scope vocabulary of principals (`agent_tool_exposure:read|write|run|admin|approve`
//!   plus the free-form scopes tools may require), how scopes are validated and which scope
//!   implies which.

pub mod scope;
