//! The tamper-evident journal: one append-only, hash-chained, signed chain of receipts per
//! tenant (CONTRACT §6).
//!
//! [`Journal::append`] fills in a receipt's position (`seq`, `prev_hash`), its disclosures
//! digest and signature, and stores record and disclosures in one row.
//!
//! **Group commit.** Appends go to one writer task per journal, which takes every append waiting
//! when it gets to them (up to [`MAX_BATCH`]), chains and signs them in arrival order, and
//! writes them in one transaction: one commit (one fsync) for the batch instead of one per
//! record, and no caller hears "recorded" before its record is committed. A small batch first
//! lets the tasks that are ready run (some of them are about to append), so that under load a
//! commit carries many records; see [`GATHER_BELOW`]. On PostgreSQL, whose commits wait for
//! the WAL flush, the next batch is signed while the database commits the one in flight
//! ([`pipeline`]). Writers in other processes (nodes
//! sharing PostgreSQL) are kept apart by the `(tenant_id, seq)` primary key: a batch that finds
//! a position taken is rolled back, re-reads the heads and is tried again; they take turns at a
//! chain under its advisory lock ([`Writer::contended`]).
//! [`verify`] checks every chain and signature, as `aperture journal verify` does.

pub mod audit;
pub mod checkpoints;
mod pipeline;
pub mod spool;
pub mod tree;
pub mod watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use engine::canonical::ZERO_HASH;
use engine::receipt::{
    self, ChainError, ChainVerifier, Decision, Disclosures, JwkSet, ReasonCode, Receipt,
    ReceiptKind,
};
use rand::RngCore;

use crate::ids;
use crate::keys::KeyRing;
use crate::store::{self, Store};

/// Why a record could not be appended. Callers answer `journal_unavailable` and run nothing.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database refused or is unreachable.
    #[error("journal store: {0}")]
    Store(#[from] sqlx::Error),
    /// Canonicalization or signing failed.
    #[error("journal record: {0}")]
    Record(#[from] receipt::ReceiptError),
    /// Other writers kept winning the race for the head.
    #[error("journal head contended")]
    Contended,
    /// The batch this record was in could not be committed.
    #[error("journal store: {0}")]
    Failed(String),
    /// The writer task is gone (the server is shutting down).
    #[error("journal writer stopped")]
    Stopped,
    /// The store's read counter moved away from the generation the record was decided at
    /// ([`Journal::append_at`]): nothing was recorded, and the caller decides again.
    #[error("the reads this record was decided on are out of date")]
    Stale,
}

/// The writer task: batches, chains, signs and commits.
struct Writer {
    store: Store,
    keys: KeyRing,
    stats: Arc<Stats>,
    /// Last `(seq, record_hash)` per tenant, as committed by this writer; reloaded from the
    /// store after any failure.
    heads: Heads,
    /// When another writer last took a position this one tried ([`Writer::contended`]).
    contended_at: Option<std::time::Instant>,
    /// When the writer's own PostgreSQL connection last committed a batch ([`pipeline`]).
    own_used: Option<std::time::Instant>,
    /// Tenants with committed records `journal_facets` may not have yet ([`Writer::index`]).
    unindexed: std::collections::HashSet<String>,
    /// When the writer last copied records to `journal_facets`.
    indexed_at: std::time::Instant,
    /// PostgreSQL: the task copying records to `journal_facets`, while it runs.
    indexing: Option<tokio::task::JoinHandle<()>>,
    /// Whether the last copy to `journal_facets` failed (then retried only every
    /// [`FACETS_RETRY`]).
    facets_failing: bool,
    /// SQLite: the writer's own connection, kept from batch to batch so that its page cache
    /// stays warm (a pooled connection's cache is dropped whenever another connection has
    /// written since it was last used, as the writer's previous batch has). Dropped after any
    /// failure (or an append that stopped waiting in the middle of its commit) and made again
    /// for the next batch. PostgreSQL writes through the pool ([`pipeline`]). In a mutex only
    /// so that the writer can be shared ([`SharedWriter`]): always reached through `&mut`.
    own: std::sync::Mutex<Option<sqlx::AnyConnection>>,
    /// When a batch was last committed, by the writer's task or by an append itself
    /// ([`Journal::append_at`]).
    committed_at: std::time::Instant,
    /// SQLite: the tenants the writer before this one may have left uncopied are still to be
    /// read ([`Writer::unindexed_from_store`]), at the first copy.
    unindexed_unread: bool,
    /// SQLite on a file: the batches' one statement run on the committing task's own thread
    /// ([`store::journal::Direct`]), through `own` only when that cannot decide.
    direct: Option<store::journal::Direct>,
}

/// SQLite: the writer, shared by its task (which commits what is queued, in batches) and the
/// appends that find nothing queued and the writer idle, which commit themselves
/// ([`Journal::append_at`]).
#[derive(Clone)]
struct SharedWriter(Arc<tokio::sync::Mutex<Writer>>);

impl std::fmt::Debug for SharedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedWriter")
    }
}

/// A record waiting in a batch.
#[derive(Debug)]
struct Work {
    unsigned: Receipt,
    disclosures: String,
    /// The store's read generation the record was decided at, if it must still be current.
    decided_at: Option<i64>,
}

/// How a batch is written and checks the generations its records were decided at.
#[derive(Clone, Copy)]
enum Generation {
    /// In a transaction; no record depends on it.
    Unneeded,
    /// In a transaction; read in it.
    Read(i64),
    /// In one statement outside a transaction, whose own condition checks the generation (if
    /// any record depends on one: all of them on this one).
    InStatement(Option<i64>),
}

/// What signing a record of a batch made, ready to insert (the receipt itself is signed in
/// place, in its [`Work`]).
struct Prepared {
    json: String,
    record_hash: String,
    issued_at: i64,
}

/// How one record of a batch fared: written (`None`) or not, and why.
type Written = Option<JournalError>;

/// Where an append's result goes.
type Reply = oneshot::Sender<Outcome>;

/// An append's result: the signed receipt as committed, or why it is not.
type Outcome = Result<Receipt, JournalError>;

/// Last `(seq, record_hash)` per tenant.
type Heads = HashMap<String, (i64, String)>;

/// A record of a batch chained and signed at its position, or why it was not.
type Signed = Result<(i64, Prepared), JournalError>;

/// What writing a batch did: how each record fared, the heads after it, and the committed
/// records' leaves `(tenant, seq, text)` for the checkpointer (none when it is not attached).
type BatchWritten = (Vec<Written>, Heads, Vec<(String, i64, String)>);

impl Writer {
    fn new(store: Store, keys: KeyRing, stats: Arc<Stats>) -> Self {
        Self {
            keys,
            stats,
            heads: HashMap::new(),
            contended_at: None,
            own_used: None,
            unindexed: std::collections::HashSet::new(),
            indexed_at: std::time::Instant::now(),
            indexing: None,
            facets_failing: false,
            own: std::sync::Mutex::new(None),
            committed_at: std::time::Instant::now(),
            unindexed_unread: false,
            direct: store::journal::Direct::for_store(&store),
            store,
        }
    }

    /// Takes note of the tenants of the store's journal, whose last records `journal_facets`
    /// may not have (the writer before this one stopped before copying them); they are copied
    /// at the first pause.
    async fn unindexed_from_store(&mut self) {
        match store::journal::tenants(&self.store).await {
            Ok(tenants) => self.unindexed.extend(tenants),
            Err(e) => tracing::warn!(error = %e, "journal: listing tenants to index"),
        }
    }

    /// Waits for up to `max` appends into `into`, copying committed records to
    /// `journal_facets` whenever appends pause meanwhile ([`Writer::index`]); 0 once every
    /// sender is gone (after a last copy).
    async fn receive(
        &mut self,
        waiting: &mut mpsc::Receiver<Pending>,
        into: &mut Vec<Pending>,
        max: usize,
        own: &mut Option<sqlx::AnyConnection>,
    ) -> usize {
        loop {
            let received = if self.unindexed.is_empty() {
                waiting.recv_many(into, max).await
            } else {
                let next = waiting.recv_many(into, max);
                match tokio::time::timeout(self.facets_pause(), next).await {
                    Ok(n) => n,
                    // A pause: copy what was committed to the facets now.
                    Err(_) => {
                        self.index(own).await;
                        continue;
                    }
                }
            };
            if received == 0 {
                self.index(own).await;
            }
            return received;
        }
    }

    /// Whether the records committed since the last copy to `journal_facets` must be copied
    /// before the next batch even though appends keep coming: a filtered read scans the
    /// records after the indexed prefix, so it must stay short.
    fn index_due(&self) -> bool {
        !self.unindexed.is_empty() && self.indexed_at.elapsed() >= self.facets_every()
    }

