//! `/tools` and `/catalog` routes.

use axum::Json;
use axum::extract::{Path, State};
use engine::descriptor::ToolDescriptor;
use serde_json::{Value, json};

use aperture_types::dto::{
    CatalogItemsView, DescribeToolRequest, DriftDecisionRequest, DriftDecisionView,
    ItemChangeRequest, ItemDecisionView, ToolRowView,
};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::catalog;

/// `GET /tools`: the catalog with every descriptor, held tools with their triage.
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    let tools: Vec<ToolRowView> = catalog::list(&state.store, &p).await?;
    Ok(Json(json!({ "tools": tools })))
}

/// `PUT /tools/{name}`: the server-owned descriptor (admin, journaled).
pub async fn describe(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<DescribeToolRequest>,
) -> Result<Json<ToolDescriptor>, ApiError> {
    Ok(Json(
        catalog::describe(&state.store, &state.journal, &p, &name, &request).await?,
    ))
}

/// `POST /tools/{name}:accept`: the held definition becomes the accepted one (admin, journaled).
pub async fn accept(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<DriftDecisionView>, ApiError> {
    // The body is optional: none, or `{"definition_hash"}`.
    let request: DriftDecisionRequest = super::json::optional_json(&body)?;
    Ok(Json(
        catalog::accept(&state.store, &state.journal, &p, &name, &request).await?,
    ))
}

/// `POST /tools/{name}:keep-held`: the tool stays out of manifests (admin, journaled).
pub async fn keep_held(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<DriftDecisionView>, ApiError> {
    // The body is optional: none, or `{"definition_hash"}`.
    let request: DriftDecisionRequest = super::json::optional_json(&body)?;
    Ok(Json(
        catalog::keep_held(&state.store, &state.journal, &p, &name, &request).await?,
    ))
}

/// `GET /catalog/items`: every resource, template and prompt, held ones with their triage.
pub async fn items(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<CatalogItemsView>, ApiError> {
    Ok(Json(catalog::items(&state.store, &p).await?))
}

/// `POST /catalog/items:accept`: an item's held definition becomes the accepted one (admin,
/// journaled).
pub async fn accept_item(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<ItemChangeRequest>,
) -> Result<Json<ItemDecisionView>, ApiError> {
    Ok(Json(
        catalog::accept_item(&state.store, &state.journal, &p, &request).await?,
    ))
}

/// `POST /catalog/items:keep-held`: the item stays out of listings and reads (admin,
/// journaled).
pub async fn keep_item_held(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<ItemChangeRequest>,
) -> Result<Json<ItemDecisionView>, ApiError> {
    Ok(Json(
        catalog::keep_item_held(&state.store, &state.journal, &p, &request).await?,
    ))
}

/// `GET /catalog/drift`: the tenant's drift triage (admin).
pub async fn drift_settings(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(catalog::drift_settings(&state.store, &p).await?))
}

/// `PUT /catalog/drift`: replaces the tenant's drift triage (admin, journaled).
pub async fn put_drift_settings(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(document): ApiJson<Value>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        catalog::put_drift_settings(&state.store, &state.journal, &p, &document).await?,
    ))
}
