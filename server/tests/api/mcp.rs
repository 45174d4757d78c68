//! `POST /mcp`: JSON-RPC over streamable HTTP with the manifest handshake.

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, echo_of, rpc, text_of};

#[tokio::test]
async fn the_manifest_handshake_over_mcp() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo"]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;

    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    let init = app.mcp_post(&agent).json(rpc(1, "initialize", init)).await;
    let init = init.expect_ok();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let initialized = app.mcp_post(&agent).json(initialized).await;
    initialized.expect_status(StatusCode::ACCEPTED);

    let list = app.mcp(&agent, rpc(2, "tools/list", json!({}))).await;
    let result = &list["result"];
    assert_eq!(result["_meta"]["environment"], "default");
    assert_eq!(result["_meta"]["policy_id"], "builtin_safe_read");
    let tools = result["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "only the described read tool: {list}");
    let meta = echo_of(result, "mcp__fixture__echo");
    let keys: Vec<Jwk> = app.keys().await;

    let call = |id: u64, arguments: Value, meta: &Value| {
        let params = json!({"name": "mcp__fixture__echo", "arguments": arguments, "_meta": meta});
        app.mcp(&agent, rpc(id, "tools/call", params))
    };
    let called = call(3, json!({"text": "over mcp"}), &meta).await;
    assert_eq!(called["id"], 3);
    assert_eq!(called["result"]["isError"], false, "{called}");
    assert!(text_of(&called["result"]["content"][0]["text"]).contains("over mcp"));
    verify_receipt_json(&called["result"]["_meta"]["receipt"], &keys).unwrap();

    let mut wrong = meta.clone();
    wrong["expected_schema_hash"] = json!("sha256:0000");
    let denied = call(4, json!({"text": "x"}), &wrong).await;
    assert_eq!(denied["result"]["isError"], true);
    assert_eq!(
        denied["result"]["_meta"]["receipt"]["reason"],
        "schema_hash_mismatch"
    );
    assert!(
        denied["result"].get("structuredContent").is_none(),
        "receipts live in _meta, not structuredContent"
    );
    verify_receipt_json(&denied["result"]["_meta"]["receipt"], &keys).unwrap();

    // Re-listing the same session grants a new manifest; the old lease no longer binds.
    let again = json!({"_meta": {"session_id": result["_meta"]["session_id"]}});
    let relist = app.mcp(&agent, rpc(5, "tools/list", again)).await;
    assert_eq!(
        relist["result"]["_meta"]["session_id"],
        result["_meta"]["session_id"]
    );
    assert_ne!(
        relist["result"]["_meta"]["manifest_id"],
        result["_meta"]["manifest_id"]
    );
}