    /// How long appends must pause before the next copy to `journal_facets`.
    fn facets_pause(&self) -> std::time::Duration {
        if self.facets_failing {
            FACETS_RETRY
        } else {
            FACETS_IDLE
        }
    }

    /// How often records are copied to `journal_facets` under load.
    fn facets_every(&self) -> std::time::Duration {
        if self.facets_failing {
            FACETS_RETRY
        } else {
            FACETS_EVERY
        }
    }

    /// Copies the committed records `journal_facets` does not have yet (the receipts browser's
    /// filters and the overview's counts read it; migration 0024), off the call path: between
    /// batches, when appends pause for [`FACETS_IDLE`] or every [`FACETS_EVERY`] under load.
    /// SQLite: on the writer's own connection (another connection would contend with the
    /// writer for the database's one write lock); PostgreSQL: in a task of its own on the pool.
    /// A failure loses nothing: filtered reads take unindexed records from the journal itself,
    /// and the tenants are tried again at the next pause.
    async fn index(&mut self, own: &mut Option<sqlx::AnyConnection>) {
        self.indexed_at = std::time::Instant::now();
        if std::mem::take(&mut self.unindexed_unread) {
            self.unindexed_from_store().await;
        }
        if self.unindexed.is_empty() {
            return;
        }
        match self.store.kind() {
            store::DbKind::Sqlite => {
                let mut conn = match own.take() {
                    Some(conn) => conn,
                    None => match self.store.connect_writer().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            tracing::warn!(error = %e, "journal: connecting to index facets");
                            self.facets_failing = true;
                            return;
                        }
                    },
                };
                let tenants: Vec<String> = self.unindexed.drain().collect();
                match index_tenants(&mut conn, tenants).await {
                    // Kept for the next batch, as after a batch.
                    Ok(()) => {
                        *own = Some(conn);
                        self.facets_failing = false;
                    }
                    // Dropped, as after a failed batch.
                    Err(left) => {
                        self.unindexed.extend(left);
                        self.facets_failing = true;
                    }
                }
            }
            store::DbKind::Postgres => {
                if self.indexing.as_ref().is_some_and(|t| !t.is_finished()) {
                    return;
                }
                self.unindexed
                    .extend(std::mem::take(&mut *crate::sync::lock(&self.stats.reindex)));
                let tenants: Vec<String> = self.unindexed.drain().collect();
                let store = self.store.clone();
                let stats = self.stats.clone();
                self.indexing = Some(tokio::spawn(async move {
                    let mut conn = match store.pool().acquire().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            tracing::warn!(error = %e, "journal: connecting to index facets");
                            stats.reindex(tenants);
                            return;
                        }
                    };
                    if let Err(left) = index_tenants(&mut conn, tenants).await {
                        stats.reindex(left);
                    }
                }));
            }
        }
    }

    /// SQLite: takes what is queued, in batches, until every sender is gone; copies committed
    /// records to `journal_facets` whenever commits pause for [`FACETS_IDLE`] (or every
    /// [`FACETS_EVERY`] under load), whichever side committed them. The lock is held only to
    /// commit or copy, so an append that finds nothing queued commits itself meanwhile.
    ///
    /// The task takes the lock only to commit a batch or to copy, and looks at the copy's timing
    /// with `try_lock`: a task waiting for the lock would have it next, and every append
    /// arriving meanwhile would queue behind it instead of committing itself.
    async fn run_shared(
        shared: SharedWriter,
        mut waiting: mpsc::Receiver<Pending>,
        stats: Arc<Stats>,
    ) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        loop {
            let wait = match shared.0.try_lock() {
                Ok(writer) => writer.facets_wait(),
                // An append is committing itself: look again once appends may have paused.
                Err(_) => Some(FACETS_IDLE),
            };
            let next = waiting.recv_many(&mut batch, MAX_BATCH);
            let received = match wait {
                // Nothing to copy: wait for appends, or for an append that committed itself
                // (then its records are to be copied at the next pause).
                None => tokio::select! {
                    received = next => received,
                    () = stats.committed_here.notified() => continue,
                },
                Some(wait) => match tokio::time::timeout(wait, next).await {
                    Ok(received) => received,
                    Err(_) => {
                        if let Ok(mut writer) = shared.0.try_lock()
                            && writer.facets_wait().is_some_and(|w| w.is_zero())
                        {
                            writer.index_own().await;
                        }
                        continue;
                    }
                },
            };
            let mut writer = if received == 0 {
                // Every sender is gone: a last copy.
                shared.0.lock().await.index_own().await;
                return;
            } else {
                gather(&mut waiting, &mut batch, MAX_BATCH).await;
                shared.0.lock().await
            };
            let started = std::time::Instant::now();
            let pending = std::mem::take(&mut batch);
            metrics::histogram!("aperture_journal_batch_records").record(pending.len() as f64);
            let together = pending.len() > 1;
            let (replies, results) = writer.commit(pending).await;
            if together {
                stats.gathered_at.store(micros_now(), Ordering::Relaxed);
            }
            writer.answer(replies, results, started);
            if writer.index_due() {
                writer.index_own().await;
            }
        }
    }

    /// How long commits must still pause before the next copy to `journal_facets` (zero: now);
    /// `None` when there is nothing to copy.
    fn facets_wait(&self) -> Option<std::time::Duration> {
        if self.unindexed.is_empty() && !self.unindexed_unread {
            return None;
        }
        let pause = self
            .facets_pause()
            .saturating_sub(self.committed_at.elapsed());
        let every = self
            .facets_every()
            .saturating_sub(self.indexed_at.elapsed());
        Some(pause.min(every))
    }

    /// [`Writer::index`] on the writer's own connection.
    async fn index_own(&mut self) {
        let mut own = self.take_own();
        self.index(&mut own).await;
        self.put_own(own);
    }

    /// The writer's own connection, taken for a batch (dropped with it if the batch stops).
    fn take_own(&mut self) -> Option<sqlx::AnyConnection> {
        self.own
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Puts back the writer's own connection after a batch.
    fn put_own(&mut self, own: Option<sqlx::AnyConnection>) {
        *self
            .own
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = own;
    }

    /// Commits one record of an append that found nothing queued and the writer idle, on the
    /// append's own task ([`Journal::append_at`]). An append that stops waiting in the middle
    /// leaves the writer as a failed batch does: its connection dropped (made again for the
    /// next batch); its record committed or not, like any record whose caller stopped waiting.
    async fn commit_here(&mut self, work: Work) -> Outcome {
        let started = std::time::Instant::now();
        metrics::histogram!("aperture_journal_batch_records").record(1.0);
        let was_indexed = self.unindexed.is_empty();
        let mut results = self.commit_own(vec![work]).await;
        self.account(&results, started);
        if results.iter().any(Result::is_ok) {
            self.stats.by_callers.fetch_add(1, Ordering::Relaxed);
        }
        if was_indexed && !self.unindexed.is_empty() {
            // The writer's task waits with nothing to copy: it has now.
            self.stats.committed_here.notify_one();
        }
        results
            .pop()
            .unwrap_or_else(|| Err(JournalError::Failed("no result".into())))
    }

    /// Answers the appends of a batch taken at `started` with their results, in order.
    fn answer(&self, replies: Vec<Reply>, results: Vec<Outcome>, started: std::time::Instant) {
        self.account(&results, started);
        for (reply, result) in replies.into_iter().zip(results) {
            self.stats.unanswered.fetch_sub(1, Ordering::Relaxed);
            // A caller that stopped waiting lost nothing: its record is committed or not.
            let _ = reply.send(result);
        }
    }

    /// Counts the results of a batch taken at `started`: the commit's time, its failures, the
    /// receipts, the writer's busy time.
    fn account(&self, results: &[Outcome], started: std::time::Instant) {
        metrics::histogram!("aperture_journal_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        // Stale records are decided again, not lost.
        if results
            .iter()
            .any(|r| r.as_ref().is_err_and(|e| !matches!(e, JournalError::Stale)))
        {
            metrics::counter!("aperture_journal_commit_failures_total").increment(1);
        }
        for receipt in results.iter().flatten() {
            crate::metrics::receipt(receipt, true);
        }
        add_micros(&self.stats.busy_micros, started.elapsed());
    }

    /// Commits `batch` in one transaction on the writer's own connection (SQLite); one result
    /// per pending append, in order.
    async fn commit(&mut self, batch: Vec<Pending>) -> (Vec<Reply>, Vec<Outcome>) {
        let mut replies = Vec::with_capacity(batch.len());
        let mut work = Vec::with_capacity(batch.len());
        for p in batch {
            let (reply, w) = p.split();
            replies.push(reply);
            work.push(w);
        }
        (replies, self.commit_own(work).await)
    }

    /// Commits `work` on the writer's own connection (SQLite), whichever task commits it; one
    /// result per record, in order.
    async fn commit_own(&mut self, work: Vec<Work>) -> Vec<Outcome> {
        let mut own = self.take_own();
        let results = self.commit_work(work, &mut own).await;
        self.put_own(own);
        self.committed_at = std::time::Instant::now();
        results
    }

    /// Commits `work` in one transaction (trying again while other writers take its
    /// positions); one result per record, in order.
    async fn commit_work(
        &mut self,
        mut work: Vec<Work>,
        own: &mut Option<sqlx::AnyConnection>,
    ) -> Vec<Outcome> {
        let mut last = JournalError::Contended;
        for _ in 0..ATTEMPTS {
            match self.try_commit(&mut work, own).await {
                Ok(written) => {
                    // Each record was signed in place for the attempt that wrote it.
                    return outcomes(work, written);
                }
                Err(e) => {
                    self.heads.clear();
                    match e {
                        JournalError::Contended => {
                            self.lost_position();
                            last = e;
                        }
                        other => {
                            return failed(work.len(), &other);
                        }
                    }
                }
            }
        }
        failed(work.len(), &last)
    }

    async fn try_commit(
        &mut self,
        work: &mut [Work],
        own: &mut Option<sqlx::AnyConnection>,
    ) -> Result<Vec<Written>, JournalError> {
        let mut conn_own = match (self.store.kind(), own.take()) {
            (_, Some(conn)) => Some(conn),
            (store::DbKind::Sqlite, None) => Some(self.store.connect_writer().await?),
            (store::DbKind::Postgres, None) => None,
        };
        let mut pooled: Option<sqlx::pool::PoolConnection<sqlx::Any>> = None;
        let conn: &mut sqlx::AnyConnection = match conn_own.as_mut() {
            Some(conn) => conn,
            None => pooled.insert(self.store.pool().acquire().await?),
        };
        // Most batches are one statement outside a transaction: one round trip to the database
        // (one hand-off to SQLite's connection thread, where `BEGIN`, the generation's read,
        // the inserts and `COMMIT` took four or more, each a wake-up of that thread).
        // Another node writes too: batches read the heads under their tenants' locks, in a
        // transaction (see [`Writer::contended`]).
        let locking = self.contended();
        let one_statement = (!locking && work.len() <= store::journal::ONE_STATEMENT)
            .then(|| one_generation(work))
            .flatten();
        let written = match one_statement {
            Some(generation) => match self
                .write(conn, work, Generation::InStatement(generation))
                .await
            {
                // Decided at a generation the store has left: the transaction below tells
                // which records are stale and writes the rest.
                Err(JournalError::Stale) => None,
                other => Some(other?),
            },
            None => None,
        };
        let (results, heads, leaves) = match written {
            Some(written) => written,
            None => {
                let mut tx = self.store.begin_write_on(conn).await?;
                if self.store.kind() == store::DbKind::Postgres {
                    let mut tenants: Vec<&str> =
                        work.iter().map(|w| w.unsigned.tenant_id.as_str()).collect();
                    tenants.sort_unstable();
                    tenants.dedup();
                    store::journal::lock_heads(&mut tx, &tenants).await?;
                }
                if locking {
                    // What this writer last wrote is no head to go by: read them under the locks.
                    self.heads.clear();
                }
                // Read once for the batch, in the transaction that commits it and so that the
                // counter cannot move before the commit (SQLite's write lock; a share lock on
                // PostgreSQL, which a change's trigger waits for).
                let generation = if work.iter().any(|w| w.decided_at.is_some()) {
                    Generation::Read(
                        store::journal::read_generation(&mut tx, self.store.kind()).await?,
                    )
                } else {
                    Generation::Unneeded
                };
                let written = self.write(&mut tx, work, generation).await?;
                tx.commit().await?;
                written
            }
        };
        *own = conn_own;
        self.committed(work, heads, &results, leaves);
        Ok(results)
    }

    /// Whether another writer (another node sharing the PostgreSQL database) took one of this
    /// writer's positions within [`CONTENDED_FOR`]. Every PostgreSQL batch takes its chains'
    /// advisory locks, so writers take turns at a chain; but a writer whose cached heads are
    /// behind loses every turn (its positions are taken by then) while the other, its heads at
    /// hand and the next batch signed, wins each of its own, until the loser runs out of
    /// attempts. So for a while after a lost position batches read the heads under the locks,
    /// in a transaction, and cannot lose.
    fn contended(&self) -> bool {
        self.store.kind() == store::DbKind::Postgres
            && self
                .contended_at
                .is_some_and(|at| at.elapsed() < CONTENDED_FOR)
    }

    /// Takes note of a position another writer took first.
    fn lost_position(&mut self) {
        self.contended_at = Some(std::time::Instant::now());
        metrics::counter!("aperture_journal_contended_total").increment(1);
    }

    /// Takes note of a committed batch: the heads after it, its records' tenants (to be
    /// indexed), its records' leaves, the counts.
    fn committed(
        &mut self,
        work: &[Work],
        heads: Heads,
        results: &[Written],
        leaves: Vec<(String, i64, String)>,
    ) {
        self.heads = heads;
        for (w, r) in work.iter().zip(results) {
            if r.is_none() && !self.unindexed.contains(&w.unsigned.tenant_id) {
                self.unindexed.insert(w.unsigned.tenant_id.clone());
            }
        }
        if !leaves.is_empty() {
            self.stats.leaves.keep(leaves);
        }
        let written = u64::try_from(results.iter().filter(|r| r.is_none()).count()).unwrap_or(0);
        let before = self.stats.records.fetch_add(written, Ordering::Relaxed);
        if before / CHECKPOINT_RECORDS != (before + written) / CHECKPOINT_RECORDS {
            self.stats.grown.notify_one();
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Chains, signs (in place) and inserts `work` through `conn`; how each record fared and
    /// the heads after it. Nothing is final until the caller commits (or, outside a
    /// transaction, the one insert).
    async fn write(
        &self,
        conn: &mut sqlx::AnyConnection,
        work: &mut [Work],
        generation: Generation,
    ) -> Result<BatchWritten, JournalError> {
        let mut heads = self.heads.clone();
        load_heads(conn, work, &mut heads).await?;
        // Chained and signed in arrival order first; then written in as few statements as the
        // batch allows (one multi-row insert per chunk; each statement is a round trip to the
        // database, and for SQLite a hand-off to its connection's thread).
        let signed = self.sign(work, &mut heads, generation);
        let rows = rows(work, &signed);
        match generation {
            Generation::InStatement(at) => {
                let direct = self.direct.as_ref().and_then(|d| d.insert_batch(&rows, at));
                let done = match direct {
                    Some(done) => {
                        if done == store::journal::BatchInsert::Inserted {
                            let n = u64::try_from(rows.len()).unwrap_or(0);
                            self.stats.direct.fetch_add(n, Ordering::Relaxed);
                        }
                        done
                    }
                    None => {
                        store::journal::insert_batch(conn, self.store.kind(), &rows, at).await?
                    }
                };
                match done {
                    store::journal::BatchInsert::Inserted => {}
                    // Nothing was written, nothing took a position.
                    store::journal::BatchInsert::GenerationMoved => {
                        return Err(JournalError::Stale);
                    }
                    store::journal::BatchInsert::PositionTaken => {
                        return Err(JournalError::Contended);
                    }
                }
            }
            Generation::Unneeded | Generation::Read(_) => {
                if !store::journal::insert_many_in(conn, self.store.kind(), &rows).await? {
                    return Err(JournalError::Contended);
                }
            }
        }
        drop(rows);
        let (results, leaves) = self.outcome(work, signed);
        Ok((results, heads, leaves))
    }

    /// Chains each record of `work` after its tenant's head in `heads` (which must hold every
    /// tenant of `work`, [`load_heads`]) and signs it in place, in arrival order, advancing
    /// the heads; a record decided at another generation than the one read is not signed.
    fn sign(&self, work: &mut [Work], heads: &mut Heads, generation: Generation) -> Vec<Signed> {
        let signing = std::time::Instant::now();
        let mut signed = Vec::with_capacity(work.len());
        for Work {
            unsigned,
            decided_at,
            ..
        } in work.iter_mut()
        {
            if let (Some(at), Generation::Read(now)) = (*decided_at, generation)
                && at != now
            {
                signed.push(Err(JournalError::Stale));
                continue;
            }
            signed.push(self.sign_one(unsigned, heads));
        }
        add_micros(&self.stats.signing_micros, signing.elapsed());
        signed
    }

    /// Chains `unsigned` after its tenant's head in `heads` and signs it in place; the head
    /// moves to it. A record that cannot be made takes no position.
    fn sign_one(&self, unsigned: &mut Receipt, heads: &mut Heads) -> Signed {
        let (seq, prev) = match heads.get(&unsigned.tenant_id) {
            Some((seq, hash)) => (seq + 1, hash.clone()),
            None => (1, ZERO_HASH.to_owned()),
        };
        let prepared = self.prepare(unsigned, seq, prev)?;
        heads.insert(
            unsigned.tenant_id.clone(),
            (seq, prepared.record_hash.clone()),
        );
        Ok((seq, prepared))
    }

    /// How each signed record of a written batch fared, and (when a checkpointer is attached)
    /// the written records' leaves.
    fn outcome(
        &self,
        work: &[Work],
        signed: Vec<Signed>,
    ) -> (Vec<Written>, Vec<(String, i64, String)>) {
        // The leaves' texts move on to the checkpointer (once committed) rather than being
        // read back from the journal there; only when one is attached.
        let keep = self.stats.leaves.on.load(Ordering::Relaxed);
        let mut leaves = Vec::new();
        let results = work
            .iter()
            .zip(signed)
            .map(|(w, p)| match p {
                Ok((seq, p)) => {
                    if keep {
                        leaves.push((w.unsigned.tenant_id.clone(), seq, p.json));
                    }
                    None
                }
                Err(e) => Some(e),
            })
            .collect();
        (results, leaves)
    }

    /// Chains `unsigned` at `seq` after `prev` and signs it in place (an attempt after a lost
    /// race signs it again at its new position).
    fn prepare(
        &self,
        unsigned: &mut Receipt,
        seq: i64,
        prev: String,
    ) -> Result<Prepared, JournalError> {
        let now = store::now_ms();
        unsigned.issued_at = store::rfc3339(now);
        unsigned.seq = Some(u64::try_from(seq).unwrap_or(0));
        unsigned.prev_hash = Some(prev);
        // One canonical text, made while signing, serves as the record hash's input and as
        // the stored JSON.
        let canonical = receipt::sign_receipt_in_place(unsigned, self.keys.signer());
        let record_hash = engine::canonical::sha256_tagged(&canonical);
        let json = String::from_utf8(canonical).map_err(|e| {
            JournalError::Record(receipt::ReceiptError::Canonical(
                engine::canonical::CanonicalError(e.to_string()),
            ))
        })?;
        Ok(Prepared {
            json,
            record_hash,
            issued_at: now,
        })
    }
}

/// The one generation every record of `work` that depends on one was decided at (`Some(None)`
/// when none does); `None` when records were decided at different generations.
fn one_generation(work: &[Work]) -> Option<Option<i64>> {
    let mut decided = work.iter().filter_map(|w| w.decided_at);
    let first = decided.next();
    decided.all(|at| Some(at) == first).then_some(first)
}

/// A small batch: lets the tasks that are ready run first, then takes what they queued, up to
/// `max` records in all. Under load several of them are about to append, and one commit for all
/// of them costs less per record than a commit for each few (a commit rewrites a page of each
/// of the journal's nine B-trees). With nothing else ready this returns at once, so a lone call
/// waits no longer. A large batch means appends queue faster than the writer commits (its
/// commits wait, as on PostgreSQL for the WAL flush): waiting would only idle it.
async fn gather(waiting: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>, max: usize) {
    if batch.len() < GATHER_BELOW {
        tokio::task::yield_now().await;
        // Returns at once: only what is queued, and only if something is.
        if !waiting.is_empty() && batch.len() < max {
            let room = max - batch.len();
            waiting.recv_many(batch, room).await;
        }
    }
}

/// The results of a written batch: each record signed as written, or why it is not.
fn outcomes(work: Vec<Work>, written: Vec<Written>) -> Vec<Outcome> {
    work.into_iter()
        .zip(written)
        .map(|(w, failed)| match failed {
            None => Ok(w.unsigned),
            Some(e) => Err(e),
        })
        .collect()
}

/// `n` results of a batch that failed as a whole with `error`.
fn failed(n: usize, error: &JournalError) -> Vec<Outcome> {
    let text = error.to_string();
    (0..n)
        .map(|_| Err(JournalError::Failed(text.clone())))
        .collect()
}

/// Loads into `heads` the head of every tenant of `work` it does not hold yet, as `conn` sees
/// it (an empty chain's head is position 0 after the zero hash).
async fn load_heads(
    conn: &mut sqlx::AnyConnection,
    work: &[Work],
    heads: &mut Heads,
) -> Result<(), sqlx::Error> {
    for w in work {
        let tenant = &w.unsigned.tenant_id;
        if !heads.contains_key(tenant) {
            let head = store::journal::head_in(conn, tenant)
                .await?
                .unwrap_or_else(|| (0, ZERO_HASH.to_owned()));
            heads.insert(tenant.clone(), head);
        }
    }
    Ok(())
}

/// The rows of the records of `work` that were signed.
fn rows<'a>(work: &'a [Work], signed: &'a [Signed]) -> Vec<store::journal::NewRecord<'a>> {
    work.iter()
        .zip(signed)
        .filter_map(|(w, p)| Some((w, p.as_ref().ok()?)))
        .map(|(w, (seq, p))| {
            let signed = &w.unsigned;
            store::journal::NewRecord {
                tenant_id: &signed.tenant_id,
                seq: *seq,
                receipt_id: &signed.receipt_id,
                kind: signed.kind.as_str(),
                decision: signed.decision.as_str(),
                reason: signed.reason.as_str(),
                tool: signed.tool.as_deref(),
                session_id: signed.session_id.as_deref(),
                actor_id: &signed.actor_id,
                issued_at: p.issued_at,
                receipt: &p.json,
                disclosures: &w.disclosures,
                record_hash: &p.record_hash,
            }
        })
        .collect()
}

fn add_micros(counter: &AtomicU64, d: std::time::Duration) {
    counter.fetch_add(
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// Most records one transaction writes.
pub const MAX_BATCH: usize = 256;
/// How long appends must pause before the writer copies committed records to
/// `journal_facets` ([`Writer::index`]).
const FACETS_IDLE: std::time::Duration = std::time::Duration::from_millis(2);
/// How often the writer copies committed records to `journal_facets` while appends keep
/// coming without a pause.
const FACETS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
/// How long the writer waits before it tries again to copy records to `journal_facets` after
/// a failure.
const FACETS_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// Records of one tenant copied to `journal_facets` in one statement.
const FACETS_CHUNK: i64 = 1_000;
/// A batch smaller than this waits for the tasks that are ready before it is committed
/// ([`Writer::run_shared`]). Measured (docs/benchmarks.md): SQLite at 64 clients took ~6
/// records a batch without waiting and ~22 with it; PostgreSQL's took ~30 either way, and
/// waiting there only delayed a writer that was busy all the time.
const GATHER_BELOW: usize = 16;
/// Appends waiting for the writer before callers wait for room.
const QUEUE: usize = 4 * MAX_BATCH;
/// For how long after the writer's task committed appends that queued together an append
/// does not commit itself ([`Journal::commit_here`]).
const CONCURRENT_FOR_MICROS: u64 = 50_000;

/// Microseconds since this process first asked (never 0).
fn micros_now() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// How long a writer that lost a position to another node writes under locks
/// ([`Writer::contended`]).
const CONTENDED_FOR: std::time::Duration = std::time::Duration::from_secs(5);
/// Attempts of a batch that keeps finding its positions taken by another node.
const ATTEMPTS: usize = 16;

/// Appends records and signs them.
#[derive(Clone, Debug)]
pub struct Journal {
    keys: KeyRing,
    queue: mpsc::Sender<Pending>,
    stats: Arc<Stats>,
    /// Where execution receipts go while the journal refuses them ([`Journal::record_outcome`]).
    spool: Option<Arc<spool::Spool>>,
    /// SQLite: the writer, which an append that finds nothing queued and the writer idle
    /// uses itself.
    shared: Option<SharedWriter>,
}

/// Where an outcome's receipt went ([`Journal::record_outcome`]).
#[derive(Debug)]
pub enum Recorded {
    /// Journaled: the signed receipt as stored.
    Journaled(Box<Receipt>),
    /// An outcome the journal refused: it waits in the spool under this receipt id and is
    /// journaled when the journal records again.
    Spooled(String),
    /// Not recorded: the signed, unrecorded `journal_unavailable` denial that stands for it
    /// (`seq` and `prev_hash` null). Nothing may run on it.
    Unrecorded(Box<Receipt>),
}

/// A decision taken on reads the store has moved past since ([`Journal::record_decision`]):
/// nothing was recorded, and the call is decided again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale;

impl From<Stale> for crate::error::ServiceError {
    fn from(_: Stale) -> Self {
        crate::error::ServiceError::StaleRead
    }
}

/// One append in [`Stats::unanswered`] until it is queued (then the writer uncounts it once it
/// is answered); uncounted when dropped before.
struct Unanswered<'a> {
    counter: &'a AtomicU64,
    queued: bool,
}

impl<'a> Unanswered<'a> {
    fn count(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self {
            counter,
            queued: false,
        }
    }

    fn queued(&mut self) {
        self.queued = true;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.queued {
            self.counter.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What the writer has done since the journal was made.
#[derive(Debug, Default)]
struct Stats {
    records: AtomicU64,
    commits: AtomicU64,
    /// Microseconds from taking a batch to answering it.
    busy_micros: AtomicU64,
    /// Microseconds chaining and signing.
    signing_micros: AtomicU64,
    /// Records committed as signed ahead ([`WriterStats::signed_ahead`]).
    signed_ahead: AtomicU64,
    /// Records committed by their appends' own tasks ([`WriterStats::by_callers`]).
    by_callers: AtomicU64,
    /// Records inserted on the committing task's thread ([`WriterStats::direct`]).
    direct: AtomicU64,
    /// When the writer's task last committed appends that queued together (more than one in
    /// a batch), in [`micros_now`] (0: never): appends are concurrent, and an append that
    /// committed itself would only split their batches ([`Journal::commit_here`]). Taken as
    /// the batch is answered.
    gathered_at: AtomicU64,
    /// Notified every [`CHECKPOINT_RECORDS`] records (the checkpointer makes one).
    grown: tokio::sync::Notify,
    /// Committed records' leaves, kept for the checkpointer.
    leaves: Leaves,
    /// Appends handed to the writer and not yet answered (queued or in its batch).
    unanswered: AtomicU64,
    /// Tenants a PostgreSQL indexing task could not copy to `journal_facets`, for the next.
    reindex: std::sync::Mutex<Vec<String>>,
    /// Notified when an append that committed itself left records to copy to
    /// `journal_facets` where there were none ([`Writer::run_shared`]).
    committed_here: tokio::sync::Notify,
}

impl Stats {
    /// Hands `tenants` back to the writer for its next copy to `journal_facets`.
    fn reindex(&self, tenants: Vec<String>) {
        if !tenants.is_empty() {
            crate::sync::lock(&self.reindex).extend(tenants);
        }
    }
}

/// Copies the records of `tenants` that `journal_facets` does not have yet, through `conn`
/// ([`Writer::index`]). On a failure, the tenants left to copy (the connection may be broken).
async fn index_tenants(
    conn: &mut sqlx::AnyConnection,
    tenants: Vec<String>,
) -> Result<(), Vec<String>> {
    let mut left = tenants.into_iter();
    while let Some(tenant) = left.next() {
        loop {
            match store::journal::index_facets(&mut *conn, &tenant, FACETS_CHUNK).await {
                Ok(copied) => {
                    metrics::counter!("aperture_journal_facets_indexed_total").increment(copied);
                    if copied < u64::try_from(FACETS_CHUNK).unwrap_or(u64::MAX) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, tenant, "journal: copying records to journal_facets");
                    metrics::counter!("aperture_journal_facets_failures_total").increment(1);
                    return Err(std::iter::once(tenant).chain(left).collect());
                }
            }
        }
    }
    Ok(())
}

/// Most leaves kept for the checkpointer; past it, it reads the rest from the journal.
const KEPT_LEAVES: usize = 4 * CHECKPOINT_RECORDS as usize;

/// The texts (tree leaves) of records this node committed, kept in order per tenant until the
/// checkpointer grows the tree by them ([`Journal::take_leaves`]): the writer had them in hand,
/// so the checkpointer need not read them back. Off until a checkpointer attaches
/// ([`Journal::keep_leaves`]); at most [`KEPT_LEAVES`], newer ones are not kept.
#[derive(Debug, Default)]
struct Leaves {
    on: std::sync::atomic::AtomicBool,
    kept: std::sync::Mutex<KeptLeaves>,
}

#[derive(Debug, Default)]
struct KeptLeaves {
    by_tenant: HashMap<String, std::collections::VecDeque<(i64, String)>>,
    count: usize,
}

impl Leaves {
    fn lock(&self) -> std::sync::MutexGuard<'_, KeptLeaves> {
        // The lock guards plain data that every holder leaves consistent.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep(&self, leaves: Vec<(String, i64, String)>) {
        let mut kept = self.lock();
        for (tenant, seq, text) in leaves {
            if kept.count >= KEPT_LEAVES {
                break;
            }
            kept.count += 1;
            kept.by_tenant
                .entry(tenant)
                .or_default()
                .push_back((seq, text));
        }
    }
}

/// A checkpoint is made at least every this many records this node writes (CONTRACT §13).
pub const CHECKPOINT_RECORDS: u64 = 1_000;

/// What a journal's writer has done since the journal was made ([`Journal::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Records committed.
    pub records: u64,
    /// Commits (a batch's one statement, or its transaction): with appends arriving
    /// together, fewer than records.
    pub commits: u64,
    /// Time the writer spent on batches, from taking one to answering its appends; the rest
    /// of the time it waited for appends.
    pub busy: std::time::Duration,
    /// Time spent chaining and signing records: on SQLite part of `busy` (the rest is the
    /// database's); on PostgreSQL the records signed ahead were signed while the batch before
    /// them was being committed.
    pub signing: std::time::Duration,
    /// Of `records`, those committed as signed while the batch before them was being
    /// committed (PostgreSQL, [`pipeline`]).
    pub signed_ahead: u64,
    /// Of `records`, those committed by their appends' own tasks, which found nothing queued
    /// and the writer idle (SQLite).
    pub by_callers: u64,
    /// Of `records`, those inserted on the committing task's own thread, without a hand-off
    /// to sqlx's connection thread (SQLite on a file, [`store::journal::Direct`]); a batch
    /// whose insert found another connection holding the write lock went through sqlx.
    pub direct: u64,
}

/// One append waiting for the writer.
#[derive(Debug)]
struct Pending {
    work: Work,
    reply: Reply,
}

impl Pending {
    /// Where its result goes, and the record.
    fn split(self) -> (Reply, Work) {
        (self.reply, self.work)
    }
}

/// The principal of the command line and of what the server does on its own (CONTRACT §15).
pub const OPERATOR: &str = "operator";

/// The principal of a sign-in that did not authenticate.
pub const ANONYMOUS: &str = "anonymous";

/// Who an administrative record is by: the actor it is attributed to and the principal that
/// acted (`tok_…`, `usr_…`, `operator`, `anonymous`; CONTRACT §15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    /// The actor (`actor_id` of the receipt).
    pub actor_id: String,
    /// The principal (`principal` of the receipt).
    pub principal: String,
}

impl Author {
    /// The operator at the command line, or the server acting on its own.
    pub fn operator() -> Self {
        Self::new(OPERATOR, OPERATOR)
    }

    /// `actor_id` acting as `principal`.
    pub fn new(actor_id: impl Into<String>, principal: impl Into<String>) -> Self {
        Self {
            actor_id: actor_id.into(),
            principal: principal.into(),
        }
    }
}

/// A receipt with nothing but what every record has; the caller fills in the rest.
pub fn receipt(
    kind: ReceiptKind,
    decision: Decision,
    reason: ReasonCode,
    tenant_id: &str,
    actor_id: &str,
    principal: &str,
) -> Receipt {
    Receipt {
        receipt_id: ids::new_ordered_id("rcp"),
        kind,
        decision,
        reason,
        tenant_id: tenant_id.to_owned(),
        environment: None,
        session_id: None,
        manifest_id: None,
        actor_id: actor_id.to_owned(),
        principal: Some(principal.to_owned()),
        turn_id: None,
        invocation_id: None,
        tool: None,
        tool_version: None,
        schema_hash: None,
        args_hash: None,
        policy_id: None,
        policy_version: None,
        mode: None,
        binding: None,
        limits: None,
        redaction: None,
        target: None,
        issued_at: String::new(),
        seq: None,
        prev_hash: None,
        disclosures_digest: String::new(),
        key_id: String::new(),
        signature: String::new(),
    }
}

/// How often the SQLite WAL is checkpointed in the background.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Copies what the writer committed to the WAL into the database file, on a connection of its
/// own, every [`CHECKPOINT_EVERY`], until the journal is dropped (`alive`). A passive
/// checkpoint neither waits for nor blocks the writer, so the writer's commits no longer stop
/// for checkpoints (SQLite's automatic checkpoint runs inside the commit that crosses its
/// threshold: at 64 clients about thirty times a second, each with two syncs); the writer's
/// own connection still checkpoints when the WAL grows past [`store::WRITER_AUTOCHECKPOINT`]
/// pages, the only moment the WAL can start again from its beginning under steady writes, and
/// a cheap one, as the pages are mostly copied already.
async fn checkpoints(store: Store, alive: std::sync::Weak<Stats>) {
    let mut conn = None;
    loop {
        tokio::time::sleep(CHECKPOINT_EVERY).await;
        if alive.strong_count() == 0 {
            return;
        }
        if conn.is_none() {
            match store.connect_one().await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "connecting to checkpoint the journal");
                    continue;
                }
            }
        }
        if let Some(c) = conn.as_mut()
            && let Err(e) = store::checkpoint(c).await
        {
            tracing::warn!(error = %e, "checkpointing the journal");
            conn = None;
        }
    }
}

