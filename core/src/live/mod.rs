//! What a node keeps live for its MCP clients, below the state that holds it and the `/mcp`
//! handler that uses it: [`streams`], the server-sent event streams and their logs for
//! resuming, and [`listing`], the watchers that tell listening streams
//! `notifications/tools/list_changed`.

pub mod listing;
pub mod streams;
