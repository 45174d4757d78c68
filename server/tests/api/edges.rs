//! Issue 24: the edges of the HTTP surface answer in the API's shape too.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{Requests, TestApp, rpc, text_of};

/// Sends `request` as raw bytes and reads the answer until the server closes.
async fn raw(app: &TestApp, request: &[u8]) -> String {
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    tcp.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// A request line longer than the HTTP parser takes (64 KiB) never reaches the router; its 414
/// used to have an empty body. More headers than the parser takes likewise (431). Both come back
/// as the API's JSON error, and the server goes on serving.
#[tokio::test]
async fn an_over_long_path_or_headers_get_the_json_error_shape() {
    let app = TestApp::spawn().await;
    // (Raw bytes: an HTTP client refuses to send such a URI at all.)
    let answer = raw(
        &app,
        format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000)).as_bytes(),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 414 "),
        "{}",
        &answer[..answer.len().min(200)]
    );
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "bad_request", "{body}");
    assert!(text_of(&body["error"]["message"]).contains("URI"));

    let answer = raw(
        &app,
        format!(
            "GET /healthz HTTP/1.1\r\nhost: x\r\n{}\r\n",
            (0..150)
                .map(|i| format!("x-h{i}: v\r\n"))
                .collect::<String>()
        )
        .as_bytes(),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 431 "),
        "{}",
        &answer[..answer.len().min(200)]
    );
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "bad_request");

    // An ordinary request on a fresh connection still works, and a long path the parser
    // accepts is an ordinary JSON 404.
    app.get_raw("/healthz").await.expect_status(StatusCode::OK);
    let missing = app.get(format!("/{}", "c".repeat(20_000))).await;
    assert!(missing.status().is_client_error());
}

/// Issue 45 (item 10): every identifier a client chooses and the gateway stores, publishes or
/// echoes is bounded. A 20 KB `requestId` in `notifications/cancelled` is neither stored nor
/// published, and a caller's cancellations are stored at most 60 a minute (each a fixed-size
/// digest); a JSON-RPC `id`, a cursor, a progress token, a retry key or an idempotency key over
/// 256 bytes is -32602; an `Mcp-Session-Id` that is not 1–128 visible ASCII characters, or a
/// `Last-Event-ID` over 256 bytes, is 400.
#[tokio::test]
async fn client_chosen_identifiers_are_bounded() {
    use serde_json::json;
    let app = TestApp::spawn().await;
    let agent = app.token("default", "agent", &[engine::scope::RUN]).await;
    let stored = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM events")
            .fetch_one(app.store.pool())
            .await
            .unwrap()
    };
    let post = |body: Value, headers: &[(&str, String)]| {
        let mut call = app.mcp_post(&agent);
        for (k, v) in headers {
            call = call.header(k, v);
        }
        call.json(body).try_send()
    };
    let before = stored().await;
    let huge = "x".repeat(20_000);
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": huge, "reason": "x"}});
    let cancelled = post(cancelled, &[]).await.unwrap();
    cancelled.expect_status(StatusCode::ACCEPTED);
    assert_eq!(
        stored().await,
        before,
        "an oversized request id is not stored"
    );
    for n in 0..200 {
        let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": format!("request-{n}")}});
        let cancelled = post(cancelled, &[]).await.unwrap();
        cancelled.expect_status(StatusCode::ACCEPTED);
    }
    let relayed = stored().await - before;
    assert!((1..=60).contains(&relayed), "{relayed} stored");
    let bodies: Vec<String> = sqlx::query_scalar("SELECT body FROM events")
        .fetch_all(app.store.pool())
        .await
        .unwrap();
    assert!(
        bodies
            .iter()
            .all(|b| !b.contains("request-") && b.len() < 1024),
        "digests only: {bodies:?}"
    );

    let long = "y".repeat(300);
    let ping = json!({"jsonrpc": "2.0", "id": long, "method": "ping"});
    let id_answer = post(ping, &[]).await.unwrap().json();
    assert_eq!(id_answer["error"]["code"], -32602, "{id_answer}");
    assert_eq!(id_answer["id"], Value::Null, "not echoed");
    for params in [
        json!({"cursor": long}),
        json!({"_meta": {"progressToken": long}}),
        json!({"name": "x", "_meta": {"invocation_id": long}}),
        json!({"name": "x", "arguments": {"idempotency_key": long}}),
    ] {
        let method = if params.get("name").is_some() {
            "tools/call"
        } else {
            "tools/list"
        };
        let answer = post(rpc(1, method, params.clone()), &[])
            .await
            .unwrap()
            .json();
        assert_eq!(answer["error"]["code"], -32602, "{params}: {answer}");
        assert!(!answer.to_string().contains(&long), "{answer}");
    }
    for session in [
        "z".repeat(129),
        "has space".to_owned(),
        "tab\there".to_owned(),
    ] {
        let ping = rpc(1, "ping", Value::Null);
        let response = post(ping, &[("mcp-session-id", session.clone())]).await;
        // A header reqwest refuses to send is refused by the client already.
        let Ok(response) = response else { continue };
        response.expect_status(StatusCode::BAD_REQUEST);
    }
    let session = app.mcp_initialize(&agent).await;
    let last_event = app.get_raw("/mcp").as_(&agent);
    let last_event = last_event.header("accept", "text/event-stream");
    let last_event = last_event.header("mcp-session-id", session);
    let last_event = last_event.header("last-event-id", &long).await;
    last_event.expect_status(StatusCode::BAD_REQUEST);
}

/// Issue 45 (item 12): the server with one-second deadlines for request heads and bodies.
async fn impatient() -> TestApp {
    TestApp::spawn_with(crate::helpers::Db::Sqlite, |config| {
        config.header_read_timeout = Duration::from_secs(1);
        config.body_read_timeout = Duration::from_secs(1);
    })
    .await
    .unwrap()
}

