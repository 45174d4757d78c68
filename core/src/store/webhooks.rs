//! Webhooks and their outbox (migration 0023). Deliveries are enqueued by
//! [`enqueue`] inside the transaction that changes an invocation's status
//! ([`super::invocations`]), and claimed by the sender of whichever node comes first
//! ([`claim_due`]).

use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::invocations::InvocationRow;
use super::{DbKind, Store, now_ms};

/// A webhook row; `secret` is sealed and never leaves the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    /// `whk_…`
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Where events are posted.
    pub url: String,
    /// The event types it receives (JSON array).
    pub events: String,
    /// The sealed signing secret.
    pub secret: String,
    /// Creator.
    pub created_by: String,
    /// Epoch ms.
    pub created_at: i64,
}

impl WebhookRow {
    /// The event types it receives.
    pub fn event_types(&self) -> Vec<String> {
        serde_json::from_str(&self.events).unwrap_or_default()
    }
}

const WEBHOOK_COLUMNS: &str = "id, tenant_id, url, events, secret, created_by, created_at";

fn webhook(row: &AnyRow) -> Result<WebhookRow, sqlx::Error> {
    Ok(WebhookRow {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        url: row.try_get("url")?,
        events: row.try_get("events")?,
        secret: row.try_get("secret")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
    })
}

/// Stores a new webhook.
pub async fn insert(store: &Store, w: &WebhookRow) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ))
    .bind(&w.id)
    .bind(&w.tenant_id)
    .bind(&w.url)
    .bind(&w.events)
    .bind(&w.secret)
    .bind(&w.created_by)
    .bind(w.created_at)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// A tenant's webhooks, oldest first.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<WebhookRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id"
    ))
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(webhook).collect()
}

/// One webhook of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(webhook).transpose()
}

/// Deletes a webhook with its deliveries and their attempts; whether there was one.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "DELETE FROM webhook_attempts WHERE delivery_id IN \
         (SELECT id FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2)",
    )
    .bind(tenant_id)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let done = sqlx::query("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

/// Every stored secret: `(tenant_id, id, sealed secret)` (for resealing after a key rotation).
pub async fn all_secrets(store: &Store) -> Result<Vec<(String, String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT tenant_id, id, secret FROM webhooks ORDER BY tenant_id, id")
        .fetch_all(store.pool())
        .await
}

/// Replaces a sealed secret if it is still `old`; whether it was.
pub async fn reseal_secret(
    store: &Store,
    tenant_id: &str,
    id: &str,
    old: &str,
    new: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE webhooks SET secret = $4 WHERE tenant_id = $1 AND id = $2 AND secret = $3",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(old)
    .bind(new)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// What an event says about an invocation: ids, tool, status, who decided and when; never the
/// arguments, not even their hash (an unsalted hash of a small argument value is guessed by
/// hashing the candidates), nor the result.
pub fn event_data(row: &InvocationRow) -> Value {
    serde_json::json!({
        "invocation_id": row.id,
        "tenant_id": row.tenant_id,
        "tool": row.tool,
        "tool_version": row.tool_version,
        "mode": row.mode,
        "status": row.status,
        "actor_id": row.actor_id,
        "session_id": row.session_id,
        "decision_receipt_id": row.decision_receipt_id,
        "approval_receipt_id": row.approval_receipt_id,
        "decided_by": row.decided_by,
        "created_at": super::rfc3339(row.created_at),
        "expires_at": row.expires_at.map(super::rfc3339),
    })
}

/// Whether invocation `row` is one approvers hear about: a call parked for an approver or a
/// staged change (not a caller's own confirmation or an asynchronous job).
pub fn concerns_approvers(row: &InvocationRow) -> bool {
    matches!(row.mode.as_str(), "approval_required" | "staged_change")
}

/// Enqueues event `kind` about `row` for every webhook of its tenant that wants it, inside the
/// caller's transaction (the one that changed the invocation). Returns how many it enqueued.
pub async fn enqueue(
    tx: &mut sqlx::AnyConnection,
    kind: &str,
    row: &InvocationRow,
) -> Result<usize, sqlx::Error> {
    if !concerns_approvers(row) {
        return Ok(0);
    }
    let hooks: Vec<(String, String)> =
        sqlx::query_as("SELECT id, events FROM webhooks WHERE tenant_id = $1")
            .bind(&row.tenant_id)
            .fetch_all(&mut *tx)
            .await?;
    let data = event_data(row).to_string();
    let now = now_ms();
    let mut enqueued = 0;
    for (webhook_id, events) in hooks {
        let wants = serde_json::from_str::<Vec<String>>(&events)
            .unwrap_or_default()
            .iter()
            .any(|e| e == kind);
        if !wants {
            continue;
        }
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, event, subject, data, \
             status, attempts, next_attempt_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $7)",
        )
        .bind(crate::ids::new_ordered_id("msg"))
        .bind(&row.tenant_id)
        .bind(&webhook_id)
        .bind(kind)
        .bind(&row.id)
        .bind(&data)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        enqueued += 1;
    }
    Ok(enqueued)
}

