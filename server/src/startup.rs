//! Building and running the server: `Application::build(config)`, `.port()`,
//! `.run_until_stopped()`, so that tests start the real thing on port 0.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::get;
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use tokio::net::TcpListener;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;

use aperture_core::users::Bootstrap;

use crate::api;
use crate::auth::password::Passwords;
use crate::auth::{csrf, dashboard};
use crate::state::AppState;
use aperture_core::Store;
use aperture_core::config::Config;
use aperture_core::journal::Journal;
use aperture_core::keys::KeyRing;
use aperture_core::users;

/// A server bound to its port, ready to run.
pub struct Application {
    listener: TcpListener,
    router: Router,
    bootstrap: Bootstrap,
    worker: aperture_core::invocations::Worker,
    chain: Arc<aperture_core::journal::watch::ChainWatch>,
    /// For the hosted-agent resumer (continues turns whose parked calls were decided).
    state: AppState,
}

impl Application {
    /// Connects to and migrates the database, creates the default tenant (and the bootstrap
    /// admin when asked), and binds the listener.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        // Metrics are recorded only where someone may read them.
        if config.metrics_token.is_some() {
            aperture_core::metrics::install();
        }
        let store = Store::connect_with(&config.database_url, config.durability).await?;
        store.cache().set_budget(config.read_cache_bytes);
        store.migrate().await?;
        let concurrency = std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2);
        let passwords = tokio::task::spawn_blocking(move || Passwords::new(concurrency))
            .await
            .context("password setup task")??;
        let keys = KeyRing::load(
            &store,
            &config.data_dir,
            config.signing_key.as_deref(),
            &config.published_keys,
        )
        .await?;
        let spool = aperture_core::journal::spool::Spool::open(
            &config.data_dir.join("spool"),
            store.clone(),
        )
        .context("the execution receipt spool")?;
        let journal = Journal::new(store.clone(), keys).with_spool(Arc::new(spool));
        let bootstrap = users::bootstrap(
            &store,
            &journal,
            &passwords,
            config.bootstrap_admin_password.as_deref(),
        )
        .await?;
        let listener = TcpListener::bind(config.addr)
            .await
            .with_context(|| format!("binding {}", config.addr))?;
        let addr = listener.local_addr()?;
        // The address as bound (port 0 picked one): the default public URL's origin is this.
        let mut config = config;
        config.addr = addr;
        let pkg_js = config
            .site_root
            .join("pkg")
            .join(format!("{}.js", app::OUTPUT_NAME));
        if !pkg_js.exists() {
            tracing::warn!(
                site_root = %config.site_root.display(),
                "the dashboard's browser bundle is missing; pages render without interactivity (build it with scripts/build-site)"
            );
        }
        let leptos_options = LeptosOptions::builder()
            .output_name(app::OUTPUT_NAME)
            .site_root(config.site_root.display().to_string())
            .site_pkg_dir("pkg")
            .site_addr(addr)
            .build();
        let config_model = config.model.clone();
        // Upstream credentials are encrypted at rest; what is stored in plaintext (from before)
        // or under an older key is sealed under the current one now.
        let secrets = Arc::new(
            aperture_core::secrets::SecretBox::load(
                &config.data_dir,
                config.secrets_key.as_deref(),
            )
            .context("the secrets key (APERTURE_SECRETS_KEY or <data dir>/secrets.key)")?,
        );
        let upstreams = Arc::new(aperture_core::upstream::Upstreams::new(
            config.allow_stdio_upstreams,
            config.allow_private_upstreams,
            secrets.clone(),
        ));
        let webhooks = Arc::new(
            aperture_core::webhooks::Webhooks::new(
                secrets.clone(),
                config.allow_private_upstreams,
                config.webhook_retry.clone(),
                config.public_base(),
            )
            .context("the webhook sender")?,
        );
        webhooks
            .reseal_all(&store)
            .await
            .context("encrypting stored webhook secrets under the current key")?;
        let resealed = upstreams
            .reseal_all(&store)
            .await
            .context("encrypting stored upstream credentials")?;
        if resealed > 0 {
            tracing::info!(
                upstreams = resealed,
                "encrypted stored upstream credentials"
            );
        }
        let checkpoints = aperture_core::journal::checkpoints::Checkpointer::new(
            store.clone(),
            journal.keys().clone(),
            config.log_origin_host(),
            Some(config.checkpoint_dir.clone()),
            config.checkpoint_interval,
        );
        let services = aperture_core::services::Services::new(aperture_core::services::Parts {
            store: store.clone(),
            passwords,
            journal,
            validators: Arc::new(engine::narrow::ValidatorCache::new()),
            upstreams: upstreams.clone(),
            secrets,
            webhooks,
            config: Arc::new(config),
            draining: tokio::sync::watch::Sender::new(false),
            events: aperture_core::events::Bus::new(
                store.clone(),
                Arc::new(tokio::sync::Notify::new()),
            ),
            in_flight: Arc::new(aperture_core::cancel::InFlight::default()),
            chain: aperture_core::journal::watch::ChainWatch::new(store.clone()),
            checkpoints,
            model: match &config_model {
                Some(m) => Some(Arc::new(
                    aperture_core::model::ModelClient::new(m.clone())
                        .context("the model server configuration")?,
                )),
                None => None,
            },
        });
        let state = AppState::new(crate::state::Shared {
            services,
            leptos_options,
            streams: Arc::default(),
            watchers: Arc::default(),
            asks: Arc::default(),
            runs: Arc::default(),
        });
        let chain = state.chain.clone();
        let resumer_state = state.clone();
        let worker = aperture_core::invocations::Worker::new(
            state.store.clone(),
            state.journal.clone(),
            state.upstreams.clone(),
            state.validators.clone(),
            state.events.clone(),
            state.config.parked_expiry,
            state.in_flight.clone(),
        );
        Ok(Self {
            listener,
            router: router(state),
            bootstrap,
            worker,
            chain,
            state: resumer_state,
        })
    }

    /// The port actually bound (useful with port 0).
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The journal (its writer's statistics: the gateway benchmark reports records per commit).
    pub fn journal(&self) -> aperture_core::journal::Journal {
        self.state.journal.clone()
    }

    /// The store the server reads through (its read cache's weight: the soak benchmark).
    pub fn store(&self) -> Store {
        self.state.store.clone()
    }

    /// What start-up did about the first administrator.
    pub fn bootstrap(&self) -> &Bootstrap {
        &self.bootstrap
    }

    /// Serves until Ctrl-C / SIGTERM.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let services = self.state.services.clone();
        let settling = self.state.journal.clone();
        let draining = self.state.draining.clone();
        let cleanup = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(60));
            loop {
                every.tick().await;
                services.tidy().await;
            }
        });
        // Released, expired and interrupted invocations are handled here, with no request.
        let stop_worker = self.worker.stopper();
        let mut worker = tokio::spawn(self.worker.run());
        let chain = tokio::spawn(self.chain.run());
        let checkpoints = self
            .state
            .config
            .checkpointer
            .then(|| self.state.checkpoints.clone());
        let checkpointer = checkpoints
            .clone()
            .map(|c| tokio::spawn(c.run(self.state.journal.clone())));
        // Execution receipts the journal refused are journaled once it records again.
        let spool = self.state.journal.spool().cloned().map(|spool| {
            tokio::spawn(spool.run(self.state.journal.clone(), Duration::from_secs(1)))
        });
        // Other nodes' events (LISTEN on PostgreSQL, polling on SQLite).
        let events = tokio::spawn(
            self.state
                .events
                .clone()
                .run(self.state.config.database_url.clone()),
        );
        // Cancellations of calls in flight here, sent to another node.
        let relay = tokio::spawn(aperture_core::cancel::relay(
            self.state.events.clone(),
            self.state.in_flight.clone(),
        ));
        // Clients' answers to this node's requests that reached another node.
        let answers = tokio::spawn(aperture_core::live::asks::relay(
            self.state.events.clone(),
            self.state.store.clone(),
            self.state.asks.clone(),
        ));
        // `notifications/tools/list_changed` for `/mcp`'s listening streams.
        let listings = tokio::spawn(self.state.watchers.clone().run(
            self.state.store.clone(),
            self.state.validators.clone(),
            self.state.streams.clone(),
        ));
        // Upstreams' `notifications/resources/updated`: what this node hears goes to every
        // node; what any node heard goes to this node's streams still allowed to hear it.
        let updates = tokio::spawn(aperture_core::live::resources::relay(
            self.state.upstreams.resource_updates(),
            self.state.store.clone(),
            self.state.upstreams.clone(),
            self.state.events.clone(),
        ));
        let deliveries = tokio::spawn(aperture_core::live::resources::deliver(
            self.state.events.subscribe(),
            self.state.store.clone(),
            self.state.watchers.clone(),
        ));
        // Webhook deliveries from the outbox (any node sends what is due).
        let webhooks = tokio::spawn(
            self.state
                .webhooks
                .clone()
                .run(self.state.store.clone(), self.state.events.clone()),
        );
        let header_read = self.state.config.header_read_timeout;
        let resumer = tokio::spawn(aperture_core::agents::runtime::run_resumer(
            self.state.services.clone(),
        ));
        // The HTTP parser's bare error answers get the API's JSON shape (crate::listener).
        let listener = crate::listener::EdgeListener(self.listener);
        let mut stopping = draining.subscribe();
        let stop_at_signal = stop_worker.clone();
        let serve = crate::listener::serve(listener, self.router, header_read, async move {
            shutdown_signal().await;
            aperture_core::metrics::draining();
            tracing::info!("stopping: no new requests; answering the ones in flight");
            // Event streams end now (their clients reconnect to another node), and the
            // worker claims nothing more (it finishes the invocation it runs).
            draining.send_replace(true);
            stop_at_signal.stop();
        });
        // Requests that do not end by themselves (a stuck upstream, a client that reads
        // nothing) get DRAIN_REQUESTS after the signal; then the node stops without them.
        tokio::select! {
            () = serve => {}
            () = async {
                let _ = stopping.wait_for(|d| *d).await;
                tokio::time::sleep(DRAIN_REQUESTS).await;
            } => {
                tracing::warn!("requests still open after the drain period; stopping without them");
            }
        }
        // Draining: the listener is closed and every request taken was answered. The worker
        // finishes the invocation it runs (another node takes over what it cannot finish in
        // time: its heartbeat stops), then what the journal still holds is committed.
        stop_worker.stop();
        if tokio::time::timeout(DRAIN_WORKER, &mut worker)
            .await
            .is_err()
        {
            tracing::warn!("the invocation worker did not finish in time; stopping it");
            worker.abort();
        }
        cleanup.abort();
        chain.abort();
        events.abort();
        relay.abort();
        answers.abort();
        listings.abort();
        updates.abort();
        deliveries.abort();
        webhooks.abort();
        resumer.abort();
        if let Some(checkpointer) = checkpointer {
            checkpointer.abort();
        }
        if let Some(spool) = spool {
            spool.abort();
        }
        if !settling.settle(DRAIN_JOURNAL).await {
            tracing::warn!("the journal writer did not answer every record before stopping");
        }
        // The last records get their checkpoint before the server stops.
        if let Some(checkpoints) = checkpoints
            && let Err(e) = checkpoints.run_once().await
        {
            tracing::warn!(error = %e, "making checkpoints at shutdown");
        }
        Ok(())
    }
}

