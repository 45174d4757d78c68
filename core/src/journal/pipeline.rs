//! The journal's writer on PostgreSQL: the next batch is chained and signed while the database
//! commits the one in flight.
//!
//! A PostgreSQL commit waits for the WAL flush. A sequential writer (as SQLite's still is,
//! [`Writer::run_shared`]) signs a batch, then waits for its commit, then signs the next: on
//! PostgreSQL, in the gateway benchmark, it was busy the whole run, ~80 % of it waiting for the
//! database and ~20 % signing (two Ed25519 signatures a call). Here a batch's insert — one
//! statement on the writer's own connection — runs in a task of its own, and meanwhile the
//! writer takes the appends that arrive, chains them after the heads that batch leaves and
//! signs them; once it is committed the next batch goes at once, already signed.
//!
//! What does not change: nothing is answered before its own commit, and a batch is sent only
//! after the one before it committed (its first records chain to that one's hashes). Should the
//! batch in flight not be written as signed — another node took its positions, the read
//! generation moved, the database failed — the records signed ahead are signed again at the
//! heads the database has before they go.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};

use engine::canonical::ZERO_HASH;

use super::{
    Generation, Heads, JournalError, Pending, Reply, Signed, Work, Writer, failed, gather,
    load_heads, one_generation, outcomes, rows,
};
use crate::store::journal::{BatchInsert, ONE_STATEMENT};

/// How long the writer's connection may sit idle before it is pinged ahead of a batch.
const PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// A batch on its way to the database.
struct Flight {
    replies: Vec<Reply>,
    started: Instant,
    /// The heads once it is committed.
    heads: Heads,
    /// Whether it was signed while the batch before it was in flight.
    ahead: bool,
    insert: JoinHandle<Inserted>,
}

/// What a flight's task hands back: the writer's connection, the batch and its signatures, and
/// how its one statement went.
type Inserted = (
    sqlx::AnyConnection,
    Vec<Work>,
    Vec<Signed>,
    Result<BatchInsert, sqlx::Error>,
);

/// Appends taken while a batch is in flight (or, with none in flight, from the queue).
#[derive(Default)]
struct Ahead {
    replies: Vec<Reply>,
    work: Vec<Work>,
    /// The records' signatures and the heads after them, chained after the batch in flight;
    /// `None` when they are signed only once they go (taken with nothing in flight, or the
    /// batch they were chained after was not written as signed).
    signed: Option<(Vec<Signed>, Heads)>,
}

impl Ahead {
    fn take(&mut self, pending: impl Iterator<Item = Pending>) {
        for p in pending {
            let (reply, work) = p.split();
            self.replies.push(reply);
            self.work.push(work);
        }
    }
}

impl Writer {
    /// The writer's task for PostgreSQL (SQLite's is [`Writer::run_shared`]), one batch in
    /// flight while the next is signed.
    pub(super) async fn run_pipelined(mut self, mut waiting: mpsc::Receiver<Pending>) {
        // The writer's own connection (no pool ping before each batch); in the flight's task
        // while a batch is in flight, dropped after a failure and made again for the next one.
        let mut conn = None;
        let mut flight: Option<Flight> = None;
        let mut ahead = Ahead::default();
        let mut incoming = Vec::with_capacity(ONE_STATEMENT);
        let mut open = true;
        self.unindexed_from_store().await;
        loop {
            let Some(mut f) = flight.take() else {
                if ahead.work.is_empty() {
                    if self.index_due() {
                        self.index(&mut conn).await;
                    }
                    if !open {
                        return;
                    }
                    let received = self
                        .receive(&mut waiting, &mut incoming, ONE_STATEMENT, &mut conn)
                        .await;
                    if received == 0 {
                        return;
                    }
                    gather(&mut waiting, &mut incoming, ONE_STATEMENT).await;
                    ahead.take(incoming.drain(..));
                }
                flight = self.launch(std::mem::take(&mut ahead), &mut conn).await;
                continue;
            };
            // Batches stay within one statement.
            let room = ONE_STATEMENT.saturating_sub(ahead.work.len());
            tokio::select! {
                biased;
                done = &mut f.insert => {
                    self.land(f, done, &mut conn, &mut ahead).await;
                    if self.index_due() {
                        self.index(&mut conn).await;
                    }
                }
                taken = waiting.recv_many(&mut incoming, room), if open && room > 0 => {
                    if taken == 0 {
                        // Every sender is gone: land what is in flight, write what is ahead.
                        open = false;
                    } else {
                        if ahead.work.is_empty() {
                            ahead.signed = Some((Vec::new(), f.heads.clone()));
                        }
                        self.sign_ahead(&mut ahead, incoming.drain(..)).await;
                    }
                    flight = Some(f);
                }
            }
        }
    }

