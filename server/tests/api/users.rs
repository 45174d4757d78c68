//! `/users` over REST: create, list, change scopes; users sign in with what was set.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{TestApp, error_code};

#[tokio::test]
async fn users_can_be_created_and_rescoped_and_then_sign_in() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let created = app
        .client
        .post(app.api("/users"))
        .bearer_auth(&admin)
        .json(
            &json!({"username": "alice", "password": "alice-password-1", "scopes": [scope::READ]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["created_by"], "ops");
    assert!(created.get("password_hash").is_none());

    let again = app
        .client
        .post(app.api("/users"))
        .bearer_auth(&admin)
        .json(
            &json!({"username": "alice", "password": "alice-password-1", "scopes": [scope::READ]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(again).await,
        (StatusCode::CONFLICT, "conflict".to_owned())
    );

    let stored = aperture::store::users::find(&app.store, "default", "alice")
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored
            .password_hash
            .starts_with("$argon2id$v=19$m=19456,t=2,p=1$")
    );

    // alice signs in; with `read` only, the token list is refused.
    let me: Value = app
        .sign_in(&app.browser, "alice", "alice-password-1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(me["scopes"], json!([scope::READ]));
    let (status, code) = error_code(app.server_fn(&app.browser, "tokens/list").await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::FORBIDDEN, "permission_denied")
    );

    // Made admin, the same session may list tokens at once (scopes are read per request).
    let updated = app
        .client
        .put(app.api("/users/alice/scopes"))
        .bearer_auth(&admin)
        .json(&json!({"scopes": [scope::ADMIN]}))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.status(), StatusCode::OK);
    assert_eq!(
        app.server_fn(&app.browser, "tokens/list").await.status(),
        StatusCode::OK
    );

    let list: Value = app
        .client
        .get(app.api("/users"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = list["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["admin", "alice"]);
}

#[tokio::test]
async fn invalid_users_name_the_field() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let cases = [
        (
            json!({"username": "Alice Smith", "password": "long-enough-pw", "scopes": []}),
            "username",
        ),
        (
            json!({"username": "bob", "password": "short", "scopes": []}),
            "password",
        ),
        (
            json!({"username": "bob", "password": "long-enough-pw", "scopes": ["ok", "NO"]}),
            "scopes[1]",
        ),
    ];
    for (body, path) in cases {
        let response = app
            .client
            .post(app.api("/users"))
            .bearer_auth(&admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        let err: Value = response.json().await.unwrap();
        assert_eq!(err["error"]["details"]["fields"][0]["path"], path, "{err}");
    }
    let missing = app
        .client
        .put(app.api("/users/nobody/scopes"))
        .bearer_auth(&admin)
        .json(&json!({"scopes": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(missing).await,
        (StatusCode::NOT_FOUND, "not_found".to_owned())
    );
}

#[tokio::test]
async fn a_fresh_database_gets_the_bootstrap_admin_and_nothing_else() {
    let app = TestApp::spawn().await;
    let users = aperture::store::users::list(&app.store, "default")
        .await
        .unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].username, "admin");
    assert_eq!(users[0].scopes.len(), engine::scope::APERTURE_SCOPES.len());
}
