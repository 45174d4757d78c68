//! The fixture tools: the catalogue `tools/list` returns, and `tools/call`'s dispatch.
//!
//! Every tool the suite calls is listed on both wires (the suite's `tools-list` and
//! `server-stateless` checks want them listed), in one fixed order. By what they do:
//! - [`content`]: results of every content type, a tool error, schemas the suite inspects;
//! - [`notifying`]: logging and progress notifications, list-changed triggers, a stream the
//!   server closes mid-call (SEP-1699);
//! - [`asking`]: sampling and elicitation mid-call (2025) or as one input round (2026);
//! - [`input_required`]: the multi round-trip flows of SEP-2322, with sealed `requestState`;
//! - [`tasks`]: the tasks extension's fixtures (SEP-2663).

mod asking;
mod content;
mod input_required;
mod notifying;
mod tasks;

use rmcp::RoleServer;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, ErrorData, InputResponses, JsonObject,
    ListToolsResult, Tool,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::state::State;
use crate::wire::Wire;

/// One `tools/call`, as a tool sees it.
pub struct Call<'a> {
    pub state: &'a State,
    pub params: CallToolRequestParams,
    pub context: &'a RequestContext<RoleServer>,
}

impl Call<'_> {
    /// The string argument `name`, if given.
    fn text_argument(&self, name: &str) -> Option<&str> {
        self.params.arguments.as_ref()?.get(name)?.as_str()
    }

    /// The number argument `name`, if given.
    fn number_argument(&self, name: &str) -> Option<f64> {
        self.params.arguments.as_ref()?.get(name)?.as_f64()
    }

    /// The answers of a retried call (stateless wire).
    fn responses(&self) -> Option<&InputResponses> {
        self.params.input_responses.as_ref()
    }
}

/// A tool's description and input schema.
struct Spec {
    name: &'static str,
    description: &'static str,
    input_schema: fn() -> Value,
}

/// Every tool, in the order `tools/list` returns them.
const CATALOGUE: &[Spec] = &[
    // content
    spec(
        "test_simple_text",
        "Returns a simple text content block",
        no_arguments,
    ),
    spec(
        "test_image_content",
        "Returns an image content block (PNG)",
        no_arguments,
    ),
    spec(
        "test_audio_content",
        "Returns an audio content block (WAV)",
        no_arguments,
    ),
    spec(
        "test_embedded_resource",
        "Returns an embedded text resource",
        no_arguments,
    ),
    spec(
        "test_multiple_content_types",
        "Returns text, image and embedded resource content together",
        no_arguments,
    ),
    spec(
        "test_error_handling",
        "Always fails, as a tool error result (isError)",
        no_arguments,
    ),
    spec(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features ($defs, $anchor, composition, conditionals)",
        content::json_schema_2020_12,
    ),
    spec(
        "test_custom_header",
        "Echoes its region argument, which clients mirror in the Mcp-Param-Region header",
        content::custom_header_schema,
    ),
    // notifying
    spec(
        "test_tool_with_logging",
        "Sends three info log messages while it runs",
        no_arguments,
    ),
    spec(
        "test_tool_with_progress",
        "Reports progress 0, 50 and 100 of 100 to the call's progress token",
        no_arguments,
    ),
    spec(
        "test_reconnection",
        "Closes its SSE stream mid-call; the result arrives after the client reconnects",
        no_arguments,
    ),
    spec(
        "test_streaming_elicitation",
        "Streams a progress notification, then its result, with no request on the stream",
        no_arguments,
    ),
    spec(
        "test_logging_tool",
        "Logs only when the request asks for a log level",
        no_arguments,
    ),
    spec(
        "test_trigger_tool_change",
        "Announces a changed tool list to every listener",
        no_arguments,
    ),
    spec(
        "test_trigger_prompt_change",
        "Announces a changed prompt list to every listener",
        no_arguments,
    ),
    // asking
    spec(
        "test_sampling",
        "Asks the client's model to complete a prompt",
        asking::sampling_schema,
    ),
    spec(
        "test_elicitation",
        "Asks the user for a username and an email address",
        asking::elicitation_schema,
    ),
    spec(
        "test_elicitation_sep1034_defaults",
        "Asks the user for a form whose fields have default values (SEP-1034)",
        no_arguments,
    ),
    spec(
        "test_elicitation_sep1330_enums",
        "Asks the user for a form with every kind of enum (SEP-1330)",
        no_arguments,
    ),
    spec(
        "test_missing_capability",
        "Needs the sampling capability, and says so when the client lacks it",
        no_arguments,
    ),
    // input_required
    spec(
        "test_input_required_result_elicitation",
        "Asks for the user's name with an input round (SEP-2322)",
        no_arguments,
    ),
    spec(
        "test_input_required_result_sampling",
        "Asks the client's model a question with an input round (SEP-2322)",
        no_arguments,
    ),
    spec(
        "test_input_required_result_list_roots",
        "Asks for the client's roots with an input round (SEP-2322)",
        no_arguments,
    ),
    spec(
        "test_input_required_result_request_state",
        "Asks for a confirmation, keeping its progress in a sealed requestState",
        no_arguments,
    ),
    spec(
        "test_input_required_result_multiple_inputs",
        "Asks for an elicitation, a sampling and the roots in one input round",
        no_arguments,
    ),
    spec(
        "test_input_required_result_multi_round",
        "Asks two questions, one round each, carrying its progress in requestState",
        no_arguments,
    ),
    spec(
        "test_input_required_result_tampered_state",
        "Refuses a retry whose requestState was altered",
        no_arguments,
    ),
    spec(
        "test_input_required_result_capabilities",
        "Asks only for the kinds of input the client declares it can give",
        no_arguments,
    ),
    // tasks
    spec(
        "greet",
        "Greets someone, at once (never a task)",
        tasks::greet_schema,
    ),
    spec(
        "slow_compute",
        "Sleeps for some seconds; runs as a task when the client supports tasks",
        tasks::slow_compute_schema,
    ),
    spec(
        "failing_job",
        "A task (required) that ends in a tool error",
        no_arguments,
    ),
    spec(
        "protocol_error_job",
        "A task that ends in a protocol error",
        no_arguments,
    ),
    spec(
        "confirm_delete",
        "A task that asks the user to confirm a deletion",
        tasks::confirm_delete_schema,
    ),
    spec(
        "multi_input",
        "A task that asks two questions at once",
        no_arguments,
    ),
    spec(
        "test_tool_with_task",
        "Asks for a name in an input round, then continues as a task (required)",
        no_arguments,
    ),
];

