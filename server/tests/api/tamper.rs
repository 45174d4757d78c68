//! Issue 22's tamper suite: a journal of a few thousand records with signed checkpoints (in
//! the database and in the sink), changed the ways an intruder with write access to the
//! database would change it, one mutation at a time, each put back afterwards. Every mutation
//! must be found by what `aperture journal verify --trusted-keys` runs: the chains with the
//! pinned keys only, every stored column, the keys the database holds, and every checkpoint
//! in the database and the sink against the receipts. In-process (no binary per mutation);
//! the count found equals the count made.

use std::path::{Path, PathBuf};

use engine::receipt::{
    Decision, JwkSet, ReasonCode, Receipt, ReceiptKind, Signer, receipt_canonical_bytes,
    receipt_hash, sign_receipt,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use aperture_core::journal::{self, Journal, checkpoints::Checkpointer};
use aperture_core::store::{self, Store};

use crate::helpers::{Db, TestDb};

/// One journal row, every column.
type Row = (
    String,
    i64,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    i64,
    String,
    String,
    String,
);

const COLUMNS: &str = "tenant_id, seq, receipt_id, kind, decision, reason, tool, session_id, \
    actor_id, issued_at, receipt, disclosures, record_hash";

async fn rows(store: &Store, tenant: &str, from: i64, to: i64) -> Vec<Row> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM journal WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq"
    ))
    .bind(tenant)
    .bind(from)
    .bind(to)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

/// Deletes `tenant`'s rows from `from` to `to` and every row with one of `saved`'s receipt
/// ids, then puts `saved` back.
async fn restore(store: &Store, tenant: &str, from: i64, to: i64, saved: &[Row]) {
    sqlx::query("DELETE FROM journal WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3")
        .bind(tenant)
        .bind(from)
        .bind(to)
        .execute(store.pool())
        .await
        .unwrap();
    for r in saved {
        sqlx::query("DELETE FROM journal WHERE receipt_id = $1")
            .bind(&r.2)
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query(&format!(
            "INSERT INTO journal ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        ))
        .bind(&r.0)
        .bind(r.1)
        .bind(&r.2)
        .bind(&r.3)
        .bind(&r.4)
        .bind(&r.5)
        .bind(&r.6)
        .bind(&r.7)
        .bind(&r.8)
        .bind(r.9)
        .bind(&r.10)
        .bind(&r.11)
        .bind(&r.12)
        .execute(store.pool())
        .await
        .unwrap();
    }
}

/// What `aperture journal verify --trusted-keys` finds, in words (empty: nothing): the first
/// stage that finds anything.
async fn findings(store: &Store, trusted: &JwkSet, sink: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let stored = aperture_core::keys::published(store).await.unwrap();
    for k in &stored.keys {
        if !trusted.keys.iter().any(|t| t.kid == k.kid && t.x == k.x) {
            out.push(format!("untrusted key {}", k.kid));
        }
    }
    // `journal verify` reports everything it finds; one finding is enough here, so later
    // stages are skipped once one is found (the suite's time).
    if !out.is_empty() {
        return out;
    }
    for r in journal::verify_with(store, trusted).await.unwrap() {
        if let Some(e) = r.error {
            out.push(format!("{}: {e}", r.tenant_id));
        }
    }
    if !out.is_empty() {
        return out;
    }
    for r in journal::audit::verify_checkpoints(store, trusted, Some(sink), &[], 0, &[])
        .await
        .unwrap()
    {
        out.extend(
            r.problems
                .into_iter()
                .map(|p| format!("{}: {p}", r.tenant_id)),
        );
    }
    out
}

/// Flips one character of `text` to another printable one.
fn flip(text: &str, rng: &mut StdRng) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return "x".into();
    }
    let i = rng.gen_range(0..chars.len());
    let old = chars[i];
    let mut new = old;
    while new == old {
        new = char::from(rng.gen_range(0x21u8..0x7f));
    }
    chars[i] = new;
    chars.into_iter().collect()
}

/// What puts back a change outside the journal table (a checkpoint, the sink, a key).
type PutBack = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>>;

struct Suite {
    store: Store,
    trusted: JwkSet,
    sink: PathBuf,
    signing: aperture_core::keys::KeyRing,
    head: i64,
    rng: StdRng,
    /// Every row of tenant `t` as made: what each mutation is put back to.
    saved: Vec<Row>,
}

impl Suite {
    /// `UPDATE journal SET <column> = value` on record `seq` of tenant `t`.
    async fn set(&self, column: &str, value: &str, seq: i64) {
        sqlx::query(&format!(
            "UPDATE journal SET {column} = $1 WHERE tenant_id = 't' AND seq = $2"
        ))
        .bind(value)
        .bind(seq)
        .execute(self.store.pool())
        .await
        .unwrap();
    }

