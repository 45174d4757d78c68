//! The tool catalog: definitions as tools describe themselves, descriptors as admins set them,
//! and each tool's drift triage (the definition the tenant last accepted, and whether a change is
//! held for review). A held tool is not in [`list_fingerprinted`] or [`find_fingerprinted`], the
//! reads manifests and calls make: it is left out of manifests and its calls meet
//! `manifest_drift`.

use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use engine::catalog::{CatalogTool, Fingerprints};
use engine::descriptor::{ToolDescriptor, ToolSource};
use engine::drift::{Definition, DriftClass};

use super::{Store, now_ms};

const COLUMNS: &str = "name, upstream_id, raw_server, raw_tool, definition, version, family, risk, \
    required_scope, dry_run_argument, price_cents, definition_hash, schema_hash";

/// The drift triage columns (migration 0020).
const DRIFT_COLUMNS: &str = "accepted_definition, held_changes, held_since, held_kept_hash";

/// Only tools that are not held.
const NOT_HELD: &str = "held_changes IS NULL";

fn from_row(row: &AnyRow) -> Result<ToolDescriptor, sqlx::Error> {
    let decode = |e: serde_json::Error| sqlx::Error::Decode(Box::new(e));
    let definition: Value =
        serde_json::from_str(&row.try_get::<String, _>("definition")?).map_err(decode)?;
    let risk: Vec<String> =
        serde_json::from_str(&row.try_get::<String, _>("risk")?).map_err(decode)?;
    let upstream_id: Option<String> = row.try_get("upstream_id")?;
    let source = match (
        upstream_id,
        row.try_get::<Option<String>, _>("raw_server")?,
        row.try_get::<Option<String>, _>("raw_tool")?,
    ) {
        (Some(upstream_id), Some(server), Some(tool)) => ToolSource::Mcp {
            upstream_id,
            server,
            tool,
        },
        _ => ToolSource::Builtin,
    };
    let text = |key: &str| {
        definition
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let price: Option<i64> = row.try_get("price_cents")?;
    Ok(ToolDescriptor {
        name: row.try_get("name")?,
        version: row.try_get("version")?,
        title: text("title"),
        description: text("description"),
        input_schema: definition
            .get("input_schema")
            .cloned()
            .unwrap_or(Value::Null),
        output_schema: definition.get("output_schema").cloned(),
        annotations: definition.get("annotations").cloned(),
        family: row.try_get("family")?,
        risk,
        required_scope: row.try_get("required_scope")?,
        source,
        dry_run_argument: row.try_get("dry_run_argument")?,
        price_cents: price.and_then(|p| u64::try_from(p).ok()),
    })
}

/// The tool of a row with its stored fingerprints (computed now for rows written before they
/// were stored).
fn fingerprinted_from_row(row: &AnyRow) -> Result<CatalogTool, sqlx::Error> {
    let tool = from_row(row)?;
    let stored = (
        row.try_get::<Option<String>, _>("definition_hash")?,
        row.try_get::<Option<String>, _>("schema_hash")?,
    );
    Ok(match stored {
        (Some(definition_hash), Some(schema_hash)) => CatalogTool::with_fingerprints(
            tool,
            Fingerprints {
                definition_hash,
                schema_hash,
            },
        ),
        _ => CatalogTool::new(tool),
    })
}

fn definition_of(tool: &ToolDescriptor) -> Value {
    Definition::from(tool).to_stored()
}

/// The values of every column of `tool`'s row, bound as `$1`–`$15` in `COLUMNS` order after
/// `tenant_id` (`updated_at` last).
fn bind_row<'q>(
    sql: &'q str,
    tenant_id: &'q str,
    tool: &'q ToolDescriptor,
) -> Result<sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>, sqlx::Error> {
    let (upstream_id, server, raw) = match &tool.source {
        ToolSource::Builtin => (None, None, None),
        ToolSource::Mcp {
            upstream_id,
            server,
            tool,
        } => (
            Some(upstream_id.as_str()),
            Some(server.as_str()),
            Some(tool.as_str()),
        ),
    };
    let encode = |e: serde_json::Error| sqlx::Error::Encode(Box::new(e));
    let fingerprints = Fingerprints::of(tool);
    Ok(sqlx::query(sql)
        .bind(tenant_id)
        .bind(&tool.name)
        .bind(upstream_id)
        .bind(server)
        .bind(raw)
        .bind(serde_json::to_string(&definition_of(tool)).map_err(encode)?)
        .bind(&tool.version)
        .bind(tool.family.as_deref())
        .bind(serde_json::to_string(&tool.risk).map_err(encode)?)
        .bind(tool.required_scope.as_deref())
        .bind(tool.dry_run_argument.as_deref())
        .bind(tool.price_cents.and_then(|p| i64::try_from(p).ok()))
        // Computed from exactly what is written, in the same statement: they cannot disagree.
        .bind(fingerprints.definition_hash)
        .bind(fingerprints.schema_hash)
        .bind(now_ms()))
}

