//! `/upstreams` routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use aperture_types::dto::{RegisterUpstreamRequest, SyncReport};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::upstream;

/// `GET /upstreams`: status and endpoints, never secrets.
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        json!({ "upstreams": upstream::list(&state.store, &p).await? }),
    ))
}

/// `POST /upstreams` → 201 with the upstream and what its first sync imported.
pub async fn register(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<RegisterUpstreamRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (view, report) = state
        .upstreams
        .register(&state.store, &state.journal, &p, &request)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "upstream": view, "sync": report })),
    ))
}

/// `POST /upstreams/{id}:sync`
pub async fn sync(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<SyncReport>, ApiError> {
    Ok(Json(
        state
            .upstreams
            .sync(&state.store, &state.journal, &p, &id)
            .await?,
    ))
}

/// `DELETE /upstreams/{id}` → the tools it took out of the catalog.
pub async fn remove(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let removed = state
        .upstreams
        .remove(&state.store, &state.journal, &p, &id)
        .await?;
    Ok(Json(json!({ "removed_tools": removed })))
}

/// `PUT /upstreams/{id}/credentials` → the upstream (never the values).
pub async fn set_credentials(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<upstream::CredentialsRequest>,
) -> Result<Json<Value>, ApiError> {
    let view = state
        .upstreams
        .set_credentials(&state.store, &state.journal, &p, &id, &request)
        .await?;
    Ok(Json(json!({ "upstream": view })))
}
