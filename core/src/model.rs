//! The model provider: a client for the OpenAI-compatible chat completions API with tools
//! (`POST {base}/chat/completions`), which llama.cpp, vLLM, Ollama and hosted services speak.
//!
//! Requests are serialized by this module's own types, field by field in a fixed order, so the
//! same conversation is always the same bytes: a fork's request shares its parent's prefix byte
//! for byte (the prompt cache depends on it), and tests assert it. Every failure is a
//! [`ModelError`] saying what went wrong in words an operator can act on; nothing panics on
//! what a model server sends.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// The system instruction.
    System {
        /// Its text.
        content: String,
    },
    /// What a person (or the parent agent, for a fork's task) said.
    User {
        /// Its text.
        content: String,
    },
    /// What the model said: text, function calls, or both.
    Assistant {
        /// Text, when any.
        #[serde(default)]
        content: Option<String>,
        /// Function calls, in the order the model made them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The answer to one function call.
    Tool {
        /// The id of the call it answers.
        tool_call_id: String,
        /// The result as text (JSON for structured results).
        content: String,
    },
}

/// A function call the model made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Its id, echoed by the answer.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    /// What is called.
    pub function: FunctionCall,
}

fn function() -> String {
    "function".into()
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text (as the API carries them; may be invalid JSON).
    #[serde(default)]
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDeclaration {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: FunctionDeclaration,
}

/// The function part of a [`ToolDeclaration`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDeclaration {
    /// Name.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

impl ToolDeclaration {
    /// A function declaration.
    pub fn function(name: &str, description: Option<&str>, parameters: Value) -> Self {
        Self {
            kind: "function".into(),
            function: FunctionDeclaration {
                name: name.to_owned(),
                description: description.map(str::to_owned),
                parameters,
            },
        }
    }
}

/// A chat completions request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest {
    /// Model name.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call (omitted when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDeclaration>,
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The assistant message (text and/or function calls).
    pub message: Message,
    /// `stop`, `tool_calls`, `length`, … as the server said.
    pub finish_reason: Option<String>,
}

/// Why a completion failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// No model server is configured.
    #[error("no model server is configured (set APERTURE_MODEL_BASE_URL and APERTURE_MODEL)")]
    NotConfigured,
    /// The server could not be reached.
    #[error("the model server at {url} cannot be reached: {reason}")]
    Unreachable {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// It took longer than the timeout.
    #[error("the model server did not answer within {seconds} s")]
    Timeout {
        /// The timeout.
        seconds: f64,
    },
    /// It answered with an error status.
    #[error("the model server answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// It answered something that is not a chat completion.
    #[error("the model server's answer is not a chat completion: {0}")]
    Malformed(String),
}

pub use crate::config::ModelConfig;

/// Most bytes of an error body quoted in a [`ModelError::Status`].
const QUOTED: usize = 300;

/// A chat completions client.
#[derive(Debug, Clone)]
pub struct ModelClient {
    config: ModelConfig,
    endpoint: String,
    http: upstream_reqwest::Client,
}

