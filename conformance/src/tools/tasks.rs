//! The fixture tools of the tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`).
//!
//! A task-supporting tool called by a client that declares the extension (in `initialize`, or
//! per request in `_meta`) answers at once with a task handle (`resultType: "task"`) and runs
//! in the background; the client polls `tasks/get`, answers the task's questions with
//! `tasks/update` and may `tasks/cancel` it (rmcp's [`TaskManager`] keeps the tasks). Without
//! the extension such a tool runs synchronously, unless it can only run as a task, which is
//! refused with `-32021` naming the extension.
//!
//! [`TaskManager`]: rmcp::task_manager::TaskManager

use std::time::Duration;

use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    ErrorData, InputRequests, InputRequiredResult,
};
use rmcp::task_manager::{TaskContext, TaskExit, TaskFuture, TaskOptions};
use serde_json::{Value, json};

use super::Call;
use crate::input;

/// How often a client should poll a task; the suite polls every 200 ms.
const POLL_INTERVAL_MS: u64 = 200;

/// How long `failing_job` works before it fails.
const FAILING_JOB_WORK: Duration = Duration::from_secs(1);

/// How long `protocol_error_job` and `test_tool_with_task`'s task work.
const SHORT_WORK: Duration = Duration::from_millis(200);

/// `greet`: a tool that never becomes a task, whatever the client supports.
pub fn greet(call: &Call<'_>) -> CallToolResult {
    let name = call.text_argument("name").unwrap_or("World");
    CallToolResult::success(vec![ContentBlock::text(format!("Hello, {name}!"))])
}

/// `slow_compute`: sleeps `seconds` (cancellable when it is a task).
pub async fn slow_compute(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let seconds = call
        .number_argument("seconds")
        .unwrap_or(1.0)
        .clamp(0.0, 600.0);
    let label = call.text_argument("label").unwrap_or("compute").to_owned();
    let work = Duration::from_secs_f64(seconds);
    let done = move || {
        CallToolResult::success(vec![ContentBlock::text(format!(
            "slow_compute({label}) finished after {seconds} s"
        ))])
    };
    if !supports_tasks(call) {
        tokio::time::sleep(work).await;
        return Ok(done().into());
    }
    Ok(spawn(call, move |task| {
        Box::pin(async move {
            tokio::select! {
                () = task.cancelled() => Err(TaskExit::Cancelled),
                () = tokio::time::sleep(work) => Ok(done()),
            }
        })
    }))
}

/// `failing_job`: a task (only) that ends in a tool error: the task completes, its result has
/// `isError`.
pub fn failing_job(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    require_tasks(call)?;
    Ok(spawn(call, |_| {
        Box::pin(async {
            tokio::time::sleep(FAILING_JOB_WORK).await;
            Ok(CallToolResult::error(vec![ContentBlock::text(
                "failing_job failed, as it always does",
            )]))
        })
    }))
}

/// `protocol_error_job`: ends in a protocol error: as a task, the task fails with the error;
/// otherwise the call gets it.
pub async fn protocol_error_job(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let failure =
        || ErrorData::internal_error("protocol_error_job failed, as it always does", None);
    if !supports_tasks(call) {
        tokio::time::sleep(SHORT_WORK).await;
        return Err(failure());
    }
    Ok(spawn(call, move |_| {
        Box::pin(async move {
            tokio::time::sleep(SHORT_WORK).await;
            Err(TaskExit::Error(failure()))
        })
    }))
}

/// `confirm_delete`: a task (only) that asks the user to confirm deleting `filename`.
pub fn confirm_delete(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    require_tasks(call)?;
    let filename = call
        .text_argument("filename")
        .unwrap_or("file.txt")
        .to_owned();
    let question = input::elicitation(
        &format!("Delete {filename}?"),
        json!({ "confirm": { "type": "boolean", "description": "Delete the file" } }),
        &["confirm"],
    )?;
    Ok(spawn(call, move |task| {
        Box::pin(async move {
            let answer = task.request_input("confirm", question).await?;
            let confirmed = answer
                .pointer("/content/confirm")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let outcome = if confirmed { "deleted" } else { "kept" };
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{filename} {outcome}"
            ))]))
        })
    }))
}

/// `multi_input`: a task (only) that asks two questions at once; it waits for both answers,
/// which may come in separate `tasks/update` calls.
pub fn multi_input(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    require_tasks(call)?;
    let ask = |label: &str| {
        input::elicitation(
            &format!("Provide value {label}"),
            json!({ "value": { "type": "string" } }),
            &["value"],
        )
    };
    let (first, second) = (ask("A")?, ask("B")?);
    Ok(spawn(call, move |task| {
        Box::pin(async move {
            let (a, b) = tokio::join!(
                task.request_input("value_a", first),
                task.request_input("value_b", second)
            );
            let value = |answer: &Value| {
                answer
                    .pointer("/content/value")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)")
                    .to_owned()
            };
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "multi_input: a = {}, b = {}",
                value(&a?),
                value(&b?)
            ))]))
        })
    }))
}

/// `test_tool_with_task`: an input round first (SEP-2322: the user's name), then a task
/// (required) that greets them.
pub fn with_input_round(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    require_tasks(call)?;
    let Some(answer) = input::answer(call.responses(), "user_name") else {
        let question = input::elicitation(
            "What is your name?",
            json!({ "name": { "type": "string" } }),
            &["name"],
        )?;
        let questions = InputRequests::from([("user_name".to_owned(), question)]);
        return Ok(InputRequiredResult::from_input_requests(questions).into());
    };
    let name = input::content_text(answer, "name")
        .unwrap_or("stranger")
        .to_owned();
    Ok(spawn(call, move |_| {
        Box::pin(async move {
            tokio::time::sleep(SHORT_WORK).await;
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "Hello, {name}! (from a task)"
            ))]))
        })
    }))
}

/// Whether the request's client declares the tasks extension.
fn supports_tasks(call: &Call<'_>) -> bool {
    call.context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// Refuses a client without the tasks extension: the tool can only run as a task.
fn require_tasks(call: &Call<'_>) -> Result<(), ErrorData> {
    if supports_tasks(call) {
        return Ok(());
    }
    Err(ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    ))
}

/// Starts `work` as a task and returns its handle.
fn spawn(call: &Call<'_>, work: impl FnOnce(TaskContext) -> TaskFuture) -> CallToolResponse {
    let options = TaskOptions::new().with_poll_interval_ms(POLL_INTERVAL_MS);
    let task = call.state.shared.tasks.spawn(options, work);
    CreateTaskResult::new(task).into()
}

/// The schema of `greet`.
pub fn greet_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "name": { "type": "string", "description": "Who to greet" } },
        "required": ["name"]
    })
}

/// The schema of `slow_compute`.
pub fn slow_compute_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "seconds": { "type": "number", "description": "How long to work" },
            "label": { "type": "string", "description": "A name for the job" }
        }
    })
}

/// The schema of `confirm_delete`.
pub fn confirm_delete_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "filename": { "type": "string", "description": "The file to delete" } }
    })
}
