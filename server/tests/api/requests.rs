//! Requests as a client writes them: `app.put(path).as_(token).json(body).await` sends one and
//! reads its whole answer, whose `expect_*` verbs assert what the test expects of it.
//!
//! Paths are on the REST mount (`/api/v2/agent-tool-exposure`) unless the verb says `_raw`
//! (`/mcp`, `/ui/…`, `/metrics`, `/healthz`: from the server's root).

use std::fmt::Display;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use reqwest::header::HeaderMap;
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

/// A server the test talks to: the test app, or another process ([`Remote`]).
pub trait Requests {
    /// The client requests go out with.
    fn http(&self) -> &Client;

    /// The server's base URL (`http://127.0.0.1:port`).
    fn base(&self) -> &str;

    /// `method path`, `path` on the REST mount.
    fn request(&self, method: Method, path: impl AsRef<str>) -> Call {
        let url = format!("{}{}{}", self.base(), aperture::api::PREFIX, path.as_ref());
        Call::new(self.http(), method, url)
    }

    /// `method path`, `path` from the server's root (`/mcp`, `/ui/…`, `/metrics`).
    fn raw(&self, method: Method, path: impl AsRef<str>) -> Call {
        Call::new(
            self.http(),
            method,
            format!("{}{}", self.base(), path.as_ref()),
        )
    }

    fn get(&self, path: impl AsRef<str>) -> Call {
        self.request(Method::GET, path)
    }

    fn post(&self, path: impl AsRef<str>) -> Call {
        self.request(Method::POST, path)
    }

    fn put(&self, path: impl AsRef<str>) -> Call {
        self.request(Method::PUT, path)
    }

    fn delete(&self, path: impl AsRef<str>) -> Call {
        self.request(Method::DELETE, path)
    }

    /// `GET path` from the server's root.
    fn get_raw(&self, path: impl AsRef<str>) -> Call {
        self.raw(Method::GET, path)
    }

    /// `POST path` from the server's root.
    fn post_raw(&self, path: impl AsRef<str>) -> Call {
        self.raw(Method::POST, path)
    }

    /// A JSON-RPC request to `/mcp` as `token` (plain JSON, no MCP session), accepting either
    /// answer form as a client must.
    fn mcp_post(&self, token: impl Display) -> Call {
        self.post_raw("/mcp")
            .as_(token)
            .header("accept", "application/json, text/event-stream")
    }

    /// `initialize` (2025-11-25) as `token`: the `Mcp-Session-Id` the server opened.
    fn mcp_initialize(&self, token: impl Display) -> impl Future<Output = String> {
        let call = self.mcp_post(token).json(serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "aperture-tests", "version": "0"}}
        }));
        async move {
            let reply = call.await.expect_status(StatusCode::OK);
            reply.header("mcp-session-id").to_owned()
        }
    }

    /// Sets the descriptor of `tool` (`PUT /tools/{name}`) as `admin`; must succeed.
    fn describe(&self, admin: &str, tool: &str, descriptor: Value) -> impl Future<Output = ()> {
        let put = self
            .put(format!("/tools/{tool}"))
            .as_(admin)
            .json(descriptor);
        async move {
            put.await.expect_status(StatusCode::OK);
        }
    }

    /// Puts policy `id` (rules and the rest of the body as given) and activates it, as an admin
    /// would; both must succeed.
    fn activate_policy(&self, admin: &str, id: &str, policy: Value) -> impl Future<Output = ()> {
        let put = self.put(format!("/policies/{id}")).as_(admin).json(policy);
        let activate = self.post(format!("/policies/{id}:activate")).as_(admin);
        async move {
            put.await.expect_status(StatusCode::OK);
            activate.await.expect_status(StatusCode::OK);
        }
    }
}

/// A server in another process (`aperture serve`) at `base`, asked with a plain client.
#[derive(Clone)]
pub struct Remote {
    pub base: String,
    pub client: Client,
}

impl Remote {
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            client: Client::new(),
        }
    }
}

impl Requests for Remote {
    fn http(&self) -> &Client {
        &self.client
    }

    fn base(&self) -> &str {
        &self.base
    }
}

/// How long `.await` on a [`Call`] waits for the whole answer: far longer than any request of
/// the suite takes (the slowest, a page on a loaded machine, takes seconds).
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(120);

