//! Who asked to hear of a resource's changes (`resource_subscriptions`): MCP sessions
//! (`resources/subscribe`) and listening streams (`subscriptions/listen`).

use sqlx::Error;

use super::Store;

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRow {
    /// The `Mcp-Session-Id`, or the listening stream's id.
    pub holder: String,
    /// Normalised, as the client asked for it.
    pub uri: String,
    pub tenant_id: String,
    /// Who subscribed (`tok_…`, `usr_…`).
    pub principal: String,
    pub environment: String,
    pub upstream_id: String,
    /// As the upstream lists it.
    pub raw_uri: String,
}

type Tuple = (String, String, String, String, String, String, String);

fn from_tuple(t: Tuple) -> SubscriptionRow {
    let (holder, uri, tenant_id, principal, environment, upstream_id, raw_uri) = t;
    SubscriptionRow {
        holder,
        uri,
        tenant_id,
        principal,
        environment,
        upstream_id,
        raw_uri,
    }
}

/// Keeps `row` (again: a holder subscribing twice to a URI keeps one row, the newest) unless
/// its holder already holds `max` others; whether it is kept.
pub async fn add(store: &Store, row: &SubscriptionRow, now: i64, max: i64) -> Result<bool, Error> {
    let mut tx = store.begin_write().await?;
    let held: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM resource_subscriptions WHERE holder = $1 AND uri <> $2",
    )
    .bind(&row.holder)
    .bind(&row.uri)
    .fetch_one(&mut *tx)
    .await?;
    if held >= max {
        return Ok(false);
    }
    sqlx::query("DELETE FROM resource_subscriptions WHERE holder = $1 AND uri = $2")
        .bind(&row.holder)
        .bind(&row.uri)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO resource_subscriptions (holder, uri, tenant_id, principal, environment, \
         upstream_id, raw_uri, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&row.holder)
    .bind(&row.uri)
    .bind(&row.tenant_id)
    .bind(&row.principal)
    .bind(&row.environment)
    .bind(&row.upstream_id)
    .bind(&row.raw_uri)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Ends `holder`'s subscription to `uri` when `principal` of `tenant_id` holds it: the row
/// it was, if any.
pub async fn remove(
    store: &Store,
    holder: &str,
    uri: &str,
    tenant_id: &str,
    principal: &str,
) -> Result<Option<SubscriptionRow>, Error> {
    let row: Option<Tuple> = sqlx::query_as(
        "DELETE FROM resource_subscriptions \
         WHERE holder = $1 AND uri = $2 AND tenant_id = $3 AND principal = $4 \
         RETURNING holder, uri, tenant_id, principal, environment, upstream_id, raw_uri",
    )
    .bind(holder)
    .bind(uri)
    .bind(tenant_id)
    .bind(principal)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(from_tuple))
}

/// Ends every subscription of `holder` (a listening stream that ended).
pub async fn remove_holder(store: &Store, holder: &str) -> Result<(), Error> {
    sqlx::query("DELETE FROM resource_subscriptions WHERE holder = $1")
        .bind(holder)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// The subscriptions to `raw_uri` of upstream `upstream_id` in `tenant_id`.
pub async fn to_resource(
    store: &Store,
    tenant_id: &str,
    upstream_id: &str,
    raw_uri: &str,
) -> Result<Vec<SubscriptionRow>, Error> {
    let rows: Vec<Tuple> = sqlx::query_as(
        "SELECT holder, uri, tenant_id, principal, environment, upstream_id, raw_uri \
         FROM resource_subscriptions WHERE tenant_id = $1 AND upstream_id = $2 AND raw_uri = $3 \
         ORDER BY holder, uri",
    )
    .bind(tenant_id)
    .bind(upstream_id)
    .bind(raw_uri)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(from_tuple).collect())
}

/// Drops the subscriptions of MCP sessions that ended (the others' holders are listening
/// streams, `lst_…`, whose rows go with them).
pub async fn delete_orphans(store: &Store) -> Result<(), Error> {
    sqlx::query(
        "DELETE FROM resource_subscriptions WHERE holder NOT LIKE 'lst\\_%' ESCAPE '\\' \
         AND holder NOT IN (SELECT id FROM mcp_sessions)",
    )
    .execute(store.pool())
    .await?;
    Ok(())
}
