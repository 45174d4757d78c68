//! Issue 47, item 1: stock MCP clients, by the tenant's explicit choice. `GET`/`PUT
//! /settings/mcp` (admin, journaled, also over Connect), and the `implicit` binding of `/mcp`
//! calls that carry none of the five echo keys: bound to the principal's newest live plain
//! listing (per `Mcp-Session-Id` in the 2025 eras, per environment in 2026-07-28), or to a grant
//! made for the call; every other check of CONTRACT §5 unchanged; receipts say `binding`.

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, rpc, text_of};

const ECHO: &str = "mcp__fixture__echo";

/// The era of 2026-07-28 as a request carries it (header and `_meta`).
const STATELESS: &str = "2026-07-28";

struct Setup {
    app: TestApp,
    admin: String,
    reader: String,
    agent: String,
}

async fn setup_on(app: TestApp) -> Setup {
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    Setup {
        app,
        admin,
        reader,
        agent,
    }
}

async fn setup() -> Setup {
    setup_on(TestApp::spawn().await).await
}

impl Setup {
    /// Registers the fixture a second time, as upstream `other`: the same tools and prompts.
    async fn register_other(&self) {
        let body = json!({"name": "other", "transport": "stdio",
                          "command": crate::helpers::fixture_command()});
        self.app
            .post("/upstreams")
            .as_(&self.admin)
            .json(body)
            .await
            .expect_created();
    }

    /// `PUT /settings/mcp` as the admin; must succeed.
    async fn settings(&self, document: Value) -> Value {
        let put = self
            .app
            .put("/settings/mcp")
            .as_(&self.admin)
            .json(document);
        put.await.expect_ok()
    }

    /// A `tools/list` on the 2025-era MCP session `session` (none: a plain POST) with `meta`.
    async fn list(&self, token: &str, session: Option<&str>, meta: Value) -> Value {
        let mut post = self.app.mcp_post(token);
        if let Some(s) = session {
            post = post.header("mcp-session-id", s);
            post = post.header("mcp-protocol-version", "2025-11-25");
        }
        let answer = post
            .json(rpc(1, "tools/list", json!({"_meta": meta})))
            .await;
        let body = answer.expect_status(StatusCode::OK).json();
        assert!(body.get("error").is_none(), "{body}");
        body["result"].clone()
    }

    /// A stock client's `tools/call` (`meta`: whatever `_meta` it sends; nothing of the echo
    /// unless a test puts it there) on `session`: the result.
    async fn call(&self, token: &str, session: Option<&str>, tool: &str, meta: Value) -> Value {
        let mut post = self.app.mcp_post(token);
        if let Some(s) = session {
            post = post.header("mcp-session-id", s);
            post = post.header("mcp-protocol-version", "2025-11-25");
        }
        let params = json!({"name": tool, "arguments": {"text": "stock"}, "_meta": meta});
        let body = post.json(rpc(2, "tools/call", params)).await.json();
        assert!(body.get("error").is_none(), "{body}");
        body["result"].clone()
    }

    /// The same in 2026-07-28 (no session; the era's `_meta` fields).
    async fn call_stateless(&self, token: &str, tool: &str, meta: Value) -> Value {
        let mut meta = meta;
        meta["io.modelcontextprotocol/protocolVersion"] = json!(STATELESS);
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let params = json!({"name": tool, "arguments": {"text": "stock"}, "_meta": meta});
        let post = self.app.mcp_post(token);
        let post = post.header("mcp-protocol-version", STATELESS);
        let post = post
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool);
        let body = post.json(rpc(3, "tools/call", params)).await.json();
        assert!(body.get("error").is_none(), "{body}");
        body["result"].clone()
    }

    /// `tools/list` in 2026-07-28 with `meta`.
    async fn list_stateless(&self, token: &str, meta: Value) -> Value {
        let mut meta = meta;
        meta["io.modelcontextprotocol/protocolVersion"] = json!(STATELESS);
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let post = self.app.mcp_post(token);
        let post = post.header("mcp-protocol-version", STATELESS);
        let post = post.header("mcp-method", "tools/list");
        let body = post
            .json(rpc(4, "tools/list", json!({"_meta": meta})))
            .await
            .json();
        assert!(body.get("error").is_none(), "{body}");
        body["result"].clone()
    }

    /// A receipt read back from the journal (`GET /receipts/{id}`).
    async fn receipt(&self, id: &Value) -> Value {
        let id = id.as_str().expect("a receipt id");
        let read = self.app.get(format!("/receipts/{id}")).as_(&self.reader);
        read.await.expect_ok()["receipt"].clone()
    }

    /// The manifest receipts of exposure session `session_id`.
    async fn manifest_receipts(&self, session_id: &Value) -> Vec<Value> {
        let session_id = session_id.as_str().expect("a session id");
        let path = format!("/receipts?session_id={session_id}");
        let rows = self.app.get(path).as_(&self.reader).await.expect_ok();
        let mut out = Vec::new();
        for row in rows["receipts"].as_array().expect("receipts") {
            if row["kind"] == "manifest" {
                out.push(self.receipt(&row["receipt_id"]).await);
            }
        }
        out
    }
}

