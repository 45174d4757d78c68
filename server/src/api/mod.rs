//! The REST mount of the AgentToolExposureService: `/api/v2/agent-tool-exposure/…` (CONTRACT §8).
//!
//! Every route is declared once, in [`Api::route`], together with the scope it requires; the
//! scope is enforced by a middleware wrapped around that very handler, so a route cannot exist
//! without its check. [`route_specs`] lists them for the scope-matrix test and for docs.

mod agents;
pub mod connect;
pub(crate) mod invocations;
pub(crate) mod journal;
mod json;
pub mod openapi;
mod policies;
pub(crate) mod receipts;
pub(crate) mod sessions;
mod settings;
mod tokens;
mod tools;
mod upstreams;
mod users;
mod webhooks;

use std::sync::OnceLock;

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, on};
use engine::scope;

use aperture_types::error::{AppError, ErrorCode};

pub use json::ApiJson;

use crate::auth::{Principal, principal::authenticate_bearer};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::error::ServiceError;

/// Where the REST API is mounted.
pub const PREFIX: &str = "/api/v2/agent-tool-exposure";

/// One REST route and the scope it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// HTTP method.
    pub method: Method,
    /// Path below [`PREFIX`], with `{param}` placeholders.
    pub path: &'static str,
    /// Scopes of which the caller must hold one (handlers narrow "run" to the caller's own).
    pub scopes: &'static [&'static str],
}

/// Something routes are declared into: the router itself, or the list of [`RouteSpec`]s.
trait Declare: Sized {
    /// Adds `method path` guarded by `scope`.
    fn route<H, T>(
        self,
        method: Method,
        path: &'static str,
        scopes: &'static [&'static str],
        handler: H,
    ) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static;
}

