//! The dashboard: the Leptos app served by axum, and the [`Backend`] its server functions call.
//! Every method here is a thin adapter onto the same services the REST routes use.

use std::sync::Arc;

use aperture_types::dto::{
    ActivateRequest, AgentDetail, AgentView, ApprovalsView, CreateTokenRequest, CreateUserRequest,
    CreatedToken, InvocationView, Me, Overview, PolicyEditorData, PolicySummary, PolicyVersionView,
    ReceiptDetail, ReceiptPage, ReceiptQuery, TokenView, UpdateScopesRequest, UserView,
};
use aperture_types::dto::{
    DescribeToolRequest, DriftDecisionRequest, DriftDecisionView, SessionDetail, SessionView,
    SyncReport, ToolsView,
};
use aperture_types::error::AppError;
use app::backend::{Backend, SharedBackend};
use tower_sessions::Session;

use crate::auth::{Principal, dashboard};
use crate::error::ServiceError;
use crate::state::AppState;
use crate::{catalog, exposure, invocations, policies, receipts, store, tokens, upstream, users};

/// The server's [`Backend`].
pub struct DashboardBackend {
    state: AppState,
}

impl DashboardBackend {
    /// As Leptos context.
    pub fn shared(state: AppState) -> SharedBackend {
        Arc::new(Self { state })
    }

    async fn principal(&self, session: &Session) -> Result<Principal, AppError> {
        dashboard::require(&self.state.store, session)
            .await
            .map_err(ServiceError::into_app_error)
    }
}

fn me_of(p: &Principal) -> Me {
    Me {
        tenant_id: p.tenant_id.clone(),
        username: p.actor_id.clone(),
        scopes: p.scopes.iter().map(str::to_owned).collect(),
    }
}

#[async_trait::async_trait]
impl Backend for DashboardBackend {
    async fn sign_in(
        &self,
        session: &Session,
        tenant: &str,
        username: &str,
        password: &str,
    ) -> Result<Me, AppError> {
        // The caller's address (crate::auth::client) and device cookie (crate::auth::device),
        // from the request the server function answers; without an address (no connection
        // info) every caller shares one count.
        let secure = self.state.config.secure_cookies;
        let parts = leptos::prelude::use_context::<axum::http::request::Parts>();
        let address = parts.as_ref().and_then(|parts| {
            parts
                .extensions
                .get::<crate::auth::client::ClientAddr>()
                .map(|c| c.0)
        });
        let device = parts
            .as_ref()
            .and_then(|parts| crate::auth::device::from_headers(&parts.headers, secure));
        let signed_in = dashboard::sign_in(
            &self.state.store,
            &self.state.journal,
            &self.state.passwords,
            session,
            tenant.trim(),
            username.trim(),
            password,
            dashboard::Caller {
                address,
                device: device.as_deref(),
            },
        )
        .await
        .map_err(ServiceError::into_app_error)?;
        let cookie = crate::auth::device::set_cookie(&signed_in.device, secure);
        match (
            leptos::prelude::use_context::<leptos_axum::ResponseOptions>(),
            axum::http::HeaderValue::from_str(&cookie),
        ) {
            (Some(response), Ok(value)) => {
                response.append_header(axum::http::header::SET_COOKIE, value);
            }
            // Signed in all the same; the browser is known by its address only.
            _ => tracing::warn!("the device cookie could not be set"),
        }
        Ok(signed_in.me)
    }

