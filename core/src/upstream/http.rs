//! The HTTP client of streamable-HTTP upstreams: rmcp's [`StreamableHttpClient`] over hyper,
//! with a connector of our own.
//!
//! Why not rmcp's reqwest client: the gateway calls the same upstream thousands of times a
//! second, so connections must be reused, and a reused connection to a server that leaves
//! Nagle's algorithm on (`axum::serve` does, so rmcp's own server does) stalls each response
//! ~40 ms: the server holds back the event after the headers until they are ACKed, and the
//! client delays that ACK. Our connector sets `TCP_NODELAY` on its side and re-arms
//! `TCP_QUICKACK` after every read ([`QuickAck`]), so ACKs leave at once and pooled
//! connections are as fast as fresh ones without a handshake per call (docs/benchmarks.md).
//!
//! What else the connector decides:
//! - Only `http` and `https`; TLS is rustls with the ring provider and the system's roots
//!   ([`super::tls_config`]), HTTP/1.1.
//! - For a guarded connector every connection resolves its host itself and refuses it when any
//!   address is internal ([`super::guard::resolve`]), so DNS rebinding after registration is
//!   still caught. No proxy is taken from the environment: the guard must see the address the
//!   gateway really connects to.
//! - Redirects: 307 and 308 (which keep the method and body) to the same origin only; another
//!   origin would receive the credentials and the session id, and a 301/302/303 would turn the
//!   POST into a GET and lose the message. Any other redirect is an unexpected response.
//!
//! The status handling follows rmcp's own clients (authorization challenges, 202/204,
//! expired sessions, rate limits and server errors with `Retry-After`, JSON-RPC errors in
//! non-success bodies) and enforces every [`StreamableHttpResponseLimits`] before parsing. One
//! difference: rmcp recognizes only its own (crate-private) error for an SSE event over the
//! limit as final, so after ours it may resume the stream (when the server numbers its events)
//! within its retry policy, each attempt bounded by the same limit.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use futures_util::stream::{BoxStream, StreamExt};
use http::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION, RETRY_AFTER, USER_AGENT, WWW_AUTHENTICATE,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper::body::{Body as _, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use upstream_reqwest::Url;

use super::answer::{FirstEvent, call_answer, expected_call, first_answer};
use super::connector::tls_config;
use super::guard::resolve;
use super::{CALL_TAG, UpstreamError};

/// Same-origin redirects followed for one request.
const MAX_REDIRECTS: usize = 5;
/// An idle pooled connection is not used again after this long, and closed. Shorter than the
/// keep-alive timeouts servers commonly close idle connections at (Node.js: 5 s), so that a
/// call is not sent on a connection the server is closing at that moment (a POST that hyper
/// cannot safely resend). Under load a connection is reused long before.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// rmcp keeps a `Retry-After` value only up to this length.
const MAX_RETRY_AFTER_BYTES: usize = 128;
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";
const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// Headers the transport sets itself; a spec's custom headers may not. (rmcp injects
/// `MCP-Protocol-Version` through the custom headers after the handshake, so that one passes.)
const RESERVED: [&str; 3] = ["accept", "mcp-session-id", "last-event-id"];
/// Used in place of the SSE limit when a caller gives none.
const DEFAULT_MAX_SSE_EVENT_SIZE: usize = 16 * 1024 * 1024;

type HttpResult<T> = Result<T, StreamableHttpError<HttpError>>;

/// A transport failure (connecting, TLS, the HTTP exchange), with its whole cause chain.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

impl HttpError {
    fn new(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        Self(text)
    }

    fn msg(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

fn client_error(error: impl Into<HttpError>) -> StreamableHttpError<HttpError> {
    StreamableHttpError::Client(error.into())
}

impl From<hyper_util::client::legacy::Error> for HttpError {
    fn from(error: hyper_util::client::legacy::Error) -> Self {
        Self::new(&error)
    }
}

impl From<hyper::Error> for HttpError {
    fn from(error: hyper::Error) -> Self {
        Self::new(&error)
    }
}

/// The HTTP client of one upstream connection: a pool of keep-alive connections. Cheap to
/// clone (rmcp clones it per request).
#[derive(Clone)]
pub struct UpstreamHttp {
    client: Client<Connect, Full<Bytes>>,
}

impl std::fmt::Debug for UpstreamHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHttp").finish_non_exhaustive()
    }
}

impl UpstreamHttp {
    /// A client whose connections are set up within `connect_timeout` (resolution, TCP and
    /// TLS each); unless `allow_private_addresses`, only to public addresses.
    pub fn new(
        allow_private_addresses: bool,
        connect_timeout: Duration,
        url: &str,
    ) -> Result<Self, UpstreamError> {
        let mut tls = tls_config(url.starts_with("https:"))?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connect = Connect {
            tls: TlsConnector::from(Arc::new(tls)),
            public_only: !allow_private_addresses,
            timeout: connect_timeout,
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connect);
        Ok(Self { client })
    }

    /// Sends the request, following same-origin 307/308 redirects.
    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> HttpResult<Response<Incoming>> {
        let not_a_uri = |url: &str, e: &dyn std::fmt::Display| {
            client_error(HttpError::msg(format!("`{url}`: {e}")))
        };
        let mut current = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let uri: Uri = current.parse().map_err(|e| not_a_uri(&current, &e))?;
            let mut request = Request::new(Full::new(body.clone()));
            *request.method_mut() = method.clone();
            *request.uri_mut() = uri;
            *request.headers_mut() = headers.clone();
            let response = self.client.request(request).await.map_err(client_error)?;
            if !matches!(
                response.status(),
                StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
            ) {
                return Ok(response);
            }
            // Only a redirect needs the URL parsed beyond the request's own URI.
            let from = Url::parse(&current).map_err(|e| not_a_uri(&current, &e))?;
            let next = response
                .headers()
                .get(LOCATION)
                .and_then(|location| location.to_str().ok())
                .and_then(|location| from.join(location).ok());
            match next {
                Some(next) if next.origin() == from.origin() => current = next.into(),
                _ => return Ok(response),
            }
        }
        Err(client_error(HttpError::msg(format!(
            "more than {MAX_REDIRECTS} redirects"
        ))))
    }
}

