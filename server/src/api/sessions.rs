//! `/sessions` routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use serde_json::{Value, json};

use aperture_types::dto::{CreateSessionRequest, SessionView};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::exposure;

/// `GET /sessions`
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    let sessions: Vec<SessionView> = exposure::list(&state.store, &p).await?;
    Ok(Json(json!({ "sessions": sessions })))
}

/// `POST /sessions` → 201 with the first manifest, shaped like MCP `tools/list`. The body is
/// optional.
pub async fn create(
    State(state): State<AppState>,
    Caller(p): Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: CreateSessionRequest = super::json::optional_json(&body)?;
    let grant = exposure::create(
        &state.store,
        &state.journal,
        &state.validators,
        &p,
        &request,
        exposure::Listing::default(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(grant.list_result())))
}

/// `POST /sessions/{id}/calls`: the same fields as MCP `tools/call` (`name`, `arguments`,
/// `_meta`); the answer is the tool result, denials included (with their receipt).
pub async fn call(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    ApiJson(call): ApiJson<aperture_core::calls::ToolCall>,
) -> Result<Json<Value>, ApiError> {
    let cx = state.call_context();
    Ok(Json(
        aperture_core::calls::call(&cx, &p, Some(&id), &call).await?,
    ))
}

/// `GET /sessions/{id}`
pub async fn get(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(exposure::get(&state.store, &p, &id).await?))
}

/// `GET /sessions/{id}/manifest`
pub async fn manifest(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        exposure::manifest_document(&state.store, &p, &id).await?,
    ))
}

/// `POST /sessions/{id}:revoke`
pub async fn revoke(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(
        exposure::revoke(&state.store, &state.journal, &p, &id).await?,
    ))
}

/// `POST /sessions/{id}/forks` → 201 with the child's manifest (and its restriction notice).
pub async fn fork(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: aperture_types::dto::ForkRequest = super::json::optional_json(&body)?;
    let grant = exposure::fork(&state.store, &state.journal, &p, &id, &request).await?;
    Ok((StatusCode::CREATED, Json(grant.list_result())))
}

/// Query of `GET /sessions/{id}/evidence`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceQuery {
    #[serde(default)]
    disclosures: Option<String>,
}

/// Reads `?disclosures=`: `true`/`false` (also `1/0`, `yes/no`, `on/off`).
pub(crate) fn disclosures_flag(value: Option<&str>) -> Result<bool, ApiError> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None | Some("false" | "0" | "no" | "off") => Ok(false),
        Some("true" | "1" | "yes" | "on") => Ok(true),
        Some(_) => Err(ApiError(aperture_types::error::AppError::invalid_field(
            "disclosures",
            "true or false",
        ))),
    }
}

/// `GET /sessions/{id}/evidence[?disclosures=true]`: the session's evidence bundle, RFC 8785.
pub async fn evidence(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    query: Result<axum::extract::Query<EvidenceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let axum::extract::Query(q) = query.map_err(|e| {
        ApiError(aperture_types::error::AppError::new(
            aperture_types::error::ErrorCode::BadRequest,
            e.body_text(),
        ))
    })?;
    let disclosures = disclosures_flag(q.disclosures.as_deref())?;
    let bytes = aperture_core::evidence::bundle(&state, &p, &id, disclosures).await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response())
}
