//! Issue 26: what one node must tell the others at once travels through the database — here the
//! approvals queue's live updates (`GET /invocations/events`): within one process, between two
//! processes on one SQLite file (polling); between nodes on PostgreSQL (`LISTEN`/`NOTIFY`) in
//! `cluster.rs`.

use std::future::IntoFuture;
use std::time::Duration;

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::cli::aperture;
use crate::crash::{add_fixture_upstream, describe_read, expect_grant, serve, token};
use crate::helpers::{Db, Remote, Requests, SseReader, TestApp, TestDb, echo_of, rpc, text_of};

const SECRET_TEXT: &str = "an-argument-no-event-may-carry";

/// The approvals queue hears of a parked call, its approval and its outcome as they happen;
/// a caller with only the run scope hears of its own calls and not of another's; events never
/// carry argument values; without `Accept: text/event-stream` the same events come as a long
/// poll (the Connect method `WatchInvocations`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvers_hear_of_parked_calls_as_they_happen() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo"]).await;
    let policy = json!({"rules": [{"id": "park-echo", "match": {"name": "mcp__fixture__echo"}, "mode": "approval_required"}]});
    app.activate_policy(&admin, "p", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let stranger = app.token("default", "stranger", &[scope::RUN]).await;
    let approver = app.token("default", "alice", &[scope::APPROVE]).await;
    let events = |token: &str| app.get("/invocations/events").as_(token);
    let mut queue = SseReader::open(events(&approver)).await;
    let mut own = SseReader::open(events(&agent)).await;
    let mut other = SseReader::open(events(&stranger)).await;

    let list = app.mcp_list(&agent, json!({})).await;
    let parked = app
        .mcp_call(
            &agent,
            &list,
            "mcp__fixture__echo",
            json!({"text": SECRET_TEXT}),
        )
        .await;
    let id = text_of(&parked["_meta"]["invocation_id"]).to_owned();
    let event = queue
        .expect("invocation.parked", &id, Duration::from_secs(5))
        .await;
    assert_eq!(event["tool"], "mcp__fixture__echo");
    assert_eq!(event["status"], "input_required");
    assert_eq!(event["actor_id"], "agent");
    assert!(!event.to_string().contains(SECRET_TEXT), "{event}");
    own.expect("invocation.parked", &id, Duration::from_secs(5))
        .await;
    assert_eq!(
        other.next(Duration::from_millis(500)).await,
        None,
        "another actor's call is not the stranger's to hear of"
    );

    let view = app.get(format!("/invocations/{id}")).as_(&approver).await;
    let view = view.json();
    let approved = app
        .post(format!("/invocations/{id}:approve"))
        .as_(&approver)
        .json(json!({"args_hash": view["args_hash"], "definition_hash": view["definition_hash"]}))
        .await;
    let approved = approved.json();
    assert_eq!(approved["status"], "approved", "{approved}");
    let decided = queue
        .expect("invocation.decided", &id, Duration::from_secs(5))
        .await;
    assert_eq!(decided["decided_by"], "alice");
    let completed = queue
        .expect("invocation.completed", &id, Duration::from_secs(10))
        .await;
    assert_eq!(completed["status"], "completed");
    assert!(!completed.to_string().contains(SECRET_TEXT), "{completed}");

    // The long poll: waits for the next event, then answers with it.
    let poll = app
        .get("/invocations/events?wait_seconds=10")
        .as_(&approver);
    let poll = tokio::spawn(async move { poll.await.expect_ok() });
    // Time for the poll to start waiting (it hears only what comes after).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = app
        .mcp_call(
            &agent,
            &list,
            "mcp__fixture__echo",
            json!({"text": "again"}),
        )
        .await;
    let second = again["_meta"]["invocation_id"].as_str().unwrap();
    let polled = poll.await.unwrap();
    assert!(
        polled["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "invocation.parked" && e["data"]["invocation_id"] == second),
        "{polled}"
    );
    let too_long = app
        .get("/invocations/events?wait_seconds=61")
        .as_(&approver);
    let too_long = too_long
        .await
        .expect_status(StatusCode::UNPROCESSABLE_ENTITY);
    too_long.expect_field_error("wait_seconds");
}

/// Two `aperture serve` processes on one SQLite file: a call parked through one is heard of
/// by an approver connected to the other (the `events` table, polled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_on_the_same_sqlite_file_hears_of_it() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    let approver = token(&db, "alice", scope::APPROVE);
    add_fixture_upstream(&db, &[]);
    let (mut one, node_one) = serve(&db).await;
    let (mut two, node_two) = serve(&db).await;
    describe_read(&node_one, &admin, "mcp__fixture__echo").await;
    let park = json!({"rules": [{"id": "park-echo", "match": {"name": "mcp__fixture__echo"}, "mode": "approval_required"}]});
    node_one.activate_policy(&admin, "p", park).await;
    let mut queue = SseReader::open(node_two.get("/invocations/events").as_(&approver)).await;
    let (meta, calls) = expect_grant(&node_one, &agent, "mcp__fixture__echo").await;
    let echo = json!({"name": "mcp__fixture__echo", "arguments": {"text": "hi"}, "_meta": meta});
    let parked = node_one.post(&calls).as_(&agent).json(echo).await.json();
    let id = parked["_meta"]["invocation_id"].as_str().unwrap();
    let event = queue
        .expect("invocation.parked", id, Duration::from_secs(5))
        .await;
    assert_eq!(event["tool"], "mcp__fixture__echo");
    one.kill().unwrap();
    two.kill().unwrap();
    let _ = one.wait();
    let _ = two.wait();
}

/// Issue 27: a `notifications/cancelled` sent to one node stops the caller's `tools/call` in
/// flight on another (two processes on one SQLite file: the cancellation travels through the
/// `events` table); the call ends with a journaled `cancelled` receipt at once, not after the
/// upstream's 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_sent_to_another_node_stops_the_call() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    add_fixture_upstream(&db, &[]);
    let (mut one, node_one) = serve(&db).await;
    let (mut two, node_two) = serve(&db).await;
    describe_read(&node_one, &admin, "mcp__fixture__slow").await;
    // The session opened on node one is known to node two (the database they share).
    let session = node_one.mcp_initialize(&agent).await;
    let mcp = |node: &Remote| {
        let mcp = node.post_raw("/mcp").as_(&agent);
        let mcp = mcp.header("accept", "application/json");
        mcp.header("mcp-session-id", &session)
    };
    let listed = mcp(&node_two).json(rpc(1, "tools/list", Value::Null)).await;
    let listed = listed.json();
    let tool = &listed["result"]["tools"][0];
    assert_eq!(tool["name"], "mcp__fixture__slow", "{listed}");
    let params = json!({"name": "mcp__fixture__slow", "arguments": {"millis": 20_000},
        "_meta": echo_of(&listed["result"], "mcp__fixture__slow")});
    let call = mcp(&node_two).json(rpc(5, "tools/call", params));
    let started = std::time::Instant::now();
    let (answer, ()) = tokio::join!(call.into_future(), async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 5}});
        let sent = mcp(&node_one).json(cancelled).await;
        sent.expect_status(StatusCode::ACCEPTED);
    });
    let answer = answer.json();
    assert_eq!(
        answer["result"]["_meta"]["receipt"]["reason"], "cancelled",
        "{answer}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancelled, not run to the end: {:?}",
        started.elapsed()
    );
    one.kill().unwrap();
    two.kill().unwrap();
    let _ = one.wait();
    let _ = two.wait();
}
