//! The `Mcp-Session-Id`s `initialize` hands out (`mcp_sessions`).

use sqlx::Error;

use super::Store;

/// Records session `id` of `principal` in `tenant_id` (whose client declared `abilities`), used
/// at `now`, and forgets that
/// principal's sessions beyond the `keep` most recently used.
pub async fn open(
    store: &Store,
    id: &str,
    tenant_id: &str,
    principal: &str,
    abilities: &str,
    now: i64,
    keep: i64,
) -> Result<(), Error> {
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "INSERT INTO mcp_sessions (id, tenant_id, principal, created_at, last_used_at, \
         client_abilities) VALUES ($1, $2, $3, $4, $4, $5)",
    )
    .bind(id)
    .bind(tenant_id)
    .bind(principal)
    .bind(now)
    .bind(abilities)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "DELETE FROM mcp_sessions WHERE tenant_id = $1 AND principal = $2 AND id NOT IN \
         (SELECT id FROM mcp_sessions WHERE tenant_id = $1 AND principal = $2 \
          ORDER BY last_used_at DESC, id DESC LIMIT $3)",
    )
    .bind(tenant_id)
    .bind(principal)
    .bind(keep)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// When session `id` of `principal` in `tenant_id` was last used, what its client declared
/// it can do, and the log level it set, if it is theirs.
pub async fn last_used(
    store: &Store,
    id: &str,
    tenant_id: &str,
    principal: &str,
) -> Result<Option<(i64, String, Option<String>)>, Error> {
    sqlx::query_as(
        "SELECT last_used_at, client_abilities, log_level FROM mcp_sessions \
         WHERE id = $1 AND tenant_id = $2 AND principal = $3",
    )
    .bind(id)
    .bind(tenant_id)
    .bind(principal)
    .fetch_optional(store.pool())
    .await
}

/// Sets the log level of session `id` of `principal` in `tenant_id`; whether there was one.
pub async fn set_log_level(
    store: &Store,
    id: &str,
    tenant_id: &str,
    principal: &str,
    level: &str,
) -> Result<bool, Error> {
    let done = sqlx::query(
        "UPDATE mcp_sessions SET log_level = $4 WHERE id = $1 AND tenant_id = $2 AND principal = $3",
    )
    .bind(id)
    .bind(tenant_id)
    .bind(principal)
    .bind(level)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Notes that session `id` was used at `now`.
pub async fn touch(store: &Store, id: &str, now: i64) -> Result<(), Error> {
    sqlx::query("UPDATE mcp_sessions SET last_used_at = $2 WHERE id = $1 AND last_used_at < $2")
        .bind(id)
        .bind(now)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Ends session `id` of `principal` in `tenant_id`; whether there was one.
pub async fn close(
    store: &Store,
    id: &str,
    tenant_id: &str,
    principal: &str,
) -> Result<bool, Error> {
    let done =
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1 AND tenant_id = $2 AND principal = $3")
            .bind(id)
            .bind(tenant_id)
            .bind(principal)
            .execute(store.pool())
            .await?;
    Ok(done.rows_affected() > 0)
}

/// Forgets the sessions not used since `before`.
pub async fn delete_idle(store: &Store, before: i64) -> Result<(), Error> {
    sqlx::query("DELETE FROM mcp_sessions WHERE last_used_at < $1")
        .bind(before)
        .execute(store.pool())
        .await?;
    Ok(())
}
