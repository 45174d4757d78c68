//! Calls in flight that their caller cancels (MCP `notifications/cancelled`).
//!
//! A `tools/call` from `/mcp` that reaches its upstream is registered here under its caller
//! (tenant and the calling token) and the request as the client named it (its
//! `Mcp-Session-Id`, if any, and its JSON-RPC id, kept and published as a fixed-size digest).
//! A caller's cancellations that name nothing here are relayed to the other nodes at most
//! [`MAX_RELAYED_PER_MINUTE`] a minute. A `notifications/cancelled` for that request — on this node, or on another
//! one, whose cancellation reaches every node through the events bus ([`EVENT`], [`relay`]) —
//! stops waiting for the upstream: dropping the upstream request makes rmcp send the upstream
//! `notifications/cancelled` in turn, and the call ends with an execution receipt with reason
//! `cancelled` (CONTRACT §14). A cancellation that names nothing in flight (unknown, finished,
//! another actor's) does nothing, as MCP allows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::events::Bus;

/// The event kind that carries a cancellation to the other nodes; its subject is the
/// request ([`Key::request`]), its tenant and actor the caller's.
pub const EVENT: &str = "call.cancel";

/// Whose request, as the client named it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    tenant: String,
    /// The caller ([`crate::principal::Principal::caller_id`]).
    actor: String,
    /// A digest of the client's MCP session and its JSON-RPC request id: the same size
    /// whatever the client chose.
    request: String,
}

impl Key {
    /// The request `id` of `caller` in `tenant`, within MCP session `session` when the client
    /// has one.
    pub fn new(tenant: &str, caller: &str, session: Option<&str>, id: &Value) -> Self {
        use sha2::Digest as _;
        let named = format!("{}\u{1f}{id}", session.unwrap_or(""));
        Self {
            tenant: tenant.to_owned(),
            actor: caller.to_owned(),
            request: format!(
                "req:{}",
                hex::encode(sha2::Sha256::digest(named.as_bytes()))
            ),
        }
    }

    /// The released invocation `invocation_id` of `tenant` while the worker runs it: whoever
    /// may cancel it ([`crate::invocations::cancel`] decides) cancels it under this key.
    pub fn invocation(tenant: &str, invocation_id: &str) -> Self {
        Self {
            tenant: tenant.to_owned(),
            actor: String::new(),
            request: format!("invocation\u{1f}{invocation_id}"),
        }
    }

    /// What travels as an event's subject.
    pub fn request(&self) -> &str {
        &self.request
    }
}

/// The most cancellations of one caller relayed to the other nodes (stored for them) a minute.
pub const MAX_RELAYED_PER_MINUTE: u32 = 60;

/// The calls in flight on this node.
#[derive(Debug, Default)]
pub struct InFlight {
    calls: Mutex<HashMap<Key, (u64, watch::Sender<bool>)>>,
    next: AtomicU64,
    /// Per caller (tenant, caller): the minute and how many cancellations were relayed in it.
    relayed: Mutex<HashMap<(String, String), (i64, u32)>>,
}

/// A call registered in [`InFlight`] until this is dropped; `cancelled` turns `true` when its
/// caller cancels it.
#[derive(Debug)]
pub struct Registered {
    in_flight: Arc<InFlight>,
    key: Key,
    serial: u64,
    /// Turns `true` on cancellation.
    pub cancelled: watch::Receiver<bool>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (u64, watch::Sender<bool>)>> {
        crate::sync::lock(&self.calls)
    }

