//! A stream of `/mcp` ([`aperture_core::live::streams`]) as a server-sent event response.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use aperture_core::live::streams::{self, Log};
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use tokio::sync::watch;

/// How often a reader that waits says it is alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a client waits before it reconnects when a connection closes before its stream
/// ended (the node stopping, a proxy's timeout): the priming event says so. MCP 2025-11-25
/// (transports): a server may close such a connection at any time and SHOULD send `retry`
/// before it does; the client waits that long, then resumes with `Last-Event-ID`.
const RETRY: Duration = Duration::from_secs(1);

/// The SSE response reading `log` after message `after` (0: from the start, with the priming
/// event first). A listening stream also ends when the node stops (`draining`); a call's
/// stream runs to its response.
pub fn respond(log: Arc<Log>, after: Option<u64>, draining: watch::Receiver<bool>) -> Response {
    let events = streams::read(log, after, draining).map(|(id, data)| {
        let event = Event::default().id(id).data(&*data);
        // The priming event, the only one without data, carries the reconnection delay.
        let event = if data.is_empty() {
            event.retry(RETRY)
        } else {
            event
        };
        Ok::<_, Infallible>(event)
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // A reverse proxy (nginx) passes each event on as it comes instead of buffering them.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
