//! The OpenAPI document of the REST mount, `GET /api/v2/agent-tool-exposure/openapi.json`,
//! made from the same route list the router is built from ([`super::route_specs`]) and the
//! Connect method table ([`super::connect::METHODS`]), so it cannot list a route the server
//! lacks or miss one it has (a test checks both against the running server).

use axum::Json;
use serde_json::{Map, Value, json};

use super::connect::{self, Payload};
use super::{PREFIX, route_specs};

/// Query parameters of the reads that take filters.
fn query_parameters(operation: &str) -> &'static [(&'static str, &'static str)] {
    match operation {
        "ListReceipts" => &[
            (
                "decision",
                "allow, deny, park, dry_run, stage, confirm or async",
            ),
            ("reason", "a reason code (CONTRACT §5)"),
            ("tool", "canonical tool name"),
            ("session_id", "ses_…"),
            ("actor_id", "actor"),
            ("since", "RFC 3339, inclusive"),
            ("until", "RFC 3339, exclusive"),
            ("cursor", "next_cursor of the previous page"),
            ("limit", "1–500, default 50"),
        ],
        "ListInvocations" => &[
            (
                "status",
                "input_required, staged, confirmation_required, approved, running, completed, rejected, expired, …",
            ),
            ("limit", "1–500, default 50"),
        ],
        "ListSessions" => &[("limit", "1–500, default 50")],
        _ => &[],
    }
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for spec in route_specs() {
        let operation = connect::METHODS
            .iter()
            .find(|m| m.method == spec.method.as_str() && m.path == spec.path);
        let mut parameters = Vec::new();
        for part in spec.path.split(['/', ':']) {
            if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                parameters.push(json!({
                    "name": name, "in": "path", "required": true, "schema": {"type": "string"}
                }));
            }
        }
        for (name, description) in query_parameters(operation.map_or("", |o| o.name)) {
            parameters.push(json!({
                "name": name, "in": "query", "required": false,
                "description": description, "schema": {"type": "string"}
            }));
        }
        let mut op = json!({
            "operationId": operation.map_or_else(
                || format!("{} {}", spec.method, spec.path),
                |o| o.name.to_owned(),
            ),
            "summary": operation.map_or("", |o| o.summary),
            "x-required-scopes": spec.scopes,
            "x-connect-path": operation.map(|o| format!("{}/{}", connect::SERVICE, o.name)),
            "parameters": parameters,
            "responses": {
                "2XX": {"description": "Success", "content": {"application/json": {"schema": {"type": "object"}}}},
                "400": error_response("The request could not be read"),
                "401": error_response("No valid bearer token"),
                "403": error_response("A required scope is missing"),
                "404": error_response("No such resource in the caller's tenant"),
                "409": error_response("Conflicts with the current state"),
                "422": error_response("A field is invalid; details.fields names each"),
                "429": error_response("Too many attempts"),
                "503": error_response("A dependency (the database, the journal) is unavailable"),
            }
        });
        if spec.path == "/invocations/events" {
            op["responses"]["2XX"]["content"]["text/event-stream"] = json!({"schema": {"type": "string", "description": "with Accept: text/event-stream, one event per invocation change named by its type (invocation.parked, invocation.queued, invocation.decided, invocation.expired, invocation.completed, resync)"}});
        }
        if spec.path == "/agents/{id}/turns" {
            op["responses"]["2XX"]["content"]["text/event-stream"] = json!({"schema": {"type": "string", "description": "turn, then one event per turn event named by its type, ending with turn_end"}});
        }
        if let Some(o) = operation
            && matches!(o.payload, Payload::Body | Payload::Field(_))
        {
            op["requestBody"] = json!({
                "required": matches!(o.payload, Payload::Field(_)) || spec.method == "PUT",
                "content": {"application/json": {"schema": {"type": "object"}}}
            });
        }
        let path = paths
            .entry(spec.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = path {
            methods.insert(spec.method.as_str().to_ascii_lowercase(), op);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Aperture AgentToolExposureService",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "REST mount of the service; the same methods are served as Connect unary JSON at POST /agent_tool_exposure.v1.AgentToolExposureService/<operationId>."
        },
        "servers": [{"url": PREFIX}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"type": "string"},
                            "message": {"type": "string"},
                            "details": {"type": "object", "properties": {"fields": {
                                "type": "array",
                                "items": {"type": "object", "properties": {
                                    "path": {"type": "string"}, "message": {"type": "string"}
                                }}
                            }}}
                        }
                    }}
                }
            }
        },
        "paths": paths,
    })
}

/// `GET /openapi.json` (no token needed: it describes, it does not reveal).
pub async fn serve() -> Json<Value> {
    Json(document())
}
