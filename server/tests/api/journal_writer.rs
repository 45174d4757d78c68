//! Issue 26 (PostgreSQL throughput): the journal's writer on PostgreSQL signs the next batch
//! while the database commits the one in flight, never lets a record signed ahead of a batch
//! that was not written go as signed, and, when another node writes the same chain, queues for
//! the chain's lock instead of racing for positions. PostgreSQL only (SQLite's writer is the
//! sequential one); skipped without `APERTURE_TEST_POSTGRES_URL`.

use aperture::journal::{self, Journal, JournalError};
use aperture::store::{self, Store};
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
