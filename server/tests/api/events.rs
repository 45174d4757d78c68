//! Issue 26: what one node must tell the others at once travels through the database — here the
//! approvals queue's live updates (`GET /invocations/events`): within one process, between two
//! processes on one SQLite file (polling); between nodes on PostgreSQL (`LISTEN`/`NOTIFY`) in
//! `cluster.rs`.

use std::time::Duration;

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::cli::aperture;
use crate::crash::{activate, add_fixture_upstream, describe_read, grant, serve, token};
use crate::helpers::{Db, SseReader, TestApp, TestDb};

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
    app.activate_policy(
        &admin,
        "p",
        json!({"rules": [{"id": "park-echo", "match": {"name": "mcp__fixture__echo"}, "mode": "approval_required"}]}),
    )
    .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let stranger = app.token("default", "stranger", &[scope::RUN]).await;
    let approver = app.token("default", "alice", &[scope::APPROVE]).await;
    let url = app.api("/invocations/events");
    let mut queue = SseReader::open(&app.client, &url, &approver).await;
    let mut own = SseReader::open(&app.client, &url, &agent).await;
    let mut other = SseReader::open(&app.client, &url, &stranger).await;

    let list = app.mcp_list(&agent, json!({})).await;
    let parked = app
        .mcp_call(
            &agent,
            &list,
            "mcp__fixture__echo",
            json!({"text": SECRET_TEXT}),
            json!({}),
        )
        .await;
    let id = parked["_meta"]["invocation_id"]
        .as_str()
        .unwrap()
        .to_owned();
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

    let view = app.get_json(&approver, &format!("/invocations/{id}")).await;
    let approved = app
        .post_json(
            &approver,
            &format!("/invocations/{id}:approve"),
            json!({"args_hash": view["args_hash"], "definition_hash": view["definition_hash"]}),
        )
        .await;
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
    let poll = {
        let (client, url, approver) = (app.client.clone(), url.clone(), approver.clone());
        tokio::spawn(async move {
            let response = client
                .get(format!("{url}?wait_seconds=10"))
                .bearer_auth(approver)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.json::<Value>().await.unwrap()
        })
    };
    // Time for the poll to start waiting (it hears only what comes after).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = app
        .mcp_call(
            &agent,
            &list,
            "mcp__fixture__echo",
            json!({"text": "again"}),
            json!({}),
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
    let (status, body) = app
        .rest(
            reqwest::Method::GET,
            &approver,
            "/invocations/events?wait_seconds=61",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["error"]["details"]["fields"][0]["path"],
        "wait_seconds"
    );
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
    let (mut one, url_one) = serve(&db).await;
    let (mut two, url_two) = serve(&db).await;
    let client = reqwest::Client::new();
    let api_one = format!("{url_one}{}", aperture::api::PREFIX);
    let api_two = format!("{url_two}{}", aperture::api::PREFIX);
    describe_read(&client, &api_one, &admin, "mcp__fixture__echo").await;
    activate(
        &client,
        &api_one,
        &admin,
        "p",
        &json!({"rules": [{"id": "park-echo", "match": {"name": "mcp__fixture__echo"}, "mode": "approval_required"}]}),
    )
    .await;
    let mut queue =
        SseReader::open(&client, &format!("{api_two}/invocations/events"), &approver).await;
    let (meta, calls) = grant(&client, &api_one, &agent, "mcp__fixture__echo").await;
    let parked: Value = client
        .post(&calls)
        .bearer_auth(&agent)
        .json(&json!({"name": "mcp__fixture__echo", "arguments": {"text": "hi"}, "_meta": meta}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
    let (mut one, url_one) = serve(&db).await;
    let (mut two, url_two) = serve(&db).await;
    let client = reqwest::Client::new();
    let api_one = format!("{url_one}{}", aperture::api::PREFIX);
    describe_read(&client, &api_one, &admin, "mcp__fixture__slow").await;
    let mcp = |url: &str| {
        client
            .post(format!("{url}/mcp"))
            .bearer_auth(&agent)
            .header("accept", "application/json")
            .header("mcp-session-id", "mcp_two_nodes")
    };
    let listed: Value = mcp(&url_two)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let m = &listed["result"]["_meta"];
    let tool = &listed["result"]["tools"][0];
    assert_eq!(tool["name"], "mcp__fixture__slow", "{listed}");
    let call = mcp(&url_two)
        .json(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "mcp__fixture__slow", "arguments": {"millis": 20_000},
            "_meta": {"session_id": m["session_id"], "manifest_id": m["manifest_id"],
                      "lease_id": m["lease_id"], "tool_version": tool["_meta"]["toolVersion"],
                      "expected_schema_hash": tool["_meta"]["schemaHash"]}}}),
        )
        .send();
    let started = std::time::Instant::now();
    let (answer, ()) = tokio::join!(call, async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let sent = mcp(&url_one)
            .json(
                &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 5}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), StatusCode::ACCEPTED);
    });
    let answer: Value = answer.unwrap().json().await.unwrap();
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
