//! Background forks (issue 7, item 4): `run_in_background` starts a sub-agent apart from its
//! parent's turn; its answer reaches the parent at the parent's next turn; after a `kill -9` of
//! the server a running background fork is revived from its persisted records with its
//! AgentMeta sidecar reapplied (`[]`, a list, or none: unrestricted), and one whose parent is
//! gone stays paused.

use std::time::{Duration, Instant};

use aperture_core::agents::model::ModelConfig;
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::cli::aperture;
use crate::crash::{add_fixture_upstream, serve_with, token};
use crate::helpers::{Call, Db, Requests, TestApp, TestDb, find, text_of};
use crate::model_fixture::{ScriptedModel, Step};

const ECHO: &str = "mcp__fixture__echo";
const ADD: &str = "mcp__fixture__add";
const SLOW: &str = "mcp__fixture__slow";
const RESTRICTED: &str = "was not executed: fork_tools restricts this fork";

/// The arguments of an `agent` call starting a background fork.
pub(crate) fn background_fork(prompt: &str, fork_tools: Option<&[&str]>) -> String {
    let mut call = json!({"subagent_type": "fork", "prompt": prompt, "run_in_background": true});
    if let Some(tools) = fork_tools {
        call["fork_tools"] = json!(tools);
    }
    call.to_string()
}

/// A model answer that never comes in time (the server is killed while waiting for it).
pub(crate) fn hang() -> Step {
    Step::Delay(Duration::from_secs(600), Box::new(Step::text("too late")))
}

/// `POST /agents` (with no settings) as `token`.
pub(crate) fn new_agent(node: &impl Requests, token: &str) -> Call {
    node.post("/agents").as_(token).json(json!({}))
}

/// A turn of agent `id` saying `message`, as `token`.
pub(crate) fn turn(node: &impl Requests, token: &str, id: &str, message: &str) -> Call {
    let turns = node.post(format!("/agents/{id}/turns")).as_(token);
    turns.json(json!({ "message": message }))
}

/// `GET /agents/{id}` as `token`, which must answer 200.
pub(crate) async fn agent_view(node: &impl Requests, token: &str, id: &str) -> Value {
    let reply = node.get(format!("/agents/{id}")).as_(token).await;
    reply.expect_ok()
}

