//! What one node must tell every node at once: an invocation parked, decided, expired or
//! finished (the approvals queue's live updates, the worker's wake-up), and later a session's
//! `list_changed` and cancellations. A client connected to node B hears about a change made on
//! node A.
//!
//! Events travel through the database the nodes share: on PostgreSQL by `NOTIFY` on channel
//! [`CHANNEL`] (delivered to every listening node when the publishing statement commits), on
//! SQLite through the `events` table, which every process polls every [`POLL_EVERY`]. The
//! publishing node delivers its own events to its subscribers at once and skips them when they
//! come back. Events are hints for live views, never the record: a subscriber that missed some
//! (a lagging receiver, a listener reconnecting) is sent [`Event::resync`] and reads the state
//! again. They carry ids, tools, statuses and actors, never argument values.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::store::{self, DbKind, Store};

/// The PostgreSQL `NOTIFY` channel.
pub const CHANNEL: &str = "aperture_events";
/// How often SQLite's `events` table is read.
pub const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long SQLite keeps an event (a process that polls less often than this misses some).
const KEEP_MS: i64 = 10 * 60 * 1000;
/// Events a slow subscriber may fall behind before it is told to resync.
const BUFFER: usize = 1024;

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `evt_…`, ordered by time of publication.
    pub id: String,
    /// The tenant it concerns.
    pub tenant_id: String,
    /// `invocation.parked`, `invocation.decided`, `invocation.expired`,
    /// `invocation.completed`, or `resync`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The id of what changed (`inv_…`).
    pub subject: String,
    /// The actor whose call it is (a caller with only the run scope sees only its own).
    pub actor_id: String,
    /// What a live view shows without reading again: tool, status, decision.
    pub data: Value,
    /// Epoch milliseconds.
    pub at: i64,
    /// The node that published it.
    pub node: String,
}

impl Event {
    /// "Events may have been missed: read again" (to every tenant's subscribers).
    pub fn resync(node: &str) -> Self {
        Self {
            id: crate::ids::new_ordered_id("evt"),
            tenant_id: String::new(),
            kind: "resync".into(),
            subject: String::new(),
            actor_id: String::new(),
            data: Value::Null,
            at: store::now_ms(),
            node: node.to_owned(),
        }
    }
}

/// The node's end of the event channel.
pub struct Bus {
    store: Store,
    node: String,
    local: broadcast::Sender<Event>,
    /// The invocation worker's wake-up: an invocation released on any node may be run here.
    worker: Arc<Notify>,
}

impl Bus {
    /// A bus over `store` that wakes `worker` when an invocation is released anywhere.
    pub fn new(store: Store, worker: Arc<Notify>) -> Arc<Self> {
        let (local, _) = broadcast::channel(BUFFER);
        Arc::new(Self {
            store,
            node: crate::ids::new_id("node"),
            local,
            worker,
        })
    }

    /// The worker's wake-up.
    pub fn worker(&self) -> &Arc<Notify> {
        &self.worker
    }

    /// The store events cross nodes through.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Events from every node, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.local.subscribe()
    }

    /// Publishes an event about invocation `subject` of `actor_id` in `tenant_id`: delivered
    /// here at once, then to the other nodes. A database that does not take it is logged, not
    /// returned: the change itself is already stored, and live views read it again on resync.
    pub async fn publish(
        &self,
        tenant_id: &str,
        kind: &str,
        subject: &str,
        actor_id: &str,
        data: Value,
    ) {
        let event = Event {
            id: crate::ids::new_ordered_id("evt"),
            tenant_id: tenant_id.to_owned(),
            kind: kind.to_owned(),
            subject: subject.to_owned(),
            actor_id: actor_id.to_owned(),
            data,
            at: store::now_ms(),
            node: self.node.clone(),
        };
        self.deliver(event.clone());
        let body = match serde_json::to_string(&event) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(error = %e, "an event could not be encoded");
                return;
            }
        };
        let sent = match self.store.kind() {
            DbKind::Postgres => sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(&body)
                .execute(self.store.pool())
                .await
                .map(drop),
            DbKind::Sqlite => sqlx::query(
                "INSERT INTO events (node, tenant_id, body, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(&self.node)
            .bind(tenant_id)
            .bind(&body)
            .bind(event.at)
            .execute(self.store.pool())
            .await
            .map(drop),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, kind, "an event did not reach the other nodes");
        }
    }

    fn deliver(&self, event: Event) {
        if event.kind.starts_with("invocation.") {
            self.worker.notify_one();
        }
        // No subscriber is fine.
        let _ = self.local.send(event);
    }

    /// Receives the other nodes' events until the task is dropped (spawned by the server).
    pub async fn run(self: Arc<Self>, database_url: String) {
        match self.store.kind() {
            DbKind::Postgres => self.listen(&database_url).await,
            DbKind::Sqlite => self.poll().await,
        }
    }

    /// PostgreSQL: `LISTEN`, reconnecting after a failure (subscribers are told to resync).
    async fn listen(&self, database_url: &str) {
        loop {
            match sqlx::postgres::PgListener::connect(database_url).await {
                Ok(mut listener) => {
                    if let Err(e) = listener.listen(CHANNEL).await {
                        tracing::warn!(error = %e, "LISTEN {CHANNEL}");
                    } else {
                        self.deliver(Event::resync(&self.node));
                        loop {
                            match listener.try_recv().await {
                                Ok(Some(n)) => self.received(n.payload()),
                                // The connection was lost (and is made again by `try_recv`):
                                // whatever was sent meanwhile is missed.
                                Ok(None) => self.deliver(Event::resync(&self.node)),
                                Err(e) => {
                                    tracing::warn!(error = %e, "listening for events");
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "connecting to listen for events"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// SQLite: reads the events other processes wrote since the last read; drops old ones.
    async fn poll(&self) {
        // From the newest event on (older ones were before this process): read until the
        // database answers, never from the start.
        let mut last: i64 = loop {
            match sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(seq) FROM events")
                .fetch_one(self.store.pool())
                .await
            {
                Ok(seq) => break seq.unwrap_or(0),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the events table");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let mut pruned_at = 0;
        loop {
            tokio::time::sleep(POLL_EVERY).await;
            // Every event since the last read, own ones included (skipped in `received`), so
            // that `last` moves past them.
            let rows: Result<Vec<(i64, String)>, _> = sqlx::query_as(
                "SELECT seq, body FROM events WHERE seq > $1 ORDER BY seq LIMIT 1000",
            )
            .bind(last)
            .fetch_all(self.store.pool())
            .await;
            match rows {
                Ok(rows) => {
                    for (seq, body) in rows {
                        last = last.max(seq);
                        self.received(&body);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "reading events"),
            }
            let now = store::now_ms();
            if now - pruned_at > 60_000 {
                pruned_at = now;
                if let Err(e) = sqlx::query("DELETE FROM events WHERE created_at < $1")
                    .bind(now - KEEP_MS)
                    .execute(self.store.pool())
                    .await
                {
                    tracing::debug!(error = %e, "deleting old events");
                }
            }
        }
    }

    fn received(&self, body: &str) {
        match serde_json::from_str::<Event>(body) {
            Ok(event) if event.node == self.node => {}
            Ok(event) => self.deliver(event),
            Err(e) => tracing::warn!(error = %e, "an event that does not parse"),
        }
    }
}
