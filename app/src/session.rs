//! Who calls a server function (`ssr` only): the core's [`Services`] the server provides as
//! context, and the person behind the request's cookie session, with the scope the function
//! needs ([`caller`]). Signing in and out rotate and end that session; the password check and
//! its limits on guessing are the core's ([`aperture_core::sign_in`]).
//!
//! The session cookie is `HttpOnly`, `SameSite=Lax` (`__Host-` prefixed and `Secure` over TLS);
//! its layer and records are the server's. A sign-in lasts at most
//! [`aperture_core::sign_in::ABSOLUTE_MS`] whatever the activity.

use aperture_core::Store;
use aperture_core::error::ServiceError;
use aperture_core::principal::Principal;
use aperture_core::services::Services;
use aperture_core::sign_in::{self, Caller, ClientAddr, SESSION_KEY, SessionUser, SignedIn};
use tower_sessions::Session;

use crate::error::AppError;

pub mod device;

/// What a server function needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Anyone signed in; the service decides what they see (their own calls, sessions, …).
    SignedIn,
    /// Someone signed in with this scope.
    Scope(&'static str),
}

/// The services and the signed-in person for a server function needing `need`: 401 when nobody
/// is signed in, 403 without the scope.
pub async fn caller(need: Need) -> Result<(Services, Principal), AppError> {
    let services = services()?;
    let session = session().await?;
    let principal = require(&services.store, &session).await?;
    if let Need::Scope(scope) = need {
        principal.require(scope)?;
    }
    Ok((services, principal))
}

/// The node's services, which the server provides to every server function.
pub fn services() -> Result<Services, AppError> {
    leptos::prelude::use_context::<Services>().ok_or_else(|| {
        tracing::error!("no Services in context: the server did not provide them");
        AppError::internal()
    })
}

/// The request's cookie session.
pub async fn session() -> Result<Session, AppError> {
    leptos_axum::extract::<Session>().await.map_err(|e| {
        tracing::error!(error = %e, "no session layer in front of a server function");
        AppError::internal()
    })
}

fn session_failure(e: tower_sessions::session::Error) -> ServiceError {
    ServiceError::Other(anyhow::anyhow!("session store: {e}"))
}

/// Checks the password ([`sign_in::sign_in`]) of a person signing in from the request the
/// server function answers (its [`ClientAddr`] and device cookie) and, on success, rotates the
/// session id, remembers the person in the session and (re)sets the device cookie.
pub async fn sign_in(
    services: &Services,
    session: &Session,
    tenant: &str,
    username: &str,
    password: &str,
) -> Result<SignedIn, AppError> {
    // Without an address (no connection info) every caller shares one count.
    let secure = services.config.secure_cookies;
    let parts = leptos::prelude::use_context::<axum::http::request::Parts>();
    let address = parts
        .as_ref()
        .and_then(|parts| parts.extensions.get::<ClientAddr>().map(|c| c.0));
    let presented = parts
        .as_ref()
        .and_then(|parts| device::from_headers(&parts.headers, secure));
    let caller = Caller {
        address,
        device: presented.as_deref(),
    };
    let signed_in = sign_in::sign_in(
        &services.store,
        &services.journal,
        &services.passwords,
        tenant,
        username,
        password,
        caller,
    )
    .await?;
    session.cycle_id().await.map_err(session_failure)?;
    session
        .insert(SESSION_KEY, signed_in.session.clone())
        .await
        .map_err(session_failure)?;
    let cookie = device::set_cookie(&signed_in.device, secure);
    match (
        leptos::prelude::use_context::<leptos_axum::ResponseOptions>(),
        axum::http::HeaderValue::from_str(&cookie),
    ) {
        (Some(response), Ok(value)) => {
            response.append_header(axum::http::header::SET_COOKIE, value);
        }
        // Signed in all the same; the browser is known by its address only.
        _ => tracing::warn!("the device cookie could not be set"),
    }
    Ok(signed_in)
}

/// Deletes the session record; the cookie is cleared in the response.
pub async fn sign_out(session: &Session) -> Result<(), ServiceError> {
    session.flush().await.map_err(session_failure)
}

/// The signed-in person as a principal (scopes read fresh from the database), or `None`; a
/// session whose sign-in is too old or whose user is gone is ended.
pub async fn current(store: &Store, session: &Session) -> Result<Option<Principal>, ServiceError> {
    let Some(su) = session
        .get::<SessionUser>(SESSION_KEY)
        .await
        .map_err(session_failure)?
    else {
        return Ok(None);
    };
    let principal = sign_in::principal_of(store, &su).await?;
    if principal.is_none() {
        session.flush().await.map_err(session_failure)?;
    }
    Ok(principal)
}

/// Like [`current`], but 401 when nobody is signed in.
pub async fn require(store: &Store, session: &Session) -> Result<Principal, ServiceError> {
    current(store, session)
        .await?
        .ok_or_else(|| AppError::unauthenticated().into())
}
