//! Invocations: calls bound at authorization and carried to their one outcome (migration 0008
//! lists the statuses). Every change of status is a conditional update from an expected status,
//! so two approvers, two workers or two nodes racing for one invocation see exactly one winner.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, now_ms};

/// An invocation row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationRow {
    /// `inv_…`
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Exposure session.
    pub session_id: String,
    /// Manifest the call presented.
    pub manifest_id: String,
    /// The caller's `_meta.invocation_id`.
    pub client_key: Option<String>,
    /// Hosted agent turn.
    pub turn_id: Option<String>,
    /// The calling actor.
    pub actor_id: String,
    /// The caller's token (`tok_…`).
    pub token_id: Option<String>,
    /// Who created the caller's token.
    pub token_created_by: Option<String>,
    /// Canonical tool name.
    pub tool: String,
    /// Tool version granted.
    pub tool_version: String,
    /// `schemaHash` granted.
    pub schema_hash: String,
    /// Hash of the effective arguments.
    pub args_hash: String,
    /// Exposure mode.
    pub mode: String,
    /// The engine's `BoundCall` (JSON).
    pub binding: String,
    /// Policy.
    pub policy_id: String,
    /// Policy version.
    pub policy_version: i64,
    /// The journaled decision that bound it.
    pub decision_receipt_id: String,
    /// Status (see the migration).
    pub status: String,
    /// The final tool result (JSON), once there is one.
    pub result: Option<String>,
    /// The approver or rejecter.
    pub decided_by: Option<String>,
    /// The principal that decided (`tok_…`, `usr_…`), named by the receipt that records it.
    pub decided_by_principal: Option<String>,
    /// Epoch ms.
    pub decided_at: Option<i64>,
    /// The approver's comment.
    pub decision_comment: Option<String>,
    /// The journaled approval or rejection.
    pub approval_receipt_id: Option<String>,
    /// Hex SHA-256 of a confirmation token (`confirmation_required`).
    pub confirmation_sha256: Option<String>,
    /// Epoch ms.
    pub created_at: i64,
    /// Epoch ms after which a parked invocation can no longer be approved.
    pub expires_at: Option<i64>,
    /// Epoch ms.
    pub updated_at: i64,
    /// Where the result goes (`mcp`, `hosted_agent`): what it is redacted for.
    pub output_to: String,
}

const COLUMNS: &str = "id, tenant_id, session_id, manifest_id, client_key, turn_id, actor_id, token_id, \
     token_created_by, tool, tool_version, schema_hash, args_hash, mode, binding, policy_id, policy_version, \
     decision_receipt_id, status, result, decided_by, decided_at, decision_comment, approval_receipt_id, \
     confirmation_sha256, created_at, expires_at, updated_at, output_to, decided_by_principal";

fn from_row(row: &AnyRow) -> Result<InvocationRow, sqlx::Error> {
    Ok(InvocationRow {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        session_id: row.try_get("session_id")?,
        manifest_id: row.try_get("manifest_id")?,
        client_key: row.try_get("client_key")?,
        turn_id: row.try_get("turn_id")?,
        actor_id: row.try_get("actor_id")?,
        token_id: row.try_get("token_id")?,
        token_created_by: row.try_get("token_created_by")?,
        tool: row.try_get("tool")?,
        tool_version: row.try_get("tool_version")?,
        schema_hash: row.try_get("schema_hash")?,
        args_hash: row.try_get("args_hash")?,
        mode: row.try_get("mode")?,
        binding: row.try_get("binding")?,
        policy_id: row.try_get("policy_id")?,
        policy_version: row.try_get("policy_version")?,
        decision_receipt_id: row.try_get("decision_receipt_id")?,
        status: row.try_get("status")?,
        result: row.try_get("result")?,
        decided_by: row.try_get("decided_by")?,
        decided_at: row.try_get("decided_at")?,
        decision_comment: row.try_get("decision_comment")?,
        approval_receipt_id: row.try_get("approval_receipt_id")?,
        confirmation_sha256: row.try_get("confirmation_sha256")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        updated_at: row.try_get("updated_at")?,
        output_to: row.try_get("output_to")?,
        decided_by_principal: row.try_get("decided_by_principal")?,
    })
}

