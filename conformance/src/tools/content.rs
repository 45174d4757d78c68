//! Tools that only return content: one of each content type, a tool error, and the tools whose
//! input schemas the suite inspects.

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

use super::Call;
use crate::fixtures::{PNG_BASE64, WAV_BASE64};

/// `test_simple_text`; the suite calls it without `arguments`.
pub fn simple_text() -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(
        "This is a simple text response for testing.",
    )])
}

/// `test_image_content`.
pub fn image() -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::image(PNG_BASE64, "image/png")])
}

/// `test_audio_content`.
pub fn audio() -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::audio(WAV_BASE64, "audio/wav")])
}

/// `test_embedded_resource`.
pub fn embedded_resource() -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::resource(
        ResourceContents::text(
            "This is an embedded resource content.",
            "test://embedded-resource",
        )
        .with_mime_type("text/plain"),
    )])
}

/// `test_multiple_content_types`.
pub fn multiple_types() -> CallToolResult {
    let data = json!({ "test": "data", "value": 123 }).to_string();
    CallToolResult::success(vec![
        ContentBlock::text("Multiple content types test:"),
        ContentBlock::image(PNG_BASE64, "image/png"),
        ContentBlock::resource(
            ResourceContents::text(data, "test://mixed-content-resource")
                .with_mime_type("application/json"),
        ),
    ])
}

/// `test_error_handling`: a tool error is a result with `isError`, not a JSON-RPC error.
pub fn error() -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(
        "This tool intentionally returns an error for testing",
    )])
}

/// `json_schema_2020_12_tool` and the like: echoes the arguments it was given.
pub fn echo_arguments(params: &CallToolRequestParams) -> CallToolResult {
    let arguments = params.arguments.clone().unwrap_or_default();
    CallToolResult::success(vec![ContentBlock::text(format!(
        "Called with: {}",
        Value::Object(arguments)
    ))])
}

/// `test_custom_header`: echoes its `region`, which the SEP-2243 header `Mcp-Param-Region`
/// mirrors (rmcp checks that the two agree before the call gets here).
pub fn custom_header(call: &Call<'_>) -> CallToolResult {
    let region = call.text_argument("region").unwrap_or_default();
    CallToolResult::success(vec![ContentBlock::text(format!("Region: {region}"))])
}

/// The schema of `json_schema_2020_12_tool`, which `tools/list` must return verbatim
/// (SEP-1613, SEP-2106): `$schema`, `$defs` with an `$anchor`, composition and conditionals.
pub fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {
                    "street": { "type": "string" },
                    "city": { "type": "string" }
                }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": {
            "properties": { "contactMethod": { "const": "phone" } },
            "required": ["contactMethod"]
        },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    })
}

/// The schema of `test_custom_header`: its `region` is mirrored in a header (`x-mcp-header`).
pub fn custom_header_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "region": {
                "type": "string",
                "description": "A region, also sent as the Mcp-Param-Region header",
                "x-mcp-header": "Region"
            }
        },
        "required": ["region"]
    })
}
