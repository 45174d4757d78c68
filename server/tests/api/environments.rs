//! Issue 23 (item 7): environments are a boundary, not a hint. The environment chooses the
//! policy, so a caller may open sessions only in the environments its token (or user) carries;
//! `preset` and `entity` stay hints the client chooses, which a policy may use only to narrow.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Reply, Requests, TestApp, find, rpc, text_of};

const ECHO: &str = "mcp__fixture__echo";

async fn create_token(app: &TestApp, admin: &str, body: Value) -> Reply {
    app.post("/tokens").as_(admin).json(&body).await
}

/// A plain `:run` token may not name a more permissive environment: new tokens get the
/// tenant's default environment; naming another is `-32602` on `/mcp` and 403 on REST, also for
/// hosted agents and for a session opened earlier; a token given `prod` opens `prod` sessions.
#[tokio::test]
async fn a_token_opens_sessions_only_in_its_environments() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    // `prod` is where a permissive policy is active.
    app.put("/policies/open")
        .as_(&admin)
        .json(json!({"rules": [{"id": "all", "mode": "allow"}]}))
        .await;
    let reply = app.post("/policies/open:activate");
    let reply = reply.as_(&admin).json(json!({"environment": "prod"})).await;
    reply.expect_status(StatusCode::OK);

    let agent = json!({"actor_id": "agent", "scopes": [scope::RUN]});
    let plain = create_token(&app, &admin, agent).await.expect_created();
    assert_eq!(plain["token"]["environments"], json!(["default"]));
    let plain = plain["secret"].as_str().unwrap().to_owned();

    let in_prod = json!({"_meta": {"environment": "prod"}});
    let refused = app.mcp(&plain, rpc(1, "tools/list", in_prod)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        text_of(&refused["error"]["message"]).contains("prod"),
        "{refused}"
    );
    let prod = json!({"environment": "prod"});
    let rest = app.post("/sessions").as_(&plain).json(&prod).await;
    rest.expect_error(StatusCode::FORBIDDEN, "permission_denied");
    let agent = app.post("/agents").as_(&plain).json(&prod).await;
    agent.expect_status(StatusCode::FORBIDDEN);
    // Nothing was opened in `prod` by the refused attempts.
    let opened: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM exposure_sessions WHERE environment = 'prod'")
            .fetch_one(app.store.pool())
            .await
            .unwrap();
    assert_eq!(opened, 0);
    // Its own environment works.
    let list = app.mcp_list(&plain, json!({})).await;
    assert_eq!(list["_meta"]["environment"], "default");

    let agent = json!({"actor_id": "agent", "scopes": [scope::RUN], "environments": ["prod"]});
    let prod = create_token(&app, &admin, agent).await.expect_created();
    let prod = prod["secret"].as_str().unwrap().to_owned();
    let list = app.mcp_list(&prod, json!({"environment": "prod"})).await;
    assert_eq!(list["_meta"]["policy_id"], "open");
    // The same actor's default-environment token cannot list that `prod` session again.
    let in_session = json!({"_meta": {"session_id": list["_meta"]["session_id"]}});
    let again = app.mcp(&plain, rpc(2, "tools/list", in_session)).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
    let bad = json!({"actor_id": "agent", "scopes": [scope::RUN], "environments": ["Prod!"]});
    let refused = create_token(&app, &admin, bad).await;
    let refused = refused.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    refused.expect_field_error("environments[0]");
}

/// Tokens and users that existed before environments keep every one (`["*"]`); an admin
/// narrows a user's environments with `PUT /users/{name}/scopes`.
#[tokio::test]
async fn earlier_tokens_keep_every_environment_and_users_can_be_narrowed() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let legacy = json!({"actor_id": "legacy", "scopes": [scope::RUN]});
    let old = create_token(&app, &admin, legacy).await.json_or_null();
    // As the migration leaves a token made before it.
    sqlx::query("UPDATE api_tokens SET environments = '[\"*\"]' WHERE id = $1")
        .bind(old["token"]["id"].as_str().unwrap())
        .execute(app.store.pool())
        .await
        .unwrap();
    let legacy = old["secret"].as_str().unwrap();
    let anywhere = app
        .mcp_list(legacy, json!({"environment": "staging"}))
        .await;
    assert_eq!(anywhere["_meta"]["environment"], "staging");

    let dana =
        json!({"username": "dana", "password": "a-long-enough-password", "scopes": [scope::RUN]});
    let dana = app
        .post("/users")
        .as_(&admin)
        .json(dana)
        .await
        .expect_created();
    assert_eq!(dana["environments"], json!(["default"]), "{dana}");
    let staging = json!({"scopes": [scope::RUN], "environments": ["staging"]});
    let narrowed = app
        .put("/users/dana/scopes")
        .as_(&admin)
        .json(staging)
        .await;
    let dana = narrowed.expect_ok();
    assert_eq!(dana["environments"], json!(["staging"]));
    let listed: Value = app.get("/users").as_(&admin).await.json();
    let admin_user = find(&listed["users"], "username", "admin");
    assert_eq!(
        admin_user["environments"],
        json!(["*"]),
        "the bootstrap admin"
    );
}

