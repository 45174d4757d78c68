//! Cross-site request forgery protection for browser requests.
//!
//! Cookies are `SameSite=Lax`, and on top of that every state-changing request must come from
//! this site: `Sec-Fetch-Site` must be `same-origin` (or `none`, typed by the user), or, for
//! browsers that do not send it, `Origin` must name this host. Server functions are covered like
//! every other route. The only exception is a request with a bearer token to a route that
//! authenticates by bearer token alone (the API mounts): it carries its own credentials and no
//! cookie counts there. Any other `Authorization` (a browser adds Basic or Negotiate by itself)
//! changes nothing.

use axum::extract::Request;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use aperture_types::error::{AppError, ErrorCode};

use crate::reply::ApiError;

/// The middleware; `bearer_routes`: the path prefixes of the routes that authenticate by
/// bearer token alone.
pub async fn protect(
    axum::extract::State(bearer_routes): axum::extract::State<&'static [&'static str]>,
    request: Request,
    next: Next,
) -> Response {
    if is_safe(request.method()) || carries_own_credentials(&request, bearer_routes) {
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

/// A bearer token to a route that reads nothing else: no cookie of the user's counts there, so
/// a cross-site page gains nothing by sending it.
fn carries_own_credentials(request: &Request, bearer_routes: &[&str]) -> bool {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.get(..7)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer "))
        });
    let path = request.uri().path();
    bearer
        && bearer_routes
            .iter()
            .any(|prefix| path == *prefix || path.starts_with(&format!("{prefix}/")))
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

    /// Issue 45 (item 12): a browser adds `Authorization: Basic …` (or Negotiate) to a
    /// cross-site form post by itself; only a bearer token to a bearer-only route skips the check.
    #[test]
    fn only_a_bearer_token_to_a_bearer_route_skips_the_check() {
        let routes: &[&str] = &["/api/v2/agent-tool-exposure"];
        let post = |path: &str, authorization: &str| {
            Request::builder()
                .method("POST")
                .uri(path)
                .header("authorization", authorization)
                .body(Body::empty())
                .unwrap()
        };
        assert!(carries_own_credentials(
            &post("/api/v2/agent-tool-exposure/tokens", "Bearer apt_x"),
            routes
        ));
        for (path, authorization) in [
            ("/ui/tokens/create", "Basic dXNlcjpwYXNz"),
            ("/ui/tokens/create", "Negotiate YII"),
            ("/ui/tokens/create", "Bearer apt_x"),
            ("/api/v2/agent-tool-exposure/tokens", "Basic dXNlcjpwYXNz"),
            ("/api/v2/agent-tool-exposure-evil", "Bearer apt_x"),
        ] {
            assert!(
                !carries_own_credentials(&post(path, authorization), routes),
                "{path} {authorization}"
            );
        }
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