/// The headers every request carries, then the spec's own (which may not replace ours).
fn request_headers(
    auth_token: Option<String>,
    session_id: Option<&str>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> HttpResult<HeaderMap> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("text/event-stream, application/json"),
    );
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("aperture/", env!("CARGO_PKG_VERSION"))),
    );
    if let Some(token) = auth_token {
        let mut value = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
            client_error(HttpError::msg(
                "the bearer token is not a valid header value",
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    if let Some(session_id) = session_id {
        headers.insert(SESSION_ID, header_value(session_id, "session id")?);
    }
    for (name, value) in custom_headers {
        if RESERVED.contains(&name.as_str()) {
            return Err(StreamableHttpError::ReservedHeaderConflict(
                name.as_str().to_owned(),
            ));
        }
        headers.append(name, value);
    }
    Ok(headers)
}

fn header_value(value: &str, what: &str) -> HttpResult<HeaderValue> {
    HeaderValue::from_str(value)
        .map_err(|_| client_error(HttpError::msg(format!("the {what} is not a valid header"))))
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// Whether a `Content-Type` value names `expected` (parameters and case aside).
fn media_type_is(content_type: &str, expected: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(expected))
}

/// A 401 or 403 with a challenge: the upstream wants (other) credentials.
fn authorization_error(response: &Response<Incoming>) -> Option<StreamableHttpError<HttpError>> {
    let status = response.status();
    if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
        return None;
    }
    let header = response.headers().get(WWW_AUTHENTICATE)?;
    let Ok(header) = header.to_str() else {
        return Some(StreamableHttpError::UnexpectedServerResponse(
            Cow::Borrowed("invalid www-authenticate header value"),
        ));
    };
    Some(if status == StatusCode::UNAUTHORIZED {
        StreamableHttpError::AuthRequired(AuthRequiredError::new(header.to_owned()))
    } else {
        StreamableHttpError::InsufficientScope(InsufficientScopeError::new(
            header.to_owned(),
            challenge_scope(header),
        ))
    })
}

/// The `scope` parameter of a `WWW-Authenticate` challenge, quoted or not.
fn challenge_scope(header: &str) -> Option<String> {
    let at = header.to_ascii_lowercase().find("scope=")? + "scope=".len();
    let rest = &header[at..];
    let scope = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => {
            let end = rest
                .find(|c: char| c == ',' || c == ';' || c.is_whitespace())
                .unwrap_or(rest.len());
            &rest[..end]
        }
    };
    (!scope.is_empty()).then(|| scope.to_owned())
}

