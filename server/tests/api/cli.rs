//! The `aperture` command line, run as a process against a fresh database.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use aperture_core::store::Store;
use reqwest::StatusCode;

use crate::helpers::{Db, Remote, Requests, TestDb};

pub(crate) fn aperture(db: &TestDb, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aperture"))
        .args(args)
        .env("APERTURE_DATABASE_URL", &db.url)
        .env("APERTURE_DATA_DIR", db.data_dir())
        .env_remove("APERTURE_SIGNING_KEY")
        .env("APERTURE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run aperture");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("aperture output")
}

#[tokio::test]
async fn migrate_create_user_and_token_from_the_command_line() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let out = aperture(&db, &["migrate"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = aperture(
        &db,
        &[
            "admin",
            "create-user",
            "--tenant",
            "acme",
            "--username",
            "root",
            "--scope",
            "agent_tool_exposure:admin",
            "--password-stdin",
        ],
        Some("a-long-enough-password\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = aperture(
        &db,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--actor",
            "ci-bot",
            "--scope",
            "agent_tool_exposure:run",
            "--scope",
            "github:read",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap();
    assert!(
        last.starts_with("apt_") && last.len() == 47,
        "secret alone on the last line: {stdout}"
    );

    let store = Store::connect(&db.url).await.unwrap();
    let user = aperture_core::store::users::find(&store, "acme", "root")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.created_by, "operator");
    // The password came from stdin without its newline.
    let passwords = aperture::auth::password::Passwords::new(1).unwrap();
    assert!(
        passwords
            .verify("a-long-enough-password".into(), Some(user.password_hash))
            .await
            .unwrap()
    );
    let token = aperture_core::store::tokens::find_by_secret_hash(
        &store,
        &aperture_core::principal::secret_hash(last),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (token.tenant_id.as_str(), token.actor_id.as_str()),
        ("acme", "ci-bot")
    );
    assert_eq!(token.scopes, vec!["agent_tool_exposure:run", "github:read"]);
    store.close().await;
}

#[tokio::test]
async fn bad_command_line_input_is_refused_with_a_message() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let out = aperture(
        &db,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--actor",
            "bot",
            "--scope",
            "NOT VALID",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("scopes[0]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = aperture(
        &db,
        &[
            "admin",
            "create-user",
            "--tenant",
            "Bad Tenant",
            "--username",
            "x",
            "--scope",
            "a",
            "--password-stdin",
        ],
        Some("long-enough-password"),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tenant ids"));

    let out = aperture(
        &db,
        &[
            "admin",
            "create-user",
            "--tenant",
            "acme",
            "--username",
            "x",
            "--scope",
            "a",
            "--password-stdin",
        ],
        Some("short"),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("password"));
}

#[tokio::test]
async fn serve_without_users_explains_how_to_create_the_first_admin() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_aperture"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("APERTURE_DATABASE_URL", &db.url)
        .env("APERTURE_DATA_DIR", db.data_dir())
        .env_remove("APERTURE_BOOTSTRAP_ADMIN_PASSWORD")
        .env("APERTURE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let done = line.starts_with("Aperture listening on");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    })
    .await
    .unwrap();
    let text = lines.join("\n");
    assert!(
        text.contains("aperture admin create-user --tenant default"),
        "{text}"
    );
    let url = lines
        .last()
        .unwrap()
        .trim_start_matches("Aperture listening on ")
        .to_owned();
    let health = Remote::new(url).get_raw("/healthz").await;
    health.expect_status(StatusCode::OK);
    child.kill().unwrap();
    let _ = child.wait();

    let store = Store::connect(&db.url).await.unwrap();
    assert!(
        aperture_core::store::tenants::exists(&store, "default")
            .await
            .unwrap()
    );
    assert_eq!(
        aperture_core::store::users::count_all(&store)
            .await
            .unwrap(),
        0,
        "never a default user"
    );
    store.close().await;
}

#[tokio::test]
async fn journal_verify_and_key_rotation_from_the_command_line() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    for actor in ["a", "b", "c"] {
        crate::crash::token_in(&db, "acme", actor, "agent_tool_exposure:run");
    }
    let out = aperture(&db, &["journal", "verify"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("tenant acme: verified 3 records"));

    let out = aperture(&db, &["keys", "rotate"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = aperture(
        &db,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--actor",
            "d",
            "--scope",
            "agent_tool_exposure:run",
        ],
        None,
    );
    assert!(out.status.success());
    let store = Store::connect(&db.url).await.unwrap();
    assert_eq!(
        aperture_core::keys::published(&store)
            .await
            .unwrap()
            .keys
            .len(),
        2
    );
    let kids: Vec<(String,)> =
        sqlx::query_as("SELECT DISTINCT json_extract(receipt, '$.key_id') FROM journal")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(kids.len(), 2, "the rotated key signs new records");
    let out = aperture(&db, &["journal", "verify"], None);
    assert!(
        out.status.success(),
        "old and new keys both verify: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // One receipt on its own, from a file.
    let (receipt,): (String,) = sqlx::query_as("SELECT receipt FROM journal WHERE seq = 2")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let file = db.data_dir().join("receipt.json");
    std::fs::write(&file, &receipt).unwrap();
    let out = aperture(&db, &["receipt", "verify", file.to_str().unwrap()], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        &file,
        receipt.replacen("\"reason\":\"ok\"", "\"reason\":\"scope_missing\"", 1),
    )
    .unwrap();
    let out = aperture(
        &db,
        &["receipt", "verify", "-"],
        Some(&std::fs::read_to_string(&file).unwrap()),
    );
    assert!(!out.status.success(), "a changed receipt does not verify");

    // A flipped byte in storage fails the journal check and names the record.
    sqlx::query("UPDATE journal SET receipt = replace(receipt, '\"kind\":\"admin\"', '\"kind\":\"manifest\"') WHERE seq = 4")
        .execute(store.pool())
        .await
        .unwrap();
    let out = aperture(&db, &["journal", "verify"], None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("record 4: "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    store.close().await;
}

/// Issue 45 item 2: a journal whose first records were made before receipts named their
/// principal, continued after: `aperture journal verify` verifies the whole chain, `aperture
/// receipt verify` the old record, and so does Node's own Ed25519 (the browser's verifier is
/// `app::verify`, tested with such a chain in its unit tests).
#[tokio::test]
async fn receipts_made_before_principals_still_verify() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    crate::crash::token_in(&db, "acme", "a", "agent_tool_exposure:run");
    let store = Store::connect(&db.url).await.unwrap();
    let keys = aperture_core::keys::KeyRing::load(
        &store,
        &db.data_dir(),
        None,
        &aperture_core::keys::default_published_file(&db.data_dir()),
    )
    .await
    .unwrap();
    let journal = aperture_core::journal::Journal::new(store.clone(), keys);
    // As an older build wrote it: no `principal` member at all.
    let mut old = aperture_core::journal::receipt(
        engine::receipt::ReceiptKind::Admin,
        engine::receipt::Decision::Allow,
        engine::receipt::ReasonCode::Ok,
        "acme",
        "ops",
        "operator",
    );
    old.principal = None;
    let old = journal
        .append(old, &aperture_core::journal::disclosures())
        .await
        .unwrap();
    drop(journal);
    crate::crash::token_in(&db, "acme", "b", "agent_tool_exposure:run");
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT receipt FROM journal WHERE tenant_id = 'acme' ORDER BY seq")
            .fetch_all(store.pool())
            .await
            .unwrap();
    let receipts: Vec<serde_json::Value> = rows
        .iter()
        .map(|(r,)| serde_json::from_str(r).unwrap())
        .collect();
    let has = |r: &serde_json::Value| r.get("principal").is_some();
    assert_eq!(
        receipts.iter().map(has).collect::<Vec<_>>(),
        [true, false, true],
        "new, old, new"
    );
    let out = aperture(&db, &["journal", "verify"], None);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("verified 3 records"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let old_text = serde_json::to_string(&old).unwrap();
    assert!(!old_text.contains("principal"));
    let out = aperture(&db, &["receipt", "verify", "-"], Some(&old_text));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let published = aperture_core::keys::published(&store).await.unwrap();
    let input = serde_json::json!({"keys": published.keys, "receipts": receipts});
    let mut node = Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/verify_receipts.mjs"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node (Node.js 18+) is needed for this test; scripts/ensure-tools checks for it");
    node.stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = node.wait_with_output().unwrap();
    let verdicts = String::from_utf8_lossy(&out.stdout);
    let expected: Vec<String> = receipts
        .iter()
        .map(|r| format!("{} valid", r["receipt_id"].as_str().unwrap()))
        .collect();
    assert_eq!(verdicts.lines().collect::<Vec<_>>(), expected, "{verdicts}");
    store.close().await;
}

/// CONTRACT §10: `aperture policy apply -f <file>` validates and stores a policy document
/// (`--dry-run` only validates; problems are named by field path).
#[tokio::test]
async fn policy_apply_validates_and_stores_a_document() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(
        &good,
        r#"{"name": "support", "rules": [{"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]}"#,
    )
    .unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"name": "support", "rules": [{"id": "r", "mode": "allow", "invocation": {"max_result_bytes": -1}}]}"#,
    )
    .unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();

    let out = aperture(
        &db,
        &["policy", "apply", "-f", &path(&bad), "--dry-run"],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rules[0].invocation.max_result_bytes"),
        "{err}"
    );
    let out = aperture(&db, &["policy", "apply", "-f", &path(&bad)], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rules[0].invocation.max_result_bytes"));

    let out = aperture(
        &db,
        &["policy", "apply", "-f", &path(&good), "--dry-run"],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::connect(&db.url).await.unwrap();
    assert!(
        aperture_core::store::policies::latest(&store, "default", "support")
            .await
            .unwrap()
            .is_none(),
        "a dry run stores nothing"
    );
    let out = aperture(
        &db,
        &["policy", "apply", "-f", &path(&good), "--activate", "prod"],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("support: version 1 stored"), "{stdout}");
    assert!(stdout.contains("active in prod"), "{stdout}");
    assert!(
        aperture_core::store::policies::latest(&store, "default", "support")
            .await
            .unwrap()
            .is_some()
    );
    let reports = aperture_core::journal::verify(&store).await.unwrap();
    assert!(
        reports.iter().all(|r| r.error.is_none() && r.verified >= 2),
        "{reports:?}"
    );
}

/// Runs `aperture` with only the given environment (no database unless one is named).
fn aperture_with(env: &[(&str, &str)], args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aperture"));
    command
        .args(args)
        .env_remove("APERTURE_DATABASE_URL")
        .env_remove("APERTURE_DATA_DIR")
        .env_remove("APERTURE_SIGNING_KEY")
        .env("APERTURE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("run aperture");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("aperture output")
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Issue 22, item 2: trust anchors from outside. Whoever can write the database can add a
/// key and re-sign what they rewrote: `journal verify` on the stored keys says that it trusted
/// them (and passes), `journal verify --trusted-keys` trusts only the pinned keys, names the
/// key it does not know and fails on the re-signed record.
#[tokio::test]
async fn journal_verify_with_trusted_keys_refuses_a_key_added_to_the_database() {
    use engine::receipt::{Receipt, Signer, receipt_canonical_bytes, receipt_hash, sign_receipt};
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    for actor in ["a", "b", "c"] {
        crate::crash::token_in(&db, "acme", actor, "agent_tool_exposure:run");
    }
    let store = Store::connect(&db.url).await.unwrap();
    let pinned = aperture_core::keys::published(&store).await.unwrap();
    let trusted = db.data_dir().join("trusted.json");
    std::fs::write(&trusted, serde_json::to_string(&pinned).unwrap()).unwrap();
    let trusted = trusted.to_str().unwrap();

    // Retention: a purge of old disclosures is journaled and verify still passes.
    let out = aperture(
        &db,
        &["journal", "purge-disclosures", "--older-than-days", "1"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("tenant acme: removed the disclosures of 0 records"),
        "{}",
        text(&out)
    );
    let out = aperture(&db, &["journal", "verify", "--trusted-keys", trusted], None);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("trusting the 1 keys of"),
        "{}",
        text(&out)
    );
    let out = aperture(&db, &["journal", "verify"], None);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("trusted the 1 keys stored in the database"),
        "{}",
        text(&out)
    );

    // The intruder's key, recorded where the published keys are read from, and the newest
    // record rewritten (another actor) and signed with it.
    let intruder = Signer::from_seed(&[66; 32]);
    aperture_core::store::keys::record(&store, intruder.key_id(), &intruder.jwk().x)
        .await
        .unwrap();
    let (seq, stored): (i64, String) = sqlx::query_as(
        "SELECT seq, receipt FROM journal WHERE tenant_id = 'acme' ORDER BY seq DESC LIMIT 1",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let mut r: Receipt = serde_json::from_str(&stored).unwrap();
    r.actor_id = "intruder".into();
    let r = sign_receipt(r, &intruder).unwrap();
    sqlx::query(
        "UPDATE journal SET receipt = $1, record_hash = $2, actor_id = 'intruder' \
         WHERE tenant_id = 'acme' AND seq = $3",
    )
    .bind(String::from_utf8(receipt_canonical_bytes(&r)).unwrap())
    .bind(receipt_hash(&r).unwrap())
    .bind(seq)
    .execute(store.pool())
    .await
    .unwrap();
    // A thorough intruder rewrites the record's copy in journal_facets too (made here, as the
    // server's journal writer makes it after a pause).
    let mut conn = store.pool().acquire().await.unwrap();
    aperture_core::store::journal::index_facets(&mut conn, "acme", 1_000)
        .await
        .unwrap();
    drop(conn);
    sqlx::query(
        "UPDATE journal_facets SET actor_id = 'intruder' WHERE tenant_id = 'acme' AND seq = $1",
    )
    .bind(seq)
    .execute(store.pool())
    .await
    .unwrap();
    store.close().await;

    let out = aperture(&db, &["journal", "verify"], None);
    assert!(
        out.status.success(),
        "on the stored keys the rewrite passes (the hole the pinned keys close): {}",
        text(&out)
    );
    let out = aperture(&db, &["journal", "verify", "--trusted-keys", trusted], None);
    assert!(!out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&format!(
            "key {} is in the database but not among the trusted keys",
            intruder.key_id()
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("record {seq}: signature: ")),
        "{said}"
    );
}

/// Issue 22, item 8: `aperture receipt verify` works offline with `--keys` (a JWKS file or
/// URL) or `--trusted-keys`, and never creates a database or a data directory; without keys
/// and without a database it says what to give it. (Multi-threaded: the server answers the
/// URL while the test waits for the process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipt_verify_works_offline_and_creates_nothing() {
    let app = crate::helpers::TestApp::spawn().await;
    app.token("default", "bot", &[engine::scope::RUN]).await;
    let (receipt,): (String,) = sqlx::query_as(
        "SELECT receipt FROM journal WHERE tenant_id = 'default' ORDER BY seq DESC LIMIT 1",
    )
    .fetch_one(app.store.pool())
    .await
    .unwrap();
    let keys = aperture_core::keys::published(&app.store).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("keys.json");
    std::fs::write(&jwks, serde_json::to_string(&keys).unwrap()).unwrap();
    let jwks = jwks.to_str().unwrap();
    let data = dir.path().join("never-made");
    let env = [("APERTURE_DATA_DIR", data.to_str().unwrap())];
    let keys_url = app.url("/.well-known/aperture/keys");
    for flags in [
        vec!["--keys", jwks],
        vec!["--trusted-keys", jwks],
        vec!["--keys", keys_url.as_str()],
    ] {
        let mut args = vec!["receipt", "verify", "-"];
        args.extend(flags.iter().copied());
        let out = aperture_with(&env, &args, Some(&receipt));
        assert!(out.status.success(), "{flags:?}: {}", text(&out));
        assert!(
            text(&out).contains("the receipt verifies"),
            "{}",
            text(&out)
        );
        let forged = receipt.replacen("\"actor_id\":\"", "\"actor_id\":\"x", 1);
        let out = aperture_with(&env, &args, Some(&forged));
        assert!(
            !out.status.success(),
            "{flags:?}: a changed receipt verifies"
        );
        // Issue 45 (item 12): the signed receipt with a second `actor_id` in front, which a
        // last-member-wins parser ignores: refused, not verified.
        let doubled = receipt.replacen('{', "{\"actor_id\":\"someone-else\",", 1);
        let out = aperture_with(&env, &args, Some(&doubled));
        assert!(!out.status.success(), "{flags:?}: {}", text(&out));
        assert!(text(&out).contains("duplicate member"), "{}", text(&out));
    }
    // Keys that did not sign it.
    let other = dir.path().join("other.json");
    let stranger = engine::receipt::Signer::from_seed(&[9; 32]).jwk();
    std::fs::write(&other, serde_json::json!({"keys": [stranger]}).to_string()).unwrap();
    let out = aperture_with(
        &env,
        &[
            "receipt",
            "verify",
            "-",
            "--trusted-keys",
            other.to_str().unwrap(),
        ],
        Some(&receipt),
    );
    assert!(!out.status.success());
    // No keys and no database: told what to give, nothing made.
    let out = aperture_with(&env, &["receipt", "verify", "-"], Some(&receipt));
    assert!(!out.status.success());
    assert!(text(&out).contains("--keys"), "{}", text(&out));
    assert!(!data.exists(), "receipt verify created {}", data.display());
}

/// Issue 23 (operator conventions, CONTRACT §8): boolean settings take `1/0`, `true/false`,
/// `yes/no`, `on/off` (`APERTURE_ALLOW_STDIO_UPSTREAMS=1` made `serve` refuse to start), and
/// `APERTURE_RATE_LIMITER=postgres` / `APERTURE_SPEND_GATE=descriptor` are accepted as aliases
/// of `database` / `catalog`.
#[tokio::test]
async fn boolean_settings_and_old_names_take_the_operator_s_spellings() {
    use engine::scope;
    use serde_json::json;
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let admin = crate::crash::token(&db, "ops", scope::ADMIN);
    let writer = crate::crash::token(&db, "author", scope::WRITE);
    let stdio = json!({"name": "fixture", "transport": "stdio",
                       "command": crate::helpers::fixture_command()});
    for (value, allowed, secure) in [
        ("1", true, "0"),
        ("0", false, "false"),
        ("yes", true, "no"),
        ("off", false, "off"),
        ("true", true, "no"),
    ] {
        let (mut server, node) = crate::crash::serve_with(
            &db,
            &[
                ("APERTURE_ALLOW_STDIO_UPSTREAMS", value),
                ("APERTURE_SECURE_COOKIES", secure),
                ("APERTURE_RATE_LIMITER", "postgres"),
                ("APERTURE_SPEND_GATE", "descriptor"),
            ],
        )
        .await;
        let registered = node.post("/upstreams").as_(&admin).json(&stdio).await;
        let status = registered.status();
        if allowed {
            assert!(status.is_success(), "{value}: {status}");
            let id = registered.json()["upstream"]["id"]
                .as_str()
                .unwrap()
                .to_owned();
            let deleted = node.delete(format!("/upstreams/{id}")).as_(&admin).await;
            assert!(deleted.status().is_success(), "{}", deleted.status());
        } else {
            registered.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        }
        // `postgres` is the database limiter: a rate bucket is accepted; `descriptor` the
        // catalog's prices: a cost ceiling is.
        let limits = json!({"rules": [{"id": "a", "mode": "allow", "invocation": {
            "rate_bucket": {"name": "b", "per_minute": 10}, "max_cost_cents": 5}}]});
        let policy = node.put("/policies/limits").as_(&writer).json(limits).await;
        policy.expect_status(StatusCode::OK);
        server.kill().unwrap();
        let _ = server.wait();
    }
}

/// Issue 23: `aperture upstream credentials` is the operator's way to replace a stdio upstream's
/// environment (the API refuses it where stdio is not allowed): the whole set, journaled by name,
/// counted in the credential version; the wrong kind of option is refused with a message.
#[tokio::test]
async fn the_operator_replaces_an_upstream_s_credentials_from_the_command_line() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    crate::crash::add_fixture_upstream(&db, &[]);
    let args = [
        "upstream",
        "credentials",
        "--tenant",
        "default",
        "--name",
        "fixture",
    ];
    let wrong = aperture(
        &db,
        &[&args[..], &["--header", "authorization: x"]].concat(),
        None,
    );
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("stdio upstream"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    let out = aperture(
        &db,
        &[
            &args[..],
            &["--env", "UPSTREAM_TOKEN=from-the-operator-3333"],
        ]
        .concat(),
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("from-the-operator"));
    let store = aperture_core::store::Store::connect(&db.url).await.unwrap();
    let (tenant, id, spec, version): (String, String, String, i64) = sqlx::query_as(
        "SELECT tenant_id, id, spec, credential_version FROM upstreams WHERE name = 'fixture'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(version, 1);
    // Stored encrypted (issue 24), under the key in the data folder.
    assert!(!spec.contains("from-the-operator-3333"));
    let opened = aperture_core::secrets::SecretBox::load(&db.data_dir(), None)
        .unwrap()
        .open(&aperture_core::secrets::upstream_aad(&tenant, &id), &spec)
        .unwrap();
    assert!(opened.contains("from-the-operator-3333"));
    let journaled: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM journal WHERE disclosures LIKE '%upstream.credentials%' AND disclosures NOT LIKE '%from-the-operator%'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(journaled, 1);
}

/// Issue 23: `token create --environment` (repeatable) sets where the token may open
/// sessions; without it, the tenant's default environment; a bad name is refused.
#[tokio::test]
async fn token_create_takes_the_environments_the_token_may_use() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let create = |extra: &[&str]| {
        let mut args = vec![
            "token",
            "create",
            "--tenant",
            "default",
            "--actor",
            "agent",
            "--scope",
            "agent_tool_exposure:run",
        ];
        args.extend_from_slice(extra);
        aperture(&db, &args, None)
    };
    assert!(
        create(&["--environment", "prod", "--environment", "staging"])
            .status
            .success()
    );
    assert!(create(&[]).status.success());
    let bad = create(&["--environment", "Prod!"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("environments[0]"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let store = Store::connect(&db.url).await.unwrap();
    let mut stored: Vec<String> =
        sqlx::query_scalar("SELECT environments FROM api_tokens ORDER BY created_at")
            .fetch_all(store.pool())
            .await
            .unwrap();
    stored.sort();
    assert_eq!(stored, ["[\"default\"]", "[\"prod\",\"staging\"]"]);
}
