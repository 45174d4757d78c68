//! Hosted agents (issue 7): Aperture runs agents itself against an OpenAI-compatible model
//! server, with every function call decided like a `tools/call`.
//!
//! - [`model`]: the model provider client (chat completions with tools).

pub mod model;
