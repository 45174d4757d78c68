//! Approvals: calls parked for a person (`approval_required`) and staged changes, each shown
//! exactly as it will run, with approve / apply / reject; recent decisions below. The queue
//! follows the server's events (`/ui/approvals/events`, server-sent) and reads itself again on
//! each, keeping what an approver is typing.

use leptos::prelude::*;

use super::Time;
use crate::api::{DecideInvocation, approvals};
use crate::dto::{ApprovalsView, InvocationView};

/// The events that change the queue (and `resync`: read it all again).
#[cfg(feature = "hydrate")]
const EVENTS: [&str; 7] = [
    "resync",
    "invocation.parked",
    "invocation.queued",
    "invocation.decided",
    "invocation.expired",
    "invocation.cancelled",
    "invocation.completed",
];

/// Reads the queue again on every event of the page's event stream until the page goes away;
/// the browser reconnects a dropped stream by itself (and `resync` then catches up). A stream
/// the server refused (the session ended) is said so.
#[cfg(feature = "hydrate")]
fn follow_events(reload: impl Fn() + 'static, stopped: RwSignal<Option<String>>) {
    use leptos::wasm_bindgen::JsCast;
    use leptos::wasm_bindgen::closure::Closure;
    let Ok(source) = leptos::web_sys::EventSource::new("/ui/approvals/events") else {
        stopped.set(Some(
            "Live updates are unavailable; reload the page to see new calls.".into(),
        ));
        return;
    };
    let on_event = Closure::<dyn FnMut(leptos::web_sys::Event)>::new(move |_| reload());
    for kind in EVENTS {
        let _ = source.add_event_listener_with_callback(kind, on_event.as_ref().unchecked_ref());
    }
    let watched = source.clone();
    let on_error = Closure::<dyn FnMut(leptos::web_sys::Event)>::new(move |_| {
        if watched.ready_state() == leptos::web_sys::EventSource::CLOSED {
            stopped.set(Some(
                "Live updates stopped (signed out?); reload the page.".into(),
            ));
        }
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    let held = StoredValue::new_local(Some((source, on_event, on_error)));
    on_cleanup(move || {
        held.update_value(|h| {
            if let Some((source, _, _)) = h.take() {
                source.close();
            }
        });
    });
}

/// The Approvals page.
#[component]
pub fn ApprovalsPage() -> impl IntoView {
    let initial = Resource::new(|| (), |_| approvals());
    view! {
        <h1>"Approvals"</h1>
        <p class="lead">
            "Calls that need a person wait here with the exact arguments they were bound with. "
            "Approving releases that bound invocation and nothing else; the call runs once."
        </p>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match initial.await {
                    Ok(data) => view! { <Queue data/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
    .into_any()
}

#[component]
fn Queue(data: ApprovalsView) -> impl IntoView {
    let can_decide = data.can_decide;
    let (me, can_cancel_own) = (StoredValue::new(data.me.clone()), data.can_cancel_own);
    let waiting = RwSignal::new(data.waiting);
    let now = RwSignal::new(data.now);
    let recent = RwSignal::new(data.recent);
    let refresh_error = RwSignal::new(None::<String>);
    let reload = move || {
        leptos::task::spawn_local(async move {
            match approvals().await {
                Ok(v) => {
                    refresh_error.set(None);
                    if waiting.with_untracked(|w| *w != v.waiting) {
                        waiting.set(v.waiting);
                    }
                    if recent.with_untracked(|r| *r != v.recent) {
                        recent.set(v.recent);
                    }
                    now.set(v.now);
                }
                Err(e) => refresh_error.set(Some(e.message)),
            }
        });
    };
    // Every decision, successful or not, reloads at once.
    let decided = Callback::new(move |()| reload());
    #[cfg(feature = "hydrate")]
    follow_events(reload, refresh_error);
    view! {
        {(!can_decide)
            .then(|| {
                view! {
                    <p class="notice" role="status" data-testid="no-approve-scope">
                        "You can see the queue. Approving, applying or rejecting needs the scope "
                        <code>"agent_tool_exposure:approve"</code> "."
                    </p>
                }
            })}
        <p class="error" role="alert">{move || refresh_error.get()}</p>
        <section aria-labelledby="waiting-heading">
            <h2 id="waiting-heading">
                "Waiting " <span class="count" data-testid="waiting-count">{move || waiting.with(Vec::len)}</span>
            </h2>
            <Show
                when=move || waiting.with(|w| !w.is_empty())
                fallback=|| view! { <p class="empty">"Nothing is waiting for a decision."</p> }
            >
                <ul class="queue" aria-live="polite">
                    <For
                        each=move || waiting.get()
                        key=|i| i.invocation_id.clone()
                        let:invocation
                    >
                        {
                            let can_cancel = can_decide
                                || (can_cancel_own
                                    && me.with_value(|me| invocation.actor_id == *me));
                            view! { <Parked invocation can_decide can_cancel decided now/> }
                        }
                    </For>
                </ul>
            </Show>
        </section>
        <section aria-labelledby="recent-heading">
            <h2 id="recent-heading">"Recent decisions and runs"</h2>
            <Show
                when=move || recent.with(|r| !r.is_empty())
                fallback=|| view! { <p class="empty">"No decided or finished calls yet."</p> }
            >
                <table class="data" data-testid="recent-table">
                    <thead>
                        <tr>
                            <th scope="col">"Invocation"</th>
                            <th scope="col">"Tool"</th>
                            <th scope="col">"Actor"</th>
                            <th scope="col">"Status"</th>
                            <th scope="col">"Decided"</th>
                            <th scope="col">"Result"</th>
                        </tr>
                    </thead>
                    <tbody>
                        <For each=move || recent.get() key=|i| (i.invocation_id.clone(), i.status.clone()) let:i>
                            <RecentRow i/>
                        </For>
                    </tbody>
                </table>
            </Show>
        </section>
    }
    .into_any()
}

fn pretty(v: &Option<serde_json::Value>) -> String {
    v.as_ref()
        .map(|v| serde_json::to_string_pretty(v).unwrap_or_default())
        .unwrap_or_else(|| "—".into())
}

/// One waiting invocation, shown as it will run.
#[component]
fn Parked(
    invocation: InvocationView,
    can_decide: bool,
    /// Whether the signed-in user may cancel it (an approver, or its own caller).
    can_cancel: bool,
    decided: Callback<()>,
    now: RwSignal<String>,
) -> impl IntoView {
    let i = invocation;
    let staged = i.status == "staged";
    let decide = ServerAction::<DecideInvocation>::new();
    let comment = RwSignal::new(String::new());
    let comment_id = format!("comment-{}", i.invocation_id);
    let comment_for = comment_id.clone();
    let id = i.invocation_id.clone();
    let args_hash = i.args_hash.clone();
    let definition_hash = i.definition_hash.clone();
    let dispatch = move |action: &'static str| {
        decide.dispatch(DecideInvocation {
            id: id.clone(),
            action: action.into(),
            args_hash: matches!(action, "approve" | "apply").then(|| args_hash.clone()),
            definition_hash: if matches!(action, "approve" | "apply") {
                definition_hash.clone()
            } else {
                None
            },
            comment: Some(comment.get_untracked()),
        });
    };
    let dispatch2 = dispatch.clone();
    let dispatch3 = dispatch.clone();
    let dispatch4 = dispatch.clone();
    Effect::new(move |_| {
        if decide.version().get() > 0 {
            decided.run(());
        }
    });
    let error = move || match decide.value().get() {
        Some(Err(e)) => Some(e.message),
        _ => None,
    };
    let arguments = pretty(&i.arguments);
    let limits = pretty(&i.limits);
    let verb = if staged { "Apply" } else { "Approve" };
    view! {
        <li class="panel parked" id=i.invocation_id.clone() data-invocation-id=i.invocation_id.clone() data-status=i.status.clone()>
            <div class="parked-head">
                <h3>
                    <code>{i.tool.clone()}</code>
                    " "
                    <span class=format!("mode mode-{}", i.mode)>{i.mode.clone()}</span>
                </h3>
                <span class="muted">
                    "waiting "
                    <span class="age" data-testid="age">
                        {
                            let created = i.created_at.clone();
                            move || age(&created, &now.get())
                        }
                    </span>
                    " · parked " <Time value=Some(i.created_at.clone())/> " · expires "
                    <Time value=i.expires_at.clone()/>
                </span>
            </div>
            <dl class="facts">
                <dt>"Actor"</dt>
                <dd>{i.actor_id.clone()}</dd>
                <dt>"Session"</dt>
                <dd><code>{i.session_id.clone()}</code></dd>
                <dt>"Invocation"</dt>
                <dd><code>{i.invocation_id.clone()}</code></dd>
                <dt>"Policy"</dt>
                <dd>
                    <a href=format!("/policies/{}", i.policy_id)>{i.policy_id.clone()}</a>
                    {format!(" v{}", i.policy_version)}
                    {i.rule_id.clone().map(|r| view! { " · rule " <code>{r}</code> })}
                </dd>
                <dt>"Reason"</dt>
                <dd data-testid="reason">
                    {i.rule_reason.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| "—".into())}
                </dd>
                <dt>"Tool version"</dt>
                <dd><code>{i.tool_version.clone()}</code></dd>
                <dt>"Args hash"</dt>
                <dd><code data-testid="args-hash">{i.args_hash.clone()}</code></dd>
                <dt>"Definition digest"</dt>
                <dd>
                    <code data-testid="definition-hash">
                        {i.definition_hash.clone().unwrap_or_else(|| "—".into())}
                    </code>
                </dd>
            </dl>
            {i.granted_tool.clone().map(|g| {
                view! {
                    <div class="granted-tool" data-testid="granted-tool">
                        <h4>"The tool, as the caller was granted it"</h4>
                        {g.title.clone().map(|t| view! { <p><strong>{t}</strong></p> })}
                        <p data-testid="tool-description">
                            {g.description.as_deref().map(engine::drift::reveal_hidden).unwrap_or_else(|| "(no description)".into())}
                        </p>
                        <p>
                            {g.flags
                                .iter()
                                .map(|f| view! { <span class=format!("chip flag flag-{f}") data-testid="flag">{f.clone()}</span> })
                                .collect_view()}
                        </p>
                        {g.changed.then(|| view! {
                            <p class="error" role="alert" data-testid="tool-changed">
                                "The tool's definition changed since this call was parked (it was "
                                "changed, is held for review, or is gone). Approving will not run "
                                "it: the call ends as " <code>"manifest_drift"</code> "."
                            </p>
                        })}
                    </div>
                }
            })}
            <h4>"Arguments, exactly as the upstream will receive them"</h4>
            <pre class="json" data-testid="arguments">{arguments}</pre>
            <details>
                <summary>"Limits"</summary>
                <pre class="json">{limits}</pre>
            </details>
            {can_decide
                .then(|| {
                    view! {
                        <div class="decide">
                            <label for=comment_for>"Comment (optional)"</label>
                            <textarea
                                id=comment_id
                                rows="2"
                                prop:value=move || comment.get()
                                on:input=move |ev| comment.set(event_target_value(&ev))
                            ></textarea>
                            <div class="save-bar">
                                <button
                                    type="button"
                                    class="primary"
                                    disabled=move || decide.pending().get()
                                    on:click=move |_| dispatch(if staged { "apply" } else { "approve" })
                                >
                                    {verb}
                                </button>
                                <button
                                    type="button"
                                    class="danger"
                                    disabled=move || decide.pending().get()
                                    on:click=move |_| dispatch2("reject")
                                >
                                    "Reject"
                                </button>
                                <button
                                    type="button"
                                    data-testid="cancel"
                                    title="End the call without running it (recorded as cancelled, not as a rejection)"
                                    disabled=move || decide.pending().get()
                                    on:click=move |_| dispatch3("cancel")
                                >
                                    "Cancel"
                                </button>
                            </div>
                            <p class="error" role="alert">{error}</p>
                        </div>
                    }
                })}
            {(can_cancel && !can_decide)
                .then(|| {
                    view! {
                        <div class="save-bar">
                            <button
                                type="button"
                                class="danger"
                                data-testid="cancel"
                                disabled=move || decide.pending().get()
                                on:click=move |_| dispatch4("cancel")
                            >
                                "Cancel this call"
                            </button>
                        </div>
                        <p class="error" role="alert">{error}</p>
                    }
                })}
        </li>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ages_read_like_a_person_would_say_them() {
        let at = "2026-11-30T10:00:00.000Z";
        assert_eq!(super::age(at, "2026-11-30T10:00:42.000Z"), "42 s");
        assert_eq!(super::age(at, "2026-11-30T10:05:59.000Z"), "5 min");
        assert_eq!(super::age(at, "2026-11-30T13:10:00.000Z"), "3 h 10 min");
        assert_eq!(super::age(at, "2026-12-02T12:00:00.000Z"), "2 d 2 h");
        assert_eq!(super::age(at, "2026-11-30T09:00:00.000Z"), "0 s");
    }
}

#[component]
fn RecentRow(i: InvocationView) -> impl IntoView {
    let result = i.result.as_ref().map(result_text);
    view! {
        <tr id=i.invocation_id.clone() data-invocation-id=i.invocation_id.clone() data-status=i.status.clone()>
            <td><code>{i.invocation_id.clone()}</code></td>
            <td><code>{i.tool.clone()}</code></td>
            <td>{i.actor_id.clone()}</td>
            <td><span class=format!("badge status-{}", i.status)>{i.status.clone()}</span></td>
            <td>
                {i.decided_by.clone().map(|by| view! { {by} " " })}
                <Time value=i.decided_at.clone()/>
                {i.comment.clone().map(|c| view! { <div class="muted">"“" {c} "”"</div> })}
            </td>
            <td class="result">{result.unwrap_or_else(|| "—".into())}</td>
        </tr>
    }
    .into_any()
}

/// How long ago `then` was at `now` (both RFC 3339 UTC), for people: `42 s`, `5 min`, `3 h 10 min`.
fn age(then: &str, now: &str) -> String {
    let (Some(a), Some(b)) = (super::parse_ms(then), super::parse_ms(now)) else {
        return "—".into();
    };
    let s = (b - a).max(0) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The text of an MCP tool result, cut for a table cell.
fn result_text(result: &serde_json::Value) -> String {
    let text: Vec<&str> = result
        .get("content")
        .and_then(|c| c.as_array())
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(|t| t.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let error = result.get("isError").and_then(|e| e.as_bool()) == Some(true);
    let mut s = text.join(" ");
    if s.chars().count() > 160 {
        s = s.chars().take(160).collect::<String>() + "…";
    }
    if error { format!("error: {s}") } else { s }
}
