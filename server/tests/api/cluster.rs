//! Issue 26, item 2: two `aperture serve` nodes on one PostgreSQL database behind nginx, started
//! by `scripts/cluster 2` as an operator would (real binaries, the fixture MCP server as the
//! upstream, the scripted model for a hosted agent). Calls spread over both nodes; a call parked
//! on one is approved on the other; one rate bucket is counted across both; a token revoked on
//! one is refused on the other; a session listed on one is called on the other. Then `kill -9`
//! of one node in the middle of a burst while it runs approved invocations and a background
//! hosted agent: no receipt a client received is lost, no approved invocation ran twice and
//! each one's outcome matches the upstream's call log, parked calls survive, the other node
//! takes the agent over, and `aperture journal verify` passes.
//!
//! Runs where `APERTURE_TEST_POSTGRES_URL` is set (`.ci/run` sets it); nginx is installed by the
//! script when missing.

use std::io::BufRead;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::background::{agent_view, background_fork, hang, new_agent, sent_with, started, turn};
use crate::helpers::{Remote, Requests, SseReader, echo_of, fixture_command, text_of};
use crate::model_fixture::{ScriptedModel, Step};

const ADMIN_PASSWORD: &str = "a-long-enough-password";
const METRICS_TOKEN: &str = "cluster-test-metrics-token";
const ECHO: &str = "mcp__fixture__echo";
const ADD: &str = "mcp__fixture__add";
const SLOW: &str = "mcp__fixture__slow";
/// `add` runs at most this many times a minute, across the nodes.
const PER_MINUTE: usize = 5;

/// A cluster started by `scripts/cluster`; stopped (SIGTERM to the script, which stops its
/// nodes and nginx and drops the database) when dropped.
struct Cluster {
    script: Child,
    balancer: String,
    /// Each node's URL and process id.
    nodes: Vec<(String, u32)>,
    database_url: String,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// `scripts/cluster 2` on free ports, with `env` for every node. The ports are free when
    /// chosen, but a test running alongside may bind one before the script does (it then stops
    /// before the cluster is up): it is started again on other ports, at most three times.
    fn start(postgres: &str, env: &[(&str, &str)]) -> Self {
        for _ in 0..2 {
            if let Some(cluster) = Self::try_start(postgres, env) {
                return cluster;
            }
            eprintln!("[cluster test] the script stopped before the cluster was up; again");
        }
        Self::try_start(postgres, env).expect("scripts/cluster stopped before the cluster was up")
    }

