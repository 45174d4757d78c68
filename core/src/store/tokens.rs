//! API tokens. Only the SHA-256 of a secret is ever stored.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, decode_string_list, now_ms};

/// A token row. Stays inside the server.
#[derive(Debug, Clone)]
pub struct TokenRow {
    /// `tok_…`
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Actor of calls made with it.
    pub actor_id: String,
    /// Label.
    pub name: Option<String>,
    /// Scopes.
    pub scopes: Vec<String>,
    /// The principal that created it (`tok_…`, `usr_…`, `operator`; tokens created before
    /// principals were recorded hold the creating person: an actor id or `user:<name>`).
    pub created_by: String,
    /// The person behind `created_by` (an actor id or `user:<name>`), `None` for tokens whose
    /// `created_by` is that person already.
    pub created_by_actor: Option<String>,
    /// Epoch ms.
    pub created_at: i64,
    /// Epoch ms.
    pub expires_at: Option<i64>,
    /// Epoch ms.
    pub revoked_at: Option<i64>,
    /// Epoch ms.
    pub last_used_at: Option<i64>,
    /// Environments it may open sessions in (`*`: every one).
    pub environments: Vec<String>,
}

const COLUMNS: &str = "id, tenant_id, actor_id, name, scopes, created_by, created_at, expires_at, revoked_at, last_used_at, environments, created_by_actor";

impl TokenRow {
    /// The person that created the token: an actor id or `user:<name>`.
    pub fn creating_person(&self) -> &str {
        self.created_by_actor.as_deref().unwrap_or(&self.created_by)
    }
}

fn from_row(row: &AnyRow) -> Result<TokenRow, sqlx::Error> {
    Ok(TokenRow {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        actor_id: row.try_get("actor_id")?,
        name: row.try_get("name")?,
        scopes: decode_string_list(&row.try_get::<String, _>("scopes")?)?,
        created_by: row.try_get("created_by")?,
        created_by_actor: row.try_get("created_by_actor")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
        last_used_at: row.try_get("last_used_at")?,
        environments: decode_string_list(&row.try_get::<String, _>("environments")?)?,
    })
}

/// What a new token row holds.
#[derive(Debug)]
pub struct NewToken<'a> {
    /// `tok_…`
    pub id: &'a str,
    /// Tenant.
    pub tenant_id: &'a str,
    /// Actor.
    pub actor_id: &'a str,
    /// Label.
    pub name: Option<&'a str>,
    /// Scopes.
    pub scopes: &'a [String],
    /// Hex SHA-256 of the secret.
    pub secret_sha256: &'a str,
    /// The creating principal (`tok_…`, `usr_…`, `operator`).
    pub created_by: &'a str,
    /// The person behind it (an actor id or `user:<name>`).
    pub created_by_actor: &'a str,
    /// Epoch ms.
    pub expires_at: Option<i64>,
    /// Environments it may open sessions in.
    pub environments: &'a [String],
}

/// Stores a new token.
#[tracing::instrument(skip_all, fields(id = new.id, tenant = new.tenant_id))]
pub async fn insert(store: &Store, new: NewToken<'_>) -> Result<TokenRow, sqlx::Error> {
    let scopes_json =
        serde_json::to_string(new.scopes).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let environments_json =
        serde_json::to_string(new.environments).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let row = sqlx::query(&format!(
        "INSERT INTO api_tokens (id, tenant_id, actor_id, name, scopes, secret_sha256, created_by, created_at, expires_at, environments, created_by_actor) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING {COLUMNS}"
    ))
    .bind(new.id)
    .bind(new.tenant_id)
    .bind(new.actor_id)
    .bind(new.name)
    .bind(scopes_json)
    .bind(new.secret_sha256)
    .bind(new.created_by)
    .bind(now_ms())
    .bind(new.expires_at)
    .bind(environments_json)
    .bind(new.created_by_actor)
    .fetch_one(store.pool())
    .await?;
    from_row(&row)
}

/// The token whose secret hashes to `secret_sha256`, whatever its state.
#[tracing::instrument(skip_all)]
pub async fn find_by_secret_hash(
    store: &Store,
    secret_sha256: &str,
) -> Result<Option<TokenRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM api_tokens WHERE secret_sha256 = $1"
    ))
    .bind(secret_sha256)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// How often `last_used_at` is brought up to date, at most.
pub const TOUCH_INTERVAL_MS: i64 = 60_000;

/// Notes a successful authentication, at most about once a minute per token to spare writes.
pub async fn touch(store: &Store, id: &str) -> Result<(), sqlx::Error> {
    let now = now_ms();
    sqlx::query(
        "UPDATE api_tokens SET last_used_at = $2 WHERE id = $1 AND revoked_at IS NULL \
         AND (last_used_at IS NULL OR last_used_at < $3)",
    )
    .bind(id)
    .bind(now)
    .bind(now - TOUCH_INTERVAL_MS)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// One token of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<TokenRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM api_tokens WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Tokens of a tenant, newest first.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<TokenRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM api_tokens WHERE tenant_id = $1 ORDER BY created_at DESC, id"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// Revokes a token of the tenant. Revoking twice keeps the first time. `Ok(None)` when the
/// tenant has no such token.
pub async fn revoke(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<TokenRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $3) WHERE tenant_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(now_ms())
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Tokens of a tenant that still authenticate.
pub async fn count_active(store: &Store, tenant_id: &str) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM api_tokens WHERE tenant_id = $1 AND revoked_at IS NULL \
         AND (expires_at IS NULL OR expires_at > $2)",
    )
    .bind(tenant_id)
    .bind(now_ms())
    .fetch_one(store.pool())
    .await?;
    Ok(n)
}
