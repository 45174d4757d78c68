//! Heartbeats: while a process runs something that must not be run twice (an invocation, an
//! agent's turn), it moves the row's `updated_at` every [`PERIOD_MS`]; a row still `running`
//! whose heartbeat is older than [`STALE_MS`] belongs to a process that is gone, and any node
//! may take it over with a conditional update.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::store::{self, Store};

/// How often a runner says it is alive.
pub const PERIOD_MS: u64 = 2_000;

/// A `running` row whose heartbeat stopped this long ago belongs to a process that is gone.
pub const STALE_MS: i64 = 10_000;

/// Beats until dropped.
pub struct Heartbeat {
    task: tokio::task::JoinHandle<()>,
    lost: Arc<AtomicBool>,
}

impl Heartbeat {
    /// `beat` answers whether the row is still held; once it is not, [`Heartbeat::lost`] says
    /// so and the beating stops.
    fn every<F, Fut>(what: &'static str, id: String, mut beat: F) -> Self
    where
        F: FnMut(i64) -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, sqlx::Error>> + Send,
    {
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(PERIOD_MS)).await;
                match beat(store::now_ms()).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(%what, %id, "no longer held: another runner took it over");
                        flag.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, %what, %id, "heartbeat not recorded"),
                }
            }
        });
        Self { task, lost }
    }

    /// For running invocation `id`.
    pub fn invocation(store: &Store, tenant_id: &str, id: &str) -> Self {
        let (store, tenant_id, key) = (store.clone(), tenant_id.to_owned(), id.to_owned());
        Self::every("invocation", id.to_owned(), move |_| {
            let (store, tenant_id, key) = (store.clone(), tenant_id.clone(), key.clone());
            async move {
                store::invocations::still_running(&store, &tenant_id, &key)
                    .await
                    .map(|()| true)
            }
        })
    }

    /// For agent `id` while run `runner` holds it.
    pub fn agent(store: &Store, id: &str, runner: &str) -> Self {
        let (store, key, runner) = (store.clone(), id.to_owned(), runner.to_owned());
        Self::every("agent", id.to_owned(), move |now| {
            let (store, key, runner) = (store.clone(), key.clone(), runner.clone());
            async move { store::agents::still_running(&store, &key, &runner, now).await }
        })
    }

    /// Whether the row was found held by someone else (the run must stop).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}