/// 429 and 5xx keep their status and a bounded `Retry-After`.
fn status_error(status: StatusCode, headers: &HeaderMap) -> Option<HttpStatusError> {
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let retry_after = headers
        .get(RETRY_AFTER)
        .filter(|v| v.len() <= MAX_RETRY_AFTER_BYTES)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Some(HttpStatusError::new(status.as_u16(), retry_after))
}

fn content_length(response: &Response<Incoming>) -> Option<u64> {
    response.body().size_hint().exact()
}

/// The whole body, refused (not truncated) when it exceeds `max`.
async fn read_bounded(response: Response<Incoming>, max: usize) -> HttpResult<Vec<u8>> {
    let too_large = StreamableHttpError::ResponseBodyTooLarge { max_size: max };
    if content_length(&response).is_some_and(|n| n > max as u64) {
        return Err(too_large);
    }
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(client_error)?.into_data() {
            if bytes.len() + data.len() > max {
                return Err(too_large);
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// At most the first `max` bytes of the body (a diagnostic); the rest is not read.
async fn read_prefix(response: Response<Incoming>, max: usize) -> Vec<u8> {
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while bytes.len() < max {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let take = data.len().min(max - bytes.len());
                    bytes.extend_from_slice(&data[..take]);
                }
            }
            Some(Err(_)) => {
                let text = b"<failed to read response body>";
                return text[..text.len().min(max)].to_vec();
            }
            None => break,
        }
    }
    bytes
}

fn truncated_text(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned()
}

/// The response's events, each refused once its raw bytes exceed `max_event_size`.
fn event_stream(
    response: Response<Incoming>,
    max_event_size: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    let bytes = EventSizeLimit {
        inner: response.into_body().into_data_stream(),
        counter: EventCounter::new(max_event_size),
        failed: false,
    };
    SseStream::from_bytes_stream(bytes).boxed()
}

/// `events` with every request on them marked as the call `call`'s ([`CALL_TAG`] in its
/// `_meta`), or, without a call, with that mark taken off any request that carries it: only
/// the gateway says which call a request belongs to.
fn tagged(
    events: BoxStream<'static, Result<Sse, SseError>>,
    call: Option<RequestId>,
) -> BoxStream<'static, Result<Sse, SseError>> {
    events
        .map(move |event| event.map(|sse| tag_event(sse, call.as_ref())))
        .boxed()
}

fn tag_event(mut sse: Sse, call: Option<&RequestId>) -> Sse {
    let Some(data) = sse.data.as_deref() else {
        return sse;
    };
    // Most events are not requests, and only a marked one needs unmarking.
    let relevant = match call {
        Some(_) => data.contains("\"method\""),
        None => data.contains(CALL_TAG),
    };
    if !relevant {
        return sse;
    }
    if let Some(retagged) = retag(data.as_bytes(), call) {
        sse.data = Some(retagged);
    }
    sse
}

