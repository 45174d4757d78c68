//! `/journal/…` routes (CONTRACT §13) and the latest checkpoint at
//! `/.well-known/aperture/checkpoints/{tenant}`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use aperture_types::error::{AppError, ErrorCode};

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::transparency::{self, CosignedNote, NewWitness};

fn bad_query(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError(AppError::new(ErrorCode::BadRequest, e.body_text()))
}

/// Query of `GET /journal/checkpoints`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

/// `GET /journal/checkpoints` → `{"checkpoints": [{"tree_size", "note", "made_at"}]}`.
pub async fn checkpoints(
    State(state): State<AppState>,
    Caller(p): Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let list = transparency::list(&state, &p, q.before, q.limit.unwrap_or(50)).await?;
    Ok(Json(json!({ "checkpoints": list })))
}

/// Query of `GET /journal/proofs/inclusion`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionQuery {
    seq: Option<i64>,
    tree_size: Option<i64>,
}

/// `GET /journal/proofs/inclusion?seq&tree_size`.
pub async fn inclusion(
    State(state): State<AppState>,
    Caller(p): Caller,
    query: Result<Query<InclusionQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<transparency::Proof>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    Ok(Json(
        transparency::inclusion(&state, &p, q.seq, q.tree_size).await?,
    ))
}

/// Query of `GET /journal/proofs/consistency`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyQuery {
    from: Option<i64>,
    to: Option<i64>,
}

/// `GET /journal/proofs/consistency?from&to`.
pub async fn consistency(
    State(state): State<AppState>,
    Caller(p): Caller,
    query: Result<Query<ConsistencyQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<transparency::Proof>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    Ok(Json(
        transparency::consistency(&state, &p, q.from, q.to).await?,
    ))
}

/// `POST /journal/checkpoints/cosignatures` `{"note"}`.
pub async fn cosign(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<CosignedNote>,
) -> Result<Json<transparency::Cosigned>, ApiError> {
    Ok(Json(transparency::cosign(&state, &p, request).await?))
}

/// `POST /journal/witnesses` `{"name", "key"}` → 201.
pub async fn add_witness(
    State(state): State<AppState>,
    Caller(p): Caller,
    ApiJson(request): ApiJson<NewWitness>,
) -> Result<(StatusCode, Json<transparency::WitnessView>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(transparency::add_witness(&state, &p, request).await?),
    ))
}

/// `GET /journal/witnesses` → `{"witnesses": [{"name", "key", "created_at"}]}`.
pub async fn witnesses(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<Value>, ApiError> {
    let list = transparency::witnesses(&state, &p).await?;
    Ok(Json(json!({ "witnesses": list })))
}

/// `DELETE /journal/witnesses/{name}`.
pub async fn remove_witness(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    transparency::remove_witness(&state, &p, &name).await?;
    Ok(Json(json!({ "removed": name })))
}

/// `GET /.well-known/aperture/checkpoints/{tenant}`: the latest checkpoint note (with its
/// cosignatures), `text/plain`. It tells whether a tenant exists and how fast its journal
/// grows, so it needs a token of that tenant with `:read` or `:witness`, unless the operator
/// publishes checkpoints (`APERTURE_PUBLIC_CHECKPOINTS`). A tenant that does not exist, has no
/// checkpoint or is not the token's answers the same 404.
pub async fn latest(
    State(state): State<AppState>,
    Path(tenant): Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let not_found = || ApiError(AppError::not_found("checkpoint"));
    if !state.config.public_checkpoints {
        let secret = super::bearer(&headers).ok_or_else(|| {
            ApiError(AppError::new(
                ErrorCode::Unauthenticated,
                "a bearer token is required",
            ))
        })?;
        let p = crate::auth::principal::authenticate_bearer(&state.store, secret).await?;
        if p.tenant_id != tenant {
            return Err(not_found());
        }
        p.require_any(&[engine::scope::READ, engine::scope::WITNESS])?;
    }
    let note = transparency::latest_note(&state, &tenant)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(not_found)?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], note).into_response())
}