/// A connection to `app` that has sent `bytes`.
async fn sent(app: &TestApp, bytes: &[u8]) -> tokio::net::TcpStream {
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    tcp
}

/// What the server sends on `tcp` until it closes it; `None` if it still holds the connection
/// after `limit`.
async fn until_closed(tcp: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(limit, tcp.read_to_end(&mut answer)).await;
    // A reset is a close too.
    read.ok()
        .map(|_| String::from_utf8_lossy(&answer).into_owned())
}

/// Issue 45 (item 12): slowloris. A client that sends part of a request head and stalls, sends
/// nothing at all, sends part of HTTP/2's preface, or keeps an HTTP/1.1 connection idle after
/// its request, has its connection closed once the header read timeout has passed (one second
/// here; the socket used to be held for as long as the client liked).
#[tokio::test]
async fn a_request_head_that_does_not_arrive_in_time_closes_the_connection() {
    let app = impatient().await;
    let limit = Duration::from_secs(10);
    let started = std::time::Instant::now();
    let mut partial = sent(&app, b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ").await;
    let mut silent = sent(&app, b"").await;
    let mut preface = sent(&app, b"PRI * HTTP/2.0\r\n").await;
    let mut idle = sent(&app, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let answer = until_closed(&mut partial, limit).await;
    assert_eq!(
        answer.as_deref(),
        Some(""),
        "a partial head is not answered"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed for its timeout, not at once: {:?}",
        started.elapsed()
    );
    let answer = until_closed(&mut silent, limit).await;
    assert_eq!(answer.as_deref(), Some(""), "a silent connection is closed");
    let answer = until_closed(&mut preface, limit).await;
    assert_eq!(
        answer.as_deref(),
        Some(""),
        "a partial HTTP/2 preface is closed"
    );
    let answered = until_closed(&mut idle, limit)
        .await
        .expect("closed when idle");
    assert!(answered.starts_with("HTTP/1.1 200 OK"), "{answered}");
    assert!(
        answered.ends_with("ok"),
        "its request was answered: {answered}"
    );
}

/// Issue 45 (item 12): a request whose body does not arrive within the body timeout (one second
/// here) is answered `408` in its caller's kind, and the connection closed: a body sent halfway
/// and stalled, and one dripped a byte at a time (a timeout that restarts with every chunk never
/// ends it).
#[tokio::test]
async fn a_request_body_that_does_not_arrive_in_time_is_answered_408() {
    let app = impatient().await;
    let agent = app.token("default", "agent", &[engine::scope::RUN]).await;
    let limit = Duration::from_secs(10);
    let head = |path: &str, token: Option<&str>| {
        let auth = token
            .map(|t| format!("authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\n{auth}content-length: 100\r\n\r\n"
        )
    };

    let mut mcp = sent(
        &app,
        format!("{}{{\"jsonrpc\"", head("/mcp", None)).as_bytes(),
    )
    .await;
    let answer = until_closed(&mut mcp, limit).await.expect("closed");
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], -32600, "a JSON-RPC error: {body}");
    assert!(
        text_of(&body["error"]["message"]).contains("did not arrive"),
        "{body}"
    );

    let path = aperture::api::PREFIX.to_owned() + "/sessions";
    let mut drip = sent(&app, head(&path, Some(&agent)).as_bytes()).await;
    let (mut from, mut to) = drip.split();
    let dripping = async {
        for byte in b"{\"preset\": \"dripped\"".iter().cycle() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if to.write_all(&[*byte]).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await
    };
    // A byte every 200 ms until the server answers.
    let mut answer = vec![0u8; 4096];
    let first = tokio::select! {
        read = tokio::time::timeout(limit, from.read(&mut answer)) => read,
        () = dripping => unreachable!(),
    };
    let n = first.expect("an answer in time").unwrap();
    answer.truncate(n);
    let _ = tokio::time::timeout(limit, from.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{answer}"
    );
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        body["error"]["code"], "bad_request",
        "the API's error: {body}"
    );

    // The server serves on.
    app.get_raw("/healthz").await.expect_status(StatusCode::OK);
}

/// Issue 45 (item 12): streams are not cut by the head and body deadlines. An MCP `GET` stream
/// and a gRPC server reflection stream (whose request body is itself a stream) both serve on
/// well past them.
#[tokio::test]
async fn streams_outlive_the_head_and_body_deadlines() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    let app = impatient().await;
    let agent = app.token("default", "agent", &[engine::scope::RUN]).await;
    // `/mcp` answers only to the names of its loopback listener, and a session only to its
    // principal.
    let host = app.address.trim_start_matches("http://");
    let session = app.mcp_initialize(&agent).await;
    let mut sse = sent(
        &app,
        format!(
            "GET /mcp HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n\
             mcp-session-id: {session}\r\nauthorization: Bearer {agent}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    let mut head = [0u8; 512];
    let n = sse.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 "), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");

    let channel = tonic::transport::Channel::from_shared(app.url(""))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (requests, stream) = tokio::sync::mpsc::channel(4);
    let list = || ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    requests.send(list()).await.unwrap();
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(stream))
        .await
        .unwrap()
        .into_inner();
    assert!(answers.message().await.unwrap().is_some());

    // Three times either deadline.
    assert_eq!(
        until_closed(&mut sse, Duration::from_secs(3)).await,
        None,
        "the MCP stream is open"
    );
    let taken = requests.send(list()).await;
    let again = tokio::time::timeout(Duration::from_secs(5), answers.message()).await;
    assert!(
        taken.is_ok() && matches!(again, Ok(Ok(Some(_)))),
        "the reflection stream serves on: {again:?}"
    );
}
