//! Upstream MCP servers over REST: registration, import into the catalog, sync, and the
//! operator-only and private-network rules.

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Db, Reply, Requests, TestApp, find, fixture_command, text_of};

/// The fixture MCP server as upstream `name`, with `more` members (`env`, `headers`).
fn fixture(name: &str, more: Value) -> Value {
    let mut body = json!({"name": name, "transport": "stdio", "command": fixture_command()});
    body.as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    body
}

async fn register(app: &TestApp, token: &str, name: &str) -> Reply {
    let env = json!({"env": {"FIXTURE_SECRET": "s3cr3t-value-123"}});
    app.post("/upstreams")
        .as_(token)
        .json(fixture(name, env))
        .await
}

#[tokio::test]
async fn a_registered_upstream_is_imported_with_its_raw_identity_and_unknown_risk() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let body = register(&app, &admin, "fixture").await.expect_created();
    assert!(body["sync"]["tools"].as_u64().unwrap() >= 5, "{body}");
    assert_eq!(body["upstream"]["status"], "connected");
    let upstream_id = body["upstream"]["id"].as_str().unwrap().to_owned();

    let tools: Value = app.get("/tools").as_(&admin).await.json();
    let read_file = find(&tools["tools"], "name", "mcp__fixture__read_file").clone();
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
    let listed = app.get("/upstreams").as_(&admin).await.text();
    assert!(!listed.contains("s3cr3t-value-123"), "{listed}");
    assert!(listed.contains(r#""status":"connected""#), "{listed}");

    // The default policy hides undescribed tools; describing one exposes it, and a sync keeps
    // the admin's descriptor.
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let names = TestApp::tool_names;
    let before: Value = app.post("/sessions").as_(&agent).await.json();
    assert!(names(&before).is_empty());
    app.describe(&admin, "mcp__fixture__echo", json!({"risk": ["read"]}))
        .await;
    let sync = app.post(format!("/upstreams/{upstream_id}:sync"));
    let report = sync.as_(&admin).await.expect_ok();
    assert_eq!(report["added"], json!([]));
    assert_eq!(report["removed"], json!([]));
    let after: Value = app.post("/sessions").as_(&agent).await.json();
    assert_eq!(names(&after), vec!["mcp__fixture__echo"]);

    // Names are unique per tenant.
    let again = register(&app, &admin, "fixture").await;
    again.expect_status(StatusCode::CONFLICT);
}

#[tokio::test]
async fn registration_works_on_postgres_too() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let registered = register(&app, &admin, "fixture").await;
    registered.expect_status(StatusCode::CREATED);
    let tools: Value = app.get("/tools").as_(&admin).await.json();
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
    let stdio = stdio.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    stdio.expect_field_error("transport");
    for url in [
        "http://127.0.0.1:9/mcp",
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/latest",
        "http://[::1]:80/mcp",
        "file:///etc/passwd",
        // Issue 24: special-purpose ranges that passed before (IANA registries).
        "http://[::127.0.0.1]:9/mcp",
        "http://[::7f00:1]/mcp",
        "http://198.18.0.1/mcp",
        "http://192.0.0.170/mcp",
        "http://[2001:db8::1]/mcp",
        "http://[64:ff9b:1::a00:1]/mcp",
        "http://[2002:7f00:1::1]/mcp",
    ] {
        let body = json!({"name": "remote", "transport": "streamable_http", "url": url});
        let response = app.post("/upstreams").as_(&admin).json(body).await;
        response.expect_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument");
    }
    let upstreams: Value = app.get("/upstreams").as_(&admin).await.json();
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
        // Issue 24: the wrong kind of configuration is named, not blamed on `command`.
        (
            json!({"name": "x", "transport": "streamable_http", "url": "https://example.com/mcp", "env": {"TOKEN": "t"}}),
            "env",
        ),
    ] {
        let response = app.post("/upstreams").as_(&admin).json(&body).await;
        let err: Value = response.json();
        let field = err["error"]["details"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("no field {path} in {err}"))
            .clone();
        if path == "env" {
            let message = field["message"].as_str().unwrap();
            assert!(message.contains("streamable_http"), "{message}");
        }
    }
}

