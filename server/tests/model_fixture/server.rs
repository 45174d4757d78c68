//! A scripted model server — a TEST FIXTURE, not part of Aperture.
//!
//! It speaks just enough of the OpenAI-compatible chat completions API for the hosted-agent
//! tests: `POST /v1/chat/completions` answers with the next step of a script of predetermined
//! answers (tool calls, text, an error status, garbage, a delay) and records every request
//! exactly as received (body bytes and `Authorization`), so tests can assert what Aperture sent
//! byte for byte. When the script is used up it answers 500.
//!
//! Agents that run at the same time (a parent and its background forks) each get their own
//! script: a request whose user messages contain a route's marker (a fork's task, say) takes the
//! route's next step; any other request takes the main script's.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Step {
    /// A completion whose message is this assistant message.
    Reply {
        /// The message (`content`, `tool_calls`).
        message: Value,
        /// `finish_reason`.
        finish_reason: &'static str,
    },
    /// Exactly this status and body.
    Raw {
        /// HTTP status.
        status: u16,
        /// Body text.
        body: String,
    },
    /// Waits, then answers with the inner step.
    Delay(Duration, Box<Step>),
}

impl Step {
    /// An answer with function calls `(id, name, arguments as JSON text)`, in order.
    pub fn calls(calls: &[(&str, &str, &str)]) -> Self {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        Step::Reply {
            message: json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
            finish_reason: "tool_calls",
        }
    }

    /// A text answer (the end of a turn).
    pub fn text(text: &str) -> Self {
        Step::Reply {
            message: json!({"role": "assistant", "content": text}),
            finish_reason: "stop",
        }
    }
}

/// A request as the model server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
}

impl Recorded {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the recorded body is JSON")
    }
}

#[derive(Debug, Default)]
struct Shared {
    script: Mutex<VecDeque<Step>>,
    routes: Mutex<Vec<(String, VecDeque<Step>)>>,
    recorded: Mutex<Vec<Recorded>>,
}

/// A running scripted model server.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    /// Base URL to configure (`http://127.0.0.1:<port>/v1`).
    pub base_url: String,
    shared: Arc<Shared>,
}

impl ScriptedModel {
    /// Starts a server on a free loopback port with `script`.
    pub async fn start(script: Vec<Step>) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            routes: Mutex::default(),
            recorded: Mutex::default(),
        });
        let router = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(complete))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("bound").port();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            shared,
        }
    }

    /// Appends steps to the script.
    pub fn push(&self, step: Step) {
        self.shared
            .script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(step);
    }

    /// Requests whose user messages contain `marker` take their steps from `script` (routes
    /// are tried in the order they were added).
    pub fn route(&self, marker: &str, script: Vec<Step>) {
        self.shared
            .routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((marker.to_owned(), script.into()));
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

async fn complete(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    shared
        .recorded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Recorded {
            body: body.to_vec(),
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
    let users: Vec<String> = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|b| b.get("messages").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    let routed = {
        let mut routes = shared.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes
            .iter_mut()
            .find(|(marker, _)| users.iter().any(|u| u.contains(marker.as_str())))
            .map(|(_, script)| script.pop_front())
    };
    let step = match routed {
        Some(step) => step,
        None => shared
            .script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front(),
    };
    let Some(mut step) = step else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the script has no more answers",
        )
            .into_response();
    };
    while let Step::Delay(d, inner) = step {
        tokio::time::sleep(d).await;
        step = *inner;
    }
    match step {
        Step::Reply {
            message,
            finish_reason,
        } => axum::Json(json!({
            "id": "chatcmpl-fixture",
            "object": "chat.completion",
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }))
        .into_response(),
        Step::Raw { status, body } => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        )
            .into_response(),
        Step::Delay(..) => unreachable!("delays are unwrapped above"),
    }
}
