//! `/users` over REST: create, list, change scopes; users sign in with what was set.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, texts_of};

#[tokio::test]
async fn users_can_be_created_and_rescoped_and_then_sign_in() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let alice =
        json!({"username": "alice", "password": "alice-password-1", "scopes": [scope::READ]});
    let created = app.post("/users").as_(&admin).json(&alice).await;
    let created = created.expect_created();
    assert_eq!(created["created_by"], "ops");
    assert!(created.get("password_hash").is_none());

    let again = app.post("/users").as_(&admin).json(&alice).await;
    again.expect_error(StatusCode::CONFLICT, "conflict");

    let stored = aperture_core::store::users::find(&app.store, "default", "alice")
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored
            .password_hash
            .starts_with("$argon2id$v=19$m=19456,t=2,p=1$")
    );

    // alice signs in; with `read` only, the token list is refused.
    let me = app.sign_in(&app.browser, "alice", "alice-password-1").await;
    assert_eq!(me.json()["scopes"], json!([scope::READ]));
    let list = app.server_fn(&app.browser, "tokens/list").await;
    list.expect_error(StatusCode::FORBIDDEN, "permission_denied");

    // Made admin, the same session may list tokens at once (scopes are read per request).
    let admin_scopes = json!({"scopes": [scope::ADMIN]});
    let put = app
        .put("/users/alice/scopes")
        .as_(&admin)
        .json(admin_scopes);
    put.await.expect_status(StatusCode::OK);
    let list = app.server_fn(&app.browser, "tokens/list").await;
    list.expect_status(StatusCode::OK);

    let list: Value = app.get("/users").as_(&admin).await.json();
    let names: Vec<&str> = texts_of(&list["users"], "username");
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
        let response = app.post("/users").as_(&admin).json(&body).await;
        let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        response.expect_field_error(path);
    }
    let none = json!({"scopes": []});
    let missing = app.put("/users/nobody/scopes").as_(&admin).json(none).await;
    missing.expect_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn a_fresh_database_gets_the_bootstrap_admin_and_nothing_else() {
    let app = TestApp::spawn().await;
    let users = aperture_core::store::users::list(&app.store, "default")
        .await
        .unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].username, "admin");
    assert_eq!(users[0].scopes.len(), engine::scope::APERTURE_SCOPES.len());
}
