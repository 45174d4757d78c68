//! `resources/list`, `resources/templates/list`, `resources/read`, `prompts/list` and
//! `prompts/get`: what the tenant's policy lets the caller see of its upstreams' resources and
//! prompts ([`aperture_core::items`]), in the environment the request names
//! (`_meta.environment`, else the default one). A read or get that is refused, unknown or
//! offered by two upstreams answers alike, as not found (-32602 in 2026-07-28, -32002 before),
//! with its receipt in `error.data.receipt`.

use aperture_core::items::{self, Answer, Asked, Exposure};
use engine::environment::DEFAULT_ENVIRONMENT;
use serde_json::{Value, json};

use super::input;
use super::request::Method;
use super::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, error, lacks_run, ok};
use crate::auth::Principal;
use crate::state::AppState;

/// -32002: "resource not found" in the 2025 eras.
const RESOURCE_NOT_FOUND: i64 = -32002;

/// The environment a request names (`_meta.environment`), else the default one.
pub(super) fn environment(params: &Value) -> &str {
    params
        .pointer("/_meta/environment")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_ENVIRONMENT)
}

/// The answer to a failure of the gateway itself, or the caller's error (an environment it may
/// not use).
fn failed(id: &Value, e: aperture_core::error::ServiceError) -> Value {
    use aperture_types::error::ErrorCode;
    let e = e.into_app_error();
    let code = match e.code {
        ErrorCode::Internal | ErrorCode::Unavailable | ErrorCode::TooManyRequests => INTERNAL_ERROR,
        _ => INVALID_PARAMS,
    };
    error(id, code, e.message)
}

/// `resources/list`, `resources/templates/list`, `prompts/list` (`:run`).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
    method: Method,
) -> Value {
    if let Some(refused) = lacks_run(principal, id) {
        return refused;
    }
    let exposure = match Exposure::load(&state.store, principal, environment(params)).await {
        Ok(e) => e,
        Err(e) => return failed(id, e),
    };
    let result = match method {
        Method::ResourcesList => json!({"resources": exposure.resources()}),
        Method::ResourcesTemplatesList => json!({"resourceTemplates": exposure.templates()}),
        _ => match upstream_names(state, principal, params).await {
            Ok(names) => json!({"prompts": exposure.prompts_named(names)}),
            Err(e) => return failed(id, e),
        },
    };
    ok(id, result)
}

/// Whether the tenant's MCP settings name things by their upstream's names
/// (`tool_names: "upstream"`) in the environment a request names: prompts then too.
async fn upstream_names(
    state: &AppState,
    principal: &Principal,
    params: &Value,
) -> Result<bool, aperture_core::error::ServiceError> {
    let settings = aperture_core::settings::mcp::of(&state.store, &principal.tenant_id).await?;
    Ok(settings.in_environment(environment(params)).tool_names
        == aperture_core::settings::mcp::ToolNames::Upstream)
}

/// `resources/read` and `prompts/get` (`:run`).
pub async fn answer(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
    method: Method,
    stateless: bool,
) -> Value {
    if let Some(refused) = lacks_run(principal, id) {
        return refused;
    }
    let text = |field: &str| params.get(field).and_then(Value::as_str);
    let asked = match method {
        Method::ResourcesRead => match text("uri") {
            Some(uri) => Asked::Read { uri },
            None => return error(id, INVALID_PARAMS, "params.uri must be a string"),
        },
        _ => {
            let Some(name) = text("name") else {
                return error(id, INVALID_PARAMS, "params.name must be a string");
            };
            let arguments = match params.get("arguments") {
                None | Some(Value::Null) => None,
                Some(Value::Object(map)) if map.values().all(Value::is_string) => Some(map),
                Some(_) => {
                    return error(
                        id,
                        INVALID_PARAMS,
                        "params.arguments must be an object of strings",
                    );
                }
            };
            Asked::Get {
                name,
                arguments,
                rounds: None,
            }
        }
    };
    let names = match method {
        Method::PromptsGet => match upstream_names(state, principal, params).await {
            Ok(names) => names,
            Err(e) => return failed(id, e),
        },
        _ => false,
    };
    // 2026-07-28: a prompt got by a client that can be asked may come back as an input round
    // (as a tool call may: [`super::input`]), or continue one.
    let rounds = if stateless && method == Method::PromptsGet {
        match rounds(state, principal, params) {
            Ok(rounds) => rounds,
            Err(why) => return error(id, INVALID_PARAMS, why),
        }
    } else {
        None
    };
    let asked = match asked {
        Asked::Get {
            name, arguments, ..
        } => Asked::Get {
            name,
            arguments,
            rounds: rounds.as_ref(),
        },
        read => read,
    };
    let answered = items::answer(
        &state.store,
        &state.journal,
        &state.upstreams,
        principal,
        environment(params),
        asked,
        names,
    )
    .await;
    if let Some(rounds) = &rounds {
        match answered {
            // The round, sealed with what its retry must present again.
            Ok(Answer::InputRequired(mut round)) => {
                let mut binding = input::Binding::of(principal, params);
                binding.first.clone_from(&rounds.first);
                input::seal_round(state, &binding, &mut round);
                return ok(id, round);
            }
            // Refused for what the client did not declare: it learns what to declare.
            Ok(Answer::Failed { .. }) if rounds.client.missing.required().is_some() => {
                let required = rounds.client.missing.required().unwrap_or_default();
                let mut answer = error(
                    id,
                    super::MISSING_CAPABILITY,
                    "the prompt needs a client capability this request did not declare",
                );
                answer["error"]["data"] = json!({"requiredCapabilities": required});
                return answer;
            }
            answered => {
                return answered_as(id, answered, (INVALID_PARAMS, "prompt not found"), None);
            }
        }
    }
    let not_found = match (method, stateless) {
        (Method::ResourcesRead, false) => (RESOURCE_NOT_FOUND, "resource not found"),
        (Method::ResourcesRead, true) => (INVALID_PARAMS, "resource not found"),
        _ => (INVALID_PARAMS, "prompt not found"),
    };
    let uri = match asked {
        Asked::Read { uri } => Some(uri),
        Asked::Get { .. } => None,
    };
    answered_as(id, answered, not_found, uri)
}

