//! `POST /sessions/{id}/forks`: declarations identical to the parent's, execution narrowed by
//! `fork_tools` (fork seed, CONTRACT §9).

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Reply, Requests, TestApp, find, rpc, text_of, texts_of};

async fn setup() -> (TestApp, String, Value) {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo", "mcp__fixture__add"])
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let parent: Value = app.post("/sessions").as_(&agent).await.json();
    (app, agent, parent)
}

async fn fork(app: &TestApp, token: &str, parent: &Value, body: Value) -> Reply {
    let sid = parent["_meta"]["session_id"].as_str().unwrap();
    let forks = app.post(format!("/sessions/{sid}/forks"));
    forks.as_(token).json(body).await
}

/// `tools/list` over MCP in session `session` (a fork's, a parent's) as `token`.
async fn list_in(app: &TestApp, token: &str, id: u64, session: &Value) -> Value {
    let params = json!({"_meta": {"session_id": session}});
    app.mcp(token, rpc(id, "tools/list", params)).await
}

async fn call(app: &TestApp, token: &str, list: &Value, tool: &str, arguments: Value) -> Value {
    let t = find(&list["tools"], "name", tool);
    let m = &list["_meta"];
    let sid = m["session_id"].as_str().unwrap();
    let meta = json!({"manifest_id": m["manifest_id"], "lease_id": m["lease_id"], "tool_version": t["_meta"]["toolVersion"], "expected_schema_hash": t["_meta"]["schemaHash"]});
    let body = json!({"name": tool, "arguments": arguments, "_meta": meta});
    let calls = app.post(format!("/sessions/{sid}/calls"));
    calls.as_(token).json(body).await.json()
}

