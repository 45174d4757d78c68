//! Dashboard users, their failed sign-ins and the addresses and devices they signed in from.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, decode_string_list, now_ms};

/// A user row. Stays inside the server; views are built from it.
#[derive(Debug, Clone)]
pub struct UserRow {
    /// `usr_…`: the immutable public id receipts name as the principal (CONTRACT §15).
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Sign-in name.
    pub username: String,
    /// argon2id PHC string.
    pub password_hash: String,
    /// Scopes (validated when written).
    pub scopes: Vec<String>,
    /// Creator.
    pub created_by: String,
    /// Epoch ms.
    pub created_at: i64,
    /// Environments the user may open sessions in (`*`: every one).
    pub environments: Vec<String>,
}

fn from_row(row: &AnyRow) -> Result<UserRow, sqlx::Error> {
    Ok(UserRow {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        username: row.try_get("username")?,
        password_hash: row.try_get("password_hash")?,
        scopes: decode_string_list(&row.try_get::<String, _>("scopes")?)?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        environments: decode_string_list(&row.try_get::<String, _>("environments")?)?,
    })
}

const COLUMNS: &str =
    "tenant_id, username, password_hash, scopes, created_by, created_at, environments, id";

/// Inserts a user; `Ok(None)` when the name is taken in the tenant.
#[tracing::instrument(skip(store, password_hash))]
pub async fn insert(
    store: &Store,
    tenant_id: &str,
    username: &str,
    password_hash: &str,
    scopes: &[String],
    created_by: &str,
    environments: &[String],
) -> Result<Option<UserRow>, sqlx::Error> {
    let scopes_json =
        serde_json::to_string(scopes).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let environments_json =
        serde_json::to_string(environments).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let row = sqlx::query(&format!(
        "INSERT INTO users ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (tenant_id, username) DO NOTHING RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(username)
    .bind(password_hash)
    .bind(scopes_json)
    .bind(created_by)
    .bind(now_ms())
    .bind(environments_json)
    .bind(crate::ids::new_id("usr"))
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// One user of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    username: &str,
) -> Result<Option<UserRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM users WHERE tenant_id = $1 AND username = $2"
    ))
    .bind(tenant_id)
    .bind(username)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// All users of a tenant, by name.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<UserRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM users WHERE tenant_id = $1 ORDER BY username"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// Replaces a user's scopes; `Ok(None)` when there is no such user in the tenant.
#[cfg(feature = "test-hooks")]
pub async fn set_scopes(
    store: &Store,
    tenant_id: &str,
    username: &str,
    scopes: &[String],
) -> Result<Option<UserRow>, sqlx::Error> {
    set_access(store, tenant_id, username, scopes, None).await
}

/// Replaces a user's scopes and, when given, the environments they may use; the updated user.
pub async fn set_access(
    store: &Store,
    tenant_id: &str,
    username: &str,
    scopes: &[String],
    environments: Option<&[String]>,
) -> Result<Option<UserRow>, sqlx::Error> {
    let encode = |e: serde_json::Error| sqlx::Error::Encode(Box::new(e));
    let scopes_json = serde_json::to_string(scopes).map_err(encode)?;
    let environments_json = environments
        .map(serde_json::to_string)
        .transpose()
        .map_err(encode)?;
    let row = sqlx::query(&format!(
        "UPDATE users SET scopes = $3, environments = COALESCE($4, environments) \
         WHERE tenant_id = $1 AND username = $2 RETURNING {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(username)
    .bind(scopes_json)
    .bind(environments_json)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Number of users in all tenants (a fresh installation has none).
pub async fn count_all(store: &Store) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users")
        .fetch_one(store.pool())
        .await?;
    Ok(n)
}

/// Number of users in a tenant.
pub async fn count(store: &Store, tenant_id: &str) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM users WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(store.pool())
        .await?;
    Ok(n)
}

/// Records a failed sign-in of `username` from `client` (an address) at `now` and forgets
/// failures older than `window_ms`.
#[cfg(feature = "test-hooks")]
pub async fn record_sign_in_failure(
    store: &Store,
    tenant_id: &str,
    username: &str,
    client: &str,
    now: i64,
    window_ms: i64,
) -> Result<(), sqlx::Error> {
    record_device_sign_in_failure(store, tenant_id, username, client, None, now, window_ms).await
}

/// [`record_sign_in_failure`], from the device whose id hashes to `device` when the attempt
/// sent one.
pub async fn record_device_sign_in_failure(
    store: &Store,
    tenant_id: &str,
    username: &str,
    client: &str,
    device: Option<&str>,
    now: i64,
    window_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sign_in_failures (tenant_id, username, client, device, failed_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(client)
    .bind(device.unwrap_or(""))
    .bind(now)
    .execute(store.pool())
    .await?;
    sqlx::query("DELETE FROM sign_in_failures WHERE failed_at < $1")
        .bind(now - window_ms)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Failed sign-ins of one account since `since`: all of them, those from `client`, and when the
/// latest was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SignInFailures {
    /// From every address.
    pub account: i64,
    /// From `client`.
    pub pair: i64,
    /// The latest failure (ms), from any address.
    pub last_at: Option<i64>,
}

/// [`SignInFailures`] of `username` (and of it from `client`) since `since` (ms).
pub async fn sign_in_failures(
    store: &Store,
    tenant_id: &str,
    username: &str,
    client: &str,
    since: i64,
) -> Result<SignInFailures, sqlx::Error> {
    let (account, pair, last_at): (i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN client = $3 THEN 1 ELSE 0 END), 0), \
         MAX(failed_at) FROM sign_in_failures \
         WHERE tenant_id = $1 AND username = $2 AND failed_at >= $4",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(client)
    .bind(since)
    .fetch_one(store.pool())
    .await?;
    Ok(SignInFailures {
        account,
        pair,
        last_at,
    })
}

/// Failed sign-ins of `username` since `since` (ms) from the device whose id hashes to `device`,
/// whatever the address.
pub async fn device_sign_in_failures(
    store: &Store,
    tenant_id: &str,
    username: &str,
    device: &str,
    since: i64,
) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM sign_in_failures \
         WHERE tenant_id = $1 AND username = $2 AND device = $3 AND failed_at >= $4",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(device)
    .bind(since)
    .fetch_one(store.pool())
    .await?;
    Ok(n)
}

