//! The Connect mount of the AgentToolExposureService (CONTRACT §8): unary JSON at
//! `POST /agent_tool_exposure.v1.AgentToolExposureService/<Method>`.
//!
//! There is one implementation: each Connect method is the REST route it names in [`METHODS`],
//! and a Connect request is turned into that REST request — path parameters taken from the
//! message's fields, the rest as the JSON body (or, for reads, the query) — and served by the
//! very same router, with the same scope guard, validation and errors. The caller is
//! authenticated, and the method's scope (its route's) checked, before the body is read
//! ([`admit`]); a binary message is then held to the value budget of [`crate::proto::budget`]
//! before it is decoded. A success answers 200 with the REST response's JSON. Errors are
//! answered in the Connect protocol's shape ([`in_connect_shape`]): `{"code", "message",
//! "details"?}` with Connect's code names and HTTP statuses; a validation error's field paths
//! travel as a `google.rpc.BadRequest` detail.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tower::ServiceExt;

use aperture_types::error::{AppError, ErrorCode};

use super::Authenticated;
use crate::proto::proto_bytes;
use crate::reply::ApiError;
use crate::state::AppState;

/// The service's Connect path prefix.
pub const SERVICE: &str = "/agent_tool_exposure.v1.AgentToolExposureService";

/// Where a method's request message goes besides its path parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Nothing (the message holds only path parameters).
    None,
    /// Every other field, as the JSON body.
    Body,
    /// One field's value, as the JSON body (`PutPolicy`'s `policy`).
    Field(&'static str),
    /// Every other field, as query parameters (reads with filters).
    Query,
}

/// One Connect method and the REST route that implements it.
#[derive(Debug, Clone, Copy)]
pub struct ConnectMethod {
    /// Method name (`GetPolicy`).
    pub name: &'static str,
    /// REST method.
    pub method: &'static str,
    /// REST path below the REST prefix, with `{param}` placeholders.
    pub path: &'static str,
    /// For each placeholder, the message field that fills it.
    pub params: &'static [(&'static str, &'static str)],
    /// Where the rest of the message goes.
    pub payload: Payload,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
}

const fn m(
    name: &'static str,
    method: &'static str,
    path: &'static str,
    params: &'static [(&'static str, &'static str)],
    payload: Payload,
    summary: &'static str,
) -> ConnectMethod {
    ConnectMethod {
        name,
        method,
        path,
        params,
        payload,
        summary,
    }
}

const ID: &[(&str, &str)] = &[("id", "id")];

