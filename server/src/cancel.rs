//! Calls in flight that their caller cancels (MCP `notifications/cancelled`).
//!
//! A `tools/call` from `/mcp` that reaches its upstream is registered here under its caller
//! (tenant and actor) and the request as the client named it (its `Mcp-Session-Id`, if any, and
//! its JSON-RPC id). A `notifications/cancelled` for that request — on this node, or on another
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
    actor: String,
    /// The client's MCP session and its JSON-RPC request id (compact JSON).
    request: String,
}

impl Key {
    /// The request `id` of `actor` in `tenant`, within MCP session `session` when the client
    /// has one.
    pub fn new(tenant: &str, actor: &str, session: Option<&str>, id: &Value) -> Self {
        Self {
            tenant: tenant.to_owned(),
            actor: actor.to_owned(),
            request: format!("{}\u{1f}{id}", session.unwrap_or("")),
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

/// The calls in flight on this node.
#[derive(Debug, Default)]
pub struct InFlight {
    calls: Mutex<HashMap<Key, (u64, watch::Sender<bool>)>>,
    next: AtomicU64,
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

/// Cancels `key` here, or tells the other nodes to (the call may be in flight on any of them).
pub async fn cancel(in_flight: &InFlight, bus: &Bus, key: &Key) {
    if !in_flight.cancel(key) {
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
