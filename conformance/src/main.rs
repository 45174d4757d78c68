//! # `aperture-conformance-upstream`: a test upstream, not part of the product
//!
//! A reference MCP server for the official conformance suite
//! (`@modelcontextprotocol/conformance`), which `scripts/conformance` runs against it, directly
//! or through the gateway. It serves every server scenario of the suite: the fixture tools,
//! resources and prompts the scenarios call, on both protocol wires at one URL — the 2025
//! stateful wire (sessions, server-to-client requests) and the 2026-07-28 stateless wire
//! (`server/discover`, input rounds with sealed `requestState`, `subscriptions/listen`) — and
//! the tasks extension. It is never deployed; nothing in Aperture depends on it.
//!
//! `aperture-conformance-upstream [--listen ADDR]` (default `127.0.0.1:0`) prints one line,
//! `listening on http://HOST:PORT/mcp`, once bound, and serves until SIGTERM or Ctrl-C.
//! `RUST_LOG` sets what it logs to stderr (default `warn`).
//!
//! ## The modules, in floors from the top (a module uses only modules on floors below it)
//! - [`http`]: rmcp's streamable HTTP service at `/mcp`, its Host checks, shutdown.
//! - [`server`]: [`server::Upstream`], the handler, dispatching every method.
//! - [`tools`] (the tasks extension's among them), [`prompts`]: the fixture tools and prompts.
//! - [`resources`]: the fixture resources; [`input`]: asking the client for input on either
//!   wire; [`state`]: what handlers share, server-wide and per session.
//! - [`sessions`]: the 2025 sessions, and the stream closed mid-call (SEP-1699);
//!   [`subscriptions`]: the open `subscriptions/listen` streams; [`request_state`]: sealing
//!   `requestState`; [`wire`]: which wire a request is on; [`fixtures`]: fixed payloads.

// The suite exercises sampling, roots and logging, which SEP-2577 deprecates and rmcp marks
// `#[deprecated]`: this server implements them on purpose.
#![allow(deprecated)]

mod fixtures;
mod http;
mod input;
mod prompts;
mod request_state;
mod resources;
mod server;
mod sessions;
mod state;
mod subscriptions;
mod tools;
mod wire;

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// A reference MCP server for the conformance suite (a test upstream, not part of Aperture).
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let bound = listener.local_addr()?;
    // The one line a script waits for; it is flushed before the first request can arrive.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{bound}{}", http::MCP_PATH)?;
    stdout.flush()?;
    drop(stdout);

    http::serve(listener).await
}
