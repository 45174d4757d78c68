//! Issue 27, item 4: the service over gRPC on the same listener, called with the Rust client
//! tonic generates from `proto/agent_tool_exposure/v1/service.proto`: the bearer token in
//! metadata, the same scopes, statuses mapped from the service's errors (field paths of a
//! validation error in a `google.rpc.BadRequest` detail), a tool call end to end with its
//! verifiable receipt, and server reflection.

use engine::scope;
use prost_types::value::Kind;
use serde_json::{Value, json};
use tonic::Code;
use tonic::metadata::MetadataValue;

use crate::helpers::TestApp;

#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
mod pb {
    include!(concat!(env!("OUT_DIR"), "/agent_tool_exposure.v1.rs"));
}

use pb::agent_tool_exposure_service_client::AgentToolExposureServiceClient as Client;

async fn client(app: &TestApp) -> Client<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(app.url(""))
        .unwrap()
        .connect()
        .await
        .expect("the gRPC service answers on the server's own port");
    Client::new(channel)
}

/// `message` with `token` as its bearer token.
fn authed<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value: MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", value);
    request
}

fn to_json(value: &prost_types::Value) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(to_json).collect()),
        Some(Kind::StructValue(s)) => struct_json(s),
    }
}

fn struct_json(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), to_json(v)))
            .collect(),
    )
}

fn from_json(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(from_json).collect(),
        }),
        Value::Object(_) => Kind::StructValue(json_struct(value)),
    };
    prost_types::Value { kind: Some(kind) }
}

fn json_struct(value: &Value) -> prost_types::Struct {
    prost_types::Struct {
        fields: value
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), from_json(v)))
            .collect(),
    }
}

/// `CallTool` of `name` with `arguments` and the echo `meta` in `session` as `token`.
async fn call_tool(
    grpc: &mut Client<tonic::transport::Channel>,
    token: &str,
    session: &Value,
    name: &str,
    arguments: &Value,
    meta: &Value,
) -> Result<pb::ToolResult, tonic::Status> {
    grpc.call_tool(authed(
        token,
        pb::CallToolRequest {
            session_id: session.as_str().unwrap().into(),
            name: name.into(),
            arguments: Some(json_struct(arguments)),
            meta: Some(json_struct(meta)),
        },
    ))
    .await
    .map(tonic::Response::into_inner)
}

/// `google.rpc.Status` and `google.rpc.BadRequest`, to read a status's details.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BadRequest {
    #[prost(message, repeated, tag = "1")]
    field_violations: Vec<FieldViolation>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FieldViolation {
    #[prost(string, tag = "1")]
    field: String,
    #[prost(string, tag = "2")]
    description: String,
}

