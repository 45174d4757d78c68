//! `/policies` routes.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use aperture_types::dto::{ActivateRequest, PolicySummary, PolicyVersionView, ValidationResult};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::policies;

/// `GET /policies`
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    let list: Vec<PolicySummary> = policies::list(&state.store, &p).await?;
    Ok(Json(json!({ "policies": list })))
}

/// `GET /policies/{id}`
pub async fn get(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<PolicyVersionView>, ApiError> {
    Ok(Json(policies::get(&state.store, &p, &id).await?))
}

/// `GET /policies/{id}/versions`
pub async fn versions(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let versions = policies::versions(&state.store, &p, &id).await?;
    Ok(Json(json!({ "versions": versions })))
}

/// `PUT /policies/{id}`: a new immutable version.
pub async fn put(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    ApiJson(document): ApiJson<Value>,
) -> Result<Json<PolicyVersionView>, ApiError> {
    Ok(Json(
        policies::put(
            &state.store,
            &state.journal,
            &p,
            &id,
            document,
            &state.config.capabilities(),
        )
        .await?,
    ))
}

/// `POST /policies/{id}:activate`
pub async fn activate(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<PolicySummary>, ApiError> {
    // The body is optional: no body means the `default` environment.
    let request: ActivateRequest = super::json::optional_json(&body)?;
    Ok(Json(
        policies::activate(&state.store, &state.journal, &p, &id, &request).await?,
    ))
}

/// `POST /policies:validate`
pub async fn validate(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(document): ApiJson<Value>,
) -> Result<Json<ValidationResult>, ApiError> {
    Ok(Json(policies::validate_document(
        &p,
        document,
        &state.config.capabilities(),
    )?))
}

/// `POST /policies:preview`
pub async fn preview(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<aperture_types::dto::PreviewRequest>,
) -> Result<Json<engine::preview::Preview>, ApiError> {
    p.require(engine::scope::READ)?;
    let items = aperture_core::items::Exposure::catalog(&state.store, &p.tenant_id).await?;
    Ok(Json(policies::preview(
        &p,
        request,
        &items,
        &state.config.capabilities(),
    )?))
}

/// `POST /policies:replay` `{"policy", "since"?, "until"?}`: what the draft would have
/// changed over the tenant's recorded calls (aperture_core::replay).
pub async fn replay(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<aperture_core::replay::ReplayRequest>,
) -> Result<Json<aperture_core::replay::ReplayReport>, ApiError> {
    Ok(Json(
        aperture_core::replay::replay(&state.store, &p, request).await?,
    ))
}