/// The one list of REST routes. Adding a route here adds its scope check and its row in the
/// scope-matrix test's comparison.
fn declare<D: Declare>(d: D) -> D {
    d.route(Method::GET, "/tokens", &[scope::ADMIN], tokens::list)
        .route(Method::POST, "/tokens", &[scope::ADMIN], tokens::create)
        .route(
            Method::DELETE,
            "/tokens/{id}",
            &[scope::ADMIN],
            tokens::revoke,
        )
        .route(Method::GET, "/policies", &[scope::READ], policies::list)
        .route(
            Method::POST,
            "/policies:validate",
            &[scope::READ],
            policies::validate,
        )
        .route(
            Method::POST,
            "/policies:preview",
            &[scope::READ],
            policies::preview,
        )
        .route(
            Method::POST,
            "/policies:replay",
            &[scope::READ],
            policies::replay,
        )
        .route(Method::GET, "/policies/{id}", &[scope::READ], policies::get)
        .route(
            Method::GET,
            "/policies/{id}/versions",
            &[scope::READ],
            policies::versions,
        )
        .route(
            Method::PUT,
            "/policies/{id}",
            &[scope::WRITE],
            policies::put,
        )
        .route(
            Method::POST,
            "/policies/{id}:activate",
            &[scope::WRITE],
            policies::activate,
        )
        .route(
            Method::GET,
            "/invocations",
            &[scope::READ, scope::APPROVE, scope::RUN],
            invocations::list,
        )
        .route(
            Method::GET,
            "/invocations/events",
            &[scope::READ, scope::APPROVE, scope::RUN],
            invocations::events,
        )
        .route(
            Method::GET,
            "/invocations/{id}",
            &[scope::READ, scope::APPROVE, scope::RUN],
            invocations::get,
        )
        .route(
            Method::POST,
            "/invocations/{id}:approve",
            &[scope::APPROVE],
            invocations::approve,
        )
        .route(
            Method::POST,
            "/invocations/{id}:apply",
            &[scope::APPROVE],
            invocations::apply,
        )
        .route(
            Method::POST,
            "/invocations/{id}:reject",
            &[scope::APPROVE],
            invocations::reject,
        )
        .route(
            Method::POST,
            "/invocations/{id}:cancel",
            &[scope::RUN, scope::APPROVE],
            invocations::cancel,
        )
        .route(
            Method::GET,
            "/journal/checkpoints",
            &[scope::READ, scope::WITNESS],
            journal::checkpoints,
        )
        .route(
            Method::POST,
            "/journal/checkpoints/cosignatures",
            &[scope::WITNESS],
            journal::cosign,
        )
        .route(
            Method::GET,
            "/journal/proofs/inclusion",
            &[scope::READ, scope::WITNESS],
            journal::inclusion,
        )
        .route(
            Method::GET,
            "/journal/proofs/consistency",
            &[scope::READ, scope::WITNESS],
            journal::consistency,
        )
        .route(
            Method::GET,
            "/journal/witnesses",
            &[scope::ADMIN],
            journal::witnesses,
        )
        .route(
            Method::POST,
            "/journal/witnesses",
            &[scope::ADMIN],
            journal::add_witness,
        )
        .route(
            Method::DELETE,
            "/journal/witnesses/{name}",
            &[scope::ADMIN],
            journal::remove_witness,
        )
        .route(Method::GET, "/receipts", &[scope::READ], receipts::list)
        .route(Method::GET, "/receipts/{id}", &[scope::READ], receipts::get)
        .route(Method::GET, "/tools", &[scope::READ], tools::list)
        .route(
            Method::PUT,
            "/tools/{name}",
            &[scope::ADMIN],
            tools::describe,
        )
        .route(
            Method::POST,
            "/tools/{name}:accept",
            &[scope::ADMIN],
            tools::accept,
        )
        .route(
            Method::POST,
            "/tools/{name}:keep-held",
            &[scope::ADMIN],
            tools::keep_held,
        )
        .route(Method::GET, "/catalog/items", &[scope::READ], tools::items)
        .route(
            Method::POST,
            "/catalog/items:accept",
            &[scope::ADMIN],
            tools::accept_item,
        )
        .route(
            Method::POST,
            "/catalog/items:keep-held",
            &[scope::ADMIN],
            tools::keep_item_held,
        )
        .route(
            Method::GET,
            "/catalog/drift",
            &[scope::ADMIN],
            tools::drift_settings,
        )
        .route(
            Method::PUT,
            "/catalog/drift",
            &[scope::ADMIN],
            tools::put_drift_settings,
        )
        .route(Method::GET, "/settings/mcp", &[scope::ADMIN], settings::mcp)
        .route(
            Method::PUT,
            "/settings/mcp",
            &[scope::ADMIN],
            settings::put_mcp,
        )
        .route(Method::GET, "/sessions", &[scope::READ], sessions::list)
        .route(Method::POST, "/sessions", &[scope::RUN], sessions::create)
        .route(
            Method::GET,
            "/sessions/{id}",
            &[scope::READ, scope::RUN],
            sessions::get,
        )
        .route(
            Method::GET,
            "/sessions/{id}/manifest",
            &[scope::READ, scope::RUN],
            sessions::manifest,
        )
        .route(
            Method::GET,
            "/sessions/{id}/evidence",
            &[scope::READ, scope::RUN],
            sessions::evidence,
        )
        .route(
            Method::POST,
            "/sessions/{id}:revoke",
            &[scope::ADMIN, scope::RUN],
            sessions::revoke,
        )
        .route(
            Method::POST,
            "/sessions/{id}/calls",
            &[scope::RUN],
            sessions::call,
        )
        .route(
            Method::POST,
            "/sessions/{id}/forks",
            &[scope::RUN],
            sessions::fork,
        )
        .route(Method::POST, "/agents", &[scope::RUN], agents::create)
        .route(Method::GET, "/agents", &[scope::READ], agents::list)
        .route(
            Method::GET,
            "/agents/{id}",
            &[scope::READ, scope::RUN],
            agents::get,
        )
        .route(
            Method::POST,
            "/agents/{id}/turns",
            &[scope::RUN],
            agents::turn,
        )
        .route(Method::GET, "/upstreams", &[scope::READ], upstreams::list)
        .route(
            Method::POST,
            "/upstreams",
            &[scope::ADMIN],
            upstreams::register,
        )
        .route(
            Method::POST,
            "/upstreams/{id}:sync",
            &[scope::WRITE],
            upstreams::sync,
        )
        .route(
            Method::DELETE,
            "/upstreams/{id}",
            &[scope::ADMIN],
            upstreams::remove,
        )
        .route(
            Method::PUT,
            "/upstreams/{id}/credentials",
            &[scope::ADMIN],
            upstreams::set_credentials,
        )
        .route(Method::GET, "/webhooks", &[scope::ADMIN], webhooks::list)
        .route(Method::POST, "/webhooks", &[scope::ADMIN], webhooks::create)
        .route(
            Method::DELETE,
            "/webhooks/{id}",
            &[scope::ADMIN],
            webhooks::delete,
        )
        .route(
            Method::GET,
            "/webhooks/{id}/deliveries",
            &[scope::ADMIN],
            webhooks::deliveries,
        )
        .route(Method::GET, "/users", &[scope::ADMIN], users::list)
        .route(Method::POST, "/users", &[scope::ADMIN], users::create)
        .route(
            Method::PUT,
            "/users/{username}/scopes",
            &[scope::ADMIN],
            users::update_scopes,
        )
}

