//! `/invocations` routes: read parked and finished invocations, approve or reject parked ones
//! (CONTRACT §8). A principal with `:read` or `:approve` sees the tenant's invocations; one with
//! only `:run` sees its own (another actor's look exactly like missing ones).

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use aperture_types::error::{AppError, ErrorCode};

use super::{ApiJson, Caller};
use crate::auth::Principal;
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::invocations::{self, Action, DecideRequest};

/// Query of `GET /invocations`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    limit: Option<i64>,
}

/// Who hears a live view's events: a tenant's, only one actor's (a caller with only the run
/// scope), only some environments' (a confined caller).
#[derive(Debug, Clone)]
pub(crate) struct Listener {
    tenant: String,
    own_only: Option<String>,
    environments: Option<Vec<String>>,
}

impl Listener {
    fn of(p: &Principal) -> Self {
        Self {
            tenant: p.tenant_id.clone(),
            own_only: invocations::readable_actor(p).map(str::to_owned),
            environments: p.confined_to().map(<[String]>::to_vec),
        }
    }
}

/// `GET /invocations?status&limit`: newest first.
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| AppError::new(ErrorCode::BadRequest, e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(AppError::invalid_field("limit", "between 1 and 500").into());
    }
    if let Some(status) = &q.status
        && !invocations::STATUSES.contains(&status.as_str())
    {
        return Err(AppError::invalid_field(
            "status",
            format!("one of {}", invocations::STATUSES.join(", ")),
        )
        .into());
    }
    let found = invocations::list_visible(&state.store, &p, q.status.as_deref(), limit).await?;
    Ok(Json(json!({
        "invocations": found.iter().map(invocations::view).collect::<Vec<_>>()
    })))
}

/// `GET /invocations/{id}`
pub async fn get(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let row = invocations::find_visible(&state.store, &p, &id)
        .await?
        .filter(|r| invocations::readable_actor(&p).is_none_or(|actor| actor == r.actor_id))
        .ok_or_else(|| AppError::not_found("invocation"))?;
    Ok(Json(invocations::view(&row)))
}

/// `POST /invocations/{id}:approve` `{"args_hash", "comment"?}`
pub async fn approve(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<DecideRequest>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        invocations::decide(
            &state.store,
            &state.journal,
            &state.events,
            &p,
            &id,
            Action::Approve,
            request,
        )
        .await?,
    ))
}

/// `POST /invocations/{id}:apply` `{"args_hash", "comment"?}`: runs a staged change.
pub async fn apply(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<DecideRequest>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        invocations::decide(
            &state.store,
            &state.journal,
            &state.events,
            &p,
            &id,
            Action::Apply,
            request,
        )
        .await?,
    ))
}

/// `POST /invocations/{id}:reject` `{"comment"?}`
pub async fn reject(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: DecideRequest = super::json::optional_json(&body)?;
    Ok(Json(
        invocations::decide(
            &state.store,
            &state.journal,
            &state.events,
            &p,
            &id,
            Action::Reject,
            request,
        )
        .await?,
    ))
}

/// Body of `:cancel`: none, or `{}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {}

/// `POST /invocations/{id}:cancel`: the caller's own invocation (`:run`) or any of the
/// tenant's (`:approve`), while it waits or is queued; no body.
pub async fn cancel(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let CancelRequest {} = super::json::optional_json(&body)?;
    Ok(Json(
        invocations::cancel(
            &state.store,
            &state.journal,
            &state.events,
            &state.in_flight,
            &p,
            &id,
        )
        .await?,
    ))
}

/// How often an event stream is kept alive, and its caller's token checked again.
const STREAM_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// Query of `GET /invocations/events` without `Accept: text/event-stream`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// How long to wait for the first event (0–60 s, default 25).
    wait_seconds: Option<u64>,
}

/// What caller `tenant` / `own_only` may hear of `event`: its type, id and data (`None`: not
/// theirs).
fn visible(
    event: &aperture_core::events::Event,
    listener: &Listener,
) -> Option<(String, String, Value)> {
    let (tenant, own_only) = (listener.tenant.as_str(), listener.own_only.as_deref());
    if event.kind == "resync" {
        return Some((event.kind.clone(), event.id.clone(), json!({})));
    }
    // Only invocations' events: the bus carries other messages between nodes too.
    if !event.kind.starts_with("invocation.") {
        return None;
    }
    if event.tenant_id != tenant || own_only.is_some_and(|a| a != event.actor_id) {
        return None;
    }
    // Another environment's invocation is not this listener's to hear of.
    if let Some(allowed) = &listener.environments {
        let environment = event.data.get("environment").and_then(Value::as_str);
        if !environment.is_some_and(|e| engine::environment::environment_allowed(allowed, e)) {
            return None;
        }
    }
    let mut data = json!({
        "invocation_id": event.subject,
        "actor_id": event.actor_id,
        "at": event.at,
    });
    if let (Some(map), Value::Object(extra)) = (data.as_object_mut(), &event.data) {
        map.extend(extra.clone());
    }
    Some((event.kind.clone(), event.id.clone(), data))
}