/// How long a stopping node waits for the requests in flight to be answered. With the two
/// below, a node is gone within 25 s of `SIGTERM` (Kubernetes waits 30 s by default).
/// The mounts that authenticate by bearer token alone (the cross-site check lets a bearer token
/// through to these, and only these).
const BEARER_ROUTES: &[&str] = &[api::PREFIX, api::connect::SERVICE];

const DRAIN_REQUESTS: Duration = Duration::from_secs(12);
/// How much longer a stopping node lets its invocation worker (stopped at the signal) finish
/// the invocation it runs.
const DRAIN_WORKER: Duration = Duration::from_secs(8);
/// How long a stopping node waits for the journal writer to answer what it holds.
const DRAIN_JOURNAL: Duration = Duration::from_secs(5);

/// How many times this process listed the dashboard's routes (once: [`dashboard_routes`]).
static ROUTES_LISTED: AtomicUsize = AtomicUsize::new(0);

/// The dashboard's routes, listed once per process. Listing them renders the app while a
/// process-wide flag (leptos_server's `SuppressResourceLoad`) holds back every resource, and a
/// resource first polled meanwhile waits forever — even one of a page another server of the
/// same process is rendering (leptos-rs/leptos#4773). One server per process never meets it (it
/// lists before it listens); the integration tests, which start many, did: a page of one test
/// stalled for good while another test's server started.
fn dashboard_routes() -> Vec<AxumRouteListing> {
    static ROUTES: OnceLock<Vec<AxumRouteListing>> = OnceLock::new();
    ROUTES
        .get_or_init(|| {
            ROUTES_LISTED.fetch_add(1, Ordering::Relaxed);
            generate_route_list(app::App)
        })
        .clone()
}

