//! Issue 26 (PostgreSQL throughput): the journal's writer on PostgreSQL signs the next batch
//! while the database commits the one in flight, never lets a record signed ahead of a batch
//! that was not written go as signed, and, when another node writes the same chain, queues for
//! the chain's lock instead of racing for positions (skipped without
//! `APERTURE_TEST_POSTGRES_URL`).
//!
//! Issue 29 (one client's latency): on SQLite an append that finds nothing queued and the
//! writer idle commits itself, on its own task, without the two hand-offs to the writer's task
//! and back; appends that arrive together still go in batches; an append that stops waiting in
//! the middle of its commit leaves the journal whole; what appends commit themselves is copied
//! to `journal_facets` at the next pause all the same; the insert runs on the committing
//! task's own thread, and goes through sqlx only to wait for a lock another connection holds.

use aperture_core::journal::{self, Journal, JournalError};
use aperture_core::store::{self, Store};
use engine::receipt::{Decision, ReasonCode, Receipt, ReceiptKind};

use crate::helpers::{Db, TestDb};
use crate::journal::{append_together, tenant_t_keys};

/// A fresh PostgreSQL database, migrated, or `None` where none is configured.
async fn postgres() -> Option<(TestDb, Store)> {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL test not run");
        return None;
    };
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    Some((db, store))
}

fn decision(tenant: &str, n: usize) -> Receipt {
    journal::receipt(
        ReceiptKind::Decision,
        Decision::Allow,
        ReasonCode::Ok,
        tenant,
        &format!("actor-{n}"),
        "operator",
    )
}

