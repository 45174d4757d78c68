//! Exposure sessions and their manifests.

use super::{Store, now_ms};

/// A session row.
#[derive(Debug, Clone)]
pub struct SessionRow {
    /// `ses_…`
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Environment.
    pub environment: String,
    /// The pinned actor.
    pub actor_id: String,
    /// Preset hint.
    pub preset: Option<String>,
    /// Entity hint.
    pub entity: Option<String>,
    /// Parent session of a fork.
    pub parent_id: Option<String>,
    /// The fork's execution allowlist (JSON list).
    pub fork_tools: Option<String>,
    /// Epoch ms.
    pub created_at: i64,
    /// Epoch ms.
    pub revoked_at: Option<i64>,
}

type SessionTuple = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
);

fn session(t: SessionTuple) -> SessionRow {
    SessionRow {
        id: t.0,
        tenant_id: t.1,
        environment: t.2,
        actor_id: t.3,
        preset: t.4,
        entity: t.5,
        parent_id: t.6,
        fork_tools: t.7,
        created_at: t.8,
        revoked_at: t.9,
    }
}

/// SQL that holds when `column` (a session id) is null or names one of tenant `$1`'s exposure
/// sessions in one of `count` environments bound from parameter `$first` on: how reads of
/// environment-bearing rows (invocations, journal records) are confined to a principal's
/// environments (CONTRACT §15). A record of no session is tenant-wide.
pub fn in_environments(column: &str, first: usize, count: usize) -> String {
    let placeholders = placeholders(first, count);
    if count == 0 {
        return format!("{column} IS NULL");
    }
    format!(
        "({column} IS NULL OR {column} IN (SELECT id FROM exposure_sessions \
         WHERE tenant_id = $1 AND environment IN ({placeholders})))"
    )
}

/// `$first, …` for `count` parameters.
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// SQL that holds unless `column` names one of tenant `$1`'s exposure sessions in an
/// environment other than the `count` bound from parameter `$first` on: how journal records
/// are confined. A record of no session, or of a session that does not exist (a refusal of an
/// id somebody made up, which names the caller's environment), is tenant-wide.
pub fn not_of_other_environments(column: &str, first: usize, count: usize) -> String {
    let placeholders = placeholders(first, count);
    let others = if count == 0 {
        String::new()
    } else {
        format!(" AND environment NOT IN ({placeholders})")
    };
    format!(
        "({column} IS NULL OR {column} NOT IN (SELECT id FROM exposure_sessions \
         WHERE tenant_id = $1{others}))"
    )
}

const SESSION_COLUMNS: &str = "id, tenant_id, environment, actor_id, preset, entity, parent_id, fork_tools, created_at, revoked_at";

/// Stores a new session.
pub async fn insert_session(store: &Store, s: &SessionRow) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("INSERT INTO exposure_sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"))
        .bind(&s.id)
        .bind(&s.tenant_id)
        .bind(&s.environment)
        .bind(&s.actor_id)
        .bind(s.preset.as_deref())
        .bind(s.entity.as_deref())
        .bind(s.parent_id.as_deref())
        .bind(s.fork_tools.as_deref())
        .bind(s.created_at)
        .bind(s.revoked_at)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// One session of a tenant.