/// Fresh disclosures with a random salt.
pub fn disclosures() -> Disclosures {
    let mut salt = [0u8; 16];
    // The thread's CSPRNG (ChaCha, seeded and reseeded from the OS): two salts per call
    // without two system calls.
    rand::thread_rng().fill_bytes(&mut salt);
    Disclosures::new(salt)
}

impl Journal {
    /// A journal over `store`, signing with `keys`. Starts its writer task (on the current
    /// tokio runtime), which ends when the last clone of the journal is dropped.
    pub fn new(store: Store, keys: KeyRing) -> Self {
        let (queue, waiting) = mpsc::channel(QUEUE);
        let stats = Arc::new(Stats::default());
        if store.kind() == store::DbKind::Sqlite {
            tokio::spawn(checkpoints(store.clone(), Arc::downgrade(&stats)));
        }
        let kind = store.kind();
        let mut writer = Writer::new(store, keys.clone(), stats.clone());
        let shared = match kind {
            store::DbKind::Sqlite => {
                writer.unindexed_unread = true;
                let shared = SharedWriter(Arc::new(tokio::sync::Mutex::new(writer)));
                tokio::spawn(Writer::run_shared(shared.clone(), waiting, stats.clone()));
                Some(shared)
            }
            store::DbKind::Postgres => {
                tokio::spawn(writer.run_pipelined(waiting));
                None
            }
        };
        Self {
            keys,
            queue,
            stats,
            spool: None,
            shared,
        }
    }

