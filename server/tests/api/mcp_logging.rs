//! Issue 47 (item 4): the upstreams' log messages reach only the caller whose call is in
//! flight, at the level it asked for — set per MCP session with `logging/setLevel` in the 2025
//! eras (never forwarded upstream), named per request in 2026-07-28 — on the call's stream.

use std::time::Duration;

use engine::scope;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, echo_of, rpc};
use crate::streams::Stream;

const LOG: &str = "mcp__fixture__log";

async fn setup() -> (TestApp, String) {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let rules = json!([{"id": "log", "match": {"name": LOG}, "mode": "allow"}]);
    app.activate_policy(&admin, "logging", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    (app, agent)
}

/// The `notifications/message` on a call's stream, then its result.
async fn logs_and_result(mut stream: Stream) -> (Vec<Value>, Value) {
    let messages = stream.rest(Duration::from_secs(15)).await;
    let mut logs = Vec::new();
    let mut result = Value::Null;
    for (_, message) in messages {
        if message["method"] == "notifications/message" {
            logs.push(message["params"].clone());
        } else if message.get("result").is_some() {
            result = message["result"].clone();
        }
    }
    (logs, result)
}

#[tokio::test]
async fn a_session_hears_its_calls_log_messages_from_the_level_it_set() {
    let (app, agent) = setup().await;
    let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "listener", "version": "1"}});
    let response = app
        .mcp_post(&agent)
        .json(rpc(0, "initialize", params))
        .await;
    let session = response.header("mcp-session-id").to_owned();
    let body: Value = response.json();
    assert!(
        body["result"]["capabilities"]["logging"].is_object(),
        "{body}"
    );
    let on_session = |method: &str, params: Value| {
        let post = app.mcp_post(&agent).header("mcp-session-id", &session);
        let post = post.header("mcp-protocol-version", "2025-11-25");
        post.json(rpc(1, method, params))
    };
    // Bad levels and calls without a session are refused.
    let bad: Value = on_session("logging/setLevel", json!({"level": "loud"}))
        .await
        .json();
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let sessionless = app
        .mcp(&agent, rpc(1, "logging/setLevel", json!({"level": "info"})))
        .await;
    assert_eq!(sessionless["error"]["code"], -32602, "{sessionless}");

    let set: Value = on_session("logging/setLevel", json!({"level": "info"}))
        .await
        .json();
    assert_eq!(set["result"], json!({}), "{set}");
    let list: Value = on_session("tools/list", json!({})).await.json();
    let list = list["result"].clone();
    let call = json!({"name": LOG, "arguments": {}, "_meta": echo_of(&list, LOG)});
    let post = app.post_raw("/mcp").as_(&agent);
    let post = post.header("accept", "application/json, text/event-stream");
    let post = post.header("mcp-session-id", &session);
    let post = post.header("mcp-protocol-version", "2025-11-25");
    let (logs, result) =
        logs_and_result(Stream::open(post.json(rpc(2, "tools/call", call))).await).await;
    assert_eq!(result["content"][0]["text"], "logged", "{result}");
    let levels: Vec<&str> = logs.iter().map(|l| l["level"].as_str().unwrap()).collect();
    assert_eq!(levels, ["info", "error"], "{logs:?}");
    assert_eq!(logs[0]["logger"], "fixture");
    assert_eq!(logs[0]["data"], "working on it");
    assert_eq!(logs[1]["data"]["code"], 7);

    // A caller that set no level is answered as before, without a stream.
    let quiet = app.token("default", "quiet", &[scope::RUN]).await;
    let list = app.mcp_list(&quiet, json!({})).await;
    let answered = app.mcp_call(&quiet, &list, LOG, json!({})).await;
    assert_eq!(answered["content"][0]["text"], "logged", "{answered}");
}

#[tokio::test]
async fn in_2026_the_level_comes_with_the_request_and_set_level_is_unknown() {
    let (app, agent) = setup().await;
    let meta = |extra: Value| {
        let mut meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                              "io.modelcontextprotocol/clientCapabilities": {}});
        if let (Some(m), Some(e)) = (meta.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        meta
    };
    let stateless = |method: &str| {
        let post = app
            .mcp_post(&agent)
            .header("mcp-protocol-version", "2026-07-28");
        post.header("mcp-method", method)
    };
    let gone = stateless("logging/setLevel")
        .json(rpc(
            1,
            "logging/setLevel",
            json!({"level": "info", "_meta": meta(json!({}))}),
        ))
        .await;
    assert_eq!(gone.status(), reqwest::StatusCode::NOT_FOUND);
    let gone: Value = gone.json();
    assert_eq!(gone["error"]["code"], -32601, "{gone}");

    let listed: Value = stateless("tools/list")
        .json(rpc(2, "tools/list", json!({"_meta": meta(json!({}))})))
        .await
        .json();
    let mut call_meta = echo_of(&listed["result"], LOG);
    call_meta = {
        let mut m = meta(json!({"io.modelcontextprotocol/logLevel": "error"}));
        m.as_object_mut()
            .unwrap()
            .extend(call_meta.as_object().unwrap().clone());
        m
    };
    let post = stateless("tools/call").header("mcp-name", LOG);
    let post = post.header("accept", "application/json, text/event-stream");
    let call = json!({"name": LOG, "arguments": {}, "_meta": call_meta});
    let (logs, result) =
        logs_and_result(Stream::open(post.json(rpc(3, "tools/call", call))).await).await;
    assert_eq!(result["resultType"], "complete", "{result}");
    let levels: Vec<&str> = logs.iter().map(|l| l["level"].as_str().unwrap()).collect();
    assert_eq!(levels, ["error"], "{logs:?}");
}
