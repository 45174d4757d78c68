//! Dashboard users: list, create, change scopes.

use leptos::prelude::*;

use super::{ScopePicker, Time, collect_scopes, field_error, form_error};
use crate::api::{create_user, list_users, update_user_scopes};
use crate::dto::{CreateUserRequest, UpdateScopesRequest, UserView};
use crate::error::AppError;
use crate::layout::use_me;

/// The Users page.
#[component]
pub fn UsersPage() -> impl IntoView {
    let is_admin = use_me().is_some_and(|me| me.can(engine::scope::ADMIN));
    view! {
        <h1>"Users"</h1>
        <p class="lead">"People who sign in to this dashboard, and the scopes they hold."</p>
        {if is_admin {
            view! { <UserManager/> }.into_any()
        } else {
            view! {
                <p class="notice" role="status">
                    "Managing users needs the scope " <code>"agent_tool_exposure:admin"</code> "."
                </p>
            }
                .into_any()
        }}
    }
}

type UpdateAction = Action<(String, UpdateScopesRequest), Result<UserView, AppError>>;

#[component]
fn UserManager() -> impl IntoView {
    let create = Action::new(|req: &CreateUserRequest| create_user(req.clone()));
    let update: UpdateAction = Action::new(|(u, req): &(String, UpdateScopesRequest)| {
        update_user_scopes(u.clone(), req.clone())
    });
    let users = Resource::new(
        move || (create.version().get(), update.version().get()),
        |_| list_users(),
    );
    view! {
        <CreateUserForm create/>
        <section aria-labelledby="user-list-heading">
            <h2 id="user-list-heading">"Users"</h2>
            <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match users.await {
                        Ok(list) => {
                            view! {
                                <table class="data" data-testid="user-table">
                                    <thead>
                                        <tr>
                                            <th scope="col">"User"</th>
                                            <th scope="col">"Scopes"</th>
                                            <th scope="col">"Environments"</th>
                                            <th scope="col">"Created"</th>
                                            <th scope="col"><span class="sr-only">"Actions"</span></th>
                                        </tr>
                                    </thead>
                                    <tbody>
                                        {list.into_iter().map(|u| view! { <UserRow u update/> }).collect_view()}
                                    </tbody>
                                </table>
                            }
                                .into_any()
                        }
                        Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn CreateUserForm(create: Action<CreateUserRequest, Result<UserView, AppError>>) -> impl IntoView {
    let username = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let environments = RwSignal::new(super::DEFAULT_ENVIRONMENT.to_owned());
    let selected = RwSignal::new(vec![engine::scope::READ.to_owned()]);
    let extra = RwSignal::new(String::new());
    let result = create.value();
    Effect::new(move |_| {
        if let Some(Ok(_)) = result.get() {
            username.set(String::new());
            password.set(String::new());
            environments.set(super::DEFAULT_ENVIRONMENT.to_owned());
        }
    });
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        create.dispatch(CreateUserRequest {
            username: username.get(),
            password: password.get(),
            scopes: selected.with(|s| extra.with(|x| collect_scopes(s, x))),
            environments: Some(environments.with(|e| super::split_list(e))),
        });
    };
    let err = move |path: &'static str| move || field_error(result.get().as_ref(), path);
    view! {
        <section aria-labelledby="create-user-heading" class="panel">
            <h2 id="create-user-heading">"Create a user"</h2>
            <form on:submit=on_submit novalidate>
                <div class="row">
                    <div class="field">
                        <label for="user-username">"Username"</label>
                        <input
                            id="user-username"
                            type="text"
                            autocomplete="off"
                            aria-describedby="user-username-error"
                            prop:value=move || username.get()
                            on:input=move |ev| username.set(event_target_value(&ev))
                        />
                        <p class="field-error" id="user-username-error">{err("username")}</p>
                    </div>
                    <div class="field">
                        <label for="user-password">"Initial password"</label>
                        <input
                            id="user-password"
                            type="password"
                            autocomplete="new-password"
                            aria-describedby="user-password-error"
                            prop:value=move || password.get()
                            on:input=move |ev| password.set(event_target_value(&ev))
                        />
                        <p class="field-error" id="user-password-error">{err("password")}</p>
                    </div>
                    <div class="field">
                        <label for="user-environments">"Environments"</label>
                        <input
                            id="user-environments"
                            type="text"
                            aria-describedby="user-environments-hint user-environments-error"
                            prop:value=move || environments.get()
                            on:input=move |ev| environments.set(event_target_value(&ev))
                        />
                        <p class="muted" id="user-environments-hint">
                            "Where they may open sessions, separated by commas; " <code>"*"</code> " for every one."
                        </p>
                        <p class="field-error" id="user-environments-error">{err("environments")}</p>
                    </div>
                </div>
                <ScopePicker
                    selected
                    extra
                    id_prefix="user"
                    error=Signal::derive(move || field_error(result.get().as_ref(), "scopes"))
                />
                <p class="form-error" role="alert">{move || form_error(result.get().as_ref())}</p>
                <button type="submit" disabled=move || create.pending().get()>"Create user"</button>
            </form>
            {move || match result.get() {
                Some(Ok(u)) => {
                    view! { <p class="success" role="status">"User " <strong>{u.username}</strong> " created."</p> }
                        .into_any()
                }
                _ => ().into_any(),
            }}
        </section>
    }
}

#[component]
fn UserRow(u: UserView, update: UpdateAction) -> impl IntoView {
    let editing = RwSignal::new(false);
    let own: Vec<String> = u
        .scopes
        .iter()
        .filter(|s| engine::scope::APERTURE_SCOPES.contains(&s.as_str()))
        .cloned()
        .collect();
    let other = u
        .scopes
        .iter()
        .filter(|s| !engine::scope::APERTURE_SCOPES.contains(&s.as_str()))
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    let selected = RwSignal::new(own);
    let extra = RwSignal::new(other);
    let environments = RwSignal::new(u.environments.join(", "));
    let username = u.username.clone();
    let result = update.value();
    // Close the editor once this row's change has been saved.
    {
        let username = username.clone();
        Effect::new(move |_| {
            if let Some(Ok(saved)) = result.get()
                && saved.username == username
            {
                editing.set(false);
            }
        });
    }
    let save = {
        let username = username.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            update.dispatch((
                username.clone(),
                UpdateScopesRequest {
                    scopes: selected.with(|s| extra.with(|x| collect_scopes(s, x))),
                    environments: Some(environments.with(|e| super::split_list(e))),
                },
            ));
        }
    };
    let scopes = u.scopes.clone();
    let shown_environments = u.environments.clone();
    let id_prefix = format!("edit-{}", u.username);
    let environments_id = format!("edit-{}-environments", u.username);
    view! {
        <tr data-username=u.username.clone()>
            <td>{u.username.clone()} <div class="muted"><code>{u.id.clone()}</code></div></td>
            <td>
                <Show
                    when=move || editing.get()
                    fallback=move || {
                        scopes.clone().into_iter().map(|s| view! { <code class="chip">{s}</code> }).collect_view()
                    }
                >
                    <form on:submit=save.clone() class="inline-form">
                        <ScopePicker
                            selected
                            extra
                            id_prefix=id_prefix.clone()
                            error=Signal::derive(move || field_error(result.get().as_ref(), "scopes"))
                        />
                        <div class="field">
                            <label for=environments_id.clone()>"Environments"</label>
                            <input
                                id=environments_id.clone()
                                type="text"
                                prop:value=move || environments.get()
                                on:input=move |ev| environments.set(event_target_value(&ev))
                            />
                            <p class="field-error">
                                {move || field_error(result.get().as_ref(), "environments")}
                            </p>
                        </div>
                        <p class="form-error" role="alert">{move || form_error(result.get().as_ref())}</p>
                        <button type="submit">"Save scopes"</button>
                        <button type="button" on:click=move |_| editing.set(false)>"Cancel"</button>
                    </form>
                </Show>
            </td>
            <td data-testid="user-environments">
                {shown_environments.into_iter().map(|e| view! { <code class="chip">{e}</code> }).collect_view()}
            </td>
            <td><Time value=u.created_at/> <div class="muted">"by " {u.created_by}</div></td>
            <td>
                <Show when=move || !editing.get()>
                    <button on:click=move |_| editing.set(true)>"Change scopes"</button>
                </Show>
            </td>
        </tr>
    }
}