    /// This journal, spooling execution receipts it cannot record to `spool`.
    pub fn with_spool(mut self, spool: Arc<spool::Spool>) -> Self {
        self.spool = Some(spool);
        self
    }

    /// The spool, when there is one.
    pub fn spool(&self) -> Option<&Arc<spool::Spool>> {
        self.spool.as_ref()
    }

    /// Records a decision, which nothing may act on unless it is journaled (CONTRACT §6, fail
    /// closed): the signed receipt and whether it was journaled — when the journal cannot
    /// record, the signed, unrecorded `journal_unavailable` denial that answers instead.
    pub async fn record_decision(
        &self,
        unsigned: &Receipt,
        disclosures: &Disclosures,
    ) -> (Receipt, bool) {
        match self.record_decision_at(unsigned, disclosures, None).await {
            Ok(recorded) => recorded,
            // Held to no generation, a decision is never stale; were it, it is not recorded.
            Err(Stale) => (
                self.unrecorded(unsigned.clone(), disclosures, &JournalError::Stale),
                false,
            ),
        }
    }

    /// [`Journal::record_decision`] of a decision taken on reads at the store's generation `decided_at`
    /// ([`crate::store::cache::Fresh::unconfirmed`]): [`Stale`] when the generation moved
    /// before the record was committed (nothing recorded; the call is decided again).
    pub async fn record_decision_at(
        &self,
        unsigned: &Receipt,
        disclosures: &Disclosures,
        decided_at: Option<i64>,
    ) -> Result<(Receipt, bool), Stale> {
        // One copy for the journal, which signs its copy; the unrecorded denial, when the
        // journal fails, is made from `unsigned` again.
        match self
            .append_at(unsigned.clone(), disclosures, decided_at)
            .await
        {
            Ok(signed) => Ok((signed, true)),
            Err(JournalError::Stale) => Err(Stale),
            Err(e) => Ok((self.unrecorded(unsigned.clone(), disclosures, &e), false)),
        }
    }

