//! `subscriptions/listen` streams (2026-07-28) and the list-changed notifications sent on them.
//!
//! rmcp acknowledges a listen request (`notifications/subscriptions/acknowledged`), narrows its
//! filter to what the server advertises, and hands the handler a [`SubscriptionContext`] whose
//! sink tags every notification with the subscription id and drops those the filter excludes.
//! This registry keeps each open stream's sink, so that the trigger tools can notify them all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rmcp::service::{SubscriptionContext, SubscriptionSendError, SubscriptionSink};

/// The open `subscriptions/listen` streams.
#[derive(Default)]
pub struct Subscriptions {
    next_key: AtomicU64,
    sinks: Mutex<HashMap<u64, SubscriptionSink>>,
}

/// Which list changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListChange {
    /// `notifications/tools/list_changed`.
    Tools,
    /// `notifications/prompts/list_changed`.
    Prompts,
}

impl Subscriptions {
    /// Keeps `subscription` open, and notifiable, until the client closes it.
    pub async fn hold(&self, subscription: SubscriptionContext) {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        self.sinks().insert(key, subscription.sink().clone());
        let _registered = Registered {
            registry: self,
            key,
        };
        subscription.cancelled().await;
    }

    /// Sends the notification for `change` on every open stream that asked for it.
    pub async fn notify(&self, change: ListChange) {
        let sinks: Vec<SubscriptionSink> = self.sinks().values().cloned().collect();
        for sink in sinks {
            let sent = match change {
                ListChange::Tools => sink.notify_tool_list_changed().await,
                ListChange::Prompts => sink.notify_prompt_list_changed().await,
            };
            match sent {
                // Streams that did not ask for this list, or have just closed, are skipped.
                Ok(())
                | Err(SubscriptionSendError::NotificationNotAccepted(_))
                | Err(SubscriptionSendError::SubscriptionClosed) => {}
                Err(error) => tracing::warn!(%error, "list_changed not delivered"),
            }
        }
    }

    fn sinks(&self) -> MutexGuard<'_, HashMap<u64, SubscriptionSink>> {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes a stream's sink when its `listen` handler ends, or is dropped.
struct Registered<'a> {
    registry: &'a Subscriptions,
    key: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.registry.sinks().remove(&self.key);
    }
}
