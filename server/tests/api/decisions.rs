//! Decisions that the engine's unit tests cover, end to end through `/mcp` against the real
//! fixture upstream (issue 23, item 12): what a client sees and what the journal signs.

use engine::scope;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp};

const ECHO: &str = "mcp__fixture__echo";
const SLOW: &str = "mcp__fixture__slow";

/// The receipt reason of a `tools/call` result.
fn reason(result: &Value) -> &str {
    result["_meta"]["receipt"]["reason"].as_str().unwrap_or("")
}

/// CONTRACT §5: a tool whose descriptor requires a scope the caller lacks is refused with
/// `scope_missing` and a signed decision receipt; with the scope, the same call runs.
#[tokio::test]
async fn a_call_without_the_tool_s_required_scope_is_scope_missing() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    app.describe(
        &admin,
        ECHO,
        json!({"risk": ["read"], "required_scope": "fixture:echo"}),
    )
    .await;
    let plain = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&plain, json!({})).await;
    let refused = app
        .mcp_call(&plain, &list, ECHO, json!({"text": "hi"}))
        .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(reason(&refused), "scope_missing", "{refused}");
    assert_eq!(refused["_meta"]["receipt"]["decision"], "deny");
    assert_eq!(refused["_meta"]["receipt"]["kind"], "decision");

    let holder = app
        .token("default", "agent", &[scope::RUN, "fixture:echo"])
        .await;
    let list = app.mcp_list(&holder, json!({})).await;
    let ran = app
        .mcp_call(&holder, &list, ECHO, json!({"text": "hi"}))
        .await;
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(reason(&ran), "ok");
}

/// CONTRACT §5: a call under a lease that has ended is `lease_expired` (and a fresh list
/// grants a new lease that works).
#[tokio::test]
async fn a_call_under_an_ended_lease_is_lease_expired() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    // The lease's time passes (rather than a 15-minute wait).
    sqlx::query("UPDATE manifests SET lease_expires_at = $1 WHERE id = $2")
        .bind(aperture_core::store::now_ms() - 1)
        .bind(list["_meta"]["manifest_id"].as_str().unwrap())
        .execute(app.store.pool())
        .await
        .unwrap();
    let refused = app
        .mcp_call(&agent, &list, ECHO, json!({"text": "late"}))
        .await;
    assert_eq!(reason(&refused), "lease_expired", "{refused}");
    assert_eq!(refused["_meta"]["receipt"]["decision"], "deny");
    let relisted = app
        .mcp_list(&agent, json!({"session_id": list["_meta"]["session_id"]}))
        .await;
    assert_ne!(relisted["_meta"]["lease_id"], list["_meta"]["lease_id"]);
    let ran = app
        .mcp_call(&agent, &relisted, ECHO, json!({"text": "on time"}))
        .await;
    assert_eq!(reason(&ran), "ok", "{ran}");
}

