//! The error every dashboard server function and every REST route answers with.
//!
//! One type for both mounts keeps the messages a person sees in the dashboard and the ones a
//! machine gets from the API identical. On the wire (REST) it is
//! `{"error":{"code","message","details"?}}` (CONTRACT §8).

use serde::{Deserialize, Serialize};
use std::fmt;

/// What went wrong, as a stable machine-readable code. Each variant documents the HTTP status
/// the REST mount answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request could not be read at all (malformed JSON, wrong content type).
    BadRequest,
    /// 401: no credentials, or credentials that are unknown, revoked or expired.
    Unauthenticated,
    /// 403: authenticated, but a required scope is missing.
    PermissionDenied,
    /// 404: no such resource in the caller's tenant (another tenant's id looks exactly the same).
    NotFound,
    /// 409: the request conflicts with the current state (a name already taken).
    Conflict,
    /// 413: the request body is larger than the server accepts.
    PayloadTooLarge,
    /// 422: the request was read but a field is invalid; `details.fields` says which.
    InvalidArgument,
    /// 429: too many attempts; try again later.
    TooManyRequests,
    /// 503: a dependency (the database) is unavailable.
    Unavailable,
    /// 500: a bug or an unexpected failure; the message is generic and the cause is logged.
    Internal,
}

impl ErrorCode {
    /// The HTTP status of this code on the REST mount.
    pub fn http_status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthenticated => 401,
            Self::PermissionDenied => 403,
            Self::NotFound => 404,
            Self::Conflict => 409,
            Self::PayloadTooLarge => 413,
            Self::InvalidArgument => 422,
            Self::TooManyRequests => 429,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }
}

/// One invalid field: `path` is a JSON path into the request (`scopes[2]`, `password`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Where in the request the problem is.
    pub path: String,
    /// What is wrong, phrased for a person.
    pub message: String,
}

/// Extra information attached to an error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetails {
    /// Invalid fields, for `invalid_argument`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldError>,
}

/// An error as a person or a machine sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct AppError {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable summary.
    pub message: String,
    /// Field errors and similar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ErrorDetails>,
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl AppError {
    /// An error with a code and message and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// 422 with the given field errors.
    pub fn invalid(fields: Vec<FieldError>) -> Self {
        let message = match fields.as_slice() {
            [one] => format!("{}: {}", one.path, one.message),
            _ => format!("{} fields are invalid", fields.len()),
        };
        Self {
            code: ErrorCode::InvalidArgument,
            message,
            details: Some(ErrorDetails { fields }),
        }
    }

    /// 422 for one field.
    pub fn invalid_field(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid(vec![FieldError {
            path: path.into(),
            message: message.into(),
        }])
    }

    /// 401.
    pub fn unauthenticated() -> Self {
        Self::new(ErrorCode::Unauthenticated, "sign in required")
    }

    /// 403 naming the missing scope.
    pub fn missing_scope(scope: &str) -> Self {
        Self::new(
            ErrorCode::PermissionDenied,
            format!("this needs the scope {scope}"),
        )
    }

    /// 404.
    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    /// 500 with the generic message; log the cause before creating it.
    pub fn internal() -> Self {
        Self::new(
            ErrorCode::Internal,
            "internal error; the server log has the details",
        )
    }

    /// The message for one field, if this error names it.
    pub fn field(&self, path: &str) -> Option<&str> {
        self.details
            .as_ref()?
            .fields
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.message.as_str())
    }

    /// Whether this error is about individual fields (so the form shows them inline).
    pub fn has_fields(&self) -> bool {
        self.details.as_ref().is_some_and(|d| !d.fields.is_empty())
    }
}

#[cfg(feature = "server-fn")]
impl server_fn::error::FromServerFnError for AppError {
    type Encoder = server_fn::codec::JsonEncoding;

    fn from_server_fn_error(value: server_fn::error::ServerFnErrorErr) -> Self {
        use server_fn::error::ServerFnErrorErr as E;
        let code = match &value {
            E::Args(_) | E::Deserialization(_) | E::MissingArg(_) => ErrorCode::BadRequest,
            E::Request(_) | E::Registration(_) | E::Response(_) => ErrorCode::Unavailable,
            _ => ErrorCode::Internal,
        };
        Self::new(code, value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape_is_stable() {
        let err = AppError::invalid_field("scopes[1]", "bad");
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "code": "invalid_argument",
                "message": "scopes[1]: bad",
                "details": {"fields": [{"path": "scopes[1]", "message": "bad"}]}
            })
        );
        assert_eq!(err.field("scopes[1]"), Some("bad"));
        assert_eq!(ErrorCode::InvalidArgument.http_status(), 422);
    }
}
