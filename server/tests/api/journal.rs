//! The journal: admin changes are journaled, chains verify, tampering is found, receipts are
//! listed and filtered, keys are published.

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use aperture_core::store::{self, Store};

use crate::helpers::{ADMIN_PASSWORD, Db, Requests, TestApp};
use crate::on_both_backends;

async fn keys(app: &TestApp) -> Vec<Jwk> {
    app.keys().await
}

async fn all_receipts(app: &TestApp, token: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/receipts?limit=2{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = app.get(path).as_(token).await.json();
        out.extend(page["receipts"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    out
}

async fn admin_changes_are_journaled_and_verify(app: &TestApp) {
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let bot = json!({"actor_id": "bot", "scopes": [scope::RUN]});
    let created = app.post("/tokens").as_(&admin).json(bot).await.json();
    let id = created["token"]["id"].as_str().unwrap();
    app.delete(format!("/tokens/{id}")).as_(&admin).await;
    app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    app.sign_in(&app.browser, "admin", "wrong-password").await;

    let receipts = all_receipts(app, &admin, "").await;
    // bootstrap user, operator token, token.create, token.revoke, sign-in, failed sign-in
    assert_eq!(receipts.len(), 6, "{receipts:#?}");
    let seqs: Vec<u64> = receipts
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        vec![6, 5, 4, 3, 2, 1],
        "newest first, no gaps across pages"
    );
    assert!(receipts.iter().all(|r| r["kind"] == "admin"));
    assert_eq!(receipts[0]["decision"], "deny");
    assert_eq!(receipts[0]["reason"], "unauthenticated");
    assert_eq!(receipts[1]["actor_id"], "admin");
    // Caller receipts carry no disclosures.
    assert!(receipts.iter().all(|r| r.get("disclosures").is_none()));

    let keys = keys(app).await;
    assert_eq!(keys.len(), 1);
    for r in &receipts {
        verify_receipt_json(r, &keys).unwrap();
    }
    let reports = aperture_core::journal::verify(&app.store).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].verified, 6);
    assert!(reports[0].error.is_none());

    // Filters.
    let denied = all_receipts(app, &admin, "&decision=deny").await;
    assert_eq!(denied.len(), 1);
    let by_ops = all_receipts(app, &admin, "&actor_id=ops").await;
    assert_eq!(by_ops.len(), 2);
    let future = all_receipts(app, &admin, "&since=2999-01-01T00:00:00Z").await;
    assert!(future.is_empty());

    // Detail with disclosures, which match the receipt's digest.
    let rid = receipts[3]["receipt_id"].as_str().unwrap();
    let detail: Value = app.get(format!("/receipts/{rid}")).as_(&admin).await.json();
    assert_eq!(detail["disclosures"]["action"], "token.create");
    let d: engine::receipt::Disclosures =
        serde_json::from_value(detail["disclosures"].clone()).unwrap();
    let r: engine::receipt::Receipt = serde_json::from_value(detail["receipt"].clone()).unwrap();
    assert!(engine::receipt::disclosures_match(&r, &d).unwrap());
}

#[tokio::test]
async fn admin_changes_are_journaled_and_verify_on_sqlite() {
    admin_changes_are_journaled_and_verify(&TestApp::spawn().await).await;
}

#[tokio::test]
async fn admin_changes_are_journaled_and_verify_on_postgres() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    admin_changes_are_journaled_and_verify(&app).await;
}

/// An app whose journal holds the admin records of `tokens` token creations (bot-0, bot-1, …).
async fn app_with_tokens(tokens: usize) -> TestApp {
    let app = TestApp::spawn().await;
    for i in 0..tokens {
        app.token("default", &format!("bot-{i}"), &[scope::RUN])
            .await;
    }
    app
}

/// The stored receipt text of record `seq` of tenant `default`.
async fn stored_receipt(store: &Store, seq: i64) -> String {
    let (receipt,): (String,) =
        sqlx::query_as("SELECT receipt FROM journal WHERE tenant_id = 'default' AND seq = $1")
            .bind(seq)
            .fetch_one(store.pool())
            .await
            .unwrap();
    receipt
}

#[tokio::test]
async fn flipping_one_stored_byte_is_found_and_named() {
    let app = app_with_tokens(4).await;
    let receipt = stored_receipt(&app.store, 3).await;
    let tampered = receipt
        .replacen("\"allow\"", "\"alloW\"", 1)
        .replacen("bot-1", "bot-X", 1);
    assert_ne!(tampered, receipt);
    sqlx::query("UPDATE journal SET receipt = $1 WHERE tenant_id = 'default' AND seq = 3")
        .bind(&tampered)
        .execute(app.store.pool())
        .await
        .unwrap();
    let reports = aperture_core::journal::verify(&app.store).await.unwrap();
    let error = reports[0].error.as_ref().expect("tampering is found");
    assert_eq!(error.seq, 3);
    assert_eq!(reports[0].verified, 2);
}

/// Issue 6: the overview shows whether the chain verifies ("verified up to record N" or the
/// first bad record), verified in the background and cached. New records are verified by
/// incremental passes; a record changed after it was verified is found by the next full pass.
#[tokio::test]
async fn the_background_verifier_caches_the_chain_status_and_finds_later_tampering() {
    use aperture_core::journal::watch::ChainWatch;
    let app = app_with_tokens(3).await;
    let watch = ChainWatch::new(app.store.clone());
    assert_eq!(
        watch.status("default"),
        None,
        "nothing before the first pass"
    );
    watch.pass(true).await.unwrap();
    let first = watch.status("default").unwrap();
    assert_eq!(first.first_bad, None);
    let head = first.verified;
    assert!(head >= 3, "{first:?}");

    // An old record is changed, then a new one is appended: an incremental pass verifies only
    // the new record (and still links it to the cached head).
    let receipt = stored_receipt(&app.store, 2).await;
    let tampered = receipt.replacen("\"allow\"", "\"alloW\"", 1);
    assert_ne!(tampered, receipt);
    sqlx::query("UPDATE journal SET receipt = $1 WHERE tenant_id = 'default' AND seq = 2")
        .bind(&tampered)
        .execute(app.store.pool())
        .await
        .unwrap();
    app.token("default", "bot-late", &[scope::RUN]).await;
    watch.pass(false).await.unwrap();
    let incremental = watch.status("default").unwrap();
    assert_eq!(incremental.first_bad, None);
    assert_eq!(incremental.verified, head + 1);

    // The full pass reads everything again and names record 2.
    watch.pass(true).await.unwrap();
    let full = watch.status("default").unwrap();
    assert_eq!(full.verified, 1);
    assert_eq!(full.first_bad.as_ref().map(|(seq, _)| *seq), Some(2));
    // Until the next full pass, the bad record stays reported.
    app.token("default", "bot-later", &[scope::RUN]).await;
    watch.pass(false).await.unwrap();
    assert_eq!(
        watch.status("default").unwrap().first_bad.map(|(s, _)| s),
        Some(2)
    );
}

