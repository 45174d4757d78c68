//! The agent runtime: agents, their turns, and `process_function_calls`.
//!
//! The separation the fork seed describes, with this codebase's names:
//! - [`ToolConfig::declarations`] (the seed's `ToolConfig.tools`) is what every model request
//!   declares — the advertised tools of the agent's manifest — built by
//!   [`ToolConfig::prepare`] (the seed's `AgentCore.prepareTools()`).
//! - [`ToolConfig::execution_allowed`] (the seed's `executionAllowedTools`) is a separate,
//!   optional execution allowlist, snapshotted when the runtime is built for a turn and never
//!   folded into the declarations.
//! - [`process_function_calls`] answers a batch of function calls in call order: declared? →
//!   execution allowlist → the same checks as `tools/call` (request-context RBAC, then the
//!   engine's decision and its durable receipt) → executed, parked or denied.
//!
//! A turn appends the user's message, then asks the model and answers its function calls until
//! it answers with text (`completed`), a call is parked (`input_required`), or the turn has
//! made `max_turns` model calls (`max_turns`: a turn never runs unbounded).

use std::collections::HashSet;

use engine::fork::{ExecutionAllowlist, ToolIdentity};
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use aperture_types::error::AppError;

use super::model::{Message, ModelClient, ToolCall, ToolDeclaration};
use super::recheck;
use crate::calls::{self, CallMeta};
use crate::error::ServiceError;
use crate::exposure::Grant;
use crate::ids;
use crate::principal::Principal;
use crate::services::Services;
use crate::store::{self, agents::AgentRow, exposure::SessionRow};

mod revival;
mod subagents;
mod turn;

pub use revival::{resume, run_resumer};
use subagents::run_subagent;
pub use turn::{Events, StartedTurn, run_turn, start_turn};

/// Model calls a turn may make unless the agent says otherwise.
pub const DEFAULT_MAX_TURNS: i64 = 10;
/// The most an agent may ask for.
pub const MAX_MAX_TURNS: i64 = 100;
/// Longest system instruction, in characters.
const MAX_INSTRUCTION: usize = 32_000;
/// Longest user message, in characters.
const MAX_MESSAGE: usize = 32_000;
/// The system instruction of an agent created without one.
pub const DEFAULT_INSTRUCTION: &str =
    "You are an agent working through the tools you are given. Use them when they help.";

/// `POST /agents`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateAgentRequest {
    /// Environment of the agent's session (`default`).
    #[serde(default)]
    pub environment: Option<String>,
    /// System instruction.
    #[serde(default)]
    pub system_instruction: Option<String>,
    /// Model calls one turn may make (1–100, default 10).
    #[serde(default)]
    pub max_turns: Option<i64>,
}

/// `POST /agents/{id}/turns`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// What the user says.
    pub message: String,
}

pub use aperture_types::dto::{AgentDetail, AgentView};

/// One thing that happened in a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The user's message.
    User {
        /// Text.
        content: String,
    },
    /// What the model said.
    Assistant {
        /// Text.
        content: Option<String>,
        /// Calls `(id, name, arguments)`.
        tool_calls: Vec<ToolCall>,
    },
    /// The answer to one function call.
    ToolResult {
        /// The call's id.
        tool_call_id: String,
        /// The tool called.
        name: String,
        /// `executed`, `denied`, `parked`, `not_declared`, `execution_allowlist`.
        outcome: String,
        /// The receipt that decided it (none before authorization).
        receipt_id: Option<String>,
        /// What the model reads.
        content: String,
    },
    /// A background sub-agent finished since the agent's last turn; what it answered is given
    /// to the model before the user's message.
    SubagentReport {
        /// The sub-agent.
        agent_id: String,
        /// How its turn ended.
        status: String,
        /// What the model reads.
        content: String,
    },
    /// The turn ended.
    TurnEnd {
        /// `completed`, `input_required`, `max_turns`, `failed`.
        status: String,
        /// Why it failed.
        error: Option<String>,
    },
}

