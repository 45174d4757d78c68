//! The MCP endpoint `POST /mcp` (streamable HTTP, JSON responses): `initialize`,
//! `tools/list` (a new manifest and lease on every call), `tools/call` (every check of
//! CONTRACT §5, through [`aperture_core::calls`]), `ping`. Bearer tokens authenticate; a missing
//! or bad token is 401 with `WWW-Authenticate` pointing at the RFC 9728 metadata.
//!
//! Two eras of the protocol are served side by side:
//! - 2025-11-25 and 2025-06-18: `initialize` negotiates the revision and hands out an
//!   `Mcp-Session-Id` (the gateway keeps no state under it: the exposure session travels in
//!   `_meta`).
//! - 2026-07-28 (stateless): no handshake; `server/discover` says what is supported, and every
//!   request carries `io.modelcontextprotocol/protocolVersion` and `…/clientCapabilities` in
//!   its `_meta`, mirrored by the `MCP-Protocol-Version`, `Mcp-Method` and (for `tools/call`)
//!   `Mcp-Name` headers; a mismatch is HTTP 400 with -32020, an unsupported revision HTTP 400
//!   with -32022, missing protocol fields HTTP 400 with -32602 ([`stateless_request`]);
//!   `initialize`, `ping` and other methods the era lacks are HTTP 404 with -32601. Results
//!   carry `resultType`, and `tools/list` says not to cache it (`ttlMs: 0`): every listing
//!   grants a new lease.
//!
//! An upstream's requests for the client while a call runs (sampling, elicitation, roots;
//! [`aperture_core::relay`]) travel on the call's event stream in the 2025 eras (the client
//! posts its answer back, [`answered`]) and as `input_required` results in 2026-07-28
//! ([`input`]).
//!
//! Protocol errors stay JSON-RPC errors with the request's id; nothing a client sends is
//! answered with HTTP 500.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use aperture_types::dto::CreateSessionRequest;
use engine::headers::ParamHeaders;
use engine::scope;

use crate::auth::Principal;
use crate::auth::principal::{authenticate_bearer, authenticate_bearer_assumed};
use crate::state::AppState;
use aperture_core::calls::{self, ToolCall};
use aperture_core::config::Config;
use aperture_core::error::ServiceError;
use aperture_core::execution::LogSink;
use aperture_core::exposure;
use aperture_core::live::asks;
use aperture_core::mcp_sessions::Session;
use aperture_core::relay::{self, Abilities, ClientError, ClientRelay};
use aperture_core::settings::mcp::Binding;
use aperture_core::upstream::{LogLevel, UpstreamLog};

pub use aperture_core::live::{listing, streams};
mod input;
mod items;
pub mod request;
mod sse;
mod tasks;

use request::{Message, Method};

/// The requests `/mcp` answers (notifications aside), by name: [`Method`]'s. A method answered
/// is one listed here, and the tests that are generated from this table (the environment
/// matrix) reach it.
pub const METHODS: &[&str] = &request::NAMES;

/// Protocol revisions `initialize` negotiates, newest first.
pub const PROTOCOL_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];
/// The stateless revision: requests carry their protocol metadata, no `initialize`.
pub const STATELESS_VERSION: &str = "2026-07-28";

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// 2026-07-28: the level from which a request's log messages reach the client.
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub use aperture_core::live::listing::META_SUBSCRIPTION;
/// A protocol header is missing or does not mirror the body.
const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request needs a client capability it did not declare.
const MISSING_CAPABILITY: i64 = -32021;
/// The requested revision is not supported.
const UNSUPPORTED_VERSION: i64 = -32022;

const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request".
pub const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// A session id that names no live session of the caller (with HTTP 404), as the MCP SDKs'
/// servers answer it.
const SESSION_NOT_FOUND: i64 = -32001;

/// The answer to a caller whose token lacks `agent_tool_exposure:run`, if it does.
pub(super) fn lacks_run(principal: &Principal, id: &Value) -> Option<Value> {
    principal.require(scope::RUN).is_err().then(|| {
        error(
            id,
            INVALID_PARAMS,
            "this token lacks agent_tool_exposure:run",
        )
    })
}

/// A JSON-RPC error response.
pub fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// A JSON-RPC result response. `result` is moved in, not copied (`json!` would serialize the
/// whole tool result, the receipt in its `_meta` included, into a second tree).
fn ok(id: &Value, result: Value) -> Value {
    let mut response = serde_json::Map::with_capacity(3);
    response.insert("jsonrpc".into(), Value::from("2.0"));
    response.insert("id".into(), id.clone());
    response.insert("result".into(), result);
    Value::Object(response)
}

fn unauthorized(config: &aperture_core::config::Config) -> Response {
    let challenge = format!(
        "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
        config.public_base()
    );
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Json(json!({"jsonrpc": "2.0", "id": null, "error": {"code": INVALID_REQUEST, "message": "a bearer token is required"}})),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

/// The request's bearer token, when it has one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `GET /.well-known/oauth-protected-resource` (RFC 9728).
pub async fn protected_resource(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "resource": format!("{}/mcp", state.config.public_base()),
        "bearer_methods_supported": ["header"],
        "scopes_supported": scope::APERTURE_SCOPES,
        "resource_name": "Aperture MCP gateway"
    }))
}

