//! The dashboard's routes beside its Leptos app: the guard in front of its pages, real HTTP
//! statuses for its server functions' errors, and its downloads (the receipts export, evidence
//! bundles). The server functions themselves live in `app` and call the core directly.

use aperture_types::dto::ReceiptQuery;
use aperture_types::error::AppError;
use tower_sessions::Session;

use crate::auth::dashboard;
use crate::state::AppState;
use aperture_core::error::ServiceError;
use aperture_core::receipts;

/// In front of the dashboard's pages: a signed-out `GET` of a page that needs a signed-in user
/// is answered `303 See Other` to `/sign-in?next=<that page>` before anything renders (Leptos'
/// own redirect, made while the page streams, comes too late for a status line: a browser
/// without the wasm saw a blank `200`), and `/sign-in` when already signed in goes on to its
/// `next` (local paths only, else `/`). A session store that cannot answer lets the page render
/// its own error.
pub async fn page_guard(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Session,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode, header};
    use axum::response::IntoResponse;
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let uri = request.uri();
    let on_sign_in = uri.path() == "/sign-in";
    let signed_in = match dashboard::current(&state.store, &session).await {
        Ok(p) => p.is_some(),
        Err(_) => return next.run(request).await,
    };
    let location = match (on_sign_in, signed_in) {
        (true, true) => app::layout::after_sign_in(uri.query().unwrap_or("")),
        (false, false) => {
            let here = uri.path_and_query().map_or("/", |pq| pq.as_str());
            app::layout::sign_in_path(here)
        }
        _ => return next.run(request).await,
    };
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// Gives server-function errors their real HTTP status. Leptos answers every server-function
/// error with 500; the body is our [`AppError`], whose code knows better (a wrong password is
/// 401, an invalid form 422). Leptos' client treats every 4xx/5xx the same, so only the status
/// line changes.
pub async fn server_fn_status(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR
        || !response.headers().contains_key("serverfnerror")
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        parts.status = StatusCode::INTERNAL_SERVER_ERROR;
        return axum::response::Response::from_parts(
            parts,
            axum::body::Body::from(r#"{"code":"internal","message":"internal error"}"#),
        );
    };
    if let Ok(err) = serde_json::from_slice::<AppError>(&bytes) {
        parts.status = StatusCode::from_u16(err.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// `GET /ui/receipts/export.jsonl?<filters>`: every receipt matching the dashboard's filters,
/// newest first, one signed receipt per line, streamed page by page (at most
/// [`receipts::MAX_EXPORT`]). Signed-in dashboard users with the read scope.
pub async fn export_receipts(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Session,
    query: Result<axum::extract::Query<ReceiptQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, crate::reply::ApiError> {
    use axum::http::header;
    let principal = dashboard::require(&state.store, &session).await?;
    let axum::extract::Query(query) = query
        .map_err(|e| AppError::new(aperture_types::error::ErrorCode::BadRequest, e.body_text()))?;
    let stream = receipts::export(state.store.clone(), principal, query)?;
    Ok(axum::response::Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"aperture-receipts.jsonl\"",
        )
        .body(axum::body::Body::from_stream(stream))
        .map_err(|e| ServiceError::Other(e.into()))?)
}

/// `GET /ui/sessions/{id}/evidence.json[?disclosures=true]`: the bundle as a download for
/// signed-in dashboard users (read, or run for their own sessions).
pub async fn download_evidence(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Session,
    axum::extract::Path(id): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<axum::response::Response, crate::reply::ApiError> {
    use axum::http::header;
    use axum::response::IntoResponse as _;
    let principal = dashboard::require(&state.store, &session).await?;
    let disclosures =
        crate::api::sessions::disclosures_flag(query.get("disclosures").map(String::as_str))?;
    let bytes = aperture_core::evidence::bundle(&state, &principal, &id, disclosures).await?;
    let name: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"evidence-{name}.json\""),
            ),
        ],
        bytes,
    )
        .into_response())
}