    /// Registers the call `key` (a second call under the same key takes its place: a client
    /// reusing a request id while the first is in flight cancels only the latest).
    pub fn register(self: &Arc<Self>, key: Key) -> Registered {
        let (sender, cancelled) = watch::channel(false);
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key.clone(), (serial, sender));
        Registered {
            in_flight: self.clone(),
            key,
            serial,
            cancelled,
        }
    }

    /// Whether another cancellation of `key`'s caller may be relayed this minute (counts it).
    fn may_relay(&self, key: &Key) -> bool {
        let minute = crate::store::now_ms() / 60_000;
        let mut relayed = crate::sync::lock(&self.relayed);
        // Other minutes' counts are of no use any more.
        relayed.retain(|_, (m, _)| *m == minute);
        let count = relayed
            .entry((key.tenant.clone(), key.actor.clone()))
            .or_insert((minute, 0));
        if count.1 >= MAX_RELAYED_PER_MINUTE {
            return false;
        }
        count.1 += 1;
        true
    }

    /// Cancels the call `key` if it is in flight here; whether it was.
    pub fn cancel(&self, key: &Key) -> bool {
        match self.lock().get(key) {
            Some((_, sender)) => {
                sender.send_replace(true);
                true
            }
            None => false,
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut calls = self.in_flight.lock();
        if calls.get(&self.key).is_some_and(|(s, _)| *s == self.serial) {
            calls.remove(&self.key);
        }
    }
}

/// Cancels `key` here, or tells the other nodes to (the call may be in flight on any of them;
/// at most [`MAX_RELAYED_PER_MINUTE`] of a caller's a minute).
pub async fn cancel(in_flight: &InFlight, bus: &Bus, key: &Key) {
    if !in_flight.cancel(key) && in_flight.may_relay(key) {
        bus.publish(&key.tenant, EVENT, &key.request, &key.actor, json!({}))
            .await;
    }
}

/// Applies the cancellations other nodes relay ([`EVENT`]) to the calls in flight here, until
/// the bus closes (spawned by the server).
pub async fn relay(bus: Arc<Bus>, in_flight: Arc<InFlight>) {
    let mut events = bus.subscribe();
    loop {
        match events.recv().await {
            Ok(event) if event.kind == EVENT => {
                in_flight.cancel(&Key {
                    tenant: event.tenant_id,
                    actor: event.actor_id,
                    request: event.subject,
                });
            }
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancellation_reaches_only_its_own_call() {
        let in_flight = Arc::new(InFlight::default());
        let id = json!(7);
        let mine = in_flight.register(Key::new("t", "agent", Some("mcp_1"), &id));
        let theirs = in_flight.register(Key::new("t", "other", Some("mcp_1"), &id));
        assert!(!in_flight.cancel(&Key::new("t", "agent", Some("mcp_2"), &id)));
        assert!(!in_flight.cancel(&Key::new("u", "agent", Some("mcp_1"), &id)));
        assert!(!in_flight.cancel(&Key::new("t", "agent", Some("mcp_1"), &json!("7"))));
        assert!(in_flight.cancel(&Key::new("t", "agent", Some("mcp_1"), &id)));
        assert!(*mine.cancelled.borrow());
        assert!(!*theirs.cancelled.borrow());
        drop(mine);
        assert!(!in_flight.cancel(&Key::new("t", "agent", Some("mcp_1"), &id)));
    }

    /// Issue 45 (item 10): whatever request id a client chooses, what is kept and published of
    /// it is one fixed-size digest, and a caller's relayed cancellations are counted.
    #[test]
    fn request_ids_are_kept_as_digests_and_relays_are_bounded() {
        let huge = json!("x".repeat(900_000));
        let key = Key::new("t", "tok_1", Some("mcp_1"), &huge);
        assert_eq!(key.request().len(), 4 + 64);
        assert_ne!(key, Key::new("t", "tok_1", Some("mcp_1"), &json!("y")));
        let in_flight = InFlight::default();
        for n in 0..MAX_RELAYED_PER_MINUTE {
            assert!(in_flight.may_relay(&Key::new("t", "tok_1", None, &json!(n))));
        }
        assert!(!in_flight.may_relay(&Key::new("t", "tok_1", None, &json!("more"))));
        // Another caller has its own count.
        assert!(in_flight.may_relay(&Key::new("t", "tok_2", None, &json!(1))));
    }

    #[test]
    fn a_reused_request_id_keeps_the_latest_registered() {
        let in_flight = Arc::new(InFlight::default());
        let key = Key::new("t", "agent", None, &json!(1));
        let first = in_flight.register(key.clone());
        let second = in_flight.register(key.clone());
        // The first one ending does not unregister the second.
        drop(first);
        assert!(in_flight.cancel(&key));
        assert!(*second.cancelled.borrow());
    }
}