/// `POST /mcp`
pub async fn handle(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // Before anything else (MCP transport: servers MUST validate `Origin`, against DNS
    // rebinding): a browser page of another origin never reaches the gateway.
    if let Some(refused) = foreign_origin(&state.config, &headers) {
        return refused;
    }
    let Some(secret) = bearer(&headers) else {
        return unauthorized(&state.config);
    };
    // From the call cache as it stands: a `tools/call` has the generation confirmed by its
    // decision record; every other method confirms it below, before it reads anything.
    let mut principal = match authenticate_bearer_assumed(&state.store, secret).await {
        Ok(p) => p,
        Err(_) => return unauthorized(&state.config),
    };
    let message = match request::parse(&body) {
        Ok(message) => message,
        Err(answer) => return Json(answer).into_response(),
    };
    // The client's MCP session (2025 era), part of how it names its requests and
    // notifications; a malformed one is refused whatever the message.
    let mcp_session = match mcp_session_id(&headers) {
        Ok(s) => s,
        Err(why) => {
            let answer = error(&Value::Null, INVALID_PARAMS, why);
            return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
        }
    };
    let request = match message {
        Message::Request(request) => request,
        Message::Notification { method, params } => {
            let session = mcp_session.as_deref();
            if let Some(refused) = unknown_session(&state, &principal, session, &Value::Null).await
            {
                return refused;
            }
            return notification(&state, &principal, session, &method, params.as_ref()).await;
        }
        // A client's answer to a request of the gateway's (on one of its calls' streams).
        Message::Response { id, result, error } => {
            let session = mcp_session.as_deref();
            if let Some(refused) = unknown_session(&state, &principal, session, &Value::Null).await
            {
                return refused;
            }
            return answered(&state, &principal, session, &id, result, error).await;
        }
        Message::Empty => return StatusCode::ACCEPTED.into_response(),
    };
    let request::Request { id, method, params } = request;
    let method = method.as_str();
    if !fits(&id) {
        let answer = error(
            &Value::Null,
            INVALID_PARAMS,
            "the request id is over 256 bytes",
        );
        return Json(answer).into_response();
    }
    let params = params.unwrap_or_else(|| json!({}));
    if let Some(path) = oversized_identifier(&params) {
        let answer = error(&id, INVALID_PARAMS, format!("{path} is over 256 bytes"));
        return Json(answer).into_response();
    }
    let stateless = match stateless_request(&headers, method, &params) {
        Ok(s) => s,
        Err(e) => return (StatusCode::BAD_REQUEST, Json(e.answer(&id))).into_response(),
    };
    // 2025 era: after `initialize`, requests name the negotiated revision in
    // `MCP-Protocol-Version`; one this server does not speak is a 400.
    if !stateless
        && method != Method::Initialize.name()
        && let Some(version) = headers.get("mcp-protocol-version")
    {
        let version = version.to_str().unwrap_or("");
        if !PROTOCOL_VERSIONS.contains(&version)
            && version != LEGACY_DEFAULT_VERSION
            && version != STATELESS_VERSION
        {
            let answer = error(
                &id,
                INVALID_REQUEST,
                format!("unsupported MCP-Protocol-Version {version:?}"),
            );
            return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
        }
    }
    // 2025 era: a session id must name one of the caller's live sessions (`initialize` opens
    // them); any other is 404, and the client initializes again. What its client declared at
    // `initialize` decides what may be relayed to it.
    let mut session = Session::default();
    if !stateless && method != Method::Initialize.name() {
        match session_of(&state, &principal, mcp_session.as_deref(), &id).await {
            Ok(held) => session = held,
            Err(refused) => return refused,
        }
    }
    // 2026-07-28: what the client can answer and the level it listens at come with each
    // request.
    if stateless {
        session = Session {
            abilities: Abilities::declared(
                params
                    .get("_meta")
                    .and_then(|m| m.get(META_CAPABILITIES))
                    .unwrap_or(&Value::Null),
            ),
            log_level: params
                .get("_meta")
                .and_then(|m| m.get(META_LOG_LEVEL))
                .and_then(Value::as_str)
                .and_then(LogLevel::parse),
        };
    }
    let known = Method::parse(method);
    if known != Some(Method::ToolsCall)
        && principal
            .read_at
            .is_some_and(|at| at.unconfirmed().is_some())
    {
        principal = match authenticate_bearer(&state.store, secret).await {
            Ok(p) => p,
            Err(_) => return unauthorized(&state.config),
        };
    }
    // A method this era does not have is unknown: `initialize`, `ping`, `logging/setLevel`,
    // `resources/(un)subscribe`, `tasks/result` and `tasks/list` in 2026-07-28 (the tasks
    // extension removed the last two), `subscriptions/listen` and `tasks/update` before it.
    // Stateless requests answer it 404.
    let served = known.filter(|m| match m {
        Method::Initialize
        | Method::Ping
        | Method::LoggingSetLevel
        | Method::ResourcesSubscribe
        | Method::ResourcesUnsubscribe
        | Method::TasksResult
        | Method::TasksList => !stateless,
        Method::SubscriptionsListen | Method::TasksUpdate => stateless,
        _ => true,
    });
    let Some(method) = served else {
        let answer = error(&id, METHOD_NOT_FOUND, format!("unknown method {method}"));
        return match stateless {
            true => (StatusCode::NOT_FOUND, Json(answer)).into_response(),
            false => Json(answer).into_response(),
        };
    };
    // 2026-07-28: the tasks extension's methods are for clients that declared it (-32021).
    if stateless
        && matches!(
            method,
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel
        )
        && !tasks::declared(&params)
    {
        let answer = missing_capability(
            &id,
            format!(
                "{} needs the {} extension declared in the request's clientCapabilities",
                method.name(),
                tasks::EXTENSION
            ),
            json!({"extensions": {tasks::EXTENSION: {}}}),
        );
        return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
    }
    // 2025 era: the client's MCP session names its listings and calls; 2026-07-28 has none.
    let listing_session = mcp_session.as_deref().filter(|_| !stateless);
    // What a 2025-era client can do for servers, kept with the session `initialize` opens.
    let declared = if method == Method::Initialize {
        Abilities::declared(params.get("capabilities").unwrap_or(&Value::Null))
    } else {
        Abilities::default()
    };
    let answer = match method {
        Method::Initialize => initialize(&state, &principal, &id, &params).await,
        Method::Ping => ok(&id, json!({})),
        Method::Discover => ok(&id, discover()),
        Method::ToolsList => tools_list(&state, &principal, &id, &params, listing_session).await,
        // 2026-07-28: a client that can be asked is asked through `input_required` results.
        Method::ToolsCall if stateless && input::applies(&params) => {
            let listening = input::Listening {
                stream: accepts_stream(&headers),
                log_level: session.log_level,
                progress: progress_token(&params).is_some(),
            };
            let headers = param_headers(&headers);
            return input::call(&state, &principal, secret, &id, params, headers, listening).await;
        }
        // Answered as a stream when the client wants progress, or can be asked for input
        // while the call runs (the upstream's requests travel on the call's own stream).
        Method::ToolsCall
            if accepts_stream(&headers)
                && (progress_token(&params).is_some()
                    || session.abilities.any()
                    || session.log_level.is_some()) =>
        {
            let connected = Connected {
                mcp_session: mcp_session.filter(|_| !stateless),
                stateless,
                session,
                param_headers: stateless.then(|| param_headers(&headers)),
            };
            return stream_call(&state, principal, secret, id, params, connected);
        }
        Method::ToolsCall => {
            let session = mcp_session.filter(|_| !stateless);
            // A 2026-07-28 client that declared nothing it can be asked: what the upstream
            // asks is refused, and the call answered -32021 if it fails for it.
            let streaming = Streaming {
                param_headers: stateless.then(|| param_headers(&headers)),
                client: stateless.then(|| {
                    ClientRelay::new(Abilities::default(), tokio::sync::mpsc::channel(1).0)
                }),
                ..Streaming::default()
            };
            match tools_call(&state, &principal, secret, &id, params, session, streaming).await {
                Ok(answer) => answer,
                Err(()) => return unauthorized(&state.config),
            }
        }
        Method::SubscriptionsListen => {
            return listen(&state, &principal, secret, &headers, id, &params).await;
        }
        Method::ResourcesList | Method::ResourcesTemplatesList | Method::PromptsList => {
            items::list(&state, &principal, &id, &params, method).await
        }
        Method::ResourcesRead | Method::PromptsGet => {
            items::answer(&state, &principal, &id, &params, method, stateless).await
        }
        Method::CompletionComplete => items::complete(&state, &principal, &id, &params).await,
        Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
            let session = mcp_session.as_deref();
            items::subscription(&state, &principal, &id, &params, method, session).await
        }
        Method::LoggingSetLevel => {
            set_level(&state, &principal, mcp_session.as_deref(), &id, &params).await
        }
        Method::TasksGet => tasks::get(&state, &principal, &id, &params, stateless).await,
        Method::TasksResult => tasks::result(&state, &principal, &id, &params).await,
        Method::TasksCancel => tasks::cancel(&state, &principal, &id, &params, stateless).await,
        Method::TasksUpdate => tasks::update(&state, &principal, &id, &params).await,
        Method::TasksList => tasks::list(&state, &principal, &id, &params).await,
    };
    // 2026-07-28 results carry what the era adds (and `server/discover` is answered so in
    // either era).
    if stateless || method == Method::Discover {
        let is_list = matches!(
            method,
            Method::ToolsList
                | Method::ResourcesList
                | Method::ResourcesTemplatesList
                | Method::PromptsList
                | Method::ResourcesRead
        );
        return (status_of(&answer), Json(complete(answer, is_list))).into_response();
    }
    if method == Method::Initialize {
        let opened = aperture_core::mcp_sessions::open(&state.store, &principal, declared).await;
        let session = match opened {
            Ok(session) => session,
            Err(e) => {
                let e = e.into_app_error();
                return Json(error(&id, INTERNAL_ERROR, e.message)).into_response();
            }
        };
        let mut response = Json(answer).into_response();
        if let Ok(v) = HeaderValue::from_str(&session) {
            response.headers_mut().insert("mcp-session-id", v);
        }
        return response;
    }
    Json(answer).into_response()
}

