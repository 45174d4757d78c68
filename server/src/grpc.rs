//! The AgentToolExposureService over gRPC, on the same listener as everything else: a request
//! whose `content-type` is `application/grpc…` goes to [`router`] (tonic), every other to the
//! REST, Connect, MCP and dashboard routes.
//!
//! One implementation, as for Connect: the messages of `proto/agent_tool_exposure/v1/
//! service.proto` are read through its descriptors (compiled into the binary by `build.rs`)
//! into JSON with the contract's field names, served by the Connect method table
//! ([`crate::api::connect::METHODS`]) through the REST router — the same scope guard,
//! validation and errors — and the JSON answer is written back as the method's response
//! message. The bearer token travels as the `authorization` metadata, and is checked, with the
//! method's scope, before the message is read ([`connect::admit`]); a message is then walked
//! against its descriptor and refused over [`budget::MAX_VALUES`] values before it is decoded.
//! Errors are gRPC statuses mapped from the service's error codes; field paths of a validation
//! error travel as a `google.rpc.BadRequest` in `grpc-status-details-bin`. Server reflection
//! (v1 and v1alpha) describes the service.

pub mod budget;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use bytes::Buf;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor};
use serde_json::{Map, Value};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

use app::error::{AppError, ErrorCode};

use crate::api::Authenticated;
use crate::api::connect::{self, ConnectMethod};
use crate::state::AppState;

/// The encoded `FileDescriptorSet` of the service's `.proto` (and what it imports).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/agent_tool_exposure.bin"));

/// The service's full name.
pub const SERVICE_NAME: &str = "agent_tool_exposure.v1.AgentToolExposureService";

/// The `.proto`'s descriptors.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // Compiled by build.rs from the same file: decoding it cannot fail but by a build bug.
        DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .unwrap_or_else(|e| panic!("the compiled .proto does not decode: {e}"))
    })
}

/// Whether a request is gRPC (`content-type: application/grpc`, `…+proto`, `…;…`).
pub fn is_grpc(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// The gRPC router: the service and server reflection. Every method is served through the REST
/// router; a request message over `max_message` bytes (the REST body limit) is refused with
/// tonic's `out_of_range`, before it is read, and one that has not arrived within `body_read`
/// (the REST body deadline, [`crate::deadline`]) with `deadline_exceeded`. Reflection is a
/// stream, which stays open as long as its client keeps it.
pub fn router(state: AppState, max_message: usize, body_read: Duration) -> axum::Router {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1();
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1alpha();
    let service = Service {
        rest: crate::api::router(state.clone()),
        state,
        max_message,
        body_read,
    };
    let mut routes = tonic::service::Routes::new(service);
    match (reflection_v1, reflection_v1alpha) {
        (Ok(v1), Ok(v1alpha)) => routes = routes.add_service(v1).add_service(v1alpha),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "gRPC server reflection is off: the descriptors do not load");
        }
    }
    routes.prepare().into_axum_router()
}

/// The service: any method of the `.proto`, served through the REST router.
#[derive(Clone)]
struct Service {
    rest: axum::Router,
    state: AppState,
    max_message: usize,
    body_read: Duration,
}

impl tonic::server::NamedService for Service {
    const NAME: &'static str = SERVICE_NAME;
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Service {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let rest = self.rest.clone();
        let state = self.state.clone();
        let max_message = self.max_message;
        let body_read = self.body_read;
        Box::pin(async move {
            let name = request
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            let found = descriptor_pool()
                .get_service_by_name(SERVICE_NAME)
                .and_then(|s| s.methods().find(|m| m.name() == name))
                .zip(connect::method(&name));
            let Some((descriptor, call)) = found else {
                let status = Status::unimplemented(format!("no method {name}"));
                return Ok(status.into_http());
            };
            let (parts, body) = request.into_parts();
            let (body, expired) = crate::deadline::DeadlineBody::new(body, body_read);
            let mut request = http::Request::from_parts(parts, tonic::body::Body::new(body));
            if let Err(e) = connect::admit(&state, call, &mut request).await {
                return Ok(status_from(e).into_http());
            }
            let codec = DynamicCodec {
                input: descriptor.input(),
            };
            let mut grpc = tonic::server::Grpc::new(codec).max_decoding_message_size(max_message);
            let decoded = Arc::new(AtomicBool::new(false));
            let answer = grpc
                .unary(
                    Unary {
                        rest,
                        call,
                        descriptor,
                        decoded: decoded.clone(),
                    },
                    request,
                )
                .await;
            if expired.passed() {
                let late = crate::deadline::BodyTimedOut(body_read);
                return Ok(Status::deadline_exceeded(late.to_string()).into_http());
            }
            if decoded.load(Ordering::Acquire) {
                return Ok(answer);
            }
            Ok(malformed_as_invalid(answer))
        })
    }
}

