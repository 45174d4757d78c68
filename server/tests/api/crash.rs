//! `kill -9` during a burst of calls: the real `aperture` binary on SQLite, killed while calls
//! are in flight and started again on the same data.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::cli::aperture;
use crate::helpers::{
    Db, Remote, Requests, SIGNING_KEY, TestDb, echo_of, fixture_command, text_of,
};

/// Starts `aperture serve` on a free port; returns the process and the server.
pub(crate) async fn serve(db: &TestDb) -> (Child, Remote) {
    serve_with(db, &[]).await
}

/// [`serve`] with more environment variables.
pub(crate) async fn serve_with(db: &TestDb, env: &[(&str, &str)]) -> (Child, Remote) {
    serve_into(db, env, Stdio::null()).await
}

/// [`serve_with`], its log (stderr) written to `log`.
pub(crate) async fn serve_logged(
    db: &TestDb,
    env: &[(&str, &str)],
    log: &std::path::Path,
) -> (Child, Remote) {
    let file = std::fs::File::create(log).expect("the log file");
    serve_into(db, env, Stdio::from(file)).await
}

async fn serve_into(db: &TestDb, env: &[(&str, &str)], stderr: Stdio) -> (Child, Remote) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aperture"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("APERTURE_DATABASE_URL", &db.url)
        .env("APERTURE_DATA_DIR", db.data_dir())
        .env("APERTURE_SIGNING_KEY", SIGNING_KEY)
        .env(
            "APERTURE_BOOTSTRAP_ADMIN_PASSWORD",
            "a-long-enough-password",
        )
        .env("APERTURE_LOG", "warn")
        // After the defaults above: the caller's settings win.
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start aperture serve");
    let stdout = child.stdout.take().expect("stdout");
    let url = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("serve printed its address")
                .expect("line");
            if let Some(url) = line.strip_prefix("Aperture listening on ") {
                break url.to_owned();
            }
        };
        // Keep draining, so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        url
    })
    .await
    .expect("reader");
    (child, Remote::new(url))
}

