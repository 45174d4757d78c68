//! `/agents` routes (CONTRACT §12): hosted agents and their turns.

use std::convert::Infallible;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};

use aperture_types::error::AppError;

use super::{ApiJson, Caller};
use crate::reply::ApiError;
use crate::state::AppState;
use aperture_core::agents::runtime::{self, AgentView, CreateAgentRequest, Events, TurnRequest};

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
) -> Result<Json<runtime::AgentDetail>, ApiError> {
    Ok(Json(runtime::get(&state, &p, &id).await?))
}

/// `POST /agents/{id}/turns` `{"message"}` → the turn's events: as one JSON document, or, with
/// `Accept: text/event-stream`, streamed as server-sent events while the turn runs (first
/// `turn` with its id, then one event per [`runtime::Event`] named by its `type`, ending with
/// `turn_end`; `error` if the end could not be recorded). A refused turn (404, 409, 422, 503)
/// is refused before anything streams. The turn runs to its end even if the client goes away.
pub async fn turn(
    State(state): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<TurnRequest>,
) -> Result<Response, ApiError> {
    let model = state.model.clone();
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    let started = runtime::start_turn(&state, model.as_deref(), &p, &id, request).await?;
    if !wants_stream {
        // Its own task: the turn runs to its end even if the client goes away.
        let view = tokio::spawn(started.run(Events::default()))
            .await
            .map_err(|_| AppError::internal())??;
        return Ok(Json(view).into_response());
    }
    let head = sse_event("turn", &json!({"turn_id": started.turn_id, "agent_id": id}));
    let (listener, events) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(started.run(Events::streaming(listener)));
    let rest = stream::unfold((events, Some(task)), |(mut events, task)| async move {
        if let Some(event) = events.recv().await {
            let value = serde_json::to_value(&event).unwrap_or(Value::Null);
            let name = value["type"].as_str().unwrap_or("event").to_owned();
            return Some((sse_event(&name, &value), (events, task)));
        }
        // Every event was sent; the turn has ended (or is ending).
        let error = match task?.await {
            Ok(Ok(_)) => return None,
            Ok(Err(e)) => e.into_app_error(),
            Err(_) => AppError::internal(),
        };
        Some((
            sse_event(
                "error",
                &json!({"code": error.code, "message": error.message}),
            ),
            (events, None),
        ))
    });
    Ok(Sse::new(stream::once(async move { head }).chain(rest))
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn sse_event(name: &str, data: &Value) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().event(name).data(data.to_string()))
}
