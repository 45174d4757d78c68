//! Security headers on every response: dashboard, API, MCP and gRPC.
//!
//! Pages get a `Content-Security-Policy` whose scripts must carry this response's nonce (Leptos
//! puts it on the hydration script and on every streamed chunk's script): no inline script an
//! attacker smuggles into a page runs, `'wasm-unsafe-eval'` lets the page compile its own wasm
//! and nothing else, styles come from the site's stylesheet only (no `style` attributes), and
//! no other site may frame a page. Everything else (JSON, files) gets `default-src 'none'`.
//! Every response also says `nosniff` and `Referrer-Policy: same-origin` (the form that signs in
//! without the wasm goes back to the page it came from by its `Referer`, so same-origin
//! referrers stay), and HSTS when cookies are `Secure` (the server is reached over TLS).

use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;
use rand::RngCore as _;

/// The nonce of one response, in the request's extensions for the page renderer
/// ([`leptos_nonce`]).
#[derive(Debug, Clone)]
pub struct CspNonce(pub String);

/// The policy of an HTML page whose scripts carry `nonce` (`None`: no inline script runs).
pub fn page_policy(nonce: Option<&str>) -> String {
    let nonce = nonce.map(|n| format!(" 'nonce-{n}'")).unwrap_or_default();
    format!(
        "default-src 'self'; script-src 'self'{nonce} 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// The policy of everything that is not a page: it may load nothing and be framed by nobody.
pub const OTHER_POLICY: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'";

/// Middleware: makes a nonce for the request and sets the headers on its response.
pub async fn security_headers(hsts: bool, mut request: Request, next: Next) -> Response {
    // Pages are rendered for GET (and HEAD) only: other requests (REST calls among them) need
    // no nonce, and an HTML answer to one runs no inline script.
    let nonce = matches!(*request.method(), Method::GET | Method::HEAD).then(|| {
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    });
    if let Some(nonce) = &nonce {
        request.extensions_mut().insert(CspNonce(nonce.clone()));
    }
    let mut response = next.run(request).await;
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    let policy = if is_html {
        page_policy(nonce.as_deref())
    } else {
        OTHER_POLICY.to_owned()
    };
    let headers = response.headers_mut();
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if hsts {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    response
}

/// In the page renderer's context: makes Leptos use the nonce the policy names (Leptos makes
/// its own per page otherwise, which the header could not know).
pub fn leptos_nonce() {
    use leptos::prelude::{provide_context, use_context};
    let nonce = use_context::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<CspNonce>().cloned());
    if let Some(CspNonce(nonce)) = nonce {
        provide_context(leptos::nonce::Nonce::from_value(nonce));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_allows_no_inline_script_or_style() {
        let p = page_policy(Some("abc"));
        assert!(!p.contains("unsafe-inline"), "{p}");
        assert!(!p.contains("'unsafe-eval'"), "{p}");
        assert!(p.contains("script-src 'self' 'nonce-abc' 'wasm-unsafe-eval';"));
        assert!(p.contains("style-src 'self';"));
        assert!(p.ends_with("frame-ancestors 'none'"));
        let without = page_policy(None);
        assert!(
            without.contains("script-src 'self' 'wasm-unsafe-eval';"),
            "{without}"
        );
    }
}
