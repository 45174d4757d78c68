//! [`Upstream`]: the MCP server handler, dispatching every method to the fixtures.
//!
//! rmcp does the protocol: the `initialize` handshake and version negotiation, `server/discover`
//! (from [`ServerHandler::get_info`]), the 2026-07-28 request checks and error codes,
//! `resultType` on every result and its removal for 2025 peers, caching-hint defaults,
//! acknowledging `subscriptions/listen`, the tasks methods' capability checks. The handler
//! supplies the content, and what only a stateful or a stateless request may do.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, ErrorData, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
    GetTaskResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};

use crate::state::{Session, Shared, State};
use crate::tools::{self, Call};
use crate::wire::Wire;
use crate::{prompts, resources};

/// The handler of one session, or of one stateless request.
#[derive(Clone)]
pub struct Upstream {
    state: State,
}

impl Upstream {
    /// A handler for a new session (or stateless request) of the server `shared` describes.
    pub fn new(shared: Arc<Shared>) -> Self {
        let session = Arc::new(Session::default());
        Self {
            state: State { shared, session },
        }
    }
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "aperture-conformance-upstream",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "A reference server for the MCP conformance suite: fixture tools, resources \
                 and prompts. A test upstream, not part of Aperture.",
            )
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(tools::list(Wire::of(&context)))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = Call {
            state: &self.state,
            params,
            context: &context,
        };
        tools::call(call).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(prompts::list(Wire::of(&context)))
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        prompts::get(&params)
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        prompts::complete(&params)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(resources::list(Wire::of(&context)))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates(Wire::of(&context)))
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(Wire::of(&context), &params.uri).map(Into::into)
    }

    /// `resources/subscribe` (2025 wire; rmcp answers `-32601` at 2026-07-28).
    async fn subscribe(
        &self,
        params: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if !resources::exists(&params.uri) {
            return Err(resources::not_found(&params.uri));
        }
        self.state.session.subscribe(params.uri);
        Ok(())
    }

    /// `resources/unsubscribe` (2025 wire).
    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state.session.unsubscribe(&params.uri);
        Ok(())
    }

    /// `logging/setLevel` (2025 wire; a stateless request names its level in `_meta`).
    async fn set_level(
        &self,
        params: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state.session.set_log_level(params.level);
        Ok(())
    }

    /// `subscriptions/listen` (2026-07-28): whatever the client asks for, of what the server
    /// advertises (rmcp narrows the filter to it).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.state.shared.subscriptions.hold(subscription).await;
        Ok(())
    }

    async fn get_task(
        &self,
        params: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let task = self.state.shared.tasks.get_task(&params.task_id)?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        params: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state
            .shared
            .tasks
            .update_task(&params.task_id, params.input_responses)
    }

    async fn cancel_task(
        &self,
        params: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state.shared.tasks.cancel_task(&params.task_id)
    }
}