/// The whole HTTP surface: REST API, dashboard (pages, server functions, static files), MCP
/// and gRPC. Every request is logged (`TraceLayer`) and every response carries the security
/// headers ([`crate::auth::headers`]), gRPC's included.
pub fn router(state: AppState) -> Router {
    let services = state.services.clone();
    let routes = dashboard_routes();
    let options = state.leptos_options.clone();
    let context = move || {
        provide_context(services.clone());
        crate::auth::headers::leptos_nonce();
    };
    let max_body = state.config.max_body_bytes;
    let body_read = state.config.body_read_timeout;
    let secure = state.config.secure_cookies;
    let trusted: Arc<[crate::auth::client::Cidr]> = state.config.trusted_proxies.clone().into();
    // `/mcp` authenticates by bearer token alone: it needs none of the dashboard's cookie
    // session, cross-site check or server-function status layers (each a boxed future and a
    // cloned service on every call).
    let mcp = Router::new().route(
        "/mcp",
        axum::routing::post(crate::mcp::handle)
            .get(crate::mcp::listen_get)
            .delete(crate::mcp::end_session),
    );
    let dashboard_and_api = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::scrape::serve))
        .route("/.well-known/aperture/keys", get(api::receipts::keys))
        .route(
            "/.well-known/aperture/checkpoints/{tenant}",
            get(api::journal::latest),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(crate::mcp::protected_resource),
        )
        .route(
            "/ui/receipts/export.jsonl",
            get(crate::dashboard::export_receipts),
        )
        .route(
            "/ui/approvals/events",
            get(api::invocations::dashboard_events),
        )
        .route(
            "/ui/sessions/{id}/evidence.json",
            get(crate::dashboard::download_evidence),
        )
        .nest_service(api::PREFIX, api::router(state.clone()))
        .nest_service(api::connect::SERVICE, api::connect::router(state.clone()))
        .merge(
            Router::new()
                .leptos_routes_with_context(&state, routes, context.clone(), move || {
                    app::shell(options.clone())
                })
                // Pages only (not the API, static files or the not-found page).
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    crate::dashboard::page_guard,
                )),
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, app::shell))
        .layer(middleware::from_fn(crate::dashboard::server_fn_status))
        .layer(middleware::from_fn_with_state(BEARER_ROUTES, csrf::protect))
        .layer(dashboard::session_layer(state.store.clone(), secure))
        .layer(middleware::from_fn(move |request, next| {
            crate::auth::client::remember_client(trusted.clone(), request, next)
        }));
    // gRPC (`content-type: application/grpc`) on the same listener: it leaves the HTTP routes'
    // layers after the request log and the security headers, before their body limits and
    // deadline (a message is held to the same size as a body, a unary call's message to the
    // same deadline: crate::grpc).
    let grpc = crate::grpc::router(state.clone(), max_body, body_read);
    mcp.merge(dashboard_and_api)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(RequestBodyLimitLayer::new(max_body))
        .layer(middleware::from_fn(move |request, next| {
            oversize_in_kind(request, next, max_body)
        }))
        .layer(middleware::from_fn(move |request, next| {
            crate::deadline::limit(body_read, request, next)
        }))
        .layer(middleware::from_fn(move |request, next| {
            crate::grpc::dispatch(grpc.clone(), request, next)
        }))
        .layer(middleware::from_fn(move |request, next| {
            crate::auth::headers::security_headers(secure, request, next)
        }))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// A body over the limit is refused before any handler runs, with a bare 413; this gives it the
