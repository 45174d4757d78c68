//! Connections to upstream MCP servers, with rmcp's client.
//!
//! Choices that differ from rmcp's defaults, and why:
//! - The handshake is `initialize` at protocol revision 2025-11-25, the newest with a handshake,
//!   which every MCP server answers (negotiating down when older).
//! - rmcp's client response cache is off: it would answer `tools/list` from memory for the
//!   server's `ttlMs` and serve a stale list when a refetch fails, and a gateway that checks
//!   drift must see what the upstream lists now.
//! - Pagination is followed here rather than with `list_all_tools`, to bound it (pages, tools,
//!   a repeated cursor): the upstream is not trusted to end it.
//! - HTTP goes through our own client ([`UpstreamHttp`]): pooled keep-alive connections that do
//!   not stall on a server's Nagle algorithm, rustls with the ring provider and the system's
//!   roots, same-origin 307/308 redirects only, and (for a guarded connector) internal
//!   addresses refused at every connection. It decodes a `tools/call`'s answer itself when
//!   the answer is exactly a `CallToolResult` for that call ([`super::answer`]): rmcp's own
//!   decoding tries every kind of message and result first, and its event-stream answers go
//!   through a task of their own.
//! - A stdio process gets a clean environment, and its stderr is discarded: it is free text
//!   the gateway cannot vouch for (an upstream may print its environment).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
    Implementation, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, RequestId, ResourceUpdatedNotificationParam, ServerResult, Tool,
};
// Sampling, roots and log messages: what 2025-era upstreams send (deprecated since).
use rmcp::ErrorData as McpError;
#[expect(deprecated, reason = "upstreams of the 2025 eras still send them")]
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ListRootsResult,
    LoggingMessageNotificationParam,
};
use rmcp::model::{GetMeta, JsonRpcMessage, ServerNotification};
use rmcp::service::PeerRequestOptions;
use rmcp::service::{
    ClientCacheConfig, ClientInitializeError, NotificationContext, RoleClient, RunningService,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, ServiceError, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, broadcast, watch};
use upstream_reqwest::header::{HeaderName, HeaderValue};

mod asks;
mod items;
mod stateless;

pub(crate) use asks::CALL_TAG;
pub use asks::{
    AskFn, AskRefusal, LogFn, LogLevel, MAX_WAIT, UnattributedFn, UpstreamAsk, UpstreamLog,
};
pub use items::Offers;
pub use stateless::StatelessRound;

use asks::{Attribution, CallRoute, CallRoutes, Clock};

use super::guard::check_url;
use super::http::UpstreamHttp;
use super::{Scrubber, UpstreamError, UpstreamSpec};

/// Environment variables a stdio upstream inherits from the gateway; everything else it gets
/// comes from its spec. The gateway's own environment holds its database URL and secrets.
const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ",
];
/// More pages than any real server needs; a server that keeps sending cursors is broken.
const MAX_LIST_PAGES: usize = 100;
/// Resource updates a slow follower may fall behind before it misses some (updates are hints:
/// the client reads the resource again).
const UPDATES_BUFFER: usize = 256;
/// More tools than a model could use; bounds what one listing may cost.
const MAX_TOOLS: usize = 10_000;

/// A tool exactly as an upstream lists it (`_meta` aside). [`super::import()`] turns it into a
/// descriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawTool {
    /// The raw tool name, as `tools/call` expects it.
    pub name: String,
    /// Human title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object).
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP annotations (`readOnlyHint`, …): the ones MCP defines, as the upstream gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl RawTool {
    fn from_listed(tool: Tool) -> Result<Self, serde_json::Error> {
        Ok(Self {
            name: tool.name.into_owned(),
            title: tool.title,
            description: tool.description.map(|d| d.into_owned()),
            input_schema: Value::Object(Arc::unwrap_or_clone(tool.input_schema)),
            output_schema: tool
                .output_schema
                .map(|s| Value::Object(Arc::unwrap_or_clone(s))),
            annotations: tool.annotations.map(serde_json::to_value).transpose()?,
        })
    }
}

/// Opens [`Connection`]s. One per gateway; cheap to copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Connector {
    allow_private_addresses: bool,
}