/// A turn's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnView {
    /// `trn_…`
    pub turn_id: String,
    /// The agent.
    pub agent_id: String,
    /// How it ended.
    pub status: String,
    /// Model calls made.
    pub model_calls: i64,
    /// What happened, in order.
    pub events: Vec<Event>,
}

fn view(a: &AgentRow) -> AgentView {
    AgentView {
        agent_id: a.id.clone(),
        actor_id: a.actor_id.clone(),
        environment: a.environment.clone(),
        system_instruction: a.system_instruction.clone(),
        max_turns: a.max_turns,
        parent_id: a.parent_id.clone(),
        subagent_type: a.subagent_type.clone(),
        execution_allowed_tools: a
            .execution_allowed_tools
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok()),
        status: a.status.clone(),
        status_reason: a.status_reason.clone(),
        background: a.background,
        created_at: store::rfc3339(a.created_at),
    }
}

/// `POST /agents` (run): a new agent with its own exposure session (same id).
pub async fn create(
    state: &Services,
    principal: &Principal,
    request: CreateAgentRequest,
) -> Result<AgentView, ServiceError> {
    principal.require(scope::RUN)?;
    let mut fields = Vec::new();
    let environment = request
        .environment
        .unwrap_or_else(|| engine::environment::DEFAULT_ENVIRONMENT.to_owned());
    if !engine::environment::is_environment(&environment) {
        fields.push((
            "environment",
            "1–64 characters of a-z, 0-9, _ and -".to_owned(),
        ));
    }
    let instruction = request
        .system_instruction
        .unwrap_or_else(|| DEFAULT_INSTRUCTION.to_owned());
    if instruction.trim().is_empty() || instruction.chars().count() > MAX_INSTRUCTION {
        fields.push((
            "system_instruction",
            format!("1–{MAX_INSTRUCTION} characters"),
        ));
    }
    let max_turns = request.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    if !(1..=MAX_MAX_TURNS).contains(&max_turns) {
        fields.push(("max_turns", format!("between 1 and {MAX_MAX_TURNS}")));
    }
    if !fields.is_empty() {
        return Err(AppError::invalid(
            fields
                .into_iter()
                .map(|(path, message)| aperture_types::error::FieldError {
                    path: path.into(),
                    message,
                })
                .collect(),
        )
        .into());
    }
    principal.may_use(&environment)?;
    let now = store::now_ms();
    let id = ids::new_id("agt");
    store::exposure::insert_session(
        &state.store,
        &SessionRow {
            id: id.clone(),
            tenant_id: principal.tenant_id.clone(),
            environment: environment.clone(),
            actor_id: principal.actor_id.clone(),
            preset: None,
            entity: None,
            parent_id: None,
            fork_tools: None,
            created_at: now,
            revoked_at: None,
        },
    )
    .await?;
    let agent = AgentRow {
        id,
        tenant_id: principal.tenant_id.clone(),
        actor_id: principal.actor_id.clone(),
        environment,
        system_instruction: instruction,
        max_turns,
        parent_id: None,
        subagent_type: None,
        execution_allowed_tools: None,
        status: "idle".into(),
        status_reason: None,
        background: false,
        reported_at: None,
        runner: None,
        created_at: now,
        updated_at: now,
    };
    store::agents::insert(&state.store, &agent).await?;
    tracing::info!(agent = %agent.id, actor = %agent.actor_id, "agent created");
    Ok(view(&agent))
}

/// An agent `principal` may see: `:read` sees all, `:run` its own (others look missing).
async fn readable(
    state: &Services,
    principal: &Principal,
    id: &str,
) -> Result<AgentRow, ServiceError> {
    let found = store::agents::find(&state.store, &principal.tenant_id, id).await?;
    match found {
        Some(a)
            if principal.sees(&a.environment)
                && (principal.scopes.satisfies(scope::READ)
                    || (principal.scopes.satisfies(scope::RUN)
                        && a.actor_id == principal.actor_id)) =>
        {
            Ok(a)
        }
        _ => Err(AppError::not_found("agent").into()),
    }
}

