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

use crate::relay::ClientError;

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

/// The requests awaiting answers on this node, by id.
#[derive(Debug, Default)]
pub struct Asks {
    inner: Mutex<HashMap<String, (Owner, oneshot::Sender<Answer>)>>,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No request of this node's awaits an answer under that id from this caller (unknown,
    /// answered already, given up on, another principal's).
    Unknown,
}

impl Asks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Owner, oneshot::Sender<Answer>)>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Awaits the answer to request `id` from `owner`'s client; it is forgotten when the
    /// returned guard is dropped.
    pub fn register(
        self: &Arc<Self>,
        id: String,
        owner: Owner,
        answer: oneshot::Sender<Answer>,
    ) -> Awaiting {
        self.lock().insert(id.clone(), (owner, answer));
        Awaiting {
            asks: Arc::clone(self),
            id,
        }
    }

    /// Delivers `answer` to request `id`, when `from` is the principal it was sent to (the
    /// same tenant and actor; in the 2025 eras the same `Mcp-Session-Id`).
    pub fn answer(&self, id: &str, from: &Owner, answer: Answer) -> Result<(), Refused> {
        let mut waiting = self.lock();
        match waiting.get(id) {
            Some((owner, _)) if owner == from => {}
            _ => return Err(Refused::Unknown),
        }
        let Some((_, to)) = waiting.remove(id) else {
            return Err(Refused::Unknown);
        };
        drop(waiting);
        to.send(answer).map_err(|_| Refused::Unknown)
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
        self.asks.lock().remove(&self.id);
    }
}

/// What a suspended run does next: ask the client again, or end with its answer.
#[derive(Debug)]
pub enum Next {
    /// The upstream asks the client something (again).
    Ask(crate::relay::Ask),
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
        assert_eq!(
            asks.answer("req_1", &owner("mallory"), answer()),
            Err(Refused::Unknown)
        );
        assert_eq!(
            asks.answer("req_2", &owner("alice"), answer()),
            Err(Refused::Unknown)
        );
        assert_eq!(asks.answer("req_1", &owner("alice"), answer()), Ok(()));
        assert_eq!(
            asks.answer("req_1", &owner("alice"), answer()),
            Err(Refused::Unknown)
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