fn receipt(result: &Value) -> &Value {
    &result["_meta"]["receipt"]
}

fn reason(result: &Value) -> &str {
    receipt(result)["reason"].as_str().unwrap_or_default()
}

/// `GET`/`PUT /settings/mcp`: the defaults are the seed's contract; only an admin reads or
/// writes them; a bad document is a 422 naming every bad field and changes nothing; a good one
/// is journaled; Connect serves the same methods.
#[tokio::test]
async fn mcp_settings_are_an_admins_journaled_choice() {
    let s = setup().await;
    let app = &s.app;
    let defaults = json!({"binding": "echo", "tool_names": "prefixed", "environments": {}});
    let read = app.get("/settings/mcp").as_(&s.admin).await.expect_ok();
    assert_eq!(read, defaults);
    for token in [&s.agent, &s.reader] {
        let get = app.get("/settings/mcp").as_(token).await;
        get.expect_error(StatusCode::FORBIDDEN, "permission_denied");
        let put = app.put("/settings/mcp").as_(token);
        let put = put.json(json!({"binding": "implicit"})).await;
        put.expect_error(StatusCode::FORBIDDEN, "permission_denied");
    }
    let bad = json!({"binding": "loose", "environments": {"dev": {"tool_names": "short"}}});
    let refused = app.put("/settings/mcp").as_(&s.admin).json(bad).await;
    let refused = refused
        .expect_status(StatusCode::UNPROCESSABLE_ENTITY)
        .json();
    let paths: Vec<&str> = refused["error"]["details"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["binding", "environments.dev.tool_names"],
        "{refused}"
    );
    let read = app.get("/settings/mcp").as_(&s.admin).await.expect_ok();
    assert_eq!(read, defaults, "a refused document changes nothing");

    let set = s
        .settings(json!({"environments": {"dev": {"binding": "implicit"}}}))
        .await;
    let expected = json!({"binding": "echo", "tool_names": "prefixed",
                          "environments": {"dev": {"binding": "implicit"}}});
    assert_eq!(set, expected);
    let read = app.get("/settings/mcp").as_(&s.admin).await.expect_ok();
    assert_eq!(read, expected);
    let records = aperture_core::store::journal::search(
        &app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter {
            actor_id: Some("ops".into()),
            ..Default::default()
        },
        100,
    )
    .await
    .unwrap();
    let journaled: Vec<Value> = records
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.disclosures).unwrap())
        .filter(|d| d["action"] == "settings.mcp")
        .collect();
    assert_eq!(
        journaled.len(),
        1,
        "only the accepted document is journaled"
    );
    assert_eq!(journaled[0]["subject"]["mcp"], expected);

    // Connect: the same service.
    let service = aperture::api::connect::SERVICE;
    let get = app.post_raw(format!("{service}/GetMcpSettings"));
    let got = get.as_(&s.admin).json(json!({})).await.expect_ok();
    assert_eq!(got, expected);
    let put = app
        .post_raw(format!("{service}/PutMcpSettings"))
        .as_(&s.admin);
    let put = put
        .json(json!({"binding": "implicit", "tool_names": "prefixed"}))
        .await;
    assert_eq!(put.expect_ok()["binding"], "implicit");
    let denied = app.post_raw(format!("{service}/GetMcpSettings"));
    let denied = denied.as_(&s.agent).json(json!({})).await;
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
}