    /// Adds `pending` to `ahead` and, if its records are being signed ahead, signs them after
    /// the ones before.
    async fn sign_ahead(&self, ahead: &mut Ahead, pending: impl Iterator<Item = Pending>) {
        let from = ahead.work.len();
        ahead.take(pending);
        let Some((mut signed, mut heads)) = ahead.signed.take() else {
            return;
        };
        // A tenant that neither the batch in flight nor the records before write: its head as
        // the database has it (through the pool: the writer's connection is in flight).
        for w in &ahead.work[from..] {
            let tenant = &w.unsigned.tenant_id;
            if heads.contains_key(tenant) {
                continue;
            }
            match crate::store::journal::head(&self.store, tenant).await {
                Ok(head) => {
                    heads.insert(
                        tenant.clone(),
                        head.unwrap_or_else(|| (0, ZERO_HASH.to_owned())),
                    );
                }
                // Signed once they go, on the writer's connection.
                Err(e) => {
                    tracing::debug!(error = %e, "reading a chain's head to sign ahead; signed when the batch goes");
                    return;
                }
            }
        }
        signed.extend(self.sign(
            &mut ahead.work[from..],
            &mut heads,
            Generation::InStatement(None),
        ));
        ahead.signed = Some((signed, heads));
    }

    /// Sends `batch` to the database in one statement, signed first if it is not yet; `None`
    /// when it was written (and answered) at once instead: records decided at different read
    /// generations go through one transaction, as the sequential writer writes them.
    async fn launch(
        &mut self,
        batch: Ahead,
        conn: &mut Option<sqlx::AnyConnection>,
    ) -> Option<Flight> {
        let started = Instant::now();
        let Ahead {
            replies,
            mut work,
            signed,
        } = batch;
        metrics::histogram!("aperture_journal_batch_records").record(work.len() as f64);
        let Some(generation) = (work.len() <= ONE_STATEMENT && !self.contended())
            .then(|| one_generation(&work))
            .flatten()
        else {
            let results = self.commit_work(work, conn).await;
            self.answer(replies, results, started);
            return None;
        };
        // A connection left idle a while is pinged first (the pool did that before every
        // batch): the server may have restarted, or something between may have dropped it.
        let idle = self
            .own_used
            .is_none_or(|used| used.elapsed() >= PING_AFTER_IDLE);
        let alive = match conn.take() {
            Some(mut c) if idle => {
                use sqlx::Connection as _;
                match c.ping().await {
                    Ok(()) => Some(c),
                    Err(e) => {
                        tracing::info!(error = %e, "the journal writer's connection was lost; connecting again");
                        None
                    }
                }
            }
            other => other,
        };
        let mut c = match alive {
            Some(c) => c,
            None => match self.store.connect_writer().await {
                Ok(c) => c,
                Err(e) => {
                    self.heads.clear();
                    self.answer(replies, failed(work.len(), &e.into()), started);
                    return None;
                }
            },
        };
        let ahead = signed.is_some();
        let (signed, heads) = match signed {
            Some(signed) => signed,
            None => {
                let mut heads = self.heads.clone();
                if let Err(e) = load_heads(&mut c, &work, &mut heads).await {
                    self.heads.clear();
                    self.answer(replies, failed(work.len(), &e.into()), started);
                    return None;
                }
                let signed = self.sign(&mut work, &mut heads, Generation::InStatement(generation));
                (signed, heads)
            }
        };
        let kind = self.store.kind();
        let insert = tokio::spawn(async move {
            let inserted = {
                let rows = rows(&work, &signed);
                crate::store::journal::insert_batch(&mut c, kind, &rows, generation).await
            };
            (c, work, signed, inserted)
        });
        Some(Flight {
            replies,
            started,
            heads,
            ahead,
            insert,
        })
    }

    /// Answers the batch that was in flight once its statement is done; the records signed
    /// ahead stand only if it was written as signed.
    async fn land(
        &mut self,
        flight: Flight,
        done: Result<Inserted, JoinError>,
        conn: &mut Option<sqlx::AnyConnection>,
        ahead: &mut Ahead,
    ) {
        let Flight {
            replies,
            started,
            heads,
            ahead: signed_ahead,
            ..
        } = flight;
        let (c, work, signed, inserted) = match done {
            Ok(done) => done,
            Err(e) => {
                // Its task is gone and the connection with it; whether the statement committed
                // is unknown, so nobody is told it did.
                self.heads.clear();
                ahead.signed = None;
                let error = JournalError::Failed(format!("journal insert task: {e}"));
                let n = replies.len();
                self.answer(replies, failed(n, &error), started);
                return;
            }
        };
        match inserted {
            Ok(BatchInsert::Inserted) => {
                *conn = Some(c);
                self.own_used = Some(Instant::now());
                let (results, leaves) = self.outcome(&work, signed);
                if signed_ahead {
                    let written = results.iter().filter(|r| r.is_none()).count();
                    let n = u64::try_from(written).unwrap_or(u64::MAX);
                    self.stats.signed_ahead.fetch_add(n, Ordering::Relaxed);
                }
                self.committed(&work, heads, &results, leaves);
                self.answer(replies, outcomes(work, results), started);
            }
            // Nothing was written: another node took a position first, or the read generation a
            // record was decided at moved. The transaction of the sequential writer tells which
            // records still stand, at the heads the database has.
            Ok(taken @ (BatchInsert::PositionTaken | BatchInsert::GenerationMoved)) => {
                if taken == BatchInsert::PositionTaken {
                    self.lost_position();
                }
                *conn = Some(c);
                self.heads.clear();
                ahead.signed = None;
                let results = self.commit_work(work, conn).await;
                self.answer(replies, results, started);
            }
            Err(e) => {
                self.heads.clear();
                ahead.signed = None;
                self.answer(replies, failed(work.len(), &e.into()), started);
            }
        }
    }
}
