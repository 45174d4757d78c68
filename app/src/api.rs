//! The dashboard's server functions. Each is a public endpoint under `/ui/…` (never mixed with
//! the REST API under `/api/v2`): it names what it needs of its caller at its head
//! ([`session::caller`], the scope or just a signed-in person), then calls the core's services
//! directly, which authorize again, and returns views, never rows. The server's tests hold
//! every function to its declared need (`server/tests/api/dashboard_matrix.rs`).

use leptos::prelude::*;

use crate::dto::{
    CreateTokenRequest, CreateUserRequest, CreatedToken, Me, TokenView, UpdateScopesRequest,
    UserView,
};
use crate::error::AppError;
#[cfg(feature = "ssr")]
use crate::session::{self, Need, caller};
#[cfg(feature = "ssr")]
use engine::scope::{ADMIN, READ, WRITE};

/// Signs in with a password. Works as a plain HTML form before hydration too.
#[server(prefix = "/ui", endpoint = "sign-in")]
pub async fn sign_in(tenant: String, username: String, password: String) -> Result<Me, AppError> {
    let services = session::services()?;
    let session = session::session().await?;
    let signed_in = session::sign_in(
        &services,
        &session,
        tenant.trim(),
        username.trim(),
        &password,
    )
    .await?;
    Ok(signed_in.me)
}

/// Signs out and sends the browser to the sign-in page.
#[server(prefix = "/ui", endpoint = "sign-out")]
pub async fn sign_out() -> Result<(), AppError> {
    let session = session::session().await?;
    session::sign_out(&session).await?;
    leptos_axum::redirect("/sign-in");
    Ok(())
}

/// The signed-in user, if any.
#[server(prefix = "/ui", endpoint = "me")]
pub async fn current_user() -> Result<Option<Me>, AppError> {
    let services = session::services()?;
    let session = session::session().await?;
    let p = session::current(&services.store, &session).await?;
    Ok(p.as_ref().map(aperture_core::overview::me_of))
}

/// Figures for the overview page.
#[server(name = OverviewFigures, prefix = "/ui", endpoint = "overview")]
pub async fn overview() -> Result<crate::dto::Overview, AppError> {
    let (s, p) = caller(Need::SignedIn).await?;
    // Ask the background verifier to look at new records soon; the page does not wait.
    s.chain.nudge();
    Ok(aperture_core::overview::overview(&s, &p).await?)
}

/// Lists the tenant's tokens.
#[server(prefix = "/ui", endpoint = "tokens/list")]
pub async fn list_tokens() -> Result<Vec<TokenView>, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::tokens::list(&s.store, &p).await?)
}

/// Creates a token and returns its secret (once).
#[server(prefix = "/ui", endpoint = "tokens/create")]
pub async fn create_token(request: CreateTokenRequest) -> Result<CreatedToken, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::tokens::create(&s.store, &s.journal, &p, &request).await?)
}

/// Revokes a token.
#[server(prefix = "/ui", endpoint = "tokens/revoke")]
pub async fn revoke_token(id: String) -> Result<TokenView, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::tokens::revoke(&s.store, &s.journal, &p, &id).await?)
}

/// The tenant's webhooks with their latest deliveries.
#[server(prefix = "/ui", endpoint = "webhooks/list")]
pub async fn list_webhooks() -> Result<crate::dto::WebhooksView, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(s.webhooks.page(&s.store, &p).await?)
}

/// Creates a webhook and returns its signing secret (once).
#[server(prefix = "/ui", endpoint = "webhooks/create")]
pub async fn create_webhook(
    request: crate::dto::CreateWebhookRequest,
) -> Result<crate::dto::CreatedWebhook, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(s.webhooks
        .create(&s.store, &s.journal, &p, &request)
        .await?)
}

/// Deletes a webhook.
#[server(prefix = "/ui", endpoint = "webhooks/delete")]
pub async fn delete_webhook(id: String) -> Result<crate::dto::WebhookView, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(s.webhooks.delete(&s.store, &s.journal, &p, &id).await?)
}

/// Lists the tenant's users.
#[server(prefix = "/ui", endpoint = "users/list")]
pub async fn list_users() -> Result<Vec<UserView>, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::users::list(&s.store, &p).await?)
}

/// Creates a user.
#[server(prefix = "/ui", endpoint = "users/create")]
pub async fn create_user(request: CreateUserRequest) -> Result<UserView, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::users::create(&s.store, &s.journal, &s.passwords, &p, &request).await?)
}

/// Replaces a user's scopes.
#[server(prefix = "/ui", endpoint = "users/scopes")]
pub async fn update_user_scopes(
    username: String,
    request: UpdateScopesRequest,
) -> Result<UserView, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::users::update_scopes(&s.store, &s.journal, &p, &username, &request).await?)
}

/// Lists the tenant's policies.
#[server(prefix = "/ui", endpoint = "policies/list")]
pub async fn list_policies() -> Result<Vec<crate::dto::PolicySummary>, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    Ok(aperture_core::policies::list(&s.store, &p).await?)
}