impl Connector {
    /// A connector; unless `allow_private_addresses` (`APERTURE_ALLOW_PRIVATE_UPSTREAMS=1`), HTTP
    /// upstreams must be public: [`check_url`] before connecting, and the same rule on every
    /// address the HTTP client resolves later.
    pub fn new(allow_private_addresses: bool) -> Self {
        Self {
            allow_private_addresses,
        }
    }

    /// Starts or reaches the upstream and completes the `initialize` handshake within
    /// `timeout`. The same `timeout` bounds [`Connection::list_tools`] later.
    #[tracing::instrument(skip_all, fields(endpoint = %spec.endpoint()))]
    pub async fn connect(
        &self,
        spec: &UpstreamSpec,
        timeout: Duration,
    ) -> Result<Connection, UpstreamError> {
        spec.validate()?;
        let scrubber = Scrubber::for_spec(spec);
        let (changed_tx, changed_rx) = watch::channel(0);
        let (updated_tx, _) = broadcast::channel(UPDATES_BUFFER);
        let progress = Arc::new(ProgressRoutes::default());
        let calls = Arc::new(CallRoutes::default());
        let unattributed = Arc::new(std::sync::OnceLock::new());
        // The HTTP client marks what arrives on a call's own stream; stdio has no streams.
        let tagging = matches!(spec, UpstreamSpec::StreamableHttp { .. });
        let observer = Observer {
            calls: Arc::clone(&calls),
            tagging,
            scrubber: scrubber.clone(),
        };
        let handler = Handler {
            progress: Arc::clone(&progress),
            info: ClientConfig::new(
                relaying_capabilities(),
                Implementation::new("aperture", env!("CARGO_PKG_VERSION")),
            )
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE),
            tools_changed: changed_tx,
            resources_updated: updated_tx.clone(),
            scrubber: scrubber.clone(),
            calls: Arc::clone(&calls),
            tagging,
            unattributed: Arc::clone(&unattributed),
        };
        let connecting = async {
            match spec {
                UpstreamSpec::Stdio { command, env } => {
                    let transport = spawn(command, env).map_err(|e| UpstreamError::Connect {
                        reason: scrubber.scrub(format_args!(
                            "cannot start `{}`: {e}",
                            command.first().map_or("", String::as_str)
                        )),
                    })?;
                    handler.serve(observer.wrap(transport)).await
                }
                UpstreamSpec::StreamableHttp { url, headers } => {
                    if !self.allow_private_addresses {
                        check_url(url, false).await?;
                    }
                    let client = UpstreamHttp::new(self.allow_private_addresses, timeout, url)?;
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(header_map(headers)?);
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    handler.serve(observer.wrap(transport)).await
                }
            }
            .map_err(|e| UpstreamError::Connect {
                reason: if e.is_authorization_required() {
                    "the upstream requires authorization (HTTP 401/403); check its credentials"
                        .to_owned()
                } else {
                    scrubber.scrub(init_error_text(&e))
                },
            })
        };
        let running = tokio::time::timeout(timeout, connecting)
            .await
            .map_err(|_| UpstreamError::Timeout { after: timeout })??;
        let opening = match spec {
            UpstreamSpec::StreamableHttp { url, headers } => Some(stateless::Opening {
                url: url.clone(),
                headers: header_map(headers)?,
                allow_private_addresses: self.allow_private_addresses,
                timeout,
                scrubber: scrubber.clone(),
            }),
            UpstreamSpec::Stdio { .. } => None,
        };

        let peer = running.peer().clone();
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let protocol_version = peer
            .peer_info()
            .map(|info| info.protocol_version.to_string())
            .unwrap_or_default();
        tracing::debug!(%protocol_version, "upstream connected");
        Ok(Connection {
            peer,
            running: Mutex::new(Some(running)),
            request_timeout: timeout,
            tools_changed: changed_rx,
            resources_updated: updated_tx,
            subscribed: std::sync::Mutex::new(HashSet::new()),
            scrubber,
            protocol_version,
            progress,
            calls,
            unattributed,
            opening,
            stateless: tokio::sync::OnceCell::new(),
        })
    }
}

/// The transport as rmcp reads it, each log message (`notifications/message`) handed to the
/// call it belongs to as it is read: rmcp handles notifications on tasks of their own, so a
/// message read just before its call's answer would otherwise reach a call that has ended.
struct InOrder<T> {
    inner: T,
    observer: Observer,
}

