//! Idempotency keys (`requires_idempotency`, migration 0015): which invocation first used a key,
//! with which arguments, until when.

use super::Store;

/// A live claim of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The invocation that first used the key.
    pub invocation_id: String,
    /// Hash of its effective arguments.
    pub args_hash: String,
    /// Epoch ms.
    pub created_at: i64,
}

/// Who used a key for what.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    /// Tenant.
    pub tenant_id: &'a str,
    /// The calling actor.
    pub actor_id: &'a str,
    /// Canonical tool name.
    pub tool: &'a str,
    /// The `idempotency_key` argument.
    pub key: &'a str,
}

/// Claims `key` for `invocation_id` (with `args_hash`) from `now` until `expires_at`, unless a
/// live claim exists: then that one is returned and nothing changes. An expired claim is
/// replaced.
pub async fn claim(
    store: &Store,
    key: Key<'_>,
    invocation_id: &str,
    args_hash: &str,
    now: i64,
    expires_at: i64,
) -> Result<Option<Claim>, sqlx::Error> {
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND actor_id = $2 AND tool = $3 \
         AND idem_key = $4 AND expires_at <= $5",
    )
    .bind(key.tenant_id)
    .bind(key.actor_id)
    .bind(key.tool)
    .bind(key.key)
    .bind(now)
    .execute(store.pool())
    .await?;
    let inserted = sqlx::query(
        "INSERT INTO idempotency_keys (tenant_id, actor_id, tool, idem_key, invocation_id, \
         args_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT DO NOTHING",
    )
    .bind(key.tenant_id)
    .bind(key.actor_id)
    .bind(key.tool)
    .bind(key.key)
    .bind(invocation_id)
    .bind(args_hash)
    .bind(now)
    .bind(expires_at)
    .execute(store.pool())
    .await?
    .rows_affected();
    if inserted == 1 {
        return Ok(None);
    }
    let row: Option<(String, String, i64)> = sqlx::query_as(
        "SELECT invocation_id, args_hash, created_at FROM idempotency_keys \
         WHERE tenant_id = $1 AND actor_id = $2 AND tool = $3 AND idem_key = $4",
    )
    .bind(key.tenant_id)
    .bind(key.actor_id)
    .bind(key.tool)
    .bind(key.key)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(|(invocation_id, args_hash, created_at)| Claim {
        invocation_id,
        args_hash,
        created_at,
    }))
}

/// Gives up `invocation_id`'s claim of `key` (its call was never recorded, so it never ran).
pub async fn release(store: &Store, key: Key<'_>, invocation_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND actor_id = $2 AND tool = $3 \
         AND idem_key = $4 AND invocation_id = $5",
    )
    .bind(key.tenant_id)
    .bind(key.actor_id)
    .bind(key.tool)
    .bind(key.key)
    .bind(invocation_id)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Deletes the claims expired by `now`; how many.
pub async fn purge_expired(store: &Store, now: i64) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query("DELETE FROM idempotency_keys WHERE expires_at <= $1")
            .bind(now)
            .execute(store.pool())
            .await?
            .rows_affected(),
    )
}
