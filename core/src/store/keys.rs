//! Public signing keys.

use super::{Store, now_ms};

/// Records a public key (idempotent).
pub async fn record(store: &Store, kid: &str, x: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO signing_keys (kid, x, created_at) VALUES ($1, $2, $3) ON CONFLICT (kid) DO NOTHING")
        .bind(kid)
        .bind(x)
        .bind(now_ms())
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Every recorded key as `(kid, x)`, oldest first.
pub async fn list(store: &Store) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT kid, x FROM signing_keys ORDER BY created_at, kid")
        .fetch_all(store.pool())
        .await
}