/// What [`InOrder`] hands log messages to.
#[derive(Clone)]
struct Observer {
    calls: Arc<CallRoutes>,
    tagging: bool,
    scrubber: Scrubber,
}

impl Observer {
    fn wrap<T>(&self, inner: T) -> InOrder<T> {
        InOrder {
            inner,
            observer: self.clone(),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for InOrder<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(n) = &message
            && let ServerNotification::LoggingMessageNotification(log) = &n.notification
        {
            // rmcp keeps a notification's `_meta` with the notification.
            let tag = asks::tag_of(n.notification.get_meta());
            self.observer.deliver_log(&log.params, tag);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

impl Observer {
    #[expect(deprecated, reason = "upstreams of the 2025 eras still send it")]
    fn deliver_log(&self, params: &LoggingMessageNotificationParam, tag: Option<RequestId>) {
        let tag = tag.or_else(|| params.meta.as_ref().and_then(|m| asks::tag_of(m)));
        // A message that belongs to no call in flight reaches nobody.
        let Attribution::Call(route) = self.calls.attribute_now(tag.as_ref(), self.tagging) else {
            return;
        };
        let Some(to) = route.log else {
            return;
        };
        let Some(level) = serde_json::to_value(params.level)
            .ok()
            .and_then(|l| l.as_str().and_then(LogLevel::parse))
        else {
            return;
        };
        let data = match &params.data {
            Value::String(text) => Value::String(self.scrubber.scrub(text)),
            other => {
                let text = other.to_string();
                let scrubbed = self.scrubber.scrub(&text);
                if scrubbed == text {
                    other.clone()
                } else {
                    Value::String(scrubbed)
                }
            }
        };
        to(UpstreamLog {
            level,
            logger: params.logger.as_ref().map(|l| self.scrubber.scrub(l)),
            data,
        });
    }
}

/// What the gateway tells upstreams it can do for them: sampling, elicitation (forms and
/// URLs) and roots, each relayed to a call's client only where the call's rule lets it
/// ([`asks`]); everything else is refused.
fn relaying_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
        "roots": {}
    }))
    .unwrap_or_default()
}

/// A live MCP session with one upstream. Calls may run concurrently (`&self`); dropping the
/// connection ends the session (and a stdio process) too, [`Connection::close`] does it
/// gracefully.
pub struct Connection {
    peer: Peer<RoleClient>,
    running: Mutex<Option<RunningService<RoleClient, Handler>>>,
    request_timeout: Duration,
    tools_changed: watch::Receiver<u64>,
    /// The URIs of the upstream's `notifications/resources/updated`, as sent.
    resources_updated: broadcast::Sender<String>,
    /// The URIs this connection subscribed to (`resources/subscribe`), as sent.
    subscribed: std::sync::Mutex<HashSet<String>>,
    scrubber: Scrubber,
    protocol_version: String,
    /// Where the upstream's `notifications/progress` go, by the token a call sent.
    progress: Arc<ProgressRoutes>,
    /// The calls in flight, where the upstream's requests for the client go.
    calls: Arc<CallRoutes>,
    /// Told of requests that belong to no call.
    unattributed: Arc<std::sync::OnceLock<UnattributedFn>>,
    /// What opening the 2026-07-28 link needs (streamable HTTP only).
    opening: Option<stateless::Opening>,
    /// The 2026-07-28 link, opened at the first call that needs it; `None` inside: the
    /// upstream does not speak that revision.
    stateless: tokio::sync::OnceCell<Option<stateless::Stateless>>,
}

/// The upstream's progress on one call: `notifications/progress` with the token the gateway
/// sent, its message scrubbed of the upstream's secrets.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Progress so far (increases).
    pub progress: f64,
    /// The total, when the upstream knows it.
    pub total: Option<f64>,
    /// What the upstream says it is doing.
    pub message: Option<String>,
}

/// Receives a call's [`Progress`]; called on rmcp's task, so it must not block.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Calls in flight that asked for progress, by the progress token rmcp sent with the request
/// (rmcp gives every request one of its own; the caller's never reaches the upstream).
/// Progress that arrives before its call is registered (the upstream answered fast) waits in
/// `early`, a few at most and briefly.
#[derive(Default)]
struct ProgressRoutes {
    inner: std::sync::Mutex<Routes>,
}