#[tokio::test]
async fn protocol_errors_are_json_rpc_errors_and_auth_is_a_401_challenge() {
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let ping = rpc(1, "ping", Value::Null);
    let response = app.post_raw("/mcp").json(ping).await;
    let response = response.expect_status(StatusCode::UNAUTHORIZED);
    let challenge = response.header("www-authenticate");
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    let metadata = app.get_raw("/.well-known/oauth-protected-resource").await;
    let metadata = metadata.json();
    assert!(metadata["resource"].as_str().unwrap().ends_with("/mcp"));

    let garbage = app
        .post_raw("/mcp")
        .as_(&agent)
        .header("content-type", "application/json")
        .body("{nope")
        .await;
    let garbage = garbage.expect_ok();
    assert_eq!(garbage["error"]["code"], -32700);
    let unknown = app
        .mcp(&agent, rpc(7, "sampling/createMessage", Value::Null))
        .await;
    assert_eq!(
        (unknown["id"].clone(), unknown["error"]["code"].clone()),
        (json!(7), json!(-32601))
    );
    let bad_params = rpc(8, "tools/call", json!({"arguments": 3}));
    let bad_params = app.mcp(&agent, bad_params).await;
    assert_eq!(bad_params["error"]["code"], -32602);
    let bad_meta = rpc(
        9,
        "tools/call",
        json!({"name": "x", "_meta": {"manifest_id": 5}}),
    );
    let bad_meta = app.mcp(&agent, bad_meta).await;
    assert_eq!(bad_meta["error"]["code"], -32602);
    let no_version = app.mcp(&agent, json!({"id": 10, "method": "ping"})).await;
    assert_eq!(no_version["error"]["code"], -32600);
    let unknown_session = json!({"_meta": {"session_id": "ses_nope"}});
    let unknown_session = app
        .mcp(&agent, rpc(11, "tools/list", unknown_session))
        .await;
    assert_eq!(unknown_session["error"]["code"], -32602);
    // An oversize body is a JSON-RPC error too, not a bare 413.
    let huge = format!(
        r#"{{"jsonrpc": "2.0", "id": 13, "method": "ping", "params": {{"pad": "{}"}}}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let response = app.post_raw("/mcp");
    let response = response
        .as_(&agent)
        .header("content-type", "application/json")
        .body(huge)
        .await;
    let body = response.expect_status(StatusCode::PAYLOAD_TOO_LARGE).json();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let reader = app.token("default", "reader", &[scope::READ]).await;
    let no_run = app.mcp(&reader, rpc(12, "tools/list", Value::Null)).await;
    assert_eq!(no_run["error"]["code"], -32602);
}

/// Issue 4: "If the journal cannot be written, the call is denied with `journal_unavailable`
/// and nothing executes (fail closed), and service resumes by itself when the store recovers."
/// The journal table is taken away (renamed) and given back under the running server.
#[tokio::test]
async fn a_journal_that_cannot_record_stops_calls_until_it_recovers() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let registered = app
        .register_fixture(&admin, &["mcp__fixture__echo", "mcp__fixture__mutate"])
        .await;
    let upstream_id = registered["upstream"]["id"].as_str().unwrap().to_owned();
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp(&agent, rpc(1, "tools/list", json!({}))).await;
    let result = &list["result"];
    let call = |id: u64, tool: &str, arguments: Value| {
        let params = json!({"name": tool, "arguments": arguments, "_meta": echo_of(result, tool)});
        app.mcp_post(&agent).json(rpc(id, "tools/call", params))
    };
    let keys: Vec<Jwk> = app.keys().await;

    sqlx::query("ALTER TABLE journal RENAME TO journal_offline")
        .execute(app.store.pool())
        .await
        .unwrap();
    let mutate = json!({"description": "EXECUTED", "notify": false});
    let denied = call(2, "mcp__fixture__mutate", mutate).await.expect_ok();
    let receipt = &denied["result"]["_meta"]["receipt"];
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(receipt["reason"], "journal_unavailable", "{denied}");
    assert_eq!(receipt["decision"], "deny");
    assert!(
        receipt["seq"].is_null() && receipt["prev_hash"].is_null(),
        "not in the chain: {receipt}"
    );
    verify_receipt_json(receipt, &keys).expect("an unrecorded denial still verifies");

    sqlx::query("ALTER TABLE journal_offline RENAME TO journal")
        .execute(app.store.pool())
        .await
        .unwrap();
    // Nothing ran: the upstream's echo still has its own description.
    let report = app.post(format!("/upstreams/{upstream_id}:sync"));
    let report = report.as_(&admin).await.json();
    assert_eq!(report["changed"], json!([]), "{report}");

    // Service resumed by itself, on the same grant, and the chain is whole.
    let called = call(3, "mcp__fixture__echo", json!({"text": "back"})).await;
    let called = called.json();
    assert_eq!(called["result"]["isError"], false, "{called}");
    assert_eq!(called["result"]["_meta"]["receipt"]["reason"], "ok");
    verify_receipt_json(&called["result"]["_meta"]["receipt"], &keys).unwrap();
    let reports = aperture_core::journal::verify(&app.store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
}

/// Issue 4: "an `rmcp` client test in Rust speaking 2026-07-28": the official Rust SDK's client
/// in its stateless lifecycle (`server/discover`, protocol metadata in every request's `_meta`,
/// mirrored headers, no session) lists through the gateway, reads the manifest `_meta`, and
/// calls with the echo added to its request `_meta`.
#[tokio::test]
async fn an_rmcp_client_speaking_2026_07_28_lists_and_calls() {
    use rmcp::model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
    };
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo"]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(app.url("/mcp")).auth_header(agent),
    );
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("aperture-test", "1"),
    )
    .serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("the stateless lifecycle is accepted");

    let listed = client.list_tools(None).await.expect("tools/list");
    let list_meta = serde_json::to_value(listed.meta.clone().expect("manifest _meta")).unwrap();
    assert!(
        text_of(&list_meta["manifest_id"]).starts_with("man_"),
        "{list_meta}"
    );
    let tool = listed
        .tools
        .iter()
        .find(|t| t.name == "mcp__fixture__echo")
        .expect("echo is listed");
    let tool_meta = serde_json::to_value(tool.meta.clone().expect("tool _meta")).unwrap();
    let mut params = CallToolRequestParams::new("mcp__fixture__echo")
        .with_arguments(json!({"text": "stateless"}).as_object().unwrap().clone());
    let mut meta = rmcp::model::RequestMetaObject::default();
    for (key, value) in [
        ("session_id", &list_meta["session_id"]),
        ("manifest_id", &list_meta["manifest_id"]),
        ("lease_id", &list_meta["lease_id"]),
        ("tool_version", &tool_meta["toolVersion"]),
        ("expected_schema_hash", &tool_meta["schemaHash"]),
    ] {
        meta.insert(key.into(), value.clone());
    }
    params.meta = Some(meta);
    let called = client.call_tool(params).await.expect("tools/call");
    let called = serde_json::to_value(&called).unwrap();
    assert_eq!(called["isError"], false, "{called}");
    assert!(called.to_string().contains("stateless"), "{called}");
    assert_eq!(called["_meta"]["receipt"]["reason"], "ok", "{called}");
    client.cancel().await.ok();

    // The same revision with headers that do not mirror the body is refused before anything.
    let params = json!({"name": "mcp__fixture__echo", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}});
    let response = app
        .mcp_post(&admin)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "something_else")
        .json(rpc(1, "tools/call", params))
        .await;
    let body = response.expect_status(StatusCode::BAD_REQUEST).json();
    assert_eq!(body["error"]["code"], -32020, "{body}");
    let params = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2024-01-01", "io.modelcontextprotocol/clientCapabilities": {}}});
    let old = app
        .mcp_post(&admin)
        .header("mcp-protocol-version", "2024-01-01");
    let old = old.json(rpc(2, "tools/list", params)).await;
    let old = old.expect_status(StatusCode::BAD_REQUEST).json_or_null();
    assert_eq!(old["error"]["code"], -32022);
    assert_eq!(old["error"]["data"]["supported"], json!(["2026-07-28"]));
}