/// Where a successful sign-in came from, as its account remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignInSource {
    /// A client address key (an IPv4 address, or an IPv6 /64).
    Address(String),
    /// The SHA-256 (hex) of a device id.
    Device(String),
}

impl SignInSource {
    /// The source as stored (`address:…`, `device:…`).
    pub fn key(&self) -> String {
        match self {
            Self::Address(address) => format!("address:{address}"),
            Self::Device(hash) => format!("device:{hash}"),
        }
    }
}

/// Remembers that `username` signed in from `source` at `now`.
pub async fn remember_sign_in_source(
    store: &Store,
    tenant_id: &str,
    username: &str,
    source: &SignInSource,
    now: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sign_in_sources (tenant_id, username, source, signed_in_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, username, source) DO UPDATE \
         SET signed_in_at = excluded.signed_in_at",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(source.key())
    .bind(now)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// `username` signed in from `source` at or after `since` (ms).
pub async fn sign_in_source_known(
    store: &Store,
    tenant_id: &str,
    username: &str,
    source: &SignInSource,
    since: i64,
) -> Result<bool, sqlx::Error> {
    let found: Option<(i64,)> = sqlx::query_as(
        "SELECT signed_in_at FROM sign_in_sources \
         WHERE tenant_id = $1 AND username = $2 AND source = $3 AND signed_in_at >= $4",
    )
    .bind(tenant_id)
    .bind(username)
    .bind(source.key())
    .bind(since)
    .fetch_optional(store.pool())
    .await?;
    Ok(found.is_some())
}

/// Some account signed in from `source` at or after `since` (ms): the server issued that device
/// id itself, rather than someone choosing it.
pub async fn sign_in_source_issued(
    store: &Store,
    source: &SignInSource,
    since: i64,
) -> Result<bool, sqlx::Error> {
    let found: Option<(i64,)> = sqlx::query_as(
        "SELECT signed_in_at FROM sign_in_sources WHERE source = $1 AND signed_in_at >= $2 \
         LIMIT 1",
    )
    .bind(source.key())
    .bind(since)
    .fetch_optional(store.pool())
    .await?;
    Ok(found.is_some())
}

/// Forgets sources whose latest sign-in was before `before`.
pub async fn delete_sign_in_sources(store: &Store, before: i64) -> Result<u64, sqlx::Error> {
    Ok(
        sqlx::query("DELETE FROM sign_in_sources WHERE signed_in_at < $1")
            .bind(before)
            .execute(store.pool())
            .await?
            .rows_affected(),
    )
}

/// Counts a failed sign-in for a username `tenant_id` does not have, in the hour starting at
/// `hour_start`; returns the hour's count so far (1: the first, which is journaled).
pub async fn count_unknown_user_failure(
    store: &Store,
    tenant_id: &str,
    hour_start: i64,
) -> Result<i64, sqlx::Error> {
    let (n,): (i64,) = sqlx::query_as(
        "INSERT INTO sign_in_unknown_users (tenant_id, hour_start, failures) VALUES ($1, $2, 1) \
         ON CONFLICT (tenant_id, hour_start) DO UPDATE \
         SET failures = sign_in_unknown_users.failures + 1 RETURNING failures",
    )
    .bind(tenant_id)
    .bind(hour_start)
    .fetch_one(store.pool())
    .await?;
    Ok(n)
}

/// Claims, at `now`, the counts of hours that started before `before` for journaling (one node
/// at a time; a claim older than five minutes, of a node that stopped, is taken over):
/// `(tenant, hour_start, failures)`. [`unknown_user_hours_done`] deletes them once journaled,
/// [`unknown_user_hours_release`] gives them back when the journal could not.
pub async fn claim_unknown_user_hours(
    store: &Store,
    before: i64,
    now: i64,
) -> Result<Vec<(String, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE sign_in_unknown_users SET summarizing = $2 \
         WHERE (summarizing = 0 OR summarizing < $3) AND hour_start < $1 \
         RETURNING tenant_id, hour_start, failures",
    )
    .bind(before)
    .bind(now)
    .bind(now - 300_000)
    .fetch_all(store.pool())
    .await
}