/// Registers the fixture MCP server (stdio, with `extra` arguments) as upstream `fixture`, by the
/// operator's `aperture upstream add`.
pub(crate) fn add_fixture_upstream(db: &TestDb, extra: &[String]) {
    let mut add = [
        "upstream", "add", "--tenant", "default", "--name", "fixture", "--stdio", "--",
    ]
    .map(str::to_owned)
    .to_vec();
    add.extend(fixture_command());
    add.extend_from_slice(extra);
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    let out = aperture(db, &add, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) fn token(db: &TestDb, actor: &str, scope: &str) -> String {
    token_in(db, "default", actor, scope)
}

/// `aperture token create` in `tenant` for `actor` with `scope`: the secret it printed.
pub(crate) fn token_in(db: &TestDb, tenant: &str, actor: &str, scope: &str) -> String {
    let out = aperture(
        db,
        &[
            "token", "create", "--tenant", tenant, "--actor", actor, "--scope", scope,
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_owned()
}

/// Every receipt a client `received` is in the journal of `node` (read by `admin`), exactly as
/// it was signed.
pub(crate) async fn assert_in_journal(node: &Remote, admin: &str, received: &[Value]) {
    for receipt in received {
        let id = receipt["receipt_id"].as_str().unwrap();
        let stored = node.get(format!("/receipts/{id}")).as_(admin).await;
        let stored = stored.expect_ok();
        assert_eq!(&stored["receipt"], receipt, "{id} changed");
    }
}

/// `aperture journal verify` passes on `db`.
fn assert_verifies(db: &TestDb) {
    let verify = aperture(db, &["journal", "verify"], None);
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// Describes `tool` as a read (`PUT /tools/{tool}`) on `node` as `admin`.
pub(crate) async fn describe_read(node: &impl Requests, admin: &str, tool: &str) {
    node.describe(admin, tool, json!({"risk": ["read"]})).await;
}

/// A new session of `agent` on `node`, whose first listed tool must be `tool`: the grant's echo
/// for a call's `_meta` (as a well-behaved client sends it) and the session's calls path.
pub(crate) async fn expect_grant(node: &Remote, agent: &str, tool: &str) -> (Value, String) {
    let session = node.post("/sessions").as_(agent).await.json();
    assert_eq!(session["tools"][0]["name"], tool, "{session}");
    let calls = format!(
        "/sessions/{}/calls",
        session["_meta"]["session_id"].as_str().unwrap()
    );
    (echo_of(&session, tool), calls)
}

/// `clients` clients calling echo `each` times in a loop at `calls` on `node` as `agent` (with
/// the grant's echo `meta`), counting their answers in `answered`: each ends with the receipts
/// it got and whether the node cut it off.
pub(crate) fn burst(
    node: &Remote,
    (calls, agent, meta): (&str, &str, &Value),
    (clients, each): (usize, usize),
    answered: &Arc<AtomicUsize>,
) -> tokio::task::JoinSet<(Vec<Value>, bool)> {
    let mut set = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (node, answered) = (node.clone(), answered.clone());
        let (calls, agent, meta) = (calls.to_owned(), agent.to_owned(), meta.clone());
        set.spawn(async move {
            let mut received = Vec::new();
            for n in 0..each {
                let body = json!({"name": "mcp__fixture__echo", "arguments": {"text": format!("{c}-{n}")}, "_meta": meta});
                let call = node.post(&calls).as_(&agent).json(body);
                let Ok(response) = call.try_send().await else {
                    return (received, true);
                };
                let Ok(result) = serde_json::from_str::<Value>(&response.text()) else {
                    return (received, true);
                };
                answered.fetch_add(1, Ordering::SeqCst);
                received.push(result["_meta"]["receipt"].clone());
            }
            (received, false)
        });
    }
    set
}

/// Waits until `answered` counts `n` answers.
pub(crate) async fn until_answered(answered: &AtomicUsize, n: usize) {
    while answered.load(Ordering::SeqCst) < n {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// What the clients of a [`burst`] got: every receipt, and how many were cut off.
pub(crate) async fn gathered(
    clients: tokio::task::JoinSet<(Vec<Value>, bool)>,
) -> (Vec<Value>, usize) {
    let mut received = Vec::new();
    let mut cut_off = 0;
    for (r, interrupted) in clients.join_all().await {
        received.extend(r);
        cut_off += usize::from(interrupted);
    }
    (received, cut_off)
}

/// `db`, migrated by `aperture migrate`, which must succeed.
fn expect_migrated(db: &TestDb) {
    assert!(aperture(db, &["migrate"], None).status.success());
}

/// Issue 4: "Killing the server (`kill -9`) during a burst of calls loses no receipt that a
/// client received; `aperture journal verify` passes after restart."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_loses_no_receipt_a_client_received() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    expect_migrated(&db);
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    add_fixture_upstream(&db, &[]);

    let (mut server, node) = serve(&db).await;
    describe_read(&node, &admin, "mcp__fixture__echo").await;
    let (meta, calls) = expect_grant(&node, &agent, "mcp__fixture__echo").await;

    // The burst: 32 clients calling in a loop; the server is killed after the 60th answer.
    let answered = Arc::new(AtomicUsize::new(0));
    let clients = burst(&node, (&calls, &agent, &meta), (32, 100), &answered);
    until_answered(&answered, 60).await;
    server.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
    let _ = server.wait();
    let (received, cut_off) = gathered(clients).await;
    assert!(cut_off > 0, "the kill happened during the burst");
    assert!(received.len() >= 60);
    assert!(
        received.iter().all(|r| r["reason"] == "ok"),
        "all calls were allowed"
    );

    // Started again on the same data: every receipt a client got is in the journal, as signed.
    let (mut server, node) = serve(&db).await;
    assert_in_journal(&node, &admin, &received).await;
    assert_verifies(&db);
    server.kill().unwrap();
    let _ = server.wait();
}

/// `tool` described as a write and parked for approval (each approved run may take `millis`)
/// by policy `p`, on `node` as `admin`; the described tool must be accepted.
async fn expect_approval_for(node: &Remote, admin: &str, tool: &str, millis: u64) {
    let write = json!({"risk": ["write"]});
    let described = node.put(format!("/tools/{tool}"));
    let described = described.as_(admin).json(write).await;
    described.expect_status(StatusCode::OK);
    let policy = json!({"rules": [{"id": "approve-slow", "match": {"name": tool},
        "mode": "approval_required", "invocation": {"max_duration_millis": millis}}]});
    node.activate_policy(admin, "p", policy).await;
}

/// Approves invocation `id` on `node` as `approver`, with the hashes its view shows.
async fn expect_approved(node: &Remote, approver: &str, id: &str) {
    let view = node.get(format!("/invocations/{id}")).as_(approver).await;
    let view = view.json();
    let hashes =
        json!({"args_hash": view["args_hash"], "definition_hash": view["definition_hash"]});
    let approve = node
        .post(format!("/invocations/{id}:approve"))
        .as_(approver);
    approve.json(hashes).await.expect_status(StatusCode::OK);
}

/// Issue 5: "parked and approved invocations survive `kill -9`; after restart each executes
/// exactly once (count at the upstream)". The fixture upstream logs every call to a file, so
/// executions are counted per invocation across restarts. An invocation that was already
/// running when the server died is never run again: it ends as an interrupted upstream error,
/// having reached the upstream at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_and_approved_invocations_survive_a_kill_and_run_once() {
    const CALLS: usize = 20;
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    expect_migrated(&db);
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    let approver = token(&db, "alice", scope::APPROVE);
    let log = db.data_dir().join("upstream-calls.log");
    add_fixture_upstream(&db, &["--call-log".to_owned(), log.display().to_string()]);

    let (mut server, node) = serve(&db).await;
    expect_approval_for(&node, &admin, "mcp__fixture__slow", 1000).await;
    let (meta, calls) = expect_grant(&node, &agent, "mcp__fixture__slow").await;
    let mut ids = Vec::new();
    for n in 0..CALLS {
        // Each takes a while, so the worker is mid-queue when the server dies; the length also
        // tells the calls apart in the upstream's log.
        let slow =
            json!({"name": "mcp__fixture__slow", "arguments": {"millis": 150 + n}, "_meta": meta});
        let parked = node.post(&calls).as_(&agent).json(slow).await.json();
        assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
        ids.push(text_of(&parked["_meta"]["invocation_id"]).to_owned());
    }

    // Killed with everything parked; started again, everything is still parked.
    server.kill().expect("SIGKILL");
    let _ = server.wait();
    let (mut server, node) = serve(&db).await;
    let parked = node.get("/invocations?status=input_required&limit=500");
    let parked = parked.as_(&approver).await.json();
    assert_eq!(parked["invocations"].as_array().unwrap().len(), CALLS);

    // Every one approved, then killed at once, while the worker is running them.
    let approvals = ids.iter().cloned().map(|id| {
        let (node, approver) = (node.clone(), approver.clone());
        async move { expect_approved(&node, &approver, &id).await }
    });
    futures_join_all(approvals).await;
    server.kill().expect("SIGKILL");
    let _ = server.wait();
    let before_restart = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .count();

    // Started again: each approved invocation settles, none runs twice.
    let (mut server, node) = serve(&db).await;
    let keys = node.get_raw("/.well-known/aperture/keys").await.json();
    let keys: Vec<engine::receipt::Jwk> = serde_json::from_value(keys["keys"].clone()).unwrap();
    let mut results = Vec::new();
    for id in &ids {
        let mut settled = None;
        for _ in 0..400 {
            let view = node.get(format!("/invocations/{id}")).as_(&approver).await;
            let view = view.json();
            if view["status"] == "completed" {
                settled = Some(view);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let view = settled.unwrap_or_else(|| panic!("{id} did not complete after the restart"));
        engine::receipt::verify_receipt_json(&view["result"]["_meta"]["receipt"], &keys).unwrap();
        results.push(view);
    }
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let mut interrupted = 0;
    for view in &results {
        let millis = view["arguments"]["millis"].as_u64().unwrap();
        let text = format!("slow {}", json!({ "millis": millis }));
        let runs = logged.lines().filter(|l| *l == text).count();
        let reason = text_of(&view["result"]["_meta"]["receipt"]["reason"]);
        match reason {
            "ok" => assert_eq!(runs, 1, "{text} ran exactly once"),
            "upstream_error" => {
                interrupted += 1;
                assert!(runs <= 1, "{text}: interrupted, never run twice ({runs})");
            }
            other => panic!("{text}: unexpected outcome {other}"),
        }
    }
    assert!(interrupted <= 1, "the worker runs one call at a time");
    assert!(
        logged.lines().count() > before_restart,
        "the restarted worker ran what the killed one had not started"
    );
    assert_verifies(&db);
    server.kill().unwrap();
    let _ = server.wait();
}

/// Awaits every future (all at once).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl IntoIterator<Item = F>,
) {
    let mut set = tokio::task::JoinSet::new();
    for f in futures {
        set.spawn(f);
    }
    set.join_all().await;
}

/// Issue 23: `requires_idempotency` is not decoration. The required `idempotency_key`
/// de-duplicates by (tenant, actor, tool, key), not by manifest: the same key and arguments get
/// the first outcome without reaching the upstream again (counted in its call log), across a
/// re-list and a restart; the same key with other arguments is refused.
#[tokio::test]
async fn an_idempotency_key_runs_a_call_once_across_relists_and_restarts() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    expect_migrated(&db);
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    let log = db.data_dir().join("calls.log");
    add_fixture_upstream(&db, &["--call-log".into(), log.display().to_string()]);
    let adds = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("add "))
            .count()
    };
    let (mut server, node) = serve(&db).await;
    let write = json!({"risk": ["write"]});
    let described = node.put("/tools/mcp__fixture__add").as_(&admin).json(write);
    described.await.expect_status(StatusCode::OK);
    let once = json!({"rules": [{"id": "once", "match": {"name": "mcp__fixture__add"}, "mode": "allow",
                                 "invocation": {"requires_idempotency": true}}]});
    let put = node.put("/policies/p").as_(&admin).json(once).await;
    put.expect_status(StatusCode::OK);
    let activated = node.post("/policies/p:activate").as_(&admin).await;
    activated.expect_status(StatusCode::OK);
    // A fresh session (a new manifest) for every call.
    let call = |node: Remote, arguments: Value| {
        let agent = agent.clone();
        async move {
            let (meta, calls) = expect_grant(&node, &agent, "mcp__fixture__add").await;
            let add = json!({"name": "mcp__fixture__add", "arguments": arguments, "_meta": meta});
            node.post(calls).as_(&agent).json(add).await.json()
        }
    };
    let k1 = json!({"a": 1, "b": 2, "idempotency_key": "k1"});
    let first = call(node.clone(), k1.clone()).await;
    assert_eq!(first["isError"], false, "{first}");
    assert_eq!(first["structuredContent"]["sum"], 3, "{first}");
    let receipt = first["_meta"]["receipt"]["receipt_id"].clone();
    assert_eq!(adds(), 1);
    // Again, under another manifest: the first outcome, and the upstream is not called.
    let again = call(node.clone(), k1.clone()).await;
    assert_eq!(again, first);
    assert_eq!(adds(), 1);
    // The same key with other arguments is refused, saying why.
    let other = call(
        node.clone(),
        json!({"a": 1, "b": 5, "idempotency_key": "k1"}),
    )
    .await;
    assert_eq!(other["isError"], true, "{other}");
    assert_eq!(
        other["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );
    assert_eq!(adds(), 1);
    // A key is required.
    let keyless = call(node.clone(), json!({"a": 1, "b": 2})).await;
    assert_eq!(keyless["_meta"]["receipt"]["reason"], "arguments_invalid");

    server.kill().unwrap();
    let _ = server.wait();
    let (mut server, node) = serve(&db).await;
    let after_restart = call(node.clone(), k1).await;
    assert_eq!(after_restart["_meta"]["receipt"]["receipt_id"], receipt);
    assert_eq!(after_restart["structuredContent"]["sum"], 3);
    assert_eq!(adds(), 1);
    // Another key runs.
    let k2 = call(
        node.clone(),
        json!({"a": 2, "b": 2, "idempotency_key": "k2"}),
    )
    .await;
    assert_eq!(k2["structuredContent"]["sum"], 4, "{k2}");
    assert_eq!(adds(), 2);
    server.kill().unwrap();
    let _ = server.wait();
}

/// Issue 23 (item 9): an executed call's receipt is never lost. While the journal refuses
/// execution records (a trigger stands in for a database that fails after the decision was
/// recorded and the upstream ran), the caller gets the upstream's result with
/// `_meta.receipt_pending` instead of a denial, and the receipt waits in the node's spool: it is
/// journaled once the journal records again, by the running node and, after `kill -9`, by the
/// node started again on the same data; nothing is journaled twice and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executed_call_s_receipt_waits_in_the_spool_until_the_journal_records() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    expect_migrated(&db);
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    add_fixture_upstream(&db, &[]);
    let store = aperture_core::store::Store::connect(&db.url).await.unwrap();
    let refuse = |on: bool| {
        let store = store.clone();
        async move {
            let sql = if on {
                "CREATE TRIGGER refuse_executions BEFORE INSERT ON journal WHEN NEW.kind = 'execution' \
                 BEGIN SELECT RAISE(ABORT, 'the journal is offline'); END"
            } else {
                "DROP TRIGGER refuse_executions"
            };
            sqlx::query(sql).execute(store.pool()).await.unwrap();
        }
    };
    let call_once = |node: Remote, text: &'static str| {
        let (agent, admin) = (agent.clone(), admin.clone());
        async move {
            describe_read(&node, &admin, "mcp__fixture__echo").await;
            let (meta, calls) = expect_grant(&node, &agent, "mcp__fixture__echo").await;
            let echo =
                json!({"name": "mcp__fixture__echo", "arguments": {"text": text}, "_meta": meta});
            node.post(&calls).as_(&agent).json(echo).await.json()
        }
    };
    let receipt = |node: &Remote, id: &str| node.get(format!("/receipts/{id}")).as_(&admin);
    let recorded_within = |node: Remote, id: String| {
        let receipt = &receipt;
        async move {
            for _ in 0..100 {
                let r = receipt(&node, &id).await;
                if r.status() == StatusCode::OK {
                    return r.json();
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            panic!("{id} was not journaled from the spool");
        }
    };

    let (mut first, node) = serve(&db).await;
    refuse(true).await;
    let ran = call_once(node.clone(), "ran while the journal was down").await;
    assert_eq!(ran["isError"], false, "the result, not a denial: {ran}");
    assert_eq!(ran["content"][0]["text"], "ran while the journal was down");
    assert_eq!(ran["_meta"]["receipt_pending"], true, "{ran}");
    assert!(ran["_meta"].get("receipt").is_none(), "{ran}");
    let pending = ran["_meta"]["receipt_id"].as_str().unwrap().to_owned();
    let unknown = receipt(&node, &pending).await;
    unknown.expect_status(StatusCode::NOT_FOUND);
    // The journal records again: the running node moves the receipt in.
    refuse(false).await;
    let shown = recorded_within(node.clone(), pending.clone()).await;
    assert_eq!(shown["receipt"]["kind"], "execution", "{shown}");
    assert_eq!(shown["receipt"]["decision"], "allow");
    assert_eq!(shown["receipt"]["reason"], "ok");

    // Down again; this time the node is killed before the journal comes back.
    refuse(true).await;
    let ran = call_once(node.clone(), "ran before the kill").await;
    assert_eq!(ran["_meta"]["receipt_pending"], true, "{ran}");
    let second = ran["_meta"]["receipt_id"].as_str().unwrap().to_owned();
    first.kill().unwrap();
    first.wait().unwrap();
    refuse(false).await;
    let (mut again, node) = serve(&db).await;
    let shown = recorded_within(node.clone(), second.clone()).await;
    assert_eq!(shown["receipt"]["kind"], "execution", "{shown}");
    // Each once, and the chain is whole.
    let count: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM journal WHERE receipt_id IN ($1, $2)")
            .bind(&pending)
            .bind(&second)
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(count, 2);
    // The spool is rewritten right after what it held is journaled.
    let spool = db.data_dir().join("spool").join("executions.jsonl");
    let mut left = String::from("?");
    for _ in 0..50 {
        left = std::fs::read_to_string(&spool).unwrap();
        if left.trim().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(left.trim(), "", "the spool is empty");
    again.kill().unwrap();
    again.wait().unwrap();
    let verified = aperture(&db, &["journal", "verify"], None);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}

/// Issue 26: "A `SIGTERM` drains: no new calls, in-flight calls answered, the journal queue
/// committed, then exit (tested: a burst with a `SIGTERM` in the middle loses no receipt a
/// client received)." A slow call is in flight when the signal arrives and still gets its
/// result; the burst's later calls find the node closed; the process exits cleanly; started
/// again, every receipt a client got is in the journal and the journal verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_calls_in_flight_and_loses_no_receipt() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    expect_migrated(&db);
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    add_fixture_upstream(&db, &[]);
    let (mut server, node) = serve(&db).await;
    for tool in ["mcp__fixture__echo", "mcp__fixture__slow"] {
        describe_read(&node, &admin, tool).await;
    }
    let session = node.post("/sessions").as_(&agent).await.json();
    let calls = format!(
        "/sessions/{}/calls",
        session["_meta"]["session_id"].as_str().unwrap()
    );

    // A live event stream does not hold the node up: it ends when the node drains.
    let approver = token(&db, "alice", scope::APPROVE);
    let mut stream =
        crate::helpers::SseReader::open(node.get("/invocations/events").as_(&approver)).await;

    // In flight when the signal arrives: takes 1.5 s at the upstream (from a client of its own).
    let slow = {
        let body = json!({"name": "mcp__fixture__slow", "arguments": {"millis": 1500}, "_meta": echo_of(&session, "mcp__fixture__slow")});
        let slow = Remote::new(&node.base).post(&calls).as_(&agent).json(body);
        tokio::spawn(async move {
            let answered = slow.try_send().await.expect("a call in flight is answered");
            serde_json::from_str::<Value>(&answered.text()).expect("its result")
        })
    };
    let answered = Arc::new(AtomicUsize::new(0));
    let echo = echo_of(&session, "mcp__fixture__echo");
    let clients = burst(&node, (&calls, &agent, &echo), (16, 400), &answered);
    until_answered(&answered, 60).await;
    let term = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let exited = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = server.try_wait().unwrap() {
                return Some(status);
            }
            if started.elapsed() > std::time::Duration::from_secs(15) {
                server.kill().ok();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    let status = exited.expect("the node stops within 15 s of SIGTERM, its event stream open");
    assert!(status.success(), "a drained node exits cleanly: {status}");
    assert_eq!(
        stream.next(std::time::Duration::from_secs(5)).await,
        None,
        "the event stream ended"
    );

    let slow = slow.await.unwrap();
    assert_eq!(slow["_meta"]["receipt"]["reason"], "ok", "{slow}");
    assert_eq!(slow["content"][0]["text"], "done", "{slow}");
    let (mut received, cut_off) = gathered(clients).await;
    received.insert(0, slow["_meta"]["receipt"].clone());
    assert!(cut_off > 0, "calls after the signal found the node closed");
    assert!(
        received.iter().all(|r| r["reason"] == "ok"),
        "every answer a client got is a whole, allowed call"
    );

    let (mut server, node) = serve(&db).await;
    assert_in_journal(&node, &admin, &received).await;
    assert_verifies(&db);
    server.kill().unwrap();
    let _ = server.wait();
}

/// The drain covers work a node does without a request: an approved invocation the worker is
/// running when `SIGTERM` arrives is finished and its outcome recorded before the node exits,
/// not left `running` to end as interrupted after the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_worker_finish_the_invocation_it_runs() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    expect_migrated(&db);
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    let approver = token(&db, "alice", scope::APPROVE);
    let log = db.data_dir().join("upstream-calls.log");
    add_fixture_upstream(&db, &["--call-log".to_owned(), log.display().to_string()]);
    let (mut server, node) = serve(&db).await;
    expect_approval_for(&node, &admin, "mcp__fixture__slow", 10000).await;
    let (meta, calls) = expect_grant(&node, &agent, "mcp__fixture__slow").await;
    let slow = json!({"name": "mcp__fixture__slow", "arguments": {"millis": 2000}, "_meta": meta});
    let parked = node.post(&calls).as_(&agent).json(slow).await.json();
    let id = text_of(&parked["_meta"]["invocation_id"]).to_owned();
    expect_approved(&node, &approver, &id).await;
    // Running at the upstream now.
    let line = format!("slow {}", json!({"millis": 2000}));
    for _ in 0..400 {
        if std::fs::read_to_string(&log).is_ok_and(|l| l.lines().any(|l| l == line)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let term = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = tokio::task::spawn_blocking(move || server.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");

    // Started again: already completed, by the node that ran it.
    let (mut server, node) = serve(&db).await;
    let view = node.get(format!("/invocations/{id}")).as_(&approver).await;
    let view = view.json();
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["result"]["_meta"]["receipt"]["reason"], "ok", "{view}");
    let runs = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| *l == line)
        .count();
    assert_eq!(runs, 1);
    server.kill().unwrap();
    let _ = server.wait();
}
