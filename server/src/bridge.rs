//! `aperture bridge`: a local stdio MCP server for stock clients that cannot add `_meta`
//! (desktop assistants, IDEs) (CONTRACT §4, §10).
//!
//! The client talks MCP over stdin/stdout to the bridge; the bridge talks MCP to the gateway's
//! `/mcp` with the operator's token. `tools/list` lists through the gateway (reusing one
//! exposure session) and remembers the grant; `tools/call` adds the echo the gateway requires
//! (`session_id`, `manifest_id`, `lease_id`, `tool_version`, `expected_schema_hash`) and passes
//! the answer back as it is, receipt included. A background task lists again before the lease
//! ends and whenever the gateway's answers show the grant is stale, and tells the client
//! (`notifications/tools/list_changed`) when the tools it sees have changed.
//!
//! The bridge decides nothing: every check stays in the gateway, which sees the bridge as the
//! token's actor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    Implementation, ListToolsResult, PaginatedRequestParams, RequestMetaObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify};

/// Re-list this long before the lease ends (or at three quarters of a shorter lease).
const RELIST_MARGIN: Duration = Duration::from_secs(60);
/// Most pages of one listing the bridge follows.
const MAX_PAGES: usize = 1_000;
/// Answers of the gateway that mean "list again" rather than "no".
const STALE: [&str; 5] = [
    "lease_expired",
    "manifest_binding_mismatch",
    "manifest_drift",
    "schema_hash_mismatch",
    "tool_version_mismatch",
];

/// The gateway's `/mcp` URL: `url` itself when it names the endpoint, else `url` + `/mcp`.
pub fn endpoint(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/mcp") {
        url.to_owned()
    } else {
        format!("{url}/mcp")
    }
}

/// What the last listing granted.
#[derive(Debug, Clone)]
struct Grant {
    session_id: String,
    manifest_id: String,
    lease_id: String,
    /// Epoch ms; `None` when the gateway did not say.
    lease_expires_at: Option<i64>,
    /// Per tool: `(tool_version, schemaHash)`.
    tools: BTreeMap<String, (String, String)>,
    /// The listing as the gateway gave it.
    listing: Value,
}

impl Grant {
    fn from_listing(listing: Value) -> anyhow::Result<Self> {
        let meta = &listing["_meta"];
        let text = |v: &Value, what: &str| {
            v.as_str()
                .map(str::to_owned)
                .with_context(|| format!("the gateway's tools/list has no {what}"))
        };
        let mut tools = BTreeMap::new();
        for tool in listing["tools"].as_array().into_iter().flatten() {
            tools.insert(
                text(&tool["name"], "tool name")?,
                (
                    text(&tool["_meta"]["toolVersion"], "toolVersion")?,
                    text(&tool["_meta"]["schemaHash"], "schemaHash")?,
                ),
            );
        }
        Ok(Self {
            session_id: text(&meta["session_id"], "session_id")?,
            manifest_id: text(&meta["manifest_id"], "manifest_id")?,
            lease_id: text(&meta["lease_id"], "lease_id")?,
            lease_expires_at: meta["lease_expires_at"].as_str().and_then(|t| {
                time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
            }),
            tools,
            listing,
        })
    }

    /// When to list again.
    fn relist_in(&self, now_ms: i64) -> Duration {
        let Some(end) = self.lease_expires_at else {
            return RELIST_MARGIN;
        };
        let left = Duration::from_millis(u64::try_from(end - now_ms).unwrap_or(0));
        let margin = RELIST_MARGIN.min(left / 4);
        left.saturating_sub(margin)
    }
}

struct Inner {
    gateway: RunningService<RoleClient, ClientConfig>,
    grant: Mutex<Option<Grant>>,
    /// Wakes the refresher to list now (a stale answer).
    stale: Notify,
    /// Wakes the refresher to recompute its wait (a new grant).
    granted: Notify,
}

/// The bridge's MCP server.
#[derive(Clone)]
pub struct Bridge(Arc<Inner>);

fn now_ms() -> i64 {
    i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("gateway: {e}"), None)
}

