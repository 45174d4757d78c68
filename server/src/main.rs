use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc: under load the gateway's threads (tokio workers, sqlx's
/// SQLite workers, the journal writer) queued on glibc's arena lock (`docs/benchmarks.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let filter = EnvFilter::try_from_env("APERTURE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_sessions=warn"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `APERTURE_LOG_FORMAT=json`: one JSON object per line, for log shippers.
    match std::env::var("APERTURE_LOG_FORMAT").as_deref() {
        Ok("json") => logs.json().flatten_event(true).init(),
        Ok("text") | Ok("") | Err(_) => logs.init(),
        Ok(other) => {
            logs.init();
            tracing::warn!(
                format = other,
                "APERTURE_LOG_FORMAT is json or text; logging text"
            );
        }
    }
    match aperture::cli::run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
