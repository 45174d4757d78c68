//! `/users` routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use aperture_types::dto::{CreateUserRequest, UpdateScopesRequest, UserView};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::users;

/// `GET /users`
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    let list: Vec<UserView> = users::list(&state.store, &p).await?;
    Ok(Json(serde_json::json!({ "users": list })))
}

/// `POST /users` → 201
pub async fn create(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<CreateUserRequest>,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    let user = users::create(&state.store, &state.journal, &state.passwords, &p, &request).await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// `PUT /users/{username}/scopes`
pub async fn update_scopes(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(username): Path<String>,
    ApiJson(request): ApiJson<UpdateScopesRequest>,
) -> Result<Json<UserView>, ApiError> {
    Ok(Json(
        users::update_scopes(&state.store, &state.journal, &p, &username, &request).await?,
    ))
}
