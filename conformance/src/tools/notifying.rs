//! Tools that send notifications while they run: log messages, progress, list changes, and the
//! tool whose response stream the server closes mid-call.

use std::time::Duration;

use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam,
};
use rmcp::service::ServiceError;
use serde_json::Value;

use super::Call;
use crate::subscriptions::ListChange;
use crate::wire::Wire;

/// The pause between two notifications of one call.
const STEP: Duration = Duration::from_millis(50);

/// How long `test_reconnection` works: long enough for the client to reconnect to the stream
/// the server closed, so that the result reaches it on the new one.
const RECONNECTION_WORK: Duration = Duration::from_millis(500);

/// `test_tool_with_logging`: three `notifications/message` at level info, 50 ms apart.
pub async fn with_logging(call: &Call<'_>) -> Result<CallToolResult, ErrorData> {
    log(call, LoggingLevel::Info, "Tool execution started").await?;
    tokio::time::sleep(STEP).await;
    log(call, LoggingLevel::Info, "Tool processing data").await?;
    tokio::time::sleep(STEP).await;
    log(call, LoggingLevel::Info, "Tool execution completed").await?;
    Ok(text("Tool with logging executed successfully"))
}

/// `test_tool_with_progress`: progress 0, 50 and 100 of 100, 50 ms apart, to the call's
/// progress token (none is sent without one).
pub async fn with_progress(call: &Call<'_>) -> Result<CallToolResult, ErrorData> {
    for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if step > 0 {
            tokio::time::sleep(STEP).await;
        }
        report_progress(call, progress).await?;
    }
    Ok(text("Progress reported: 3 steps"))
}

/// `test_reconnection` (SEP-1699): the session layer ([`crate::sessions`]) ends this call's
/// stream after its priming event; the result, sent a little later, reaches the client when it
/// reconnects with `Last-Event-ID`.
pub async fn reconnection() -> CallToolResult {
    tokio::time::sleep(RECONNECTION_WORK).await;
    text(
        "Reconnection test completed successfully. If you received this, the client properly \
         reconnected after stream closure.",
    )
}

/// `test_streaming_elicitation`: a stateless call's stream carries notifications and then the
/// result, never a request to the client.
pub async fn streaming(call: &Call<'_>) -> Result<CallToolResult, ErrorData> {
    report_progress(call, 100.0).await?;
    Ok(text("Streaming complete"))
}

/// `test_logging_tool`: logs one message, which a stateless request only receives when its
/// `_meta` names a log level.
pub async fn logging_tool(call: &Call<'_>) -> Result<CallToolResult, ErrorData> {
    log(call, LoggingLevel::Info, "Logging tool ran").await?;
    Ok(text("Logging evaluated"))
}

/// `test_trigger_tool_change`: announces a changed tool list.
pub async fn trigger_tool_change(call: &Call<'_>) -> Result<CallToolResult, ErrorData> {
    announce(call, ListChange::Tools).await?;
    Ok(text("Tool list change announced"))
}

/// `test_trigger_prompt_change`: announces a changed prompt list.
pub async fn trigger_prompt_change(call: &Call<'_>) -> Result<CallToolResult, ErrorData> {
    announce(call, ListChange::Prompts).await?;
    Ok(text("Prompt list change announced"))
}

/// Sends `change` to the `subscriptions/listen` streams that asked for it, and to the caller's
/// own session on the 2025 wire.
async fn announce(call: &Call<'_>, change: ListChange) -> Result<(), ErrorData> {
    call.state.shared.subscriptions.notify(change).await;
    if Wire::of(call.context) == Wire::Session {
        let peer = &call.context.peer;
        match change {
            ListChange::Tools => peer.notify_tool_list_changed().await,
            ListChange::Prompts => peer.notify_prompt_list_changed().await,
        }
        .map_err(undelivered)?;
    }
    Ok(())
}

/// Reports `progress` of 100 to the call's progress token, if it has one.
async fn report_progress(call: &Call<'_>, progress: f64) -> Result<(), ErrorData> {
    let Some(token) = call.context.meta.get_progress_token() else {
        return Ok(());
    };
    let mut params = ProgressNotificationParam::new(token, progress);
    params.total = Some(100.0);
    params.message = Some(format!("Completed step {progress} of 100"));
    call.context
        .peer
        .notify_progress(params)
        .await
        .map_err(undelivered)
}

/// Sends a log message at `level`, if the client wants that level: on the 2025 wire whatever
/// `logging/setLevel` asked for, on the stateless wire only what the request's `_meta` asks for.
async fn log(call: &Call<'_>, level: LoggingLevel, message: &str) -> Result<(), ErrorData> {
    let threshold = match Wire::of(call.context) {
        Wire::Session => Some(call.state.session.log_level()),
        Wire::Stateless => call.context.meta.log_level(),
    };
    let wanted = threshold.is_some_and(|threshold| severity(level) >= severity(threshold));
    if !wanted {
        return Ok(());
    }
    let params = LoggingMessageNotificationParam::new(level, Value::from(message))
        .with_logger("conformance-upstream");
    call.context
        .peer
        .notify_logging_message(params)
        .await
        .map_err(undelivered)
}

/// The syslog severity order of the MCP log levels, least severe first.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn text(text: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn undelivered(error: ServiceError) -> ErrorData {
    ErrorData::internal_error(format!("notification not delivered: {error}"), None)
}