/// The 404 for a session id that is not one of `principal`'s live sessions (made up, another
/// principal's, ended or idle too long); `None` when it is one, or when there is none.
async fn unknown_session(
    state: &AppState,
    principal: &Principal,
    session: Option<&str>,
    id: &Value,
) -> Option<Response> {
    session_of(state, principal, session, id).await.err()
}

/// What `principal`'s live session holds (nothing without a session); the 404 of
/// [`unknown_session`] when the session is not one.
async fn session_of(
    state: &AppState,
    principal: &Principal,
    session: Option<&str>,
    id: &Value,
) -> Result<Session, Response> {
    let Some(session) = session else {
        return Ok(Session::default());
    };
    match aperture_core::mcp_sessions::live(&state.store, principal, session).await {
        Ok(Some(held)) => Ok(held),
        Ok(None) => {
            let answer = error(
                id,
                SESSION_NOT_FOUND,
                "Session not found: it ended or is not yours; initialize again",
            );
            Err((StatusCode::NOT_FOUND, Json(answer)).into_response())
        }
        Err(e) => Err(store_failed(id, e)),
    }
}

/// `logging/setLevel` (2025 eras): the level from which the upstreams' log messages about the
/// caller's calls reach it, for its MCP session only (never sent to an upstream, whose
/// connection other callers share).
async fn set_level(
    state: &AppState,
    principal: &Principal,
    mcp_session: Option<&str>,
    id: &Value,
    params: &Value,
) -> Value {
    let Some(level) = params
        .get("level")
        .and_then(Value::as_str)
        .and_then(LogLevel::parse)
    else {
        return error(
            id,
            INVALID_PARAMS,
            "level must be one of debug, info, notice, warning, error, critical, alert, emergency",
        );
    };
    let Some(session) = mcp_session else {
        return error(
            id,
            INVALID_PARAMS,
            "logging/setLevel sets the level of an MCP session: send the Mcp-Session-Id that initialize returned",
        );
    };
    match aperture_core::mcp_sessions::set_log_level(&state.store, principal, session, level).await
    {
        Ok(_) => ok(id, json!({})),
        Err(e) => error(id, INTERNAL_ERROR, e.into_app_error().message),
    }
}

/// A client's answer to a request of the gateway's: delivered to the call that asked (202),
/// when one on this node awaits it from this caller; kept for the other nodes (202) when this
/// node never asked it — the node holding the call takes it and delivers it only when it is
/// the caller's ([`asks::relay`]); else 404 (answered already, given up on, or another
/// caller's: alike).
async fn answered(
    state: &AppState,
    principal: &Principal,
    mcp_session: Option<&str>,
    id: &Value,
    result: Option<Value>,
    error_answer: Option<Value>,
) -> Response {
    let answer = match (result, error_answer) {
        (Some(result), None) => Ok(result),
        (None, Some(e)) => Err(ClientError {
            code: e
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(INTERNAL_ERROR),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .chars()
                .take(1024)
                .collect(),
        }),
        _ => {
            let answer = error(id, INVALID_REQUEST, "an answer has a result or an error");
            return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
        }
    };
    let from = asks::Owner {
        tenant_id: principal.tenant_id.clone(),
        principal: principal.principal_id().to_owned(),
        mcp_session: mcp_session.map(str::to_owned),
    };
    let kept = match id
        .as_str()
        .map(|ask| (ask, state.asks.answer(ask, &from, answer)))
    {
        Some((_, Ok(()))) => return StatusCode::ACCEPTED.into_response(),
        Some((ask, Err((asks::Refused::Unknown, answer)))) => {
            asks::forward(&state.store, &state.events, ask, &from, &answer).await
        }
        _ => Ok(false),
    };
    match kept {
        Ok(true) => return StatusCode::ACCEPTED.into_response(),
        Ok(false) => {}
        Err(e) => return store_failed(id, e),
    }
    let answer = error(
        id,
        INVALID_REQUEST,
        "no request of this server's awaits this answer from you",
    );
    (StatusCode::NOT_FOUND, Json(answer)).into_response()
}

