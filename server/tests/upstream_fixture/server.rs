//! The fixture's MCP server (rmcp's server side): a few tools that exercise the upstream
//! connector. The stdio binary (`bin.rs`) serves it over stdin/stdout; `tests/upstream.rs`
//! also serves it over streamable HTTP, in-process.
//!
//! Tools: `echo {text}`, `add {a, b}` (with `structuredContent`), `big {bytes}` (that much
//! text), `slow {millis}` (sleeps; counts cancellations; with a `progressToken`, four
//! `notifications/progress` on the way), `read file {path}` (a name with a
//! space), `getenv {name}` (one variable of the process's environment), `mutate {description?,
//! title?, read_only?, remove?, notify?}` (changes `echo`'s description, title or `readOnlyHint`,
//! or stops listing the tool named by `remove`, and, unless `notify` is false, sends
//! `notifications/tools/list_changed`: the rug pulls drift triage meets), `ask {kind}` (sends
//! the client `sampling/createMessage`, `elicitation/create` in form or URL mode, or
//! `roots/list`, and answers `{"answer": …}` or `{"refused": {code, message}}`; on the
//! 2026-07-28 wire it asks in an `input_required` round instead, under the key `question` with
//! the state `fixture-state:<kind>`, and answers a call that brings an answer under that key
//! with `{"answer": …, "state": <the requestState it came with>, "keys": <the keys of its
//! inputResponses>}`), `log` (three
//! `notifications/message` of logger `fixture`: debug, info, error) and `stats`
//! (`{"cancelled": n, "calls": m}`: calls received, this one included). `tools/list` answers
//! three tools per page, with a `ttlMs` that invites clients to cache it.
//!
//! On the 2026-07-28 wire, `summarize` first asks for a context (an `input_required` round,
//! key `context`, an elicitation) and names it in its message once given.
//!
//! Resources: `docs://readme`, `docs://guide/setup`, `secret://keys/one`, and the template
//! `docs://pages/{page}` (any page reads as `Page <page>`). Prompts: `greet {name}`,
//! `summarize`. Completions: `greet`'s `name` (alice, albert, bob) and the template's `page`
//! (intro, install, internal, and `../internal`, which no URI may hold), by prefix. A
//! subscribed resource (`resources/subscribe`) announces a change every 100 ms until
//! `resources/unsubscribe`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, RequestParamsMeta,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, ServerRequest,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
#[expect(
    deprecated,
    reason = "the 2025 eras' log messages, which the gateway relays"
)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

/// Tools per `tools/list` page, so that a full listing takes several pages.
const PAGE_SIZE: usize = 3;
/// How often a subscribed resource announces a change.
const UPDATE_EVERY: Duration = Duration::from_millis(100);
/// `big` answers at most this much text.
const MAX_BIG_BYTES: u64 = 8 * 1024 * 1024;

#[derive(Debug)]
struct State {
    echo_description: String,
    echo_title: Option<String>,
    echo_read_only: bool,
    removed: Vec<String>,
    cancelled: u64,
    calls: u64,
    /// The URIs the client subscribed to.
    subscribed: Vec<String>,
    /// `docs://readme`'s description.
    readme_description: String,
    /// The `greet` prompt's description.
    greet_description: String,
}

/// The fixture server; each instance (each stdio process, each HTTP session) has its own state.
#[derive(Debug, Clone)]
pub struct FixtureServer {
    state: Arc<Mutex<State>>,
    call_log: Option<std::path::PathBuf>,
}