/// An answer given before the request message decoded: tonic reads the frames, and answers
/// one with the compressed flag and no `grpc-encoding` (nothing is compressed here), a flag
/// other than 0 and 1, a frame cut short, or no message at all, with `internal`. These are the
/// client's mistakes, and said so: `invalid_argument`, the message kept.
fn malformed_as_invalid(
    answer: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    match answer.extensions().get::<Status>() {
        Some(status) if status.code() == Code::Internal => Status::invalid_argument(format!(
            "the request is not one well-formed gRPC message: {}",
            status.message()
        ))
        .into_http(),
        _ => answer,
    }
}

/// Encodes and decodes a method's messages through their descriptors.
struct DynamicCodec {
    input: MessageDescriptor,
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> DynamicEncoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> DynamicDecoder {
        DynamicDecoder(self.input.clone())
    }
}

struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        prost::Message::encode(&item, dst)
            .map_err(|e| Status::internal(format!("encoding the answer: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

struct DynamicDecoder(MessageDescriptor);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        decode_request(self.0.clone(), bytes)
            .map(Some)
            .map_err(status_from)
    }
}

/// One call of a method.
struct Unary {
    rest: axum::Router,
    call: &'static ConnectMethod,
    descriptor: MethodDescriptor,
    /// Set when the request message has decoded (this is called): what fails from here on is
    /// the call's, not the request's framing.
    decoded: Arc<AtomicBool>,
}

impl tonic::server::UnaryService<DynamicMessage> for Unary {
    type Response = DynamicMessage;
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<tonic::Response<DynamicMessage>, Status>>
                + Send,
        >,
    >;

    fn call(&mut self, request: tonic::Request<DynamicMessage>) -> Self::Future {
        self.decoded.store(true, Ordering::Release);
        let rest = self.rest.clone();
        let call = self.call;
        let output = self.descriptor.output();
        Box::pin(async move {
            let authorization = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| HeaderValue::from_str(v).ok());
            let caller = request.extensions().get::<Authenticated>().cloned();
            let message = to_json(request.get_ref())?;
            let answer = match connect::call_rest(rest, call, message, authorization, caller).await
            {
                Ok(r) | Err(r) => r,
            };
            let status = answer.status();
            let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
                .await
                .map_err(|e| Status::internal(format!("reading the answer: {e}")))?;
            if !status.is_success() {
                return Err(status_of(status, &bytes));
            }
            from_json(&output, &bytes).map(tonic::Response::new)
        })
    }
}

/// A request message as the JSON object the REST route reads: the contract's field names,
/// integers as numbers, fields left unset left out.
fn to_json(message: &DynamicMessage) -> Result<Map<String, Value>, Status> {
    let options = prost_reflect::SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .skip_default_fields(true);
    let value = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| Status::invalid_argument(format!("the request message: {e}")))?;
    match integral(value) {
        Value::Object(map) => Ok(map),
        _ => Err(Status::invalid_argument(
            "the request message is not a message",
        )),
    }
}

/// The descriptor of `method`'s request (`true`) or response (`false`) message.
fn message_of(method: &str, request: bool) -> Option<MessageDescriptor> {
    descriptor_pool()
        .get_service_by_name(SERVICE_NAME)?
        .methods()
        .find(|m| m.name() == method)
        .map(|m| if request { m.input() } else { m.output() })
}

/// A request message of `input`, decoded once its wire bytes are found within the value
/// budget: over it, `resource_exhausted` ([`ErrorCode::PayloadTooLarge`]); bytes that are not
/// such a message, `invalid_argument`.
fn decode_request(
    input: MessageDescriptor,
    bytes: bytes::Bytes,
) -> Result<DynamicMessage, AppError> {
    budget::check(&input, &bytes)?;
    DynamicMessage::decode(input, bytes).map_err(|e| {
        AppError::new(
            ErrorCode::BadRequest,
            format!("the request message does not decode: {e}"),
        )
    })
}

