//! Starting the app and talking to it.

use std::sync::atomic::{AtomicU64, Ordering};

use aperture::{Application, Config};
use aperture_core::store::{self, Store};
use app::dto::CreateTokenRequest;
use reqwest::{Client, Method, Response, StatusCode};

pub use crate::requests::{Call, Remote, Reply, Requests};

pub const ADMIN_PASSWORD: &str = "bootstrap-admin-password";
/// The signing key of every test server (hex Ed25519 seed).
pub const SIGNING_KEY: &str = "0707070707070707070707070707070707070707070707070707070707070707";

/// Which database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A fresh, empty database of one backend, dropped with this value.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestDb {
    /// A private folder for this database's files (keys, data dir).
    pub fn data_dir(&self) -> std::path::PathBuf {
        match &self._dir {
            Some(d) => d.path().to_path_buf(),
            None => std::env::temp_dir(),
        }
    }

    /// `None` when the backend is PostgreSQL and no test server is configured.
    pub async fn new(db: Db) -> Option<Self> {
        match db {
            Db::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = format!("sqlite://{}/aperture.db", dir.path().display());
                Some(Self {
                    url,
                    _dir: Some(dir),
                    pg: None,
                })
            }
            Db::Postgres => {
                let admin_url = std::env::var("APERTURE_TEST_POSTGRES_URL")
                    .ok()
                    .filter(|u| !u.is_empty())?;
                let name = format!(
                    "aperture_t_{}_{}_{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed),
                    aperture_core::ids::new_id("x")
                        .trim_start_matches("x_")
                        .get(..8)
                        .unwrap_or("0")
                );
                let admin = Store::connect(&admin_url)
                    .await
                    .expect("connect to APERTURE_TEST_POSTGRES_URL");
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(admin.pool())
                    .await
                    .expect("create db");
                admin.close().await;
                let base = admin_url
                    .rsplit_once('/')
                    .map(|(b, _)| b)
                    .unwrap_or(&admin_url);
                let url = format!("{base}/{name}");
                Some(Self {
                    url,
                    _dir: Some(tempfile::tempdir().expect("tempdir")),
                    pg: Some((admin_url, name)),
                })
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin_url, name)) = self.pg.take() {
            // Drop runs outside any runtime we may block; use a thread with its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    if let Ok(admin) = Store::connect(&admin_url).await {
                        let _ =
                            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                                .execute(admin.pool())
                                .await;
                        admin.close().await;
                    }
                });
            })
            .join();
        }
    }
}

/// Allowed execution receipts in a tenant's journal: the calls that reached an upstream and
/// returned, counted where a revoked caller can no longer ask the upstream itself.
pub async fn executions_in_journal(store: &Store, tenant: &str) -> u64 {
    let allowed = store::journal::search(
        store,
        tenant,
        &store::journal::ReceiptFilter {
            decision: Some("allow".into()),
            ..Default::default()
        },
        1000,
    )
    .await
    .expect("journal search");
    allowed
        .iter()
        .filter(|r| r.receipt.contains("\"kind\":\"execution\""))
        .count() as u64
}

/// A running server.
pub struct TestApp {
    pub address: String,

    pub store: Store,
    /// A journal signing with the server's key (for operator actions in tests).
    pub journal: aperture_core::journal::Journal,
    /// A checkpointer like the server's (same key, origin host and sink), so that tests make
    /// checkpoints when they want them instead of waiting for the server's interval.
    pub checkpoints: std::sync::Arc<aperture_core::journal::checkpoints::Checkpointer>,
    /// The server's data folder (its checkpoint sink is `checkpoints/` in it).
    pub data_dir: std::path::PathBuf,
    /// A client that keeps cookies and sends a same-origin `Origin` header like a browser.
    pub browser: Client,
    /// A plain client (no cookies).
    pub client: Client,
    _db: TestDb,
    _dir: tempfile::TempDir,
}

impl TestApp {
    /// On SQLite.
    pub async fn spawn() -> Self {
        Self::spawn_on(Db::Sqlite)
            .await
            .expect("sqlite always works")
    }