#[derive(Default)]
struct Routes {
    routes: HashMap<ProgressToken, ProgressFn>,
    early: std::collections::VecDeque<(std::time::Instant, ProgressToken, Progress)>,
    /// Calls sent whose route is not registered yet: only then is unclaimed progress kept
    /// (rmcp sends a token with every request, so upstreams report progress nobody asked for).
    sending: usize,
}

impl ProgressRoutes {
    /// Notifications kept for a call not registered yet.
    const EARLY: usize = 64;
    /// How long they are kept.
    const EARLY_FOR: Duration = Duration::from_secs(5);

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A call with progress is about to be sent: unclaimed progress is kept until the guard
    /// is dropped (after [`ProgressRoutes::register`], or when the send failed or was dropped).
    fn sending(self: &Arc<Self>) -> Sending {
        self.lock().sending += 1;
        Sending(Arc::clone(self))
    }

    fn sent(&self) {
        let mut inner = self.lock();
        inner.sending = inner.sending.saturating_sub(1);
        if inner.sending == 0 {
            inner.early.clear();
        }
    }

    fn register(self: &Arc<Self>, token: ProgressToken, to: ProgressFn) -> ProgressRoute {
        let early: Vec<Progress> = {
            let mut inner = self.lock();
            inner.routes.insert(token.clone(), Arc::clone(&to));
            let (mine, others) = std::mem::take(&mut inner.early)
                .into_iter()
                .partition(|(_, t, _)| *t == token);
            inner.early = others;
            mine.into_iter().map(|(_, _, p)| p).collect()
        };
        for progress in early {
            to(progress);
        }
        ProgressRoute {
            routes: Arc::clone(self),
            token,
        }
    }

    fn deliver(&self, token: ProgressToken, progress: Progress) {
        let to = {
            let mut inner = self.lock();
            match inner.routes.get(&token) {
                // Called outside the lock.
                Some(to) => Arc::clone(to),
                None if inner.sending == 0 => return,
                None => {
                    inner
                        .early
                        .retain(|(at, _, _)| at.elapsed() < Self::EARLY_FOR);
                    if inner.early.len() < Self::EARLY {
                        inner
                            .early
                            .push_back((std::time::Instant::now(), token, progress));
                    }
                    return;
                }
            }
        };
        to(progress);
    }
}

/// A call with progress on its way out (see [`ProgressRoutes::sending`]).
struct Sending(Arc<ProgressRoutes>);

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.sent();
    }
}

/// A registered progress token; unregistered when the call ends (dropped).
struct ProgressRoute {
    routes: Arc<ProgressRoutes>,
    token: ProgressToken,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock().routes.remove(&self.token);
    }
}

/// The session or the 2026-07-28 link a call goes over, and where what the upstream says about
/// the call goes.
struct Link<'a> {
    peer: &'a Peer<RoleClient>,
    progress: &'a Arc<ProgressRoutes>,
    calls: &'a Arc<CallRoutes>,
    /// The 2026-07-28 link: an `input_required` answer is a round for the client.
    stateless: bool,
}

impl Link<'_> {
    /// Sends `tools/call`: registered as in flight (where the upstream's requests for the
    /// client go) and, with `progress`, its progress token routed there; the upstream is told
    /// to cancel when the future is dropped before the answer.
    async fn send_call(
        &self,
        params: CallToolRequestParams,
        options: PeerRequestOptions,
        hooks: CallHooks,
        clock: Arc<Clock>,
    ) -> Result<CallToolResponse, ServiceError> {
        let CallHooks {
            progress, ask, log, ..
        } = hooks;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let progress_sending = progress.is_some().then(|| self.progress.sending());
        let call_sending = self.calls.sending();
        let handle = self.peer.send_cancellable_request(request, options).await?;
        let _progress_route =
            progress.map(|to| self.progress.register(handle.progress_token.clone(), to));
        let _call_route = self
            .calls
            .register(handle.id.clone(), CallRoute { ask, log, clock });
        drop(progress_sending);
        drop(call_sending);
        let mut abandoned = Abandoned {
            peer: self.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let result = handle.await_response().await;
        abandoned.id = None;
        match result? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            // A result with nothing in it (rmcp reads `{}` so) is a result without content.
            ServerResult::EmptyResult(_) => Ok(CallToolResponse::Complete(Default::default())),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }
}

