//! The page for any unknown path.

use leptos::prelude::*;

/// 404 page; also sets the HTTP status when rendered on the server.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
        resp.set_status(axum::http::StatusCode::NOT_FOUND);
    }
    view! {
        <main class="page narrow">
            <h1>"Page not found"</h1>
            <p>"There is nothing at this address. " <a href="/">"Go to the overview"</a> "."</p>
        </main>
    }
}
