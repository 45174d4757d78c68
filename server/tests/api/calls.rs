//! `POST /sessions/{id}/calls`: every check of CONTRACT §5 that exists at this stage, through
//! the real fixture upstream, with verifiable receipts.

use engine::receipt::{Jwk, verify_receipt_json};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::TestApp;

struct Setup {
    app: TestApp,
    agent: String,
    session: Value,
    keys: Vec<Jwk>,
}

async fn setup() -> Setup {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(
        &admin,
        &[
            "mcp__fixture__echo",
            "mcp__fixture__add",
            "mcp__fixture__big",
        ],
    )
    .await;
    let policy = json!({"rules": [
        {"id": "big-capped", "match": {"name": "mcp__fixture__big"}, "mode": "allow", "invocation": {"max_result_bytes": 200}},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    assert_eq!(
        app.client
            .put(app.api("/policies/p"))
            .bearer_auth(&admin)
            .json(&policy)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    app.client
        .post(app.api("/policies/p:activate"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let session: Value = app
        .client
        .post(app.api("/sessions"))
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let set: Value = app
        .client
        .get(app.url("/.well-known/aperture/keys"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
        let t = self.session["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == tool)
            .unwrap_or_else(|| panic!("{tool} listed"));
        let m = &self.session["_meta"];
        json!({
            "session_id": m["session_id"], "manifest_id": m["manifest_id"], "lease_id": m["lease_id"],
            "tool_version": t["_meta"]["toolVersion"], "expected_schema_hash": t["_meta"]["schemaHash"]
        })
    }

    async fn call_as(&self, token: &str, tool: &str, arguments: Value, meta: Value) -> Value {
        let sid = self.session["_meta"]["session_id"].as_str().unwrap();
        let response = self
            .app
            .client
            .post(self.app.api(&format!("/sessions/{sid}/calls")))
            .bearer_auth(token)
            .json(&json!({"name": tool, "arguments": arguments, "_meta": meta}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let result: Value = response.json().await.unwrap();
        verify_receipt_json(&result["_meta"]["receipt"], &self.keys)
            .expect("every answer carries a receipt that verifies");
        result
    }

    async fn call(&self, tool: &str, arguments: Value, meta: Value) -> Value {
        self.call_as(&self.agent, tool, arguments, meta).await
    }
}

fn reason(result: &Value) -> &str {
    result["_meta"]["receipt"]["reason"].as_str().unwrap()
}

#[tokio::test]
async fn an_allowed_call_runs_upstream_and_returns_an_execution_receipt() {
    let s = setup().await;
    let result = s
        .call(
            "mcp__fixture__echo",
            json!({"text": "hello"}),
            s.echo("mcp__fixture__echo"),
        )
        .await;
    assert_eq!(result["isError"], false, "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hello"),
        "{result}"
    );
    let receipt = &result["_meta"]["receipt"];
    assert_eq!(receipt["kind"], "execution");
    assert_eq!(receipt["decision"], "allow");
    assert_eq!(
        receipt["args_hash"],
        engine::canonical::args_hash(&json!({"text": "hello"})).unwrap()
    );
    assert!(
        receipt["target"]["endpoint_fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    // Caller receipts reveal no argument values.
    assert!(!receipt.to_string().contains("hello"));
    let reports = aperture::journal::verify(&s.app.store).await.unwrap();
    assert!(reports.iter().all(|r| r.error.is_none()));
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
    for (meta, want) in cases {
        let result = s
            .call("mcp__fixture__echo", args.clone(), meta.clone())
            .await;
        assert_eq!(result["isError"], true);
        assert_eq!(reason(&result), want, "{meta}");
        assert_eq!(result["_meta"]["receipt"]["decision"], "deny");
    }
    let unknown = s
        .call("mcp__fixture__slow", args.clone(), good.clone())
        .await;
    assert_eq!(
        reason(&unknown),
        "not_callable",
        "hidden looks like unknown"
    );
    let bad_args = s
        .call("mcp__fixture__echo", json!({"text": 5}), good.clone())
        .await;
    assert_eq!(reason(&bad_args), "arguments_invalid");
    let other = s.app.token("default", "intruder", &[scope::RUN]).await;
    let stolen = s
        .call_as(&other, "mcp__fixture__echo", args.clone(), good.clone())
        .await;
    assert_eq!(reason(&stolen), "actor_mismatch");

    // Oversize output is rejected before it reaches the journal or the caller.
    let big = s
        .call(
            "mcp__fixture__big",
            json!({"bytes": 5000}),
            s.echo("mcp__fixture__big"),
        )
        .await;
    assert_eq!(reason(&big), "result_too_large", "{big}");
    assert!(!big.to_string().contains("xxxxxxxxxx"));

    // Drift: an admin's version change after the grant.
    let admin = s.app.token("default", "ops2", &[scope::ADMIN]).await;
    s.app
        .client
        .put(s.app.api("/tools/mcp__fixture__add"))
        .bearer_auth(&admin)
        .json(&json!({"risk": ["read"], "version": "2"}))
        .send()
        .await
        .unwrap();
    let drifted = s
        .call(
            "mcp__fixture__add",
            json!({"a": 1, "b": 2}),
            s.echo("mcp__fixture__add"),
        )
        .await;
    assert_eq!(reason(&drifted), "manifest_drift");

    // Every decision is in the journal, and the chain verifies.
    let reports = aperture::journal::verify(&s.app.store).await.unwrap();
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
    assert_eq!(
        s.app
            .client
            .put(s.app.api("/policies/capped"))
            .bearer_auth(&admin)
            .json(&policy)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    s.app
        .client
        .post(s.app.api("/policies/capped:activate"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    s.session = s
        .app
        .client
        .post(s.app.api("/sessions"))
        .bearer_auth(&s.agent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let result = s
        .call(
            "mcp__fixture__echo",
            json!({"text": "spend"}),
            s.echo("mcp__fixture__echo"),
        )
        .await;
    assert_eq!(result["isError"], true);
    assert_eq!(reason(&result), "spend_gate_unavailable");
    assert_eq!(
        result["_meta"]["receipt"]["kind"], "decision",
        "no execution receipt: nothing ran"
    );
}