/// A JSON body without the mark on any request ([`tagged`]).
fn untag(body: Vec<u8>) -> Vec<u8> {
    let marked = body
        .windows(CALL_TAG.len())
        .any(|w| w == CALL_TAG.as_bytes());
    match marked.then(|| retag(&body, None)).flatten() {
        Some(text) => text.into_bytes(),
        None => body,
    }
}

/// The message `text` marked as `call`'s (a request or a log message), or unmarked; `None`
/// when there is nothing to change (left as it is: rmcp decides what it is).
fn retag(text: &[u8], call: Option<&RequestId>) -> Option<String> {
    let mut message: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(text).ok()?;
    // Requests and log messages belong to a call; any message loses a mark it brought.
    let method = message.get("method").and_then(serde_json::Value::as_str)?;
    let about_a_call = message.contains_key("id") || method == "notifications/message";
    if call.is_some() && !about_a_call {
        return None;
    }
    let params = message
        .entry("params")
        .or_insert_with(|| serde_json::Value::Object(Default::default()))
        .as_object_mut()?;
    let meta = params
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()))
        .as_object_mut()?;
    match call {
        Some(id) => {
            meta.insert(CALL_TAG.to_owned(), serde_json::to_value(id).ok()?);
        }
        None => {
            meta.remove(CALL_TAG);
        }
    }
    serde_json::to_string(&message).ok()
}

/// rmcp calls the `_with_response_limits` and `_with_max_sse_event_size` forms, which apply its
/// transport's limits; the plain ones (and the trait's default in between) apply rmcp's
/// default limits.
impl StreamableHttpClient for UpstreamHttp {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_token,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let had_session = session_id.is_some();
        let mut headers = request_headers(auth_token, session_id.as_deref(), custom_headers)?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        let body = Bytes::from(serde_json::to_vec(&message)?);
        let response = self.send(Method::POST, &uri, headers, body).await?;
        if let Some(error) = authorization_error(&response) {
            return Err(error);
        }
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let content_type = content_type(response.headers());
        let is_json = content_type
            .as_deref()
            .is_some_and(|ct| media_type_is(ct, JSON));
        // Rate limits and non-JSON failures keep only their status; a JSON failure may carry a
        // JSON-RPC error, which is worth reading (within the JSON limit).
        let status_failure = match status_error(status, response.headers()) {
            Some(error) if !is_json || status == StatusCode::TOO_MANY_REQUESTS => {
                return Err(error.into());
            }
            other => other,
        };
        let new_session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Notifications, responses and errors await nothing; some servers answer them with an
        // empty 200 (or anything 2xx) instead of 202.
        let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
        if status.is_success() && awaits_no_response && content_length(&response) == Some(0) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !status.is_success() {
            let challenged = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
            let text = if is_json && !challenged {
                match read_bounded(response, limits.max_json_response_size).await {
                    Ok(body) => {
                        if let Ok(error @ JsonRpcMessage::Error(_)) =
                            serde_json::from_slice::<ServerJsonRpcMessage>(&body)
                        {
                            return Ok(StreamableHttpPostResponse::Json(error, new_session));
                        }
                        truncated_text(&body, limits.max_error_response_size)
                    }
                    Err(error @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                        return Err(status_failure.map_or(error, Into::into));
                    }
                    Err(_) => "<failed to read response body>".to_owned(),
                }
            } else {
                let prefix = read_prefix(response, limits.max_error_response_size).await;
                truncated_text(&prefix, limits.max_error_response_size)
            };
            if let Some(error) = status_failure {
                return Err(error.into());
            }
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status}: {text}"),
            )));
        }
        // A call's answer is decoded here when it is exactly what the call expects.
        let call = expected_call(&message);
        match content_type.as_deref() {
            Some(ct) if media_type_is(ct, EVENT_STREAM) => {
                let events = event_stream(response, limits.max_sse_event_size);
                let Some(id) = call else {
                    return Ok(StreamableHttpPostResponse::Sse(
                        tagged(events, None),
                        new_session,
                    ));
                };
                Ok(match first_answer(events, id).await {
                    FirstEvent::Answer(answer) => {
                        StreamableHttpPostResponse::Json(answer, new_session)
                    }
                    // The rest of the call's own stream: the requests on it are the call's.
                    FirstEvent::Stream(events) => StreamableHttpPostResponse::Sse(
                        tagged(events, Some(id.clone())),
                        new_session,
                    ),
                })
            }
            Some(ct) if media_type_is(ct, JSON) => {
                let body = untag(read_bounded(response, limits.max_json_response_size).await?);
                let answer = call.and_then(|id| call_answer(&body, id));
                match answer
                    .map_or_else(|| serde_json::from_slice::<ServerJsonRpcMessage>(&body), Ok)
                {
                    Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, new_session)),
                    Err(_) if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                        format!(
                            "the response is not a JSON-RPC message: {e}: {}",
                            truncated_text(&body, 256)
                        ),
                    ))),
                }
            }
            _ if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
            _ => Err(StreamableHttpError::UnexpectedContentType(content_type)),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let headers = request_headers(auth_token, Some(&session_id), custom_headers)?;
        let response = self
            .send(Method::DELETE, &uri, headers, Bytes::new())
            .await?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED || status.is_success() {
            return Ok(());
        }
        Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
            format!("ending the session: HTTP {status}"),
        )))
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_token,
            custom_headers,
            DEFAULT_MAX_SSE_EVENT_SIZE,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let mut headers = request_headers(auth_token, session_id.as_deref(), custom_headers)?;
        if let Some(last_event_id) = last_event_id {
            headers.insert(LAST_EVENT_ID, header_value(&last_event_id, "event id")?);
        }
        let response = self.send(Method::GET, &uri, headers, Bytes::new()).await?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(error) = authorization_error(&response) {
            return Err(error);
        }
        if let Some(error) = status_error(status, response.headers()) {
            return Err(error.into());
        }
        if !status.is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("opening the event stream: HTTP {status}"),
            )));
        }
        match content_type(response.headers()) {
            Some(ct) if media_type_is(&ct, EVENT_STREAM) || media_type_is(&ct, JSON) => {
                Ok(tagged(event_stream(response, max_sse_event_size), None))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(other)),
        }
    }
}

