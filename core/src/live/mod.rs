//! What a node keeps live for its MCP clients, below the state that holds it and the `/mcp`
//! handler that uses it: [`streams`], the server-sent event streams and their logs for
//! resuming, [`listing`], the watchers that tell listening streams
//! `notifications/tools/list_changed`, [`resources`], which hands upstreams'
//! `notifications/resources/updated` to the streams of those still allowed to hear them, and
//! [`asks`], the gateway's requests to clients that await their answers.

pub mod asks;
pub mod listing;
pub mod resources;
pub mod streams;