    /// Records the receipt of something that already happened (an execution), which refusing
    /// to record cannot undo: [`Recorded::Journaled`]; when the journal refuses it,
    /// [`Recorded::Spooled`] (durably, before this returns) to be journaled later; when the
    /// spool cannot take it either, the signed [`Recorded::Unrecorded`] receipt.
    pub async fn record_outcome(&self, unsigned: Receipt, disclosures: &Disclosures) -> Recorded {
        let error = match self.append(unsigned.clone(), disclosures).await {
            Ok(signed) => return Recorded::Journaled(Box::new(signed)),
            Err(e) => e,
        };
        let Some(spool) = &self.spool else {
            return Recorded::Unrecorded(Box::new(self.unrecorded(unsigned, disclosures, &error)));
        };
        tracing::error!(error = %error, receipt_id = %unsigned.receipt_id, "an execution receipt could not be journaled; it is spooled");
        let mut spooled = disclosures.clone();
        if spooled
            .insert_extra(
                "spooled_at",
                serde_json::Value::String(store::rfc3339(store::now_ms())),
            )
            .is_err()
        {
            return Recorded::Unrecorded(Box::new(self.unrecorded(unsigned, disclosures, &error)));
        }
        match spool.push(&unsigned, &spooled).await {
            Ok(()) => Recorded::Spooled(unsigned.receipt_id),
            Err(e) => {
                tracing::error!(error = %e, "an execution receipt could not be spooled either");
                Recorded::Unrecorded(Box::new(self.unrecorded(unsigned, disclosures, &error)))
            }
        }
    }

