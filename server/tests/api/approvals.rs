//! Parked calls (`approval_required`) end to end through `POST /mcp` in front of the real
//! fixture upstream: exact release, args-hash mismatch, double and racing approvals,
//! self-approval, rejection stored as a tool result, expiry, and retries under the caller's
//! `invocation_id` — each with what executed (counted at the upstream), what the client saw,
//! and receipts that verify.

use std::time::Duration;

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Db, Reply, Requests, TestApp, echo_of, find, rpc, text_of, texts_of};

struct Setup {
    app: TestApp,
    agent: String,
    approver: String,
    list: Value,
    keys: Vec<Jwk>,
}

async fn setup_with(db: Db, customize: impl FnOnce(&mut aperture::Config)) -> Option<Setup> {
    setup_mode(db, "approval_required", customize).await
}

/// The fixture's `echo` in `mode`, its `stats` allowed.
async fn setup_mode(
    db: Db,
    mode: &str,
    customize: impl FnOnce(&mut aperture::Config),
) -> Option<Setup> {
    let app = TestApp::spawn_with(db, customize).await?;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo", "mcp__fixture__stats"])
        .await;
    let policy = json!({"rules": [
        {"id": "echo-rule", "match": {"name": "mcp__fixture__echo"}, "mode": mode, "reason": "a person looks first"},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "p", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let approver = app.token("default", "alice", &[scope::APPROVE]).await;
    let keys: Value = app.get_raw("/.well-known/aperture/keys").await.json();
    let keys = serde_json::from_value(keys["keys"].clone()).unwrap();
    let mut s = Setup {
        app,
        agent,
        approver,
        list: Value::Null,
        keys,
    };
    s.list = s.rpc(&s.agent.clone(), "tools/list", json!({})).await;
    Some(s)
}

impl Setup {
    async fn rpc(&self, token: &str, method: &str, params: Value) -> Value {
        let answer = self.app.mcp_post(token).json(rpc(1, method, params)).await;
        answer.expect_ok()["result"].clone()
    }

    /// A JSON-RPC request to `/mcp` as `token`: the whole answer (result or error). Owns what
    /// it needs, so it can be spawned.
    fn raw(
        &self,
        token: String,
        method: &'static str,
        params: Value,
    ) -> impl std::future::Future<Output = Value> + Send + 'static {
        let call = self.app.mcp_post(token).json(rpc(7, method, params));
        async move { call.await.json() }
    }

    fn echo(&self, tool: &str) -> Value {
        echo_of(&self.list, tool)
    }

    /// `tools/call` of `echo` as the agent, with `key` as `_meta.invocation_id` when given.
    async fn call_echo(&self, text: &str, key: Option<&str>) -> Value {
        let mut meta = self.echo("mcp__fixture__echo");
        if let Some(k) = key {
            meta["invocation_id"] = json!(k);
        }
        let result = self
            .rpc(
                &self.agent,
                "tools/call",
                json!({"name": "mcp__fixture__echo", "arguments": {"text": text}, "_meta": meta}),
            )
            .await;
        self.verify(&result);
        result
    }

    fn verify(&self, result: &Value) {
        verify_receipt_json(&result["_meta"]["receipt"], &self.keys)
            .unwrap_or_else(|e| panic!("the receipt verifies: {e}: {result}"));
    }

    /// Calls the upstream has received (its `stats` tool counts itself too).
    async fn upstream_calls(&self) -> u64 {
        let result = self
            .rpc(
                &self.agent,
                "tools/call",
                json!({"name": "mcp__fixture__stats", "arguments": {}, "_meta": self.echo("mcp__fixture__stats")}),
            )
            .await;
        result["structuredContent"]["calls"]
            .as_u64()
            .unwrap_or_else(|| panic!("{result}"))
    }

    /// `POST /invocations/{id}:{verb}` with `body`; an approval or application that echoes an
    /// `args_hash` also echoes the `definition_hash` the invocation shows (as the approvals page
    /// does), unless the body names one itself.
    async fn decide(&self, token: &str, id: &str, verb: &str, body: Value) -> Reply {
        let mut body = body;
        if verb != "reject"
            && body.get("args_hash").is_some()
            && body.get("definition_hash").is_none()
        {
            let shown = self.invocation(&self.approver, id).await;
            body["definition_hash"] = shown["definition_hash"].clone();
        }
        let decide = self.app.post(format!("/invocations/{id}:{verb}"));
        decide.as_(token).json(&body).await
    }

    async fn invocation(&self, token: &str, id: &str) -> Value {
        let response = self.app.get(format!("/invocations/{id}")).as_(token).await;
        let response = response.expect_status(StatusCode::OK);
        response.json()
    }

    /// Waits (up to 15 s) until the invocation has a final status.
    async fn settled(&self, id: &str) -> Value {
        for _ in 0..300 {
            let view = self.invocation(&self.agent, id).await;
            if ["completed", "rejected", "expired"].contains(&view["status"].as_str().unwrap()) {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("invocation {id} did not settle");
    }
}

fn parked_id(result: &Value) -> String {
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["_meta"]["status"], "input_required", "{result}");
    assert_eq!(result["_meta"]["receipt"]["decision"], "park");
    assert_eq!(result["_meta"]["receipt"]["mode"], "approval_required");
    let id = text_of(&result["_meta"]["invocation_id"]).to_owned();
    assert_eq!(result["_meta"]["receipt"]["invocation_id"], id.as_str());
    id
}

async fn an_approval_releases_exactly_the_bound_call_once(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let parked = s.call_echo("ship it", None).await;
    let id = parked_id(&parked);
    // Parked: nothing reached the upstream (the count moves by the stats call alone).
    assert_eq!(s.upstream_calls().await, before + 1);

    // The approver sees exactly what will run.
    let view = s.invocation(&s.approver, &id).await;
    assert_eq!(view["status"], "input_required");
    assert_eq!(view["arguments"], json!({"text": "ship it"}));
    assert_eq!(view["tool"], "mcp__fixture__echo");
    let args_hash = view["args_hash"].as_str().unwrap().to_owned();
    assert_eq!(
        args_hash,
        engine::canonical::args_hash(&json!({"text": "ship it"})).unwrap()
    );

    // An args_hash other than the one shown releases nothing.
    let wrong = engine::canonical::args_hash(&json!({"text": "something else"})).unwrap();
    s.decide(&s.approver, &id, "approve", json!({"args_hash": wrong}))
        .await
        .expect_status(StatusCode::CONFLICT);
    // Without one, the request is incomplete.
    let incomplete = s.decide(&s.approver, &id, "approve", json!({})).await;
    let incomplete = incomplete.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    incomplete.expect_field_error("args_hash");
    // The agent cannot approve (no scope), nor can an approver acting as the agent, nor the
    // principal that created the agent's token.
    s.decide(&s.agent, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::FORBIDDEN);
    for actor in ["agent", "operator"] {
        let own = s.app.token("default", actor, &[scope::APPROVE]).await;
        s.decide(&own, &id, "approve", json!({"args_hash": args_hash}))
            .await
            .expect_status(StatusCode::FORBIDDEN);
    }
    assert_eq!(
        s.invocation(&s.approver, &id).await["status"],
        "input_required"
    );

    let approved = s
        .decide(
            &s.approver,
            &id,
            "approve",
            json!({"args_hash": args_hash, "comment": "checked"}),
        )
        .await
        .expect_ok();
    assert_eq!(approved["decided_by"], "alice");
    let done = s.settled(&id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert!(text_of(&result["content"][0]["text"]).contains("ship it"));
    s.verify(result);
    let receipt = &result["_meta"]["receipt"];
    assert_eq!(receipt["kind"], "execution");
    assert_eq!(receipt["decision"], "allow");
    assert_eq!(receipt["invocation_id"], id.as_str());
    assert_eq!(receipt["args_hash"], args_hash.as_str());
    assert_eq!(
        receipt["actor_id"], "agent",
        "runs as the caller, not the approver"
    );

    // Exactly one execution; a second approval is refused and runs nothing.
    s.decide(&s.approver, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::CONFLICT);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.upstream_calls().await, before + 3);

    // The journal holds decision (park), approval and execution, and verifies.
    let approval = aperture_core::store::journal::by_receipt_id(
        &s.app.store,
        "default",
        done["approval_receipt_id"].as_str().unwrap(),
    )
    .await
    .unwrap()
    .unwrap();
    let approval: Value = serde_json::from_str(&approval.receipt).unwrap();
    assert_eq!(approval["kind"], "approval");
    assert_eq!(approval["actor_id"], "alice");
    verify_receipt_json(&approval, &s.keys).unwrap();
    let reports = aperture_core::journal::verify(&s.app.store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
}

async fn a_rejection_is_a_stored_tool_result_and_retries_return_it(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let parked = s.call_echo("drop the table", Some("turn-1-call-1")).await;
    let id = parked_id(&parked);
    // A retry under the same key is the same invocation, still parked: no second one.
    let again = s.call_echo("drop the table", Some("turn-1-call-1")).await;
    assert_eq!(parked_id(&again), id);
    // The same key with other arguments is refused.
    let other = s
        .call_echo("drop another table", Some("turn-1-call-1"))
        .await;
    assert_eq!(other["isError"], true);
    assert_eq!(
        other["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );

    let rejected = s
        .decide(
            &s.approver,
            &id,
            "reject",
            json!({"comment": "use a migration instead"}),
        )
        .await
        .expect_ok();
    assert_eq!(rejected["status"], "rejected");
    let result = &rejected["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(result["_meta"]["receipt"]["reason"], "approval_rejected");
    assert!(text_of(&result["content"][0]["text"]).contains("use a migration instead"));
    s.verify(result);

    // The agent reads it with its own token, and a retry under the key returns it.
    let own = s.invocation(&s.agent, &id).await;
    assert_eq!(own["result"], *result);
    let retry = s.call_echo("drop the table", Some("turn-1-call-1")).await;
    assert_eq!(retry, *result);
    // Approving afterwards is refused; nothing ever reached the upstream.
    s.decide(
        &s.approver,
        &id,
        "approve",
        json!({"args_hash": own["args_hash"]}),
    )
    .await
    .expect_status(StatusCode::CONFLICT);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.upstream_calls().await, before + 1);

    // Another agent's run token does not see it.
    let stranger = s.app.token("default", "stranger", &[scope::RUN]).await;
    let reply = s.app.get(format!("/invocations/{id}")).as_(&stranger).await;
    reply.expect_status(StatusCode::NOT_FOUND);
}

async fn a_keyed_allowed_call_runs_once_and_retries_get_its_result(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let meta = {
        let mut m = s.echo("mcp__fixture__stats");
        m["invocation_id"] = json!("stats-once");
        m
    };
    let call = || {
        s.rpc(
            &s.agent,
            "tools/call",
            json!({"name": "mcp__fixture__stats", "arguments": {}, "_meta": meta.clone()}),
        )
    };
    let first = call().await;
    s.verify(&first);
    assert_eq!(first["structuredContent"]["calls"], before + 1);
    let second = call().await;
    assert_eq!(second, first, "the retry returns the stored result");
    assert_eq!(s.upstream_calls().await, before + 2, "ran once");
}

async fn a_parked_call_expires_into_a_stored_result(db: Db) {
    let Some(s) = setup_with(db, |c| c.parked_expiry = Duration::from_secs(1)).await else {
        return;
    };
    let id = parked_id(&s.call_echo("later", None).await);
    let done = s.settled(&id).await;
    assert_eq!(done["status"], "expired", "{done}");
    assert_eq!(done["result"]["isError"], true);
    assert_eq!(
        done["result"]["_meta"]["receipt"]["reason"],
        "approval_expired"
    );
    s.verify(&done["result"]);
    s.decide(
        &s.approver,
        &id,
        "approve",
        json!({"args_hash": done["args_hash"]}),
    )
    .await
    .expect_status(StatusCode::CONFLICT);
}

async fn racing_approvals(db: Db, races: usize) {
    let Some(s) = setup_with(db, |_| {}).await else {
        eprintln!("APERTURE_TEST_POSTGRES_URL not set: PostgreSQL variant not run");
        return;
    };
    let bob = s.app.token("default", "bob", &[scope::APPROVE]).await;
    let before = s.upstream_calls().await;
    let mut ids = Vec::new();
    for n in 0..races {
        let id = parked_id(&s.call_echo(&format!("race {n}"), None).await);
        let args_hash = s.invocation(&s.approver, &id).await["args_hash"].clone();
        let body = json!({"args_hash": args_hash});
        let (a, b) = tokio::join!(
            s.decide(&s.approver, &id, "approve", body.clone()),
            s.decide(&bob, &id, "approve", body.clone()),
        );
        let mut statuses = [a.status(), b.status()];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::CONFLICT],
            "race {n}: exactly one approval wins ({a} / {b})"
        );
        ids.push(id);
    }
    for id in &ids {
        assert_eq!(s.settled(id).await["status"], "completed");
    }
    assert_eq!(
        s.upstream_calls().await,
        before + races as u64 + 1,
        "each raced invocation ran exactly once"
    );
}

#[tokio::test]
async fn two_approvers_racing_release_one_execution() {
    racing_approvals(Db::Sqlite, 100).await;
}

#[tokio::test]
async fn two_approvers_racing_release_one_execution_on_postgres() {
    racing_approvals(Db::Postgres, 100).await;
}

/// Seed: "This prevents a worker from substituting another tool, schema, tenant, or argument
/// set between authorization and execution." The stored binding is changed behind the
/// gateway's back while the call is parked; the approval echoes the (unchanged) args_hash, and
/// the worker still refuses: the binding no longer matches the signed decision receipt.
async fn a_binding_changed_while_parked_is_refused_not_run(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let id = parked_id(&s.call_echo("harmless", None).await);
    let (binding,): (String,) = sqlx::query_as("SELECT binding FROM invocations WHERE id = $1")
        .bind(&id)
        .fetch_one(s.app.store.pool())
        .await
        .unwrap();
    let mut tampered: Value = serde_json::from_str(&binding).unwrap();
    tampered["effective_arguments"]["text"] = json!("harmful");
    sqlx::query("UPDATE invocations SET binding = $1 WHERE id = $2")
        .bind(tampered.to_string())
        .bind(&id)
        .execute(s.app.store.pool())
        .await
        .unwrap();
    let args_hash = s.invocation(&s.approver, &id).await["args_hash"].clone();
    s.decide(&s.approver, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::OK);
    let done = s.settled(&id).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        done["result"]["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );
    s.verify(&done["result"]);
    assert_eq!(s.upstream_calls().await, before + 1, "nothing ran");
}

/// Seed: "Rotation or target drift between authorization and execution requires explicit
/// reauthorization or reconciliation; the executor never silently retargets an approved call."
async fn an_upstream_re_registered_while_parked_is_target_drift(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let admin = s.app.token("default", "ops2", &[scope::ADMIN]).await;
    let id = parked_id(&s.call_echo("pinned", None).await);
    let upstreams: Value = s.app.get("/upstreams").as_(&admin).await.json();
    let upstream = upstreams["upstreams"][0]["id"].as_str().unwrap().to_owned();
    let reply = s.app.delete(format!("/upstreams/{upstream}"));
    let reply = reply.as_(&admin).await;
    reply.expect_status(StatusCode::OK);
    let mut command = crate::helpers::fixture_command();
    command.push("--registration-b".into());
    let reply = s
        .app
        .post("/upstreams")
        .as_(&admin)
        .json(json!({"name": "fixture", "transport": "stdio", "command": command}))
        .await;
    reply.expect_status(StatusCode::CREATED);
    let args_hash = s.invocation(&s.approver, &id).await["args_hash"].clone();
    s.decide(&s.approver, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::OK);
    let done = s.settled(&id).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(done["result"]["_meta"]["receipt"]["reason"], "target_drift");
    assert_eq!(
        done["result"]["_meta"]["receipt"]["target"]["upstream_id"],
        upstream.as_str(),
        "the receipt names the target that was authorized"
    );
    s.verify(&done["result"]);
}

async fn an_async_job_is_accepted_at_once_and_run_by_the_worker(db: Db) {
    let Some(s) = setup_mode(db, "async_job_only", |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let accepted = s.call_echo("in the background", Some("job-1")).await;
    assert_eq!(accepted["isError"], false, "{accepted}");
    assert_eq!(accepted["_meta"]["status"], "working");
    assert_eq!(accepted["_meta"]["receipt"]["decision"], "async");
    let id = text_of(&accepted["_meta"]["invocation_id"]).to_owned();
    let done = s.settled(&id).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(text_of(&done["result"]["content"][0]["text"]).contains("in the background"));
    s.verify(&done["result"]);
    // The retry under the key returns the result, and so does one that echoes the id the
    // gateway answered with; the job ran once.
    let retry = s.call_echo("in the background", Some("job-1")).await;
    assert_eq!(retry, done["result"]);
    let echoed = s.call_echo("in the background", Some(&id)).await;
    assert_eq!(echoed, done["result"]);
    assert_eq!(s.upstream_calls().await, before + 2);
}

async fn a_staged_change_runs_only_when_applied(db: Db) {
    let Some(s) = setup_mode(db, "staged_change", |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let staged = s.call_echo("rename the bucket", None).await;
    assert_eq!(staged["isError"], false, "{staged}");
    assert_eq!(staged["_meta"]["status"], "staged");
    assert_eq!(staged["_meta"]["receipt"]["decision"], "stage");
    let id = text_of(&staged["_meta"]["invocation_id"]).to_owned();
    let view = s.invocation(&s.approver, &id).await;
    assert_eq!(view["status"], "staged");
    let args_hash = view["args_hash"].clone();
    // A staged change is applied, not approved.
    s.decide(&s.approver, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::CONFLICT);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.upstream_calls().await, before + 1, "nothing ran yet");
    s.decide(&s.approver, &id, "apply", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::OK);
    let done = s.settled(&id).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    s.verify(&done["result"]);
    assert_eq!(s.upstream_calls().await, before + 3);

    // Another one, rejected: nothing runs.
    let other = s.call_echo("delete the bucket", None).await;
    let other = other["_meta"]["invocation_id"].as_str().unwrap().to_owned();
    let rejected = s
        .decide(&s.approver, &other, "reject", json!({}))
        .await
        .expect_ok();
    assert_eq!(
        rejected["result"]["_meta"]["receipt"]["reason"],
        "approval_rejected"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.upstream_calls().await, before + 4);
}

async fn a_confirmation_token_releases_the_identical_call_once(db: Db) {
    let Some(s) = setup_mode(db, "confirmation_required", |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let asked = s.call_echo("pay 10 EUR", None).await;
    assert_eq!(asked["isError"], false, "{asked}");
    assert_eq!(asked["_meta"]["status"], "confirmation_required");
    assert_eq!(asked["_meta"]["receipt"]["decision"], "confirm");
    let token = text_of(&asked["_meta"]["confirmation_token"]).to_owned();
    assert!(token.starts_with("cnf_"));
    assert!(
        !asked["_meta"]["receipt"].to_string().contains(&token),
        "the receipt does not carry the token"
    );
    assert_eq!(s.upstream_calls().await, before + 1, "nothing ran yet");

    let confirm = |text: &str, token: &str| {
        let mut meta = s.echo("mcp__fixture__echo");
        meta["confirmation_token"] = json!(token);
        s.rpc(
            &s.agent,
            "tools/call",
            json!({"name": "mcp__fixture__echo", "arguments": {"text": text}, "_meta": meta}),
        )
    };
    let ran = confirm("pay 10 EUR", &token).await;
    s.verify(&ran);
    assert_eq!(ran["isError"], false, "{ran}");
    assert!(text_of(&ran["content"][0]["text"]).contains("pay 10 EUR"));
    assert_eq!(ran["_meta"]["receipt"]["kind"], "execution");
    // The same confirmation again is its outcome, not a second payment.
    let again = confirm("pay 10 EUR", &token).await;
    assert_eq!(again, ran);
    assert_eq!(s.upstream_calls().await, before + 3);

    // A changed argument invalidates the token: refused, and spent.
    let asked = s.call_echo("pay 20 EUR", None).await;
    let token = text_of(&asked["_meta"]["confirmation_token"]).to_owned();
    let changed = confirm("pay 2000 EUR", &token).await;
    s.verify(&changed);
    assert_eq!(changed["isError"], true);
    assert_eq!(
        changed["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );
    let spent = confirm("pay 20 EUR", &token).await;
    assert_eq!(spent["isError"], true, "{spent}");
    let unknown = confirm("pay 20 EUR", "cnf_made-up").await;
    assert_eq!(
        unknown["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );
    assert_eq!(s.upstream_calls().await, before + 4, "nothing else ran");
}

/// Each test on SQLite and, when `APERTURE_TEST_POSTGRES_URL` is set, on PostgreSQL.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        $(mod $name {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                super::$name(Db::Sqlite).await;
            }

            #[tokio::test]
            async fn postgres() {
                super::$name(Db::Postgres).await;
            }
        })*
    };
}

on_both!(
    an_approval_releases_exactly_the_bound_call_once,
    a_rejection_is_a_stored_tool_result_and_retries_return_it,
    a_keyed_allowed_call_runs_once_and_retries_get_its_result,
    a_parked_call_expires_into_a_stored_result,
    a_binding_changed_while_parked_is_refused_not_run,
    an_upstream_re_registered_while_parked_is_target_drift,
    an_async_job_is_accepted_at_once_and_run_by_the_worker,
    a_staged_change_runs_only_when_applied,
    a_confirmation_token_releases_the_identical_call_once,
);

/// Issue 5: "Where the client speaks the MCP tasks extension, expose parked and async
/// invocations as tasks too." A task-augmented `tools/call` of a parked tool is a task in
/// `input_required`; `tasks/result` waits for the approver and returns the tool result.
async fn parked_calls_are_mcp_tasks(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let raw = |token: String, method: &'static str, params: Value| s.raw(token, method, params);
    let init = raw(
        s.agent.clone(),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"tasks": {}}, "clientInfo": {"name": "t", "version": "1"}}),
    )
    .await;
    assert!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{init}"
    );
    let tools = s.list["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|t| t["name"] == "mcp__fixture__echo")
        .unwrap();
    assert_eq!(echo["execution"]["taskSupport"], "optional");
    let stats = tools
        .iter()
        .find(|t| t["name"] == "mcp__fixture__stats")
        .unwrap();
    assert!(
        stats.get("execution").is_none(),
        "tools that run at once are not tasks"
    );

    let created = raw(
        s.agent.clone(),
        "tools/call",
        json!({"name": "mcp__fixture__echo", "arguments": {"text": "as a task"},
               "_meta": s.echo("mcp__fixture__echo"), "task": {"ttl": 60000}}),
    )
    .await;
    let task = &created["result"]["task"];
    assert_eq!(task["status"], "input_required", "{created}");
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    assert!(task_id.starts_with("inv_"));
    assert!(
        created["result"]["_meta"]["io.modelcontextprotocol/model-immediate-response"].is_string()
    );
    verify_receipt_json(&created["result"]["_meta"]["receipt"], &s.keys).unwrap();
    let polled = raw(s.agent.clone(), "tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(polled["result"]["status"], "input_required", "{polled}");
    // Someone else's task does not exist for them.
    let stranger = s.app.token("default", "stranger", &[scope::RUN]).await;
    let hidden = raw(stranger, "tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");

    // tasks/result waits; the approval releases it.
    let waiting = tokio::spawn(raw(
        s.agent.clone(),
        "tasks/result",
        json!({"taskId": task_id}),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "tasks/result waits for the outcome");
    let args_hash = s.invocation(&s.approver, &task_id).await["args_hash"].clone();
    s.decide(
        &s.approver,
        &task_id,
        "approve",
        json!({"args_hash": args_hash}),
    )
    .await
    .expect_status(StatusCode::OK);
    let answer = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("tasks/result answered")
        .unwrap();
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    assert!(text_of(&result["content"][0]["text"]).contains("as a task"));
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    s.verify(result);
    let done = raw(s.agent.clone(), "tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(done["result"]["status"], "completed");
}

on_both!(parked_calls_are_mcp_tasks);

/// Issue 47 (item 1): in 2026-07-28 a client that declares the `io.modelcontextprotocol/tasks`
/// extension takes a parked call as a task (`resultType: "task"`): `working` while it waits
/// for the approver, then `completed` with the tool result inlined by `tasks/get`; a client
/// that does not declare it gets the status result. `tasks/update` has nothing to answer.
async fn in_2026_parked_calls_are_tasks_of_the_extension(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let meta = |extensions: Value| {
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions}})
    };
    let stateless = |method: &str, params: Value, name: Option<&str>| {
        let mut post = s.app.mcp_post(&s.agent);
        post = post.header("mcp-protocol-version", "2026-07-28");
        post = post.header("mcp-method", method);
        if let Some(name) = name {
            post = post.header("mcp-name", name);
        }
        post.json(rpc(3, method, params))
    };
    let discovered: Value = stateless("server/discover", json!({"_meta": meta(json!({}))}), None)
        .await
        .json();
    assert!(
        discovered["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
            .is_object(),
        "{discovered}"
    );
    let listed: Value = stateless("tools/list", json!({"_meta": meta(json!({}))}), None)
        .await
        .json();
    let echo = "mcp__fixture__echo";
    let call = |extensions: Value, text: &str| {
        let mut call_meta = echo_of(&listed["result"], echo);
        call_meta
            .as_object_mut()
            .unwrap()
            .extend(meta(extensions).as_object().unwrap().clone());
        json!({"name": echo, "arguments": {"text": text}, "_meta": call_meta})
    };
    // Without the extension: the status result, as before.
    let plain: Value = stateless("tools/call", call(json!({}), "plain"), Some(echo))
        .await
        .json();
    assert_eq!(
        plain["result"]["_meta"]["status"], "input_required",
        "{plain}"
    );

    let tasks = json!({"io.modelcontextprotocol/tasks": {}});
    let created: Value = stateless("tools/call", call(tasks.clone(), "as a task"), Some(echo))
        .await
        .json();
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    // SEP-2663's shape, as a client reads it: the task's fields at the top level.
    let task: rmcp::model::CreateTaskResult =
        serde_json::from_value(result.clone()).expect("a CreateTaskResult");
    assert_eq!(
        task.task.status,
        rmcp::model::TaskStatus::Working,
        "{created}"
    );
    assert!(task.task.poll_interval_ms.is_some(), "{created}");
    assert!(result.get("task").is_none(), "{created}");
    s.verify(result);
    let task_id = task.task.task_id.clone();

    let get = |task_id: &str| {
        stateless(
            "tasks/get",
            json!({"taskId": task_id, "_meta": meta(tasks.clone())}),
            None,
        )
    };
    let polled: Value = get(&task_id).await.json();
    assert_eq!(polled["result"]["status"], "working", "{polled}");
    assert_eq!(polled["result"]["resultType"], "complete", "{polled}");
    let update: Value = stateless(
        "tasks/update",
        json!({"taskId": task_id, "inputResponses": {}, "_meta": meta(tasks.clone())}),
        None,
    )
    .await
    .json();
    assert_eq!(update["error"]["code"], -32602, "{update}");

    let args_hash = s.invocation(&s.approver, &task_id).await["args_hash"].clone();
    s.decide(
        &s.approver,
        &task_id,
        "approve",
        json!({"args_hash": args_hash}),
    )
    .await
    .expect_status(StatusCode::OK);
    s.settled(&task_id).await;
    let done: Value = get(&task_id).await.json();
    let done = &done["result"];
    assert_eq!(done["status"], "completed", "{done}");
    let _: rmcp::model::GetTaskResult =
        serde_json::from_value(done.clone()).expect("a GetTaskResult");
    assert!(
        text_of(&done["result"]["content"][0]["text"]).contains("as a task"),
        "{done}"
    );
}

on_both!(in_2026_parked_calls_are_tasks_of_the_extension);

/// Review findings: what was authorized must still be authorized when it runs, and only a
/// signed approval releases a parked call.
async fn a_release_is_checked_again_when_it_runs(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;

    // A status flipped to `approved` behind the gateway's back, with no approval: refused.
    let id = parked_id(&s.call_echo("no approval", None).await);
    sqlx::query("UPDATE invocations SET status = 'approved' WHERE id = $1")
        .bind(&id)
        .execute(s.app.store.pool())
        .await
        .unwrap();
    let done = s.settled(&id).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        done["result"]["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );

    // A retry that echoes the parked call's own id is that call, not a second one.
    let parked = parked_id(&s.call_echo("only once", None).await);
    let again = s.call_echo("only once", Some(&parked)).await;
    assert_eq!(parked_id(&again), parked);

    // The session revoked between parking and approval: the approval releases nothing.
    let admin = s.app.token("default", "sec", &[scope::ADMIN]).await;
    let sid = s.list["_meta"]["session_id"].as_str().unwrap();
    let reply = s.app.post(format!("/sessions/{sid}:revoke"));
    let reply = reply.as_(&admin).await;
    reply.expect_status(StatusCode::OK);
    let args_hash = s.invocation(&s.approver, &parked).await["args_hash"].clone();
    s.decide(
        &s.approver,
        &parked,
        "approve",
        json!({"args_hash": args_hash}),
    )
    .await
    .expect_status(StatusCode::OK);
    let done = s.settled(&parked).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        done["result"]["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );
    s.verify(&done["result"]);
    // Nothing reached the upstream (the stats call is refused too now: count in the journal).
    let executions = crate::helpers::executions_in_journal(&s.app.store, "default").await;
    assert_eq!(executions, before, "only the first stats call ran");
}

/// Review finding: a token made by a dashboard user is recorded as made by `user:<name>`; the
/// same person approving with a token of their own is still its creator.
async fn the_creator_of_the_callers_token_cannot_approve(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let request = app::dto::CreateTokenRequest {
        actor_id: "agent".into(),
        scopes: vec![scope::RUN.to_owned()],
        name: None,
        expires_at: None,
        environments: None,
    };
    let made_by_alice = aperture_core::tokens::create_unchecked(
        &s.app.store,
        &s.app.journal,
        "default",
        &aperture_core::journal::Author::new("user:alice", "usr_00000000000000000000000000000001"),
        &request,
    )
    .await
    .map_err(|e| e.into_app_error())
    .unwrap()
    .secret;
    let mut meta = s.echo("mcp__fixture__echo");
    meta["invocation_id"] = json!("by-alices-agent");
    let parked = s
        .rpc(
            &made_by_alice,
            "tools/call",
            json!({"name": "mcp__fixture__echo", "arguments": {"text": "x"}, "_meta": meta}),
        )
        .await;
    let id = parked_id(&parked);
    let args_hash = s.invocation(&s.approver, &id).await["args_hash"].clone();
    // `s.approver` is alice's approve token.
    s.decide(&s.approver, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::FORBIDDEN);
    let bob = s.app.token("default", "bob", &[scope::APPROVE]).await;
    s.decide(&bob, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::OK);
}

/// Issue 45 item 2: every receipt names the principal that acted (CONTRACT §15). The caller's
/// token on its decision and on the execution of its released call; the dashboard user who
/// approved (by the `usr_…` id `GET /users` shows) on the approval; the admin's token on its
/// admin records; `operator` for the command line; `anonymous` for a failed sign-in. Tokens
/// record the principal that created them.
async fn receipts_name_the_principal_that_acted(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let token_id = |secret: &str| {
        let hash = aperture_core::principal::secret_hash(secret);
        let store = s.app.store.clone();
        async move {
            aperture_core::store::tokens::find_by_secret_hash(&store, &hash)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let agent = token_id(&s.agent).await;
    assert_eq!(agent.created_by, "operator", "made by the command line");
    let admin = s.app.token("default", "ops2", &[scope::ADMIN]).await;
    let admin_id = token_id(&admin).await.id;

    // A token made by the admin's token records that token.
    let helper = json!({"actor_id": "helper", "scopes": [scope::RUN]});
    let made = s.app.post("/tokens").as_(&admin).json(helper).await.json();
    assert_eq!(made["token"]["created_by"], admin_id.as_str(), "{made}");

    // A user gets an immutable `usr_` id, shown by GET /users.
    let carol = json!({"username": "carol", "password": "a long enough password", "scopes": [scope::APPROVE]});
    let carol = s.app.post("/users").as_(&admin).json(carol).await;
    let carol = carol.expect_created();
    let carol_id = carol["id"].as_str().unwrap().to_owned();
    assert!(
        carol_id.starts_with("usr_") && carol_id.len() == 36,
        "{carol}"
    );
    let listed: Value = s.app.get("/users").as_(&admin).await.json();
    let shown = find(&listed["users"], "username", "carol");
    assert_eq!(shown["id"], carol_id.as_str());

    // Someone guesses carol's password; carol signs in and approves the agent's parked call.
    let browser = &s.app.browser;
    let failed = s.app.sign_in(browser, "carol", "not her password").await;
    failed.expect_status(StatusCode::UNAUTHORIZED);
    let signed_in = s.app.sign_in(browser, "carol", "a long enough password");
    signed_in.await.expect_status(StatusCode::OK);
    let parked = s.call_echo("by carol's leave", None).await;
    let id = parked_id(&parked);
    assert_eq!(parked["_meta"]["receipt"]["principal"], agent.id.as_str());
    let view = s.invocation(&s.approver, &id).await;
    let form = [
        ("id", id.as_str()),
        ("action", "approve"),
        ("args_hash", view["args_hash"].as_str().unwrap()),
        ("definition_hash", view["definition_hash"].as_str().unwrap()),
    ];
    let decided = s.app.in_browser(Method::POST, "/ui/approvals/decide");
    let decided = decided.header("accept", "application/json").form(&form);
    decided.await.expect_status(StatusCode::OK);
    let done = s.settled(&id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let execution = &done["result"]["_meta"]["receipt"];
    assert_eq!(execution["kind"], "execution");
    assert_eq!(
        execution["principal"],
        agent.id.as_str(),
        "a released call executes for its caller"
    );
    s.verify(&done["result"]);

    // Every record in the journal names its principal, and each the one that acted.
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT receipt FROM journal WHERE tenant_id = 'default' ORDER BY seq")
            .fetch_all(s.app.store.pool())
            .await
            .unwrap();
    let receipts: Vec<Value> = rows
        .iter()
        .map(|(r,)| serde_json::from_str(r).unwrap())
        .collect();
    for r in &receipts {
        verify_receipt_json(r, &s.keys).unwrap();
        let principal = r["principal"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(
            principal.starts_with("tok_")
                || principal.starts_with("usr_")
                || ["operator", "anonymous"].contains(&principal),
            "{r}"
        );
    }
    let find = |pred: &dyn Fn(&Value) -> bool| -> &Value {
        receipts
            .iter()
            .find(|r| pred(r))
            .unwrap_or_else(|| panic!("no such record among {} records", receipts.len()))
    };
    let approval = find(&|r| r["receipt_id"] == done["approval_receipt_id"]);
    assert_eq!(approval["kind"], "approval");
    assert_eq!(approval["principal"], carol_id.as_str(), "the approver");
    assert_eq!(approval["actor_id"], "carol");
    let sign_in =
        find(&|r| r["kind"] == "admin" && r["decision"] == "allow" && r["actor_id"] == "carol");
    assert_eq!(sign_in["principal"], carol_id.as_str());
    let failed =
        find(&|r| r["kind"] == "admin" && r["decision"] == "deny" && r["actor_id"] == "carol");
    assert_eq!(failed["principal"], "anonymous");
    let by_admin = find(&|r| r["kind"] == "admin" && r["actor_id"] == "ops2");
    assert_eq!(by_admin["principal"], admin_id.as_str());
    let by_operator = find(&|r| r["kind"] == "admin" && r["actor_id"] == "operator");
    assert_eq!(by_operator["principal"], "operator");
    let grant = find(&|r| r["kind"] == "manifest" && r["actor_id"] == "agent");
    assert_eq!(grant["principal"], agent.id.as_str());
}

on_both!(
    a_release_is_checked_again_when_it_runs,
    the_creator_of_the_callers_token_cannot_approve,
    receipts_name_the_principal_that_acted,
);

/// `POST /invocations/{id}:cancel` as `token` (no body).
async fn cancel(s: &Setup, token: &str, id: &str) -> Reply {
    s.app
        .post(format!("/invocations/{id}:cancel"))
        .as_(token)
        .await
}

/// Issue 27 (cancellation): a caller cancels its own parked call. Another actor cannot (it
/// looks missing); the caller's cancellation journals an execution receipt with reason
/// `cancelled` and stores a protocol-valid result that a retry under the same
/// `invocation_id` returns; an approval afterwards, or a second cancellation, is a conflict;
/// nothing reached the upstream. An approver cancels a staged change the same way.
async fn a_caller_cancels_its_own_parked_call(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let parked = s.call_echo("never mind", Some("cancel-me")).await;
    let id = parked_id(&parked);
    let stranger = s.app.token("default", "stranger", &[scope::RUN]).await;
    cancel(&s, &stranger, &id)
        .await
        .expect_status(StatusCode::NOT_FOUND);
    cancel(&s, &s.agent, "inv_nope")
        .await
        .expect_status(StatusCode::NOT_FOUND);

    let cancelled = cancel(&s, &s.agent, &id).await.expect_ok();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["caller_status"], "cancelled");
    let result = &cancelled["result"];
    assert_eq!(result["isError"], true, "{result}");
    let receipt = &result["_meta"]["receipt"];
    assert_eq!(receipt["kind"], "execution");
    assert_eq!(receipt["decision"], "deny");
    assert_eq!(receipt["reason"], "cancelled");
    assert_eq!(receipt["invocation_id"], id.as_str());
    s.verify(result);

    // The caller's retry gets the stored outcome; nothing more can happen to it.
    let retried = s.call_echo("never mind", Some("cancel-me")).await;
    assert_eq!(
        retried["_meta"]["receipt"]["reason"], "cancelled",
        "{retried}"
    );
    let args_hash = s.invocation(&s.approver, &id).await["args_hash"].clone();
    s.decide(&s.approver, &id, "approve", json!({"args_hash": args_hash}))
        .await
        .expect_status(StatusCode::CONFLICT);
    cancel(&s, &s.agent, &id)
        .await
        .expect_status(StatusCode::CONFLICT);
    let listed = s.app.get("/invocations?status=cancelled").as_(&s.approver);
    let listed = listed.await.expect_status(StatusCode::OK).json_or_null();
    assert_eq!(listed["invocations"][0]["invocation_id"], id.as_str());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.upstream_calls().await, before + 1, "nothing ran");
}

async fn an_approver_cancels_a_staged_change(db: Db) {
    let Some(s) = setup_mode(db, "staged_change", |_| {}).await else {
        return;
    };
    let before = s.upstream_calls().await;
    let staged = s.call_echo("drop the table", None).await;
    assert_eq!(staged["_meta"]["status"], "staged", "{staged}");
    let id = text_of(&staged["_meta"]["invocation_id"]).to_owned();
    let reader = s.app.token("default", "auditor", &[scope::READ]).await;
    cancel(&s, &reader, &id)
        .await
        .expect_status(StatusCode::FORBIDDEN);
    let cancelled = cancel(&s, &s.approver, &id).await.expect_ok();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        cancelled["result"]["_meta"]["receipt"]["reason"],
        "cancelled"
    );
    s.verify(&cancelled["result"]);
    s.decide(
        &s.approver,
        &id,
        "apply",
        json!({"args_hash": cancelled["args_hash"]}),
    )
    .await
    .expect_status(StatusCode::CONFLICT);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.upstream_calls().await, before + 1, "nothing ran");
}

/// Issue 27 (cancellation): `tasks/list` lists the caller's own tasks only; `tasks/cancel`
/// cancels its own waiting task into the durable `cancelled` result that `tasks/result`
/// returns; a task that has ended cannot be cancelled again, and another actor's cannot be
/// cancelled at all.
async fn tasks_are_listed_and_cancelled(db: Db) {
    let Some(s) = setup_with(db, |_| {}).await else {
        return;
    };
    let raw = |token: String, method: &'static str, params: Value| s.raw(token, method, params);
    let init = raw(
        s.agent.clone(),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"tasks": {}}, "clientInfo": {"name": "t", "version": "1"}}),
    )
    .await;
    let tasks = &init["result"]["capabilities"]["tasks"];
    assert!(
        tasks["list"].is_object() && tasks["cancel"].is_object(),
        "{init}"
    );
    let mut ids = Vec::new();
    for text in ["first", "second"] {
        let created = raw(
            s.agent.clone(),
            "tools/call",
            json!({"name": "mcp__fixture__echo", "arguments": {"text": text},
                   "_meta": s.echo("mcp__fixture__echo"), "task": {"ttl": 60000}}),
        )
        .await;
        ids.push(text_of(&created["result"]["task"]["taskId"]).to_owned());
    }
    let listed = raw(s.agent.clone(), "tasks/list", json!({})).await;
    let listed: Vec<&str> = texts_of(&listed["result"]["tasks"], "taskId");
    assert_eq!(
        listed,
        vec![ids[1].as_str(), ids[0].as_str()],
        "newest first"
    );
    let stranger = s.app.token("default", "stranger", &[scope::RUN]).await;
    let theirs = raw(stranger.clone(), "tasks/list", json!({})).await;
    assert_eq!(theirs["result"]["tasks"], json!([]), "{theirs}");
    let bad = raw(s.agent.clone(), "tasks/list", json!({"cursor": "??"})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let refused = raw(stranger, "tasks/cancel", json!({"taskId": ids[0]})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let cancelled = raw(s.agent.clone(), "tasks/cancel", json!({"taskId": ids[0]})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["result"]["taskId"], ids[0].as_str());
    let result = raw(s.agent.clone(), "tasks/result", json!({"taskId": ids[0]})).await;
    assert_eq!(result["result"]["isError"], true, "{result}");
    assert_eq!(result["result"]["_meta"]["receipt"]["reason"], "cancelled");
    s.verify(&result["result"]);
    let again = raw(s.agent.clone(), "tasks/cancel", json!({"taskId": ids[0]})).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
    assert!(
        text_of(&again["error"]["message"]).contains("terminal"),
        "{again}"
    );
    // The other task still waits for its approver.
    let other = raw(s.agent.clone(), "tasks/get", json!({"taskId": ids[1]})).await;
    assert_eq!(other["result"]["status"], "input_required", "{other}");
}

on_both!(
    a_caller_cancels_its_own_parked_call,
    an_approver_cancels_a_staged_change,
    tasks_are_listed_and_cancelled,
);

/// Issue 27 (cancellation): an async job that is running is cancelled by its caller. The
/// worker stops waiting for the upstream (which is told to cancel), the invocation ends as
/// `cancelled` with a signed execution receipt with reason `cancelled`, and `tasks/get` says
/// so; another actor cannot cancel it.
async fn a_running_job_is_cancelled_by_its_caller(db: Db) {
    let Some(app) = TestApp::spawn_with(db, |_| {}).await else {
        return;
    };
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__slow", "mcp__fixture__stats"])
        .await;
    let policy = json!({"rules": [
        {"id": "slow-jobs", "match": {"name": "mcp__fixture__slow"}, "mode": "async_job_only"},
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "jobs", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let stranger = app.token("default", "stranger", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    let accepted = app
        .mcp_call(
            &agent,
            &list,
            "mcp__fixture__slow",
            json!({"millis": 20_000}),
        )
        .await;
    assert_eq!(accepted["_meta"]["status"], "working", "{accepted}");
    let id = text_of(&accepted["_meta"]["invocation_id"]).to_owned();
    let status = |token: String| {
        let view = app.get(format!("/invocations/{id}")).as_(token);
        async move { view.await.json_or_null() }
    };
    let mut seen = Value::Null;
    for _ in 0..100 {
        seen = status(agent.clone()).await;
        if seen["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen["status"], "running", "{seen}");
    let path = format!("/invocations/{id}:cancel");
    let reply = app.post(&path).as_(&stranger).await;
    reply.expect_status(StatusCode::NOT_FOUND);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(agent.clone()).await["status"], "running");
    let started = std::time::Instant::now();
    let reply = app.post(&path).as_(&agent).await;
    reply.expect_status(StatusCode::OK);
    let mut done = Value::Null;
    for _ in 0..200 {
        done = status(agent.clone()).await;
        if done["status"] == "cancelled" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not after the upstream's 20 s"
    );
    let receipt = &done["result"]["_meta"]["receipt"];
    assert_eq!(receipt["reason"], "cancelled", "{done}");
    assert_eq!(receipt["kind"], "execution");
    verify_receipt_json(receipt, &app.keys().await).unwrap();
    assert_eq!(
        app.upstream_cancellations(&agent, &list, 1).await,
        1,
        "the upstream call was cancelled"
    );
}

on_both!(a_running_job_is_cancelled_by_its_caller);