/// Deletes a claimed hour's count (it is in the journal now).
pub async fn unknown_user_hours_done(
    store: &Store,
    tenant_id: &str,
    hour_start: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM sign_in_unknown_users WHERE tenant_id = $1 AND hour_start = $2")
        .bind(tenant_id)
        .bind(hour_start)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Releases a claimed hour's count for a later try.
pub async fn unknown_user_hours_release(
    store: &Store,
    tenant_id: &str,
    hour_start: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE sign_in_unknown_users SET summarizing = 0 WHERE tenant_id = $1 AND hour_start = $2",
    )
    .bind(tenant_id)
    .bind(hour_start)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Claims the next sign-in attempt at an account at `now`, if its slot is free, and holds the
/// slot for `spacing_ms`: `Ok(None)` when claimed, `Ok(Some(ms))` with the wait when another
/// attempt holds it.
pub async fn claim_sign_in_slot(
    store: &Store,
    tenant_id: &str,
    username: &str,
    now: i64,
    spacing_ms: i64,
) -> Result<Option<i64>, sqlx::Error> {
    claim_slot(store, tenant_id, username, None, now, spacing_ms).await
}

/// [`claim_sign_in_slot`] for attempts from one known `source` of the account: a slot of its
/// own, which nobody else's attempts hold.
pub async fn claim_sign_in_source_slot(
    store: &Store,
    tenant_id: &str,
    username: &str,
    source: &SignInSource,
    now: i64,
    spacing_ms: i64,
) -> Result<Option<i64>, sqlx::Error> {
    let key = source.key();
    claim_slot(store, tenant_id, username, Some(&key), now, spacing_ms).await
}

/// The account's shared slot (`source` `None`) or a known source's.
async fn claim_slot(
    store: &Store,
    tenant_id: &str,
    username: &str,
    source: Option<&str>,
    now: i64,
    spacing_ms: i64,
) -> Result<Option<i64>, sqlx::Error> {
    if spacing_ms <= 0 {
        // No delay to hold (too few failures): only a slot another attempt still holds waits.
        let next = slot_ends(store, tenant_id, username, source).await?;
        return Ok(next.map(|at| at - now).filter(|wait| *wait > 0));
    }
    let query = match source {
        None => sqlx::query(
            "INSERT INTO sign_in_throttle (tenant_id, username, next_at) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant_id, username) DO UPDATE SET next_at = excluded.next_at \
             WHERE sign_in_throttle.next_at <= $4",
        ),
        Some(_) => sqlx::query(
            "INSERT INTO sign_in_source_throttle (tenant_id, username, next_at, source) \
             VALUES ($1, $2, $3, $5) \
             ON CONFLICT (tenant_id, username, source) DO UPDATE SET next_at = excluded.next_at \
             WHERE sign_in_source_throttle.next_at <= $4",
        ),
    };
    let mut query = query
        .bind(tenant_id)
        .bind(username)
        .bind(now + spacing_ms)
        .bind(now);
    if let Some(source) = source {
        query = query.bind(source);
    }
    let claimed = query.execute(store.pool()).await?.rows_affected();
    if claimed > 0 {
        return Ok(None);
    }
    let next = slot_ends(store, tenant_id, username, source).await?;
    Ok(Some(next.map_or(1, |at| (at - now).max(1))))
}

/// When the slot another attempt holds ends (ms), if there is one.
async fn slot_ends(
    store: &Store,
    tenant_id: &str,
    username: &str,
    source: Option<&str>,
) -> Result<Option<i64>, sqlx::Error> {
    let next: Option<(i64,)> = match source {
        None => {
            sqlx::query_as(
                "SELECT next_at FROM sign_in_throttle WHERE tenant_id = $1 AND username = $2",
            )
            .bind(tenant_id)
            .bind(username)
            .fetch_optional(store.pool())
            .await?
        }
        Some(source) => {
            sqlx::query_as(
                "SELECT next_at FROM sign_in_source_throttle \
                 WHERE tenant_id = $1 AND username = $2 AND source = $3",
            )
            .bind(tenant_id)
            .bind(username)
            .bind(source)
            .fetch_optional(store.pool())
            .await?
        }
    };
    Ok(next.map(|(at,)| at))
}

/// Forgets throttles (the account's and its known sources') that ended before `before`.
pub async fn delete_sign_in_throttles(store: &Store, before: i64) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    for table in ["sign_in_throttle", "sign_in_source_throttle"] {
        deleted += sqlx::query(&format!("DELETE FROM {table} WHERE next_at < $1"))
            .bind(before)
            .execute(store.pool())
            .await?
            .rows_affected();
    }
    Ok(deleted)
}
