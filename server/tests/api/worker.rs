//! Issue 45, item 6: the worker's last guard before execution. A released call is run only if
//! its tool is still the one granted: the test holds the worker (`aperture_core::test_hooks`, built
//! for tests only) between the release and that check, changes the tool upstream, and lets it
//! go on. After `:approve`, after `:apply` and for a queued `async_job_only` job, the call ends
//! `manifest_drift`, signed, and the fixture upstream's own call log shows it never ran.

use std::time::Duration;

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, fixture_command, text_of};

const ECHO: &str = "mcp__fixture__echo";
const ADD: &str = "mcp__fixture__add";
const DEPLOY: &str = "mcp__fixture__deploy";
const MUTATE: &str = "mcp__fixture__mutate";

struct Setup {
    app: TestApp,
    tenant: String,
    agent: String,
    approver: String,
    call_log: std::path::PathBuf,
    keys: Vec<Jwk>,
}

async fn setup() -> Setup {
    let app = TestApp::spawn().await;
    // A tenant of this test's own: holds are per tenant.
    let tenant = format!("hold-{}", &aperture_core::ids::new_id("t")[2..14]);
    let admin = app.token(&tenant, "ops", &[scope::ADMIN]).await;
    let call_log = app.data_dir.join(format!("{tenant}-calls.log"));
    let mut command = fixture_command();
    command.extend(["--call-log".to_owned(), call_log.display().to_string()]);
    let reply = app
        .post("/upstreams")
        .as_(&admin)
        .json(json!({"name": "fixture", "transport": "stdio", "command": command}))
        .await;
    reply.expect_status(StatusCode::CREATED);
    for tool in [ECHO, ADD, DEPLOY, MUTATE] {
        app.describe(&admin, tool, json!({"risk": ["read"]})).await;
    }
    let policy = json!({"rules": [
        {"id": "park", "match": {"name": ECHO}, "mode": "approval_required"},
        {"id": "stage", "match": {"name": ADD}, "mode": "staged_change"},
        {"id": "queue", "match": {"name": DEPLOY}, "mode": "async_job_only"},
        {"id": "rest", "match": {"risk": "read"}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "waits", policy).await;
    let agent = app.token(&tenant, "agent", &[scope::RUN]).await;
    let approver = app.token(&tenant, "alice", &[scope::APPROVE]).await;
    let keys = app.keys().await;
    Setup {
        app,
        tenant,
        agent,
        approver,
        call_log,
        keys,
    }
}

impl Setup {
    /// A fresh grant of the agent's.
    async fn list(&self) -> Value {
        self.app.mcp_list(&self.agent, json!({})).await
    }

    /// The names of the tools the upstream says it ran (its call log).
    fn ran(&self) -> Vec<String> {
        std::fs::read_to_string(&self.call_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').next().map(str::to_owned))
            .collect()
    }

    /// The invocation, once `until` holds.
    async fn invocation_until(&self, id: &str, until: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        for _ in 0..200 {
            last = self
                .app
                .get(format!("/invocations/{id}"))
                .as_(&self.approver)
                .await
                .json();
            if until(&last) {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("invocation {id} never got there: {last}");
    }

    /// The upstream rewrites `tool` (`echo`'s description) or removes it, and the catalog
    /// follows.
    async fn drift(&self, tool: &str) {
        let list = self.list().await;
        let arguments = if tool == ECHO {
            json!({"description": "Now it does something else."})
        } else {
            json!({"remove": tool.trim_start_matches("mcp__fixture__")})
        };
        let done = self
            .app
            .mcp_call(&self.agent, &list, MUTATE, arguments)
            .await;
        assert_eq!(done["content"][0]["text"], "mutated", "{done}");
        // The catalog follows the announcement: a new grant no longer lists the old tool.
        for _ in 0..200 {
            let fresh = self.list().await;
            let same = fresh["tools"]
                .as_array()
                .unwrap()
                .iter()
                .zip(list["tools"].as_array().unwrap())
                .all(|(a, b)| a == b);
            if !same || !TestApp::tool_names(&fresh).contains(&tool.to_owned()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{tool} never changed in the catalog");
    }

    /// Releases `id` as the approver (`:approve` or `:apply`, echoing what the queue shows).
    async fn release(&self, id: &str, verb: &str) {
        let shown = self.app.get(format!("/invocations/{id}"));
        let shown = shown.as_(&self.approver).await.json();
        let reply = self.app.post(format!("/invocations/{id}:{verb}")).as_(&self.approver).json(json!({"args_hash": shown["args_hash"], "definition_hash": shown["definition_hash"]})).await;
        reply.expect_status(StatusCode::OK);
    }

    /// The invocation ended `manifest_drift`, signed, and the upstream never ran `tool`.
    async fn assert_not_run(&self, id: &str, tool: &str) {
        let done = self
            .invocation_until(id, |i| i["status"] == "completed")
            .await;
        let receipt = &done["result"]["_meta"]["receipt"];
        assert_eq!(done["result"]["isError"], true, "{done}");
        assert_eq!(receipt["reason"], "manifest_drift", "{done}");
        assert_eq!(receipt["kind"], "execution", "{done}");
        verify_receipt_json(receipt, &self.keys).expect("signed");
        let short = tool.trim_start_matches("mcp__fixture__");
        assert!(
            !self.ran().iter().any(|t| t == short),
            "the upstream ran {short}: {:?}",
            self.ran()
        );
    }
}

#[tokio::test]
async fn a_tool_that_drifts_after_approve_is_not_run() {
    let s = setup().await;
    let list = s.list().await;
    let hold = aperture_core::test_hooks::hold_worker(&s.tenant);
    let parked = s
        .app
        .mcp_call(&s.agent, &list, ECHO, json!({"text": "later"}))
        .await;
    let id = text_of(&parked["_meta"]["invocation_id"]).to_owned();
    s.release(&id, "approve").await;
    hold.arrived(1).await;
    s.drift(ECHO).await;
    hold.release();
    s.assert_not_run(&id, ECHO).await;
}

#[tokio::test]
async fn a_tool_that_drifts_after_apply_is_not_run() {
    let s = setup().await;
    let list = s.list().await;
    let hold = aperture_core::test_hooks::hold_worker(&s.tenant);
    let staged = s
        .app
        .mcp_call(&s.agent, &list, ADD, json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(staged["_meta"]["status"], "staged", "{staged}");
    let id = text_of(&staged["_meta"]["invocation_id"]).to_owned();
    s.release(&id, "apply").await;
    hold.arrived(1).await;
    s.drift(ADD).await;
    hold.release();
    s.assert_not_run(&id, ADD).await;
}

#[tokio::test]
async fn a_queued_job_whose_tool_drifts_is_not_run() {
    let s = setup().await;
    let list = s.list().await;
    let hold = aperture_core::test_hooks::hold_worker(&s.tenant);
    let queued = s
        .app
        .mcp_call(&s.agent, &list, DEPLOY, json!({"service": "web"}))
        .await;
    assert_eq!(queued["_meta"]["status"], "working", "{queued}");
    let id = text_of(&queued["_meta"]["invocation_id"]).to_owned();
    hold.arrived(1).await;
    s.drift(DEPLOY).await;
    hold.release();
    s.assert_not_run(&id, DEPLOY).await;
}