/// Why an event stream ended early.
#[derive(Debug, thiserror::Error)]
enum EventStreamError {
    #[error("{0}")]
    Body(#[from] hyper::Error),
    #[error("an SSE event exceeded the maximum size of {max} bytes")]
    TooLarge { max: usize },
}

/// Counts the raw bytes of the current SSE event (its lines with their terminators; the blank
/// line that ends it aside), across chunk boundaries and all three line endings.
#[derive(Debug)]
struct EventCounter {
    max: usize,
    current: usize,
    at_line_start: bool,
    after_cr: bool,
}

impl EventCounter {
    fn new(max: usize) -> Self {
        Self {
            max,
            current: 0,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// Feeds a chunk; false once an event has grown past the limit.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            if byte == b'\n' && after_cr {
                // The LF of a CRLF: the CR already ended the line.
                continue;
            }
            let line_end = byte == b'\n' || byte == b'\r';
            if line_end && self.at_line_start {
                // A blank line: the event is complete.
                self.current = 0;
                continue;
            }
            self.current += 1;
            self.at_line_start = line_end;
            if self.current > self.max {
                return false;
            }
        }
        true
    }
}

struct EventSizeLimit {
    inner: BodyDataStream<Incoming>,
    counter: EventCounter,
    failed: bool,
}

impl Stream for EventSizeLimit {
    type Item = Result<Bytes, EventStreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if self.counter.feed(&chunk) {
                    Poll::Ready(Some(Ok(chunk)))
                } else {
                    self.failed = true;
                    Poll::Ready(Some(Err(EventStreamError::TooLarge {
                        max: self.counter.max,
                    })))
                }
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Opens connections for the pool: resolve (guarded), TCP with `TCP_NODELAY`, TLS for https.
#[derive(Clone)]
struct Connect {
    tls: TlsConnector,
    public_only: bool,
    timeout: Duration,
}

impl tower_service::Service<Uri> for Connect {
    type Response = TokioIo<Conn>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Conn>>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.connect(uri).await.map(TokioIo::new) })
    }
}

