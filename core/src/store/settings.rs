//! A tenant's settings documents (`/settings/…`), one JSON document per name.

use serde_json::Value;

use super::{Store, now_ms};

/// The tenant's `name` document, who set it and when (ms); `None` when it never did (the
/// defaults hold).
pub async fn get(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<(Value, String, i64)>, sqlx::Error> {
    let row: Option<(String, String, i64)> = sqlx::query_as(
        "SELECT document, updated_by, updated_at FROM tenant_settings \
         WHERE tenant_id = $1 AND name = $2",
    )
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(store.pool())
    .await?;
    row.map(|(document, by, at)| {
        serde_json::from_str(&document)
            .map(|v| (v, by, at))
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))
    })
    .transpose()
}

/// Stores the tenant's `name` document, replacing the one before.
pub async fn put(
    store: &Store,
    tenant_id: &str,
    name: &str,
    document: &Value,
    updated_by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO tenant_settings (tenant_id, name, document, updated_by, updated_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, name) DO UPDATE SET \
         document = excluded.document, updated_by = excluded.updated_by, \
         updated_at = excluded.updated_at",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(document.to_string())
    .bind(updated_by)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}