/// Tells the upstream to cancel a request whose answer nobody waits for any more (the call
/// future was dropped: deadline, caller's cancellation), as rmcp does for its own calls.
struct Abandoned {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            tokio::spawn(async move {
                let cancelled = CancelledNotificationParam::new(
                    Some(id),
                    Some("request abandoned by the caller".to_owned()),
                );
                if let Err(e) = peer.notify_cancelled(cancelled).await {
                    tracing::debug!(error = %e, "telling the upstream a call was abandoned");
                }
            });
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("protocol_version", &self.protocol_version)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The protocol revision the upstream agreed to (`2025-11-25`, or older).
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// Counts the upstream's `notifications/tools/list_changed`: a registry re-lists (and checks
    /// drift) when it moves.
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.tools_changed.clone()
    }

    /// Whether the session is over (process exited, connection closed): reconnect.
    pub fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    /// Every tool the upstream lists, following `nextCursor` to the last page, within the
    /// connection's timeout.
    pub async fn list_tools(&self) -> Result<Vec<RawTool>, UpstreamError> {
        tokio::time::timeout(self.request_timeout, self.list_all_pages())
            .await
            .map_err(|_| UpstreamError::Timeout {
                after: self.request_timeout,
            })?
    }

    async fn list_all_pages(&self) -> Result<Vec<RawTool>, UpstreamError> {
        let protocol = |reason: String| UpstreamError::Protocol { reason };
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = HashSet::new();
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let page = self
                .peer
                .list_tools(params)
                .await
                .map_err(|e| self.service_error(e, "tools/list"))?;
            for tool in page.tools {
                tools.push(
                    RawTool::from_listed(tool)
                        .map_err(|e| protocol(format!("a listed tool does not serialize: {e}")))?,
                );
            }
            if tools.len() > MAX_TOOLS {
                return Err(protocol(format!(
                    "the upstream lists over {MAX_TOOLS} tools"
                )));
            }
            match page.next_cursor {
                None => return Ok(tools),
                Some(next) if !seen_cursors.insert(next.clone()) => {
                    return Err(protocol("tools/list repeated a cursor".into()));
                }
                Some(next) => cursor = Some(next),
            }
        }
        Err(protocol(format!(
            "tools/list did not end within {MAX_LIST_PAGES} pages"
        )))
    }

    /// Calls the tool the upstream lists as `raw_name` and returns its `CallToolResult` as JSON
    /// (`content`, `structuredContent`, `isError`, `_meta`). A result with `isError: true` is
    /// a result, not an error. When `deadline` passes first the call fails with
    /// [`UpstreamError::Timeout`] and the upstream is sent `notifications/cancelled` for it.
    /// With `progress`, the upstream's `notifications/progress` for this call go there until
    /// it ends. The upstream's requests for the client during the call are refused.
    pub async fn call_tool(
        &self,
        raw_name: &str,
        arguments: Map<String, Value>,
        deadline: Duration,
        progress: Option<ProgressFn>,
    ) -> Result<Value, UpstreamError> {
        let hooks = CallHooks {
            progress,
            ..CallHooks::default()
        };
        self.call_tool_with(raw_name, arguments, deadline, hooks)
            .await
    }

    /// [`Connection::call_tool`] with what the upstream sends about the call while it runs
    /// going to `hooks`: its progress, its requests for the client (refused without
    /// [`CallHooks::ask`]; time spent waiting for their answers does not count toward
    /// `deadline`, up to [`MAX_WAIT`]) and its log messages (dropped without
    /// [`CallHooks::log`]).
    #[tracing::instrument(skip(self, arguments, hooks), fields(tool = raw_name))]
    pub async fn call_tool_with(
        &self,
        raw_name: &str,
        arguments: Map<String, Value>,
        deadline: Duration,
        mut hooks: CallHooks,
    ) -> Result<Value, UpstreamError> {
        let mut params = CallToolRequestParams::new(raw_name.to_owned()).with_arguments(arguments);
        // A 2026-07-28 client's call goes over the 2026-07-28 link when the upstream has one.
        let round = hooks.round.take();
        let link = match &round {
            Some(_) => self.stateless().await,
            None => None,
        };
        let mut options = PeerRequestOptions::no_options();
        let route = match (link, round) {
            (Some(link), Some(round)) => {
                let changes = *self.tools_changed.borrow();
                link.know_tools(changes, self.request_timeout).await;
                options = options.with_meta(round.meta());
                params.input_responses = round.responses.map(|r| r.into_iter().collect());
                params.request_state = round.state;
                Link {
                    peer: &link.peer,
                    progress: &link.progress,
                    calls: &link.calls,
                    stateless: true,
                }
            }
            _ => Link {
                peer: &self.peer,
                progress: &self.progress,
                calls: &self.calls,
                stateless: false,
            },
        };
        let clock = Clock::start();
        // Dropping the request future on timeout is what sends `notifications/cancelled`.
        let call = route.send_call(params, options, hooks, Arc::clone(&clock));
        tokio::pin!(call);
        let response = loop {
            let counted = clock.counted();
            if counted >= deadline {
                return Err(UpstreamError::Timeout { after: deadline });
            }
            tokio::select! {
                response = &mut call => break response,
                () = tokio::time::sleep(deadline - counted) => {}
            }
        };
        let protocol = |reason: &str| UpstreamError::Protocol {
            reason: reason.to_owned(),
        };
        match response {
            Ok(CallToolResponse::Complete(result)) => serde_json::to_value(result)
                .map_err(|e| protocol(&format!("the result does not serialize: {e}"))),
            // Over the 2026-07-28 link: a round for the client (`resultType:
            // "input_required"`), which the caller relays ([`crate::relay::input_round`]).
            Ok(CallToolResponse::InputRequired(result)) if route.stateless => {
                serde_json::to_value(result)
                    .map_err(|e| protocol(&format!("the result does not serialize: {e}")))
            }
            Ok(CallToolResponse::InputRequired(_)) => Err(protocol(
                "the upstream answered with an input_required result outside an input round",
            )),
            Ok(CallToolResponse::Task(_)) => Err(protocol(
                "the upstream answered with a task, which Aperture does not poll",
            )),
            Ok(_) => Err(protocol(
                "the upstream answered tools/call with an unknown result",
            )),
            Err(ServiceError::McpError(error)) => Err(UpstreamError::Tool {
                code: error.code.0,
                message: self.scrubber.scrub(&error.message),
            }),
            Err(e) => Err(self.service_error(e, "tools/call")),
        }
    }

    /// The 2026-07-28 link, opened at the first call that needs it; `None` when the upstream
    /// does not speak that revision (or is reached over stdio).
    async fn stateless(&self) -> Option<&stateless::Stateless> {
        let opening = self.opening.as_ref()?;
        self.stateless.get_or_init(|| opening.open()).await.as_ref()
    }

    /// Where requests that belong to no call are reported (once per connection; later calls
    /// are ignored).
    pub fn on_unattributed(&self, to: UnattributedFn) {
        let _ = self.unattributed.set(to);
    }

    /// Ends the session: a stdio process gets its stdin closed, then `SIGTERM`, then `SIGKILL`
    /// (rmcp's shutdown sequence, a few seconds at most); an HTTP session is ended. Later calls
    /// fail with [`UpstreamError::Transport`]. Closing twice is harmless.
    pub async fn close(&self) {
        if let Some(Some(link)) = self.stateless.get() {
            link.close().await;
        }
        let running = self.running.lock().await.take();
        if let Some(running) = running
            && let Err(e) = running.cancel().await
        {
            tracing::warn!(error = %e, "the upstream session did not shut down cleanly");
        }
    }

    fn service_error(&self, error: ServiceError, method: &str) -> UpstreamError {
        match error {
            ServiceError::Timeout { timeout } => UpstreamError::Timeout { after: timeout },
            ServiceError::McpError(error) => UpstreamError::Protocol {
                reason: self.scrubber.scrub(format_args!(
                    "{method} failed with JSON-RPC error {}: {}",
                    error.code.0, error.message
                )),
            },
            ServiceError::TransportSend(_)
            | ServiceError::TransportClosed
            | ServiceError::Cancelled { .. } => UpstreamError::Transport {
                reason: if error.is_authorization_required() {
                    "the upstream requires authorization (HTTP 401/403); check its credentials"
                        .to_owned()
                } else if let ServiceError::TransportSend(e) = &error {
                    self.scrubber.scrub(format_args!("{method}: {}", e.error))
                } else {
                    self.scrubber.scrub(format_args!("{method}: {error}"))
                },
            },
            other => UpstreamError::Protocol {
                reason: self.scrubber.scrub(format_args!("{method}: {other}")),
            },
        }
    }
}