pub async fn find_session(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<SessionRow>, sqlx::Error> {
    let row: Option<SessionTuple> = sqlx::query_as(&format!(
        "SELECT {SESSION_COLUMNS} FROM exposure_sessions WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(session))
}

/// A tenant's sessions, newest first (at most `limit`).
pub async fn list_sessions(
    store: &Store,
    tenant_id: &str,
    limit: i64,
) -> Result<Vec<SessionRow>, sqlx::Error> {
    let rows: Vec<SessionTuple> = sqlx::query_as(&format!(
        "SELECT {SESSION_COLUMNS} FROM exposure_sessions WHERE tenant_id = $1 ORDER BY created_at DESC, id LIMIT $2"
    ))
    .bind(tenant_id)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(session).collect())
}

/// Revokes a session (idempotent; keeps the first time).
pub async fn revoke_session(store: &Store, tenant_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let done = sqlx::query("UPDATE exposure_sessions SET revoked_at = COALESCE(revoked_at, $3) WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .bind(now)
        .execute(store.pool())
        .await?;
    // Its forks go with it: a fork acts for its parent and cannot outlive its revocation.
    sqlx::query("UPDATE exposure_sessions SET revoked_at = $3 WHERE tenant_id = $1 AND parent_id = $2 AND revoked_at IS NULL")
        .bind(tenant_id)
        .bind(id)
        .bind(now)
        .execute(store.pool())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// A manifest row.
#[derive(Debug, Clone)]
pub struct ManifestRow {
    /// `man_…`
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Session.
    pub session_id: String,
    /// `lea_…`
    pub lease_id: String,
    /// Epoch ms.
    pub lease_expires_at: i64,
    /// Epoch ms.
    pub issued_at: i64,
    /// The engine's manifest (JSON).
    pub manifest: String,
    /// The signed manifest document (JSON).
    pub document: String,
    /// Its signature.
    pub signature: String,
}

type ManifestTuple = (
    String,
    String,
    String,
    String,
    i64,
    i64,
    String,
    String,
    String,
);

fn manifest(t: ManifestTuple) -> ManifestRow {
    ManifestRow {
        id: t.0,
        tenant_id: t.1,
        session_id: t.2,
        lease_id: t.3,
        lease_expires_at: t.4,
        issued_at: t.5,
        manifest: t.6,
        document: t.7,
        signature: t.8,
    }
}

const MANIFEST_COLUMNS: &str = "id, tenant_id, session_id, lease_id, lease_expires_at, issued_at, manifest, document, signature";

/// Who listed a manifest: the 2025-era MCP connection whose `list_changed` stream watches it
/// ([`watched_manifests`]), and the principal whose calls without an echo may bind to it
/// ([`bindable_grant`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ListedBy<'a> {
    /// The `Mcp-Session-Id` that listed it.
    pub mcp_session: Option<&'a str>,
    /// The principal (`tok_…`, `usr_…`) of a plain `/mcp` listing.
    pub bindable_by: Option<&'a str>,
}

/// Stores a granted manifest, with who listed it.
pub async fn insert_manifest(
    store: &Store,
    m: &ManifestRow,
    listed_by: ListedBy<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO manifests ({MANIFEST_COLUMNS}, mcp_session_id, bindable_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
    ))
    .bind(&m.id)
    .bind(&m.tenant_id)
    .bind(&m.session_id)
    .bind(&m.lease_id)
    .bind(m.lease_expires_at)
    .bind(m.issued_at)
    .bind(&m.manifest)
    .bind(&m.document)
    .bind(&m.signature)
    .bind(listed_by.mcp_session)
    .bind(listed_by.bindable_by)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Where a call without an echo looks for its grant.
#[derive(Debug, Clone, Copy)]
pub enum BindWithin<'a> {
    /// 2025 eras: grants listed on this `Mcp-Session-Id` (in this environment, when named).
    McpSession(&'a str, Option<&'a str>),
    /// Without an MCP session (2026-07-28): grants listed without one, in this environment.
    Environment(&'a str),
}

/// The newest grant `principal` may bind a call without an echo to (`binding: "implicit"`):
/// one of its plain `/mcp` listings within `within`, its lease running at `now`, its session
/// not revoked. The manifest id and the session's environment.
pub async fn bindable_grant(
    store: &Store,
    tenant_id: &str,
    principal: &str,
    within: BindWithin<'_>,
    now: i64,
) -> Result<Option<(String, String)>, sqlx::Error> {
    const SELECT: &str = "SELECT m.id, s.environment FROM manifests m \
        JOIN exposure_sessions s ON s.id = m.session_id \
        WHERE m.tenant_id = $1 AND m.bindable_by = $2 AND m.lease_expires_at > $3 \
        AND s.revoked_at IS NULL";
    const NEWEST: &str = "ORDER BY m.issued_at DESC, m.id DESC LIMIT 1";
    let query = match within {
        BindWithin::McpSession(_, None) => {
            format!("{SELECT} AND m.mcp_session_id = $4 {NEWEST}")
        }
        BindWithin::McpSession(_, Some(_)) => {
            format!("{SELECT} AND m.mcp_session_id = $4 AND s.environment = $5 {NEWEST}")
        }
        BindWithin::Environment(_) => {
            format!("{SELECT} AND m.mcp_session_id IS NULL AND s.environment = $4 {NEWEST}")
        }
    };
    let q = sqlx::query_as(&query)
        .bind(tenant_id)
        .bind(principal)
        .bind(now);
    let q = match within {
        BindWithin::McpSession(session, environment) => {
            let q = q.bind(session);
            match environment {
                Some(env) => q.bind(env),
                None => q,
            }
        }
        BindWithin::Environment(env) => q.bind(env),
    };
    q.fetch_optional(store.pool()).await
}

/// Manifests a `list_changed` stream of `actor_id` watches: per exposure session, the latest
/// one whose lease has not ended at `now`, newest first, at most `limit` sessions. With
/// `mcp_session`, the ones that MCP connection listed; otherwise those of the actor's `limit`
/// newest sessions that are not revoked. Only sessions of `environments` when given (a
/// confined listener never hears another environment's session ids).
pub async fn watched_manifests(
    store: &Store,
    tenant_id: &str,
    actor_id: &str,
    mcp_session: Option<&str>,
    now: i64,
    limit: i64,
    environments: Option<&[String]>,
) -> Result<Vec<ManifestRow>, sqlx::Error> {
    let columns = MANIFEST_COLUMNS
        .split(", ")
        .map(|c| format!("m.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let confined = |column: &str| {
        environments
            .map(|e| format!(" AND {}", in_environments(column, 6, e.len())))
            .unwrap_or_default()
    };
    let sql = match mcp_session {
        Some(_) => format!(
            "SELECT {columns} FROM manifests AS m \
             JOIN exposure_sessions AS s ON s.id = m.session_id \
             WHERE m.tenant_id = $1 AND m.mcp_session_id = $2 AND s.actor_id = $3 \
               AND s.revoked_at IS NULL AND m.lease_expires_at > $4{} \
             ORDER BY m.issued_at DESC, m.id DESC LIMIT $5",
            confined("s.id")
        ),
        None => format!(
            "SELECT {columns} FROM manifests AS m \
             JOIN (SELECT id FROM exposure_sessions \
                   WHERE tenant_id = $1 AND actor_id = $2 AND revoked_at IS NULL{} \
                   ORDER BY created_at DESC LIMIT $3) AS s ON s.id = m.session_id \
             WHERE m.lease_expires_at > $4 \
             ORDER BY m.issued_at DESC, m.id DESC LIMIT $5",
            confined("id")
        ),
    };
    let query = sqlx::query_as(&sql).bind(tenant_id);
    let mut query = match mcp_session {
        Some(mcp) => query.bind(mcp).bind(actor_id).bind(now),
        None => query.bind(actor_id).bind(limit).bind(now),
    }
    .bind(limit.saturating_mul(4));
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    let rows: Vec<ManifestTuple> = query.fetch_all(store.pool()).await?;
    let mut seen = std::collections::HashSet::new();
    Ok(rows
        .into_iter()
        .map(manifest)
        .filter(|m| seen.insert(m.session_id.clone()))
        .take(usize::try_from(limit).unwrap_or(0))
        .collect())
}

/// `(id, preset, entity)` of those of the sessions `ids` of `tenant_id` that exist.
pub async fn session_hints(
    store: &Store,
    tenant_id: &str,
    ids: &[String],
) -> Result<Vec<(String, Option<String>, Option<String>)>, sqlx::Error> {
    let mut found = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let placeholders: Vec<String> = (2..chunk.len() + 2).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT id, preset, entity FROM exposure_sessions WHERE tenant_id = $1 AND id IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query_as(&sql).bind(tenant_id);
        for id in chunk {
            query = query.bind(id);
        }
        let rows: Vec<(String, Option<String>, Option<String>)> =
            query.fetch_all(store.pool()).await?;
        found.extend(rows);
    }
    Ok(found)
}

/// `(id, manifest JSON)` of those of the manifests `ids` of `tenant_id` that exist.
pub async fn manifest_bodies(
    store: &Store,
    tenant_id: &str,
    ids: &[String],
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let mut found = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let placeholders: Vec<String> = (2..chunk.len() + 2).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT id, manifest FROM manifests WHERE tenant_id = $1 AND id IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query_as(&sql).bind(tenant_id);
        for id in chunk {
            query = query.bind(id);
        }
        let rows: Vec<(String, String)> = query.fetch_all(store.pool()).await?;
        found.extend(rows);
    }
    Ok(found)
}

/// The latest manifest of a session.
pub async fn latest_manifest(
    store: &Store,
    tenant_id: &str,
    session_id: &str,
) -> Result<Option<ManifestRow>, sqlx::Error> {
    let row: Option<ManifestTuple> = sqlx::query_as(&format!(
        "SELECT {MANIFEST_COLUMNS} FROM manifests WHERE tenant_id = $1 AND session_id = $2 ORDER BY issued_at DESC, id DESC LIMIT 1"
    ))
    .bind(tenant_id)
    .bind(session_id)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(manifest))
}

/// Every manifest of a session, oldest first.
pub async fn manifests_of(
    store: &Store,
    tenant_id: &str,
    session_id: &str,
) -> Result<Vec<ManifestRow>, sqlx::Error> {
    let rows: Vec<ManifestTuple> = sqlx::query_as(&format!(
        "SELECT {MANIFEST_COLUMNS} FROM manifests WHERE tenant_id = $1 AND session_id = $2 ORDER BY issued_at, id"
    ))
    .bind(tenant_id)
    .bind(session_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(manifest).collect())
}

/// The ids of a session's forks, oldest first.
pub async fn fork_ids(
    store: &Store,
    tenant_id: &str,
    parent_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT id FROM exposure_sessions WHERE tenant_id = $1 AND parent_id = $2 ORDER BY created_at, id",
    )
    .bind(tenant_id)
    .bind(parent_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// A manifest by id, within a tenant.
pub async fn find_manifest(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<ManifestRow>, sqlx::Error> {
    let row: Option<ManifestTuple> = sqlx::query_as(&format!(
        "SELECT {MANIFEST_COLUMNS} FROM manifests WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(manifest))
}