/// Every method of the service (the scope-matrix and OpenAPI tests check that this is exactly
/// the REST routes).
pub const METHODS: &[ConnectMethod] = &[
    m(
        "ListTools",
        "GET",
        "/tools",
        &[],
        Payload::None,
        "The tenant's tool catalog with descriptors.",
    ),
    m(
        "PutToolDescriptor",
        "PUT",
        "/tools/{name}",
        &[("name", "name")],
        Payload::Body,
        "Set a tool's security descriptor (journaled).",
    ),
    m(
        "AcceptToolChange",
        "POST",
        "/tools/{name}:accept",
        &[("name", "name")],
        Payload::Body,
        "Accept a tool's held change (optionally only if its held definition_hash is still the one given; journaled).",
    ),
    m(
        "KeepToolHeld",
        "POST",
        "/tools/{name}:keep-held",
        &[("name", "name")],
        Payload::Body,
        "Keep a tool's held change out of manifests without being asked again until it changes (journaled).",
    ),
    m(
        "ListCatalogItems",
        "GET",
        "/catalog/items",
        &[],
        Payload::None,
        "Every resource, resource template and prompt the tenant's upstreams offer, held ones with their triage.",
    ),
    m(
        "AcceptItemChange",
        "POST",
        "/catalog/items:accept",
        &[],
        Payload::Body,
        "Accept a resource's, template's or prompt's held change (optionally only if its held definition_hash is still the one given; journaled).",
    ),
    m(
        "KeepItemHeld",
        "POST",
        "/catalog/items:keep-held",
        &[],
        Payload::Body,
        "Keep a resource's, template's or prompt's held change out of listings and reads without being asked again until it changes (journaled).",
    ),
    m(
        "GetDriftSettings",
        "GET",
        "/catalog/drift",
        &[],
        Payload::None,
        "The tenant's drift triage: accept or hold, per class of change.",
    ),
    m(
        "PutDriftSettings",
        "PUT",
        "/catalog/drift",
        &[],
        Payload::Body,
        "Replace the tenant's drift triage (classes left out get their default; journaled).",
    ),
    m(
        "GetMcpSettings",
        "GET",
        "/settings/mcp",
        &[],
        Payload::None,
        "How /mcp binds calls of clients that cannot echo, and which names it lists tools under.",
    ),
    m(
        "PutMcpSettings",
        "PUT",
        "/settings/mcp",
        &[],
        Payload::Body,
        "Replace the tenant's MCP settings (fields left out get their default; journaled).",
    ),
    m(
        "ListUpstreams",
        "GET",
        "/upstreams",
        &[],
        Payload::None,
        "Registered upstream MCP servers.",
    ),
    m(
        "RegisterUpstream",
        "POST",
        "/upstreams",
        &[],
        Payload::Body,
        "Register an upstream MCP server and import its tools.",
    ),
    m(
        "SyncUpstream",
        "POST",
        "/upstreams/{id}:sync",
        ID,
        Payload::None,
        "Re-import an upstream's tools, detecting changed definitions.",
    ),
    m(
        "SetUpstreamCredentials",
        "PUT",
        "/upstreams/{id}/credentials",
        ID,
        Payload::Body,
        "Replace an upstream's credentials (headers, or a stdio environment); grants pinned to the old ones become target_drift.",
    ),
    m(
        "DeleteUpstream",
        "DELETE",
        "/upstreams/{id}",
        ID,
        Payload::None,
        "Remove an upstream registration and its tools.",
    ),
    m(
        "ListWebhooks",
        "GET",
        "/webhooks",
        &[],
        Payload::None,
        "The tenant's webhooks (never their secrets), with delivery counts.",
    ),
    m(
        "CreateWebhook",
        "POST",
        "/webhooks",
        &[],
        Payload::Body,
        "Register a webhook for invocation events; its whsec_ signing secret is returned this once.",
    ),
    m(
        "DeleteWebhook",
        "DELETE",
        "/webhooks/{id}",
        ID,
        Payload::None,
        "Delete a webhook and its pending deliveries (journaled).",
    ),
    m(
        "ListWebhookDeliveries",
        "GET",
        "/webhooks/{id}/deliveries",
        ID,
        Payload::Query,
        "A webhook's latest deliveries, newest first, each with its attempts.",
    ),
    m(
        "ListPolicies",
        "GET",
        "/policies",
        &[],
        Payload::None,
        "Policies with their latest versions and activations.",
    ),
    m(
        "GetPolicy",
        "GET",
        "/policies/{id}",
        ID,
        Payload::None,
        "A policy's latest version.",
    ),
    m(
        "ListPolicyVersions",
        "GET",
        "/policies/{id}/versions",
        ID,
        Payload::None,
        "Every version of a policy.",
    ),
    m(
        "PutPolicy",
        "PUT",
        "/policies/{id}",
        ID,
        Payload::Field("policy"),
        "Store a new immutable version (422 with field paths when invalid).",
    ),
    m(
        "ActivatePolicy",
        "POST",
        "/policies/{id}:activate",
        ID,
        Payload::Body,
        "Make a policy the tenant's policy for new sessions of an environment.",
    ),
    m(
        "ValidatePolicy",
        "POST",
        "/policies:validate",
        &[],
        Payload::Field("policy"),
        "Validate a policy document without storing it.",
    ),
    m(
        "PreviewExposure",
        "POST",
        "/policies:preview",
        &[],
        Payload::Body,
        "What a draft policy would expose for a context.",
    ),
    m(
        "ReplayPolicy",
        "POST",
        "/policies:replay",
        &[],
        Payload::Body,
        "What a draft policy would have changed over the tenant's recorded calls of a window (default the last 7 days): per tool and actor, calls moving from one mode to another, with example receipts; calls it cannot replay are counted.",
    ),
    m(
        "ListSessions",
        "GET",
        "/sessions",
        &[],
        Payload::Query,
        "Exposure sessions, newest first.",
    ),
    m(
        "CreateSession",
        "POST",
        "/sessions",
        &[],
        Payload::Body,
        "Open an exposure session and grant its first manifest.",
    ),
    m(
        "GetSession",
        "GET",
        "/sessions/{id}",
        ID,
        Payload::None,
        "A session with its current manifest and lease.",
    ),
    m(
        "GetManifest",
        "GET",
        "/sessions/{id}/manifest",
        ID,
        Payload::None,
        "A session's signed manifest document.",
    ),
    m(
        "GetEvidence",
        "GET",
        "/sessions/{id}/evidence",
        ID,
        Payload::Query,
        "The session's evidence bundle: manifests, receipts, inclusion proofs, checkpoint, keys.",
    ),
    m(
        "RevokeSession",
        "POST",
        "/sessions/{id}:revoke",
        ID,
        Payload::None,
        "Revoke a session: its calls are refused from now on.",
    ),
    m(
        "CallTool",
        "POST",
        "/sessions/{id}/calls",
        &[("id", "session_id")],
        Payload::Body,
        "Call a tool under a session (the fields of MCP tools/call).",
    ),
    m(
        "ForkSession",
        "POST",
        "/sessions/{id}/forks",
        ID,
        Payload::Body,
        "Fork a session, optionally narrowing execution with fork_tools.",
    ),
    m(
        "CreateAgent",
        "POST",
        "/agents",
        &[],
        Payload::Body,
        "Create a hosted agent with its own exposure session.",
    ),
    m(
        "ListAgents",
        "GET",
        "/agents",
        &[],
        Payload::None,
        "The tenant's hosted agents, newest first.",
    ),
    m(
        "GetAgent",
        "GET",
        "/agents/{id}",
        ID,
        Payload::None,
        "A hosted agent with its transcript, turns, forks and invocations.",
    ),
    m(
        "RunTurn",
        "POST",
        "/agents/{id}/turns",
        ID,
        Payload::Body,
        "Run one turn of a hosted agent; the answer is the turn's events (REST: streamed as server-sent events with Accept: text/event-stream).",
    ),
    m(
        "ListInvocations",
        "GET",
        "/invocations",
        &[],
        Payload::Query,
        "Invocations (parked, staged, async, confirmed, finished), newest first.",
    ),
    m(
        "WatchInvocations",
        "GET",
        "/invocations/events",
        &[],
        Payload::Query,
        "The tenant's invocation events from every node: a long poll of up to wait_seconds (REST: a server-sent event stream with Accept: text/event-stream).",
    ),
    m(
        "GetInvocation",
        "GET",
        "/invocations/{id}",
        ID,
        Payload::None,
        "An invocation with its bound arguments and result.",
    ),
    m(
        "Approve",
        "POST",
        "/invocations/{id}:approve",
        ID,
        Payload::Body,
        "Release a parked call, echoing the args_hash shown.",
    ),
    m(
        "Apply",
        "POST",
        "/invocations/{id}:apply",
        ID,
        Payload::Body,
        "Apply a staged change, echoing the args_hash shown.",
    ),
    m(
        "Reject",
        "POST",
        "/invocations/{id}:reject",
        ID,
        Payload::Body,
        "Reject a parked call or staged change (stored as a tool result).",
    ),
    m(
        "Cancel",
        "POST",
        "/invocations/{id}:cancel",
        ID,
        Payload::Body,
        "Cancel a waiting or queued invocation that has not started (the caller's own, or any as an approver): a cancelled execution receipt and a stored result; nothing runs.",
    ),
    m(
        "ListCheckpoints",
        "GET",
        "/journal/checkpoints",
        &[],
        Payload::Query,
        "The journal's signed checkpoints, newest first, with their cosignatures.",
    ),
    m(
        "AddCosignature",
        "POST",
        "/journal/checkpoints/cosignatures",
        &[],
        Payload::Body,
        "A registered witness's cosignature of a checkpoint (the note carrying it).",
    ),
    m(
        "GetInclusionProof",
        "GET",
        "/journal/proofs/inclusion",
        &[],
        Payload::Query,
        "The Merkle inclusion proof of record seq in the tree of tree_size records.",
    ),
    m(
        "GetConsistencyProof",
        "GET",
        "/journal/proofs/consistency",
        &[],
        Payload::Query,
        "The Merkle consistency proof between two tree sizes.",
    ),
    m(
        "ListWitnesses",
        "GET",
        "/journal/witnesses",
        &[],
        Payload::None,
        "The witnesses registered to cosign checkpoints.",
    ),
    m(
        "CreateWitness",
        "POST",
        "/journal/witnesses",
        &[],
        Payload::Body,
        "Register a witness by name and Ed25519 cosigner key.",
    ),
    m(
        "DeleteWitness",
        "DELETE",
        "/journal/witnesses/{name}",
        &[("name", "name")],
        Payload::None,
        "Remove a witness.",
    ),
    m(
        "ListReceipts",
        "GET",
        "/receipts",
        &[],
        Payload::Query,
        "Receipts, newest first, filtered, with a cursor.",
    ),
    m(
        "GetReceipt",
        "GET",
        "/receipts/{id}",
        ID,
        Payload::None,
        "A receipt with its disclosures and chain position.",
    ),
    m(
        "ListTokens",
        "GET",
        "/tokens",
        &[],
        Payload::None,
        "The tenant's API tokens (never their secrets).",
    ),
    m(
        "CreateToken",
        "POST",
        "/tokens",
        &[],
        Payload::Body,
        "Create an API token; its secret is shown once.",
    ),
    m(
        "RevokeToken",
        "DELETE",
        "/tokens/{id}",
        ID,
        Payload::None,
        "Revoke an API token.",
    ),
    m(
        "ListUsers",
        "GET",
        "/users",
        &[],
        Payload::None,
        "The tenant's dashboard users.",
    ),
    m(
        "CreateUser",
        "POST",
        "/users",
        &[],
        Payload::Body,
        "Create a dashboard user.",
    ),
    m(
        "UpdateUserScopes",
        "PUT",
        "/users/{username}/scopes",
        &[("username", "username")],
        Payload::Body,
        "Replace a user's scopes.",
    ),
];