/// rmcp's texts name the transport by its Rust type; the error underneath is what matters.
fn init_error_text(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", error.error)
        }
        other => other.to_string(),
    }
}

/// Rejects a result whose compact JSON serialization exceeds `max_result_bytes` (`None`: no
/// limit), before any of it reaches the journal or the client. Returns the size.
pub fn check_result_size(
    result: &Value,
    max_result_bytes: Option<usize>,
) -> Result<usize, UpstreamError> {
    let mut counter = ByteCounter(0);
    // Writing into the counter cannot fail, and no copy of the result is made.
    if serde_json::to_writer(&mut counter, result).is_err() {
        return Err(UpstreamError::Protocol {
            reason: "the result does not serialize".into(),
        });
    }
    let bytes = counter.0;
    match max_result_bytes {
        Some(limit) if bytes > limit => Err(UpstreamError::ResultTooLarge { bytes, limit }),
        _ => Ok(bytes),
    }
}

struct ByteCounter(usize);

impl Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What reaches the caller of one call while it runs ([`Connection::call_tool_with`]).
#[derive(Default, Clone)]
pub struct CallHooks {
    /// Where the upstream's `notifications/progress` go.
    pub progress: Option<ProgressFn>,
    /// What answers the upstream's requests for the client.
    pub ask: Option<AskFn>,
    /// Where the upstream's `notifications/message` go.
    pub log: Option<LogFn>,
    /// A 2026-07-28 client's call: over the 2026-07-28 link when the upstream has one (an
    /// `input_required` answer is then the call's result), else over the session.
    pub round: Option<StatelessRound>,
}

