//! Issue 47 (item 7): the MCP SDKs' own clients, unmodified and without the bridge, as a
//! tenant's stock clients (`binding: "implicit"`, no echo): they list, call, read a resource,
//! get a prompt, and answer an elicitation and a sampling request of the upstream's through
//! the gateway, in both eras.

use engine::receipt::verify_receipt_json;
use engine::scope;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp};

fn end2end(path: &str) -> String {
    format!("{}/../end2end/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// A tenant whose stock clients may call `echo` and `ask` (which may ask for elicitations and
/// sampling), read `docs://…` and get `greet`: the agent's token.
async fn stock_tenant(app: &TestApp) -> String {
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let rules = json!([
        {"id": "echo", "match": {"name": "mcp__fixture__echo"}, "mode": "allow"},
        {"id": "ask", "match": {"name": "mcp__fixture__ask"}, "mode": "allow",
         "client_requests": ["sampling", "elicitation"]},
        {"id": "docs", "resource": {"uri": "docs://*"}, "mode": "allow"},
        {"id": "greet", "prompt": "mcp__fixture__greet", "mode": "allow"}
    ]);
    app.activate_policy(&admin, "stock", json!({"rules": rules}))
        .await;
    app.put("/settings/mcp")
        .as_(&admin)
        .json(json!({"binding": "implicit"}))
        .await
        .expect_ok();
    app.token("default", "agent", &[scope::RUN]).await
}

/// What every SDK saw, checked alike.
fn assert_saw_everything(seen: &Value, keys: &[engine::receipt::Jwk], label: &str) {
    let tools = seen["tools"].as_array().unwrap();
    assert!(
        tools.contains(&json!("mcp__fixture__ask")),
        "{label}: {seen}"
    );
    let echo = &seen["echo"];
    assert!(
        echo["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("from ")),
        "{label}: {echo}"
    );
    let receipt = &echo["_meta"]["receipt"];
    assert_eq!(receipt["binding"], "implicit", "{label}: {receipt}");
    verify_receipt_json(receipt, keys).unwrap();
    let read = &seen["read"]["contents"][0];
    assert_eq!(read["uri"], "docs://readme", "{label}: {read}");
    assert!(
        read["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{label}: {read}"
    );
    let prompt = &seen["prompt"]["messages"][0]["content"]["text"];
    assert!(
        prompt.as_str().unwrap_or_default().contains("Ada"),
        "{label}: {seen}"
    );
    let elicited = &seen["elicited"]["structuredContent"]["answer"];
    assert_eq!(elicited["content"]["name"], "Ada", "{label}: {seen}");
    let sampled = &seen["sampled"]["structuredContent"]["answer"];
    assert_eq!(sampled["content"]["text"], "sunny", "{label}: {seen}");
    // What reached the SDK's callbacks: rewritten by the gateway.
    let asked = &seen["asked"];
    assert_eq!(
        asked["elicitation"]["message"], "[fixture/ask] Your name?",
        "{label}: {asked}"
    );
    assert_eq!(
        asked["sampling"]["text"], "[fixture/ask] Summarize the weather",
        "{label}: {asked}"
    );
    assert_eq!(
        asked["sampling"]["includeContext"], "none",
        "{label}: {asked}"
    );
}

#[tokio::test]
async fn the_python_sdk_reads_gets_and_answers_through_the_gateway() {
    let app = TestApp::spawn().await;
    let agent = stock_tenant(&app).await;
    let keys = app.keys().await;
    for mode in ["legacy", "2026-07-28"] {
        let out = tokio::process::Command::new(end2end(".venv/bin/python"))
            .arg(end2end("interop/mcp_python_items.py"))
            .env("APERTURE_MCP_URL", app.url("/mcp"))
            .env("APERTURE_TOKEN", &agent)
            .env("APERTURE_MODE", mode)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(std::time::Duration::from_secs(120), out)
            .await
            .expect("the Python client ends in time")
            .expect("the Python SDK client runs");
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
        let expected = if mode == "legacy" { "2025-11-25" } else { mode };
        assert_eq!(seen["protocolVersion"], expected, "{seen}");
        assert_saw_everything(&seen, &keys, mode);
    }
}

#[tokio::test]
async fn the_typescript_sdks_read_get_and_answer_through_the_gateway() {
    let app = TestApp::spawn().await;
    let agent = stock_tenant(&app).await;
    let keys = app.keys().await;
    for (sdk, version) in [("v1", "2025-11-25"), ("v2", "2026-07-28")] {
        let out = tokio::process::Command::new("node")
            .arg(end2end("interop/mcp_items.mjs"))
            .env("APERTURE_MCP_URL", app.url("/mcp"))
            .env("APERTURE_TOKEN", &agent)
            .env("APERTURE_SDK", sdk)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(std::time::Duration::from_secs(120), out)
            .await
            .expect("the SDK client ends in time")
            .expect("node runs the SDK client");
        assert!(
            out.status.success(),
            "{sdk}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(seen["protocolVersion"], version, "{seen}");
        assert_saw_everything(&seen, &keys, sdk);
    }
}
