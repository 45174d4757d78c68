//! `/tools` routes.

use axum::Json;
use axum::extract::{Path, State};
use engine::descriptor::ToolDescriptor;
use serde_json::{Value, json};

use app::dto::DescribeToolRequest;

use super::{ApiJson, Caller};
use crate::catalog;
use crate::error::ApiError;
use crate::state::AppState;

/// `GET /tools`: the catalog with every descriptor.
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    let tools: Vec<ToolDescriptor> = catalog::list(&state.store, &p).await?;
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
