//! The signed-in frame: header, navigation, and the guard that sends strangers to sign-in.

use leptos::prelude::*;
use leptos_router::components::{A, Outlet, Redirect};

use crate::api::{SignOut, current_user};
use crate::dto::Me;

/// Pages of the dashboard. Those not built yet are shown, but not as links: a link must lead to
/// a working page.
const NAV: [(&str, &str, bool); 10] = [
    ("Overview", "/", true),
    ("Policies", "/policies", true),
    ("Tools", "/tools", true),
    ("Sessions", "/sessions", true),
    ("Receipts", "/receipts", true),
    ("Journal", "/journal", true),
    ("Approvals", "/approvals", true),
    ("Agents", "/agents", true),
    ("Tokens", "/tokens", true),
    ("Users", "/users", true),
];

/// Wraps every page that needs a signed-in user; provides [`Me`] as context to them.
#[component]
pub fn SignedIn() -> impl IntoView {
    let me = Resource::new(|| (), |_| current_user());
    view! {
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match me.await {
                    Ok(Some(me)) => view! { <Frame me/> }.into_any(),
                    Ok(None) => view! { <Redirect path="/sign-in"/> }.into_any(),
                    Err(e) => {
                        view! {
                            <main class="page">
                                <p class="error" role="alert">{e.message}</p>
                            </main>
                        }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn Frame(me: Me) -> impl IntoView {
    let sign_out = ServerAction::<SignOut>::new();
    let tenant = me.tenant_id.clone();
    let username = me.username.clone();
    provide_context(me);
    view! {
        <div class="frame">
            <header class="topbar">
                <a class="brand" href="/">"Aperture"</a>
                <span class="who">
                    <span class="tenant" title="Tenant">{tenant}</span>
                    " · "
                    <span class="user" data-testid="current-user">{username}</span>
                </span>
                <ActionForm action=sign_out>
                    <button type="submit" class="link-button">"Sign out"</button>
                </ActionForm>
            </header>
            <nav class="sidenav" aria-label="Main">
                <ul>
                    {NAV
                        .into_iter()
                        .map(|(label, href, ready)| {
                            if ready {
                                view! {
                                    <li>
                                        <A href=href exact=true>{label}</A>
                                    </li>
                                }
                                    .into_any()
                            } else {
                                view! {
                                    <li>
                                        <span
                                            class="soon"
                                            aria-disabled="true"
                                            title="Not available in this version yet"
                                        >
                                            {label}
                                        </span>
                                    </li>
                                }
                                    .into_any()
                            }
                        })
                        .collect_view()}
                </ul>
            </nav>
            <main class="page" id="main">
                <Outlet/>
            </main>
        </div>
    }
}

/// The signed-in user (inside [`SignedIn`]).
pub fn use_me() -> Option<Me> {
    use_context::<Me>()
}