    /// The signed, unrecorded `journal_unavailable` denial that stands for `unsigned` when the
    /// journal failed with `error`.
    fn unrecorded(
        &self,
        mut unsigned: Receipt,
        disclosures: &Disclosures,
        error: &JournalError,
    ) -> Receipt {
        tracing::error!(error = %error, "a decision could not be journaled; nothing runs");
        unsigned.decision = Decision::Deny;
        unsigned.reason = ReasonCode::JournalUnavailable;
        self.sign_unrecorded(unsigned.clone(), disclosures)
            .unwrap_or(unsigned)
    }

    /// Whether the writer task still takes records (it ends only when it fails for good).
    pub fn writer_alive(&self) -> bool {
        !self.queue.is_closed()
    }

    /// Waits until every append handed to the writer so far is committed or refused (the
    /// server's drain at shutdown), at most `within`; whether it got there.
    pub async fn settle(&self, within: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + within;
        while self.stats.unanswered.load(Ordering::Relaxed) > 0 {
            if std::time::Instant::now() >= until || !self.writer_alive() {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        true
    }

    /// Appends waiting for the writer (`/metrics`).
    pub fn queue_depth(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }

    /// What this journal's writer has done so far.
    pub fn stats(&self) -> WriterStats {
        let micros = |a: &AtomicU64| std::time::Duration::from_micros(a.load(Ordering::Relaxed));
        WriterStats {
            records: self.stats.records.load(Ordering::Relaxed),
            commits: self.stats.commits.load(Ordering::Relaxed),
            busy: micros(&self.stats.busy_micros),
            signing: micros(&self.stats.signing_micros),
            signed_ahead: self.stats.signed_ahead.load(Ordering::Relaxed),
            by_callers: self.stats.by_callers.load(Ordering::Relaxed),
            direct: self.stats.direct.load(Ordering::Relaxed),
        }
    }

    /// Waits until this journal's writer has written another [`CHECKPOINT_RECORDS`] records
    /// (a notification that arrived while nobody waited is kept for the next wait).
    pub async fn grown(&self) {
        self.stats.grown.notified().await;
    }

    /// From now on, keeps the texts of the records this journal commits for
    /// [`Journal::take_leaves`] (the checkpointer calls it when it starts).
    pub fn keep_leaves(&self) {
        self.stats.leaves.on.store(true, Ordering::Relaxed);
    }

    /// The tenants that have kept leaves.
    pub fn tenants_with_leaves(&self) -> Vec<String> {
        let kept = self.stats.leaves.lock();
        let mut tenants: Vec<String> = kept
            .by_tenant
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(t, _)| t.clone())
            .collect();
        tenants.sort();
        tenants
    }

    /// Up to `max` kept texts of `tenant`'s records `after + 1`, `after + 2`, … (as far as
    /// they follow each other), taken out of the keep; kept records up to `after` are dropped.
    pub fn take_leaves(&self, tenant: &str, after: i64, max: usize) -> Vec<String> {
        let mut kept = self.stats.leaves.lock();
        let KeptLeaves { by_tenant, count } = &mut *kept;
        let Some(queue) = by_tenant.get_mut(tenant) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut next = after + 1;
        while let Some((seq, _)) = queue.front() {
            if *seq < next {
                queue.pop_front();
                *count -= 1;
            } else if *seq == next && out.len() < max {
                if let Some((_, text)) = queue.pop_front() {
                    out.push(text);
                }
                *count -= 1;
                next += 1;
            } else {
                break;
            }
        }
        if queue.is_empty() {
            by_tenant.remove(tenant);
        }
        out
    }

    /// The key ring (for publishing keys and signing manifests).
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Appends `unsigned` with `disclosures` at the head of its tenant's chain and returns the
    /// signed receipt as stored, once it is committed.
    pub async fn append(
        &self,
        unsigned: Receipt,
        disclosures: &Disclosures,
    ) -> Result<Receipt, JournalError> {
        self.append_at(unsigned, disclosures, None).await
    }

    /// [`Journal::append`] of a decision taken on reads at the store's generation `decided_at`
    /// ([`crate::store::cache::Fresh::unconfirmed`]): the record is written only if the
    /// store's counter still stands there when it is committed, else [`JournalError::Stale`]
    /// and nothing is written.
    pub async fn append_at(
        &self,
        mut unsigned: Receipt,
        disclosures: &Disclosures,
        decided_at: Option<i64>,
    ) -> Result<Receipt, JournalError> {
        let (disclosures_json, digest) = receipt::disclosures_canonical(disclosures)?;
        unsigned.disclosures_digest = digest;
        let work = Work {
            unsigned,
            disclosures: disclosures_json,
            decided_at,
        };
        // SQLite, nothing queued and the writer idle: committed here, on this task. Handed to
        // the writer's task, the record would cost a wake-up of that task and another of this
        // one for the answer; queued behind others, it joins their batch instead.
        let work = match self.commit_here(work).await {
            Ok(outcome) => return outcome,
            Err(work) => work,
        };
        let (reply, answer) = oneshot::channel();
        // Counted before it is queued (the writer may answer it at once), and uncounted again
        // unless it was queued: the send fails, or its caller stops waiting for room.
        let mut counted = Unanswered::count(&self.stats.unanswered);
        let sent = self.queue.send(Pending { work, reply }).await;
        if sent.is_err() {
            return Err(JournalError::Stopped);
        }
        counted.queued();
        answer.await.map_err(|_| JournalError::Stopped)?
    }

    /// Commits `work` on this task when the journal is SQLite's, nothing is queued, the writer
    /// is idle and appends have not come together for [`CONCURRENT_FOR_MICROS`]; else hands it
    /// back, to be queued.
    async fn commit_here(&self, work: Work) -> Result<Outcome, Work> {
        let Some(shared) = &self.shared else {
            return Err(work);
        };
        if self.queue_depth() > 0 || self.queue.is_closed() {
            return Err(work);
        }
        // Appends came together lately: this one joins the next batch rather than split it
        // (at 64 clients, an append committing itself between two batches halved their size).
        let gathered_at = self.stats.gathered_at.load(Ordering::Relaxed);
        if gathered_at != 0 && micros_now().saturating_sub(gathered_at) < CONCURRENT_FOR_MICROS {
            return Err(work);
        }
        let Ok(mut writer) = shared.0.try_lock() else {
            return Err(work);
        };
        // Unanswered until it returns (or stops waiting).
        let _counted = Unanswered::count(&self.stats.unanswered);
        Ok(writer.commit_here(work).await)
    }

    /// Signs a denial that could not be journaled (`seq` and `prev_hash` null), so the caller
    /// still gets a verifiable receipt.
    pub fn sign_unrecorded(
        &self,
        mut unsigned: Receipt,
        disclosures: &Disclosures,
    ) -> Result<Receipt, JournalError> {
        unsigned.issued_at = store::rfc3339(store::now_ms());
        unsigned.seq = None;
        unsigned.prev_hash = None;
        unsigned.disclosures_digest = receipt::disclosures_digest(disclosures)?;
        let signed = receipt::sign_receipt(unsigned, self.keys.signer())?;
        crate::metrics::receipt(&signed, false);
        Ok(signed)
    }
}

/// The outcome of verifying one tenant's chain.
#[derive(Debug)]
pub struct TenantReport {
    /// Tenant.
    pub tenant_id: String,
    /// Records verified (the last good `seq`).
    pub verified: u64,
    /// The first bad record, if any.
    pub error: Option<ChainError>,
}

/// Verifies every tenant's chain: every signature against the published keys, `seq` from 1
/// without gaps, `prev_hash` links, stored hashes and disclosure digests, and the copies in
/// `journal_facets`, one for each record of the indexed prefix and none for any other.
pub async fn verify(store: &Store) -> Result<Vec<TenantReport>, sqlx::Error> {
    let keys: JwkSet = crate::keys::published(store).await?;
    verify_with(store, &keys).await
}

/// [`verify`] against `keys` only (keys an auditor pinned), whatever the store publishes.
pub async fn verify_with(store: &Store, keys: &JwkSet) -> Result<Vec<TenantReport>, sqlx::Error> {
    let mut reports = Vec::new();
    for tenant in tenants_to_verify(store).await? {
        let from_first = ChainVerifier::new();
        let (report, _) =
            verify_tenant_from(store, &tenant, keys, from_first, Signatures::Every).await?;
        reports.push(report);
    }
    Ok(reports)
}

/// Every tenant with a journal, and every tenant with rows in `journal_facets` but no journal
/// (rows nobody signed, which the overview would count all the same).
pub async fn tenants_to_verify(store: &Store) -> Result<Vec<String>, sqlx::Error> {
    let mut tenants = store::journal::tenants(store).await?;
    tenants.extend(store::journal::tenants_with_facets_only(store).await?);
    tenants.sort();
    tenants.dedup();
    Ok(tenants)
}

/// Records read (and checked) at a time.
const PAGE: i64 = 500;
/// Positions of rows without a record named in a report (the count says how many more).
const UNRECORDED_NAMED: i64 = 10;

/// Which records' signatures a verification checks itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signatures {
    /// Every record's (`aperture journal verify`).
    Every,
    /// The last record's of every page of [`PAGE`] records; the links vouch for the others
    /// (a record's hash covers its signature, and the next record's signature covers that hash:
    /// see [`ChainVerifier::push_linked`]). Every link, stored hash and disclosure digest is
    /// still checked. A page with anything wrong in it is checked again record by record, so
    /// the report names the same record and problem as [`Signatures::Every`]. One signature
    /// check per page instead of one per record: the background verifier uses it.
    LastOfPage,
}

