//! `notifications/tools/list_changed`: told to a listening stream ([`super::streams`]) when the
//! next `tools/list` of an exposure session it watches would differ from the one its client
//! holds.
//!
//! A stream watches, per exposure session, the latest manifest whose lease has not ended: the
//! ones its MCP connection listed (2025 era, `GET /mcp` with `Mcp-Session-Id`; the manifest
//! rows remember the connection), or the actor's newest sessions (2026-07-28,
//! `subscriptions/listen`). Each is reported once, when one of these holds:
//! - a fresh grant would list other tools, versions, definitions, schemas or modes, or pin
//!   other targets: a policy saved or activated, an upstream synced or re-registered, a tool
//!   drifted, held or described anew — by this node, another node or the command line alike;
//! - the session (or a fork's parent) was revoked, or the parent of a fork listed again;
//! - its lease is about to end ([`lease_margin`]).
//!
//! Changes are noticed through the database every node shares: every [`CHECK_EVERY`] the node
//! reads one row of counters (the read generation, which triggers move with every change to
//! tools, upstreams and sessions, and the policies' versions and activations) and, when they
//! moved, builds each watched session's manifest again and compares. The watched manifests
//! are read again every [`REFRESH_EVERY`] (a client that listed again has a new one).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::streams::{Log, Streams};
use crate::store::{self, Store, exposure::ManifestRow};
use crate::sync::lock;

/// 2026-07-28: the `subscriptions/listen` request a notification belongs to.
pub const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// How often the node looks for changes while a stream listens.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How often a stream's watched manifests are read again.
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// Sessions one stream watches at most (the newest).
const MAX_SESSIONS: i64 = 20;

/// How long before a lease ends its stream is told: a fifth of the lease, at most a minute.
pub fn lease_margin(row: &ManifestRow) -> i64 {
    ((row.lease_expires_at - row.issued_at) / 5).clamp(0, 60_000)
}

/// What a listening stream asked for.
pub struct Listener {
    /// 2026-07-28: the `subscriptions/listen` request's id, in every notification's `_meta`.
    pub subscription_id: Option<Value>,
    /// Whether it hears `notifications/tools/list_changed` (asked for, and honored).
    pub tools: bool,
    /// The bearer token that opened it: the stream ends when it no longer authenticates.
    pub secret: String,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("subscription_id", &self.subscription_id)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// One listening stream.
#[derive(Debug)]
pub struct Watch {
    log: Arc<Log>,
    listener: Listener,
    state: Mutex<WatchState>,
}

#[derive(Debug, Default)]
struct WatchState {
    /// Manifests already reported (the client lists again to get a new one).
    reported: HashSet<String>,
    watched: Vec<ManifestRow>,
    refreshed: Option<Instant>,
    /// Checked against a fresh build at least once.
    compared: bool,
}

impl Watch {
    /// The stream its notifications go on.
    pub fn log(&self) -> &Arc<Log> {
        &self.log
    }

    /// What it asked for.
    pub fn listener(&self) -> &Listener {
        &self.listener
    }

    /// Who holds its resource subscriptions: its MCP session (2025 eras: every stream of the
    /// session hears them), or the stream itself (2026-07-28).
    pub fn holder(&self) -> String {
        match (
            &self.listener.subscription_id,
            &self.log.owner().mcp_session,
        ) {
            (None, Some(session)) => session.clone(),
            _ => crate::items::listen_holder(self.log.id()),
        }
    }
}

/// The node's listening streams.
#[derive(Debug, Default)]
pub struct Watchers {
    watches: Mutex<Vec<Arc<Watch>>>,
}

impl Watchers {
    /// Starts watching for `log`'s owner. A 2025-era connection has one listening stream per
    /// node: a new one ends the one it had (a message goes on one stream, never several).
    pub fn add(&self, streams: &Streams, log: Arc<Log>, listener: Listener) {
        let mut watches = lock(&self.watches);
        if listener.subscription_id.is_none() {
            watches.retain(|w| {
                let same = w.log.owner() == log.owner() && w.listener.subscription_id.is_none();
                if same {
                    streams.remove(&w.log);
                }
                !same
            });
        }
        watches.push(Arc::new(Watch {
            log,
            listener,
            state: Mutex::new(WatchState::default()),
        }));
    }

    /// The streams of `tenant_id` listening here.
    pub fn of_tenant(&self, tenant_id: &str) -> Vec<Arc<Watch>> {
        lock(&self.watches)
            .iter()
            .filter(|w| w.log.owner().tenant_id == tenant_id && !w.log.is_finished())
            .cloned()
            .collect()
    }