/// `DELETE /mcp` (2025 eras): the client ends its session (`Mcp-Session-Id`): 204, then the id
/// is unknown (404) to every node; 404 for an id that is not one of the caller's live sessions.
pub async fn end_session(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(refused) = foreign_origin(&state.config, &headers) {
        return refused;
    }
    let Some(secret) = bearer(&headers) else {
        return unauthorized(&state.config);
    };
    let principal = match authenticate_bearer(&state.store, secret).await {
        Ok(p) => p,
        Err(_) => return unauthorized(&state.config),
    };
    let session = match mcp_session_id(&headers) {
        Ok(Some(session)) => session,
        Ok(None) => {
            let answer = error(&Value::Null, INVALID_REQUEST, "Mcp-Session-Id is required");
            return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
        }
        Err(why) => {
            let answer = error(&Value::Null, INVALID_PARAMS, why);
            return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
        }
    };
    match aperture_core::mcp_sessions::close(&state.store, &principal, &session).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => {
            let answer = error(&Value::Null, SESSION_NOT_FOUND, "Session not found");
            (StatusCode::NOT_FOUND, Json(answer)).into_response()
        }
        Err(e) => store_failed(&Value::Null, e),
    }
}

/// The answer when the sessions could not be read or written: 503 with the caller's view of
/// the failure (a JSON-RPC error, never the store's own text).
fn store_failed(id: &Value, e: ServiceError) -> Response {
    let answer = error(id, INTERNAL_ERROR, e.into_app_error().message);
    (StatusCode::SERVICE_UNAVAILABLE, Json(answer)).into_response()
}

/// A notification: never answered (202). A cancellation stops the caller's call in flight (an
/// oversized request id names no call the gateway would have taken).
async fn notification(
    state: &AppState,
    principal: &Principal,
    mcp_session: Option<&str>,
    method: &str,
    params: Option<&Value>,
) -> Response {
    if method == "notifications/cancelled"
        && let Some(request) = params.and_then(|p| p.get("requestId"))
        && fits(request)
    {
        let key = aperture_core::cancel::Key::new(
            &principal.tenant_id,
            &principal.caller_id(),
            mcp_session,
            request,
        );
        aperture_core::cancel::cancel(&state.in_flight, &state.events, &key).await;
    }
    StatusCode::ACCEPTED.into_response()
}

/// Whether an identifier the client chose (any JSON value) is at most
/// [`calls::MAX_CLIENT_ID_BYTES`] as compact JSON: what the gateway stores, publishes or echoes
/// of one request stays small.
fn fits(value: &Value) -> bool {
    match value {
        Value::String(s) => s.len() + 2 <= calls::MAX_CLIENT_ID_BYTES,
        Value::Number(_) | Value::Bool(_) | Value::Null => true,
        _ => serde_json::to_vec(value).is_ok_and(|v| v.len() <= calls::MAX_CLIENT_ID_BYTES),
    }
}

/// The first identifier a client chose in `params` that is too long ([`fits`]), by its path:
/// a cursor, a progress token, a retry key or an idempotency key.
fn oversized_identifier(params: &Value) -> Option<&'static str> {
    [
        ("cursor", params.get("cursor")),
        (
            "_meta.progressToken",
            params.get("_meta").and_then(|m| m.get("progressToken")),
        ),
        (
            "_meta.invocation_id",
            params.get("_meta").and_then(|m| m.get("invocation_id")),
        ),
        (
            "arguments.idempotency_key",
            params
                .get("arguments")
                .and_then(|a| a.get("idempotency_key")),
        ),
    ]
    .into_iter()
    .find_map(|(path, value)| value.filter(|v| !fits(v)).map(|_| path))
}

/// The longest `Mcp-Session-Id` a client may send.
const MAX_MCP_SESSION_ID: usize = 128;

/// The request's `Mcp-Session-Id`, when it has one: at most [`MAX_MCP_SESSION_ID`] visible
/// ASCII characters (MCP's rule for the ids servers issue), else why not.
fn mcp_session_id(headers: &HeaderMap) -> Result<Option<String>, &'static str> {
    let Some(value) = headers.get("mcp-session-id") else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_MCP_SESSION_ID
        || !bytes.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err("Mcp-Session-Id must be 1 to 128 visible ASCII characters");
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// The revision a 2025-era server assumes when a request names none (accepted when named).
const LEGACY_DEFAULT_VERSION: &str = "2025-03-26";

/// A refusal (403) of a request a browser page of another site could have sent, checked before
/// anything else (MCP transports: servers MUST validate `Origin`, against DNS rebinding): an
/// `Origin` this server does not accept ([`Config::accepts_origin`]), or, on a loopback
/// listener, a `Host` that is not this server's ([`Config::accepts_host`]). `Origin: null`
/// (sandboxed frames, files) is refused; requests without `Origin` (MCP clients that are not
/// browsers) pass.
fn foreign_origin(config: &Config, headers: &HeaderMap) -> Option<Response> {
    let host = headers.get(header::HOST).map(|h| h.to_str().unwrap_or(""));
    let why = if !config.accepts_host(host) {
        "this Host does not name the server (a loopback server answers only to its own names)"
    } else if headers
        .get(header::ORIGIN)
        .is_some_and(|o| !o.to_str().is_ok_and(|o| config.accepts_origin(o)))
    {
        "this origin may not call the MCP endpoint (APERTURE_ALLOWED_ORIGINS lists the ones that may)"
    } else {
        return None;
    };
    let answer = error(&Value::Null, INVALID_REQUEST, why);
    Some((StatusCode::FORBIDDEN, Json(answer)).into_response())
}

