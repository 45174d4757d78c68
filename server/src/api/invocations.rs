//! `/invocations` routes: read parked and finished invocations, approve or reject parked ones
//! (CONTRACT §8). A principal with `:read` or `:approve` sees the tenant's invocations; one with
//! only `:run` sees its own (another actor's look exactly like missing ones).

use axum::Json;
use axum::extract::{Path, Query, State};
use engine::scope;
use serde::Deserialize;
use serde_json::{Value, json};

use app::error::{AppError, ErrorCode};

use super::{ApiJson, Caller};
use crate::auth::Principal;
use crate::error::{ApiError, ServiceError};
use crate::invocations::{self, Action, DecideRequest};
use crate::state::AppState;
use crate::store::invocations as rows;

/// Statuses a list may be filtered by.
const STATUSES: [&str; 13] = [
    "input_required",
    "approving",
    "approved",
    "staged",
    "applying",
    "confirmation_required",
    "running",
    "completed",
    "rejecting",
    "rejected",
    "expiring",
    "expired",
    "invalidated",
];

/// Query of `GET /invocations`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    limit: Option<i64>,
}

/// The actor whose invocations `p` may read: `None` for all of the tenant's (readers and
/// approvers, who must see the queue).
fn readable_actor(p: &Principal) -> Option<&str> {
    (!p.scopes.satisfies(scope::READ) && !p.scopes.satisfies(scope::APPROVE))
        .then_some(p.actor_id.as_str())
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
        && !STATUSES.contains(&status.as_str())
    {
        return Err(
            AppError::invalid_field("status", format!("one of {}", STATUSES.join(", "))).into(),
        );
    }
    let found = rows::list(
        &state.store,
        &p.tenant_id,
        q.status.as_deref(),
        readable_actor(&p),
        limit,
    )
    .await
    .map_err(ServiceError::from)?;
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
    let row = rows::find(&state.store, &p.tenant_id, &id)
        .await
        .map_err(ServiceError::from)?
        .filter(|r| readable_actor(&p).is_none_or(|actor| actor == r.actor_id))
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
            &state.invocation_wake,
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
            &state.invocation_wake,
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
            &state.invocation_wake,
            &p,
            &id,
            Action::Reject,
            request,
        )
        .await?,
    ))
}
