//! API tokens as a service: the one implementation behind `GET/POST/DELETE /tokens`, the
//! dashboard's Tokens page and `aperture token create`.

use engine::scope::{self, ScopeSet};

use aperture_types::dto::{CreateTokenRequest, CreatedToken, TokenStatus, TokenView};
use aperture_types::error::{AppError, FieldError};

use crate::error::ServiceError;
use crate::ids;
use crate::journal::{Author, Journal};
use crate::principal::Principal;
use crate::principal::secret_hash;
use crate::store::{self, Store, tokens::TokenRow};
use engine::receipt::{Decision, ReasonCode};
use serde_json::json;

/// Whether `actor` is an acceptable actor id: 1–128 characters of `[A-Za-z0-9_.:@-]`.
pub fn is_valid_actor(actor: &str) -> bool {
    !actor.is_empty()
        && actor.len() <= 128
        && actor
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:@-".contains(&b))
}

/// A token row as people and machines see it.
pub fn view(row: TokenRow) -> TokenView {
    let now = store::now_ms();
    let status = if row.revoked_at.is_some() {
        TokenStatus::Revoked
    } else if row.expires_at.is_some_and(|at| at <= now) {
        TokenStatus::Expired
    } else {
        TokenStatus::Active
    };
    TokenView {
        id: row.id,
        actor_id: row.actor_id,
        name: row.name,
        scopes: row.scopes,
        created_by: row.created_by,
        created_at: store::rfc3339(row.created_at),
        expires_at: row.expires_at.map(store::rfc3339),
        revoked_at: row.revoked_at.map(store::rfc3339),
        last_used_at: row.last_used_at.map(store::rfc3339),
        status,
        environments: row.environments,
    }
}

/// Validates a creation request; every problem is reported with its field path.
fn validate(
    request: &CreateTokenRequest,
) -> Result<(ScopeSet, Option<i64>, Vec<String>), AppError> {
    let mut fields = Vec::new();
    let environments = crate::principal::environments_of(
        request.environments.as_deref(),
        "environments",
        &mut fields,
    );
    if !is_valid_actor(&request.actor_id) {
        fields.push(FieldError {
            path: "actor_id".into(),
            message: "1–128 characters of letters, digits and _ . : @ -".into(),
        });
    }
    if let Some(name) = &request.name
        && name.chars().count() > 100
    {
        fields.push(FieldError {
            path: "name".into(),
            message: "at most 100 characters".into(),
        });
    }
    let scopes = match ScopeSet::parse(&request.scopes) {
        Ok(s) if s.is_empty() => {
            fields.push(FieldError {
                path: "scopes".into(),
                message: "choose at least one scope".into(),
            });
            None
        }
        Ok(s) => Some(s),
        Err(e) => {
            fields.push(FieldError {
                path: format!("scopes[{}]", e.index),
                message: e.error.to_string(),
            });
            None
        }
    };
    let expires_at = match request.expires_at.as_deref() {
        None | Some("") => None,
        Some(text) => match store::parse_rfc3339(text) {
            Some(ms) if ms > store::now_ms() => Some(ms),
            Some(_) => {
                fields.push(FieldError {
                    path: "expires_at".into(),
                    message: "must be in the future".into(),
                });
                None
            }
            None => {
                fields.push(FieldError {
                    path: "expires_at".into(),
                    message: "must be an RFC 3339 time such as 2027-01-31T00:00:00Z".into(),
                });
                None
            }
        },
    };
    match (fields.is_empty(), scopes) {
        (true, Some(scopes)) => Ok((scopes, expires_at, environments)),
        _ => Err(AppError::invalid(fields)),
    }
}

/// Creates a token in `tenant_id` on behalf of `created_by`, without any scope check: the
/// operator's command line uses it directly; principals go through [`create`].
pub async fn create_unchecked(
    store: &Store,
    journal: &Journal,
    tenant_id: &str,
    by: &Author,
    request: &CreateTokenRequest,
) -> Result<CreatedToken, ServiceError> {
    let (scopes, expires_at, environments) = validate(request)?;
    let scopes: Vec<String> = scopes.into();
    let secret = ids::new_token_secret();
    let id = ids::new_id("tok");
    journal
        .admin(
            tenant_id,
            by,
            Decision::Allow,
            ReasonCode::Ok,
            "token.create",
            json!({"token_id": id, "actor_id": request.actor_id, "scopes": scopes, "environments": environments}),
        )
        .await?;
    let name = request
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    let row = store::tokens::insert(
        store,
        store::tokens::NewToken {
            id: &id,
            tenant_id,
            actor_id: &request.actor_id,
            name,
            scopes: &scopes,
            secret_sha256: &secret_hash(&secret),
            created_by: &by.principal,
            created_by_actor: &by.actor_id,
            expires_at,
            environments: &environments,
        },
    )
    .await?;
    tracing::info!(token = %row.id, tenant = %tenant_id, actor = %row.actor_id, created_by = %by.principal, "token created");
    Ok(CreatedToken {
        token: view(row),
        secret,
    })
}

/// `POST /tokens` (admin).
pub async fn create(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    request: &CreateTokenRequest,
) -> Result<CreatedToken, ServiceError> {
    principal.require(scope::ADMIN)?;
    create_unchecked(
        store,
        journal,
        &principal.tenant_id,
        &principal.author(),
        request,
    )
    .await
}

/// `GET /tokens` (admin).
pub async fn list(store: &Store, principal: &Principal) -> Result<Vec<TokenView>, ServiceError> {
    principal.require(scope::ADMIN)?;
    Ok(store::tokens::list(store, &principal.tenant_id)
        .await?
        .into_iter()
        .map(view)
        .collect())
}

/// `DELETE /tokens/{id}` (admin). Another tenant's id is "not found".
pub async fn revoke(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    id: &str,
) -> Result<TokenView, ServiceError> {
    principal.require(scope::ADMIN)?;
    if store::tokens::find(store, &principal.tenant_id, id)
        .await?
        .is_none()
    {
        return Err(AppError::not_found("token").into());
    }
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "token.revoke",
            json!({"token_id": id}),
        )
        .await?;
    match store::tokens::revoke(store, &principal.tenant_id, id).await? {
        Some(row) => {
            tracing::info!(token = %row.id, by = %principal.actor_id, "token revoked");
            Ok(view(row))
        }
        None => Err(AppError::not_found("token").into()),
    }
}
