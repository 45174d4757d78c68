//! The catalog of what upstreams offer besides tools: resources, resource templates and
//! prompts (`catalog_items`), per upstream, as its last sync listed them.

use super::{Store, now_ms};

/// What kind of item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Resource,
    Template,
    Prompt,
}

impl Kind {
    /// Its name in the table.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Resource => "resource",
            Kind::Template => "template",
            Kind::Prompt => "prompt",
        }
    }
}

/// One listed item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRow {
    /// `ups_…`
    pub upstream_id: String,
    pub kind: Kind,
    /// The normalised URI, the URI template, or the canonical prompt name.
    pub key: String,
    /// As the upstream names it (the URI as listed, the prompt's own name).
    pub raw: String,
    /// JSON, as listed.
    pub definition: String,
    /// `sha256:` of the definition's canonical JSON.
    pub definition_hash: String,
}

/// Makes `items` (all of `kind`) what upstream `upstream_id` offers: rows it no longer lists go,
/// changed rows are rewritten, unchanged ones are left alone. One transaction. Returns whether
/// anything changed.
pub async fn replace(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
    kind: Kind,
    items: &[ItemRow],
) -> Result<bool, sqlx::Error> {
    let mut tx = store.begin_write().await?;
    let current: Vec<(String, String)> = sqlx::query_as(
        "SELECT item_key, definition_hash FROM catalog_items \
         WHERE tenant_id = $1 AND upstream_id = $2 AND kind = $3",
    )
    .bind(tenant_id)
    .bind(upstream_id)
    .bind(kind.as_str())
    .fetch_all(&mut *tx)
    .await?;
    let mut changed = false;
    for (key, _) in &current {
        if !items.iter().any(|i| &i.key == key) {
            sqlx::query(
                "DELETE FROM catalog_items WHERE tenant_id = $1 AND upstream_id = $2 \
                 AND kind = $3 AND item_key = $4",
            )
            .bind(tenant_id)
            .bind(upstream_id)
            .bind(kind.as_str())
            .bind(key)
            .execute(&mut *tx)
            .await?;
            changed = true;
        }
    }
    let now = now_ms();
    for item in items {
        let same = current
            .iter()
            .any(|(key, hash)| *key == item.key && *hash == item.definition_hash);
        if same {
            continue;
        }
        sqlx::query(
            "INSERT INTO catalog_items (tenant_id, upstream_id, kind, item_key, raw, definition, \
             definition_hash, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (tenant_id, kind, upstream_id, item_key) DO UPDATE SET \
             raw = excluded.raw, definition = excluded.definition, \
             definition_hash = excluded.definition_hash, updated_at = excluded.updated_at",
        )
        .bind(tenant_id)
        .bind(upstream_id)
        .bind(kind.as_str())
        .bind(&item.key)
        .bind(&item.raw)
        .bind(&item.definition)
        .bind(&item.definition_hash)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        changed = true;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Every item of `kind` the tenant's upstreams offer, by key then upstream.
pub async fn list(store: &Store, tenant_id: &str, kind: Kind) -> Result<Vec<ItemRow>, sqlx::Error> {
    let rows: Vec<(String, String, String, String, String)> = sqlx::query_as(
        "SELECT upstream_id, item_key, raw, definition, definition_hash FROM catalog_items \
         WHERE tenant_id = $1 AND kind = $2 ORDER BY item_key, upstream_id",
    )
    .bind(tenant_id)
    .bind(kind.as_str())
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(upstream_id, key, raw, definition, definition_hash)| ItemRow {
                upstream_id,
                kind,
                key,
                raw,
                definition,
                definition_hash,
            },
        )
        .collect())
}

/// Removes everything upstream `upstream_id` offered (it was deleted).
pub async fn remove_upstream(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM catalog_items WHERE tenant_id = $1 AND upstream_id = $2")
        .bind(tenant_id)
        .bind(upstream_id)
        .execute(store.pool())
        .await?;
    Ok(())
}