impl Connect {
    async fn connect(self, uri: Uri) -> io::Result<Conn> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the scheme `{}` is not http or https", other.unwrap_or("")),
                ));
            }
        };
        let host = uri
            .host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the URL has no host"))?
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let timed_out = |what: &str| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} {host}:{port} took over {:?}", self.timeout),
            )
        };
        let tcp = tokio::time::timeout(self.timeout, self.open(&host, port))
            .await
            .map_err(|_| timed_out("connecting to"))??;
        tcp.set_nodelay(true)?;
        let tcp = QuickAck(tcp);
        if !https {
            return Ok(Conn::Plain(tcp));
        }
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let tls = tokio::time::timeout(self.timeout, self.tls.connect(name, tcp))
            .await
            .map_err(|_| timed_out("the TLS handshake with"))??;
        Ok(Conn::Tls(Box::new(tls)))
    }

    /// The first address of `host` that accepts a connection.
    async fn open(&self, host: &str, port: u16) -> io::Result<TcpStream> {
        let mut last_error = None;
        for address in resolve(host, port, self.public_only).await? {
            match TcpStream::connect(address).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("`{host}` has no address"))
        }))
    }
}

/// A TCP stream that sends the ACK of whatever it reads at once (`TCP_QUICKACK`, which Linux
/// clears again by itself, hence after every read). Without it, a peer with Nagle's algorithm on
/// waits for our delayed ACK before sending the rest of a response.
#[derive(Debug)]
struct QuickAck(TcpStream);

