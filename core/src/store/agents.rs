//! Hosted agents, their transcripts and turns (migrations 0011, 0012).

use sqlx::Row;
use sqlx::any::AnyRow;

use super::Store;

/// An agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRow {
    /// `agt_…` (also its exposure session's id).
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// The actor its calls run as.
    pub actor_id: String,
    /// Environment of its session.
    pub environment: String,
    /// System instruction.
    pub system_instruction: String,
    /// Model calls one turn may make.
    pub max_turns: i64,
    /// A fork's parent.
    pub parent_id: Option<String>,
    /// `fork` or `general-purpose` for children.
    pub subagent_type: Option<String>,
    /// The AgentMeta sidecar: the execution allowlist (JSON array), `None` unrestricted.
    pub execution_allowed_tools: Option<String>,
    /// `idle`, `running`, `input_required`, `paused`.
    pub status: String,
    /// Why it is `paused`, or why its last turn could not go on.
    pub status_reason: Option<String>,
    /// Started with `run_in_background` (revived after a restart).
    pub background: bool,
    /// When a finished background fork's answer was given to its parent (epoch ms).
    pub reported_at: Option<i64>,
    /// The run holding it while `running`.
    pub runner: Option<String>,
    /// Epoch ms.
    pub created_at: i64,
    /// Epoch ms; moved by the runner's heartbeat while `running`.
    pub updated_at: i64,
}

const COLUMNS: &str = "id, tenant_id, actor_id, environment, system_instruction, max_turns, parent_id, \
     subagent_type, execution_allowed_tools, status, status_reason, background, reported_at, runner, \
     created_at, updated_at";

fn agent(row: &AnyRow) -> Result<AgentRow, sqlx::Error> {
    Ok(AgentRow {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        actor_id: row.try_get("actor_id")?,
        environment: row.try_get("environment")?,
        system_instruction: row.try_get("system_instruction")?,
        max_turns: row.try_get("max_turns")?,
        parent_id: row.try_get("parent_id")?,
        subagent_type: row.try_get("subagent_type")?,
        execution_allowed_tools: row.try_get("execution_allowed_tools")?,
        status: row.try_get("status")?,
        status_reason: row.try_get("status_reason")?,
        background: row.try_get::<i64, _>("background")? != 0,
        reported_at: row.try_get("reported_at")?,
        runner: row.try_get("runner")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// Stores a new agent.
pub async fn insert(store: &Store, a: &AgentRow) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO agents ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
    ))
    .bind(&a.id)
    .bind(&a.tenant_id)
    .bind(&a.actor_id)
    .bind(&a.environment)
    .bind(&a.system_instruction)
    .bind(a.max_turns)
    .bind(a.parent_id.as_deref())
    .bind(a.subagent_type.as_deref())
    .bind(a.execution_allowed_tools.as_deref())
    .bind(&a.status)
    .bind(a.status_reason.as_deref())
    .bind(i64::from(a.background))
    .bind(a.reported_at)
    .bind(a.runner.as_deref())
    .bind(a.created_at)
    .bind(a.updated_at)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// One agent of a tenant.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<AgentRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM agents WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(agent).transpose()
}

/// A tenant's agents, newest first.
pub async fn list(
    store: &Store,
    tenant_id: &str,
    limit: i64,
) -> Result<Vec<AgentRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM agents WHERE tenant_id = $1 ORDER BY created_at DESC, id LIMIT $2"
    ))
    .bind(tenant_id)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(agent).collect()
}

/// The children of an agent, oldest first.
pub async fn children(store: &Store, parent_id: &str) -> Result<Vec<AgentRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM agents WHERE parent_id = $1 ORDER BY created_at, id"
    ))
    .bind(parent_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(agent).collect()
}

/// One transcript record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    /// Position from 1.
    pub seq: i64,
    /// `message`, `agent_bootstrap` or `launch_prompt`.
    pub kind: String,
    /// The turn it belongs to.
    pub turn_id: Option<String>,
    /// JSON.
    pub body: String,
    /// Epoch ms.
    pub created_at: i64,
}

/// Appends records to an agent's transcript (one transaction; positions follow the last).
pub async fn append(
    store: &Store,
    agent_id: &str,
    records: &[(&str, Option<&str>, String)],
    now: i64,
) -> Result<(), sqlx::Error> {
    append_reporting(store, agent_id, records, &[], None, now).await
}

/// [`append`] by run `runner`, which must still hold the agent (otherwise nothing is written and
/// the error says so).
pub async fn append_held(
    store: &Store,
    agent_id: &str,
    records: &[(&str, Option<&str>, String)],
    runner: &str,
    now: i64,
) -> Result<(), sqlx::Error> {
    append_reporting(store, agent_id, records, &[], Some(runner), now).await
}