    /// How many streams listen here.
    pub fn len(&self) -> usize {
        lock(&self.watches).len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks every [`CHECK_EVERY`] until the task is dropped (spawned by the server).
    pub async fn run(
        self: Arc<Self>,
        store: Store,
        validators: Arc<engine::narrow::ValidatorCache>,
        streams: Arc<Streams>,
    ) {
        let mut seen: Option<Counters> = None;
        let mut every = tokio::time::interval(CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let mut ended = Vec::new();
            let watches: Vec<Arc<Watch>> = {
                let mut watches = lock(&self.watches);
                watches.retain(|w| {
                    let gone = w.log.is_finished() || w.log.abandoned();
                    if gone {
                        streams.remove(&w.log);
                        ended.push(w.clone());
                    }
                    !gone
                });
                watches.clone()
            };
            for watch in ended {
                // A listening stream's resource subscriptions end with it.
                if watch.listener.subscription_id.is_some()
                    && let Err(e) =
                        store::subscriptions::remove_holder(&store, &watch.holder()).await
                {
                    tracing::debug!(error = %e, "ending a listening stream's subscriptions");
                }
            }
            if watches.is_empty() {
                seen = None;
                continue;
            }
            let now = match counters(&store).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "reading what tools/list depends on");
                    continue;
                }
            };
            let moved = seen.as_ref() != Some(&now);
            seen = Some(now);
            for watch in watches {
                if let Err(e) = check(&store, &validators, &streams, &watch, moved).await {
                    tracing::debug!(error = %e.into_app_error().message, "checking a listing for changes");
                }
            }
        }
    }
}

/// What `tools/list` depends on, as counters that move with every change.
#[derive(Debug, PartialEq, Eq, sqlx::FromRow)]
struct Counters {
    generation: i64,
    policy_versions: i64,
    activations: i64,
    activated_at: i64,
}

async fn counters(store: &Store) -> Result<Counters, sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT generation FROM read_generation WHERE id = 1) AS generation, \
         (SELECT COUNT(*) FROM policy_versions) AS policy_versions, \
         (SELECT COUNT(*) FROM policy_activations) AS activations, \
         (SELECT COALESCE(MAX(activated_at), 0) FROM policy_activations) AS activated_at",
    )
    .fetch_one(store.pool())
    .await
}

/// Reports what changed for `watch`; `moved`: the counters moved since the last check.
async fn check(
    store: &Store,
    validators: &engine::narrow::ValidatorCache,
    streams: &Streams,
    watch: &Watch,
    moved: bool,
) -> Result<(), crate::error::ServiceError> {
    let owner = watch.log.owner();
    let now = store::now_ms();
    let (watched, compare) = {
        let state = lock(&watch.state);
        let stale = state
            .refreshed
            .is_none_or(|at| at.elapsed() >= REFRESH_EVERY);
        (
            (!stale && !moved).then(|| state.watched.clone()),
            moved || !state.compared,
        )
    };
    let watched = match watched {
        Some(w) => w,
        None => {
            // Still the caller it was opened for (a revoked or expired token ends the stream).
            let caller = crate::principal::authenticate_bearer(store, &watch.listener.secret)
                .await
                .ok()
                .filter(|p| p.tenant_id == owner.tenant_id && p.actor_id == owner.actor_id);
            let Some(caller) = caller else {
                streams.remove(&watch.log);
                return Ok(());
            };
            if !watch.listener.tools {
                lock(&watch.state).refreshed = Some(Instant::now());
                return Ok(());
            }
            let rows = store::exposure::watched_manifests(
                store,
                &owner.tenant_id,
                &owner.actor_id,
                owner.mcp_session.as_deref(),
                now,
                MAX_SESSIONS,
                caller.confined_to(),
            )
            .await?;
            let mut state = lock(&watch.state);
            // What is no longer watched need not be remembered as reported.
            state.reported.retain(|id| rows.iter().any(|r| &r.id == id));
            state.watched.clone_from(&rows);
            state.refreshed = Some(Instant::now());
            rows
        }
    };
    let mut changed = Vec::new();
    for row in &watched {
        if lock(&watch.state).reported.contains(&row.id) {
            continue;
        }
        let ending = row.lease_expires_at - now <= lease_margin(row);
        let differs =
            ending || (compare && crate::exposure::listing_changed(store, validators, row).await?);
        if differs {
            lock(&watch.state).reported.insert(row.id.clone());
            changed.push(row.session_id.clone());
        }
    }
    if compare {
        lock(&watch.state).compared = true;
    }
    if !changed.is_empty() {
        watch.log.push(&list_changed(
            &changed,
            watch.listener.subscription_id.as_ref(),
        ));
    }
    Ok(())
}

/// The notification: which exposure sessions to list again in `_meta.session_ids` (an
/// Aperture extension), and the subscription it belongs to in 2026-07-28.
pub fn list_changed(session_ids: &[String], subscription_id: Option<&Value>) -> Value {
    let mut meta = json!({"session_ids": session_ids});
    if let Some(id) = subscription_id {
        meta[META_SUBSCRIPTION] = id.clone();
    }
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": meta}
    })
}
