//! # The Aperture exposure engine
//!
//! The pure, deterministic core of Aperture: it knows nothing of HTTP, databases or async
//! runtimes, so the server and the dashboard (compiled to wasm for the live preview) run the
//! very same code and therefore reach the very same decisions.
//!
//! Modules by floor, ground floor first (a module uses only modules on floors below it; the
//! `floors` crate's tests keep it so):
//! - Ground: [`canonical`]: RFC 8785 canonical JSON, `schemaHash`, `args_hash`; [`scope`]: the
//!   scope vocabulary of principals (`agent_tool_exposure:read|write|run|admin|approve` plus the
//!   free-form scopes tools may require), how scopes are validated and which scope implies
//!   which; [`fork`]: fork execution allowlists (`fork_tools`); [`merkle`]: the journal as an
//!   RFC 6962 Merkle tree, inclusion and consistency proofs; [`environment`]: the rule of
//!   environment names (also policy and tenant ids), the default environment and `*`; [`uri`]:
//!   resource URIs normalised (RFC 3986 §6) and matched against URI templates; [`headers`]: the
//!   2026-07-28 headers that mirror a request's body (`Mcp-Name`, `Mcp-Param-*`, SEP-2243).
//! - [`descriptor`]: tools and their server-owned security descriptors, canonical MCP names;
//!   [`receipt`]: receipts, disclosures, Ed25519 signatures, the hash chain, manifest documents.
//! - [`policy`]: policies (rules → modes, redaction profiles, invocation policies) and the one
//!   precedence function; [`catalog`]: catalog tools with the hashes every manifest needs,
//!   computed once; [`drift`]: what kind of change an upstream made to a tool since it was
//!   accepted; [`note`]: signed checkpoints (C2SP signed notes) and witnesses' cosignatures.
//! - [`narrow`]: the advertised (narrowed) schema, effective arguments, cached validators;
//!   [`validate`]: write-time validation with field paths against what the runtime can enforce;
//!   [`redact`]: redaction of tool output for a destination; [`evidence`]: evidence bundles and
//!   their one offline verifier.
//! - [`manifest`]: a session's exposure manifest from catalog + policy + context.
//! - [`decision`]: the checks of a `tools/call`, in contract order, and the bound invocation;
//!   [`preview`]: a draft policy previewed over a catalog (server and dashboard alike).

pub mod canonical;
pub mod catalog;
pub mod decision;
pub mod descriptor;
pub mod drift;
pub mod environment;
pub mod evidence;
pub mod fork;
pub mod headers;
pub mod manifest;
pub mod merkle;
pub mod narrow;
pub mod note;
pub mod policy;
pub mod preview;
pub mod receipt;
pub mod redact;
pub mod scope;
pub mod uri;
pub mod validate;