/// Verifies a tenant's chain from where `verifier` stopped (its last verified record; a new
/// verifier starts at the first) to the head. Returns the report and the verifier after the
/// last good record, to continue from later: records already verified are not read again.
pub async fn verify_tenant_from(
    store: &Store,
    tenant: &str,
    keys: &JwkSet,
    mut verifier: ChainVerifier,
    signatures: Signatures,
) -> Result<(TenantReport, ChainVerifier), sqlx::Error> {
    let mut after = i64::try_from(verifier.last_seq()).unwrap_or(i64::MAX);
    // Read only when a page holds purged disclosures (a scan of the tenant's admin records).
    let mut purged_before: Option<Option<i64>> = None;
    loop {
        let page = store::journal::page(store, tenant, after, PAGE).await?;
        let Some(last) = page.last() else {
            break;
        };
        after = last.seq;
        if purged_before.is_none() && page.iter().any(|r| r.disclosures == PURGED) {
            purged_before = Some(purge_cutoff(store, tenant).await?);
        }
        let purged_before = purged_before.flatten();
        let start = verifier.clone();
        let mut checked = check_page(
            tenant,
            &page,
            keys,
            &mut verifier,
            signatures,
            purged_before,
        );
        if checked.is_err() && signatures == Signatures::LastOfPage {
            verifier = start;
            checked = check_page(
                tenant,
                &page,
                keys,
                &mut verifier,
                Signatures::Every,
                purged_before,
            );
        }
        if let Err(report) = checked {
            return Ok((report, verifier));
        }
    }
    // Every record up to the head has its copy checked; a copy beyond it (or of a tenant with
    // no journal) stands for a record nobody signed, which the overview's counts and the
    // receipts browser's filters would show all the same.
    let head = verifier.last_seq();
    let error = unrecorded_facets(store, tenant, head).await?;
    Ok((
        TenantReport {
            tenant_id: tenant.to_owned(),
            verified: head,
            error,
        },
        verifier,
    ))
}

