//! Clients' answers waiting for the node that holds their call (`client_answers`).

use sqlx::Error;

use super::Store;

/// A stored answer: who answered, on which session, and the answer (JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerRow {
    pub tenant_id: String,
    pub principal: String,
    pub mcp_session: Option<String>,
    pub answer: String,
}

/// Keeps the answer to request `id`; a principal's second answer to the same id is ignored
/// (whether it was kept).
pub async fn put(store: &Store, id: &str, row: &AnswerRow, now: i64) -> Result<bool, Error> {
    let done = sqlx::query(
        "INSERT INTO client_answers (id, tenant_id, principal, mcp_session, answer, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id, principal) DO NOTHING",
    )
    .bind(id)
    .bind(&row.tenant_id)
    .bind(&row.principal)
    .bind(&row.mcp_session)
    .bind(&row.answer)
    .bind(now)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Takes (reads and deletes) the answers kept for request `id`, once.
pub async fn take(store: &Store, id: &str) -> Result<Vec<AnswerRow>, Error> {
    let rows: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
        "DELETE FROM client_answers WHERE id = $1 \
         RETURNING tenant_id, principal, mcp_session, answer",
    )
    .bind(id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant_id, principal, mcp_session, answer)| AnswerRow {
            tenant_id,
            principal,
            mcp_session,
            answer,
        })
        .collect())
}

/// Forgets answers kept since before `before`.
pub async fn delete_older(store: &Store, before: i64) -> Result<(), Error> {
    sqlx::query("DELETE FROM client_answers WHERE created_at < $1")
        .bind(before)
        .execute(store.pool())
        .await?;
    Ok(())
}