/// The tenant's default keeps the echo: a stock client's call is refused with a receipt, and
/// `initialize` tells it to echo. With `implicit`, the same call, after a plain `tools/list` on
/// the same MCP session, runs under that listing's grant, and its receipt says `binding:
/// "implicit"`; `initialize` no longer asks for an echo.
#[tokio::test]
async fn a_stock_client_runs_only_where_the_tenant_binds_implicitly() {
    let s = setup().await;
    let keys: Vec<Jwk> = s.app.keys().await;
    let instructions = |s: &Setup| {
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                          "clientInfo": {"name": "stock", "version": "1"}});
        let post = s.app.mcp_post(&s.agent).json(rpc(0, "initialize", init));
        async move { post.await.expect_ok()["result"]["instructions"].clone() }
    };
    assert!(text_of(&instructions(&s).await).contains("must echo"));

    let session = s.app.mcp_initialize(&s.agent).await;
    let listed = s.list(&s.agent, Some(&session), json!({})).await;
    let strict = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
    assert_eq!(strict["isError"], true);
    assert_eq!(reason(&strict), "manifest_binding_mismatch", "{strict}");
    assert!(receipt(&strict).get("binding").is_none(), "{strict}");

    s.settings(json!({"binding": "implicit"})).await;
    let said = instructions(&s).await;
    assert!(!text_of(&said).contains("echo"), "{said}");
    let called = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
    assert_eq!(called["isError"], false, "{called}");
    assert!(text_of(&called["content"][0]["text"]).contains("stock"));
    let r = receipt(&called);
    assert_eq!(r["binding"], "implicit");
    assert_eq!(r["manifest_id"], listed["_meta"]["manifest_id"]);
    assert_eq!(r["session_id"], listed["_meta"]["session_id"]);
    assert_eq!(r["schema_hash"], listed["tools"][0]["_meta"]["schemaHash"]);
    verify_receipt_json(r, &keys).unwrap();
    // The journal holds the same, signed.
    let journaled = s.receipt(&r["receipt_id"]).await;
    assert_eq!(journaled["binding"], "implicit");
    verify_receipt_json(&journaled, &keys).unwrap();

    // A later listing on the same MCP session is the one calls bind to.
    let relisted = s.list(&s.agent, Some(&session), json!({})).await;
    let again = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
    assert_eq!(
        receipt(&again)["manifest_id"],
        relisted["_meta"]["manifest_id"]
    );

    // Hidden and unknown tools are still refused alike, with a receipt.
    let unknown = s
        .call(&s.agent, Some(&session), "mcp__fixture__add", json!({}))
        .await;
    assert_eq!(reason(&unknown), "not_callable", "{unknown}");
    assert_eq!(receipt(&unknown)["binding"], "implicit");
}

/// Any one of the five echo keys means echo: all five are then required, whatever the setting.
/// Nothing a client sends chooses a grant that is not its own plain listing.
#[tokio::test]
async fn one_echo_key_means_the_echo_and_hinted_listings_never_bind() {
    let s = setup().await;
    s.settings(json!({"binding": "implicit"})).await;
    let session = s.app.mcp_initialize(&s.agent).await;
    let listed = s.list(&s.agent, Some(&session), json!({})).await;
    for key in [
        "session_id",
        "manifest_id",
        "lease_id",
        "tool_version",
        "expected_schema_hash",
    ] {
        let meta = match key {
            "tool_version" => json!({"tool_version": listed["tools"][0]["_meta"]["toolVersion"]}),
            "expected_schema_hash" => {
                json!({"expected_schema_hash": listed["tools"][0]["_meta"]["schemaHash"]})
            }
            _ => json!({key: listed["_meta"][key]}),
        };
        let partial = s.call(&s.agent, Some(&session), ECHO, meta).await;
        assert_eq!(partial["isError"], true, "{key}: {partial}");
        assert!(
            receipt(&partial).get("binding").is_none(),
            "{key}: {partial}"
        );
    }

    // A listing with a preset, an entity or a session_id hint is not a call's implicit grant:
    // on an MCP session that listed only with hints, a call gets a grant made for it.
    let hinted_session = s.app.mcp_initialize(&s.agent).await;
    let preset = s
        .list(&s.agent, Some(&hinted_session), json!({"preset": "triage"}))
        .await;
    let entity = s
        .list(&s.agent, Some(&hinted_session), json!({"entity": "acct-1"}))
        .await;
    let named = json!({"session_id": listed["_meta"]["session_id"]});
    let renamed = s.list(&s.agent, Some(&hinted_session), named).await;
    let called = s
        .call(&s.agent, Some(&hinted_session), ECHO, json!({}))
        .await;
    assert_eq!(called["isError"], false, "{called}");
    let bound_to = &receipt(&called)["manifest_id"];
    for hinted in [&preset, &entity, &renamed, &listed] {
        assert_ne!(bound_to, &hinted["_meta"]["manifest_id"]);
    }
    // That grant is recorded as made implicitly, and later calls on the session reuse it.
    let made = s.manifest_receipts(&receipt(&called)["session_id"]).await;
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["binding"], "implicit");
    assert_eq!(&made[0]["manifest_id"], bound_to);
    let reused = s
        .call(&s.agent, Some(&hinted_session), ECHO, json!({}))
        .await;
    assert_eq!(&receipt(&reused)["manifest_id"], bound_to);
}