const SET_ALL: &str = "upstream_id = $3, raw_server = $4, raw_tool = $5, definition = $6, \
    version = $7, family = $8, risk = $9, required_scope = $10, dry_run_argument = $11, \
    price_cents = $12, definition_hash = $13, schema_hash = $14, updated_at = $15";

/// Inserts or replaces a tool with everything in `tool`, whatever the row held (written for
/// import and tests: the tests only; syncs and admins use [`find_revised`] and [`write_if`]).
#[cfg(feature = "test-hooks")]
pub async fn upsert(
    store: &Store,
    tenant_id: &str,
    tool: &ToolDescriptor,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO tools (tenant_id, {COLUMNS}, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (tenant_id, name) DO UPDATE SET {SET_ALL}, revision = tools.revision + 1"
    );
    bind_row(&sql, tenant_id, tool)?
        .execute(store.pool())
        .await?;
    Ok(())
}

/// A tool as read for a change, with the revision its write must still find, and its drift
/// triage.
#[derive(Debug, Clone)]
pub struct Revised {
    /// The tool as its upstream defines it now, with the admin's descriptor.
    pub tool: ToolDescriptor,
    pub revision: i64,
    pub drift: Drift,
    /// When the row last changed (ms).
    pub updated_at: i64,
}

/// A tool's drift triage, as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drift {
    /// The definition the tenant last accepted, when the current one differs from it.
    pub accepted: Option<Definition>,
    /// Set while the tool is held for review.
    pub held: Option<Held>,
}

/// A change held for review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Every class of the change from the accepted definition (`removed` alone when the
    /// upstream stopped listing the tool).
    pub changes: Vec<DriftClass>,
    /// When the tool was first held (ms).
    pub since: i64,
    /// The definition hash an admin chose to keep held (`:keep-held`).
    pub kept_hash: Option<String>,
}

impl Drift {
    /// The definition the tenant last accepted, given the tool's current one.
    pub fn accepted_or(&self, current: &ToolDescriptor) -> Definition {
        self.accepted
            .clone()
            .unwrap_or_else(|| Definition::from(current))
    }
}

fn drift_from_row(row: &AnyRow) -> Result<Drift, sqlx::Error> {
    let decode = |e: serde_json::Error| sqlx::Error::Decode(Box::new(e));
    let accepted = row
        .try_get::<Option<String>, _>("accepted_definition")?
        .map(|text| serde_json::from_str::<Value>(&text).map_err(decode))
        .transpose()?
        .map(|stored| Definition::from_stored(&stored));
    Ok(Drift {
        accepted,
        held: held_from_row(row)?,
    })
}

/// A held change from its columns (`held_changes`, `held_since`, `held_kept_hash`), of a tool
/// or of a catalogue item ([`super::items`]).
pub(super) fn held_from_row(row: &AnyRow) -> Result<Option<Held>, sqlx::Error> {
    let decode = |e: serde_json::Error| sqlx::Error::Decode(Box::new(e));
    let Some(text) = row.try_get::<Option<String>, _>("held_changes")? else {
        return Ok(None);
    };
    let names: Vec<String> = serde_json::from_str(&text).map_err(decode)?;
    Ok(Some(Held {
        // A name this build does not know still holds: it is only dropped from the list shown.
        changes: names.iter().filter_map(|n| DriftClass::parse(n)).collect(),
        since: row.try_get::<Option<i64>, _>("held_since")?.unwrap_or(0),
        kept_hash: row.try_get("held_kept_hash")?,
    }))
}

/// The stored values of a held change: its classes (JSON), since, kept hash.
pub(super) fn held_values(held: Option<&Held>) -> (Option<String>, Option<i64>, Option<String>) {
    held.map_or((None, None, None), |h| {
        let names: Vec<&str> = h.changes.iter().map(|c| c.as_str()).collect();
        (
            Some(serde_json::Value::from(names).to_string()),
            Some(h.since),
            h.kept_hash.clone(),
        )
    })
}

