#![expect(
    clippy::unwrap_used,
    reason = "a test should fail loudly at the first surprise"
)]

//! The upstream connector against the project's own fixture MCP server
//! (`tests/upstream_fixture/`): over stdio, as a child process (the `aperture-fixture-upstream`
//! binary), and over streamable HTTP, served in-process on 127.0.0.1:0.

#[path = "upstream_fixture/server.rs"]
mod fixture;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aperture_core::upstream::{
    AskFn, AskRefusal, CallHooks, Connection, Connector, LogFn, LogLevel, UpstreamAsk,
    UpstreamError, UpstreamLog, UpstreamSpec, check_result_size, import,
};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::serve::ListenerExt;
use engine::policy::ClientRequest;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Map, Value, json};

const FIXTURE: &str = env!("CARGO_BIN_EXE_aperture-fixture-upstream");
const TIMEOUT: Duration = Duration::from_secs(15);
const API_KEY: &str = "fixture-api-key-s3cret";

fn stdio_spec(env: &[(&str, &str)]) -> UpstreamSpec {
    UpstreamSpec::Stdio {
        command: vec![FIXTURE.into()],
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

async fn connect_stdio() -> Connection {
    // Guarded like production: the SSRF guard concerns HTTP only.
    Connector::new(false)
        .connect(&stdio_spec(&[]), TIMEOUT)
        .await
        .unwrap()
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object, not {other}"),
    }
}

async fn call(connection: &Connection, tool: &str, arguments: Value) -> Value {
    connection
        .call_tool(tool, args(arguments), TIMEOUT, None)
        .await
        .unwrap()
}

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

const TOOL_NAMES: [&str; 11] = [
    "echo",
    "add",
    "big",
    "slow",
    "read file",
    "getenv",
    "mutate",
    "deploy",
    "ask",
    "log",
    "stats",
];

async fn assert_lists_every_tool(connection: &Connection) {
    // Eleven tools at three per page: the listing follows three cursors.
    let tools = connection.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, TOOL_NAMES);

    let add = &tools[1];
    assert_eq!(add.title.as_deref(), Some("Add"));
    assert_eq!(add.description.as_deref(), Some("Adds two integers."));
    assert_eq!(
        add.input_schema,
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        })
    );
    assert_eq!(
        add.output_schema,
        Some(json!({
            "type": "object",
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"]
        }))
    );
    assert_eq!(tools[0].annotations, Some(json!({"readOnlyHint": true})));
}

async fn assert_calls_work(connection: &Connection) {
    let echoed = call(connection, "echo", json!({"text": "hello"})).await;
    assert_eq!(first_text(&echoed), "hello");
    assert_ne!(echoed["isError"], json!(true));

    let sum = call(connection, "add", json!({"a": 2, "b": 40})).await;
    assert_eq!(sum["structuredContent"], json!({"sum": 42}));
    assert_eq!(first_text(&sum), "42");

    // Called by its raw name, space and all.
    let read = call(connection, "read file", json!({"path": "/tmp/x"})).await;
    assert_eq!(first_text(&read), "contents of /tmp/x");
}

#[tokio::test]
async fn stdio_lists_every_page_with_raw_names_and_schemas() {
    let connection = connect_stdio().await;
    assert_eq!(connection.protocol_version(), "2025-11-25");
    assert_lists_every_tool(&connection).await;

    // Imported, `read file` gets a sanitized canonical name and keeps its raw one.
    let report = import(
        "fixture",
        "ups_test",
        connection.list_tools().await.unwrap(),
    )
    .unwrap();
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let read = report
        .tools
        .iter()
        .find(|t| t.name == "mcp__fixture__read_file")
        .unwrap();
    assert_eq!(
        read.source,
        engine::descriptor::ToolSource::Mcp {
            upstream_id: "ups_test".into(),
            server: "fixture".into(),
            tool: "read file".into(),
        }
    );
    assert_eq!(read.risk, ["unknown"]);
    connection.close().await;
}

