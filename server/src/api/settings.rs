//! `/settings/…` routes: a tenant's settings (admin, journaled).

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::settings;

/// `GET /settings/mcp`: how `/mcp` binds calls and names tools (admin).
pub async fn mcp(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(settings::mcp::get(&state.store, &p).await?))
}

/// `PUT /settings/mcp`: replaces the tenant's MCP settings (admin, journaled).
pub async fn put_mcp(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(document): ApiJson<Value>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        settings::mcp::put(&state.store, &state.journal, &p, &document).await?,
    ))
}