/// `GET /invocations/events`: the tenant's invocation events as they happen on any node
/// (`invocation.parked` · `invocation.queued` · `invocation.decided` · `invocation.expired` ·
/// `invocation.cancelled` · `invocation.completed`; data: `invocation_id`, `tool`, `status`,
/// `mode`, `session_id`, `actor_id`, `decided_by`, `at`; never arguments), and `resync` when
/// some may have been missed (read the list again). A caller with only the run scope hears
/// only of its own calls.
///
/// With `Accept: text/event-stream`: server-sent events (`event`, `id`, `data`), a comment line
/// every 15 s through proxies, until the caller's token no longer authenticates. Otherwise (the
/// Connect method `WatchInvocations`): a long poll, `{"events": [{"type", "id", "data"}]}` with
/// what arrived within `wait_seconds` of the first event (an empty list when none did).
pub async fn events(
    State(state): State<AppState>,
    Caller(p): Caller,
    headers: axum::http::HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    use tokio::sync::broadcast::error::RecvError;
    let Query(q) = query.map_err(|e| AppError::new(ErrorCode::BadRequest, e.body_text()))?;
    let wait = q.wait_seconds.unwrap_or(25);
    if wait > 60 {
        return Err(AppError::invalid_field("wait_seconds", "between 0 and 60").into());
    }
    let listener = Listener::of(&p);
    let mut receiver = state.events.subscribe();
    let mut draining = state.draining.subscribe();
    let streams = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !streams {
        let mut events = Vec::new();
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(wait);
        loop {
            // After the first event, only what comes with it (50 ms).
            let deadline = if events.is_empty() {
                until
            } else {
                until.min(tokio::time::Instant::now() + std::time::Duration::from_millis(50))
            };
            let received = tokio::select! {
                r = receiver.recv() => r,
                () = tokio::time::sleep_until(deadline) => break,
                // The node stops: answer with what there is.
                _ = draining.wait_for(|d| *d) => break,
            };
            let event = match received {
                Ok(e) => e,
                Err(RecvError::Lagged(_)) => aperture_core::events::Event::resync(""),
                Err(RecvError::Closed) => break,
            };
            if let Some((kind, id, data)) = visible(&event, &listener) {
                events.push(json!({"type": kind, "id": id, "data": data}));
                if events.len() >= 100 {
                    break;
                }
            }
        }
        return Ok(Json(json!({ "events": events })).into_response());
    }
    let secret = super::bearer(&headers).map(str::to_owned);
    let store = state.store.clone();
    let environments = p.environments.clone();
    // Still the same caller, still allowed, in the same environments?
    let still = move || {
        let (store, secret, environments) = (store.clone(), secret.clone(), environments.clone());
        async move {
            match &secret {
                Some(s) => crate::auth::principal::authenticate_bearer(&store, s)
                    .await
                    .is_ok_and(|now| now.environments == environments),
                None => false,
            }
        }
    };
    Ok(live(receiver, draining, listener, still))
}

/// The server-sent events of a live view (`GET /invocations/events`, the dashboard's
/// approvals page): `resync` first ("read the list now": whatever happened before the stream
/// opened, or while a client reconnected, is in it), then every event `listener` may hear,
/// until the node drains or `still` (asked every
/// [`STREAM_CHECK_EVERY`]) says the caller may no longer listen.
pub(crate) fn live<F, Fut>(
    receiver: tokio::sync::broadcast::Receiver<aperture_core::events::Event>,
    draining: tokio::sync::watch::Receiver<bool>,
    listener: Listener,
    still: F,
) -> axum::response::Response
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    use axum::response::IntoResponse;
    use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
    use tokio::sync::broadcast::error::RecvError;
    let first = futures_util::stream::once(async {
        Ok::<_, std::convert::Infallible>(SseEvent::default().event("resync").data("{}"))
    });
    let stream = futures_util::stream::unfold(
        (
            receiver,
            tokio::time::Instant::now() + STREAM_CHECK_EVERY,
            draining,
        ),
        move |(mut receiver, mut check_at, mut draining)| {
            let (still, listener) = (still.clone(), listener.clone());
            async move {
                loop {
                    let received = tokio::select! {
                        r = receiver.recv() => Some(r),
                        () = tokio::time::sleep_until(check_at) => None,
                        // The node stops: the stream ends (the client reconnects elsewhere).
                        _ = draining.wait_for(|d| *d) => return None,
                    };
                    let Some(received) = received else {
                        if !still().await {
                            return None;
                        }
                        check_at = tokio::time::Instant::now() + STREAM_CHECK_EVERY;
                        continue;
                    };
                    let event = match received {
                        Ok(e) => e,
                        Err(RecvError::Lagged(_)) => aperture_core::events::Event::resync(""),
                        Err(RecvError::Closed) => return None,
                    };
                    let Some((kind, id, data)) = visible(&event, &listener) else {
                        continue;
                    };
                    let sse = SseEvent::default()
                        .event(kind)
                        .id(id)
                        .data(data.to_string());
                    return Some((
                        Ok::<_, std::convert::Infallible>(sse),
                        (receiver, check_at, draining),
                    ));
                }
            }
        },
    );
    use futures_util::StreamExt as _;
    Sse::new(first.chain(stream))
        .keep_alive(KeepAlive::new().interval(STREAM_CHECK_EVERY))
        .into_response()
}

/// `GET /ui/approvals/events`: the approvals page's live updates, for the signed-in user (the
/// dashboard's cookie session; the stream ends when the session does). Who sees what is as in
/// `GET /invocations/events`.
pub async fn dashboard_events(
    State(state): State<AppState>,
    session: tower_sessions::Session,
) -> Result<axum::response::Response, ApiError> {
    let p = crate::auth::dashboard::require(&state.store, &session).await?;
    let (tenant, actor) = (p.tenant_id.clone(), p.actor_id.clone());
    let environments = p.environments.clone();
    let store = state.store.clone();
    let still = move || {
        let (store, session, tenant, actor, environments) = (
            store.clone(),
            session.clone(),
            tenant.clone(),
            actor.clone(),
            environments.clone(),
        );
        async move {
            matches!(
                crate::auth::dashboard::current(&store, &session).await,
                Ok(Some(p)) if p.tenant_id == tenant && p.actor_id == actor
                    && p.environments == environments
            )
        }
    };
    Ok(live(
        state.events.subscribe(),
        state.draining.subscribe(),
        Listener::of(&p),
        still,
    ))
}
