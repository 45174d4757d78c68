//! Requests an upstream sends the gateway while one of its tools runs (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`) and its log messages (`notifications/message`), and the
//! call each belongs to.
//!
//! A request is handed to a call's [`AskFn`] only when it is attributable to exactly that call:
//! - over streamable HTTP, it arrived on the event stream that answers the call's own POST
//!   (the HTTP client marks it with [`CALL_TAG`] and strips that key from every other message,
//!   so an upstream cannot name a call itself);
//! - over stdio, where nothing on the wire says which call a request serves, exactly one call
//!   is in flight on the connection.
//!
//! Anything else (the standalone stream, a request between calls, two calls in flight on a
//! stdio connection) is refused to the upstream with a JSON-RPC error and reported to the
//! connection's [`UnattributedFn`]. Time the call's person spends answering does not count
//! toward the call's deadline ([`Clock`]), up to [`MAX_WAIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use engine::policy::ClientRequest;
use futures_util::future::BoxFuture;
use rmcp::model::RequestId;
use serde_json::Value;

/// The `_meta` key the gateway's HTTP client marks a request with: the id of the call whose
/// response stream carried it.
pub(crate) const CALL_TAG: &str = "io.aperture/call";
/// Time waiting for the person that does not count toward a call's deadline, at most.
pub const MAX_WAIT: Duration = Duration::from_secs(300);
/// How long a request waits for its call to be registered (the upstream asked before the send
/// returned).
const REGISTER_WAIT: Duration = Duration::from_secs(2);

/// A request of the upstream's for the calling client, as it arrived (`_meta` aside).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamAsk {
    /// What it asks for, as rules name it.
    pub kind: ClientRequest,
    /// The JSON-RPC method (`sampling/createMessage`, `elicitation/create`, `roots/list`).
    pub method: &'static str,
    /// Its params.
    pub params: Value,
}

/// The severity of a log message, least severe first (RFC 5424's, as MCP names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info`
    Info,
    /// `notice`
    Notice,
    /// `warning`
    Warning,
    /// `error`
    Error,
    /// `critical`
    Critical,
    /// `alert`
    Alert,
    /// `emergency`
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// Its name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// A log message of the upstream's about a call (`notifications/message`), its texts scrubbed
/// of the upstream's secrets.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamLog {
    /// Severity.
    pub level: LogLevel,
    /// The logger's name.
    pub logger: Option<String>,
    /// What it says.
    pub data: Value,
}

/// Receives a call's log messages; called on rmcp's task, so it must not block.
pub type LogFn = Arc<dyn Fn(UpstreamLog) + Send + Sync>;

/// Why a request is not answered: the JSON-RPC error the upstream receives.
#[derive(Debug, Clone, PartialEq)]
pub struct AskRefusal {
    /// JSON-RPC error code.
    pub code: i32,
    /// Its message.
    pub message: String,
}

impl AskRefusal {
    /// A refusal with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Answers a call's requests: the client's result (JSON), or a refusal.
pub type AskFn =
    Arc<dyn Fn(UpstreamAsk) -> BoxFuture<'static, Result<Value, AskRefusal>> + Send + Sync>;

/// Told of every request no call can be found for (its method); must not block.
pub type UnattributedFn = Arc<dyn Fn(&'static str) + Send + Sync>;

/// A call's time: what counts toward its deadline is the time since it started less the time
/// spent waiting for the client's answers (at most [`MAX_WAIT`] in all).
#[derive(Debug)]
pub(crate) struct Clock {
    started: Instant,
    inner: Mutex<Waits>,
}

#[derive(Debug, Default)]
struct Waits {
    /// Finished waits, summed.
    waited: Duration,
    /// Waits under way, and since when the oldest of them.
    open: usize,
    since: Option<Instant>,
}

impl Clock {
    pub(crate) fn start() -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            inner: Mutex::new(Waits::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Waits> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A wait for the client begins; it ends when the guard is dropped.
    pub(crate) fn waiting(self: &Arc<Self>) -> Waiting {
        let mut w = self.lock();
        if w.open == 0 {
            w.since = Some(Instant::now());
        }
        w.open += 1;
        Waiting(Arc::clone(self))
    }

    /// The time that counts toward the deadline so far.
    pub(crate) fn counted(&self) -> Duration {
        let w = self.lock();
        let current = w.since.map_or(Duration::ZERO, |s| s.elapsed());
        let paused = (w.waited + current).min(MAX_WAIT);
        self.started.elapsed().saturating_sub(paused)
    }
}

/// A wait for the client under way ([`Clock::waiting`]).
pub(crate) struct Waiting(Arc<Clock>);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut w = self.0.lock();
        w.open = w.open.saturating_sub(1);
        if w.open == 0
            && let Some(since) = w.since.take()
        {
            w.waited += since.elapsed();
        }
    }
}

/// Where a call's requests go.
#[derive(Clone)]
pub(crate) struct CallRoute {
    /// `None`: nobody can be asked (the call has no connected client).
    pub(crate) ask: Option<AskFn>,
    /// `None`: nobody hears its log messages.
    pub(crate) log: Option<LogFn>,
    pub(crate) clock: Arc<Clock>,
}

/// The calls in flight on one connection, by the id of their `tools/call`.
#[derive(Default)]
pub(crate) struct CallRoutes {
    inner: Mutex<Calls>,
}

#[derive(Default)]
struct Calls {
    calls: HashMap<RequestId, CallRoute>,
    /// Calls sent whose route is not registered yet.
    sending: usize,
}

/// Which call a request belongs to.
pub(crate) enum Attribution {
    Call(CallRoute),
    Unattributable,
}

impl CallRoutes {
    fn lock(&self) -> MutexGuard<'_, Calls> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call is about to be sent (until the guard is dropped, after [`CallRoutes::register`]).
    pub(crate) fn sending(self: &Arc<Self>) -> CallSending {
        self.lock().sending += 1;
        CallSending(Arc::clone(self))
    }

