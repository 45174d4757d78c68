//! Request bodies arrive within a deadline (`APERTURE_BODY_READ_TIMEOUT_SECONDS`), counted from
//! the request's head: a client that sends a body slowly, or stops halfway, holds a connection
//! and a handler only that long. tower-http's body timeout restarts with every chunk, so a
//! client sending a byte now and then would never meet it; this one does not restart.
//!
//! Only a body that is read is timed: a request whose body has ended (a `GET`) is passed on as
//! it is, and a stream's response (SSE) is no request body. gRPC streaming calls, whose request
//! body is a stream, are not given one ([`crate::grpc`] times its unary calls only).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error a body gives once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

/// Whether a body's deadline passed while it was read.
#[derive(Debug, Clone, Default)]
pub struct Expired(Arc<AtomicBool>);

impl Expired {
    /// The deadline passed before the body ended.
    pub fn passed(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A body that fails with [`BodyTimedOut`] when it has not ended by its deadline.
pub struct DeadlineBody<B> {
    inner: B,
    /// `None` once the body has ended.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
    expired: Expired,
}

impl<B: HttpBody> DeadlineBody<B> {
    /// `inner`, which has `timeout` from now to end, and what says whether it did.
    pub fn new(inner: B, timeout: Duration) -> (Self, Expired) {
        let expired = Expired::default();
        let deadline = (!inner.is_end_stream()).then(|| Box::pin(tokio::time::sleep(timeout)));
        let body = Self {
            inner,
            deadline,
            timeout,
            expired: expired.clone(),
        };
        (body, expired)
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.expired.passed() {
            return Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into())));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if frame.is_none() || this.inner.is_end_stream() {
                this.deadline = None;
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            this.deadline = None;
            this.expired.0.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        !self.expired.passed() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware: the request's body has `timeout` to arrive. When it does not, whatever the
/// handler made of the failed read is replaced by `408 Request Timeout` in the caller's kind: a
/// JSON-RPC error on `/mcp`, the API's JSON error (code `bad_request`, as for the parser's
/// `414`/`431`) everywhere else; an HTTP/1.1 connection is closed after it (the rest of the
/// body is never read).
pub async fn limit(timeout: Duration, request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let is_mcp = request.uri().path() == "/mcp";
    let version = request.version();
    let (parts, body) = request.into_parts();
    let (body, expired) = DeadlineBody::new(body, timeout);
    let response = next.run(Request::from_parts(parts, Body::new(body))).await;
    if !expired.passed() {
        return response;
    }
    let message = BodyTimedOut(timeout).to_string();
    let mut response = if is_mcp {
        (
            StatusCode::REQUEST_TIMEOUT,
            axum::Json(crate::mcp::error(
                &serde_json::Value::Null,
                crate::mcp::INVALID_REQUEST,
                message,
            )),
        )
            .into_response()
    } else {
        let error = aperture_types::error::AppError::new(
            aperture_types::error::ErrorCode::BadRequest,
            message,
        );
        (
            StatusCode::REQUEST_TIMEOUT,
            axum::Json(serde_json::json!({ "error": error })),
        )
            .into_response()
    };
    if matches!(version, Version::HTTP_10 | Version::HTTP_11) {
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;
    use http_body_util::BodyExt as _;

    /// A body that sends one chunk and then nothing.
    fn stalled() -> Body {
        let chunks =
            futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{"))])
                .chain(futures_util::stream::pending());
        Body::from_stream(chunks)
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_at_its_deadline_and_a_whole_one_never_does() {
        let timeout = Duration::from_millis(100);
        let (body, expired) = DeadlineBody::new(stalled(), timeout);
        let collected = tokio::time::timeout(timeout * 20, body.collect()).await;
        let error = collected
            .expect("ended by its deadline")
            .expect_err("the body fails");
        assert!(error.to_string().contains("did not arrive"), "{error}");
        assert!(expired.passed());

        let (body, expired) = DeadlineBody::new(Body::from("{}"), timeout);
        let mut body = body;
        let first = body.frame().await.expect("a frame").expect("data");
        assert_eq!(first.into_data().ok(), Some(Bytes::from_static(b"{}")));
        tokio::time::sleep(timeout * 3).await;
        assert!(body.frame().await.is_none(), "ended, not timed out");
        assert!(!expired.passed());
    }
}