/// Stores a new invocation; `Ok(false)` when the session already has one under the same
/// `client_key` (the caller's retry key). One that waits for a person is announced to the
/// tenant's webhooks (`invocation.parked`) in the same transaction.
pub async fn insert(store: &Store, r: &InvocationRow) -> Result<bool, sqlx::Error> {
    if matches!(r.status.as_str(), "input_required" | "staged")
        && super::webhooks::concerns_approvers(r)
    {
        let mut tx = store.begin_write().await?;
        if !insert_on(&mut tx, r).await? {
            return Ok(false);
        }
        super::webhooks::enqueue(&mut tx, "invocation.parked", r).await?;
        tx.commit().await?;
        return Ok(true);
    }
    let mut conn = store.pool().acquire().await?;
    insert_on(&mut conn, r).await
}

async fn insert_on(conn: &mut sqlx::AnyConnection, r: &InvocationRow) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(&format!(
        "INSERT INTO invocations ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
         $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30) ON CONFLICT DO NOTHING"
    ))
    .bind(&r.id)
    .bind(&r.tenant_id)
    .bind(&r.session_id)
    .bind(&r.manifest_id)
    .bind(r.client_key.as_deref())
    .bind(r.turn_id.as_deref())
    .bind(&r.actor_id)
    .bind(r.token_id.as_deref())
    .bind(r.token_created_by.as_deref())
    .bind(&r.tool)
    .bind(&r.tool_version)
    .bind(&r.schema_hash)
    .bind(&r.args_hash)
    .bind(&r.mode)
    .bind(&r.binding)
    .bind(&r.policy_id)
    .bind(r.policy_version)
    .bind(&r.decision_receipt_id)
    .bind(&r.status)
    .bind(r.result.as_deref())
    .bind(r.decided_by.as_deref())
    .bind(r.decided_at)
    .bind(r.decision_comment.as_deref())
    .bind(r.approval_receipt_id.as_deref())
    .bind(r.confirmation_sha256.as_deref())
    .bind(r.created_at)
    .bind(r.expires_at)
    .bind(r.updated_at)
    .bind(&r.output_to)
    .bind(r.decided_by_principal.as_deref())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// One invocation of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<InvocationRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// The invocation a session's caller keyed `client_key`.
pub async fn find_by_client_key(
    store: &Store,
    tenant_id: &str,
    session_id: &str,
    client_key: &str,
) -> Result<Option<InvocationRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND session_id = $2 AND client_key = $3"
    ))
    .bind(tenant_id)
    .bind(session_id)
    .bind(client_key)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// The invocation a confirmation token (by its hex SHA-256) belongs to.
pub async fn find_by_confirmation(
    store: &Store,
    tenant_id: &str,
    confirmation_sha256: &str,
) -> Result<Option<InvocationRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND confirmation_sha256 = $2"
    ))
    .bind(tenant_id)
    .bind(confirmation_sha256)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// A tenant's invocations, newest first: only `status` when given, only `actor_id`'s when
/// given, only those created before `before` (a cursor: `created_at`, then `id`) when given.
pub async fn list(
    store: &Store,
    tenant_id: &str,
    status: Option<&str>,
    actor_id: Option<&str>,
    limit: i64,
    environments: Option<&[String]>,
) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 \
         AND ($2 IS NULL OR status = $2) AND ($3 IS NULL OR actor_id = $3){} \
         ORDER BY created_at DESC, id DESC LIMIT $4",
        confined(environments, 5)
    );
    let mut query = sqlx::query(&sql)
        .bind(tenant_id)
        .bind(status)
        .bind(actor_id)
        .bind(limit);
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    let rows = query.fetch_all(store.pool()).await?;
    rows.iter().map(from_row).collect()
}

/// An actor's invocations, newest first, from just before `before` (`(created_at, id)` of the
/// last one a previous page ended with) on.
pub async fn of_actor_before(
    store: &Store,
    tenant_id: &str,
    actor_id: &str,
    before: Option<(i64, &str)>,
    limit: i64,
    environments: Option<&[String]>,
) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND actor_id = $2 \
         AND ($3 IS NULL OR created_at < $3 OR (created_at = $3 AND id < $4)){} \
         ORDER BY created_at DESC, id DESC LIMIT $5",
        confined(environments, 6)
    );
    let mut query = sqlx::query(&sql)
        .bind(tenant_id)
        .bind(actor_id)
        .bind(before.map(|(at, _)| at))
        .bind(before.map(|(_, id)| id))
        .bind(limit);
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    let rows = query.fetch_all(store.pool()).await?;
    rows.iter().map(from_row).collect()
}

/// The invocations of one session (a hosted agent's), newest first.
pub async fn by_session(
    store: &Store,
    tenant_id: &str,
    session_id: &str,
    limit: i64,
) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND session_id = $2 \
         ORDER BY created_at DESC, id DESC LIMIT $3"
    ))
    .bind(tenant_id)
    .bind(session_id)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// The invocations bound in one hosted-agent turn, oldest first.
