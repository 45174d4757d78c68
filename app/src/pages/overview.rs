//! The page after sign-in.

use leptos::prelude::*;

use crate::api::overview;

/// What the signed-in user can do here, and the tenant's figures.
#[component]
pub fn OverviewPage() -> impl IntoView {
    let data = Resource::new(|| (), |_| overview());
    view! {
        <h1>"Overview"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(o) => {
                        view! {
                            <section class="cards">
                                <div class="card">
                                    <h2>"Active API tokens"</h2>
                                    <p class="figure" data-testid="active-tokens">{o.active_tokens}</p>
                                    <a href="/tokens">"Manage tokens"</a>
                                </div>
                                <div class="card">
                                    <h2>"Dashboard users"</h2>
                                    <p class="figure">{o.users}</p>
                                    <a href="/users">"Manage users"</a>
                                </div>
                            </section>
                            <section>
                                <h2>"Your access"</h2>
                                <p>
                                    "Signed in as " <strong>{o.me.username}</strong> " in tenant "
                                    <strong>{o.me.tenant_id}</strong> "."
                                </p>
                                <ul class="scope-list">
                                    {o
                                        .me
                                        .scopes
                                        .into_iter()
                                        .map(|s| view! { <li><code>{s}</code></li> })
                                        .collect_view()}
                                </ul>
                            </section>
                        }
                            .into_any()
                    }
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}
