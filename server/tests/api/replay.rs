//! Issue 28, item 1: `POST /policies:replay` replays a draft policy over the tenant's recorded
//! calls through the same engine and says what would change, per tool and actor, with example
//! receipts; argument-dependent calls are checked against the draft's narrowed schema where
//! their disclosures hold the arguments and counted as not replayable where they do not; a
//! tool whose definition changed since is marked; another tenant's calls never count.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Reply, Requests, TestApp};

const ECHO: &str = "mcp__fixture__echo";
const ADD: &str = "mcp__fixture__add";

/// `POST /policies:replay` as `token`.
async fn replay(app: &TestApp, token: &str, body: Value) -> Reply {
    app.post("/policies:replay").as_(token).json(body).await
}

/// The change for `tool` by `actor` (panics when there is none).
fn change<'a>(report: &'a Value, tool: &str, actor: &str) -> &'a Value {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == tool && c["actor"] == actor)
        .unwrap_or_else(|| panic!("no change for {tool} by {actor}: {report}"))
}

#[tokio::test]
async fn a_draft_is_replayed_over_the_recorded_calls() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    app.register_fixture(&admin, &[ECHO, ADD]).await;
    let alice = app.token("default", "alice-bot", &[scope::RUN]).await;
    let bob = app.token("default", "bob-bot", &[scope::RUN]).await;
    let list = app.mcp_list(&alice, json!({})).await;
    for text in ["hi", "bye", "bye"] {
        let done = app
            .mcp_call(&alice, &list, ECHO, json!({"text": text}))
            .await;
        assert_eq!(done["isError"], false, "{done}");
    }
    let list = app.mcp_list(&bob, json!({})).await;
    for a in [1, 2] {
        let done = app
            .mcp_call(&bob, &list, ADD, json!({"a": a, "b": 1}))
            .await;
        assert_eq!(done["isError"], false, "{done}");
    }
    // Another tenant's calls of the same tools never count.
    let other_admin = app.token("other", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&other_admin, &[ECHO]).await;
    let other = app.token("other", "alice-bot", &[scope::RUN]).await;
    let list = app.mcp_list(&other, json!({})).await;
    let done = app
        .mcp_call(&other, &list, ECHO, json!({"text": "elsewhere"}))
        .await;
    assert_eq!(done["isError"], false, "{done}");

    // Hide echo, park add: every call moves, grouped by tool and actor, with receipts.
    let report = replay(
        &app,
        &reader,
        json!({"policy": {"rules": [
            {"id": "no-echo", "match": {"name": ECHO}, "mode": "hide"},
            {"id": "park-add", "match": {"name": ADD}, "mode": "approval_required"},
            {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
        ]}}),
    )
    .await
    .expect_ok();
    assert_eq!(report["replayed"], 5, "{report}");
    assert_eq!(report["not_replayable"], 0, "{report}");
    let echo = change(&report, ECHO, "alice-bot");
    assert_eq!(
        (&echo["from"], &echo["to"], &echo["count"]),
        (&json!("allow"), &json!("hide"), &json!(3))
    );
    assert!(echo.get("definition_changed").is_none(), "{echo}");
    let examples = echo["examples"].as_array().unwrap();
    assert_eq!(examples.len(), 3);
    for id in examples {
        let receipt = app.get(format!("/receipts/{}", id.as_str().unwrap()));
        let receipt = receipt.as_(&reader).await.expect_ok();
        assert_eq!(receipt["receipt"]["kind"], "decision");
        assert_eq!(receipt["receipt"]["tool"], ECHO);
    }
    let add = change(&report, ADD, "bob-bot");
    assert_eq!(
        (&add["from"], &add["to"], &add["count"]),
        (&json!("allow"), &json!("approval_required"), &json!(2))
    );
    assert_eq!(report["changes"].as_array().unwrap().len(), 2);

    // The active policy replayed over itself changes nothing.
    let itself = json!({"policy": {"rules": [{"id": "read-only", "match": {"risk_exactly": ["read"]}, "mode": "allow"}]}});
    let same = replay(&app, &reader, itself).await.json_or_null();
    assert_eq!(same["replayed"], 5, "{same}");
    assert_eq!(same["changes"], json!([]), "{same}");

    // Narrowing echo's text to "hi": decided on the disclosed arguments, two calls refused.
    let narrowed = json!({"policy": {"rules": [
        {"id": "hi-only", "match": {"name": ECHO}, "mode": "allow",
         "invocation": {"allowed_values": {"text": ["hi"]}}},
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
    ]}});
    let report = replay(&app, &reader, narrowed.clone()).await.json_or_null();
    assert_eq!(report["replayed"], 5, "{report}");
    let echo = change(&report, ECHO, "alice-bot");
    assert_eq!(
        (&echo["from"], &echo["to"], &echo["count"]),
        (&json!("allow"), &json!("deny"), &json!(2)),
        "{report}"
    );

    // Without the disclosures (purged), those calls cannot be replayed: counted, not guessed.
    let purged = aperture_core::journal::purge_disclosures(
        &app.store,
        &app.journal,
        "default",
        &aperture_core::journal::Author::operator(),
        aperture_core::store::now_ms() + 1_000,
    )
    .await
    .unwrap();
    assert!(purged >= 5);
    let report = replay(&app, &reader, narrowed).await.json_or_null();
    assert_eq!(report["not_replayable"], 3, "{report}");
    assert_eq!(report["replayed"], 2, "{report}");
    assert_eq!(report["changes"], json!([]), "{report}");

    // A window before the calls holds none.
    let before = json!({"policy": {"rules": []}, "since": "2020-01-01T00:00:00Z", "until": "2020-01-02T00:00:00Z"});
    let empty = replay(&app, &reader, before).await.json_or_null();
    assert_eq!(empty["replayed"], 0, "{empty}");
    assert_eq!(empty["since"], "2020-01-01T00:00:00Z");
}