/// The policy editor's data for `id`; a valid id not saved yet has no versions.
#[server(prefix = "/ui", endpoint = "policies/editor")]
pub async fn policy_editor(id: String) -> Result<crate::dto::PolicyEditorData, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    let capabilities = s.config.capabilities();
    let mut data = aperture_core::policies::editor(&s.store, &p, &id, &capabilities).await?;
    data.items = aperture_core::items::Exposure::catalog(&s.store, &p.tenant_id).await?;
    Ok(data)
}

/// Saves a new version of policy `id`; `document` is the policy as JSON text.
#[server(prefix = "/ui", endpoint = "policies/save")]
pub async fn save_policy(
    id: String,
    document: String,
) -> Result<crate::dto::PolicyVersionView, AppError> {
    let (s, p) = caller(Need::Scope(WRITE)).await?;
    let document: serde_json::Value = serde_json::from_str(&document)
        .map_err(|e| AppError::invalid_field("document", format!("not valid JSON: {e}")))?;
    let capabilities = s.config.capabilities();
    Ok(
        aperture_core::policies::put(&s.store, &s.journal, &p, &id, document, &capabilities)
            .await?,
    )
}

/// Replays `document` (the draft, as JSON text) over the tenant's calls of the last `days`
/// days.
#[server(prefix = "/ui", endpoint = "policies/replay")]
pub async fn replay_policy(
    document: String,
    days: u32,
) -> Result<crate::dto::ReplayReport, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
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
    Ok(aperture_core::replay::replay(&s.store, &p, request).await?)
}

/// Makes policy `id` the one new sessions of `environment` get.
#[server(prefix = "/ui", endpoint = "policies/activate")]
pub async fn activate_policy(
    id: String,
    environment: String,
) -> Result<crate::dto::PolicySummary, AppError> {
    let (s, p) = caller(Need::Scope(WRITE)).await?;
    let request = crate::dto::ActivateRequest {
        environment: Some(environment.trim().to_owned()).filter(|e| !e.is_empty()),
    };
    Ok(aperture_core::policies::activate(&s.store, &s.journal, &p, &id, &request).await?)
}

/// The approvals queue and recent decisions: the tenant's with the read or approve scope,
/// otherwise the person's own calls.
#[server(prefix = "/ui", endpoint = "approvals/list")]
pub async fn approvals() -> Result<crate::dto::ApprovalsView, AppError> {
    let (s, p) = caller(Need::SignedIn).await?;
    Ok(aperture_core::approvals::view(&s.store, &p).await?)
}

/// Approves (`approve`), applies (`apply`) or rejects (`reject`) a waiting invocation (approve
/// scope), echoing the `args_hash` and `definition_hash` the approver was shown; `cancel` ends
/// it without running it (approve scope, or the caller's own with run).
#[server(prefix = "/ui", endpoint = "approvals/decide")]
pub async fn decide_invocation(
    id: String,
    action: String,
    args_hash: Option<String>,
    definition_hash: Option<String>,
    comment: Option<String>,
) -> Result<crate::dto::InvocationView, AppError> {
    use aperture_core::invocations::{self, Action, DecideRequest};
    let (s, p) = caller(Need::SignedIn).await?;
    let action = match action.as_str() {
        "approve" => Action::Approve,
        "apply" => Action::Apply,
        "reject" => Action::Reject,
        "cancel" => {
            invocations::cancel(&s.store, &s.journal, &s.events, &s.in_flight, &p, &id).await?;
            let row = invocations::find_visible(&s.store, &p, &id)
                .await?
                .ok_or_else(|| AppError::not_found("invocation"))?;
            return Ok(invocations::typed_view(&row));
        }
        _ => {
            return Err(AppError::invalid_field(
                "action",
                "approve, apply, reject or cancel",
            ));
        }
    };
    let comment = comment
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty());
    let request = DecideRequest {
        args_hash,
        definition_hash,
        comment,
    };
    let decided =
        invocations::decide(&s.store, &s.journal, &s.events, &p, &id, action, request).await?;
    serde_json::from_value(decided).map_err(|e| {
        tracing::error!(error = %e, "an invocation view does not read back");
        AppError::internal()
    })
}

/// A page of receipts.
#[server(prefix = "/ui", endpoint = "receipts/list")]
pub async fn receipts(
    query: crate::dto::ReceiptQuery,
) -> Result<crate::dto::ReceiptPage, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    Ok(aperture_core::receipts::page(&s.store, &p, query).await?)
}

/// One receipt, to show and verify: its disclosures, chain neighbours and the keys.
#[server(prefix = "/ui", endpoint = "receipts/get")]
pub async fn receipt(id: String) -> Result<crate::dto::ReceiptDetail, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    Ok(aperture_core::receipts::detail(&s.store, &s.journal, &p, &id).await?)
}

/// The Tools page's data: the catalog and the upstreams.
#[server(prefix = "/ui", endpoint = "tools/list")]
pub async fn tools() -> Result<crate::dto::ToolsView, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    let tools = aperture_core::catalog::list(&s.store, &p).await?;
    let upstreams = aperture_core::upstream::list(&s.store, &p).await?;
    let items = aperture_core::catalog::items(&s.store, &p).await?.items;
    Ok(crate::dto::ToolsView {
        tools,
        upstreams,
        items,
    })
}

