//! MCP tasks over Aperture's invocations, in both eras:
//! - 2025-11-25 (experimental): a task-augmented `tools/call` of a tool that waits (parked for
//!   an approver, staged, async) answers with a `CreateTaskResult` whose `taskId` is the
//!   invocation id; `tasks/get` reports its status and `tasks/result` waits for the final tool
//!   result.
//! - 2026-07-28 (the `io.modelcontextprotocol/tasks` extension, when the request's client
//!   declares it): such a call answers `resultType: "task"` with the task; `tasks/get` answers
//!   the task with its outcome inlined (`result` once completed); `tasks/cancel` and
//!   `tasks/update` are acknowledged with empty results. A waiting invocation awaits a person
//!   at the gateway (an approver), not the client: it is `working` until decided.
//!
//! Tasks are the caller's own invocations: another actor's look like unknown ones.

use std::time::Duration;

use serde_json::{Value, json};

use super::{INTERNAL_ERROR, INVALID_PARAMS, error, ok};
use crate::auth::Principal;
use crate::state::AppState;
use aperture_core::Store;
use aperture_core::clock;
use aperture_core::invocations::{self as rows, InvocationRow};

/// How often a client is asked to poll `tasks/get`. (`ttl` is `null`: results are kept; parked
/// invocations expire by themselves into a final result.)
const POLL_INTERVAL_MS: u64 = 1000;

/// MCP's task status of an invocation.
fn status(row: &InvocationRow) -> &'static str {
    match row.status.as_str() {
        "input_required"
        | "approving"
        | "rejecting"
        | "expiring"
        | "staged"
        | "applying"
        | "confirmation_required" => "input_required",
        "approved" | "running" => "working",
        "cancelling" | "cancelled" => "cancelled",
        _ => {
            let failed = row
                .result
                .as_deref()
                .and_then(|r| serde_json::from_str::<Value>(r).ok())
                .is_none_or(|r| r["isError"] != Value::Bool(false));
            if failed { "failed" } else { "completed" }
        }
    }
}

fn status_message(row: &InvocationRow) -> &'static str {
    match row.status.as_str() {
        "input_required" | "approving" => "Parked until an approver releases or rejects it.",
        "staged" | "applying" => "Staged until an approver applies or rejects it.",
        "approved" | "running" => "Released; running.",
        "rejected" | "rejecting" => "Rejected by an approver; nothing ran.",
        "expired" | "expiring" => "Nobody decided in time; nothing ran.",
        "cancelled" | "cancelling" => "Cancelled before it ran; nothing ran.",
        _ => "Finished; tasks/result has the tool result.",
    }
}

/// The extension a 2026-07-28 client declares to take tasks.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether a 2026-07-28 request's client declared the tasks extension.
pub fn declared(params: &Value) -> bool {
    params
        .get("_meta")
        .and_then(|m| m.get(super::META_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(EXTENSION))
        .is_some()
}

/// The extension's status of an invocation: one waiting for an approver (or a worker) is
/// `working` — nothing is asked of the client; any tool result, errors included, is
/// `completed`.
fn status_2026(row: &InvocationRow) -> &'static str {
    match status(row) {
        "input_required" | "working" => "working",
        "cancelled" => "cancelled",
        _ => "completed",
    }
}

/// The extension's `Task` of an invocation, with its outcome inlined when it has one
/// (`DetailedTask`).
fn task_2026(row: &InvocationRow) -> Value {
    let status = status_2026(row);
    let mut task = json!({
        "taskId": row.id,
        "status": status,
        "statusMessage": status_message(row),
        "createdAt": clock::rfc3339(row.created_at),
        "lastUpdatedAt": clock::rfc3339(row.updated_at),
        "ttlMs": Value::Null,
        "pollIntervalMs": POLL_INTERVAL_MS,
    });
    if status == "completed"
        && let Some(result) = row
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
    {
        task["result"] = result;
    }
    task
}

/// The invocation a call's `result` says waits (parked, staged, running as a job), when it is
/// stored; `None` for a result that is final.
async fn waiting_row(
    store: &Store,
    principal: &Principal,
    result: &Value,
) -> Option<InvocationRow> {
    let waiting = matches!(
        result["_meta"]["status"].as_str(),
        Some("input_required" | "working" | "staged")
    );
    let id = result["_meta"]["invocation_id"]
        .as_str()
        .filter(|_| waiting)?;
    rows::find(store, &principal.tenant_id, id)
        .await
        .ok()
        .flatten()
}

