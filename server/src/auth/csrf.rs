//! Cross-site request forgery protection for browser requests.
//!
//! Cookies are `SameSite=Lax`, and on top of that every state-changing request that does not
//! carry its own credentials (`Authorization`) must come from this site: `Sec-Fetch-Site` must be
//! `same-origin` (or `none`, typed by the user), or, for browsers that do not send it, `Origin`
//! must name this host. Server functions are covered like every other route.

use axum::extract::Request;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use app::error::{AppError, ErrorCode};

use crate::error::ApiError;

/// The middleware.
pub async fn protect(request: Request, next: Next) -> Response {
    if is_safe(request.method()) || request.headers().contains_key(header::AUTHORIZATION) {
        return next.run(request).await;
    }
    match verdict(&request) {
        Ok(()) => next.run(request).await,
        Err(why) => {
            tracing::warn!(method = %request.method(), path = %request.uri().path(), why, "cross-site request refused");
            ApiError(AppError::new(
                ErrorCode::PermissionDenied,
                format!("cross-site request refused: {why}"),
            ))
            .into_response()
        }
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn verdict(request: &Request) -> Result<(), &'static str> {
    let headers = request.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        return match site.as_bytes() {
            b"same-origin" | b"none" => Ok(()),
            _ => Err("Sec-Fetch-Site is not same-origin"),
        };
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        // No browser sends a cross-site POST without Origin; a client without either header is
        // not a browser acting on someone's cookie.
        return Ok(());
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'));
    match (origin_host, host) {
        (Some(o), Some(h)) if o.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err("Origin does not match Host"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn req(headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method("POST").uri("/ui/tokens/create");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn same_origin_passes_and_cross_site_fails() {
        assert!(verdict(&req(&[("sec-fetch-site", "same-origin")])).is_ok());
        assert!(verdict(&req(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(verdict(&req(&[("sec-fetch-site", "same-site")])).is_err());
        assert!(
            verdict(&req(&[
                ("host", "127.0.0.1:3000"),
                ("origin", "http://127.0.0.1:3000")
            ]))
            .is_ok()
        );
        assert!(
            verdict(&req(&[
                ("host", "127.0.0.1:3000"),
                ("origin", "https://evil.example")
            ]))
            .is_err()
        );
        assert!(verdict(&req(&[("host", "127.0.0.1:3000"), ("origin", "null")])).is_err());
    }
}
