//! The sign-in page.

use leptos::prelude::*;
use leptos_router::components::Redirect;
use leptos_router::hooks::use_location;

use crate::api::{SignIn, current_user};

/// Password sign-in. A plain HTML form, so it works before the wasm has loaded; once hydrated,
/// errors show inline and the typed values stay.
#[component]
pub fn SignInPage() -> impl IntoView {
    let action = ServerAction::<SignIn>::new();
    let already = Resource::new(|| (), |_| current_user());
    // Where the person was going (`?next=`, local paths only), for both ways out of this page.
    let next = crate::layout::after_sign_in(&use_location().search.get_untracked());
    let target = next.clone();
    Effect::new(move |_| {
        if let Some(Ok(_)) = action.value().get() {
            let _ = window().location().set_href(&target);
        }
    });
    let error = move || match action.value().get() {
        Some(Err(e)) => Some(e.message),
        _ => None,
    };
    view! {
        <main class="page narrow sign-in">
            <Suspense>
                {move || {
                    let next = next.clone();
                    Suspend::new(async move {
                        matches!(already.await, Ok(Some(_)))
                            .then(|| view! { <Redirect path=next/> })
                    })
                }}
            </Suspense>
            <h1>"Sign in to Aperture"</h1>
            <ActionForm action>
                <label for="tenant">"Tenant"</label>
                <input id="tenant" name="tenant" type="text" value="default" required autocomplete="organization"/>
                <label for="username">"Username"</label>
                <input id="username" name="username" type="text" required autocomplete="username" autofocus/>
                <label for="password">"Password"</label>
                <input id="password" name="password" type="password" required autocomplete="current-password"/>
                <p class="form-error" role="alert" data-testid="sign-in-error">{error}</p>
                <button type="submit" disabled=move || action.pending().get()>
                    {move || if action.pending().get() { "Signing in…" } else { "Sign in" }}
                </button>
            </ActionForm>
        </main>
    }
}