/// The answer to a 2026-07-28 `tools/call` whose client takes tasks: `resultType: "task"`
/// when the call became an invocation that waits, otherwise the call's own result.
pub async fn created_2026(store: &Store, principal: &Principal, result: Value) -> Value {
    match waiting_row(store, principal, &result).await {
        // SEP-2663's `CreateTaskResult` is the task itself (`Result & Task`): its fields at the
        // top level, no `task` wrapper (that was the 2025-11-25 shape).
        Some(row) => {
            let mut task = task_2026(&row);
            if let Some(fields) = task.as_object_mut() {
                fields.remove("result");
                fields.insert("resultType".into(), json!("task"));
                fields.insert(
                    "_meta".into(),
                    json!({"receipt": result["_meta"]["receipt"]}),
                );
            }
            task
        }
        None => result,
    }
}

/// `tasks/update` (2026-07-28): answers to the task's input requests. Aperture's tasks ask
/// the client nothing (they wait for an approver), so there is nothing to answer.
pub async fn update(state: &AppState, principal: &Principal, id: &Value, params: &Value) -> Value {
    match own(state, principal, id, params).await {
        Ok(_) => error(
            id,
            INVALID_PARAMS,
            "this task awaits no input from the client (it waits for an approver)",
        ),
        Err(e) => e,
    }
}

/// The `Task` object of an invocation.
fn task(row: &InvocationRow) -> Value {
    json!({
        "taskId": row.id,
        "status": status(row),
        "statusMessage": status_message(row),
        "createdAt": clock::rfc3339(row.created_at),
        "lastUpdatedAt": clock::rfc3339(row.updated_at),
        "ttl": Value::Null,
        "pollInterval": POLL_INTERVAL_MS,
    })
}

/// The answer to a task-augmented `tools/call`: a `CreateTaskResult` when the call became an
/// invocation that waits, otherwise the call's own result (a denial, or a call that ran at
/// once), which is already final.
pub async fn created(store: &Store, principal: &Principal, result: Value) -> Value {
    match waiting_row(store, principal, &result).await {
        Some(row) => {
            let text = result["content"][0]["text"].clone();
            json!({
                "task": task(&row),
                "_meta": {
                    "io.modelcontextprotocol/model-immediate-response": text,
                    "receipt": result["_meta"]["receipt"],
                }
            })
        }
        // The invocation was stored a moment ago; answer with the status result itself.
        None => result,
    }
}

/// The caller's invocation named by `params.taskId`.
async fn own(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
) -> Result<InvocationRow, Value> {
    let Some(task_id) = params.get("taskId").and_then(Value::as_str) else {
        return Err(error(id, INVALID_PARAMS, "taskId is required"));
    };
    match aperture_core::invocations::find_visible(&state.store, principal, task_id).await {
        Ok(Some(row)) if row.actor_id == principal.actor_id => Ok(row),
        Ok(_) => Err(error(
            id,
            INVALID_PARAMS,
            "Failed to retrieve task: Task not found",
        )),
        Err(e) => Err(error(
            id,
            INTERNAL_ERROR,
            format!("the store failed: {}", e.into_app_error().message),
        )),
    }
}

/// `tasks/get`: the task (in 2026-07-28, with its outcome inlined).
pub async fn get(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
    stateless: bool,
) -> Value {
    match own(state, principal, id, params).await {
        Ok(row) if stateless => ok(id, task_2026(&row)),
        Ok(row) => ok(id, task(&row)),
        Err(e) => e,
    }
}

/// Longest a `tasks/result` waits before answering that the task is not finished yet.
const RESULT_WAIT: Duration = Duration::from_secs(300);