/// The method called `name`, if the service has one.
pub fn method(name: &str) -> Option<&'static ConnectMethod> {
    METHODS.iter().find(|m| m.name == name)
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError(AppError::new(ErrorCode::BadRequest, message))
}

/// Percent-encodes one path segment.
fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The REST request for `call` with message `message`: method, path and query, body.
fn rest_request(
    call: &ConnectMethod,
    mut message: Map<String, Value>,
) -> Result<(Method, String, Option<Value>), ApiError> {
    let mut path = call.path.to_owned();
    for (placeholder, field) in call.params {
        let value = match message.remove(*field) {
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(_) => {
                return Err(ApiError(AppError::invalid_field(
                    *field,
                    "a non-empty string",
                )));
            }
            None => return Err(ApiError(AppError::invalid_field(*field, "required"))),
        };
        path = path.replace(&format!("{{{placeholder}}}"), &segment(&value));
    }
    let body = match call.payload {
        Payload::None => {
            if let Some(extra) = message.keys().next() {
                return Err(ApiError(AppError::invalid_field(
                    extra.clone(),
                    format!("{} takes no such field", call.name),
                )));
            }
            None
        }
        Payload::Body => Some(Value::Object(message)),
        Payload::Field(field) => {
            let value = message
                .remove(field)
                .ok_or_else(|| ApiError(AppError::invalid_field(field, "required")))?;
            if let Some(extra) = message.keys().next() {
                return Err(ApiError(AppError::invalid_field(
                    extra.clone(),
                    format!("{} takes no such field", call.name),
                )));
            }
            Some(value)
        }
        Payload::Query => {
            let mut pairs = Vec::new();
            for (key, value) in message {
                let text = match value {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    Value::Null => continue,
                    _ => {
                        return Err(ApiError(AppError::invalid_field(
                            key,
                            "a string, number or boolean",
                        )));
                    }
                };
                pairs.push((key, text));
            }
            if !pairs.is_empty() {
                let query =
                    serde_urlencoded::to_string(&pairs).map_err(|e| bad(format!("query: {e}")))?;
                path = format!("{path}?{query}");
            }
            None
        }
    };
    let method = Method::from_bytes(call.method.as_bytes()).unwrap_or(Method::POST);
    Ok((method, path, body))
}

