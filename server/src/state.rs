//! The state every HTTP handler shares: the node's [`Services`] and what only the surfaces
//! need (the dashboard's Leptos options, `/mcp`'s streams and watchers).

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::config::LeptosOptions;

use aperture_core::services::Services;

/// Shared by every request; cheap to clone (one reference count: axum clones the state for
/// every request, and the fields' own counts were ~1 % of a gateway call's CPU). Reads through
/// to the [`Services`] (`state.store`, `state.journal`, …).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state of a server.
    pub fn new(shared: Shared) -> Self {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// What an [`AppState`] holds.
pub struct Shared {
    /// The node's services.
    pub services: Services,
    /// Where the dashboard's files are, for Leptos.
    pub leptos_options: LeptosOptions,
    /// `/mcp`'s SSE streams on this node, kept for resuming (`Last-Event-ID`).
    pub streams: Arc<aperture_core::live::streams::Streams>,
    /// `/mcp`'s listening streams and what they watch (`notifications/tools/list_changed`).
    pub watchers: Arc<aperture_core::live::listing::Watchers>,
    /// The gateway's requests to `/mcp` clients awaiting their answers on this node.
    pub asks: Arc<aperture_core::live::asks::Asks>,
    /// 2026-07-28 calls suspended on this node until their client answers (`input_required`).
    pub runs: Arc<aperture_core::live::asks::Runs>,
}

impl std::ops::Deref for Shared {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
}
