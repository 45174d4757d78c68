//! The error of the services (how it reaches an HTTP caller: the server's `reply`).
//!
//! Services return [`ServiceError`]: either an [`AppError`] meant for the caller (a 4xx with a
//! message and field paths) or an internal failure (database, I/O, a bug). Internal failures are
//! logged and become a generic 500 (or 503 when the database is unreachable): their text never
//! reaches the caller.

use aperture_types::error::{AppError, ErrorCode};

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
    /// A 2026-07-28 header that mirrors the request says something else than its body
    /// ([`engine::headers`]); nothing was decided or recorded. `/mcp` answers HTTP 400 with
    /// -32020; elsewhere, 400.
    #[error("{0}")]
    HeaderMismatch(String),
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
            Self::HeaderMismatch(why) => AppError::new(ErrorCode::BadRequest, why),
            Self::StaleRead => AppError::new(
                ErrorCode::Unavailable,
                "what this call depends on changed while it was decided; try again",
            ),
        }
    }
}

impl From<ServiceError> for AppError {
    /// [`ServiceError::into_app_error`]: the caller's view, logging what must not be shown.
    fn from(e: ServiceError) -> Self {
        e.into_app_error()
    }
}