/// Why a stateless request is refused before it is read.
struct Refusal {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl Refusal {
    fn answer(&self, id: &Value) -> Value {
        let mut e = error(id, self.code, self.message.clone());
        if let Some(data) = &self.data {
            e["error"]["data"] = data.clone();
        }
        e
    }
}

/// Whether this is a 2026-07-28 request (protocol metadata in `_meta`), after checking it in
/// the order the specification's reference server does (every refusal is HTTP 400): a request
/// whose `MCP-Protocol-Version` header names 2026-07-28 without the protocol fields in its
/// `_meta` is malformed (-32602); one with a version in `_meta` needs the header (-32020), its
/// client capabilities (-32602) and the same version in the header (-32020) before its version
/// is weighed (unsupported: -32022 with the versions served); then `Mcp-Method` and, for
/// `tools/call`, `Mcp-Name` must mirror the body (-32020).
fn stateless_request(headers: &HeaderMap, method: &str, params: &Value) -> Result<bool, Refusal> {
    let meta = params.get("_meta");
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let mismatch = |what: &str| Refusal {
        code: HEADER_MISMATCH,
        message: format!("{what} does not mirror the request"),
        data: None,
    };
    let required = |field: &str| Refusal {
        code: INVALID_PARAMS,
        message: format!("_meta.{field} is required"),
        data: None,
    };
    let header_version = header("mcp-protocol-version");
    let Some(version) = meta.and_then(|m| m.get(META_VERSION)) else {
        if header_version == Some(STATELESS_VERSION) {
            return Err(required(META_VERSION));
        }
        return Ok(false);
    };
    if header_version.is_none() {
        return Err(mismatch("the MCP-Protocol-Version header"));
    }
    let Some(version) = version.as_str() else {
        return Err(Refusal {
            code: INVALID_PARAMS,
            message: format!("_meta.{META_VERSION} must be a string"),
            data: None,
        });
    };
    if meta.and_then(|m| m.get(META_CAPABILITIES)).is_none() {
        return Err(required(META_CAPABILITIES));
    }
    if header_version != Some(version) {
        return Err(mismatch("the MCP-Protocol-Version header"));
    }
    if version != STATELESS_VERSION {
        return Err(Refusal {
            code: UNSUPPORTED_VERSION,
            message: format!("protocol version {version} is not supported without initialize"),
            data: Some(json!({"requested": version, "supported": [STATELESS_VERSION]})),
        });
    }
    if header("mcp-method") != Some(method) {
        return Err(mismatch("the Mcp-Method header"));
    }
    let named = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(field) = named {
        let name = params.get(field).and_then(Value::as_str);
        if header("mcp-name")
            .and_then(engine::headers::decode)
            .as_deref()
            != name
        {
            return Err(mismatch("the Mcp-Name header"));
        }
    }
    Ok(true)
}

/// A request's `Mcp-Param-*` headers, checked against the called tool's `x-mcp-header`
/// parameters ([`engine::headers`]).
fn param_headers(headers: &HeaderMap) -> ParamHeaders {
    let mut found = ParamHeaders::default();
    for (name, value) in headers {
        found.add(name.as_str(), value.to_str().ok());
    }
    found
}

/// The HTTP status of a 2026-07-28 answer: 400 for a header that does not mirror the body
/// (-32020) and a client capability missing (-32021), else 200.
fn status_of(answer: &Value) -> StatusCode {
    match answer["error"]["code"].as_i64() {
        Some(HEADER_MISMATCH | MISSING_CAPABILITY) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// What this server offers: tools, and task-augmented `tools/call` for the tools that wait
/// (parked, staged, async; their listing says `execution.taskSupport: "optional"`).
fn capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true},
        "prompts": {},
        "completions": {},
        "logging": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    })
}

/// `server/discover` (2026-07-28).
fn discover() -> Value {
    let mut capabilities = capabilities();
    // 2026-07-28 takes tasks as an extension, never in the v1 `tasks` slot.
    if let Some(c) = capabilities.as_object_mut() {
        c.remove("tasks");
    }
    capabilities["extensions"] = json!({tasks::EXTENSION: {}});
    json!({
        "supportedVersions": [STATELESS_VERSION],
        "capabilities": capabilities,
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "aperture", "version": env!("CARGO_PKG_VERSION")}},
    })
}

/// A stateless result: `resultType: complete`, and for `tools/list` no caching (each listing
/// grants a new lease, which a cached listing would not have).
fn complete(mut answer: Value, is_list: bool) -> Value {
    if let Some(result) = answer.get_mut("result").and_then(Value::as_object_mut) {
        // An `input_required` result says so itself.
        result
            .entry("resultType")
            .or_insert_with(|| json!("complete"));
        if is_list {
            result.insert("ttlMs".into(), json!(0));
            result.insert("cacheScope".into(), json!("private"));
        }
    }
    answer
}

async fn initialize(state: &AppState, principal: &Principal, id: &Value, params: &Value) -> Value {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .copied()
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    // A client of a tenant that binds its calls implicitly (where it lists by default) is not
    // told to echo: it could not, and need not.
    let environment = principal
        .own_environment()
        .unwrap_or(engine::environment::DEFAULT_ENVIRONMENT);
    let implicit = match aperture_core::settings::mcp::of(&state.store, &principal.tenant_id).await
    {
        Ok(settings) => settings.in_environment(environment).binding == Binding::Implicit,
        Err(e) => {
            tracing::error!(error = %e.into_app_error().message, "reading the MCP settings");
            false
        }
    };
    let instructions = match implicit {
        false => ECHO_INSTRUCTIONS,
        true => IMPLICIT_INSTRUCTIONS,
    };
    ok(
        id,
        json!({
            "protocolVersion": version,
            "capabilities": capabilities(),
            "serverInfo": {"name": "aperture", "version": env!("CARGO_PKG_VERSION")},
            "instructions": instructions
        }),
    )
}

/// What `initialize` tells a client that must echo its grant.
const ECHO_INSTRUCTIONS: &str = "Every tools/call must echo _meta.session_id, manifest_id, lease_id, tool_version and expected_schema_hash from the tools/list result.";

/// What it tells a client whose calls are bound to its latest listing.
const IMPLICIT_INSTRUCTIONS: &str = "Tools are governed by this gateway's policy: list them with tools/list and call them by the names listed; calls are bound to the latest listing.";

/// `tools/list`; `mcp_session`: the 2025-era connection listing (its `GET /mcp` stream hears
/// when this listing goes out of date).
async fn tools_list(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
    mcp_session: Option<&str>,
) -> Value {
    if let Some(refused) = lacks_run(principal, id) {
        return refused;
    }
    let page = state.config.tools_page_size;
    match params.get("cursor") {
        None | Some(Value::Null) => {}
        Some(Value::String(cursor)) => return next_page(state, principal, id, cursor, page).await,
        Some(_) => return error(id, INVALID_PARAMS, "cursor must be a string"),
    }
    let meta = params.get("_meta").cloned().unwrap_or(json!({}));
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
    let granted = match text("session_id") {
        Some(sid) => match exposure::find_session(&state.store, principal, &sid).await {
            Ok(Some(session)) => {
                let listing = exposure::Listing {
                    mcp: true,
                    mcp_session,
                    ..exposure::Listing::default()
                };
                exposure::list_grant(
                    &state.store,
                    &state.journal,
                    &state.validators,
                    principal,
                    session,
                    listing,
                )
                .await
            }
            Ok(None) => return error(id, INVALID_PARAMS, "unknown session_id"),
            Err(e) => Err(e),
        },
        None => {
            let request = CreateSessionRequest {
                environment: text("environment"),
                preset: text("preset"),
                entity: text("entity"),
            };
            // A plain listing: the principal's calls without an echo may bind to it where the
            // tenant binds implicitly.
            let listing = exposure::Listing {
                mcp: true,
                mcp_session,
                plain: true,
                for_implicit_call: false,
            };
            exposure::create(
                &state.store,
                &state.journal,
                &state.validators,
                principal,
                &request,
                listing,
            )
            .await
        }
    };
    match granted {
        Ok(grant) => match grant.list_page(0, page) {
            Some(first) => ok(id, first),
            None => error(id, INTERNAL_ERROR, "the listing could not be made"),
        },
        Err(e) => {
            let e = e.into_app_error();
            let code = if e.code == aperture_types::error::ErrorCode::Internal {
                INTERNAL_ERROR
            } else {
                INVALID_PARAMS
            };
            error(id, code, e.message)
        }
    }
}

