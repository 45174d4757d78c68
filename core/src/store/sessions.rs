//! Dashboard cookie session records in the database, so that every node sees them and a restart
//! signs nobody out. The record's data is the session's JSON as the surface's session layer
//! wrote it; this module neither reads nor changes it.

use sqlx::Error;

use super::Store;

/// Inserts a new record under `id`; `false` when the id is taken (nothing is overwritten).
pub async fn create(store: &Store, id: &str, data: &str, expires_at: i64) -> Result<bool, Error> {
    let done = sqlx::query(
        "INSERT INTO dashboard_sessions (id, data, expires_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
    )
    .bind(id)
    .bind(data)
    .bind(expires_at)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Writes the record under `id`, new or not.
pub async fn save(store: &Store, id: &str, data: &str, expires_at: i64) -> Result<(), Error> {
    sqlx::query(
        "INSERT INTO dashboard_sessions (id, data, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at",
    )
    .bind(id)
    .bind(data)
    .bind(expires_at)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// The data and expiry of the record under `id`, unless it has expired by `now`.
pub async fn load(store: &Store, id: &str, now: i64) -> Result<Option<(String, i64)>, Error> {
    sqlx::query_as(
        "SELECT data, expires_at FROM dashboard_sessions WHERE id = $1 AND expires_at > $2",
    )
    .bind(id)
    .bind(now)
    .fetch_optional(store.pool())
    .await
}

/// Deletes the record under `id`.
pub async fn delete(store: &Store, id: &str) -> Result<(), Error> {
    sqlx::query("DELETE FROM dashboard_sessions WHERE id = $1")
        .bind(id)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Deletes the records expired by `now`.
pub async fn delete_expired(store: &Store, now: i64) -> Result<(), Error> {
    sqlx::query("DELETE FROM dashboard_sessions WHERE expires_at <= $1")
        .bind(now)
        .execute(store.pool())
        .await?;
    Ok(())
}
