//! `GET /metrics`: the node's metrics (`aperture_core::metrics`) in the Prometheus text format, for
//! the operator only.
//!
//! The endpoint is process-wide: upstream names and deny reasons of every tenant. It answers
//! only the operator's `APERTURE_METRICS_TOKEN` as a bearer token, never a tenant's API token,
//! and is not served at all without one. The gauges that describe shared state (invocations
//! waiting, the journal's chains) are read when the endpoint is asked.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::state::AppState;

/// `GET /metrics`: the node's metrics for `Authorization: Bearer <APERTURE_METRICS_TOKEN>`;
/// `401` for any other credential (a tenant's token included), `404` when no metrics token is
/// configured (the endpoint is off).
pub async fn serve(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(expected) = state.config.metrics_token.as_deref() else {
        return crate::reply::ApiError(aperture_types::error::AppError::new(
            aperture_types::error::ErrorCode::NotFound,
            "metrics are off: the operator sets APERTURE_METRICS_TOKEN to serve them",
        ))
        .into_response();
    };
    let presented = crate::api::bearer(&headers);
    // Compared as digests: the time taken says nothing about how much of the token matched.
    let matches = presented
        .is_some_and(|p| Sha256::digest(p.as_bytes()) == Sha256::digest(expected.as_bytes()));
    if !matches {
        let mut response = crate::reply::ApiError(aperture_types::error::AppError::new(
            aperture_types::error::ErrorCode::Unauthenticated,
            "metrics answer only the operator's APERTURE_METRICS_TOKEN, as a bearer token",
        ))
        .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"aperture-metrics\""),
        );
        return response;
    }
    let Some(handle) = aperture_core::metrics::install() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the metrics recorder is not installed",
        )
            .into_response();
    };
    refresh(&state).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// Sets the gauges read at scrape time. A database that does not answer leaves the last values
/// (the readiness check says the database is down).
async fn refresh(state: &AppState) {
    metrics::gauge!("aperture_journal_queue_depth").set(state.journal.queue_depth() as f64);
    match aperture_core::invocations::waiting(&state.store).await {
        Ok(rows) => {
            let now = aperture_core::clock::now_ms();
            for (status, label) in aperture_core::invocations::WAITING {
                let (count, oldest) = rows
                    .iter()
                    .find(|(s, _, _)| s == status)
                    .map_or((0, None), |(_, c, o)| (*c, *o));
                metrics::gauge!("aperture_invocations_waiting", "status" => *label)
                    .set(count as f64);
                let age = oldest.map_or(0.0, |o| (now - o).max(0) as f64 / 1000.0);
                metrics::gauge!("aperture_invocations_oldest_waiting_seconds", "status" => *label)
                    .set(age);
            }
        }
        Err(e) => tracing::warn!(error = %e, "reading waiting invocations for /metrics"),
    }
    for (tenant, status) in state.chain.statuses() {
        let ok = if status.first_bad.is_none() { 1.0 } else { 0.0 };
        metrics::gauge!("aperture_journal_chain_verified", "tenant" => tenant.clone()).set(ok);
        metrics::gauge!("aperture_journal_chain_verified_records", "tenant" => tenant)
            .set(status.verified as f64);
    }
}
