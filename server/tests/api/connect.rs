//! The Connect mount and the OpenAPI document: the same service as the REST routes.

use std::collections::BTreeSet;

use aperture::api::connect::{METHODS, SERVICE};
use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, text_of};

/// Issue 5: "an OpenAPI document served at `/api/v2/agent-tool-exposure/openapi.json` that
/// matches the routes (a test checks it)".
#[tokio::test]
async fn the_openapi_document_lists_exactly_the_routes_and_their_connect_methods() {
    let app = TestApp::spawn().await;
    let response = app.get("/openapi.json").await.expect_status(StatusCode::OK);
    let doc: Value = response.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    let mut operations = BTreeSet::new();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for (method, op) in methods.as_object().unwrap() {
            documented.insert((method.to_ascii_uppercase(), path.clone()));
            let id = op["operationId"].as_str().unwrap().to_owned();
            assert!(operations.insert(id.clone()), "{id} twice");
            assert_eq!(op["x-connect-path"], format!("{SERVICE}/{id}"));
            // Every placeholder is a path parameter.
            for part in path.split(['/', ':']) {
                if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    assert!(
                        op["parameters"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|p| p["name"] == name && p["in"] == "path"),
                        "{method} {path}: {name}"
                    );
                }
            }
        }
    }
    let served: BTreeSet<(String, String)> = aperture::api::route_specs()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_owned()))
        .collect();
    assert_eq!(documented, served, "the document lists exactly the routes");
    let connect: BTreeSet<(String, String)> = METHODS
        .iter()
        .map(|m| (m.method.to_owned(), m.path.to_owned()))
        .collect();
    assert_eq!(connect, served, "every route is a Connect method and back");
    let names: BTreeSet<String> = METHODS.iter().map(|m| m.name.to_owned()).collect();
    assert_eq!(names, operations);
}

async fn connect(
    app: &TestApp,
    token: Option<&str>,
    method: &str,
    message: Value,
) -> (StatusCode, Value) {
    let mut call = app.post_raw(format!("{SERVICE}/{method}")).json(message);
    if let Some(t) = token {
        call = call.as_(t);
    }
    let reply = call.await;
    (reply.status(), reply.json_or_null())
}

#[tokio::test]
async fn connect_serves_the_same_service_with_the_same_errors() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let runner = app.token("default", "agent", &[scope::RUN]).await;

    let (status, created) = connect(
        &app,
        Some(&admin),
        "CreateToken",
        json!({"actor_id": "bot", "scopes": [scope::READ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    let (status, listed) = connect(&app, Some(&admin), "ListTokens", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(listed.to_string().contains("\"bot\""), "{listed}");
    // The new token works over REST, as the same service.
    let policies = app.get("/policies").as_(&secret).await;
    policies.expect_status(StatusCode::OK);

    // The same errors as REST (scope, authentication, absence, invalid fields), in the Connect
    // protocol's shape (issue 24): `{"code", "message", "details"?}`, Connect's code names and
    // HTTP statuses, field paths in a `google.rpc.BadRequest` detail.
    let (status, body) = connect(&app, Some(&runner), "ListTokens", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["code"], "permission_denied", "{body}");
    assert!(text_of(&body["message"]).contains(scope::ADMIN), "{body}");
    assert!(body.get("error").is_none(), "{body}");
    let (status, body) = connect(&app, None, "ListTokens", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["code"], "unauthenticated", "{body}");
    let (status, body) = connect(&app, Some(&admin), "GetPolicy", json!({"id": "nope"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "not_found");
    let (status, body) = connect(
        &app,
        Some(&admin),
        "PutPolicy",
        json!({"id": "p", "policy": {"rules": [{"id": "r", "mode": "sometimes"}]}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_argument");
    assert_eq!(body["details"][0]["type"], "google.rpc.BadRequest");
    assert!(body["details"][0]["value"].as_str().unwrap().len() > 10);
    assert_eq!(
        body["details"][0]["debug"]["fieldViolations"][0]["field"],
        "rules[0].mode"
    );
    let (status, body) = connect(&app, Some(&admin), "GetPolicy", json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["details"][0]["debug"]["fieldViolations"][0]["field"],
        "id"
    );
    // The REST mount keeps the contract's envelope for the same error.
    let rest = app.get("/policies/nope").as_(&admin).await;
    let rest = rest.expect_status(StatusCode::NOT_FOUND).json();
    assert_eq!(rest["error"]["code"], "not_found");

    // Protocol errors: unknown method, not JSON, not an object, GET.
    let (status, body) = connect(&app, Some(&admin), "DropTables", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["code"], "not_found");
    let response = app.post_raw(format!("{SERVICE}/ListTokens"));
    let response = response
        .as_(&admin)
        .header("content-type", "text/plain")
        .body("{}")
        .await;
    let response = response.expect_status(StatusCode::BAD_REQUEST);
    let body: Value = response.json();
    assert_eq!(body["code"], "invalid_argument");
    for bad in ["{", "[1]"] {
        let response = app
            .post_raw(format!("{SERVICE}/ListTokens"))
            .as_(&admin)
            .header("content-type", "application/json")
            .body(bad)
            .await;
        let response = response.expect_status(StatusCode::BAD_REQUEST);
        let body: Value = response.json();
        assert_eq!(body["code"], "invalid_argument", "{bad}");
    }
    let response = app.get_raw(format!("{SERVICE}/ListTokens"));
    let response = response.as_(&admin).await;
    let response = response.expect_status(StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = response.json();
    assert_eq!(body["code"], "unimplemented");

    // A tool call and the receipts it left, with filters as message fields.
    let (status, result) = connect(
        &app,
        Some(&runner),
        "CallTool",
        json!({"session_id": "ses_nope", "name": "anything", "arguments": {},
               "_meta": {"manifest_id": "man_nope", "lease_id": "lea_nope"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["_meta"]["receipt"]["reason"],
        "manifest_binding_mismatch"
    );
    let reader = app.token("default", "sec", &[scope::READ]).await;
    let (status, page) = connect(
        &app,
        Some(&reader),
        "ListReceipts",
        json!({"reason": "manifest_binding_mismatch", "limit": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["receipts"].as_array().unwrap().len(), 1);
    assert_eq!(
        page["receipts"][0]["receipt_id"],
        result["_meta"]["receipt"]["receipt_id"]
    );
}
