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
//! against its descriptor and refused over [`crate::proto::budget::MAX_VALUES`] values before it is decoded.
//! Errors are gRPC statuses mapped from the service's error codes; field paths of a validation
//! error travel as a `google.rpc.BadRequest` in `grpc-status-details-bin`. Server reflection
//! (v1 and v1alpha) describes the service.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use bytes::Buf;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

use aperture_types::error::AppError;

use crate::api::Authenticated;
use crate::api::connect::{self, ConnectMethod};
use crate::proto::{
    FILE_DESCRIPTOR_SET, SERVICE_NAME, decode_request, descriptor_pool, from_json, to_json,
};
use crate::state::AppState;

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

/// The gRPC status of an error answer of the REST routes.
fn status_of(status: StatusCode, bytes: &[u8]) -> Status {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: aperture_types::error::AppError,
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
                tonic::metadata::MetadataValue::from_static(crate::reply::BEARER_CHALLENGE),
            );
        }
        return status;
    }
    // google.rpc.Status { int32 code = 1; string message = 2; repeated google.protobuf.Any
    // details = 3; } with one Any { string type_url = 1; bytes value = 2; } of BadRequest.
    let mut any = Vec::new();
    crate::proto::proto_bytes(&mut any, 1, b"type.googleapis.com/google.rpc.BadRequest");
    crate::proto::proto_bytes(&mut any, 2, &connect::bad_request_bytes(&fields));
    let mut details = Vec::new();
    crate::proto::proto_varint(&mut details, 1 << 3);
    crate::proto::proto_varint(&mut details, u64::from(code as u32));
    crate::proto::proto_bytes(&mut details, 2, error.message.as_bytes());
    crate::proto::proto_bytes(&mut details, 3, &any);
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