/// Our side of the session: who we are, a counter of tool list changes, where progress goes,
/// and which call the upstream's requests for the client belong to.
struct Handler {
    info: ClientConfig,
    tools_changed: watch::Sender<u64>,
    resources_updated: broadcast::Sender<String>,
    progress: Arc<ProgressRoutes>,
    scrubber: Scrubber,
    calls: Arc<CallRoutes>,
    tagging: bool,
    unattributed: Arc<std::sync::OnceLock<UnattributedFn>>,
}

impl Handler {
    /// Hands `ask` to the call it belongs to and returns the client's answer as `T`; refused
    /// with a JSON-RPC error when it belongs to no call, when the call cannot ask, or when the
    /// answer is not a `T`.
    async fn relay<T: serde::de::DeserializeOwned>(
        &self,
        ask: UpstreamAsk,
        context: &RequestContext<RoleClient>,
    ) -> Result<T, McpError> {
        let method = ask.method;
        let tag = asks::tag_of(&context.meta);
        let route = match self.calls.attribute(tag, self.tagging).await {
            Attribution::Call(route) => route,
            Attribution::Unattributable => {
                if let Some(to) = self.unattributed.get() {
                    to(method);
                }
                return Err(McpError::invalid_request(
                    format!(
                        "{method} is answered only during the tools/call it serves, on that call's own stream"
                    ),
                    None,
                ));
            }
        };
        let Some(to) = route.ask else {
            return Err(McpError::invalid_request(
                format!("{method}: this call has no client that can be asked"),
                None,
            ));
        };
        let answer = {
            let _waiting = route.clock.waiting();
            to(ask).await
        };
        let answer =
            answer.map_err(|r| McpError::new(rmcp::model::ErrorCode(r.code), r.message, None))?;
        serde_json::from_value(answer).map_err(|e| {
            McpError::internal_error(
                format!("the client's answer to {method} is not one: {e}"),
                None,
            )
        })
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Nobody listening (no subscription on this node) is fine.
        let _ = self.resources_updated.send(params.uri);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // A number that is not one (NaN, infinite) is not progress.
        if !params.progress.is_finite() || params.total.is_some_and(|t| !t.is_finite()) {
            return;
        }
        let progress = Progress {
            progress: params.progress,
            total: params.total,
            message: params.message.map(|m| self.scrubber.scrub(&m)),
        };
        self.progress.deliver(params.progress_token, progress);
    }

