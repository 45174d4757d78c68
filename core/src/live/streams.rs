//! The event streams of `/mcp` (streamable HTTP), and resuming them; the surface sends them as
//! server-sent events.
//!
//! A stream is a [`Log`]: the JSON-RPC messages it carries, in order, whether a client is
//! reading or not. Its events have ids `<stream>/<n>` (`n` counts from 1; `<stream>/0` is the
//! priming event sent first, with no data), unique across every stream of every client. A
//! client that lost the connection sends `GET /mcp` with `Last-Event-ID: <stream>/<n>` and gets
//! the messages after `n` on that stream, then the rest as they come: never a message of
//! another stream. Two kinds:
//! - a `tools/call` answered as a stream (`c…`): the upstream's `notifications/progress` for
//!   the caller's `progressToken`, then the response; it ends after the response;
//! - a listening stream (`l…`: `GET /mcp` in the 2025 era, `subscriptions/listen` in 2026-07-28)
//!   that carries `notifications/tools/list_changed` until the client leaves for good.
//!
//! Logs live in the memory of the node that opened them: a finished stream is kept
//! [`KEEP_FINISHED`] for a late resume (at most [`MAX_KEPT_STREAMS`] of them holding
//! [`MAX_KEPT_BYTES`] in all), a listening one
//! until nobody has read it for [`KEEP_UNREAD`]. Resuming on another node finds nothing to
//! resume (load balancers keep a client's `Mcp-Session-Id` on one node).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;
use serde_json::Value;
use tokio::sync::watch;

/// How long a finished stream can still be resumed.
pub const KEEP_FINISHED: Duration = Duration::from_secs(5 * 60);
/// How long a listening stream waits for its client to come back.
pub const KEEP_UNREAD: Duration = Duration::from_secs(5 * 60);
/// What finished streams may hold in all; the oldest go first.
pub const MAX_KEPT_BYTES: usize = 64 * 1024 * 1024;
/// How many finished streams are kept at most; the oldest go first.
pub const MAX_KEPT_STREAMS: usize = 10_000;
/// Messages one stream holds before the oldest notifications are dropped (never a response).
const MAX_MESSAGES: usize = 1_000;

/// Who may read a stream: the token's tenant and actor, and the MCP connection it was opened
/// on (`Mcp-Session-Id`, when the client has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Tenant.
    pub tenant_id: String,
    /// Actor.
    pub actor_id: String,
    /// The client's `Mcp-Session-Id`.
    pub mcp_session: Option<String>,
}

/// What kind of stream a log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `tools/call` answered as a stream.
    Call,
    /// A stream of `list_changed` notifications.
    Listen,
}

#[derive(Debug, Default)]
struct Messages {
    /// `(n, JSON text)`, `n` increasing from 1 (dropped notifications leave gaps).
    items: VecDeque<(u64, Arc<str>)>,
    next: u64,
    bytes: usize,
    done: bool,
}

/// One stream's messages.
#[derive(Debug)]
pub struct Log {
    id: String,
    kind: Kind,
    owner: Owner,
    messages: watch::Sender<Messages>,
    readers: AtomicUsize,
    /// When the last reader left (or the stream was opened).
    unread_since: Mutex<Instant>,
}

impl Log {
    /// `c…` or `l…`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Who may read it.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Appends a message; the oldest notifications go when the stream holds too many.
    pub fn push(&self, message: &Value) {
        let text: Arc<str> = message.to_string().into();
        self.messages.send_modify(|m| {
            if m.done {
                return;
            }
            m.next += 1;
            m.bytes += text.len();
            m.items.push_back((m.next, text));
            if m.items.len() > MAX_MESSAGES
                && let Some((_, old)) = m.items.pop_front()
            {
                m.bytes -= old.len();
            }
        });
    }

    /// Nothing more comes: readers end after the last message.
    pub fn finish(&self) {
        self.messages.send_modify(|m| m.done = true);
    }

    /// Whether the stream has ended.
    pub fn is_finished(&self) -> bool {
        self.messages.borrow().done
    }

    fn bytes(&self) -> usize {
        self.messages.borrow().bytes
    }