/// Decides on a resource's, template's or prompt's held change: `accept` or `keep_held`
/// (admin, journaled), for the held definition the admin reviewed (`definition_hash`).
#[server(prefix = "/ui", endpoint = "items/decide")]
pub async fn decide_item_change(
    kind: String,
    upstream_id: String,
    key: String,
    decision: String,
    definition_hash: String,
) -> Result<crate::dto::ItemDecisionView, AppError> {
    use aperture_core::catalog;
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    let request = crate::dto::ItemChangeRequest {
        kind,
        upstream_id,
        key,
        definition_hash: Some(definition_hash),
    };
    Ok(match decision.as_str() {
        "accept" => catalog::accept_item(&s.store, &s.journal, &p, &request).await?,
        "keep_held" => catalog::keep_item_held(&s.store, &s.journal, &p, &request).await?,
        _ => return Err(AppError::invalid_field("decision", "accept or keep_held")),
    })
}

/// Sets a tool's security descriptor.
#[server(prefix = "/ui", endpoint = "tools/describe")]
pub async fn describe_tool(
    name: String,
    request: crate::dto::DescribeToolRequest,
) -> Result<engine::descriptor::ToolDescriptor, AppError> {
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    Ok(aperture_core::catalog::describe(&s.store, &s.journal, &p, &name, &request).await?)
}

/// Decides on a tool's held change: `accept` or `keep_held` (admin, journaled), for the held
/// definition the admin reviewed (`definition_hash`).
#[server(prefix = "/ui", endpoint = "tools/decide")]
pub async fn decide_tool_change(
    name: String,
    decision: String,
    definition_hash: String,
) -> Result<crate::dto::DriftDecisionView, AppError> {
    use aperture_core::catalog;
    let (s, p) = caller(Need::Scope(ADMIN)).await?;
    let request = crate::dto::DriftDecisionRequest {
        definition_hash: Some(definition_hash),
    };
    Ok(match decision.as_str() {
        "accept" => catalog::accept(&s.store, &s.journal, &p, &name, &request).await?,
        "keep_held" => catalog::keep_held(&s.store, &s.journal, &p, &name, &request).await?,
        _ => return Err(AppError::invalid_field("decision", "accept or keep_held")),
    })
}

/// Re-lists an upstream's tools.
#[server(prefix = "/ui", endpoint = "upstreams/sync")]
pub async fn sync_upstream(id: String) -> Result<crate::dto::SyncReport, AppError> {
    let (s, p) = caller(Need::Scope(WRITE)).await?;
    Ok(s.upstreams.sync(&s.store, &s.journal, &p, &id).await?)
}

/// Sessions, newest first.
#[server(prefix = "/ui", endpoint = "sessions/list")]
pub async fn sessions() -> Result<Vec<crate::dto::SessionView>, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    Ok(aperture_core::exposure::list(&s.store, &p).await?)
}

/// One session with its manifest and forks.
#[server(prefix = "/ui", endpoint = "sessions/get")]
pub async fn session_detail(id: String) -> Result<crate::dto::SessionDetail, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    Ok(aperture_core::exposure::detail(&s.store, &p, &id).await?)
}

/// Revokes a session and its forks (admin, or the caller's own with run).
#[server(prefix = "/ui", endpoint = "sessions/revoke")]
pub async fn revoke_session(id: String) -> Result<crate::dto::SessionView, AppError> {
    let (s, p) = caller(Need::SignedIn).await?;
    Ok(aperture_core::exposure::revoke(&s.store, &s.journal, &p, &id).await?)
}

/// Hosted agents, newest first.
#[server(prefix = "/ui", endpoint = "agents/list")]
pub async fn agents() -> Result<Vec<crate::dto::AgentView>, AppError> {
    let (s, p) = caller(Need::Scope(READ)).await?;
    Ok(aperture_core::agents::runtime::list(&s, &p).await?)
}

/// One hosted agent with its transcript, turns, calls, forks and (read) receipts.
#[server(prefix = "/ui", endpoint = "agents/get")]
pub async fn agent_detail(id: String) -> Result<crate::dto::AgentDetail, AppError> {
    let (s, p) = caller(Need::SignedIn).await?;
    let mut detail = aperture_core::agents::runtime::get(&s, &p, &id).await?;
    if p.scopes.satisfies(READ) {
        let query = crate::dto::ReceiptQuery {
            session_id: Some(detail.agent.agent_id.clone()),
            ..crate::dto::ReceiptQuery::default()
        };
        detail.receipts = aperture_core::receipts::page(&s.store, &p, query)
            .await?
            .rows;
    }
    Ok(detail)
}

/// The Journal page's data: checkpoints, the log's key, witnesses (read or witness).
#[server(prefix = "/ui", endpoint = "journal")]
pub async fn journal() -> Result<crate::dto::JournalView, AppError> {
    let (s, p) = caller(Need::SignedIn).await?;
    Ok(aperture_core::transparency::journal_view(&s, &p).await?)
}