pub async fn by_turn(
    store: &Store,
    tenant_id: &str,
    session_id: &str,
    turn_id: &str,
) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND session_id = $2 AND turn_id = $3 \
         ORDER BY created_at, id"
    ))
    .bind(tenant_id)
    .bind(session_id)
    .bind(turn_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// What a status change also writes.
#[derive(Debug, Default)]
pub struct Change<'a> {
    /// The approver or rejecter.
    pub decided_by: Option<&'a str>,
    /// Their principal (set with `decided_by`).
    pub decided_by_principal: Option<&'a str>,
    /// Their comment.
    pub comment: Option<&'a str>,
    /// The journaled approval or rejection.
    pub approval_receipt_id: Option<&'a str>,
    /// The final tool result.
    pub result: Option<&'a str>,
    /// The event this change is (`invocation.decided`, …): enqueued for the tenant's webhooks
    /// in the same transaction ([`super::webhooks::enqueue`]).
    pub announce: Option<&'a str>,
}

/// Moves invocation `id` from status `from` to `to`; `Ok(false)` when it was not in `from`
/// (someone else moved it first). Fields of `change` that are `None` are left as they are. With
/// `change.announce`, the event is enqueued for the tenant's webhooks in the same transaction:
/// exactly once, by whoever won the change.
pub async fn transition(
    store: &Store,
    tenant_id: &str,
    id: &str,
    from: &str,
    to: &str,
    change: &Change<'_>,
) -> Result<bool, sqlx::Error> {
    const UPDATE: &str = "UPDATE invocations SET status = $4, updated_at = $5, \
         decided_by = COALESCE($6, decided_by), \
         decided_at = CASE WHEN $6 IS NULL THEN decided_at ELSE $5 END, \
         decision_comment = COALESCE($7, decision_comment), \
         approval_receipt_id = COALESCE($8, approval_receipt_id), \
         result = COALESCE($9, result), \
         decided_by_principal = COALESCE($10, decided_by_principal) \
         WHERE tenant_id = $1 AND id = $2 AND status = $3";
    let now = now_ms();
    let query = |sql: &'static str| {
        sqlx::query(sql)
            .bind(tenant_id)
            .bind(id)
            .bind(from)
            .bind(to)
            .bind(now)
            .bind(change.decided_by)
            .bind(change.comment)
            .bind(change.approval_receipt_id)
            .bind(change.result)
            .bind(change.decided_by_principal)
    };
    let Some(kind) = change.announce else {
        let done = query(UPDATE).execute(store.pool()).await?;
        return Ok(done.rows_affected() == 1);
    };
    static RETURNING: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("{UPDATE} RETURNING {COLUMNS}"));
    let mut tx = store.begin_write().await?;
    let Some(row) = query(RETURNING.as_str()).fetch_optional(&mut *tx).await? else {
        return Ok(false);
    };
    super::webhooks::enqueue(&mut tx, kind, &from_row(&row)?).await?;
    tx.commit().await?;
    Ok(true)
}

/// Invocations of every tenant in `status` whose last change is older than `before` (epoch ms),
/// oldest first (the worker's queue).
pub async fn due(
    store: &Store,
    status: &str,
    before: i64,
    limit: i64,
) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE status = $1 AND updated_at <= $2 ORDER BY updated_at, id LIMIT $3"
    ))
    .bind(status)
    .bind(before)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// Invocations of every tenant waiting for a person (parked, staged, awaiting confirmation)
/// whose time ran out at `now` (oldest first).
pub async fn expired(
    store: &Store,
    now: i64,
    limit: i64,
) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM invocations WHERE status IN ('input_required', 'staged', 'confirmation_required') AND expires_at <= $1 \
         ORDER BY expires_at, id LIMIT $2"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// Notes that invocation `id` is still being run (its runner's heartbeat): a `running` row
