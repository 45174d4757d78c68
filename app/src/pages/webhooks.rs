//! Webhooks: where approvers hear about parked calls. Create (the signing secret is shown
//! once), delete, and every delivery with its attempts.

use leptos::prelude::*;

use super::{Time, field_error, form_error};
use crate::api::{create_webhook, delete_webhook, list_webhooks};
use crate::dto::{
    CreateWebhookRequest, CreatedWebhook, WebhookDeliveryView, WebhookPanel, WebhookView,
};
use crate::error::AppError;
use crate::layout::use_me;

/// The events a webhook may receive, with what they mean.
const EVENTS: [(&str, &str); 4] = [
    ("invocation.parked", "a call waits for an approver"),
    ("invocation.decided", "an approver released or rejected it"),
    ("invocation.expired", "nobody decided in time"),
    (
        "invocation.cancelled",
        "its caller or an approver cancelled it",
    ),
];

/// The Webhooks page.
#[component]
pub fn WebhooksPage() -> impl IntoView {
    let is_admin = use_me().is_some_and(|me| me.can(engine::scope::ADMIN));
    view! {
        <h1>"Webhooks"</h1>
        <p class="lead">
            "Tell approvers about calls that wait for them. Each event is posted as JSON, signed as "
            <a href="https://www.standardwebhooks.com/">"Standard Webhooks"</a>
            " says (" <code>"webhook-id"</code> ", " <code>"webhook-timestamp"</code> ", "
            <code>"webhook-signature"</code>
            "), with a link to the approval; never the call's arguments. Failed deliveries are retried with backoff, except when the receiver answers 410 Gone."
        </p>
        {if is_admin {
            view! { <WebhookManager/> }.into_any()
        } else {
            view! {
                <p class="notice" role="status">
                    "Managing webhooks needs the scope " <code>"agent_tool_exposure:admin"</code> "."
                </p>
            }
                .into_any()
        }}
    }
}

#[component]
fn WebhookManager() -> impl IntoView {
    let create = Action::new(|req: &CreateWebhookRequest| create_webhook(req.clone()));
    let delete = Action::new(|id: &String| delete_webhook(id.clone()));
    let refreshed = RwSignal::new(0u32);
    let webhooks = Resource::new(
        move || {
            (
                create.version().get(),
                delete.version().get(),
                refreshed.get(),
            )
        },
        |_| list_webhooks(),
    );
    view! {
        <CreateWebhookForm create/>
        <section aria-labelledby="webhook-list-heading">
            <div class="row spread">
                <h2 id="webhook-list-heading">"Webhooks and deliveries"</h2>
                <button on:click=move |_| refreshed.update(|n| *n += 1)>"Refresh"</button>
            </div>
            <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match webhooks.await {
                        Ok(page) if page.webhooks.is_empty() => {
                            view! {
                                <p class="empty">
                                    "No webhooks yet. Add one above so approvers hear about parked calls."
                                </p>
                            }
                                .into_any()
                        }
                        Ok(page) => {
                            page.webhooks
                                .into_iter()
                                .map(|panel| view! { <WebhookCard panel delete/> })
                                .collect_view()
                                .into_any()
                        }
                        Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                    }
                })}
            </Transition>
            <p class="form-error" role="alert">
                {move || form_error(delete.value().get().as_ref())}
            </p>
        </section>
    }
}

#[component]
fn CreateWebhookForm(
    create: Action<CreateWebhookRequest, Result<CreatedWebhook, AppError>>,
) -> impl IntoView {
    let url = RwSignal::new(String::new());
    let chosen = RwSignal::new(
        EVENTS
            .iter()
            .map(|(e, _)| (*e).to_owned())
            .collect::<Vec<_>>(),
    );
    let result = create.value();
    Effect::new(move |_| {
        if let Some(Ok(_)) = result.get() {
            url.set(String::new());
        }
    });
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        create.dispatch(CreateWebhookRequest {
            url: url.get().trim().to_owned(),
            events: chosen.get(),
        });
    };
    view! {
        <section aria-labelledby="create-webhook-heading" class="panel">
            <h2 id="create-webhook-heading">"Add a webhook"</h2>
            <form on:submit=on_submit novalidate>
                <div class="field">
                    <label for="webhook-url">"URL"</label>
                    <input
                        id="webhook-url"
                        type="url"
                        placeholder="https://chat.example.com/hooks/approvals"
                        aria-describedby="webhook-url-error"
                        prop:value=move || url.get()
                        on:input=move |ev| url.set(event_target_value(&ev))
                    />
                    <p class="field-error" id="webhook-url-error">
                        {move || field_error(result.get().as_ref(), "url")}
                    </p>
                </div>
                <fieldset>
                    <legend>"Events"</legend>
                    {EVENTS
                        .into_iter()
                        .map(|(event, meaning)| {
                            let id = format!("webhook-event-{}", event.replace('.', "-"));
                            view! {
                                <label class="check">
                                    <input
                                        id=id
                                        type="checkbox"
                                        prop:checked=move || chosen.with(|c| c.iter().any(|e| e == event))
                                        on:change=move |ev| {
                                            let on = event_target_checked(&ev);
                                            chosen.update(|c| {
                                                c.retain(|e| e != event);
                                                if on {
                                                    c.push(event.to_owned());
                                                }
                                            });
                                        }
                                    />
                                    <code>{event}</code>
                                    " — "
                                    {meaning}
                                </label>
                            }
                        })
                        .collect_view()}
                    <p class="field-error">{move || field_error(result.get().as_ref(), "events")}</p>
                </fieldset>
                <p class="form-error" role="alert">{move || form_error(result.get().as_ref())}</p>
                <button type="submit" disabled=move || create.pending().get()>"Add webhook"</button>
            </form>
            {move || match result.get() {
                Some(Ok(created)) => view! { <SecretOnce created/> }.into_any(),
                _ => ().into_any(),
            }}
        </section>
    }
}

