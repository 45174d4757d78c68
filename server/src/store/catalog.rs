//! The tool catalog: definitions as tools describe themselves, descriptors as admins set them.

use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use engine::catalog::{CatalogTool, Fingerprints};
use engine::descriptor::{ToolDescriptor, ToolSource};

use super::{Store, now_ms};

const COLUMNS: &str = "name, upstream_id, raw_server, raw_tool, definition, version, family, risk, \
    required_scope, dry_run_argument, price_cents, definition_hash, schema_hash";

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
    let mut d = serde_json::Map::new();
    if let Some(t) = &tool.title {
        d.insert("title".into(), Value::String(t.clone()));
    }
    if let Some(t) = &tool.description {
        d.insert("description".into(), Value::String(t.clone()));
    }
    d.insert("input_schema".into(), tool.input_schema.clone());
    if let Some(o) = &tool.output_schema {
        d.insert("output_schema".into(), o.clone());
    }
    if let Some(a) = &tool.annotations {
        d.insert("annotations".into(), a.clone());
    }
    Value::Object(d)
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

/// Inserts or replaces a tool with everything in `tool`, whatever the row held (the operator's
/// import and tests; syncs and admins use [`find_revised`] and [`write_if`]).
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

/// A tool as read for a change, with the revision its write must still find.
#[derive(Debug, Clone)]
pub struct Revised {
    pub tool: ToolDescriptor,
    pub revision: i64,
}

/// One tool with its revision, for a read-change-write ([`write_if`]).
pub async fn find_revised(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<Revised>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS}, revision FROM tools WHERE tenant_id = $1 AND name = $2"
    ))
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(store.pool())
    .await?;
    row.map(|row| {
        Ok(Revised {
            tool: from_row(&row)?,
            revision: row.try_get("revision")?,
        })
    })
    .transpose()
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

/// The tenant's catalog, by name.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<ToolDescriptor>, sqlx::Error> {
    select_all(store, tenant_id, from_row).await
}

/// The tenant's catalog, by name, with the fingerprints manifests need.
pub async fn list_fingerprinted(
    store: &Store,
    tenant_id: &str,
) -> Result<Vec<CatalogTool>, sqlx::Error> {
    select_all(store, tenant_id, fingerprinted_from_row).await
}

/// When each tool of a tenant last changed (definition or descriptor), epoch ms, by name.
pub async fn updated_times(
    store: &Store,
    tenant_id: &str,
) -> Result<std::collections::HashMap<String, i64>, sqlx::Error> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT name, updated_at FROM tools WHERE tenant_id = $1")
            .bind(tenant_id)
            .fetch_all(store.pool())
            .await?;
    Ok(rows.into_iter().collect())
}

/// One tool.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<ToolDescriptor>, sqlx::Error> {
    select_one(store, tenant_id, name, from_row).await
}

/// One tool with its fingerprints.
pub async fn find_fingerprinted(
    store: &Store,
    tenant_id: &str,
    name: &str,
) -> Result<Option<CatalogTool>, sqlx::Error> {
    select_one(store, tenant_id, name, fingerprinted_from_row).await
}

async fn select_all<T>(
    store: &Store,
    tenant_id: &str,
    decode: fn(&AnyRow) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM tools WHERE tenant_id = $1 ORDER BY name"
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
) -> Result<Option<T>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM tools WHERE tenant_id = $1 AND name = $2"
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
