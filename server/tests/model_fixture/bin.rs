//! `aperture-fixture-model`: a TEST FIXTURE, not part of Aperture and not for deployment.
//!
//! A model server for the browser tests (`scripts/e2e-server`), speaking the OpenAI-compatible
//! chat completions API like the scripted model of the integration tests, but answering by rule
//! so any number of tests can share it: when the last message is the user's and contains
//! `echo: <text>`, it calls the tool `mcp__fixture__echo` with `{"text": "<text>"}`; when the last
//! message is a tool result, it answers `The echo tool answered: <result>`; otherwise
//! `I can only echo.` It prints `listening on <base URL>` once it accepts connections.
//!   aperture-fixture-model [--addr 127.0.0.1:0]

use axum::Json;
use serde_json::{Value, json};

async fn complete(Json(request): Json<Value>) -> Json<Value> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let content = last["content"].as_str().unwrap_or_default();
    let message = match last["role"].as_str() {
        Some("user") if content.contains("echo: ") => {
            let text = content.split_once("echo: ").map_or("", |(_, t)| t).trim();
            let arguments = json!({ "text": text }).to_string();
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{}", messages.len()),
                "type": "function",
                "function": {"name": "mcp__fixture__echo", "arguments": arguments},
            }]})
        }
        Some("tool") => {
            json!({"role": "assistant", "content": format!("The echo tool answered: {content}")})
        }
        _ => json!({"role": "assistant", "content": "I can only echo."}),
    };
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    Json(json!({
        "id": "chatcmpl-fixture",
        "object": "chat.completion",
        "model": "fixture-echo",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut addr = "127.0.0.1:0".to_owned();
    while let Some(arg) = args.next() {
        if arg == "--addr" {
            addr = args.next().unwrap_or(addr);
        }
    }
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/v1", listener.local_addr()?);
    let router = axum::Router::new().route("/v1/chat/completions", axum::routing::post(complete));
    axum::serve(listener, router).await?;
    Ok(())
}
