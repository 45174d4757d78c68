//! Issue 45, item 7: gRPC and Connect `application/proto` requests are authenticated, and the
//! method's scope checked, before their message is read. The real `aperture` binary, whose body
//! limit (1 MiB) lets a megabyte message through to be refused.

use std::process::Child;

use aperture::api::connect::SERVICE;
use engine::scope;
use reqwest::StatusCode;
use serde_json::Value;
use tonic::Code;

use crate::cli::aperture;
use crate::crash::{serve, token};
use crate::helpers::{Db, TestDb};

/// `aperture serve` on a fresh SQLite database, killed when dropped.
struct Server {
    child: Child,
    url: String,
    /// A token of scope `:read`.
    reader: String,
    _db: TestDb,
}

impl Server {
    async fn start() -> Self {
        let db = TestDb::new(Db::Sqlite).await.unwrap();
        assert!(aperture(&db, &["migrate"], None).status.success());
        let reader = token(&db, "sec", scope::READ);
        let (child, url) = serve(&db).await;
        Self {
            child,
            url,
            reader,
            _db: db,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Request messages as bytes, sent and answered as they are.
#[derive(Clone, Copy)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let remaining = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, remaining).to_vec()))
    }
}

/// `message` as the request of `method` over gRPC, with `token` as its bearer token.
async fn grpc(
    url: &str,
    token: Option<&str>,
    method: &str,
    message: Vec<u8>,
) -> Result<Vec<u8>, tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.unwrap();
    let mut request = tonic::Request::new(message);
    if let Some(t) = token {
        let value = format!("Bearer {t}").parse().unwrap();
        request.metadata_mut().insert("authorization", value);
    }
    let path = format!("{}/{method}", SERVICE).parse().unwrap();
    client
        .unary(request, path, Raw)
        .await
        .map(tonic::Response::into_inner)
}

/// `message` as the binary (`application/proto`) Connect request of `method`: the status, the
/// `WWW-Authenticate` header, and the body (the error's JSON).
async fn connect(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    method: &str,
    message: Vec<u8>,
) -> (StatusCode, Option<String>, Value) {
    let mut request = client
        .post(format!("{url}{SERVICE}/{method}"))
        .header("content-type", "application/proto")
        .body(message);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = if status.is_success() {
        Value::Null
    } else {
        response.json().await.unwrap()
    };
    (status, challenge, body)
}

/// A megabyte that is no protobuf message: a varint that never ends.
fn garbage() -> Vec<u8> {
    vec![0xff; 1_000_000]
}

const CHALLENGE: &str = "Bearer realm=\"aperture\"";

/// A megabyte of garbage sent without a token, with a forged one, or with a `:read` token to a
/// method that needs `:admin`, is refused for who sent it, never as the `invalid_argument`
/// decoding it gives: it was not read.
#[tokio::test]
async fn grpc_refuses_callers_without_a_token_or_the_scope_before_reading_the_message() {
    let server = Server::start().await;
    let url = &server.url;
    let decoded = grpc(url, Some(&server.reader), "ValidatePolicy", garbage())
        .await
        .unwrap_err();
    assert_eq!(decoded.code(), Code::InvalidArgument, "{decoded:?}");

    let anonymous = grpc(url, None, "ValidatePolicy", garbage())
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
    assert_eq!(
        anonymous.metadata().get("www-authenticate").unwrap(),
        CHALLENGE,
        "the challenge REST gives"
    );
    let forged = grpc(url, Some("apt_not-a-token"), "ValidatePolicy", garbage())
        .await
        .unwrap_err();
    assert_eq!(forged.code(), Code::Unauthenticated, "{forged:?}");
    let unentitled = grpc(url, Some(&server.reader), "CreateToken", garbage())
        .await
        .unwrap_err();
    assert_eq!(unentitled.code(), Code::PermissionDenied, "{unentitled:?}");
    assert!(
        unentitled.message().contains(scope::ADMIN),
        "{unentitled:?}"
    );
}

/// The same over Connect, in the binary format and in JSON.
#[tokio::test]
async fn connect_refuses_callers_without_a_token_or_the_scope_before_reading_the_message() {
    let server = Server::start().await;
    let (url, client) = (&server.url, reqwest::Client::new());
    let (status, _, body) = connect(
        &client,
        url,
        Some(&server.reader),
        "ValidatePolicy",
        garbage(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_argument", "{body}");

    let (status, challenge, body) = connect(&client, url, None, "ValidatePolicy", garbage()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "unauthenticated", "{body}");
    assert_eq!(
        challenge.as_deref(),
        Some(CHALLENGE),
        "the challenge REST gives"
    );
    let (status, _, body) = connect(
        &client,
        url,
        Some("apt_not-a-token"),
        "ValidatePolicy",
        garbage(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, _, body) =
        connect(&client, url, Some(&server.reader), "CreateToken", garbage()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "permission_denied", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains(scope::ADMIN),
        "{body}"
    );

    // JSON that does not parse, from a caller without the scope: refused for the scope.
    let response = client
        .post(format!("{url}{SERVICE}/CreateToken"))
        .header("content-type", "application/json")
        .bearer_auth(&server.reader)
        .body(vec![b'['; 1_000_000])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}