    /// On `db`, or `None` when PostgreSQL is not configured.
    pub async fn spawn_on(db: Db) -> Option<Self> {
        Self::spawn_with(db, |_| {}).await
    }

    /// On PostgreSQL, or `None` (and a word on stderr) where `APERTURE_TEST_POSTGRES_URL` is not
    /// set.
    pub async fn spawn_postgres() -> Option<Self> {
        let app = Self::spawn_on(Db::Postgres).await;
        if app.is_none() {
            eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        }
        app
    }

    /// On `db` with a configuration adjusted by `customize`.
    pub async fn spawn_with(db: Db, customize: impl FnOnce(&mut Config)) -> Option<Self> {
        let db = TestDb::new(db).await?;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::new(dir.path());
        config.addr = "127.0.0.1:0".parse().expect("addr");
        config.database_url = db.url.clone();
        config.bootstrap_admin_password = Some(ADMIN_PASSWORD.into());
        config.signing_key = Some(SIGNING_KEY.into());
        // The tests register the project's fixture upstream over stdio.
        config.allow_stdio_upstreams = true;
        customize(&mut config);
        config.max_body_bytes = 64 * 1024;
        let app = Application::build(config).await.expect("build app");
        let port = app.port();
        tokio::spawn(app.run_until_stopped());
        let store = Store::connect(&db.url).await.expect("connect");
        let keys = aperture_core::keys::KeyRing::load(
            &store,
            dir.path(),
            Some(SIGNING_KEY),
            &aperture_core::keys::default_published_file(dir.path()),
        )
        .await
        .expect("keys");
        let checkpoints = aperture_core::journal::checkpoints::Checkpointer::new(
            store.clone(),
            keys.clone(),
            format!("127.0.0.1:{port}"),
            Some(dir.path().join("checkpoints")),
            std::time::Duration::from_secs(60),
        );
        let journal = aperture_core::journal::Journal::new(store.clone(), keys);
        let address = format!("http://127.0.0.1:{port}");
        let browser = browser_of(&address);
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        Some(Self {
            address,
            store,
            journal,
            checkpoints,
            data_dir: dir.path().to_path_buf(),
            browser,
            client,
            _db: db,
            _dir: dir,
        })
    }

    /// Another node of this deployment: a second server on the same database (PostgreSQL,
    /// where several nodes share state), with the same signing key, running until the test ends.
    pub async fn another_node(&self) -> Remote {
        self.another_node_with(|_| {}).await
    }

    /// [`TestApp::another_node`], its configuration changed by `configure` first.
    pub async fn another_node_with(&self, configure: impl FnOnce(&mut Config)) -> Remote {
        let dir = self
            .data_dir
            .join(format!("node-{}", aperture_core::ids::new_id("n")));
        std::fs::create_dir_all(&dir).expect("node dir");
        // The same key for the upstream credentials every node of a deployment shares.
        std::fs::copy(self.data_dir.join("secrets.key"), dir.join("secrets.key"))
            .expect("the first node's secrets key");
        let mut config = Config::new(&dir);
        config.addr = "127.0.0.1:0".parse().expect("addr");
        config.database_url = self.store_url();
        config.signing_key = Some(SIGNING_KEY.into());
        config.allow_stdio_upstreams = true;
        config.max_body_bytes = 64 * 1024;
        configure(&mut config);
        let app = Application::build(config)
            .await
            .expect("build another node");
        let base = format!("http://127.0.0.1:{}", app.port());
        tokio::spawn(app.run_until_stopped());
        Remote::new(base)
    }

