//! Requests of the gateway's to `/mcp` clients that await their answers on this node:
//! - 2025 eras ([`Asks`]): a request relayed on a call's stream ([`crate::relay`]) is
//!   registered under the id the gateway gave it, and the client's answer (a JSON-RPC response
//!   it posts) is delivered to the call that asked, only when it comes from the principal the
//!   call belongs to;
//! - 2026-07-28 ([`Runs`]): a call whose upstream asked is answered `input_required` and its
//!   run held here, suspended, until the client retries it with the answer (or it expires).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::ServiceError;
use crate::events::Bus;
use crate::relay::ClientError;
use crate::store::{self, Store, client_answers};

/// Whose client a request went to: tenant, principal (`tok_…`, `usr_…`) and, in the 2025
/// eras, the `Mcp-Session-Id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Tenant.
    pub tenant_id: String,
    /// The principal's id.
    pub principal: String,
    /// The client's `Mcp-Session-Id`.
    pub mcp_session: Option<String>,
}

/// What a client answered: its result, or its error.
pub type Answer = Result<Value, ClientError>;

/// The requests awaiting answers on this node, by id, and the ids it settled lately.
#[derive(Debug, Default)]
pub struct Asks {
    inner: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    open: HashMap<String, (Owner, oneshot::Sender<Answer>)>,
    /// Ids answered or given up on here, newest last (at most [`SETTLED`]).
    settled: std::collections::VecDeque<String>,
}

/// Settled ids remembered, so that a second answer is refused rather than sent to other nodes.
const SETTLED: usize = 4096;
/// The event that tells the node holding a call that its client's answer reached another node.
pub const EVENT: &str = "client_request.answered";
/// How long an answer waits for the node that holds its call.
const KEEP_MS: i64 = 10 * 60 * 1000;
/// The gateway's request ids start so.
pub const ID_PREFIX: &str = "ask_";

/// Why an answer was not taken here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A request of this node's with that id awaits another caller's answer, or was answered
    /// or given up on already.
    Settled,
    /// No request of this node's has that id: it may be another node's.
    Unknown,
}

impl Asks {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether request `id` awaits its answer here.
    pub fn holds(&self, id: &str) -> bool {
        self.lock().open.contains_key(id)
    }

    /// Awaits the answer to request `id` from `owner`'s client; it is forgotten when the
    /// returned guard is dropped.
    pub fn register(
        self: &Arc<Self>,
        id: String,
        owner: Owner,
        answer: oneshot::Sender<Answer>,
    ) -> Awaiting {
        self.lock().open.insert(id.clone(), (owner, answer));
        Awaiting {
            asks: Arc::clone(self),
            id,
        }
    }

    /// Delivers `answer` to request `id`, when `from` is the principal it was sent to (the
    /// same tenant and principal; in the 2025 eras the same `Mcp-Session-Id`); else gives the
    /// answer back with why not.
    pub fn answer(&self, id: &str, from: &Owner, answer: Answer) -> Result<(), (Refused, Answer)> {
        let mut waiting = self.lock();
        match waiting.open.get(id) {
            Some((owner, _)) if owner == from => {}
            Some(_) => return Err((Refused::Settled, answer)),
            None if waiting.settled.iter().any(|s| s == id) => {
                return Err((Refused::Settled, answer));
            }
            None => return Err((Refused::Unknown, answer)),
        }
        let Some((_, to)) = waiting.open.remove(id) else {
            return Err((Refused::Unknown, answer));
        };
        waiting.settle(id);
        drop(waiting);
        to.send(answer).map_err(|answer| (Refused::Settled, answer))
    }
}

/// A request awaiting its answer ([`Asks::register`]).
#[derive(Debug)]
pub struct Awaiting {
    asks: Arc<Asks>,
    id: String,
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        let mut waiting = self.asks.lock();
        if waiting.open.remove(&self.id).is_some() {
            waiting.settle(&self.id);
        }
    }
}

impl Waiting {
    fn settle(&mut self, id: &str) {
        if self.settled.len() >= SETTLED {
            self.settled.pop_front();
        }
        self.settled.push_back(id.to_owned());
    }
}

/// Keeps an answer this node does not await for the node that does ([`relay`]), and tells
/// every node. Only the gateway's own ids ([`ID_PREFIX`]) are kept; whether it was kept.
pub async fn forward(
    store: &Store,
    bus: &Bus,
    id: &str,
    from: &Owner,
    answer: &Answer,
) -> Result<bool, ServiceError> {
    if !id.starts_with(ID_PREFIX) || id.len() > 64 {
        return Ok(false);
    }
    let text = match answer {
        Ok(result) => serde_json::json!({"result": result}),
        Err(e) => serde_json::json!({"error": {"code": e.code, "message": e.message}}),
    };
    let row = client_answers::AnswerRow {
        tenant_id: from.tenant_id.clone(),
        principal: from.principal.clone(),
        mcp_session: from.mcp_session.clone(),
        answer: text.to_string(),
    };
    if !client_answers::put(store, id, &row, store::now_ms()).await? {
        return Ok(false);
    }
    bus.publish(&from.tenant_id, EVENT, id, "", Value::Null)
        .await;
    Ok(true)
}

