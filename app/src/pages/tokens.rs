//! API tokens: list, create (the secret is shown once), revoke.

use leptos::prelude::*;

use super::{ScopePicker, Time, collect_scopes, field_error, form_error};
use crate::api::{create_token, list_tokens, revoke_token};
use crate::dto::{CreateTokenRequest, CreatedToken, TokenStatus, TokenView};
use crate::layout::use_me;

/// The Tokens page.
#[component]
pub fn TokensPage() -> impl IntoView {
    let is_admin = use_me().is_some_and(|me| me.can(engine::scope::ADMIN));
    view! {
        <h1>"API tokens"</h1>
        <p class="lead">
            "Machine principals authenticate with " <code>"Authorization: Bearer apt_…"</code>
            ". Aperture stores only a SHA-256 of each secret."
        </p>
        {if is_admin {
            view! { <TokenManager/> }.into_any()
        } else {
            view! {
                <p class="notice" role="status">
                    "Managing tokens needs the scope " <code>"agent_tool_exposure:admin"</code> "."
                </p>
            }
                .into_any()
        }}
    }
}

#[component]
fn TokenManager() -> impl IntoView {
    let create = Action::new(|req: &CreateTokenRequest| create_token(req.clone()));
    let revoke = Action::new(|id: &String| revoke_token(id.clone()));
    let tokens = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| list_tokens(),
    );
    view! {
        <CreateTokenForm create/>
        <section aria-labelledby="token-list-heading">
            <h2 id="token-list-heading">"Tokens"</h2>
            <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match tokens.await {
                        Ok(list) if list.is_empty() => {
                            view! {
                                <p class="empty">
                                    "No tokens yet. Create one above for each agent or service."
                                </p>
                            }
                                .into_any()
                        }
                        Ok(list) => view! { <TokenTable list revoke/> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                    }
                })}
            </Transition>
            <p class="form-error" role="alert">
                {move || form_error(revoke.value().get().as_ref())}
            </p>
        </section>
    }
}

#[component]
fn CreateTokenForm(
    create: Action<CreateTokenRequest, Result<CreatedToken, crate::error::AppError>>,
) -> impl IntoView {
    let actor = RwSignal::new(String::new());
    let name = RwSignal::new(String::new());
    let expires = RwSignal::new(String::new());
    let environments = RwSignal::new(super::DEFAULT_ENVIRONMENT.to_owned());
    let selected = RwSignal::new(vec![engine::scope::RUN.to_owned()]);
    let extra = RwSignal::new(String::new());
    let result = create.value();
    // A successful creation clears the form; a failed one keeps every typed value.
    Effect::new(move |_| {
        if let Some(Ok(_)) = result.get() {
            actor.set(String::new());
            name.set(String::new());
            expires.set(String::new());
            environments.set(super::DEFAULT_ENVIRONMENT.to_owned());
        }
    });
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let expires_at = expires.with(|e| {
            let e = e.trim();
            (!e.is_empty()).then(|| format!("{e}T00:00:00Z"))
        });
        let name = name.with(|n| {
            let n = n.trim();
            (!n.is_empty()).then(|| n.to_owned())
        });
        create.dispatch(CreateTokenRequest {
            actor_id: actor.get(),
            scopes: selected.with(|s| extra.with(|x| collect_scopes(s, x))),
            name,
            expires_at,
            environments: Some(environments.with(|e| super::split_list(e))),
        });
    };
    let err = move |path: &'static str| move || field_error(result.get().as_ref(), path);
    view! {
        <section aria-labelledby="create-token-heading" class="panel">
            <h2 id="create-token-heading">"Create a token"</h2>
            <form on:submit=on_submit novalidate>
                <div class="row">
                    <div class="field">
                        <label for="token-actor">"Actor id"</label>
                        <input
                            id="token-actor"
                            type="text"
                            placeholder="support-agent"
                            aria-describedby="token-actor-error"
                            prop:value=move || actor.get()
                            on:input=move |ev| actor.set(event_target_value(&ev))
                        />
                        <p class="field-error" id="token-actor-error">{err("actor_id")}</p>
                    </div>
                    <div class="field">
                        <label for="token-name">"Label (optional)"</label>
                        <input
                            id="token-name"
                            type="text"
                            aria-describedby="token-name-error"
                            prop:value=move || name.get()
                            on:input=move |ev| name.set(event_target_value(&ev))
                        />
                        <p class="field-error" id="token-name-error">{err("name")}</p>
                    </div>
                    <div class="field">
                        <label for="token-expires">"Expires (optional)"</label>
                        <input
                            id="token-expires"
                            type="date"
                            aria-describedby="token-expires-error"
                            prop:value=move || expires.get()
                            on:input=move |ev| expires.set(event_target_value(&ev))
                        />
                        <p class="field-error" id="token-expires-error">{err("expires_at")}</p>
                    </div>
                    <div class="field">
                        <label for="token-environments">"Environments"</label>
                        <input
                            id="token-environments"
                            type="text"
                            aria-describedby="token-environments-hint token-environments-error"
                            prop:value=move || environments.get()
                            on:input=move |ev| environments.set(event_target_value(&ev))
                        />
                        <p class="muted" id="token-environments-hint">
                            "Where it may open sessions, separated by commas; " <code>"*"</code> " for every one."
                        </p>
                        <p class="field-error" id="token-environments-error">{err("environments")}</p>
                    </div>
                </div>
                <ScopePicker
                    selected
                    extra
                    id_prefix="token"
                    error=Signal::derive(move || field_error(result.get().as_ref(), "scopes"))
                />
                <p class="form-error" role="alert">{move || form_error(result.get().as_ref())}</p>
                <button type="submit" disabled=move || create.pending().get()>"Create token"</button>
            </form>
            {move || match result.get() {
                Some(Ok(created)) => view! { <SecretOnce created/> }.into_any(),
                _ => ().into_any(),
            }}
        </section>
    }
}