    /// The database URL the server uses.
    pub fn store_url(&self) -> String {
        self._db.url.clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}{}{path}", self.address, aperture::api::PREFIX)
    }

    /// A token created by the operator; returns its secret.
    pub async fn token(&self, tenant: &str, actor: &str, scopes: &[&str]) -> String {
        self.token_full(tenant, actor, scopes).await.1
    }

    /// A token created by the operator; returns its id and secret.
    pub async fn token_full(&self, tenant: &str, actor: &str, scopes: &[&str]) -> (String, String) {
        store::tenants::ensure(&self.store, tenant)
            .await
            .expect("tenant");
        let request = CreateTokenRequest {
            actor_id: actor.into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            name: None,
            expires_at: None,
            environments: None,
        };
        let created = aperture_core::tokens::create_unchecked(
            &self.store,
            &self.journal,
            tenant,
            &aperture_core::journal::Author::operator(),
            &request,
        )
        .await
        .map_err(|e| e.into_app_error())
        .expect("create token");
        (created.token.id, created.secret)
    }

    /// Registers the project's fixture MCP server as upstream `fixture` and describes `read`
    /// as read-only tools (so the default policy and read rules expose them).
    pub async fn register_fixture(&self, admin: &str, read: &[&str]) -> serde_json::Value {
        let body = serde_json::json!({"name": "fixture", "transport": "stdio", "command": fixture_command()});
        let registered = self.post("/upstreams").as_(admin).json(body).await;
        let registered = registered.expect_created();
        for tool in read {
            self.describe(admin, tool, serde_json::json!({"risk": ["read"]}))
                .await;
        }
        registered
    }

    /// Registers the project's fixture MCP server as upstream `fixture`, served in this
    /// process over streamable HTTP (where it speaks 2026-07-28 too); the gateway must allow
    /// private upstreams. It stops when the returned guard is dropped.
    pub async fn register_http_fixture(&self, admin: &str) -> HttpFixture {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        };
        let service: StreamableHttpService<
            crate::upstream_fixture::FixtureServer,
            LocalSessionManager,
        > = StreamableHttpService::new(
            || Ok(crate::upstream_fixture::FixtureServer::new()),
            std::sync::Arc::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        let url = format!("http://127.0.0.1:{port}/mcp");
        let body =
            serde_json::json!({"name": "fixture", "transport": "streamable_http", "url": url});
        self.post("/upstreams")
            .as_(admin)
            .json(body)
            .await
            .expect_created();
        HttpFixture(server)
    }

    /// The names of the tools of a list result (`{"tools": [...]}`), in order.
    pub fn tool_names(list: &serde_json::Value) -> Vec<String> {
        list["tools"]
            .as_array()
            .expect("a tools list")
            .iter()
            .map(|t| t["name"].as_str().expect("a tool name").to_owned())
            .collect()
    }

    /// `POST /sessions` as `token` with `body`: the new session's list result.
    pub async fn new_session(&self, token: &str, body: serde_json::Value) -> serde_json::Value {
        let created = self.post("/sessions").as_(token).json(body).await;
        created.expect_created()
    }

    /// One JSON-RPC request to `/mcp` as `token` (plain JSON, no MCP session): the response body.
    pub async fn mcp(&self, token: &str, body: serde_json::Value) -> serde_json::Value {
        self.mcp_post(token).json(body).await.json()
    }

    /// MCP `tools/list` as `token` with `meta` as its `params._meta`: the result (panics on a
    /// JSON-RPC error).
    pub async fn mcp_list(&self, token: &str, meta: serde_json::Value) -> serde_json::Value {
        let params = serde_json::json!({"_meta": meta});
        let body = self.mcp(token, rpc(1, "tools/list", params)).await;
        assert!(body.get("error").is_none(), "tools/list: {body}");
        body["result"].clone()
    }

    /// The fixture upstream's count of cancelled calls, asked (as `token`, with `list`'s grant,
    /// which must list its `stats` tool) until it reaches `expected` or 5 s have passed.
    pub async fn upstream_cancellations(
        &self,
        token: &str,
        list: &serde_json::Value,
        expected: u64,
    ) -> u64 {
        let mut cancelled = 0;
        for _ in 0..50 {
            let stats = self
                .mcp_call(token, list, "mcp__fixture__stats", serde_json::json!({}))
                .await;
            cancelled = stats["structuredContent"]["cancelled"]
                .as_u64()
                .unwrap_or_else(|| panic!("{stats}"));
            if cancelled == expected {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        cancelled
    }

    /// MCP `tools/call` of `tool` listed in `list` (a `tools/list` result), with the echo of the
    /// grant in `_meta` as a well-behaved client sends it: the result.
    pub async fn mcp_call(
        &self,
        token: &str,
        list: &serde_json::Value,
        tool: &str,
        arguments: serde_json::Value,
    ) -> serde_json::Value {
        let none = serde_json::json!({});
        self.mcp_call_with(token, list, tool, arguments, none).await
    }

    /// [`Self::mcp_call`] with `extra` members in `_meta`.
    pub async fn mcp_call_with(
        &self,
        token: &str,
        list: &serde_json::Value,
        tool: &str,
        arguments: serde_json::Value,
        extra: serde_json::Value,
    ) -> serde_json::Value {
        let mut meta = echo_of(list, tool);
        if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra.as_object()) {
            meta.extend(extra.clone());
        }
        let params = serde_json::json!({"name": tool, "arguments": arguments, "_meta": meta});
        let body = self.mcp(token, rpc(2, "tools/call", params)).await;
        assert!(body.get("error").is_none(), "tools/call: {body}");
        body["result"].clone()
    }

    /// The published signing keys (`/.well-known/aperture/keys`), as a verifier pins them.
    pub async fn keys(&self) -> Vec<engine::receipt::Jwk> {
        let set = self.get_raw("/.well-known/aperture/keys").await.json();
        serde_json::from_value(set["keys"].clone()).expect("JWKs")
    }

    /// Signs in through the dashboard's server function with `client`, as a browser form would.
    pub fn sign_in(&self, client: &Client, username: &str, password: &str) -> Call {
        let form = [
            ("tenant", "default"),
            ("username", username),
            ("password", password),
        ];
        Call::new(client, Method::POST, self.url("/ui/sign-in"))
            .header("accept", "application/json")
            .form(&form)
    }

    /// `method path` from the server's root, sent by the browser client (its cookies, its
    /// `Origin`).
    pub fn in_browser(&self, method: Method, path: &str) -> Call {
        Call::new(&self.browser, method, self.url(path))
    }

    /// Another browser: its own cookies, the same origin.
    pub fn new_browser(&self) -> Client {
        browser_of(&self.address)
    }

    /// Calls a dashboard server function with no arguments, with `client`.
    pub fn server_fn(&self, client: &Client, endpoint: &str) -> Call {
        Call::new(client, Method::POST, self.url(&format!("/ui/{endpoint}")))
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body("")
    }
}