/// Delivers the answers other nodes kept for requests this node awaits ([`forward`]): on each
/// [`EVENT`] naming one of them, the answer is taken from the store and delivered when it
/// comes from the request's own caller. Runs until the bus closes (spawned by the server).
pub async fn relay(bus: Arc<Bus>, store: Store, asks: Arc<Asks>) {
    let mut events = bus.subscribe();
    loop {
        match events.recv().await {
            Ok(event) if event.kind == EVENT => {
                if asks.holds(&event.subject) {
                    deliver_kept(&store, &asks, &event.subject).await;
                }
                let before = store::now_ms() - KEEP_MS;
                if let Err(e) = client_answers::delete_older(&store, before).await {
                    tracing::warn!(error = %e, "forgetting old client answers");
                }
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Delivers the first of the answers kept for request `id` that comes from its own caller;
/// the others are dropped.
async fn deliver_kept(store: &Store, asks: &Asks, id: &str) {
    let rows = match client_answers::take(store, id).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "taking a client's answer kept by another node");
            return;
        }
    };
    for row in rows {
        let from = Owner {
            tenant_id: row.tenant_id,
            principal: row.principal,
            mcp_session: row.mcp_session,
        };
        let kept: Value = serde_json::from_str(&row.answer).unwrap_or(Value::Null);
        let answer = match (kept.get("result"), kept.get("error")) {
            (Some(result), _) => Ok(result.clone()),
            (None, Some(e)) => Err(ClientError {
                code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            (None, None) => continue,
        };
        match asks.answer(id, &from, answer) {
            Ok(()) => return,
            Err(_) => tracing::info!(
                id,
                "an answer kept by another node was not the caller's; dropped"
            ),
        }
    }
}

/// What a suspended run does next: ask the client again, or end with its answer — and, on the
/// way, what the upstream tells about the call, for a round answered as a stream.
#[derive(Debug)]
pub enum Next {
    /// The upstream asks the client something (again).
    Ask(crate::relay::Ask),
    /// The upstream's progress on the call.
    Progress(crate::upstream::Progress),
    /// One of the upstream's log messages about the call, at a level its client hears.
    Log(crate::upstream::UpstreamLog),
    /// The call ended: the JSON-RPC response that answers it.
    Done(Value),
}

/// A run waiting for its client's answer ([`Runs`]).
#[derive(Debug)]
pub struct Suspended {
    /// Whose it is.
    pub owner: Owner,
    /// Where the answer goes.
    pub answer: oneshot::Sender<Answer>,
    /// What the run does after it.
    pub next: tokio::sync::mpsc::Receiver<Next>,
    /// Forgotten (and so abandoned) after this.
    pub expires_at: std::time::Instant,
}

/// The runs suspended on this node, by id.
#[derive(Debug, Default)]
pub struct Runs {
    inner: Mutex<HashMap<String, Suspended>>,
}

impl Runs {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Suspended>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `run` under `id`; runs past their expiry are dropped (their calls are told the
    /// client did not answer).
    pub fn hold(&self, id: String, run: Suspended) {
        let now = std::time::Instant::now();
        let mut runs = self.lock();
        runs.retain(|_, r| r.expires_at > now);
        runs.insert(id, run);
    }

    /// Takes run `id` when `owner`'s and not expired.
    pub fn take(&self, id: &str, owner: &Owner) -> Option<Suspended> {
        let mut runs = self.lock();
        match runs.get(id) {
            Some(r) if r.owner == *owner && r.expires_at > std::time::Instant::now() => {
                runs.remove(id)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(principal: &str) -> Owner {
        Owner {
            tenant_id: "t".into(),
            principal: principal.into(),
            mcp_session: Some("mcp_1".into()),
        }
    }

    #[tokio::test]
    async fn only_the_caller_answers_and_only_once() {
        let asks = Arc::new(Asks::default());
        let (tx, rx) = oneshot::channel();
        let _awaiting = asks.register("req_1".into(), owner("alice"), tx);
        let answer = || Ok(serde_json::json!({"action": "accept"}));
        let refused = |r: Result<(), (Refused, Answer)>| r.map_err(|(why, _)| why);
        assert_eq!(
            refused(asks.answer("req_1", &owner("mallory"), answer())),
            Err(Refused::Settled)
        );
        assert_eq!(
            refused(asks.answer("req_2", &owner("alice"), answer())),
            Err(Refused::Unknown)
        );
        assert_eq!(
            refused(asks.answer("req_1", &owner("alice"), answer())),
            Ok(())
        );
        assert_eq!(
            refused(asks.answer("req_1", &owner("alice"), answer())),
            Err(Refused::Settled)
        );
        assert_eq!(rx.await.unwrap(), answer());
    }

    #[test]
    fn a_suspended_run_is_taken_once_by_its_owner_before_it_expires() {
        let runs = Runs::default();
        let suspended = |expires_at| {
            let (answer, _) = oneshot::channel();
            let (_, next) = tokio::sync::mpsc::channel(1);
            Suspended {
                owner: owner("alice"),
                answer,
                next,
                expires_at,
            }
        };
        let later = std::time::Instant::now() + std::time::Duration::from_secs(60);
        runs.hold("run_1".into(), suspended(later));
        assert!(runs.take("run_1", &owner("mallory")).is_none());
        assert!(runs.take("run_1", &owner("alice")).is_some());
        assert!(runs.take("run_1", &owner("alice")).is_none());
        runs.hold("run_2".into(), suspended(std::time::Instant::now()));
        assert!(runs.take("run_2", &owner("alice")).is_none());
    }
}