/// `tools/list` with a `cursor`: the next page of the manifest the first page granted, granting
/// nothing (CONTRACT §4). A cursor that is not one, or names a manifest that is not the
/// caller's, is refused alike; so is one whose lease has ended (the client lists again).
async fn next_page(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    cursor: &str,
    page: usize,
) -> Value {
    let invalid = || error(id, INVALID_PARAMS, "invalid cursor");
    let Some((manifest_id, offset)) = exposure::parse_cursor(cursor) else {
        return invalid();
    };
    let grant = match exposure::granted(&state.store, principal, &manifest_id).await {
        Ok(Some(grant)) => grant,
        Ok(None) => return invalid(),
        Err(e) => {
            tracing::error!(error = %e.into_app_error().message, "reading a manifest to page through it");
            return error(id, INTERNAL_ERROR, "the listing could not be read");
        }
    };
    if grant.row.lease_expires_at <= aperture_core::clock::now_ms() {
        return error(
            id,
            INVALID_PARAMS,
            "the lease of this listing has ended: list again without a cursor",
        );
    }
    match grant.list_page(offset, page) {
        Some(next) => ok(id, next),
        None => invalid(),
    }
}

/// `tools/call`. A call decided on cached reads that turn out to be out of date when its
/// decision is journaled ([`ServiceError::StaleRead`]: nothing recorded, nothing run) is
/// authenticated and decided once more on reads confirmed by the store (`Err` when the token
/// no longer authenticates: 401).
async fn tools_call(
    state: &AppState,
    principal: &Principal,
    secret: &str,
    id: &Value,
    params: Value,
    mcp_session: Option<String>,
    streaming: Streaming,
) -> Result<Value, ()> {
    let lacks_run = |p: &Principal| lacks_run(p, id);
    if let Some(refused) = lacks_run(principal) {
        return Ok(refused);
    }
    let as_task = params.get("task").is_some();
    let stateless = params
        .get("_meta")
        .and_then(|m| m.get(META_VERSION))
        .is_some();
    // 2026-07-28: a client that declared the tasks extension takes a waiting call as a task.
    let as_task_2026 = tasks::declared(&params) && stateless;
    let missing = streaming.client.as_ref().map(|c| c.missing.clone());
    let mut call: ToolCall = match serde_json::from_value(params) {
        Ok(c) => c,
        Err(e) => {
            return Ok(error(
                id,
                INVALID_PARAMS,
                format!("invalid tools/call params: {e}"),
            ));
        }
    };
    // A call without an echo, where the tenant binds implicitly: bound to the principal's
    // newest plain listing (or a grant made for it), and its receipts say so.
    if let Err(e) = aperture_core::implicit::bind(
        &state.store,
        &state.journal,
        &state.validators,
        principal,
        mcp_session.as_deref(),
        &mut call,
    )
    .await
    {
        tracing::error!(error = %e.into_app_error().message, "binding a call without an echo");
        return Ok(error(id, INTERNAL_ERROR, "the call could not be bound"));
    }
    // Cancellable by the caller while it runs (`notifications/cancelled` for this id).
    let registered = state.in_flight.register(aperture_core::cancel::Key::new(
        &principal.tenant_id,
        &principal.caller_id(),
        mcp_session.as_deref(),
        id,
    ));
    let mut cx = state.call_context();
    cx.cancelled = Some(registered.cancelled.clone());
    cx.progress = streaming.progress;
    cx.client = streaming.client;
    cx.log = streaming.log;
    cx.param_headers = streaming.param_headers;
    cx.round = streaming.round;
    let first = streaming.continues;
    let once = async |principal: &Principal| match &first {
        Some(first) => calls::continue_round(&cx, principal, &call, first).await,
        None => calls::call(&cx, principal, None, &call).await,
    };
    let mut outcome = once(principal).await;
    let mut confirmed = None;
    if matches!(outcome, Err(ServiceError::StaleRead)) {
        let again = authenticate_bearer(&state.store, secret)
            .await
            .map_err(|_| ())?;
        if let Some(refused) = lacks_run(&again) {
            return Ok(refused);
        }
        outcome = once(&again).await;
        confirmed = Some(again);
    }
    let principal = confirmed.as_ref().unwrap_or(principal);
    // 2026-07-28: a call that failed after its upstream asked for what the client had not
    // declared is refused as needing that capability (-32021, HTTP 400).
    if stateless
        && let Some(required) = missing.and_then(|m| m.required())
        && outcome.as_ref().is_ok_and(failed)
    {
        return Ok(missing_capability(
            id,
            "the tool needs a client capability this request did not declare",
            required,
        ));
    }
    Ok(match outcome {
        Ok(result) if as_task_2026 => ok(
            id,
            tasks::created_2026(&state.store, principal, result).await,
        ),
        Ok(result) if as_task => ok(id, tasks::created(&state.store, principal, result).await),
        Ok(result) => ok(id, result),
        Err(ServiceError::HeaderMismatch(why)) => error(id, HEADER_MISMATCH, why),
        Err(e) => error(id, INTERNAL_ERROR, e.into_app_error().message),
    })
}

/// -32021 (2026-07-28): the request needs what it did not declare, `required` as
/// `ClientCapabilities`.
fn missing_capability(id: &Value, message: impl Into<String>, required: Value) -> Value {
    let mut answer = error(id, MISSING_CAPABILITY, message);
    answer["error"]["data"] = json!({"requiredCapabilities": required});
    answer
}