/// A client that never lists (the conformance suite's own does not) gets a grant made exactly
/// as a plain `tools/list` would make it; a principal never binds to another principal's
/// grant, even of the same actor, nor on another MCP session.
#[tokio::test]
async fn calls_without_a_listing_get_their_own_principals_grant() {
    let s = setup().await;
    s.settings(json!({"binding": "implicit"})).await;
    let first = s.app.mcp_initialize(&s.agent).await;
    let called = s.call(&s.agent, Some(&first), ECHO, json!({})).await;
    assert_eq!(called["isError"], false, "{called}");
    let mine = receipt(&called)["manifest_id"].clone();
    let made = s.manifest_receipts(&receipt(&called)["session_id"]).await;
    assert_eq!(made[0]["binding"], "implicit");
    assert_eq!(made[0]["environment"], "default");

    // Another token of the same actor: its own grant.
    let twin = s.app.token("default", "agent", &[scope::RUN]).await;
    let twin_session = s.app.mcp_initialize(&twin).await;
    let theirs = s.call(&twin, Some(&twin_session), ECHO, json!({})).await;
    assert_eq!(theirs["isError"], false, "{theirs}");
    assert_ne!(receipt(&theirs)["manifest_id"], mine);
    // Another MCP session of the same principal: its own grant too.
    let second = s.app.mcp_initialize(&s.agent).await;
    let other = s.call(&s.agent, Some(&second), ECHO, json!({})).await;
    assert_ne!(receipt(&other)["manifest_id"], mine);
    // The first session still binds to its own.
    let back = s.call(&s.agent, Some(&first), ECHO, json!({})).await;
    assert_eq!(receipt(&back)["manifest_id"], mine);
}