#[tokio::test]
async fn stdio_calls_return_the_tool_result() {
    let connection = connect_stdio().await;
    assert_calls_work(&connection).await;
    connection.close().await;
}

#[tokio::test]
async fn a_json_rpc_error_is_a_tool_error() {
    let connection = connect_stdio().await;
    let err = connection
        .call_tool("no such tool", Map::new(), TIMEOUT, None)
        .await
        .unwrap_err();
    match &err {
        UpstreamError::Tool { code, message } => {
            assert_eq!(*code, -32602);
            assert!(message.contains("unknown tool"), "{message}");
        }
        other => panic!("expected a tool error, got {other:?}"),
    }
    assert_eq!(err.reason_code(), "upstream_error");
    // The session survives it.
    assert_calls_work(&connection).await;
    connection.close().await;
}

#[tokio::test]
async fn a_missed_deadline_times_out_and_cancels_the_call_upstream() {
    let connection = connect_stdio().await;
    let deadline = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let err = connection
        .call_tool("slow", args(json!({"millis": 30_000})), deadline, None)
        .await
        .unwrap_err();
    assert_eq!(err, UpstreamError::Timeout { after: deadline });
    assert_eq!(err.reason_code(), "execution_timeout");
    assert!(started.elapsed() < Duration::from_secs(10));

    // The upstream was told (`notifications/cancelled`) and stopped working on it.
    let mut cancelled = json!(0);
    for _ in 0..100 {
        cancelled =
            call(&connection, "stats", json!({})).await["structuredContent"]["cancelled"].clone();
        if cancelled == json!(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled, json!(1));

    // A call that makes its deadline is unaffected.
    let done = connection
        .call_tool("slow", args(json!({"millis": 10})), TIMEOUT, None)
        .await
        .unwrap();
    assert_eq!(first_text(&done), "done");
    connection.close().await;
}

#[tokio::test]
async fn oversize_results_are_refused() {
    let connection = connect_stdio().await;
    let result = call(&connection, "big", json!({"bytes": 100_000})).await;
    let err = check_result_size(&result, Some(10_000)).unwrap_err();
    match err {
        UpstreamError::ResultTooLarge { bytes, limit } => {
            assert!(bytes > 100_000, "{bytes}");
            assert_eq!(limit, 10_000);
        }
        other => panic!("expected ResultTooLarge, got {other:?}"),
    }
    assert_eq!(err.reason_code(), "result_too_large");
    let bytes = check_result_size(&result, None).unwrap();
    assert_eq!(check_result_size(&result, Some(bytes)).unwrap(), bytes);
    connection.close().await;
}

#[tokio::test]
async fn tool_list_changes_are_signalled_and_relisted() {
    let connection = connect_stdio().await;
    let mut changes = connection.tools_changed();
    let before = *changes.borrow_and_update();
    call(
        &connection,
        "mutate",
        json!({"description": "Echoes, reworded."}),
    )
    .await;
    tokio::time::timeout(TIMEOUT, changes.changed())
        .await
        .expect("notifications/tools/list_changed")
        .unwrap();
    assert_eq!(*changes.borrow(), before + 1);
    // Not from a cache: the new description is listed.
    let tools = connection.list_tools().await.unwrap();
    assert_eq!(tools[0].description.as_deref(), Some("Echoes, reworded."));
    connection.close().await;
}

#[tokio::test]
async fn every_listing_is_fresh_even_when_the_upstream_invites_caching() {
    // The fixture's pages carry `ttlMs: 60000`, and this change comes without a notification:
    // only a listing that really asks the upstream sees it (drift checks depend on that).
    let connection = connect_stdio().await;
    let before = connection.list_tools().await.unwrap();
    assert_eq!(
        before[0].description.as_deref(),
        Some("Returns its text argument.")
    );
    call(
        &connection,
        "mutate",
        json!({"description": "Silently changed.", "notify": false}),
    )
    .await;
    let after = connection.list_tools().await.unwrap();
    assert_eq!(after[0].description.as_deref(), Some("Silently changed."));
    connection.close().await;
}

#[tokio::test]
async fn the_process_gets_its_env_and_not_the_gateways() {
    // Cargo sets this for the test process; the upstream must not inherit it.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let connection = Connector::new(false)
        .connect(&stdio_spec(&[("FIXTURE_TOKEN", "tok-123")]), TIMEOUT)
        .await
        .unwrap();
    let getenv = async |name: &str| {
        call(&connection, "getenv", json!({"name": name})).await["structuredContent"]["value"]
            .clone()
    };
    assert_eq!(getenv("FIXTURE_TOKEN").await, json!("tok-123"));
    assert_eq!(getenv("CARGO_MANIFEST_DIR").await, Value::Null);
    assert_eq!(getenv("PATH").await, json!(std::env::var("PATH").unwrap()));
    connection.close().await;
}

#[tokio::test]
async fn close_ends_the_session() {
    let connection = connect_stdio().await;
    assert!(!connection.is_closed());
    connection.close().await;
    assert!(connection.is_closed());
    let err = connection
        .call_tool("echo", args(json!({"text": "x"})), TIMEOUT, None)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Transport { .. }), "{err:?}");
    connection.close().await;
}

