//! Tenants: every stored row belongs to one.

use super::{Store, now_ms};

/// The tenant a fresh installation starts with.
pub const DEFAULT_TENANT: &str = "default";

/// Whether `id` is a readable tenant name (`[a-z0-9_-]{1,64}`).
pub fn is_valid_id(id: &str) -> bool {
    engine::environment::is_name(id)
}

/// Creates the tenant unless it exists. Returns whether it was created.
pub async fn ensure(store: &Store, id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO tenants (id, created_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Whether the tenant exists.
pub async fn exists(store: &Store, id: &str) -> Result<bool, sqlx::Error> {
    let row: Option<(String,)> = sqlx::query_as("SELECT id FROM tenants WHERE id = $1")
        .bind(id)
        .fetch_optional(store.pool())
        .await?;
    Ok(row.is_some())
}
