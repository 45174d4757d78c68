//! Issue 24: the edges of the HTTP surface answer in the API's shape too.

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::TestApp;

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
    assert!(body["error"]["message"].as_str().unwrap().contains("URI"));

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
    let ok = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let missing = app
        .client
        .get(app.api(&format!("/{}", "c".repeat(20_000))))
        .send()
        .await
        .unwrap();
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
        let mut rb = app
            .client
            .post(app.url("/mcp"))
            .bearer_auth(&agent)
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            rb = rb.header(*k, v.as_str());
        }
        rb.json(&body).send()
    };
    let before = stored().await;
    let huge = "x".repeat(20_000);
    let cancelled = post(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": huge, "reason": "x"}}),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(cancelled.status(), StatusCode::ACCEPTED);
    assert_eq!(
        stored().await,
        before,
        "an oversized request id is not stored"
    );
    for n in 0..200 {
        let cancelled = post(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": format!("request-{n}")}}),
            &[],
        )
        .await
        .unwrap();
        assert_eq!(cancelled.status(), StatusCode::ACCEPTED);
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
    let id_answer: Value = post(json!({"jsonrpc": "2.0", "id": long, "method": "ping"}), &[])
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
        let answer: Value = post(
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            &[],
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(answer["error"]["code"], -32602, "{params}: {answer}");
        assert!(!answer.to_string().contains(&long), "{answer}");
    }
    for session in [
        "z".repeat(129),
        "has space".to_owned(),
        "tab\there".to_owned(),
    ] {
        let response = post(
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            &[("mcp-session-id", session.clone())],
        )
        .await;
        // A header reqwest refuses to send is refused by the client already.
        let Ok(response) = response else { continue };
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{session:?}");
    }
    let last_event = app
        .client
        .get(app.url("/mcp"))
        .bearer_auth(&agent)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", "mcp_ok")
        .header("last-event-id", long.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(last_event.status(), StatusCode::BAD_REQUEST);
}