    async fn sign_out(&self, session: &Session) -> Result<(), AppError> {
        dashboard::sign_out(session)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn me(&self, session: &Session) -> Result<Option<Me>, AppError> {
        let p = dashboard::current(&self.state.store, session)
            .await
            .map_err(ServiceError::into_app_error)?;
        Ok(p.as_ref().map(me_of))
    }

    async fn overview(&self, session: &Session) -> Result<Overview, AppError> {
        let p = self.principal(session).await?;
        // Ask the background verifier to look at new records soon; the page does not wait.
        self.state.chain.nudge();
        overview(&self.state, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn list_tokens(&self, session: &Session) -> Result<Vec<TokenView>, AppError> {
        let p = self.principal(session).await?;
        tokens::list(&self.state.store, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn create_token(
        &self,
        session: &Session,
        request: CreateTokenRequest,
    ) -> Result<CreatedToken, AppError> {
        let p = self.principal(session).await?;
        tokens::create(&self.state.store, &self.state.journal, &p, &request)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn revoke_token(&self, session: &Session, id: &str) -> Result<TokenView, AppError> {
        let p = self.principal(session).await?;
        tokens::revoke(&self.state.store, &self.state.journal, &p, id)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn list_users(&self, session: &Session) -> Result<Vec<UserView>, AppError> {
        let p = self.principal(session).await?;
        users::list(&self.state.store, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn create_user(
        &self,
        session: &Session,
        request: CreateUserRequest,
    ) -> Result<UserView, AppError> {
        let p = self.principal(session).await?;
        users::create(
            &self.state.store,
            &self.state.journal,
            &self.state.passwords,
            &p,
            &request,
        )
        .await
        .map_err(ServiceError::into_app_error)
    }

    async fn update_user_scopes(
        &self,
        session: &Session,
        username: &str,
        request: UpdateScopesRequest,
    ) -> Result<UserView, AppError> {
        let p = self.principal(session).await?;
        users::update_scopes(
            &self.state.store,
            &self.state.journal,
            &p,
            username,
            &request,
        )
        .await
        .map_err(ServiceError::into_app_error)
    }

    async fn list_policies(&self, session: &Session) -> Result<Vec<PolicySummary>, AppError> {
        let p = self.principal(session).await?;
        policies::list(&self.state.store, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn policy_editor(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<PolicyEditorData, AppError> {
        let p = self.principal(session).await?;
        policies::editor(&self.state.store, &p, id, &self.state.config.capabilities())
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn save_policy(
        &self,
        session: &Session,
        id: &str,
        document: serde_json::Value,
    ) -> Result<PolicyVersionView, AppError> {
        let p = self.principal(session).await?;
        policies::put(
            &self.state.store,
            &self.state.journal,
            &p,
            id,
            document,
            &self.state.config.capabilities(),
        )
        .await
        .map_err(ServiceError::into_app_error)
    }

    async fn replay_policy(
        &self,
        session: &Session,
        request: aperture_types::dto::ReplayRequest,
    ) -> Result<aperture_types::dto::ReplayReport, AppError> {
        let p = self.principal(session).await?;
        crate::replay::replay(&self.state.store, &p, request)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn activate_policy(
        &self,
        session: &Session,
        id: &str,
        environment: &str,
    ) -> Result<PolicySummary, AppError> {
        let p = self.principal(session).await?;
        let request = ActivateRequest {
            environment: Some(environment.trim().to_owned()).filter(|e| !e.is_empty()),
        };
        policies::activate(&self.state.store, &self.state.journal, &p, id, &request)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn approvals(&self, session: &Session) -> Result<ApprovalsView, AppError> {
        let p = self.principal(session).await?;
        let s = &self.state.store;
        let tenant = p.tenant_id.clone();
        let sees_all =
            p.scopes.satisfies(engine::scope::READ) || p.scopes.satisfies(engine::scope::APPROVE);
        let actor = (!sees_all).then_some(p.actor_id.as_str());
        let confined = p.confined_to();
        let load = async {
            let mut waiting = Vec::new();
            for status in ["input_required", "staged"] {
                waiting.extend(
                    store::invocations::list(s, &tenant, Some(status), actor, 500, confined)
                        .await?,
                );
            }
            waiting.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
            let recent: Vec<_> = store::invocations::list(s, &tenant, None, actor, 40, confined)
                .await?
                .into_iter()
                .filter(|r| r.status != "input_required" && r.status != "staged")
                .take(20)
                .collect();
            let mut out = (Vec::new(), Vec::new());
            for (rows, into) in [(waiting, &mut out.0), (recent, &mut out.1)] {
                for row in rows {
                    let mut view = invocations::typed_view(&row);
                    view.granted_tool = invocations::granted_tool(s, &row).await?;
                    if sees_all {
                        let bound =
                            serde_json::from_str::<engine::decision::BoundCall>(&row.binding).ok();
                        view.rule_id = bound.and_then(|b| b.rule_id);
                        if let Some(rule) = &view.rule_id {
                            view.rule_reason = policies::rule_reason(
                                s,
                                &tenant,
                                &row.policy_id,
                                row.policy_version,
                                rule,
                            )
                            .await?;
                        }
                    }
                    into.push(view);
                }
            }
            Ok::<_, ServiceError>(out)
        };
        let (waiting, recent) = load.await.map_err(ServiceError::into_app_error)?;
        Ok(ApprovalsView {
            waiting,
            recent,
            can_decide: p.scopes.satisfies(engine::scope::APPROVE),
            me: p.actor_id.clone(),
            can_cancel_own: p.scopes.satisfies(engine::scope::RUN),
            now: store::rfc3339(store::now_ms()),
        })
    }

    async fn decide_invocation(
        &self,
        session: &Session,
        id: &str,
        action: &str,
        args_hash: Option<String>,
        definition_hash: Option<String>,
        comment: Option<String>,
    ) -> Result<InvocationView, AppError> {
        let p = self.principal(session).await?;
        let action = match action {
            "approve" => invocations::Action::Approve,
            "apply" => invocations::Action::Apply,
            "reject" => invocations::Action::Reject,
            "cancel" => {
                invocations::cancel(
                    &self.state.store,
                    &self.state.journal,
                    &self.state.events,
                    &self.state.in_flight,
                    &p,
                    id,
                )
                .await
                .map_err(ServiceError::into_app_error)?;
                let row = invocations::find_visible(&self.state.store, &p, id)
                    .await
                    .map_err(ServiceError::into_app_error)?
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
        let decided = invocations::decide(
            &self.state.store,
            &self.state.journal,
            &self.state.events,
            &p,
            id,
            action,
            invocations::DecideRequest {
                args_hash,
                definition_hash,
                comment,
            },
        )
        .await
        .map_err(ServiceError::into_app_error)?;
        serde_json::from_value(decided).map_err(|e| {
            tracing::error!(error = %e, "an invocation view does not read back");
            AppError::internal()
        })
    }

    async fn receipts(
        &self,
        session: &Session,
        query: ReceiptQuery,
    ) -> Result<ReceiptPage, AppError> {
        let p = self.principal(session).await?;
        receipts::page(&self.state.store, &p, query)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn receipt(&self, session: &Session, id: &str) -> Result<ReceiptDetail, AppError> {
        let p = self.principal(session).await?;
        receipts::detail(&self.state.store, &self.state.journal, &p, id)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn tools(&self, session: &Session) -> Result<ToolsView, AppError> {
        let p = self.principal(session).await?;
        let s = &self.state.store;
        let load = async {
            let tools = catalog::list(s, &p).await?;
            let upstreams = upstream::list(s, &p).await?;
            Ok::<_, ServiceError>(ToolsView { tools, upstreams })
        };
        load.await.map_err(ServiceError::into_app_error)
    }

    async fn describe_tool(
        &self,
        session: &Session,
        name: &str,
        request: DescribeToolRequest,
    ) -> Result<engine::descriptor::ToolDescriptor, AppError> {
        let p = self.principal(session).await?;
        catalog::describe(&self.state.store, &self.state.journal, &p, name, &request)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn decide_tool_change(
        &self,
        session: &Session,
        name: &str,
        decision: &str,
        definition_hash: String,
    ) -> Result<DriftDecisionView, AppError> {
        let p = self.principal(session).await?;
        let request = DriftDecisionRequest {
            definition_hash: Some(definition_hash),
        };
        let (store, journal) = (&self.state.store, &self.state.journal);
        match decision {
            "accept" => catalog::accept(store, journal, &p, name, &request).await,
            "keep_held" => catalog::keep_held(store, journal, &p, name, &request).await,
            _ => return Err(AppError::invalid_field("decision", "accept or keep_held")),
        }
        .map_err(ServiceError::into_app_error)
    }

    async fn sync_upstream(&self, session: &Session, id: &str) -> Result<SyncReport, AppError> {
        let p = self.principal(session).await?;
        self.state
            .upstreams
            .sync(&self.state.store, &self.state.journal, &p, id)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn sessions(&self, session: &Session) -> Result<Vec<SessionView>, AppError> {
        let p = self.principal(session).await?;
        exposure::list(&self.state.store, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn session_detail(&self, session: &Session, id: &str) -> Result<SessionDetail, AppError> {
        let p = self.principal(session).await?;
        exposure::detail(&self.state.store, &p, id)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn revoke_session(&self, session: &Session, id: &str) -> Result<SessionView, AppError> {
        let p = self.principal(session).await?;
        exposure::revoke(&self.state.store, &self.state.journal, &p, id)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn agents(&self, session: &Session) -> Result<Vec<AgentView>, AppError> {
        let p = self.principal(session).await?;
        crate::agents::runtime::list(&self.state, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn webhooks(
        &self,
        session: &Session,
    ) -> Result<aperture_types::dto::WebhooksView, AppError> {
        let p = self.principal(session).await?;
        self.state
            .webhooks
            .page(&self.state.store, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn create_webhook(
        &self,
        session: &Session,
        request: aperture_types::dto::CreateWebhookRequest,
    ) -> Result<aperture_types::dto::CreatedWebhook, AppError> {
        let p = self.principal(session).await?;
        self.state
            .webhooks
            .create(&self.state.store, &self.state.journal, &p, &request)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn delete_webhook(
        &self,
        session: &Session,
        id: &str,
    ) -> Result<aperture_types::dto::WebhookView, AppError> {
        let p = self.principal(session).await?;
        self.state
            .webhooks
            .delete(&self.state.store, &self.state.journal, &p, id)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn journal(
        &self,
        session: &Session,
    ) -> Result<aperture_types::dto::JournalView, AppError> {
        let p = self.principal(session).await?;
        crate::transparency::journal_view(&self.state, &p)
            .await
            .map_err(ServiceError::into_app_error)
    }

    async fn agent_detail(&self, session: &Session, id: &str) -> Result<AgentDetail, AppError> {
        let p = self.principal(session).await?;
        let mut detail = crate::agents::runtime::get(&self.state, &p, id)
            .await
            .map_err(ServiceError::into_app_error)?;
        if p.scopes.satisfies(engine::scope::READ) {
            let query = ReceiptQuery {
                session_id: Some(detail.agent.agent_id.clone()),
                ..ReceiptQuery::default()
            };
            detail.receipts = receipts::page(&self.state.store, &p, query)
                .await
                .map_err(ServiceError::into_app_error)?
                .rows;
        }
        Ok(detail)
    }
}

/// In front of the dashboard's pages: a signed-out `GET` of a page that needs a signed-in user
/// is answered `303 See Other` to `/sign-in?next=<that page>` before anything renders (Leptos'
/// own redirect, made while the page streams, comes too late for a status line: a browser
/// without the wasm saw a blank `200`), and `/sign-in` when already signed in goes on to its
/// `next` (local paths only, else `/`). A session store that cannot answer lets the page render
/// its own error.
pub async fn page_guard(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Session,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode, header};
    use axum::response::IntoResponse;
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let uri = request.uri();
    let on_sign_in = uri.path() == "/sign-in";
    let signed_in = match dashboard::current(&state.store, &session).await {
        Ok(p) => p.is_some(),
        Err(_) => return next.run(request).await,
    };
    let location = match (on_sign_in, signed_in) {
        (true, true) => app::layout::after_sign_in(uri.query().unwrap_or("")),
        (false, false) => {
            let here = uri.path_and_query().map_or("/", |pq| pq.as_str());
            app::layout::sign_in_path(here)
        }
        _ => return next.run(request).await,
    };
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// Gives server-function errors their real HTTP status. Leptos answers every server-function
/// error with 500; the body is our [`AppError`], whose code knows better (a wrong password is
/// 401, an invalid form 422). Leptos' client treats every 4xx/5xx the same, so only the status
/// line changes.
pub async fn server_fn_status(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR
        || !response.headers().contains_key("serverfnerror")
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        parts.status = StatusCode::INTERNAL_SERVER_ERROR;
        return axum::response::Response::from_parts(
            parts,
            axum::body::Body::from(r#"{"code":"internal","message":"internal error"}"#),
        );
    };
    if let Ok(err) = serde_json::from_slice::<AppError>(&bytes) {
        parts.status = StatusCode::from_u16(err.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Decisions of the last `buckets` × `bucket_ms` up to `now`, oldest bucket first, summed from
/// hourly counts (`hours`: bucket → decision → count).
fn activity(
    hours: &[(i64, String, i64)],
    now: i64,
    bucket_ms: i64,
    buckets: i64,
) -> aperture_types::dto::Activity {
    const HOUR: i64 = 3_600_000;
    let last = now / bucket_ms;
    let first = last - buckets + 1;
    let mut out =
        vec![aperture_types::dto::ActivityBucket::default(); usize::try_from(buckets).unwrap_or(0)];
    for (hour, decision, n) in hours {
        let bucket = hour * HOUR / bucket_ms;
        let Some(b) = usize::try_from(bucket - first)
            .ok()
            .and_then(|i| out.get_mut(i))
        else {
            continue;
        };
        let n = u64::try_from(*n).unwrap_or(0);
        match decision.as_str() {
            "deny" => b.denied += n,
            "park" | "stage" | "confirm" => b.parked += n,
            _ => b.allowed += n,
        }
    }
    aperture_types::dto::Activity {
        bucket_seconds: u64::try_from(bucket_ms / 1000).unwrap_or(0),
        start: store::rfc3339(first * bucket_ms),
        buckets: out,
    }
}

/// The overview's figures. Journal figures need the read scope; the chain status comes from
/// the background verifier's cache, so the page never waits for a verification.
async fn overview(state: &AppState, p: &Principal) -> Result<Overview, ServiceError> {
    let s = &state.store;
    let tenant = &p.tenant_id;
    let now = store::now_ms();
    let can_read = p.scopes.satisfies(engine::scope::READ);
    let active_tokens = u64::try_from(store::tokens::count_active(s, tenant).await?).unwrap_or(0);
    let users = u64::try_from(store::users::count(s, tenant).await?).unwrap_or(0);
    let mut o = Overview {
        me: me_of(p),
        active_tokens,
        users,
        can_read,
        last_day: aperture_types::dto::Activity::default(),
        last_week: aperture_types::dto::Activity::default(),
        top_deny_reasons: vec![],
        waiting: 0,
        oldest_waiting_at: None,
        oldest_waiting: None,
        chain: None,
        checkpoint: None,
        now: store::rfc3339(now),
    };
    if !can_read {
        return Ok(o);
    }
    const HOUR: i64 = 3_600_000;
    // One read of the last seven days by hour serves both charts (days are whole UTC days).
    let week_start = (now / (24 * HOUR) - 6) * 24 * HOUR;
    // A reader confined to some environments counts only their calls.
    let confined = p.confined_to();
    let hours = store::journal::decision_counts(s, tenant, week_start, HOUR, confined).await?;
    o.last_day = activity(&hours, now, HOUR, 24);
    o.last_week = activity(&hours, now, 24 * HOUR, 7);
    o.top_deny_reasons =
        store::journal::top_deny_reasons(s, tenant, now - 7 * 24 * HOUR, 5, confined)
            .await?
            .into_iter()
            .map(|(reason, n)| aperture_types::dto::ReasonCount {
                reason,
                count: u64::try_from(n).unwrap_or(0),
            })
            .collect();
    let (waiting, oldest) = store::invocations::waiting(s, tenant, confined).await?;
    o.waiting = u64::try_from(waiting).unwrap_or(0);
    o.oldest_waiting_at = oldest.map(store::rfc3339);
    if waiting > 0 {
        o.oldest_waiting = store::invocations::oldest_waiting(s, tenant, confined)
            .await?
            .map(|r| aperture_types::dto::WaitingCall {
                invocation_id: r.id,
                tool: r.tool,
                actor_id: r.actor_id,
                status: r.status,
                created_at: store::rfc3339(r.created_at),
                expires_at: r.expires_at.map(store::rfc3339),
            });
    }
    o.chain = state
        .chain
        .status(tenant)
        .map(|c| aperture_types::dto::ChainView {
            verified: c.verified,
            first_bad: c.first_bad.as_ref().map(|(seq, _)| *seq),
            problem: c.first_bad.map(|(_, problem)| problem),
            checked_at: store::rfc3339(c.checked_at),
        });
    o.checkpoint = crate::transparency::rows(state, tenant, 1)
        .await?
        .into_iter()
        .next();
    Ok(o)
}

/// `GET /ui/receipts/export.jsonl?<filters>`: every receipt matching the dashboard's filters,
/// newest first, one signed receipt per line, streamed page by page (at most
/// [`receipts::MAX_EXPORT`]). Signed-in dashboard users with the read scope.
pub async fn export_receipts(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Session,
    query: Result<axum::extract::Query<ReceiptQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, crate::reply::ApiError> {
    use axum::http::header;
    let principal = dashboard::require(&state.store, &session).await?;
    let axum::extract::Query(query) = query
        .map_err(|e| AppError::new(aperture_types::error::ErrorCode::BadRequest, e.body_text()))?;
    let stream = receipts::export(state.store.clone(), principal, query)?;
    Ok(axum::response::Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"aperture-receipts.jsonl\"",
        )
        .body(axum::body::Body::from_stream(stream))
        .map_err(|e| ServiceError::Other(e.into()))?)
}

/// `GET /ui/sessions/{id}/evidence.json[?disclosures=true]`: the bundle as a download for
/// signed-in dashboard users (read, or run for their own sessions).
pub async fn download_evidence(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Session,
    axum::extract::Path(id): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<axum::response::Response, crate::reply::ApiError> {
    use axum::http::header;
    use axum::response::IntoResponse as _;
    let principal = dashboard::require(&state.store, &session).await?;
    let disclosures =
        crate::api::sessions::disclosures_flag(query.get("disclosures").map(String::as_str))?;
    let bytes = crate::evidence::bundle(&state, &principal, &id, disclosures).await?;
    let name: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"evidence-{name}.json\""),
            ),
        ],
        bytes,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::activity;

    #[test]
    fn hourly_counts_make_the_day_and_week_charts() {
        const HOUR: i64 = 3_600_000;
        // 2026-11-30 14:30 UTC.
        let now = 1_796_049_000_000 / HOUR * HOUR + 30 * 60_000;
        let this_hour = now / HOUR;
        let hours = vec![
            (this_hour, "allow".to_owned(), 5),
            (this_hour, "deny".to_owned(), 2),
            (this_hour - 1, "park".to_owned(), 1),
            (this_hour - 1, "dry_run".to_owned(), 1),
            (this_hour - 30, "deny".to_owned(), 7),
            (this_hour - 24 * 9, "allow".to_owned(), 100),
        ];
        let day = activity(&hours, now, HOUR, 24);
        assert_eq!(day.buckets.len(), 24);
        let last = day.buckets[23];
        assert_eq!((last.allowed, last.denied, last.parked), (5, 2, 0));
        let before = day.buckets[22];
        assert_eq!((before.allowed, before.denied, before.parked), (1, 0, 1));
        assert_eq!(
            day.buckets.iter().map(|b| b.denied).sum::<u64>(),
            2,
            "30 h ago is not in the day"
        );
        let week = activity(&hours, now, 24 * HOUR, 7);
        assert_eq!(week.bucket_seconds, 86_400);
        assert_eq!(week.buckets.iter().map(|b| b.denied).sum::<u64>(), 9);
        assert_eq!(
            week.buckets.iter().map(|b| b.allowed).sum::<u64>(),
            6,
            "9 days ago is out"
        );
        assert!(week.start.contains("T00:00:00"), "{}", week.start);
    }
}