/// `GET /agents` (read): newest first.
pub async fn list(state: &Services, principal: &Principal) -> Result<Vec<AgentView>, ServiceError> {
    principal.require(scope::READ)?;
    Ok(store::agents::list(&state.store, &principal.tenant_id, 500)
        .await?
        .iter()
        .filter(|a| principal.sees(&a.environment))
        .map(view)
        .collect())
}

/// `GET /agents/{id}` (read, or run for one's own): the agent, its transcript, turns, forks and
/// invocations.
pub async fn get(
    state: &Services,
    principal: &Principal,
    id: &str,
) -> Result<AgentDetail, ServiceError> {
    let agent = readable(state, principal, id).await?;
    let transcript = store::agents::records(&state.store, &agent.id)
        .await?
        .into_iter()
        .map(|r| aperture_types::dto::TranscriptRecord {
            seq: r.seq,
            kind: r.kind,
            turn_id: r.turn_id,
            body: serde_json::from_str(&r.body).unwrap_or(Value::Null),
            created_at: store::rfc3339(r.created_at),
        })
        .collect();
    let turns = store::agents::turns(&state.store, &agent.id)
        .await?
        .into_iter()
        .map(|t| aperture_types::dto::AgentTurnView {
            turn_id: t.id,
            status: t.status,
            model_calls: t.model_calls,
            error: t.error,
            started_at: store::rfc3339(t.started_at),
            ended_at: t.ended_at.map(store::rfc3339),
        })
        .collect();
    let forks = store::agents::children(&state.store, &agent.id)
        .await?
        .iter()
        .map(view)
        .collect();
    let invocations =
        store::invocations::by_session(&state.store, &agent.tenant_id, &agent.id, 500)
            .await?
            .iter()
            .map(crate::invocations::typed_view)
            .collect();
    Ok(AgentDetail {
        agent: view(&agent),
        transcript,
        turns,
        forks,
        invocations,
        receipts: Vec::new(),
    })
}

/// The built-in tool that starts sub-agents.
pub const AGENT_TOOL: &str = "agent";

/// The `agent` tool's declaration (CONTRACT §12).
pub fn agent_declaration() -> ToolDeclaration {
    ToolDeclaration::function(
        AGENT_TOOL,
        Some(
            "Start a sub-agent. subagent_type \"fork\" continues from your conversation with your \
             tools (fork_tools narrows which of them it may execute); \"general-purpose\" starts \
             from a fresh context with only the prompt. Returns the sub-agent's final answer.",
        ),
        json!({
            "type": "object",
            "properties": {
                "subagent_type": {"type": "string", "enum": ["fork", "general-purpose"]},
                "prompt": {"type": "string", "description": "The task."},
                "name": {"type": "string", "description": "A teammate's name."},
                "fork_tools": {"type": "array", "items": {"type": "string"},
                    "description": "Tools the fork may execute (exact names or MCP patterns); [] allows none."},
                "run_in_background": {"type": "boolean"}
            },
            "required": ["subagent_type", "prompt"]
        }),
    )
}

/// What a turn declares and may execute.
#[derive(Debug, Clone)]
pub struct ToolConfig {
    /// Every model request's function declarations, in manifest order.
    pub declarations: Vec<ToolDeclaration>,
    /// The raw identity of each declared tool (fork patterns match it).
    identities: Vec<(String, Option<(String, String)>)>,
    /// The execution allowlist, when the agent is a restricted fork.
    pub execution_allowed: Option<ExecutionAllowlist>,
}

impl ToolConfig {
    /// The declarations of `grant`'s listed tools and the agent's execution allowlist.
    pub fn prepare(grant: &Grant, execution_allowed: Option<ExecutionAllowlist>) -> Self {
        let mut declarations = Vec::new();
        let mut identities = Vec::new();
        for entry in grant.manifest.listed() {
            let a = &entry.advertised;
            declarations.push(ToolDeclaration::function(
                &a.name,
                a.description.as_deref(),
                a.input_schema.clone(),
            ));
            let raw = match &entry.source {
                engine::descriptor::ToolSource::Mcp { server, tool, .. } => {
                    Some((server.clone(), tool.clone()))
                }
                engine::descriptor::ToolSource::Builtin => None,
            };
            identities.push((a.name.clone(), raw));
        }
        declarations.push(agent_declaration());
        identities.push((AGENT_TOOL.to_owned(), None));
        Self {
            declarations,
            identities,
            execution_allowed,
        }
    }