/// Whether a `tools/call` result is a failure (`isError`).
fn failed(result: &Value) -> bool {
    result.get("isError").and_then(Value::as_bool) == Some(true)
}

/// How many progress notifications may wait for a streamed call's log.
const PROGRESS_BUFFER: usize = 64;
/// How many of the upstream's requests may wait to be put on a call's stream.
const ASK_BUFFER: usize = 8;

/// What reaches a call's client while it runs: the upstream's progress, its requests and its
/// log messages.
#[derive(Default)]
struct Streaming {
    progress: Option<aperture_core::execution::ProgressSink>,
    client: Option<ClientRelay>,
    log: Option<aperture_core::execution::LogSink>,
    /// The request's `Mcp-Param-*` headers (2026-07-28 only).
    param_headers: Option<ParamHeaders>,
    /// A 2026-07-28 call from a client that can be asked ([`input`]): what its previous input
    /// round gathered.
    round: Option<aperture_core::relay::Round>,
    /// A retry of an upstream's input round: the first decision's receipt id (the call is
    /// decided again, [`calls::continue_round`]).
    continues: Option<String>,
}

/// Where a streamed call comes from: the client's MCP session (2025 eras), whether the
/// request is stateless (2026-07-28), and what the client declared it can answer and the
/// level it listens at.
struct Connected {
    mcp_session: Option<String>,
    stateless: bool,
    session: Session,
    param_headers: Option<ParamHeaders>,
}

/// Whether the client takes an SSE stream for an answer (`Accept` lists `text/event-stream`).
fn accepts_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// The caller's `_meta.progressToken` (a string or an integer), when it asked for progress.
fn progress_token(params: &Value) -> Option<&Value> {
    params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
}

/// `notifications/progress` for the caller's `token`.
fn progress_notification(token: &Value, p: &aperture_core::upstream::Progress) -> Value {
    let mut params = json!({"progressToken": token, "progress": p.progress});
    if let Some(total) = p.total {
        params["total"] = json!(total);
    }
    if let Some(message) = &p.message {
        params["message"] = json!(message);
    }
    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
}

/// `notifications/message` of an upstream's log message.
fn log_notification(log: &UpstreamLog) -> Value {
    let mut params = json!({"level": log.level.as_str(), "data": log.data});
    if let Some(logger) = &log.logger {
        params["logger"] = json!(logger);
    }
    json!({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
}

/// Ends a streamed call's log however its task ends: a task that ended without an answer (it
/// panicked) still ends the stream, with a JSON-RPC error.
struct CallStream {
    state: AppState,
    log: std::sync::Arc<streams::Log>,
    id: Value,
    answered: bool,
}

impl CallStream {
    fn answer(mut self, answer: &Value) {
        self.log.push(answer);
        self.answered = true;
    }
}

impl Drop for CallStream {
    fn drop(&mut self) {
        if !self.answered {
            self.log.push(&error(
                &self.id,
                INTERNAL_ERROR,
                "the call ended without an answer",
            ));
        }
        self.state.streams.finish(&self.log);
    }
}

/// `tools/call` from a client that takes a stream and asked for progress or can be asked for
/// input: answered as an SSE stream carrying the upstream's `notifications/progress` (for the
/// caller's `progressToken`) and the upstream's requests the call's rule lets through
/// ([`aperture_core::relay`]; the client posts its answers, [`answered`]), then the response. The call runs to its end whether or not the client keeps reading
/// (disconnecting is not cancelling: `notifications/cancelled` is); a client that lost the
/// connection resumes with `GET /mcp` and `Last-Event-ID`.
fn stream_call(
    state: &AppState,
    principal: Principal,
    secret: &str,
    id: Value,
    params: Value,
    connected: Connected,
) -> Response {
    let Connected {
        mcp_session,
        stateless,
        session,
        param_headers,
    } = connected;
    let abilities = session.abilities;
    let token = progress_token(&params).cloned().unwrap_or(Value::Null);
    let owner = streams::Owner {
        tenant_id: principal.tenant_id.clone(),
        actor_id: principal.actor_id.clone(),
        mcp_session: mcp_session.clone(),
    };
    let asker = asks::Owner {
        tenant_id: principal.tenant_id.clone(),
        principal: principal.principal_id().to_owned(),
        mcp_session: mcp_session.clone(),
    };
    let log = state.streams.open(streams::Kind::Call, owner);
    let reader = sse::respond(log.clone(), None, state.draining.subscribe());
    let stream = CallStream {
        state: state.clone(),
        log,
        id: id.clone(),
        answered: false,
    };
    let secret = secret.to_owned();
    tokio::spawn(async move {
        let (progress, mut received) = tokio::sync::mpsc::channel(PROGRESS_BUFFER);
        let (asks_tx, mut asks) = tokio::sync::mpsc::channel(ASK_BUFFER);
        let (logs_tx, mut logs) = tokio::sync::mpsc::channel(PROGRESS_BUFFER);
        // A 2026-07-28 client is always there to be told what it lacks (-32021).
        let client = (stateless || abilities.any()).then(|| ClientRelay::new(abilities, asks_tx));
        let state = stream.state.clone();
        let streaming = Streaming {
            progress: Some(progress),
            client,
            log: session
                .log_level
                .map(|level| LogSink { level, to: logs_tx }),
            param_headers,
            round: None,
            continues: None,
        };
        let call = tools_call(
            &state,
            &principal,
            &secret,
            &id,
            params,
            mcp_session,
            streaming,
        );
        tokio::pin!(call);
        // Requests on the stream awaiting their answers; forgotten when the call ends.
        let mut awaiting = Vec::new();
        let answer = loop {
            tokio::select! {
                biased;
                Some(p) = received.recv() => stream.log.push(&progress_notification(&token, &p)),
                Some(l) = logs.recv() => stream.log.push(&log_notification(&l)),
                Some(ask) = asks.recv() => {
                    let ask_id = aperture_core::ids::new_ordered_id("ask");
                    stream.log.push(&relay::request(&json!(ask_id), ask.method, ask.params));
                    awaiting.push(state.asks.register(ask_id, asker.clone(), ask.answer));
                }
                answer = &mut call => break answer,
            }
        };
        drop(awaiting);
        while let Ok(p) = received.try_recv() {
            stream.log.push(&progress_notification(&token, &p));
        }
        while let Ok(l) = logs.try_recv() {
            stream.log.push(&log_notification(&l));
        }
        let answer = answer.unwrap_or_else(|()| {
            error(
                &id,
                INVALID_REQUEST,
                "the bearer token no longer authenticates",
            )
        });
        stream.answer(&if stateless {
            complete(answer, false)
        } else {
            answer
        });
    });
    reader
}

/// `subscriptions/listen` (2026-07-28): an SSE stream that starts with
/// `notifications/subscriptions/acknowledged` (what is honored: `toolsListChanged`, and of
/// `resourceSubscriptions` the URIs the caller may read, each subscribed as
/// `resources/subscribe` would) and then carries `notifications/tools/list_changed` for the
/// caller's newest exposure sessions ([`listing`]) and `notifications/resources/updated` of
/// the honored URIs while the caller may still read them ([`aperture_core::live::resources`]),
/// each tagged with the request's id, until the client closes it.
async fn listen(
    state: &AppState,
    principal: &Principal,
    secret: &str,
    headers: &HeaderMap,
    id: Value,
    params: &Value,
) -> Response {
    if let Some(refused) = lacks_run(principal, &id) {
        return Json(refused).into_response();
    }
    if !accepts_stream(headers) {
        let answer = error(
            &id,
            INVALID_REQUEST,
            "subscriptions/listen is answered with a stream: Accept must list text/event-stream",
        );
        return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
    }
    let asked = params.get("notifications");
    let tools = asked
        .and_then(|n| n.get("toolsListChanged"))
        .and_then(Value::as_bool)
        == Some(true);
    let resources = match asked.and_then(|n| n.get("resourceSubscriptions")) {
        None | Some(Value::Null) => None,
        Some(Value::Array(uris))
            if uris.iter().all(Value::is_string)
                && uris.len() <= aperture_core::items::MAX_SUBSCRIPTIONS as usize =>
        {
            Some(uris.iter().filter_map(Value::as_str).collect::<Vec<_>>())
        }
        Some(_) => {
            let answer = error(
                &id,
                INVALID_PARAMS,
                format!(
                    "params.notifications.resourceSubscriptions must be a list of at most {} URIs",
                    aperture_core::items::MAX_SUBSCRIPTIONS
                ),
            );
            return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
        }
    };
    let mut honored = json!({});
    if tools {
        honored["toolsListChanged"] = json!(true);
    }
    let owner = streams::Owner {
        tenant_id: principal.tenant_id.clone(),
        actor_id: principal.actor_id.clone(),
        mcp_session: None,
    };
    let log = state.streams.open(streams::Kind::Listen, owner);
    if let Some(uris) = resources {
        let holder = aperture_core::items::listen_holder(log.id());
        let environment = items::environment(params);
        let mut subscribed = Vec::new();
        for uri in uris {
            let answer = aperture_core::items::subscribe(
                &state.store,
                &state.journal,
                &state.upstreams,
                principal,
                environment,
                uri,
                &holder,
            )
            .await;
            // What the caller may not read is left out of the acknowledgement, as a type the
            // server does not support would be.
            if let Ok(aperture_core::items::Answer::Found(_)) = answer {
                subscribed.push(uri);
            }
        }
        if !subscribed.is_empty() {
            honored["resourceSubscriptions"] = json!(subscribed);
        }
    }
    log.push(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {META_SUBSCRIPTION: id}, "notifications": honored}
    }));
    state.watchers.add(
        &state.streams,
        log.clone(),
        listing::Listener {
            subscription_id: Some(id),
            tools,
            secret: secret.to_owned(),
        },
    );
    sse::respond(log, None, state.draining.subscribe())
}

