//! `tools/call`: every check of CONTRACT §5 that exists at this stage, end to end through
//! `POST /mcp` (and the REST `POST /sessions/{id}/calls`, which shares the pipeline), in front
//! of the real fixture upstream, with verifiable receipts and a count of what reached it.

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Call, Requests, TestApp, echo_of, find, rpc, text_of};

struct Setup {
    app: TestApp,
    agent: String,
    session: Value,
    keys: Vec<Jwk>,
}

async fn setup() -> Setup {
    setup_on(TestApp::spawn().await).await
}

async fn setup_on(app: TestApp) -> Setup {
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(
        &admin,
        &[
            "mcp__fixture__echo",
            "mcp__fixture__add",
            "mcp__fixture__big",
            "mcp__fixture__stats",
        ],
    )
    .await;
    let policy = json!({"rules": [
        {"id": "big-capped", "match": {"name": "mcp__fixture__big"}, "mode": "allow", "invocation": {"max_result_bytes": 200}},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "p", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let session: Value = app.post("/sessions").as_(&agent).await.json();
    let set: Value = app.get_raw("/.well-known/aperture/keys").await.json();
    let keys = serde_json::from_value(set["keys"].clone()).unwrap();
    Setup {
        app,
        agent,
        session,
        keys,
    }
}

impl Setup {
    fn echo(&self, tool: &str) -> Value {
        echo_of(&self.session, tool)
    }

    /// `tools/call` over `/mcp` (JSON-RPC), as MCP clients send it.
    async fn call_as(&self, token: &str, tool: &str, arguments: Value, meta: Value) -> Value {
        let params = json!({"name": tool, "arguments": arguments, "_meta": meta});
        let call = self.app.mcp_post(token).json(rpc(1, "tools/call", params));
        let answer = call.await.expect_ok();
        let result = answer["result"].clone();
        verify_receipt_json(&result["_meta"]["receipt"], &self.keys).unwrap_or_else(|e| {
            panic!("every answer carries a receipt that verifies: {e}: {answer}")
        });
        result
    }

    /// Calls the upstream has received so far (its `stats` tool, called through the gateway,
    /// counts itself).
    async fn upstream_calls(&self) -> u64 {
        let stats = self.call("mcp__fixture__stats", json!({})).await;
        stats["structuredContent"]["calls"]
            .as_u64()
            .unwrap_or_else(|| panic!("{stats}"))
    }

    /// `tools/call` of `tool` with the grant's echo through the REST route.
    async fn call_rest(&self, tool: &str, arguments: Value) -> Value {
        let sid = self.session["_meta"]["session_id"].as_str().unwrap();
        let body = json!({"name": tool, "arguments": arguments, "_meta": self.echo(tool)});
        let call = self
            .app
            .post(format!("/sessions/{sid}/calls"))
            .as_(&self.agent);
        let result = call.json(body).await.expect_ok();
        verify_receipt_json(&result["_meta"]["receipt"], &self.keys)
            .expect("every answer carries a receipt that verifies");
        result
    }

    /// `tools/call` of `tool` as the agent, with `meta` as `_meta`.
    async fn call_with(&self, tool: &str, arguments: Value, meta: Value) -> Value {
        self.call_as(&self.agent, tool, arguments, meta).await
    }

    /// `tools/call` of `tool` as the agent, with the grant's echo as `_meta`.
    async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.call_with(tool, arguments, self.echo(tool)).await
    }
}

fn reason(result: &Value) -> &str {
    result["_meta"]["receipt"]["reason"].as_str().unwrap()
}

#[tokio::test]
async fn an_allowed_call_runs_upstream_and_returns_an_execution_receipt() {
    let s = setup().await;
    let over_rest = s
        .call_rest("mcp__fixture__echo", json!({"text": "hello"}))
        .await;
    let result = s.call("mcp__fixture__echo", json!({"text": "hello"})).await;
    // Both routes give the same kind of answer.
    assert_eq!(over_rest["isError"], result["isError"]);
    assert_eq!(over_rest["content"], result["content"]);
    assert_eq!(
        over_rest["_meta"]["receipt"]["args_hash"],
        result["_meta"]["receipt"]["args_hash"]
    );
    assert_eq!(result["isError"], false, "{result}");
    assert!(
        text_of(&result["content"][0]["text"]).contains("hello"),
        "{result}"
    );
    let receipt = &result["_meta"]["receipt"];
    assert_eq!(receipt["kind"], "execution");
    assert_eq!(receipt["decision"], "allow");
    assert_eq!(
        receipt["args_hash"],
        engine::canonical::args_hash(&json!({"text": "hello"})).unwrap()
    );
    assert!(text_of(&receipt["target"]["endpoint_fingerprint"]).starts_with("sha256:"));
    // Caller receipts reveal no argument values.
    assert!(!receipt.to_string().contains("hello"));
    let reports = aperture_core::journal::verify(&s.app.store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()));
}

/// Calls read their grant from memory (store::cache) while nothing changed; revoking the
/// session changes something, and the very next call is refused without reaching the upstream.
#[tokio::test]
async fn a_session_revoked_after_calls_refuses_the_next_call() {
    let s = setup().await;
    for _ in 0..3 {
        let ok = s.call("mcp__fixture__echo", json!({"text": "hi"})).await;
        assert_eq!(ok["isError"], false, "{ok}");
    }
    let before = s.upstream_calls().await;
    let admin = s.app.token("default", "sec", &[scope::ADMIN]).await;
    let sid = s.session["_meta"]["session_id"].as_str().unwrap();
    // A fork of the session, which the revocation must stop too.
    let fork = s.app.post(format!("/sessions/{sid}/forks"));
    let fork = fork.as_(&s.agent).json(json!({})).await.json();
    let fork_meta = {
        let mut m = s.echo("mcp__fixture__echo");
        for k in ["session_id", "manifest_id", "lease_id"] {
            m[k] = fork["_meta"][k].clone();
        }
        m
    };
    let reply = s.app.post(format!("/sessions/{sid}:revoke"));
    let reply = reply.as_(&admin).await;
    reply.expect_status(StatusCode::OK);
    let refused = s.call("mcp__fixture__echo", json!({"text": "hi"})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(reason(&refused), "manifest_binding_mismatch");
    let forked = s
        .call_with("mcp__fixture__echo", json!({"text": "hi"}), fork_meta)
        .await;
    assert_eq!(reason(&forked), "manifest_binding_mismatch", "{forked}");
    // The stats call itself is refused now too, so count through the store's journal instead:
    // no execution receipt after the revocation.
    let executions = crate::helpers::executions_in_journal(&s.app.store, "default").await;
    // Three echoes and one stats call ran before the revocation; nothing after.
    assert_eq!(executions, before);
}

/// Issue 4 (speed): `/mcp` authenticates a call and reads its grant from memory without asking
/// the store; the decision record confirms, when it is committed, that nothing the cache
/// follows changed. A token revoked behind this server's back (another node on the same
/// database, the CLI) is refused on its very next call with 401: the call decided on the old
/// reads is not recorded, nothing reaches the upstream, and the retry on confirmed reads finds
/// the token revoked.
#[tokio::test]
async fn a_token_revoked_by_another_node_is_refused_on_its_next_call() {
    let s = setup().await;
    let (token_id, secret) = s.app.token_full("default", "agent", &[scope::RUN]).await;
    for _ in 0..3 {
        let ok = s
            .call_as(
                &secret,
                "mcp__fixture__echo",
                json!({"text": "hi"}),
                s.echo("mcp__fixture__echo"),
            )
            .await;
        assert_eq!(ok["isError"], false, "{ok}");
    }
    let reached = s.upstream_calls().await;
    let journaled = || async {
        aperture_core::store::journal::search(&s.app.store, "default", &Default::default(), 10_000)
            .await
            .unwrap()
            .len()
    };
    let records = journaled().await;
    // `s.app.store` is its own connection pool with its own cache: another node.
    aperture_core::store::tokens::revoke(&s.app.store, "default", &token_id)
        .await
        .unwrap()
        .expect("revoked");
    let params = json!({"name": "mcp__fixture__echo", "arguments": {"text": "hi"},
        "_meta": s.echo("mcp__fixture__echo")});
    let refused = s.app.post_raw("/mcp").as_(&secret);
    let refused = refused.json(rpc(1, "tools/call", params)).await;
    refused.expect_status(StatusCode::UNAUTHORIZED);
    assert_eq!(
        journaled().await,
        records,
        "nothing was journaled for the refused call"
    );
    // The stats call itself is one more upstream call; the refused echo is not.
    assert_eq!(s.upstream_calls().await, reached + 1);
}

/// Seed: "The engine denies the call — returning a redacted receipt rather than executing —
/// when any of these hold" (each reason that exists at this stage).
#[tokio::test]
async fn every_check_denies_with_a_verifiable_receipt() {
    let s = setup().await;
    let good = s.echo("mcp__fixture__echo");
    let args = json!({"text": "x"});
    let with = |key: &str, value: Value| {
        let mut m = good.clone();
        m[key] = value;
        m
    };
    let cases = [
        (
            with("manifest_id", json!("man_nope")),
            "manifest_binding_mismatch",
        ),
        (
            with("lease_id", json!("lea_other")),
            "manifest_binding_mismatch",
        ),
        (with("actor_id", json!("someone-else")), "actor_mismatch"),
        (
            with("expected_schema_hash", Value::Null),
            "schema_hash_missing",
        ),
        (with("tool_version", json!("99")), "tool_version_mismatch"),
        (
            with("expected_schema_hash", json!("sha256:0000")),
            "schema_hash_mismatch",
        ),
    ];
    let reached_before = s.upstream_calls().await;
    for (meta, want) in cases {
        let result = s
            .call_with("mcp__fixture__echo", args.clone(), meta.clone())
            .await;
        assert_eq!(result["isError"], true);
        assert_eq!(reason(&result), want, "{meta}");
        assert_eq!(result["_meta"]["receipt"]["decision"], "deny");
    }
    let unknown = s
        .call_with("mcp__fixture__slow", args.clone(), good.clone())
        .await;
    assert_eq!(
        reason(&unknown),
        "not_callable",
        "hidden looks like unknown"
    );
    let bad_args = s
        .call_with("mcp__fixture__echo", json!({"text": 5}), good.clone())
        .await;
    assert_eq!(reason(&bad_args), "arguments_invalid");
    let other = s.app.token("default", "intruder", &[scope::RUN]).await;
    let stolen = s
        .call_as(&other, "mcp__fixture__echo", args.clone(), good.clone())
        .await;
    assert_eq!(reason(&stolen), "actor_mismatch");
    // None of the denials above reached the upstream: only the two `stats` calls did.
    assert_eq!(s.upstream_calls().await, reached_before + 1);

    // Oversize output is rejected before it reaches the journal or the caller.
    let big = s.call("mcp__fixture__big", json!({"bytes": 5000})).await;
    assert_eq!(reason(&big), "result_too_large", "{big}");
    assert!(!big.to_string().contains("xxxxxxxxxx"));

    // Drift: an admin's version change after the grant.
    let admin = s.app.token("default", "ops2", &[scope::ADMIN]).await;
    s.app
        .put("/tools/mcp__fixture__add")
        .as_(&admin)
        .json(json!({"risk": ["read"], "version": "2"}))
        .await;
    let drifted = s.call("mcp__fixture__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(reason(&drifted), "manifest_drift");
    // Oversize output reached the upstream (and was stopped on its way back); drift did not.
    assert_eq!(s.upstream_calls().await, reached_before + 3);

    // Every decision is in the journal, and the chain verifies.
    let reports = aperture_core::journal::verify(&s.app.store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
}

/// Seed: "a deployment that has not wired the spend gate refuses invocations under a capped rule
/// rather than running them uncapped."
#[tokio::test]
async fn a_capped_rule_without_a_spend_gate_is_refused_not_run_uncapped() {
    let mut s = setup().await;
    let admin = s.app.token("default", "ops3", &[scope::ADMIN]).await;
    let policy = json!({"rules": [
        {"id": "capped", "match": {"name": "mcp__fixture__echo"}, "mode": "allow", "invocation": {"max_cost_cents": 5}}
    ]});
    let put = s.app.put("/policies/capped");
    let put = put.as_(&admin).json(&policy).await;
    put.expect_status(StatusCode::OK);
    s.app.post("/policies/capped:activate").as_(&admin).await;
    s.session = s.app.post("/sessions").as_(&s.agent).await.json();
    let result = s.call("mcp__fixture__echo", json!({"text": "spend"})).await;
    assert_eq!(result["isError"], true);
    assert_eq!(reason(&result), "spend_gate_unavailable");
    assert_eq!(
        result["_meta"]["receipt"]["kind"], "decision",
        "no execution receipt: nothing ran"
    );
}

/// Issue 5: "`max_cost_cents` accepted at write, and at execution refused with
/// `spend_gate_unavailable` unless a spend gate is configured (then enforced from the tool's
/// price before contacting the upstream)".
#[tokio::test]
async fn a_spend_gate_holds_calls_to_the_rules_cap_by_the_tools_price() {
    let app = crate::helpers::TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| {
        c.spend_gate = aperture_core::config::SpendGate::Catalog;
    })
    .await
    .unwrap();
    let mut s = setup_on(app).await;
    let admin = s.app.token("default", "ops7", &[scope::ADMIN]).await;
    let policy = json!({"rules": [
        {"id": "cheap-echo", "match": {"name": "mcp__fixture__echo"}, "mode": "allow", "invocation": {"max_cost_cents": 5}},
        {"id": "cheap-add", "match": {"name": "mcp__fixture__add"}, "mode": "allow", "invocation": {"max_cost_cents": 5}},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    s.app.activate_policy(&admin, "capped", policy).await;
    // echo costs 3 cents, add 9; stats has no cap.
    for (tool, price) in [("mcp__fixture__echo", 3), ("mcp__fixture__add", 9)] {
        let priced = json!({"risk": ["read"], "price_cents": price});
        let described = s.app.put(format!("/tools/{tool}")).as_(&admin).json(priced);
        described.await.expect_status(StatusCode::OK);
    }
    s = s.relist().await;
    let before = s.upstream_calls().await;
    let cheap = s.call("mcp__fixture__echo", json!({"text": "ok"})).await;
    assert_eq!(reason(&cheap), "ok", "{cheap}");
    let dear = s.call("mcp__fixture__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(dear["isError"], true);
    assert_eq!(reason(&dear), "policy_denied", "{dear}");
    assert_eq!(dear["_meta"]["receipt"]["kind"], "decision");
    assert_eq!(
        s.upstream_calls().await,
        before + 2,
        "only the cheap call ran"
    );
}

/// Issue 5: "`rate_bucket` enforced by a limiter shared between server processes … refused at
/// policy write when no shared limiter is configured".
#[tokio::test]
async fn rate_buckets_are_enforced_by_the_shared_limiter_or_refused_at_write() {
    let policy = json!({"rules": [
        {"id": "limited", "match": {"name": "mcp__fixture__echo"}, "mode": "allow",
         "invocation": {"rate_bucket": {"name": "echo", "per_minute": 2}}},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    // Without a limiter the policy is refused, naming the field.
    let s = setup().await;
    let admin = s.app.token("default", "ops5", &[scope::ADMIN]).await;
    let refused = s.app.put("/policies/limited");
    let refused = refused.as_(&admin).json(&policy).await;
    let refused = refused.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    refused.expect_field_error("rules[0].invocation.rate_bucket");

    // With the database limiter: two calls a minute, the third refused before the upstream.
    let app = crate::helpers::TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| {
        c.rate_limiter = aperture_core::config::RateLimiter::Database;
    })
    .await
    .unwrap();
    let mut s = setup_on(app).await;
    let admin = s.app.token("default", "ops6", &[scope::ADMIN]).await;
    s.app.activate_policy(&admin, "limited", policy).await;
    s = s.relist().await;
    let before = s.upstream_calls().await;
    // A minute boundary between the calls would start a new count; stay well inside one.
    let into_minute = aperture_core::store::now_ms() % 60_000;
    if into_minute > 50_000 {
        tokio::time::sleep(std::time::Duration::from_millis(
            u64::try_from(61_000 - into_minute).unwrap(),
        ))
        .await;
    }
    for n in 0..2 {
        let ok = s
            .call("mcp__fixture__echo", json!({"text": format!("{n}")}))
            .await;
        assert_eq!(reason(&ok), "ok", "{ok}");
    }
    let limited = s.call("mcp__fixture__echo", json!({"text": "3"})).await;
    assert_eq!(limited["isError"], true);
    assert_eq!(reason(&limited), "rate_limited");
    assert_eq!(limited["_meta"]["receipt"]["kind"], "decision");
    assert_eq!(s.upstream_calls().await, before + 3, "the third never ran");
}

/// Issue 4: "a call whose upstream moved or was re-registered since is refused with
/// `target_drift` (never silently retargeted)". The upstream is removed and registered again
/// under the same name (same tools, same definitions, another command line), so the old grant's
/// call passes every check of the decision and is stopped at the pinned target.
#[tokio::test]
async fn a_re_registered_upstream_is_target_drift_not_a_silent_retarget() {
    let s = setup().await;
    let admin = s.app.token("default", "ops4", &[scope::ADMIN]).await;
    let meta = s.echo("mcp__fixture__echo");
    let before = s
        .call_with("mcp__fixture__echo", json!({"text": "one"}), meta.clone())
        .await;
    assert_eq!(reason(&before), "ok", "{before}");
    assert_eq!(before["_meta"]["receipt"]["kind"], "execution");
    let pinned = before["_meta"]["receipt"]["target"]["upstream_id"].clone();

    let list: Value = s.app.get("/upstreams").as_(&admin).await.json();
    let id = list["upstreams"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(json!(id), pinned);
    let removed = s.app.delete(format!("/upstreams/{id}")).as_(&admin).await;
    let removed = removed.expect_ok();
    assert!(
        removed["removed_tools"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp__fixture__echo")),
        "{removed}"
    );
    // Gone from the catalog: the old grant's call is drift, and nothing runs.
    let gone = s
        .call_with("mcp__fixture__echo", json!({"text": "two"}), meta.clone())
        .await;
    assert_eq!(reason(&gone), "manifest_drift", "{gone}");

    let mut command = crate::helpers::fixture_command();
    command.push("--registration-b".into());
    let again = s
        .app
        .post("/upstreams")
        .as_(&admin)
        .json(json!({"name": "fixture", "transport": "stdio", "command": command}))
        .await;
    let again = again.expect_created();
    assert_ne!(again["upstream"]["id"], pinned);
    let reply = s.app.put("/tools/mcp__fixture__echo");
    let reply = reply.as_(&admin).json(json!({"risk": ["read"]})).await;
    reply.expect_status(StatusCode::OK);

    let drifted = s
        .call_with("mcp__fixture__echo", json!({"text": "three"}), meta)
        .await;
    assert_eq!(reason(&drifted), "target_drift", "{drifted}");
    assert_eq!(drifted["_meta"]["receipt"]["decision"], "deny");
    assert_eq!(
        drifted["_meta"]["receipt"]["target"]["upstream_id"], pinned,
        "the receipt names the pinned target"
    );
    assert!(drifted["structuredContent"].is_null() && !drifted.to_string().contains("three"));

    // A new grant pins the new registration, and its calls run there.
    let fresh: Value = s.app.post("/sessions").as_(&s.agent).await.json();
    let s2 = Setup {
        app: s.app,
        agent: s.agent,
        session: fresh,
        keys: s.keys,
    };
    let after = s2.call("mcp__fixture__echo", json!({"text": "four"})).await;
    assert_eq!(reason(&after), "ok", "{after}");
    assert_eq!(
        after["_meta"]["receipt"]["target"]["upstream_id"],
        again["upstream"]["id"]
    );
}

impl Setup {
    /// A new session of the agent (a fresh grant under the catalog and policy as they are now).
    async fn relist(self) -> Self {
        let session: Value = self.app.post("/sessions").as_(&self.agent).await.json();
        Self { session, ..self }
    }
}

/// `call` (an admin's), which must succeed: its JSON answer.
async fn succeeded(call: Call) -> Value {
    let reply = call.await;
    assert!(reply.status().is_success(), "{reply}");
    reply.json_or_null()
}

/// Issue 4, drift: "when an upstream tool's definition changes after a manifest was granted,
/// the first call is denied with `manifest_drift` ... and the next `tools/list` grants the new
/// definition." The fixture upstream changes `echo`'s description itself, mid-test. Since
/// issue 25 a description change is held for review by default; this tenant accepts them
/// (`tests/api/drift.rs` has the holds).
#[tokio::test]
async fn an_upstream_that_changes_a_tool_is_drift_until_the_next_list() {
    let s = setup().await;
    let admin = s.app.token("default", "ops5", &[scope::ADMIN]).await;
    succeeded(
        s.app
            .put("/catalog/drift")
            .as_(&admin)
            .json(json!({"description": "accept"})),
    )
    .await;
    succeeded(
        s.app
            .put("/tools/mcp__fixture__mutate")
            .as_(&admin)
            .json(json!({"risk": ["read"]})),
    )
    .await;
    let s = s.relist().await;
    let old_echo = s.echo("mcp__fixture__echo");
    let changed = s
        .call(
            "mcp__fixture__mutate",
            json!({"description": "Returns its text, louder.", "notify": false}),
        )
        .await;
    assert_eq!(reason(&changed), "ok", "{changed}");
    let upstreams = succeeded(s.app.get("/upstreams").as_(&admin)).await;
    let id = upstreams["upstreams"][0]["id"].as_str().unwrap().to_owned();
    let report = succeeded(s.app.post(format!("/upstreams/{id}:sync")).as_(&admin)).await;
    assert_eq!(report["changed"], json!(["mcp__fixture__echo"]), "{report}");
    assert_eq!(report["held"], json!([]), "{report}");

    let drifted = s
        .call_with("mcp__fixture__echo", json!({"text": "x"}), old_echo.clone())
        .await;
    assert_eq!(reason(&drifted), "manifest_drift", "{drifted}");
    assert!(
        drifted["content"][0]["text"] != "x",
        "nothing ran: {drifted}"
    );

    let s = s.relist().await;
    let tool = find(&s.session["tools"], "name", "mcp__fixture__echo").clone();
    assert_eq!(tool["description"], "Returns its text, louder.");
    let new_echo = s.echo("mcp__fixture__echo");
    assert_ne!(
        new_echo["expected_schema_hash"],
        old_echo["expected_schema_hash"]
    );
    let ran = s
        .call_with("mcp__fixture__echo", json!({"text": "x"}), new_echo)
        .await;
    assert_eq!(reason(&ran), "ok", "{ran}");
    assert_eq!(ran["content"][0]["text"], "x");
}

/// Issue 4: "Two upstreams with a tool of the same raw name never shadow each other."
#[tokio::test]
async fn two_upstreams_with_the_same_raw_tool_name_stay_apart() {
    let s = setup().await;
    let admin = s.app.token("default", "ops6", &[scope::ADMIN]).await;
    let mut command = crate::helpers::fixture_command();
    command.push("--second".into());
    let second = succeeded(
        s.app
            .post("/upstreams")
            .as_(&admin)
            .json(json!({"name": "fixture-two", "transport": "stdio", "command": command})),
    )
    .await;
    succeeded(
        s.app
            .put("/tools/mcp__fixture-two__echo")
            .as_(&admin)
            .json(json!({"risk": ["read"]})),
    )
    .await;
    let s = s.relist().await;
    let names: Vec<&str> = s.session["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.ends_with("__echo"))
        .collect();
    assert_eq!(names, vec!["mcp__fixture-two__echo", "mcp__fixture__echo"]);

    let one = s
        .call("mcp__fixture__echo", json!({"text": "to one"}))
        .await;
    let two = s
        .call("mcp__fixture-two__echo", json!({"text": "to two"}))
        .await;
    assert_eq!((reason(&one), reason(&two)), ("ok", "ok"));
    assert_eq!(
        two["_meta"]["receipt"]["target"]["upstream_id"],
        second["upstream"]["id"]
    );
    assert_ne!(
        one["_meta"]["receipt"]["target"]["upstream_id"],
        two["_meta"]["receipt"]["target"]["upstream_id"]
    );

    // Changing one upstream's echo is drift for that tool only.
    succeeded(
        s.app
            .put("/tools/mcp__fixture-two__echo")
            .as_(&admin)
            .json(json!({"risk": ["read"], "version": "2"})),
    )
    .await;
    let one_again = s
        .call("mcp__fixture__echo", json!({"text": "still one"}))
        .await;
    let two_again = s.call("mcp__fixture-two__echo", json!({"text": "x"})).await;
    assert_eq!(reason(&one_again), "ok");
    assert_eq!(reason(&two_again), "manifest_drift");
}

/// Issue 4: "An independent check that receipts verify with a library the project did not
/// write": Node's `node:crypto` Ed25519 over RFC 8785 bytes made by a few lines of JavaScript
/// (`tests/interop/verify_receipts.mjs`), for an execution receipt, a denial and a forgery.
#[tokio::test]
async fn receipts_verify_with_nodes_own_ed25519() {
    let s = setup().await;
    let ok = s
        .call(
            "mcp__fixture__echo",
            json!({"text": "caf\u{e9} \u{1f600} \"q\"\n"}),
        )
        .await;
    let mut wrong = s.echo("mcp__fixture__echo");
    wrong["tool_version"] = json!("0");
    let denied = s
        .call_with("mcp__fixture__echo", json!({"text": "x"}), wrong)
        .await;
    let mut forged = ok["_meta"]["receipt"].clone();
    forged["receipt_id"] = json!("rcp_forged");
    forged["decision"] = json!("deny");
    let set: Value = s.app.get_raw("/.well-known/aperture/keys").await.json();
    let input = json!({
        "keys": set["keys"],
        "receipts": [ok["_meta"]["receipt"], denied["_meta"]["receipt"], forged],
    });
    let mut node = std::process::Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/verify_receipts.mjs"
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node (Node.js 18+) is needed for this test; scripts/ensure-tools checks for it");
    {
        use std::io::Write;
        node.stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
    }
    let out = node.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = verdicts.lines().collect();
    let id = |v: &Value| text_of(&v["_meta"]["receipt"]["receipt_id"]).to_owned();
    assert_eq!(
        lines,
        vec![
            format!("{} valid", id(&ok)),
            format!("{} valid", id(&denied)),
            "rcp_forged invalid: signature".to_owned(),
        ],
        "{verdicts}"
    );
}

/// Issue 4, drift: an upstream that announces its change (`notifications/tools/list_changed`)
/// is synced at once, without an admin's sync, so the old grant's next call is
/// `manifest_drift`.
#[tokio::test]
async fn an_upstream_that_announces_a_change_is_synced_at_once() {
    let s = setup().await;
    let admin = s.app.token("default", "ops7", &[scope::ADMIN]).await;
    succeeded(
        s.app
            .put("/tools/mcp__fixture__mutate")
            .as_(&admin)
            .json(json!({"risk": ["read"]})),
    )
    .await;
    let s = s.relist().await;
    let old_echo = s.echo("mcp__fixture__echo");
    let changed = s
        .call("mcp__fixture__mutate", json!({"description": "Announced."}))
        .await;
    assert_eq!(reason(&changed), "ok", "{changed}");
    let mut synced = false;
    for _ in 0..100 {
        let tools = succeeded(s.app.get("/tools").as_(&admin)).await;
        synced = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "mcp__fixture__echo" && t["description"] == "Announced.");
        if synced {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(synced, "the catalog followed the upstream's announcement");
    let drifted = s
        .call_with("mcp__fixture__echo", json!({"text": "x"}), old_echo)
        .await;
    assert_eq!(reason(&drifted), "manifest_drift", "{drifted}");
    // The automatic re-sync is journaled, attributed to the upstream, naming what changed.
    let mut journaled = None;
    for _ in 0..100 {
        let records = aperture_core::store::journal::search(
            &s.app.store,
            "default",
            &aperture_core::store::journal::ReceiptFilter {
                actor_id: Some("upstream:fixture".into()),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
        journaled = records
            .into_iter()
            .find(|r| r.disclosures.contains("list_changed"));
        if journaled.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let record = journaled.expect("an upstream.sync record for the announced change");
    let disclosures: Value = serde_json::from_str(&record.disclosures).unwrap();
    assert_eq!(disclosures["action"], "upstream.sync");
    assert_eq!(
        disclosures["subject"]["changed"],
        json!(["mcp__fixture__echo"])
    );
    let reports = aperture_core::journal::verify(&s.app.store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()));
}

/// Issue 23 (CONTRACT §6–§7, `dry_run_only`): a tool with a declared dry-run argument runs with
/// that argument fixed to true by the server, which the agent cannot send (the advertised
/// schema leaves it out and forbids it); the answer says `_meta.dry_run: true`, and the
/// decision and execution receipts say `dry_run`, not `allow`. The upstream reports what it
/// received.
#[tokio::test]
async fn dry_run_only_runs_with_the_dry_run_argument_fixed_and_says_so() {
    let s = setup().await;
    let admin = s.app.token("default", "ops2", &[scope::ADMIN]).await;
    let reply = s
        .app
        .put("/tools/mcp__fixture__deploy")
        .as_(&admin)
        .json(json!({"risk": ["write"], "dry_run_argument": "dry_run"}))
        .await;
    reply.expect_status(StatusCode::OK);
    let policy = json!({"rules": [
        {"id": "deploys", "match": {"name": "mcp__fixture__deploy"}, "mode": "dry_run_only"},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    let put = s.app.put("/policies/p").as_(&admin).json(&policy).await;
    put.expect_status(StatusCode::OK);
    let activated = s.app.post("/policies/p:activate").as_(&admin).await;
    activated.expect_status(StatusCode::OK);
    let session: Value = s.app.post("/sessions").as_(&s.agent).await.json();
    let s = Setup { session, ..s };
    let deploy = find(&s.session["tools"], "name", "mcp__fixture__deploy").clone();
    assert_eq!(deploy["_meta"]["exposureMode"], "dry_run_only");
    assert!(
        deploy["inputSchema"]["properties"].get("dry_run").is_none(),
        "{deploy}"
    );
    let before = s.upstream_calls().await;

    let result = s
        .call("mcp__fixture__deploy", json!({"service": "api"}))
        .await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["received"],
        json!({"service": "api", "dry_run": true}),
        "{result}"
    );
    assert_eq!(result["_meta"]["dry_run"], true, "{result}");
    assert_eq!(result["_meta"]["receipt"]["kind"], "execution");
    assert_eq!(result["_meta"]["receipt"]["decision"], "dry_run");
    assert_eq!(result["_meta"]["receipt"]["mode"], "dry_run_only");

    // The agent cannot turn the dry run off.
    let refused = s
        .call(
            "mcp__fixture__deploy",
            json!({"service": "api", "dry_run": false}),
        )
        .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(reason(&refused), "arguments_invalid");
    // One call reached the upstream (and the stats call after it).
    assert_eq!(s.upstream_calls().await, before + 2);

    // Both receipts of the call are dry runs in the journal.
    let reader = s.app.token("default", "auditor", &[scope::READ]).await;
    let receipts = s.app.get("/receipts?tool=mcp__fixture__deploy");
    let receipts = receipts.as_(&reader).await.json();
    let decisions: Vec<(&str, &str)> = receipts["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["decision"].as_str().unwrap()))
        .collect();
    assert!(
        decisions.contains(&("decision", "dry_run"))
            && decisions.contains(&("execution", "dry_run")),
        "{decisions:?}"
    );
    assert!(
        !decisions.contains(&("execution", "allow")),
        "{decisions:?}"
    );
}

const DEPLOY: &str = "mcp__fixture__deploy";

/// A fresh session of `agent` under policy `id`: `rule` for `deploy` (its `mode` and
/// `invocation`), `stats` allowed; the session's list result.
async fn session_under(app: &TestApp, admin: &str, agent: &str, id: &str, rule: Value) -> Value {
    let mut deploy = json!({"id": "deploy-rule", "match": {"name": DEPLOY}, "redaction": "tight"});
    if let (Some(d), Some(r)) = (deploy.as_object_mut(), rule.as_object()) {
        d.extend(r.clone());
    }
    let policy = json!({"rules": [deploy, {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}],
                        "redaction_profiles": {"tight": {"summary": "truncate", "max_bytes": 4096,
                                                         "destinations": ["llm", "mcp", "transcript"]}}});
    app.activate_policy(admin, id, policy).await;
    app.post("/sessions").as_(agent).await.json()
}

/// `tools/call` of `tool` over `/mcp` as `token`, with `session`'s grant: the result.
async fn mcp_call(
    app: &TestApp,
    token: &str,
    session: &Value,
    tool: &str,
    arguments: Value,
) -> Value {
    let params = json!({"name": tool, "arguments": arguments, "_meta": echo_of(session, tool)});
    app.mcp(token, rpc(1, "tools/call", params)).await["result"].clone()
}

/// The calls the fixture upstream has received (its own count, read through `session`'s
/// `stats`).
async fn upstream_count(app: &TestApp, token: &str, session: &Value) -> u64 {
    let stats = mcp_call(app, token, session, "mcp__fixture__stats", json!({})).await;
    stats["structuredContent"]["calls"]
        .as_u64()
        .unwrap_or_else(|| panic!("{stats}"))
}

/// Registers the fixture with `deploy` and `stats` described as reads: an admin and an agent.
async fn deploy_fixture(app: &TestApp) -> (String, String) {
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[DEPLOY, "mcp__fixture__stats"])
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    (admin, agent)
}

/// Issue 23 (CONTRACT §6): an execution receipt snapshots what ran as authorized: the
/// effective arguments in its disclosures (server-fixed ones included), the mode, limits and
/// redaction in the receipt. Issue 45 (item 14): with a server-fixed argument, a pinned
/// connection mode and a deadline set, every snapshotted field is compared, and the upstream's
/// own record shows it received exactly the effective arguments.
#[tokio::test]
async fn execution_receipts_snapshot_arguments_mode_limits_and_redaction() {
    let app = TestApp::spawn().await;
    let (admin, agent) = deploy_fixture(&app).await;
    let session = session_under(
        &app,
        &admin,
        &agent,
        "snapshot",
        json!({"mode": "allow", "invocation": {
            "fixed_arguments": {"service": "billing"}, "connection_mode": "read_replica",
            "max_duration_millis": 5000, "max_result_bytes": 4000}}),
    )
    .await;
    let result = mcp_call(&app, &agent, &session, DEPLOY, json!({"dry_run": false})).await;
    assert_eq!(result["isError"], false, "{result}");
    let effective =
        json!({"service": "billing", "connection_mode": "read_replica", "dry_run": false});
    // What the upstream says it received.
    assert_eq!(
        result["structuredContent"]["received"], effective,
        "{result}"
    );
    let receipt = &result["_meta"]["receipt"];
    assert_eq!(receipt["kind"], "execution");
    assert_eq!(receipt["decision"], "allow");
    assert_eq!(receipt["mode"], "allow");
    assert_eq!(
        receipt["limits"],
        json!({"max_duration_millis": 5000, "max_result_bytes": 4000}),
        "{receipt}"
    );
    assert_eq!(
        receipt["redaction"],
        json!({"summary": "truncate", "max_bytes": 4096, "destinations": ["llm", "mcp", "transcript"]}),
        "{receipt}"
    );
    assert_eq!(receipt["tool"], DEPLOY);
    assert_eq!(receipt["policy_id"], "snapshot");
    assert_eq!(
        receipt["args_hash"],
        engine::canonical::hash_value(&effective),
        "the hash of the effective arguments"
    );
    assert_eq!(receipt["target"]["environment"], "default", "{receipt}");
    assert!(receipt["target"]["upstream_id"].is_string(), "{receipt}");
    let reader = app.token("default", "auditor", &[scope::READ]).await;
    let id = receipt["receipt_id"].as_str().unwrap();
    let stored: Value = app.get(format!("/receipts/{id}")).as_(&reader).await.json();
    assert_eq!(
        stored["disclosures"]["effective_arguments"], effective,
        "{stored}"
    );
    // The digest in the signed receipt covers them.
    let digest = engine::receipt::disclosures_digest(
        &serde_json::from_value(stored["disclosures"].clone()).unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["disclosures_digest"], digest);
}

/// Issue 45 (item 14): `fixed_arguments`, `allowed_values` and `connection_mode` through
/// `/mcp`, checked against what the upstream itself says it received: a fixed argument is set
/// by the server and cannot be sent, a value outside the allowed ones is refused before the
/// upstream is called.
#[tokio::test]
async fn invocation_policies_shape_what_the_upstream_receives() {
    let app = TestApp::spawn().await;
    let (admin, agent) = deploy_fixture(&app).await;
    let fixed = session_under(
        &app,
        &admin,
        &agent,
        "fixed",
        json!({"mode": "allow", "invocation": {"fixed_arguments": {"service": "billing"},
                                              "connection_mode": "read_replica"}}),
    )
    .await;
    let ran = mcp_call(&app, &agent, &fixed, DEPLOY, json!({})).await;
    assert_eq!(
        ran["structuredContent"]["received"],
        json!({"service": "billing", "connection_mode": "read_replica"}),
        "{ran}"
    );
    // Sending the fixed argument (or the connection mode) is refused: the narrowed schema does
    // not have it; nothing reaches the upstream.
    let before = upstream_count(&app, &agent, &fixed).await;
    for arguments in [
        json!({"service": "payroll"}),
        json!({"connection_mode": "primary"}),
    ] {
        let refused = mcp_call(&app, &agent, &fixed, DEPLOY, arguments.clone()).await;
        assert_eq!(
            refused["_meta"]["receipt"]["reason"], "arguments_invalid",
            "{arguments}: {refused}"
        );
    }
    // Only the second `stats` call itself reached it.
    assert_eq!(upstream_count(&app, &agent, &fixed).await, before + 1);

    let allowed = session_under(
        &app,
        &admin,
        &agent,
        "allowed",
        json!({"mode": "allow", "invocation": {"allowed_values": {"service": ["web", "api"]}}}),
    )
    .await;
    let before = upstream_count(&app, &agent, &allowed).await;
    let refused = mcp_call(
        &app,
        &agent,
        &allowed,
        DEPLOY,
        json!({"service": "payroll"}),
    )
    .await;
    assert_eq!(
        refused["_meta"]["receipt"]["reason"], "arguments_invalid",
        "{refused}"
    );
    assert_eq!(upstream_count(&app, &agent, &allowed).await, before + 1);
    let ran = mcp_call(&app, &agent, &allowed, DEPLOY, json!({"service": "api"})).await;
    assert_eq!(
        ran["structuredContent"]["received"],
        json!({"service": "api"}),
        "{ran}"
    );
}

/// Issue 45 (item 14): `dry_run_only` for a tool that declares no dry-run argument is
/// validated, bound and journaled but not executed: the answer says `dry_run`, and the
/// upstream's own count shows nothing reached it.
#[tokio::test]
async fn dry_run_only_without_a_dry_run_argument_runs_nothing() {
    let app = TestApp::spawn().await;
    let (admin, agent) = deploy_fixture(&app).await;
    let session = session_under(&app, &admin, &agent, "dry", json!({"mode": "dry_run_only"})).await;
    let before = upstream_count(&app, &agent, &session).await;
    let result = mcp_call(&app, &agent, &session, DEPLOY, json!({"service": "web"})).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["_meta"]["dry_run"], true, "{result}");
    let receipt = &result["_meta"]["receipt"];
    assert_eq!(receipt["decision"], "dry_run", "{result}");
    assert_eq!(receipt["mode"], "dry_run_only");
    assert!(result.get("structuredContent").is_none(), "{result}");
    // Arguments are still checked.
    let refused = mcp_call(&app, &agent, &session, DEPLOY, json!({})).await;
    assert_eq!(refused["_meta"]["receipt"]["reason"], "arguments_invalid");
    assert_eq!(
        upstream_count(&app, &agent, &session).await,
        before + 1,
        "only the count itself reached the upstream"
    );
}
