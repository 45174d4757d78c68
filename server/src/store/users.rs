//! Dashboard users and their failed sign-ins.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, decode_string_list, now_ms};

/// A user row. Stays inside the server; views are built from it.
#[derive(Debug, Clone)]
pub struct UserRow {
    /// Tenant.
    pub tenant_id: String,
    /// Sign-in name.
    pub username: String,
    /// argon2id PHC string.
    pub password_hash: String,
    /// Scopes (validated when written).
    pub scopes: Vec<String>,
    /// Creator.
    pub created_by: String,
    /// Epoch ms.
    pub created_at: i64,
    /// Environments the user may open sessions in (`*`: every one).
    pub environments: Vec<String>,
}

fn from_row(row: &AnyRow) -> Result<UserRow, sqlx::Error> {
    Ok(UserRow {
        tenant_id: row.try_get("tenant_id")?,
        username: row.try_get("username")?,
        password_hash: row.try_get("password_hash")?,
        scopes: decode_string_list(&row.try_get::<String, _>("scopes")?)?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        environments: decode_string_list(&row.try_get::<String, _>("environments")?)?,
    })
}

const COLUMNS: &str =
    "tenant_id, username, password_hash, scopes, created_by, created_at, environments";

/// Inserts a user; `Ok(None)` when the name is taken in the tenant.
#[tracing::instrument(skip(store, password_hash))]
pub async fn insert(
    store: &Store,
    tenant_id: &str,
    username: &str,
    password_hash: &str,
    scopes: &[String],
    created_by: &str,
    environments: &[String],
) -> Result<Option<UserRow>, sqlx::Error> {
    let scopes_json =
        serde_json::to_string(scopes).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let environments_json =
        serde_json::to_string(environments).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let row = sqlx::query(&format!(
        "INSERT INTO users ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (tenant_id, username) DO NOTHING RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(username)
    .bind(password_hash)
    .bind(scopes_json)
    .bind(created_by)
    .bind(now_ms())
    .bind(environments_json)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// One user of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    username: &str,
) -> Result<Option<UserRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM users WHERE tenant_id = $1 AND username = $2"
    ))
    .bind(tenant_id)
    .bind(username)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// All users of a tenant, by name.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<UserRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM users WHERE tenant_id = $1 ORDER BY username"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// Replaces a user's scopes; `Ok(None)` when there is no such user in the tenant.
pub async fn set_scopes(
    store: &Store,
    tenant_id: &str,
    username: &str,
    scopes: &[String],
) -> Result<Option<UserRow>, sqlx::Error> {
    set_access(store, tenant_id, username, scopes, None).await
}

/// Replaces a user's scopes and, when given, the environments they may use; the updated user.
pub async fn set_access(
    store: &Store,
    tenant_id: &str,
    username: &str,
    scopes: &[String],
    environments: Option<&[String]>,
) -> Result<Option<UserRow>, sqlx::Error> {
    let encode = |e: serde_json::Error| sqlx::Error::Encode(Box::new(e));
    let scopes_json = serde_json::to_string(scopes).map_err(encode)?;
    let environments_json = environments
        .map(serde_json::to_string)
        .transpose()
        .map_err(encode)?;
    let row = sqlx::query(&format!(
        "UPDATE users SET scopes = $3, environments = COALESCE($4, environments) \
         WHERE tenant_id = $1 AND username = $2 RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(username)
    .bind(scopes_json)
    .bind(environments_json)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Number of users in all tenants (a fresh installation has none).
pub async fn count_all(store: &Store) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users")
        .fetch_one(store.pool())
        .await?;
    Ok(n)
}

/// Number of users in a tenant.
pub async fn count(store: &Store, tenant_id: &str) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(store.pool())
        .await?;
    Ok(n)
}

/// Records a failed sign-in and forgets failures older than `window_ms`.
pub async fn record_sign_in_failure(
    store: &Store,
    tenant_id: &str,
    username: &str,
    window_ms: i64,
) -> Result<(), sqlx::Error> {
    let now = now_ms();
    sqlx::query(
        "INSERT INTO sign_in_failures (tenant_id, username, failed_at) VALUES ($1, $2, $3)",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(now)
    .execute(store.pool())
    .await?;
    sqlx::query("DELETE FROM sign_in_failures WHERE failed_at < $1")
        .bind(now - window_ms)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Failed sign-ins of one account within the last `window_ms`.
pub async fn recent_sign_in_failures(
    store: &Store,
    tenant_id: &str,
    username: &str,
    window_ms: i64,
) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM sign_in_failures WHERE tenant_id = $1 AND username = $2 AND failed_at >= $3",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(now_ms() - window_ms)
    .fetch_one(store.pool())
    .await?;
    Ok(n)
}