/// shape its caller reads: a JSON-RPC error on `/mcp`, the API's JSON error everywhere else.
async fn oversize_in_kind(
    request: axum::extract::Request,
    next: middleware::Next,
    max_body: usize,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let is_mcp = request.uri().path() == "/mcp";
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if response.status() != StatusCode::PAYLOAD_TOO_LARGE || is_json {
        return response;
    }
    let message = format!("the request body is larger than {max_body} bytes");
    if is_mcp {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            axum::Json(crate::mcp::error(
                &serde_json::Value::Null,
                crate::mcp::INVALID_REQUEST,
                message,
            )),
        )
            .into_response();
    }
    crate::reply::ApiError(aperture_types::error::AppError {
        code: aperture_types::error::ErrorCode::PayloadTooLarge,
        message,
        details: None,
    })
    .into_response()
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// `GET /readyz`: whether this node can take calls — the database answers, its schema is this
/// build's (no migration pending), and the journal writer is alive. `200 {"status": "ready",
/// "checks"}` or `503 {"status": "not_ready", "checks"}`, each check `"ok"` or what is wrong
/// (no secrets, no tenant data: load balancers and orchestrators read it without a token).
/// `/healthz` only says the process serves HTTP.
async fn readyz(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
    let checks = state.readiness().await;
    let ready = checks.is_ready();
    let status = if ready {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(serde_json::json!({
            "status": if ready { "ready" } else { "not_ready" },
            "checks": {
                "database": checks.database,
                "migrations": checks.migrations,
                "journal_writer": checks.journal_writer,
            },
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Listing the routes holds back every resource of the process while it runs: a server
    /// started after the first must not list them again (leptos-rs/leptos#4773).
    #[test]
    fn the_dashboard_routes_are_listed_once_per_process() {
        let first = dashboard_routes();
        let again = dashboard_routes();
        assert!(!first.is_empty());
        assert_eq!(
            first.iter().map(AxumRouteListing::path).collect::<Vec<_>>(),
            again.iter().map(AxumRouteListing::path).collect::<Vec<_>>()
        );
        assert_eq!(ROUTES_LISTED.load(Ordering::Relaxed), 1);
    }
}
