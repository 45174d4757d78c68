//! Hosted agents: the list, and one agent with its turns, transcript, tool calls (with their
//! receipts), calls waiting for a person, and sub-agents with their execution allowlists. An
//! agent that is running or waiting reloads by itself.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use serde_json::Value;

use super::Time;
use crate::api::{agent_detail, agents};
use crate::dto::{AgentDetail, AgentView, InvocationView, TranscriptRecord};

/// How often a page of an agent that is running or waiting reloads.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const REFRESH: std::time::Duration = std::time::Duration::from_secs(3);

/// `fork_tools` as shown: `[]` says what it means.
fn allowlist(tools: &[String]) -> String {
    if tools.is_empty() {
        "[] (nothing may run)".to_owned()
    } else {
        tools.join(", ")
    }
}

/// Statuses in which the agent is still doing something (or waiting to).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn busy(status: &str) -> bool {
    matches!(status, "running" | "input_required")
}

/// The Agents page.
#[component]
pub fn AgentsPage() -> impl IntoView {
    let list = Resource::new(|| (), |_| agents());
    view! {
        <h1>"Agents"</h1>
        <p class="lead">
            "Hosted agents run against the configured model server. Every tool call they make goes "
            "through the same checks as " <code>"tools/call"</code>
            " and leaves a receipt; forks are narrowed by " <code>"fork_tools"</code> "."
        </p>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Ok(list) if list.is_empty() => {
                        view! {
                            <p class="empty">
                                "No hosted agent yet: " <code>"POST /api/v2/agent-tool-exposure/agents"</code>
                                " creates one."
                            </p>
                        }
                            .into_any()
                    }
                    Ok(list) => view! { <AgentTable list/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
    .into_any()
}

#[component]
fn AgentTable(list: Vec<AgentView>) -> impl IntoView {
    view! {
        <table class="data" data-testid="agent-table">
            <thead>
                <tr>
                    <th scope="col">"Agent"</th>
                    <th scope="col">"Actor"</th>
                    <th scope="col">"Environment"</th>
                    <th scope="col">"Status"</th>
                    <th scope="col">"Parent"</th>
                    <th scope="col">"Created"</th>
                </tr>
            </thead>
            <tbody>
                {list
                    .into_iter()
                    .map(|a| {
                        view! {
                            <tr data-agent-id=a.agent_id.clone() data-status=a.status.clone()>
                                <td>
                                    <a href=format!("/agents/{}", a.agent_id)><code>{a.agent_id.clone()}</code></a>
                                    {a.subagent_type.clone().map(|t| view! { " " <span class="muted">{t}</span> })}
                                    {a.background.then(|| view! { " " <span class="muted">"background"</span> })}
                                    {a
                                        .execution_allowed_tools
                                        .clone()
                                        .map(|t| view! { <div class="muted">"fork_tools: " {allowlist(&t)}</div> })}
                                </td>
                                <td>{a.actor_id.clone()}</td>
                                <td>{a.environment.clone()}</td>
                                <td><span class=format!("badge agent-{}", a.status)>{a.status.clone()}</span></td>
                                <td>
                                    {a
                                        .parent_id
                                        .clone()
                                        .map(|p| view! { <a href=format!("/agents/{p}")><code>{p.clone()}</code></a> })}
                                </td>
                                <td><Time value=Some(a.created_at.clone())/></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// `/agents/{id}`.
#[component]
pub fn AgentDetailPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let tick = RwSignal::new(0u32);
    let data = Resource::new(move || (id(), tick.get()), |(id, _)| agent_detail(id));
    #[cfg(feature = "hydrate")]
    {
        // Reload while the agent is running or waiting for a person.
        let reload = move || {
            let still = data
                .get_untracked()
                .and_then(|d| d.ok())
                .is_some_and(|d| busy(&d.agent.status));
            if still {
                tick.update(|t| *t += 1);
            }
        };
        if let Ok(handle) = set_interval_with_handle(reload, REFRESH) {
            on_cleanup(move || handle.clear());
        }
    }
    view! {
        <p><a href="/agents">"← All agents"</a></p>
        <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <Detail d/> }.into_any(),
                    Err(e) => {
                        view! {
                            <h1>"Agent"</h1>
                            <p class="error" role="alert">{e.message}</p>
                        }
                            .into_any()
                    }
                }
            })}
        </Transition>
    }
    .into_any()
}

#[component]
fn Detail(d: AgentDetail) -> impl IntoView {
    let a = d.agent;
    let waiting: Vec<InvocationView> = d
        .invocations
        .iter()
        .filter(|i| matches!(i.status.as_str(), "input_required" | "staged"))
        .cloned()
        .collect();
    view! {
        <h1>"Agent " <code>{a.agent_id.clone()}</code></h1>
        <dl class="facts">
            <dt>"Status"</dt>
            <dd>
                <span class=format!("badge agent-{}", a.status) data-testid="agent-status">{a.status.clone()}</span>
                {a.status_reason.clone().map(|r| view! { " " <span data-testid="agent-status-reason">{r}</span> })}
            </dd>
            <dt>"Actor"</dt>
            <dd>{a.actor_id.clone()}</dd>
            <dt>"Environment"</dt>
            <dd>{a.environment.clone()}</dd>
            <dt>"Session"</dt>
            <dd><a href=format!("/sessions/{}", a.agent_id)><code>{a.agent_id.clone()}</code></a></dd>
            <dt>"Model calls per turn"</dt>
            <dd>{a.max_turns}</dd>
            {a.parent_id.clone().map(|p| view! {
                <dt>"Sub-agent of"</dt>
                <dd>
                    <a href=format!("/agents/{p}")><code>{p.clone()}</code></a>
                    " (" {a.subagent_type.clone().unwrap_or_default()}
                    {a.background.then_some(", background")} ")"
                </dd>
            })}
            {a.execution_allowed_tools.clone().map(|t| view! {
                <dt>"fork_tools"</dt>
                <dd data-testid="agent-fork-tools">{allowlist(&t)}</dd>
            })}
            <dt>"Created"</dt>
            <dd><Time value=Some(a.created_at.clone())/></dd>
        </dl>
        <details>
            <summary>"System instruction"</summary>
            <pre class="wrap">{a.system_instruction.clone()}</pre>
        </details>
        <section aria-labelledby="waiting-heading">
            <h2 id="waiting-heading">"Waiting for a person"</h2>
            {if waiting.is_empty() {
                view! { <p class="empty">"No call of this agent is waiting."</p> }.into_any()
            } else {
                view! {
                    <ul class="calls" data-testid="agent-waiting">
                        {waiting
                            .into_iter()
                            .map(|i| {
                                view! {
                                    <li data-invocation-id=i.invocation_id.clone()>
                                        <code>{i.tool.clone()}</code> " "
                                        <code class="wrap">{i.arguments.as_ref().map(Value::to_string).unwrap_or_default()}</code>
                                        " — " <a href="/approvals">"decide in Approvals"</a>
                                    </li>
                                }
                            })
                            .collect_view()}
                    </ul>
                }
                    .into_any()
            }}
        </section>
        <section aria-labelledby="turns-heading">
            <h2 id="turns-heading">"Turns"</h2>
            {if d.turns.is_empty() {
                view! { <p class="empty">"No turn yet."</p> }.into_any()
            } else {
                view! {
                    <table class="data compact" data-testid="agent-turns">
                        <thead>
                            <tr>
                                <th scope="col">"Turn"</th>
                                <th scope="col">"Status"</th>
                                <th scope="col">"Model calls"</th>
                                <th scope="col">"Started"</th>
                                <th scope="col">"Ended"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {d
                                .turns
                                .iter()
                                .map(|t| {
                                    view! {
                                        <tr data-turn-id=t.turn_id.clone() data-status=t.status.clone()>
                                            <td>
                                                <code>{t.turn_id.clone()}</code>
                                                {t.error.clone().map(|e| view! { <div class="error">{e}</div> })}
                                            </td>
                                            <td><span class=format!("badge turn-{}", t.status)>{t.status.clone()}</span></td>
                                            <td>{t.model_calls}</td>
                                            <td><Time value=Some(t.started_at.clone())/></td>
                                            <td><Time value=t.ended_at.clone()/></td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                }
                    .into_any()
            }}
        </section>
        <section aria-labelledby="transcript-heading">
            <h2 id="transcript-heading">"Transcript"</h2>
            {if d.transcript.is_empty() {
                view! { <p class="empty">"Nothing said yet."</p> }.into_any()
            } else {
                view! {
                    <ol class="transcript" data-testid="transcript">
                        {d.transcript.into_iter().map(|r| view! { <Record r/> }).collect_view()}
                    </ol>
                }
                    .into_any()
            }}
        </section>
        <section aria-labelledby="calls-heading">
            <h2 id="calls-heading">"Tool calls"</h2>
            {if d.invocations.is_empty() {
                view! { <p class="empty">"No tool call bound yet."</p> }.into_any()
            } else {
                view! {
                    <table class="data compact" data-testid="agent-calls">
                        <thead>
                            <tr>
                                <th scope="col">"Tool"</th>
                                <th scope="col">"Status"</th>
                                <th scope="col">"Turn"</th>
                                <th scope="col">"Receipts"</th>
                                <th scope="col">"Called"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {d
                                .invocations
                                .iter()
                                .map(|i| {
                                    view! {
                                        <tr data-invocation-id=i.invocation_id.clone() data-status=i.status.clone()>
                                            <td><code>{i.tool.clone()}</code></td>
                                            <td><span class=format!("badge status-{}", i.status)>{i.status.clone()}</span></td>
                                            <td><code>{i.turn_id.clone().unwrap_or_default()}</code></td>
                                            <td>
                                                <a href=format!("/receipts/{}", i.decision_receipt_id)>"decision"</a>
                                                {i.approval_receipt_id.clone().map(|r| view! {
                                                    " · " <a href=format!("/receipts/{r}")>"approval"</a>
                                                })}
                                            </td>
                                            <td><Time value=Some(i.created_at.clone())/></td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                }
                    .into_any()
            }}
        </section>
        <section aria-labelledby="receipts-heading">
            <h2 id="receipts-heading">"Receipts"</h2>
            {if d.receipts.is_empty() {
                view! { <p class="empty">"No receipt to show."</p> }.into_any()
            } else {
                view! {
                    <table class="data compact" data-testid="agent-receipts">
                        <thead>
                            <tr>
                                <th scope="col">"Receipt"</th>
                                <th scope="col">"Kind"</th>
                                <th scope="col">"Decision"</th>
                                <th scope="col">"Reason"</th>
                                <th scope="col">"Tool"</th>
                                <th scope="col">"Issued"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {d
                                .receipts
                                .iter()
                                .map(|r| {
                                    view! {
                                        <tr>
                                            <td><a href=format!("/receipts/{}", r.receipt_id)><code>{r.receipt_id.clone()}</code></a></td>
                                            <td>{r.kind.clone()}</td>
                                            <td><span class=format!("badge decision-{}", r.decision)>{r.decision.clone()}</span></td>
                                            <td><code>{r.reason.clone()}</code></td>
                                            <td><code>{r.tool.clone().unwrap_or_default()}</code></td>
                                            <td><Time value=Some(r.issued_at.clone())/></td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                    <p>
                        <a href=format!("/receipts?session_id={}", a.agent_id)>"All receipts of this agent"</a>
                    </p>
                }
                    .into_any()
            }}
        </section>
        <section aria-labelledby="forks-heading">
            <h2 id="forks-heading">"Sub-agents"</h2>
            {if d.forks.is_empty() {
                view! { <p class="empty">"No sub-agent."</p> }.into_any()
            } else {
                view! { <AgentTable list=d.forks/> }.into_any()
            }}
        </section>
    }
    .into_any()
}

/// One transcript record: a message, a fork's inherited history, or its launch prompt.
#[component]
fn Record(r: TranscriptRecord) -> impl IntoView {
    if r.kind == "agent_bootstrap" {
        let count = r.body.as_array().map_or(0, Vec::len);
        let text = serde_json::to_string_pretty(&r.body).unwrap_or_default();
        return view! {
            <li class="message inherited" data-kind="agent_bootstrap">
                <details>
                    <summary>"Inherited from the parent: " {count} " messages"</summary>
                    <pre class="wrap">{text}</pre>
                </details>
            </li>
        }
        .into_any();
    }
    let role = r.body["role"].as_str().unwrap_or("unknown").to_owned();
    let content = r.body["content"].as_str().map(str::to_owned);
    let calls: Vec<(String, String, String)> = r.body["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                    (
                        s(&c["id"]),
                        s(&c["function"]["name"]),
                        s(&c["function"]["arguments"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let label = match (r.kind.as_str(), role.as_str()) {
        ("launch_prompt", _) => "Task".to_owned(),
        (_, "tool") => format!(
            "Result of {}",
            r.body["tool_call_id"].as_str().unwrap_or_default()
        ),
        (_, "assistant") => "Model".to_owned(),
        (_, "user") => "User".to_owned(),
        (_, other) => other.to_owned(),
    };
    view! {
        <li class=format!("message {role}") data-kind=r.kind.clone() data-role=role.clone()>
            <span class="who">{label}</span>
            {content.map(|c| view! { <pre class="wrap">{c}</pre> })}
            {(!calls.is_empty())
                .then(|| {
                    view! {
                        <ul class="calls">
                            {calls
                                .into_iter()
                                .map(|(id, name, arguments)| {
                                    let shown = id.clone();
                                    view! {
                                        <li data-call-id=id>
                                            "calls " <code>{name}</code> " " <code class="wrap">{arguments}</code>
                                            " (" <code>{shown}</code> ")"
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ul>
                    }
                })}
        </li>
    }
    .into_any()
}
