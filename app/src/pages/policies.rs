//! Policies: the list, with versions and where each is active, and a way to start a new one.

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;

use super::Time;
use crate::api::list_policies;
use crate::layout::use_me;

/// The Policies page.
#[component]
pub fn PoliciesPage() -> impl IntoView {
    let can_write = use_me().is_some_and(|me| me.can(engine::scope::WRITE));
    let list = Resource::new(|| (), |_| list_policies());
    view! {
        <h1>"Policies"</h1>
        <p class="lead">
            "A policy decides, per tool and session, whether a tool is listed and how its calls run. "
            "Every save is a new immutable version; new sessions of an environment get the policy "
            "active there (" <code>"builtin_safe_read"</code> " when none is)."
        </p>
        {can_write.then(|| view! { <NewPolicy/> })}
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Ok(list) => {
                        view! {
                            <table class="data" data-testid="policy-table">
                                <thead>
                                    <tr>
                                        <th scope="col">"Policy"</th>
                                        <th scope="col">"Latest version"</th>
                                        <th scope="col">"Saved"</th>
                                        <th scope="col">"Active in"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {list
                                        .into_iter()
                                        .map(|p| {
                                            let builtin = p.policy_id
                                                == engine::policy::BUILTIN_SAFE_READ;
                                            view! {
                                                <tr data-policy-id=p.policy_id.clone()>
                                                    <td>
                                                        <a href=format!(
                                                            "/policies/{}",
                                                            p.policy_id,
                                                        )>{p.policy_id.clone()}</a>
                                                        {builtin
                                                            .then(|| {
                                                                view! { <span class="muted">" (built in)"</span> }
                                                            })}
                                                    </td>
                                                    <td>{p.latest_version}</td>
                                                    <td>
                                                        {if builtin {
                                                            view! { <span class="muted">"—"</span> }.into_any()
                                                        } else {
                                                            view! { <Time value=Some(p.updated_at)/> }.into_any()
                                                        }}
                                                    </td>
                                                    <td>
                                                        {if p.active_in.is_empty() {
                                                            view! { <span class="muted">"nowhere"</span> }.into_any()
                                                        } else {
                                                            p.active_in
                                                                .into_iter()
                                                                .map(|e| view! { <code class="chip">{e}</code> })
                                                                .collect_view()
                                                                .into_any()
                                                        }}
                                                    </td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()}
                                </tbody>
                            </table>
                        }
                            .into_any()
                    }
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Starts a new policy: the editor opens on an empty draft under the chosen id.
#[component]
fn NewPolicy() -> impl IntoView {
    let id = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let navigate = use_navigate();
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let v = id.get().trim().to_owned();
        let ok = engine::environment::is_name(&v);
        if ok {
            error.set(None);
            navigate(&format!("/policies/{v}"), Default::default());
        } else {
            error.set(Some("1–64 characters of a-z, 0-9, _ and -".into()));
        }
    };
    view! {
        <section class="panel" aria-labelledby="new-policy-heading">
            <h2 id="new-policy-heading">"New policy"</h2>
            <form on:submit=on_submit novalidate class="inline">
                <label for="new-policy-id">"Policy id"</label>
                <input
                    id="new-policy-id"
                    type="text"
                    placeholder="support-agents"
                    aria-describedby="new-policy-id-error"
                    prop:value=move || id.get()
                    on:input=move |ev| id.set(event_target_value(&ev))
                />
                <p class="field-error" id="new-policy-id-error">{move || error.get()}</p>
                <button type="submit">"Open editor"</button>
            </form>
        </section>
    }
}