#[tokio::test]
async fn the_service_answers_over_grpc_with_the_same_scopes_and_errors() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let mut grpc = client(&app).await;

    // No token, a token without the scope, a bad one.
    let none = grpc
        .list_policies(pb::ListPoliciesRequest {})
        .await
        .unwrap_err();
    assert_eq!(none.code(), Code::Unauthenticated, "{none:?}");
    let denied = grpc
        .list_tokens(authed(&agent, pb::ListTokensRequest {}))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains(scope::ADMIN), "{denied:?}");
    let forged = grpc
        .list_policies(authed("apt_not-a-token", pb::ListPoliciesRequest {}))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), Code::Unauthenticated);

    // Absent, invalid (with the field path), a conflict of state.
    let missing = grpc
        .get_policy(authed(&admin, pb::PolicyIdRequest { id: "nope".into() }))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let invalid = grpc
        .put_policy(authed(
            &admin,
            pb::PutPolicyRequest {
                id: "p".into(),
                policy: Some(json_struct(
                    &json!({"rules": [{"id": "r", "mode": "sometimes"}]}),
                )),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument, "{invalid:?}");
    let status: RpcStatus = prost::Message::decode(invalid.details()).unwrap();
    assert_eq!(status.code, Code::InvalidArgument as i32);
    assert_eq!(
        status.details[0].type_url,
        "type.googleapis.com/google.rpc.BadRequest"
    );
    let bad: BadRequest = prost::Message::decode(status.details[0].value.as_slice()).unwrap();
    assert_eq!(bad.field_violations[0].field, "rules[0].mode", "{bad:?}");

    // Policies round trip: what REST stores is what gRPC reads.
    let put = grpc
        .put_policy(authed(
            &admin,
            pb::PutPolicyRequest {
                id: "reads".into(),
                // Whole numbers travel as doubles in a Struct; the service reads them as the
                // integers they are.
                policy: Some(json_struct(
                    &json!({"rules": [{"id": "reads", "match": {"risk": "read"}, "mode": "allow",
                                       "invocation": {"max_duration_millis": 5000}}]}),
                )),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.policy_id, "reads");
    assert_eq!(put.version, 1);
    let activated = grpc
        .activate_policy(authed(
            &admin,
            pb::ActivatePolicyRequest {
                id: "reads".into(),
                environment: None,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(activated.active_in, ["default"]);

    // An upstream, a session and a call with its receipt.
    let registered = grpc
        .register_upstream(authed(
            &admin,
            pb::RegisterUpstreamRequest {
                name: "fixture".into(),
                transport: "stdio".into(),
                command: crate::helpers::fixture_command(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(registered.sync.unwrap().tools > 0);
    for tool in ["mcp__fixture__echo", "mcp__fixture__add"] {
        grpc.put_tool_descriptor(authed(
            &admin,
            pb::PutToolDescriptorRequest {
                name: tool.into(),
                risk: vec!["read".into()],
                price_cents: Some(2),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    }
    let listing = grpc
        .create_session(authed(&agent, pb::CreateSessionRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let tool = listing
        .tools
        .iter()
        .map(struct_json)
        .find(|t| t["name"] == "mcp__fixture__echo")
        .expect("echo is listed");
    let meta = struct_json(listing.meta.as_ref().unwrap());
    let echo = json!({"session_id": meta["session_id"], "manifest_id": meta["manifest_id"],
                      "lease_id": meta["lease_id"], "tool_version": tool["_meta"]["toolVersion"],
                      "expected_schema_hash": tool["_meta"]["schemaHash"]});
    let called = call_tool(
        &mut grpc,
        &agent,
        &meta["session_id"],
        "mcp__fixture__echo",
        &json!({"text": "over gRPC"}),
        &echo,
    )
    .await
    .unwrap();
    assert!(!called.is_error);
    assert_eq!(
        struct_json(&called.content[0])["text"],
        "over gRPC",
        "{called:?}"
    );
    let receipt = struct_json(called.meta.as_ref().unwrap())["receipt"].clone();
    assert_eq!(receipt["reason"], "ok");
    // Numbers came back as protobuf doubles; the receipt still verifies (RFC 8785 writes 7.0
    // as 7).
    engine::receipt::verify_receipt_json(&receipt, &app.keys().await).unwrap();
    // Integer arguments arrive as integers (the tool's schema says integer).
    let add = listing
        .tools
        .iter()
        .map(struct_json)
        .find(|t| t["name"] == "mcp__fixture__add")
        .expect("add is listed");
    let mut add_echo = echo.clone();
    add_echo["tool_version"] = add["_meta"]["toolVersion"].clone();
    add_echo["expected_schema_hash"] = add["_meta"]["schemaHash"].clone();
    let sum = call_tool(
        &mut grpc,
        &agent,
        &meta["session_id"],
        "mcp__fixture__add",
        &json!({"a": 2, "b": 3}),
        &add_echo,
    )
    .await
    .unwrap();
    assert!(!sum.is_error, "{sum:?}");
    assert_eq!(
        struct_json(sum.structured_content.as_ref().unwrap())["sum"],
        5.0
    );
    // A wrong echo: denied, with its receipt, as a result (not an error).
    let mut wrong = echo.clone();
    wrong["expected_schema_hash"] = json!(format!("sha256:{}", "0".repeat(64)));
    let denied = call_tool(
        &mut grpc,
        &agent,
        &meta["session_id"],
        "mcp__fixture__echo",
        &json!({"text": "x"}),
        &wrong,
    )
    .await
    .unwrap();
    assert!(denied.is_error);
    let receipt = struct_json(denied.meta.as_ref().unwrap())["receipt"].clone();
    assert_eq!(receipt["reason"], "schema_hash_mismatch");

    // A message over the body limit is refused before it is read.
    let huge = call_tool(
        &mut grpc,
        &agent,
        &meta["session_id"],
        "mcp__fixture__echo",
        &json!({"text": "x".repeat(100 * 1024)}),
        &echo,
    )
    .await
    .unwrap_err();
    assert_eq!(huge.code(), Code::OutOfRange, "{huge:?}");

    // The receipts as the security team reads them.
    let page = grpc
        .list_receipts(authed(
            &admin,
            pb::ListReceiptsRequest {
                decision: Some("deny".into()),
                limit: Some(5),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.receipts.len(), 1);
    assert_eq!(
        struct_json(&page.receipts[0])["reason"],
        "schema_hash_mismatch"
    );
}

/// Server reflection lists the service (and itself), and describes the service's file.
#[tokio::test]
async fn server_reflection_describes_the_service() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let app = TestApp::spawn().await;
    let channel = tonic::transport::Channel::from_shared(app.url(""))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut reflection = ServerReflectionClient::new(channel);
    let requests = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol(aperture::proto::SERVICE_NAME.into()),
    ]
    .map(|m| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    });
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let first = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("{first:?}");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&aperture::proto::SERVICE_NAME), "{names:?}");
    assert!(
        names.contains(&"grpc.reflection.v1.ServerReflection"),
        "{names:?}"
    );
    let second = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = second.message_response else {
        panic!("{second:?}");
    };
    let file: prost_types::FileDescriptorProto =
        prost::Message::decode(files.file_descriptor_proto[0].as_slice()).unwrap();
    assert_eq!(file.package(), "agent_tool_exposure.v1");
    assert_eq!(
        file.service[0].method.len(),
        aperture::api::connect::METHODS.len()
    );
}

/// A file of the end2end folder, where `scripts/ensure-tools e2e` installs the npm packages.
fn end2end(path: &str) -> String {
    format!("{}/../end2end/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `node script` with the app's address and tokens (and `env`); its one line of JSON.
async fn node(
    app: &TestApp,
    script: &str,
    admin: &str,
    agent: &str,
    env: &[(&str, &str)],
) -> Value {
    let out = tokio::process::Command::new("node")
        .arg(end2end(script))
        .envs(env.iter().copied())
        .env("APERTURE_URL", app.url(""))
        .env(
            "APERTURE_ADDRESS",
            app.url("").trim_start_matches("http://"),
        )
        .env("APERTURE_ADMIN", admin)
        .env("APERTURE_AGENT", agent)
        .env(
            "APERTURE_FIXTURE",
            serde_json::to_string(&crate::helpers::fixture_command()).unwrap(),
        )
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{script}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A Node client (`@grpc/grpc-js` + `@grpc/proto-loader`, reading the `.proto` itself) calls
/// the service over gRPC on the server's port: errors with their codes (and the validation
/// error's details), a policy, an upstream, a session and a call with a verifiable receipt.
#[tokio::test]
async fn a_node_grpc_client_calls_the_service() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let seen = node(&app, "interop/grpc_client.mjs", &admin, &agent, &[]).await;
    let errors = &seen["errors"];
    assert_eq!(
        errors["unauthenticated"]["code"], "UNAUTHENTICATED",
        "{seen}"
    );
    assert_eq!(errors["permission"]["code"], "PERMISSION_DENIED", "{seen}");
    assert_eq!(errors["notFound"]["code"], "NOT_FOUND", "{seen}");
    assert_eq!(errors["invalid"]["code"], "INVALID_ARGUMENT", "{seen}");
    assert_eq!(errors["invalid"]["hasDetails"], true, "{seen}");
    assert_eq!(seen["put"]["policy_id"], "reads", "{seen}");
    assert_eq!(seen["put"]["version"], 1, "{seen}");
    assert_eq!(seen["called"]["is_error"], false, "{seen}");
    assert_eq!(seen["called"]["text"], "from grpc-js", "{seen}");
    engine::receipt::verify_receipt_json(&seen["called"]["receipt"], &app.keys().await).unwrap();
}

/// A stock Connect client generated from the `.proto` (`buf generate` with protoc-gen-es,
/// `@connectrpc/connect` + `@connectrpc/connect-node`) calls the Connect mount in both of
/// Connect's formats: every answer parses as the generated messages (in JSON, unknown fields
/// would be refused), a 64-bit integer sent as a string arrives as a number, errors come with
/// their Connect codes and the validation error's `google.rpc.BadRequest` detail.
#[tokio::test]
async fn a_connect_client_generated_from_the_proto_calls_the_service() {
    let generated = tokio::process::Command::new(end2end("node_modules/.bin/buf"))
        .args(["generate", "--template", "interop/buf.gen.yaml"])
        .current_dir(end2end(""))
        .output()
        .await
        .expect("buf runs");
    assert!(
        generated.status.success(),
        "buf generate: {}",
        String::from_utf8_lossy(&generated.stderr)
    );
    // connect-node speaks binary protobuf by default; JSON is the other format.
    for format in ["binary", "json"] {
        let app = TestApp::spawn().await;
        let admin = app.token("default", "ops", &[scope::ADMIN]).await;
        let agent = app.token("default", "agent", &[scope::RUN]).await;
        let env = [("APERTURE_CONNECT_FORMAT", format)];
        let seen = node(&app, "interop/connect_client.mjs", &admin, &agent, &env).await;
        let errors = &seen["errors"];
        assert_eq!(
            errors["unauthenticated"]["code"], "Unauthenticated",
            "{format}: {seen}"
        );
        assert_eq!(errors["permission"]["code"], "PermissionDenied", "{seen}");
        assert_eq!(errors["notFound"]["code"], "NotFound", "{seen}");
        assert_eq!(errors["invalid"]["code"], "InvalidArgument", "{seen}");
        assert_eq!(
            errors["invalid"]["details"],
            json!(["google.rpc.BadRequest"]),
            "{seen}"
        );
        assert_eq!(seen["put"], json!({"policyId": "reads", "version": 1}));
        assert_eq!(seen["activeIn"], json!(["default"]));
        assert!(seen["synced"].as_u64().unwrap() > 0, "{seen}");
        assert_eq!(seen["called"]["isError"], false, "{format}: {seen}");
        assert_eq!(seen["called"]["text"], "from Connect", "{seen}");
        engine::receipt::verify_receipt_json(&seen["called"]["receipt"], &app.keys().await)
            .unwrap();
        assert_eq!(
            seen["receipts"], 2,
            "the decision and the execution: {seen}"
        );
        assert_eq!(seen["priceCents"], 2, "{seen}");
    }
}

/// Issue 45 (item 12): gRPC goes through the layers every route does. Its answers carry the
/// security headers a REST answer (and an MCP one) carries, and its requests are logged as
/// the others are (they went around both: the request log and the header layer came after
/// gRPC had been sent on its way).
#[tokio::test]
async fn grpc_answers_carry_the_security_headers_and_are_logged() {
    use crate::cli::aperture;
    use crate::crash::{serve_logged, token};
    use crate::helpers::{Db, Requests, TestDb, rpc};
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let reader = token(&db, "ops", scope::READ);
    let log = db.data_dir().join("server.log");
    let (mut server, node) =
        serve_logged(&db, &[("APERTURE_LOG", "warn,tower_http=debug")], &log).await;
    let rest = node.get_raw("/healthz").await;
    let mcp = node.post_raw("/mcp");
    let mcp = mcp.json(rpc(1, "ping", Value::Null)).await;
    let channel = tonic::transport::Channel::from_shared(node.base.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let listed = Client::new(channel)
        .list_tools(authed(&reader, pb::ListToolsRequest {}))
        .await
        .unwrap();
    let grpc = listed.metadata().clone().into_headers();
    for name in [
        "content-security-policy",
        "x-content-type-options",
        "referrer-policy",
        "x-frame-options",
    ] {
        let expected = rest.headers().get(name).expect(name);
        assert_eq!(grpc.get(name), Some(expected), "{name} on gRPC");
        assert_eq!(mcp.headers().get(name), Some(expected), "{name} on /mcp");
    }

    let path = format!("{}/ListTools", aperture::proto::SERVICE_NAME);
    let logged = async {
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text
                .lines()
                .any(|l| l.contains(&path) && l.contains("finished processing request"))
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let found = tokio::time::timeout(std::time::Duration::from_secs(10), logged).await;
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        found.is_ok(),
        "the gRPC request is in the request log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// Issue 47 (item 1): the MCP settings over gRPC (`GetMcpSettings`/`PutMcpSettings`), admin
/// only, with per-environment overrides as a map and field errors as over REST.
#[tokio::test]
async fn mcp_settings_over_grpc() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let mut grpc = client(&app).await;
    let read = grpc
        .get_mcp_settings(authed(&admin, pb::GetMcpSettingsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.binding.as_deref(), Some("echo"));
    assert_eq!(read.tool_names.as_deref(), Some("prefixed"));
    assert!(read.environments.is_empty());
    let denied = grpc
        .get_mcp_settings(authed(&agent, pb::GetMcpSettingsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    let dev = pb::McpEnvironmentSettings {
        binding: Some("implicit".into()),
        tool_names: None,
    };
    let wanted = pb::McpSettings {
        binding: Some("echo".into()),
        tool_names: Some("upstream".into()),
        environments: [("dev".to_owned(), dev)].into_iter().collect(),
    };
    let set = grpc
        .put_mcp_settings(authed(&admin, wanted.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set, wanted);
    let rest = crate::helpers::Requests::get(&app, "/settings/mcp");
    let rest = rest.as_(&admin).await.expect_ok();
    assert_eq!(
        rest,
        json!({"binding": "echo", "tool_names": "upstream",
               "environments": {"dev": {"binding": "implicit"}}})
    );
    let bad = pb::McpSettings {
        binding: Some("loose".into()),
        ..wanted
    };
    let refused = grpc
        .put_mcp_settings(authed(&admin, bad))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("binding"), "{refused:?}");
}