/// `tasks/result`: the final tool result, waiting for it (up to [`RESULT_WAIT`], polling less
/// often as it goes) while the task is not finished.
pub async fn result(state: &AppState, principal: &Principal, id: &Value, params: &Value) -> Value {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        let row = match own(state, principal, id, params).await {
            Ok(row) => row,
            Err(e) => return e,
        };
        // A cancellation is final once claimed; its result is stored a moment later.
        let cancelled_and_stored = status(&row) == "cancelled" && row.result.is_some();
        if matches!(status(&row), "completed" | "failed") || cancelled_and_stored {
            let Some(mut result) = row
                .result
                .as_deref()
                .and_then(|r| serde_json::from_str::<Value>(r).ok())
            else {
                return error(
                    id,
                    INTERNAL_ERROR,
                    "the task finished without a stored result",
                );
            };
            if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.insert(
                    "io.modelcontextprotocol/related-task".into(),
                    json!({"taskId": row.id}),
                );
            }
            return ok(id, result);
        }
        if started.elapsed() >= RESULT_WAIT {
            return error(
                id,
                INTERNAL_ERROR,
                format!(
                    "task {} is still {}; call tasks/result again",
                    row.id,
                    status(&row)
                ),
            );
        }
        // The caller may disconnect at any time; nothing is lost by waiting here.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// `tasks/cancel`: the caller's own task (CONTRACT §14: its result becomes the durable
/// `cancelled` one). One that waits or is queued is cancelled at once; one that runs stops
/// waiting for its upstream and ends as cancelled a moment later (the `Task` answered may
/// still say `working`). A task that has ended cannot be cancelled.
pub async fn cancel(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    params: &Value,
    stateless: bool,
) -> Value {
    let row = match own(state, principal, id, params).await {
        Ok(row) => row,
        Err(e) => return e,
    };
    if matches!(status(&row), "completed" | "failed" | "cancelled") {
        return error(
            id,
            INVALID_PARAMS,
            format!(
                "Cannot cancel task: already in terminal status '{}'",
                status(&row)
            ),
        );
    }
    match aperture_core::invocations::cancel(
        &state.store,
        &state.journal,
        &state.events,
        &state.in_flight,
        principal,
        &row.id,
    )
    .await
    {
        // 2026-07-28: an empty acknowledgement; the task's state is read with `tasks/get`.
        Ok(_) if stateless => ok(id, json!({})),
        Ok(_) => match rows::find(&state.store, &principal.tenant_id, &row.id).await {
            Ok(Some(row)) => ok(id, task(&row)),
            Ok(None) => error(
                id,
                INVALID_PARAMS,
                "Failed to retrieve task: Task not found",
            ),
            Err(e) => error(id, INTERNAL_ERROR, format!("the store failed: {e}")),
        },
        Err(e) => {
            let e = e.into_app_error();
            let code = if e.code == aperture_types::error::ErrorCode::Unavailable
                || e.code == aperture_types::error::ErrorCode::Internal
            {
                INTERNAL_ERROR
            } else {
                INVALID_PARAMS
            };
            error(id, code, format!("Cannot cancel task: {}", e.message))
        }
    }
}

/// Tasks in one `tasks/list` page.
const TASKS_PAGE: i64 = 100;

/// `tasks/list`: the caller's own tasks (its invocations), newest first, [`TASKS_PAGE`] at a
/// time with `nextCursor`.
pub async fn list(state: &AppState, principal: &Principal, id: &Value, params: &Value) -> Value {
    let before = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => match parse_cursor(c) {
            Some(before) => Some(before),
            None => return error(id, INVALID_PARAMS, "invalid cursor"),
        },
        Some(_) => return error(id, INVALID_PARAMS, "cursor must be a string"),
    };
    let page = match rows::own_before(
        &state.store,
        principal,
        before.as_ref().map(|(at, task)| (*at, task.as_str())),
        TASKS_PAGE + 1,
    )
    .await
    {
        Ok(page) => page,
        Err(e) => return error(id, INTERNAL_ERROR, format!("the store failed: {e}")),
    };
    let more = page.len() > usize::try_from(TASKS_PAGE).unwrap_or(usize::MAX);
    let shown = &page[..page
        .len()
        .min(usize::try_from(TASKS_PAGE).unwrap_or(usize::MAX))];
    let mut result = json!({"tasks": shown.iter().map(task).collect::<Vec<_>>()});
    if more && let Some(last) = shown.last() {
        result["nextCursor"] = Value::String(cursor(last.created_at, &last.id));
    }
    ok(id, result)
}

/// A `tasks/list` cursor: where the last page ended (opaque to clients, base64url).
fn cursor(created_at: i64, task_id: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{created_at}:{task_id}"))
}

fn parse_cursor(cursor: &str) -> Option<(i64, String)> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (at, task_id) = text.split_once(':')?;
    Some((at.parse().ok()?, task_id.to_owned()))
}
