//! Dashboard sign-in, sessions, sign-out and CSRF.

use reqwest::{Client, StatusCode};

use crate::helpers::{ADMIN_PASSWORD, Db, TestApp, error_code};

fn session_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("aperture_session="))
        .map(str::to_owned)
}

fn cookie_value(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or_default().to_owned()
}

async fn me_with_cookie(app: &TestApp, cookie: &str) -> serde_json::Value {
    let response = app
        .client
        .post(app.url("/ui/me"))
        .header("accept", "application/json")
        .header("origin", &app.address)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[tokio::test]
async fn sign_in_sets_a_hardened_cookie_and_rotates_the_id() {
    let app = TestApp::spawn().await;
    let response = app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    assert_eq!(response.status(), StatusCode::OK);
    let first = session_cookie(&response).expect("a session cookie");
    assert!(first.contains("HttpOnly"), "{first}");
    assert!(first.contains("SameSite=Lax"), "{first}");
    assert!(
        !first.contains("Secure"),
        "plain HTTP must not mark the cookie Secure: {first}"
    );
    let me: serde_json::Value = response.json().await.unwrap();
    assert_eq!(me["username"], "admin");
    assert_eq!(me["tenant_id"], "default");

    // Signing in again from the same browser gives a new id; the old one stops working.
    let again = app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    let second = session_cookie(&again).expect("a rotated cookie");
    assert_ne!(cookie_value(&first), cookie_value(&second));
    assert_eq!(
        me_with_cookie(&app, &cookie_value(&first)).await,
        serde_json::Value::Null
    );
    assert_eq!(
        me_with_cookie(&app, &cookie_value(&second)).await["username"],
        "admin"
    );
}

#[tokio::test]
async fn sign_out_invalidates_the_session_in_the_store() {
    let app = TestApp::spawn().await;
    let response = app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    let cookie = cookie_value(&session_cookie(&response).unwrap());
    let out = app.server_fn(&app.browser, "sign-out").await;
    assert!(
        out.status().is_success() || out.status().is_redirection(),
        "{}",
        out.status()
    );
    // Replaying the old cookie does not bring the session back.
    assert_eq!(me_with_cookie(&app, &cookie).await, serde_json::Value::Null);
    let (status, code) = error_code(app.server_fn(&app.browser, "tokens/list").await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unauthenticated")
    );
}

#[tokio::test]
async fn wrong_password_and_unknown_user_get_the_same_clear_401() {
    let app = TestApp::spawn().await;
    let wrong = app.sign_in(&app.browser, "admin", "not-the-password").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(session_cookie(&wrong).is_none());
    let wrong: serde_json::Value = wrong.json().await.unwrap();
    let unknown: serde_json::Value = app
        .sign_in(&app.browser, "nobody", "whatever-password")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(wrong["message"], "wrong username or password");
    assert_eq!(wrong, unknown);
}

#[tokio::test]
async fn malformed_and_oversize_sign_ins_are_client_errors() {
    let app = TestApp::spawn().await;
    let missing = app
        .browser
        .post(app.url("/ui/sign-in"))
        .header("accept", "application/json")
        .form(&[("username", "admin")])
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);

    let empty = app.sign_in(&app.browser, "", "").await;
    let (status, code) = error_code(empty).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument")
    );

    let huge = "x".repeat(200 * 1024);
    let oversize = app.sign_in(&app.browser, "admin", &huge).await;
    assert_eq!(oversize.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn the_hundred_and_first_failure_in_an_hour_is_refused_even_with_the_right_password() {
    let app = TestApp::spawn().await;
    let bad = app.sign_in(&app.browser, "admin", "wrong-password-1").await;
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    let hour = 3_600_000;
    assert_eq!(
        aperture::store::users::recent_sign_in_failures(&app.store, "default", "admin", hour)
            .await
            .unwrap(),
        1
    );
    for _ in 0..99 {
        aperture::store::users::record_sign_in_failure(&app.store, "default", "admin", hour)
            .await
            .unwrap();
    }
    let (status, code) = error_code(app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
    );
    // Other accounts are not affected.
    let other = app
        .sign_in(&app.browser, "someone-else", "wrong-password")
        .await;
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn cross_site_state_changes_are_refused() {
    let app = TestApp::spawn().await;
    app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    let evil = app
        .browser
        .post(app.url("/ui/tokens/list"))
        .header("origin", "https://evil.example")
        .header("accept", "application/json")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    let fetch_meta = app
        .browser
        .post(app.url("/ui/tokens/list"))
        .header("sec-fetch-site", "cross-site")
        .header("accept", "application/json")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(fetch_meta.status(), StatusCode::FORBIDDEN);
    let same = app.server_fn(&app.browser, "tokens/list").await;
    assert_eq!(same.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_burst_of_sign_ins_does_not_block_other_requests() {
    let app = TestApp::spawn().await;
    let token = app
        .token("default", "probe", &["agent_tool_exposure:admin"])
        .await;
    let mut logins = tokio::task::JoinSet::new();
    for i in 0..20 {
        let client = Client::new();
        let url = app.url("/ui/sign-in");
        let origin = app.address.clone();
        logins.spawn(async move {
            let password = if i % 2 == 0 {
                ADMIN_PASSWORD.to_owned()
            } else {
                format!("wrong-{i}")
            };
            client
                .post(url)
                .header("origin", origin)
                .header("accept", "application/json")
                .form(&[
                    ("tenant", "default"),
                    ("username", "admin"),
                    ("password", password.as_str()),
                ])
                .send()
                .await
                .map(|r| r.status())
        });
    }
    // While the hashes run, a health check and a database-backed API call are answered.
    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let tokens = app
        .client
        .get(app.api("/tokens"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(tokens.status(), StatusCode::OK);
    let mut ok = 0;
    let mut finished_before = 0;
    while let Some(r) = logins.try_join_next() {
        let status = r.unwrap().unwrap();
        ok += usize::from(status == StatusCode::OK);
        finished_before += 1;
    }
    assert!(
        finished_before < 20,
        "the other requests were answered only after every sign-in had finished"
    );
    while let Some(r) = logins.join_next().await {
        let status = r.unwrap().unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::UNAUTHORIZED,
            "{status}"
        );
        ok += usize::from(status == StatusCode::OK);
    }
    assert_eq!(ok, 10);
}

#[tokio::test]
async fn sign_in_works_on_postgres_too() {
    let Some(app) = TestApp::spawn_on(Db::Postgres).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let response = app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    assert_eq!(response.status(), StatusCode::OK);
    let list = app.server_fn(&app.browser, "tokens/list").await;
    assert_eq!(list.status(), StatusCode::OK);
    let wrong = app.sign_in(&app.browser, "admin", "nope-nope-nope").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_sign_in_ends_twelve_hours_later_however_active() {
    let app = TestApp::spawn().await;
    let response = app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    let cookie = cookie_value(&session_cookie(&response).unwrap());
    assert_eq!(me_with_cookie(&app, &cookie).await["username"], "admin");

    // Move the sign-in time back past the absolute limit.
    let (id, data): (String, String) = sqlx::query_as("SELECT id, data FROM dashboard_sessions")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    let mut data: serde_json::Value = serde_json::from_str(&data).unwrap();
    let twelve_hours_ago = aperture::store::now_ms() - aperture::auth::dashboard::ABSOLUTE_MS - 1;
    data["aperture.user"]["signed_in_at"] = twelve_hours_ago.into();
    sqlx::query("UPDATE dashboard_sessions SET data = $1 WHERE id = $2")
        .bind(data.to_string())
        .bind(&id)
        .execute(app.store.pool())
        .await
        .unwrap();

    assert_eq!(me_with_cookie(&app, &cookie).await, serde_json::Value::Null);
    let (left,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM dashboard_sessions WHERE id = $1")
        .bind(&id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "the expired sign-in is deleted from the store");
}
