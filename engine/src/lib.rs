//! # The Aperture exposure engine
//!
//! The pure, deterministic core of Aperture: it knows nothing of HTTP, databases or async
//! runtimes, so the server and the dashboard (compiled to wasm for the live preview) run the
//! very same code and therefore reach the very same decisions.
//!
//! Modules, in the order a call meets them:
//! - [`descriptor`]: tools and their server-owned security descriptors, canonical MCP names;
//!   [`catalog`]: catalog tools with the hashes every manifest needs, computed once;
//!   [`drift`]: what kind of change an upstream made to a tool since it was accepted.
//! - [`policy`]: policies (rules → modes, redaction profiles, invocation policies) and the one
//!   precedence function; [`validate`]: write-time validation with field paths against what the
//!   runtime can enforce.
//! - [`narrow`]: the advertised (narrowed) schema, effective arguments, cached validators.
//! - [`canonical`]: RFC 8785 canonical JSON, `schemaHash`, `args_hash`.
//! - [`manifest`]: a session's exposure manifest from catalog + policy + context.
//! - [`fork`]: fork execution allowlists (`fork_tools`).
//! - [`decision`]: the checks of a `tools/call`, in contract order, and the bound invocation.
//! - [`receipt`]: receipts, disclosures, Ed25519 signatures, the hash chain, manifest documents.
//! - [`scope`]: the scope vocabulary of principals (`agent_tool_exposure:read|write|run|admin|approve`
//!   plus the free-form scopes tools may require), how scopes are validated and which scope
//!   implies which.
//! - [`redact`]: redaction of tool output for a destination.
//! - [`preview`]: a draft policy previewed over a catalog (server and dashboard alike).

pub mod canonical;
pub mod catalog;
pub mod decision;
pub mod descriptor;
pub mod drift;
pub mod evidence;
pub mod fork;
pub mod manifest;
pub mod merkle;
pub mod narrow;
pub mod note;
pub mod policy;
pub mod preview;
pub mod receipt;
pub mod redact;
pub mod scope;
pub mod validate;
