//! The turn loop: a turn is accepted ([`start_turn`]), then the model is asked and its function
//! calls answered ([`model_loop`]) until it answers with text, a call parks, or the turn has
//! made its model calls; [`finish`] records how it ended. A batch of calls the model made is
//! answered in call order, and one cut short by a restart is closed on the next start.

use std::collections::HashSet;

use engine::scope;

use aperture_types::error::{AppError, ErrorCode};

use super::{
    Event, MAX_MESSAGE, ToolConfig, TurnRequest, TurnView, allowlist_of, process_function_calls,
    readable, token_of,
};

use crate::agents::{recheck, store_failed};
use crate::error::ServiceError;
use crate::exposure::Grant;
use crate::heartbeat::Heartbeat;
use crate::model::{Message, ModelClient, ToolCall};
use crate::principal::Principal;
use crate::services::Services;
use crate::store::agents::AgentRow;
use crate::{exposure, ids, store};

/// The conversation so far, as the model sees it.
pub(super) fn conversation(agent: &AgentRow, records: &[store::agents::RecordRow]) -> Vec<Message> {
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
    state: &Services,
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
    pub(super) state: Services,
    pub(super) model: ModelClient,
    pub(super) principal: Principal,
    pub(super) agent: AgentRow,
    pub(super) grant: Grant,
    pub(super) tools: ToolConfig,
    pub(super) message: String,
    /// `trn_…`
    pub turn_id: String,
    pub(super) runner: String,
}

/// Checks and starts a turn of agent `id`: everything that can refuse it (404, 409, 422, 503)
/// happens here, before anything streams.
pub async fn start_turn(
    state: &Services,
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
            crate::agents::model::ModelError::NotConfigured.to_string(),
        )
        .into());
    };
    let session = store::exposure::find_session(&state.store, &agent.tenant_id, &agent.id)
        .await?
        .ok_or_else(|| AppError::not_found("agent"))?;
    // A fresh manifest per turn: the lease is current and the declarations follow the policy
    // (a fork's: a copy of its parent's current one, as for a REST fork).
    let grant = exposure::list_grant(
        &state.store,
        &state.journal,
        &state.validators,
        principal,
        session,
        exposure::Listing::default(),
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
            .map_err(|e| (0, store_failed(e)))?;
            model_loop(
                Run {
                    state,
                    model: &model,
                    principal: &principal,
                    agent: &agent,
                    grant: &grant,
                    tools: &tools,
                    turn_id: &turn_id,
                    claim: &claim,
                },
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
    pub(super) list: Vec<Event>,
    pub(super) listener: Option<tokio::sync::mpsc::UnboundedSender<Event>>,
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

    pub(super) fn push(&mut self, event: Event) {
        if let Some(listener) = &self.listener {
            let _ = listener.send(event.clone());
        }
        self.list.push(event);
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Event> {
        self.list.iter()
    }

    pub(super) fn into_list(self) -> Vec<Event> {
        self.list
    }
}

/// What `agent`'s background sub-agents answered and was not reported yet, as `(agent, status,
/// text for the model)`; the caller records them with [`store::agents::append_reporting`].
pub(super) async fn reports(
    state: &Services,
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
pub(super) struct Stop {
    pub(super) status: &'static str,
    pub(super) calls: i64,
    pub(super) why: String,
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
    pub(super) fn revoked(calls: i64, why: String) -> Self {
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
pub(super) async fn finish(
    state: &Services,
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
pub(super) async fn close_open_batch(
    state: &Services,
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
pub(super) fn open_batch(records: &[store::agents::RecordRow]) -> Option<Vec<(usize, ToolCall)>> {
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
pub(super) struct Claim {
    pub(super) runner: String,
    pub(super) beat: Heartbeat,
}

impl Claim {
    /// Starts beating for `agent_id`, held by `runner`.
    pub(super) fn hold(state: &Services, agent_id: &str, runner: String) -> Self {
        Self {
            beat: Heartbeat::agent(&state.store, agent_id, &runner),
            runner,
        }
    }

    /// Whether another run took the agent over (this one must stop).
    pub(super) fn lost(&self) -> bool {
        self.beat.lost()
    }
}

/// What one run of [`model_loop`] works on: the services, the model server, who the turn runs
/// as, the agent, the grant and tools it was declared, the turn, and the claim that keeps the
/// agent this runner's.
pub(super) struct Run<'a> {
    pub state: &'a Services,
    pub model: &'a ModelClient,
    pub principal: &'a Principal,
    pub agent: &'a AgentRow,
    pub grant: &'a Grant,
    pub tools: &'a ToolConfig,
    pub turn_id: &'a str,
    pub claim: &'a Claim,
}

/// The model loop of a turn, from `calls` model calls already made. `Ok((status, model
/// calls))`, or `Err((model calls, why))` when the model server or the store failed (the turn
/// fails; what was recorded stays). A batch of calls the transcript shows unanswered (its
/// process stopped before the answers were recorded) is answered first: each call is bound by
/// its invocation key, so one that already ran returns its recorded outcome and does not run again.
pub(super) async fn model_loop(
    run: Run<'_>,
    mut calls: i64,
    events: &mut Events,
) -> Result<(&'static str, i64), Stop> {
    let Run {
        state,
        model,
        principal,
        agent,
        grant,
        tools,
        turn_id,
        claim,
    } = run;
    const TAKEN: &str = "another runner took this agent over";
    let store_error = |calls: i64| move |e: sqlx::Error| (calls, store_failed(e));
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
        // Each call checks the caller again (`process_function_calls`).
        if turn
            .answer(principal, &mut messages, calls, &unanswered, events)
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
        if turn
            .answer(principal, &mut messages, calls, &tool_calls, events)
            .await?
        {
            return Ok(("input_required", calls));
        }
    }
    Ok(("max_turns", calls))
}

/// A transcript record's body.
pub(super) fn record(m: &Message) -> String {
    serde_json::to_string(m).unwrap_or_default()
}

/// The parts of a running turn.
pub(super) struct Turn<'a> {
    pub(super) state: &'a Services,
    pub(super) model: &'a ModelClient,
    pub(super) agent: &'a AgentRow,
    pub(super) grant: &'a Grant,
    pub(super) tools: &'a ToolConfig,
    pub(super) turn_id: &'a str,
    pub(super) runner: &'a str,
}

impl Turn<'_> {
    /// Answers `calls`, the batch of the `model_call`-th answer (the last of `messages`), and
    /// records the answers; `Ok(true)` when one of them is parked (the turn waits), a
    /// [`Stop::revoked`] when the caller's rights were withdrawn on the way (the calls left
    /// are answered as not run, each with its receipt).
    pub(super) async fn answer(
        &self,
        principal: &Principal,
        messages: &mut Vec<Message>,
        model_call: i64,
        calls: &[ToolCall],
        events: &mut Events,
    ) -> Result<bool, Stop> {
        // A fork inherits what was sent in this model call: without the answer just received.
        let sent = messages.len() - 1;
        let (responses, withdrawn) = process_function_calls(
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
        .map_err(|e| (model_call, store_failed(e)))?;
        if let Some(why) = withdrawn {
            return Err(Stop::revoked(model_call, why));
        }
        Ok(parked)
    }
}