/// A delivery row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// `msg_…`: the `webhook-id` of every attempt.
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// The webhook.
    pub webhook_id: String,
    /// `invocation.parked`, …
    pub event: String,
    /// The invocation (`inv_…`).
    pub subject: String,
    /// The event's data (JSON).
    pub data: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made (or begun).
    pub attempts: i64,
    /// Epoch ms: when it is due (while pending).
    pub next_attempt_at: i64,
    /// The receiver's last HTTP status.
    pub last_status: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Epoch ms: when the event happened.
    pub created_at: i64,
    /// Epoch ms.
    pub delivered_at: Option<i64>,
}

const DELIVERY_COLUMNS: &str = "id, tenant_id, webhook_id, event, subject, data, status, attempts, \
     next_attempt_at, last_status, last_error, created_at, delivered_at";

fn delivery(row: &AnyRow) -> Result<DeliveryRow, sqlx::Error> {
    Ok(DeliveryRow {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        webhook_id: row.try_get("webhook_id")?,
        event: row.try_get("event")?,
        subject: row.try_get("subject")?,
        data: row.try_get("data")?,
        status: row.try_get("status")?,
        attempts: row.try_get("attempts")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        last_status: row.try_get("last_status")?,
        last_error: row.try_get("last_error")?,
        created_at: row.try_get("created_at")?,
        delivered_at: row.try_get("delivered_at")?,
    })
}

/// Claims up to `limit` pending deliveries due at `now` for this process, each until `until`
/// (its due time moves there, so no other sender takes it meanwhile; one whose sender stopped
/// is due again then), with its attempt counted. PostgreSQL claims them in one statement,
/// skipping rows another node is claiming; SQLite by a conditional update each.
pub async fn claim_due(
    store: &Store,
    now: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    match store.kind() {
        DbKind::Postgres => {
            let rows = sqlx::query(&format!(
                "UPDATE webhook_deliveries SET next_attempt_at = $2, attempts = attempts + 1 \
                 WHERE id IN (SELECT id FROM webhook_deliveries \
                 WHERE status = 'pending' AND next_attempt_at <= $1 \
                 ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) \
                 RETURNING {DELIVERY_COLUMNS}"
            ))
            .bind(now)
            .bind(until)
            .bind(limit)
            .fetch_all(store.pool())
            .await?;
            rows.iter().map(delivery).collect()
        }
        DbKind::Sqlite => {
            let due: Vec<(String, i64)> = sqlx::query_as(
                "SELECT id, next_attempt_at FROM webhook_deliveries \
                 WHERE status = 'pending' AND next_attempt_at <= $1 \
                 ORDER BY next_attempt_at, id LIMIT $2",
            )
            .bind(now)
            .bind(limit)
            .fetch_all(store.pool())
            .await?;
            let mut claimed = Vec::new();
            for (id, due_at) in due {
                let row = sqlx::query(&format!(
                    "UPDATE webhook_deliveries SET next_attempt_at = $3, attempts = attempts + 1 \
                     WHERE id = $1 AND status = 'pending' AND next_attempt_at = $2 \
                     RETURNING {DELIVERY_COLUMNS}"
                ))
                .bind(&id)
                .bind(due_at)
                .bind(until)
                .fetch_optional(store.pool())
                .await?;
                if let Some(row) = row {
                    claimed.push(delivery(&row)?);
                }
            }
            Ok(claimed)
        }
    }
}