/// What the Connect mount serves with: the REST router every method goes through, and the
/// state callers are authenticated against first.
#[derive(Clone)]
struct Mount {
    rest: axum::Router,
    state: AppState,
}

/// The Connect mount, serving every method through the REST router.
pub fn router(state: AppState) -> axum::Router {
    let mount = Mount {
        rest: super::router(state.clone()),
        state,
    };
    axum::Router::new()
        .route("/{method}", axum::routing::post(handle))
        .fallback(|| async {
            ApiError(AppError::new(
                ErrorCode::NotFound,
                "Connect methods are POST /agent_tool_exposure.v1.AgentToolExposureService/<Method>",
            ))
        })
        .with_state(mount)
        .layer(axum::middleware::from_fn(in_connect_shape))
}

/// Authenticates the caller of `call` and checks that it holds a scope of the REST route that
/// serves the method (the route table's, [`super::scopes_of`]), before a byte of the request's
/// message is read; on success the request is marked [`Authenticated`]. The Connect mount (both
/// formats) and the gRPC service call this first: an unauthenticated or unentitled request is
/// never decoded. `unauthenticated` (401) or `permission_denied` (403) otherwise.
pub(crate) async fn admit<B>(
    state: &AppState,
    call: &ConnectMethod,
    request: &mut http::Request<B>,
) -> Result<(), AppError> {
    let Some(scopes) = super::scopes_of(call.method, call.path) else {
        // The OpenAPI test checks that every method is a route: a bug, refused.
        tracing::error!(
            method = call.name,
            "a Connect method without its REST route"
        );
        return Err(AppError::internal());
    };
    let principal = super::authenticate(state, request.headers()).await?;
    principal.require_any(scopes)?;
    request.extensions_mut().insert(Authenticated(principal));
    Ok(())
}