impl Bridge {
    /// Connects to the gateway at `url` with `token`.
    pub async fn connect(url: &str, token: &str) -> anyhow::Result<Self> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(endpoint(url)).auth_header(token);
        let transport = StreamableHttpClientTransport::from_config(config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("aperture-bridge", env!("CARGO_PKG_VERSION")),
        );
        let gateway = info
            .serve(transport)
            .await
            .with_context(|| format!("connecting to {}", endpoint(url)))?;
        Ok(Self(Arc::new(Inner {
            gateway,
            grant: Mutex::new(None),
            stale: Notify::new(),
            granted: Notify::new(),
        })))
    }

    /// Lists through the gateway (in the same exposure session once there is one) and keeps
    /// the grant; returns whether the tools the client sees changed.
    async fn relist(&self) -> anyhow::Result<(Grant, bool)> {
        let mut grant = self.0.grant.lock().await;
        let mut params = PaginatedRequestParams::default();
        if let Some(g) = grant.as_ref() {
            let mut meta = RequestMetaObject::default();
            meta.insert("session_id".into(), Value::String(g.session_id.clone()));
            params.meta = Some(meta);
        }
        let listed = self.0.gateway.list_tools(Some(params)).await?;
        let mut next = listed.next_cursor.clone();
        let mut listing = serde_json::to_value(&listed)?;
        // A long listing comes in pages of one grant (the cursor grants nothing): the client
        // gets it whole.
        let mut pages = 1;
        while let Some(cursor) = next.take() {
            pages += 1;
            anyhow::ensure!(
                pages <= MAX_PAGES,
                "the gateway's listing has more than {MAX_PAGES} pages"
            );
            let page = self
                .0
                .gateway
                .list_tools(Some(
                    PaginatedRequestParams::default().with_cursor(Some(cursor)),
                ))
                .await?;
            next = page.next_cursor;
            if let Some(tools) = listing["tools"].as_array_mut() {
                for tool in page.tools {
                    tools.push(serde_json::to_value(tool)?);
                }
            }
        }
        if let Some(map) = listing.as_object_mut() {
            map.remove("nextCursor");
        }
        let fresh = Grant::from_listing(listing)?;
        let changed = grant.as_ref().is_none_or(|g| g.tools != fresh.tools);
        *grant = Some(fresh.clone());
        self.0.granted.notify_one();
        Ok((fresh, changed))
    }

    /// The current grant, listing first when there is none or its lease is about to end.
    async fn grant(&self) -> anyhow::Result<Grant> {
        if let Some(g) = self.0.grant.lock().await.clone()
            && !g.relist_in(now_ms()).is_zero()
        {
            return Ok(g);
        }
        Ok(self.relist().await?.0)
    }

    async fn call(&self, name: &str, arguments: Option<Value>) -> anyhow::Result<CallToolResult> {
        let grant = self.grant().await?;
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Some(Value::Object(args)) = arguments {
            params = params.with_arguments(args);
        }
        let mut meta = RequestMetaObject::default();
        meta.insert("session_id".into(), json!(grant.session_id));
        meta.insert("manifest_id".into(), json!(grant.manifest_id));
        meta.insert("lease_id".into(), json!(grant.lease_id));
        if let Some((version, hash)) = grant.tools.get(name) {
            meta.insert("tool_version".into(), json!(version));
            meta.insert("expected_schema_hash".into(), json!(hash));
        }
        params.meta = Some(meta);
        let result = self.0.gateway.call_tool(params).await?;
        let reason = serde_json::to_value(&result)?["_meta"]["receipt"]["reason"]
            .as_str()
            .map(str::to_owned);
        if reason.as_deref().is_some_and(|r| STALE.contains(&r)) {
            // Not retried: the client sees the answer and the new listing, and decides.
            self.0.stale.notify_one();
        }
        Ok(result)
    }

    /// Lists again before each lease ends and after stale answers; tells the client when its
    /// tools changed. Ends when the client goes away.
    async fn refresh(self, client: rmcp::Peer<RoleServer>) {
        loop {
            let wait = match self.0.grant.lock().await.as_ref() {
                Some(g) => g.relist_in(now_ms()),
                None => RELIST_MARGIN,
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.0.stale.notified() => {}
                () = self.0.granted.notified() => continue,
            }
            match self.relist().await {
                Ok((_, true)) => {
                    if client.notify_tool_list_changed().await.is_err() {
                        return;
                    }
                }
                Ok((_, false)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "re-listing through the gateway failed; retrying");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            }
        }
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "aperture-bridge",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Tools are exposed by an Aperture gateway; each call is authorized there and its \
             answer carries a signed receipt in _meta.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (grant, _) = self.relist().await.map_err(internal)?;
        let mut listing = grant.listing;
        // Every listing is a new grant: a client must not cache it.
        if let Some(map) = listing.as_object_mut() {
            map.insert("ttlMs".into(), json!(0));
        }
        serde_json::from_value(listing).map_err(internal)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.map(Value::Object);
        let result = self
            .call(request.name.as_ref(), arguments)
            .await
            .map_err(internal)?;
        Ok(result.into())
    }
}

/// `aperture bridge`: serves stdio until the client closes it.
pub async fn run(url: &str, token: &str) -> anyhow::Result<()> {
    // The HTTP client of the MCP SDK is built without a default TLS provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bridge = Bridge::connect(url, token).await?;
    let running = bridge
        .clone()
        .serve(rmcp::transport::stdio())
        .await
        .context("serving MCP on stdio")?;
    let refresher = tokio::spawn(bridge.clone().refresh(running.peer().clone()));
    let outcome = running.waiting().await;
    refresher.abort();
    outcome.context("the stdio session")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_relist_times() {
        assert_eq!(endpoint("http://h:3000"), "http://h:3000/mcp");
        assert_eq!(endpoint("http://h:3000/"), "http://h:3000/mcp");
        assert_eq!(endpoint("http://h:3000/mcp"), "http://h:3000/mcp");
        let grant = |end: Option<i64>| Grant {
            session_id: String::new(),
            manifest_id: String::new(),
            lease_id: String::new(),
            lease_expires_at: end,
            tools: BTreeMap::new(),
            listing: Value::Null,
        };
        // A 15-minute lease is renewed a minute before it ends; a short one at three quarters.
        assert_eq!(grant(Some(900_000)).relist_in(0), Duration::from_secs(840));
        assert_eq!(grant(Some(8_000)).relist_in(0), Duration::from_secs(6));
        assert_eq!(grant(Some(0)).relist_in(5_000), Duration::ZERO);
        assert_eq!(grant(None).relist_in(0), RELIST_MARGIN);
    }
}