#[tokio::test]
async fn a_process_that_never_answers_times_out_the_handshake() {
    let spec = UpstreamSpec::Stdio {
        command: vec!["sleep".into(), "30".into()],
        env: BTreeMap::new(),
    };
    let timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = Connector::new(false)
        .connect(&spec, timeout)
        .await
        .unwrap_err();
    assert_eq!(err, UpstreamError::Timeout { after: timeout });
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_missing_program_is_a_connect_error_without_env_values() {
    let spec = UpstreamSpec::Stdio {
        command: vec!["/nonexistent/aperture-no-such-server".into()],
        env: BTreeMap::from([("TOKEN".into(), "env-value-s3cret".into())]),
    };
    let err = Connector::new(false)
        .connect(&spec, TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Connect { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("aperture-no-such-server"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// The fixture behind streamable HTTP, requiring `x-api-key`; stops when dropped.
struct HttpFixture {
    url: String,
    /// TCP connections accepted so far.
    connections: Arc<AtomicUsize>,
    /// HTTP requests received so far.
    requests: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn require_api_key(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request
        .headers()
        .get("x-api-key")
        .is_some_and(|v| v == API_KEY)
    {
        next.run(request).await
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

async fn http_fixture() -> HttpFixture {
    let service: StreamableHttpService<fixture::FixtureServer, LocalSessionManager> =
        StreamableHttpService::new(
            || Ok(fixture::FixtureServer::new()),
            Arc::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        // Same origin: followed.
        .route(
            "/moved",
            axum::routing::any(|| async {
                (StatusCode::TEMPORARY_REDIRECT, [("location", "/mcp")])
            }),
        )
        .layer(axum::middleware::from_fn(require_api_key));
    serve(router).await
}

/// Serves `router` on 127.0.0.1 (`axum::serve`, Nagle's algorithm left on), counting
/// connections and requests.
async fn serve(router: axum::Router) -> HttpFixture {
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let router = router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            counted.fetch_add(1, Ordering::SeqCst);
            next.run(request)
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = connections.clone();
    let listener = listener.tap_io(move |_| {
        accepted.fetch_add(1, Ordering::SeqCst);
    });
    let server = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    HttpFixture {
        url: format!("http://127.0.0.1:{port}/mcp"),
        connections,
        requests,
        server,
    }
}

/// Connects to `url` with the fixture's key, loopback allowed (it is private: only an
/// operator's allowance reaches it).
async fn connect_http(url: &str) -> Connection {
    Connector::new(true)
        .connect(&http_spec(url, Some(API_KEY)), TIMEOUT)
        .await
        .unwrap()
}

fn http_spec(url: &str, api_key: Option<&str>) -> UpstreamSpec {
    UpstreamSpec::StreamableHttp {
        url: url.to_owned(),
        headers: api_key
            .map(|key| BTreeMap::from([("x-api-key".to_owned(), key.to_owned())]))
            .unwrap_or_default(),
    }
}

#[tokio::test]
async fn streamable_http_lists_calls_and_times_out() {
    let fixture = http_fixture().await;
    let connection = connect_http(&fixture.url).await;
    assert_eq!(connection.protocol_version(), "2025-11-25");
    assert_lists_every_tool(&connection).await;
    assert_calls_work(&connection).await;

    let deadline = Duration::from_millis(200);
    let err = connection
        .call_tool("slow", args(json!({"millis": 30_000})), deadline, None)
        .await
        .unwrap_err();
    assert_eq!(err, UpstreamError::Timeout { after: deadline });

    let big = call(&connection, "big", json!({"bytes": 50_000})).await;
    assert!(matches!(
        check_result_size(&big, Some(1_000)),
        Err(UpstreamError::ResultTooLarge { .. })
    ));
    connection.close().await;
}

/// Three times as many slow calls as rmcp's transport runs at once (16 POSTs) all run
/// together: each answers with an event stream, which frees its place as soon as its headers
/// arrive (the gateway's own decoding of an answer waits for it only briefly). Were the places
/// held until each stream's first message (the fixture's first progress, after a quarter of
/// the call), the last sixteen would start two quarters late and miss the deadline.
#[tokio::test]
async fn streamable_http_runs_more_slow_calls_at_once_than_rmcp_posts() {
    let fixture = http_fixture().await;
    let connection = Arc::new(connect_http(&fixture.url).await);
    let deadline = Duration::from_millis(5_400);
    let calls: Vec<_> = (0..48)
        .map(|_| {
            let connection = Arc::clone(&connection);
            tokio::spawn(async move {
                connection
                    .call_tool("slow", args(json!({"millis": 4_000})), deadline, None)
                    .await
            })
        })
        .collect();
    for call in calls {
        let result = call
            .await
            .unwrap()
            .expect("every call ends within its deadline");
        assert_eq!(first_text(&result), "done");
    }
    connection.close().await;
}

#[tokio::test]
async fn streamable_http_signals_tool_list_changes() {
    let fixture = http_fixture().await;
    let connection = connect_http(&fixture.url).await;
    let mut changes = connection.tools_changed();
    changes.mark_unchanged();
    call(
        &connection,
        "mutate",
        json!({"description": "Changed over HTTP."}),
    )
    .await;
    tokio::time::timeout(TIMEOUT, changes.changed())
        .await
        .expect("notifications/tools/list_changed")
        .unwrap();
    let tools = connection.list_tools().await.unwrap();
    assert_eq!(tools[0].description.as_deref(), Some("Changed over HTTP."));
    connection.close().await;
}

#[tokio::test]
async fn streamable_http_refusals() {
    let fixture = http_fixture().await;

    // Without the operator's allowance, a loopback upstream is refused before any request.
    let err = Connector::new(false)
        .connect(&http_spec(&fixture.url, Some(API_KEY)), TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::UrlRefused { .. }), "{err:?}");

    // A wrong key fails the handshake, and the error does not repeat the key.
    let err = Connector::new(true)
        .connect(&http_spec(&fixture.url, Some("wrong-key-s3cret")), TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Connect { .. }), "{err:?}");
    assert!(!err.to_string().contains("s3cret"), "{err}");

    // Nothing listens on port 1: the error names the endpoint, not the query's token.
    let err = Connector::new(true)
        .connect(
            &http_spec("http://127.0.0.1:1/mcp?token=query-s3cret-token", None),
            TIMEOUT,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Connect { .. }), "{err:?}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

#[tokio::test]
async fn streamable_http_reuses_connections() {
    let fixture = http_fixture().await;
    let connection = connect_http(&fixture.url).await;
    let before = fixture.connections.load(Ordering::SeqCst);
    for i in 0..30 {
        let text = format!("call {i}");
        let echoed = call(&connection, "echo", json!({ "text": text })).await;
        assert_eq!(first_text(&echoed), text);
    }
    // Sequential calls share a kept-alive connection instead of opening one each (the
    // handshake's requests and rmcp's standing event stream may hold one or two more).
    let opened = fixture.connections.load(Ordering::SeqCst) - before;
    assert!(opened <= 2, "30 calls opened {opened} connections");
    connection.close().await;
}

#[tokio::test]
async fn streamable_http_follows_same_origin_redirects_only() {
    let fixture = http_fixture().await;
    let moved = fixture.url.replace("/mcp", "/moved");
    let connection = connect_http(&moved).await;
    assert_calls_work(&connection).await;
    connection.close().await;

    // Another origin (another port) would receive the key and the session: not followed, and
    // it sees no request.
    let elsewhere = fixture.url.clone();
    let redirector = serve(axum::Router::new().route(
        "/mcp",
        axum::routing::any(move || {
            let location = elsewhere.clone();
            async move { (StatusCode::TEMPORARY_REDIRECT, [("location", location)]) }
        }),
    ))
    .await;
    let requests_before = fixture.requests.load(Ordering::SeqCst);
    let err = Connector::new(true)
        .connect(&http_spec(&redirector.url, Some(API_KEY)), TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("307"), "{err}");
    assert_eq!(redirector.requests.load(Ordering::SeqCst), 1);
    assert_eq!(fixture.requests.load(Ordering::SeqCst), requests_before);
}

/// Issue 47 (item 2): what the upstream offers besides tools — its declared capabilities,
/// every resource, template and prompt as listed, reads, prompt gets and completions — over
/// both transports; an unknown resource is the upstream's own error, not a transport failure.
async fn assert_items_work(connection: &Connection) {
    let offers = connection.offers();
    assert!(
        offers.resources && offers.prompts && offers.completions,
        "{offers:?}"
    );
    let uris: Vec<String> = connection
        .list_resources()
        .await
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        uris,
        ["docs://readme", "docs://guide/setup", "secret://keys/one"]
    );
    let templates = connection.list_resource_templates().await.unwrap();
    assert_eq!(templates[0]["uriTemplate"], "docs://pages/{page}");
    let prompts = connection.list_prompts().await.unwrap();
    assert_eq!(prompts[0]["name"], "greet");
    assert_eq!(prompts[0]["arguments"][0]["name"], "name");

    let read = connection
        .read_resource("docs://pages/intro", TIMEOUT)
        .await
        .unwrap();
    assert_eq!(read["contents"][0]["text"], "Page intro");
    assert_eq!(read["contents"][0]["uri"], "docs://pages/intro");
    let got = connection
        .get_prompt("greet", Some(args(json!({"name": "Ada"}))), TIMEOUT, None)
        .await
        .unwrap();
    assert_eq!(got["messages"][0]["content"]["text"], "Hello, Ada!");
    let completed = connection
        .complete(
            json!({"ref": {"type": "ref/prompt", "name": "greet"},
                   "argument": {"name": "name", "value": "al"}}),
            TIMEOUT,
        )
        .await
        .unwrap();
    assert_eq!(
        completed["completion"]["values"],
        json!(["alice", "albert"])
    );
    match connection.read_resource("docs://nothing", TIMEOUT).await {
        Err(UpstreamError::Tool { code, .. }) => assert_eq!(code, -32002),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn stdio_resources_prompts_and_completions() {
    let connection = connect_stdio().await;
    assert_items_work(&connection).await;
}

#[tokio::test]
async fn streamable_http_resources_prompts_and_completions() {
    let fixture = http_fixture().await;
    let connection = connect_http(&fixture.url).await;
    assert_items_work(&connection).await;
}

/// An answerer that records what it was asked and answers each kind as a client would.
fn answerer(asked: Arc<std::sync::Mutex<Vec<UpstreamAsk>>>) -> AskFn {
    Arc::new(move |ask: UpstreamAsk| {
        asked.lock().unwrap().push(ask.clone());
        Box::pin(async move {
            Ok(match ask.kind {
                ClientRequest::Sampling => json!({
                    "role": "assistant", "content": {"type": "text", "text": "sunny"},
                    "model": "test-model"
                }),
                ClientRequest::Elicitation | ClientRequest::ElicitationUrl => {
                    json!({"action": "accept", "content": {"name": "Ada"}})
                }
                ClientRequest::Roots => json!({"roots": [{"uri": "file:///work", "name": "work"}]}),
            })
        })
    })
}

fn hooks(ask: Option<AskFn>) -> CallHooks {
    CallHooks {
        ask,
        ..CallHooks::default()
    }
}

async fn ask(connection: &Connection, kind: &str, to: Option<AskFn>) -> Value {
    connection
        .call_tool_with("ask", args(json!({"kind": kind})), TIMEOUT, hooks(to))
        .await
        .unwrap()["structuredContent"]
        .clone()
}

/// Issue 47 (item 3): the upstream's requests during a call reach that call's answerer, over
/// stdio (the only call in flight) and over streamable HTTP (on the call's own stream); a
/// call without one refuses them, and the upstream hears a JSON-RPC error.
async fn assert_requests_reach_their_call(connection: &Connection) {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let to = answerer(asked.clone());
    let sampled = ask(connection, "sampling", Some(to.clone())).await;
    assert_eq!(sampled["answer"]["content"]["text"], "sunny", "{sampled}");
    let elicited = ask(connection, "elicitation", Some(to.clone())).await;
    assert_eq!(elicited["answer"]["content"]["name"], "Ada", "{elicited}");
    let url = ask(connection, "elicitation_url", Some(to.clone())).await;
    assert_eq!(url["answer"]["action"], "accept", "{url}");
    let roots = ask(connection, "roots", Some(to.clone())).await;
    assert_eq!(
        roots["answer"]["roots"][0]["uri"], "file:///work",
        "{roots}"
    );
    let kinds: Vec<ClientRequest> = asked.lock().unwrap().iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        [
            ClientRequest::Sampling,
            ClientRequest::Elicitation,
            ClientRequest::ElicitationUrl,
            ClientRequest::Roots
        ]
    );
    let first = asked.lock().unwrap()[0].clone();
    assert_eq!(first.method, "sampling/createMessage");
    assert_eq!(first.params["maxTokens"], 50);
    // The gateway's mark of which call a request belongs to never reaches the answerer.
    assert!(!first.params.to_string().contains("io.aperture/call"));

    let refused = ask(connection, "sampling", None).await;
    assert_eq!(refused["refused"]["code"], -32600, "{refused}");
    let refusing: AskFn =
        Arc::new(|_| Box::pin(async { Err(AskRefusal::new(-32600, "not for you")) }));
    let refused = ask(connection, "roots", Some(refusing)).await;
    assert_eq!(refused["refused"]["message"], "not for you", "{refused}");
}

#[tokio::test]
async fn stdio_relays_requests_to_the_call_in_flight() {
    let connection = connect_stdio().await;
    assert_requests_reach_their_call(&connection).await;
    connection.close().await;
}

#[tokio::test]
async fn streamable_http_relays_requests_on_the_calls_own_stream() {
    let fixture = http_fixture().await;
    let connection = connect_http(&fixture.url).await;
    assert_requests_reach_their_call(&connection).await;
    connection.close().await;
}

/// Issue 47 (item 3): waiting for the person does not count toward the call's deadline.
#[tokio::test]
async fn time_spent_answering_does_not_count_toward_the_deadline() {
    let connection = connect_stdio().await;
    let slow: AskFn = Arc::new(|_| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok(json!({"roots": []}))
        })
    });
    let answered = connection
        .call_tool_with(
            "ask",
            args(json!({"kind": "roots"})),
            Duration::from_millis(1000),
            hooks(Some(slow)),
        )
        .await
        .unwrap();
    assert_eq!(answered["structuredContent"]["answer"]["roots"], json!([]));
    connection.close().await;
}

/// What calling `tool` made heard of the upstream's log messages about it (as they keep
/// arriving), and the call's result.
async fn heard_logs(
    connection: &Connection,
    tool: &str,
) -> (Arc<std::sync::Mutex<Vec<UpstreamLog>>>, Value) {
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let to: LogFn = {
        let heard = heard.clone();
        Arc::new(move |log: UpstreamLog| heard.lock().unwrap().push(log))
    };
    let hooks = CallHooks {
        log: Some(to),
        ..CallHooks::default()
    };
    let result = connection
        .call_tool_with(tool, args(json!({})), TIMEOUT, hooks)
        .await
        .unwrap();
    (heard, result)
}

/// Issue 47 (item 4): the upstream's log messages about a call reach that call's listener,
/// scrubbed of the upstream's secrets, over stdio and streamable HTTP; a call nobody listens
/// to drops them.
async fn assert_logs_reach_their_call(connection: &Connection) {
    let (heard, _) = heard_logs(connection, "log").await;
    let heard = heard.lock().unwrap().clone();
    let levels: Vec<LogLevel> = heard.iter().map(|l| l.level).collect();
    assert_eq!(levels, [LogLevel::Debug, LogLevel::Info, LogLevel::Error]);
    assert_eq!(heard[1].logger.as_deref(), Some("fixture"));
    assert_eq!(heard[1].data, json!("working on it"));
    assert_eq!(heard[2].data["code"], 7);
    // Without a listener the call still answers.
    call(connection, "log", json!({})).await;
}

#[tokio::test]
async fn stdio_log_messages_reach_the_call_in_flight() {
    let connection = connect_stdio().await;
    assert_logs_reach_their_call(&connection).await;
    connection.close().await;
}

/// A streamable-HTTP MCP server written by hand: it answers `tools/call` with an event stream
/// carrying a log message (and one that forges the gateway's mark of a call), then the result.
async fn logging_server() -> HttpFixture {
    async fn handle(body: axum::body::Bytes) -> axum::response::Response {
        let message: Value = serde_json::from_slice(&body).unwrap();
        let id = message["id"].clone();
        match message["method"].as_str() {
            Some("initialize") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "hand-written", "version": "1"}}}))
            .into_response(),
            Some("tools/call") => {
                let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "warning", "logger": "hand", "data": "on the call's stream"}});
                let result = json!({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": "done"}]}});
                let body = format!("data: {log}\n\ndata: {result}\n\n");
                ([("content-type", "text/event-stream")], body).into_response()
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(handle)
            .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
            .delete(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    serve(router).await
}

#[tokio::test]
async fn streamable_http_log_messages_on_the_calls_own_stream_reach_it() {
    let server = logging_server().await;
    let connection = Connector::new(true)
        .connect(&http_spec(&server.url, None), TIMEOUT)
        .await
        .unwrap();
    let (heard, result) = heard_logs(&connection, "anything").await;
    assert_eq!(first_text(&result), "done");
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].level, LogLevel::Warning);
    assert_eq!(heard[0].data, json!("on the call's stream"));
    connection.close().await;
}

/// rmcp's own server sends log messages on the standalone stream, which no call owns: they
/// reach nobody.
#[tokio::test]
async fn streamable_http_log_messages_on_the_standalone_stream_reach_nobody() {
    let fixture = http_fixture().await;
    let connection = connect_http(&fixture.url).await;
    let (heard, _) = heard_logs(&connection, "log").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(heard.lock().unwrap().is_empty());
    connection.close().await;
}
