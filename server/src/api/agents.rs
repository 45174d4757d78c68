//! `/agents` routes (CONTRACT §12): hosted agents and their turns.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiJson, Caller};
use crate::agents::runtime::{self, AgentView, CreateAgentRequest, TurnRequest, TurnView};
use crate::error::ApiError;
use crate::state::AppState;

/// `POST /agents` → 201.
pub async fn create(
    State(state): State<AppState>,
    Caller(p): Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<AgentView>), ApiError> {
    let request: CreateAgentRequest = super::json::optional_json(&body)?;
    Ok((
        StatusCode::CREATED,
        Json(runtime::create(&state, &p, request).await?),
    ))
}

/// `GET /agents`
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "agents": runtime::list(&state, &p).await? })))
}

/// `GET /agents/{id}`: the agent, transcript, turns, forks and invocations.
pub async fn get(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(runtime::get(&state, &p, &id).await?))
}

/// `POST /agents/{id}/turns` `{"message"}` → the turn's events.
pub async fn turn(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<TurnRequest>,
) -> Result<Json<TurnView>, ApiError> {
    let model = state.model.clone();
    Ok(Json(
        runtime::run_turn(&state, model.as_deref(), &p, &id, request).await?,
    ))
}