/// The Connect code of one of the contract's error codes.
pub fn connect_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::BadRequest | ErrorCode::InvalidArgument => "invalid_argument",
        ErrorCode::Unauthenticated => "unauthenticated",
        ErrorCode::PermissionDenied => "permission_denied",
        ErrorCode::NotFound => "not_found",
        // A request that conflicts with the state it found (a version, a lease): retry after
        // reading again.
        ErrorCode::Conflict => "aborted",
        ErrorCode::PayloadTooLarge | ErrorCode::TooManyRequests => "resource_exhausted",
        ErrorCode::Unavailable => "unavailable",
        ErrorCode::Internal => "internal",
    }
}

/// The HTTP status the Connect protocol gives a code.
pub fn connect_status(code: &str) -> StatusCode {
    match code {
        "canceled" => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
        "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
        "not_found" => StatusCode::NOT_FOUND,
        "already_exists" | "aborted" => StatusCode::CONFLICT,
        "permission_denied" => StatusCode::FORBIDDEN,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        "unimplemented" => StatusCode::NOT_IMPLEMENTED,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error in the Connect protocol's shape; `unauthenticated` with the REST API's challenge.
pub fn connect_error(
    code: &str,
    message: &str,
    fields: &[aperture_types::error::FieldError],
) -> Response {
    let mut body = serde_json::json!({"code": code, "message": message});
    if !fields.is_empty() {
        body["details"] = serde_json::json!([bad_request_detail(fields)]);
    }
    let mut response = (connect_status(code), axum::Json(body)).into_response();
    if code == "unauthenticated" {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(crate::reply::BEARER_CHALLENGE),
        );
    }
    response
}

/// A `google.rpc.BadRequest` error detail: `{"type", "value"}` with the message's protobuf
/// bytes in unpadded standard base64, as Connect carries details, and `debug` with the same
/// in JSON for people reading it.
fn bad_request_detail(fields: &[aperture_types::error::FieldError]) -> Value {
    use base64::Engine as _;
    let message = bad_request_bytes(fields);
    let debug: Vec<Value> = fields
        .iter()
        .map(|f| serde_json::json!({"field": f.path, "description": f.message}))
        .collect();
    serde_json::json!({
        "type": "google.rpc.BadRequest",
        "value": base64::engine::general_purpose::STANDARD_NO_PAD.encode(&message),
        "debug": {"fieldViolations": debug},
    })
}

/// A `google.rpc.BadRequest` message, encoded: one field violation per field error.
pub(crate) fn bad_request_bytes(fields: &[aperture_types::error::FieldError]) -> Vec<u8> {
    // message FieldViolation { string field = 1; string description = 2; }
    // message BadRequest { repeated FieldViolation field_violations = 1; }
    let mut message = Vec::new();
    for f in fields {
        let mut violation = Vec::new();
        proto_bytes(&mut violation, 1, f.path.as_bytes());
        proto_bytes(&mut violation, 2, f.message.as_bytes());
        proto_bytes(&mut message, 1, &violation);
    }
    message
}

/// Middleware of the Connect mount: an error answer of the REST routes (or of the mount itself)
/// becomes the same error in the Connect protocol's shape; successes pass untouched.
pub async fn in_connect_shape(request: Request, next: axum::middleware::Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if status.is_success() {
        return response;
    }
    let (_, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1024 * 1024)
        .await
        .unwrap_or_default();
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: AppError,
    }
    if let Ok(Envelope { error }) = serde_json::from_slice::<Envelope>(&bytes) {
        let fields = error.details.map(|d| d.fields).unwrap_or_default();
        return connect_error(connect_code(error.code), &error.message, &fields);
    }
    // Answers that were never the API's JSON (the router's own 405, say).
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            "unimplemented",
            "Connect unary calls of this service are POST requests",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ("invalid_argument", "send Content-Type: application/json")
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("resource_exhausted", "the request is too large"),
        StatusCode::UNAUTHORIZED => ("unauthenticated", "a bearer token is required"),
        StatusCode::NOT_FOUND => ("not_found", "no such method"),
        s if s.is_client_error() => ("invalid_argument", "the request could not be read"),
        _ => ("internal", "internal error"),
    };
    let mut answer = connect_error(code, message, &[]);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // Keep the method error's status: a Connect client sent the wrong HTTP method.
        *answer.status_mut() = status;
    }
    answer
}