/// A file of the end2end folder, where `scripts/ensure-tools e2e` installs the npm packages.
fn end2end(path: &str) -> String {
    format!("{}/../end2end/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// Kills a child process when dropped (also when the test fails).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 4, real parts: the official TypeScript SDK (`@modelcontextprotocol/sdk`, which sends
/// no `_meta` of its own) lists through `/mcp` and calls with the echo added, in front of the
/// official reference server `@modelcontextprotocol/server-everything`, started over stdio and
/// over streamable HTTP; a wrong echo gets a verifiable deny receipt.
#[tokio::test]
async fn the_typescript_sdk_calls_server_everything_through_the_gateway() {
    let app = TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| {
        c.allow_private_upstreams = true;
    })
    .await
    .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let everything = end2end("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _http_server = Killed(
        std::process::Command::new("node")
            .args([everything.as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node runs server-everything"),
    );
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let upstreams = [
        json!({"name": "everything", "transport": "stdio", "command": ["node", everything, "stdio"]}),
        json!({"name": "everything-http", "transport": "streamable_http", "url": format!("http://127.0.0.1:{port}/mcp")}),
    ];
    for upstream in upstreams {
        let name = upstream["name"].as_str().unwrap().to_owned();
        let registered = app.post("/upstreams").as_(&admin).json(&upstream).await;
        registered.expect_status(StatusCode::CREATED);
        let read = json!({"risk": ["read"]});
        let described = app.put(format!("/tools/mcp__{name}__echo")).as_(&admin);
        described.json(read).await.expect_status(StatusCode::OK);
    }
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let keys: Vec<Jwk> = app.keys().await;

    for tool in ["mcp__everything__echo", "mcp__everything-http__echo"] {
        let out = tokio::process::Command::new("node")
            .arg(end2end("interop/mcp_client.mjs"))
            .env("APERTURE_MCP_URL", app.url("/mcp"))
            .env("APERTURE_TOKEN", &agent)
            .env("APERTURE_TOOL", tool)
            .env(
                "APERTURE_ARGS",
                r#"{"message": "hello from the TypeScript SDK"}"#,
            )
            .output()
            .await
            .expect("node runs the SDK client");
        assert!(
            out.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
        let names = seen["tools"].as_array().unwrap();
        assert!(names.contains(&json!("mcp__everything__echo")), "{seen}");
        assert!(
            names.contains(&json!("mcp__everything-http__echo")),
            "{seen}"
        );
        let ok = &seen["ok"];
        assert_eq!(ok["isError"], false, "{tool}: {ok}");
        assert!(
            text_of(&ok["content"][0]["text"]).contains("hello from the TypeScript SDK"),
            "{ok}"
        );
        verify_receipt_json(&ok["_meta"]["receipt"], &keys).unwrap();
        let denied = &seen["denied"];
        assert_eq!(denied["isError"], true);
        assert_eq!(
            denied["_meta"]["receipt"]["reason"], "schema_hash_mismatch",
            "{denied}"
        );
        verify_receipt_json(&denied["_meta"]["receipt"], &keys).unwrap();
    }
}

/// Issue 24 (MCP transport: "Servers MUST validate the Origin header", against DNS
/// rebinding): a browser page of another origin, or `Origin: null`, is refused with 403 before
/// anything else (even before the token is looked at); the server's own origin and
/// `APERTURE_ALLOWED_ORIGINS` pass, as do clients that send no `Origin`. A 2025-era request
/// naming a protocol revision the server does not speak is a 400.
#[tokio::test]
async fn mcp_refuses_foreign_origins_and_unknown_protocol_versions() {
    let app = TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| {
        c.allowed_origins = vec!["https://console.example".into()];
    })
    .await
    .unwrap();
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = rpc(1, "tools/list", json!({}));
    let send = |origin: Option<&str>, token: Option<&str>, version: Option<&str>| {
        let mut call = app
            .post_raw("/mcp")
            .header("accept", "application/json, text/event-stream")
            .json(&list);
        if let Some(o) = origin {
            call = call.header("origin", o);
        }
        if let Some(t) = token {
            call = call.as_(t);
        }
        if let Some(v) = version {
            call = call.header("mcp-protocol-version", v);
        }
        async move { call.await.status() }
    };
    for origin in [
        "http://attacker.example",
        "null",
        "http://127.0.0.1.attacker.example",
        "https://console.example.attacker.example",
    ] {
        assert_eq!(
            send(Some(origin), Some(&agent), None).await,
            StatusCode::FORBIDDEN,
            "{origin}"
        );
        assert_eq!(
            send(Some(origin), None, None).await,
            StatusCode::FORBIDDEN,
            "{origin}, before authentication"
        );
    }
    let own = app.url("");
    for origin in [
        own.as_str(),
        "https://console.example",
        "https://CONSOLE.example:443",
    ] {
        assert_eq!(
            send(Some(origin), Some(&agent), None).await,
            StatusCode::OK,
            "{origin}"
        );
    }
    assert_eq!(send(None, Some(&agent), None).await, StatusCode::OK);
    assert_eq!(
        send(None, Some(&agent), Some("2025-11-25")).await,
        StatusCode::OK
    );
    assert_eq!(
        send(None, Some(&agent), Some("1999-01-01")).await,
        StatusCode::BAD_REQUEST
    );
}

/// Issue 47 (item 5): the 2026-07-28 wire rules in the order the conformance suite's
/// `server-stateless` scenario and the specification's reference server check them, each
/// refusal HTTP 400 with the request's id: the header naming 2026-07-28 without the `_meta`
/// protocol fields is -32602; a header that differs from the body's version is -32020 even when
/// that version is unsupported; a version in `_meta` without the header is -32020; and
/// `initialize`, `ping` and methods the era lacks are HTTP 404 with -32601.
#[tokio::test]
async fn the_2026_07_28_wire_rules_hold_as_the_conformance_suite_checks_them() {
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    const VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    const CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    let send = |id: u64, method: &str, header: Option<&str>, params: Value| {
        let mut call = app.mcp_post(&agent).header("mcp-method", method);
        if let Some(version) = header {
            call = call.header("mcp-protocol-version", version);
        }
        call.json(rpc(id, method, params))
    };
    let refused = |answer: crate::requests::Reply, status: StatusCode, code: i64, id: u64| {
        let body = answer.expect_status(status).json();
        assert_eq!(body["error"]["code"], code, "{body}");
        assert_eq!(body["id"], id, "the error echoes the request id: {body}");
        body
    };

    // The header names 2026-07-28; the body lacks what it must carry.
    let no_meta = send(101, "server/discover", Some("2026-07-28"), json!({})).await;
    refused(no_meta, StatusCode::BAD_REQUEST, -32602, 101);
    let params = json!({"_meta": {CAPABILITIES: {}}});
    let no_version = send(102, "server/discover", Some("2026-07-28"), params).await;
    refused(no_version, StatusCode::BAD_REQUEST, -32602, 102);
    let params = json!({"_meta": {VERSION: "2026-07-28"}});
    let no_capabilities = send(104, "server/discover", Some("2026-07-28"), params).await;
    refused(no_capabilities, StatusCode::BAD_REQUEST, -32602, 104);
    // clientInfo is not required.
    let params = json!({"_meta": {VERSION: "2026-07-28", CAPABILITIES: {}}});
    let complete = send(105, "server/discover", Some("2026-07-28"), params).await;
    let complete = complete.expect_status(StatusCode::OK).json();
    assert_eq!(
        complete["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );

    // A header that differs from the body wins over the body's unsupported version.
    let params = json!({"_meta": {VERSION: "v999.0.0", CAPABILITIES: {}}});
    let differing = send(302, "server/discover", Some("2026-07-28"), params.clone()).await;
    refused(differing, StatusCode::BAD_REQUEST, -32020, 302);
    let unsupported = send(301, "server/discover", Some("v999.0.0"), params.clone()).await;
    let body = refused(unsupported, StatusCode::BAD_REQUEST, -32022, 301);
    assert_eq!(body["error"]["data"]["requested"], "v999.0.0");
    assert_eq!(body["error"]["data"]["supported"], json!(["2026-07-28"]));
    let params = json!({"_meta": {VERSION: "2026-07-28", CAPABILITIES: {}}});
    let headerless = send(303, "server/discover", None, params).await;
    refused(headerless, StatusCode::BAD_REQUEST, -32020, 303);

    // Methods the era does not have.
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "unknown/method",
    ] {
        let params = json!({"_meta": {VERSION: "2026-07-28", CAPABILITIES: {}}});
        let gone = send(500, method, Some("2026-07-28"), params).await;
        let body = refused(gone, StatusCode::NOT_FOUND, -32601, 500);
        assert!(body["error"]["message"].is_string(), "{method}: {body}");
    }
    // The 2025 eras keep `ping`.
    let ping = app.mcp_post(&agent).json(rpc(7, "ping", json!({}))).await;
    assert_eq!(
        ping.expect_status(StatusCode::OK).json()["result"],
        json!({})
    );
}

/// Issue 47 (item 6, the suite's `tasks-*` scenarios): in 2026-07-28 tasks are an extension.
/// `server/discover` declares it under `capabilities.extensions` and not in the v1 `tasks`
/// slot; `tasks/result` and `tasks/list`, which the extension removed, are unknown (HTTP 404,
/// -32601); `tasks/get`, `tasks/update` and `tasks/cancel` from a request that did not declare
/// the extension are -32021 (HTTP 400) naming it.
#[tokio::test]
async fn in_2026_tasks_are_the_extension_s_and_need_it_declared() {
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let meta = |capabilities: Value| {
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": capabilities})
    };
    let send = |method: &str, params: Value| {
        app.mcp_post(&agent)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .json(rpc(11, method, params))
    };
    let discovered = send("server/discover", json!({"_meta": meta(json!({}))}))
        .await
        .json();
    let capabilities = &discovered["result"]["capabilities"];
    assert!(capabilities.get("tasks").is_none(), "{capabilities}");
    assert!(
        capabilities["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{capabilities}"
    );

    let declared = meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}));
    for method in ["tasks/result", "tasks/list"] {
        let gone = send(method, json!({"taskId": "inv_x", "_meta": declared}))
            .await
            .expect_status(StatusCode::NOT_FOUND)
            .json();
        assert_eq!(gone["error"]["code"], -32601, "{method}: {gone}");
    }
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let params = json!({"taskId": "inv_x", "inputResponses": {}, "_meta": meta(json!({}))});
        let refused = send(method, params)
            .await
            .expect_status(StatusCode::BAD_REQUEST)
            .json();
        assert_eq!(refused["error"]["code"], -32021, "{method}: {refused}");
        assert!(
            refused["error"]["data"]["requiredCapabilities"]["extensions"]
                ["io.modelcontextprotocol/tasks"]
                .is_object(),
            "{refused}"
        );
        // Declared, the method is served (an unknown task is invalid params).
        let params = json!({"taskId": "inv_x", "inputResponses": {}, "_meta": declared});
        let served = send(method, params).await.json();
        assert_ne!(served["error"]["code"], -32021, "{method}: {served}");
        assert_ne!(served["error"]["code"], -32601, "{method}: {served}");
    }
}

/// Issue 47 (item 6, SEP-2243): in 2026-07-28 a tool parameter marked `x-mcp-header` travels in
/// an `Mcp-Param-*` header too, and the gateway holds the two to agreement as the tool is
/// advertised: a header that says another service than the arguments (an intermediary would
/// route on one and the upstream act on the other), a header left out, one sent twice, or a
/// malformed `=?base64?…?=` is HTTP 400 with -32020, before anything is decided or recorded.
/// Plain and Base64-wrapped values that agree run; names are case-insensitive.
#[tokio::test]
async fn an_mcp_param_header_that_does_not_mirror_its_argument_is_refused() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let deploy = "mcp__fixture__deploy";
    let rules = json!([{"id": "deploys", "match": {"name": deploy}, "mode": "allow"}]);
    app.activate_policy(&admin, "deploying", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let post = |method: &str, params: Value, headers: &[(&str, &str)]| {
        let mut post = app.mcp_post(&agent);
        post = post.header("mcp-protocol-version", "2026-07-28");
        post = post.header("mcp-method", method);
        if let Some(name) = params.get("name").and_then(Value::as_str) {
            post = post.header("mcp-name", name);
        }
        for (name, value) in headers {
            post = post.header(name, value);
        }
        post.json(rpc(7, method, params))
    };
    let listed = post("tools/list", json!({"_meta": meta}), &[]).await.json();
    let list = &listed["result"];
    let tool = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == deploy)
        .unwrap();
    assert_eq!(
        tool["inputSchema"]["properties"]["service"]["x-mcp-header"], "Service",
        "the annotation is advertised: {tool}"
    );
    let mut call_meta = echo_of(list, deploy);
    for (k, v) in meta.as_object().unwrap() {
        call_meta[k] = v.clone();
    }
    let call = json!({"name": deploy, "arguments": {"service": "billing"}, "_meta": call_meta});
    let decided = || async {
        aperture_core::store::journal::search(
            &app.store,
            "default",
            &aperture_core::store::journal::ReceiptFilter::default(),
            500,
        )
        .await
        .unwrap()
        .len()
    };
    let before = decided().await;

    for headers in [
        vec![("Mcp-Param-Service", "payments")],
        vec![],
        vec![("Mcp-Param-Service", "=?base64?YmlsbGluZw?=")],
        vec![
            ("Mcp-Param-Service", "billing"),
            ("mcp-param-service", "billing"),
        ],
    ] {
        let refused = post("tools/call", call.clone(), &headers).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{headers:?}");
        let body = refused.json();
        assert_eq!(body["error"]["code"], -32020, "{headers:?}: {body}");
        assert_eq!(body["id"], 7, "{body}");
    }
    assert_eq!(decided().await, before, "nothing was decided or recorded");

    for headers in [
        vec![("Mcp-Param-Service", "billing")],
        vec![("MCP-PARAM-SERVICE", "=?base64?YmlsbGluZw==?=")],
    ] {
        let ran = post("tools/call", call.clone(), &headers).await;
        assert_eq!(ran.status(), StatusCode::OK, "{headers:?}");
        let body = ran.json();
        assert_eq!(body["result"]["isError"], false, "{headers:?}: {body}");
        assert_eq!(
            body["result"]["structuredContent"]["received"]["service"], "billing",
            "{body}"
        );
    }
}

