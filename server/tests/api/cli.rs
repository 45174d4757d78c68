//! The `aperture` command line, run as a process against a fresh database.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use aperture::store::Store;
use reqwest::StatusCode;

use crate::helpers::{Db, TestDb};

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
    let user = aperture::store::users::find(&store, "acme", "root")
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
    let token = aperture::store::tokens::find_by_secret_hash(
        &store,
        &aperture::auth::principal::secret_hash(last),
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
    let health = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    child.kill().unwrap();
    let _ = child.wait();

    let store = Store::connect(&db.url).await.unwrap();
    assert!(
        aperture::store::tenants::exists(&store, "default")
            .await
            .unwrap()
    );
    assert_eq!(
        aperture::store::users::count_all(&store).await.unwrap(),
        0,
        "never a default user"
    );
    store.close().await;
}

#[tokio::test]
async fn journal_verify_and_key_rotation_from_the_command_line() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    for actor in ["a", "b", "c"] {
        let out = aperture(
            &db,
            &[
                "token",
                "create",
                "--tenant",
                "acme",
                "--actor",
                actor,
                "--scope",
                "agent_tool_exposure:run",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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
        aperture::keys::published(&store).await.unwrap().keys.len(),
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
        String::from_utf8_lossy(&out.stdout).contains("record 4 is bad"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
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
        aperture::store::policies::latest(&store, "default", "support")
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
        aperture::store::policies::latest(&store, "default", "support")
            .await
            .unwrap()
            .is_some()
    );
    let reports = aperture::journal::verify(&store).await.unwrap();
    assert!(
        reports.iter().all(|r| r.error.is_none() && r.verified >= 2),
        "{reports:?}"
    );
}
