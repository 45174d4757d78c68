//! Issue 22: evidence anyone can check. Signed checkpoints of each tenant's journal tree, the
//! routes that serve them and their proofs, a witness that cosigns them and refuses a rewritten
//! history, and `journal verify` against checkpoints kept outside the database.

use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use engine::merkle;
use engine::note::{self, Checkpoint, Note, VerifierKey};
use engine::receipt::{
    Decision, ReasonCode, Receipt, Signer, receipt_canonical_bytes, receipt_hash, sign_receipt,
};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, SIGNING_KEY, TestApp};

/// Appends `n` admin records to `tenant`'s journal, many at a time.
async fn fill(app: &TestApp, tenant: &str, n: usize) {
    fill_with(app, &app.journal, tenant, n).await;
}

/// [`fill`] through a journal of its own: a new writer reads the head from the database (as a
/// restarted node does), so after records were deleted it hands their positions out again.
async fn fill_anew(app: &TestApp, tenant: &str, n: usize) {
    let keys = aperture_core::keys::KeyRing::load(
        &app.store,
        &app.data_dir,
        Some(SIGNING_KEY),
        &aperture_core::keys::default_published_file(&app.data_dir),
    )
    .await
    .unwrap();
    let journal = aperture_core::journal::Journal::new(app.store.clone(), keys);
    fill_with(app, &journal, tenant, n).await;
}

async fn fill_with(
    app: &TestApp,
    journal: &aperture_core::journal::Journal,
    tenant: &str,
    n: usize,
) {
    aperture_core::store::tenants::ensure(&app.store, tenant)
        .await
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let journal = journal.clone();
        let tenant = tenant.to_owned();
        tasks.spawn(async move {
            journal
                .admin(
                    &tenant,
                    &aperture_core::journal::Author::new("ops", "operator"),
                    Decision::Allow,
                    ReasonCode::Ok,
                    "test.fill",
                    json!({"i": i}),
                )
                .await
                .unwrap();
        });
    }
    tasks.join_all().await;
}

fn log_key(origin: &str) -> VerifierKey {
    let seed: [u8; 32] = hex::decode(SIGNING_KEY).unwrap().try_into().unwrap();
    VerifierKey::new(
        origin,
        note::ED25519,
        Signer::from_seed(&seed).verifying_key(),
    )
    .unwrap()
}

/// The leaf hash of record `seq`, from the receipt itself.
async fn leaf(app: &TestApp, tenant: &str, seq: i64) -> merkle::Hash {
    let (text,): (String,) =
        sqlx::query_as("SELECT receipt FROM journal WHERE tenant_id = $1 AND seq = $2")
            .bind(tenant)
            .bind(seq)
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    let r: Receipt = serde_json::from_str(&text).unwrap();
    merkle::leaf_hash(&receipt_canonical_bytes(&r))
}

fn hashes(v: &Value) -> Vec<merkle::Hash> {
    v["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            STANDARD
                .decode(h.as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap()
        })
        .collect()
}

async fn get_json(app: &TestApp, token: &str, path: &str) -> (StatusCode, Value) {
    let response = app.get(path).as_(token).await;
    let status = response.status();
    (status, response.json_or_null())
}