/// Issue 47 (item 5), the suite's `dns-rebinding-protection`: a server listening on loopback
/// answers only to its own names. A rebound name in `Host` is 403, with or without an
/// `Origin`, before the token is looked at; `localhost`, `127.0.0.1` and `[::1]` with the
/// server's port pass as `Host` and as `Origin`, another port's origin does not.
#[tokio::test]
async fn a_loopback_server_answers_only_to_its_own_names() {
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let port = app.address.rsplit(':').next().unwrap().to_owned();
    let discover = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                    "io.modelcontextprotocol/clientCapabilities": {}}});
    let send = |host: String, origin: Option<String>, token: Option<&str>| {
        let mut call = app
            .post_raw("/mcp")
            .header("accept", "application/json, text/event-stream")
            .header("host", host)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .json(rpc(1, "server/discover", discover.clone()));
        if let Some(origin) = origin {
            call = call.header("origin", origin);
        }
        if let Some(token) = token {
            call = call.as_(token);
        }
        async move { call.await.status() }
    };
    let evil = "evil.example.com".to_owned();
    let evil_origin = Some("http://evil.example.com".to_owned());
    assert_eq!(
        send(evil.clone(), evil_origin.clone(), Some(&agent)).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(evil.clone(), None, Some(&agent)).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(send(evil, None, None).await, StatusCode::FORBIDDEN);
    assert_eq!(
        send(format!("evil.example.com:{port}"), None, Some(&agent)).await,
        StatusCode::FORBIDDEN,
        "the right port under another name"
    );
    assert_eq!(
        send("localhost".to_owned(), None, Some(&agent)).await,
        StatusCode::FORBIDDEN,
        "a loopback name without the port"
    );
    for name in ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"] {
        let host = format!("{name}:{port}");
        let origin = Some(format!("http://{name}:{port}"));
        assert_eq!(
            send(host.clone(), origin, Some(&agent)).await,
            StatusCode::OK,
            "{host}"
        );
    }
    let other_port = if port == "1" { "2" } else { "1" };
    assert_eq!(
        send(
            format!("localhost:{port}"),
            Some(format!("http://localhost:{other_port}")),
            Some(&agent)
        )
        .await,
        StatusCode::FORBIDDEN,
        "another local program's page"
    );
}