/// CONTRACT §5 and the invocation policy's `max_duration_millis`: a slow upstream call is cut
/// at its deadline (`execution_timeout`, an execution receipt), the upstream is told to cancel,
/// and the caller gets its answer at the deadline, not when the upstream would have finished.
#[tokio::test]
async fn max_duration_millis_cuts_a_slow_upstream_call() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[SLOW, "mcp__fixture__stats"])
        .await;
    let policy = json!({"rules": [
        {"id": "slow-but-bounded", "match": {"name": SLOW}, "mode": "allow",
         "invocation": {"max_duration_millis": 300}},
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "deadlines", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    let started = std::time::Instant::now();
    let cut = app
        .mcp_call(&agent, &list, SLOW, json!({"millis": 20_000}))
        .await;
    let took = started.elapsed();
    assert_eq!(cut["isError"], true, "{cut}");
    assert_eq!(reason(&cut), "execution_timeout", "{cut}");
    assert_eq!(cut["_meta"]["receipt"]["kind"], "execution");
    assert!(
        took < std::time::Duration::from_secs(15),
        "answered at the deadline, not after the upstream's 20 s: {took:?}"
    );
    // The upstream heard that the call was cancelled.
    assert_eq!(
        app.upstream_cancellations(&agent, &list, 1).await,
        1,
        "the upstream call was cancelled"
    );
}

/// Issue 27 (cancellation): `notifications/cancelled` for a `tools/call` in flight stops it. The
/// caller is answered at once with a signed, journaled execution receipt with reason
/// `cancelled`, and the upstream is told to cancel too. A cancellation for the same request id
/// from another actor, or from another MCP session of the caller, stops nothing.
#[tokio::test]
async fn a_call_in_flight_is_cancelled_by_its_caller() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[SLOW, "mcp__fixture__stats"])
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let intruder = app.token("default", "intruder", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    // `mcp_call` sends its tools/call as request id 2, without an MCP session.
    let other_session = app.mcp_initialize(&agent).await;
    let cancel = |token: String, session: Option<String>| {
        let mut request = app.mcp_post(token);
        if let Some(s) = session {
            request = request.header("mcp-session-id", s);
        }
        let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 2, "reason": "changed my mind"}});
        let request = request.json(cancelled);
        async move {
            request.await.expect_status(reqwest::StatusCode::ACCEPTED);
        }
    };
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(300));

    // Not the caller's cancellations: the call runs to its end.
    let (done, ()) = tokio::join!(
        app.mcp_call(&agent, &list, SLOW, json!({"millis": 1_500})),
        async {
            pause().await;
            cancel(intruder.clone(), None).await;
            cancel(agent.clone(), Some(other_session.clone())).await;
        }
    );
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["content"][0]["text"], "done");

    // The caller's: answered at once, recorded as cancelled.
    let started = std::time::Instant::now();
    let (cut, ()) = tokio::join!(
        app.mcp_call(&agent, &list, SLOW, json!({"millis": 20_000})),
        async {
            pause().await;
            cancel(agent.clone(), None).await;
        }
    );
    let took = started.elapsed();
    assert_eq!(cut["isError"], true, "{cut}");
    assert_eq!(reason(&cut), "cancelled", "{cut}");
    let receipt = &cut["_meta"]["receipt"];
    assert_eq!(receipt["kind"], "execution");
    assert_eq!(receipt["decision"], "deny");
    assert!(receipt["seq"].is_u64(), "journaled: {cut}");
    engine::receipt::verify_receipt_json(receipt, &app.keys().await).unwrap();
    assert!(
        took < std::time::Duration::from_secs(10),
        "answered when cancelled, not after the upstream's 20 s: {took:?}"
    );
    // The upstream heard that the call was cancelled.
    assert_eq!(
        app.upstream_cancellations(&agent, &list, 1).await,
        1,
        "the upstream call was cancelled"
    );
}

/// Fork seed: the execution allowlist only narrows; it pre-approves nothing. A fork's
/// allowlisted tool whose mode is `approval_required` still parks for a person.
#[tokio::test]
async fn a_fork_s_allowlisted_approval_required_tool_still_parks() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[ECHO]).await;
    let policy = json!({"rules": [{"id": "echo-needs-a-person", "match": {"name": ECHO}, "mode": "approval_required"}]});
    app.activate_policy(&admin, "echo-approved", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let parent = app.mcp_list(&agent, json!({})).await;
    let forked = app
        .post(format!(
            "/sessions/{}/forks",
            parent["_meta"]["session_id"].as_str().unwrap()
        ))
        .as_(&agent)
        .json(json!({"fork_tools": [ECHO]}))
        .await;
    assert_eq!(forked.status(), reqwest::StatusCode::CREATED);
    let child: Value = forked.json();
    let parked = app
        .mcp_call(&agent, &child, ECHO, json!({"text": "needs a person"}))
        .await;
    assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
    assert_eq!(parked["_meta"]["receipt"]["decision"], "park", "{parked}");
    assert_eq!(reason(&parked), "ok");
}