    fn declared(&self) -> HashSet<&str> {
        self.declarations
            .iter()
            .map(|d| d.function.name.as_str())
            .collect()
    }

    fn allows(&self, name: &str) -> bool {
        let Some(allow) = &self.execution_allowed else {
            return true;
        };
        let identity = self
            .identities
            .iter()
            .find(|(n, _)| n == name)
            .map(|(n, raw)| match raw {
                Some((server, tool)) => ToolIdentity::mcp(n, server, tool),
                None => ToolIdentity::builtin(n),
            })
            .unwrap_or_else(|| ToolIdentity::builtin(name));
        allow.allows(&identity)
    }
}

/// What one function call got.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The call.
    pub call: ToolCall,
    /// `executed`, `denied`, `parked`, `not_declared`, `execution_allowlist`, `revoked` (not
    /// run: the caller's rights were withdrawn).
    pub outcome: &'static str,
    /// The deciding receipt.
    pub receipt_id: Option<String>,
    /// What the model reads.
    pub content: String,
}

/// The text a model reads of an MCP tool result: its text blocks, else its structured content.
fn result_text(result: &Value) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    result
        .get("structuredContent")
        .map(Value::to_string)
        .unwrap_or_default()
}

/// Answers a batch of function calls in call order (see the module documentation). A call that
/// is not declared, or not allowed by the execution allowlist, gets one synthetic error
/// response with its id and name and is never authorized, constructed or executed; the rest of
/// the batch continues.
///
/// The caller is checked again before each call ([`recheck`]) and each call runs as the caller
/// is now. Once the caller's rights are withdrawn (a token revoked, `:run` or the agent's
/// environment taken away, the session revoked), every call left is answered as not run, with
/// a journaled `cancelled` receipt, and the reason is returned beside the responses: the turn
/// ends `revoked`.
#[allow(clippy::too_many_arguments, reason = "the turn's parts, passed once")]
pub async fn process_function_calls(
    state: &Services,
    model: &ModelClient,
    principal: &Principal,
    agent: &AgentRow,
    prefix: &[Message],
    grant: &Grant,
    tools: &ToolConfig,
    turn_id: &str,
    model_call: i64,
    calls: &[ToolCall],
) -> Result<(Vec<Response>, Option<String>), ServiceError> {
    let declared = tools.declared();
    let mut cx = state.call_context();
    // Results go to the model and, as sent, into the transcript.
    cx.output_to = crate::execution::OutputTo::HostedAgent;
    let mut out = Vec::with_capacity(calls.len());
    let mut withdrawn: Option<String> = None;
    for (index, call) in calls.iter().enumerate() {
        let name = call.function.name.as_str();
        let current = match &withdrawn {
            Some(_) => None,
            None => match recheck::again(state, agent, principal).await {
                Ok(current) => Some(current),
                Err(why) => {
                    withdrawn = Some(why);
                    None
                }
            },
        };
        let Some(principal) = current.as_ref() else {
            // Not run, and journaled as such: every decision has its receipt.
            let content = format!(
                "Error: not run: {}",
                withdrawn.as_deref().unwrap_or_default()
            );
            let receipt = unchecked(
                &cx,
                principal,
                grant,
                turn_id,
                name,
                (Decision::Deny, ReasonCode::Cancelled),
                &content,
            )
            .await;
            out.push(Response {
                call: call.clone(),
                outcome: "revoked",
                receipt_id: receipt.seq.map(|_| receipt.receipt_id),
                content,
            });
            continue;
        };
        // Refused before the checks of `tools/call`, and journaled like every decision.
        let refused = if !declared.contains(name) {
            Some((
                "not_declared",
                ReasonCode::NotCallable,
                format!("Error: tool \"{name}\" not found."),
            ))
        } else if !tools.allows(name) {
            let message = tools
                .execution_allowed
                .as_ref()
                .map(|a| a.rejection_message(name))
                .unwrap_or_default();
            Some((
                "execution_allowlist",
                ReasonCode::ExecutionAllowlist,
                message,
            ))
        } else if name == AGENT_TOOL && agent.parent_id.is_some() {
            // The guard is authoritative: a fork never starts a sub-agent, whatever its
            // declarations show.
            Some((
                "denied",
                ReasonCode::ExecutionAllowlist,
                "Error: a sub-agent cannot start sub-agents; do the work yourself.".to_owned(),
            ))
        } else {
            None
        };
        if let Some((outcome, reason, content)) = refused {
            let receipt = unchecked(
                &cx,
                principal,
                grant,
                turn_id,
                name,
                (Decision::Deny, reason),
                &content,
            )
            .await;
            out.push(Response {
                call: call.clone(),
                outcome,
                receipt_id: receipt.seq.map(|_| receipt.receipt_id),
                content,
            });
            continue;
        }
        if name == AGENT_TOOL {
            // The launch (or its refusal) is a decision of its own, journaled before the
            // sub-agent does anything.
            let (decided, content) = match subagents::check(&call.function.arguments) {
                Ok(launch) => ((Decision::Allow, ReasonCode::Ok), Ok::<_, String>(launch)),
                Err(why) => (
                    (Decision::Deny, ReasonCode::ArgumentsInvalid),
                    Err(format!("Error: {why}")),
                ),
            };
            let detail = match &content {
                Ok(_) => "a sub-agent launched".to_owned(),
                Err(why) => why.clone(),
            };
            let receipt = unchecked(&cx, principal, grant, turn_id, name, decided, &detail).await;
            if receipt.seq.is_none() {
                // The journal could not record the launch: nothing is launched.
                out.push(Response {
                    call: call.clone(),
                    outcome: "denied",
                    receipt_id: None,
                    content: "Error: the journal is unavailable; nothing was started.".into(),
                });
                continue;
            }
            let (outcome, content) = match content {
                Ok(launch) => {
                    run_subagent(state, model, principal, agent, prefix, tools, launch).await?
                }
                Err(why) => ("denied", why),
            };
            out.push(Response {
                call: call.clone(),
                outcome,
                receipt_id: Some(receipt.receipt_id),
                content,
            });
            continue;
        }
        let entry = grant.manifest.entry(name);
        // Arguments that are not JSON still go to the decision, which refuses them with a
        // receipt (`arguments_invalid`).
        let arguments = serde_json::from_str::<Value>(&call.function.arguments)
            .unwrap_or_else(|_| Value::String(call.function.arguments.clone()));
        let result = calls::call(
            &cx,
            principal,
            Some(&grant.session.id),
            &calls::ToolCall {
                name: name.to_owned(),
                arguments: Some(arguments),
                meta: CallMeta {
                    session_id: Some(grant.session.id.clone()),
                    manifest_id: Some(grant.row.id.clone()),
                    lease_id: Some(grant.row.lease_id.clone()),
                    tool_version: entry.map(|e| e.tool_version.clone()),
                    expected_schema_hash: entry.map(|e| e.schema_hash.clone()),
                    actor_id: None,
                    turn_id: Some(turn_id.to_owned()),
                    // Binds the call as an invocation the turn can find again when a parked
                    // call is decided (and makes a repeated call return the same outcome).
                    invocation_id: Some(invocation_key(turn_id, model_call, index)),
                    confirmation_token: None,
                    environment: None,
                },
                binding: Default::default(),
            },
        )
        .await?;
        let meta = result.get("_meta");
        let receipt_id = meta
            .and_then(|m| m.get("receipt"))
            .and_then(|r| r.get("receipt_id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let status = meta.and_then(|m| m.get("status")).and_then(Value::as_str);
        let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
        let (outcome, content) = match status {
            Some("input_required") | Some("staged") => (
                "parked",
                "This call is waiting for a person to approve it; its result will follow.".into(),
            ),
            // Still running (an async job, or a call replayed after a stop while its first run
            // was in flight): the turn waits for its final outcome like a parked call.
            Some("working") => (
                "parked",
                "This call is still running; its result will follow.".into(),
            ),
            _ if is_error => ("denied", format!("Error: {}", result_text(&result))),
            _ => ("executed", result_text(&result)),
        };
        out.push(Response {
            call: call.clone(),
            outcome,
            receipt_id,
            content,
        });
    }
    Ok((out, withdrawn))
}

/// Journals a decision taken here rather than by the checks of `tools/call` (an undeclared
/// tool, the execution allowlist, a withdrawn caller, the built-in `agent` tool).
async fn unchecked(
    cx: &crate::execution::CallContext<'_>,
    principal: &Principal,
    grant: &Grant,
    turn_id: &str,
    tool: &str,
    (decision, reason): (Decision, ReasonCode),
    detail: &str,
) -> engine::receipt::Receipt {
    calls::record_unchecked(
        cx,
        principal,
        calls::Unchecked {
            session: &grant.session,
            manifest_id: &grant.row.id,
            policy: (&grant.manifest.policy_id, grant.manifest.policy_version),
            turn_id,
            tool,
            decision,
            reason,
            builtin_hash: (tool == AGENT_TOOL).then(|| AGENT_DECLARATION_HASH.as_str()),
            detail,
        },
    )
    .await
}

/// The hash of the `agent` tool's declaration (RFC 8785, as the model is sent it): the
/// `schema_hash` its receipts carry.
static AGENT_DECLARATION_HASH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    engine::canonical::hash_value(&serde_json::to_value(agent_declaration()).unwrap_or_default())
});