/// A binary (`application/proto`) Connect request of `method` as the JSON the REST route
/// reads.
pub(crate) fn proto_request_as_json(
    method: &str,
    bytes: bytes::Bytes,
) -> Result<Map<String, Value>, AppError> {
    let input = message_of(method, true).ok_or_else(|| AppError::not_found("method"))?;
    let message = decode_request(input, bytes)?;
    to_json(&message).map_err(|s| AppError::new(ErrorCode::BadRequest, s.message()))
}

/// A REST answer of `method` as its binary (`application/proto`) response message.
pub(crate) fn json_answer_as_proto(method: &str, json: &[u8]) -> Result<Vec<u8>, String> {
    let output = message_of(method, false).ok_or_else(|| format!("no method {method}"))?;
    let message = from_json(&output, json).map_err(|s| s.message().to_owned())?;
    Ok(prost::Message::encode_to_vec(&message))
}

/// JSON numbers as the REST routes read them: `google.protobuf.Struct` and `Value` carry every
/// number as a double, so a whole number (within ±2^53, where doubles are exact) becomes an
/// integer again — a policy's `max_duration_millis`, a tool's integer argument.
fn integral(value: Value) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= EXACT => {
                // Exact: a whole double within ±2^53 is an i64.
                #[allow(clippy::cast_possible_truncation)]
                Value::from(f as i64)
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect())
        }
        other => other,
    }
}

/// A Connect (JSON) request message as the REST routes read it: proto3's JSON writes 64-bit
/// integers as strings (`"limit": "5"`), the routes take numbers; per the method's request
/// message, such a field that holds a string of digits becomes that number.
pub(crate) fn integers_as_numbers(method: &str, message: &mut Map<String, Value>) {
    if let Some(input) = message_of(method, true) {
        numbers_in(&input, message);
    }
}

fn numbers_in(descriptor: &MessageDescriptor, message: &mut Map<String, Value>) {
    use prost_reflect::Kind;
    for field in descriptor.fields() {
        let Some(value) = message.get_mut(field.json_name()) else {
            continue;
        };
        match field.kind() {
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
                if let Some(n) = value.as_str().and_then(|s| s.parse::<i64>().ok()) {
                    *value = Value::from(n);
                }
            }
            Kind::Uint64 | Kind::Fixed64 => {
                if let Some(n) = value.as_str().and_then(|s| s.parse::<u64>().ok()) {
                    *value = Value::from(n);
                }
            }
            Kind::Message(nested) if !field.is_list() && !field.is_map() => {
                if nested.package_name() == "agent_tool_exposure.v1"
                    && let Value::Object(inner) = value
                {
                    numbers_in(&nested, inner);
                }
            }
            _ => {}
        }
    }
}

/// The REST answer as the method's response message. A field the `.proto` lacks is a bug of
/// the `.proto` (the test suite checks every answer against it): logged, and left out.
fn from_json(output: &MessageDescriptor, bytes: &[u8]) -> Result<DynamicMessage, Status> {
    let decode = |deny: bool| {
        let options = prost_reflect::DeserializeOptions::new().deny_unknown_fields(deny);
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        DynamicMessage::deserialize_with_options(output.clone(), &mut deserializer, &options)
    };
    decode(true).or_else(|e| {
        tracing::warn!(error = %e, message = output.full_name(), "an answer has a field the .proto does not");
        decode(false).map_err(|e| Status::internal(format!("the answer does not fit the .proto: {e}")))
    })
}

/// The gRPC status of an error answer of the REST routes.
fn status_of(status: StatusCode, bytes: &[u8]) -> Status {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: app::error::AppError,
    }
    let Ok(Envelope { error }) = serde_json::from_slice::<Envelope>(bytes) else {
        let code = match status {
            StatusCode::UNAUTHORIZED => Code::Unauthenticated,
            StatusCode::FORBIDDEN => Code::PermissionDenied,
            StatusCode::NOT_FOUND => Code::NotFound,
            s if s.is_client_error() => Code::InvalidArgument,
            _ => Code::Internal,
        };
        return Status::new(code, status.canonical_reason().unwrap_or("error"));
    };
    status_from(error)
}

