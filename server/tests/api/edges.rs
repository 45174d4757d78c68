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
