//! A stream of `/mcp` ([`aperture_core::live::streams`]) as a server-sent event response.
//!
//! The events are written here rather than by axum's `Sse`: the priming event (the first of a
//! stream read from its start: an id, the reconnection delay and empty data) must carry an
//! empty `data:` line. An SSE parser dispatches only events that have a data field, and axum
//! leaves the field out when the data is empty, so clients never saw the priming event's id
//! and could not resume a stream that closed before its first message (MCP 2025-11-25,
//! transports; SEP-1699). Clients skip an event whose data is empty.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use aperture_core::live::streams::{self, Log};
use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
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
    let events = streams::read(log, after, draining).map(|(id, data)| encode(&id, &data));
    let mut response = Body::from_stream(kept_alive(events, KEEP_ALIVE)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // A reverse proxy (nginx) passes each event on as it comes instead of buffering them.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One event: its id, and its data a line at a time. The priming event, the only one without
/// data, carries the reconnection delay and an empty `data:` line (so it is dispatched).
fn encode(id: &str, data: &str) -> Bytes {
    let mut event = String::with_capacity(id.len() + data.len() + 32);
    event.push_str("id: ");
    // Ids are the gateway's own (`<stream>/<n>`); a line break could not be part of one.
    event.extend(id.chars().filter(|c| *c != '\n' && *c != '\r'));
    event.push('\n');
    if data.is_empty() {
        event.push_str(&format!("retry: {}\n", RETRY.as_millis()));
        event.push_str("data: \n");
    } else {
        for line in data.split(['\n', '\r']) {
            event.push_str("data: ");
            event.push_str(line);
            event.push('\n');
        }
    }
    event.push('\n');
    Bytes::from(event)
}

/// `events`, with a comment line after each `every` without one (idle connections are not
/// cut by proxies, and a client that left is noticed).
fn kept_alive(
    events: impl Stream<Item = Bytes> + Send + 'static,
    every: Duration,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let first = tokio::time::Instant::now() + every;
    let state = (events.boxed(), tokio::time::interval_at(first, every));
    futures_util::stream::unfold(state, |(mut events, mut idle)| async move {
        let next = tokio::select! {
            biased;
            event = events.next() => {
                idle.reset();
                event?
            }
            _ = idle.tick() => Bytes::from_static(b":\n\n"),
        };
        Some((Ok(next), (events, idle)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_priming_event_has_an_empty_data_line_and_the_delay() {
        assert_eq!(
            &encode("s/0", "")[..],
            b"id: s/0\nretry: 1000\ndata: \n\n".as_slice()
        );
        assert_eq!(
            &encode("s/1", "{\"a\":1}")[..],
            b"id: s/1\ndata: {\"a\":1}\n\n".as_slice()
        );
        // A line break in the data continues it on another data line; none ends the event.
        assert_eq!(
            &encode("s/2", "a\nb")[..],
            b"id: s/2\ndata: a\ndata: b\n\n".as_slice()
        );
    }
}