/// whose `updated_at` stops moving belongs to a process that is gone.
pub async fn still_running(store: &Store, tenant_id: &str, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE invocations SET updated_at = $3 WHERE tenant_id = $1 AND id = $2 AND status = 'running'",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Claims up to `limit` released invocations (`approved`) of every tenant for this process:
/// each returned row is now `running` and no other process got it. On PostgreSQL one statement
/// claims them, skipping rows another node is claiming (`FOR UPDATE SKIP LOCKED`); on SQLite
/// (one writer at a time) each is claimed by its own conditional update.
pub async fn claim_approved(store: &Store, limit: i64) -> Result<Vec<InvocationRow>, sqlx::Error> {
    let now = now_ms();
    match store.kind() {
        super::DbKind::Postgres => {
            let rows = sqlx::query(&format!(
                "UPDATE invocations SET status = 'running', updated_at = $1 WHERE id IN (\
                 SELECT id FROM invocations WHERE status = 'approved' \
                 ORDER BY updated_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 RETURNING {COLUMNS}"
            ))
            .bind(now)
            .bind(limit)
            .fetch_all(store.pool())
            .await?;
            rows.iter().map(from_row).collect()
        }
        super::DbKind::Sqlite => {
            let mut claimed = Vec::new();
            for row in due(store, "approved", now, limit).await? {
                if transition(
                    store,
                    &row.tenant_id,
                    &row.id,
                    "approved",
                    "running",
                    &Change::default(),
                )
                .await?
                {
                    claimed.push(InvocationRow {
                        status: "running".into(),
                        ..row
                    });
                }
            }
            Ok(claimed)
        }
    }
}

/// `AND` the invocation's session is in one of `environments` (bound from `$first` on), when
/// given.
fn confined(environments: Option<&[String]>, first: usize) -> String {
    environments
        .map(|e| {
            format!(
                " AND {}",
                super::exposure::in_environments("session_id", first, e.len())
            )
        })
        .unwrap_or_default()
}

/// How many invocations wait for a person (parked or staged) and when the oldest was made;
/// only of `environments` when given.
pub async fn waiting(
    store: &Store,
    tenant_id: &str,
    environments: Option<&[String]>,
) -> Result<(i64, Option<i64>), sqlx::Error> {
    let sql = format!(
        "SELECT COUNT(*), MIN(created_at) FROM invocations \
         WHERE tenant_id = $1 AND status IN ('input_required', 'staged'){}",
        confined(environments, 2)
    );
    let mut query = sqlx::query_as(&sql).bind(tenant_id);
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    query.fetch_one(store.pool()).await
}

/// The invocation of a tenant that has waited for a person (parked or staged) the longest;
/// only of `environments` when given.
pub async fn oldest_waiting(
    store: &Store,
    tenant_id: &str,
    environments: Option<&[String]>,
) -> Result<Option<InvocationRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM invocations WHERE tenant_id = $1 AND status IN ('input_required', 'staged'){} \
         ORDER BY created_at, id LIMIT 1",
        confined(environments, 2)
    );
    let mut query = sqlx::query(&sql).bind(tenant_id);
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    let row = query.fetch_optional(store.pool()).await?;
    row.as_ref().map(from_row).transpose()
}

/// A waiting invocation of a call bound implicitly, as its repeat finds it.
#[derive(Debug, Clone, Copy)]
pub struct ImplicitCall<'a> {
    pub tenant_id: &'a str,
    pub manifest_id: &'a str,
    /// `tok_…`, `usr_…`
    pub principal: &'a str,
    /// Canonical.
    pub tool: &'a str,
    pub args_hash: &'a str,
}

/// Remembers that invocation `invocation_id` waits for the implicitly bound call `call`.
pub async fn insert_implicit_wait(
    store: &Store,
    invocation_id: &str,
    call: ImplicitCall<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO implicit_waits (invocation_id, tenant_id, manifest_id, principal, tool, \
         args_hash, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(invocation_id)
    .bind(call.tenant_id)
    .bind(call.manifest_id)
    .bind(call.principal)
    .bind(call.tool)
    .bind(call.args_hash)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}

/// The oldest invocation of `call` whose outcome its caller has not had yet.
pub async fn implicit_wait(
    store: &Store,
    call: ImplicitCall<'_>,
) -> Result<Option<String>, sqlx::Error> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT invocation_id FROM implicit_waits WHERE tenant_id = $1 AND manifest_id = $2 \
         AND principal = $3 AND tool = $4 AND args_hash = $5 AND delivered_at IS NULL \
         ORDER BY created_at, invocation_id LIMIT 1",
    )
    .bind(call.tenant_id)
    .bind(call.manifest_id)
    .bind(call.principal)
    .bind(call.tool)
    .bind(call.args_hash)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(|(id,)| id))
}

/// Marks the outcome of `invocation_id` as had by its caller; `false` when another repeat
/// already had it.
pub async fn deliver_implicit_wait(
    store: &Store,
    tenant_id: &str,
    invocation_id: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE implicit_waits SET delivered_at = $3 \
         WHERE tenant_id = $1 AND invocation_id = $2 AND delivered_at IS NULL",
    )
    .bind(tenant_id)
    .bind(invocation_id)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}