    /// Whether nobody has read the stream for [`KEEP_UNREAD`].
    pub fn abandoned(&self) -> bool {
        self.readers.load(Ordering::Acquire) == 0
            && lock(&self.unread_since).elapsed() >= KEEP_UNREAD
    }
}

/// Every stream of this node.
#[derive(Debug, Default)]
pub struct Streams {
    logs: Mutex<HashMap<String, Arc<Log>>>,
    finished: Mutex<Finished>,
}

/// Finished streams, oldest first, and what they hold.
#[derive(Debug, Default)]
struct Finished {
    /// `(finished at, id, bytes)`.
    streams: VecDeque<(Instant, String, usize)>,
    bytes: usize,
}

impl Streams {
    /// Opens a stream for `owner`.
    pub fn open(&self, kind: Kind, owner: Owner) -> Arc<Log> {
        self.prune();
        let prefix = match kind {
            Kind::Call => "c",
            Kind::Listen => "l",
        };
        let log = Arc::new(Log {
            id: format!(
                "{prefix}{}",
                crate::ids::new_id("sse").trim_start_matches("sse_")
            ),
            kind,
            owner,
            messages: watch::Sender::new(Messages::default()),
            readers: AtomicUsize::new(0),
            unread_since: Mutex::new(Instant::now()),
        });
        lock(&self.logs).insert(log.id.clone(), Arc::clone(&log));
        log
    }

    /// Ends `log` and keeps it for a late resume.
    pub fn finish(&self, log: &Log) {
        log.finish();
        let bytes = log.bytes();
        {
            let mut finished = lock(&self.finished);
            finished
                .streams
                .push_back((Instant::now(), log.id.clone(), bytes));
            finished.bytes += bytes;
        }
        self.prune();
    }

    /// Forgets `log` at once (a listening stream nobody reads any more).
    pub fn remove(&self, log: &Log) {
        log.finish();
        lock(&self.logs).remove(&log.id);
    }

    /// The stream `Last-Event-ID` names and where to go on from, when `owner` may read it.
    pub fn resume(&self, last_event_id: &str, owner: &Owner) -> Option<(Arc<Log>, u64)> {
        let (id, n) = last_event_id.rsplit_once('/')?;
        let n: u64 = n.parse().ok()?;
        let log = lock(&self.logs).get(id).cloned()?;
        (log.owner == *owner).then_some((log, n))
    }

    /// Whether `last_event_id` names a `tools/call` stream (one that cannot be resumed here
    /// is refused rather than answered with another stream).
    pub fn names_call(last_event_id: &str) -> bool {
        last_event_id.starts_with('c')
    }

    /// Drops finished streams past [`KEEP_FINISHED`], and the oldest while they hold more than
    /// [`MAX_KEPT_BYTES`].
    fn prune(&self) {
        let mut finished = lock(&self.finished);
        let mut gone = Vec::new();
        while let Some((at, _, bytes)) = finished.streams.front() {
            if at.elapsed() < KEEP_FINISHED
                && finished.bytes <= MAX_KEPT_BYTES
                && finished.streams.len() <= MAX_KEPT_STREAMS
            {
                break;
            }
            finished.bytes = finished.bytes.saturating_sub(*bytes);
            if let Some((_, id, _)) = finished.streams.pop_front() {
                gone.push(id);
            }
        }
        drop(finished);
        if !gone.is_empty() {
            let mut logs = lock(&self.logs);
            for id in gone {
                logs.remove(&id);
            }
        }
    }