/// `POST /agent_tool_exposure.v1.AgentToolExposureService/{method}`.
async fn handle(
    State(mount): State<Mount>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    match serve(mount, &name, request).await {
        Ok(r) | Err(r) => r,
    }
}

async fn serve(mount: Mount, name: &str, mut request: Request) -> Result<Response, Response> {
    let Some(call) = method(name) else {
        return Err(ApiError(AppError::not_found("method")).into_response());
    };
    if let Err(e) = admit(&mount.state, call, &mut request).await {
        return Err(drained(request.into_body(), ApiError(e).into_response()).await);
    }
    let media = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase());
    // Unary Connect: JSON, or binary protobuf messages of the service's .proto.
    let binary = match media.as_deref() {
        Some("application/json") => false,
        Some("application/proto") => true,
        _ => {
            return Err(bad(
                "Connect unary: send Content-Type: application/json or application/proto",
            )
            .into_response());
        }
    };
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
    let caller = request.extensions_mut().remove::<Authenticated>();
    let bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .map_err(|e| bad(format!("reading the body: {e}")).into_response())?;
    let mut message = if binary {
        crate::proto::proto_request_as_json(call.name, bytes)
            .map_err(|e| ApiError(e).into_response())?
    } else if bytes.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(bad("the request message must be a JSON object").into_response()),
            Err(e) => return Err(bad(format!("malformed JSON: {e}")).into_response()),
        }
    };
    // Clients generated from the .proto write 64-bit integers as strings.
    crate::proto::integers_as_numbers(call.name, &mut message);
    let answer = call_rest(mount.rest, call, message, authorization, caller).await?;
    if !binary || !answer.status().is_success() {
        // Errors are JSON in both formats (the Connect protocol's error shape).
        return Ok(answer);
    }
    let (mut parts, body) = answer.into_parts();
    let json = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| bad(format!("reading the answer: {e}")).into_response())?;
    let encoded = crate::proto::json_answer_as_proto(call.name, &json)
        .map_err(|e| ApiError(AppError::new(ErrorCode::Internal, e)).into_response())?;
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/proto"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, Body::from(encoded)))
}