/// `preset` and `entity` stay hints the client chooses, so they may only narrow: a policy whose
/// hint rule would loosen what the same policy gives without the hint is refused with the rule's
/// path; rules may match `entity`; both hints are in the signed manifest document.
#[tokio::test]
async fn hints_only_narrow_and_are_signed_into_the_manifest() {
    use engine::receipt::{ManifestDocument, verify_manifest_with_keys};
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO, "mcp__fixture__add"])
        .await;
    let put = |body: Value| app.put("/policies/hinted").as_(&admin).json(body);
    // Naming preset `triage` would turn approval into allow, and entity `acme` would list what
    // the default hides: both refused.
    for (rules, path) in [
        (
            json!([{"id": "triage-open", "match": {"preset": "triage"}, "mode": "allow"},
                   {"id": "reads", "match": {"risk": "read"}, "mode": "approval_required"}]),
            "rules[0].mode",
        ),
        (
            json!([{"id": "reads", "match": {"risk": "read"}, "mode": "allow"},
                   {"id": "acme-all", "match": {"entity": "acme"}, "mode": "allow"}]),
            "rules[1].mode",
        ),
    ] {
        let response = put(json!({"rules": rules})).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        let field = response.expect_field_error(path);
        assert!(
            text_of(&field["message"]).contains("only narrow"),
            "{field}"
        );
    }
    // Narrowing with a hint is fine: entity `acme` needs approval for reads. (With `name`
    // alone it would not be: a tool of that name without the read label is hidden without the
    // hint, and approval would loosen that.)
    let narrowing = put(json!({"rules": [
        {"id": "acme-reads", "match": {"entity": "acme", "risk": "read"}, "mode": "approval_required"},
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
    ]}))
    .await;
    narrowing.expect_status(StatusCode::OK);
    let reply = app.post("/policies/hinted:activate").as_(&admin).await;
    reply.expect_status(StatusCode::OK);

    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let mode_of = |list: &Value| {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == ECHO)
            .map(|t| t["_meta"]["exposureMode"].clone())
    };
    let plain = app.mcp_list(&agent, json!({})).await;
    assert_eq!(mode_of(&plain), Some(json!("allow")));
    let acme = app
        .mcp_list(&agent, json!({"entity": "acme", "preset": "triage"}))
        .await;
    assert_eq!(mode_of(&acme), Some(json!("approval_required")));

    let sid = acme["_meta"]["session_id"].as_str().unwrap();
    let doc = app.get(format!("/sessions/{sid}/manifest"));
    let doc = doc.as_(&agent).await.json();
    assert_eq!(doc["document"]["entity"], "acme", "{doc}");
    assert_eq!(doc["document"]["preset"], "triage", "{doc}");
    let document: ManifestDocument = serde_json::from_value(doc["document"].clone()).unwrap();
    let keys = app.keys().await;
    let signature = doc["manifest_signature"].as_str().unwrap();
    verify_manifest_with_keys(&document, signature, &keys).unwrap();
    let mut other = document.clone();
    other.entity = Some("globex".into());
    assert!(
        verify_manifest_with_keys(&other, signature, &keys).is_err(),
        "the hint is signed"
    );
    // Without hints, the document has neither member (documents signed before still verify).
    let plain_doc = app
        .get(format!(
            "/sessions/{}/manifest",
            plain["_meta"]["session_id"].as_str().unwrap()
        ))
        .as_(&agent)
        .await;
    let plain_doc = plain_doc.json();
    assert!(plain_doc["document"].get("entity").is_none());
    assert!(plain_doc["document"].get("preset").is_none());
}
