//! The listener the server accepts connections on: TCP, each connection served by hyper-util's
//! server (HTTP/1.1, and HTTP/2 for gRPC) with a deadline for request heads, and the HTTP
//! parser's own error answers given the API's JSON shape.
//!
//! A connection has `APERTURE_HEADER_READ_TIMEOUT_SECONDS` to send a whole request head: hyper
//! closes an HTTP/1.1 connection whose head (its first, or the next on a kept-alive connection)
//! has not arrived by then. Before hyper knows the protocol (a client that sends nothing, or
//! part of HTTP/2's preface) and on HTTP/2 there is no head to time, so [`serve`] also closes a
//! connection that has not started a request by then: slow or silent sockets are not held.
//!
//! A request line longer than hyper accepts (64 KiB) or headers larger than its buffer never
//! reach the router: hyper answers `414 URI Too Long` or `431 Request Header Fields Too Large`
//! itself, with an empty body, and closes the connection. Clients read every other error as JSON
//! (`{"error": {"code", "message"}}`), so [`EdgeIo`] recognises those two bare answers as hyper
//! writes them and sends the same status with a JSON body instead (code `bad_request`: the
//! contract's code for a request that cannot be read; the status says which limit).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;
use tower_service::Service as _;

/// Accepts TCP connections as [`EdgeIo`].
pub struct EdgeListener(pub TcpListener);

impl axum::serve::Listener for EdgeListener {
    type Io = EdgeIo<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (EdgeIo::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Serves `router` on `listener` until `shutdown` completes; then accepts no more connections,
/// tells every open one to finish the requests it has in flight and close (HTTP/2: `GOAWAY`),
/// and returns when they all have. Handlers see the peer's address as
/// `ConnectInfo<SocketAddr>` (the sign-in limits per address, [`crate::auth::client`]).
pub async fn serve(
    mut listener: EdgeListener,
    router: axum::Router,
    header_read: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read);
    builder.http2().timer(TokioTimer::new());
    let mut connect_info = router.into_make_service_with_connect_info::<SocketAddr>();
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        // Pages stream in several small writes; with Nagle's algorithm on, each write after the
        // first waits for the client's delayed ACK (40 ms on Linux).
        if let Err(e) = io.get_ref().set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on a connection");
        }
        let Ok(service) = connect_info.call(peer).await;
        let requested = Arc::new(AtomicBool::new(false));
        let service = service.map_request({
            let requested = requested.clone();
            move |request: http::Request<Incoming>| {
                requested.store(true, Ordering::Relaxed);
                request.map(axum::body::Body::new)
            }
        });
        let connection = graceful.watch(
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
                .into_owned(),
        );
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = tokio::time::sleep(header_read) => {
                    if !requested.load(Ordering::Relaxed) {
                        tracing::debug!(%peer, "no request within the header read timeout; closing");
                        return;
                    }
                    connection.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "a connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A connection whose bare `414`/`431` answers from the HTTP parser are rewritten as JSON.
pub struct EdgeIo<T> {
    inner: T,
    /// A replacement answer still being written, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> EdgeIo<T> {
    /// Wraps a connection.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pending: None,
        }
    }

    /// The underlying connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

/// The JSON answer that replaces `head` when it is one of the parser's bare error answers.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status, code, message) = if head.starts_with(b"HTTP/1.1 414 ") {
        (
            "414 URI Too Long",
            "bad_request",
            "the request's URI is longer than 64 KiB",
        )
    } else if head.starts_with(b"HTTP/1.1 431 ") {
        (
            "431 Request Header Fields Too Large",
            "bad_request",
            "the request's headers are too large",
        )
    } else {
        return None;
    };
    // Only the parser's own answer: a head with an empty body and nothing about its content.
    let text = std::str::from_utf8(head).ok()?.to_ascii_lowercase();
    if !text.ends_with("\r\n\r\n")
        || !text.contains("\r\ncontent-length: 0\r\n")
        || text.contains("\r\ncontent-type:")
    {
        return None;
    }
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncWrite + Unpin> EdgeIo<T> {
    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for EdgeIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for EdgeIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.poll_pending(cx)?.is_pending() {
            return Poll::Pending;
        }
        // Error answers start with "HTTP/1.1 4"; a cheap test first, the rest only then.
        if buf.starts_with(b"HTTP/1.1 4")
            && let Some(answer) = replacement(buf)
        {
            this.pending = Some((answer, 0));
            // Taken whole; written by this and the following calls, flush and shutdown.
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.poll_pending(cx)?.is_pending() {
            return Poll::Pending;
        }
        let first = bufs.iter().find(|b| !b.is_empty());
        if let Some(first) = first
            && first.starts_with(b"HTTP/1.1 4")
            && let Some(answer) = replacement(first)
        {
            // The parser's answer is a head alone; any later slices would be a body it has not.
            this.pending = Some((answer, 0));
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.poll_pending(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.poll_pending(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_parsers_bare_answers_are_replaced() {
        let bare = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Thu, 03 Dec 2026 13:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(replacement(bare).unwrap()).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 414 URI Too Long\r\n"),
            "{answer}"
        );
        let body: serde_json::Value =
            serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "bad_request");
        let bare431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement(bare431).is_some());
        // The router's own answers (with a type and a body) pass untouched.
        let own = b"HTTP/1.1 414 URI Too Long\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n";
        assert!(replacement(own).is_none());
        assert!(replacement(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
