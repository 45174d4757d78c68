//! Asking the client for input: elicitation, sampling, its roots.
//!
//! On the 2025 wire the server sends the client a request mid-call and waits for the answer (it
//! travels on the call's SSE stream). The 2026-07-28 wire forbids server-to-client requests:
//! the server answers the call with an `InputRequiredResult` naming what it needs, and the
//! client calls again with the answers in `inputResponses` (SEP-2322, "MRTR"). [`ask`] does
//! whichever the request's wire wants; the builders make the requests both ways share.

use rmcp::RoleServer;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest,
    ElicitRequestParams, ErrorData, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, JsonObject, ListRootsRequest, SamplingMessage, ServerRequest,
};
use rmcp::service::RequestContext;
use serde_json::Value;

use crate::wire::Wire;

/// The outcome of asking.
pub enum Asked {
    /// The client's answer: an `ElicitResult`, a `CreateMessageResult` or a `ListRootsResult`.
    Answered(JsonObject),
    /// The question, to return to the client (stateless wire only).
    Pending(InputRequiredResult),
}

/// Asks the client `request`, filed under `key` on the stateless wire, where the answer comes
/// in the retried call's `responses`. A client that has not declared it can answer such a
/// request is refused with `-32021`, naming the capability it lacks.
pub async fn ask(
    context: &RequestContext<RoleServer>,
    responses: Option<&InputResponses>,
    key: &str,
    request: InputRequest,
) -> Result<Asked, ErrorData> {
    require_capability(context, &request)?;
    match Wire::of(context) {
        Wire::Session => send(context, request).await.map(Asked::Answered),
        Wire::Stateless => Ok(match answer(responses, key) {
            Some(answer) => Asked::Answered(answer.clone()),
            None => Asked::Pending(InputRequiredResult::from_input_requests(
                InputRequests::from([(key.to_owned(), request)]),
            )),
        }),
    }
}

/// The answer filed under `key`, if the client gave one that can be an answer at all (a JSON
/// object): a missing or malformed answer is asked for again.
pub fn answer<'a>(responses: Option<&'a InputResponses>, key: &str) -> Option<&'a JsonObject> {
    responses?.get(key)?.as_object()
}

/// The string at `field` of an elicitation answer's `content`.
pub fn content_text<'a>(answer: &'a JsonObject, field: &str) -> Option<&'a str> {
    answer.get("content")?.get(field)?.as_str()
}

/// A form elicitation: `message`, and a form of the fields `properties` describes.
pub fn elicitation(
    message: &str,
    properties: Value,
    required: &[&str],
) -> Result<InputRequest, ErrorData> {
    let schema = serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
    });
    form(message, schema)
}

/// A form elicitation with a complete `requestedSchema` (defaults, enums and the like).
pub fn form(message: &str, requested_schema: Value) -> Result<InputRequest, ErrorData> {
    // The schemas are this crate's constants: one rmcp rejects is a bug here.
    let requested_schema = serde_json::from_value(requested_schema).map_err(|error| {
        ErrorData::internal_error(format!("an invalid elicitation schema: {error}"), None)
    })?;
    Ok(InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema,
        },
    )))
}

/// A sampling request: one user message, `prompt`.
pub fn sampling(prompt: &str, max_tokens: u32) -> InputRequest {
    InputRequest::CreateMessage(CreateMessageRequest::new(CreateMessageRequestParams::new(
        vec![SamplingMessage::user_text(prompt)],
        max_tokens,
    )))
}

/// A `roots/list` request.
pub fn list_roots() -> InputRequest {
    InputRequest::ListRoots(ListRootsRequest::default())
}

/// Refuses a client whose capabilities (its session's, or the request's on the stateless wire)
/// do not include answering `request`.
fn require_capability(
    context: &RequestContext<RoleServer>,
    request: &InputRequest,
) -> Result<(), ErrorData> {
    let declared = context.client_capabilities().unwrap_or_default();
    let capabilities = ClientCapabilities::builder();
    let (answers, required) = match request {
        InputRequest::CreateMessage(_) => (
            declared.sampling.is_some(),
            capabilities.enable_sampling().build(),
        ),
        InputRequest::Elicitation(_) => (
            declared.elicitation.is_some(),
            capabilities.enable_elicitation().build(),
        ),
        InputRequest::ListRoots(_) => (
            declared.roots.is_some(),
            capabilities.enable_roots().build(),
        ),
        _ => return Ok(()),
    };
    if answers {
        Ok(())
    } else {
        Err(ErrorData::missing_required_client_capability(required))
    }
}

/// Sends `request` to the client of a 2025 session and returns its result.
async fn send(
    context: &RequestContext<RoleServer>,
    request: InputRequest,
) -> Result<JsonObject, ErrorData> {
    let request = match request {
        InputRequest::CreateMessage(request) => ServerRequest::CreateMessageRequest(request),
        InputRequest::Elicitation(request) => ServerRequest::ElicitRequest(request),
        InputRequest::ListRoots(request) => ServerRequest::ListRootsRequest(request),
        other => {
            return Err(ErrorData::internal_error(
                format!("no way to send {other:?} to a client"),
                None,
            ));
        }
    };
    let result =
        context.peer.send_request(request).await.map_err(|error| {
            ErrorData::internal_error(format!("the client failed: {error}"), None)
        })?;
    match serde_json::to_value(result) {
        Ok(Value::Object(result)) => Ok(result),
        _ => Err(ErrorData::internal_error(
            "the client's result is not an object",
            None,
        )),
    }
}
