//! Upstream MCP servers over REST: registration, import into the catalog, sync, and the
//! operator-only and private-network rules.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Db, TestApp, error_code, fixture_command};

async fn register(app: &TestApp, token: &str, name: &str) -> reqwest::Response {
    app.client
        .post(app.api("/upstreams"))
        .bearer_auth(token)
        .json(&json!({"name": name, "transport": "stdio", "command": fixture_command(), "env": {"FIXTURE_SECRET": "s3cr3t-value-123"}}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_registered_upstream_is_imported_with_its_raw_identity_and_unknown_risk() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let response = register(&app, &admin, "fixture").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert!(body["sync"]["tools"].as_u64().unwrap() >= 5, "{body}");
    assert_eq!(body["upstream"]["status"], "connected");
    let upstream_id = body["upstream"]["id"].as_str().unwrap().to_owned();

    let tools: Value = app
        .client
        .get(app.api("/tools"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let read_file = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__fixture__read_file")
        .expect("sanitized name")
        .clone();
    assert_eq!(
        read_file["source"]["tool"], "read file",
        "the raw name is kept"
    );
    assert_eq!(read_file["source"]["server"], "fixture");
    assert_eq!(read_file["source"]["upstream_id"], upstream_id.as_str());
    assert_eq!(
        read_file["risk"],
        json!(["unknown"]),
        "undescribed: unknown until an admin says otherwise"
    );

    // Secrets are write-only.
    let listed = app
        .client
        .get(app.api("/upstreams"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!listed.contains("s3cr3t-value-123"), "{listed}");
    assert!(listed.contains(r#""status":"connected""#), "{listed}");

    // The default policy hides undescribed tools; describing one exposes it, and a sync keeps
    // the admin's descriptor.
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let names = |v: &Value| -> Vec<String> {
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let before: Value = app
        .client
        .post(app.api("/sessions"))
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(names(&before).is_empty());
    let described = app
        .client
        .put(app.api("/tools/mcp__fixture__echo"))
        .bearer_auth(&admin)
        .json(&json!({"risk": ["read"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(described.status(), StatusCode::OK);
    let sync = app
        .client
        .post(app.api(&format!("/upstreams/{upstream_id}:sync")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(sync.status(), StatusCode::OK);
    let report: Value = sync.json().await.unwrap();
    assert_eq!(report["added"], json!([]));
    assert_eq!(report["removed"], json!([]));
    let after: Value = app
        .client
        .post(app.api("/sessions"))
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(names(&after), vec!["mcp__fixture__echo"]);

    // Names are unique per tenant.
    let again = register(&app, &admin, "fixture").await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn registration_works_on_postgres_too() {
    let Some(app) = TestApp::spawn_on(Db::Postgres).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    assert_eq!(
        register(&app, &admin, "fixture").await.status(),
        StatusCode::CREATED
    );
    let tools: Value = app
        .client
        .get(app.api("/tools"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "mcp__fixture__echo")
    );
}

/// CONTRACT §11: "Over the API, stdio is refused unless the operator set
/// APERTURE_ALLOW_STDIO_UPSTREAMS=1, and URLs resolving to loopback, private or link-local
/// addresses are refused unless APERTURE_ALLOW_PRIVATE_UPSTREAMS=1".
#[tokio::test]
async fn tenant_admins_cannot_run_commands_or_reach_the_private_network() {
    let app = TestApp::spawn_with(Db::Sqlite, |c| c.allow_stdio_upstreams = false)
        .await
        .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let stdio = register(&app, &admin, "fixture").await;
    assert_eq!(stdio.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let err: Value = stdio.json().await.unwrap();
    assert_eq!(err["error"]["details"]["fields"][0]["path"], "transport");
    for url in [
        "http://127.0.0.1:9/mcp",
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/latest",
        "http://[::1]:80/mcp",
        "file:///etc/passwd",
    ] {
        let response = app
            .client
            .post(app.api("/upstreams"))
            .bearer_auth(&admin)
            .json(&json!({"name": "remote", "transport": "streamable_http", "url": url}))
            .send()
            .await
            .unwrap();
        let (status, code) = error_code(response).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument"),
            "{url}"
        );
    }
    let upstreams: Value = app
        .client
        .get(app.api("/upstreams"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(upstreams["upstreams"], json!([]), "nothing was registered");
    for (body, path) in [
        (
            json!({"name": "Bad_Name", "transport": "streamable_http", "url": "https://example.com/mcp"}),
            "name",
        ),
        (
            json!({"name": "x", "transport": "carrier-pigeon"}),
            "transport",
        ),
        (json!({"name": "x", "transport": "streamable_http"}), "url"),
    ] {
        let response = app
            .client
            .post(app.api("/upstreams"))
            .bearer_auth(&admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        let err: Value = response.json().await.unwrap();
        assert_eq!(err["error"]["details"]["fields"][0]["path"], path, "{err}");
    }
}

#[tokio::test]
async fn an_upstream_that_cannot_start_is_reported_not_imported() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let response = app
        .client
        .post(app.api("/upstreams"))
        .bearer_auth(&admin)
        .json(&json!({"name": "broken", "transport": "stdio", "command": ["/nonexistent/mcp-server"]}))
        .send()
        .await
        .unwrap();
    let (status, code) = error_code(response).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    let upstreams: Value = app
        .client
        .get(app.api("/upstreams"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(upstreams["upstreams"][0]["status"], "error");
    assert!(
        upstreams["upstreams"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot"),
        "{upstreams}"
    );
}
