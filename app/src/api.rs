//! The dashboard's server functions. Each is a public endpoint: it authenticates and authorizes
//! inside (through [`crate::backend::Backend`]) and returns views, never rows. All live under
//! `/ui/…` so they never mix with the REST API under `/api/v2`.

use leptos::prelude::*;

use crate::dto::{
    CreateTokenRequest, CreateUserRequest, CreatedToken, Me, TokenView, UpdateScopesRequest,
    UserView,
};
use crate::error::AppError;

/// Signs in with a password. Works as a plain HTML form before hydration too.
#[server(prefix = "/ui", endpoint = "sign-in")]
pub async fn sign_in(tenant: String, username: String, password: String) -> Result<Me, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend
        .sign_in(&session, &tenant, &username, &password)
        .await
}

/// Signs out and sends the browser to the sign-in page.
#[server(prefix = "/ui", endpoint = "sign-out")]
pub async fn sign_out() -> Result<(), AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.sign_out(&session).await?;
    leptos_axum::redirect("/sign-in");
    Ok(())
}

/// The signed-in user, if any.
#[server(prefix = "/ui", endpoint = "me")]
pub async fn current_user() -> Result<Option<Me>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.me(&session).await
}

/// Figures for the overview page.
#[server(name = OverviewFigures, prefix = "/ui", endpoint = "overview")]
pub async fn overview() -> Result<crate::dto::Overview, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.overview(&session).await
}

/// Lists the tenant's tokens.
#[server(prefix = "/ui", endpoint = "tokens/list")]
pub async fn list_tokens() -> Result<Vec<TokenView>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.list_tokens(&session).await
}

/// Creates a token and returns its secret (once).
#[server(prefix = "/ui", endpoint = "tokens/create")]
pub async fn create_token(request: CreateTokenRequest) -> Result<CreatedToken, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.create_token(&session, request).await
}

/// Revokes a token.
#[server(prefix = "/ui", endpoint = "tokens/revoke")]
pub async fn revoke_token(id: String) -> Result<TokenView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.revoke_token(&session, &id).await
}

/// The tenant's webhooks with their latest deliveries.
#[server(prefix = "/ui", endpoint = "webhooks/list")]
pub async fn list_webhooks() -> Result<crate::dto::WebhooksView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.webhooks(&session).await
}

/// Creates a webhook and returns its signing secret (once).
#[server(prefix = "/ui", endpoint = "webhooks/create")]
pub async fn create_webhook(
    request: crate::dto::CreateWebhookRequest,
) -> Result<crate::dto::CreatedWebhook, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.create_webhook(&session, request).await
}

/// Deletes a webhook.
#[server(prefix = "/ui", endpoint = "webhooks/delete")]
pub async fn delete_webhook(id: String) -> Result<crate::dto::WebhookView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.delete_webhook(&session, &id).await
}

/// Lists the tenant's users.
#[server(prefix = "/ui", endpoint = "users/list")]
pub async fn list_users() -> Result<Vec<UserView>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.list_users(&session).await
}

/// Creates a user.
#[server(prefix = "/ui", endpoint = "users/create")]
pub async fn create_user(request: CreateUserRequest) -> Result<UserView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.create_user(&session, request).await
}

/// Replaces a user's scopes.
#[server(prefix = "/ui", endpoint = "users/scopes")]
pub async fn update_user_scopes(
    username: String,
    request: UpdateScopesRequest,
) -> Result<UserView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend
        .update_user_scopes(&session, &username, request)
        .await
}

/// Lists the tenant's policies.
#[server(prefix = "/ui", endpoint = "policies/list")]
pub async fn list_policies() -> Result<Vec<crate::dto::PolicySummary>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.list_policies(&session).await
}

/// The policy editor's data for `id`.
#[server(prefix = "/ui", endpoint = "policies/editor")]
pub async fn policy_editor(id: String) -> Result<crate::dto::PolicyEditorData, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.policy_editor(&session, &id).await
}

/// Saves a new version of policy `id`; `document` is the policy as JSON text.
#[server(prefix = "/ui", endpoint = "policies/save")]
pub async fn save_policy(
    id: String,
    document: String,
) -> Result<crate::dto::PolicyVersionView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    let document: serde_json::Value = serde_json::from_str(&document)
        .map_err(|e| AppError::invalid_field("document", format!("not valid JSON: {e}")))?;
    backend.save_policy(&session, &id, document).await
}

