//! Hosted agents (issue 7, item 2): turns against the scripted model server, every function call
//! through `process_function_calls` — declared? → execution allowlist → the checks of
//! `tools/call` with a durable receipt → executed against the real fixture upstream — answered
//! in call order; and a turn that fails, or runs out of model calls, ends clearly.

use std::time::Duration;

use aperture_core::agents::model::ModelConfig;
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Db, Requests, TestApp, echo_of, rpc, text_of, texts_of};
use crate::model_fixture::{ScriptedModel, Step};

const ECHO: &str = "mcp__fixture__echo";

async fn app_with_model(base_url: &str) -> TestApp {
    app_with_model_on(Db::Sqlite, base_url).await.unwrap()
}

/// `None` when `db` is PostgreSQL and no test database is configured.
async fn app_with_model_on(db: Db, base_url: &str) -> Option<TestApp> {
    let base_url = base_url.to_owned();
    TestApp::spawn_with(db, move |c| {
        c.model = Some(ModelConfig {
            base_url,
            api_key: Some("sk-agents".into()),
            model: "scripted-1".into(),
            timeout: Duration::from_secs(10),
        });
    })
    .await
}

async fn create_agent(app: &TestApp, token: &str, body: Value) -> String {
    let agent = app.post("/agents").as_(token).json(body).await;
    let agent = agent.expect_created();
    let id = agent["agent_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("agt_"), "{agent}");
    id
}

async fn turn(app: &TestApp, token: &str, agent: &str, message: &str) -> (StatusCode, Value) {
    let turn = app.post(format!("/agents/{agent}/turns")).as_(token);
    let response = turn.json(json!({ "message": message })).await;
    (response.status(), response.json())
}

#[tokio::test]
async fn a_turn_declares_the_manifest_runs_allowed_calls_and_answers_in_call_order() {
    declares_runs_and_answers_in_order(Db::Sqlite).await;
}

#[tokio::test]
async fn a_turn_declares_the_manifest_runs_allowed_calls_and_answers_in_call_order_postgres() {
    declares_runs_and_answers_in_order(Db::Postgres).await;
}

async fn declares_runs_and_answers_in_order(db: Db) {
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            ("c1", ECHO, r#"{"text":"hi there"}"#),
            ("c2", "mcp__fixture__getenv", r#"{"name":"HOME"}"#),
            ("c3", ECHO, r#"{"text": "#),
        ]),
        Step::text("Said hi."),
    ])
    .await;
    let Some(app) = app_with_model_on(db, &model.base_url).await else {
        return;
    };
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let agent_token = app.token("default", "helper-bot", &[scope::RUN]).await;
    let agent = create_agent(
        &app,
        &agent_token,
        json!({"system_instruction": "Be brief.", "max_turns": 4}),
    )
    .await;

    let (status, turned) = turn(&app, &agent_token, &agent, "Say hi.").await;
    assert_eq!(status, StatusCode::OK, "{turned}");
    assert_eq!(turned["status"], "completed", "{turned}");
    assert_eq!(turned["model_calls"], 2);
    let turn_id = turned["turn_id"].as_str().unwrap();
    let events = turned["events"].as_array().unwrap();
    let results: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| {
            (
                e["tool_call_id"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    // In call order: executed against the upstream, not declared (the policy hides getenv),
    // and refused by the decision (arguments that are not JSON) with a receipt.
    assert_eq!(
        results,
        [("c1", "executed"), ("c2", "not_declared"), ("c3", "denied")]
    );
    let result = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["tool_call_id"] == id)
            .unwrap()
    };
    assert_eq!(result("c1")["content"], "hi there");
    assert_eq!(
        result("c2")["content"],
        "Error: tool \"mcp__fixture__getenv\" not found."
    );
    // Refused before the checks of `tools/call`, and journaled all the same (issue 23).
    let refusal = result("c2")["receipt_id"].as_str().unwrap().to_owned();
    let stored = app.get(format!("/receipts/{refusal}")).as_(&admin).await;
    let stored = stored.json();
    assert_eq!(stored["receipt"]["decision"], "deny", "{stored}");
    assert_eq!(stored["receipt"]["reason"], "not_callable", "{stored}");
    assert_eq!(stored["receipt"]["tool"], "mcp__fixture__getenv");
    assert_eq!(stored["receipt"]["turn_id"], turn_id);
    assert!(
        result("c3")["receipt_id"]
            .as_str()
            .unwrap()
            .starts_with("rcp_")
    );
    assert_eq!(events.last().unwrap()["status"], "completed");

    // What the model was sent: the manifest's declarations, the same on both requests, and
    // the answers in call order after the assistant's calls.
    let sent = model.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer sk-agents"));
    let first = sent[0].json();
    assert_eq!(
        first["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Say hi."}
        ])
    );
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [ECHO, "agent"]);
    assert_eq!(
        first["tools"][0]["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );
    let second = sent[1].json();
    assert_eq!(second["tools"], first["tools"]);
    let tail: Vec<(&str, &str)> = second["messages"].as_array().unwrap()[3..]
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["tool_call_id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(tail, [("tool", "c1"), ("tool", "c2"), ("tool", "c3")]);
    assert_eq!(second["messages"][3]["content"], "hi there");

    // The calls' receipts name the agent as session and carry the turn.
    let receipts = app.get(format!(
        "/receipts?session_id={agent}&decision=allow&tool={ECHO}"
    ));
    let receipts = receipts.as_(&admin).await.json();
    let found = receipts["receipts"].as_array().unwrap();
    assert!(!found.is_empty(), "{receipts}");
    assert!(found.iter().all(|r| r["turn_id"] == turn_id), "{receipts}");

    // The transcript and the turn are stored; the agent is idle again.
    let shown = app.get(format!("/agents/{agent}")).as_(&agent_token).await;
    let shown = shown.json();
    assert_eq!(shown["agent"]["status"], "idle");
    assert_eq!(shown["transcript"].as_array().unwrap().len(), 6, "{shown}");
    assert_eq!(shown["turns"][0]["status"], "completed");
}

#[tokio::test]
async fn turns_end_clearly_when_the_model_is_down_loops_or_is_missing() {
    // A model that only ever calls tools: the turn stops at max_turns model calls.
    let model = ScriptedModel::start(
        (0..2)
            .map(|i| Step::calls(&[(&*format!("c{i}"), ECHO, r#"{"text":"again"}"#)]))
            .collect(),
    )
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let bot = app.token("default", "looper", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({"max_turns": 2})).await;
    let (_, looped) = turn(&app, &bot, &agent, "Go.").await;
    assert_eq!(looped["status"], "max_turns", "{looped}");
    assert_eq!(looped["model_calls"], 2);
    assert_eq!(model.requests().len(), 2);

    // The model server goes away (the script is used up → 500, then nothing listens).
    let (_, failed) = turn(&app, &bot, &agent, "Again.").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["events"].as_array().unwrap().last().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains("answered 500"), "{error}");
    // The agent can take the next turn.
    let shown: Value = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
    assert_eq!(shown["agent"]["status"], "idle");

    // Bad input and no model configured are refused with clear errors.
    let bad = json!({"max_turns": 0, "environment": "Not An Env"});
    let response = app.post("/agents").as_(&bot).json(bad).await;
    let body = response
        .expect_status(StatusCode::UNPROCESSABLE_ENTITY)
        .json();
    let paths: Vec<&str> = texts_of(&body["error"]["details"]["fields"], "path");
    assert_eq!(paths, ["environment", "max_turns"]);

    let bare = TestApp::spawn().await;
    let bot = bare.token("default", "bot", &[scope::RUN]).await;
    let agent = create_agent(&bare, &bot, json!({})).await;
    let response = bare.post(format!("/agents/{agent}/turns")).as_(&bot);
    let response = response.json(json!({"message": "hi"})).await;
    response.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
}

/// Issue 7: "A parked call ends the turn as `input_required`; after the approver acts, the
/// runtime continues the turn without anyone calling again, and a rejection reaches the model
/// as a durable, protocol-valid tool result it can explain."
#[tokio::test]
async fn a_parked_turn_continues_by_itself_once_its_calls_are_decided() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            ("c1", ECHO, r#"{"text":"approved words"}"#),
            ("c2", ECHO, r#"{"text":"rejected words"}"#),
        ]),
        Step::text("One echo ran; a person rejected the other."),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    app.activate_policy(&admin, "agents-approve", json!({"rules": [{"id": "echo-needs-a-person", "match": {"name": ECHO}, "mode": "approval_required"}]})).await;
    let bot = app.token("default", "parked-bot", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({"max_turns": 3})).await;

    let (_, parked) = turn(&app, &bot, &agent, "Echo two things.").await;
    assert_eq!(parked["status"], "input_required", "{parked}");
    assert_eq!(model.requests().len(), 1);
    // Busy: no other turn starts while it waits.
    let (status, _) = turn(&app, &bot, &agent, "Hello?").await;
    assert_eq!(status, StatusCode::CONFLICT);

    let listed = app.get("/invocations?status=input_required");
    let listed = listed.as_(&admin).await.json();
    let waiting: Vec<&Value> = listed["invocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["session_id"] == agent.as_str())
        .collect();
    assert_eq!(waiting.len(), 2, "{listed}");
    let by_text = |t: &str| {
        *waiting
            .iter()
            .find(|i| i["arguments"]["text"] == t)
            .unwrap()
    };
    let approve = by_text("approved words");
    let reject = by_text("rejected words");
    let decide = |invocation: &Value, verb: &str, body: Value| {
        let id = invocation["invocation_id"].as_str().unwrap();
        app.post(format!("/invocations/{id}:{verb}"))
            .as_(&admin)
            .json(body)
    };
    let hashes =
        json!({"args_hash": approve["args_hash"], "definition_hash": approve["definition_hash"]});
    let approved = decide(approve, "approve", hashes).await;
    approved.expect_status(StatusCode::OK);
    let comment = json!({"comment": "not this one"});
    let rejected = decide(reject, "reject", comment).await;
    rejected.expect_status(StatusCode::OK);

    // Nobody calls again: the runtime continues the turn once both are decided.
    let mut shown = Value::Null;
    for _ in 0..150 {
        shown = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
        if shown["agent"]["status"] == "idle" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown["agent"]["status"], "idle", "{shown}");
    assert_eq!(shown["turns"][0]["status"], "completed", "{shown}");
    assert_eq!(shown["turns"][0]["model_calls"], 2);

    // The model got both outcomes, in call order: the upstream's real result and the rejection.
    let sent = model.requests();
    assert_eq!(sent.len(), 2);
    let second = sent[1].json();
    let messages = second["messages"].as_array().unwrap();
    let tools: Vec<(&str, &str)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(tools.len(), 2, "{second}");
    assert_eq!(tools[0], ("c1", "approved words"));
    assert_eq!(tools[1].0, "c2");
    assert!(
        tools[1]
            .1
            .starts_with("Error: An approver rejected this call; nothing ran.")
            && tools[1].1.contains("not this one"),
        "{}",
        tools[1].1
    );
    let last = shown["transcript"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["body"]["content"],
        "One echo ran; a person rejected the other."
    );
}

const ADD: &str = "mcp__fixture__add";

/// The request bodies' `tools`, serialized again the same way (the client's own serializer wrote
/// both, so equal values are equal bytes).
fn tools_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(&body["tools"]).unwrap()
}

/// Issue 7 (fork seed): restricted and unrestricted forks send the parent's declarations and
/// system instruction byte for byte, with the restriction notice only in the launch prompt
/// after the inherited prefix; a batch [allowed, disallowed, undeclared, agent] in a fork runs
/// only the allowed call, never authorizes the others, and answers all four in order with the
/// original ids (an undeclared name gets the not-found error, not the allowlist's); an
/// unrestricted fork's `agent` call is refused by the guard.
#[tokio::test]
async fn forks_share_the_parents_prefix_and_are_narrowed_only_in_execution() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[(
            "p1",
            "agent",
            r#"{"subagent_type":"fork","prompt":"Echo it.","fork_tools":["mcp__fixture__echo"]}"#,
        )]),
        Step::calls(&[
            ("f1", ECHO, r#"{"text":"from the fork"}"#),
            ("f2", ADD, r#"{"a":1,"b":2}"#),
            ("f3", "mcp__fixture__nope", "{}"),
            (
                "f4",
                "agent",
                r#"{"subagent_type":"fork","prompt":"again"}"#,
            ),
        ]),
        Step::text("Fork A done."),
        Step::calls(&[(
            "p2",
            "agent",
            r#"{"subagent_type":"fork","prompt":"Echo it."}"#,
        )]),
        Step::calls(&[(
            "b1",
            "agent",
            r#"{"subagent_type":"fork","prompt":"deeper"}"#,
        )]),
        Step::text("Fork B done."),
        Step::text("All done."),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, ADD]).await;
    let bot = app.token("default", "forker", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({"system_instruction": "You delegate."})).await;
    let (_, turned) = turn(&app, &bot, &agent, "Please delegate.").await;
    assert_eq!(turned["status"], "completed", "{turned}");

    let sent: Vec<Value> = model.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent.len(), 7);
    let (parent1, fork_a1, fork_a2, parent2, fork_b1, fork_b2, parent3) = (
        &sent[0], &sent[1], &sent[2], &sent[3], &sent[4], &sent[5], &sent[6],
    );
    // Declarations and system instruction: the parent's, byte for byte, restricted or not.
    for fork in [fork_a1, fork_a2, fork_b1, fork_b2] {
        assert_eq!(tools_bytes(fork), tools_bytes(parent1));
        assert_eq!(
            serde_json::to_vec(&fork["messages"][0]).unwrap(),
            serde_json::to_vec(&parent1["messages"][0]).unwrap()
        );
    }
    let names: Vec<&str> = parent1["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [ADD, ECHO, "agent"]);
    // The inherited prefix is exactly what the parent sent; the launch prompt follows it, with
    // the restriction notice only for the restricted fork.
    let a_messages = fork_a1["messages"].as_array().unwrap();
    let p1_messages = parent1["messages"].as_array().unwrap();
    assert_eq!(&a_messages[..p1_messages.len()], &p1_messages[..]);
    let launch_a = a_messages[p1_messages.len()]["content"].as_str().unwrap();
    assert!(
        launch_a.starts_with("Echo it.\n\nExecution restriction (fork_tools)"),
        "{launch_a}"
    );
    assert_eq!(a_messages.len(), p1_messages.len() + 1);
    let b_messages = fork_b1["messages"].as_array().unwrap();
    let p2_messages = parent2["messages"].as_array().unwrap();
    assert_eq!(&b_messages[..p2_messages.len()], &p2_messages[..]);
    assert_eq!(
        b_messages[p2_messages.len()],
        json!({"role": "user", "content": "Echo it."})
    );

    // The fork's batch, answered in order with the original ids.
    let answers: Vec<(&str, &str)> = fork_a2["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answers.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        ["f1", "f2", "f3", "f4"]
    );
    assert_eq!(answers[0].1, "from the fork");
    assert!(
        answers[1]
            .1
            .contains("was not executed: fork_tools restricts this fork"),
        "{}",
        answers[1].1
    );
    assert_eq!(
        answers[2].1,
        "Error: tool \"mcp__fixture__nope\" not found."
    );
    // `agent` is declared to the fork but not in its fork_tools: the allowlist refuses it first.
    assert!(
        answers[3].1.contains("Tool `agent` was not executed"),
        "{}",
        answers[3].1
    );
    // An unrestricted fork meets the guard: forks never start sub-agents.
    let guarded = fork_b2["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(guarded["tool_call_id"], "b1");
    assert!(
        text_of(&guarded["content"]).contains("cannot start sub-agents"),
        "{guarded}"
    );
    // The parent reads each fork's answer as its agent call's result.
    let parent_answers: Vec<&str> = parent3["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(parent_answers, ["Fork A done.", "Fork B done."]);

    // The disallowed call was never authorized: the fork's journal has echo executed, and add
    // only refused, with its reason (every decision is journaled, issue 23).
    let shown: Value = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
    let forks = shown["forks"].as_array().unwrap();
    assert_eq!(forks.len(), 2, "{shown}");
    assert_eq!(forks[0]["execution_allowed_tools"], json!([ECHO]));
    assert!(forks[1]["execution_allowed_tools"].is_null());
    let fork_a = forks[0]["agent_id"].as_str().unwrap();
    let receipts = app.get(format!("/receipts?session_id={fork_a}"));
    let receipts = receipts.as_(&admin).await.json();
    let tools: Vec<&str> = receipts["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["tool"].as_str())
        .collect();
    assert!(tools.contains(&ECHO), "{receipts}");
    let add: Vec<(&str, &str, &str)> = receipts["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tool"] == ADD)
        .map(|r| {
            (
                r["kind"].as_str().unwrap(),
                r["decision"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        add,
        [("decision", "deny", "execution_allowlist")],
        "{receipts}"
    );
}

/// `[]` denies everything; `fork_tools` is refused off a fork and as a bare `*`, each with its
/// own message.
#[tokio::test]
async fn an_empty_fork_tools_denies_everything_and_bad_ones_are_refused_distinctly() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            (
                "a1",
                "agent",
                r#"{"subagent_type":"general-purpose","prompt":"x","fork_tools":["x"]}"#,
            ),
            (
                "a2",
                "agent",
                r#"{"subagent_type":"fork","prompt":"x","fork_tools":["*"]}"#,
            ),
            (
                "a3",
                "agent",
                r#"{"subagent_type":"fork","prompt":"Try.","fork_tools":[]}"#,
            ),
        ]),
        Step::calls(&[("g1", ECHO, r#"{"text":"no"}"#)]),
        Step::text("I could not run anything."),
        Step::text("ok"),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let bot = app.token("default", "denier", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({})).await;
    let (_, turned) = turn(&app, &bot, &agent, "Go.").await;
    assert_eq!(turned["status"], "completed", "{turned}");
    let sent: Vec<Value> = model.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent.len(), 4);
    let fork_answer = sent[2]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(fork_answer["tool_call_id"], "g1");
    assert!(
        text_of(&fork_answer["content"]).contains("may not execute any tool"),
        "{fork_answer}"
    );
    let parent: Vec<&str> = sent[3]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        parent[0].contains("fork_tools requires subagent_type \"fork\""),
        "{}",
        parent[0]
    );
    assert!(parent[1].contains("bare `*`"), "{}", parent[1]);
    assert_eq!(parent[2], "I could not run anything.");
    // Nothing ran in the restricted fork.
    let shown: Value = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
    let fork = shown["forks"][0]["agent_id"].as_str().unwrap().to_owned();
    assert_eq!(shown["forks"][0]["execution_allowed_tools"], json!([]));
    let receipts = app.get(format!("/receipts?session_id={fork}"));
    let receipts = receipts.as_(&admin).await.json();
    // Nothing authorized: every call of the `[]` fork is a journaled `execution_allowlist`
    // denial (issue 23: every decision is journaled), the rest are its manifests.
    let calls: Vec<(&str, &str, &str)> = receipts["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["tool"].is_null())
        .map(|r| {
            (
                r["kind"].as_str().unwrap(),
                r["decision"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        !calls.is_empty()
            && calls
                .iter()
                .all(|c| *c == ("decision", "deny", "execution_allowlist")),
        "{receipts}"
    );
}

/// Issue 7: "MCP patterns respect the raw `__` boundary". Two upstreams, `alpha` and
/// `alpha-beta`, serve tools of the same raw names: the server pattern `mcp__alpha` reaches only
/// `alpha`'s tools (not `alpha-beta`'s, although their canonical names start with `mcp__alpha`),
/// and a prefix pattern matches the raw tool names of its own server only.
#[tokio::test]
async fn fork_patterns_match_the_raw_server_and_tool_across_two_upstreams() {
    let alpha_echo = "mcp__alpha__echo";
    let beta_echo = "mcp__alpha-beta__echo";
    let alpha_add = "mcp__alpha__add";
    let beta_add = "mcp__alpha-beta__add";
    let model = ScriptedModel::start(vec![
        Step::calls(&[(
            "p1",
            "agent",
            r#"{"subagent_type":"fork","prompt":"Use both servers.","fork_tools":["mcp__alpha","mcp__alpha-beta__ad*"]}"#,
        )]),
        Step::calls(&[
            ("f1", alpha_echo, r#"{"text":"alpha"}"#),
            ("f2", beta_echo, r#"{"text":"beta"}"#),
            ("f3", alpha_add, r#"{"a":1,"b":1}"#),
            ("f4", beta_add, r#"{"a":2,"b":2}"#),
        ]),
        Step::text("Used what I may."),
        Step::text("Done."),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    for name in ["alpha", "alpha-beta"] {
        app.post("/upstreams").as_(&admin).json(json!({"name": name, "transport": "stdio", "command": crate::helpers::fixture_command()})).await.expect_status(StatusCode::CREATED);
    }
    for tool in [alpha_echo, beta_echo, alpha_add, beta_add] {
        let reply = app.put(format!("/tools/{tool}"));
        let reply = reply.as_(&admin).json(json!({"risk": ["read"]})).await;
        reply.expect_status(StatusCode::OK);
    }
    let bot = app.token("default", "two-servers", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({})).await;
    let (_, turned) = turn(&app, &bot, &agent, "Go.").await;
    assert_eq!(turned["status"], "completed", "{turned}");

    let sent = model.requests();
    let fork_second = sent[2].json();
    let answers: Vec<(String, String)> = fork_second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(answers.len(), 4, "{fork_second}");
    assert_eq!(answers[0], ("f1".to_owned(), "alpha".to_owned()));
    let restricted = "was not executed: fork_tools restricts this fork";
    assert_eq!(answers[1].0, "f2");
    assert!(answers[1].1.contains(restricted), "{}", answers[1].1);
    assert_eq!(answers[2], ("f3".to_owned(), "2".to_owned()));
    assert_eq!(answers[3], ("f4".to_owned(), "4".to_owned()));
}

/// CONTRACT §12: "`Accept: text/event-stream` streams" a turn's events while it runs.
#[tokio::test]
async fn a_turn_streams_its_events_as_server_sent_events() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[("c1", ECHO, r#"{"text":"streamed"}"#)]),
        // The model takes its time over the second answer: the first events are out by then.
        Step::Delay(
            Duration::from_secs(3),
            Box::new(Step::text("Done streaming.")),
        ),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let bot = app.token("default", "streamer", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({})).await;

    let turn = app.post(format!("/agents/{agent}/turns")).as_(&bot);
    let turn = turn.header("accept", "text/event-stream");
    let mut response = turn.json(json!({"message": "Stream it."})).open().await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut text = String::new();
    let mut seen_running = false;
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        if text.contains("event: tool_result") && !seen_running {
            // The tool's result reached the client while the turn was still running.
            let shown: Value = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
            assert_eq!(shown["agent"]["status"], "running", "{shown}");
            seen_running = true;
        }
    }
    assert!(seen_running, "{text}");
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|block| block.contains("data:"))
        .map(|block| {
            let name = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap()
                .to_owned();
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "turn",
            "user",
            "assistant",
            "tool_result",
            "assistant",
            "turn_end"
        ]
    );
    let turn_id = events[0].1["turn_id"].as_str().unwrap();
    assert!(turn_id.starts_with("trn_"), "{text}");
    assert_eq!(events[3].1["content"], "streamed");
    assert_eq!(events[3].1["outcome"], "executed");
    assert_eq!(events[5].1["status"], "completed");

    // A turn that is refused is refused before anything streams: a plain JSON error.
    let refused = app.post("/agents/agt_nobody/turns").as_(&bot);
    let refused = refused.header("accept", "text/event-stream");
    let refused = refused.json(json!({"message": "Anyone?"})).await;
    refused.expect_error(StatusCode::NOT_FOUND, "not_found");
}

/// Issue 23 (CONTRACT §11): output is redacted for the destination it goes to. A hosted agent's
/// tool result goes to its model (`llm`) and, as sent, into its transcript (`transcript`); an
/// MCP caller's to `mcp`. A canary only the upstream knows (its environment) must not reach a
/// destination the rule's profile does not list.
#[tokio::test]
async fn tool_output_is_redacted_for_the_destination_it_goes_to() {
    const CANARY: &str = "canary-7f3a9c";
    const GETENV: &str = "mcp__fixture__getenv";
    let model = ScriptedModel::start(vec![]).await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let reply = app.post("/upstreams").as_(&admin).json(json!({"name": "fixture", "transport": "stdio", "command": crate::helpers::fixture_command(), "env": {"FIXTURE_CANARY": CANARY}})).await;
    reply.expect_status(StatusCode::CREATED);
    let reply = app.put(format!("/tools/{GETENV}"));
    let reply = reply.as_(&admin).json(json!({"risk": ["read"]})).await;
    reply.expect_status(StatusCode::OK);
    let use_profile = |destinations: Value| {
        let app = &app;
        let admin = &admin;
        async move {
            let policy = json!({
                "rules": [{"id": "env", "match": {"name": GETENV}, "mode": "allow", "redaction": "only"}],
                "redaction_profiles": {"only": {"summary": "truncate", "max_bytes": 4096,
                                                "destinations": destinations}}});
            app.activate_policy(admin, "p", policy).await;
        }
    };
    let agent_token = app.token("default", "helper-bot", &[scope::RUN]).await;
    let agent = create_agent(
        &app,
        &agent_token,
        json!({"system_instruction": "Be brief."}),
    )
    .await;
    // What the hosted agent's model and transcript get, and what an MCP caller gets.
    let hosted = |n: usize| {
        let (app, model, agent_token, agent) = (&app, &model, &agent_token, &agent);
        async move {
            model.push(Step::calls(&[(
                &format!("c{n}"),
                GETENV,
                r#"{"name":"FIXTURE_CANARY"}"#,
            )]));
            model.push(Step::text("Done."));
            let (status, turned) = turn(app, agent_token, agent, "Read the variable.").await;
            assert_eq!(status, StatusCode::OK, "{turned}");
            assert_eq!(turned["status"], "completed", "{turned}");
            let sent = model.requests().last().unwrap().json();
            let shown = app.get(format!("/agents/{agent}")).as_(agent_token).await;
            let shown = shown.json();
            (sent.to_string(), shown["transcript"].to_string())
        }
    };
    let over_mcp = || {
        let (app, agent_token) = (&app, &agent_token);
        async move {
            let session: Value = app.post("/sessions").as_(agent_token).await.json();
            let tool = &session["tools"][0];
            let meta = echo_of(&session, text_of(&tool["name"]));
            let params =
                json!({ "name": GETENV, "arguments": {"name": "FIXTURE_CANARY"}, "_meta": meta});
            let call = app.mcp_post(agent_token).json(rpc(1, "tools/call", params));
            let answer = call.await.json();
            assert_eq!(answer["result"]["isError"], false, "{answer}");
            answer["result"].to_string()
        }
    };

    // Listed for MCP only: the MCP caller reads the canary; the model and transcript do not.
    use_profile(json!(["mcp"])).await;
    assert!(over_mcp().await.contains(CANARY));
    let (sent, transcript) = hosted(1).await;
    assert!(!sent.contains(CANARY), "the model was sent it: {sent}");
    assert!(sent.contains("output withheld"), "{sent}");
    assert!(!transcript.contains(CANARY), "stored: {transcript}");

    // Listed for the model but not the transcript: withheld from both (the transcript stores
    // exactly what the model was sent).
    use_profile(json!(["llm"])).await;
    let (sent, transcript) = hosted(2).await;
    assert!(
        !sent.contains(CANARY) && !transcript.contains(CANARY),
        "{sent}"
    );
    // … and from MCP callers.
    let answer = over_mcp().await;
    assert!(!answer.contains(CANARY), "{answer}");
    assert!(answer.contains("output withheld"), "{answer}");

    // Listed for both: the model reads it, and the transcript holds what it read.
    use_profile(json!(["llm", "transcript"])).await;
    let (sent, transcript) = hosted(3).await;
    assert!(sent.contains(CANARY), "{sent}");
    assert!(transcript.contains(CANARY), "{transcript}");
}

/// A hosted agent of `parked-bot` (a `:run` token) whose first turn parked its echo call under
/// a policy that sends echo to an approver; the model answers with `steps`.
struct Parked {
    model: ScriptedModel,
    app: TestApp,
    admin: String,
    bot_id: String,
    agent: String,
}

async fn parked_agent(steps: Vec<Step>) -> Parked {
    let model = ScriptedModel::start(steps).await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let policy = json!({"rules": [{"id": "echo-needs-a-person", "match": {"name": ECHO}, "mode": "approval_required"}]});
    app.activate_policy(&admin, "agents-approve", policy).await;
    let (bot_id, bot) = app.token_full("default", "parked-bot", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({"max_turns": 5})).await;
    let (_, parked) = turn(&app, &bot, &agent, "Echo.").await;
    assert_eq!(parked["status"], "input_required", "{parked}");
    Parked {
        model,
        app,
        admin,
        bot_id,
        agent,
    }
}

/// Waits (up to 15 s) until `agent`, read by `reader`, satisfies `done`; returns what was read.
async fn agent_until(
    app: &TestApp,
    reader: &str,
    agent: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut shown = Value::Null;
    for _ in 0..150 {
        shown = app.get(format!("/agents/{agent}")).as_(reader).await.json();
        if done(&shown) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shown
}

/// The parked invocations of `agent`'s session, as an approver lists them.
async fn waiting_of(app: &TestApp, approver: &str, agent: &str) -> Vec<Value> {
    let listed = app.get("/invocations?status=input_required");
    let listed = listed.as_(approver).await.json();
    listed["invocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["session_id"] == agent)
        .cloned()
        .collect()
}

async fn approve(app: &TestApp, approver: &str, invocation: &Value) {
    let reply = app.post(format!("/invocations/{}:approve", invocation["invocation_id"].as_str().unwrap())).as_(approver).json(json!({"args_hash": invocation["args_hash"], "definition_hash": invocation["definition_hash"]})).await;
    reply.expect_status(StatusCode::OK);
}

/// Issue 23 (seed: request-context RBAC before each durable receipt, never as another actor):
/// a parked turn that continues runs as its caller is *now*. The caller's token reaching the end
/// of its lifetime after the call was authorized does not stop the approved call or the turn;
/// the token revoked does: the turn ends as `revoked`, no further model call is made and the
/// approved call does not run.
#[tokio::test]
async fn a_continued_turn_runs_as_its_caller_is_now() {
    let Parked {
        model,
        app,
        admin,
        bot_id,
        agent,
    } = parked_agent(vec![
        Step::calls(&[("c1", ECHO, r#"{"text":"after expiry"}"#)]),
        Step::calls(&[("c2", ECHO, r#"{"text":"after revocation"}"#)]),
        Step::text("never sent"),
    ])
    .await;

    // The token's lifetime ends while the call waits; the approver releases it.
    sqlx::query("UPDATE api_tokens SET expires_at = 1 WHERE id = $1")
        .bind(&bot_id)
        .execute(app.store.pool())
        .await
        .unwrap();
    let waiting = waiting_of(&app, &admin, &agent).await;
    assert_eq!(waiting.len(), 1);
    approve(&app, &admin, &waiting[0]).await;
    let shown = agent_until(&app, &admin, &agent, |s| {
        s["agent"]["status"] == "input_required" && s["turns"][0]["model_calls"] == 2
    })
    .await;
    assert_eq!(
        shown["turns"][0]["model_calls"], 2,
        "the turn went on: {shown}"
    );
    let second = model.requests()[1].json();
    let answered: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        answered,
        ["after expiry"],
        "the approved call ran: {second}"
    );

    // Now the token is revoked while the next call waits; the approver releases that one too.
    let revoked = app.delete(format!("/tokens/{bot_id}")).as_(&admin).await;
    assert!(revoked.status().is_success(), "{}", revoked.status());
    let waiting = waiting_of(&app, &admin, &agent).await;
    assert_eq!(waiting.len(), 1);
    approve(&app, &admin, &waiting[0]).await;
    let shown = agent_until(&app, &admin, &agent, |s| s["agent"]["status"] == "idle").await;
    let ended = &shown["turns"][0];
    assert_eq!(ended["status"], "revoked", "{shown}");
    assert!(
        ended["error"]
            .as_str()
            .unwrap_or("")
            .contains("token was revoked"),
        "{ended}"
    );
    assert_eq!(
        model.requests().len(),
        2,
        "no model call after the revocation"
    );
    let invocation = app
        .get(format!(
            "/invocations/{}",
            waiting[0]["invocation_id"].as_str().unwrap()
        ))
        .as_(&admin)
        .await;
    let invocation = invocation.json();
    assert_eq!(invocation["result"]["isError"], true, "{invocation}");
    assert_eq!(
        invocation["result"]["_meta"]["receipt"]["reason"], "manifest_binding_mismatch",
        "the approved call did not run under a revoked token: {invocation}"
    );
}

/// Issue 23: the agent's exposure session revoked while a call waits ends its turn as `revoked`
/// once the call is decided; nothing more runs.
#[tokio::test]
async fn a_revoked_agent_session_ends_the_continued_turn() {
    let Parked {
        model,
        app,
        admin,
        agent,
        ..
    } = parked_agent(vec![
        Step::calls(&[("c1", ECHO, r#"{"text":"parked"}"#)]),
        Step::text("never sent"),
    ])
    .await;
    let revoked = app.post(format!("/sessions/{agent}:revoke")).as_(&admin);
    revoked.await.expect_status(StatusCode::OK);
    let waiting = waiting_of(&app, &admin, &agent).await;
    approve(&app, &admin, &waiting[0]).await;
    let shown = agent_until(&app, &admin, &agent, |s| s["agent"]["status"] == "idle").await;
    assert_eq!(shown["turns"][0]["status"], "revoked", "{shown}");
    assert!(
        shown["turns"][0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("session was revoked"),
        "{shown}"
    );
    assert_eq!(
        model.requests().len(),
        1,
        "no model call after the revocation"
    );
}

/// Issue 23: the caller is checked again before each call of a batch, not only before the
/// batch: a token revoked while the first call runs leaves the second unrun (answered with the
/// reason, no upstream call), and the turn ends as `revoked` without asking the model again.
/// Issue 45 (item 5): the unrun call has its receipt, journaled as `cancelled`.
#[tokio::test]
async fn a_token_revoked_mid_batch_runs_nothing_more() {
    const SLOW: &str = "mcp__fixture__slow";
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            ("c1", SLOW, r#"{"millis":1500}"#),
            ("c2", ECHO, r#"{"text":"after the revocation"}"#),
        ]),
        Step::text("never sent"),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, SLOW]).await;
    let (bot_id, bot) = app.token_full("default", "batch-bot", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({"max_turns": 5})).await;
    let revoke = app.delete(format!("/tokens/{bot_id}")).as_(&admin);
    let revoke = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        revoke.await.status()
    });
    let (status, ended) = turn(&app, &bot, &agent, "Wait, then echo.").await;
    assert!(revoke.await.unwrap().is_success());
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(ended["status"], "revoked", "{ended}");
    let results: Vec<&Value> = ended["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{ended}");
    assert_eq!(results[0]["outcome"], "executed", "{ended}");
    assert_eq!(results[1]["outcome"], "revoked", "{ended}");
    assert!(
        text_of(&results[1]["content"]).contains("token was revoked"),
        "{ended}"
    );
    assert_unrun_with_receipt(&app, &admin, &agent, results[1]).await;
    assert_eq!(
        model.requests().len(),
        1,
        "no model call after the revocation"
    );
    let echoes: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM journal WHERE tool = $1 AND kind = 'execution'")
            .bind(ECHO)
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    assert_eq!(echoes, 0, "the second call never reached the upstream");
}

/// A call left unrun because its caller's rights were withdrawn: its receipt is journaled, a
/// denial with reason `cancelled` of that tool in the agent's session and turn.
async fn assert_unrun_with_receipt(app: &TestApp, admin: &str, agent: &str, result: &Value) {
    let receipt_id = result["receipt_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the unrun call has a receipt: {result}"));
    let receipt = app.get(format!("/receipts/{receipt_id}")).as_(admin).await;
    let receipt = receipt.json();
    let signed = &receipt["receipt"];
    assert_eq!(signed["decision"], "deny", "{receipt}");
    assert_eq!(signed["reason"], "cancelled", "{receipt}");
    assert_eq!(signed["tool"], result["name"], "{receipt}");
    assert_eq!(signed["session_id"], agent, "{receipt}");
    assert!(signed["seq"].is_u64(), "journaled: {receipt}");
}

/// Issue 45 (item 1): a hosted agent's caller whose environments are narrowed in the middle of a
/// turn (the agent's environment taken away) has its next call refused with a receipt, nothing
/// of it reaches the upstream, and the turn ends `revoked`.
#[tokio::test]
async fn a_caller_narrowed_mid_turn_runs_nothing_more() {
    const SLOW: &str = "mcp__fixture__slow";
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            ("c1", SLOW, r#"{"millis":1500}"#),
            ("c2", ECHO, r#"{"text":"after the narrowing"}"#),
        ]),
        Step::text("never sent"),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, SLOW]).await;
    let (bot_id, bot) = app
        .token_full("default", "narrowed-bot", &[scope::RUN])
        .await;
    let agent = create_agent(&app, &bot, json!({"max_turns": 5})).await;
    let narrow = {
        let (store, bot_id) = (app.store.clone(), bot_id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            // What an admin's narrowing leaves in the token's row: `default` taken away.
            sqlx::query("UPDATE api_tokens SET environments = '[\"staging\"]' WHERE id = $1")
                .bind(&bot_id)
                .execute(store.pool())
                .await
                .unwrap();
        })
    };
    let (status, ended) = turn(&app, &bot, &agent, "Wait, then echo.").await;
    narrow.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(ended["status"], "revoked", "{ended}");
    let results: Vec<&Value> = ended["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{ended}");
    assert_eq!(results[0]["outcome"], "executed", "{ended}");
    assert_eq!(results[1]["outcome"], "revoked", "{ended}");
    assert!(
        text_of(&results[1]["content"]).contains("environment"),
        "{ended}"
    );
    assert_unrun_with_receipt(&app, &admin, &agent, results[1]).await;
    assert_eq!(model.requests().len(), 1, "no model call after it");
    let echoes: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM journal WHERE tool = $1 AND kind = 'execution'")
            .bind(ECHO)
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    assert_eq!(echoes, 0, "the second call never reached the upstream");
}

/// The decision receipts of `tool` in `session`, oldest first.
async fn decisions_of(app: &TestApp, admin: &str, session: &str, tool: &str) -> Vec<Value> {
    let receipts = app.get(format!("/receipts?session_id={session}&tool={tool}"));
    let receipts = receipts.as_(admin).await.json();
    let mut out: Vec<Value> = receipts["receipts"]
        .as_array()
        .unwrap_or_else(|| panic!("{receipts}"))
        .iter()
        .filter(|r| r["kind"] == "decision")
        .cloned()
        .collect();
    out.reverse();
    out
}

/// Issue 45 (item 5): the `agent` tool's own decisions are journaled like every other: a
/// launch with invalid `fork_tools` is `arguments_invalid`, a sub-agent launched is `ok`, and a
/// fork calling `agent` is `execution_allowlist`; each names the tool with `tool_version`
/// `builtin` and the hash of the declaration the model was sent.
#[tokio::test]
async fn the_agent_tool_s_own_decisions_have_receipts() {
    let model = ScriptedModel::start(vec![
        Step::calls(&[
            (
                "a1",
                "agent",
                r#"{"subagent_type":"general-purpose","prompt":"x","fork_tools":["x"]}"#,
            ),
            (
                "a2",
                "agent",
                r#"{"subagent_type":"fork","prompt":"Go on."}"#,
            ),
        ]),
        Step::calls(&[(
            "b1",
            "agent",
            r#"{"subagent_type":"fork","prompt":"deeper"}"#,
        )]),
        Step::text("The fork is done."),
        Step::text("All done."),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let (bot_id, bot) = app.token_full("default", "launcher", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({})).await;
    let (_, turned) = turn(&app, &bot, &agent, "Go.").await;
    assert_eq!(turned["status"], "completed", "{turned}");

    // The declaration as the model was sent it, hashed independently of the server.
    let sent = model.requests()[0].json();
    let declaration = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "agent")
        .unwrap()
        .clone();
    let hash = engine::canonical::hash_value(&declaration);

    let parent = decisions_of(&app, &admin, &agent, "agent").await;
    let seen: Vec<(&str, &str)> = parent
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("deny", "arguments_invalid"), ("allow", "ok")],
        "{parent:?}"
    );
    let shown: Value = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
    let fork = shown["forks"][0]["agent_id"].as_str().unwrap().to_owned();
    let forked = decisions_of(&app, &admin, &fork, "agent").await;
    assert_eq!(forked.len(), 1, "{forked:?}");
    assert_eq!(forked[0]["decision"], "deny");
    assert_eq!(forked[0]["reason"], "execution_allowlist");
    for r in parent.iter().chain(&forked) {
        let id = r["receipt_id"].as_str().unwrap();
        let full: Value = app.get(format!("/receipts/{id}")).as_(&admin).await.json();
        assert_eq!(full["receipt"]["tool_version"], "builtin", "{full}");
        assert_eq!(full["receipt"]["schema_hash"], hash.as_str(), "{full}");
        // Issue 45 item 2: the turn's caller, in the parent and in its fork.
        assert_eq!(full["receipt"]["principal"], bot_id.as_str(), "{full}");
    }
    // The events name the receipts the model's answers came from.
    let launched: Vec<&Value> = turned["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(launched.len(), 2, "{turned}");
    assert_eq!(launched[0]["receipt_id"], parent[0]["receipt_id"]);
    assert_eq!(launched[1]["receipt_id"], parent[1]["receipt_id"]);
}

/// Issue 45 (item 3): a hosted fork executes on its parent's grant. A policy that allows `echo`
/// at once, activated while the parent's turn runs under a policy that parks it, does not let
/// the fork run `echo`: the fork's grant is a copy of the parent's (signed with `copied_from`
/// and `execution_allowed_tools`), so its call is parked too and nothing reaches the upstream.
#[tokio::test]
async fn a_hosted_fork_executes_on_its_parent_s_grant() {
    const SLOW: &str = "mcp__fixture__slow";
    let model = ScriptedModel::start(vec![
        Step::calls(&[("p1", SLOW, r#"{"millis":1500}"#)]),
        Step::calls(&[(
            "p2",
            "agent",
            r#"{"subagent_type":"fork","prompt":"Echo it.","fork_tools":["mcp__fixture__echo"]}"#,
        )]),
        Step::calls(&[("f1", ECHO, r#"{"text":"from the fork"}"#)]),
        Step::text("The fork waits."),
        Step::text("Done."),
    ])
    .await;
    let app = app_with_model(&model.base_url).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, SLOW]).await;
    let policy = json!({"rules": [{"id": "park-echo", "match": {"name": ECHO}, "mode": "approval_required"},
                                  {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]});
    app.activate_policy(&admin, "careful", policy).await;
    let bot = app.token("default", "copier", &[scope::RUN]).await;
    let agent = create_agent(&app, &bot, json!({})).await;
    let loose = json!({"rules": [{"id": "all", "match": {"risk": "read"}, "mode": "allow"}]});
    let put = app.put("/policies/loose").as_(&admin).json(loose);
    let activate = app.post("/policies/loose:activate").as_(&admin);
    let loosen = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        put.await.expect_status(StatusCode::OK);
        activate.await.expect_status(StatusCode::OK);
    });
    let (_, turned) = turn(&app, &bot, &agent, "Slowly, then delegate.").await;
    loosen.await.unwrap();
    let shown: Value = app.get(format!("/agents/{agent}")).as_(&bot).await.json();
    let fork = shown["forks"][0]["agent_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{shown} {turned}"))
        .to_owned();
    // The fork's call was decided under the parent's grant: parked, not run.
    let echoes = decisions_of(&app, &admin, &fork, ECHO).await;
    assert_eq!(echoes.len(), 1, "{echoes:?}");
    assert_eq!(echoes[0]["decision"], "park", "{echoes:?}");
    let executed: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM journal WHERE tool = $1 AND kind = 'execution'")
            .bind(ECHO)
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    assert_eq!(executed, 0, "nothing reached the upstream");
    // Its manifest is a signed copy of the parent's.
    let parent_doc = app.get(format!("/sessions/{agent}/manifest"));
    let parent_doc = parent_doc.as_(&admin).await.json();
    let fork_doc = app.get(format!("/sessions/{fork}/manifest"));
    let fork_doc = fork_doc.as_(&admin).await.json();
    let (p, f) = (&parent_doc["document"], &fork_doc["document"]);
    assert_eq!(f["copied_from"], p["manifest_id"], "{fork_doc}");
    assert_eq!(f["policy_id"], "careful", "{fork_doc}");
    assert_eq!(f["tools"], p["tools"]);
    assert_eq!(
        f["execution_allowed_tools"],
        json!(["mcp__fixture__echo"]),
        "{fork_doc}"
    );
    let document: engine::receipt::ManifestDocument = serde_json::from_value(f.clone()).unwrap();
    engine::receipt::verify_manifest_with_keys(
        &document,
        fork_doc["manifest_signature"].as_str().unwrap(),
        &app.keys().await,
    )
    .unwrap();
    let mut unsigned = document.clone();
    unsigned.execution_allowed_tools = None;
    assert!(
        engine::receipt::verify_manifest_with_keys(
            &unsigned,
            fork_doc["manifest_signature"].as_str().unwrap(),
            &app.keys().await,
        )
        .is_err(),
        "the allowlist is signed"
    );
}
