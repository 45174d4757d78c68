//! What the handlers share: across the whole server ([`Shared`]) and within one 2025 session
//! ([`Session`]).
//!
//! rmcp builds one handler per session (and one per stateless request) from a factory; each
//! gets the one [`Shared`] and, for a session, a [`Session`] of its own.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rmcp::model::LoggingLevel;
use rmcp::task_manager::TaskManager;

use crate::request_state::RequestStateSeal;
use crate::subscriptions::Subscriptions;

/// Server-wide state.
pub struct Shared {
    /// Seals the multi-round tools' `requestState`.
    pub seal: RequestStateSeal,
    /// The open `subscriptions/listen` streams.
    pub subscriptions: Subscriptions,
    /// The tasks of the tasks extension (SEP-2663), polled with `tasks/get`.
    pub tasks: TaskManager,
}

impl Shared {
    /// Fresh state with a random request-state key.
    pub fn new() -> Self {
        Self {
            seal: RequestStateSeal::random(),
            subscriptions: Subscriptions::default(),
            tasks: TaskManager::new(),
        }
    }
}

/// The state of one 2025 session (unused by stateless requests, which have none).
#[derive(Default)]
pub struct Session {
    /// The level `logging/setLevel` asked for; every level until it is called.
    log_level: Mutex<Option<LoggingLevel>>,
    /// The URIs `resources/subscribe` subscribed to.
    subscribed: Mutex<HashSet<String>>,
}

impl Session {
    /// The least severe level the client wants to hear about.
    pub fn log_level(&self) -> LoggingLevel {
        lock(&self.log_level).unwrap_or(LoggingLevel::Debug)
    }

    /// Records the level `logging/setLevel` asked for.
    pub fn set_log_level(&self, level: LoggingLevel) {
        *lock(&self.log_level) = Some(level);
    }

    /// Subscribes the session to updates of `uri`.
    pub fn subscribe(&self, uri: String) {
        lock(&self.subscribed).insert(uri);
    }

    /// Ends the session's subscription to `uri`, if it had one.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscribed).remove(uri);
    }
}

/// Both, as every handler holds them.
#[derive(Clone)]
pub struct State {
    pub shared: Arc<Shared>,
    pub session: Arc<Session>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