struct Guarded {
    state: AppState,
    router: Router<AppState>,
}

impl Declare for Guarded {
    fn route<H, T>(
        mut self,
        method: Method,
        path: &'static str,
        scopes: &'static [&'static str],
        handler: H,
    ) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method).unwrap_or(MethodFilter::GET);
        let guarded = handler.layer(middleware::from_fn_with_state(
            (self.state.clone(), scopes),
            enforce,
        ));
        self.router = self.router.route(&internal_path(path), on(filter, guarded));
        self
    }
}

impl Declare for Vec<RouteSpec> {
    fn route<H, T>(
        mut self,
        method: Method,
        path: &'static str,
        scopes: &'static [&'static str],
        _handler: H,
    ) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.push(RouteSpec {
            method,
            path,
            scopes,
        });
        self
    }
}

/// The REST router, to be nested at [`PREFIX`].
pub fn router(state: AppState) -> Router {
    let inner = declare(Guarded {
        state: state.clone(),
        router: Router::new(),
    })
    .router
    .route("/openapi.json", axum::routing::get(openapi::serve))
    .fallback(|| async { ApiError(AppError::not_found("route")) })
    .with_state(state);
    Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(route_custom_method)
            .service(inner),
    )
}

/// Custom methods (`/policies/{id}:activate`, AIP-136 style) end a segment with `:verb`, which
/// the router cannot match after a parameter; they are routed internally as `…/~verb`.
fn internal_path(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((head, last)) => match last.split_once(':') {
            Some((name, verb)) if !name.is_empty() && !verb.is_empty() => {
                format!("{head}/{name}/~{verb}")
            }
            _ => path.to_owned(),
        },
        None => path.to_owned(),
    }
}

/// Rewrites a request for a custom method to its internal path.
fn route_custom_method(mut request: Request) -> Request {
    let path = request.uri().path();
    let internal = internal_path(path);
    if internal != path {
        let target = match request.uri().query() {
            Some(q) => format!("{internal}?{q}"),
            None => internal,
        };
        if let Ok(uri) = target.parse() {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// Every REST route with its scope.
pub fn route_specs() -> Vec<RouteSpec> {
    declare(Vec::new())
}

/// Authenticates the bearer token (401), checks the route's scope (403) and hands the principal
/// to the handler. A request the Connect mount or the gRPC service serves arrives
/// [`Authenticated`] already; its scope is checked again here all the same.
async fn enforce(
    State((state, required)): State<(AppState, &'static [&'static str])>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = match request.extensions_mut().remove::<Authenticated>() {
        Some(Authenticated(principal)) => principal,
        None => match authenticate(&state, request.headers()).await {
            Ok(p) => p,
            Err(e) => return ApiError(e).into_response(),
        },
    };
    if let Err(e) = principal.require_any(required) {
        return ApiError(e).into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// The principal of a request's bearer token: 401 without one, or for one that is unknown,
/// revoked or expired.
pub(crate) async fn authenticate(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, AppError> {
    let Some(secret) = bearer(headers) else {
        return Err(AppError::new(
            ErrorCode::Unauthenticated,
            "a bearer token is required",
        ));
    };
    authenticate_bearer(&state.store, secret)
        .await
        .map_err(ServiceError::into_app_error)
}

/// A caller authenticated, and found to hold a scope of the route, before its request reached
/// the REST router: by [`connect::admit`], before the Connect mount or the gRPC service read the
/// request's message. The route's guard takes it instead of reading the token again. Only this
/// crate makes one; a request from the network cannot carry it.
#[derive(Clone)]
pub(crate) struct Authenticated(pub(crate) Principal);

/// The scopes of the REST route `method path`, as [`declare`] gives them.
pub(crate) fn scopes_of(method: &str, path: &str) -> Option<&'static [&'static str]> {
    static ROUTES: OnceLock<Vec<RouteSpec>> = OnceLock::new();
    ROUTES
        .get_or_init(route_specs)
        .iter()
        .find(|r| r.method.as_str() == method && r.path == path)
        .map(|r| r.scopes)
}

/// The secret of an `Authorization: Bearer …` header, when there is a non-empty one.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The authenticated principal of a REST request (set by the route's guard).
pub struct Caller(pub Principal);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| {
                tracing::error!(path = %parts.uri.path(), "route without a scope guard");
                ApiError(AppError::internal())
            })
    }
}