/// The gRPC status of one of the service's errors: its Connect code's, field paths in a
/// `google.rpc.BadRequest` detail, and an `unauthenticated` one with the REST API's
/// `www-authenticate` challenge.
fn status_from(error: AppError) -> Status {
    let code = match connect::connect_code(error.code) {
        "invalid_argument" => Code::InvalidArgument,
        "unauthenticated" => Code::Unauthenticated,
        "permission_denied" => Code::PermissionDenied,
        "not_found" => Code::NotFound,
        "aborted" => Code::Aborted,
        "resource_exhausted" => Code::ResourceExhausted,
        "unavailable" => Code::Unavailable,
        _ => Code::Internal,
    };
    let fields = error.details.map(|d| d.fields).unwrap_or_default();
    if fields.is_empty() {
        let mut status = Status::new(code, error.message);
        if code == Code::Unauthenticated {
            status.metadata_mut().insert(
                "www-authenticate",
                tonic::metadata::MetadataValue::from_static(crate::error::BEARER_CHALLENGE),
            );
        }
        return status;
    }
    // google.rpc.Status { int32 code = 1; string message = 2; repeated google.protobuf.Any
    // details = 3; } with one Any { string type_url = 1; bytes value = 2; } of BadRequest.
    let mut any = Vec::new();
    connect::proto_bytes(&mut any, 1, b"type.googleapis.com/google.rpc.BadRequest");
    connect::proto_bytes(&mut any, 2, &connect::bad_request_bytes(&fields));
    let mut details = Vec::new();
    connect::proto_varint(&mut details, 1 << 3);
    connect::proto_varint(&mut details, u64::from(code as u32));
    connect::proto_bytes(&mut details, 2, error.message.as_bytes());
    connect::proto_bytes(&mut details, 3, &any);
    Status::with_details(code, error.message, details.into())
}

/// The outermost layer of the HTTP surface: gRPC requests go to `grpc`, the rest on.
pub async fn dispatch(
    grpc: axum::Router,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !is_grpc(request.headers()) {
        return next.run(request).await;
    }
    use tower::ServiceExt as _;
    match grpc.oneshot(request).await {
        Ok(response) => response.into_response(),
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_and_its_messages_load() {
        let service = descriptor_pool().get_service_by_name(SERVICE_NAME).unwrap();
        assert_eq!(service.methods().count(), connect::METHODS.len());
        let call = service.methods().find(|m| m.name() == "CallTool").unwrap();
        let meta = call.input().get_field_by_name("meta").unwrap();
        assert_eq!(meta.json_name(), "_meta");
    }

    #[test]
    fn whole_doubles_become_integers_and_64_bit_strings_numbers() {
        let value = serde_json::json!({"a": 300.0, "b": [1.5, 2.0], "c": {"d": -7.0}, "e": "8"});
        assert_eq!(
            integral(value),
            serde_json::json!({"a": 300, "b": [1.5, 2], "c": {"d": -7}, "e": "8"})
        );
        let mut message = serde_json::json!({"name": "t", "risk": ["read"], "price_cents": "25"});
        let map = message.as_object_mut().unwrap();
        integers_as_numbers("PutToolDescriptor", map);
        assert_eq!(map["price_cents"], 25);
        assert_eq!(map["name"], "t", "strings stay strings");
        let mut message = serde_json::json!({"limit": "5", "decision": "5"});
        let map = message.as_object_mut().unwrap();
        integers_as_numbers("ListReceipts", map);
        assert_eq!(map["limit"], 5);
        assert_eq!(map["decision"], "5");
    }

    #[test]
    fn validation_errors_carry_their_field_paths() {
        let body = serde_json::json!({"error": {"code": "invalid_argument", "message": "bad",
            "details": {"fields": [{"path": "rules[0].mode", "message": "unknown mode"}]}}});
        let status = status_of(
            StatusCode::UNPROCESSABLE_ENTITY,
            body.to_string().as_bytes(),
        );
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "bad");
        let details = status.details();
        let path = b"rules[0].mode";
        assert!(
            details.windows(path.len()).any(|w| w == path),
            "the field path is in the details"
        );
        let type_url = b"type.googleapis.com/google.rpc.BadRequest";
        assert!(details.windows(type_url.len()).any(|w| w == type_url));
    }
}
