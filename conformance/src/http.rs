//! The HTTP side: rmcp's streamable HTTP service at `/mcp`, served until a shutdown signal.
//!
//! One service answers both wires on the one URL: requests inside a session (or opening one
//! with `initialize`) go to [`Sessions`]; requests carrying their own protocol version are
//! served statelessly, each by a handler of its own. `GET` opens a session's event stream (or
//! resumes one), `DELETE` ends a session, after which its id gets `404`.
//!
//! DNS rebinding protection: rmcp checks every request's `Host` against the authorities this
//! server is reachable at on this machine (the loopback names, with the bound port), and
//! answers any other with `403`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use crate::server::Upstream;
use crate::sessions::Sessions;
use crate::state::Shared;

/// The path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// Serves MCP on `listener` until SIGTERM or Ctrl-C.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let bound = listener.local_addr()?;
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(allowed_hosts(bound));
    // Cancelling it ends every open event stream, which graceful shutdown would wait for.
    let streams = config.cancellation_token.clone();
    let shared = Arc::new(Shared::new());
    let service = StreamableHttpService::new(
        move || Ok(Upstream::new(shared.clone())),
        Arc::new(Sessions::default()),
        config,
    );
    let router = Router::new().route_service(MCP_PATH, service);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            streams.cancel();
        })
        .await?;
    Ok(())
}

/// The `Host` values a client on this machine reaches `bound` by.
fn allowed_hosts(bound: SocketAddr) -> Vec<String> {
    let port = bound.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    let ip = bound.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        hosts.push(bound.to_string());
    }
    hosts
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_listener_is_reached_by_the_loopback_names() {
        let hosts = allowed_hosts(SocketAddr::from(([127, 0, 0, 1], 4242)));
        assert_eq!(hosts, ["127.0.0.1:4242", "localhost:4242", "[::1]:4242"]);
    }

    #[test]
    fn a_listener_on_another_address_is_reached_by_it_too() {
        let hosts = allowed_hosts(SocketAddr::from(([192, 0, 2, 7], 80)));
        assert!(hosts.contains(&"192.0.2.7:80".to_owned()));
    }
}