/// How one attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Which attempt (1 for the first).
    pub attempt: i64,
    /// Epoch ms when it started.
    pub attempted_at: i64,
    /// How long it took.
    pub duration_ms: i64,
    /// The receiver's HTTP status, when it answered.
    pub http_status: Option<i64>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// Records attempt `a` of claimed delivery `id` and what follows: `delivered`, due again at
/// `retry_at`, or `failed` when there is no retry.
pub async fn record_attempt(
    store: &Store,
    id: &str,
    a: &Attempt,
    delivered: bool,
    retry_at: Option<i64>,
) -> Result<(), sqlx::Error> {
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, duration_ms, \
         http_status, error) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(a.attempt)
    .bind(a.attempted_at)
    .bind(a.duration_ms)
    .bind(a.http_status)
    .bind(a.error.as_deref())
    .execute(&mut *tx)
    .await?;
    let (status, next) = match (delivered, retry_at) {
        (true, _) => ("delivered", a.attempted_at),
        (false, Some(at)) => ("pending", at),
        (false, None) => ("failed", a.attempted_at),
    };
    sqlx::query(
        "UPDATE webhook_deliveries SET status = $2, next_attempt_at = $3, last_status = $4, \
         last_error = $5, delivered_at = CASE WHEN $2 = 'delivered' THEN $6 ELSE delivered_at END \
         WHERE id = $1 AND status = 'pending'",
    )
    .bind(id)
    .bind(status)
    .bind(next)
    .bind(a.http_status)
    .bind(a.error.as_deref())
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// A webhook's deliveries, newest first.
pub async fn deliveries(
    store: &Store,
    tenant_id: &str,
    webhook_id: &str,
    limit: i64,
) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2 \
         ORDER BY created_at DESC, id DESC LIMIT $3"
    ))
    .bind(tenant_id)
    .bind(webhook_id)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(delivery).collect()
}

/// `attempt, attempted_at, duration_ms, http_status, error`.
type AttemptColumns = (i64, i64, i64, Option<i64>, Option<String>);

/// The attempts of the given deliveries: `(delivery_id, attempt)`, oldest first.
pub async fn attempts(
    store: &Store,
    delivery_ids: &[String],
) -> Result<Vec<(String, Attempt)>, sqlx::Error> {
    let mut out = Vec::new();
    for id in delivery_ids {
        let rows: Vec<AttemptColumns> = sqlx::query_as(
            "SELECT attempt, attempted_at, duration_ms, http_status, error FROM webhook_attempts \
             WHERE delivery_id = $1 ORDER BY attempt",
        )
        .bind(id)
        .fetch_all(store.pool())
        .await?;
        out.extend(rows.into_iter().map(|r| {
            (
                id.clone(),
                Attempt {
                    attempt: r.0,
                    attempted_at: r.1,
                    duration_ms: r.2,
                    http_status: r.3,
                    error: r.4,
                },
            )
        }));
    }
    Ok(out)
}

/// Per webhook of a tenant: `(webhook_id, pending, delivered, failed, last delivered_at)`.
pub async fn tallies(
    store: &Store,
    tenant_id: &str,
) -> Result<Vec<(String, i64, i64, i64, Option<i64>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT webhook_id, \
         SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END), \
         SUM(CASE WHEN status = 'delivered' THEN 1 ELSE 0 END), \
         SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), \
         MAX(delivered_at) \
         FROM webhook_deliveries WHERE tenant_id = $1 GROUP BY webhook_id",
    )
    .bind(tenant_id)
    .fetch_all(store.pool())
    .await
}
