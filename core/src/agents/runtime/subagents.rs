//! Sub-agents: the `agent` tool's calls. A fork inherits its parent's instruction, conversation
//! and declarations byte for byte and is narrowed by `fork_tools`; a `general-purpose`
//! sub-agent starts from its prompt. Foreground ones answer the calling model; background ones
//! run detached ([`run_detached`]) and report when they end.

use engine::fork::ExecutionAllowlist;
use serde::Deserialize;

use aperture_types::error::AppError;

use super::turn::{Claim, Events, Run, finish, model_loop, record};
use super::{DEFAULT_MAX_TURNS, Event, ToolConfig, token_of};

use crate::error::ServiceError;
use crate::exposure::Grant;
use crate::model::{Message, ModelClient};
use crate::principal::Principal;
use crate::services::Services;
use crate::store::agents::AgentRow;
use crate::store::exposure::SessionRow;
use crate::{exposure, ids, store};

/// What running a sub-agent resolves to: the outcome and the text the calling model reads.
pub(super) type SubagentFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(&'static str, String), ServiceError>> + Send + 'a>,
>;

/// The arguments of an `agent` call.
#[derive(Debug, Deserialize)]
pub(super) struct AgentCall {
    pub(super) subagent_type: Option<String>,
    pub(super) prompt: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) fork_tools: Option<Vec<String>>,
    #[serde(default)]
    pub(super) run_in_background: bool,
}

/// An `agent` call whose arguments passed every check: what to launch.
pub(super) struct Launch {
    call: AgentCall,
    allowlist: Option<ExecutionAllowlist>,
    fork: bool,
    prompt: String,
}

/// Checks the arguments of an `agent` call before anything is launched (the fork seed's
/// validation of `fork_tools`, the sub-agent type, the prompt); `Err` is what the calling model
/// reads.
pub(super) fn check(arguments: &str) -> Result<Launch, String> {
    let call: AgentCall = serde_json::from_str(arguments)
        .map_err(|e| format!("the agent tool's arguments are invalid: {e}"))?;
    let allowlist = engine::fork::validate_agent_call(
        call.subagent_type.as_deref(),
        call.name.as_deref(),
        call.fork_tools.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let fork = match call.subagent_type.as_deref() {
        Some(engine::fork::FORK_SUBAGENT_TYPE) => true,
        Some("general-purpose") => false,
        other => {
            return Err(format!(
                "subagent_type must be \"fork\" or \"general-purpose\", not {}",
                other.map_or("missing".to_owned(), |o| format!("{o:?}"))
            ));
        }
    };
    let prompt = call
        .prompt
        .clone()
        .filter(|p| !p.trim().is_empty())
        .ok_or("prompt must be a non-empty string")?;
    Ok(Launch {
        call,
        allowlist,
        fork,
        prompt,
    })
}

/// Runs the sub-agent a checked `agent` call ([`check`]) asks for, in the foreground, and
/// returns the response the calling model reads: the sub-agent's final answer, or why it did
/// not give one.
///
/// A fork gets the parent's system instruction, the conversation the parent sent in this model
/// call (the `agent_bootstrap` record) and the parent's declarations, byte for byte; the task,
/// with the restriction notice after it, is its launch prompt (a separate record). Its
/// execution is narrowed by `fork_tools` (the AgentMeta sidecar, also kept on its exposure
/// session), and its grant is a copy of the parent's. A `general-purpose` sub-agent starts
/// from the prompt alone.
pub(super) fn run_subagent<'a>(
    state: &'a Services,
    model: &'a ModelClient,
    principal: &'a Principal,
    parent: &'a AgentRow,
    prefix: &'a [Message],
    parent_tools: &'a ToolConfig,
    launch: Launch,
) -> SubagentFuture<'a> {
    // Boxed: a sub-agent's model loop calls back into `process_function_calls`.
    Box::pin(subagent(
        state,
        model,
        principal,
        parent,
        prefix,
        parent_tools,
        launch,
    ))
}

pub(super) async fn subagent(
    state: &Services,
    model: &ModelClient,
    principal: &Principal,
    parent: &AgentRow,
    prefix: &[Message],
    parent_tools: &ToolConfig,
    launch: Launch,
) -> Result<(&'static str, String), ServiceError> {
    let Launch {
        call,
        allowlist,
        fork,
        prompt,
    } = launch;
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
        exposure::list_grant(
            &state.store,
            &state.journal,
            &state.validators,
            principal,
            session,
            exposure::Listing::default(),
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
        Run {
            state,
            model,
            principal,
            agent: &child,
            grant: &grant,
            tools: &tools,
            turn_id: &turn_id,
            claim: &claim,
        },
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
pub(super) async fn run_detached(
    state: Services,
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
        Run {
            state: &state,
            model: &model,
            principal: &principal,
            agent: &agent,
            grant: &grant,
            tools: &tools,
            turn_id: &turn_id,
            claim: &claim,
        },
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