/// Replays `document` (the draft, as JSON text) over the tenant's calls of the last `days`
/// days.
#[server(prefix = "/ui", endpoint = "policies/replay")]
pub async fn replay_policy(
    document: String,
    days: u32,
) -> Result<crate::dto::ReplayReport, AppError> {
    let (backend, session) = crate::backend::context().await?;
    let policy: serde_json::Value = serde_json::from_str(&document)
        .map_err(|e| AppError::invalid_field("document", format!("not valid JSON: {e}")))?;
    if !(1..=92).contains(&days) {
        return Err(AppError::invalid_field("days", "between 1 and 92"));
    }
    let now = time::OffsetDateTime::now_utc();
    let since = now - time::Duration::days(i64::from(days));
    let rfc = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .map_err(|e| AppError::new(crate::error::ErrorCode::Internal, e.to_string()))
    };
    let request = crate::dto::ReplayRequest {
        policy,
        since: Some(rfc(since)?),
        until: Some(rfc(now)?),
    };
    backend.replay_policy(&session, request).await
}

/// Makes policy `id` the one new sessions of `environment` get.
#[server(prefix = "/ui", endpoint = "policies/activate")]
pub async fn activate_policy(
    id: String,
    environment: String,
) -> Result<crate::dto::PolicySummary, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.activate_policy(&session, &id, &environment).await
}

/// The approvals queue.
#[server(prefix = "/ui", endpoint = "approvals/list")]
pub async fn approvals() -> Result<crate::dto::ApprovalsView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.approvals(&session).await
}

/// Approves, applies, rejects or cancels a waiting invocation.
#[server(prefix = "/ui", endpoint = "approvals/decide")]
pub async fn decide_invocation(
    id: String,
    action: String,
    args_hash: Option<String>,
    definition_hash: Option<String>,
    comment: Option<String>,
) -> Result<crate::dto::InvocationView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend
        .decide_invocation(&session, &id, &action, args_hash, definition_hash, comment)
        .await
}

/// A page of receipts.
#[server(prefix = "/ui", endpoint = "receipts/list")]
pub async fn receipts(
    query: crate::dto::ReceiptQuery,
) -> Result<crate::dto::ReceiptPage, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.receipts(&session, query).await
}

/// One receipt, to show and verify.
#[server(prefix = "/ui", endpoint = "receipts/get")]
pub async fn receipt(id: String) -> Result<crate::dto::ReceiptDetail, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.receipt(&session, &id).await
}

/// The Tools page's data.
#[server(prefix = "/ui", endpoint = "tools/list")]
pub async fn tools() -> Result<crate::dto::ToolsView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.tools(&session).await
}

/// Sets a tool's descriptor.
#[server(prefix = "/ui", endpoint = "tools/describe")]
pub async fn describe_tool(
    name: String,
    request: crate::dto::DescribeToolRequest,
) -> Result<engine::descriptor::ToolDescriptor, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.describe_tool(&session, &name, request).await
}

/// Decides on a tool's held change: `accept` or `keep_held` (admin), for the held definition
/// the admin reviewed (`definition_hash`).
#[server(prefix = "/ui", endpoint = "tools/decide")]
pub async fn decide_tool_change(
    name: String,
    decision: String,
    definition_hash: String,
) -> Result<crate::dto::DriftDecisionView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend
        .decide_tool_change(&session, &name, &decision, definition_hash)
        .await
}

/// Re-syncs an upstream.
#[server(prefix = "/ui", endpoint = "upstreams/sync")]
pub async fn sync_upstream(id: String) -> Result<crate::dto::SyncReport, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.sync_upstream(&session, &id).await
}

/// Sessions.
#[server(prefix = "/ui", endpoint = "sessions/list")]
pub async fn sessions() -> Result<Vec<crate::dto::SessionView>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.sessions(&session).await
}

/// One session.
#[server(prefix = "/ui", endpoint = "sessions/get")]
pub async fn session_detail(id: String) -> Result<crate::dto::SessionDetail, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.session_detail(&session, &id).await
}

/// Revokes a session.
#[server(prefix = "/ui", endpoint = "sessions/revoke")]
pub async fn revoke_session(id: String) -> Result<crate::dto::SessionView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.revoke_session(&session, &id).await
}

/// Hosted agents.
#[server(prefix = "/ui", endpoint = "agents/list")]
pub async fn agents() -> Result<Vec<crate::dto::AgentView>, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.agents(&session).await
}

/// One hosted agent.
#[server(prefix = "/ui", endpoint = "agents/get")]
pub async fn agent_detail(id: String) -> Result<crate::dto::AgentDetail, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.agent_detail(&session, &id).await
}

/// The Journal page's data: checkpoints, the log's key, witnesses.
#[server(prefix = "/ui", endpoint = "journal")]
pub async fn journal() -> Result<crate::dto::JournalView, AppError> {
    let (backend, session) = crate::backend::context().await?;
    backend.journal(&session).await
}