/// Fork seed: "Keep the fork's current model-visible declarations unchanged" and "Reject
/// disallowed calls before tool construction, tool hooks, permission classification,
/// scheduling, or approval."
#[tokio::test]
async fn a_fork_keeps_the_declarations_and_narrows_execution() {
    let (app, agent, parent) = setup().await;
    let echo_only = json!({"fork_tools": ["mcp__fixture__echo"]});
    let child = fork(&app, &agent, &parent, echo_only).await;
    let child = child.expect_created();
    assert_eq!(
        child["tools"], parent["tools"],
        "declarations are byte-identical to the parent's"
    );
    assert_ne!(child["_meta"]["session_id"], parent["_meta"]["session_id"]);
    let notice = child["_meta"]["restriction_notice"].as_str().unwrap();
    assert!(notice.contains("mcp__fixture__echo"), "{notice}");
    assert!(parent["_meta"].get("restriction_notice").is_none());

    let denied = call(
        &app,
        &agent,
        &child,
        "mcp__fixture__add",
        json!({"a": 1, "b": 2}),
    )
    .await;
    assert_eq!(denied["isError"], true);
    assert_eq!(denied["_meta"]["receipt"]["reason"], "execution_allowlist");
    assert_eq!(
        denied["_meta"]["receipt"]["kind"], "decision",
        "nothing executed"
    );
    let allowed = call(
        &app,
        &agent,
        &child,
        "mcp__fixture__echo",
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(allowed["isError"], false, "{allowed}");
    // The parent is not narrowed.
    let parent_call = call(
        &app,
        &agent,
        &parent,
        "mcp__fixture__add",
        json!({"a": 1, "b": 2}),
    )
    .await;
    assert_eq!(parent_call["isError"], false, "{parent_call}");
}

/// Fork seed: "Treat an empty list as deny-all rather than as the existing tools: [] wildcard
/// behavior." and "Preserve existing fork behavior when fork_tools is omitted."
#[tokio::test]
async fn an_empty_list_denies_all_and_omission_restricts_nothing() {
    let (app, agent, parent) = setup().await;
    let none = fork(&app, &agent, &parent, json!({"fork_tools": []})).await;
    let none = none.json();
    assert_eq!(
        call(
            &app,
            &agent,
            &none,
            "mcp__fixture__echo",
            json!({"text": "x"})
        )
        .await["_meta"]["receipt"]["reason"],
        "execution_allowlist"
    );
    let open = fork(&app, &agent, &parent, json!({})).await.json();
    assert!(open["_meta"].get("restriction_notice").is_none());
    assert_eq!(
        call(
            &app,
            &agent,
            &open,
            "mcp__fixture__echo",
            json!({"text": "x"})
        )
        .await["isError"],
        false
    );
}

/// Fork seed: "Every entry must be a non-empty string without surrounding whitespace." "Bare *
/// is rejected" and "Wildcard entries are limited to mcp__* or a trailing MCP tool-prefix
/// pattern". CONTRACT §9: "A fork cannot create forks."
#[tokio::test]
async fn invalid_fork_tools_and_forks_of_forks_are_refused() {
    let (app, agent, parent) = setup().await;
    let mut messages = Vec::new();
    for (entries, path) in [
        (json!(["*"]), "fork_tools[0]"),
        (json!(["mcp__fixture__echo", " echo"]), "fork_tools[1]"),
        (json!([""]), "fork_tools[0]"),
        (json!(["mcp__fix*"]), "fork_tools[0]"),
        (json!(["read_*"]), "fork_tools[0]"),
    ] {
        let response = fork(&app, &agent, &parent, json!({"fork_tools": entries})).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        let field = response.expect_field_error(path);
        messages.push(field["message"].as_str().unwrap().to_owned());
    }
    messages.sort();
    messages.dedup();
    assert_eq!(messages.len(), 5, "each rejection has its own message");

    let all = json!({"fork_tools": ["mcp__*"]});
    let child = fork(&app, &agent, &parent, all).await.json();
    let grandchild = fork(&app, &agent, &child, json!({})).await;
    grandchild.expect_status(StatusCode::CONFLICT);
    let other = app.token("default", "someone", &[scope::RUN]).await;
    let strange = fork(&app, &other, &parent, json!({})).await;
    strange.expect_status(StatusCode::NOT_FOUND);
}

/// Issue 23: a fork copies its parent's current grant byte for byte, even after the policy and
/// the catalog changed (a fresh grant would hide `add` and carry echo's new description); its own
/// `tools/list` copies the parent's grant again, never a grant of its own; a parent whose lease
/// ended must list again before it is forked. Fork ids are `frk_…` (CONTRACT §2).
#[tokio::test]
async fn a_fork_copies_its_parent_s_grant_even_after_policy_and_catalog_changed() {
    let (app, agent, parent) = setup().await;
    let admin = app.token("default", "ops2", &[scope::ADMIN]).await;
    let parent_tools: Vec<&str> = texts_of(&parent["tools"], "name");
    assert!(
        parent_tools.contains(&"mcp__fixture__add"),
        "{parent_tools:?}"
    );
    // After the parent's grant: a policy that hides `add`, and echo's descriptor changes version.
    let policy = json!({"rules": [
        {"id": "no-add", "match": {"name": "mcp__fixture__add"}, "mode": "hide"},
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "strict", policy).await;
    app.describe(
        &admin,
        "mcp__fixture__echo",
        json!({"risk": ["read"], "version": "2"}),
    )
    .await;
    let fresh = app.new_session(&agent, json!({})).await;
    assert_ne!(fresh["tools"], parent["tools"], "a fresh grant differs now");

    let fixture_tools = json!({"fork_tools": ["mcp__fixture__*"]});
    let child = fork(&app, &agent, &parent, fixture_tools).await;
    let child = child.expect_created();
    assert_eq!(
        child["tools"], parent["tools"],
        "the parent's grant, byte for byte"
    );
    let fork_id = child["_meta"]["session_id"].as_str().unwrap().to_owned();
    assert!(fork_id.starts_with("frk_"), "{fork_id}");
    assert_eq!(fork_id.len(), 4 + 32);
    for key in ["policy_id", "policy_version", "environment"] {
        assert_eq!(child["_meta"][key], parent["_meta"][key], "{key}");
    }
    assert_ne!(
        child["_meta"]["manifest_id"],
        parent["_meta"]["manifest_id"]
    );
    assert_ne!(child["_meta"]["lease_id"], parent["_meta"]["lease_id"]);
    assert!(
        child["_meta"]["lease_expires_at"].as_str() <= parent["_meta"]["lease_expires_at"].as_str(),
        "a fork's lease ends with its parent's"
    );
    // The copied grant is the fork's own signed manifest document.
    let document = app.get(format!("/sessions/{fork_id}/manifest"));
    let document = document.as_(&agent).await.json();
    assert_eq!(document["document"]["session_id"], fork_id.as_str());
    assert_eq!(
        document["document"]["manifest_id"],
        child["_meta"]["manifest_id"]
    );
    assert_eq!(
        document["manifest_signature"],
        child["_meta"]["manifest_signature"]
    );

    // The fork's own tools/list over MCP copies the parent's grant again.
    let listed = list_in(&app, &agent, 1, &json!(fork_id)).await;
    assert_eq!(listed["result"]["tools"], parent["tools"], "{listed}");
    assert_eq!(listed["result"]["_meta"]["session_id"], fork_id.as_str());
    assert!(listed["result"]["_meta"]["restriction_notice"].is_string());
    // Calls under the copy still execute what the parent was granted (add is allowlisted).
    let copy = listed["result"].clone();
    let added = call(
        &app,
        &agent,
        &copy,
        "mcp__fixture__add",
        json!({"a": 2, "b": 3}),
    )
    .await;
    assert_eq!(added["isError"], false, "{added}");

    // A parent whose lease has ended is not forked until it lists again.
    sqlx::query("UPDATE manifests SET lease_expires_at = 0 WHERE session_id = $1")
        .bind(parent["_meta"]["session_id"].as_str().unwrap())
        .execute(app.store.pool())
        .await
        .unwrap();
    let refused = fork(&app, &agent, &parent, json!({})).await;
    let err = refused.expect_status(StatusCode::CONFLICT).json();
    assert!(
        text_of(&err["error"]["message"]).contains("lease has expired"),
        "{err}"
    );
    let relisted = list_in(&app, &agent, 2, &json!(fork_id)).await;
    assert!(
        relisted["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("lease has expired"),
        "a fork cannot list past its parent's lease: {relisted}"
    );
    let parent_again = list_in(&app, &agent, 3, &parent["_meta"]["session_id"]).await;
    assert_eq!(
        parent_again["result"]["tools"], fresh["tools"],
        "the parent's new grant is fresh"
    );
    let second = fork(&app, &agent, &parent, json!({})).await.json();
    assert_eq!(
        second["tools"], fresh["tools"],
        "and its next fork copies that one"
    );
}