/// The background verifier checks one signature per page of records and lets the links vouch
/// for the rest; it must still find a record whose stored text, hash column and all were
/// rewritten consistently (only its signature no longer fits), in the middle of the chain or
/// at its head, and name the same record and problem as `aperture journal verify`.
#[tokio::test]
async fn the_background_verifier_names_the_record_journal_verify_names() {
    use aperture_core::journal::watch::ChainWatch;
    use engine::receipt::{Receipt, receipt_canonical_bytes, receipt_hash};
    let app = app_with_tokens(4).await;
    let (head,): (i64,) =
        sqlx::query_as("SELECT MAX(seq) FROM journal WHERE tenant_id = 'default'")
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    assert!(head >= 5);
    // Rewrites a record as an intruder with database access would: a changed member, the
    // stored text and hash recomputed to match, the signature kept (or garbled).
    let rewrite = |seq: i64, garble_signature: bool| {
        let store = app.store.clone();
        async move {
            let mut r: Receipt = serde_json::from_str(&stored_receipt(&store, seq).await).unwrap();
            if garble_signature {
                r.signature = "A".repeat(86);
            } else {
                r.actor_id.push('X');
            }
            let text = String::from_utf8(receipt_canonical_bytes(&r)).unwrap();
            sqlx::query(
                "UPDATE journal SET receipt = $1, record_hash = $2 WHERE tenant_id = 'default' AND seq = $3",
            )
            .bind(text)
            .bind(receipt_hash(&r).unwrap())
            .bind(seq)
            .execute(store.pool())
            .await
            .unwrap();
        }
    };
    let strict = || {
        let store = app.store.clone();
        async move {
            let reports = aperture_core::journal::verify(&store).await.unwrap();
            let e = reports[0].error.clone().expect("the rewrite is found");
            (e.seq, e.problem.to_string())
        }
    };
    let background = || {
        let watch = ChainWatch::new(app.store.clone());
        async move {
            watch.pass(true).await.unwrap();
            watch
                .status("default")
                .unwrap()
                .first_bad
                .expect("the rewrite is found")
        }
    };

    rewrite(head, true).await;
    let at_head = strict().await;
    assert_eq!(at_head.0, u64::try_from(head).unwrap());
    assert!(at_head.1.starts_with("signature"), "{at_head:?}");
    assert_eq!(background().await, at_head);

    rewrite(2, false).await;
    let in_the_middle = strict().await;
    assert_eq!(in_the_middle.0, 2);
    assert!(
        in_the_middle.1.starts_with("signature"),
        "{in_the_middle:?}"
    );
    assert_eq!(background().await, in_the_middle);
}

/// On SQLite the journal's writer does not stop its commits for checkpoints: the WAL is copied
/// into the database file in the background, on a connection of its own (the writer's own
/// connection would only checkpoint past 20,000 WAL pages, far more than this test writes).
#[tokio::test]
async fn the_journal_checkpoints_the_wal_in_the_background() {
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let app = TestApp::spawn().await;
    let (_, _, file): (i64, String, String) = sqlx::query_as("PRAGMA database_list")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    let size = || std::fs::metadata(&file).unwrap().len();
    let wal = || std::fs::metadata(format!("{file}-wal")).map_or(0, |m| m.len());
    let (keys, _dir) = tenant_t_keys(&app.store).await;
    let j = Journal::new(app.store.clone(), keys);
    // Let start-up's writes reach the file first.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let before = size();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..400 {
        let j = j.clone();
        tasks.spawn(async move {
            let r = journal::receipt(
                ReceiptKind::Decision,
                Decision::Allow,
                ReasonCode::Ok,
                "t",
                &format!("actor-{n}"),
                "operator",
            );
            j.append(r, &journal::disclosures()).await.unwrap()
        });
    }
    tasks.join_all().await;
    assert!(wal() > 0, "the records went to the WAL");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while size() <= before + 200 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file stayed at {} bytes (before: {before}; WAL: {} bytes)",
            size(),
            wal()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_change_the_journal_cannot_record_is_not_made() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    sqlx::query("DROP TABLE journal")
        .execute(app.store.pool())
        .await
        .unwrap();
    let response = app
        .post("/tokens")
        .as_(&admin)
        .json(json!({"actor_id": "bot", "scopes": [scope::RUN]}))
        .await;
    response.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    let tokens = aperture_core::store::tokens::list(&app.store, "default")
        .await
        .unwrap();
    assert!(
        tokens.iter().all(|t| t.actor_id != "bot"),
        "nothing was created"
    );
}

#[tokio::test]
async fn receipt_queries_are_checked() {
    let app = TestApp::spawn().await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    for (query, code) in [
        ("limit=0", "invalid_argument"),
        ("since=yesterday", "invalid_argument"),
        ("cursor=abc", "invalid_argument"),
        ("colour=red", "bad_request"),
    ] {
        let response = app.get(format!("/receipts?{query}")).as_(&reader).await;
        assert_eq!(response.json_or_null()["error"]["code"], code, "{response}");
        assert!(response.status().is_client_error(), "{response}");
    }
    let reply = app.get("/receipts/rcp_nope").as_(&reader).await;
    reply.expect_status(StatusCode::NOT_FOUND);
}

