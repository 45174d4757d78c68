//! Revival: a turn that waits for approvals continues once every parked call of it is decided
//! ([`resume`]); after a restart, turns a stopped node was running are revived or closed
//! ([`recover`]), and [`run_resumer`] keeps doing both in the background.

use serde_json::Value;

use aperture_types::error::ErrorCode;

use super::subagents::run_detached;
use super::turn::{
    Claim, Events, Run, Stop, close_open_batch, finish, model_loop, open_batch, record,
};
use super::{Event, ToolConfig, allowlist_of, invocation_key, result_text};

use crate::agents::{recheck, store_failed};
use crate::error::ServiceError;
use crate::exposure::Grant;
use crate::model::{Message, ToolCall};
use crate::principal::Principal;
use crate::services::Services;
use crate::store::agents::AgentRow;
use crate::{exposure, heartbeat, ids, store};

/// Invocation statuses after which nothing more happens.
pub(super) const FINAL: [&str; 5] = [
    "completed",
    "rejected",
    "expired",
    "invalidated",
    "cancelled",
];

/// Continues `agent`'s turn once every parked call of it is decided: each gets its real
/// outcome (the upstream's result, or the durable `approval_rejected` / expiry result) as its
/// answer, in call order, and the model loop goes on. `Ok(false)` while something still waits
/// (or another node took the agent first).
pub async fn resume(state: &Services, agent: AgentRow) -> Result<bool, ServiceError> {
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
pub(super) async fn continue_parked(
    state: &Services,
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
        .map_err(|e| (Halt::Fail, store_failed(e)))?;
        let principal = recheck::caller(state, &agent, turn.token_id.as_deref())
            .await
            .map_err(|e| (Halt::Revoke, e))?;
        let model = state.model.clone().ok_or_else(|| {
            (
                Halt::Fail,
                crate::agents::model::ModelError::NotConfigured.to_string(),
            )
        })?;
        let (rebound, grant, tools) = rebind(state, &principal, &agent).await?;
        Ok(model_loop(
            Run {
                state,
                model: &model,
                principal: &principal,
                agent: &rebound,
                grant: &grant,
                tools: &tools,
                turn_id: &turn.id,
                claim: &claim,
            },
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
pub(super) enum Halt {
    Fail,
    Pause,
    Revoke,
}

/// [`bind`] for a turn that goes on: a fork whose parent is gone waits (`Pause`, whatever else
/// changed, since the parent's revocation also revoked the fork's session); an agent whose own
/// session was revoked ends as [`recheck::REVOKED`]; anything else fails.
pub(super) async fn rebind(
    state: &Services,
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
pub(super) async fn pause(
    state: &Services,
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

/// Why a fork waits: its parent holds no live grant to copy (reason `lease_expired`).
const PARENT_LEASE_ENDED: &str = "lease_expired: the parent agent's grant has ended; the fork goes on once the parent lists again";

/// Binds what a continued turn of `agent` declares and may execute from the live runtime: a
/// fork's system instruction and declarations are its parent's as they are now (capabilities,
/// resolved through the parent's current manifest), narrowed by the fork's own AgentMeta sidecar
/// (launch-time policy, reapplied; none means unrestricted); its calls run under a copy of the
/// parent's current grant (a fork's, as a REST fork's) or a fresh manifest of its own session. `Err((paused, why))`: `paused` when the parent is gone.
pub(super) async fn bind(
    state: &Services,
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
        // The parent's grant as it stands: read, never made (reviving a fork grants its
        // parent nothing). Without a live one the fork waits for its parent to list again.
        let parent_grant = exposure::live_grant(&state.store, session)
            .await
            .map_err(failed)?
            .ok_or_else(|| (true, PARENT_LEASE_ENDED.to_owned()))?;
        rebound.system_instruction = parent.system_instruction;
        declared = Some(ToolConfig::prepare(&parent_grant, None));
    }
    let session = store::exposure::find_session(&state.store, &agent.tenant_id, &agent.id)
        .await
        .map_err(|e| failed(e.into()))?
        .ok_or_else(|| (false, "the agent's session is gone".to_owned()))?;
    let is_fork = session.parent_id.is_some();
    // A fork's grant is a copy of its parent's current one (as a REST fork's is), never one of
    // its own.
    let grant = exposure::list_grant(
        &state.store,
        &state.journal,
        &state.validators,
        principal,
        session,
        exposure::Listing::default(),
    )
    .await
    .map_err(|e| match e.into_app_error() {
        e if is_fork && e.code == ErrorCode::Conflict => (true, PARENT_LEASE_ENDED.to_owned()),
        e => (false, e.message),
    })?;
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
pub(super) async fn revive(
    state: &Services,
    agent: AgentRow,
    runner: String,
) -> Result<(), ServiceError> {
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
                crate::agents::model::ModelError::NotConfigured.to_string(),
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
pub(super) async fn interrupted(
    state: &Services,
    agent: &AgentRow,
    runner: &str,
) -> Result<(), ServiceError> {
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
pub(super) async fn recover(state: &Services) -> Result<(), ServiceError> {
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
pub async fn run_resumer(state: Services) {
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
