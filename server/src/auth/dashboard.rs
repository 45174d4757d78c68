//! Cookie sessions for people signing in to the dashboard.
//!
//! The session id lives in an `HttpOnly`, `SameSite=Lax` cookie (`__Host-` prefixed and `Secure`
//! when served over TLS) and the record in the database. It expires after 30 minutes without a
//! request, and 12 hours after sign-in whatever the activity. The id is rotated at sign-in (no
//! fixation) and the record deleted at sign-out.

use engine::scope::ScopeSet;
use serde::{Deserialize, Serialize};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, Session, SessionManagerLayer};

use app::dto::Me;
use app::error::{AppError, ErrorCode, FieldError};

use super::password::Passwords;
use super::principal::{Principal, PrincipalKind};
use crate::error::ServiceError;
use crate::journal::Journal;
use crate::store::{self, DbSessionStore, Store};
use engine::receipt::{Decision, ReasonCode};
use serde_json::json;

/// Idle timeout.
pub const IDLE_MINUTES: i64 = 30;
/// Absolute lifetime of a sign-in.
pub const ABSOLUTE_MS: i64 = 12 * 60 * 60 * 1000;
/// Failed sign-ins allowed per account and window.
pub const MAX_FAILURES: i64 = 100;
/// The failure-counting window.
pub const FAILURE_WINDOW_MS: i64 = 60 * 60 * 1000;

const SESSION_KEY: &str = "aperture.user";

/// What the session remembers about the person.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SessionUser {
    tenant_id: String,
    username: String,
    signed_in_at: i64,
}

/// The session layer for the whole app.
pub fn session_layer(store: Store, secure: bool) -> SessionManagerLayer<DbSessionStore> {
    let name = if secure {
        "__Host-aperture_session"
    } else {
        "aperture_session"
    };
    SessionManagerLayer::new(DbSessionStore::new(store))
        .with_name(name)
        .with_secure(secure)
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_path("/")
        .with_expiry(Expiry::OnInactivity(time::Duration::minutes(IDLE_MINUTES)))
}

fn session_failure(e: tower_sessions::session::Error) -> ServiceError {
    ServiceError::Other(anyhow::anyhow!("session store: {e}"))
}

/// Checks the password and signs the person in. Every failure looks the same ("wrong username or
/// password"), whether the tenant or user exists or not, and takes the same time.
#[tracing::instrument(skip(store, journal, passwords, session, password))]
pub async fn sign_in(
    store: &Store,
    journal: &Journal,
    passwords: &Passwords,
    session: &Session,
    tenant: &str,
    username: &str,
    password: &str,
) -> Result<Me, ServiceError> {
    let mut fields = Vec::new();
    for (path, value) in [
        ("tenant", tenant),
        ("username", username),
        ("password", password),
    ] {
        if value.is_empty() {
            fields.push(FieldError {
                path: path.into(),
                message: "required".into(),
            });
        }
    }
    if !fields.is_empty() {
        return Err(AppError::invalid(fields).into());
    }
    if tenant.len() > 64 || username.len() > 64 || password.len() > super::password::MAX_LEN {
        return Err(wrong_credentials().into());
    }
    let failures =
        store::users::recent_sign_in_failures(store, tenant, username, FAILURE_WINDOW_MS).await?;
    if failures >= MAX_FAILURES {
        return Err(AppError::new(
            ErrorCode::TooManyRequests,
            "too many failed sign-in attempts for this account; try again in an hour",
        )
        .into());
    }
    let user = store::users::find(store, tenant, username).await?;
    let ok = passwords
        .verify(
            password.to_owned(),
            user.as_ref().map(|u| u.password_hash.clone()),
        )
        .await?;
    let Some(user) = user.filter(|_| ok) else {
        store::users::record_sign_in_failure(store, tenant, username, FAILURE_WINDOW_MS).await?;
        // Failures are journaled in tenants that exist; nothing runs on a failure, so a journal
        // outage is logged rather than turned into another error.
        if store::tenants::exists(store, tenant).await?
            && let Err(e) = journal
                .admin(
                    tenant,
                    username,
                    Decision::Deny,
                    ReasonCode::Unauthenticated,
                    "sign_in",
                    json!({"username": username}),
                )
                .await
        {
            tracing::error!(error = %e, "a failed sign-in could not be journaled");
        }
        return Err(wrong_credentials().into());
    };
    journal
        .admin(
            &user.tenant_id,
            &user.username,
            Decision::Allow,
            ReasonCode::Ok,
            "sign_in",
            json!({"username": user.username}),
        )
        .await?;
    session.cycle_id().await.map_err(session_failure)?;
    session
        .insert(
            SESSION_KEY,
            SessionUser {
                tenant_id: user.tenant_id.clone(),
                username: user.username.clone(),
                signed_in_at: store::now_ms(),
            },
        )
        .await
        .map_err(session_failure)?;
    tracing::info!(tenant = %user.tenant_id, username = %user.username, "signed in");
    Ok(Me {
        tenant_id: user.tenant_id,
        username: user.username,
        scopes: user.scopes,
    })
}

fn wrong_credentials() -> AppError {
    AppError::new(ErrorCode::Unauthenticated, "wrong username or password")
}

/// Deletes the session record; the cookie is cleared in the response.
pub async fn sign_out(session: &Session) -> Result<(), ServiceError> {
    session.flush().await.map_err(session_failure)
}

/// The signed-in person as a principal (scopes read fresh from the database), or `None`.
pub async fn current(store: &Store, session: &Session) -> Result<Option<Principal>, ServiceError> {
    let Some(su) = session
        .get::<SessionUser>(SESSION_KEY)
        .await
        .map_err(session_failure)?
    else {
        return Ok(None);
    };
    if store::now_ms() - su.signed_in_at > ABSOLUTE_MS {
        session.flush().await.map_err(session_failure)?;
        return Ok(None);
    }
    let Some(user) = store::users::find(store, &su.tenant_id, &su.username).await? else {
        session.flush().await.map_err(session_failure)?;
        return Ok(None);
    };
    let scopes = ScopeSet::parse(&user.scopes)
        .map_err(|e| anyhow::anyhow!("stored scopes of user {} are invalid: {e}", user.username))?;
    Ok(Some(Principal {
        tenant_id: user.tenant_id,
        actor_id: user.username,
        scopes,
        kind: PrincipalKind::User,
        read_at: None,
        environments: user.environments,
    }))
}

/// Like [`current`], but 401 when nobody is signed in.
pub async fn require(store: &Store, session: &Session) -> Result<Principal, ServiceError> {
    current(store, session)
        .await?
        .ok_or_else(|| AppError::unauthenticated().into())
}