/// Waits until agent `id` is no longer running; returns `GET /agents/{id}`.
async fn settled(node: &impl Requests, token: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let agent = agent_view(node, token, id).await;
        if agent["agent"]["status"] != "running" {
            return agent;
        }
        assert!(Instant::now() < deadline, "{id} still running: {agent}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The tool answers of an agent's transcript, `(call id, content)` in order.
fn answers(agent: &Value) -> Vec<(String, String)> {
    agent["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["body"]["role"] == "tool")
        .map(|r| {
            (
                r["body"]["tool_call_id"].as_str().unwrap().to_owned(),
                r["body"]["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The ids of the sub-agents a turn's `agent` calls started, in call order.
pub(crate) fn started(turned: &Value) -> Vec<String> {
    turned["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tool_result" && e["name"] == "agent")
        .map(|e| {
            assert_eq!(e["outcome"], "started", "{e}");
            let content = e["content"].as_str().unwrap();
            let id = content
                .split_whitespace()
                .find(|w| w.starts_with("agt_"))
                .unwrap_or_else(|| panic!("no agent id in {content}"));
            id.to_owned()
        })
        .collect()
}

/// The requests the model got whose user messages contain `marker`.
pub(crate) fn sent_with(model: &ScriptedModel, marker: &str) -> Vec<Value> {
    model
        .requests()
        .iter()
        .map(|r| r.json())
        .filter(|body| {
            body["messages"].as_array().unwrap().iter().any(|m| {
                m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.contains(marker))
            })
        })
        .collect()
}

#[tokio::test]
async fn a_background_fork_runs_apart_and_reports_to_the_parents_next_turn() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[(
            "p1",
            "agent",
            &background_fork("BG-TASK: echo it", Some(&[ECHO])),
        )]),
        Step::text("Started it."),
        Step::text("Thanks for the report."),
        Step::text("Nothing new."),
    ])
    .await;
    model.route(
        "BG-TASK",
        vec![
            Step::calls(&[
                ("f1", ECHO, r#"{"text":"from the background"}"#),
                ("f2", ADD, r#"{"a":1,"b":2}"#),
            ]),
            Step::text("Echoed; add was not mine to run."),
        ],
    );
    let base_url = model.base_url.clone();
    let app = TestApp::spawn_with(Db::Sqlite, move |c| {
        c.model = Some(ModelConfig {
            base_url,
            api_key: None,
            model: "scripted-1".into(),
            timeout: Duration::from_secs(10),
        });
    })
    .await
    .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, ADD]).await;
    let bot = app.token("default", "bot", &[scope::RUN]).await;
    let created = new_agent(&app, &bot).await.expect_created();
    let parent = created["agent_id"].as_str().unwrap().to_owned();

    // The parent's turn does not wait for the fork.
    let turned = turn(&app, &bot, &parent, "Delegate.").await.expect_ok();
    assert_eq!(turned["status"], "completed", "{turned}");
    let fork = started(&turned).remove(0);
    let done = settled(&app, &bot, &fork).await;
    assert_eq!(done["agent"]["background"], true, "{done}");
    assert_eq!(done["agent"]["status"], "idle", "{done}");
    assert_eq!(done["turns"][0]["status"], "completed", "{done}");
    let answered = answers(&done);
    assert_eq!(answered[0], ("f1".into(), "from the background".into()));
    assert_eq!(answered[1].0, "f2");
    assert!(answered[1].1.contains(RESTRICTED), "{}", answered[1].1);

    // The parent's next turn starts with the fork's answer, once.
    let next = turn(&app, &bot, &parent, "Any news?").await.json();
    assert_eq!(next["status"], "completed", "{next}");
    let events = next["events"].as_array().unwrap();
    assert_eq!(events[0]["type"], "subagent_report", "{next}");
    assert_eq!(events[0]["agent_id"], fork.as_str());
    assert_eq!(events[0]["status"], "completed");
    assert_eq!(events[1], json!({"type": "user", "content": "Any news?"}));
    let sent = model.requests().last().unwrap().json();
    let messages = sent["messages"].as_array().unwrap();
    let report = &messages[messages.len() - 2];
    assert_eq!(report["role"], "user");
    assert!(
        text_of(&report["content"]).contains("Echoed; add was not mine to run."),
        "{report}"
    );
    let again = turn(&app, &bot, &parent, "And now?").await.json();
    assert!(
        again["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["type"] != "subagent_report"),
        "{again}"
    );
}

/// Issue 7: "restart the server with a running background fork restricted to `[]` and to a
/// non-empty list; after revival the restriction holds and the tool is never constructed; a
/// record without the field revives unrestricted" — and "a fork whose parent is gone stays
/// paused with a clear status". Also a foreground turn cut off mid-call: it ends as failed, the
/// call it left unanswered gets an error answer, and the agent's next turn works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_forks_are_revived_after_a_kill_with_their_restriction() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let admin = token(&db, "ops", scope::ADMIN);
    let bot = token(&db, "bot", scope::RUN);
    let log = db.data_dir().join("upstream-calls.log");
    add_fixture_upstream(&db, &["--call-log".to_owned(), log.display().to_string()]);
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            ("a1", "agent", &background_fork("TASK-NONE", Some(&[]))),
            ("a2", "agent", &background_fork("TASK-ECHO", Some(&[ECHO]))),
            ("a3", "agent", &background_fork("TASK-FREE", None)),
        ]),
        Step::text("Three forks started."),
        Step::calls(&[("b1", "agent", &background_fork("TASK-ORPHAN", None))]),
        Step::text("One fork started."),
        Step::calls(&[("s1", SLOW, r#"{"millis":600000}"#)]),
        Step::text("Noted."),
        Step::text("Recovered."),
    ])
    .await;
    model.route(
        "TASK-NONE",
        vec![
            hang(),
            Step::calls(&[("n1", ECHO, r#"{"text":"from none"}"#)]),
            Step::text("none done"),
        ],
    );
    model.route(
        "TASK-ECHO",
        vec![
            hang(),
            Step::calls(&[
                ("e1", ECHO, r#"{"text":"from echo"}"#),
                ("e2", ADD, r#"{"a":1,"b":2}"#),
            ]),
            Step::text("echo done"),
        ],
    );
    model.route(
        "TASK-FREE",
        vec![
            hang(),
            Step::calls(&[("f1", ADD, r#"{"a":2,"b":3}"#)]),
            Step::text("free done"),
        ],
    );
    model.route("TASK-ORPHAN", vec![hang()]);
    let env = [
        ("APERTURE_MODEL_BASE_URL", model.base_url.as_str()),
        ("APERTURE_MODEL", "scripted-1"),
    ];

    let (mut server, node) = serve_with(&db, &env).await;
    for tool in [ECHO, ADD, SLOW] {
        let read = json!({"risk": ["read"]});
        let described = node.put(format!("/tools/{tool}")).as_(&admin).json(read);
        described.await.expect_status(StatusCode::OK);
    }
    let created = new_agent(&node, &bot).await.json();
    let parent = created["agent_id"].as_str().unwrap().to_owned();
    let turned = turn(&node, &bot, &parent, "Start three forks.").await;
    let turned = turned.expect_ok();
    let forks = started(&turned);
    assert_eq!(forks.len(), 3, "{turned}");
    let created = new_agent(&node, &bot).await.json();
    let orphan_parent = created["agent_id"].as_str().unwrap().to_owned();
    let turned = turn(&node, &bot, &orphan_parent, "Start one fork.").await;
    let orphan = started(&turned.json()).remove(0);
    // A third agent's turn is in the middle of a long call when the server dies.
    let created = new_agent(&node, &bot).await.json();
    let cut_off = created["agent_id"].as_str().unwrap().to_owned();
    let cut_turn = turn(&node, &bot, &cut_off, "Take your time.");
    let cut_turn = tokio::spawn(cut_turn.try_send());
    // Every fork is waiting for its model when the server dies.
    let deadline = Instant::now() + Duration::from_secs(20);
    for marker in ["TASK-NONE", "TASK-ECHO", "TASK-FREE", "TASK-ORPHAN"] {
        while sent_with(&model, marker).is_empty() {
            assert!(Instant::now() < deadline, "{marker} never asked its model");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The orphan's parent goes away (its session is revoked) before the restart.
    let revoke = node.post(format!("/sessions/{orphan_parent}:revoke"));
    revoke.as_(&bot).await.expect_status(StatusCode::OK);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("slow ")
    {
        assert!(Instant::now() < deadline, "the slow call never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for running in forks.iter().chain([&orphan, &cut_off]) {
        let agent = agent_view(&node, &bot, running).await;
        assert_eq!(agent["agent"]["status"], "running", "{agent}");
    }
    server.kill().expect("SIGKILL");
    let _ = server.wait();
    assert!(
        cut_turn.await.unwrap().is_err(),
        "the cut-off turn had no answer"
    );

    let (mut server, node) = serve_with(&db, &env).await;
    let none = settled(&node, &bot, &forks[0]).await;
    let echo = settled(&node, &bot, &forks[1]).await;
    let free = settled(&node, &bot, &forks[2]).await;
    let paused = settled(&node, &bot, &orphan).await;

    // `[]` still denies everything; the list still allows only its tool; no field: unrestricted.
    for (agent, answer) in [
        (&none, "none done"),
        (&echo, "echo done"),
        (&free, "free done"),
    ] {
        assert_eq!(agent["agent"]["status"], "idle", "{agent}");
        assert_eq!(agent["turns"][0]["status"], "completed", "{agent}");
        let last = agent["transcript"].as_array().unwrap().last().unwrap();
        assert_eq!(last["body"]["content"], answer, "{agent}");
    }
    assert_eq!(none["agent"]["execution_allowed_tools"], json!([]));
    let none_answers = answers(&none);
    assert_eq!(none_answers.len(), 1);
    assert!(none_answers[0].1.contains(RESTRICTED), "{none_answers:?}");
    let echo_answers = answers(&echo);
    assert_eq!(echo_answers[0], ("e1".into(), "from echo".into()));
    assert!(echo_answers[1].1.contains(RESTRICTED), "{echo_answers:?}");
    assert_eq!(free["agent"]["execution_allowed_tools"], Value::Null);
    assert_eq!(answers(&free), [("f1".to_owned(), "5".to_owned())]);
    // What reached the upstream: the allowed calls, never the restricted ones.
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(calls.contains(r#"echo {"text":"from echo"}"#), "{calls}");
    assert!(calls.contains(r#"add {"a":2,"b":3}"#), "{calls}");
    assert!(!calls.contains("from none"), "{calls}");
    assert!(!calls.contains(r#""a":1"#), "{calls}");
    // Nor was a restricted call authorized: the `[]` fork's journal holds its manifests and,
    // for each call, an `execution_allowlist` denial (every decision is journaled, issue 23).
    let receipts = node.get(format!("/receipts?session_id={}", forks[0]));
    let receipts = receipts.as_(&admin).await.expect_ok();
    let kinds: Vec<(&str, &str)> = receipts["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    assert!(
        kinds.contains(&("manifest", "ok"))
            && kinds.contains(&("decision", "execution_allowlist"))
            && kinds
                .iter()
                .all(|k| *k == ("manifest", "ok") || *k == ("decision", "execution_allowlist")),
        "{kinds:?}"
    );

    // Issue 45 item 2: a revived fork's records name the turn's caller, the bot's token.
    let tokens = node.get("/tokens").as_(&admin).await.expect_ok();
    let bot_id = find(&tokens["tokens"], "actor_id", "bot")["id"].clone();
    for r in receipts["receipts"].as_array().unwrap() {
        let one = node.get(format!("/receipts/{}", r["receipt_id"].as_str().unwrap()));
        let one = one.as_(&admin).await.expect_ok();
        assert_eq!(one["receipt"]["principal"], bot_id, "{one}");
    }

    // Revived from the live parent: its instruction and declarations, byte for byte; the
    // bootstrap history and the launch prompt from the records.
    let parent_sent = model.requests()[0].json();
    for marker in ["TASK-NONE", "TASK-ECHO", "TASK-FREE"] {
        let sent = sent_with(&model, marker);
        assert_eq!(
            sent.len(),
            3,
            "{marker}: before the kill, after revival, the end"
        );
        let (before, revived) = (&sent[0], &sent[1]);
        assert_eq!(
            serde_json::to_vec(&revived["tools"]).unwrap(),
            serde_json::to_vec(&parent_sent["tools"]).unwrap(),
            "{marker}"
        );
        assert_eq!(revived["messages"], before["messages"], "{marker}");
    }

    assert_eq!(paused["agent"]["status"], "paused", "{paused}");
    let reason = paused["agent"]["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&orphan_parent) && reason.contains("gone"),
        "{reason}"
    );
    assert_eq!(sent_with(&model, "TASK-ORPHAN").len(), 1);

    // The parent hears of all three at its next turn.
    let next = turn(&node, &bot, &parent, "What happened?").await.json();
    let reported: Vec<&str> = next["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "subagent_report")
        .map(|e| e["agent_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        reported,
        forks.iter().map(String::as_str).collect::<Vec<_>>()
    );

    // The cut-off turn ended as failed; its call got an error answer; the next turn works and
    // sends the model a conversation in which every call is answered.
    let interrupted = settled(&node, &bot, &cut_off).await;
    assert_eq!(interrupted["agent"]["status"], "idle", "{interrupted}");
    assert!(
        text_of(&interrupted["agent"]["status_reason"]).contains("the server stopped"),
        "{interrupted}"
    );
    assert_eq!(interrupted["turns"][0]["status"], "failed", "{interrupted}");
    let again = turn(&node, &bot, &cut_off, "Are you there?").await.json();
    assert_eq!(again["status"], "completed", "{again}");
    let sent = model.requests().last().unwrap().json();
    let messages = sent["messages"].as_array().unwrap();
    let answer = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "s1")
        .unwrap_or_else(|| panic!("s1 unanswered: {sent}"));
    assert!(
        text_of(&answer["content"])
            .starts_with("Error: the turn ended before this call was answered"),
        "{answer}"
    );
    server.kill().unwrap();
    let _ = server.wait();
}

/// A foreground fork whose call is parked does not hold its parent's turn: the parent is told it
/// waits, the fork goes on by itself once the call is approved, and the parent hears its answer
/// at its next turn.
#[tokio::test]
async fn a_fork_left_waiting_for_an_approval_reports_when_it_finishes() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[(
            "p1",
            "agent",
            r#"{"subagent_type":"fork","prompt":"PARK-TASK: echo it"}"#,
        )]),
        Step::text("The fork waits for a person."),
        Step::text("The fork is done."),
    ])
    .await;
    model.route(
        "PARK-TASK",
        vec![
            Step::calls(&[("f1", ECHO, r#"{"text":"approved in the fork"}"#)]),
            Step::text("Echoed after approval."),
        ],
    );
    let base_url = model.base_url.clone();
    let app = TestApp::spawn_with(Db::Sqlite, move |c| {
        c.model = Some(ModelConfig {
            base_url,
            api_key: None,
            model: "scripted-1".into(),
            timeout: Duration::from_secs(10),
        });
    })
    .await
    .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let park = json!({"rules": [{"id": "echo-needs-a-person", "match": {"name": ECHO}, "mode": "approval_required"}]});
    let put = app.put("/policies/fork-approve");
    let put = put.as_(&admin).json(park).await;
    put.expect_status(StatusCode::OK);
    let activate = app.post("/policies/fork-approve:activate").as_(&admin);
    activate.json(json!({})).await.expect_status(StatusCode::OK);
    let bot = app.token("default", "bot", &[scope::RUN]).await;
    let created = new_agent(&app, &bot).await.json();
    let parent = created["agent_id"].as_str().unwrap().to_owned();

    let turned = turn(&app, &bot, &parent, "Delegate.").await.json();
    assert_eq!(turned["status"], "completed", "{turned}");
    let fork = started(&turned).remove(0);
    let waiting = find(&turned["events"], "name", "agent")["content"].clone();
    assert!(
        text_of(&waiting).contains("waiting for a person"),
        "{waiting}"
    );
    let shown = agent_view(&app, &bot, &fork).await;
    assert_eq!(shown["agent"]["status"], "input_required", "{shown}");
    let invocation = &shown["invocations"][0];
    let id = invocation["invocation_id"].as_str().unwrap();
    let hashes = json!({"args_hash": invocation["args_hash"], "definition_hash": invocation["definition_hash"]});
    let approved = app.post(format!("/invocations/{id}:approve")).as_(&admin);
    approved.json(hashes).await.expect_status(StatusCode::OK);
    let done = settled_idle(&app, &bot, &fork).await;
    assert_eq!(
        answers(&done),
        [("f1".to_owned(), "approved in the fork".to_owned())]
    );

    let next = turn(&app, &bot, &parent, "And?").await.json();
    let report = &next["events"][0];
    assert_eq!(report["type"], "subagent_report", "{next}");
    assert_eq!(report["agent_id"], fork.as_str());
    assert!(
        text_of(&report["content"]).contains("Echoed after approval."),
        "{report}"
    );
}

/// Waits until agent `id` is idle (a parked turn continues in the background).
async fn settled_idle(app: &TestApp, token: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let agent = agent_view(app, token, id).await;
        if agent["agent"]["status"] == "idle" {
            return agent;
        }
        assert!(Instant::now() < deadline, "{id} not idle: {agent}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two runs never both hold an agent: once another run claims it (the first one's heartbeat
/// was stale), the first run's heartbeat reports it lost and its writes do not land.
#[tokio::test]
async fn a_run_that_lost_its_agent_cannot_record_anything() {
    use aperture_core::store::agents::{self, TurnEnd};
    let app = TestApp::spawn().await;
    let bot = app.token("default", "bot", &[scope::RUN]).await;
    let created = new_agent(&app, &bot).await.json();
    let id = created["agent_id"].as_str().unwrap();
    let store = &app.store;
    assert!(
        agents::claim(store, id, "idle", "run_a", 1_000)
            .await
            .unwrap()
    );
    // Busy: no second claim from idle.
    assert!(
        !agents::claim(store, id, "idle", "run_b", 1_001)
            .await
            .unwrap()
    );
    assert!(
        agents::still_running(store, id, "run_a", 2_000)
            .await
            .unwrap()
    );
    // Not stale yet: nobody takes it over.
    assert!(
        !agents::claim_stale(store, id, 2_000, "run_b", 3_000)
            .await
            .unwrap()
    );
    // Stale: run B takes it over; run A has lost it.
    assert!(
        agents::claim_stale(store, id, 2_001, "run_b", 13_000)
            .await
            .unwrap()
    );
    assert!(
        !agents::still_running(store, id, "run_a", 13_001)
            .await
            .unwrap()
    );
    let turn = TurnEnd {
        turn_id: "trn_none",
        status: "completed",
        model_calls: 1,
        error: None,
    };
    assert!(
        !agents::release(store, id, "run_a", "idle", None, Some(turn), 13_002)
            .await
            .unwrap()
    );
    let row = agents::find(store, "default", id).await.unwrap().unwrap();
    assert_eq!(
        (row.status.as_str(), row.runner.as_deref()),
        ("running", Some("run_b"))
    );
    assert!(
        agents::release(store, id, "run_b", "idle", None, None, 13_003)
            .await
            .unwrap()
    );
    let row = agents::find(store, "default", id).await.unwrap().unwrap();
    assert_eq!((row.status.as_str(), row.runner), ("idle", None));

    // A parked agent is continued once per state it was seen in: a node that read it before
    // another node continued it (and it parked again) cannot continue or settle it.
    assert!(
        agents::claim(store, id, "idle", "run_c", 20_000)
            .await
            .unwrap()
    );
    assert!(
        agents::release(store, id, "run_c", "input_required", None, None, 20_001)
            .await
            .unwrap()
    );
    let seen = agents::find(store, "default", id)
        .await
        .unwrap()
        .unwrap()
        .updated_at;
    assert!(
        agents::claim_parked(store, id, seen, "trn_none", "run_d", seen)
            .await
            .unwrap()
    );
    assert!(
        agents::release(store, id, "run_d", "input_required", None, None, seen)
            .await
            .unwrap()
    );
    assert!(
        !agents::claim_parked(store, id, seen, "trn_none", "run_e", seen + 5)
            .await
            .unwrap()
    );
    assert!(!agents::settle(store, id, seen, seen + 5).await.unwrap());
    // Writes by a run that does not hold the agent do not land.
    let refused = agents::append_held(
        store,
        id,
        &[("message", None, "{}".into())],
        "run_d",
        30_000,
    )
    .await;
    assert!(refused.is_err());
    assert!(agents::records(store, id).await.unwrap().is_empty());
}

/// Issue 45 item 3, revival: a background fork revived after a restart reads its parent's live
/// grant and never grants the parent anything. When the parent's lease ended while the server
/// was down, the fork pauses with `lease_expired` (it goes on once the parent lists again), and
/// the parent's session has no manifest more than before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revived_fork_whose_parent_s_lease_ended_pauses_and_grants_nothing() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let admin = token(&db, "ops", scope::ADMIN);
    let bot = token(&db, "bot", scope::RUN);
    add_fixture_upstream(&db, &[]);
    let model = ScriptedModel::start(vec![
        Step::calls(&[("a1", "agent", &background_fork("TASK-LATE", None))]),
        Step::text("One fork started."),
    ])
    .await;
    model.route("TASK-LATE", vec![hang(), Step::text("late done")]);
    let env = [
        ("APERTURE_MODEL_BASE_URL", model.base_url.as_str()),
        ("APERTURE_MODEL", "scripted-1"),
    ];
    let (mut server, node) = serve_with(&db, &env).await;
    let read = json!({"risk": ["read"]});
    let described = node.put(format!("/tools/{ECHO}")).as_(&admin).json(read);
    described.await.expect_status(StatusCode::OK);
    // Every grant under this policy lasts 3 s (the shortest `expires_after_seconds` of its
    // listed tools bounds the lease).
    let policy = json!({"rules": [{"id": "short", "match": {"name": ECHO}, "mode": "allow",
                                   "invocation": {"expires_after_seconds": 3}}]});
    let put = node.put("/policies/short").as_(&admin).json(policy).await;
    put.expect_status(StatusCode::OK);
    let activate = node.post("/policies/short:activate").as_(&admin);
    activate.json(json!({})).await.expect_status(StatusCode::OK);
    let created = new_agent(&node, &bot).await.json();
    let parent = created["agent_id"].as_str().unwrap().to_owned();
    let turned = turn(&node, &bot, &parent, "Start a fork.")
        .await
        .expect_ok();
    let fork = started(&turned).remove(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sent_with(&model, "TASK-LATE").is_empty() {
        assert!(Instant::now() < deadline, "the fork never asked its model");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.kill().expect("SIGKILL");
    let _ = server.wait();
    let manifests_of = |session: String| {
        let url = db.url.clone();
        async move {
            let store = aperture_core::store::Store::connect(&url).await.unwrap();
            let (n,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM manifests WHERE session_id = $1")
                    .bind(session)
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            store.close().await;
            n
        }
    };
    let parent_manifests = manifests_of(parent.clone()).await;
    assert_eq!(parent_manifests, 1, "the parent's turn listed once");
    // The parent's (and so the fork's) lease ends while the server is down.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let (mut server, node) = serve_with(&db, &env).await;
    let paused = settled(&node, &bot, &fork).await;
    assert_eq!(paused["agent"]["status"], "paused", "{paused}");
    let reason = paused["agent"]["status_reason"].as_str().unwrap();
    assert!(reason.starts_with("lease_expired"), "{reason}");
    assert_eq!(
        manifests_of(parent.clone()).await,
        parent_manifests,
        "reviving the fork granted its parent nothing"
    );
    assert_eq!(sent_with(&model, "TASK-LATE").len(), 1, "nothing more ran");
    server.kill().expect("SIGKILL");
    let _ = server.wait();
}