/// Checkpoints are signed notes of the tree's root; the latest is served as text to readers
/// and witnesses of its tenant only; inclusion and consistency proofs verify against them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_and_proofs_verify_against_the_journal() {
    let app = TestApp::spawn().await;
    fill(&app, "default", 600).await;
    let first = app
        .checkpoints
        .checkpoint("default")
        .await
        .unwrap()
        .expect("a checkpoint");
    let head: (i64,) = sqlx::query_as("SELECT MAX(seq) FROM journal WHERE tenant_id = 'default'")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(
        first.tree_size, head.0,
        "the checkpoint covers every record"
    );
    let note = Note::parse(&first.note).unwrap();
    let c1 = Checkpoint::parse(&note.text).unwrap();
    assert!(c1.origin.ends_with("/aperture/default"), "{}", c1.origin);
    note.verify(&log_key(&c1.origin)).unwrap();
    // Asking again without new records makes no new one.
    let again = app
        .checkpoints
        .checkpoint("default")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, first);
    // The sink outside the database holds it too.
    let sink =
        std::fs::read_to_string(app.data_dir.join("checkpoints/default.checkpoints")).unwrap();
    assert_eq!(sink, first.note);

    // The latest checkpoint at the well-known URL.
    let latest = || app.get_raw("/.well-known/aperture/checkpoints/default");
    let response = latest().await;
    response.expect_status(StatusCode::UNAUTHORIZED);
    let witness = app.token("default", "w", &[scope::WITNESS]).await;
    let reader = app.token("default", "r", &[scope::READ]).await;
    let runner = app.token("default", "x", &[scope::RUN]).await;
    for token in [&witness, &reader] {
        let response = latest().as_(token).await.expect_status(StatusCode::OK);
        assert!(response.header("content-type").starts_with("text/plain"));
        assert_eq!(response.text(), first.note);
    }
    let response = latest().as_(&runner).await;
    response.expect_status(StatusCode::FORBIDDEN);
    // Another tenant's token, and a tenant that does not exist: the same answer.
    let other = app.token("other", "w", &[scope::WITNESS]).await;
    let foreign = latest().as_(&other).await;
    let unknown = app.get_raw("/.well-known/aperture/checkpoints/nobody");
    let unknown = unknown.as_(&witness).await;
    let foreign = foreign.expect_status(StatusCode::NOT_FOUND);
    let unknown = unknown.expect_status(StatusCode::NOT_FOUND);
    assert_eq!(foreign.text(), unknown.text());

    // Inclusion proofs of records across tiles verify against the checkpoint's root.
    let size = u64::try_from(first.tree_size).unwrap();
    for seq in [1, 2, 255, 256, 257, 300, 512, first.tree_size] {
        let (status, proof) = get_json(
            &app,
            &witness,
            &format!("/journal/proofs/inclusion?seq={seq}&tree_size={size}"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{proof}");
        assert_eq!(proof["leaf_index"], json!(seq - 1));
        let leaf_hash = leaf(&app, "default", seq).await;
        merkle::verify_inclusion(
            &leaf_hash,
            u64::try_from(seq - 1).unwrap(),
            size,
            &hashes(&proof),
            &c1.root,
        )
        .unwrap_or_else(|e| panic!("record {seq}: {e}"));
        // Another record's leaf does not verify with it.
        let other = leaf(&app, "default", if seq == 1 { 2 } else { 1 }).await;
        assert!(
            merkle::verify_inclusion(
                &other,
                u64::try_from(seq - 1).unwrap(),
                size,
                &hashes(&proof),
                &c1.root
            )
            .is_err()
        );
    }

    // The tree grows; a consistency proof links the two checkpoints.
    fill(&app, "default", 300).await;
    let second = app
        .checkpoints
        .checkpoint("default")
        .await
        .unwrap()
        .unwrap();
    assert!(second.tree_size > first.tree_size);
    let c2 = Checkpoint::parse(&Note::parse(&second.note).unwrap().text).unwrap();
    let (status, proof) = get_json(
        &app,
        &witness,
        &format!(
            "/journal/proofs/consistency?from={}&to={}",
            first.tree_size, second.tree_size
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{proof}");
    merkle::verify_consistency(c1.size, c2.size, &c1.root, &c2.root, &hashes(&proof)).unwrap();
    let (status, listed) = get_json(&app, &reader, "/journal/checkpoints").await;
    assert_eq!(status, StatusCode::OK);
    let sizes: Vec<i64> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tree_size"].as_i64().unwrap())
        .collect();
    assert_eq!(sizes, vec![second.tree_size, first.tree_size]);

    // Bad input is a 4xx naming the field; beyond the tree too.
    for (path, field) in [
        ("/journal/proofs/inclusion?seq=0&tree_size=5", "seq"),
        ("/journal/proofs/inclusion?seq=9&tree_size=5", "seq"),
        ("/journal/proofs/consistency?from=5", "to"),
        ("/journal/proofs/consistency?from=6&to=5", "from"),
    ] {
        let response = app.get(path).as_(&witness).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        response.expect_field_error(field);
    }
    let (status, _) = get_json(
        &app,
        &witness,
        &format!(
            "/journal/proofs/inclusion?seq=1&tree_size={}",
            second.tree_size + 10
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let reply = app.get("/journal/proofs/inclusion?seq=x");
    let reply = reply.as_(&witness).await;
    reply.expect_status(StatusCode::BAD_REQUEST);
    // `:witness` reads checkpoints and proofs and nothing else.
    let (status, _) = get_json(&app, &witness, "/receipts").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = get_json(&app, &witness, "/journal/witnesses").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

fn aperture(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aperture"))
        .args(args)
        .env_remove("APERTURE_DATABASE_URL")
        .env_remove("APERTURE_DATA_DIR")
        .env_remove("APERTURE_SIGNING_KEY")
        .env("APERTURE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run aperture")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `aperture journal verify` against the test app's database and sink.
fn journal_verify(app: &TestApp, db_url: &str, extra: &[&str]) -> Output {
    let data = app.data_dir.to_str().unwrap().to_owned();
    let mut args = vec![
        "--database-url",
        db_url,
        "--data-dir",
        data.as_str(),
        "journal",
        "verify",
    ];
    args.extend_from_slice(extra);
    aperture(&args)
}

/// A witness follows the log over several checkpoints, cosigning each; its cosignatures are
/// served with the checkpoint and satisfy `journal verify --witness`. Then the journal's tail
/// is cut and new records take the old positions: `journal verify` fails against the
/// checkpoints in the sink, and when the intruder also rebuilds the tree and the stored
/// checkpoints, the witness refuses the new history, keeps its state and exits non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_cosigns_a_consistent_log_and_refuses_a_rewritten_one() {
    let app = TestApp::spawn().await;
    let db_url: String = app.store_url();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(
        &token_file,
        app.token("default", "witness", &[scope::WITNESS]).await,
    )
    .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let key_file = dir.path().join("witness.key");
    let state = dir.path().join("witness.json");
    let witness = |app: &TestApp| {
        aperture(&[
            "witness",
            "--url",
            &app.address,
            "--tenant",
            "default",
            "--token-file",
            token_file.to_str().unwrap(),
            "--key-file",
            key_file.to_str().unwrap(),
            "--name",
            "witness.example/w1",
            "--state",
            state.to_str().unwrap(),
            "--once",
        ])
    };

    fill(&app, "default", 40).await;
    app.checkpoints.checkpoint("default").await.unwrap();
    // The first run makes the key and pins the log key; the gateway refuses the cosignature of
    // a witness nobody registered.
    let out = witness(&app);
    assert!(!out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(text.contains("not a registered witness"), "{text}");
    let vkey = text
        .lines()
        .find_map(|l| l.strip_prefix("witness key: "))
        .and_then(|l| l.split(' ').next())
        .expect("the witness prints its key")
        .to_owned();
    let reply = app.post("/journal/witnesses");
    let reply = reply
        .as_(&admin)
        .json(json!({"name": "witness.example/w1", "key": vkey}))
        .await;
    reply.expect_status(StatusCode::CREATED);
    // A key whose name is not the witness's, a note key, garbage: refused by field.
    for bad in [
        json!({"name": "other", "key": vkey}),
        json!({"name": "w2", "key": log_key("w2").to_string()}),
        json!({"name": "w3", "key": "w3+00000000+AAAA"}),
    ] {
        let refused = app.post("/journal/witnesses").as_(&admin).json(&bad).await;
        refused.expect_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument");
    }

    // Rounds over a growing log: each cosigned, the gateway serves the cosignatures.
    for _ in 0..3 {
        fill(&app, "default", 25).await;
        let made = app
            .checkpoints
            .checkpoint("default")
            .await
            .unwrap()
            .unwrap();
        let out = witness(&app);
        assert!(out.status.success(), "{}", said(&out));
        assert!(
            said(&out).contains(&format!(
                "cosigned the checkpoint of {} records",
                made.tree_size
            )),
            "{}",
            said(&out)
        );
    }
    let served = app.get_raw("/.well-known/aperture/checkpoints/default");
    let served = served.as_(&admin).await.text();
    let served = Note::parse(&served).unwrap();
    let cosigner = VerifierKey::parse(&vkey).unwrap();
    served.verify_cosignature(&cosigner).unwrap();
    let out = journal_verify(&app, &db_url, &["--witness", &vkey, "--quorum", "1"]);
    assert!(out.status.success(), "{}", said(&out));
    // A witness that never cosigned does not make the quorum.
    let stranger = VerifierKey::new(
        "witness.example/w9",
        note::COSIGNATURE_V1,
        Signer::from_seed(&[9; 32]).verifying_key(),
    )
    .unwrap()
    .to_string();
    let out = journal_verify(&app, &db_url, &["--witness", &stranger]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("cosigned by 0 of the given witnesses"),
        "{}",
        said(&out)
    );

    // The intruder cuts the newest 10 records and lets new ones take their positions.
    let (head,): (i64,) =
        sqlx::query_as("SELECT MAX(seq) FROM journal WHERE tenant_id = 'default'")
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    sqlx::query("DELETE FROM journal WHERE tenant_id = 'default' AND seq > $1")
        .bind(head - 10)
        .execute(app.store.pool())
        .await
        .unwrap();
    fill_anew(&app, "default", 12).await;
    let (reissued,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM journal WHERE tenant_id = 'default' AND seq > $1 AND seq <= $2",
    )
    .bind(head - 10)
    .bind(head)
    .fetch_one(app.store.pool())
    .await
    .unwrap();
    assert_eq!(reissued, 10, "the deleted positions were handed out again");
    let out = journal_verify(&app, &db_url, &[]);
    assert!(!out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(
        text.contains(&format!("checkpoint of size {head} (sink): the journal's first {head} records do not hash to its root")),
        "{text}"
    );
    assert!(
        text.contains(&format!("checkpoint of size {head} (database)")),
        "{text}"
    );

    // … and rebuilds the tree and the stored checkpoints from the rewritten journal.
    for table in [
        "journal_tiles",
        "journal_logs",
        "journal_cosignatures",
        "journal_checkpoints",
    ] {
        sqlx::query(&format!("DELETE FROM {table} WHERE tenant_id = 'default'"))
            .execute(app.store.pool())
            .await
            .unwrap();
    }
    app.checkpoints
        .checkpoint("default")
        .await
        .unwrap()
        .unwrap();
    let before = std::fs::read_to_string(&state).unwrap();
    let out = witness(&app);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("refused"), "{}", said(&out));
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        before,
        "the state is kept"
    );
    // The sink still holds the checkpoints the rewrite contradicts.
    let out = journal_verify(&app, &db_url, &[]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("(sink): the journal's first"),
        "{}",
        said(&out)
    );
}

/// The key rotation case: after `aperture keys rotate` the first checkpoint is signed by the
/// old key too, and the next only by the new one.
#[tokio::test]
async fn after_a_rotation_one_checkpoint_is_signed_by_both_keys() {
    use aperture_core::journal::checkpoints::{Checkpointer, verifier_key};
    let db = crate::helpers::TestDb::new(crate::helpers::Db::Sqlite)
        .await
        .unwrap();
    let store = aperture_core::store::Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    aperture_core::store::tenants::ensure(&store, "t")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let append = |keys: &aperture_core::keys::KeyRing, n: usize| {
        let journal = aperture_core::journal::Journal::new(store.clone(), keys.clone());
        async move {
            for _ in 0..n {
                journal
                    .admin(
                        "t",
                        &aperture_core::journal::Author::new("ops", "operator"),
                        Decision::Allow,
                        ReasonCode::Ok,
                        "x",
                        json!({}),
                    )
                    .await
                    .unwrap();
            }
        }
    };
    let old = aperture_core::keys::KeyRing::load(
        &store,
        dir.path(),
        None,
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await
    .unwrap();
    append(&old, 3).await;
    let make = |keys: &aperture_core::keys::KeyRing| {
        Checkpointer::new(
            store.clone(),
            keys.clone(),
            "h".into(),
            None,
            std::time::Duration::from_secs(60),
        )
    };
    make(&old).checkpoint("t").await.unwrap().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3));
    aperture_core::keys::KeyRing::rotate(
        &store,
        dir.path(),
        None,
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await
    .unwrap();
    let new = aperture_core::keys::KeyRing::load(
        &store,
        dir.path(),
        None,
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await
    .unwrap();
    assert_eq!(
        new.previous().map(|s| s.key_id().to_owned()),
        Some(old.signer().key_id().to_owned())
    );
    let by = |note: &str, keys: &aperture_core::keys::KeyRing| {
        let n = Note::parse(note).unwrap();
        let origin = Checkpoint::parse(&n.text).unwrap().origin;
        n.verify(&verifier_key(&origin, keys.signer()).unwrap())
            .is_ok()
    };
    append(&new, 2).await;
    let both = make(&new).checkpoint("t").await.unwrap().unwrap();
    assert!(
        by(&both.note, &new) && by(&both.note, &old),
        "{}",
        both.note
    );
    append(&new, 2).await;
    let only_new = make(&new).checkpoint("t").await.unwrap().unwrap();
    assert!(by(&only_new.note, &new) && !by(&only_new.note, &old));
    store.close().await;
}

/// A key the intruder added to the database signs a rewritten record: the chain verifies on
/// the stored keys, but the checkpoint in the sink (made before) no longer matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigned_record_breaks_the_checkpoint_in_the_sink() {
    let app = TestApp::spawn().await;
    let db_url = app.store_url();
    fill(&app, "default", 20).await;
    app.checkpoints.checkpoint("default").await.unwrap();
    let intruder = Signer::from_seed(&[66; 32]);
    aperture_core::store::keys::record(&app.store, intruder.key_id(), &intruder.jwk().x)
        .await
        .unwrap();
    // Rewrite record 5 and re-sign it and every record after it, links and all.
    let mut prev: Option<String> = None;
    let (head,): (i64,) =
        sqlx::query_as("SELECT MAX(seq) FROM journal WHERE tenant_id = 'default'")
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    for seq in 5..=head {
        let (text,): (String,) =
            sqlx::query_as("SELECT receipt FROM journal WHERE tenant_id = 'default' AND seq = $1")
                .bind(seq)
                .fetch_one(app.store.pool())
                .await
                .unwrap();
        let mut r: Receipt = serde_json::from_str(&text).unwrap();
        if seq == 5 {
            r.actor_id = "someone-else".into();
        }
        if let Some(p) = &prev {
            r.prev_hash = Some(p.clone());
        }
        let r = sign_receipt(r, &intruder).unwrap();
        prev = Some(receipt_hash(&r).unwrap());
        sqlx::query(
            "UPDATE journal SET receipt = $1, record_hash = $2, actor_id = $3 \
             WHERE tenant_id = 'default' AND seq = $4",
        )
        .bind(String::from_utf8(receipt_canonical_bytes(&r)).unwrap())
        .bind(receipt_hash(&r).unwrap())
        .bind(&r.actor_id)
        .bind(seq)
        .execute(app.store.pool())
        .await
        .unwrap();
    }
    let out = journal_verify(&app, &db_url, &[]);
    assert!(!out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(text.contains("verified"), "{text}");
    assert!(text.contains("(sink): the journal's first"), "{text}");
}

/// A witness of tenant `default` that cosigned two checkpoints of a growing journal.
struct Witnessed {
    /// Its cosigner key (note verifier format).
    vkey: String,
    /// Its state file (what it saw last: the second checkpoint).
    state: std::path::PathBuf,
    /// The size of the first checkpoint it cosigned.
    first: u64,
    /// The size of the second.
    last: u64,
    /// The sink file of `default`, and what it held right after the first checkpoint.
    sink: std::path::PathBuf,
    sink_after_first: String,
    _dir: tempfile::TempDir,
}

async fn witnessed(app: &TestApp) -> Witnessed {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(
        &token_file,
        app.token("default", "witness", &[scope::WITNESS]).await,
    )
    .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let key_file = dir.path().join("witness.key");
    let state = dir.path().join("witness.json");
    let witness = || {
        aperture(&[
            "witness",
            "--url",
            &app.address,
            "--tenant",
            "default",
            "--token-file",
            token_file.to_str().unwrap(),
            "--key-file",
            key_file.to_str().unwrap(),
            "--name",
            "witness.example/w1",
            "--state",
            state.to_str().unwrap(),
            "--once",
        ])
    };
    fill(app, "default", 20).await;
    app.checkpoints.checkpoint("default").await.unwrap();
    // The first run makes the key; an admin registers it.
    let out = witness();
    let vkey = said(&out)
        .lines()
        .find_map(|l| l.strip_prefix("witness key: "))
        .and_then(|l| l.split(' ').next())
        .expect("the witness prints its key")
        .to_owned();
    let reply = app.post("/journal/witnesses");
    let reply = reply
        .as_(&admin)
        .json(json!({"name": "witness.example/w1", "key": vkey}))
        .await;
    reply.expect_status(StatusCode::CREATED);
    let sink = app.data_dir.join("checkpoints").join("default.checkpoints");
    let mut sizes = Vec::new();
    let mut sink_after_first = String::new();
    for round in 0..2 {
        fill(app, "default", 10).await;
        let made = app
            .checkpoints
            .checkpoint("default")
            .await
            .unwrap()
            .unwrap();
        let out = witness();
        assert!(out.status.success(), "{}", said(&out));
        sizes.push(u64::try_from(made.tree_size).unwrap());
        if round == 0 {
            sink_after_first = std::fs::read_to_string(&sink).unwrap();
        }
    }
    Witnessed {
        vkey,
        state,
        first: sizes[0],
        last: sizes[1],
        sink,
        sink_after_first,
        _dir: dir,
    }
}

/// A server whose own checkpointer stays out of the way: the tests make every checkpoint.
async fn app_on(db: crate::helpers::Db) -> Option<TestApp> {
    TestApp::spawn_with(db, |c| {
        c.checkpoint_interval = std::time::Duration::from_secs(3_600);
    })
    .await
}

/// Issue 45, item 11: an intruder with the database (and the sink on its disk) rolls tenant
/// `default` back to the first size its witness cosigned: the newer records, their copies in
/// journal_facets, the tree, the newer checkpoints and cosignatures go; the tree is rebuilt and
/// the earlier checkpoint re-signed; the sink is put back as it was then. Every check inside the
/// database passes, `--witness` too (the newest checkpoint is cosigned). The witness's state,
/// and the size the operator noted, do not: `journal verify --witness-state` and `--expect`
/// fail, naming the tenant, the size seen and the size found. New records then taking the lost
/// positions do not hash to the root the witness cosigned. Before all this, the honest journal
/// passes with the same flags.
async fn a_rollback_below_a_witnessed_size_fails_verify(db: crate::helpers::Db) {
    let Some(app) = app_on(db).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let db_url = app.store_url();
    let w = witnessed(&app).await;
    let state = w.state.to_str().unwrap();
    let (first, last) = (w.first, w.last);
    let expect_last = format!("default:{last}");
    let expect_first = format!("default:{first}");
    let out = journal_verify(
        &app,
        &db_url,
        &[
            "--witness",
            &w.vkey,
            "--witness-state",
            state,
            "--expect",
            &expect_last,
            "--expect",
            &expect_first,
        ],
    );
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!(
            "tenant default: the witness state {state} ({last} records): the journal holds the \
             {last} records, with the root the witness cosigned"
        )),
        "{}",
        said(&out)
    );

    // The rollback, as an intruder with the database would make it.
    let pool = app.store.pool();
    for table in ["journal", "journal_facets"] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE tenant_id = 'default' AND seq > $1"
        ))
        .bind(i64::try_from(first).unwrap())
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("DELETE FROM journal_cosignatures WHERE tenant_id = 'default' AND tree_size > $1")
        .bind(i64::try_from(first).unwrap())
        .execute(pool)
        .await
        .unwrap();
    for table in ["journal_tiles", "journal_logs", "journal_checkpoints"] {
        sqlx::query(&format!("DELETE FROM {table} WHERE tenant_id = 'default'"))
            .execute(pool)
            .await
            .unwrap();
    }
    let keys = aperture_core::keys::KeyRing::load(
        &app.store,
        &app.data_dir,
        Some(SIGNING_KEY),
        &aperture_core::keys::default_published_file(&app.data_dir),
    )
    .await
    .unwrap();
    let host = app.address.trim_start_matches("http://").to_owned();
    let rebuilt = aperture_core::journal::checkpoints::Checkpointer::new(
        app.store.clone(),
        keys,
        host,
        None,
        std::time::Duration::from_secs(3_600),
    )
    .checkpoint("default")
    .await
    .unwrap()
    .unwrap();
    assert_eq!(u64::try_from(rebuilt.tree_size).unwrap(), first);
    std::fs::write(&w.sink, &w.sink_after_first).unwrap();

    let out = journal_verify(&app, &db_url, &["--witness", &w.vkey]);
    assert!(
        out.status.success(),
        "inside the database, the rollback holds together: {}",
        said(&out)
    );
    let out = journal_verify(
        &app,
        &db_url,
        &["--witness", &w.vkey, "--witness-state", state],
    );
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!(
            "tenant default: the witness state {state} ({last} records): expected at least \
             {last} records, found {first} in sequence"
        )),
        "{}",
        said(&out)
    );
    let out = journal_verify(&app, &db_url, &["--expect", &expect_last]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!(
            "tenant default: --expect {expect_last}: expected at least {last} records, found \
             {first} in sequence"
        )),
        "{}",
        said(&out)
    );
    // A size at or below what is left still holds.
    let out = journal_verify(&app, &db_url, &["--expect", &expect_first]);
    assert!(out.status.success(), "{}", said(&out));

    // New records take the lost positions: as many records again, not the same ones.
    fill_anew(&app, "default", usize::try_from(last - first).unwrap() + 2).await;
    let out = journal_verify(&app, &db_url, &["--expect", &expect_last]);
    assert!(
        out.status.success(),
        "a size alone cannot tell: {}",
        said(&out)
    );
    let out = journal_verify(&app, &db_url, &["--witness-state", state]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!(
            "tenant default: the witness state {state} ({last} records): the journal's first \
             {last} records do not hash to the root the witness cosigned"
        )),
        "{}",
        said(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_below_a_witnessed_size_fails_verify_on_sqlite() {
    a_rollback_below_a_witnessed_size_fails_verify(crate::helpers::Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_below_a_witnessed_size_fails_verify_on_postgres() {
    a_rollback_below_a_witnessed_size_fails_verify(crate::helpers::Db::Postgres).await;
}

/// Issue 45, item 11: an intruder erases a witnessed tenant: every row of it in the journal,
/// journal_facets, the tree, its log, checkpoints and cosignatures, and its sink file. Nothing
/// left in the database or the sink names the tenant, so plain `journal verify` passes;
/// `--witness-state` and `--expect` fail on the missing tenant. Before, the same flags pass.
async fn an_erased_tenant_fails_verify(db: crate::helpers::Db) {
    let Some(app) = app_on(db).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let db_url = app.store_url();
    let w = witnessed(&app).await;
    let state = w.state.to_str().unwrap();
    let last = w.last;
    let expect = format!("default:{last}");
    let out = journal_verify(
        &app,
        &db_url,
        &["--witness-state", state, "--expect", &expect],
    );
    assert!(out.status.success(), "{}", said(&out));

    for table in [
        "journal",
        "journal_facets",
        "journal_tiles",
        "journal_logs",
        "journal_checkpoints",
        "journal_cosignatures",
    ] {
        sqlx::query(&format!("DELETE FROM {table} WHERE tenant_id = 'default'"))
            .execute(app.store.pool())
            .await
            .unwrap();
    }
    std::fs::remove_file(&w.sink).unwrap();

    let out = journal_verify(&app, &db_url, &[]);
    assert!(
        out.status.success(),
        "nothing left names the tenant: {}",
        said(&out)
    );
    let out = journal_verify(&app, &db_url, &["--witness-state", state]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!(
            "tenant default: the witness state {state} ({last} records): expected at least \
             {last} records, found 0 (the tenant has no journal"
        )),
        "{}",
        said(&out)
    );
    assert!(
        said(&out).contains("the database has no log of the tenant"),
        "{}",
        said(&out)
    );
    let out = journal_verify(&app, &db_url, &["--expect", &expect]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains(&format!(
            "tenant default: --expect {expect}: expected at least {last} records, found 0"
        )),
        "{}",
        said(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_tenant_fails_verify_on_sqlite() {
    an_erased_tenant_fails_verify(crate::helpers::Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_tenant_fails_verify_on_postgres() {
    an_erased_tenant_fails_verify(crate::helpers::Db::Postgres).await;
}

async fn rest_call(
    app: &TestApp,
    token: &str,
    list: &Value,
    tool: &str,
    meta_edit: impl Fn(&mut Value),
) -> Value {
    let t = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} in {list}"));
    let m = &list["_meta"];
    let sid = m["session_id"].as_str().unwrap();
    let mut meta = json!({"manifest_id": m["manifest_id"], "lease_id": m["lease_id"], "tool_version": t["_meta"]["toolVersion"], "expected_schema_hash": t["_meta"]["schemaHash"]});
    meta_edit(&mut meta);
    let arguments = if tool.ends_with("add") {
        json!({"a": 2, "b": 3})
    } else {
        json!({"text": "hi"})
    };
    let reply = app
        .post(format!("/sessions/{sid}/calls"))
        .as_(token)
        .json(json!({"name": tool, "arguments": arguments, "_meta": meta}))
        .await;
    reply.json()
}

/// Evidence bundles (issue 22, item 7): a session with allowed, denied and parked calls and a
/// fork. Its bundle and the fork's verify offline with `aperture evidence verify`; the parent
/// names the fork; disclosures only for readers who ask; changing a signed member, a proof
/// hash or a checkpoint line fails the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_evidence_bundle_verifies_offline_and_any_change_fails() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo", "mcp__fixture__add"])
        .await;
    let policy = json!({"rules": [
        {"id": "park", "match": {"name": "mcp__fixture__echo"}, "mode": "approval_required"},
        {"id": "ok", "match": {"name": "mcp__fixture__add"}, "mode": "allow"}
    ]});
    let put = app.put("/policies/p").as_(&admin).json(policy).await;
    assert!(put.status().is_success(), "{put}");
    let activated = app.post("/policies/p:activate").as_(&admin).await;
    assert!(activated.status().is_success(), "{activated}");
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list: Value = app.post("/sessions").as_(&agent).await.json();
    let sid = list["_meta"]["session_id"].as_str().unwrap().to_owned();
    let allowed = rest_call(&app, &agent, &list, "mcp__fixture__add", |_| {}).await;
    assert_eq!(
        allowed["_meta"]["receipt"]["decision"], "allow",
        "{allowed}"
    );
    let parked = rest_call(&app, &agent, &list, "mcp__fixture__echo", |_| {}).await;
    assert_eq!(parked["_meta"]["receipt"]["decision"], "park", "{parked}");
    let denied = rest_call(&app, &agent, &list, "mcp__fixture__add", |m| {
        m["expected_schema_hash"] = json!(format!("sha256:{}", "0".repeat(64)));
    })
    .await;
    assert_eq!(denied["_meta"]["receipt"]["decision"], "deny", "{denied}");
    let fork = app.post(format!("/sessions/{sid}/forks"));
    let fork = fork
        .as_(&agent)
        .json(json!({"fork_tools": ["mcp__fixture__add"]}))
        .await;
    let fork = fork.json();
    let fork_id = fork["_meta"]["session_id"].as_str().unwrap().to_owned();
    let refused = rest_call(&app, &agent, &fork, "mcp__fixture__echo", |_| {}).await;
    assert_eq!(refused["_meta"]["receipt"]["decision"], "deny", "{refused}");

    let fetch = |id: String, token: String, query: &'static str| {
        let call = app
            .get(format!("/sessions/{id}/evidence{query}"))
            .as_(token);
        async move {
            let response = call.await;
            (response.status(), response.text())
        }
    };
    let (status, parent) = fetch(sid.clone(), agent.clone(), "").await;
    assert_eq!(status, StatusCode::OK, "{parent}");
    // One RFC 8785 document.
    let value: Value = serde_json::from_str(&parent).unwrap();
    assert_eq!(
        String::from_utf8(engine::canonical::value_bytes(&value)).unwrap(),
        parent
    );
    assert_eq!(value["format"], "aperture-evidence/v1");
    assert_eq!(value["session"]["forks"], json!([fork_id]));
    assert!(value.get("disclosures").is_none());
    let decisions: Vec<&str> = value["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "decision")
        .map(|r| r["decision"].as_str().unwrap())
        .collect();
    for d in ["allow", "park", "deny"] {
        assert!(decisions.contains(&d), "{d} in {decisions:?}");
    }
    assert!(!value["manifests"].as_array().unwrap().is_empty());
    let v = engine::evidence::verify(&parent, None, &[], 0).unwrap();
    assert_eq!(v.receipts, value["receipts"].as_array().unwrap().len());

    let (status, child) = fetch(fork_id.clone(), agent.clone(), "").await;
    assert_eq!(status, StatusCode::OK, "{child}");
    let child_value: Value = serde_json::from_str(&child).unwrap();
    assert_eq!(child_value["session"]["parent_id"], json!(sid));
    engine::evidence::verify(&child, None, &[], 0).unwrap();

    // Disclosures: readers who ask; not the run actor.
    let (status, _) = fetch(sid.clone(), agent.clone(), "?disclosures=true").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let (status, with) = fetch(sid.clone(), reader.clone(), "?disclosures=true").await;
    assert_eq!(status, StatusCode::OK);
    let v = engine::evidence::verify(&with, None, &[], 0).unwrap();
    assert_eq!(v.disclosures, v.receipts);
    // Another actor's session is not found.
    let other = app.token("default", "someone", &[scope::RUN]).await;
    let (status, _) = fetch(sid.clone(), other, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // `aperture evidence verify`, offline, with the pinned keys.
    let dir = tempfile::tempdir().unwrap();
    let keys = aperture_core::keys::published(&app.store).await.unwrap();
    let trusted = dir.path().join("keys.json");
    std::fs::write(&trusted, serde_json::to_string(&keys).unwrap()).unwrap();
    let verify_cli = |text: &str| {
        let file = dir.path().join("bundle.json");
        std::fs::write(&file, text).unwrap();
        aperture(&[
            "evidence",
            "verify",
            file.to_str().unwrap(),
            "--trusted-keys",
            trusted.to_str().unwrap(),
        ])
    };
    for good in [&parent, &child, &with] {
        let out = verify_cli(good);
        assert!(out.status.success(), "{}", said(&out));
        assert!(said(&out).contains("trusted keys"), "{}", said(&out));
    }
    let mut changed = Vec::new();
    let mut c = value.clone();
    c["receipts"][0]["actor_id"] = json!("someone-else");
    changed.push(("a signed member", c));
    let mut c = value.clone();
    let hash = c["proofs"][0]["hashes"][0].as_str().unwrap().to_owned();
    let mut bytes = STANDARD.decode(hash).unwrap();
    bytes[5] ^= 0x10;
    c["proofs"][0]["hashes"][0] = json!(STANDARD.encode(bytes));
    changed.push(("a proof hash", c));
    let mut c = value.clone();
    let note = c["checkpoint"].as_str().unwrap();
    let size_line = note.lines().nth(1).unwrap();
    let bigger = (size_line.parse::<u64>().unwrap() + 1).to_string();
    c["checkpoint"] =
        json!(note.replacen(&format!("\n{size_line}\n"), &format!("\n{bigger}\n"), 1));
    changed.push(("the checkpoint's size line", c));
    for (what, c) in changed {
        let out = verify_cli(&c.to_string());
        assert!(!out.status.success(), "{what}: {}", said(&out));
        assert!(
            said(&out).contains("does not verify"),
            "{what}: {}",
            said(&out)
        );
    }
    // Issue 45 (item 12): a signed receipt given a second `actor_id` before its own. serde_json
    // keeps the last member, so the signed value would verify while another reader sees the
    // first; a member named twice at any depth is refused.
    let signed = serde_json::to_string(&value["receipts"][0]).unwrap();
    let forged_receipt = signed.replacen('{', "{\"actor_id\":\"someone-else\",", 1);
    let forged = serde_json::to_string(&value)
        .unwrap()
        .replacen(&signed, &forged_receipt, 1);
    assert_ne!(forged, serde_json::to_string(&value).unwrap());
    let out = verify_cli(&forged);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("duplicate member"), "{}", said(&out));
}
