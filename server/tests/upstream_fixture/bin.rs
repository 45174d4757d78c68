//! `aperture-fixture-upstream`: a TEST FIXTURE, not part of Aperture and not for deployment.
//!
//! A tiny MCP server over stdio that the upstream connector's integration tests
//! (`tests/upstream.rs`) start as a child process, finding it through
//! `env!("CARGO_BIN_EXE_aperture-fixture-upstream")`. Its tools are described in `server.rs`.
//! It is a `[[bin]]` of the server package (rather than an example) because only binaries get
//! a `CARGO_BIN_EXE_*` path, and it exits when its stdin closes.

mod server;

use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut call_log = None;
    while let Some(arg) = args.next() {
        if arg == "--call-log" {
            call_log = args.next().map(std::path::PathBuf::from);
        }
    }
    let running = server::FixtureServer::new()
        .with_call_log(call_log)
        .serve(rmcp::transport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}