const fn spec(name: &'static str, description: &'static str, input_schema: fn() -> Value) -> Spec {
    Spec {
        name,
        description,
        input_schema,
    }
}

/// `tools/list`: every tool, always in the same order.
pub fn list(wire: Wire) -> ListToolsResult {
    let tools = CATALOGUE.iter().map(tool).collect();
    wire.cacheable(ListToolsResult::with_all_items(tools), CacheScope::Public)
}

/// The tool called `name`.
pub fn find(name: &str) -> Option<Tool> {
    CATALOGUE.iter().find(|spec| spec.name == name).map(tool)
}

/// Runs the call.
pub async fn call(call: Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let name = call.params.name.clone();
    match name.as_ref() {
        "test_simple_text" => Ok(content::simple_text().into()),
        "test_image_content" => Ok(content::image().into()),
        "test_audio_content" => Ok(content::audio().into()),
        "test_embedded_resource" => Ok(content::embedded_resource().into()),
        "test_multiple_content_types" => Ok(content::multiple_types().into()),
        "test_error_handling" => Ok(content::error().into()),
        "json_schema_2020_12_tool" => Ok(content::echo_arguments(&call.params).into()),
        "test_custom_header" => Ok(content::custom_header(&call).into()),
        "test_tool_with_logging" => notifying::with_logging(&call).await.map(Into::into),
        "test_tool_with_progress" => notifying::with_progress(&call).await.map(Into::into),
        "test_reconnection" => Ok(notifying::reconnection().await.into()),
        "test_streaming_elicitation" => notifying::streaming(&call).await.map(Into::into),
        "test_logging_tool" => notifying::logging_tool(&call).await.map(Into::into),
        "test_trigger_tool_change" => notifying::trigger_tool_change(&call).await.map(Into::into),
        "test_trigger_prompt_change" => notifying::trigger_prompt_change(&call)
            .await
            .map(Into::into),
        "test_sampling" => asking::sampling(&call).await,
        "test_elicitation" => asking::elicitation(&call).await,
        "test_elicitation_sep1034_defaults" => asking::defaults(&call).await,
        "test_elicitation_sep1330_enums" => asking::enums(&call).await,
        "test_missing_capability" => asking::missing_capability(&call).await,
        "test_input_required_result_elicitation" => input_required::elicitation(&call),
        "test_input_required_result_sampling" => input_required::sampling(&call),
        "test_input_required_result_list_roots" => input_required::list_roots(&call),
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => input_required::confirmation(&call),
        "test_input_required_result_multiple_inputs" => input_required::multiple(&call),
        "test_input_required_result_multi_round" => input_required::multi_round(&call),
        "test_input_required_result_capabilities" => input_required::by_capabilities(&call),
        "greet" => Ok(tasks::greet(&call).into()),
        "slow_compute" => tasks::slow_compute(&call).await,
        "failing_job" => tasks::failing_job(&call),
        "protocol_error_job" => tasks::protocol_error_job(&call).await,
        "confirm_delete" => tasks::confirm_delete(&call),
        "multi_input" => tasks::multi_input(&call),
        "test_tool_with_task" => tasks::with_input_round(&call),
        other => Err(ErrorData::invalid_params(
            format!("Unknown tool: {other}"),
            Some(json!({ "name": other })),
        )),
    }
}

fn tool(spec: &Spec) -> Tool {
    Tool::new(spec.name, spec.description, object((spec.input_schema)()))
}

/// The schema of a tool without arguments.
fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {} })
}

/// `value`'s members; every schema here is an object.
fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(members) => members,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_unique_and_well_formed() {
        // The suite's rule (tools-name-format): 1 to 128 of `A-Za-z0-9_.-`.
        let mut names: Vec<&str> = CATALOGUE.iter().map(|spec| spec.name).collect();
        for name in &names {
            let well_formed = (1..=128).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            assert!(well_formed, "{name}");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len(), "a tool is listed twice");
    }

    #[test]
    fn every_input_schema_is_an_object_schema() {
        for spec in CATALOGUE {
            let schema = (spec.input_schema)();
            assert_eq!(schema["type"], "object", "{}", spec.name);
        }
    }
}
