//! Exposure sessions over REST: the catalog, descriptors, manifests, leases and signatures.

use engine::descriptor::{ToolDescriptor, ToolSource};
use engine::receipt::{Jwk, ManifestDocument, verify_manifest_with_keys};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, find, texts_of};

fn tool(name: &str, risk: &[&str]) -> ToolDescriptor {
    ToolDescriptor {
        name: name.into(),
        version: "1".into(),
        title: Some(format!("{name} title")),
        description: Some(format!("{name} does things")),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}, "owner": {"type": "string"}}}),
        output_schema: None,
        annotations: None,
        family: None,
        risk: risk.iter().map(|s| (*s).to_owned()).collect(),
        required_scope: None,
        source: ToolSource::Mcp {
            upstream_id: "ups_1".into(),
            server: "github".into(),
            tool: name.trim_start_matches("mcp__github__").into(),
        },
        dry_run_argument: None,
        price_cents: None,
    }
}

async fn seed_catalog(app: &TestApp) {
    for t in [
        tool("mcp__github__list_issues", &["read"]),
        tool("mcp__github__close_issue", &["write"]),
        tool("mcp__github__delete_repo", &["write", "destructive"]),
        tool("mcp__github__undescribed", &[]),
    ] {
        aperture_core::store::catalog::upsert(&app.store, "default", &t)
            .await
            .unwrap();
    }
}

async fn keys(app: &TestApp) -> Vec<Jwk> {
    let set: Value = app.get_raw("/.well-known/aperture/keys").await.json();
    serde_json::from_value(set["keys"].clone()).unwrap()
}