    #[expect(deprecated, reason = "upstreams of the 2025 eras still send it")]
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let params = to_params(&params)?;
        let ask = UpstreamAsk {
            kind: engine::policy::ClientRequest::Sampling,
            method: "sampling/createMessage",
            params,
        };
        self.relay(ask, &context).await
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let kind = match &request {
            ElicitRequestParams::UrlElicitationParams { .. } => {
                engine::policy::ClientRequest::ElicitationUrl
            }
            _ => engine::policy::ClientRequest::Elicitation,
        };
        let ask = UpstreamAsk {
            kind,
            method: "elicitation/create",
            params: to_params(&request)?,
        };
        self.relay(ask, &context).await
    }

    #[expect(deprecated, reason = "upstreams of the 2025 eras still send it")]
    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        let ask = UpstreamAsk {
            kind: engine::policy::ClientRequest::Roots,
            method: "roots/list",
            params: Value::Object(Map::new()),
        };
        self.relay(ask, &context).await
    }
}

/// A request's params as JSON.
fn to_params<T: Serialize>(params: &T) -> Result<Value, McpError> {
    serde_json::to_value(params)
        .map_err(|e| McpError::internal_error(format!("the request does not serialize: {e}"), None))
}

fn spawn(command: &[String], env: &BTreeMap<String, String>) -> std::io::Result<TokioChildProcess> {
    let Some((program, args)) = command.split_first() else {
        return Err(std::io::Error::other("the command is empty"));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().kill_on_drop(true);
    for key in INHERITED_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    cmd.envs(env);
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()?;
    Ok(transport)
}

fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<HashMap<HeaderName, HeaderValue>, UpstreamError> {
    headers
        .iter()
        .map(|(name, value)| {
            let invalid = || UpstreamError::InvalidSpec {
                reason: format!("the header `{name}` is not valid"),
            };
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| invalid())?;
            // Keeps the value out of `Debug` output (and HTTP/2 header compression).
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// rustls with the ring provider, verifying against the system's roots. A host without CA
/// certificates can still reach plain-HTTP upstreams (no handshake happens).
pub fn tls_config(https: bool) -> Result<rustls::ClientConfig, UpstreamError> {
    let tls_error = |e: rustls::Error| UpstreamError::Connect {
        reason: format!("TLS setup failed: {e}"),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    match rustls_platform_verifier::Verifier::new(provider) {
        // `dangerous` is only the door rustls puts custom verifiers behind; this one is the
        // platform's full verification.
        Ok(verifier) => Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth()),
        Err(_) if !https => Ok(builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()),
        Err(e) => Err(tls_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn result_size_is_the_compact_serialization() {
        let result = json!({"content": [{"type": "text", "text": "hello"}], "isError": false});
        let exact = serde_json::to_vec(&result).unwrap().len();
        assert_eq!(check_result_size(&result, None).unwrap(), exact);
        assert_eq!(check_result_size(&result, Some(exact)).unwrap(), exact);
        assert_eq!(
            check_result_size(&result, Some(exact - 1)),
            Err(UpstreamError::ResultTooLarge {
                bytes: exact,
                limit: exact - 1
            })
        );
    }

    #[test]
    fn a_connection_can_be_shared_between_tasks() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<Connection>();
        shareable::<Connector>();
    }

    #[test]
    fn the_http_client_builds_with_our_tls() {
        for url in ["https://mcp.example.com/mcp", "http://mcp.example.com/mcp"] {
            for allow_private in [false, true] {
                UpstreamHttp::new(allow_private, Duration::from_secs(1), url).unwrap();
            }
        }
    }

    #[test]
    fn listed_tools_keep_their_raw_shape() {
        let tool: Tool = serde_json::from_value(json!({
            "name": "read file",
            "title": "Read",
            "description": "Reads",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
            "_meta": {"x": 1}
        }))
        .unwrap();
        let raw = RawTool::from_listed(tool).unwrap();
        assert_eq!(
            serde_json::to_value(&raw).unwrap(),
            json!({
                "name": "read file",
                "title": "Read",
                "description": "Reads",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
                "output_schema": {"type": "object"},
                "annotations": {"readOnlyHint": true}
            })
        );
    }
}
