//! The signed-in frame: header, navigation, and the guard that sends strangers to sign-in.

use leptos::prelude::*;
use leptos_router::components::{A, Outlet, Redirect};
use leptos_router::hooks::use_location;

use crate::api::{SignOut, current_user};
use crate::dto::Me;

/// Pages of the dashboard. Those not built yet are shown, but not as links: a link must lead to
/// a working page.
const NAV: [(&str, &str, bool); 11] = [
    ("Overview", "/", true),
    ("Policies", "/policies", true),
    ("Tools", "/tools", true),
    ("Sessions", "/sessions", true),
    ("Receipts", "/receipts", true),
    ("Journal", "/journal", true),
    ("Approvals", "/approvals", true),
    ("Webhooks", "/webhooks", true),
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
                    Ok(None) => {
                        // Signed out while browsing (a page loaded signed-out is answered by a
                        // 303 on the server before it renders): back here after signing in.
                        let location = use_location();
                        let here = format!(
                            "{}{}",
                            location.pathname.get_untracked(),
                            location.search.get_untracked()
                        );
                        view! { <Redirect path=sign_in_path(&here)/> }.into_any()
                    }
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

/// The sign-in page's address that comes back to `here` (a path and query) afterwards.
pub fn sign_in_path(here: &str) -> String {
    match local_next(here) {
        Some(next) if next != "/" => format!(
            "/sign-in?{}",
            serde_urlencoded::to_string([("next", next)]).unwrap_or_default()
        ),
        _ => "/sign-in".to_owned(),
    }
}

/// `next` when it is a path on this site: one leading `/`, not `//` or `/\` (which browsers
/// read as another host), and no control characters or whitespace (browsers drop tabs and
/// newlines, so `/\t/evil.example` would become `//evil.example`). Anything else is `None`, and
/// the caller goes to `/`.
pub fn local_next(next: &str) -> Option<&str> {
    let rest = next.strip_prefix('/')?;
    if rest.starts_with(['/', '\\'])
        || next
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == '\\')
    {
        return None;
    }
    Some(next)
}

/// Where to go after signing in: the `next` query parameter of `query` (a URL's query string,
/// with or without its `?`) when it is local, else `/`.
pub fn after_sign_in(query: &str) -> String {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query.trim_start_matches('?'))
        .ok()
        .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "next"))
        .and_then(|(_, v)| local_next(&v).map(str::to_owned))
        .unwrap_or_else(|| "/".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        for good in [
            "/",
            "/receipts",
            "/receipts?decision=deny&x=1",
            "/policies/p-1#top",
        ] {
            assert_eq!(local_next(good), Some(good), "{good}");
        }
        for bad in [
            "",
            "receipts",
            "//evil.example",
            "/\\evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/ok\\..\\x",
            "https://evil.example/",
            "javascript:alert(1)",
            " /receipts",
        ] {
            assert_eq!(local_next(bad), None, "{bad:?}");
        }
        assert_eq!(
            after_sign_in("?next=%2Freceipts%3Fdecision%3Ddeny"),
            "/receipts?decision=deny"
        );
        assert_eq!(after_sign_in("next=%2F%2Fevil.example"), "/");
        assert_eq!(after_sign_in("next=%2F%5Cevil.example"), "/");
        assert_eq!(after_sign_in(""), "/");
        assert_eq!(
            sign_in_path("/receipts?a=b"),
            "/sign-in?next=%2Freceipts%3Fa%3Db"
        );
        assert_eq!(sign_in_path("/"), "/sign-in");
        assert_eq!(
            after_sign_in(&sign_in_path("/receipts?a=b")[8..]),
            "/receipts?a=b"
        );
    }
}