/// Issue 47 (items 1 and 5, the suite's `server-session-lifecycle`): the `Mcp-Session-Id`
/// `initialize` opens belongs to its principal. A made-up id, another principal's, and one
/// after `DELETE /mcp` are 404 (-32001) on every request, notification and stream; the
/// session works until its client deletes it; `DELETE` of an unknown id is 404.
#[tokio::test]
async fn an_mcp_session_is_its_principals_until_deleted() {
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let other = app.token("default", "other", &[scope::RUN]).await;
    let session = app.mcp_initialize(&agent).await;
    assert!(session.starts_with("mcp_"), "{session}");
    let list = |token: &str, session: &str| {
        let call = app.mcp_post(token).header("mcp-session-id", session);
        call.header("mcp-protocol-version", "2025-11-25")
            .json(rpc(3, "tools/list", json!({})))
    };
    list(&agent, &session).await.expect_status(StatusCode::OK);
    let not_found = |answer: crate::requests::Reply| {
        let body = answer.expect_status(StatusCode::NOT_FOUND).json_or_null();
        assert_eq!(body["error"]["code"], -32001, "{body}");
    };
    not_found(list(&agent, "mcp_made_up").await);
    not_found(list(&other, &session).await);
    let notify = app.mcp_post(&other).header("mcp-session-id", &session);
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 1}});
    not_found(notify.json(cancelled).await);
    let listen = app
        .get_raw("/mcp")
        .as_(&other)
        .header("accept", "text/event-stream");
    not_found(listen.header("mcp-session-id", &session).await);

    // Another principal cannot end it; its own client can, once.
    let delete = |token: &str, session: &str| {
        let call = app.raw(reqwest::Method::DELETE, "/mcp").as_(token);
        call.header("mcp-session-id", session)
    };
    not_found(delete(&other, &session).await);
    list(&agent, &session).await.expect_status(StatusCode::OK);
    delete(&agent, &session)
        .await
        .expect_status(StatusCode::NO_CONTENT);
    not_found(list(&agent, &session).await);
    not_found(delete(&agent, &session).await);
    let anonymous = app.raw(reqwest::Method::DELETE, "/mcp");
    let anonymous = anonymous.header("mcp-session-id", &session).await;
    anonymous.expect_status(StatusCode::UNAUTHORIZED);

    // A new session works again; requests without one are unaffected.
    let again = app.mcp_initialize(&agent).await;
    assert_ne!(again, session);
    list(&agent, &again).await.expect_status(StatusCode::OK);
    let plain = app.mcp_post(&agent).json(rpc(4, "tools/list", json!({})));
    plain.await.expect_status(StatusCode::OK);
}

