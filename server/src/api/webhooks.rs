//! `/webhooks` routes (admin).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use aperture_types::dto::{CreateWebhookRequest, CreatedWebhook};
use aperture_types::error::{AppError, ErrorCode};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;

/// `GET /webhooks` → `{"webhooks": [...]}`: never the secrets.
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    let list = state.webhooks.list(&state.store, &p).await?;
    Ok(Json(json!({ "webhooks": list })))
}

/// `POST /webhooks` → 201 `{"webhook", "secret"}` (the secret shown this once).
pub async fn create(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<CreateWebhookRequest>,
) -> Result<(StatusCode, Json<CreatedWebhook>), ApiError> {
    let created = state
        .webhooks
        .create(&state.store, &state.journal, &p, &request)
        .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// `DELETE /webhooks/{id}` → `{"webhook"}` as it was.
pub async fn delete(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gone = state
        .webhooks
        .delete(&state.store, &state.journal, &p, &id)
        .await?;
    Ok(Json(json!({ "webhook": gone })))
}

/// Query of `GET /webhooks/{id}/deliveries`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    limit: Option<i64>,
}

/// `GET /webhooks/{id}/deliveries?limit` → `{"deliveries": [...]}`, newest first, each with
/// its attempts.
pub async fn deliveries(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    query: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| AppError::new(ErrorCode::BadRequest, e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(AppError::invalid_field("limit", "between 1 and 500").into());
    }
    let list = state
        .webhooks
        .deliveries(&state.store, &p, &id, limit)
        .await?;
    Ok(Json(json!({ "deliveries": list })))
}