/// 2026-07-28 has no MCP session: a call binds to the principal's newest plain listing in the
/// environment it names (the default one when it names none). Environments keep their own
/// settings: implicit in `dev` does not loosen `default`.
#[tokio::test]
async fn without_a_session_calls_bind_per_environment_and_settings_hold_per_environment() {
    let s = setup().await;
    let admin = &s.admin;
    // The built-in safe-read policy holds in `dev` too; the agent may use both environments.
    let body = json!({"actor_id": "dev-agent", "scopes": [scope::RUN],
                      "environments": ["default", "dev"]});
    let made = s
        .app
        .post("/tokens")
        .as_(admin)
        .json(body)
        .await
        .expect_created();
    let agent = made["secret"].as_str().unwrap().to_owned();
    s.settings(json!({"environments": {"dev": {"binding": "implicit"}}}))
        .await;

    let dev = s
        .list_stateless(&agent, json!({"environment": "dev"}))
        .await;
    assert_eq!(dev["_meta"]["environment"], "dev");
    let plain = s.call_stateless(&agent, ECHO, json!({})).await;
    assert_eq!(reason(&plain), "manifest_binding_mismatch", "{plain}");
    let in_dev = s
        .call_stateless(&agent, ECHO, json!({"environment": "dev"}))
        .await;
    assert_eq!(in_dev["isError"], false, "{in_dev}");
    assert_eq!(receipt(&in_dev)["manifest_id"], dev["_meta"]["manifest_id"]);
    assert_eq!(receipt(&in_dev)["environment"], "dev");
    assert_eq!(receipt(&in_dev)["binding"], "implicit");

    // A newer dev listing is the one; a 2025-era listing is not a 2026 call's grant.
    let session = s.app.mcp_initialize(&agent).await;
    s.list(&agent, Some(&session), json!({"environment": "dev"}))
        .await;
    let newer = s
        .list_stateless(&agent, json!({"environment": "dev"}))
        .await;
    let again = s
        .call_stateless(&agent, ECHO, json!({"environment": "dev"}))
        .await;
    assert_eq!(
        receipt(&again)["manifest_id"],
        newer["_meta"]["manifest_id"]
    );

    // The remaining echo check holds: a tool changed since the grant is refused as drift.
    let bump = s.app.put(format!("/tools/{ECHO}")).as_(admin);
    bump.json(json!({"risk": ["read"], "version": "2"}))
        .await
        .expect_ok();
    let drifted = s
        .call_stateless(&agent, ECHO, json!({"environment": "dev"}))
        .await;
    assert_eq!(reason(&drifted), "manifest_drift", "{drifted}");
    assert_eq!(receipt(&drifted)["binding"], "implicit");

    // An environment the caller may not use is refused like any unbound call.
    let elsewhere = s
        .call_stateless(&s.agent, ECHO, json!({"environment": "dev"}))
        .await;
    assert_eq!(
        reason(&elsewhere),
        "manifest_binding_mismatch",
        "{elsewhere}"
    );
}

/// Implicit grants are kept in the database: a listing on one node binds a call on another.
#[tokio::test]
async fn every_node_binds_a_call_to_the_same_grant() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    let s = setup_on(app).await;
    s.settings(json!({"binding": "implicit"})).await;
    let listed = s.list_stateless(&s.agent, json!({})).await;
    let other = s.app.another_node().await;
    let mut meta = json!({});
    meta["io.modelcontextprotocol/protocolVersion"] = json!(STATELESS);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let params = json!({"name": ECHO, "arguments": {"text": "there"}, "_meta": meta});
    let post = other
        .mcp_post(&s.agent)
        .header("mcp-protocol-version", STATELESS);
    let post = post
        .header("mcp-method", "tools/call")
        .header("mcp-name", ECHO);
    let called = post.json(rpc(5, "tools/call", params)).await.json();
    let result = &called["result"];
    assert_eq!(result["isError"], false, "{called}");
    assert_eq!(
        receipt(result)["manifest_id"],
        listed["_meta"]["manifest_id"]
    );
}