impl FixtureServer {
    /// A server with `echo`'s original description and no cancellations.
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                echo_description: "Returns its text argument.".into(),
                echo_title: None,
                echo_read_only: true,
                removed: Vec::new(),
                cancelled: 0,
                calls: 0,
                subscribed: Vec::new(),
                readme_description: "Read this first.".into(),
                greet_description: "Greets someone.".into(),
            })),
            call_log: None,
        }
    }

    /// Appends every call to `path` (one line: tool name and arguments) before answering it.
    #[allow(
        dead_code,
        reason = "the stdio binary uses it; the in-process includers do not"
    )]
    pub fn with_call_log(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.call_log = path;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking tool cannot leave the state half-written: every update is one assignment.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tools(&self) -> Vec<Value> {
        let (echo_description, echo_title, echo_read_only, removed) = {
            let s = self.state();
            (
                s.echo_description.clone(),
                s.echo_title.clone(),
                s.echo_read_only,
                s.removed.clone(),
            )
        };
        let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
        let mut echo = json!({
            "name": "echo",
            "description": echo_description,
            "inputSchema": object(json!({"text": {"type": "string"}}), &["text"]),
            "annotations": {"readOnlyHint": echo_read_only},
        });
        if let Some(title) = echo_title {
            echo["title"] = Value::String(title);
        }
        let mut tools = vec![
            echo,
            json!({
                "name": "add",
                "title": "Add",
                "description": "Adds two integers.",
                "inputSchema": object(
                    json!({"a": {"type": "integer"}, "b": {"type": "integer"}}),
                    &["a", "b"],
                ),
                "outputSchema": object(json!({"sum": {"type": "integer"}}), &["sum"]),
            }),
            json!({
                "name": "big",
                "description": "Returns that many bytes of text.",
                "inputSchema": object(json!({"bytes": {"type": "integer", "minimum": 0}}), &["bytes"]),
            }),
            json!({
                "name": "slow",
                "description": "Sleeps, then answers.",
                "inputSchema": object(json!({"millis": {"type": "integer", "minimum": 0}}), &["millis"]),
            }),
            json!({
                "name": "read file",
                "description": "Pretends to read a file.",
                "inputSchema": object(json!({"path": {"type": "string"}}), &["path"]),
            }),
            json!({
                "name": "getenv",
                "description": "One variable of the server's environment, or null.",
                "inputSchema": object(json!({"name": {"type": "string"}}), &["name"]),
            }),
            json!({
                "name": "mutate",
                "description": "Changes echo's description, title or readOnlyHint, the description of the readme resource or of the greet prompt, or stops listing a tool, and (unless told not to) says the tool list changed.",
                "inputSchema": object(
                    json!({
                        "description": {"type": "string"}, "title": {"type": "string"},
                        "read_only": {"type": "boolean"}, "remove": {"type": "string"},
                        "notify": {"type": "boolean"},
                        "readme_description": {"type": "string"},
                        "greet_description": {"type": "string"},
                    }),
                    &[],
                ),
            }),
            json!({
                "name": "deploy",
                "description": "Pretends to deploy a service; answers with the arguments it received.",
                // In 2026-07-28 the service travels in an `Mcp-Param-Service` header too.
                "inputSchema": object(
                    json!({"service": {"type": "string", "x-mcp-header": "Service"},
                           "dry_run": {"type": "boolean"}}),
                    &["service"],
                ),
            }),
            json!({
                "name": "ask",
                "description": "Asks the client while it runs (sampling, elicitation, elicitation_url or roots) and answers with what came back; with `must`, a refusal is the tool's error.",
                "inputSchema": object(json!({"kind": {"type": "string"}, "must": {"type": "boolean"}}), &["kind"]),
            }),
            json!({
                "name": "log",
                "description": "Sends three log messages (debug, info, error), then answers.",
                "inputSchema": object(json!({}), &[]),
            }),
            json!({
                "name": "stats",
                "description": "How many calls were received and how many were cancelled.",
                "inputSchema": object(json!({}), &[]),
            }),
        ];
        tools.retain(|t| !removed.iter().any(|r| t["name"] == r.as_str()));
        tools
    }
}

impl Default for FixtureServer {
    fn default() -> Self {
        Self::new()
    }
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn structured(summary: impl Into<String>, value: Value) -> CallToolResult {
    let mut result = text(summary);
    result.structured_content = Some(value);
    result
}

/// The answer a retried round brings to the fixture's `question`.
fn request_answer(inputs: &(Option<rmcp::model::InputResponses>, Option<String>)) -> Option<Value> {
    inputs.0.as_ref()?.get("question").cloned()
}

fn str_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, ErrorData> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a string"), None))
}

fn int_arg(args: &Map<String, Value>, name: &str) -> Result<i64, ErrorData> {
    args.get(name)
        .and_then(Value::as_i64)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be an integer"), None))
}

