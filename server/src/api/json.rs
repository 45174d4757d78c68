//! A JSON body extractor whose rejections use the API's error shape.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use aperture_types::error::{AppError, ErrorCode};

use crate::reply::ApiError;

/// Like `axum::Json`, but a body that cannot be read answers `{"error": …}`: 413 when too large,
/// 400 for malformed JSON or a wrong content type, 422 (with the field path) when the JSON does
/// not fit the request type.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Self(v)),
            Err(rejection) => Err(ApiError(rejection_error(&rejection))),
        }
    }
}

fn rejection_error(rejection: &JsonRejection) -> AppError {
    let text = rejection.body_text();
    match rejection {
        JsonRejection::JsonDataError(_) => {
            // axum reports `<path>: <problem>` after a fixed preamble; keep the path for clients.
            let detail = text
                .split_once("target type: ")
                .map(|(_, d)| d)
                .unwrap_or(&text);
            let path = detail
                .split_once(": ")
                .map(|(p, _)| p)
                .filter(|p| !p.contains(' '))
                .unwrap_or("");
            if path.is_empty() || path == "." {
                AppError::new(ErrorCode::InvalidArgument, detail.to_owned())
            } else {
                AppError::invalid_field(
                    path,
                    detail.split_once(": ").map(|(_, m)| m).unwrap_or(detail),
                )
            }
        }
        _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            AppError::new(ErrorCode::PayloadTooLarge, "the request body is too large")
        }
        _ => AppError::new(ErrorCode::BadRequest, text),
    }
}

/// An optional JSON body: empty (or whitespace) means `T::default()`.
pub fn optional_json<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError(AppError::new(ErrorCode::InvalidArgument, e.to_string())))
}