    pub(crate) fn register(self: &Arc<Self>, id: RequestId, route: CallRoute) -> Registered {
        self.lock().calls.insert(id.clone(), route);
        Registered {
            routes: Arc::clone(self),
            id,
        }
    }

    /// The call a message belongs to now, without waiting: the one `tag` names (a tagging
    /// transport), or the only call in flight (stdio).
    pub(crate) fn attribute_now(&self, tag: Option<&RequestId>, tagging: bool) -> Attribution {
        let calls = self.lock();
        let found = match (tag, tagging) {
            (Some(id), true) => calls.calls.get(id).cloned(),
            (_, false) if calls.calls.len() == 1 => calls.calls.values().next().cloned(),
            _ => None,
        };
        found.map_or(Attribution::Unattributable, Attribution::Call)
    }

    /// The call a request belongs to: the one `tag` names (a tagging transport), or the only
    /// call in flight (stdio). Waits briefly while a call is being sent.
    pub(crate) async fn attribute(&self, tag: Option<RequestId>, tagging: bool) -> Attribution {
        let until = Instant::now() + REGISTER_WAIT;
        loop {
            {
                let calls = self.lock();
                let found = match (&tag, tagging) {
                    (None, true) => return Attribution::Unattributable,
                    (Some(id), true) => calls.calls.get(id).cloned(),
                    (_, false) if calls.sending > 0 => None,
                    (_, false) if calls.calls.len() == 1 => calls.calls.values().next().cloned(),
                    (_, false) => return Attribution::Unattributable,
                };
                match found {
                    Some(route) => return Attribution::Call(route),
                    None if calls.sending == 0 => return Attribution::Unattributable,
                    None => {}
                }
            }
            if Instant::now() >= until {
                return Attribution::Unattributable;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A call on its way out ([`CallRoutes::sending`]).
pub(crate) struct CallSending(Arc<CallRoutes>);

impl Drop for CallSending {
    fn drop(&mut self) {
        let mut calls = self.0.lock();
        calls.sending = calls.sending.saturating_sub(1);
    }
}

/// A registered call; unregistered when it ends (dropped).
pub(crate) struct Registered {
    routes: Arc<CallRoutes>,
    id: RequestId,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.routes.lock().calls.remove(&self.id);
    }
}

/// The call id a request was tagged with, when it was.
pub(crate) fn tag_of(meta: &serde_json::Map<String, Value>) -> Option<RequestId> {
    meta.get(CALL_TAG)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> CallRoute {
        CallRoute {
            ask: None,
            log: None,
            clock: Clock::start(),
        }
    }

    #[tokio::test]
    async fn a_tagged_request_goes_only_to_the_call_it_names() {
        let routes = Arc::new(CallRoutes::default());
        let one = RequestId::Number(1);
        let _a = routes.register(one.clone(), route());
        let _b = routes.register(RequestId::Number(2), route());
        assert!(matches!(
            routes.attribute(Some(one), true).await,
            Attribution::Call(_)
        ));
        assert!(matches!(
            routes.attribute(Some(RequestId::Number(9)), true).await,
            Attribution::Unattributable
        ));
        // Untagged over HTTP: the standalone stream, never a call.
        assert!(matches!(
            routes.attribute(None, true).await,
            Attribution::Unattributable
        ));
    }

    #[tokio::test]
    async fn over_stdio_only_a_lone_call_is_asked_for() {
        let routes = Arc::new(CallRoutes::default());
        assert!(matches!(
            routes.attribute(None, false).await,
            Attribution::Unattributable
        ));
        let a = routes.register(RequestId::Number(1), route());
        assert!(matches!(
            routes.attribute(None, false).await,
            Attribution::Call(_)
        ));
        let b = routes.register(RequestId::Number(2), route());
        assert!(matches!(
            routes.attribute(None, false).await,
            Attribution::Unattributable
        ));
        drop(a);
        drop(b);
        assert!(matches!(
            routes.attribute(None, false).await,
            Attribution::Unattributable
        ));
    }

    #[test]
    fn waiting_for_the_person_does_not_count() {
        let clock = Clock::start();
        std::thread::sleep(Duration::from_millis(10));
        let counted = clock.counted();
        {
            let _w = clock.waiting();
            std::thread::sleep(Duration::from_millis(30));
            assert!(clock.counted() <= counted + Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(30));
        assert!(clock.counted() >= counted + Duration::from_millis(25));
    }
}
