//! Per-minute counters of policies' rate buckets, shared by every node through the database.

use super::Store;

/// One minute, the window of a bucket.
const WINDOW_MS: i64 = 60_000;

/// Takes one call from bucket `name` of a tenant, allowing `per_minute` calls per calendar
/// minute: `Ok(true)` when the call may proceed, `Ok(false)` when the minute's calls are used
/// up. One statement: a later minute restarts the count, otherwise it grows only below the
/// limit (a node whose clock lags counts against the minute already begun, never resets it).
pub async fn take(
    store: &Store,
    tenant_id: &str,
    name: &str,
    per_minute: i64,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let window = now_ms - now_ms.rem_euclid(WINDOW_MS);
    let done = sqlx::query(
        "INSERT INTO rate_buckets (tenant_id, name, window_start, used) VALUES ($1, $2, $3, 1) \
         ON CONFLICT (tenant_id, name) DO UPDATE SET \
         used = CASE WHEN excluded.window_start > rate_buckets.window_start THEN 1 ELSE rate_buckets.used + 1 END, \
         window_start = CASE WHEN excluded.window_start > rate_buckets.window_start \
             THEN excluded.window_start ELSE rate_buckets.window_start END \
         WHERE excluded.window_start > rate_buckets.window_start OR rate_buckets.used < $4",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(window)
    .bind(per_minute)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1 && per_minute > 0)
}