/// What a 2026-07-28 `prompts/get` carries through input rounds: none when its client
/// declared nothing it can be asked and continues nothing; a retry's `requestState` opened and
/// checked ([`input::opened`]), else why it is refused.
fn rounds(
    state: &AppState,
    principal: &Principal,
    params: &Value,
) -> Result<Option<items::Rounds>, String> {
    let abilities = input::declared(params);
    let client = aperture_core::relay::ClientRelay::new(abilities, tokio::sync::mpsc::channel(1).0);
    let (round, first) = match params.get("requestState") {
        None => {
            if !abilities.any() {
                return Ok(None);
            }
            (aperture_core::relay::Round::default(), None)
        }
        Some(Value::String(sealed)) => {
            let opened = input::opened(state, principal, params, sealed)?;
            let aperture_core::relay::Continues::Upstream {
                upstream_id,
                state: upstream_state,
                asked,
            } = opened.continues
            else {
                return Err("requestState belongs to a tool call".to_owned());
            };
            let round = input::upstream_round(params, upstream_id, upstream_state, asked)?;
            (round, Some(opened.first))
        }
        Some(_) => return Err("requestState must be a string".to_owned()),
    };
    Ok(Some(items::Rounds {
        client,
        round,
        first,
        log_level: None,
    }))
}

/// The JSON-RPC answer to a read, get or subscription that came to `answered`: a refusal as
/// not found (`not_found`: code and message) with its receipt (and the URI asked for), an
/// upstream's failure as -32603 with its receipt.
fn answered_as(
    id: &Value,
    answered: Result<Answer, aperture_core::error::ServiceError>,
    (code, what): (i64, &str),
    uri: Option<&str>,
) -> Value {
    match answered {
        Ok(Answer::Found(result)) => ok(id, result),
        Ok(Answer::NotFound { receipt }) => {
            let mut answer = error(id, code, what);
            let mut data = json!({"receipt": receipt});
            if let Some(uri) = uri {
                data["uri"] = Value::String(uri.to_owned());
            }
            answer["error"]["data"] = data;
            answer
        }
        Ok(Answer::Failed { message, receipt }) => {
            let mut answer = error(id, INTERNAL_ERROR, message);
            answer["error"]["data"] = json!({"receipt": receipt});
            answer
        }
        // Only a get with rounds (sealed by its caller) comes back as one.
        Ok(Answer::InputRequired(_)) => error(id, INTERNAL_ERROR, "an unexpected input round"),
        Err(e) => failed(id, e),
    }
}

/// `resources/subscribe` and `resources/unsubscribe` (`:run`, 2025 eras): on the client's MCP
/// session, whose listening stream (`GET /mcp`) then hears `notifications/resources/updated`
/// of the resource for as long as the caller may read it. A subscription to what the caller
/// cannot read answers as a refused read does (not found, with the receipt); unsubscribing
/// from what it does not hold is no error.
pub async fn subscription(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
    method: Method,
    mcp_session: Option<&str>,
) -> Value {
    if let Some(refused) = lacks_run(principal, id) {
        return refused;
    }
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return error(id, INVALID_PARAMS, "params.uri must be a string");
    };
    // Another environment than the caller's is refused as every method that names one.
    if let Err(e) = principal.may_use(environment(params)) {
        return error(id, INVALID_PARAMS, e.message);
    }
    let Some(session) = mcp_session else {
        return error(
            id,
            INVALID_REQUEST,
            format!(
                "{} needs the Mcp-Session-Id that initialize returned: updates reach the \
                 session's stream (GET /mcp)",
                method.name()
            ),
        );
    };
    if method == Method::ResourcesUnsubscribe {
        return match items::unsubscribe(&state.store, &state.upstreams, principal, uri, session)
            .await
        {
            Ok(_) => ok(id, json!({})),
            Err(e) => failed(id, e),
        };
    }
    let subscribed = items::subscribe(
        &state.store,
        &state.journal,
        &state.upstreams,
        principal,
        environment(params),
        uri,
        session,
    )
    .await;
    let not_found = (RESOURCE_NOT_FOUND, "resource not found");
    answered_as(id, subscribed, not_found, Some(uri))
}

/// `completion/complete` (`:run`): for a prompt or template the caller can list; values that
/// would form a URI it cannot read are left out.
pub async fn complete(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
) -> Value {
    if let Some(refused) = lacks_run(principal, id) {
        return refused;
    }
    let names = match upstream_names(state, principal, params).await {
        Ok(names) => names,
        Err(e) => return failed(id, e),
    };
    let completed = items::complete(
        &state.store,
        &state.journal,
        &state.upstreams,
        principal,
        environment(params),
        params,
        names,
    )
    .await;
    match completed {
        Ok(Some(result)) => ok(id, result),
        Ok(None) => error(id, INVALID_PARAMS, "no such prompt or resource template"),
        Err(e) => failed(id, e),
    }
}
