//! The model provider client (issue 7, item 1) against the scripted model server: the exact
//! bytes it sends, what it reads back, and a clear error for every way a model server fails.

use std::time::Duration;

use aperture_core::agents::model::{
    Message, ModelClient, ModelConfig, ModelError, ToolCall, ToolDeclaration,
};
use serde_json::json;

use crate::model_fixture::{ScriptedModel, Step};

fn client(base_url: &str, timeout: Duration) -> ModelClient {
    ModelClient::new(ModelConfig {
        base_url: base_url.to_owned(),
        api_key: Some("sk-test".into()),
        model: "scripted-1".into(),
        timeout,
    })
    .unwrap()
}

fn conversation() -> (Vec<Message>, Vec<ToolDeclaration>) {
    (
        vec![
            Message::System {
                content: "You are a support agent.".into(),
            },
            Message::User {
                content: "Echo hello.".into(),
            },
        ],
        vec![ToolDeclaration::function(
            "mcp__fixture__echo",
            Some("Returns its text argument."),
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )],
    )
}

#[tokio::test]
async fn a_completion_sends_exactly_the_conversation_and_reads_the_tool_calls() {
    let model = ScriptedModel::start(vec![Step::calls(&[
        ("call_1", "mcp__fixture__echo", r#"{"text":"hello"}"#),
        (
            "call_2",
            "agent",
            r#"{"subagent_type":"fork","prompt":"x"}"#,
        ),
    ])])
    .await;
    let c = client(&model.base_url, Duration::from_secs(10));
    let (messages, tools) = conversation();
    let completion = c.complete(&messages, &tools).await.unwrap();
    assert_eq!(completion.finish_reason.as_deref(), Some("tool_calls"));
    let Message::Assistant { tool_calls, .. } = &completion.message else {
        panic!("{completion:?}");
    };
    assert_eq!(
        tool_calls
            .iter()
            .map(|t: &ToolCall| (t.id.as_str(), t.function.name.as_str()))
            .collect::<Vec<_>>(),
        [("call_1", "mcp__fixture__echo"), ("call_2", "agent")]
    );
    assert_eq!(tool_calls[0].function.arguments, r#"{"text":"hello"}"#);

    let sent = model.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer sk-test"));
    // Byte for byte what the client says it sends, in the API's shape.
    assert_eq!(sent[0].body, c.request_body(&messages, &tools));
    assert_eq!(
        sent[0].json(),
        json!({
            "model": "scripted-1",
            "messages": [
                {"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "Echo hello."}
            ],
            "tools": [{"type": "function", "function": {
                "name": "mcp__fixture__echo",
                "description": "Returns its text argument.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
            }}]
        })
    );
}

#[tokio::test]
async fn every_way_a_model_server_fails_is_a_clear_error() {
    let (messages, tools) = conversation();

    // Nobody listens on the port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let down = client(
        &format!("http://127.0.0.1:{closed}/v1"),
        Duration::from_secs(5),
    );
    let e = down.complete(&messages, &tools).await.unwrap_err();
    assert!(matches!(&e, ModelError::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("cannot be reached"), "{e}");
    assert!(e.to_string().to_lowercase().contains("refused"), "{e}");

    let model = ScriptedModel::start(vec![
        Step::Raw {
            status: 200,
            body: "<html>not a model</html>".into(),
        },
        Step::Raw {
            status: 503,
            body: r#"{"error":"model is loading"}"#.into(),
        },
        Step::Delay(Duration::from_secs(3), Box::new(Step::text("too late"))),
        Step::Raw {
            status: 200,
            body: r#"{"choices":[]}"#.into(),
        },
    ])
    .await;
    let c = client(&model.base_url, Duration::from_millis(500));
    let garbage = c.complete(&messages, &tools).await.unwrap_err();
    assert!(
        matches!(&garbage, ModelError::Malformed(m) if m.contains("<html>")),
        "{garbage:?}"
    );
    let status = c.complete(&messages, &tools).await.unwrap_err();
    assert_eq!(
        status,
        ModelError::Status {
            status: 503,
            body: r#"{"error":"model is loading"}"#.into()
        }
    );
    assert!(status.to_string().contains("model is loading"));
    let slow = c.complete(&messages, &tools).await.unwrap_err();
    assert!(matches!(slow, ModelError::Timeout { .. }), "{slow:?}");
    let empty = c.complete(&messages, &tools).await.unwrap_err();
    assert!(
        matches!(&empty, ModelError::Malformed(m) if m.contains("choices")),
        "{empty:?}"
    );
    // And a used-up script is an error status, not a hang.
    let exhausted = c.complete(&messages, &tools).await.unwrap_err();
    assert!(
        matches!(exhausted, ModelError::Status { status: 500, .. }),
        "{exhausted:?}"
    );
}
