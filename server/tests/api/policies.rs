//! `/policies`: versions, validation with field paths, activation.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, find, texts_of};

fn support_policy() -> Value {
    json!({
        "default_mode": "hide",
        "rules": [
            {"id": "read-github", "match": {"prefix": "mcp__github__", "risk": "read"}, "mode": "allow",
             "reason": "read-only GitHub access", "redaction": "safe",
             "invocation": {"fixed_arguments": {"owner": "acme"}, "allowed_values": {"state": ["open"]},
                            "requires_idempotency": true, "max_duration_millis": 5000,
                            "max_result_bytes": 65536, "expires_after_seconds": 300}},
            {"id": "writes", "match": {"risk": "write"}, "mode": "approval_required"}
        ],
        "redaction_profiles": {"safe": {"summary": "truncate", "max_bytes": 8192, "destinations": ["llm", "mcp"]}}
    })
}

async fn versions_and_activation(app: &TestApp) {
    let writer = app
        .token("default", "policy-admin", &[scope::WRITE, scope::READ])
        .await;
    let put = |doc: Value| app.put("/policies/support-agents").as_(&writer).json(doc);
    let first = put(support_policy()).await.expect_ok();
    assert_eq!(first["version"], 1);
    assert_eq!(first["document"]["name"], "support-agents");
    let mut changed = support_policy();
    changed["default_mode"] = json!("deny");
    let second = put(changed).await.json();
    assert_eq!(second["version"], 2);

    let versions = app.get("/policies/support-agents/versions");
    let versions = versions.as_(&writer).await.json();
    let numbers: Vec<u64> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        vec![2, 1],
        "versions are immutable and numbered from 1"
    );
    assert_eq!(versions["versions"][1]["document"]["default_mode"], "hide");

    // Nothing is active yet: new sessions get builtin_safe_read.
    let (policy, version) = aperture_core::policies::effective(&app.store, "default", "default")
        .await
        .unwrap();
    assert_eq!((policy.name.as_str(), version), ("builtin_safe_read", 1));

    let activated = app.post("/policies/support-agents:activate");
    let activated = activated
        .as_(&writer)
        .json(json!({"environment": "prod"}))
        .await;
    let activated = activated.expect_ok();
    assert_eq!(activated["active_in"], json!(["prod"]));
    let (policy, version) = aperture_core::policies::effective(&app.store, "default", "prod")
        .await
        .unwrap();
    assert_eq!((policy.name.as_str(), version), ("support-agents", 2));
    let (policy, _) = aperture_core::policies::effective(&app.store, "default", "default")
        .await
        .unwrap();
    assert_eq!(
        policy.name, "builtin_safe_read",
        "other environments are unaffected"
    );

    // No body: the default environment.
    let reply = app.post("/policies/support-agents:activate");
    let reply = reply.as_(&writer).await;
    reply.expect_status(StatusCode::OK);
    let list: Value = app.get("/policies").as_(&writer).await.json();
    let support = find(&list["policies"], "policy_id", "support-agents");
    assert_eq!(support["active_in"], json!(["default", "prod"]));
    assert_eq!(support["latest_version"], 2);
    assert_eq!(list["policies"][0]["policy_id"], "builtin_safe_read");

    let reply = app.post("/policies/nope:activate").as_(&writer).await;
    reply.expect_status(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn policies_are_versioned_and_activated_per_environment() {
    versions_and_activation(&TestApp::spawn().await).await;
}

#[tokio::test]
async fn policies_are_versioned_and_activated_per_environment_on_postgres() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    versions_and_activation(&app).await;
}

/// Seed: "A negative limit is invalid, a ceiling too large to enforce is refused, and a
/// rate_bucket without a distributed limiter is rejected when the policy is written."
#[tokio::test]
async fn invalid_policies_get_422_with_field_paths_and_store_nothing() {
    let app = TestApp::spawn().await;
    let writer = app.token("default", "policy-admin", &[scope::WRITE]).await;
    let cases = [
        (
            json!({"rules": [{"id": "a", "mode": "allow", "invocation": {"max_result_bytes": -1}}]}),
            "rules[0].invocation.max_result_bytes",
        ),
        (
            json!({"rules": [{"id": "a", "mode": "allow", "invocation": {"max_duration_millis": 999_999_999}}]}),
            "rules[0].invocation.max_duration_millis",
        ),
        (
            json!({"rules": [{"id": "a", "mode": "allow", "invocation": {"rate_bucket": {"name": "gh", "per_minute": 10}}}]}),
            "rules[0].invocation.rate_bucket",
        ),
        (
            json!({"rules": [{"id": "a", "mode": "allow", "invocation": {"schema_overlay": {"additionalProperties": true}}}]}),
            "rules[0].invocation.schema_overlay.additionalProperties",
        ),
        (json!({"rules": [], "extra": 1}), "extra"),
        (json!({"name": "other-name"}), "name"),
    ];
    for (doc, path) in cases {
        let response = app.put("/policies/p1").as_(&writer).json(&doc).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        response.expect_field_error(path);
    }
    // max_cost_cents is accepted (enforced at execution).
    let reply = app
        .put("/policies/p1")
        .as_(&writer)
        .json(json!({"rules": [{"id": "a", "mode": "allow", "invocation": {"max_cost_cents": 5}}]}))
        .await;
    reply.expect_status(StatusCode::OK);
    let versions = aperture_core::store::policies::versions(&app.store, "default", "p1")
        .await
        .unwrap();
    assert_eq!(versions.len(), 1, "only the valid document was stored");

    let reply = app.put("/policies/builtin_safe_read");
    let reply = reply.as_(&writer).json(json!({})).await;
    reply.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    let bad_id = app.put("/policies/Bad%20Id");
    let bad_id = bad_id.as_(&writer).json(json!({})).await;
    assert_eq!(bad_id.json_or_null()["error"]["code"], "invalid_argument");
}

