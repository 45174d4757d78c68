//! The error of the server's services, and how it reaches each boundary.
//!
//! Services return [`ServiceError`]: either an [`AppError`] meant for the caller (a 4xx with a
//! message and field paths) or an internal failure (database, I/O, a bug). Internal failures are
//! logged and become a generic 500 (or 503 when the database is unreachable): their text never
//! reaches the caller.

use app::error::{AppError, ErrorCode};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// What a service can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// For the caller, as is (its code gives the status).
    #[error("{0}")]
    App(#[from] AppError),
    /// The database failed; logged, then 503 when it is unreachable, else 500.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Anything else; logged, then 500.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
    /// What a call was decided on changed in the store before its decision was journaled
    /// ([`crate::store::cache::assumed`]); nothing was recorded or run, and the call is decided
    /// again on a confirmed read. Should it escape, 503.
    #[error("the call was decided on out-of-date reads")]
    StaleRead,
}

impl From<crate::journal::JournalError> for ServiceError {
    fn from(e: crate::journal::JournalError) -> Self {
        tracing::error!(error = %e, "the journal cannot record");
        Self::App(AppError::new(
            ErrorCode::Unavailable,
            "the journal cannot record right now, so nothing was changed; try again shortly",
        ))
    }
}

impl ServiceError {
    /// The caller's view, logging what must not be shown.
    pub fn into_app_error(self) -> AppError {
        match self {
            Self::App(e) => e,
            Self::Db(
                e @ (sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_)),
            ) => {
                tracing::error!(error = %e, "database unavailable");
                AppError::new(
                    ErrorCode::Unavailable,
                    "the database is unavailable; try again shortly",
                )
            }
            Self::Db(e) => {
                tracing::error!(error = %e, "database error");
                AppError::internal()
            }
            Self::Other(e) => {
                tracing::error!(error = ?e, "internal error");
                AppError::internal()
            }
            Self::StaleRead => AppError::new(
                ErrorCode::Unavailable,
                "what this call depends on changed while it was decided; try again",
            ),
        }
    }
}

/// The `WWW-Authenticate` challenge of a 401 for want of a bearer token: REST, Connect and gRPC
/// (as metadata) give the same.
pub const BEARER_CHALLENGE: &str = "Bearer realm=\"aperture\"";

/// An [`AppError`] as a REST response: `{"error": {...}}` with its status.
#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        Self(e.into_app_error())
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        Self(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response =
            (status, axum::Json(serde_json::json!({ "error": self.0 }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static(BEARER_CHALLENGE),
            );
        }
        response
    }
}
