//! The state every handler shares.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::config::LeptosOptions;

use crate::auth::password::Passwords;
use crate::config::Config;
use crate::journal::Journal;
use crate::store::Store;

/// Shared by every request; cheap to clone (one reference count: axum clones the state for
/// every request, and the fields' own counts were ~1 % of a gateway call's CPU).
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
    /// The database.
    pub store: Store,
    /// Password hashing with its concurrency cap.
    pub passwords: Passwords,
    /// The configuration the server started with.
    pub config: Arc<Config>,
    /// Compiled validators of advertised schemas, by `schemaHash`.
    pub validators: std::sync::Arc<engine::narrow::ValidatorCache>,
    /// Registered upstream MCP servers and their live connections.
    pub upstreams: std::sync::Arc<crate::upstream::Upstreams>,
    /// The tamper-evident journal (and the signing keys).
    pub journal: Journal,
    /// Where the dashboard's files are, for Leptos.
    pub leptos_options: LeptosOptions,
    /// Set when the node was asked to stop: long-lived streams end.
    pub draining: tokio::sync::watch::Sender<bool>,
    /// Events to and from every node (crate::events); wakes the invocation worker.
    pub events: Arc<crate::events::Bus>,
    /// `/mcp` calls in flight, which their callers may cancel.
    pub in_flight: Arc<crate::cancel::InFlight>,
    /// `/mcp`'s SSE streams on this node, kept for resuming (`Last-Event-ID`).
    pub streams: Arc<crate::mcp::streams::Streams>,
    /// `/mcp`'s listening streams and what they watch (`notifications/tools/list_changed`).
    pub watchers: Arc<crate::mcp::listing::Watchers>,
    /// Makes the journal trees' signed checkpoints.
    pub checkpoints: Arc<crate::journal::checkpoints::Checkpointer>,
    /// The journal verified in the background (the overview's chain status).
    pub chain: Arc<crate::journal::watch::ChainWatch>,
    /// Webhooks: their secrets, address rule and sender.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// The model server hosted agents use, when one is configured.
    pub model: Option<Arc<crate::agents::model::ModelClient>>,
}

impl Shared {
    /// What a `tools/call` needs, borrowed from the state.
    pub fn call_context(&self) -> crate::execution::CallContext<'_> {
        crate::execution::CallContext {
            store: &self.store,
            journal: &self.journal,
            upstreams: &self.upstreams,
            validators: &self.validators,
            parked_expiry: self.config.parked_expiry,
            events: &self.events,
            rate_limiter: self.config.rate_limiter != crate::config::RateLimiter::None,
            spend_gate: self.config.spend_gate != crate::config::SpendGate::None,
            output_to: crate::execution::OutputTo::Mcp,
            idempotency_retention: self.config.idempotency_retention,
            cancelled: None,
            progress: None,
        }
    }
}