/// The one moment a webhook's signing secret is visible.
#[component]
fn SecretOnce(created: CreatedWebhook) -> impl IntoView {
    view! {
        <div class="secret" role="status" data-testid="new-webhook-secret">
            <p>
                "Webhook " <code>{created.webhook.id}</code> " to " <strong>{created.webhook.url}</strong>
                " was added. Copy its signing secret now: it is not shown again."
            </p>
            <input
                type="text"
                readonly
                aria-label="Webhook signing secret"
                class="secret-value"
                value=created.secret
            />
        </div>
    }
}

#[component]
fn WebhookCard(
    panel: WebhookPanel,
    delete: Action<String, Result<WebhookView, AppError>>,
) -> impl IntoView {
    let w = panel.webhook;
    let confirming = RwSignal::new(false);
    let id = w.id.clone();
    view! {
        <article class="panel" data-webhook-id=w.id.clone() data-testid="webhook">
            <h3><code>{w.url.clone()}</code></h3>
            <p>
                {w.events.iter().map(|e| view! { <code class="chip">{e.clone()}</code> }).collect_view()}
            </p>
            <p class="muted">
                <code>{w.id.clone()}</code> " · added " <Time value=Some(w.created_at.clone())/> " by "
                {w.created_by.clone()} " · "
                <span data-testid="webhook-delivered">{w.delivered}</span> " delivered, "
                <span data-testid="webhook-pending">{w.pending}</span> " pending, "
                <span data-testid="webhook-failed">{w.failed}</span> " failed"
            </p>
            <Show
                when=move || confirming.get()
                fallback=move || {
                    view! {
                        <button class="danger" on:click=move |_| confirming.set(true)>"Delete"</button>
                    }
                }
            >
                {
                    let id = id.clone();
                    view! {
                        <button class="danger" on:click=move |_| {
                            delete.dispatch(id.clone());
                        }>"Confirm delete"</button>
                        <button on:click=move |_| confirming.set(false)>"Cancel"</button>
                    }
                }
            </Show>
            {if panel.deliveries.is_empty() {
                view! { <p class="empty">"No deliveries yet."</p> }.into_any()
            } else {
                view! { <DeliveryTable list=panel.deliveries/> }.into_any()
            }}
        </article>
    }
}

#[component]
fn DeliveryTable(list: Vec<WebhookDeliveryView>) -> impl IntoView {
    view! {
        <table class="data" data-testid="webhook-deliveries">
            <thead>
                <tr>
                    <th scope="col">"Event"</th>
                    <th scope="col">"Call"</th>
                    <th scope="col">"Status"</th>
                    <th scope="col">"Attempts"</th>
                    <th scope="col">"Happened"</th>
                </tr>
            </thead>
            <tbody>
                {list
                    .into_iter()
                    .map(|d| {
                        let last = match (&d.last_status, &d.last_error) {
                            (_, Some(e)) => e.clone(),
                            (Some(s), None) => format!("HTTP {s}"),
                            (None, None) => String::new(),
                        };
                        let history = d
                            .history
                            .iter()
                            .map(|a| {
                                let outcome = match (&a.http_status, &a.error) {
                                    (_, Some(e)) => e.clone(),
                                    (Some(s), None) => format!("HTTP {s}"),
                                    (None, None) => "sent".to_owned(),
                                };
                                view! {
                                    <li data-testid="delivery-attempt">
                                        <Time value=Some(a.attempted_at.clone())/>
                                        {format!(" · {} ms · {outcome}", a.duration_ms)}
                                    </li>
                                }
                            })
                            .collect_view();
                        let status = d.status.clone();
                        view! {
                            <tr data-delivery-id=d.id.clone() data-status=status.clone()>
                                <td><code>{d.event.clone()}</code></td>
                                <td>
                                    <a href=format!("/approvals#{}", d.invocation_id)>
                                        <code>{d.invocation_id.clone()}</code>
                                    </a>
                                    <div class="muted">{d.tool.clone()}</div>
                                </td>
                                <td>
                                    <span class=format!("badge {status}")>{status.clone()}</span>
                                    {d.next_attempt_at
                                        .clone()
                                        .map(|t| view! { <div class="muted">"next " <Time value=Some(t)/></div> })}
                                </td>
                                <td>
                                    <details>
                                        <summary>
                                            <span data-testid="delivery-attempts">{d.attempts}</span>
                                            " · "
                                            {last}
                                        </summary>
                                        <ol>{history}</ol>
                                    </details>
                                </td>
                                <td><Time value=Some(d.created_at.clone())/></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}