/// Issue 47 (item 1): a principal keeps at most 64 MCP sessions; opening more ends the least
/// recently used.
#[tokio::test]
async fn a_principal_keeps_at_most_64_mcp_sessions() {
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let first = app.mcp_initialize(&agent).await;
    for _ in 0..64 {
        app.mcp_initialize(&agent).await;
    }
    let list = app.mcp_post(&agent).header("mcp-session-id", &first);
    let list = list.json(rpc(1, "tools/list", json!({}))).await;
    list.expect_status(StatusCode::NOT_FOUND);
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mcp_sessions")
        .fetch_one(app.store.pool())
        .await
        .unwrap();
    assert_eq!(count, 64);
}

/// Issue 24: every absolute URL the server writes starts with `APERTURE_PUBLIC_URL` (RFC 9728
/// metadata, the `WWW-Authenticate` challenge, checkpoint origins), and a request's `Host`
/// header — which anyone can forge, and a cache in front may store — never ends up in a
/// response, dashboard pages included.
#[tokio::test]
async fn the_public_url_names_the_server_and_a_forged_host_never_comes_back() {
    let app = TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| {
        c.public_url = Some("https://gateway.example/edge/".into());
    })
    .await
    .unwrap();
    let evil = "evil.attacker.example";
    let metadata = app.get_raw("/.well-known/oauth-protected-resource");
    let metadata = metadata.header("host", evil).await.json();
    assert_eq!(metadata["resource"], "https://gateway.example/edge/mcp");
    let ping = rpc(1, "ping", Value::Null);
    // On a loopback listener a forged `Host` does not even reach the token check (issue 47,
    // item 5); a name the server answers to still gets the public URL, never itself.
    let forged = app.post_raw("/mcp").header("host", evil).json(&ping).await;
    let forged = forged.expect_status(StatusCode::FORBIDDEN);
    assert!(!forged.text().contains(evil), "{}", forged.text());
    let port = app.address.rsplit(':').next().unwrap().to_owned();
    let local = format!("localhost:{port}");
    let challenge = app.post_raw("/mcp").header("host", &local).json(ping).await;
    let challenge = challenge.expect_status(StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge.header("www-authenticate"),
        "Bearer resource_metadata=\"https://gateway.example/edge/.well-known/oauth-protected-resource\""
    );

    // The server's checkpoint (made on demand for an evidence bundle) fixes its log's origin
    // from the public URL's host (no APERTURE_LOG_ORIGIN_HOST set).
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo"]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    let session = list["_meta"]["session_id"].as_str().unwrap();
    let bundle = app.get(format!("/sessions/{session}/evidence"));
    let bundle = bundle.as_(&agent).await.json();
    let note = bundle["checkpoint"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("gateway.example/aperture/default\n"),
        "{bundle}"
    );

    for path in [
        "/",
        "/sign-in",
        "/receipts",
        "/.well-known/oauth-protected-resource",
        "/.well-known/aperture/keys",
        "/.well-known/aperture/checkpoints/default",
        "/no/such/page",
        "/v1/policies",
    ] {
        let response = app.get_raw(path).header("host", evil).await;
        let headers = format!("{:?}", response.headers());
        let body = response.text();
        assert!(!headers.contains(evil), "{path}: {headers}");
        assert!(!body.contains(evil), "{path}: {body}");
    }
}

