//! Policy versions and activations.

use super::{Store, now_ms};

/// One stored version.
#[derive(Debug, Clone)]
pub struct VersionRow {
    /// Policy id.
    pub policy_id: String,
    /// From 1.
    pub version: i64,
    /// The document (JSON text).
    pub document: String,
    /// Creator.
    pub created_by: String,
    /// Epoch ms.
    pub created_at: i64,
}

type Tuple = (String, i64, String, String, i64);

fn from_tuple((policy_id, version, document, created_by, created_at): Tuple) -> VersionRow {
    VersionRow {
        policy_id,
        version,
        document,
        created_by,
        created_at,
    }
}

/// Stores `document` as the next version; returns it. Concurrent writers cannot take the same
/// number (primary key); the loser retries on the new latest.
pub async fn insert_next(
    store: &Store,
    tenant_id: &str,
    policy_id: &str,
    document: &str,
    created_by: &str,
) -> Result<VersionRow, sqlx::Error> {
    for _ in 0..8 {
        let (latest,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(version) FROM policy_versions WHERE tenant_id = $1 AND policy_id = $2",
        )
        .bind(tenant_id)
        .bind(policy_id)
        .fetch_one(store.pool())
        .await?;
        let version = latest.unwrap_or(0) + 1;
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO policy_versions (tenant_id, policy_id, version, document, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, policy_id, version) DO NOTHING",
        )
        .bind(tenant_id)
        .bind(policy_id)
        .bind(version)
        .bind(document)
        .bind(created_by)
        .bind(now)
        .execute(store.pool())
        .await?;
        if done.rows_affected() == 1 {
            return Ok(VersionRow {
                policy_id: policy_id.to_owned(),
                version,
                document: document.to_owned(),
                created_by: created_by.to_owned(),
                created_at: now,
            });
        }
    }
    Err(sqlx::Error::Protocol("policy version contended".into()))
}

/// The latest version of a policy.
pub async fn latest(
    store: &Store,
    tenant_id: &str,
    policy_id: &str,
) -> Result<Option<VersionRow>, sqlx::Error> {
    let row: Option<Tuple> = sqlx::query_as(
        "SELECT policy_id, version, document, created_by, created_at FROM policy_versions \
         WHERE tenant_id = $1 AND policy_id = $2 ORDER BY version DESC LIMIT 1",
    )
    .bind(tenant_id)
    .bind(policy_id)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(from_tuple))
}

/// One version of a policy.
pub async fn version(
    store: &Store,
    tenant_id: &str,
    policy_id: &str,
    version: i64,
) -> Result<Option<VersionRow>, sqlx::Error> {
    let row: Option<Tuple> = sqlx::query_as(
        "SELECT policy_id, version, document, created_by, created_at FROM policy_versions \
         WHERE tenant_id = $1 AND policy_id = $2 AND version = $3",
    )
    .bind(tenant_id)
    .bind(policy_id)
    .bind(version)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(from_tuple))
}

/// Every version of a policy, newest first.
pub async fn versions(
    store: &Store,
    tenant_id: &str,
    policy_id: &str,
) -> Result<Vec<VersionRow>, sqlx::Error> {
    let rows: Vec<Tuple> = sqlx::query_as(
        "SELECT policy_id, version, document, created_by, created_at FROM policy_versions \
         WHERE tenant_id = $1 AND policy_id = $2 ORDER BY version DESC",
    )
    .bind(tenant_id)
    .bind(policy_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(from_tuple).collect())
}

/// The latest version of every policy of a tenant, by id.
pub async fn list_latest(store: &Store, tenant_id: &str) -> Result<Vec<VersionRow>, sqlx::Error> {
    let rows: Vec<Tuple> = sqlx::query_as(
        "SELECT v.policy_id, v.version, v.document, v.created_by, v.created_at FROM policy_versions v \
         WHERE v.tenant_id = $1 AND v.version = \
           (SELECT MAX(w.version) FROM policy_versions w WHERE w.tenant_id = v.tenant_id AND w.policy_id = v.policy_id) \
         ORDER BY v.policy_id",
    )
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(from_tuple).collect())
}

/// Makes `policy_id` the policy of new sessions in `environment`.
pub async fn activate(
    store: &Store,
    tenant_id: &str,
    environment: &str,
    policy_id: &str,
    by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO policy_activations (tenant_id, environment, policy_id, activated_by, activated_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, environment) DO UPDATE SET \
         policy_id = excluded.policy_id, activated_by = excluded.activated_by, activated_at = excluded.activated_at",
    )
    .bind(tenant_id)
    .bind(environment)
    .bind(policy_id)
    .bind(by)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}

/// `(environment, policy_id)` of every activation of a tenant.
pub async fn activations(
    store: &Store,
    tenant_id: &str,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT environment, policy_id FROM policy_activations WHERE tenant_id = $1 ORDER BY environment")
        .bind(tenant_id)
        .fetch_all(store.pool())
        .await
}

/// The policy active in `environment`, if one was activated.
pub async fn active(
    store: &Store,
    tenant_id: &str,
    environment: &str,
) -> Result<Option<String>, sqlx::Error> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT policy_id FROM policy_activations WHERE tenant_id = $1 AND environment = $2",
    )
    .bind(tenant_id)
    .bind(environment)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(|(p,)| p))
}