/// `tool_names: "upstream"`: `/mcp` lists a tool under its upstream's own name where it is
/// unique within the manifest (a name two upstreams share keeps its prefix), with
/// `_meta.canonicalName`, a schema hash covering the name listed, calls by that name (echoed or
/// not), receipts in the canonical identity; REST keeps canonical names, and a fork's copied
/// grant keeps its parent's names.
#[tokio::test]
async fn upstream_names_are_listed_where_unique_and_receipts_keep_the_canonical_name() {
    let s = setup().await;
    let app = &s.app;
    s.register_other().await;
    for tool in ["mcp__fixture__add", "mcp__other__add"] {
        app.describe(&s.admin, tool, json!({"risk": ["read"]}))
            .await;
    }
    let prefixed = s.list(&s.agent, None, json!({})).await;
    let names = TestApp::tool_names(&prefixed);
    assert_eq!(names, ["mcp__fixture__add", ECHO, "mcp__other__add"]);
    assert!(prefixed["tools"][0]["_meta"].get("canonicalName").is_none());

    s.settings(json!({"binding": "implicit", "tool_names": "upstream"}))
        .await;
    let listed = s.list(&s.agent, None, json!({})).await;
    assert_eq!(
        TestApp::tool_names(&listed),
        ["mcp__fixture__add", "echo", "mcp__other__add"],
        "{listed}"
    );
    let canonical: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["_meta"]["canonicalName"].as_str().unwrap())
        .collect();
    assert_eq!(canonical, ["mcp__fixture__add", ECHO, "mcp__other__add"]);
    let echo = crate::helpers::find(&listed["tools"], "name", "echo");
    let before = crate::helpers::find(&prefixed["tools"], "name", ECHO);
    assert_ne!(echo["_meta"]["schemaHash"], before["_meta"]["schemaHash"]);
    let add = crate::helpers::find(&listed["tools"], "name", "mcp__fixture__add");
    let add_before = crate::helpers::find(&prefixed["tools"], "name", "mcp__fixture__add");
    assert_eq!(
        add["_meta"]["schemaHash"],
        add_before["_meta"]["schemaHash"]
    );

    // A stock client calls it by the name it was shown.
    let stock = s.call(&s.agent, None, "echo", json!({})).await;
    assert_eq!(stock["isError"], false, "{stock}");
    assert_eq!(receipt(&stock)["tool"], ECHO);
    assert_eq!(
        receipt(&stock)["manifest_id"],
        listed["_meta"]["manifest_id"]
    );
    // So does a client that echoes (its schema hash is the one listed for that name).
    let echoed = app
        .mcp_call(&s.agent, &listed, "echo", json!({"text": "echoed"}))
        .await;
    assert_eq!(echoed["isError"], false, "{echoed}");
    assert_eq!(receipt(&echoed)["tool"], ECHO);
    assert!(receipt(&echoed).get("binding").is_none());

    // REST keeps the canonical names.
    let rest = app.new_session(&s.agent, json!({})).await;
    assert_eq!(
        TestApp::tool_names(&rest),
        ["mcp__fixture__add", ECHO, "mcp__other__add"]
    );

    // A fork of the listed session lists its parent's grant, names and all.
    let sid = listed["_meta"]["session_id"].as_str().unwrap();
    let forked = app.post(format!("/sessions/{sid}/forks")).as_(&s.agent);
    let forked = forked.json(json!({"fork_tools": [ECHO]})).await;
    let forked = forked.expect_created();
    let fork_id = forked["_meta"]["session_id"].clone();
    let fork_list = s.list(&s.agent, None, json!({"session_id": fork_id})).await;
    assert_eq!(
        TestApp::tool_names(&fork_list),
        TestApp::tool_names(&listed)
    );
    assert_eq!(fork_list["tools"], listed["tools"]);
}