/// Issue 27: `tools/list` pages (`cursor` / `nextCursor`) through one grant. The first page
/// grants the manifest; a `cursor` pages through that same manifest (same ids, lease and
/// signature) and grants nothing; the tools of a later page are called with that manifest's
/// binding. A cursor is the lister's alone: another actor's or tenant's token, a cursor edited
/// by hand, one past the end, one that is not a string and one whose lease ended are refused.
#[tokio::test]
async fn tools_list_pages_through_one_grant() {
    let app = TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| c.tools_page_size = 2)
        .await
        .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let read = [
        "mcp__fixture__add",
        "mcp__fixture__big",
        "mcp__fixture__echo",
        "mcp__fixture__stats",
        "mcp__fixture__getenv",
    ];
    app.register_fixture(&admin, &read).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = |token: String, params: Value| {
        let app = &app;
        async move {
            let list = app.mcp_post(&token).json(rpc(1, "tools/list", params));
            list.await.expect_ok()
        }
    };
    let manifests = || async {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM manifests")
            .fetch_one(app.store.pool())
            .await
            .unwrap();
        n
    };

    let first = list(agent.clone(), json!({})).await;
    let first = &first["result"];
    assert_eq!(first["tools"].as_array().unwrap().len(), 2, "{first}");
    assert_eq!(manifests().await, 1);
    let mut names: Vec<String> = Vec::new();
    let mut tools: Vec<Value> = first["tools"].as_array().unwrap().clone();
    let mut cursor = first["nextCursor"].clone();
    let mut pages = 1;
    while let Some(c) = cursor.as_str() {
        let page = list(agent.clone(), json!({"cursor": c})).await;
        let page = &page["result"];
        assert_eq!(
            page["_meta"], first["_meta"],
            "the same grant on every page"
        );
        tools.extend(page["tools"].as_array().unwrap().iter().cloned());
        cursor = page["nextCursor"].clone();
        pages += 1;
    }
    assert_eq!(pages, 3);
    names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
    names.sort();
    let mut expected: Vec<String> = read.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(names, expected);
    assert_eq!(manifests().await, 1, "a cursor grants nothing");

    // A tool of the last page, called with the first page's binding.
    let echo = tools
        .iter()
        .find(|t| t["name"] == "mcp__fixture__echo")
        .unwrap();
    let meta = &first["_meta"];
    let paged = json!({"_meta": meta, "tools": [echo]});
    let params = json!({"name": "mcp__fixture__echo", "arguments": {"text": "paged"},
        "_meta": echo_of(&paged, "mcp__fixture__echo")});
    let called = app.mcp(&agent, rpc(2, "tools/call", params)).await;
    assert_eq!(called["result"]["isError"], false, "{called}");

    // Not the lister's, or not a cursor.
    let second_cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let other_actor = app.token("default", "intruder", &[scope::RUN]).await;
    let other_tenant = app.token("acme", "agent", &[scope::RUN]).await;
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let manifest_id = meta["manifest_id"].as_str().unwrap();
    for (token, cursor) in [
        (other_actor.clone(), json!(second_cursor)),
        (other_tenant, json!(second_cursor)),
        (agent.clone(), json!(b64(&format!("{manifest_id}:99")))),
        (agent.clone(), json!(b64("man_nope:2"))),
        (agent.clone(), json!("not a cursor")),
        (agent.clone(), json!(2)),
    ] {
        let refused = list(token, json!({"cursor": cursor})).await;
        assert_eq!(refused["error"]["code"], -32602, "{cursor}: {refused}");
        assert!(refused.get("result").is_none(), "{refused}");
    }
    assert_eq!(manifests().await, 1);

    // The lease ended: list again.
    sqlx::query("UPDATE manifests SET lease_expires_at = 1")
        .execute(app.store.pool())
        .await
        .unwrap();
    let ended = list(agent.clone(), json!({"cursor": second_cursor})).await;
    assert_eq!(ended["error"]["code"], -32602, "{ended}");
    assert!(
        text_of(&ended["error"]["message"]).contains("list again"),
        "{ended}"
    );
}