/// The `_meta.invocation_id` of call `index` of the `model_call`-th answer of a turn.
fn invocation_key(turn_id: &str, model_call: i64, index: usize) -> String {
    format!("{turn_id}/{model_call}/{index}")
}

/// An agent's execution allowlist (its AgentMeta sidecar), `None` when unrestricted.
fn allowlist_of(agent: &AgentRow) -> Result<Option<ExecutionAllowlist>, String> {
    agent
        .execution_allowed_tools
        .as_deref()
        .map(|s| {
            serde_json::from_str::<Vec<String>>(s)
                .map_err(|e| e.to_string())
                .and_then(|entries| ExecutionAllowlist::parse(&entries).map_err(|e| e.to_string()))
        })
        .transpose()
        .map_err(|e| format!("stored fork_tools: {e}"))
}

/// The token a turn runs as (`None` for a dashboard user): a continued turn runs as it again.
fn token_of(principal: &Principal) -> Option<String> {
    match &principal.kind {
        crate::principal::PrincipalKind::Token { token_id, .. } => Some(token_id.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(sidecar: Option<&str>) -> AgentRow {
        AgentRow {
            id: "agt_x".into(),
            tenant_id: "t".into(),
            actor_id: "a".into(),
            environment: "default".into(),
            system_instruction: "s".into(),
            max_turns: 1,
            parent_id: Some("agt_p".into()),
            subagent_type: Some("fork".into()),
            execution_allowed_tools: sidecar.map(str::to_owned),
            status: "idle".into(),
            status_reason: None,
            background: true,
            reported_at: None,
            runner: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn a_sidecar_that_does_not_read_fails_closed() {
        assert_eq!(allowlist_of(&agent(None)), Ok(None));
        let empty = allowlist_of(&agent(Some("[]"))).unwrap().unwrap();
        assert!(empty.entries().is_empty());
        // Neither garbage nor an entry the engine refuses may turn into "unrestricted".
        assert!(allowlist_of(&agent(Some("not json"))).is_err());
        assert!(allowlist_of(&agent(Some(r#"["*"]"#))).is_err());
    }
}