/// The rows of `tenant` in `journal_facets` after record `head` (or below 1) that have no
/// record in the journal, as the error of a chain verified up to `head`.
async fn unrecorded_facets(
    store: &Store,
    tenant: &str,
    head: u64,
) -> Result<Option<ChainError>, sqlx::Error> {
    let after = i64::try_from(head).unwrap_or(i64::MAX);
    let (first, all) =
        store::journal::unrecorded_facets(store, tenant, after, UNRECORDED_NAMED).await?;
    let Some(&lowest) = first.first() else {
        return Ok(None);
    };
    let listed: Vec<String> = first.iter().map(i64::to_string).collect();
    let more = all - i64::try_from(listed.len()).unwrap_or(i64::MAX);
    let mut rows = match listed.split_last() {
        Some((last, [])) if more <= 0 => format!("record {last}"),
        Some((last, init)) if more <= 0 => format!("records {} and {last}", init.join(", ")),
        _ => format!("records {} and {more} more", listed.join(", ")),
    };
    if head == 0 {
        rows.push_str(" (the tenant has no journal)");
    }
    Ok(Some(ChainError {
        // The position the report names: the lowest such row's, or the one after the head.
        seq: u64::try_from(lowest).unwrap_or(head + 1).max(head + 1),
        problem: receipt::ChainProblem::Unrecorded {
            index: "journal_facets",
            rows,
        },
    }))
}

/// Checks a page of records in order. On the first bad one, returns its report and leaves
/// `verifier` after the last good one.
fn check_page(
    tenant: &str,
    page: &[store::journal::RecordRow],
    keys: &JwkSet,
    verifier: &mut ChainVerifier,
    signatures: Signatures,
    purged_before: Option<i64>,
) -> Result<(), TenantReport> {
    for (i, row) in page.iter().enumerate() {
        let expected = verifier.last_seq() + 1;
        let fail = |problem: receipt::ChainProblem| TenantReport {
            tenant_id: tenant.to_owned(),
            verified: expected - 1,
            error: Some(ChainError {
                seq: expected,
                problem,
            }),
        };
        let malformed = |what: &str| {
            fail(receipt::ChainProblem::Signature(
                receipt::VerifyError::Malformed(what.into()),
            ))
        };
        let Ok(r) = serde_json::from_str::<Receipt>(&row.receipt) else {
            return Err(malformed("the stored receipt is not a receipt"));
        };
        let before = verifier.clone();
        let strict = signatures == Signatures::Every || i + 1 == page.len();
        let pushed = if strict {
            verifier.push(&r, &keys.keys)
        } else {
            verifier.push_linked(&r)
        };
        if let Err(e) = pushed {
            return Err(TenantReport {
                tenant_id: tenant.to_owned(),
                verified: expected - 1,
                error: Some(e),
            });
        }
        let problem = if verifier.head_hash() != row.record_hash {
            Some(malformed(
                "the stored record hash does not match the receipt",
            ))
        } else if row.disclosures == PURGED {
            // Removed by a journaled purge, if the record is older than its cutoff.
            let issued = store::parse_rfc3339(&r.issued_at);
            match (issued, purged_before) {
                (Some(at), Some(cutoff)) if at < cutoff => row.columns.mismatch(&r).map(fail),
                _ => Some(malformed(
                    "the stored disclosures were removed without a journaled purge",
                )),
            }
        } else if !serde_json::from_str::<Disclosures>(&row.disclosures)
            .ok()
            .and_then(|d| receipt::disclosures_match(&r, &d).ok())
            .unwrap_or(false)
        {
            Some(malformed(
                "the stored disclosures do not match the receipt's digest",
            ))
        } else {
            // What the filters, the overview's counts and the export read must be what was
            // signed (the position, the tenant and every filtered member).
            row.columns.mismatch(&r).map(fail)
        };
        // What the filters read of records in the indexed prefix: the copy in journal_facets
        // (migration 0024), which must be there and say what was signed.
        let problem = problem.or_else(|| match &row.facets {
            store::journal::Facets::Missing => Some(malformed(
                "the record is missing from journal_facets, which the receipts browser's filters read",
            )),
            store::journal::Facets::Copied(copy) => {
                copy.mismatch(&r).map(|p| fail(in_facets(p)))
            }
            // Equal to the row's columns, which were checked against the receipt above.
            store::journal::Facets::Same
            | store::journal::Facets::NotYet
            | store::journal::Facets::Unread => None,
        });
        if let Some(problem) = problem {
            *verifier = before;
            return Err(problem);
        }
    }
    Ok(())
}

/// A problem with a column of a record's copy in `journal_facets`, named as that table's.
fn in_facets(problem: receipt::ChainProblem) -> receipt::ChainProblem {
    match problem {
        receipt::ChainProblem::Column {
            column,
            stored,
            signed,
        } => receipt::ChainProblem::Column {
            column: match column {
                "tenant_id" => "journal_facets.tenant_id",
                "seq" => "journal_facets.seq",
                "kind" => "journal_facets.kind",
                "decision" => "journal_facets.decision",
                "reason" => "journal_facets.reason",
                "tool" => "journal_facets.tool",
                "session_id" => "journal_facets.session_id",
                "actor_id" => "journal_facets.actor_id",
                "issued_at" => "journal_facets.issued_at",
                other => other,
            },
            stored,
            signed,
        },
        other => other,
    }
}

/// What a purged record's disclosures column holds (its receipt and digest stay).
pub const PURGED: &str = r#"{"purged":true}"#;
/// The action of a disclosure purge's admin record.
pub const PURGE_ACTION: &str = "journal.purge_disclosures";

/// The latest cutoff (epoch ms) of `tenant`'s journaled disclosure purges whose own
/// disclosures still match their receipts: records issued before it may have purged
/// disclosures. A purge record is never purged itself, and is newer than its cutoff.
async fn purge_cutoff(store: &Store, tenant: &str) -> Result<Option<i64>, sqlx::Error> {
    let mut cutoff = None;
    for (receipt_text, disclosures_text) in
        store::journal::admin_actions(store, tenant, PURGE_ACTION).await?
    {
        let (Ok(r), Ok(d)) = (
            serde_json::from_str::<Receipt>(&receipt_text),
            serde_json::from_str::<Disclosures>(&disclosures_text),
        ) else {
            continue;
        };
        if !receipt::disclosures_match(&r, &d).unwrap_or(false) {
            continue;
        }
        let value = serde_json::to_value(&d).unwrap_or_default();
        if value.get("action").and_then(serde_json::Value::as_str) != Some(PURGE_ACTION) {
            continue;
        }
        let at = value
            .pointer("/subject/cutoff_ms")
            .and_then(serde_json::Value::as_i64);
        let issued = store::parse_rfc3339(&r.issued_at);
        if let (Some(at), Some(issued)) = (at, issued)
            && at <= issued
        {
            cutoff = cutoff.max(Some(at));
        }
    }
    Ok(cutoff)
}

/// Removes the disclosures of `tenant`'s records issued before `cutoff_ms` (epoch ms),
/// keeping their receipts and digests, after journaling the purge (fail closed: nothing is
/// removed when the journal cannot record it). Returns how many records lost theirs.
pub async fn purge_disclosures(
    store: &Store,
    journal: &Journal,
    tenant: &str,
    by: &Author,
    cutoff_ms: i64,
) -> Result<u64, JournalError> {
    journal
        .admin(
            tenant,
            by,
            Decision::Allow,
            ReasonCode::Ok,
            PURGE_ACTION,
            serde_json::json!({"cutoff": store::rfc3339(cutoff_ms), "cutoff_ms": cutoff_ms}),
        )
        .await?;
    Ok(store::journal::purge_disclosures(store, tenant, cutoff_ms, PURGED, PURGE_ACTION).await?)
}

impl Journal {
    /// Journals an administrative change *before* it is made: if the journal cannot record,
    /// the change is refused (fail closed). `action` names the change (`token.create`); what it
    /// touched goes into the disclosures.
    pub async fn admin(
        &self,
        tenant_id: &str,
        by: &Author,
        decision: Decision,
        reason: ReasonCode,
        action: &str,
        subject: serde_json::Value,
    ) -> Result<Receipt, JournalError> {
        let mut d = disclosures();
        d.insert_extra("action", serde_json::Value::String(action.to_owned()))?;
        d.insert_extra("subject", subject)?;
        self.append(
            receipt(
                ReceiptKind::Admin,
                decision,
                reason,
                tenant_id,
                &by.actor_id,
                &by.principal,
            ),
            &d,
        )
        .await
    }
}

impl From<JournalError> for crate::error::ServiceError {
    fn from(e: JournalError) -> Self {
        tracing::error!(error = %e, "the journal cannot record");
        Self::App(aperture_types::error::AppError::new(
            aperture_types::error::ErrorCode::Unavailable,
            "the journal cannot record right now, so nothing was changed; try again shortly",
        ))
    }
}
