//! The authenticated caller.

use engine::scope::ScopeSet;
use sha2::{Digest, Sha256};

use app::error::AppError;

use crate::error::ServiceError;
use crate::store::{self, Store};

/// How a principal authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalKind {
    /// `Authorization: Bearer apt_…`
    Token {
        /// `tok_…`
        token_id: String,
        /// The principal that created the token (approvals refuse it, CONTRACT §1).
        created_by: String,
    },
    /// A dashboard user with a cookie session.
    User,
    /// The operator at the command line (`aperture policy apply`).
    Operator,
}

/// A caller whose identity is established: one tenant, one actor, a set of scopes.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Tenant every read and write is confined to.
    pub tenant_id: String,
    /// The actor calls are attributed to (a user's actor id is their username).
    pub actor_id: String,
    /// Scopes held.
    pub scopes: ScopeSet,
    /// Token or user.
    pub kind: PrincipalKind,
    /// The store's read generation the principal was read at (bearer tokens): the rest of the
    /// request reads the call cache at the same generation instead of asking again.
    pub read_at: Option<store::cache::Fresh>,
}

impl Principal {
    /// `Ok` when the principal holds `scope`, else 403 naming it.
    pub fn require(&self, scope: &str) -> Result<(), AppError> {
        if self.scopes.satisfies(scope) {
            Ok(())
        } else {
            Err(AppError::missing_scope(scope))
        }
    }

    /// `Ok` when the principal holds one of `scopes`, else 403 naming the first.
    pub fn require_any(&self, scopes: &[&str]) -> Result<(), AppError> {
        if scopes.iter().any(|s| self.scopes.satisfies(s)) {
            Ok(())
        } else {
            Err(AppError::missing_scope(
                scopes.first().copied().unwrap_or("a scope"),
            ))
        }
    }

    /// What `created_by` records when this principal creates something.
    pub fn as_creator(&self) -> String {
        match &self.kind {
            PrincipalKind::User => format!("user:{}", self.actor_id),
            PrincipalKind::Token { .. } | PrincipalKind::Operator => self.actor_id.clone(),
        }
    }
}

/// Lowercase hex SHA-256 of a token secret: the only form in which secrets are stored.
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The principal of a bearer token, or 401 when the token is unknown, revoked or expired.
#[tracing::instrument(skip_all)]
pub async fn authenticate_bearer(store: &Store, secret: &str) -> Result<Principal, ServiceError> {
    let fresh = store::cache::fresh(store).await?;
    authenticate_at(store, secret, fresh).await
}

/// [`authenticate_bearer`] from the call cache as it stands, without reading the store's
/// counter ([`store::cache::assumed`]): for `tools/call`, whose decision record confirms the
/// generation when it is journaled (and which is authenticated again with
/// [`authenticate_bearer`] when it was out of date). A refusal is final either way: a revoked
/// token is never un-revoked, and an unknown one was looked up in the store.
pub async fn authenticate_bearer_assumed(
    store: &Store,
    secret: &str,
) -> Result<Principal, ServiceError> {
    let fresh = match store::cache::assumed(store) {
        Some(f) => f,
        None => store::cache::fresh(store).await?,
    };
    authenticate_at(store, secret, fresh).await
}

async fn authenticate_at(
    store: &Store,
    secret: &str,
    fresh: store::cache::Fresh,
) -> Result<Principal, ServiceError> {
    let Some(token) = store::cache::token(store, &fresh, &secret_hash(secret)).await? else {
        return Err(AppError::new(app::error::ErrorCode::Unauthenticated, "unknown token").into());
    };
    let row = &token.row;
    if row.revoked_at.is_some() {
        return Err(AppError::new(app::error::ErrorCode::Unauthenticated, "token revoked").into());
    }
    let now = store::now_ms();
    if row.expires_at.is_some_and(|at| at <= now) {
        return Err(AppError::new(app::error::ErrorCode::Unauthenticated, "token expired").into());
    }
    let scopes = ScopeSet::parse(&row.scopes).map_err(|e| {
        ServiceError::Other(anyhow::anyhow!(
            "stored scopes of {} are invalid: {e}",
            row.id
        ))
    })?;
    // At most about once a minute per token: a write per call would queue every call behind
    // SQLite's single writer.
    if token
        .last_used_at()
        .is_none_or(|at| at < now - store::tokens::TOUCH_INTERVAL_MS)
    {
        store::tokens::touch(store, &row.id).await?;
        token.used_at(now);
    }
    Ok(Principal {
        tenant_id: row.tenant_id.clone(),
        actor_id: row.actor_id.clone(),
        scopes,
        kind: PrincipalKind::Token {
            token_id: row.id.clone(),
            created_by: row.created_by.clone(),
        },
        read_at: Some(fresh),
    })
}