#[tokio::test]
async fn an_upstream_that_cannot_start_is_reported_not_imported() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let broken =
        json!({"name": "broken", "transport": "stdio", "command": ["/nonexistent/mcp-server"]});
    let response = app.post("/upstreams").as_(&admin).json(broken).await;
    response.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    let upstreams: Value = app.get("/upstreams").as_(&admin).await.json();
    assert_eq!(upstreams["upstreams"][0]["status"], "error");
    assert!(
        text_of(&upstreams["upstreams"][0]["last_error"]).contains("cannot"),
        "{upstreams}"
    );
}

/// Issue 23 (seed: target pinning): an upstream's credentials are replaced in place, the whole
/// set, by an admin; the values are never echoed or journaled; calls under grants pinned to the
/// old credentials are `target_drift`, a fresh list re-pins and the upstream is reached with the
/// new ones. A stdio environment can run code, so tenant admins may set it only where the
/// operator allows stdio upstreams; the wrong kind of credentials is a field error.
#[tokio::test]
async fn credentials_are_replaced_in_place_and_old_grants_meet_target_drift() {
    const GETENV: &str = "mcp__fixture__getenv";
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let env = json!({"env": {"UPSTREAM_TOKEN": "first-secret-1111"}});
    let registered = app
        .post("/upstreams")
        .as_(&admin)
        .json(fixture("fixture", env));
    let registered = registered.await.expect_created();
    let id = registered["upstream"]["id"].as_str().unwrap().to_owned();
    app.describe(&admin, GETENV, json!({"risk": ["read"]}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let read_token = |list: Value| {
        let (app, agent) = (&app, &agent);
        async move {
            app.mcp_call(agent, &list, GETENV, json!({"name": "UPSTREAM_TOKEN"}))
                .await
        }
    };
    let before = app.mcp_list(&agent, json!({})).await;
    let first = read_token(before.clone()).await;
    assert_eq!(
        first["structuredContent"]["value"], "first-secret-1111",
        "{first}"
    );
    assert_eq!(
        first["_meta"]["receipt"]["target"]["transport"], "stdio",
        "{first}"
    );
    assert_eq!(
        first["_meta"]["receipt"]["target"]["environment"],
        "default"
    );

    let put = |body: Value, token: &str| {
        let path = format!("/upstreams/{id}/credentials");
        app.put(path).as_(token).json(body)
    };
    // Headers are an HTTP upstream's credentials; only admins replace any.
    let headers = put(json!({"headers": {"authorization": "x"}}), &admin).await;
    headers.expect_error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument");
    let by_agent = put(json!({"env": {"UPSTREAM_TOKEN": "x"}}), &agent).await;
    by_agent.expect_status(StatusCode::FORBIDDEN);
    let second = json!({"env": {"UPSTREAM_TOKEN": "second-secret-2222"}});
    let replaced = put(second, &admin).await;
    let body = replaced.expect_status(StatusCode::OK).text();
    assert!(!body.contains("second-secret"), "never echoed: {body}");
    assert!(body.contains(&id), "{body}");

    // The old grant is pinned to the old credentials.
    let drifted = read_token(before).await;
    assert_eq!(
        drifted["_meta"]["receipt"]["reason"], "target_drift",
        "{drifted}"
    );
    // A fresh list re-pins; the upstream now runs with the new environment.
    let after = app.mcp_list(&agent, json!({})).await;
    let second = read_token(after).await;
    assert_eq!(
        second["structuredContent"]["value"], "second-secret-2222",
        "{second}"
    );
    assert_eq!(
        second["_meta"]["receipt"]["target"]["credential_version"],
        1
    );

    // Journaled by name, never by value.
    let journaled: Vec<(String,)> = sqlx::query_as(
        "SELECT disclosures FROM journal WHERE disclosures LIKE '%upstream.credentials%'",
    )
    .fetch_all(app.store.pool())
    .await
    .unwrap();
    assert_eq!(journaled.len(), 1);
    assert!(
        journaled[0].0.contains("UPSTREAM_TOKEN"),
        "{}",
        journaled[0].0
    );
    let leaked: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM journal WHERE disclosures LIKE '%second-secret%' OR receipt LIKE '%second-secret%'",
    )
    .fetch_one(app.store.pool())
    .await
    .unwrap();
    assert_eq!(leaked, 0);
}

/// Issue 23: where the operator does not let tenant admins run commands (no
/// `APERTURE_ALLOW_STDIO_UPSTREAMS`), a stdio upstream's environment (`LD_PRELOAD` runs code) is
/// the operator's alone: the API refuses it with 403 and changes nothing.
#[tokio::test]
async fn a_stdio_environment_is_the_operator_s_unless_stdio_is_allowed() {
    let app = TestApp::spawn_with(Db::Sqlite, |c| c.allow_stdio_upstreams = false)
        .await
        .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    // The operator registers it (as `aperture upstream add --stdio` does).
    let operator = aperture_core::upstream::Upstreams::new(
        true,
        false,
        std::sync::Arc::new(aperture_core::secrets::SecretBox::load(&app.data_dir, None).unwrap()),
    );
    let (view, _) = operator
        .register_unchecked(
            &app.store,
            &app.journal,
            "default",
            &aperture_core::journal::Author::operator(),
            &app::dto::RegisterUpstreamRequest {
                name: "fixture".into(),
                transport: "stdio".into(),
                command: Some(fixture_command()),
                env: None,
                url: None,
                headers: None,
            },
        )
        .await
        .map_err(|e| e.into_app_error())
        .unwrap();
    operator.close_all().await;
    let refused = app.put(format!("/upstreams/{}/credentials", view.id));
    let evil = json!({"env": {"LD_PRELOAD": "/tmp/evil.so"}});
    let refused = refused.as_(&admin).json(evil).await;
    refused.expect_status(StatusCode::FORBIDDEN);
    let spec: String = sqlx::query_scalar("SELECT spec FROM upstreams WHERE id = $1")
        .bind(&view.id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert!(!spec.contains("LD_PRELOAD"), "{spec}");
}

/// All bytes of the SQLite database behind `app` (the file and its write-ahead log).
fn database_bytes(app: &TestApp) -> Vec<u8> {
    let url = app.store_url();
    let path = url
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    let mut bytes = std::fs::read(&path).unwrap();
    if let Ok(wal) = std::fs::read(format!("{path}-wal")) {
        bytes.extend(wal);
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Issue 24: upstream credentials are encrypted at rest under a key kept apart from the
/// database (`<data dir>/secrets.key`, 0600): the canary secret is nowhere in the database
/// file, the upstream still connects with it, and `aperture keys rotate-secrets` re-encrypts
/// under a new key while the server keeps working. The data directory is 0700, the database
/// file 0600.
#[tokio::test]
async fn upstream_secrets_are_encrypted_at_rest_and_rotate() {
    use std::os::unix::fs::PermissionsExt as _;
    const CANARY: &str = "canary-5ecret-at-rest-91827";
    const ROTATED: &str = "canary-rotated-at-rest-55301";
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let canary = fixture("fixture", json!({"env": {"FIXTURE_CANARY": CANARY}}));
    let response = app.post("/upstreams").as_(&admin).json(canary).await;
    let id = response.expect_created()["upstream"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stored: (String,) = sqlx::query_as("SELECT spec FROM upstreams WHERE id = $1")
        .bind(&id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert!(stored.0.starts_with("enc:v1:"), "{}", stored.0);
    let credentials = |value: &str| {
        let path = format!("/upstreams/{id}/credentials");
        let env = json!({"env": {"FIXTURE_CANARY": value}});
        app.put(path).as_(&admin).json(env)
    };
    let replaced = credentials(ROTATED).await;
    replaced.expect_status(StatusCode::OK);
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(app.store.pool())
        .await
        .unwrap();
    let bytes = database_bytes(&app);
    assert!(
        contains(&bytes, "mcp__fixture__"),
        "the file's plaintext is readable here"
    );
    for canary in [CANARY, ROTATED] {
        assert!(
            !contains(&bytes, canary),
            "{canary} is in the database file"
        );
    }
    // The server opens what it sealed: a sync connects with the new credentials.
    let sync = || app.post(format!("/upstreams/{id}:sync")).as_(&admin);
    sync().await.expect_status(StatusCode::OK);

    // Files: the key file and database are the owner's alone, the data directory too.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&app.data_dir.join("secrets.key")), 0o600);
    let db_path = app
        .store_url()
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(mode(std::path::Path::new(&db_path)), 0o600);
    let fresh = tempfile::tempdir().unwrap();
    let data_dir = fresh.path().join("data");
    let mut config = aperture::Config::new(&data_dir);
    config.addr = "127.0.0.1:0".parse().unwrap();
    let _built = aperture::Application::build(config).await.unwrap();
    assert_eq!(mode(&data_dir), 0o700);
    assert_eq!(mode(&data_dir.join("aperture.db")), 0o600);

    // Rotation, from the operator's command line, while the server runs.
    let before = stored.0.split(':').nth(2).unwrap().to_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aperture"))
        .args(["keys", "rotate-secrets"])
        .env("APERTURE_DATA_DIR", &app.data_dir)
        .env("APERTURE_DATABASE_URL", app.store_url())
        .env_remove("APERTURE_SECRETS_KEY")
        .env("APERTURE_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("re-encrypted 1 "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after: (String,) = sqlx::query_as("SELECT spec FROM upstreams WHERE id = $1")
        .bind(&id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    let new_key = after.0.split(':').nth(2).unwrap().to_owned();
    assert_ne!(new_key, before, "sealed under a new key");
    // The running server follows the rotation: it seals under the new key and opens it.
    let replaced = credentials(CANARY).await;
    replaced.expect_status(StatusCode::OK);
    let latest: (String,) = sqlx::query_as("SELECT spec FROM upstreams WHERE id = $1")
        .bind(&id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(latest.0.split(':').nth(2).unwrap(), new_key);
    sync().await.expect_status(StatusCode::OK);
}

/// Issue 24: a stdio upstream takes no HTTP headers; the field error says so (where the
/// operator allows stdio upstreams over the API), and nothing is registered.
#[tokio::test]
async fn headers_for_a_stdio_upstream_are_a_field_error() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let headers = fixture("x", json!({"headers": {"authorization": "Bearer t"}}));
    let response = app.post("/upstreams").as_(&admin).json(headers).await;
    let response = response.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    response.expect_field_error("headers");
    let listed: Value = app.get("/upstreams").as_(&admin).await.json();
    assert_eq!(listed["upstreams"], json!([]));
}

/// Issue 47 (item 2): a sync catalogues what the upstream offers besides tools — resources by
/// their normalised URI, templates, prompts by their canonical name — and says what another
/// upstream offers too (exposed by neither); removing an upstream removes what it offered.
#[tokio::test]
async fn a_sync_catalogues_resources_templates_and_prompts() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let first = app.register_fixture(&admin, &[]).await;
    let items = &first["sync"]["items"];
    assert_eq!(items["resources"], 3, "{first}");
    assert_eq!(items["templates"], 1);
    assert_eq!(items["prompts"], 2);
    assert_eq!(items["refused"], json!([]));
    assert_eq!(items["shared"], json!([]));
    let stored: Vec<(String, String)> = sqlx::query_as(
        "SELECT kind, item_key FROM catalog_items WHERE tenant_id = 'default' ORDER BY kind, item_key",
    )
    .fetch_all(app.store.pool())
    .await
    .unwrap();
    let stored: Vec<(&str, &str)> = stored
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        stored,
        [
            ("prompt", "mcp__fixture__greet"),
            ("prompt", "mcp__fixture__summarize"),
            ("resource", "docs://guide/setup"),
            ("resource", "docs://readme"),
            ("resource", "secret://keys/one"),
            ("template", "docs://pages/{page}"),
        ]
    );

    // The same server again under another name: its prompts are its own, its URIs are not.
    let body = json!({"name": "other", "transport": "stdio", "command": fixture_command()});
    let second = app
        .post("/upstreams")
        .as_(&admin)
        .json(body)
        .await
        .expect_created();
    let shared = &second["sync"]["items"]["shared"];
    let keys: Vec<&str> = shared
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "docs://readme",
            "docs://guide/setup",
            "secret://keys/one",
            "docs://pages/{page}"
        ],
        "{second}"
    );
    assert_eq!(shared[0]["upstream_ids"].as_array().unwrap().len(), 2);

    let id = second["upstream"]["id"].as_str().unwrap();
    app.delete(format!("/upstreams/{id}"))
        .as_(&admin)
        .await
        .expect_status(StatusCode::OK);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM catalog_items WHERE upstream_id = $1")
        .bind(id)
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0);
    let again = app.post(format!(
        "/upstreams/{}:sync",
        first["upstream"]["id"].as_str().unwrap()
    ));
    let again = again.as_(&admin).await.expect_ok();
    assert_eq!(again["items"]["shared"], json!([]), "{again}");
    assert_eq!(again["items"]["resources"], 3);
}