#[tokio::test]
async fn validate_reports_every_problem_without_storing() {
    let app = TestApp::spawn().await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let doc = json!({"name": "draft", "rules": [
        {"id": "a", "mode": "allow", "invocation": {"max_result_bytes": -1, "expires_after_seconds": 100000}}
    ]});
    let result = app.post("/policies:validate").as_(&reader).json(&doc).await;
    let result = result.json();
    assert_eq!(result["valid"], false);
    let paths: Vec<&str> = texts_of(&result["errors"], "path");
    assert_eq!(
        paths,
        vec![
            "rules[0].invocation.max_result_bytes",
            "rules[0].invocation.expires_after_seconds"
        ]
    );
    let fine = app.post("/policies:validate");
    let fine = fine.as_(&reader).json(json!({"name": "draft"})).await;
    let fine = fine.json();
    assert_eq!(fine["valid"], true);
    assert!(
        aperture_core::store::policies::list_latest(&app.store, "default")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_builtin_policy_is_always_readable() {
    let app = TestApp::spawn().await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let builtin = app.get("/policies/builtin_safe_read").as_(&reader).await;
    let builtin = builtin.json();
    assert_eq!(
        builtin["document"]["rules"][0]["match"]["risk_exactly"],
        json!(["read"])
    );
    assert_eq!(builtin["document"]["default_mode"], "hide");
}

/// Seed: "Invocation policy — fixed arguments, allowed enum values, and a schema overlay that
/// narrows the advertised schema so the agent literally cannot request fields the policy
/// forbids." Seen by an admin before saving.
#[tokio::test]
async fn a_draft_is_previewed_over_tools_without_being_stored() {
    let app = TestApp::spawn().await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let tool = |name: &str, risk: &str| {
        json!({
            "name": name, "version": "3",
            "input_schema": {"type": "object", "properties": {"owner": {"type": "string"}, "state": {"type": "string"}}},
            "risk": [risk], "source": {"kind": "builtin"}
        })
    };
    let request = json!({
        "policy": support_policy(),
        "context": {"environment": "prod"},
        "tools": [tool("mcp__github__list_issues", "read"), tool("mcp__github__close_issue", "write"), tool("shell", "destructive")]
    });
    let response = app.post("/policies:preview");
    let response = response.as_(&reader).json(&request).await;
    let response = response.expect_status(StatusCode::OK);
    let preview: Value = response.json();
    assert_eq!(preview["valid"], true);
    assert_eq!(preview["lease_seconds"], 300);
    let tools = preview["tools"].as_array().unwrap();
    let by_name = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
    let list = by_name("mcp__github__list_issues");
    assert_eq!(list["mode"], "allow");
    assert_eq!(list["rule_id"], "read-github");
    assert!(
        list["inputSchema"]["properties"].get("owner").is_none(),
        "fixed arguments leave the schema"
    );
    assert_eq!(
        list["inputSchema"]["properties"]["state"]["enum"],
        json!(["open"])
    );
    assert!(list["schemaHash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(
        by_name("mcp__github__close_issue")["mode"],
        "approval_required"
    );
    assert_eq!(by_name("shell")["mode"], "hide");
    assert_eq!(by_name("shell")["listed"], false);

    let bad = app.post("/policies:preview").as_(&reader).json(json!({"policy": {"name": "d", "rules": [{"id": "x", "mode": "allow", "invocation": {"max_result_bytes": -1}}]}, "tools": []})).await;
    let bad: Value = bad.json();
    assert_eq!(bad["valid"], false);
    assert_eq!(
        bad["errors"][0]["path"],
        "rules[0].invocation.max_result_bytes"
    );
    assert!(
        aperture_core::store::policies::list_latest(&app.store, "default")
            .await
            .unwrap()
            .is_empty()
    );
}