/// A request being written; `.await` sends it and reads the answer.
pub struct Call {
    request: reqwest::RequestBuilder,
    /// `METHOD path` and the JSON sent, for failure messages.
    label: String,
}

impl Call {
    pub fn new(client: &Client, method: Method, url: String) -> Self {
        let path = url.splitn(4, '/').nth(3).unwrap_or_default();
        Self {
            label: format!("{method} /{path}"),
            request: client.request(method, url),
        }
    }

    /// As the holder of `token` (`Authorization: Bearer`).
    pub fn as_(mut self, token: impl Display) -> Self {
        self.request = self.request.bearer_auth(token);
        self
    }

    /// With `body` as JSON.
    pub fn json(mut self, body: impl serde::Serialize) -> Self {
        let body = serde_json::to_value(body).expect("a JSON body");
        let shown = body.to_string();
        let shown: String = shown.chars().take(400).collect();
        self.label = format!("{} {shown}", self.label);
        self.request = self.request.json(&body);
        self
    }

    pub fn header(mut self, name: &str, value: impl AsRef<str>) -> Self {
        self.request = self.request.header(name, value.as_ref());
        self
    }

    /// With these bytes as the body (a content type is the caller's to set).
    pub fn body(mut self, body: impl Into<reqwest::Body>) -> Self {
        self.request = self.request.body(body);
        self
    }

    /// With `form` URL-encoded as the body.
    pub fn form(mut self, form: &impl serde::Serialize) -> Self {
        self.request = self.request.form(form);
        self
    }

    /// Sent, the answer's head only: for a stream, read as it comes.
    pub async fn open(self) -> reqwest::Response {
        let label = self.label;
        self.request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"))
    }

    /// Sent and read whole, or the error that stopped either (for a server that may be gone).
    pub async fn try_send(self) -> Result<Reply, reqwest::Error> {
        let response = self.request.send().await?;
        let (status, headers) = (response.status(), response.headers().clone());
        let body = response.bytes().await?.to_vec();
        Ok(Reply {
            label: self.label,
            status,
            headers,
            body,
        })
    }
}

impl IntoFuture for Call {
    type Output = Reply;
    type IntoFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let label = self.label.clone();
            // A request that is never answered fails the test naming it, rather than holding
            // the whole run until CI gives up on it.
            tokio::time::timeout(ANSWER_WITHIN, self.try_send())
                .await
                .unwrap_or_else(|_| panic!("{label}: no answer within {ANSWER_WITHIN:?}"))
                .unwrap_or_else(|e| panic!("{label}: {e}"))
        })
    }
}

/// An answer, read whole.
pub struct Reply {
    label: String,
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The value of header `name`; it must be there.
    #[track_caller]
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("{}: no {name} header", self.label))
            .to_str()
            .expect("a text header")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; it must be JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{self}: not JSON: {e}"))
    }

    /// The body as JSON, `Null` when it is not.
    pub fn json_or_null(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// Answered with `status`.
    #[track_caller]
    pub fn expect_status(self, status: StatusCode) -> Self {
        assert_eq!(self.status, status, "{self}");
        self
    }

    /// Answered 200 with JSON: the JSON.
    #[track_caller]
    pub fn expect_ok(self) -> Value {
        self.expect_status(StatusCode::OK).json()
    }

    /// Answered 201 with JSON: the JSON.
    #[track_caller]
    pub fn expect_created(self) -> Value {
        self.expect_status(StatusCode::CREATED).json()
    }

    /// Answered `status` with an API error (`{"error": {"code": …}}`) whose code is `code`.
    #[track_caller]
    pub fn expect_error(self, status: StatusCode, code: &str) -> Self {
        let body = self.json_or_null();
        let said = body["error"]["code"].as_str().or(body["code"].as_str());
        assert_eq!((self.status, said), (status, Some(code)), "{self}");
        self
    }

    /// A client error whose first invalid field (`error.details.fields[0]`) is at `path`: that
    /// field's entry (`path`, `message`).
    #[track_caller]
    pub fn expect_field_error(self, path: &str) -> Value {
        assert!(self.status.is_client_error(), "{self}");
        let mut body = self.json();
        let field = body["error"]["details"]["fields"][0].take();
        assert_eq!(field["path"], path, "{self}");
        field
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = String::from_utf8_lossy(&self.body);
        let body: String = body.chars().take(2000).collect();
        write!(f, "{} answered {}: {body}", self.label, self.status)
    }
}
