//! `/tokens` routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use aperture_types::dto::{CreateTokenRequest, CreatedToken, TokenView};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::tokens;

/// `GET /tokens`
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    let list: Vec<TokenView> = tokens::list(&state.store, &p).await?;
    Ok(Json(serde_json::json!({ "tokens": list })))
}

/// `POST /tokens` → 201 with the secret (shown once).
pub async fn create(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let created = tokens::create(&state.store, &state.journal, &p, &request).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// `DELETE /tokens/{id}`
pub async fn revoke(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<TokenView>, ApiError> {
    Ok(Json(
        tokens::revoke(&state.store, &state.journal, &p, &id).await?,
    ))
}