/// Tenant `t` and the server's signing key, for journals made directly over `store` (the
/// folder holds the key file while the journal is used).
pub(crate) async fn tenant_t_keys(
    store: &Store,
) -> (aperture_core::keys::KeyRing, tempfile::TempDir) {
    store::tenants::ensure(store, "t").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = aperture_core::keys::KeyRing::load(
        store,
        dir.path(),
        Some(crate::helpers::SIGNING_KEY),
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await
    .unwrap();
    (keys, dir)
}

/// Issue 4: "Commit decisions in groups so throughput does not collapse to one fsync per call",
/// and two writers (two nodes sharing the database) never fork a chain: 2 × 150 appends arrive
/// together at two journals over one store; every record gets its own position, the chain
/// verifies, and each journal needed fewer commits than records.
async fn grouped_commits_and_two_writers(store: &Store) {
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let one = Journal::new(store.clone(), keys.clone());
    let two = Journal::new(store.clone(), keys);
    let append = |j: &Journal, n: usize| {
        let j = j.clone();
        async move {
            let r = journal::receipt(
                ReceiptKind::Decision,
                Decision::Allow,
                ReasonCode::Ok,
                "t",
                &format!("actor-{n}"),
                "operator",
            );
            j.append(r, &journal::disclosures()).await.unwrap()
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..300 {
        tasks.spawn(append(if n % 2 == 0 { &one } else { &two }, n));
    }
    let mut seqs: Vec<u64> = tasks
        .join_all()
        .await
        .iter()
        .map(|r| r.seq.unwrap())
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=300).collect::<Vec<u64>>());
    let reports = journal::verify(store).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert!(reports[0].error.is_none(), "{reports:?}");
    assert_eq!(reports[0].verified, 300);
    for j in [&one, &two] {
        let stats = j.stats();
        let (records, commits) = (stats.records, stats.commits);
        assert_eq!(records, 150);
        assert!(stats.signing <= stats.busy, "{stats:?}");
        assert!(commits < records, "{commits} commits for {records} records");
    }
}
on_both_backends!(
    grouped_commits_and_two_writers_keep_one_chain,
    grouped_commits_and_two_writers
);

/// PostgreSQL: a small batch waits for the tasks that are ready before it commits: an append
/// whose task became ready just after the writer's (the caller behind it in the run queue)
/// goes into the same commit instead of the next. The test runtime is single-threaded, so the
/// order is fixed: `late` waits for a signal; `early` appends, which wakes the writer;
/// `signal` then wakes `late`, which is now queued behind the writer. The writer takes
/// `early`'s record alone and, without waiting for the ready tasks, would commit it alone.
///
/// SQLite (issue 29): `early` finds nothing queued and the writer idle, so it commits itself
/// at once, without waiting for anyone (a lone call's latency is what that saves); `late`
/// comes after it, in a commit of its own. Appends that queue are still gathered
/// (`journal_writer`: 200 appends at once share a few commits).
async fn small_batches_gather_what_is_ready(store: &Store) {
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys);
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let append = |wait: Option<std::sync::Arc<tokio::sync::Notify>>| {
        let journal = journal.clone();
        async move {
            if let Some(go) = wait {
                go.notified().await;
            }
            let r = journal::receipt(
                ReceiptKind::Decision,
                Decision::Allow,
                ReasonCode::Ok,
                "t",
                "agent",
                "operator",
            );
            journal.append(r, &journal::disclosures()).await.unwrap()
        }
    };
    let late = tokio::spawn(append(Some(go.clone())));
    let early = tokio::spawn(append(None));
    let signal = tokio::spawn(async move { go.notify_one() });
    signal.await.unwrap();
    let (early, late) = (early.await.unwrap(), late.await.unwrap());
    assert_eq!((early.seq, late.seq), (Some(1), Some(2)));
    let stats = journal.stats();
    assert_eq!(stats.records, 2);
    let commits = match store.kind() {
        aperture_core::store::DbKind::Postgres => 1,
        aperture_core::store::DbKind::Sqlite => 2,
    };
    assert_eq!(stats.commits, commits, "{stats:?}");
    if store.kind() == aperture_core::store::DbKind::Sqlite {
        assert!(stats.by_callers >= 1, "{stats:?}");
    }
}
on_both_backends!(
    small_batches_gather_what_is_ready_appends,
    small_batches_gather_what_is_ready
);

/// Appends a decision record for each generation of `decided_at` (`None`: depends on none),
/// all at once so that the writer groups them; checks that every record decided at `stale` is
/// refused with `Stale` and returns the positions of the others, in order.
pub(crate) async fn append_together(
    journal: &aperture_core::journal::Journal,
    decided_at: impl Iterator<Item = Option<i64>>,
    stale: i64,
) -> Vec<u64> {
    use aperture_core::journal::{self, JournalError};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let mut tasks = tokio::task::JoinSet::new();
    for decided_at in decided_at {
        let journal = journal.clone();
        tasks.spawn(async move {
            let decision = journal::receipt(
                ReceiptKind::Decision,
                Decision::Allow,
                ReasonCode::Ok,
                "t",
                "agent",
                "operator",
            );
            let outcome = journal
                .append_at(decision, &journal::disclosures(), decided_at)
                .await;
            (decided_at, outcome)
        });
    }
    let mut seqs = Vec::new();
    for (decided_at, outcome) in tasks.join_all().await {
        if decided_at == Some(stale) {
            assert!(matches!(outcome, Err(JournalError::Stale)), "{outcome:?}");
        } else {
            seqs.push(outcome.unwrap().seq.unwrap());
        }
    }
    seqs.sort_unstable();
    seqs
}