fn revised_from_row(row: &AnyRow) -> Result<Revised, sqlx::Error> {
    Ok(Revised {
        tool: from_row(row)?,
        revision: row.try_get("revision")?,
        drift: drift_from_row(row)?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// One tool with its revision and triage, for a read-change-write ([`write_if`],
/// [`write_synced_if`], [`set_drift_if`]).
pub async fn find_revised(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<Revised>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS}, {DRIFT_COLUMNS}, revision, updated_at FROM tools WHERE tenant_id = $1 AND name = $2"
    ))
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(revised_from_row).transpose()
}

/// Every tool of the tenant with its triage, by name (held ones included).
pub async fn list_revised(store: &Store, tenant_id: &str) -> Result<Vec<Revised>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS}, {DRIFT_COLUMNS}, revision, updated_at FROM tools WHERE tenant_id = $1 ORDER BY name"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(revised_from_row).collect()
}

/// The stored values of a triage: accepted definition, held changes, since, kept hash.
type DriftValues = (Option<String>, Option<String>, Option<i64>, Option<String>);

fn drift_values(drift: &Drift) -> Result<DriftValues, sqlx::Error> {
    let encode = |e: serde_json::Error| sqlx::Error::Encode(Box::new(e));
    let accepted = drift
        .accepted
        .as_ref()
        .map(|d| serde_json::to_string(&d.to_stored()).map_err(encode))
        .transpose()?;
    let (changes, since, kept) = held_values(drift.held.as_ref());
    Ok((accepted, changes, since, kept))
}

/// What an upstream sync writes: `tool` (its definition as listed now) and its triage, only if
/// the row is still at revision `expected` (`None`: only if there is no row yet; a new tool is
/// never held, its first definition is the accepted one).
pub async fn write_synced_if(
    store: &Store,
    tenant_id: &str,
    tool: &ToolDescriptor,
    drift: &Drift,
    expected: Option<i64>,
) -> Result<bool, sqlx::Error> {
    let Some(revision) = expected else {
        return write_if(store, tenant_id, tool, None).await;
    };
    let (accepted, changes, since, kept) = drift_values(drift)?;
    let sql = format!(
        "UPDATE tools SET {SET_ALL}, accepted_definition = $16, held_changes = $17, \
         held_since = $18, held_kept_hash = $19, revision = revision + 1 \
         WHERE tenant_id = $1 AND name = $2 AND revision = $20"
    );
    let done = bind_row(&sql, tenant_id, tool)?
        .bind(accepted)
        .bind(changes)
        .bind(since)
        .bind(kept)
        .bind(revision)
        .execute(store.pool())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Replaces only the triage of tool `name`, if its row is still at revision `expected`.
pub async fn set_drift_if(
    store: &Store,
    tenant_id: &str,
    name: &str,
    drift: &Drift,
    expected: i64,
) -> Result<bool, sqlx::Error> {
    let (accepted, changes, since, kept) = drift_values(drift)?;
    let done = sqlx::query(
        "UPDATE tools SET accepted_definition = $3, held_changes = $4, held_since = $5, \
         held_kept_hash = $6, updated_at = $7, revision = revision + 1 \
         WHERE tenant_id = $1 AND name = $2 AND revision = $8",
    )
    .bind(tenant_id)
    .bind(name)
    .bind(accepted)
    .bind(changes)
    .bind(since)
    .bind(kept)
    .bind(now_ms())
    .bind(expected)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Deletes tool `name` if its row is still at revision `expected`.
pub async fn delete_if(
    store: &Store,
    tenant_id: &str,
    name: &str,
    expected: i64,
) -> Result<bool, sqlx::Error> {
    let done =
        sqlx::query("DELETE FROM tools WHERE tenant_id = $1 AND name = $2 AND revision = $3")
            .bind(tenant_id)
            .bind(name)
            .bind(expected)
            .execute(store.pool())
            .await?;
    Ok(done.rows_affected() == 1)
}

/// The names of the tools of `upstream_id` in the catalog (held ones included).
pub async fn names_of_upstream(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM tools WHERE tenant_id = $1 AND upstream_id = $2 ORDER BY name",
    )
    .bind(tenant_id)
    .bind(upstream_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(|(n,)| n).collect())
}

/// A tenant's drift triage document (`{"<class>": "accept" | "hold"}`), who set it and when
/// (ms); `None` when it never did (the defaults hold).
pub async fn drift_settings(
    store: &Store,
    tenant_id: &str,
) -> Result<Option<(Value, String, i64)>, sqlx::Error> {
    let row: Option<(String, String, i64)> = sqlx::query_as(
        "SELECT drift, updated_by, updated_at FROM catalog_settings WHERE tenant_id = $1",
    )
    .bind(tenant_id)
    .fetch_optional(store.pool())
    .await?;
    row.map(|(drift, by, at)| {
        serde_json::from_str(&drift)
            .map(|v| (v, by, at))
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))
    })
    .transpose()
}