/// [`append`], marking the background children `reported` as reported to their parent in the
/// same transaction (a report is given exactly when it is recorded); with `runner`, only while
/// that run holds the agent.
pub async fn append_reporting(
    store: &Store,
    agent_id: &str,
    records: &[(&str, Option<&str>, String)],
    reported: &[String],
    runner: Option<&str>,
    now: i64,
) -> Result<(), sqlx::Error> {
    let mut tx = store.begin_write().await?;
    if let Some(runner) = runner {
        // Also locks the agent's row (PostgreSQL) until the records are in.
        let held = sqlx::query("UPDATE agents SET updated_at = $1 WHERE id = $2 AND runner = $3")
            .bind(now)
            .bind(agent_id)
            .bind(runner)
            .execute(&mut *tx)
            .await?;
        if held.rows_affected() != 1 {
            return Err(sqlx::Error::Protocol(
                "another run holds this agent now; nothing was recorded".into(),
            ));
        }
    }
    for child in reported {
        sqlx::query("UPDATE agents SET reported_at = $1 WHERE id = $2 AND reported_at IS NULL")
            .bind(now)
            .bind(child)
            .execute(&mut *tx)
            .await?;
    }
    let (last,): (Option<i64>,) =
        sqlx::query_as("SELECT MAX(seq) FROM agent_records WHERE agent_id = $1")
            .bind(agent_id)
            .fetch_one(&mut *tx)
            .await?;
    let mut seq = last.unwrap_or(0);
    for (kind, turn_id, body) in records {
        seq += 1;
        sqlx::query(
            "INSERT INTO agent_records (agent_id, seq, kind, turn_id, body, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(agent_id)
        .bind(seq)
        .bind(*kind)
        .bind(*turn_id)
        .bind(body.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// An agent's whole transcript, in order.
pub async fn records(store: &Store, agent_id: &str) -> Result<Vec<RecordRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT seq, kind, turn_id, body, created_at FROM agent_records WHERE agent_id = $1 ORDER BY seq",
    )
    .bind(agent_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(RecordRow {
                seq: r.try_get("seq")?,
                kind: r.try_get("kind")?,
                turn_id: r.try_get("turn_id")?,
                body: r.try_get("body")?,
                created_at: r.try_get("created_at")?,
            })
        })
        .collect()
}

/// A turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRow {
    /// `trn_…`
    pub id: String,
    /// Agent.
    pub agent_id: String,
    /// `running`, `completed`, `input_required`, `failed`, `max_turns`.
    pub status: String,
    /// Model calls made.
    pub model_calls: i64,
    /// Why it failed.
    pub error: Option<String>,
    /// The caller's token (`None`: a dashboard user); a continued turn runs as it.
    pub token_id: Option<String>,
    /// Epoch ms.
    pub started_at: i64,
    /// Epoch ms.
    pub ended_at: Option<i64>,
}

/// Stores a new turn.
pub async fn insert_turn(store: &Store, t: &TurnRow) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO agent_turns (id, agent_id, status, model_calls, error, token_id, started_at, ended_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&t.id)
    .bind(&t.agent_id)
    .bind(&t.status)
    .bind(t.model_calls)
    .bind(t.error.as_deref())
    .bind(t.token_id.as_deref())
    .bind(t.started_at)
    .bind(t.ended_at)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// An agent's turns, oldest first.
pub async fn turns(store: &Store, agent_id: &str) -> Result<Vec<TurnRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT id, agent_id, status, model_calls, error, token_id, started_at, ended_at FROM agent_turns \
         WHERE agent_id = $1 ORDER BY started_at, id",
    )
    .bind(agent_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(TurnRow {
                id: r.try_get("id")?,
                agent_id: r.try_get("agent_id")?,
                status: r.try_get("status")?,
                model_calls: r.try_get("model_calls")?,
                error: r.try_get("error")?,
                token_id: r.try_get("token_id")?,
                started_at: r.try_get("started_at")?,
                ended_at: r.try_get("ended_at")?,
            })
        })
        .collect()
}

/// A page of the agents of every tenant waiting for a parked call of their last turn to be
/// decided, in `(updated_at, id)` order after `after`.
pub async fn waiting(
    store: &Store,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<AgentRow>, sqlx::Error> {
    let (at, id) = after.unwrap_or((i64::MIN, ""));
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM agents WHERE status = 'input_required' \
         AND (updated_at > $1 OR (updated_at = $1 AND id > $2)) ORDER BY updated_at, id LIMIT $3"
    ))
    .bind(at)
    .bind(id)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(agent).collect()
}

/// Moves an agent that is `input_required` and unchanged since it was read (its `updated_at`
/// is still `seen`) to `idle`; `Ok(false)` when anything moved it meanwhile.
pub async fn settle(store: &Store, id: &str, seen: i64, now: i64) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE agents SET status = 'idle', updated_at = $1 \
         WHERE id = $2 AND status = 'input_required' AND updated_at = $3",
    )
    .bind(now.max(seen + 1))
    .bind(id)
    .bind(seen)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Continues turn `turn_id` of an agent that is `input_required` and unchanged since it was read