/// Issue 27, real parts: the official TypeScript SDK calls the reference server's long-running
/// tool through the gateway with an `onprogress` callback and hears each step (the gateway
/// answers the call as a stream carrying the upstream's `notifications/progress`); then the
/// SDK's own `GET /mcp` stream hears `notifications/tools/list_changed` when an admin activates
/// a policy that hides a tool it listed, and its next listing no longer has it.
#[tokio::test]
async fn the_typescript_sdk_hears_progress_and_list_changed() {
    use tokio::io::AsyncBufReadExt as _;
    type Lines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;
    async fn next_line(lines: &mut Lines) -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("the SDK client answers in time")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    }
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let everything = end2end("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let upstream = json!({"name": "everything", "transport": "stdio", "command": ["node", everything, "stdio"]});
    let registered = app.post("/upstreams").as_(&admin).json(upstream).await;
    registered.expect_status(StatusCode::CREATED);
    const LONG: &str = "mcp__everything__trigger-long-running-operation";
    const ECHO: &str = "mcp__everything__echo";
    for tool in [LONG, ECHO] {
        let described = app.put(format!("/tools/{tool}")).as_(&admin);
        let read = json!({"risk": ["read"]});
        described.json(read).await.expect_status(StatusCode::OK);
    }
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let mut child = tokio::process::Command::new("node")
        .arg(end2end("interop/mcp_streams.mjs"))
        .env("APERTURE_MCP_URL", app.url("/mcp"))
        .env("APERTURE_TOKEN", &agent)
        .env("APERTURE_TOOL", LONG)
        .env("APERTURE_ARGS", r#"{"duration": 0.6, "steps": 3}"#)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs the SDK client");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut lines).await, json!({"ready": true}));
    let policy = json!({"rules": [{"id": "hide-echo", "match": {"name": ECHO}, "mode": "hide"},
                                  {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]});
    app.activate_policy(&admin, "no-echo", policy).await;
    let seen = next_line(&mut lines).await;
    let progress = seen["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 3, "{seen}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p["progress"], json!(i + 1), "{seen}");
        assert_eq!(p["total"], json!(3), "{seen}");
    }
    assert!(
        text_of(&seen["result"]["content"][0]["text"]).contains("Long running operation completed"),
        "{seen}"
    );
    verify_receipt_json(&seen["result"]["_meta"]["receipt"], &app.keys().await).unwrap();
    assert_eq!(
        seen["listChanged"]["method"], "notifications/tools/list_changed",
        "{seen}"
    );
    let relisted = seen["relisted"].as_array().unwrap();
    assert!(relisted.contains(&json!(LONG)), "{seen}");
    assert!(!relisted.contains(&json!(ECHO)), "{seen}");
    assert!(child.wait().await.unwrap().success());
}

/// Issue 27, real parts: the Python SDK (`mcp` from PyPI, installed by `scripts/ensure-tools
/// e2e`) as a client in both protocol eras: it lists, calls with the echo and a progress
/// callback (four steps relayed from the fixture upstream), is denied with a receipt for a
/// wrong schema hash, and hears `notifications/tools/list_changed` after a policy activation —
/// on its GET stream (2025-11-25) or a `subscriptions/listen` stream (2026-07-28).
#[tokio::test]
async fn the_python_sdk_speaks_both_eras() {
    use tokio::io::AsyncBufReadExt as _;
    const SLOW: &str = "mcp__fixture__slow";
    const ECHO: &str = "mcp__fixture__echo";
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[SLOW, ECHO]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let keys = app.keys().await;
    let policies = [
        json!({"rules": [{"id": "hide-echo", "match": {"name": ECHO}, "mode": "hide"},
                         {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]}),
        json!({"rules": [{"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]}),
    ];
    for (mode, policy) in ["legacy", "2026-07-28"].into_iter().zip(policies) {
        let mut child = tokio::process::Command::new(end2end(".venv/bin/python"))
            .arg(end2end("interop/mcp_python.py"))
            .env("APERTURE_MCP_URL", app.url("/mcp"))
            .env("APERTURE_TOKEN", &agent)
            .env("APERTURE_TOOL", SLOW)
            .env("APERTURE_ARGS", r#"{"millis": 400}"#)
            .env("APERTURE_MODE", mode)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python SDK client runs");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = async || -> Value {
            let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
                .await
                .expect("the Python client answers in time")
                .unwrap()
                .expect("a line");
            serde_json::from_str(&line).unwrap()
        };
        assert_eq!(next().await, json!({"ready": true}), "{mode}");
        app.activate_policy(&admin, &format!("policy-{mode}"), policy)
            .await;
        let seen = next().await;
        let expected_version = if mode == "legacy" { "2025-11-25" } else { mode };
        assert_eq!(seen["protocolVersion"], expected_version, "{seen}");
        let progress = seen["progress"].as_array().unwrap();
        assert_eq!(progress.len(), 4, "{mode}: {seen}");
        assert_eq!(progress[3]["message"], "step 4 of 4", "{seen}");
        let ok = &seen["ok"];
        assert_eq!(ok["isError"], false, "{mode}: {ok}");
        assert_eq!(ok["content"][0]["text"], "done", "{ok}");
        verify_receipt_json(&ok["_meta"]["receipt"], &keys).unwrap();
        let denied = &seen["denied"];
        assert_eq!(denied["isError"], true, "{denied}");
        assert_eq!(denied["_meta"]["receipt"]["reason"], "schema_hash_mismatch");
        verify_receipt_json(&denied["_meta"]["receipt"], &keys).unwrap();
        assert_eq!(seen["listChanged"], true, "{mode}: {seen}");
        assert!(child.wait().await.unwrap().success(), "{mode}");
    }
}

/// Issue 27, real parts: the TypeScript SDK's 2026 client (`@modelcontextprotocol/client`
/// pinned to 2026-07-28) lists without `initialize`, calls with the echo and a progress
/// callback (the fixture's four steps, relayed), is denied with a receipt for a wrong schema
/// hash, and hears `notifications/tools/list_changed` on its `subscriptions/listen` stream
/// after an admin hides a tool.
#[tokio::test]
async fn the_typescript_sdk_speaks_2026_07_28() {
    use tokio::io::AsyncBufReadExt as _;
    const SLOW: &str = "mcp__fixture__slow";
    const ECHO: &str = "mcp__fixture__echo";
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[SLOW, ECHO]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let mut child = tokio::process::Command::new("node")
        .arg(end2end("interop/mcp_client_2026.mjs"))
        .env("APERTURE_MCP_URL", app.url("/mcp"))
        .env("APERTURE_TOKEN", &agent)
        .env("APERTURE_TOOL", SLOW)
        .env("APERTURE_ARGS", r#"{"millis": 400}"#)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs the SDK client");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("the SDK client answers in time")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next().await, json!({"ready": true}));
    let policy = json!({"rules": [{"id": "hide-echo", "match": {"name": ECHO}, "mode": "hide"},
                                  {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}]});
    app.activate_policy(&admin, "no-echo", policy).await;
    let seen = next().await;
    assert_eq!(seen["protocolVersion"], "2026-07-28", "{seen}");
    let progress = seen["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 4, "{seen}");
    assert_eq!(progress[3]["message"], "step 4 of 4", "{seen}");
    let ok = &seen["ok"];
    assert_eq!(ok["isError"], false, "{ok}");
    assert_eq!(ok["content"][0]["text"], "done", "{ok}");
    let keys = app.keys().await;
    verify_receipt_json(&ok["_meta"]["receipt"], &keys).unwrap();
    let denied = &seen["denied"];
    assert_eq!(denied["isError"], true, "{denied}");
    assert_eq!(denied["_meta"]["receipt"]["reason"], "schema_hash_mismatch");
    assert_eq!(seen["honored"], json!({"toolsListChanged": true}), "{seen}");
    assert_eq!(
        seen["listChanged"]["method"], "notifications/tools/list_changed",
        "{seen}"
    );
    assert!(child.wait().await.unwrap().success());
}