/// Every tenant's chain verifies, and holds `records` records in all.
async fn chains_verify(store: &Store, records: u64) {
    let reports = journal::verify(store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
    assert_eq!(reports.iter().map(|r| r.verified).sum::<u64>(), records);
}

/// 400 appends at once over two tenants: batches go one statement after another while the
/// records behind them are signed, every record takes its place in its tenant's chain, and
/// most of them were committed as signed while the batch before them was in flight.
#[tokio::test]
async fn the_next_batch_is_signed_while_one_commits() {
    let Some((_db, store)) = postgres().await else {
        return;
    };
    let (keys, _dir) = tenant_t_keys(&store).await;
    store::tenants::ensure(&store, "u").await.unwrap();
    let journal = Journal::new(store.clone(), keys);
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..400 {
        let journal = journal.clone();
        let tenant = if n % 2 == 0 { "t" } else { "u" };
        tasks.spawn(async move {
            let signed = journal
                .append(decision(tenant, n), &journal::disclosures())
                .await
                .unwrap();
            (signed.tenant_id, signed.seq.unwrap())
        });
    }
    let mut by_tenant: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for (tenant, seq) in tasks.join_all().await {
        by_tenant.entry(tenant).or_default().push(seq);
    }
    for seqs in by_tenant.values_mut() {
        seqs.sort_unstable();
        assert_eq!(*seqs, (1..=200).collect::<Vec<u64>>());
    }
    chains_verify(&store, 400).await;
    let stats = journal.stats();
    assert_eq!(stats.records, 400);
    assert!(stats.commits < 400, "{stats:?}");
    // The first batch goes alone; what arrives while it is in flight is signed meanwhile.
    assert!(stats.signed_ahead >= 200, "{stats:?}");
    store.close().await;
}

/// A batch in flight that is not written (decided at a read generation that moved: its one
/// statement inserts nothing) takes no positions, so the records signed after it, at the
/// positions it would have left, are signed again before they go: the chain starts at 1 with
/// no gap, and the stale records are refused.
#[tokio::test]
async fn records_signed_behind_a_batch_that_was_not_written_are_signed_again() {
    let Some((_db, store)) = postgres().await else {
        return;
    };
    let (keys, _dir) = tenant_t_keys(&store).await;
    let journal = Journal::new(store.clone(), keys);
    let mut conn = store.pool().acquire().await.unwrap();
    let old = store::journal::read_generation(&mut conn, store.kind())
        .await
        .unwrap();
    sqlx::query("UPDATE read_generation SET generation = generation + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    // A full first batch decided at the old generation, then records that depend on none,
    // queued while it is in flight.
    let decided = (0..164).map(|n| (n < 64).then_some(old));
    let seqs = append_together(&journal, decided, old).await;
    assert_eq!(seqs, (1..=100).collect::<Vec<u64>>());
    chains_verify(&store, 100).await;
    store.close().await;
}

/// Two writers (two nodes) appending to one chain as fast as they can, 8 callers each: once
/// one loses a position to the other, both queue for the chain's lock, so neither runs out
/// of attempts while the other keeps winning; every append is written, the chain is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_chain_both_keep_writing() {
    let Some((_db, store)) = postgres().await else {
        return;
    };
    let (keys, _dir) = tenant_t_keys(&store).await;
    let nodes = [
        Journal::new(store.clone(), keys.clone()),
        Journal::new(store.clone(), keys),
    ];
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..16 {
        let journal = nodes[caller % 2].clone();
        callers.spawn(async move {
            let mut failures = Vec::new();
            for n in 0..150 {
                if let Err(e) = journal
                    .append(decision("t", caller * 1000 + n), &journal::disclosures())
                    .await
                {
                    failures.push(e);
                }
            }
            failures
        });
    }
    let failures: Vec<JournalError> = callers.join_all().await.into_iter().flatten().collect();
    assert!(
        failures.is_empty(),
        "{} appends failed: {:?}",
        failures.len(),
        failures.first()
    );
    chains_verify(&store, 2400).await;
    for node in &nodes {
        assert_eq!(node.stats().records, 1200, "{:?}", node.stats());
    }
    store.close().await;
}

/// A fresh SQLite database, migrated.
async fn sqlite() -> (TestDb, Store) {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    (db, store)
}

/// Another connection's write transaction: SQLite's write lock, held until [`release`].
async fn hold_write_lock(store: &Store) -> sqlx::pool::PoolConnection<sqlx::Any> {
    let mut blocker = store.pool().acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    blocker
}

/// Ends [`hold_write_lock`]'s transaction, writing nothing.
async fn release(mut blocker: sqlx::pool::PoolConnection<sqlx::Any>) {
    sqlx::query("ROLLBACK")
        .execute(&mut *blocker)
        .await
        .unwrap();
}

/// Records in `journal_facets`, the receipts browser's filter copies.
async fn facets(store: &Store) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM journal_facets")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// One append at a time: each commits itself (one record a commit, none through the writer's
/// task); 200 at once: the first commits itself, the others queue meanwhile and go in batches
/// of the writer's task; right after those, a lone append goes to the writer's task too
/// (appends are concurrent: one committing itself would split their batches). Every record has
/// its place in the chain.
#[tokio::test]
async fn a_lone_append_commits_itself_and_appends_together_still_share_commits() {
    let (_db, store) = sqlite().await;
    let (keys, _dir) = tenant_t_keys(&store).await;
    let journal = Journal::new(store.clone(), keys);
    for n in 0..5 {
        let signed = journal
            .append(decision("t", n), &journal::disclosures())
            .await
            .unwrap();
        assert_eq!(signed.seq, Some(u64::try_from(n).unwrap() + 1));
    }
    let alone = journal.stats();
    assert_eq!((alone.records, alone.commits), (5, 5), "{alone:?}");
    assert_eq!(alone.by_callers, 5, "{alone:?}");

    // The 200 must overlap whatever the machine's load: a commit that finished before its
    // task looked again would let each of them find the writer idle in turn. So the database
    // is held (another connection's write transaction) until all of them have started; the
    // first append's commit waits there, and the others queue behind it.
    let blocker = hold_write_lock(&store).await;
    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..200 {
        let (journal, started) = (journal.clone(), started.clone());
        tasks.spawn(async move {
            started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            journal
                .append(decision("t", n), &journal::disclosures())
                .await
                .unwrap()
                .seq
                .unwrap()
        });
    }
    // On this single-threaded runtime a task that has started has also queued its record (or
    // is committing it itself): nothing in between waits.
    while started.load(std::sync::atomic::Ordering::Relaxed) < 200 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(
        journal.stats().records,
        5,
        "committed while the database was held"
    );
    release(blocker).await;
    let mut seqs = tasks.join_all().await;
    seqs.sort_unstable();
    assert_eq!(seqs, (6..=205).collect::<Vec<u64>>());
    let together = journal.stats();
    assert_eq!(together.records, 205, "{together:?}");
    assert!(
        together.commits - alone.commits < 10,
        "200 appends at once took {} commits: {together:?}",
        together.commits - alone.commits
    );
    assert!(together.by_callers < 205, "{together:?}");
    // Right after appends came together, a lone one joins the writer's next batch instead of
    // committing itself between two of theirs.
    journal
        .append(decision("t", 205), &journal::disclosures())
        .await
        .unwrap();
    let after = journal.stats();
    assert_eq!(after.records, 206, "{after:?}");
    assert_eq!(after.by_callers, together.by_callers, "{after:?}");
    chains_verify(&store, 206).await;
}

/// Appends whose callers stop waiting at every moment of their commit (a timeout from 0 to
/// 2 ms), one after the other so that each commits itself: the journal goes on (each later
/// append is committed at the next position), nothing stays counted as unanswered, and the
/// chain verifies whichever of the abandoned records were committed.
#[tokio::test]
async fn appends_that_stop_waiting_in_the_middle_of_their_commit_leave_the_journal_whole() {
    let (_db, store) = sqlite().await;
    let (keys, _dir) = tenant_t_keys(&store).await;
    let journal = Journal::new(store.clone(), keys);
    let mut abandoned = 0;
    // First a caller that stops waiting while another connection holds the database: its
    // record cannot be committed within its wait on any path, so an append is abandoned
    // whatever the machine's timing (a lone append that commits within its first poll, as the
    // direct insert does, is never abandoned by the short waits below).
    let blocker = hold_write_lock(&store).await;
    let disclosures = journal::disclosures();
    let held = journal.append(decision("t", 0), &disclosures);
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(20), held)
            .await
            .is_err(),
        "an append committed while another connection held the database"
    );
    abandoned += 1;
    release(blocker).await;
    for n in 0..80_u64 {
        let disclosures = journal::disclosures();
        let append = journal.append(decision("t", 0), &disclosures);
        if tokio::time::timeout(std::time::Duration::from_micros(n * 25), append)
            .await
            .is_err()
        {
            abandoned += 1;
        }
    }
    assert!(abandoned > 0, "no append was abandoned");
    assert!(journal.settle(std::time::Duration::from_secs(5)).await);
    let before = journal::verify(&store).await.unwrap();
    let committed = before.iter().map(|r| r.verified).sum::<u64>();
    for n in 0..10 {
        let signed = journal
            .append(decision("t", n), &journal::disclosures())
            .await
            .unwrap();
        assert_eq!(signed.seq, Some(committed + u64::try_from(n).unwrap() + 1));
    }
    chains_verify(&store, committed + 10).await;
}