#[tokio::test]
async fn a_replay_is_read_only_and_checks_its_input() {
    let app = TestApp::spawn().await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let runner = app.token("default", "agent", &[scope::RUN]).await;
    let empty = json!({"policy": {"rules": []}});
    let refused = replay(&app, &runner, empty).await;
    refused.expect_status(StatusCode::FORBIDDEN);
    let sometimes = json!({"policy": {"rules": [{"id": "r", "mode": "sometimes"}]}});
    let refused = replay(&app, &reader, sometimes).await;
    let refused = refused.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    refused.expect_field_error("policy.rules[0].mode");
    for (window, field) in [
        (json!({"since": "yesterday"}), "since"),
        (json!({"until": "soon"}), "until"),
        (
            json!({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}),
            "since",
        ),
        (
            json!({"since": "2025-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}),
            "since",
        ),
    ] {
        let mut body = json!({"policy": {"rules": []}});
        body.as_object_mut()
            .unwrap()
            .extend(window.as_object().unwrap().clone());
        let answer = replay(&app, &reader, body).await;
        let answer = answer.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        answer.expect_field_error(field);
    }
    let extra = json!({"policy": {"rules": []}, "extra": 1});
    let refused = replay(&app, &reader, extra).await;
    refused.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
}

/// Calls of a tool whose definition changed since they were granted are replayed against its
/// current descriptor and marked.
#[tokio::test]
async fn a_tool_that_changed_since_is_marked() {
    const MUTATE: &str = "mcp__fixture__mutate";
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, MUTATE]).await;
    // Description changes are accepted (not held), so echo stays in the catalog, changed.
    let reply = app.put("/catalog/drift");
    let reply = reply
        .as_(&admin)
        .json(json!({"description": "accept"}))
        .await;
    reply.expect_status(StatusCode::OK);
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    let done = app
        .mcp_call(&agent, &list, ECHO, json!({"text": "before"}))
        .await;
    assert_eq!(done["isError"], false, "{done}");
    let before = app.get("/tools").as_(&admin).await.json();
    let hash_of = |tools: &Value| {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == ECHO)
            .map(|t| t["definition_hash"].clone())
    };
    let mutated = app
        .mcp_call(
            &agent,
            &list,
            MUTATE,
            json!({"description": "Echoes, differently."}),
        )
        .await;
    assert_eq!(mutated["content"][0]["text"], "mutated", "{mutated}");
    let mut synced = false;
    for _ in 0..100 {
        if hash_of(&app.get("/tools").as_(&admin).await.json()) != hash_of(&before) {
            synced = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(synced, "the catalog followed the upstream");
    let report = replay(
        &app,
        &admin,
        json!({"policy": {"rules": [{"id": "no-echo", "match": {"name": ECHO}, "mode": "hide"},
                                    {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]}}),
    )
    .await
    .expect_ok();
    let echo = change(&report, ECHO, "agent");
    assert_eq!(echo["to"], "hide", "{report}");
    assert_eq!(echo["definition_changed"], true, "{report}");
    let others: Vec<&Value> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["tool"] != ECHO)
        .collect();
    assert!(
        others.iter().all(|c| c.get("definition_changed").is_none()),
        "only echo changed: {report}"
    );
}