/// Stores a tenant's drift triage document.
pub async fn put_drift_settings(
    store: &Store,
    tenant_id: &str,
    drift: &Value,
    updated_by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO catalog_settings (tenant_id, drift, updated_by, updated_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id) DO UPDATE SET \
         drift = excluded.drift, updated_by = excluded.updated_by, updated_at = excluded.updated_at",
    )
    .bind(tenant_id)
    .bind(drift.to_string())
    .bind(updated_by)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Writes `tool` only if its row is still at revision `expected` (`None`: only if there is no
/// row yet). `false` when another write came first: the caller reads again and redoes its change
/// on what is there now, so neither a sync nor an admin puts back a row it read before the other
/// wrote.
pub async fn write_if(
    store: &Store,
    tenant_id: &str,
    tool: &ToolDescriptor,
    expected: Option<i64>,
) -> Result<bool, sqlx::Error> {
    let done = match expected {
        None => {
            let sql = format!(
                "INSERT INTO tools (tenant_id, {COLUMNS}, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (tenant_id, name) DO NOTHING"
            );
            bind_row(&sql, tenant_id, tool)?
                .execute(store.pool())
                .await?
        }
        Some(revision) => {
            let sql = format!(
                "UPDATE tools SET {SET_ALL}, revision = revision + 1 \
                 WHERE tenant_id = $1 AND name = $2 AND revision = $16"
            );
            bind_row(&sql, tenant_id, tool)?
                .bind(revision)
                .execute(store.pool())
                .await?
        }
    };
    Ok(done.rows_affected() == 1)
}

/// The tenant's catalog, by name, held tools included.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<ToolDescriptor>, sqlx::Error> {
    select_all(store, tenant_id, from_row, false).await
}

/// The tools manifests may grant (none that is held), by name.
pub async fn list_exposable(
    store: &Store,
    tenant_id: &str,
) -> Result<Vec<ToolDescriptor>, sqlx::Error> {
    select_all(store, tenant_id, from_row, true).await
}

/// The tools manifests may grant (none that is held), by name, with the fingerprints manifests
/// need.
pub async fn list_fingerprinted(
    store: &Store,
    tenant_id: &str,
) -> Result<Vec<CatalogTool>, sqlx::Error> {
    select_all(store, tenant_id, fingerprinted_from_row, true).await
}

/// One tool, held or not.
#[cfg(feature = "test-hooks")]
pub async fn find(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<ToolDescriptor>, sqlx::Error> {
    select_one(store, tenant_id, name, from_row, false).await
}

/// One tool with its fingerprints, unless it is held (a call of a held tool finds no tool to
/// check its grant against: `manifest_drift`).
pub async fn find_fingerprinted(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<CatalogTool>, sqlx::Error> {
    select_one(store, tenant_id, name, fingerprinted_from_row, true).await
}

async fn select_all<T>(
    store: &Store,
    tenant_id: &str,
    decode: fn(&AnyRow) -> Result<T, sqlx::Error>,
    exposable: bool,
) -> Result<Vec<T>, sqlx::Error> {
    let filter = if exposable {
        format!(" AND {NOT_HELD}")
    } else {
        String::new()
    };
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM tools WHERE tenant_id = $1{filter} ORDER BY name"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(decode).collect()
}

async fn select_one<T>(
    store: &Store,
    tenant_id: &str,
    name: &str,
    decode: fn(&AnyRow) -> Result<T, sqlx::Error>,
    exposable: bool,
) -> Result<Option<T>, sqlx::Error> {
    let filter = if exposable {
        format!(" AND {NOT_HELD}")
    } else {
        String::new()
    };
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM tools WHERE tenant_id = $1 AND name = $2{filter}"
    ))
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(decode).transpose()
}

/// Removes the tools of `upstream_id` whose names are not in `keep` (the upstream stopped
/// listing them); returns their names.
pub async fn remove_missing(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
    keep: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    let current: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM tools WHERE tenant_id = $1 AND upstream_id = $2")
            .bind(tenant_id)
            .bind(upstream_id)
            .fetch_all(store.pool())
            .await?;
    let mut removed = Vec::new();
    for (name,) in current {
        if !keep.contains(&name) {
            sqlx::query("DELETE FROM tools WHERE tenant_id = $1 AND name = $2")
                .bind(tenant_id)
                .bind(&name)
                .execute(store.pool())
                .await?;
            removed.push(name);
        }
    }
    Ok(removed)
}