    /// Applies mutation `n` of kind `kind`, checks that it is found, puts everything back.
    async fn mutate(&mut self, kind: usize) -> (String, bool) {
        let store = self.store.clone();
        let head = self.head;
        let seq = self.rng.gen_range(1..=head);
        let saved = self.saved.clone();
        let row = saved[usize::try_from(seq - 1).unwrap()].clone();
        // The positions the mutation touched (put back afterwards).
        let mut touched = (seq, seq);
        let mut after: Option<PutBack> = None;
        let label;
        match kind {
            // A character of one text column of one row.
            0..=6 => {
                let column = [
                    "receipt",
                    "disclosures",
                    "record_hash",
                    "receipt_id",
                    "actor_id",
                    "decision",
                    "reason",
                ][kind];
                let old = match column {
                    "receipt" => row.10.clone(),
                    "disclosures" => row.11.clone(),
                    "record_hash" => row.12.clone(),
                    "receipt_id" => row.2.clone(),
                    "actor_id" => row.8.clone(),
                    "decision" => row.4.clone(),
                    _ => row.5.clone(),
                };
                let new = flip(&old, &mut self.rng);
                label = format!("{column} of record {seq}");
                self.set(column, &new, seq).await;
            }
            7 => {
                label = format!("tool of record {seq}");
                let new = match &row.6 {
                    Some(t) if self.rng.gen_bool(0.5) => Some(flip(t, &mut self.rng)),
                    Some(_) => None,
                    None => Some("mcp__x__y".to_owned()),
                };
                sqlx::query("UPDATE journal SET tool = $1 WHERE tenant_id = 't' AND seq = $2")
                    .bind(new)
                    .bind(seq)
                    .execute(store.pool())
                    .await
                    .unwrap();
            }
            8 => {
                label = format!("session of record {seq}");
                let new = match &row.7 {
                    Some(s) => flip(s, &mut self.rng),
                    None => "ses_forged".to_owned(),
                };
                self.set("session_id", &new, seq).await;
            }
            9 => {
                let delta = self.rng.gen_range(1..100_000_000i64)
                    * if self.rng.gen_bool(0.5) { 1 } else { -1 };
                label = format!("issued_at of record {seq} by {delta} ms");
                sqlx::query("UPDATE journal SET issued_at = issued_at + $1 WHERE tenant_id = 't' AND seq = $2")
                    .bind(delta)
                    .bind(seq)
                    .execute(store.pool())
                    .await
                    .unwrap();
            }
            10 => {
                label = format!("kind of record {seq}");
                let new = if row.3 == "admin" {
                    "decision"
                } else {
                    "admin"
                };
                self.set("kind", new, seq).await;
            }
            // Deletes: the head, one in the middle, the tail.
            11 => {
                let (from, to) = match self.rng.gen_range(0..3) {
                    0 => (1, self.rng.gen_range(1..=3)),
                    1 => (seq, seq),
                    _ => (head - self.rng.gen_range(0..20), head),
                };
                label = format!("records {from}–{to} deleted");
                touched = (from, to);
                sqlx::query(
                    "DELETE FROM journal WHERE tenant_id = 't' AND seq >= $1 AND seq <= $2",
                )
                .bind(from)
                .bind(to)
                .execute(store.pool())
                .await
                .unwrap();
            }
            // Two rows swapped (their contents, positions kept).
            12 => {
                let other = if seq == head {
                    seq - 1
                } else {
                    seq + 1 + self.rng.gen_range(0..(head - seq).min(50))
                };
                label = format!("records {seq} and {other} swapped");
                let b = saved[usize::try_from(other - 1).unwrap()].clone();
                touched = (seq.min(other), seq.max(other));
                sqlx::query("DELETE FROM journal WHERE tenant_id = 't' AND seq IN ($1, $2)")
                    .bind(seq)
                    .bind(other)
                    .execute(store.pool())
                    .await
                    .unwrap();
                let mut x = row.clone();
                let mut y = b.clone();
                std::mem::swap(&mut x.1, &mut y.1);
                restore(&store, "none", 0, 0, &[x, y]).await;
            }
            // A row moved to another tenant (a free position there).
            13 => {
                label = format!("record {seq} moved to tenant u");
                sqlx::query("UPDATE journal SET tenant_id = 'u', seq = seq + 1000000 WHERE tenant_id = 't' AND seq = $1")
                    .bind(seq)
                    .execute(store.pool())
                    .await
                    .unwrap();
            }
            // The tail cut and its positions handed out again to new records.
            14 => {
                let cut = head - self.rng.gen_range(0..15);
                label = format!("records from {cut} cut and reissued");
                touched = (cut, i64::MAX);
                sqlx::query("DELETE FROM journal WHERE tenant_id = 't' AND seq >= $1")
                    .bind(cut)
                    .execute(store.pool())
                    .await
                    .unwrap();
                let fresh = Journal::new(store.clone(), self.signing.clone());
                for _ in 0..(head - cut + 1 + self.rng.gen_range(0..5)) {
                    fresh
                        .append(
                            journal::receipt(
                                ReceiptKind::Decision,
                                Decision::Allow,
                                ReasonCode::Ok,
                                "t",
                                "intruder",
                                "operator",
                            ),
                            &journal::disclosures(),
                        )
                        .await
                        .unwrap();
                }
            }
            // A line of a stored checkpoint, or of the sink, edited.
            15 => {
                let sink = self.sink.join("t.checkpoints");
                if self.rng.gen_bool(0.5) {
                    let (size, note): (i64, String) = sqlx::query_as(
                        "SELECT tree_size, note FROM journal_checkpoints WHERE tenant_id = 't' ORDER BY tree_size LIMIT 1 OFFSET $1",
                    )
                    .bind(self.rng.gen_range(0..3i64))
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
                    label = format!("a line of the stored checkpoint of size {size}");
                    let lines: Vec<&str> = note.split('\n').collect();
                    let i = self.rng.gen_range(0..3);
                    let mut lines: Vec<String> = lines.iter().map(|s| (*s).to_owned()).collect();
                    lines[i] = flip(&lines[i], &mut self.rng);
                    sqlx::query("UPDATE journal_checkpoints SET note = $1 WHERE tenant_id = 't' AND tree_size = $2")
                        .bind(lines.join("\n"))
                        .bind(size)
                        .execute(store.pool())
                        .await
                        .unwrap();
                    let store = store.clone();
                    after = Some(Box::new(move || {
                        Box::pin(async move {
                            sqlx::query("UPDATE journal_checkpoints SET note = $1 WHERE tenant_id = 't' AND tree_size = $2")
                                .bind(note)
                                .bind(size)
                                .execute(store.pool())
                                .await
                                .unwrap();
                        })
                    }));
                } else {
                    let text = std::fs::read_to_string(&sink).unwrap();
                    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
                    // A text line (origin, size or root) of some note.
                    let candidates: Vec<usize> = lines
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| !l.is_empty() && !l.starts_with('\u{2014}'))
                        .map(|(i, _)| i)
                        .collect();
                    let i = candidates[self.rng.gen_range(0..candidates.len())];
                    label = format!("line {i} of the sink");
                    lines[i] = flip(&lines[i], &mut self.rng);
                    std::fs::write(&sink, lines.join("\n")).unwrap();
                    after = Some(Box::new(move || {
                        Box::pin(async move {
                            std::fs::write(&sink, text).unwrap();
                        })
                    }));
                }
            }
            // A key added to the database and the tail re-signed with it.
            _ => {
                let intruder = Signer::from_seed(&[self.rng.r#gen(); 32]);
                label = format!(
                    "records from {seq} re-signed with key {}",
                    intruder.key_id()
                );
                touched = (seq, head);
                aperture_core::store::keys::record(&store, intruder.key_id(), &intruder.jwk().x)
                    .await
                    .unwrap();
                let mut prev: Option<String> = None;
                for r in &saved[usize::try_from(seq - 1).unwrap()..] {
                    let mut receipt: Receipt = serde_json::from_str(&r.10).unwrap();
                    if prev.is_none() {
                        receipt.actor_id = "intruder".into();
                    } else {
                        receipt.prev_hash = prev.clone();
                    }
                    let receipt = sign_receipt(receipt, &intruder).unwrap();
                    prev = Some(receipt_hash(&receipt).unwrap());
                    sqlx::query("UPDATE journal SET receipt = $1, record_hash = $2, actor_id = $3 WHERE tenant_id = 't' AND seq = $4")
                        .bind(String::from_utf8(receipt_canonical_bytes(&receipt)).unwrap())
                        .bind(receipt_hash(&receipt).unwrap())
                        .bind(&receipt.actor_id)
                        .bind(r.1)
                        .execute(store.pool())
                        .await
                        .unwrap();
                }
                let kid = intruder.key_id().to_owned();
                let store = store.clone();
                after = Some(Box::new(move || {
                    Box::pin(async move {
                        sqlx::query("DELETE FROM signing_keys WHERE kid = $1")
                            .bind(kid)
                            .execute(store.pool())
                            .await
                            .unwrap();
                    })
                }));
            }
        }
        let found = findings(&store, &self.trusted, &self.sink).await;
        // Put everything back.
        sqlx::query("DELETE FROM journal WHERE tenant_id = 'u' AND seq > 1000000")
            .execute(store.pool())
            .await
            .unwrap();
        let (from, to) = touched;
        let last = usize::try_from(to.min(head)).unwrap();
        restore(
            &store,
            "t",
            from,
            to,
            &saved[usize::try_from(from - 1).unwrap()..last],
        )
        .await;
        // The copies in journal_facets of records the mutation added (reissued positions past
        // the head), which the journal's writer may have made meanwhile.
        sqlx::query(
            "DELETE FROM journal_facets WHERE (tenant_id = 't' AND seq > $1) \
             OR (tenant_id = 'u' AND seq > 1000000)",
        )
        .bind(head)
        .execute(store.pool())
        .await
        .unwrap();
        if let Some(f) = after {
            f().await;
        }
        (label, !found.is_empty())
    }
}

async fn tamper_suite(store: &Store, records: usize, mutations: usize) {
    store::tenants::ensure(store, "t").await.unwrap();
    store::tenants::ensure(store, "u").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let signing = aperture_core::keys::KeyRing::load(
        store,
        dir.path(),
        None,
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await
    .unwrap();
    let trusted = aperture_core::keys::published(store).await.unwrap();
    let sink = dir.path().join("checkpoints");
    let writer = Journal::new(store.clone(), signing.clone());
    let checkpoints = Checkpointer::new(
        store.clone(),
        signing.clone(),
        "tamper.example".into(),
        Some(sink.clone()),
        std::time::Duration::from_secs(60),
    );
    // A journal with records of every kind and shape, checkpointed four times as it grows.
    let mut rng = StdRng::seed_from_u64(22);
    for step in 0..4 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..records / 4 {
            let writer = writer.clone();
            let decision = [Decision::Allow, Decision::Deny, Decision::Park][rng.gen_range(0..3)];
            let tool = rng
                .gen_bool(0.8)
                .then(|| format!("mcp__files__tool_{}", rng.gen_range(0..9)));
            let session = rng
                .gen_bool(0.7)
                .then(|| format!("ses_{}", rng.gen_range(0..30)));
            tasks.spawn(async move {
                let mut r = journal::receipt(
                    if i % 7 == 0 {
                        ReceiptKind::Admin
                    } else {
                        ReceiptKind::Decision
                    },
                    decision,
                    if decision == Decision::Deny {
                        ReasonCode::PolicyDenied
                    } else {
                        ReasonCode::Ok
                    },
                    "t",
                    "agent",
                    "operator",
                );
                r.tool = tool;
                r.session_id = session;
                let mut d = journal::disclosures();
                d.insert_extra("note", serde_json::json!({"step": step, "i": i}))
                    .unwrap();
                writer.append(r, &d).await.unwrap();
            });
        }
        tasks.join_all().await;
        checkpoints.checkpoint("t").await.unwrap();
    }
    for _ in 0..50 {
        writer
            .append(
                journal::receipt(
                    ReceiptKind::Admin,
                    Decision::Allow,
                    ReasonCode::Ok,
                    "u",
                    "ops",
                    "operator",
                ),
                &journal::disclosures(),
            )
            .await
            .unwrap();
    }
    checkpoints.checkpoint("u").await.unwrap();
    drop(writer);
    let (head,): (i64,) = sqlx::query_as("SELECT MAX(seq) FROM journal WHERE tenant_id = 't'")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(head, i64::try_from(records / 4 * 4).unwrap());
    let clean = findings(store, &trusted, &sink).await;
    assert!(
        clean.is_empty(),
        "the untouched journal verifies: {clean:?}"
    );

    let saved = rows(store, "t", 1, head).await;
    let mut suite = Suite {
        saved,
        store: store.clone(),
        trusted: trusted.clone(),
        sink: sink.clone(),
        signing,
        head,
        rng: StdRng::seed_from_u64(2026),
    };
    let mut missed = Vec::new();
    let mut detected = 0;
    for n in 0..mutations {
        let kind = n % 17;
        let (label, found) = suite.mutate(kind).await;
        if found {
            detected += 1;
        } else {
            missed.push(label);
        }
        if n % 100 == 99 {
            let clean = findings(store, &trusted, &sink).await;
            assert!(clean.is_empty(), "put back after mutation {n}: {clean:?}");
        }
    }
    println!("tamper suite: {detected} of {mutations} mutations detected");
    assert!(missed.is_empty(), "not detected: {missed:#?}");
    assert_eq!(detected, mutations);
}

/// At least 1,000 mutations on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tampering_of_the_journal_is_found_on_sqlite() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    tamper_suite(&store, 2_000, 1_020).await;
    store.close().await;
}

/// A sample on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tampering_of_the_journal_is_found_on_postgres() {
    let Some(db) = TestDb::new(Db::Postgres).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    tamper_suite(&store, 800, 68).await;
    store.close().await;
}