/// Seed: "on every tools/list it builds a per-session exposure manifest from server-owned
/// security descriptors and a tenant policy" and "Each tool in the list also carries a per-tool
/// schemaHash and an exposureMode."
async fn sessions_grant_signed_manifests(app: &TestApp) {
    seed_catalog(app).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let agent = app.token("default", "agent-1", &[scope::RUN]).await;
    let policy = json!({"rules": [
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow", "invocation": {"expires_after_seconds": 600}},
        {"id": "no-delete", "match": {"risk": "destructive"}, "mode": "deny", "reason": "never delete repositories"},
        {"id": "writes", "match": {"risk": "write"}, "mode": "approval_required"}
    ]});
    app.activate_policy(&admin, "agents", policy).await;

    let created = app.post("/sessions").as_(&agent).await;
    let created = created.expect_status(StatusCode::CREATED);
    let list: Value = created.json();
    let meta = &list["_meta"];
    for key in [
        "session_id",
        "manifest_id",
        "lease_id",
        "lease_expires_at",
        "policy_id",
        "policy_version",
        "environment",
        "manifest_signature",
    ] {
        assert!(!meta[key].is_null(), "_meta.{key} missing: {list}");
    }
    assert_eq!(meta["policy_id"], "agents");
    assert_eq!(meta["policy_version"], 1);
    assert_eq!(meta["environment"], "default");
    let names: Vec<&str> = texts_of(&list["tools"], "name");
    assert_eq!(
        names,
        vec![
            "mcp__github__close_issue",
            "mcp__github__delete_repo",
            "mcp__github__list_issues"
        ],
        "hidden tools are absent"
    );
    let delete = &list["tools"][1];
    assert_eq!(
        delete["_meta"]["exposureMode"], "deny",
        "deny is listed but never callable"
    );
    assert!(delete["inputSchema"].is_object());
    // The lease is shortened by the listed tools' expires_after_seconds.
    let expires = time::OffsetDateTime::parse(
        meta["lease_expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = expires - time::OffsetDateTime::now_utc();
    assert!(
        left <= time::Duration::seconds(600) && left > time::Duration::seconds(590),
        "{left}"
    );

    // A client can recompute every schemaHash from what it was shown: the members CONTRACT §3
    // names (so not `_meta`, nor `execution`, which says how a call may run).
    for t in list["tools"].as_array().unwrap() {
        let hash = t["_meta"]["schemaHash"].as_str().unwrap().to_owned();
        let shown: serde_json::Map<String, Value> = t
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| {
                [
                    "name",
                    "title",
                    "description",
                    "inputSchema",
                    "outputSchema",
                    "annotations",
                ]
                .contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(engine::canonical::hash_of(&shown).unwrap(), hash);
    }

    // The manifest document is signed, verifies with the published keys, and matches the list.
    let sid = meta["session_id"].as_str().unwrap();
    let doc = app.get(format!("/sessions/{sid}/manifest"));
    let doc = doc.as_(&agent).await.json();
    let document: ManifestDocument = serde_json::from_value(doc["document"].clone()).unwrap();
    let signature = doc["manifest_signature"].as_str().unwrap();
    assert_eq!(signature, meta["manifest_signature"]);
    verify_manifest_with_keys(&document, signature, &keys(app).await).unwrap();
    assert_eq!(document.actor_id, "agent-1");
    assert_eq!(document.tools.len(), 3);
    assert_eq!(
        document.tools[2].schema_hash,
        list["tools"][2]["_meta"]["schemaHash"]
    );
    let mut tampered = document.clone();
    tampered.tools[1].exposure_mode = "allow".into();
    assert!(verify_manifest_with_keys(&tampered, signature, &keys(app).await).is_err());

    // The grant is journaled as a manifest receipt.
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let receipts = app.get(format!("/receipts?session_id={sid}"));
    let receipts = receipts.as_(&reader).await.json();
    assert_eq!(receipts["receipts"][0]["kind"], "manifest");
    assert_eq!(receipts["receipts"][0]["manifest_id"], meta["manifest_id"]);

    // Own sessions only, for `:run`; all for `:read`.
    let other = app.token("default", "agent-2", &[scope::RUN]).await;
    let theirs = app.get(format!("/sessions/{sid}")).as_(&other).await;
    theirs.expect_status(StatusCode::NOT_FOUND);
    let seen = app.get(format!("/sessions/{sid}")).as_(&reader).await;
    let seen = seen.json();
    assert_eq!(seen["actor_id"], "agent-1");
    assert_eq!(seen["manifest_id"], meta["manifest_id"]);

    // Revoked by its own actor.
    let revoke = app.post(format!("/sessions/{sid}:revoke"));
    let revoke = revoke.as_(&other).await;
    revoke.expect_status(StatusCode::NOT_FOUND);
    let revoked = app.post(format!("/sessions/{sid}:revoke"));
    let revoked = revoked.as_(&agent).await.json();
    assert!(revoked["revoked_at"].is_string());
}

#[tokio::test]
async fn sessions_grant_signed_manifests_on_sqlite() {
    sessions_grant_signed_manifests(&TestApp::spawn().await).await;
}

#[tokio::test]
async fn sessions_grant_signed_manifests_on_postgres() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    sessions_grant_signed_manifests(&app).await;
}

/// Seed: "The default policy, builtin_safe_read … hides everything else. Write, destructive, and
/// unknown tools require an explicit policy that opts them in." Descriptors are server-owned:
/// once an admin describes a tool as read-only, the default policy exposes it.
#[tokio::test]
async fn descriptors_decide_what_the_default_policy_exposes() {
    let app = TestApp::spawn().await;
    seed_catalog(&app).await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let agent = app.token("default", "agent-1", &[scope::RUN]).await;
    let names = TestApp::tool_names;

    let first: Value = app.post("/sessions").as_(&agent).await.json();
    assert_eq!(names(&first), vec!["mcp__github__list_issues"]);
    assert_eq!(first["_meta"]["policy_id"], "builtin_safe_read");

    app.describe(
        &admin,
        "mcp__github__undescribed",
        json!({"risk": ["read"], "family": "github", "version": "2"}),
    )
    .await;
    let second: Value = app.post("/sessions").as_(&agent).await.json();
    assert_eq!(
        names(&second),
        vec!["mcp__github__list_issues", "mcp__github__undescribed"]
    );
    assert_eq!(second["tools"][1]["_meta"]["toolVersion"], "2");

    let tools: Value = app.get("/tools").as_(&admin).await.json();
    let undescribed = find(&tools["tools"], "name", "mcp__github__undescribed").clone();
    assert_eq!(undescribed["family"], "github");
    assert_eq!(undescribed["source"]["server"], "github");

    for (body, path) in [
        (json!({"risk": []}), "risk"),
        (json!({"risk": ["Read Only"]}), "risk[0]"),
        (
            json!({"risk": ["read"], "required_scope": "NOT OK"}),
            "required_scope",
        ),
        (
            json!({"risk": ["read"], "dry_run_argument": "q"}),
            "dry_run_argument",
        ),
    ] {
        let response = app.put("/tools/mcp__github__list_issues");
        let response = response.as_(&admin).json(&body).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        response.expect_field_error(path);
    }
    let reply = app.put("/tools/nope");
    let reply = reply.as_(&admin).json(json!({"risk": ["read"]})).await;
    reply.expect_status(StatusCode::NOT_FOUND);
    let reply = app.post("/sessions");
    let reply = reply
        .as_(&agent)
        .json(json!({"environment": "Prod!"}))
        .await;
    reply.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
}
