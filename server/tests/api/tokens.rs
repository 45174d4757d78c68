//! `/tokens` over REST, and tokens authenticating.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, text_of};

async fn token_lifecycle(app: &TestApp) {
    let (admin_id, admin) = app.token_full("default", "ops", &[scope::ADMIN]).await;
    let body = json!({"actor_id": "support-agent", "scopes": [scope::RUN, "github:read"], "name": "support"});
    let created = app.post("/tokens").as_(&admin).json(body).await;
    let created = created.expect_created();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("apt_") && secret.len() == 47, "{secret}");
    let id = created["token"]["id"].as_str().unwrap().to_owned();
    // The principal that created it (issue 45 item 2): the admin's token.
    assert_eq!(created["token"]["created_by"], admin_id.as_str());
    assert_eq!(created["token"]["status"], "active");
    assert_eq!(
        created["token"]["scopes"],
        json!(["agent_tool_exposure:run", "github:read"])
    );

    // Only the SHA-256 of the secret is stored.
    let stored: Vec<(String,)> = sqlx::query_as("SELECT secret_sha256 FROM api_tokens")
        .fetch_all(app.store.pool())
        .await
        .unwrap();
    assert!(
        stored
            .iter()
            .all(|(h,)| h.len() == 64 && !h.contains(&secret[4..]))
    );
    assert!(
        stored
            .iter()
            .any(|(h,)| *h == aperture_core::principal::secret_hash(&secret))
    );

    // Listed, without the secret.
    let list = app.get("/tokens").as_(&admin).await.text();
    assert!(list.contains(&id));
    assert!(!list.contains(&secret));

    // The new token authenticates with its own scopes: run is not admin.
    let reply = app.get("/tokens").as_(&secret).await;
    reply.expect_status(StatusCode::FORBIDDEN);

    // Revoked: it no longer authenticates, and it says so in the list.
    let revoked = app.delete(format!("/tokens/{id}")).as_(&admin).await;
    let revoked = revoked.expect_ok();
    assert_eq!(revoked["status"], "revoked");
    let reply = app.get("/tokens").as_(&secret).await;
    reply.expect_status(StatusCode::UNAUTHORIZED);
    let missing = app.delete("/tokens/tok_doesnotexist").as_(&admin).await;
    missing.expect_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn tokens_can_be_created_listed_and_revoked() {
    token_lifecycle(&TestApp::spawn().await).await;
}

#[tokio::test]
async fn tokens_can_be_created_listed_and_revoked_on_postgres() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    token_lifecycle(&app).await;
}

#[tokio::test]
async fn invalid_token_requests_name_the_field() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let post = |body: Value| app.post("/tokens").as_(&admin).json(body);
    let cases = [
        (json!({"actor_id": "", "scopes": [scope::RUN]}), "actor_id"),
        (
            json!({"actor_id": "a b", "scopes": [scope::RUN]}),
            "actor_id",
        ),
        (json!({"actor_id": "bot", "scopes": []}), "scopes"),
        (
            json!({"actor_id": "bot", "scopes": [scope::RUN, "Not Valid"]}),
            "scopes[1]",
        ),
        (
            json!({"actor_id": "bot", "scopes": [scope::RUN], "expires_at": "tomorrow"}),
            "expires_at",
        ),
        (
            json!({"actor_id": "bot", "scopes": [scope::RUN], "expires_at": "2001-01-01T00:00:00Z"}),
            "expires_at",
        ),
        (
            json!({"actor_id": "bot", "scopes": [scope::RUN], "colour": "blue"}),
            "",
        ),
        (json!({"actor_id": 7, "scopes": [scope::RUN]}), "actor_id"),
    ];
    for (body, path) in cases {
        let response = post(body.clone()).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        let err = response.json();
        assert_eq!(err["error"]["code"], "invalid_argument", "{body}");
        if !path.is_empty() {
            response.expect_field_error(path);
        } else {
            assert!(
                text_of(&err["error"]["message"]).contains("colour"),
                "{err}"
            );
        }
    }
    // Not JSON at all.
    let garbage = app
        .post("/tokens")
        .as_(&admin)
        .header("content-type", "application/json")
        .body("{not json")
        .await;
    garbage.expect_error(StatusCode::BAD_REQUEST, "bad_request");
    // Too large.
    let huge = json!({"actor_id": "bot", "scopes": [scope::RUN], "name": "x".repeat(200 * 1024)});
    let response = post(huge).await;
    response.expect_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

#[tokio::test]
async fn expired_tokens_do_not_authenticate() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    let expires_at = soon
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let body = json!({"actor_id": "short", "scopes": [scope::ADMIN], "expires_at": expires_at});
    let created = app.post("/tokens").as_(&admin).json(body).await.json();
    let secret = created["secret"].as_str().unwrap();
    let listed = app.get("/tokens").as_(secret).await;
    listed.expect_status(StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let reply = app.get("/tokens").as_(secret).await;
    reply.expect_error(StatusCode::UNAUTHORIZED, "unauthenticated");
}

#[tokio::test]
async fn unknown_api_routes_are_json_404s() {
    let app = TestApp::spawn().await;
    let response = app.get("/nope").await;
    response.expect_error(StatusCode::NOT_FOUND, "not_found");
}

/// A token's first use is noted (`last_used_at`); later uses within the minute write nothing,
/// so calls do not queue behind SQLite's single writer.
#[tokio::test]
async fn a_tokens_use_is_noted_at_most_once_a_minute() {
    let app = TestApp::spawn().await;
    let (id, secret) = app.token_full("default", "bot", &[scope::READ]).await;
    let used = || async {
        aperture_core::store::tokens::find(&app.store, "default", &id)
            .await
            .unwrap()
            .unwrap()
            .last_used_at
    };
    assert_eq!(used().await, None);
    for _ in 0..2 {
        let reply = app.get("/policies").as_(&secret).await;
        reply.expect_status(StatusCode::OK);
    }
    let first = used().await.expect("noted");
    let reply = app.get("/policies").as_(&secret).await;
    reply.expect_status(StatusCode::OK);
    assert_eq!(used().await, Some(first), "not again within the minute");
}