/// (its `updated_at` is still `seen`): the agent becomes `running`, held by `runner`, and the
/// turn `running`, in one transaction. `Ok(false)` when anything moved it meanwhile (another
/// node continued it).
pub async fn claim_parked(
    store: &Store,
    id: &str,
    seen: i64,
    turn_id: &str,
    runner: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.begin_write().await?;
    let done = sqlx::query(
        "UPDATE agents SET status = 'running', runner = $1, status_reason = NULL, updated_at = $2 \
         WHERE id = $3 AND status = 'input_required' AND updated_at = $4",
    )
    .bind(runner)
    // Never the value it had: a reader holding `seen` must not match again.
    .bind(now.max(seen + 1))
    .bind(id)
    .bind(seen)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query("UPDATE agent_turns SET status = 'running', ended_at = NULL WHERE id = $1")
        .bind(turn_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// Agents left `running` whose heartbeat stopped before `stale` (their process is gone).
pub async fn stale_running(store: &Store, stale: i64) -> Result<Vec<AgentRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM agents WHERE status = 'running' AND updated_at < $1 ORDER BY updated_at, id LIMIT 32"
    ))
    .bind(stale)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(agent).collect()
}

/// Takes over a `running` agent whose heartbeat stopped before `stale` for run `runner`;
/// `Ok(false)` when its runner is alive after all or another node took it first.
pub async fn claim_stale(
    store: &Store,
    id: &str,
    stale: i64,
    runner: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE agents SET runner = $1, updated_at = $2 \
         WHERE id = $3 AND status = 'running' AND updated_at < $4",
    )
    .bind(runner)
    .bind(now)
    .bind(id)
    .bind(stale)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Makes an agent in status `from` `running`, held by run `runner`; `Ok(false)` when it was not
/// in `from` (busy, or another node took it first).
pub async fn claim(
    store: &Store,
    id: &str,
    from: &str,
    runner: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE agents SET status = 'running', runner = $1, status_reason = NULL, updated_at = $2 \
         WHERE id = $3 AND status = $4",
    )
    .bind(runner)
    .bind(now)
    .bind(id)
    .bind(from)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The heartbeat of run `runner` holding agent `id`; `Ok(false)` when the run no longer holds
/// it (another run took it over).
pub async fn still_running(
    store: &Store,
    id: &str,
    runner: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE agents SET updated_at = $1 WHERE id = $2 AND status = 'running' AND runner = $3",
    )
    .bind(now)
    .bind(id)
    .bind(runner)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// How a run ends a turn.
#[derive(Debug, Clone, Copy)]
pub struct TurnEnd<'a> {
    /// The turn.
    pub turn_id: &'a str,
    /// `completed`, `input_required`, `max_turns`, `failed`, `paused`.
    pub status: &'a str,
    /// Model calls made.
    pub model_calls: i64,
    /// Why it failed or paused.
    pub error: Option<&'a str>,
}

/// Run `runner` lets go of agent `id`: the agent moves to `status` (with `reason`) and, in the
/// same transaction, `turn` is recorded as ended. `Ok(false)`, writing nothing, when the run no
/// longer held the agent.
pub async fn release(
    store: &Store,
    id: &str,
    runner: &str,
    status: &str,
    reason: Option<&str>,
    turn: Option<TurnEnd<'_>>,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.begin_write().await?;
    let done = sqlx::query(
        // `updated_at` always moves forward, so a reader's snapshot of it never matches again.
        "UPDATE agents SET status = $1, status_reason = $2, runner = NULL, \
         updated_at = CASE WHEN $3 > updated_at THEN $3 ELSE updated_at + 1 END \
         WHERE id = $4 AND runner = $5",
    )
    .bind(status)
    .bind(reason)
    .bind(now)
    .bind(id)
    .bind(runner)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() != 1 {
        return Ok(false);
    }
    if let Some(t) = turn {
        sqlx::query(
            "UPDATE agent_turns SET status = $1, model_calls = $2, error = $3, ended_at = $4 \
             WHERE id = $5",
        )
        .bind(t.status)
        .bind(t.model_calls)
        .bind(t.error)
        .bind(now)
        .bind(t.turn_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Background children of `parent_id` that finished and were not yet reported to it, oldest
/// first.
pub async fn unreported(store: &Store, parent_id: &str) -> Result<Vec<AgentRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM agents WHERE parent_id = $1 AND background = 1 \
         AND reported_at IS NULL AND status IN ('idle', 'paused') ORDER BY created_at, id"
    ))
    .bind(parent_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(agent).collect()
}

/// Marks a sub-agent as running apart from its parent's turn (its answer is reported later).
pub async fn set_background(store: &Store, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE agents SET background = 1 WHERE id = $1")
        .bind(id)
        .execute(store.pool())
        .await?;
    Ok(())
}