/// `GET /mcp` (2025 era): with `Mcp-Session-Id`, a stream of
/// `notifications/tools/list_changed` about the exposure sessions that connection listed
/// ([`listing`]); with `Last-Event-ID`, the stream it names resumed after that event (a
/// `tools/call` stream that cannot be resumed here is a 400: it is unknown, ended more than
/// [`streams::KEEP_FINISHED`] ago, not the caller's, or held by another node).
pub async fn listen_get(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(refused) = foreign_origin(&state.config, &headers) {
        return refused;
    }
    let Some(secret) = bearer(&headers) else {
        return unauthorized(&state.config);
    };
    let Ok(principal) = authenticate_bearer(&state.store, secret).await else {
        return unauthorized(&state.config);
    };
    let refuse = |status: StatusCode, message: &str| {
        (status, Json(error(&Value::Null, INVALID_REQUEST, message))).into_response()
    };
    if principal.require(scope::RUN).is_err() {
        return refuse(
            StatusCode::FORBIDDEN,
            "this token lacks agent_tool_exposure:run",
        );
    }
    if let Some(version) = headers.get("mcp-protocol-version") {
        let version = version.to_str().unwrap_or("");
        if !PROTOCOL_VERSIONS.contains(&version) && version != LEGACY_DEFAULT_VERSION {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("unsupported MCP-Protocol-Version {version:?}"),
            );
        }
    }
    if !accepts_stream(&headers) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "GET /mcp answers with a stream: Accept must list text/event-stream",
        );
    }
    let mcp_session = match mcp_session_id(&headers) {
        Ok(s) => s,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    if let Some(refused) =
        unknown_session(&state, &principal, mcp_session.as_deref(), &Value::Null).await
    {
        return refused;
    }
    let owner = streams::Owner {
        tenant_id: principal.tenant_id.clone(),
        actor_id: principal.actor_id.clone(),
        mcp_session,
    };
    if let Some(last) = headers.get("last-event-id") {
        if last.len() > calls::MAX_CLIENT_ID_BYTES {
            return refuse(StatusCode::BAD_REQUEST, "Last-Event-ID is over 256 bytes");
        }
        let last = last.to_str().unwrap_or_default();
        if let Some((log, after)) = state.streams.resume(last, &owner) {
            return sse::respond(log, Some(after), state.draining.subscribe());
        }
        if streams::Streams::names_call(last) {
            return refuse(
                StatusCode::BAD_REQUEST,
                "this stream cannot be resumed: it is unknown here, ended too long ago, or was opened by another caller or connection",
            );
        }
        // A listening stream this node does not hold: a new one, which compares every watched
        // listing at once (nothing missed goes unsaid).
    }
    if owner.mcp_session.is_none() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "GET /mcp opens the stream of an MCP connection: send the Mcp-Session-Id that initialize returned (2026-07-28 clients use subscriptions/listen)",
        );
    }
    let log = state.streams.open(streams::Kind::Listen, owner);
    state.watchers.add(
        &state.streams,
        log.clone(),
        listing::Listener {
            subscription_id: None,
            tools: true,
            secret: secret.to_owned(),
        },
    );
    sse::respond(log, None, state.draining.subscribe())
}
