//! How service errors reach an HTTP caller: [`ApiError`], a REST response
//! `{"error": {...}}` with its status, and the bearer challenge of a 401.

use aperture_types::error::AppError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use aperture_core::error::ServiceError;

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
