//! The authenticated caller.

use engine::environment::{
    ANY_ENVIRONMENT, DEFAULT_ENVIRONMENT, environment_allowed, is_environment,
};
use engine::scope::ScopeSet;
use sha2::{Digest, Sha256};

use aperture_types::error::AppError;

use crate::error::ServiceError;
use crate::store::{self, Store};

/// How a principal authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalKind {
    /// `Authorization: Bearer apt_…`
    Token {
        /// `tok_…`
        token_id: String,
        /// The person that created the token, an actor id or `user:<name>` (approvals of its
        /// calls refuse them, CONTRACT §1).
        created_by: String,
    },
    /// A dashboard user with a cookie session.
    User {
        /// `usr_…`, the user's immutable id.
        user_id: String,
    },
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
    /// Environments it may open sessions in (`*`: every one): a boundary, not a hint.
    pub environments: Vec<String>,
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

    /// `Ok` when the principal may use `environment`, else 403 naming the ones it may use.
    pub fn may_use(&self, environment: &str) -> Result<(), AppError> {
        if environment_allowed(&self.environments, environment) {
            Ok(())
        } else {
            Err(AppError::new(
                aperture_types::error::ErrorCode::PermissionDenied,
                format!(
                    "this caller may not use environment {environment:?} (it may use {})",
                    self.environments.join(", ")
                ),
            ))
        }
    }

    /// Whether environment-bearing data of `environment` (sessions, manifests, forks,
    /// invocations, receipts, evidence, streams) is this principal's to see or act on: the same
    /// rule as opening a session there (CONTRACT §15). Whatever its scopes, data of another
    /// environment answers like data that does not exist.
    pub fn sees(&self, environment: &str) -> bool {
        environment_allowed(&self.environments, environment)
    }

    /// The environments this principal is confined to, or `None` when it may use every one
    /// (the filter reads of environment-bearing data apply).
    pub fn confined_to(&self) -> Option<&[String]> {
        (!self.environments.iter().any(|e| e == ANY_ENVIRONMENT))
            .then_some(self.environments.as_slice())
    }

    /// The environment a refusal names when the call reached no session of the caller's: its
    /// own when it has exactly one, else none. The same for a random id as for another
    /// environment's, so the two refusals read alike.
    pub fn own_environment(&self) -> Option<&str> {
        match self.environments.as_slice() {
            [only] if only != ANY_ENVIRONMENT => Some(only),
            _ => None,
        }
    }

    /// Who exactly calls: the token (`tok_…`), a dashboard user (`user:<name>`) or the
    /// operator. Two tokens of one actor are two callers: what one starts, the other does not
    /// cancel.
    pub fn caller_id(&self) -> String {
        match &self.kind {
            PrincipalKind::Token { token_id, .. } => token_id.clone(),
            PrincipalKind::User { .. } => format!("user:{}", self.actor_id),
            PrincipalKind::Operator => OPERATOR.to_owned(),
        }
    }

    /// The principal receipts name (CONTRACT §15): the token (`tok_…`), the dashboard user
    /// (`usr_…`) or `operator`.
    pub fn principal_id(&self) -> &str {
        match &self.kind {
            PrincipalKind::Token { token_id, .. } => token_id,
            PrincipalKind::User { user_id } => user_id,
            PrincipalKind::Operator => OPERATOR,
        }
    }

    /// Who its admin records are by: the person ([`Self::as_creator`]) and the principal.
    pub fn author(&self) -> crate::journal::Author {
        crate::journal::Author::new(self.as_creator(), self.principal_id())
    }

    /// What `created_by` records when this principal creates something.
    pub fn as_creator(&self) -> String {
        match &self.kind {
            PrincipalKind::User { .. } => format!("user:{}", self.actor_id),
            PrincipalKind::Token { .. } | PrincipalKind::Operator => self.actor_id.clone(),
        }
    }
}

pub use crate::journal::{ANONYMOUS, OPERATOR};

/// The environments a new token or user may use: `requested`, or the tenant's default
/// environment when not given. Each is `*` or an environment name; problems are pushed to
/// `fields` under `path`.
pub fn environments_of(
    requested: Option<&[String]>,
    path: &str,
    fields: &mut Vec<aperture_types::error::FieldError>,
) -> Vec<String> {
    let Some(requested) = requested else {
        return vec![DEFAULT_ENVIRONMENT.to_owned()];
    };
    if requested.is_empty() {
        fields.push(aperture_types::error::FieldError {
            path: path.into(),
            message: "name at least one environment (or * for every one)".into(),
        });
    }
    let mut out: Vec<String> = Vec::new();
    for (i, e) in requested.iter().enumerate() {
        let e = e.trim();
        if e != ANY_ENVIRONMENT && !is_environment(e) {
            fields.push(aperture_types::error::FieldError {
                path: format!("{path}[{i}]"),
                message: "an environment: 1–64 characters of a-z, 0-9, _ and -, or *".into(),
            });
        } else if !out.iter().any(|o| o == e) {
            out.push(e.to_owned());
        }
    }
    out
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
        return Err(AppError::new(
            aperture_types::error::ErrorCode::Unauthenticated,
            "unknown token",
        )
        .into());
    };
    let row = &token.row;
    if row.revoked_at.is_some() {
        return Err(AppError::new(
            aperture_types::error::ErrorCode::Unauthenticated,
            "token revoked",
        )
        .into());
    }
    let now = store::now_ms();
    if row.expires_at.is_some_and(|at| at <= now) {
        return Err(AppError::new(
            aperture_types::error::ErrorCode::Unauthenticated,
            "token expired",
        )
        .into());
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
            created_by: row.creating_person().to_owned(),
        },
        read_at: Some(fresh),
        environments: row.environments.clone(),
    })
}