/// The one moment a token's secret is visible.
#[component]
fn SecretOnce(created: CreatedToken) -> impl IntoView {
    view! {
        <div class="secret" role="status" data-testid="new-token-secret">
            <p>
                "Token " <code>{created.token.id}</code> " for " <strong>{created.token.actor_id}</strong>
                " was created. Copy the secret now: it is not shown again."
            </p>
            <input
                type="text"
                readonly
                aria-label="Token secret"
                class="secret-value"
                value=created.secret
                on:focus=|ev| {
                    use leptos::wasm_bindgen::JsCast;
                    if let Some(input) = ev
                        .target()
                        .and_then(|t| t.dyn_into::<leptos::web_sys::HtmlInputElement>().ok())
                    {
                        input.select();
                    }
                }
            />
        </div>
    }
}

#[component]
fn TokenTable(
    list: Vec<TokenView>,
    revoke: Action<String, Result<TokenView, crate::error::AppError>>,
) -> impl IntoView {
    view! {
        <table class="data" data-testid="token-table">
            <thead>
                <tr>
                    <th scope="col">"Token"</th>
                    <th scope="col">"Actor"</th>
                    <th scope="col">"Scopes"</th>
                    <th scope="col">"Environments"</th>
                    <th scope="col">"Created"</th>
                    <th scope="col">"Expires"</th>
                    <th scope="col">"Last used"</th>
                    <th scope="col">"Status"</th>
                    <th scope="col"><span class="sr-only">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {list.into_iter().map(|t| view! { <TokenRow t revoke/> }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn TokenRow(
    t: TokenView,
    revoke: Action<String, Result<TokenView, crate::error::AppError>>,
) -> impl IntoView {
    let confirming = RwSignal::new(false);
    let id = t.id.clone();
    let status = match t.status {
        TokenStatus::Active => "active",
        TokenStatus::Expired => "expired",
        TokenStatus::Revoked => "revoked",
    };
    let active = t.status == TokenStatus::Active;
    view! {
        <tr data-token-id=t.id.clone() data-status=status>
            <td>
                <code>{t.id.clone()}</code>
                {t.name.map(|n| view! { <div class="muted">{n}</div> })}
            </td>
            <td>{t.actor_id}</td>
            <td>
                {t.scopes.into_iter().map(|s| view! { <code class="chip">{s}</code> }).collect_view()}
            </td>
            <td data-testid="token-environments">
                {t.environments.into_iter().map(|e| view! { <code class="chip">{e}</code> }).collect_view()}
            </td>
            <td><super::Time value=t.created_at/> <div class="muted">"by " {t.created_by}</div></td>
            <td><Time value=t.expires_at/></td>
            <td><Time value=t.last_used_at/></td>
            <td><span class=format!("badge {status}")>{status}</span></td>
            <td>
                {active
                    .then(|| {
                        let id = id.clone();
                        view! {
                            <Show
                                when=move || confirming.get()
                                fallback=move || {
                                    view! {
                                        <button class="danger" on:click=move |_| confirming.set(true)>
                                            "Revoke"
                                        </button>
                                    }
                                }
                            >
                                {
                                    let id = id.clone();
                                    view! {
                                        <button
                                            class="danger"
                                            on:click=move |_| {
                                                revoke.dispatch(id.clone());
                                            }
                                        >
                                            "Confirm revoke"
                                        </button>
                                        <button on:click=move |_| confirming.set(false)>"Cancel"</button>
                                    }
                                }
                            </Show>
                        }
                    })}
            </td>
        </tr>
    }
}
