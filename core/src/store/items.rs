//! The catalog of what upstreams offer besides tools: resources, resource templates and
//! prompts (`catalog_items`), per upstream, as its last sync listed them, with their drift
//! triage.

use sqlx::Row;
use sqlx::any::AnyRow;

pub use super::catalog::Held;
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
    /// Its drift triage (nothing held: the definition is the accepted one).
    pub drift: ItemDrift,
}

/// The drift triage of an item: the definition the tenant last accepted while a change of it is
/// held (a held item is neither listed nor readable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemDrift {
    /// The definition (JSON text) the tenant last accepted, while a change is held.
    pub accepted: Option<String>,
    /// Set while the change is held for review.
    pub held: Option<Held>,
}

const COLUMNS: &str = "upstream_id, kind, item_key, raw, definition, definition_hash, \
    accepted_definition, held_changes, held_since, held_kept_hash";

fn from_row(row: &AnyRow) -> Result<ItemRow, sqlx::Error> {
    let kind = match row.try_get::<String, _>("kind")?.as_str() {
        "resource" => Kind::Resource,
        "template" => Kind::Template,
        "prompt" => Kind::Prompt,
        other => return Err(sqlx::Error::Decode(format!("item kind {other}").into())),
    };
    Ok(ItemRow {
        upstream_id: row.try_get("upstream_id")?,
        kind,
        key: row.try_get("item_key")?,
        raw: row.try_get("raw")?,
        definition: row.try_get("definition")?,
        definition_hash: row.try_get("definition_hash")?,
        drift: ItemDrift {
            accepted: row.try_get("accepted_definition")?,
            held: super::catalog::held_from_row(row)?,
        },
    })
}

/// The stored values of a triage: accepted definition, held changes, since, kept hash.
fn drift_values(
    drift: &ItemDrift,
) -> (Option<String>, Option<String>, Option<i64>, Option<String>) {
    let (changes, since, kept) = super::catalog::held_values(drift.held.as_ref());
    (drift.accepted.clone(), changes, since, kept)
}

/// Makes `items` (all of `kind`) what upstream `upstream_id` offers: rows it no longer lists go,
/// changed rows (their definition or triage) are rewritten, unchanged ones are left alone. One
/// transaction. Returns whether anything changed.
pub async fn replace(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
    kind: Kind,
    items: &[ItemRow],
) -> Result<bool, sqlx::Error> {
    let mut tx = store.begin_write().await?;
    let current: Vec<ItemRow> = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM catalog_items \
         WHERE tenant_id = $1 AND upstream_id = $2 AND kind = $3"
    ))
    .bind(tenant_id)
    .bind(upstream_id)
    .bind(kind.as_str())
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(from_row)
    .collect::<Result<_, _>>()?;
    let mut changed = false;
    for row in &current {
        if !items.iter().any(|i| i.key == row.key) {
            sqlx::query(
                "DELETE FROM catalog_items WHERE tenant_id = $1 AND upstream_id = $2 \
                 AND kind = $3 AND item_key = $4",
            )
            .bind(tenant_id)
            .bind(upstream_id)
            .bind(kind.as_str())
            .bind(&row.key)
            .execute(&mut *tx)
            .await?;
            changed = true;
        }
    }
    let now = now_ms();
    for item in items {
        if current.iter().any(|row| row == item) {
            continue;
        }
        let (accepted, held, since, kept) = drift_values(&item.drift);
        sqlx::query(
            "INSERT INTO catalog_items (tenant_id, upstream_id, kind, item_key, raw, definition, \
             definition_hash, updated_at, accepted_definition, held_changes, held_since, \
             held_kept_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (tenant_id, kind, upstream_id, item_key) DO UPDATE SET \
             raw = excluded.raw, definition = excluded.definition, \
             definition_hash = excluded.definition_hash, updated_at = excluded.updated_at, \
             accepted_definition = excluded.accepted_definition, \
             held_changes = excluded.held_changes, held_since = excluded.held_since, \
             held_kept_hash = excluded.held_kept_hash",
        )
        .bind(tenant_id)
        .bind(upstream_id)
        .bind(kind.as_str())
        .bind(&item.key)
        .bind(&item.raw)
        .bind(&item.definition)
        .bind(&item.definition_hash)
        .bind(now)
        .bind(accepted)
        .bind(held)
        .bind(since)
        .bind(kept)
        .execute(&mut *tx)
        .await?;
        changed = true;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Every item of `kind` the tenant's upstreams offer, by key then upstream (held ones
/// included).
pub async fn list(store: &Store, tenant_id: &str, kind: Kind) -> Result<Vec<ItemRow>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM catalog_items \
         WHERE tenant_id = $1 AND kind = $2 ORDER BY item_key, upstream_id"
    ))
    .bind(tenant_id)
    .bind(kind.as_str())
    .fetch_all(store.pool())
    .await?
    .iter()
    .map(from_row)
    .collect()
}

/// What upstream `upstream_id` offers of `kind`, as its last sync catalogued it.
pub async fn of_upstream(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
    kind: Kind,
) -> Result<Vec<ItemRow>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM catalog_items \
         WHERE tenant_id = $1 AND upstream_id = $2 AND kind = $3 ORDER BY item_key"
    ))
    .bind(tenant_id)
    .bind(upstream_id)
    .bind(kind.as_str())
    .fetch_all(store.pool())
    .await?
    .iter()
    .map(from_row)
    .collect()
}

/// Sets the triage of one item, only while its definition is still `definition_hash` (an
/// admin's decision is about the definition reviewed). Returns whether it was written.
pub async fn set_drift_if(
    store: &Store,
    tenant_id: &str,
    (upstream_id, kind, key): (&str, Kind, &str),
    definition_hash: &str,
    drift: &ItemDrift,
) -> Result<bool, sqlx::Error> {
    let (accepted, held, since, kept) = drift_values(drift);
    let done = sqlx::query(
        "UPDATE catalog_items SET accepted_definition = $1, held_changes = $2, held_since = $3, \
         held_kept_hash = $4, updated_at = $5 WHERE tenant_id = $6 AND upstream_id = $7 \
         AND kind = $8 AND item_key = $9 AND definition_hash = $10",
    )
    .bind(accepted)
    .bind(held)
    .bind(since)
    .bind(kept)
    .bind(now_ms())
    .bind(tenant_id)
    .bind(upstream_id)
    .bind(kind.as_str())
    .bind(key)
    .bind(definition_hash)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
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
