//! Issue 26, operations: what an operator's load balancer, orchestrator and log shipper read.

use std::process::Stdio;

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{Db, TestApp, TestDb};

/// `/readyz` is 200 with every check `ok` on a node that can take calls, and 503 naming the
/// check that fails (here: a migration the database lacks).
#[tokio::test]
async fn readyz_says_whether_this_node_can_take_calls_and_why_not() {
    let app = TestApp::spawn().await;
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "ready", "{body}");
    for check in ["database", "migrations", "journal_writer"] {
        assert_eq!(body["checks"][check], "ok", "{body}");
    }

    // A schema older than the build (the newest migration not applied) is not ready.
    sqlx::query(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)",
    )
    .execute(app.store.pool())
    .await
    .unwrap();
    let behind = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(behind.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = behind.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert!(
        body["checks"]["migrations"]
            .as_str()
            .unwrap()
            .starts_with("pending: "),
        "{body}"
    );
    assert_eq!(body["checks"]["database"], "ok");

    // Liveness is another question: the process still answers.
    let alive = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), StatusCode::OK);
}

/// `APERTURE_LOG_FORMAT=json`: every log line the server writes is one JSON object with its
/// level and message, for log shippers.
#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_aperture"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("APERTURE_DATABASE_URL", &db.url)
        .env("APERTURE_DATA_DIR", db.data_dir())
        .env(
            "APERTURE_BOOTSTRAP_ADMIN_PASSWORD",
            "a-long-enough-password",
        )
        .env("APERTURE_LOG", "info")
        .env("APERTURE_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = tokio::time::timeout(std::time::Duration::from_secs(60), async move {
        use tokio::io::AsyncBufReadExt;
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        while let Some(line) = reader.next_line().await.unwrap() {
            // Logged at start-up on a fresh database with a bootstrap password.
            let done = line.contains("created user");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    })
    .await
    .expect("the server logs the bootstrap admin's creation");
    child.kill().await.unwrap();
    assert!(!lines.is_empty());
    for line in &lines {
        let entry: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        assert!(entry["level"].is_string(), "{line}");
        assert!(entry["message"].is_string(), "{line}");
        assert!(entry["timestamp"].is_string(), "{line}");
    }
}
