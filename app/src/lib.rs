#![recursion_limit = "256"]
//! # The Aperture dashboard
//!
//! Leptos components rendered on the server and hydrated in the browser.
//!
//! Modules by floor, ground floor first (a module uses only modules on floors below it; the
//! `floors` crate's tests keep it so):
//! - [`error`]: [`error::AppError`], the one error shape of the dashboard and the REST API, and
//!   [`dto`]: requests and views exchanged with the server — both from `aperture-types`;
//!   [`policy_draft`]: the policy editor's model (a policy as typed) and its diff.
//! - `session`: who calls a server function (`ssr` only: the core's services, the cookie
//!   session, signing in and out); [`verify`]: a receipt's signature and chain links, checked in
//!   the browser.
//! - [`api`]: the `#[server]` functions; each names what it needs of its caller, then calls the
//!   core (`aperture-core`) directly.
//! - [`layout`]: the signed-in frame (header, navigation) and the sign-in guard.
//! - [`pages`]: one module per page.
//!
//! Features: `ssr` for the server build, `hydrate` for the wasm build.

pub mod api;
pub use aperture_types::{dto, error};
pub mod layout;
pub mod pages;
pub mod policy_draft;
#[cfg(feature = "ssr")]
pub mod session;
pub mod verify;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    SsrMode,
    components::{ParentRoute, Route, Router, Routes},
    path,
};

/// Name of the generated JS/wasm/CSS files under `/pkg`.
pub const OUTPUT_NAME: &str = "aperture";

/// The HTML document around the app (server only).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The routed application.
///
/// Signed-in pages render `Async`: the server awaits the page's data and sends it in the HTML
/// (the most restrictive mode of a nested route wins, so the frame's mode covers every page in
/// it). Streamed out of order, the data would reach the page only through scripts, and a page
/// read without them would say "Loading…" forever.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    mark_hydrated();
    view! {
        <Stylesheet id="leptos" href="/pkg/aperture.css"/>
        <Title text="Aperture"/>
        <Router>
            <Routes fallback=pages::not_found::NotFound>
                <Route path=path!("/sign-in") view=pages::sign_in::SignInPage/>
                <ParentRoute path=path!("") view=layout::SignedIn ssr=SsrMode::Async>
                    <Route path=path!("") view=pages::overview::OverviewPage/>
                    <Route path=path!("policies") view=pages::policies::PoliciesPage/>
                    <Route path=path!("policies/:id") view=pages::policy_editor::PolicyEditorPage/>
                    <Route path=path!("approvals") view=pages::approvals::ApprovalsPage/>
                    <Route path=path!("webhooks") view=pages::webhooks::WebhooksPage/>
                    <Route path=path!("receipts") view=pages::receipts::ReceiptsPage/>
                    <Route path=path!("receipts/:id") view=pages::receipts::ReceiptDetailPage/>
                    <Route path=path!("journal") view=pages::journal::JournalPage/>
                    <Route path=path!("tools") view=pages::tools::ToolsPage/>
                    <Route path=path!("sessions") view=pages::sessions::SessionsPage/>
                    <Route path=path!("sessions/:id") view=pages::sessions::SessionDetailPage/>
                    <Route path=path!("agents") view=pages::agents::AgentsPage/>
                    <Route path=path!("agents/:id") view=pages::agents::AgentDetailPage/>
                    <Route path=path!("tokens") view=pages::tokens::TokensPage/>
                    <Route path=path!("users") view=pages::users::UsersPage/>
                </ParentRoute>
            </Routes>
        </Router>
    }
}

/// Sets `data-hydrated` on `<body>` once the wasm has taken over, so browser tests (and
/// curious people) can tell a hydrated page from server-rendered HTML.
fn mark_hydrated() {
    Effect::new(|_| {
        #[cfg(feature = "hydrate")]
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
}

/// Entry point of the wasm bundle.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