fn uint_arg(args: &Map<String, Value>, name: &str) -> Result<u64, ErrorData> {
    args.get(name).and_then(Value::as_u64).ok_or_else(|| {
        ErrorData::invalid_params(format!("`{name}` must be a non-negative integer"), None)
    })
}

impl ServerHandler for FixtureServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_prompts()
                .enable_completions()
                .build(),
        )
        .with_server_info(Implementation::new(
            "aperture-fixture-upstream",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .strip_prefix("page-")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| ErrorData::invalid_params("unknown cursor", None))?,
        };
        let all = self.tools();
        let page = all
            .iter()
            .skip(start)
            .take(PAGE_SIZE)
            .map(|tool| serde_json::from_value::<Tool>(tool.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let end = start + PAGE_SIZE;
        Ok(ListToolsResult {
            tools: page,
            next_cursor: (end < all.len()).then(|| format!("page-{end}")),
            // Invites caching: the connector must list afresh anyway (drift checks need it).
            ttl_ms: Some(60_000),
            ..ListToolsResult::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let asked_progress = request.progress_token();
        // A retried round's answers and state (2026-07-28).
        let request_inputs = (
            request.input_responses.clone(),
            request.request_state.clone(),
        );
        let args = request.arguments.unwrap_or_default();
        self.state().calls += 1;
        if let Some(path) = &self.call_log {
            use std::io::Write as _;
            let line = format!("{} {}\n", request.name, Value::Object(args.clone()));
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| ErrorData::internal_error(format!("call log: {e}"), None))?;
        }
        let result = match request.name.as_ref() {
            // `FAIL:<x>` answers with an error whose text (`CANARY-UPSTREAM-ERR-<x>`) appears
            // nowhere in the arguments: where it is found, the upstream's error text went.
            "echo" => match str_arg(&args, "text")?.strip_prefix("FAIL:") {
                Some(x) => {
                    return Err(ErrorData::internal_error(
                        format!("CANARY-UPSTREAM-ERR-{x}"),
                        None,
                    ));
                }
                None => text(str_arg(&args, "text")?),
            },
            "add" => {
                let sum = int_arg(&args, "a")?
                    .checked_add(int_arg(&args, "b")?)
                    .ok_or_else(|| ErrorData::invalid_params("the sum overflows", None))?;
                structured(sum.to_string(), json!({"sum": sum}))
            }
            "big" => {
                let bytes = uint_arg(&args, "bytes")?.min(MAX_BIG_BYTES);
                text("x".repeat(usize::try_from(bytes).unwrap_or(0)))
            }
            "slow" => {
                let millis = uint_arg(&args, "millis")?;
                // Asked for progress (a `progressToken`): a notification after each quarter.
                let token = context.meta.get_progress_token().or(asked_progress);
                let quarters: u32 = if token.is_some() { 4 } else { 1 };
                let work = async {
                    for step in 1..=quarters {
                        tokio::time::sleep(Duration::from_millis(millis) / quarters).await;
                        if let Some(token) = &token {
                            let _ = context
                                .peer
                                .notify_progress(
                                    ProgressNotificationParam::new(token.clone(), f64::from(step))
                                        .with_total(f64::from(quarters))
                                        .with_message(format!("step {step} of {quarters}")),
                                )
                                .await;
                        }
                    }
                };
                tokio::select! {
                    () = work => text("done"),
                    () = context.ct.cancelled() => {
                        self.state().cancelled += 1;
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
            }
            "read file" => text(format!("contents of {}", str_arg(&args, "path")?)),
            "getenv" => {
                let value = std::env::var(str_arg(&args, "name")?).ok();
                structured(value.clone().unwrap_or_default(), json!({ "value": value }))
            }
            "mutate" => {
                {
                    let mut state = self.state();
                    if let Some(d) = args.get("description").and_then(Value::as_str) {
                        state.echo_description = d.to_owned();
                    }
                    if let Some(t) = args.get("title").and_then(Value::as_str) {
                        state.echo_title = Some(t.to_owned());
                    }
                    if let Some(r) = args.get("read_only").and_then(Value::as_bool) {
                        state.echo_read_only = r;
                    }
                    if let Some(name) = args.get("remove").and_then(Value::as_str) {
                        state.removed.push(name.to_owned());
                    }
                    if let Some(d) = args.get("readme_description").and_then(Value::as_str) {
                        state.readme_description = d.to_owned();
                    }
                    if let Some(d) = args.get("greet_description").and_then(Value::as_str) {
                        state.greet_description = d.to_owned();
                    }
                }
                // `"notify": false` changes the tool silently, as a misbehaving upstream would.
                if args.get("notify") != Some(&Value::Bool(false)) {
                    context
                        .peer
                        .notify_tool_list_changed()
                        .await
                        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                }
                text("mutated")
            }
            "deploy" => structured(
                format!("deploying {}", str_arg(&args, "service")?),
                json!({ "received": Value::Object(args.clone()) }),
            ),
            "ask" => {
                let kind = str_arg(&args, "kind")?;
                let request = match kind {
                    "sampling" => json!({"method": "sampling/createMessage", "params": {
                        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarize the weather"}}],
                        "maxTokens": 50, "includeContext": "allServers"}}),
                    "elicitation" => json!({"method": "elicitation/create", "params": {
                        "mode": "form", "message": "Your name?",
                        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}),
                    "elicitation_url" => json!({"method": "elicitation/create", "params": {
                        "mode": "url", "message": "Sign in", "url": "https://example.com/sign-in",
                        "elicitationId": "e1"}}),
                    "roots" => json!({"method": "roots/list"}),
                    other => {
                        return Err(ErrorData::invalid_params(
                            format!("unknown kind `{other}`"),
                            None,
                        ));
                    }
                };
                // The 2026-07-28 wire has no requests to the client: the question is the
                // call's `input_required` round, under `question`, with a state that names the
                // kind; the retry brings the answer and the state back.
                let stateless = context.protocol_version().is_some_and(|version| {
                    version.as_str() >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str()
                });
                if stateless {
                    let state = format!("fixture-state:{kind}");
                    return match request_answer(&request_inputs) {
                        Some(answer) => {
                            let keys: Vec<&String> =
                                request_inputs.0.iter().flat_map(|r| r.keys()).collect();
                            let round =
                                json!({"answer": answer, "state": request_inputs.1, "keys": keys});
                            Ok(structured("answered", round).into())
                        }
                        _ => {
                            let question: rmcp::model::InputRequest = typed(request)?;
                            let questions = rmcp::model::InputRequests::from([(
                                "question".to_owned(),
                                question,
                            )]);
                            Ok(
                                rmcp::model::InputRequiredResult::new(Some(questions), Some(state))
                                    .into(),
                            )
                        }
                    };
                }
                let request: ServerRequest = typed(request)?;
                match context.peer.send_request(request).await {
                    Ok(answer) => structured(
                        "answered",
                        json!({"answer": serde_json::to_value(answer).unwrap_or(Value::Null)}),
                    ),
                    Err(rmcp::ServiceError::McpError(e)) => {
                        let mut refused = structured(
                            "refused",
                            json!({"refused": {"code": e.code.0, "message": e.message}}),
                        );
                        if args.get("must") == Some(&Value::Bool(true)) {
                            refused.is_error = Some(true);
                        }
                        refused
                    }
                    Err(e) => return Err(ErrorData::internal_error(e.to_string(), None)),
                }
            }
            "log" => {
                log_three(&context).await?;
                text("logged")
            }
            "stats" => {
                let (cancelled, calls) = {
                    let state = self.state();
                    (state.cancelled, state.calls)
                };
                structured(
                    format!("{cancelled} cancelled, {calls} calls"),
                    json!({ "cancelled": cancelled, "calls": calls }),
                )
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let readme = self.state().readme_description.clone();
        typed(json!({"resources": [
            {"uri": "docs://readme", "name": "readme", "mimeType": "text/plain",
             "description": readme},
            {"uri": "docs://guide/setup", "name": "setup", "mimeType": "text/plain"},
            {"uri": "secret://keys/one", "name": "key", "mimeType": "text/plain"}
        ]}))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        typed(json!({"resourceTemplates": [
            {"uriTemplate": "docs://pages/{page}", "name": "page", "mimeType": "text/plain"}
        ]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let text = match uri.as_str() {
            "docs://readme" => "Read me first.".to_owned(),
            "docs://guide/setup" => "Run the installer.".to_owned(),
            "secret://keys/one" => "TOPSECRET-KEY".to_owned(),
            other => match other.strip_prefix("docs://pages/") {
                Some(page) if !page.is_empty() && !page.contains('/') => format!("Page {page}"),
                _ => {
                    return Err(ErrorData::resource_not_found(
                        format!("no resource {uri}"),
                        Some(json!({"uri": uri})),
                    ));
                }
            },
        };
        let result: rmcp::model::ReadResourceResult = typed(json!({"contents": [
            {"uri": uri, "mimeType": "text/plain", "text": text}
        ]}))?;
        Ok(result.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        {
            let mut state = self.state();
            if state.subscribed.contains(&uri) {
                return Ok(());
            }
            state.subscribed.push(uri.clone());
        }
        // The resource changes all the time: an update every UPDATE_EVERY while subscribed.
        let server = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(UPDATE_EVERY).await;
                if !server.state().subscribed.contains(&uri) {
                    return;
                }
                let params: ResourceUpdatedNotificationParam = match typed(json!({"uri": uri})) {
                    Ok(p) => p,
                    Err(_) => return,
                };
                if context.peer.notify_resource_updated(params).await.is_err() {
                    return;
                }
            }
        });
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.state().subscribed.retain(|u| u != &request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let greet = self.state().greet_description.clone();
        typed(json!({"prompts": [
            {"name": "greet", "description": greet,
             "arguments": [{"name": "name", "required": true}]},
            {"name": "summarize", "description": "Summarizes a text."}
        ]}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let stateless = context.protocol_version().is_some_and(|version| {
            version.as_str() >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str()
        });
        let context_given = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get("context"))
            .and_then(|answer| answer.pointer("/content/context"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let arguments = request.arguments.unwrap_or_default();
        let text = match request.name.as_str() {
            "greet" => format!("Hello, {}!", str_arg(&arguments, "name")?),
            // On the 2026-07-28 wire it asks for a context first (an input round).
            "summarize" if stateless => match context_given {
                Some(given) => format!("Summarize the text you are given, for {given}."),
                None => {
                    let question: rmcp::model::InputRequest = typed(json!({
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "For whom?",
                            "requestedSchema": {"type": "object",
                                "properties": {"context": {"type": "string"}},
                                "required": ["context"]}}}))?;
                    let questions =
                        rmcp::model::InputRequests::from([("context".to_owned(), question)]);
                    let round = rmcp::model::InputRequiredResult::new(
                        Some(questions),
                        Some("fixture-prompt-state".to_owned()),
                    );
                    return Ok(round.into());
                }
            },
            "summarize" => "Summarize the text you are given.".to_owned(),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt `{other}`"),
                    None,
                ));
            }
        };
        let result: rmcp::model::GetPromptResult =
            typed(json!({"description": "a fixture prompt",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}]}))?;
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let asked = serde_json::to_value(&request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let prefix = asked["argument"]["value"].as_str().unwrap_or_default();
        let candidates: &[&str] = match (
            asked["ref"]["type"].as_str(),
            asked["argument"]["name"].as_str(),
        ) {
            (Some("ref/prompt"), Some("name")) => &["alice", "albert", "bob"],
            // Values that form URIs of the template: the gateway filters what a caller may read.
            (Some("ref/resource"), Some("page")) => {
                &["intro", "install", "internal", "../internal"]
            }
            _ => &[],
        };
        let values: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|c| c.starts_with(prefix))
            .collect();
        typed(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }
}

/// A result built from its JSON (the SDK's types are not all constructible field by field).
/// `log`'s three messages.
#[expect(
    deprecated,
    reason = "the 2025 eras' log messages, which the gateway relays"
)]
async fn log_three(context: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
    for (level, data) in [
        (LoggingLevel::Debug, json!("fine detail")),
        (LoggingLevel::Info, json!("working on it")),
        (
            LoggingLevel::Error,
            json!({"code": 7, "detail": "it broke"}),
        ),
    ] {
        let mut message = LoggingMessageNotificationParam::new(level, data);
        message.logger = Some("fixture".into());
        context
            .peer
            .notify_logging_message(message)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    }
    Ok(())
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}
