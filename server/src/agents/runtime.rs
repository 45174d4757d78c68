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
use engine::scope;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use app::error::{AppError, ErrorCode};

use super::model::{Message, ModelClient, ToolCall, ToolDeclaration};
use super::recheck;
use crate::auth::Principal;
use crate::calls::{self, CallMeta};
use crate::error::ServiceError;
use crate::exposure::{self, Grant};
use crate::heartbeat::{self, Heartbeat};
use crate::ids;
use crate::state::AppState;
use crate::store::{self, agents::AgentRow, exposure::SessionRow};

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

pub use app::dto::{AgentDetail, AgentView};

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
    state: &AppState,
    principal: &Principal,
    request: CreateAgentRequest,
) -> Result<AgentView, ServiceError> {
    principal.require(scope::RUN)?;
    let mut fields = Vec::new();
    let environment = request
        .environment
        .unwrap_or_else(|| crate::policies::DEFAULT_ENVIRONMENT.to_owned());
    if !exposure::is_environment(&environment) {
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
                .map(|(path, message)| app::error::FieldError {
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
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<AgentRow, ServiceError> {
    let found = store::agents::find(&state.store, &principal.tenant_id, id).await?;
    match found {
        Some(a)
            if principal.scopes.satisfies(scope::READ)
                || (principal.scopes.satisfies(scope::RUN) && a.actor_id == principal.actor_id) =>
        {
            Ok(a)
        }
        _ => Err(AppError::not_found("agent").into()),
    }
}

/// `GET /agents` (read): newest first.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<AgentView>, ServiceError> {
    principal.require(scope::READ)?;
    Ok(store::agents::list(&state.store, &principal.tenant_id, 500)
        .await?
        .iter()
        .map(view)
        .collect())
}

/// `GET /agents/{id}` (read, or run for one's own): the agent, its transcript, turns, forks and
/// invocations.
pub async fn get(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<AgentDetail, ServiceError> {
    let agent = readable(state, principal, id).await?;
    let transcript = store::agents::records(&state.store, &agent.id)
        .await?
        .into_iter()
        .map(|r| app::dto::TranscriptRecord {
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
        .map(|t| app::dto::AgentTurnView {
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
    /// `executed`, `denied`, `parked`, `not_declared`, `execution_allowlist`.
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
#[allow(clippy::too_many_arguments, reason = "the turn's parts, passed once")]
pub async fn process_function_calls(
    state: &AppState,
    model: &ModelClient,
    principal: &Principal,
    agent: &AgentRow,
    prefix: &[Message],
    grant: &Grant,
    tools: &ToolConfig,
    turn_id: &str,
    model_call: i64,
    calls: &[ToolCall],
) -> Result<Vec<Response>, ServiceError> {
    let declared = tools.declared();
    let mut cx = state.call_context();
    // Results go to the model and, as sent, into the transcript.
    cx.output_to = calls::OutputTo::HostedAgent;
    let mut out = Vec::with_capacity(calls.len());
    // The caller was checked before this batch; each later call of it is checked again, so a
    // token revoked mid-batch runs nothing more (the turn then ends as `revoked`).
    let mut withdrawn: Option<String> = None;
    for (index, call) in calls.iter().enumerate() {
        let name = call.function.name.as_str();
        if withdrawn.is_none()
            && index > 0
            && let Err(why) = recheck::again(state, agent, principal).await
        {
            withdrawn = Some(why);
        }
        if let Some(why) = &withdrawn {
            out.push(Response {
                call: call.clone(),
                outcome: "denied",
                receipt_id: None,
                content: format!("Error: not run: {why}"),
            });
            continue;
        }
        // Refused before the checks of `tools/call`, and journaled like every decision.
        let refused = if !declared.contains(name) {
            Some((
                "not_declared",
                engine::receipt::ReasonCode::NotCallable,
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
                engine::receipt::ReasonCode::ExecutionAllowlist,
                message,
            ))
        } else {
            None
        };
        if let Some((outcome, reason, content)) = refused {
            let receipt = calls::refuse_unchecked(
                &cx,
                principal,
                calls::Unchecked {
                    session: &grant.session,
                    manifest_id: &grant.row.id,
                    policy: (&grant.manifest.policy_id, grant.manifest.policy_version),
                    turn_id,
                    tool: name,
                    reason,
                    detail: &content,
                },
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
            // The guard is authoritative: a fork never starts a sub-agent, whatever its
            // declarations show.
            let (outcome, content) = if agent.parent_id.is_some() {
                (
                    "denied",
                    "Error: a sub-agent cannot start sub-agents; do the work yourself.".to_owned(),
                )
            } else {
                run_subagent(
                    state,
                    model,
                    principal,
                    agent,
                    prefix,
                    tools,
                    &call.function.arguments,
                )
                .await?
            };
            out.push(Response {
                call: call.clone(),
                outcome,
                receipt_id: None,
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
                },
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
    Ok(out)
}

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
        crate::auth::PrincipalKind::Token { token_id, .. } => Some(token_id.clone()),
        _ => None,
    }
}

/// The conversation so far, as the model sees it.
fn conversation(agent: &AgentRow, records: &[store::agents::RecordRow]) -> Vec<Message> {
    let mut messages = vec![Message::System {
        content: agent.system_instruction.clone(),
    }];
    for r in records {
        if r.kind == "agent_bootstrap" {
            if let Ok(inherited) = serde_json::from_str::<Vec<Message>>(&r.body) {
                messages.extend(inherited);
            }
        } else if let Ok(m) = serde_json::from_str::<Message>(&r.body) {
            messages.push(m);
        }
    }
    messages
}

/// `POST /agents/{id}/turns` (run, own agent): runs one turn to its end.
pub async fn run_turn(
    state: &AppState,
    model: Option<&ModelClient>,
    principal: &Principal,
    id: &str,
    request: TurnRequest,
) -> Result<TurnView, ServiceError> {
    start_turn(state, model, principal, id, request)
        .await?
        .run(Events::default())
        .await
}

/// A turn that was accepted (the agent was idle and is now `running`) and has not run yet.
pub struct StartedTurn {
    state: AppState,
    model: ModelClient,
    principal: Principal,
    agent: AgentRow,
    grant: Grant,
    tools: ToolConfig,
    message: String,
    /// `trn_…`
    pub turn_id: String,
    runner: String,
}

/// Checks and starts a turn of agent `id`: everything that can refuse it (404, 409, 422, 503)
/// happens here, before anything streams.
pub async fn start_turn(
    state: &AppState,
    model: Option<&ModelClient>,
    principal: &Principal,
    id: &str,
    request: TurnRequest,
) -> Result<StartedTurn, ServiceError> {
    principal.require(scope::RUN)?;
    let agent = readable(state, principal, id).await?;
    if agent.actor_id != principal.actor_id {
        // Only its actor runs it; to anyone else it is someone else's, like a missing one.
        return Err(AppError::not_found("agent").into());
    }
    if request.message.trim().is_empty() || request.message.chars().count() > MAX_MESSAGE {
        return Err(
            AppError::invalid_field("message", format!("1–{MAX_MESSAGE} characters")).into(),
        );
    }
    if agent.status != "idle" {
        return Err(AppError::new(
            ErrorCode::Conflict,
            format!(
                "the agent is {}; a turn can start when it is idle",
                agent.status
            ),
        )
        .into());
    }
    let Some(model) = model else {
        return Err(AppError::new(
            ErrorCode::Unavailable,
            super::model::ModelError::NotConfigured.to_string(),
        )
        .into());
    };
    let session = store::exposure::find_session(&state.store, &agent.tenant_id, &agent.id)
        .await?
        .ok_or_else(|| AppError::not_found("agent"))?;
    // A fresh manifest per turn: the lease is current and the declarations follow the policy.
    let grant = exposure::grant(
        &state.store,
        &state.journal,
        &state.validators,
        principal,
        session,
    )
    .await?;
    let allowlist = allowlist_of(&agent).map_err(|e| ServiceError::Other(anyhow::anyhow!(e)))?;
    let tools = ToolConfig::prepare(&grant, allowlist);

    let now = store::now_ms();
    // Only one turn at a time: the agent moves from idle to running once, held by this run.
    let runner = ids::new_id("run");
    if !store::agents::claim(&state.store, &agent.id, "idle", &runner, now).await? {
        return Err(AppError::new(
            ErrorCode::Conflict,
            "the agent is busy; a turn can start when it is idle",
        )
        .into());
    }
    let turn_id = ids::new_id("trn");
    let inserted = store::agents::insert_turn(
        &state.store,
        &store::agents::TurnRow {
            id: turn_id.clone(),
            agent_id: agent.id.clone(),
            status: "running".into(),
            model_calls: 0,
            error: None,
            token_id: token_of(principal),
            started_at: now,
            ended_at: None,
        },
    )
    .await;
    if let Err(e) = inserted {
        store::agents::release(
            &state.store,
            &agent.id,
            &runner,
            "idle",
            None,
            None,
            store::now_ms(),
        )
        .await?;
        return Err(e.into());
    }
    Ok(StartedTurn {
        state: state.clone(),
        model: model.clone(),
        principal: principal.clone(),
        agent,
        grant,
        tools,
        message: request.message,
        turn_id,
        runner,
    })
}

impl StartedTurn {
    /// Runs the turn to its end, telling `events` as things happen.
    pub async fn run(self, mut events: Events) -> Result<TurnView, ServiceError> {
        let Self {
            state,
            model,
            principal,
            agent,
            grant,
            tools,
            message,
            turn_id,
            runner,
        } = self;
        let state = &state;
        let claim = Claim::hold(state, &agent.id, runner);
        let outcome = async {
            // What background sub-agents answered since the last turn comes first; they count
            // as reported once recorded here.
            let mut records = Vec::new();
            let mut reported = Vec::new();
            for (child, status, content) in reports(state, &agent)
                .await
                .map_err(|e| (0, e.into_app_error().message))?
            {
                reported.push(child.clone());
                records.push((
                    "message",
                    Some(turn_id.as_str()),
                    record(&Message::User {
                        content: content.clone(),
                    }),
                ));
                events.push(Event::SubagentReport {
                    agent_id: child,
                    status,
                    content,
                });
            }
            records.push((
                "message",
                Some(turn_id.as_str()),
                record(&Message::User {
                    content: message.clone(),
                }),
            ));
            events.push(Event::User { content: message });
            store::agents::append_reporting(
                &state.store,
                &agent.id,
                &records,
                &reported,
                Some(&claim.runner),
                store::now_ms(),
            )
            .await
            .map_err(|e| (0, format!("the store failed: {e}")))?;
            model_loop(
                state,
                &model,
                &principal,
                &agent,
                &grant,
                &tools,
                &turn_id,
                &claim,
                0,
                &mut events,
            )
            .await
        }
        .await;
        let (status, model_calls) =
            finish(state, &agent, &claim.runner, &turn_id, outcome, &mut events).await?;
        Ok(TurnView {
            turn_id,
            agent_id: agent.id,
            status,
            model_calls,
            events: events.into_list(),
        })
    }
}

/// What happened in a turn, in order; also sent to a listener as it happens (SSE).
#[derive(Debug, Default)]
pub struct Events {
    list: Vec<Event>,
    listener: Option<tokio::sync::mpsc::UnboundedSender<Event>>,
}

impl Events {
    /// Events that are also sent to `listener` (a receiver that went away is ignored: the
    /// turn goes on).
    pub fn streaming(listener: tokio::sync::mpsc::UnboundedSender<Event>) -> Self {
        Self {
            list: Vec::new(),
            listener: Some(listener),
        }
    }

    fn push(&mut self, event: Event) {
        if let Some(listener) = &self.listener {
            let _ = listener.send(event.clone());
        }
        self.list.push(event);
    }

    fn iter(&self) -> std::slice::Iter<'_, Event> {
        self.list.iter()
    }

    fn into_list(self) -> Vec<Event> {
        self.list
    }
}

/// What `agent`'s background sub-agents answered and was not reported yet, as `(agent, status,
/// text for the model)`; the caller records them with [`store::agents::append_reporting`].
async fn reports(
    state: &AppState,
    agent: &AgentRow,
) -> Result<Vec<(String, String, String)>, ServiceError> {
    let mut out = Vec::new();
    for child in store::agents::unreported(&state.store, &agent.id).await? {
        let status = store::agents::turns(&state.store, &child.id)
            .await?
            .last()
            .map_or_else(|| "unknown".to_owned(), |t| t.status.clone());
        let records = store::agents::records(&state.store, &child.id).await?;
        let answer = records.iter().rev().find_map(|r| {
            match serde_json::from_str::<Message>(&r.body).ok()? {
                Message::Assistant {
                    content: Some(text),
                    tool_calls,
                } if tool_calls.is_empty() => Some(text),
                _ => None,
            }
        });
        let content = match (status.as_str(), answer) {
            ("completed", Some(text)) => format!(
                "The background sub-agent {} finished. Its answer:\n{text}",
                child.id
            ),
            (status, _) => format!(
                "The background sub-agent {} ended with status {status}{} without an answer.",
                child.id,
                child
                    .status_reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        };
        out.push((child.id, status, content));
    }
    Ok(out)
}

/// Why a turn ended before its model answered: its status (`failed`, or
/// [`recheck::REVOKED`]), the model calls it made, and why.
#[derive(Debug)]
struct Stop {
    status: &'static str,
    calls: i64,
    why: String,
}

impl From<(i64, String)> for Stop {
    /// A failure (the model server or the store) after `calls` model calls.
    fn from((calls, why): (i64, String)) -> Self {
        Self {
            status: "failed",
            calls,
            why,
        }
    }
}

impl Stop {
    /// The caller's rights were withdrawn ([`recheck`]): nothing more runs.
    fn revoked(calls: i64, why: String) -> Self {
        Self {
            status: recheck::REVOKED,
            calls,
            why,
        }
    }
}

/// Records how a turn ended and what the agent does next, if run `runner` still holds the agent
/// (otherwise another run took it over and records the end itself); returns the status and
/// model calls. A turn that failed gets an error answer for each call it left unanswered, so the
/// transcript stays a valid conversation for the next turn.
async fn finish(
    state: &AppState,
    agent: &AgentRow,
    runner: &str,
    turn_id: &str,
    outcome: Result<(&'static str, i64), Stop>,
    events: &mut Events,
) -> Result<(String, i64), ServiceError> {
    let (status, model_calls, error) = match outcome {
        Ok((status, calls)) => (status, calls, None),
        Err(Stop { status, calls, why }) => (status, calls, Some(why)),
    };
    if let Some(e) = &error {
        tracing::warn!(agent = %agent.id, turn = %turn_id, error = %e, "an agent turn failed");
        let held = store::agents::find(&state.store, &agent.tenant_id, &agent.id)
            .await?
            .is_some_and(|a| a.runner.as_deref() == Some(runner));
        if held {
            close_open_batch(state, agent, turn_id, e).await?;
        }
    }
    let agent_status = if status == "input_required" {
        "input_required"
    } else {
        "idle"
    };
    let released = store::agents::release(
        &state.store,
        &agent.id,
        runner,
        agent_status,
        None,
        Some(store::agents::TurnEnd {
            turn_id,
            status,
            model_calls,
            error: error.as_deref(),
        }),
        store::now_ms(),
    )
    .await?;
    if !released {
        tracing::warn!(agent = %agent.id, turn = %turn_id, "the turn's end was not recorded: another runner holds the agent");
    }
    events.push(Event::TurnEnd {
        status: status.to_owned(),
        error,
    });
    Ok((status.to_owned(), model_calls))
}

/// Answers every call of the transcript's last batch that has no answer with an error naming
/// `why` (a turn that failed or was interrupted mid-batch).
async fn close_open_batch(
    state: &AppState,
    agent: &AgentRow,
    turn_id: &str,
    why: &str,
) -> Result<(), ServiceError> {
    let records = store::agents::records(&state.store, &agent.id).await?;
    let missing: Vec<(&str, Option<&str>, String)> = open_batch(&records)
        .unwrap_or_default()
        .into_iter()
        .map(|(_, c)| {
            (
                "message",
                Some(turn_id),
                record(&Message::Tool {
                    tool_call_id: c.id.clone(),
                    content: format!(
                        "Error: the turn ended before this call was answered ({why})."
                    ),
                }),
            )
        })
        .collect();
    if !missing.is_empty() {
        store::agents::append(&state.store, &agent.id, &missing, store::now_ms()).await?;
    }
    Ok(())
}

/// The calls of the transcript's last batch (the last model answer with calls) that have no
/// answer yet, with their position in the batch; `None` when the model never called a tool.
fn open_batch(records: &[store::agents::RecordRow]) -> Option<Vec<(usize, ToolCall)>> {
    let messages: Vec<Message> = records
        .iter()
        .filter(|r| r.kind == "message")
        .filter_map(|r| serde_json::from_str(&r.body).ok())
        .collect();
    let last = messages.iter().rposition(
        |m| matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()),
    )?;
    let Message::Assistant { tool_calls, .. } = &messages[last] else {
        return None;
    };
    let answered: HashSet<&str> = messages[last + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    Some(
        tool_calls
            .iter()
            .enumerate()
            .filter(|(_, c)| !answered.contains(c.id.as_str()))
            .map(|(i, c)| (i, c.clone()))
            .collect(),
    )
}

/// A run's hold on a `running` agent: the run's id, which fences every write that ends the run,
/// and its heartbeat.
struct Claim {
    runner: String,
    beat: Heartbeat,
}

impl Claim {
    /// Starts beating for `agent_id`, held by `runner`.
    fn hold(state: &AppState, agent_id: &str, runner: String) -> Self {
        Self {
            beat: Heartbeat::agent(&state.store, agent_id, &runner),
            runner,
        }
    }

    /// Whether another run took the agent over (this one must stop).
    fn lost(&self) -> bool {
        self.beat.lost()
    }
}

/// The model loop of a turn, from `calls` model calls already made. `Ok((status, model
/// calls))`, or `Err((model calls, why))` when the model server or the store failed (the turn
/// fails; what was recorded stays). A batch of calls the transcript shows unanswered (its
/// process stopped before the answers were recorded) is answered first: each call is bound by
/// its invocation key, so one that already ran returns its recorded outcome and does not run again.
#[allow(clippy::too_many_arguments, reason = "the turn's parts, passed once")]
async fn model_loop(
    state: &AppState,
    model: &ModelClient,
    principal: &Principal,
    agent: &AgentRow,
    grant: &Grant,
    tools: &ToolConfig,
    turn_id: &str,
    claim: &Claim,
    mut calls: i64,
    events: &mut Events,
) -> Result<(&'static str, i64), Stop> {
    const TAKEN: &str = "another runner took this agent over";
    let store_error = |calls: i64| move |e: sqlx::Error| (calls, format!("the store failed: {e}"));
    // The transcript is read once; what the loop records it also keeps here.
    let records = store::agents::records(&state.store, &agent.id)
        .await
        .map_err(store_error(calls))?;
    let mut messages = conversation(agent, &records);
    let turn = Turn {
        state,
        model,
        agent,
        grant,
        tools,
        turn_id,
        runner: &claim.runner,
    };
    if let Some(Message::Assistant { tool_calls, .. }) = messages.last()
        && !tool_calls.is_empty()
    {
        let unanswered = tool_calls.clone();
        let current = recheck::again(state, agent, principal)
            .await
            .map_err(|why| Stop::revoked(calls, why))?;
        if turn
            .answer(&current, &mut messages, calls, &unanswered, events)
            .await?
        {
            return Ok(("input_required", calls));
        }
    }
    while calls < agent.max_turns {
        if claim.lost() {
            return Err((calls, TAKEN.to_owned()).into());
        }
        // The caller as they are now: withdrawn rights end the turn before anything new runs.
        recheck::again(state, agent, principal)
            .await
            .map_err(|why| Stop::revoked(calls, why))?;
        calls += 1;
        let completion = model
            .complete(&messages, &tools.declarations)
            .await
            .map_err(|e| (calls, e.to_string()))?;
        let Message::Assistant {
            content,
            tool_calls,
        } = completion.message.clone()
        else {
            return Err((
                calls,
                "the model did not answer as the assistant".to_owned(),
            )
                .into());
        };
        if claim.lost() {
            return Err((calls, TAKEN.to_owned()).into());
        }
        store::agents::append_held(
            &state.store,
            &agent.id,
            &[("message", Some(turn_id), record(&completion.message))],
            &claim.runner,
            store::now_ms(),
        )
        .await
        .map_err(store_error(calls))?;
        events.push(Event::Assistant {
            content,
            tool_calls: tool_calls.clone(),
        });
        if tool_calls.is_empty() {
            return Ok(("completed", calls));
        }
        messages.push(completion.message);
        if claim.lost() {
            return Err((calls, TAKEN.to_owned()).into());
        }
        let current = recheck::again(state, agent, principal)
            .await
            .map_err(|why| Stop::revoked(calls, why))?;
        if turn
            .answer(&current, &mut messages, calls, &tool_calls, events)
            .await?
        {
            return Ok(("input_required", calls));
        }
    }
    Ok(("max_turns", calls))
}

/// A transcript record's body.
fn record(m: &Message) -> String {
    serde_json::to_string(m).unwrap_or_default()
}

/// The parts of a running turn.
struct Turn<'a> {
    state: &'a AppState,
    model: &'a ModelClient,
    agent: &'a AgentRow,
    grant: &'a Grant,
    tools: &'a ToolConfig,
    turn_id: &'a str,
    runner: &'a str,
}

impl Turn<'_> {
    /// Answers `calls`, the batch of the `model_call`-th answer (the last of `messages`), and
    /// records the answers; `Ok(true)` when one of them is parked (the turn waits).
    async fn answer(
        &self,
        principal: &Principal,
        messages: &mut Vec<Message>,
        model_call: i64,
        calls: &[ToolCall],
        events: &mut Events,
    ) -> Result<bool, (i64, String)> {
        // A fork inherits what was sent in this model call: without the answer just received.
        let sent = messages.len() - 1;
        let responses = process_function_calls(
            self.state,
            self.model,
            principal,
            self.agent,
            &messages[1..sent],
            self.grant,
            self.tools,
            self.turn_id,
            model_call,
            calls,
        )
        .await
        .map_err(|e| (model_call, e.into_app_error().message))?;
        let mut parked = false;
        let mut records = Vec::new();
        for r in &responses {
            events.push(Event::ToolResult {
                tool_call_id: r.call.id.clone(),
                name: r.call.function.name.clone(),
                outcome: r.outcome.to_owned(),
                receipt_id: r.receipt_id.clone(),
                content: r.content.clone(),
            });
            if r.outcome == "parked" {
                // Answered when it is decided (`resume`), with its real outcome.
                parked = true;
                continue;
            }
            let answer = Message::Tool {
                tool_call_id: r.call.id.clone(),
                content: r.content.clone(),
            };
            records.push(("message", Some(self.turn_id), record(&answer)));
            messages.push(answer);
        }
        store::agents::append_held(
            &self.state.store,
            &self.agent.id,
            &records,
            self.runner,
            store::now_ms(),
        )
        .await
        .map_err(|e| (model_call, format!("the store failed: {e}")))?;
        Ok(parked)
    }
}

/// What running a sub-agent resolves to: the outcome and the text the calling model reads.
type SubagentFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(&'static str, String), ServiceError>> + Send + 'a>,
>;

/// The arguments of an `agent` call.
#[derive(Debug, Deserialize)]
struct AgentCall {
    subagent_type: Option<String>,
    prompt: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    fork_tools: Option<Vec<String>>,
    #[serde(default)]
    run_in_background: bool,
}

/// Runs the sub-agent an `agent` call asks for, in the foreground, and returns the response the
/// calling model reads: the sub-agent's final answer, or a validation error.
///
/// A fork gets the parent's system instruction, the conversation the parent sent in this model
/// call (the `agent_bootstrap` record) and the parent's declarations, byte for byte; the task,
/// with the restriction notice after it, is its launch prompt (a separate record). Its
/// execution is narrowed by `fork_tools` (the AgentMeta sidecar, also kept on its exposure
/// session). A `general-purpose` sub-agent starts from the prompt alone.
fn run_subagent<'a>(
    state: &'a AppState,
    model: &'a ModelClient,
    principal: &'a Principal,
    parent: &'a AgentRow,
    prefix: &'a [Message],
    parent_tools: &'a ToolConfig,
    arguments: &'a str,
) -> SubagentFuture<'a> {
    // Boxed: a sub-agent's model loop calls back into `process_function_calls`.
    Box::pin(subagent(
        state,
        model,
        principal,
        parent,
        prefix,
        parent_tools,
        arguments,
    ))
}

async fn subagent(
    state: &AppState,
    model: &ModelClient,
    principal: &Principal,
    parent: &AgentRow,
    prefix: &[Message],
    parent_tools: &ToolConfig,
    arguments: &str,
) -> Result<(&'static str, String), ServiceError> {
    let invalid = |m: String| Ok(("denied", format!("Error: {m}")));
    let call: AgentCall = match serde_json::from_str(arguments) {
        Ok(c) => c,
        Err(e) => return invalid(format!("the agent tool's arguments are invalid: {e}")),
    };
    let allowlist = match engine::fork::validate_agent_call(
        call.subagent_type.as_deref(),
        call.name.as_deref(),
        call.fork_tools.as_deref(),
    ) {
        Ok(a) => a,
        Err(e) => return invalid(e.to_string()),
    };
    let fork = match call.subagent_type.as_deref() {
        Some(engine::fork::FORK_SUBAGENT_TYPE) => true,
        Some("general-purpose") => false,
        other => {
            return invalid(format!(
                "subagent_type must be \"fork\" or \"general-purpose\", not {}",
                other.map_or("missing".to_owned(), |o| format!("{o:?}"))
            ));
        }
    };
    let Some(prompt) = call.prompt.filter(|p| !p.trim().is_empty()) else {
        return invalid("prompt must be a non-empty string".into());
    };
    let background = call.run_in_background;
    let now = store::now_ms();
    let id = ids::new_id("agt");
    // The run that holds the sub-agent from its start.
    let runner = ids::new_id("run");
    let sidecar = allowlist
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| ServiceError::Other(e.into()))?;
    store::exposure::insert_session(
        &state.store,
        &SessionRow {
            id: id.clone(),
            tenant_id: parent.tenant_id.clone(),
            environment: parent.environment.clone(),
            actor_id: parent.actor_id.clone(),
            preset: None,
            entity: None,
            parent_id: fork.then(|| parent.id.clone()),
            fork_tools: sidecar.clone(),
            created_at: now,
            revoked_at: None,
        },
    )
    .await?;
    let child = AgentRow {
        id: id.clone(),
        tenant_id: parent.tenant_id.clone(),
        actor_id: parent.actor_id.clone(),
        environment: parent.environment.clone(),
        system_instruction: parent.system_instruction.clone(),
        // A sub-agent never runs unbounded.
        max_turns: parent.max_turns.min(DEFAULT_MAX_TURNS),
        parent_id: Some(parent.id.clone()),
        subagent_type: call.subagent_type.clone(),
        execution_allowed_tools: sidecar,
        status: "running".into(),
        status_reason: None,
        background,
        reported_at: None,
        runner: Some(runner.clone()),
        created_at: now,
        updated_at: now,
    };
    store::agents::insert(&state.store, &child).await?;
    let launch = match &allowlist {
        Some(a) => format!("{prompt}\n\n{}", a.restriction_notice()),
        None => prompt,
    };
    let turn_id = ids::new_id("trn");
    let setup = async {
        let mut records = Vec::new();
        if fork {
            records.push((
                "agent_bootstrap",
                Some(turn_id.as_str()),
                serde_json::to_string(prefix).map_err(|e| ServiceError::Other(e.into()))?,
            ));
        }
        records.push((
            "launch_prompt",
            Some(turn_id.as_str()),
            record(&Message::User { content: launch }),
        ));
        store::agents::append(&state.store, &id, &records, now).await?;
        store::agents::insert_turn(
            &state.store,
            &store::agents::TurnRow {
                id: turn_id.clone(),
                agent_id: id.clone(),
                status: "running".into(),
                model_calls: 0,
                error: None,
                token_id: token_of(principal),
                started_at: now,
                ended_at: None,
            },
        )
        .await?;
        let session = store::exposure::find_session(&state.store, &child.tenant_id, &child.id)
            .await?
            .ok_or_else(|| AppError::not_found("agent"))?;
        exposure::grant(
            &state.store,
            &state.journal,
            &state.validators,
            principal,
            session,
        )
        .await
    }
    .await;
    let grant = match setup {
        Ok(grant) => grant,
        Err(e) => {
            // It never ran: it ends failed, and the calling model is told.
            let why = e.into_app_error().message;
            store::agents::release(
                &state.store,
                &id,
                &runner,
                "idle",
                Some(&why),
                Some(store::agents::TurnEnd {
                    turn_id: &turn_id,
                    status: "failed",
                    model_calls: 0,
                    error: Some(&why),
                }),
                store::now_ms(),
            )
            .await?;
            return Ok((
                "denied",
                format!("Error: the sub-agent {id} could not start: {why}"),
            ));
        }
    };
    let tools = if fork {
        // The parent's declarations, byte for byte; only execution is narrowed.
        ToolConfig {
            declarations: parent_tools.declarations.clone(),
            identities: parent_tools.identities.clone(),
            execution_allowed: allowlist,
        }
    } else {
        ToolConfig::prepare(&grant, None)
    };
    if background {
        tokio::spawn(run_detached(
            state.clone(),
            model.clone(),
            principal.clone(),
            child,
            grant,
            tools,
            turn_id,
            0,
            runner,
        ));
        return Ok((
            "started",
            format!(
                "The sub-agent {id} started in the background. Its answer will be given to you \
                 when it finishes; go on with your work meanwhile."
            ),
        ));
    }
    let claim = Claim::hold(state, &child.id, runner);
    let mut events = Events::default();
    let outcome = model_loop(
        state,
        model,
        principal,
        &child,
        &grant,
        &tools,
        &turn_id,
        &claim,
        0,
        &mut events,
    )
    .await;
    let (status, _) = finish(state, &child, &claim.runner, &turn_id, outcome, &mut events).await?;
    if status == "input_required" {
        // It goes on by itself once its parked call is decided; from now on it is reported
        // like a background sub-agent.
        store::agents::set_background(&state.store, &child.id).await?;
        return Ok((
            "started",
            format!(
                "The sub-agent {id} is waiting for a person to approve one of its calls. It \
                 continues by itself once that is decided, and its answer will be given to you \
                 when it finishes."
            ),
        ));
    }
    let answer = events.iter().rev().find_map(|e| match e {
        Event::Assistant {
            content: Some(text),
            tool_calls,
        } if tool_calls.is_empty() => Some(text.clone()),
        _ => None,
    });
    Ok(match (status.as_str(), answer) {
        ("completed", Some(text)) => ("executed", text),
        (status, _) => (
            "denied",
            format!("Error: the sub-agent {id} ended with status {status} without an answer."),
        ),
    })
}

/// Runs a sub-agent's turn apart from any request (a background fork, or one revived after a
/// restart) from `calls` model calls already made, as run `runner`.
#[allow(
    clippy::too_many_arguments,
    reason = "the turn's parts, owned by the task"
)]
async fn run_detached(
    state: AppState,
    model: ModelClient,
    principal: Principal,
    agent: AgentRow,
    grant: Grant,
    tools: ToolConfig,
    turn_id: String,
    calls: i64,
    runner: String,
) {
    let claim = Claim::hold(&state, &agent.id, runner);
    let mut events = Events::default();
    let outcome = model_loop(
        &state,
        &model,
        &principal,
        &agent,
        &grant,
        &tools,
        &turn_id,
        &claim,
        calls,
        &mut events,
    )
    .await;
    match finish(
        &state,
        &agent,
        &claim.runner,
        &turn_id,
        outcome,
        &mut events,
    )
    .await
    {
        Ok((status, _)) => {
            tracing::info!(agent = %agent.id, turn = %turn_id, %status, "a background sub-agent's turn ended");
        }
        Err(e) => {
            tracing::warn!(agent = %agent.id, turn = %turn_id, error = ?e.into_app_error(), "ending a background sub-agent's turn");
        }
    }
}

/// Invocation statuses after which nothing more happens.
const FINAL: [&str; 4] = ["completed", "rejected", "expired", "invalidated"];

/// Continues `agent`'s turn once every parked call of it is decided: each gets its real
/// outcome (the upstream's result, or the durable `approval_rejected` / expiry result) as its
/// answer, in call order, and the model loop goes on. `Ok(false)` while something still waits
/// (or another node took the agent first).
pub async fn resume(state: &AppState, agent: AgentRow) -> Result<bool, ServiceError> {
    let turns = store::agents::turns(&state.store, &agent.id).await?;
    let Some(turn) = turns
        .last()
        .filter(|t| t.status == "input_required")
        .cloned()
    else {
        // Nothing to continue: the agent is free again (unless it moved meanwhile).
        store::agents::settle(&state.store, &agent.id, agent.updated_at, store::now_ms()).await?;
        return Ok(false);
    };
    let records = store::agents::records(&state.store, &agent.id).await?;
    let Some(open) = open_batch(&records) else {
        return Ok(false);
    };
    let invocations =
        store::invocations::by_turn(&state.store, &agent.tenant_id, &agent.id, &turn.id).await?;
    let mut answers = Vec::new();
    for (index, call) in open {
        let key = invocation_key(&turn.id, turn.model_calls, index);
        let Some(inv) = invocations
            .iter()
            .find(|i| i.client_key.as_deref() == Some(key.as_str()))
        else {
            answers.push((call, "Error: this call's invocation is missing.".to_owned()));
            continue;
        };
        if !FINAL.contains(&inv.status.as_str()) {
            return Ok(false);
        }
        let result: Value = inv
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null);
        let text = result_text(&result);
        let content = if result.get("isError").and_then(Value::as_bool) == Some(true) {
            format!("Error: {text}")
        } else {
            text
        };
        answers.push((call, content));
    }
    // Only if nothing moved the agent since it was read: what was worked out above still holds.
    let runner = ids::new_id("run");
    if !store::agents::claim_parked(
        &state.store,
        &agent.id,
        agent.updated_at,
        &turn.id,
        &runner,
        store::now_ms(),
    )
    .await?
    {
        return Ok(false);
    }
    // The rest runs on its own, so one long turn does not hold up the others.
    let state = state.clone();
    tokio::spawn(async move {
        let (agent_id, turn_id) = (agent.id.clone(), turn.id.clone());
        if let Err(e) = continue_parked(&state, agent, turn, answers, runner).await {
            tracing::warn!(agent = %agent_id, turn = %turn_id, error = ?e.into_app_error(), "continuing a parked turn");
        }
    });
    Ok(true)
}

/// The rest of [`resume`], as run `runner`: records the decided calls' answers and goes on.
async fn continue_parked(
    state: &AppState,
    agent: AgentRow,
    turn: store::agents::TurnRow,
    answers: Vec<(ToolCall, String)>,
    runner: String,
) -> Result<(), ServiceError> {
    let claim = Claim::hold(state, &agent.id, runner);
    let records: Vec<(&str, Option<&str>, String)> = answers
        .iter()
        .map(|(call, content)| {
            (
                "message",
                Some(turn.id.as_str()),
                record(&Message::Tool {
                    tool_call_id: call.id.clone(),
                    content: content.clone(),
                }),
            )
        })
        .collect();
    let mut events = Events::default();
    for (call, content) in &answers {
        events.push(Event::ToolResult {
            tool_call_id: call.id.clone(),
            name: call.function.name.clone(),
            outcome: "decided".into(),
            receipt_id: None,
            content: content.clone(),
        });
    }
    let calls = turn.model_calls;
    let outcome = async {
        store::agents::append_held(
            &state.store,
            &agent.id,
            &records,
            &claim.runner,
            store::now_ms(),
        )
        .await
        .map_err(|e| (Halt::Fail, format!("the store failed: {e}")))?;
        let principal = recheck::caller(state, &agent, turn.token_id.as_deref())
            .await
            .map_err(|e| (Halt::Revoke, e))?;
        let model = state.model.clone().ok_or_else(|| {
            (
                Halt::Fail,
                super::model::ModelError::NotConfigured.to_string(),
            )
        })?;
        let (rebound, grant, tools) = rebind(state, &principal, &agent).await?;
        Ok(model_loop(
            state,
            &model,
            &principal,
            &rebound,
            &grant,
            &tools,
            &turn.id,
            &claim,
            calls,
            &mut events,
        )
        .await)
    }
    .await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err((Halt::Pause, reason)) => {
            return pause(state, &agent, &claim.runner, &turn.id, calls, &reason).await;
        }
        Err((Halt::Revoke, why)) => Err(Stop::revoked(calls, why)),
        Err((Halt::Fail, e)) => Err((calls, e).into()),
    };
    let (status, _) = finish(state, &agent, &claim.runner, &turn.id, outcome, &mut events).await?;
    tracing::info!(agent = %agent.id, turn = %turn.id, status = %status, "a parked turn continued");
    Ok(())
}

/// How a turn that was to go on (a parked turn continued, a background fork revived) cannot:
/// it fails, its fork waits (`paused`: the parent is gone), or its caller's rights were
/// withdrawn ([`recheck`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halt {
    Fail,
    Pause,
    Revoke,
}

/// [`bind`] for a turn that goes on: a fork whose parent is gone waits (`Pause`, whatever else
/// changed, since the parent's revocation also revoked the fork's session); an agent whose own
/// session was revoked ends as [`recheck::REVOKED`]; anything else fails.
async fn rebind(
    state: &AppState,
    principal: &Principal,
    agent: &AgentRow,
) -> Result<(AgentRow, Grant, ToolConfig), (Halt, String)> {
    match bind(state, principal, agent).await {
        Ok(bound) => Ok(bound),
        Err((true, why)) => Err((Halt::Pause, why)),
        Err((false, why)) => match recheck::session_open(state, agent).await {
            Err(revoked) => Err((Halt::Revoke, revoked)),
            Ok(()) => Err((Halt::Fail, why)),
        },
    }
}

/// A fork whose parent is gone stays `paused` with `reason` (its turn too).
async fn pause(
    state: &AppState,
    agent: &AgentRow,
    runner: &str,
    turn_id: &str,
    calls: i64,
    reason: &str,
) -> Result<(), ServiceError> {
    store::agents::release(
        &state.store,
        &agent.id,
        runner,
        "paused",
        Some(reason),
        Some(store::agents::TurnEnd {
            turn_id,
            status: "paused",
            model_calls: calls,
            error: Some(reason),
        }),
        store::now_ms(),
    )
    .await?;
    tracing::warn!(agent = %agent.id, %reason, "a sub-agent stays paused");
    Ok(())
}

/// Binds what a continued turn of `agent` declares and may execute from the live runtime: a
/// fork's system instruction and declarations are its parent's as they are now (capabilities,
/// resolved through the parent's current manifest), narrowed by the fork's own AgentMeta sidecar
/// (launch-time policy, reapplied; none means unrestricted); its calls run under a fresh
/// manifest of its own session. `Err((paused, why))`: `paused` when the parent is gone.
async fn bind(
    state: &AppState,
    principal: &Principal,
    agent: &AgentRow,
) -> Result<(AgentRow, Grant, ToolConfig), (bool, String)> {
    let failed = |e: ServiceError| (false, e.into_app_error().message);
    let allowlist = allowlist_of(agent).map_err(|e| (false, e))?;
    let mut rebound = agent.clone();
    let mut declared = None;
    if agent.subagent_type.as_deref() == Some(engine::fork::FORK_SUBAGENT_TYPE) {
        let parent_id = agent.parent_id.clone().unwrap_or_default();
        let parent = store::agents::find(&state.store, &agent.tenant_id, &parent_id)
            .await
            .map_err(|e| failed(e.into()))?
            .ok_or_else(|| (true, format!("its parent agent {parent_id} is gone")))?;
        let session = store::exposure::find_session(&state.store, &agent.tenant_id, &parent_id)
            .await
            .map_err(|e| failed(e.into()))?
            .filter(|s| s.revoked_at.is_none())
            .ok_or_else(|| {
                (
                    true,
                    format!("its parent agent {parent_id} is gone (its session was revoked)"),
                )
            })?;
        let parent_grant = exposure::grant(
            &state.store,
            &state.journal,
            &state.validators,
            principal,
            session,
        )
        .await
        .map_err(failed)?;
        rebound.system_instruction = parent.system_instruction;
        declared = Some(ToolConfig::prepare(&parent_grant, None));
    }
    let session = store::exposure::find_session(&state.store, &agent.tenant_id, &agent.id)
        .await
        .map_err(|e| failed(e.into()))?
        .ok_or_else(|| (false, "the agent's session is gone".to_owned()))?;
    let grant = exposure::grant(
        &state.store,
        &state.journal,
        &state.validators,
        principal,
        session,
    )
    .await
    .map_err(failed)?;
    let tools = match declared {
        Some(parent) => ToolConfig {
            execution_allowed: allowlist,
            ..parent
        },
        None => ToolConfig::prepare(&grant, allowlist),
    };
    Ok((rebound, grant, tools))
}

/// Revives background sub-agent `agent`, whose runner stopped, as run `runner` (which claimed
/// it): its running turn goes on from the transcript (bootstrap history, launch prompt, what it
/// did so far) with the live parent's instruction and tools and the sidecar's restriction
/// ([`bind`]). A fork whose parent is gone stays `paused`, with the reason.
async fn revive(state: &AppState, agent: AgentRow, runner: String) -> Result<(), ServiceError> {
    let turns = store::agents::turns(&state.store, &agent.id).await?;
    let Some(turn) = turns.last().filter(|t| t.status == "running").cloned() else {
        // Its turn ended (or parked) before its process stopped.
        let waits = turns.last().is_some_and(|t| t.status == "input_required");
        store::agents::release(
            &state.store,
            &agent.id,
            &runner,
            if waits { "input_required" } else { "idle" },
            None,
            None,
            store::now_ms(),
        )
        .await?;
        return Ok(());
    };
    // The model calls the turn made: its recorded answers.
    let calls = store::agents::records(&state.store, &agent.id)
        .await?
        .iter()
        .filter(|r| r.kind == "message" && r.turn_id.as_deref() == Some(turn.id.as_str()))
        .filter(|r| matches!(serde_json::from_str(&r.body), Ok(Message::Assistant { .. })))
        .count();
    let calls = i64::try_from(calls).unwrap_or(i64::MAX);
    let bound = async {
        let principal = recheck::caller(state, &agent, turn.token_id.as_deref())
            .await
            .map_err(|e| (Halt::Revoke, e))?;
        let model = state.model.clone().ok_or_else(|| {
            (
                Halt::Fail,
                super::model::ModelError::NotConfigured.to_string(),
            )
        })?;
        let (rebound, grant, tools) = rebind(state, &principal, &agent).await?;
        Ok::<_, (Halt, String)>((principal, model, rebound, grant, tools))
    }
    .await;
    match bound {
        Ok((principal, model, rebound, grant, tools)) => {
            tracing::info!(agent = %agent.id, turn = %turn.id, "reviving a background sub-agent");
            tokio::spawn(run_detached(
                state.clone(),
                (*model).clone(),
                principal,
                rebound,
                grant,
                tools,
                turn.id,
                calls,
                runner,
            ));
        }
        Err((Halt::Pause, reason)) => {
            pause(state, &agent, &runner, &turn.id, calls, &reason).await?;
        }
        Err((halt, why)) => {
            let stop = match halt {
                Halt::Revoke => Stop::revoked(calls, why),
                _ => (calls, why).into(),
            };
            finish(
                state,
                &agent,
                &runner,
                &turn.id,
                Err(stop),
                &mut Events::default(),
            )
            .await?;
        }
    }
    Ok(())
}

/// A foreground turn whose process stopped, taken over by run `runner`: it is not continued
/// (its caller is gone); it ends as failed, every call it left unanswered gets an error answer,
/// and the agent is free again.
async fn interrupted(state: &AppState, agent: &AgentRow, runner: &str) -> Result<(), ServiceError> {
    let reason = "the server stopped during this turn; it was not continued";
    let last = store::agents::turns(&state.store, &agent.id)
        .await?
        .into_iter()
        .last();
    if last.as_ref().is_some_and(|t| t.status == "input_required") {
        // It had parked: the resumer continues it once its calls are decided.
        store::agents::release(
            &state.store,
            &agent.id,
            runner,
            "input_required",
            None,
            None,
            store::now_ms(),
        )
        .await?;
        return Ok(());
    }
    let turn = last.filter(|t| t.status == "running");
    if let Some(turn) = &turn {
        close_open_batch(state, agent, &turn.id, reason).await?;
    }
    store::agents::release(
        &state.store,
        &agent.id,
        runner,
        "idle",
        Some(reason),
        turn.as_ref().map(|t| store::agents::TurnEnd {
            turn_id: &t.id,
            status: "failed",
            model_calls: t.model_calls,
            error: Some(reason),
        }),
        store::now_ms(),
    )
    .await?;
    tracing::warn!(agent = %agent.id, "a turn was interrupted by a stop of the server");
    Ok(())
}

/// Takes over agents left `running` by a process that stopped (their heartbeat is stale):
/// background sub-agents are revived, foreground turns end as interrupted.
async fn recover(state: &AppState) -> Result<(), ServiceError> {
    let now = store::now_ms();
    let stale = now - heartbeat::STALE_MS;
    for agent in store::agents::stale_running(&state.store, stale).await? {
        let runner = ids::new_id("run");
        if !store::agents::claim_stale(&state.store, &agent.id, stale, &runner, now).await? {
            continue;
        }
        let id = agent.id.clone();
        let done = if agent.background && agent.parent_id.is_some() {
            revive(state, agent, runner).await
        } else {
            interrupted(state, &agent, &runner).await
        };
        if let Err(e) = done {
            tracing::warn!(agent = %id, error = ?e.into_app_error(), "recovering an agent");
        }
    }
    Ok(())
}

/// Continues every turn whose parked calls are all decided, and recovers agents whose process
/// stopped ([`recover`]); runs forever (spawned by the server). One agent's failure does not
/// stop the others.
pub async fn run_resumer(state: AppState) {
    loop {
        if let Err(e) = recover(&state).await {
            tracing::warn!(error = ?e.into_app_error(), "recovering agents whose process stopped");
        }
        // Every waiting agent, a page at a time (those still waiting do not hide the others).
        let mut after: Option<(i64, String)> = None;
        loop {
            let page = store::agents::waiting(
                &state.store,
                after.as_ref().map(|(at, id)| (*at, id.as_str())),
                100,
            )
            .await;
            let agents = match page {
                Ok(agents) => agents,
                Err(e) => {
                    tracing::warn!(error = %e, "listing agents waiting for a decision");
                    break;
                }
            };
            let Some(last) = agents.last() else { break };
            after = Some((last.updated_at, last.id.clone()));
            for agent in agents {
                let id = agent.id.clone();
                if let Err(e) = resume(&state, agent).await {
                    tracing::warn!(agent = %id, error = ?e.into_app_error(), "continuing a parked turn");
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
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
