//! What the benches that put the gateway in front of the project's fixture MCP server share:
//! the fixture served in-process, and API tokens minted straight into the store.

#[path = "../../tests/upstream_fixture/server.rs"]
#[allow(dead_code)]
mod fixture;

use std::sync::Arc;

use aperture_core::journal::Journal;
use aperture_core::store::Store;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

/// Serves the fixture MCP server over streamable HTTP on a free port of 127.0.0.1; its URL.
pub async fn fixture_upstream() -> anyhow::Result<String> {
    let service: StreamableHttpService<fixture::FixtureServer, LocalSessionManager> =
        StreamableHttpService::new(
            || Ok(fixture::FixtureServer::new()),
            Arc::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let port = serve(router, "the fixture upstream").await?;
    Ok(format!("http://127.0.0.1:{port}/mcp"))
}

/// Serves `router` on a free port of 127.0.0.1 (in a task; `what` names it if it stops); its
/// port.
pub async fn serve(router: axum::Router, what: &'static str) -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    // Nagle off, as a server tuned for small answers has it (and the node's listener,
    // crate::startup): with it on, a proxy that cannot re-arm TCP_QUICKACK (nginx) waits ~40 ms
    // for each answer's second write (the gateway's own client does not:
    // crate::upstream::http), and the plain-proxy path would measure that.
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|io| {
        let _ = io.set_nodelay(true);
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("{what} stopped: {e}");
        }
    });
    Ok(port)
}

/// A new API token of tenant `default` for `actor` with `scope`, made in `store` (as the
/// operator would); its secret.
pub async fn token(
    store: &Store,
    journal: &Journal,
    actor: &str,
    scope: &str,
) -> anyhow::Result<String> {
    let request = app::dto::CreateTokenRequest {
        actor_id: actor.into(),
        scopes: vec![scope.into()],
        name: None,
        expires_at: None,
        environments: None,
    };
    aperture_core::tokens::create_unchecked(
        store,
        journal,
        "default",
        &aperture_core::journal::Author::operator(),
        &request,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{:?}", e.into_app_error()))
    .map(|t| t.secret)
}
