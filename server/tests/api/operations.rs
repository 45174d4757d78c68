//! Issue 26, operations: what an operator's load balancer, orchestrator and log shipper read.

use std::process::Stdio;

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Db, Requests, TestApp, TestDb, text_of};

/// `/readyz` is 200 with every check `ok` on a node that can take calls, and 503 naming the
/// check that fails (here: a migration the database lacks).
#[tokio::test]
async fn readyz_says_whether_this_node_can_take_calls_and_why_not() {
    let app = TestApp::spawn().await;
    let ready = app.get_raw("/readyz").await.expect_status(StatusCode::OK);
    let body: Value = ready.json();
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
    let behind = app.get_raw("/readyz").await;
    let behind = behind.expect_status(StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = behind.json();
    assert_eq!(body["status"], "not_ready");
    assert!(
        text_of(&body["checks"]["migrations"]).starts_with("pending: "),
        "{body}"
    );
    assert_eq!(body["checks"]["database"], "ok");

    // Liveness is another question: the process still answers.
    app.get_raw("/healthz").await.expect_status(StatusCode::OK);
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

/// The operator's metrics token in the tests.
const METRICS_TOKEN: &str = "operator-metrics-token-0123456789";

/// The samples of Prometheus text `body` named `name` whose labels include every `(key,
/// value)` of `labels`, summed; `None` when there is none.
fn sample(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let has = |k: &str, v: &str| {
            series_labels
                .split(',')
                .any(|pair| pair == format!("{k}=\"{v}\""))
        };
        if labels.iter().all(|(k, v)| has(k, v)) {
            *found.get_or_insert(0.0) += value.parse::<f64>().unwrap();
        }
    }
    found
}

/// `GET /metrics`: off without `APERTURE_METRICS_TOKEN`; with it, only that token as a bearer
/// token opens it (a tenant admin's API token does not: the metrics are every tenant's); the
/// body is Prometheus text with calls by decision and reason, the call's stages, the journal's
/// batches and commits, upstream calls by upstream and outcome, parked calls waiting and the
/// oldest one's age, the chain verifier's status and failed sign-ins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_only_the_operator_and_count_what_happened() {
    // Off by default: nothing is recorded and nothing is served.
    let off = TestApp::spawn().await;
    let response = off.get_raw("/metrics").as_(METRICS_TOKEN).await;
    response.expect_status(StatusCode::NOT_FOUND);

    let app = TestApp::spawn_with(Db::Sqlite, |c| {
        c.metrics_token = Some(METRICS_TOKEN.into());
    })
    .await
    .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo", "mcp__fixture__stats"])
        .await;
    let policy = json!({"rules": [
        {"id": "park-echo", "match": {"name": "mcp__fixture__echo"}, "mode": "approval_required"},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "p", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    let ran = app
        .mcp_call(&agent, &list, "mcp__fixture__stats", json!({}))
        .await;
    assert_eq!(ran["_meta"]["receipt"]["reason"], "ok", "{ran}");
    let parked = app
        .mcp_call(&agent, &list, "mcp__fixture__echo", json!({"text": "hi"}))
        .await;
    assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
    let refused = app
        .mcp_call_with(
            &agent,
            &list,
            "mcp__fixture__stats",
            json!({}),
            json!({"tool_version": "99"}),
        )
        .await;
    assert_eq!(
        refused["_meta"]["receipt"]["reason"], "tool_version_mismatch",
        "{refused}"
    );
    let failed = app.sign_in(&app.browser, "admin", "not-the-password").await;
    assert_eq!(failed.status(), StatusCode::UNAUTHORIZED);

    // Whoever is not the operator is refused: no token, a tenant admin's token, a wrong one.
    for token in [
        None,
        Some(admin.as_str()),
        Some("operator-metrics-token-wrong"),
    ] {
        let mut request = app.get_raw("/metrics");
        if let Some(token) = token {
            request = request.as_(token);
        }
        let response = request.await.expect_status(StatusCode::UNAUTHORIZED);
        assert!(response.headers().contains_key("www-authenticate"));
        let body = response.text();
        assert!(!body.contains("aperture_calls_total"), "{body}");
    }

    // The background verifier's first pass runs at start-up; wait for its gauge.
    let mut body = String::new();
    for _ in 0..200 {
        let response = app.get_raw("/metrics").as_(METRICS_TOKEN).await;
        let response = response.expect_status(StatusCode::OK);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
        );
        body = response.text();
        if sample(
            &body,
            "aperture_journal_chain_verified",
            &[("tenant", "default")],
        )
        .is_some()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let at_least = |name: &str, labels: &[(&str, &str)], n: f64| {
        let value = sample(&body, name, labels).unwrap_or(0.0);
        assert!(
            value >= n,
            "{name}{labels:?} = {value}, expected ≥ {n}:\n{body}"
        );
    };
    at_least(
        "aperture_calls_total",
        &[("decision", "allow"), ("reason", "ok")],
        1.0,
    );
    at_least("aperture_calls_total", &[("decision", "park")], 1.0);
    at_least(
        "aperture_calls_total",
        &[("decision", "deny"), ("reason", "tool_version_mismatch")],
        1.0,
    );
    at_least(
        "aperture_executions_total",
        &[("decision", "allow"), ("reason", "ok")],
        1.0,
    );
    for stage in ["decide", "journal", "upstream"] {
        at_least(
            "aperture_call_stage_seconds_count",
            &[("stage", stage)],
            1.0,
        );
    }
    at_least(
        "aperture_call_stage_seconds_bucket",
        &[("stage", "decide"), ("le", "+Inf")],
        3.0,
    );
    at_least("aperture_journal_batch_records_count", &[], 1.0);
    at_least("aperture_journal_commit_seconds_count", &[], 1.0);
    assert!(
        sample(&body, "aperture_journal_queue_depth", &[]).is_some(),
        "{body}"
    );
    at_least(
        "aperture_upstream_calls_total",
        &[
            ("tenant", "default"),
            ("upstream", "fixture"),
            ("outcome", "ok"),
        ],
        1.0,
    );
    at_least(
        "aperture_upstream_call_seconds_count",
        &[("tenant", "default"), ("upstream", "fixture")],
        1.0,
    );
    // Read from this node's database when asked: exactly the one parked call.
    assert_eq!(
        sample(
            &body,
            "aperture_invocations_waiting",
            &[("status", "parked")]
        ),
        Some(1.0),
        "{body}"
    );
    assert!(
        sample(
            &body,
            "aperture_invocations_oldest_waiting_seconds",
            &[("status", "parked")]
        )
        .is_some_and(|age| (0.0..600.0).contains(&age)),
        "{body}"
    );
    assert_eq!(
        sample(
            &body,
            "aperture_journal_chain_verified",
            &[("tenant", "default")]
        ),
        Some(1.0),
        "{body}"
    );
    at_least(
        "aperture_sign_in_failures_total",
        &[("reason", "wrong_credentials")],
        1.0,
    );
    // Never an argument value or a secret.
    assert!(!body.contains("hi\""), "{body}");
    assert!(!body.contains(&agent), "{body}");
}

/// The Grafana dashboard in `docs/grafana/aperture.json` is a dashboard, and every metric its
/// queries read is one the server records (the table in `core/src/metrics.rs`); every metric
/// the server records has a panel.
#[test]
fn the_grafana_dashboard_reads_the_metrics_the_server_records() {
    let dashboard: Value =
        serde_json::from_str(include_str!("../../../docs/grafana/aperture.json")).unwrap();
    let recorded: std::collections::BTreeSet<String> = include_str!("../../../core/src/metrics.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect();
    assert!(recorded.len() >= 15, "{recorded:?}");
    let mut read = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if let Some(name) = word.strip_prefix("aperture_") {
                    let name = format!("aperture_{name}");
                    let base = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s))
                        .unwrap_or(&name)
                        .to_owned();
                    assert!(
                        recorded.contains(&base),
                        "the dashboard reads {name}, which is not recorded"
                    );
                    read.insert(base);
                }
            }
        }
    }
    assert_eq!(read, recorded, "every recorded metric has a panel");
}