    /// How many streams this node holds (metrics, tests).
    pub fn len(&self) -> usize {
        lock(&self.logs).len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Counts a reader of a log while it lives.
struct Reading(Arc<Log>);

impl Reading {
    fn new(log: Arc<Log>) -> Self {
        log.readers.fetch_add(1, Ordering::AcqRel);
        Self(log)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        *lock(&self.0.unread_since) = Instant::now();
        self.0.readers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One event of a stream: its id (`<stream>/<n>`) and data (the JSON-RPC message's text; empty
/// for the priming event).
pub type Item = (String, Arc<str>);

/// The events of `log` after message `after` (0: from the start, with the priming event
/// first), as they come; the surface sends them as server-sent events. A listening stream also
/// ends when the node stops (`draining`); a call's stream runs to its response.
pub fn read(
    log: Arc<Log>,
    after: Option<u64>,
    draining: watch::Receiver<bool>,
) -> impl futures_util::Stream<Item = Item> + Send + 'static {
    let prime = after
        .is_none()
        .then(|| (format!("{}/0", log.id), Arc::<str>::from("")));
    let kind = log.kind;
    let receiver = log.messages.subscribe();
    let state = (Reading::new(log), receiver, after.unwrap_or(0), draining);
    let rest = futures_util::stream::unfold(
        state,
        move |(reading, mut receiver, mut at, mut draining)| async move {
            loop {
                let next = {
                    let messages = receiver.borrow_and_update();
                    match messages.items.iter().find(|(n, _)| *n > at) {
                        Some((n, text)) => Some((*n, Arc::clone(text))),
                        None if messages.done => return None,
                        None => None,
                    }
                };
                if let Some((n, text)) = next {
                    at = n;
                    let item = (format!("{}/{n}", reading.0.id), text);
                    return Some((item, (reading, receiver, at, draining)));
                }
                tokio::select! {
                    changed = receiver.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                    _ = draining.wait_for(|d| *d), if kind == Kind::Listen => return None,
                }
            }
        },
    );
    futures_util::StreamExt::chain(futures_util::stream::iter(prime), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(actor: &str) -> Owner {
        Owner {
            tenant_id: "t".into(),
            actor_id: actor.into(),
            mcp_session: Some("mcp_1".into()),
        }
    }

    #[test]
    fn a_stream_resumes_only_for_its_owner_and_after_the_named_event() {
        let streams = Streams::default();
        let log = streams.open(Kind::Call, owner("a"));
        log.push(&serde_json::json!({"n": 1}));
        let id = format!("{}/1", log.id());
        let (found, after) = streams.resume(&id, &owner("a")).unwrap();
        assert_eq!(found.id(), log.id());
        assert_eq!(after, 1);
        assert!(streams.resume(&id, &owner("b")).is_none());
        let mut other_connection = owner("a");
        other_connection.mcp_session = Some("mcp_2".into());
        assert!(streams.resume(&id, &other_connection).is_none());
        assert!(streams.resume("nothing/1", &owner("a")).is_none());
        assert!(Streams::names_call(log.id()));
    }

    #[test]
    fn a_stream_holds_a_bounded_number_of_messages() {
        let streams = Streams::default();
        let log = streams.open(Kind::Listen, owner("a"));
        for n in 0..(MAX_MESSAGES + 10) {
            log.push(&serde_json::json!(n));
        }
        let messages = log.messages.borrow();
        assert_eq!(messages.items.len(), MAX_MESSAGES);
        assert_eq!(messages.items.front().unwrap().0, 11);
    }

    #[test]
    fn at_most_so_many_finished_streams_are_kept() {
        let streams = Streams::default();
        let first = streams.open(Kind::Call, owner("a"));
        streams.finish(&first);
        for _ in 0..MAX_KEPT_STREAMS {
            let log = streams.open(Kind::Call, owner("a"));
            streams.finish(&log);
        }
        assert!(
            streams
                .resume(&format!("{}/0", first.id()), &owner("a"))
                .is_none()
        );
        assert_eq!(streams.len(), MAX_KEPT_STREAMS);
    }

    #[test]
    fn finished_streams_are_dropped_when_they_hold_too_much() {
        let streams = Streams::default();
        let big = "x".repeat(MAX_KEPT_BYTES / 2 + 1);
        let first = streams.open(Kind::Call, owner("a"));
        first.push(&Value::String(big.clone()));
        streams.finish(&first);
        let second = streams.open(Kind::Call, owner("a"));
        second.push(&Value::String(big));
        streams.finish(&second);
        assert!(
            streams
                .resume(&format!("{}/0", first.id()), &owner("a"))
                .is_none()
        );
        assert!(
            streams
                .resume(&format!("{}/0", second.id()), &owner("a"))
                .is_some()
        );
    }
}
