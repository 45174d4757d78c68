//! What the dashboard needs from the server, as a trait the server implements.
//!
//! `app` cannot depend on `server` (the server depends on `app`), so the server functions reach
//! the server's services through this trait, provided as context for every request. The server's
//! implementation calls the very functions its REST routes call: one implementation, two mounts.

use std::sync::Arc;

use tower_sessions::Session;

use crate::dto::{
    AgentDetail, AgentView, ApprovalsView, CreateTokenRequest, CreateUserRequest, CreatedToken,
    DescribeToolRequest, DriftDecisionView, InvocationView, Me, Overview, PolicyEditorData,
    PolicySummary, PolicyVersionView, ReceiptDetail, ReceiptPage, ReceiptQuery, SessionDetail,
    SessionView, SyncReport, TokenView, ToolsView, UpdateScopesRequest, UserView,
};
use crate::error::AppError;

/// The server's services, seen from a dashboard request. Every method that acts for a person
/// takes their cookie session and authenticates and authorizes inside.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Checks a password and, on success, rotates the session id and signs the user in.
    async fn sign_in(
        &self,
        session: &Session,
        tenant: &str,
        username: &str,
        password: &str,
    ) -> Result<Me, AppError>;
    /// Ends the session (the id is invalidated in the store).
    async fn sign_out(&self, session: &Session) -> Result<(), AppError>;
    /// The signed-in user, or `None`.
    async fn me(&self, session: &Session) -> Result<Option<Me>, AppError>;
    /// Figures for the overview page.
    async fn overview(&self, session: &Session) -> Result<Overview, AppError>;
    /// Tokens of the tenant (admin).
    async fn list_tokens(&self, session: &Session) -> Result<Vec<TokenView>, AppError>;
    /// Creates a token (admin); the secret is in the answer and nowhere else.
    async fn create_token(
        &self,
        session: &Session,
        request: CreateTokenRequest,
    ) -> Result<CreatedToken, AppError>;
    /// Revokes a token (admin).
    async fn revoke_token(&self, session: &Session, id: &str) -> Result<TokenView, AppError>;
    /// Users of the tenant (admin).
    async fn list_users(&self, session: &Session) -> Result<Vec<UserView>, AppError>;
    /// Creates a user (admin).
    async fn create_user(
        &self,
        session: &Session,
        request: CreateUserRequest,
    ) -> Result<UserView, AppError>;
    /// Replaces a user's scopes (admin).
    async fn update_user_scopes(
        &self,
        session: &Session,
        username: &str,
        request: UpdateScopesRequest,
    ) -> Result<UserView, AppError>;
    /// Policies with their latest version and activations (read).
    async fn list_policies(&self, session: &Session) -> Result<Vec<PolicySummary>, AppError>;
    /// What the editor needs for policy `id` (read); a valid id not saved yet has no versions.
    async fn policy_editor(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<PolicyEditorData, AppError>;
    /// Saves `document` as the next version of `id` (write).
    async fn save_policy(
        &self,
        session: &Session,
        id: &str,
        document: serde_json::Value,
    ) -> Result<PolicyVersionView, AppError>;
    /// What a draft would have changed over the tenant's recorded calls (read).
    async fn replay_policy(
        &self,
        session: &Session,
        request: crate::dto::ReplayRequest,
    ) -> Result<crate::dto::ReplayReport, AppError>;
    /// Makes `id` the policy of new sessions in `environment` (write).
    async fn activate_policy(
        &self,
        session: &Session,
        id: &str,
        environment: &str,
    ) -> Result<PolicySummary, AppError>;
    /// The approvals queue and recent decisions (read or approve: the tenant's; otherwise the
    /// user's own calls).
    async fn approvals(&self, session: &Session) -> Result<ApprovalsView, AppError>;
    /// Approves (`approve`), applies (`apply`) or rejects (`reject`) a waiting invocation
    /// (approve scope); approving and applying echo the `args_hash` and `definition_hash` the
    /// approver was shown. `cancel` ends it without running it (approve scope, or the caller's
    /// own with run).
    async fn decide_invocation(
        &self,
        session: &Session,
        id: &str,
        action: &str,
        args_hash: Option<String>,
        definition_hash: Option<String>,
        comment: Option<String>,
    ) -> Result<InvocationView, AppError>;
    /// A page of the tenant's receipts matching `query`, newest first (read).
    async fn receipts(
        &self,
        session: &Session,
        query: ReceiptQuery,
    ) -> Result<ReceiptPage, AppError>;
    /// One receipt with its disclosures, chain neighbours and the keys (read).
    async fn receipt(&self, session: &Session, id: &str) -> Result<ReceiptDetail, AppError>;
    /// The catalog and the upstreams (read).
    async fn tools(&self, session: &Session) -> Result<ToolsView, AppError>;
    /// Sets a tool's security descriptor (admin).
    async fn describe_tool(
        &self,
        session: &Session,
        name: &str,
        request: DescribeToolRequest,
    ) -> Result<engine::descriptor::ToolDescriptor, AppError>;
    /// Accepts (`accept`) or keeps held (`keep_held`) a tool's held change, for the held
    /// definition `definition_hash` (admin, journaled).
    async fn decide_tool_change(
        &self,
        session: &Session,
        name: &str,
        decision: &str,
        definition_hash: String,
    ) -> Result<DriftDecisionView, AppError>;
    /// Re-lists an upstream's tools (write).
    async fn sync_upstream(&self, session: &Session, id: &str) -> Result<SyncReport, AppError>;
    /// Sessions, newest first (read).
    async fn sessions(&self, session: &Session) -> Result<Vec<SessionView>, AppError>;
    /// One session with its manifest and forks (read).
    async fn session_detail(&self, session: &Session, id: &str) -> Result<SessionDetail, AppError>;
    /// Revokes a session and its forks (admin).
    async fn revoke_session(&self, session: &Session, id: &str) -> Result<SessionView, AppError>;
    /// Hosted agents, newest first (read).
    async fn agents(&self, session: &Session) -> Result<Vec<AgentView>, AppError>;
    /// One hosted agent with its transcript, turns, calls, receipts and forks (read).
    async fn agent_detail(&self, session: &Session, id: &str) -> Result<AgentDetail, AppError>;
    /// The Journal page (read or witness).
    async fn journal(&self, session: &Session) -> Result<crate::dto::JournalView, AppError>;
    /// The Webhooks page: every webhook with its latest deliveries (admin).
    async fn webhooks(&self, session: &Session) -> Result<crate::dto::WebhooksView, AppError>;
    /// Creates a webhook (admin); its secret is in the answer and nowhere else.
    async fn create_webhook(
        &self,
        session: &Session,
        request: crate::dto::CreateWebhookRequest,
    ) -> Result<crate::dto::CreatedWebhook, AppError>;
    /// Deletes a webhook (admin).
    async fn delete_webhook(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<crate::dto::WebhookView, AppError>;
}

/// How the backend travels in Leptos context.
pub type SharedBackend = Arc<dyn Backend>;

/// The backend and the caller's session, for use inside a server function.
pub async fn context() -> Result<(SharedBackend, Session), AppError> {
    let backend = leptos::prelude::use_context::<SharedBackend>().ok_or_else(|| {
        tracing::error!("no Backend in context: the server did not provide it");
        AppError::internal()
    })?;
    let session = leptos_axum::extract::<Session>().await.map_err(|e| {
        tracing::error!(error = %e, "no session layer in front of a server function");
        AppError::internal()
    })?;
    Ok((backend, session))
}
