//! [`Services`]: what one node's services run with — the database, the journal, the upstream
//! connections, the event bus, the model client — made once at start-up and shared by every
//! surface (REST, Connect, gRPC, `/mcp`, the dashboard) and every background task. Nothing
//! here knows HTTP: the surfaces keep their own state around it.

use std::sync::Arc;

use crate::config::{Config, RateLimiter, SpendGate};
use crate::execution::{CallContext, OutputTo};
use crate::journal::Journal;
use crate::password::Passwords;
use crate::store::Store;

/// A handle on a node's services; cheap to clone (one reference count).
#[derive(Clone)]
pub struct Services(Arc<Parts>);

impl Services {
    /// The services made of `parts`.
    pub fn new(parts: Parts) -> Self {
        Services(Arc::new(parts))
    }
}

impl std::ops::Deref for Services {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// What [`Services`] hold.
pub struct Parts {
    /// The database.
    pub store: Store,
    /// Password hashing with its concurrency cap.
    pub passwords: Passwords,
    /// The configuration the server started with.
    pub config: Arc<Config>,
    /// Compiled validators of advertised schemas, by `schemaHash`.
    pub validators: Arc<engine::narrow::ValidatorCache>,
    /// Registered upstream MCP servers and their live connections.
    pub upstreams: Arc<crate::upstream::Upstreams>,
    /// The key that seals secrets at rest, and the state a client echoes back
    /// ([`crate::relay::RequestState`]).
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// The tamper-evident journal (and the signing keys).
    pub journal: Journal,
    /// Set when the node was asked to stop: long-lived streams end.
    pub draining: tokio::sync::watch::Sender<bool>,
    /// Events to and from every node (crate::events); wakes the invocation worker.
    pub events: Arc<crate::events::Bus>,
    /// Calls in flight, which their callers may cancel.
    pub in_flight: Arc<crate::cancel::InFlight>,
    /// Makes the journal trees' signed checkpoints.
    pub checkpoints: Arc<crate::journal::checkpoints::Checkpointer>,
    /// The journal verified in the background (the overview's chain status).
    pub chain: Arc<crate::journal::watch::ChainWatch>,
    /// Webhooks: their secrets, address rule and sender.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// The model server hosted agents use, when one is configured.
    pub model: Option<Arc<crate::model::ModelClient>>,
}

/// Whether a node can take calls, check by check: each `"ok"` or what is wrong (no secrets, no
/// tenant data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The database answers (`"unreachable"` when not).
    pub database: String,
    /// Its schema is this build's (`"pending: …"` names the migrations to run).
    pub migrations: String,
    /// The journal writer is alive (`"writer stopped"` when not).
    pub journal_writer: &'static str,
}

impl Readiness {
    /// Whether every check is `"ok"`.
    pub fn is_ready(&self) -> bool {
        self.database == "ok" && self.migrations == "ok" && self.journal_writer == "ok"
    }
}

impl Parts {
    /// Whether this node can take calls: the database answers, its schema is this build's (no
    /// migration pending), and the journal writer is alive.
    pub async fn readiness(&self) -> Readiness {
        let database = match sqlx::query("SELECT 1").execute(self.store.pool()).await {
            Ok(_) => "ok".to_owned(),
            Err(e) => {
                tracing::warn!(error = %e, "readiness: the database does not answer");
                "unreachable".to_owned()
            }
        };
        let migrations = if database == "ok" {
            match self.store.pending_migrations().await {
                Ok(pending) if pending.is_empty() => "ok".to_owned(),
                Ok(pending) => format!(
                    "pending: {}",
                    pending
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "readiness: reading the applied migrations");
                    "unknown".to_owned()
                }
            }
        } else {
            "unknown".to_owned()
        };
        let journal = if self.journal.writer_alive() {
            "ok"
        } else {
            "writer stopped"
        };
        Readiness {
            database,
            migrations,
            journal_writer: journal,
        }
    }

    /// Forgets what has aged out: expired idempotency keys, idle MCP sessions, and what sign-in
    /// keeps ([`crate::sign_in::tidy`]). A step that fails is logged and the others run; a node
    /// runs it every minute.
    pub async fn tidy(&self) {
        let now = crate::store::now_ms();
        if let Err(e) = crate::store::idempotency::purge_expired(&self.store, now).await {
            tracing::warn!(error = %e, "deleting expired idempotency keys");
        }
        if let Err(e) = crate::mcp_sessions::tidy(&self.store, now).await {
            tracing::warn!(error = %e, "forgetting idle MCP sessions");
        }
        crate::sign_in::tidy(&self.store, &self.journal, now).await;
    }

    /// What a `tools/call` needs, borrowed from the services.
    pub fn call_context(&self) -> CallContext<'_> {
        CallContext {
            store: &self.store,
            journal: &self.journal,
            upstreams: &self.upstreams,
            validators: &self.validators,
            parked_expiry: self.config.parked_expiry,
            events: &self.events,
            rate_limiter: self.config.rate_limiter != RateLimiter::None,
            spend_gate: self.config.spend_gate != SpendGate::None,
            output_to: OutputTo::Mcp,
            idempotency_retention: self.config.idempotency_retention,
            cancelled: None,
            progress: None,
            client: None,
            log: None,
            param_headers: None,
            round: None,
        }
    }
}
