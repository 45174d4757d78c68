//! Tools that ask the client something before they answer: sampling and elicitation.
//!
//! The suite calls them on the 2025 wire, where the question is a request to the client in the
//! middle of the call; on the stateless wire the same tools ask in one input round
//! ([`crate::input::ask`]).

use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ErrorData, InputRequest, JsonObject,
};
use serde_json::{Value, json};

use super::Call;
use crate::input::{self, Asked};

/// The key every question of these tools is filed under on the stateless wire.
const ANSWER_KEY: &str = "answer";

/// `test_sampling`: sends the `prompt` argument to the client's model.
pub async fn sampling(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let Some(prompt) = call.text_argument("prompt") else {
        return Ok(missing_argument("prompt"));
    };
    let question = input::sampling(prompt, 100);
    ask_and_report(call, question, |answer| {
        format!("LLM response: {}", sampled_text(answer))
    })
    .await
}

/// `test_elicitation`: asks the user, with the `message` argument, for a username and an email.
pub async fn elicitation(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let Some(message) = call.text_argument("message") else {
        return Ok(missing_argument("message"));
    };
    let properties = json!({
        "username": { "type": "string", "description": "User's response" },
        "email": { "type": "string", "description": "User's email address" }
    });
    let question = input::elicitation(message, properties, &["username", "email"])?;
    ask_and_report(call, question, |answer| {
        format!("User response: {}", elicited(answer))
    })
    .await
}

/// `test_elicitation_sep1034_defaults`: a form whose every field has a default (SEP-1034).
pub async fn defaults(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": {
                "type": "boolean",
                "description": "Verification status",
                "default": true
            }
        },
        "required": []
    });
    let question = input::form(
        "Please review and update the form fields with defaults",
        schema,
    )?;
    ask_and_report(call, question, completed_form).await
}

/// `test_elicitation_sep1330_enums`: a form with each kind of enum (SEP-1330): untitled and
/// titled single choices, the legacy `enumNames`, untitled and titled multiple choices.
pub async fn enums(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let schema = json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    { "const": "value1", "title": "First Option" },
                    { "const": "value2", "title": "Second Option" },
                    { "const": "value3", "title": "Third Option" }
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" }
                    ]
                }
            }
        },
        "required": []
    });
    let question = input::form("Please select options from the enum fields", schema)?;
    ask_and_report(call, question, completed_form).await
}

/// `test_missing_capability`: needs sampling; a client that does not declare it is refused
/// with `-32021` naming the capability (HTTP 400 on the stateless wire).
pub async fn missing_capability(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let question = input::sampling("Say hello.", 50);
    ask_and_report(call, question, |answer| {
        format!("Sampled: {}", sampled_text(answer))
    })
    .await
}

/// Asks `question`; once answered, the call's result is the text `report` makes of the answer.
async fn ask_and_report(
    call: &Call<'_>,
    question: InputRequest,
    report: impl FnOnce(&JsonObject) -> String,
) -> Result<CallToolResponse, ErrorData> {
    let asked = input::ask(call.context, call.responses(), ANSWER_KEY, question).await?;
    Ok(match asked {
        Asked::Answered(answer) => {
            CallToolResult::success(vec![ContentBlock::text(report(&answer))]).into()
        }
        Asked::Pending(pending) => pending.into(),
    })
}

/// The report on an answered form.
fn completed_form(answer: &JsonObject) -> String {
    format!("Elicitation completed: {}", elicited(answer))
}

/// The text of a `CreateMessageResult`.
fn sampled_text(answer: &JsonObject) -> &str {
    answer
        .get("content")
        .and_then(|content| content.get("text"))
        .and_then(Value::as_str)
        .unwrap_or("(no text)")
}

/// An `ElicitResult`, as `action=…, content={…}`.
fn elicited(answer: &JsonObject) -> String {
    let action = answer.get("action").and_then(Value::as_str).unwrap_or("?");
    let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
    format!("action={action}, content={content}")
}

/// The tool error for a call without a required argument.
fn missing_argument(name: &str) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "The argument `{name}` is required"
    ))])
    .into()
}

/// The schema of `test_sampling`.
pub fn sampling_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "prompt": { "type": "string", "description": "The prompt to send to the model" }
        },
        "required": ["prompt"]
    })
}

/// The schema of `test_elicitation`.
pub fn elicitation_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": { "type": "string", "description": "The message to show the user" }
        },
        "required": ["message"]
    })
}
