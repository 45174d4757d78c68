//! `/receipts` routes and the public key set.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use aperture_types::error::AppError;

use super::Caller;
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::error::ServiceError;
use aperture_core::receipts;
use aperture_types::dto::ReceiptQuery;

/// `GET /.well-known/aperture/keys`: every public key that ever signed (JWK set).
pub async fn keys(
    State(state): State<AppState>,
) -> Result<Json<engine::receipt::JwkSet>, ApiError> {
    let set = state
        .journal
        .keys()
        .published()
        .await
        .map_err(ServiceError::from)?;
    Ok(Json(set))
}

/// Query of `GET /receipts`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    decision: Option<String>,
    reason: Option<String>,
    tool: Option<String>,
    session_id: Option<String>,
    actor_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

/// `GET /receipts`: newest first, `limit` (1–500, default 50), `next_cursor` for the next page.
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query
        .map_err(|e| AppError::new(aperture_types::error::ErrorCode::BadRequest, e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    let filter = receipts::filter(ReceiptQuery {
        decision: q.decision,
        reason: q.reason,
        tool: q.tool,
        actor_id: q.actor_id,
        session_id: q.session_id,
        since: q.since,
        until: q.until,
        cursor: q.cursor,
    })?;
    let (rows, next_cursor) = receipts::search(&state.store, &p, &filter, limit).await?;
    let page: Vec<Value> = rows
        .iter()
        .map(|r| serde_json::from_str(&r.receipt).unwrap_or(Value::Null))
        .collect();
    Ok(Json(
        json!({ "receipts": page, "next_cursor": next_cursor }),
    ))
}

/// `GET /receipts/{id}`: the receipt, its disclosures and its position in the chain.
pub async fn get(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(receipts::get(&state.store, &p, &id).await?))
}