    /// [`Self::start`] once; `None` when the script stopped before the cluster was up.
    fn try_start(postgres: &str, env: &[(&str, &str)]) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        // nginx's workers run as another user when the tests run as root; they may need to
        // reach the temporary folders the script makes in here.
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let port = free_ports(3);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster");
        let mut child = Command::new(script)
            .args(["2", "--port", &port.to_string()])
            .envs(env.iter().copied())
            .env("APERTURE_CLUSTER_POSTGRES", postgres)
            .env("APERTURE_CLUSTER_BIN", env!("CARGO_BIN_EXE_aperture"))
            .env("APERTURE_BOOTSTRAP_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("APERTURE_METRICS_TOKEN", METRICS_TOKEN)
            .env("APERTURE_ALLOW_STDIO_UPSTREAMS", "1")
            .env("APERTURE_LOG", "warn")
            .env_remove("APERTURE_SIGNING_KEY")
            .env_remove("APERTURE_SECRETS_KEY")
            .env("TMPDIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scripts/cluster");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut balancer, mut nodes, mut database_url) = (None, Vec::new(), None);
        loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["database", url, ..] => database_url = Some((*url).to_owned()),
                ["balancer", url, ..] => balancer = Some((*url).to_owned()),
                // `node 1     http://127.0.0.1:8081  (pid 1234, logs …)`
                ["node", _, url, "(pid", pid, ..] => {
                    let pid = pid.trim_end_matches(',').parse().expect("a pid");
                    nodes.push(((*url).to_owned(), pid));
                }
                ["Ctrl-C", ..] => break,
                _ => {}
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        assert_eq!(nodes.len(), 2);
        Some(Self {
            script: child,
            balancer: balancer.expect("the balancer's URL"),
            nodes,
            database_url: database_url.expect("the database URL"),
            dir,
        })
    }

    /// `aperture <args>` against the cluster's database, as its operator.
    fn cli(&self, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_aperture"))
            .args(args)
            .env("APERTURE_DATABASE_URL", &self.database_url)
            .env("APERTURE_DATA_DIR", self.dir.path())
            .env_remove("APERTURE_SIGNING_KEY")
            .env("APERTURE_LOG", "warn")
            .output()
            .expect("aperture");
        assert!(
            out.status.success(),
            "aperture {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// A token of `actor` with `scope` in tenant `default`, made by `aperture token create`.
    fn token(&self, actor: &str, scope: &str) -> String {
        let out = self.cli(&[
            "token", "create", "--tenant", "default", "--actor", actor, "--scope", scope,
        ]);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .trim()
            .to_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.script.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if self.script.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for (_, pid) in &self.nodes {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.script.kill();
    }
}

/// A port `p` such that `p`, `p + 1`, … `p + n - 1` are free now.
fn free_ports(n: u16) -> u16 {
    for _ in 0..100 {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port > u16::MAX - n {
            continue;
        }
        let rest: Vec<_> = (1..n)
            .map(|i| std::net::TcpListener::bind(("127.0.0.1", port + i)))
            .collect();
        if rest.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// A session of `agent` opened on `node`: its listing and grant.
async fn session(node: &Remote, agent: &str) -> Value {
    let session = node.post("/sessions").as_(agent).json(json!({})).await;
    session.expect_created()
}

fn calls_path(session: &Value) -> String {
    format!(
        "/sessions/{}/calls",
        session["_meta"]["session_id"].as_str().unwrap()
    )
}

/// One call of `tool` with `arguments` on `node`: the HTTP status and the tool result.
async fn call(node: &Remote, agent: &str, session: &Value, tool: &str, arguments: Value) -> Value {
    let body = json!({"name": tool, "arguments": arguments, "_meta": echo_of(session, tool)});
    let call = node.post(calls_path(session)).as_(agent).json(body);
    call.await.expect_ok()
}

/// `GET /invocations/{id}` on `node` as `token`, which must answer 200.
async fn invocation(node: &Remote, token: &str, id: &str) -> Value {
    let reply = node.get(format!("/invocations/{id}")).as_(token).await;
    reply.expect_ok()
}

/// Approves invocation `id` on `node` as `approver`, with the hashes `GET` shows there.
async fn approve(node: &Remote, approver: &str, id: &str) {
    let view = invocation(node, approver, id).await;
    let hashes =
        json!({"args_hash": view["args_hash"], "definition_hash": view["definition_hash"]});
    let approve = node
        .post(format!("/invocations/{id}:approve"))
        .as_(approver);
    approve.json(hashes).await.expect_status(StatusCode::OK);
}

/// Waits until invocation `id` has a final status (read on `node`); its view.
async fn finished(node: &Remote, token: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = invocation(node, token, id).await;
        if view["status"] == "completed" {
            return view;
        }
        assert!(Instant::now() < deadline, "{id} never finished: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The lines of the upstream's call log that are exactly `tool arguments`.
fn runs(log: &std::path::Path, tool: &str, arguments: &Value) -> usize {
    let line = format!("{tool} {arguments}");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == line)
        .count()
}

/// `aperture_calls_total` of `decision="allow", reason="ok"` on one node's `/metrics`.
async fn allowed_calls_on(node: &Remote) -> f64 {
    let body = node.get_raw("/metrics").as_(METRICS_TOKEN).await.text();
    body.lines()
        .filter(|l| {
            l.starts_with("aperture_calls_total{")
                && l.contains("decision=\"allow\"")
                && l.contains("reason=\"ok\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_share_everything_and_survive_losing_one() {
    let Some(postgres) = std::env::var("APERTURE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("APERTURE_TEST_POSTGRES_URL is not set: the two-node test does not run");
        return;
    };
    let model = ScriptedModel::start(vec![
        Step::calls(&[("t1", "agent", &background_fork("TASK-TAKEOVER", None))]),
        Step::text("The fork is on it."),
    ])
    .await;
    model.route(
        "TASK-TAKEOVER",
        vec![
            // Asked by the node that is killed: never answered there.
            hang(),
            Step::calls(&[("k1", ECHO, r#"{"text":"from the fork"}"#)]),
            Step::text("fork done"),
        ],
    );
    let cluster = Cluster::start(
        &postgres,
        &[
            ("APERTURE_MODEL_BASE_URL", model.base_url.as_str()),
            ("APERTURE_MODEL", "scripted-1"),
        ],
    );
    let (a, b) = (
        Remote::new(&cluster.nodes[0].0),
        Remote::new(&cluster.nodes[1].0),
    );
    let balancer = Remote::new(&cluster.balancer);
    let admin = cluster.token("ops", scope::ADMIN);
    let agent = cluster.token("agent", scope::RUN);
    let approver = cluster.token("alice", scope::APPROVE);
    let bot = cluster.token("bot", scope::RUN);

    // The upstream, registered through the balancer; its call log is shared by the fixture
    // processes both nodes start.
    let log = cluster.dir.path().join("upstream-calls.log");
    let mut command = fixture_command();
    command.extend(["--call-log".to_owned(), log.display().to_string()]);
    let fixture = json!({"name": "fixture", "transport": "stdio", "command": command});
    let registered = balancer.post("/upstreams").as_(&admin).json(fixture).await;
    registered.expect_status(StatusCode::CREATED);
    for (tool, risk) in [(ECHO, "read"), (ADD, "read"), (SLOW, "write")] {
        let described = balancer.put(format!("/tools/{tool}")).as_(&admin);
        let described = described.json(json!({"risk": [risk]})).await;
        described.expect_status(StatusCode::OK);
    }
    let policy = json!({"rules": [
        {"id": "approve-slow", "match": {"name": SLOW}, "mode": "approval_required",
         "invocation": {"max_duration_millis": 10000}},
        {"id": "limited-add", "match": {"name": ADD}, "mode": "allow",
         "invocation": {"rate_bucket": {"name": "add", "per_minute": PER_MINUTE}}},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    let put = a.put("/policies/p").as_(&admin).json(policy).await;
    put.expect_status(StatusCode::OK);
    // Written on A, activated on B.
    let activated = b.post("/policies/p:activate").as_(&admin).await;
    activated.expect_status(StatusCode::OK);

    // A session listed on A is called on B, and the other way round.
    let on_a = session(&a, &agent).await;
    let called = call(&b, &agent, &on_a, ECHO, json!({"text": "listed on A"})).await;
    assert_eq!(called["_meta"]["receipt"]["reason"], "ok", "{called}");
    let on_b = session(&b, &agent).await;
    let called = call(&a, &agent, &on_b, ECHO, json!({"text": "listed on B"})).await;
    assert_eq!(called["_meta"]["receipt"]["reason"], "ok", "{called}");

    // Calls through the balancer reach both nodes (each counts the calls it decided).
    let before = (allowed_calls_on(&a).await, allowed_calls_on(&b).await);
    let shared = session(&balancer, &agent).await;
    for n in 0..20 {
        let spread = json!({"text": format!("spread {n}")});
        let r = call(&balancer, &agent, &shared, ECHO, spread).await;
        assert_eq!(r["_meta"]["receipt"]["reason"], "ok", "{r}");
    }
    let after = (allowed_calls_on(&a).await, allowed_calls_on(&b).await);
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "both nodes took calls: {before:?} → {after:?}"
    );
    assert!(after.0 - before.0 + after.1 - before.1 >= 20.0);

    // Parked on A, heard of at once by an approver connected to B (NOTIFY), approved on B: it
    // runs once.
    let mut queue_on_b = SseReader::open(b.get("/invocations/events").as_(&approver)).await;
    let mut approved_ids = Vec::new();
    for n in 0..3u64 {
        let parked = call(&a, &agent, &on_a, SLOW, json!({"millis": 100 + n})).await;
        assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
        let id = text_of(&parked["_meta"]["invocation_id"]).to_owned();
        let heard = queue_on_b
            .expect("invocation.parked", &id, Duration::from_secs(5))
            .await;
        assert_eq!(heard["tool"], SLOW);
        approve(&b, &approver, &id).await;
        approved_ids.push((id, json!({"millis": 100 + n})));
    }
    for (id, arguments) in &approved_ids {
        let view = finished(&a, &approver, id).await;
        assert_eq!(view["result"]["_meta"]["receipt"]["reason"], "ok", "{view}");
        assert_eq!(runs(&log, "slow", arguments), 1, "{id} ran once");
    }

    // One rate bucket across the nodes: exactly PER_MINUTE calls of `add` in a minute, whichever
    // node decides them.
    let into_minute = aperture_core::store::now_ms() % 60_000;
    if into_minute > 40_000 {
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(61_000 - into_minute).unwrap(),
        ))
        .await;
    }
    let mut outcomes = Vec::new();
    for n in 0..(2 * PER_MINUTE) {
        let (node, s) = if n % 2 == 0 { (&a, &on_a) } else { (&b, &on_a) };
        let r = call(node, &agent, s, ADD, json!({"a": 1000, "b": n})).await;
        outcomes.push(r["_meta"]["receipt"]["reason"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        outcomes.iter().filter(|r| *r == "ok").count(),
        PER_MINUTE,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|r| *r == "rate_limited").count(),
        PER_MINUTE,
        "{outcomes:?}"
    );
    let added = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("add {\"a\":1000"))
        .count();
    assert_eq!(added, PER_MINUTE, "the refused calls never ran");

    // A token revoked on A is refused at its next call on B.
    let temp = json!({"actor_id": "temp", "scopes": [scope::RUN]});
    let created = a.post("/tokens").as_(&admin).json(temp).await;
    let created = created.expect_created();
    let temp = created["secret"].as_str().unwrap().to_owned();
    let temp_session = session(&b, &temp).await;
    let temp_id = created["token"]["id"].as_str().unwrap();
    let revoked = a.delete(format!("/tokens/{temp_id}")).as_(&admin).await;
    assert!(revoked.status().is_success(), "{}", revoked.status());
    let after = json!({"name": ECHO, "arguments": {"text": "after revocation"}, "_meta": echo_of(&temp_session, ECHO)});
    let refused = b.post(calls_path(&temp_session));
    let refused = refused.as_(&temp).json(after).await;
    refused.expect_status(StatusCode::UNAUTHORIZED);

    // Node A now runs: a background hosted agent (waiting for its model), approved invocations
    // (released on A, whose worker is woken), and one call stays parked.
    let created = new_agent(&a, &bot).await.json();
    let parent = created["agent_id"].as_str().unwrap().to_owned();
    let turned = turn(&a, &bot, &parent, "Start the fork.").await.expect_ok();
    let fork = started(&turned).remove(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sent_with(&model, "TASK-TAKEOVER").is_empty() {
        assert!(Instant::now() < deadline, "the fork never asked its model");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let parked = call(&a, &agent, &on_a, SLOW, json!({"millis": 1})).await;
    let still_parked = text_of(&parked["_meta"]["invocation_id"]).to_owned();
    let mut in_flight = Vec::new();
    for n in 0..4u64 {
        let arguments = json!({"millis": 400 + n});
        let parked = call(&a, &agent, &on_a, SLOW, arguments.clone()).await;
        let id = text_of(&parked["_meta"]["invocation_id"]).to_owned();
        approve(&a, &approver, &id).await;
        in_flight.push((id, arguments));
    }

    // The burst through the balancer; A is killed after the 100th answer.
    let answered = Arc::new(AtomicUsize::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..16 {
        let (balancer, calls, agent, echo, answered) = (
            balancer.clone(),
            calls_path(&shared),
            agent.clone(),
            echo_of(&shared, ECHO),
            answered.clone(),
        );
        clients.spawn(async move {
            let (mut received, mut failed) = (Vec::new(), 0);
            for n in 0..40 {
                let body = json!({"name": ECHO, "arguments": {"text": format!("burst {c}-{n}")}, "_meta": echo});
                let response = balancer.post(&calls).as_(&agent).json(body).try_send().await;
                let result = match response {
                    Ok(r) if r.status() == StatusCode::OK => serde_json::from_str::<Value>(&r.text()).ok(),
                    _ => None,
                };
                match result {
                    Some(result) => {
                        answered.fetch_add(1, Ordering::SeqCst);
                        received.push(result["_meta"]["receipt"].clone());
                    }
                    None => failed += 1,
                }
            }
            (received, failed)
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while answered.load(Ordering::SeqCst) < 100 {
        assert!(Instant::now() < deadline, "the burst never got 100 answers");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let killed = Command::new("kill")
        .args(["-KILL", &cluster.nodes[0].1.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let at_kill = answered.load(Ordering::SeqCst);
    let mut received = Vec::new();
    for (r, _failed) in clients.join_all().await {
        received.extend(r);
    }
    assert!(
        received.len() > at_kill,
        "B went on answering through the balancer after A died ({at_kill} → {})",
        received.len()
    );
    assert!(
        received.iter().all(|r| r["reason"] == "ok"),
        "every answer a client got is a whole, allowed call"
    );

    // Every receipt a client received is in the journal, as signed.
    crate::crash::assert_in_journal(&b, &admin, &received).await;

    // The parked call survived; B finishes what A's worker had not; none ran twice and each
    // outcome agrees with what reached the upstream.
    let view = invocation(&b, &approver, &still_parked).await;
    assert_eq!(view["status"], "input_required", "{view}");
    for (id, arguments) in &in_flight {
        let view = finished(&b, &approver, id).await;
        let reason = text_of(&view["result"]["_meta"]["receipt"]["reason"]);
        let ran = runs(&log, "slow", arguments);
        match reason {
            "ok" => assert_eq!(ran, 1, "{id} {arguments}: ok, so it ran exactly once"),
            // Interrupted by the kill while running: it reached the upstream at most once.
            "upstream_error" => assert!(ran <= 1, "{id} {arguments} ran {ran} times"),
            other => panic!("{id}: unexpected outcome {other}: {view}"),
        }
    }

    // The fork A was running is taken over by B once A's heartbeat is stale.
    let deadline = Instant::now() + Duration::from_secs(60);
    let fork_view = loop {
        let view = agent_view(&b, &bot, &fork).await;
        if view["agent"]["status"] == "idle" {
            break view;
        }
        assert!(
            Instant::now() < deadline,
            "the fork was not taken over: {view}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let last = fork_view["transcript"].as_array().unwrap().last().unwrap();
    assert_eq!(last["body"]["content"], "fork done", "{fork_view}");
    assert_eq!(
        runs(&log, "echo", &json!({"text": "from the fork"})),
        1,
        "the revived fork's call ran once"
    );
    assert_eq!(sent_with(&model, "TASK-TAKEOVER").len(), 3);

    // The journal verifies, checkpoints included.
    let verify = cluster.cli(&["journal", "verify"]);
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(report.contains("tenant default: verified"), "{report}");
    drop(cluster);
}