/// A stock client cannot echo an `invocation_id`: a call bound implicitly that waits for an
/// approver is found again by repeating it (same principal, grant, tool, `args_hash`) — its
/// status while it waits, its result once, then a repeat is a new call. Other arguments or
/// another principal are other calls. `confirmation_required` cannot be confirmed without
/// `_meta`: refused, with a receipt.
#[tokio::test]
async fn a_stock_client_hears_how_its_parked_call_ends_by_repeating_it() {
    let s = setup().await;
    let app = &s.app;
    let policy = json!({"rules": [
        {"id": "park-echo", "match": {"name": ECHO}, "mode": "approval_required"},
        {"id": "confirm-add", "match": {"name": "mcp__fixture__add"}, "mode": "confirmation_required"}
    ]});
    app.activate_policy(&s.admin, "park", policy).await;
    s.settings(json!({"binding": "implicit"})).await;
    let approver = app
        .token("default", "lead", &[scope::APPROVE, scope::READ])
        .await;
    let session = app.mcp_initialize(&s.agent).await;

    let parked = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
    assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
    assert!(text_of(&parked["content"][0]["text"]).contains("identical call"));
    let id = parked["_meta"]["invocation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
    assert_eq!(again["_meta"]["status"], "input_required", "{again}");
    assert_eq!(again["_meta"]["invocation_id"], id.as_str());
    // Other arguments are another call; so is another principal's identical call.
    let params = json!({"name": ECHO, "arguments": {"text": "other"}});
    let post = app.mcp_post(&s.agent).header("mcp-session-id", &session);
    let post = post.header("mcp-protocol-version", "2025-11-25");
    let other = post.json(rpc(9, "tools/call", params)).await.json();
    assert_ne!(
        other["result"]["_meta"]["invocation_id"],
        id.as_str(),
        "{other}"
    );
    let twin = app.token("default", "agent", &[scope::RUN]).await;
    let twin_session = app.mcp_initialize(&twin).await;
    let theirs = s.call(&twin, Some(&twin_session), ECHO, json!({})).await;
    assert_ne!(theirs["_meta"]["invocation_id"], id.as_str());

    let view = app
        .get(format!("/invocations/{id}"))
        .as_(&approver)
        .await
        .expect_ok();
    let decision =
        json!({"args_hash": view["args_hash"], "definition_hash": view["definition_hash"]});
    let approve = app
        .post(format!("/invocations/{id}:approve"))
        .as_(&approver);
    approve.json(decision).await.expect_ok();
    let mut done = Value::Null;
    for _ in 0..100 {
        done = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
        if done["_meta"]["status"] != "working" && done["_meta"]["status"] != "input_required" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(done["isError"], false, "{done}");
    assert!(
        text_of(&done["content"][0]["text"]).contains("stock"),
        "{done}"
    );
    // Had once: the next identical call is a new one, parked anew.
    let anew = s.call(&s.agent, Some(&session), ECHO, json!({})).await;
    assert_eq!(anew["_meta"]["status"], "input_required", "{anew}");
    assert_ne!(anew["_meta"]["invocation_id"], id.as_str());

    let params = json!({"name": "mcp__fixture__add", "arguments": {"a": 1, "b": 2}});
    let post = app.mcp_post(&s.agent).header("mcp-session-id", &session);
    let post = post.header("mcp-protocol-version", "2025-11-25");
    let confirm = post.json(rpc(10, "tools/call", params)).await.json();
    let confirm = &confirm["result"];
    assert_eq!(confirm["isError"], true, "{confirm}");
    assert_eq!(reason(confirm), "policy_denied");
    assert_eq!(receipt(confirm)["mode"], "confirmation_required");
    assert_eq!(receipt(confirm)["binding"], "implicit");
}

/// `tool_names: "upstream"` names prompts as it names tools: a stock client lists, gets and
/// completes a prompt by its upstream's own name where that is unambiguous, each listing
/// carries the canonical name, and receipts keep the canonical one; names two upstreams share
/// keep their prefix, and without the setting every prompt keeps it.
#[tokio::test]
async fn prompts_follow_the_tool_names_setting() {
    let s = setup().await;
    let app = &s.app;
    s.register_other().await;
    let rules = json!({"rules": [
        {"id": "greet", "prompt": "mcp__fixture__greet", "mode": "allow"},
        {"id": "summary", "prompt": "mcp__fixture__summarize", "mode": "allow"},
        {"id": "other-summary", "prompt": "mcp__other__summarize", "mode": "allow"},
        {"id": "tools", "mode": "allow"}
    ]});
    app.activate_policy(&s.admin, "prompts", rules).await;
    let ask = |method: &'static str, params: Value| {
        let agent = s.agent.clone();
        async move { app.mcp(&agent, rpc(5, method, params)).await }
    };
    let names = |listed: &Value| -> Vec<String> {
        listed["result"]["prompts"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let prefixed = ask("prompts/list", json!({})).await;
    assert_eq!(
        names(&prefixed),
        [
            "mcp__fixture__greet",
            "mcp__fixture__summarize",
            "mcp__other__summarize"
        ]
    );

    s.settings(json!({"binding": "implicit", "tool_names": "upstream"}))
        .await;
    let listed = ask("prompts/list", json!({})).await;
    // `greet` is listed by one upstream only (the other's is not allowed); both offer
    // `summarize`.
    assert_eq!(
        names(&listed),
        ["greet", "mcp__fixture__summarize", "mcp__other__summarize"]
    );
    assert_eq!(
        listed["result"]["prompts"][0]["_meta"]["canonicalName"],
        "mcp__fixture__greet"
    );
    let got = ask(
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "Ada"}}),
    )
    .await;
    assert!(got.get("result").is_some(), "{got}");
    let receipt = &got["result"]["_meta"]["receipt"];
    assert_eq!(receipt["tool"], "mcp__fixture__greet", "{receipt}");
    let completed = ask(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "greet"},
               "argument": {"name": "name", "value": "al"}}),
    )
    .await;
    assert_eq!(
        completed["result"]["completion"]["values"],
        json!(["alice", "albert"]),
        "{completed}"
    );
    // A shared name is no name: `summarize` alone is not found.
    let shared = ask("prompts/get", json!({"name": "summarize"})).await;
    assert_eq!(shared["error"]["code"], -32602, "{shared}");
}
