//! The gateway's 2026-07-28 link to an upstream, beside its 2025-11-25 session: used for the
//! calls of 2026-07-28 clients, so that an upstream that asks the client something answers the
//! call `input_required` (SEP-2322) with its own keys and `requestState`, which the gateway
//! relays ([`crate::relay::input_round`]) instead of turning the question into a request on a
//! call stream the era does not have.
//!
//! - Streamable HTTP only: a stdio process speaks the one lifecycle it was started with.
//! - Opened at the first call that needs it, with `server/discover`; an upstream that does not
//!   speak 2026-07-28 (a legacy answer, or no answer) has no such link for the life of the
//!   connection, and its calls take the session.
//! - Every request carries, in `_meta`, the calling client's capabilities (what the client
//!   declared it can answer, nothing of its own) and the level it listens at; the client's
//!   answers and the upstream's `requestState` travel only in a retry the gateway checked.
//! - The link lists the tools once after discovery and again after the upstream said its list
//!   changed, so rmcp's transport knows which arguments travel in `Mcp-Param-*` headers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{Peer, model::PaginatedRequestParams};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, broadcast, watch};
use upstream_reqwest::header::{HeaderName, HeaderValue};

use super::asks::{CallRoutes, LogLevel};
use super::{Handler, MAX_LIST_PAGES, Observer, ProgressRoutes, relaying_capabilities};
use crate::upstream::Scrubber;
use crate::upstream::http::UpstreamHttp;

/// What a call of a 2026-07-28 client carries to the upstream over the link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatelessRound {
    /// `io.modelcontextprotocol/clientCapabilities`: what the client can be asked.
    pub capabilities: Value,
    /// `io.modelcontextprotocol/logLevel`, when the client listens to log messages.
    pub log_level: Option<LogLevel>,
    /// `inputResponses`: the client's answers to the upstream's previous round, under the
    /// upstream's keys.
    pub responses: Option<Map<String, Value>>,
    /// `requestState`: the upstream's, from its previous round, as it gave it.
    pub state: Option<String>,
}

impl StatelessRound {
    /// The request's `_meta` members for the client it speaks for.
    pub(super) fn meta(&self) -> rmcp::model::RequestMetaObject {
        let mut meta = Map::new();
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            self.capabilities.clone(),
        );
        if let Some(level) = self.log_level {
            meta.insert(
                "io.modelcontextprotocol/logLevel".into(),
                Value::String(level.as_str().to_owned()),
            );
        }
        serde_json::from_value(Value::Object(meta)).unwrap_or_default()
    }
}

/// What opening the link needs (kept by the connection from its spec).
pub(super) struct Opening {
    pub(super) url: String,
    pub(super) headers: std::collections::HashMap<HeaderName, HeaderValue>,
    pub(super) allow_private_addresses: bool,
    pub(super) timeout: Duration,
    pub(super) scrubber: Scrubber,
}

/// An open 2026-07-28 link: its rmcp client, and where what the upstream says about a call goes
/// (its own routes: request ids are the link's own).
pub(super) struct Stateless {
    pub(super) peer: Peer<RoleClient>,
    running: Mutex<Option<RunningService<RoleClient, Handler>>>,
    pub(super) progress: Arc<ProgressRoutes>,
    pub(super) calls: Arc<CallRoutes>,
    /// The connection's count of tool list changes when the link last listed (`u64::MAX`:
    /// never).
    listed: AtomicU64,
}

impl Opening {
    /// Discovers the upstream over a link of its own; `None` when it does not speak
    /// 2026-07-28 (or could not be reached in time: the session serves instead).
    pub(super) async fn open(&self) -> Option<Stateless> {
        let progress = Arc::new(ProgressRoutes::default());
        let calls = Arc::new(CallRoutes::default());
        let observer = Observer {
            calls: Arc::clone(&calls),
            tagging: true,
            scrubber: self.scrubber.clone(),
        };
        // The link hears no list changes nor resource updates (2026-07-28 has no standalone
        // stream): the session does.
        let (tools_changed, _) = watch::channel(0);
        let (resources_updated, _) = broadcast::channel(1);
        let handler = Handler {
            progress: Arc::clone(&progress),
            info: ClientConfig::new(
                relaying_capabilities(),
                Implementation::new("aperture", env!("CARGO_PKG_VERSION")),
            )
            .with_protocol_version(ProtocolVersion::V_2026_07_28),
            tools_changed,
            resources_updated,
            scrubber: self.scrubber.clone(),
            calls: Arc::clone(&calls),
            tagging: true,
            unattributed: Arc::new(std::sync::OnceLock::new()),
        };
        let connecting = async {
            let client =
                UpstreamHttp::new(self.allow_private_addresses, self.timeout, &self.url).ok()?;
            let config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
                .custom_headers(self.headers.clone());
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            match handler
                .serve_with_lifecycle(observer.wrap(transport), lifecycle)
                .await
            {
                Ok(running) => Some(running),
                Err(e) => {
                    tracing::debug!(error = %self.scrubber.scrub(e.to_string()), "the upstream does not speak 2026-07-28");
                    None
                }
            }
        };
        let running = tokio::time::timeout(self.timeout, connecting)
            .await
            .ok()
            .flatten()?;
        let peer = running.peer().clone();
        peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
            .await;
        tracing::debug!("upstream 2026-07-28 link open");
        Some(Stateless {
            peer,
            running: Mutex::new(Some(running)),
            progress,
            calls,
            listed: AtomicU64::new(u64::MAX),
        })
    }
}

impl Stateless {
    /// Lists the tools over the link when it has not since the upstream's list last changed
    /// (`changes`, the connection's count), so that its transport knows each tool's
    /// `x-mcp-header` arguments. A failed listing is retried on the next call.
    pub(super) async fn know_tools(&self, changes: u64, timeout: Duration) {
        if self.listed.load(Ordering::Acquire) == changes {
            return;
        }
        let listing = async {
            let mut cursor: Option<String> = None;
            for _ in 0..MAX_LIST_PAGES {
                let params = cursor
                    .take()
                    .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
                let page = self.peer.list_tools(params).await.ok()?;
                match page.next_cursor {
                    None => return Some(()),
                    Some(next) => cursor = Some(next),
                }
            }
            None
        };
        if let Ok(Some(())) = tokio::time::timeout(timeout, listing).await {
            self.listed.store(changes, Ordering::Release);
        }
    }

    /// Ends the link.
    pub(super) async fn close(&self) {
        let running = self.running.lock().await.take();
        if let Some(running) = running {
            let _ = running.cancel().await;
        }
    }
}
