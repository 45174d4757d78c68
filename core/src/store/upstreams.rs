//! Registered upstream MCP servers.

use super::{Store, now_ms};

/// An upstream row. `spec` holds secrets and never leaves the server.
#[derive(Debug, Clone)]
pub struct UpstreamRow {
    /// `ups_…`
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Upstream name.
    pub name: String,
    /// `stdio` or `streamable_http`.
    pub transport: String,
    /// The spec as JSON, secrets included.
    pub spec: String,
    /// Displayable endpoint.
    pub endpoint: String,
    /// Fingerprint of the normalized endpoint.
    pub fingerprint: String,
    /// `registered`, `connected` or `error`.
    pub status: String,
    /// Last connection or sync error (safe to show).
    pub last_error: Option<String>,
    /// Epoch ms.
    pub last_synced_at: Option<i64>,
    /// Creator.
    pub created_by: String,
    /// Epoch ms.
    pub created_at: i64,
    /// Counts the replacements of its credentials (0 as registered).
    pub credential_version: i64,
}

type Tuple = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    String,
    i64,
    i64,
);

fn row(t: Tuple) -> UpstreamRow {
    UpstreamRow {
        id: t.0,
        tenant_id: t.1,
        name: t.2,
        transport: t.3,
        spec: t.4,
        endpoint: t.5,
        fingerprint: t.6,
        status: t.7,
        last_error: t.8,
        last_synced_at: t.9,
        created_by: t.10,
        created_at: t.11,
        credential_version: t.12,
    }
}

const COLUMNS: &str = "id, tenant_id, name, transport, spec, endpoint, fingerprint, status, last_error, last_synced_at, created_by, created_at, credential_version";

/// Stores a new upstream; `Ok(false)` when the tenant already has one of that name.
pub async fn insert(store: &Store, u: &UpstreamRow) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(&format!(
        "INSERT INTO upstreams ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         ON CONFLICT (tenant_id, name) DO NOTHING"
    ))
    .bind(&u.id)
    .bind(&u.tenant_id)
    .bind(&u.name)
    .bind(&u.transport)
    .bind(&u.spec)
    .bind(&u.endpoint)
    .bind(&u.fingerprint)
    .bind(&u.status)
    .bind(u.last_error.as_deref())
    .bind(u.last_synced_at)
    .bind(&u.created_by)
    .bind(u.created_at)
    .bind(u.credential_version)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// One upstream of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<UpstreamRow>, sqlx::Error> {
    let r: Option<Tuple> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM upstreams WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    Ok(r.map(row))
}

/// A tenant's upstreams, by name.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<UpstreamRow>, sqlx::Error> {
    let rows: Vec<Tuple> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM upstreams WHERE tenant_id = $1 ORDER BY name"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(row).collect())
}

/// Deletes an upstream registration; whether it existed.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM upstreams WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(store.pool())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Records the outcome of a connection or sync.
pub async fn set_status(
    store: &Store,
    id: &str,
    status: &str,
    error: Option<&str>,
    synced: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE upstreams SET status = $2, last_error = $3, \
         last_synced_at = CASE WHEN $4 = 1 THEN $5 ELSE last_synced_at END WHERE id = $1",
    )
    .bind(id)
    .bind(status)
    .bind(error)
    .bind(i64::from(synced))
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Replaces an upstream's stored spec (its credentials changed) if its credentials are still at
/// `version`, counting the version up; the new version, or `None` when the upstream is gone or
/// another replacement came first.
pub async fn replace_credentials(
    store: &Store,
    tenant_id: &str,
    id: &str,
    spec: &str,
    version: i64,
) -> Result<Option<i64>, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE upstreams SET spec = $3, credential_version = credential_version + 1 \
         WHERE tenant_id = $1 AND id = $2 AND credential_version = $4",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(spec)
    .bind(version)
    .execute(store.pool())
    .await?;
    Ok((done.rows_affected() == 1).then_some(version + 1))
}

/// Every upstream's `(tenant, id, spec)`, of every tenant (re-encrypting stored secrets).
pub async fn all_specs(store: &Store) -> Result<Vec<(String, String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT tenant_id, id, spec FROM upstreams ORDER BY tenant_id, id")
        .fetch_all(store.pool())
        .await
}

/// Replaces a stored spec by the same content in another form (encrypted, or under another
/// key) if it is still `old`; the credential version stays. Whether it was replaced.
pub async fn reseal_spec(
    store: &Store,
    tenant_id: &str,
    id: &str,
    old: &str,
    new: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE upstreams SET spec = $4 WHERE tenant_id = $1 AND id = $2 AND spec = $3",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(old)
    .bind(new)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}
