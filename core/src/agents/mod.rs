//! Hosted agents (issue 7): Aperture runs agents itself against an OpenAI-compatible model
//! server, with every function call decided like a `tools/call`.
//!
//! - [`model`]: the model provider client (chat completions with tools).
//! - [`runtime`]: agents, turns and `process_function_calls`.
//! - [`recheck`]: who a turn runs as, read again before each new step.

pub use crate::model;
pub mod recheck;
pub mod runtime;

/// Why a step of a turn stopped when the store failed, as the transcript and the turn record
/// it (never more than the error's text).
fn store_failed(e: sqlx::Error) -> String {
    format!("the store failed: {e}")
}