/// Issue 4 (speed): a `tools/call` decides on the call cache without reading the store's
/// counter, and its decision record is written only if the counter still stands where the
/// cache was filled (`Journal::append_at`). Checked here alone and in grouped commits: a record
/// decided at a generation that moved is refused with `Stale` and takes no position; the others
/// (current generation, or none to check) are written and the chain has no gap.
async fn decisions_on_moved_reads_are_not_recorded(store: &Store) {
    use aperture_core::journal::{self, Journal, JournalError};
    use aperture_core::store::cache;
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys);
    let decision = || {
        journal::receipt(
            ReceiptKind::Decision,
            Decision::Allow,
            ReasonCode::Ok,
            "t",
            "agent",
            "operator",
        )
    };
    cache::fresh(store).await.unwrap();
    let at = |store: &Store| {
        cache::assumed(store)
            .and_then(|f| f.unconfirmed())
            .expect("the cache holds a generation")
    };
    let old = at(store);
    // One record alone (one conditional INSERT): written while the counter stands.
    let first = journal
        .append_at(decision(), &journal::disclosures(), Some(old))
        .await
        .unwrap();
    assert_eq!(first.seq, Some(1));
    // Anything the cache follows changes: a token revoked (by another node, say).
    store::tokens::insert(
        store,
        store::tokens::NewToken {
            id: "tok_gen",
            tenant_id: "t",
            actor_id: "agent",
            name: None,
            scopes: &["agent_tool_exposure:run".to_owned()],
            secret_sha256: "gen",
            created_by: "operator",
            created_by_actor: "operator",
            expires_at: None,
            environments: &[],
        },
    )
    .await
    .unwrap();
    store::tokens::revoke(store, "t", "tok_gen").await.unwrap();
    let stale = journal
        .append_at(decision(), &journal::disclosures(), Some(old))
        .await;
    assert!(matches!(stale, Err(JournalError::Stale)), "{stale:?}");
    cache::fresh(store).await.unwrap();
    let new = at(store);
    assert!(new > old);
    // Many together (grouped commits, one read of the counter per batch): a third decided on
    // the old generation, a third on the new one, a third with nothing to check.
    let decided = (0..90).map(|n| [Some(old), Some(new), None][n % 3]);
    let seqs = append_together(&journal, decided, old).await;
    assert_eq!(seqs, (2..=61).collect::<Vec<u64>>());
    let stats = journal.stats();
    let (records, commits) = (stats.records, stats.commits);
    assert_eq!(records, 61);
    assert!(commits < records, "{commits} commits for {records} records");
    let reports = journal::verify(store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");

    // A change in flight (its transaction has moved the counter but not committed) when the
    // record is checked: the check waits for it and finds the counter moved, instead of
    // recording a decision the change has already made out of date.
    let mut change = store.begin_write().await.unwrap();
    sqlx::query("UPDATE api_tokens SET expires_at = $1 WHERE id = $2")
        .bind(store::now_ms() + 60_000)
        .bind("tok_gen")
        .execute(&mut *change)
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let journal = journal.clone();
        async move {
            journal
                .append_at(decision(), &journal::disclosures(), Some(new))
                .await
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    change.commit().await.unwrap();
    let outcome = waiting.await.unwrap();
    assert!(matches!(outcome, Err(JournalError::Stale)), "{outcome:?}");

    // Batches decided at one generation, which has moved since (with records that depend on
    // none): their one statement writes nothing, and the transaction that follows refuses
    // the stale records and writes the others, with no gap in the chain.
    let decided = (0..60).map(|n| [Some(new), None][n % 2]);
    let seqs = append_together(&journal, decided, new).await;
    assert_eq!(seqs, (62..=91).collect::<Vec<u64>>());
    let reports = journal::verify(store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
    assert_eq!(reports[0].verified, 91);
}
on_both_backends!(
    decisions_on_moved_reads_are_not_recorded_at_all,
    decisions_on_moved_reads_are_not_recorded
);

/// Issue 4 (speed): a batch of journal records is one statement outside a transaction, so
/// it must be all or nothing by itself: a taken position or a moved generation writes none
/// of its rows, the padding of its statement none either.
async fn one_statement_batches(store: &Store) {
    use aperture_core::store::journal::{BatchInsert, NewRecord, ONE_STATEMENT, insert_batch};
    let ids: Vec<String> = (0..=80).map(|n| format!("rcp_batch_{n}")).collect();
    let row = |seq: i64| NewRecord {
        tenant_id: "t",
        seq,
        receipt_id: &ids[usize::try_from(seq).unwrap()],
        kind: "decision",
        decision: "allow",
        reason: "ok",
        tool: None,
        session_id: None,
        actor_id: "agent",
        issued_at: 1,
        receipt: "{}",
        disclosures: "{}",
        record_hash: "h",
    };
    let count = || async {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM journal WHERE tenant_id = 't'")
            .fetch_one(store.pool())
            .await
            .unwrap();
        n
    };
    let kind = store.kind();
    let mut conn = store.pool().acquire().await.unwrap();
    // Five rows go in the eight-row statement: three rows of padding, not written.
    let rows: Vec<_> = (1..=5).map(row).collect();
    let done = insert_batch(&mut conn, kind, &rows, None).await.unwrap();
    assert_eq!(done, BatchInsert::Inserted);
    assert_eq!(count().await, 5);
    // The last row's position is taken: none of the four before it is written.
    let rows: Vec<_> = (6..=9).chain([5]).map(row).collect();
    let done = insert_batch(&mut conn, kind, &rows, None).await.unwrap();
    assert_eq!(done, BatchInsert::PositionTaken);
    assert_eq!(count().await, 5);
    // Decided at a generation the store has left: nothing; at the current one: all.
    let generation = store::journal::read_generation(&mut conn, kind)
        .await
        .unwrap();
    let rows: Vec<_> = (6..=9).map(row).collect();
    let done = insert_batch(&mut conn, kind, &rows, Some(generation - 1))
        .await
        .unwrap();
    assert_eq!(done, BatchInsert::GenerationMoved);
    assert_eq!(count().await, 5);
    let done = insert_batch(&mut conn, kind, &rows, Some(generation))
        .await
        .unwrap();
    assert_eq!(done, BatchInsert::Inserted);
    assert_eq!(count().await, 9);
    // The largest statement, full; one row more is refused and writes nothing.
    let rows: Vec<_> = (10..10 + ONE_STATEMENT as i64).map(row).collect();
    let done = insert_batch(&mut conn, kind, &rows, Some(generation))
        .await
        .unwrap();
    assert_eq!(done, BatchInsert::Inserted);
    assert_eq!(count().await, 9 + ONE_STATEMENT as i64);
    let rows: Vec<_> = (74..=80).map(row).collect();
    let more: Vec<_> = (10..=80).map(row).collect();
    assert!(insert_batch(&mut conn, kind, &more, None).await.is_err());
    assert_eq!(count().await, 9 + ONE_STATEMENT as i64);
    let done = insert_batch(&mut conn, kind, &rows, None).await.unwrap();
    assert_eq!(done, BatchInsert::Inserted);
    assert_eq!(count().await, 80);
}
on_both_backends!(
    one_statement_batches_are_all_or_nothing,
    one_statement_batches
);

/// Issue 22, item 1: every column a reader of receipts filters or counts on is checked against
/// the signed receipt. An intruder with write access to the database rewrites one column of one
/// row (a denial shown as allowed, a call moved to another actor, tool, session or time, a row
/// moved to another tenant); `journal verify` and the background verifier (the overview) name
/// the record and the column, and the overview's status is a failure.
async fn rewritten_columns_are_found_and_named(store: &Store) {
    use aperture_core::journal::watch::ChainWatch;
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys);
    for (i, decision) in [Decision::Allow, Decision::Deny, Decision::Park]
        .into_iter()
        .enumerate()
    {
        let mut r = journal::receipt(
            ReceiptKind::Decision,
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
        r.tool = Some(format!("mcp__files__tool_{i}"));
        r.session_id = Some(format!("ses_{i}"));
        journal.append(r, &journal::disclosures()).await.unwrap();
    }
    // Copied to journal_facets before anything is rewritten (so the copy is of the signed
    // values; what a rewrite of the copy does is the next test's).
    facets_copied(store, "t", 3).await;
    let clean = journal::verify(store).await.unwrap();
    assert!(clean.iter().all(|r| r.error.is_none()), "{clean:?}");

    let cases: [(&str, &str, String); 10] = [
        (
            "decision",
            "decision = 'allow'",
            "column `decision` says allow, the signed receipt says deny".into(),
        ),
        (
            "reason",
            "reason = 'ok'",
            "column `reason` says ok, the signed receipt says policy_denied".into(),
        ),
        (
            "tool",
            "tool = 'mcp__files__other'",
            "column `tool` says mcp__files__other, the signed receipt says mcp__files__tool_1"
                .into(),
        ),
        (
            "tool",
            "tool = NULL",
            "column `tool` says nothing, the signed receipt says mcp__files__tool_1".into(),
        ),
        (
            "session_id",
            "session_id = 'ses_other'",
            "column `session_id` says ses_other, the signed receipt says ses_1".into(),
        ),
        (
            "actor_id",
            "actor_id = 'someone-else'",
            "column `actor_id` says someone-else, the signed receipt says agent".into(),
        ),
        (
            "kind",
            "kind = 'admin'",
            "column `kind` says admin, the signed receipt says decision".into(),
        ),
        (
            "issued_at",
            "issued_at = issued_at + 3600000",
            String::new(),
        ),
        ("receipt_id", "receipt_id = 'rcp_forged'", String::new()),
        ("tenant_id", "tenant_id = 'u'", String::new()),
    ];
    for (column, set, message) in cases {
        // Verified strictly (`aperture journal verify`) and in the background (the overview).
        sqlx::query(&format!(
            "UPDATE journal SET {set} WHERE tenant_id = 't' AND seq = 2"
        ))
        .execute(store.pool())
        .await
        .unwrap();
        let reports = journal::verify(store).await.unwrap();
        let bad: Vec<_> = reports.iter().filter_map(|r| r.error.clone()).collect();
        assert!(!bad.is_empty(), "{column}: the rewrite passes verify");
        if column == "tenant_id" {
            // Moved to another tenant: the hole in `t` and the stray row in `u` are both found.
            assert_eq!(bad.len(), 2, "{reports:?}");
        } else {
            assert_eq!(bad.len(), 1, "{reports:?}");
            assert_eq!(bad[0].seq, 2, "{column}: {:?}", bad[0]);
            let text = bad[0].problem.to_string();
            assert!(
                text.starts_with(&format!("column `{column}` says ")),
                "{text}"
            );
            if !message.is_empty() {
                assert_eq!(text, message);
            }
            let watch = ChainWatch::new(store.clone());
            watch.pass(true).await.unwrap();
            let status = watch.status("t").unwrap();
            assert_eq!(status.verified, 1, "{column}");
            assert_eq!(status.first_bad, Some((2, text)), "{column}");
        }
        // Put back.
        let (receipt,): (String,) =
            sqlx::query_as("SELECT receipt FROM journal WHERE receipt LIKE '%\"seq\":2,%'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        let r: engine::receipt::Receipt = serde_json::from_str(&receipt).unwrap();
        sqlx::query(
            "UPDATE journal SET tenant_id = 't', receipt_id = $1, kind = 'decision', \
             decision = 'deny', reason = 'policy_denied', tool = $2, session_id = $3, \
             actor_id = 'agent', issued_at = $4 WHERE receipt = $5",
        )
        .bind(&r.receipt_id)
        .bind(&r.tool)
        .bind(&r.session_id)
        .bind(store::parse_rfc3339(&r.issued_at).unwrap())
        .bind(&receipt)
        .execute(store.pool())
        .await
        .unwrap();
        let again = journal::verify(store).await.unwrap();
        assert!(
            again.iter().all(|r| r.error.is_none()),
            "{column}: {again:?}"
        );
    }
}
on_both_backends!(
    rewritten_columns_are_found_and_named_by_verify,
    rewritten_columns_are_found_and_named
);

/// Waits until the journal's writer has copied tenant `tenant`'s first `records` records to
/// journal_facets (it does so off the call path, when appends pause).
pub(crate) async fn facets_copied(store: &Store, tenant: &str, records: i64) {
    for _ in 0..500 {
        let (n,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM journal_facets WHERE tenant_id = $1")
                .bind(tenant)
                .fetch_one(store.pool())
                .await
                .unwrap();
        if n >= records {
            assert_eq!(n, records, "more facets than records");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the writer did not copy {records} records of {tenant} to journal_facets");
}

/// A row of what journal and journal_facets have in common.
type FacetColumns = (
    String,
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    i64,
);

/// Issue 29: the receipts browser's filters and the overview's counts read journal_facets,
/// which the journal's writer fills off the call path (a call's commit writes the journal
/// table alone). Every record reaches journal_facets with the columns the journal has, and
/// every filtered read gives the same answer whether its records are copied yet or not: the
/// records after a tenant's copied prefix are read from the journal itself.
async fn facets_follow_the_journal(store: &Store) {
    use aperture_core::journal::{self, Journal};
    use aperture_core::store::journal::{
        ReceiptFilter, decision_counts, decision_page, index_facets, of_session, search,
        top_deny_reasons,
    };
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys);
    for n in 0..40_usize {
        let (decision, reason) = match n % 3 {
            0 if n % 2 == 0 => (Decision::Deny, ReasonCode::NotCallable),
            0 => (Decision::Deny, ReasonCode::PolicyDenied),
            _ => (Decision::Allow, ReasonCode::Ok),
        };
        let kind = if n % 7 == 6 {
            ReceiptKind::Execution
        } else {
            ReceiptKind::Decision
        };
        let mut r = journal::receipt(
            kind,
            decision,
            reason,
            "t",
            &format!("actor-{}", n % 4),
            "operator",
        );
        r.tool = (n % 5 != 4).then(|| format!("mcp__files__tool_{}", n % 5));
        r.session_id = Some(format!("ses_{}", n % 2));
        journal.append(r, &journal::disclosures()).await.unwrap();
    }
    facets_copied(store, "t", 40).await;
    let columns = |table: &str| {
        let sql = format!(
            "SELECT tenant_id, seq, kind, decision, reason, tool, session_id, actor_id, issued_at \
             FROM {table} ORDER BY tenant_id, seq"
        );
        async move {
            let rows: Vec<FacetColumns> =
                sqlx::query_as(&sql).fetch_all(store.pool()).await.unwrap();
            rows
        }
    };
    assert_eq!(columns("journal_facets").await, columns("journal").await);
    let seqs = |rows: Vec<store::journal::RecordRow>| rows.iter().map(|r| r.seq).collect();
    let reads = || async {
        let filter = |f: fn(&mut ReceiptFilter)| {
            let mut filter = ReceiptFilter::default();
            f(&mut filter);
            filter
        };
        let denied = filter(|f| f.decision = Some("deny".into()));
        let tool_before = filter(|f| {
            f.tool = Some("mcp__files__tool_2".into());
            f.before_seq = Some(30);
        });
        let actor_reason = filter(|f| {
            f.actor_id = Some("actor-0".into());
            f.reason = Some("ok".into());
        });
        let mut counts = decision_counts(store, "t", 0, 3_600_000, None)
            .await
            .unwrap();
        counts.sort();
        let everything = search(store, "t", &ReceiptFilter::default(), 100)
            .await
            .unwrap();
        let (first, last) = (
            store::parse_rfc3339(&everything.last().unwrap().columns.issued_at).unwrap(),
            store::parse_rfc3339(&everything[0].columns.issued_at).unwrap(),
        );
        let since = filter(|f| f.since = Some(0));
        let decisions: Vec<i64> = decision_page(store, "t", first, last + 1, 3, 9)
            .await
            .unwrap()
            .iter()
            .map(|(seq, _, _)| *seq)
            .collect();
        let pages: [Vec<i64>; 6] = [
            seqs(search(store, "t", &denied, 100).await.unwrap()),
            seqs(search(store, "t", &tool_before, 3).await.unwrap()),
            seqs(search(store, "t", &actor_reason, 100).await.unwrap()),
            seqs(search(store, "t", &since, 5).await.unwrap()),
            seqs(of_session(store, "t", "ses_1", 5, 7).await.unwrap()),
            decisions,
        ];
        (
            pages,
            counts,
            top_deny_reasons(store, "t", 0, 10, None).await.unwrap(),
            seqs(everything),
        )
    };
    let copied = reads().await;
    // The answers, worked out from the records as appended.
    let denied: Vec<i64> = (1..=40).rev().filter(|s| (s - 1) % 3 == 0).collect();
    assert_eq!(copied.0[0], denied);
    assert_eq!(copied.0[1], vec![28, 23, 18]);
    assert_eq!(
        copied.0[2],
        (1..=40)
            .rev()
            .filter(|s| (s - 1) % 4 == 0 && (s - 1) % 3 != 0)
            .collect::<Vec<i64>>()
    );
    assert_eq!(copied.0[3], vec![40, 39, 38, 37, 36]);
    assert_eq!(
        copied.0[4],
        (6..=40)
            .filter(|s| (s - 1) % 2 == 1)
            .take(7)
            .collect::<Vec<i64>>()
    );
    assert_eq!(
        copied.0[5],
        (4..=40)
            .filter(|s| (s - 1) % 7 != 6)
            .take(9)
            .collect::<Vec<i64>>()
    );
    let decided = (0..40).filter(|n| n % 7 != 6).count() as i64;
    assert_eq!(copied.1.iter().map(|(_, _, n)| n).sum::<i64>(), decided);
    assert_eq!(
        copied.2,
        vec![
            ("not_callable".to_owned(), 7),
            ("policy_denied".to_owned(), 7)
        ]
    );
    assert_eq!(copied.3, (1..=40).rev().collect::<Vec<i64>>());

    // The writer lags: only a prefix of the chain is copied, or nothing. Same answers.
    for keep in [25, 1, 0] {
        sqlx::query("DELETE FROM journal_facets WHERE tenant_id = 't' AND seq > $1")
            .bind(keep)
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(reads().await, copied, "with {keep} records copied");
    }
    // Copying starts after the copied prefix, in order, and catches up.
    let mut conn = store.pool().acquire().await.unwrap();
    assert_eq!(index_facets(&mut conn, "t", 15).await.unwrap(), 15);
    assert_eq!(reads().await, copied, "with 15 records copied");
    assert_eq!(index_facets(&mut conn, "t", 1_000).await.unwrap(), 25);
    assert_eq!(index_facets(&mut conn, "t", 1_000).await.unwrap(), 0);
    assert_eq!(columns("journal_facets").await, columns("journal").await);
    assert_eq!(reads().await, copied);
    drop(journal);
}
on_both_backends!(
    facets_follow_the_journal_off_the_call_path,
    facets_follow_the_journal
);

/// Issue 29 with issue 22, item 1: the copies in journal_facets are what the filters read, so
/// `journal verify` checks them like the journal's own columns. An intruder rewrites a copied
/// denial as allowed, deletes a record's copy (hiding it from filtered pages), or plants a
/// copy far ahead of the chain (so that records after it are neither copied nor read from the
/// journal): each is found and named.
async fn rewritten_facets_are_found_and_named(store: &Store) {
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys);
    let append = || async {
        let mut r = journal::receipt(
            ReceiptKind::Decision,
            Decision::Deny,
            ReasonCode::PolicyDenied,
            "t",
            "agent",
            "operator",
        );
        r.tool = Some("mcp__files__delete".into());
        journal.append(r, &journal::disclosures()).await.unwrap();
    };
    for _ in 0..3 {
        append().await;
    }
    facets_copied(store, "t", 3).await;
    let first_bad = || async {
        let reports = journal::verify(store).await.unwrap();
        let bad: Vec<_> = reports.iter().filter_map(|r| r.error.clone()).collect();
        assert!(bad.len() <= 1, "{reports:?}");
        bad.first().map(|e| (e.seq, e.problem.to_string()))
    };
    assert_eq!(first_bad().await, None);
    let put_back = || async {
        sqlx::query("DELETE FROM journal_facets WHERE tenant_id = 't'")
            .execute(store.pool())
            .await
            .unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        store::journal::index_facets(&mut conn, "t", 1_000)
            .await
            .unwrap();
    };
    sqlx::query("UPDATE journal_facets SET decision = 'allow' WHERE tenant_id = 't' AND seq = 2")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(
        first_bad().await,
        Some((
            2,
            "column `journal_facets.decision` says allow, the signed receipt says deny".into()
        ))
    );
    put_back().await;
    assert_eq!(first_bad().await, None);
    // A copied value taken away, and one put where the record has none: the store's NULL is
    // nothing to compare with, yet no less a difference.
    sqlx::query("UPDATE journal_facets SET tool = NULL WHERE tenant_id = 't' AND seq = 2")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(
        first_bad().await,
        Some((
            2,
            "column `journal_facets.tool` says nothing, the signed receipt says \
             mcp__files__delete"
                .into()
        ))
    );
    put_back().await;
    sqlx::query(
        "UPDATE journal_facets SET session_id = 'planted' WHERE tenant_id = 't' AND seq = 3",
    )
    .execute(store.pool())
    .await
    .unwrap();
    assert_eq!(
        first_bad().await,
        Some((
            3,
            "column `journal_facets.session_id` says planted, the signed receipt says nothing"
                .into()
        ))
    );
    put_back().await;
    assert_eq!(first_bad().await, None);
    sqlx::query("DELETE FROM journal_facets WHERE tenant_id = 't' AND seq = 2")
        .execute(store.pool())
        .await
        .unwrap();
    let (seq, text) = first_bad().await.unwrap();
    assert_eq!(seq, 2);
    assert!(text.contains("missing from journal_facets"), "{text}");
    put_back().await;
    sqlx::query(
        "INSERT INTO journal_facets (tenant_id, seq, kind, decision, reason, tool, session_id, \
         actor_id, issued_at) VALUES ('t', 1000, 'decision', 'allow', 'ok', NULL, NULL, 'x', 0)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    append().await;
    let (seq, text) = first_bad().await.unwrap();
    assert_eq!(seq, 4);
    assert!(text.contains("missing from journal_facets"), "{text}");
}
on_both_backends!(
    rewritten_facets_are_found_and_named_by_verify,
    rewritten_facets_are_found_and_named
);

/// Issue 45, item 11: the overview counts from journal_facets, so rows an intruder adds there
/// without a record (denials nobody signed, after the head or for a tenant with no journal at
/// all) show in it as if they had happened. `journal verify` (the command and the background
/// verifier behind the overview's status) names them; the honest journal before passes.
async fn facet_rows_without_a_record_fail_verify(backend: Db) {
    use aperture_core::journal::watch::ChainWatch;
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let Some(db) = crate::helpers::TestDb::new(backend).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let (keys, _dir) = tenant_t_keys(&store).await;
    let journal = Journal::new(store.clone(), keys);
    for _ in 0..3 {
        journal
            .append(
                journal::receipt(
                    ReceiptKind::Decision,
                    Decision::Allow,
                    ReasonCode::Ok,
                    "t",
                    "agent",
                    "operator",
                ),
                &journal::disclosures(),
            )
            .await
            .unwrap();
    }
    facets_copied(&store, "t", 3).await;
    let out = crate::cli::aperture(&db, &["journal", "verify"], None);
    assert!(out.status.success(), "{}", crate::cli::text(&out));
    let watch = ChainWatch::new(store.clone());
    watch.pass(true).await.unwrap();
    assert_eq!(watch.status("t").unwrap().first_bad, None);

    // Denials nobody signed: two after the head, one far beyond it, two of a tenant with no
    // journal.
    let now = store::now_ms();
    for (tenant, seq) in [("t", 4), ("t", 5), ("t", 1000), ("ghost", 1), ("ghost", 2)] {
        sqlx::query(
            "INSERT INTO journal_facets (tenant_id, seq, kind, decision, reason, tool, \
             session_id, actor_id, issued_at) VALUES ($1, $2, 'decision', 'deny', \
             'policy_denied', 'mcp__files__delete', NULL, 'agent', $3)",
        )
        .bind(tenant)
        .bind(seq)
        .bind(now)
        .execute(store.pool())
        .await
        .unwrap();
    }
    // What the overview would show.
    let denials = store::journal::top_deny_reasons(&store, "t", now - 60_000, 5, None)
        .await
        .unwrap();
    assert_eq!(denials, vec![("policy_denied".to_owned(), 3)]);

    let reports = journal::verify(&store).await.unwrap();
    let found: Vec<_> = reports
        .iter()
        .map(|r| {
            (
                r.tenant_id.as_str(),
                r.verified,
                r.error.as_ref().map(ToString::to_string),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (
                "ghost",
                0,
                Some(
                    "journal record 1: journal_facets has rows for records 1 and 2 (the tenant \
                     has no journal), which the journal does not have"
                        .to_owned()
                )
            ),
            (
                "t",
                3,
                Some(
                    "journal record 4: journal_facets has rows for records 4, 5 and 1000, which \
                     the journal does not have"
                        .to_owned()
                )
            ),
        ]
    );
    let out = crate::cli::aperture(&db, &["journal", "verify"], None);
    assert!(!out.status.success(), "{}", crate::cli::text(&out));
    let said = crate::cli::text(&out);
    assert!(
        said.contains(
            "tenant t: verified up to record 3; record 4: journal_facets has rows for records \
             4, 5 and 1000, which the journal does not have"
        ),
        "{said}"
    );
    assert!(
        said.contains("tenant ghost: verified up to record 0; record 1: journal_facets has rows"),
        "{said}"
    );
    // The overview's status says so too.
    watch.pass(true).await.unwrap();
    let (seq, problem) = watch.status("t").unwrap().first_bad.expect("found");
    assert_eq!(seq, 4);
    assert!(problem.contains("records 4, 5 and 1000"), "{problem}");
    let (seq, problem) = watch.status("ghost").unwrap().first_bad.expect("found");
    assert_eq!(seq, 1);
    assert!(problem.contains("(the tenant has no journal)"), "{problem}");
    store.close().await;
}

#[tokio::test]
async fn facet_rows_without_a_record_fail_verify_on_sqlite() {
    facet_rows_without_a_record_fail_verify(Db::Sqlite).await;
}

#[tokio::test]
async fn facet_rows_without_a_record_fail_verify_on_postgres() {
    facet_rows_without_a_record_fail_verify(Db::Postgres).await;
}

/// Issue 22, item 9: purging disclosures older than a cutoff keeps receipts and digests (verify
/// still passes, the purge itself is journaled); disclosures removed without a journaled purge,
/// or newer than its cutoff, fail verify.
async fn purged_disclosures_still_verify(store: &Store) {
    use aperture_core::journal::{self, Journal};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys);
    let append = || {
        let journal = journal.clone();
        async move {
            let mut d = journal::disclosures();
            d.insert_extra("arguments_note", serde_json::json!("secret-ish"))
                .unwrap();
            journal
                .append(
                    journal::receipt(
                        ReceiptKind::Decision,
                        Decision::Allow,
                        ReasonCode::Ok,
                        "t",
                        "a",
                        "operator",
                    ),
                    &d,
                )
                .await
                .unwrap()
        }
    };
    for _ in 0..4 {
        append().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let cutoff = store::now_ms();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newer = append().await;
    let purged =
        journal::purge_disclosures(store, &journal, "t", &journal::Author::operator(), cutoff)
            .await
            .unwrap();
    assert_eq!(purged, 4);
    let (markers,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM journal WHERE tenant_id = 't' AND disclosures = $1")
            .bind(journal::PURGED)
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(markers, 4);
    let reports = journal::verify(store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
    // The purge is a record of its own.
    let (actions,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM journal WHERE tenant_id = 't' AND kind = 'admin' AND disclosures LIKE '%journal.purge_disclosures%'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(actions, 1);

    // Removing the disclosures of a record newer than the cutoff is found.
    sqlx::query("UPDATE journal SET disclosures = $1 WHERE tenant_id = 't' AND seq = $2")
        .bind(journal::PURGED)
        .bind(i64::try_from(newer.seq.unwrap()).unwrap())
        .execute(store.pool())
        .await
        .unwrap();
    let reports = journal::verify(store).await.unwrap();
    let e = reports[0].error.clone().expect("found");
    assert_eq!(e.seq, newer.seq.unwrap());
    assert!(
        e.problem
            .to_string()
            .contains("removed without a journaled purge"),
        "{e}"
    );
    // Without the purge record (its disclosures rewritten), none of the purges stand.
    sqlx::query(
        "UPDATE journal SET disclosures = replace(disclosures, 'cutoff_ms', 'cutoff_mz') WHERE tenant_id = 't' AND disclosures LIKE '%journal.purge_disclosures%'",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let reports = journal::verify(store).await.unwrap();
    assert_eq!(reports[0].error.clone().expect("found").seq, 1);
}
on_both_backends!(
    purged_disclosures_still_verify_on,
    purged_disclosures_still_verify
);

/// Issue 22: the overview's background verifier also sees a cut tail, against the latest
/// stored checkpoint (a chain alone cannot).
async fn the_background_verifier_sees_a_cut_tail(store: &Store) {
    use aperture_core::journal::watch::ChainWatch;
    use aperture_core::journal::{self, Journal, checkpoints::Checkpointer};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, _dir) = tenant_t_keys(store).await;
    let journal = Journal::new(store.clone(), keys.clone());
    for _ in 0..6 {
        journal
            .append(
                journal::receipt(
                    ReceiptKind::Decision,
                    Decision::Allow,
                    ReasonCode::Ok,
                    "t",
                    "a",
                    "operator",
                ),
                &journal::disclosures(),
            )
            .await
            .unwrap();
    }
    Checkpointer::new(
        store.clone(),
        keys,
        "h".into(),
        None,
        std::time::Duration::from_secs(60),
    )
    .checkpoint("t")
    .await
    .unwrap()
    .unwrap();
    let watch = ChainWatch::new(store.clone());
    watch.pass(true).await.unwrap();
    assert_eq!(watch.status("t").unwrap().first_bad, None);
    // The records and their copies in journal_facets (copies left behind are found on their
    // own: `facet_rows_without_a_record_fail_verify`).
    for table in ["journal", "journal_facets"] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE tenant_id = 't' AND seq > 4"
        ))
        .execute(store.pool())
        .await
        .unwrap();
    }
    watch.pass(true).await.unwrap();
    let status = watch.status("t").unwrap();
    assert_eq!(status.verified, 4);
    let (seq, problem) = status.first_bad.expect("the cut is found");
    assert_eq!(seq, 5);
    assert!(
        problem.contains("signed checkpoint of 6 records"),
        "{problem}"
    );
}
on_both_backends!(
    the_background_verifier_sees_a_cut_tail_on,
    the_background_verifier_sees_a_cut_tail
);

/// Issue 22: the checkpointer grows a tree by the leaves its node's journal kept (not read
/// back), by the journal's stored records where another node wrote them, and the checkpoints
/// it signs are those of the stored journal: `journal verify`'s checkpoint check recomputes
/// every root from the receipts, and the tiles the proofs read hold the same tree.
async fn checkpoints_grown_from_kept_leaves_are_the_stored_journal_s(store: &Store) {
    use aperture_core::journal::checkpoints::{self, Checkpointer};
    use aperture_core::journal::{self, Journal, audit};
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let (keys, dir) = tenant_t_keys(store).await;
    store::tenants::ensure(store, "u").await.unwrap();
    let append = |journal: Journal, tenant: &'static str, n: usize| async move {
        for _ in 0..n {
            journal
                .append(
                    journal::receipt(
                        ReceiptKind::Decision,
                        Decision::Allow,
                        ReasonCode::Ok,
                        tenant,
                        "a",
                        "operator",
                    ),
                    &journal::disclosures(),
                )
                .await
                .unwrap();
        }
    };
    let sink = dir.path().join("checkpoints");
    let ours = Journal::new(store.clone(), keys.clone());
    let checkpointer = Checkpointer::new(
        store.clone(),
        keys.clone(),
        "h".into(),
        Some(sink.clone()),
        std::time::Duration::from_secs(60),
    );
    checkpointer.attach(&ours);
    append(ours.clone(), "t", 5).await;
    append(ours.clone(), "u", 3).await;
    assert_eq!(ours.tenants_with_leaves(), ["t", "u"]);
    let size =
        |c: Option<aperture_core::store::checkpoints::StoredCheckpoint>| c.unwrap().tree_size;
    assert_eq!(size(checkpointer.checkpoint("t").await.unwrap()), 5);
    assert_eq!(size(checkpointer.checkpoint("u").await.unwrap()), 3);
    // Taken, not copied.
    assert!(ours.tenants_with_leaves().is_empty());
    // Another node (a journal the checkpointer does not see) writes 6–9, ours 10–12.
    let other = Journal::new(store.clone(), keys.clone());
    append(other, "t", 4).await;
    append(ours.clone(), "t", 3).await;
    assert_eq!(size(checkpointer.checkpoint("t").await.unwrap()), 12);
    // Nothing new: the same checkpoint, none signed again.
    assert_eq!(size(checkpointer.checkpoint("t").await.unwrap()), 12);
    // Another checkpointer (another node) grows it meanwhile; ours goes on from there.
    append(ours.clone(), "t", 2).await;
    let elsewhere = Checkpointer::new(
        store.clone(),
        keys.clone(),
        "h".into(),
        None,
        std::time::Duration::from_secs(60),
    );
    assert_eq!(size(elsewhere.checkpoint("t").await.unwrap()), 14);
    append(ours.clone(), "t", 1).await;
    assert_eq!(size(checkpointer.checkpoint("t").await.unwrap()), 15);
    assert!(ours.tenants_with_leaves().is_empty());

    let published = aperture_core::keys::published(store).await.unwrap();
    let reports = audit::verify_checkpoints(store, &published, Some(&sink), &[], 0, &[])
        .await
        .unwrap();
    for report in &reports {
        assert!(report.problems.is_empty(), "{report:?}");
    }
    let t = reports.iter().find(|r| r.tenant_id == "t").unwrap();
    assert_eq!(t.largest, 15);
    // Every checkpoint of t matched: 5, 12, 14, 15 in the database, and 5, 12, 15 (ours) in
    // the sink.
    assert_eq!(t.matched, 4 + 3);
    let sunk = std::fs::read_to_string(sink.join("t.checkpoints")).unwrap();
    let sizes: Vec<u64> = checkpoints::read_sink(&sunk)
        .into_iter()
        .map(|n| {
            engine::note::Checkpoint::parse(&n.unwrap().text)
                .unwrap()
                .size
        })
        .collect();
    assert_eq!(sizes, [5, 12, 15]);
    // An inclusion proof read from the stored tiles leads to the signed root.
    let note = store::checkpoints::latest(store, "t")
        .await
        .unwrap()
        .unwrap();
    let checkpoint =
        engine::note::Checkpoint::parse(&engine::note::Note::parse(&note.note).unwrap().text)
            .unwrap();
    let leaf = store::checkpoints::leaves(store, "t", 6, 1).await.unwrap();
    let proof = aperture_core::journal::tree::inclusion(store, "t", 6, 15)
        .await
        .unwrap();
    engine::merkle::verify_inclusion(
        &engine::merkle::leaf_hash(leaf[0].1.as_bytes()),
        6,
        15,
        &proof,
        &checkpoint.root,
    )
    .unwrap();
}
on_both_backends!(
    checkpoints_grown_from_kept_leaves_are_the_stored_journal_s_on,
    checkpoints_grown_from_kept_leaves_are_the_stored_journal_s
);