/// `refusal`, once `body` has been read to its end and dropped chunk by chunk: nothing of the
/// message is kept or decoded, and a client still sending it hears the refusal (a connection
/// closed under an unread body can lose the answer).
async fn drained(mut body: Body, refusal: Response) -> Response {
    use http_body_util::BodyExt as _;
    while let Some(Ok(_)) = body.frame().await {}
    refusal
}

/// Serves `call` with `message` through `rest` (the REST router) as the caller that
/// `authorization` names (and [`admit`] authenticated, when `caller` is given): the REST answer,
/// a success with status 200 whatever REST said (201 Created); an error as the REST API answers
/// it (the Connect mount reshapes it, the gRPC service maps it to a status).
pub(crate) async fn call_rest(
    rest: axum::Router,
    call: &ConnectMethod,
    message: Map<String, Value>,
    authorization: Option<HeaderValue>,
    caller: Option<Authenticated>,
) -> Result<Response, Response> {
    let (method, uri, body) = rest_request(call, message).map_err(IntoResponse::into_response)?;
    let mut inner = Request::builder().method(method).uri(&uri);
    if let Some(auth) = authorization {
        // Some routes read it themselves (a stream asks again whether its caller still may).
        inner = inner.header(header::AUTHORIZATION, auth);
    }
    if let Some(caller) = caller {
        inner = inner.extension(caller);
    }
    let inner = match body {
        Some(b) => inner
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(Body::from(b.to_string())),
        None => inner.body(Body::empty()),
    }
    .map_err(|e| bad(format!("request: {e}")).into_response())?;
    let response = rest
        .oneshot(inner)
        .await
        .unwrap_or_else(|never| match never {});
    if response.status().is_success() && response.status() != StatusCode::OK {
        // Connect answers a unary success with 200, whatever REST said (201 Created).
        let (mut parts, body) = response.into_parts();
        parts.status = StatusCode::OK;
        return Ok(Response::from_parts(parts, body));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_travel_as_a_google_rpc_bad_request() {
        let detail = bad_request_detail(&[aperture_types::error::FieldError {
            path: "rules[0].mode".into(),
            message: "bad".into(),
        }]);
        assert_eq!(detail["type"], "google.rpc.BadRequest");
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(detail["value"].as_str().unwrap())
            .unwrap();
        // field_violations (1, length 20) { field (1, 13) "rules[0].mode", description (2, 3) "bad" }
        let mut expected = vec![0x0a, 20, 0x0a, 13];
        expected.extend_from_slice(b"rules[0].mode");
        expected.extend_from_slice(&[0x12, 3]);
        expected.extend_from_slice(b"bad");
        assert_eq!(bytes, expected);
        let mut long = Vec::new();
        crate::proto::proto_varint(&mut long, 300);
        assert_eq!(long, [0xac, 0x02]);
    }

    #[test]
    fn every_code_has_the_connect_status() {
        for (code, status) in [
            (ErrorCode::BadRequest, 400),
            (ErrorCode::InvalidArgument, 400),
            (ErrorCode::Unauthenticated, 401),
            (ErrorCode::PermissionDenied, 403),
            (ErrorCode::NotFound, 404),
            (ErrorCode::Conflict, 409),
            (ErrorCode::PayloadTooLarge, 429),
            (ErrorCode::TooManyRequests, 429),
            (ErrorCode::Unavailable, 503),
            (ErrorCode::Internal, 500),
        ] {
            assert_eq!(
                connect_status(connect_code(code)).as_u16(),
                status,
                "{code:?}"
            );
        }
    }

    #[test]
    fn every_method_is_admitted_with_the_scopes_of_its_route() {
        for call in METHODS {
            let scopes = super::super::scopes_of(call.method, call.path);
            assert!(scopes.is_some_and(|s| !s.is_empty()), "{}", call.name);
        }
        let scopes = |name| {
            let call = method(name).unwrap();
            super::super::scopes_of(call.method, call.path).unwrap()
        };
        assert_eq!(scopes("CreateToken"), [engine::scope::ADMIN]);
        assert_eq!(scopes("ValidatePolicy"), [engine::scope::READ]);
        assert_eq!(scopes("GetPolicy"), [engine::scope::READ]);
        assert_eq!(scopes("PutPolicy"), [engine::scope::WRITE]);
        assert_eq!(
            scopes("Cancel"),
            [engine::scope::RUN, engine::scope::APPROVE]
        );
    }

    #[test]
    fn messages_become_rest_requests() {
        let call = method("CallTool").unwrap();
        let message = serde_json::json!({"session_id": "ses_1", "name": "t", "arguments": {}});
        let (m, path, body) = rest_request(call, message.as_object().unwrap().clone()).unwrap();
        assert_eq!(m, Method::POST);
        assert_eq!(path, "/sessions/ses_1/calls");
        assert_eq!(
            body.unwrap(),
            serde_json::json!({"name": "t", "arguments": {}})
        );

        let call = method("ListReceipts").unwrap();
        let message = serde_json::json!({"decision": "deny", "limit": 5, "tool": "a b"});
        let (m, path, body) = rest_request(call, message.as_object().unwrap().clone()).unwrap();
        assert_eq!(m, Method::GET);
        assert_eq!(path, "/receipts?decision=deny&limit=5&tool=a+b");
        assert!(body.is_none());

        let call = method("PutPolicy").unwrap();
        let message = serde_json::json!({"id": "p/../x", "policy": {"rules": []}});
        let (_, path, body) = rest_request(call, message.as_object().unwrap().clone()).unwrap();
        assert_eq!(
            path, "/policies/p%2F..%2Fx",
            "a field cannot reach another route"
        );
        assert_eq!(body.unwrap(), serde_json::json!({"rules": []}));

        let call = method("GetPolicy").unwrap();
        assert!(rest_request(call, Map::new()).is_err(), "id is required");
        let message = serde_json::json!({"id": "p", "extra": 1});
        assert!(rest_request(call, message.as_object().unwrap().clone()).is_err());
    }
}