impl ModelClient {
    /// A client for `config`.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        let endpoint = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let unreachable = |reason: String| ModelError::Unreachable {
            url: endpoint.clone(),
            reason,
        };
        let tls = crate::upstream::tls_config(endpoint.starts_with("https:"))
            .map_err(|e| unreachable(e.to_string()))?;
        let http = upstream_reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(Duration::from_secs(10).min(config.timeout))
            .timeout(config.timeout)
            .user_agent(concat!("aperture/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| unreachable(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            config,
            endpoint,
            http,
        })
    }

    /// The model name requests carry.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// The exact bytes [`ModelClient::complete`] sends for `messages` and `tools`.
    pub fn request_body(&self, messages: &[Message], tools: &[ToolDeclaration]) -> Vec<u8> {
        let request = ChatRequest {
            model: self.config.model.clone(),
            messages: messages.to_vec(),
            tools: tools.to_vec(),
        };
        serde_json::to_vec(&request).unwrap_or_default()
    }

    /// Asks the model for the next assistant message.
    pub async fn complete(
        &self,
        messages: &[Message],
        tools: &[ToolDeclaration],
    ) -> Result<Completion, ModelError> {
        let body = self.request_body(messages, tools);
        let mut request = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let mut quoted: String = text.chars().take(QUOTED).collect();
            if text.chars().count() > QUOTED {
                quoted.push('…');
            }
            return Err(ModelError::Status {
                status: status.as_u16(),
                body: quoted,
            });
        }
        parse_completion(&bytes)
    }

    fn transport_error(&self, e: &upstream_reqwest::Error) -> ModelError {
        if e.is_timeout() {
            return ModelError::Timeout {
                seconds: self.config.timeout.as_secs_f64(),
            };
        }
        // The chain of causes says what happened ("Connection refused").
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        ModelError::Unreachable {
            url: self.endpoint.clone(),
            reason,
        }
    }
}

/// Reads a chat completion response: the first choice's message.
pub fn parse_completion(bytes: &[u8]) -> Result<Completion, ModelError> {
    #[derive(Deserialize)]
    struct Response {
        choices: Vec<Choice>,
    }
    #[derive(Deserialize)]
    struct Choice {
        message: Option<Value>,
        #[serde(default)]
        finish_reason: Option<String>,
    }
    let response: Response = serde_json::from_slice(bytes).map_err(|e| {
        let start: String = String::from_utf8_lossy(bytes).chars().take(80).collect();
        ModelError::Malformed(format!("{e} (it begins: {start:?})"))
    })?;
    let choice = response
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::Malformed("`choices` is empty".into()))?;
    let mut message = choice
        .message
        .ok_or_else(|| ModelError::Malformed("the first choice has no `message`".into()))?;
    // Servers omit `role` or send `content: null`; only assistant messages are answers.
    if let Some(obj) = message.as_object_mut() {
        obj.entry("role").or_insert_with(|| "assistant".into());
    }
    let message: Message = serde_json::from_value(message)
        .map_err(|e| ModelError::Malformed(format!("the message: {e}")))?;
    if !matches!(message, Message::Assistant { .. }) {
        return Err(ModelError::Malformed(
            "the message is not from the assistant".into(),
        ));
    }
    Ok(Completion {
        message,
        finish_reason: choice.finish_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_serialize_in_the_api_shape() {
        let messages = vec![
            Message::System {
                content: "be brief".into(),
            },
            Message::User {
                content: "hi".into(),
            },
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: "echo".into(),
                        arguments: "{\"text\":\"x\"}".into(),
                    },
                }],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                content: "x".into(),
            },
        ];
        assert_eq!(
            serde_json::to_value(&messages).unwrap(),
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "x"}
            ])
        );
    }

    #[test]
    fn answers_that_are_not_completions_are_errors_not_panics() {
        for (body, expect) in [
            (&b"not json"[..], "it begins"),
            (br#"{"choices": []}"#, "`choices` is empty"),
            (br#"{"choices": [{}]}"#, "no `message`"),
            (
                br#"{"choices": [{"message": {"role": "user", "content": "x"}}]}"#,
                "not from the assistant",
            ),
            (
                br#"{"choices": [{"message": {"content": 3}}]}"#,
                "the message",
            ),
        ] {
            let e = parse_completion(body).unwrap_err();
            assert!(
                matches!(&e, ModelError::Malformed(m) if m.contains(expect)),
                "{e:?}"
            );
        }
        let ok = parse_completion(
            br#"{"choices": [{"message": {"content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}"#,
        )
        .unwrap();
        assert_eq!(ok.finish_reason.as_deref(), Some("tool_calls"));
        assert!(
            matches!(ok.message, Message::Assistant { ref tool_calls, .. } if tool_calls[0].function.name == "f")
        );
    }
}