impl QuickAck {
    fn ack_now(&self) {
        #[cfg(target_os = "linux")]
        {
            // Best effort: only latency depends on it.
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
        }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.0).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.ack_now();
        }
        poll
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// A connection to an upstream, plain or TLS.
enum Conn {
    Plain(QuickAck),
    Tls(Box<TlsStream<QuickAck>>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn event_sizes_count_raw_bytes_per_event() {
        // The blank line ends an event and is not part of it.
        let mut counter = EventCounter::new(9);
        assert!(counter.feed(b"data: ab\n\n"));
        // Every line ending, split across chunks; the limit applies per event.
        let mut counter = EventCounter::new(8);
        assert!(counter.feed(b"data: a\r"));
        assert!(counter.feed(b"\n\r\ndata: b\n\n"));
        assert!(counter.feed(b"data: c\r\rdata: d\r\n\r\n"));
        // An event that never ends is refused once it is over the limit, whatever the chunks.
        let mut counter = EventCounter::new(16);
        assert!(counter.feed(b"data: xxxxx"));
        assert!(!counter.feed(b"xxxxxx"));
        let mut counter = EventCounter::new(16);
        assert!(counter.feed(b"data: 1\ndata: 2\n"));
        assert!(!counter.feed(b"d"));
    }

    /// Issue 47: a request on a call's own stream is marked as that call's; anywhere else the
    /// mark is taken off, so an upstream cannot name a call for its request itself.
    #[test]
    fn only_the_gateway_marks_which_call_a_request_belongs_to() {
        let event = |data: &str| Sse::default().data(data);
        let meta = |sse: Sse| -> serde_json::Value {
            let v: serde_json::Value = serde_json::from_str(sse.data.as_deref().unwrap()).unwrap();
            v["params"]["_meta"].clone()
        };
        let ask = r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"messages":[]}}"#;
        let forged = r#"{"jsonrpc":"2.0","id":5,"method":"roots/list","params":{"_meta":{"io.aperture/call":3}}}"#;
        let on_call = tag_event(event(ask), Some(&RequestId::Number(3)));
        assert_eq!(meta(on_call)[CALL_TAG], serde_json::json!(3));
        assert_eq!(
            meta(tag_event(event(forged), Some(&RequestId::Number(7))))[CALL_TAG],
            serde_json::json!(7)
        );
        assert_eq!(meta(tag_event(event(forged), None)), serde_json::json!({}));
        let untagged: serde_json::Value =
            serde_json::from_slice(&untag(forged.as_bytes().to_vec())).unwrap();
        assert_eq!(untagged["params"]["_meta"], serde_json::json!({}));
        // Notifications and answers pass as they came.
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":{"io.aperture/call":1}}}"#;
        assert_eq!(
            tag_event(event(note), Some(&RequestId::Number(1)))
                .data
                .as_deref(),
            Some(note)
        );
    }

    #[test]
    fn challenge_scopes_are_read_quoted_or_not() {
        assert_eq!(
            challenge_scope(r#"Bearer error="insufficient_scope", scope="files:read files:write""#)
                .as_deref(),
            Some("files:read files:write")
        );
        assert_eq!(
            challenge_scope("Bearer scope=read:data, error=x").as_deref(),
            Some("read:data")
        );
        assert_eq!(challenge_scope("Bearer realm=\"x\""), None);
        assert_eq!(challenge_scope("Bearer scope=\"unterminated"), None);
    }

    #[test]
    fn reserved_headers_cannot_be_replaced() {
        for name in ["accept", "mcp-session-id", "last-event-id"] {
            let custom =
                HashMap::from([(HeaderName::from_static(name), HeaderValue::from_static("x"))]);
            assert!(matches!(
                request_headers(None, None, custom),
                Err(StreamableHttpError::ReservedHeaderConflict(n)) if n == name
            ));
        }
        let custom = HashMap::from([(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_static("2025-11-25"),
        )]);
        let headers = request_headers(Some("t".into()), Some("s"), custom).unwrap();
        assert_eq!(headers["authorization"], "Bearer t");
        assert_eq!(headers["mcp-session-id"], "s");
        assert_eq!(headers["mcp-protocol-version"], "2025-11-25");
    }

    #[tokio::test]
    async fn a_guarded_client_never_connects_to_an_internal_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://127.0.0.1:{}/mcp",
            listener.local_addr().unwrap().port()
        );
        let message: ClientJsonRpcMessage = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/initialized"
        }))
        .unwrap();
        let guarded = UpstreamHttp::new(false, Duration::from_secs(5), &url).unwrap();
        let sending = guarded.post_message(
            url.as_str().into(),
            message.clone(),
            None,
            None,
            HashMap::new(),
        );
        // A client that did connect would wait for an answer the listener never gives.
        let err = tokio::time::timeout(Duration::from_secs(5), sending)
            .await
            .expect("the guarded client connected and waited for an answer")
            .unwrap_err();
        assert!(err.to_string().contains("loopback"), "{err}");
        // Nothing reached the listener.
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "the guarded client connected");

        // The operator's switch lets the same request through.
        let allowed = UpstreamHttp::new(true, Duration::from_secs(5), &url).unwrap();
        let sending =
            allowed.post_message(url.as_str().into(), message, None, None, HashMap::new());
        let (sent, accepted) = tokio::join!(
            tokio::time::timeout(Duration::from_millis(500), sending),
            listener.accept()
        );
        assert!(accepted.is_ok());
        drop(sent);
    }

    #[tokio::test]
    async fn reading_re_arms_quick_ack() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(address), listener.accept());
        let (client, (mut server, _)) = (client.unwrap(), server.unwrap());
        // Delayed-ACK ("pingpong") mode, as a request/response connection ends up in.
        socket2::SockRef::from(&client)
            .set_tcp_quickack(false)
            .unwrap();
        assert!(!socket2::SockRef::from(&client).tcp_quickack().unwrap());
        let mut client = QuickAck(client);
        server.write_all(b"hello").await.unwrap();
        let mut buf = [0; 5];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        assert!(socket2::SockRef::from(&client.0).tcp_quickack().unwrap());
    }
}