impl Requests for TestApp {
    fn http(&self) -> &Client {
        &self.client
    }

    fn base(&self) -> &str {
        &self.address
    }
}

/// A client that keeps cookies and sends `address` as its `Origin`, like a browser on the
/// dashboard.
fn browser_of(address: &str) -> Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("origin", address.parse().expect("origin"));
    Client::builder()
        .cookie_store(true)
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The element of the array `items` whose `field` is `value`; there must be one.
pub fn find<'a>(items: &'a serde_json::Value, field: &str, value: &str) -> &'a serde_json::Value {
    items
        .as_array()
        .and_then(|items| items.iter().find(|i| i[field] == value))
        .unwrap_or_else(|| panic!("no {field} {value} in {items}"))
}

/// The `field` of every element of the array `items`, as text.
pub fn texts_of<'a>(items: &'a serde_json::Value, field: &str) -> Vec<&'a str> {
    let items = items
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {items}"));
    items.iter().map(|i| text_of(&i[field])).collect()
}

/// `value` as text; it must be text.
pub fn text_of(value: &serde_json::Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not text: {value}"))
}

/// A JSON-RPC request `method` with `id` (and `params`, left out when `Null`).
pub fn rpc(id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
    let mut request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method});
    if !params.is_null() {
        request["params"] = params;
    }
    request
}