/// Records that appends committed themselves reach `journal_facets` once appends pause, as
/// those of the writer's task do (its task waited with nothing to copy when they came).
#[tokio::test]
async fn what_appends_commit_themselves_is_copied_to_the_facets_at_the_next_pause() {
    let (_db, store) = sqlite().await;
    let (keys, _dir) = tenant_t_keys(&store).await;
    let journal = Journal::new(store.clone(), keys);
    for round in 0..2 {
        for n in 0..3 {
            journal
                .append(decision("t", n), &journal::disclosures())
                .await
                .unwrap();
        }
        let expected = 3 * (round + 1);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while facets(&store).await < expected {
            assert!(
                std::time::Instant::now() < until,
                "journal_facets holds {} of {expected} records",
                facets(&store).await
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    assert_eq!(journal.stats().by_callers, 6);
}

/// Issue 29 (one client's latency): on SQLite a batch's insert runs on the committing task's
/// own thread, not on sqlx's connection thread (two thread wake-ups a statement). It never
/// waits there for the write lock: while another connection holds it, the append goes through
/// sqlx, which waits as every connection of the store does, and commits once the lock is free
/// — nothing written meanwhile, nothing lost, the next append on the calling thread again.
#[tokio::test]
async fn inserts_run_on_the_committing_thread_and_a_held_lock_is_waited_for_through_sqlx() {
    let (_db, store) = sqlite().await;
    let (keys, _dir) = tenant_t_keys(&store).await;
    let journal = Journal::new(store.clone(), keys);
    for n in 0..3 {
        journal
            .append(decision("t", n), &journal::disclosures())
            .await
            .unwrap();
    }
    let stats = journal.stats();
    assert_eq!((stats.records, stats.direct), (3, 3), "{stats:?}");

    let blocker = hold_write_lock(&store).await;
    let signed_before = journal.stats().signing;
    let waiting = tokio::spawn({
        let journal = journal.clone();
        async move {
            journal
                .append(decision("t", 3), &journal::disclosures())
                .await
        }
    });
    // Once the writer has signed the record it has tried the insert on its own thread (with no
    // await between the two): refused at once, the lock being held, it waits through sqlx. On a
    // loaded machine the writer may take a while to get there.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while journal.stats().signing == signed_before {
        assert!(
            std::time::Instant::now() < until,
            "the append was never signed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the append did not wait for the lock"
    );
    assert_eq!(
        journal.stats().records,
        3,
        "committed while the lock was held"
    );
    release(blocker).await;
    let signed = waiting.await.unwrap().unwrap();
    assert_eq!(signed.seq, Some(4));
    let stats = journal.stats();
    assert_eq!((stats.records, stats.direct), (4, 3), "{stats:?}");

    journal
        .append(decision("t", 4), &journal::disclosures())
        .await
        .unwrap();
    let stats = journal.stats();
    assert_eq!((stats.records, stats.direct), (5, 4), "{stats:?}");
    chains_verify(&store, 5).await;
}

/// The direct insert decides as the statement through sqlx does: all rows or none — none when
/// a position or a receipt id is taken (another writer appended first) or the store's read
/// generation moved; it returns at once, deciding nothing, while another connection holds the
/// write lock; an in-memory database has none (another connection would not see it), nor a
/// store whose commits sync the WAL to disk.
#[tokio::test]
async fn the_direct_insert_refuses_as_the_statement_does_and_never_waits_for_the_lock() {
    use aperture_core::store::journal::{BatchInsert, Direct, NewRecord};
    let (_db, store) = sqlite().await;
    store::tenants::ensure(&store, "t").await.unwrap();
    let direct = Direct::for_store(&store).expect("a database file");
    let record = |seq: i64, receipt_id: &'static str| NewRecord {
        tenant_id: "t",
        seq,
        receipt_id,
        kind: "decision",
        decision: "allow",
        reason: "ok",
        tool: Some("mcp__s__t"),
        session_id: None,
        actor_id: "agent",
        issued_at: 1,
        receipt: "{}",
        disclosures: "{}",
        record_hash: "h",
    };
    let generation: i64 = sqlx::query_scalar("SELECT generation FROM read_generation WHERE id = 1")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let rows = |store: &Store| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_as::<_, (i64, String)>("SELECT seq, receipt_id FROM journal ORDER BY seq")
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        direct.insert_batch(&[record(1, "r1"), record(2, "r2")], Some(generation)),
        Some(BatchInsert::Inserted)
    );
    assert_eq!(
        direct.insert_batch(&[record(3, "r3"), record(2, "r2b")], None),
        Some(BatchInsert::PositionTaken)
    );
    assert_eq!(
        direct.insert_batch(&[record(3, "r1")], None),
        Some(BatchInsert::PositionTaken)
    );
    assert_eq!(
        direct.insert_batch(&[record(3, "r3")], Some(generation + 1)),
        Some(BatchInsert::GenerationMoved)
    );
    assert_eq!(
        rows(&store).await,
        [(1, "r1".to_owned()), (2, "r2".to_owned())]
    );

    let blocker = hold_write_lock(&store).await;
    let started = std::time::Instant::now();
    assert_eq!(direct.insert_batch(&[record(3, "r3")], None), None);
    // The store's connections wait up to 10 s for the lock; this one not at all.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    release(blocker).await;
    assert_eq!(
        direct.insert_batch(&[record(3, "r3")], Some(generation)),
        Some(BatchInsert::Inserted)
    );
    assert_eq!(rows(&store).await.len(), 3);

    let memory = Store::connect("sqlite::memory:").await.unwrap();
    assert!(Direct::for_store(&memory).is_none());
    // A commit that syncs the WAL would hold the committing thread as long: through sqlx.
    let synced = Store::connect_with(&_db.url, store::Durability::PowerLoss)
        .await
        .unwrap();
    assert!(Direct::for_store(&synced).is_none());
    assert!(Direct::for_store(&store).is_some());
}