/// The echo of the grant of `list` (a `tools/list` result or a new REST session) for a call of
/// `tool`, as a well-behaved client sends it in `_meta`; `tool` must be listed.
pub fn echo_of(list: &serde_json::Value, tool: &str) -> serde_json::Value {
    let listed = list["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == tool))
        .unwrap_or_else(|| panic!("{tool} is not listed: {list}"));
    let m = &list["_meta"];
    serde_json::json!({
        "session_id": m["session_id"], "manifest_id": m["manifest_id"], "lease_id": m["lease_id"],
        "tool_version": listed["_meta"]["toolVersion"],
        "expected_schema_hash": listed["_meta"]["schemaHash"],
    })
}

/// Runs a store test body on SQLite and, where configured, PostgreSQL.
#[macro_export]
macro_rules! on_both_backends {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                let db = $crate::helpers::TestDb::new($crate::helpers::Db::Sqlite)
                    .await
                    .unwrap();
                let store = aperture_core::store::Store::connect(&db.url).await.unwrap();
                store.migrate().await.unwrap();
                $body(&store).await;
                store.close().await;
            }

            #[tokio::test]
            async fn postgres() {
                let Some(db) = $crate::helpers::TestDb::new($crate::helpers::Db::Postgres).await
                else {
                    eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
                    return;
                };
                let store = aperture_core::store::Store::connect(&db.url).await.unwrap();
                assert_eq!(store.kind(), aperture_core::store::DbKind::Postgres);
                store.migrate().await.unwrap();
                $body(&store).await;
                store.close().await;
            }
        }
    };
}

/// The command that starts the project's fixture MCP server over stdio.
/// The fixture served over streamable HTTP ([`TestApp::register_http_fixture`]); stops when
/// dropped.
pub struct HttpFixture(tokio::task::JoinHandle<()>);

impl Drop for HttpFixture {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn fixture_command() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_aperture-fixture-upstream").to_owned()]
}

/// A server-sent event stream being read: `(event, data)` one at a time.
pub struct SseReader {
    response: Response,
    buffer: String,
}

impl SseReader {
    /// `call` (a `GET` with its token) with `Accept: text/event-stream`; must answer 200 with a
    /// stream.
    pub async fn open(call: Call) -> Self {
        let response = call.header("accept", "text/event-stream").open().await;
        let url = response.url().clone();
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream"),
            "{url}"
        );
        let mut reader = Self {
            response,
            buffer: String::new(),
        };
        // Every stream starts by telling its reader to read the state as it is now.
        let first = reader.next(std::time::Duration::from_secs(5)).await;
        assert_eq!(
            first.as_ref().map(|(name, _)| name.as_str()),
            Some("resync"),
            "{url}"
        );
        reader
    }

    /// The next event (comments skipped) within `within`: its name and its data as JSON;
    /// `None` when none came or the stream ended.
    pub async fn next(
        &mut self,
        within: std::time::Duration,
    ) -> Option<(String, serde_json::Value)> {
        let until = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut data) = (None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if let Some(name) = name {
                    let data = serde_json::from_str(&data).unwrap_or(serde_json::Value::Null);
                    return Some((name, data));
                }
            }
            let chunk = tokio::time::timeout_at(until, self.response.chunk()).await;
            match chunk {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// Reads events until one named `name` about invocation `id` comes (within `within`): its
    /// data.
    pub async fn expect(
        &mut self,
        name: &str,
        id: &str,
        within: std::time::Duration,
    ) -> serde_json::Value {
        let until = tokio::time::Instant::now() + within;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some((n, data)) if n == name && data["invocation_id"] == id => return data,
                Some(_) => {}
                None => panic!("no {name} event for {id} within {within:?}"),
            }
        }
    }
}

/// One request a [`WebhookReceiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: axum::http::HeaderMap,
    pub body: String,
}

/// A webhook receiver on a local port: answers the given statuses in order (then 200) and
/// keeps every request.
pub struct WebhookReceiver {
    pub url: String,
    received: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
}

impl WebhookReceiver {
    pub async fn start(statuses: Vec<u16>) -> Self {
        let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Received>::new()));
        let answers = std::sync::Arc::new(std::sync::Mutex::new(
            statuses
                .into_iter()
                .collect::<std::collections::VecDeque<u16>>(),
        ));
        let kept = received.clone();
        let app =
            axum::Router::new().fallback(move |headers: axum::http::HeaderMap, body: String| {
                let (kept, answers) = (kept.clone(), answers.clone());
                async move {
                    kept.lock().unwrap().push(Received { headers, body });
                    let status = answers.lock().unwrap().pop_front().unwrap_or(200);
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/approvals", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, received }
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (up to 20 s) until at least `n` requests arrived; returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        for _ in 0..200 {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!(
            "expected {n} webhook requests, got {}: {:?}",
            self.received().len(),
            self.received()
        );
    }
}
