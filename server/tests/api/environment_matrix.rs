//! Issue 45, item 1: environments confine every principal on every path (CONTRACT §15).
//!
//! The attacker is the victim's own actor with a token of every scope (`:admin`) that is
//! allowed only `default`; the victim's session, manifest, lease, invocation, receipts and
//! hosted agent are in `prod`. Every REST route (from the server's own route table) and every
//! MCP method (from the gateway's own method table) is classified below; a route or method
//! nobody classified fails the test. On each path that returns or acts on environment-bearing
//! data, the attacker's request about `prod` data is answered exactly as the same request about
//! random ids (ids and times aside), and lists and counts leave `prod` out.

use std::collections::BTreeSet;

use engine::scope;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, rpc};

const ECHO: &str = "mcp__fixture__echo";
const ADD: &str = "mcp__fixture__add";

/// How a route treats another environment's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Names one environment-bearing object by id: answered as for a random id.
    Hidden,
    /// Lists or counts environment-bearing data: another environment's is left out.
    Listed,
    /// Opens or acts in an environment named by the request: refused (403) for another one.
    Opens,
    /// Tenant-wide objects (policies, tools, upstreams, tokens, users, webhooks, checkpoints,
    /// proofs): not confined by environment.
    TenantWide,
}

/// Every REST route, classified.
const ROUTES: &[(&str, &str, Class)] = &[
    ("GET", "/tokens", Class::TenantWide),
    ("POST", "/tokens", Class::TenantWide),
    ("DELETE", "/tokens/{id}", Class::TenantWide),
    ("GET", "/policies", Class::TenantWide),
    ("POST", "/policies:validate", Class::TenantWide),
    ("POST", "/policies:preview", Class::TenantWide),
    ("POST", "/policies:replay", Class::Listed),
    ("GET", "/policies/{id}", Class::TenantWide),
    ("GET", "/policies/{id}/versions", Class::TenantWide),
    ("PUT", "/policies/{id}", Class::TenantWide),
    ("POST", "/policies/{id}:activate", Class::TenantWide),
    ("GET", "/invocations", Class::Listed),
    ("GET", "/invocations/events", Class::Listed),
    ("GET", "/invocations/{id}", Class::Hidden),
    ("POST", "/invocations/{id}:approve", Class::Hidden),
    ("POST", "/invocations/{id}:apply", Class::Hidden),
    ("POST", "/invocations/{id}:reject", Class::Hidden),
    ("POST", "/invocations/{id}:cancel", Class::Hidden),
    ("GET", "/journal/checkpoints", Class::TenantWide),
    (
        "POST",
        "/journal/checkpoints/cosignatures",
        Class::TenantWide,
    ),
    ("GET", "/journal/proofs/inclusion", Class::TenantWide),
    ("GET", "/journal/proofs/consistency", Class::TenantWide),
    ("GET", "/journal/witnesses", Class::TenantWide),
    ("POST", "/journal/witnesses", Class::TenantWide),
    ("DELETE", "/journal/witnesses/{name}", Class::TenantWide),
    ("GET", "/receipts", Class::Listed),
    ("GET", "/receipts/{id}", Class::Hidden),
    ("GET", "/tools", Class::TenantWide),
    ("PUT", "/tools/{name}", Class::TenantWide),
    ("POST", "/tools/{name}:accept", Class::TenantWide),
    ("POST", "/tools/{name}:keep-held", Class::TenantWide),
    ("GET", "/catalog/items", Class::TenantWide),
    ("POST", "/catalog/items:accept", Class::TenantWide),
    ("POST", "/catalog/items:keep-held", Class::TenantWide),
    ("GET", "/catalog/drift", Class::TenantWide),
    ("PUT", "/catalog/drift", Class::TenantWide),
    ("GET", "/settings/mcp", Class::TenantWide),
    ("PUT", "/settings/mcp", Class::TenantWide),
    ("GET", "/sessions", Class::Listed),
    ("POST", "/sessions", Class::Opens),
    ("GET", "/sessions/{id}", Class::Hidden),
    ("GET", "/sessions/{id}/manifest", Class::Hidden),
    ("GET", "/sessions/{id}/evidence", Class::Hidden),
    ("POST", "/sessions/{id}:revoke", Class::Hidden),
    ("POST", "/sessions/{id}/calls", Class::Hidden),
    ("POST", "/sessions/{id}/forks", Class::Hidden),
    ("POST", "/agents", Class::Opens),
    ("GET", "/agents", Class::Listed),
    ("GET", "/agents/{id}", Class::Hidden),
    ("POST", "/agents/{id}/turns", Class::Hidden),
    ("GET", "/upstreams", Class::TenantWide),
    ("POST", "/upstreams", Class::TenantWide),
    ("POST", "/upstreams/{id}:sync", Class::TenantWide),
    ("DELETE", "/upstreams/{id}", Class::TenantWide),
    ("PUT", "/upstreams/{id}/credentials", Class::TenantWide),
    ("GET", "/webhooks", Class::TenantWide),
    ("POST", "/webhooks", Class::TenantWide),
    ("DELETE", "/webhooks/{id}", Class::TenantWide),
    ("GET", "/webhooks/{id}/deliveries", Class::TenantWide),
    ("GET", "/users", Class::TenantWide),
    ("POST", "/users", Class::TenantWide),
    ("PUT", "/users/{username}/scopes", Class::TenantWide),
];

/// Every MCP method the gateway answers, classified.
const METHODS: &[(&str, Class)] = &[
    ("initialize", Class::TenantWide),
    ("ping", Class::TenantWide),
    ("server/discover", Class::TenantWide),
    ("tools/list", Class::Hidden),
    ("tools/call", Class::Hidden),
    // Its session ids are checked in `streams::a_confined_listener_never_hears_another_environment`.
    ("subscriptions/listen", Class::Listed),
    ("tasks/get", Class::Hidden),
    ("tasks/result", Class::Hidden),
    ("tasks/cancel", Class::Hidden),
    ("tasks/list", Class::Listed),
    // 2026-07-28 only (the matrix's 2025-era requests meet an unknown method alike).
    ("tasks/update", Class::Hidden),
    // Resources and prompts are decided in the environment the request names.
    ("resources/list", Class::Opens),
    ("resources/templates/list", Class::Opens),
    ("resources/read", Class::Opens),
    ("prompts/list", Class::Opens),
    ("prompts/get", Class::Opens),
    ("completion/complete", Class::Opens),
    ("resources/subscribe", Class::Opens),
    // A subscription of the caller's own MCP session, kept in the environment it was made in.
    ("resources/unsubscribe", Class::TenantWide),
    // The level of the caller's own MCP session.
    ("logging/setLevel", Class::TenantWide),
];

/// The victim's `prod` objects.
struct Victim {
    session: String,
    manifest: String,
    lease: String,
    /// Parked for an approver.
    invocation: String,
    /// The receipt of an executed call.
    receipt: String,
    agent: String,
}

impl Victim {
    /// Every id of the victim's that must not reach the attacker.
    fn ids(&self) -> [&str; 6] {
        [
            &self.session,
            &self.manifest,
            &self.lease,
            &self.invocation,
            &self.receipt,
            &self.agent,
        ]
    }
}

/// Random ids of the same kinds.
struct Random {
    session: String,
    manifest: String,
    lease: String,
    invocation: String,
    receipt: String,
    agent: String,
}

fn random() -> Random {
    Random {
        session: aperture_core::ids::new_id("ses"),
        manifest: aperture_core::ids::new_id("man"),
        lease: aperture_core::ids::new_id("lea"),
        invocation: aperture_core::ids::new_id("inv"),
        receipt: aperture_core::ids::new_id("rcp"),
        agent: aperture_core::ids::new_id("agt"),
    }
}

async fn token(app: &TestApp, admin: &str, body: Value) -> String {
    let created = app.post("/tokens").as_(admin).json(&body).await;
    let created = created.expect_created();
    created["secret"].as_str().unwrap().to_owned()
}

async fn setup(app: &TestApp) -> (String, String, Victim) {
    let operator = app.token("default", "ops", &[scope::ADMIN]).await;
    // The tenant's admin, who may use every environment.
    let admin = token(
        app,
        &operator,
        json!({"actor_id": "ops", "scopes": [scope::ADMIN], "environments": ["*"]}),
    )
    .await;
    app.register_fixture(&admin, &[ECHO, ADD]).await;
    let reply = app.put("/policies/prod-open").as_(&admin).json(json!({"rules": [ {"id": "park-add", "match": {"name": ADD}, "mode": "approval_required"}, {"id": "all", "mode": "allow"} ]})).await;
    reply.expect_status(StatusCode::OK);
    let reply = app.post("/policies/prod-open:activate");
    let reply = reply.as_(&admin).json(json!({"environment": "prod"})).await;
    reply.expect_status(StatusCode::OK);
    let victim = token(
        app,
        &admin,
        json!({"actor_id": "victim", "scopes": [scope::RUN], "environments": ["prod"]}),
    )
    .await;
    // The same actor, every scope, but only `default`.
    let attacker = token(
        app,
        &admin,
        json!({"actor_id": "victim", "scopes": [scope::ADMIN], "environments": ["default"]}),
    )
    .await;
    let list = app.mcp_list(&victim, json!({"environment": "prod"})).await;
    let ran = app
        .mcp_call(&victim, &list, ECHO, json!({"text": "prod secret"}))
        .await;
    assert_eq!(ran["isError"], false, "{ran}");
    let parked = app
        .mcp_call(&victim, &list, ADD, json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
    let agent = app.post("/agents");
    let agent = agent
        .as_(&victim)
        .json(json!({"environment": "prod"}))
        .await;
    let agent = agent.expect_created();
    let m = &list["_meta"];
    let text = |v: &Value| v.as_str().unwrap().to_owned();
    let v = Victim {
        session: text(&m["session_id"]),
        manifest: text(&m["manifest_id"]),
        lease: text(&m["lease_id"]),
        invocation: text(&parked["_meta"]["invocation_id"]),
        receipt: text(&ran["_meta"]["receipt"]["receipt_id"]),
        agent: text(&agent["agent_id"]),
    };
    (admin, attacker, v)
}

/// The REST request of a route naming the victim's objects (`ids`) or random ones.
/// `method path` as `token` with `body` (when there is one): the status and the JSON answer
/// (`Null` when there is none).
async fn ask_rest(
    app: &TestApp,
    method: &Method,
    token: &str,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let mut call = app.request(method.clone(), path).as_(token);
    if let Some(body) = body {
        call = call.json(body);
    }
    let reply = call.await;
    (reply.status(), reply.json_or_null())
}

fn rest_request(
    path: &str,
    session: &str,
    invocation: &str,
    receipt: &str,
    agent: &str,
    call_meta: Value,
) -> (String, Option<Value>) {
    let echo_call = json!({"name": ECHO, "arguments": {"text": "x"}, "_meta": call_meta});
    match path {
        "/invocations/{id}" => (format!("/invocations/{invocation}"), None),
        "/invocations/{id}:approve" | "/invocations/{id}:apply" => (
            path.replace("{id}", invocation),
            Some(json!({"args_hash": "sha256:0", "definition_hash": "sha256:0"})),
        ),
        "/invocations/{id}:reject" => (path.replace("{id}", invocation), Some(json!({}))),
        "/invocations/{id}:cancel" => (path.replace("{id}", invocation), None),
        "/receipts/{id}" => (format!("/receipts/{receipt}"), None),
        "/sessions/{id}/calls" => (path.replace("{id}", session), Some(echo_call)),
        "/sessions/{id}/forks" => (path.replace("{id}", session), Some(json!({}))),
        "/agents/{id}/turns" => (
            path.replace("{id}", agent),
            Some(json!({"message": "hello"})),
        ),
        p if p.starts_with("/agents/") => (p.replace("{id}", agent), None),
        p => (p.replace("{id}", session), None),
    }
}

/// `text` with every id of `ids` replaced by a placeholder.
fn without_ids(text: &str, ids: &[&str]) -> String {
    ids.iter()
        .fold(text.to_owned(), |out, id| out.replace(id, "<id>"))
}

/// A receipt as the caller sees it, without what differs between any two denials (ids, times,
/// the chain position, the signature and the digests of salted disclosures).
fn receipt_shape(receipt: &Value) -> Value {
    let mut r = receipt.clone();
    if let Some(map) = r.as_object_mut() {
        for key in [
            "receipt_id",
            "session_id",
            "manifest_id",
            "issued_at",
            "seq",
            "prev_hash",
            "disclosures_digest",
            "signature",
        ] {
            if map.contains_key(key) {
                map.insert(key.to_owned(), json!("<varies>"));
            }
        }
    }
    r
}

#[tokio::test]
async fn every_route_and_method_confines_environments() {
    let app = TestApp::spawn().await;
    let (admin, attacker, victim) = setup(&app).await;
    let other = random();

    // The tables name exactly the server's routes and the gateway's methods.
    let declared: BTreeSet<(String, String)> = aperture::api::route_specs()
        .iter()
        .map(|s| (s.method.to_string(), s.path.to_owned()))
        .collect();
    let classified: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(declared, classified, "every route is classified");
    let methods: BTreeSet<&str> = aperture::mcp::METHODS.iter().copied().collect();
    let classified: BTreeSet<&str> = METHODS.iter().map(|(m, _)| *m).collect();
    assert_eq!(methods, classified, "every MCP method is classified");

    let victim_meta = json!({"session_id": victim.session, "manifest_id": victim.manifest,
        "lease_id": victim.lease, "tool_version": "1", "expected_schema_hash": "sha256:0"});
    let random_meta = json!({"session_id": other.session, "manifest_id": other.manifest,
        "lease_id": other.lease, "tool_version": "1", "expected_schema_hash": "sha256:0"});
    let victim_ids = victim.ids();
    let random_ids = [
        other.session.as_str(),
        &other.manifest,
        &other.lease,
        &other.invocation,
        &other.receipt,
        &other.agent,
    ];

    for (method, path, class) in ROUTES {
        let label = format!("{method} {path}");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        match class {
            Class::TenantWide => {}
            Class::Hidden => {
                let (real, body) = rest_request(
                    path,
                    &victim.session,
                    &victim.invocation,
                    &victim.receipt,
                    &victim.agent,
                    victim_meta.clone(),
                );
                let (status, answer) =
                    ask_rest(&app, &method, &attacker, &real, body.as_ref()).await;
                let (fake, body) = rest_request(
                    path,
                    &other.session,
                    &other.invocation,
                    &other.receipt,
                    &other.agent,
                    random_meta.clone(),
                );
                let (random_status, random_answer) =
                    ask_rest(&app, &method, &attacker, &fake, body.as_ref()).await;
                if *path == "/sessions/{id}/calls" {
                    // A tool result: the receipt is a binding mismatch naming the caller's
                    // environment and no policy, shaped like a random id's.
                    assert_eq!(status, StatusCode::OK, "{label}: {answer}");
                    let receipt = &answer["_meta"]["receipt"];
                    assert_eq!(
                        receipt["reason"], "manifest_binding_mismatch",
                        "{label}: {answer}"
                    );
                    assert_eq!(receipt["environment"], "default", "{label}: {answer}");
                    assert!(receipt.get("policy_id").is_none(), "{label}: {answer}");
                    assert_eq!(
                        receipt_shape(receipt),
                        receipt_shape(&random_answer["_meta"]["receipt"]),
                        "{label}"
                    );
                    assert_eq!(answer["content"], random_answer["content"], "{label}");
                    continue;
                }
                assert_eq!(status, StatusCode::NOT_FOUND, "{label}: {answer}");
                assert_eq!(status, random_status, "{label}");
                assert_eq!(
                    without_ids(&answer.to_string(), &victim_ids),
                    without_ids(&random_answer.to_string(), &random_ids),
                    "{label}: answered unlike a random id"
                );
            }
            Class::Listed => {
                let (path, body) = match *path {
                    "/invocations/events" => ("/invocations/events?wait_seconds=0", None),
                    "/policies:replay" => (
                        *path,
                        Some(json!({"policy": {"default_mode": "deny", "rules": []}})),
                    ),
                    p => (p, None),
                };
                let (status, answer) =
                    ask_rest(&app, &method, &attacker, path, body.as_ref()).await;
                assert_eq!(status, StatusCode::OK, "{label}: {answer}");
                let text = answer.to_string();
                for id in victim_ids {
                    assert!(!text.contains(id), "{label} leaked {id}: {text}");
                }
                if path == "/policies:replay" {
                    assert_eq!(answer["replayed"], 0, "{label}: {answer}");
                    assert_eq!(answer["changes"], json!([]), "{label}: {answer}");
                }
                // The same list for the tenant's admin, who may use every environment, has
                // them (so the check above could fail).
                if matches!(path, "/sessions" | "/invocations" | "/receipts" | "/agents") {
                    let all = ask_rest(&app, &method, &admin, path, None)
                        .await
                        .1
                        .to_string();
                    assert!(
                        all.contains(&victim.session) || all.contains(&victim.agent),
                        "{label}: {all}"
                    );
                }
            }
            Class::Opens => {
                let answer = app.request(method.clone(), path);
                let answer = answer
                    .as_(&attacker)
                    .json(json!({"environment": "prod"}))
                    .await;
                let answer = answer.expect_status(StatusCode::FORBIDDEN).json_or_null();
                assert_eq!(answer["error"]["code"], "permission_denied", "{label}");
            }
        }
    }

    // MCP, each method of the table about the victim's objects and about random ones.
    // A cursor of the victim's manifest, as the gateway writes them.
    let cursor_of = |manifest: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{manifest}:1"))
    };
    let (cursor, random_cursor) = (cursor_of(&victim.manifest), cursor_of(&other.manifest));
    // Methods that act in the environment a request names refuse another one.
    for (method, class) in METHODS {
        if *class != Class::Opens {
            continue;
        }
        let params = json!({"uri": "docs://readme", "name": "mcp__fixture__greet",
            "ref": {"type": "ref/prompt", "name": "mcp__fixture__greet"},
            "argument": {"name": "name", "value": ""}, "_meta": {"environment": "prod"}});
        let answer = app.mcp(&attacker, rpc(9, method, params)).await;
        assert_eq!(answer["error"]["code"], -32602, "{method}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("prod"),
            "{method}: {answer}"
        );
    }
    for (method, class) in METHODS {
        if *class != Class::Hidden && *method != "tasks/list" {
            continue;
        }
        let requests: Vec<(Value, Value)> = match *method {
            "tools/list" => vec![
                (
                    json!({"_meta": {"session_id": victim.session}}),
                    json!({"_meta": {"session_id": other.session}}),
                ),
                (json!({"cursor": cursor}), json!({"cursor": random_cursor})),
            ],
            "tools/call" => vec![(
                json!({"name": ECHO, "arguments": {"text": "x"}, "_meta": victim_meta}),
                json!({"name": ECHO, "arguments": {"text": "x"}, "_meta": random_meta}),
            )],
            "tasks/list" => vec![(json!({}), json!({}))],
            _ => vec![(
                json!({"taskId": victim.invocation}),
                json!({"taskId": other.invocation}),
            )],
        };
        for (real, fake) in requests {
            let ask = |params: Value| rpc(7, method, params);
            let answer = app.mcp(&attacker, ask(real.clone())).await;
            let random_answer = app.mcp(&attacker, ask(fake)).await;
            let label = format!("{method} {real}");
            let text = answer.to_string();
            for id in victim_ids {
                assert!(
                    !text.contains(id) || *method == "tools/call",
                    "{label} leaked {id}: {text}"
                );
            }
            match *method {
                "tools/call" => {
                    let receipt = &answer["result"]["_meta"]["receipt"];
                    assert_eq!(
                        receipt["reason"], "manifest_binding_mismatch",
                        "{label}: {answer}"
                    );
                    assert_eq!(receipt["environment"], "default", "{label}");
                    assert!(receipt.get("policy_id").is_none(), "{label}");
                    assert_eq!(
                        receipt_shape(receipt),
                        receipt_shape(&random_answer["result"]["_meta"]["receipt"]),
                        "{label}"
                    );
                }
                "tasks/list" => {
                    assert_eq!(answer["result"]["tasks"], json!([]), "{label}: {answer}");
                }
                _ => {
                    assert!(answer.get("error").is_some(), "{label}: {answer}");
                    assert_eq!(
                        without_ids(&text, &victim_ids),
                        without_ids(&random_answer.to_string(), &random_ids),
                        "{label}: answered unlike a random id"
                    );
                }
            }
        }
    }

    // The refused call's real environment is only in its disclosures.
    let rows = aperture_core::store::journal::search(
        &app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter {
            session_id: Some(victim.session.clone()),
            reason: Some("manifest_binding_mismatch".into()),
            ..Default::default()
        },
        10,
    )
    .await
    .unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let disclosures: Value = serde_json::from_str(&row.disclosures).unwrap();
        assert_eq!(disclosures["environment"], "prod", "{disclosures}");
        assert!(!row.receipt.contains("\"prod\""), "{}", row.receipt);
    }

    // Nothing of the victim's moved: the parked call still waits, the session still lists.
    let invocation = app.get(format!("/invocations/{}", victim.invocation));
    let invocation = invocation.as_(&admin).await.json_or_null();
    assert_eq!(invocation["status"], "input_required", "{invocation}");
    let session = app.get(format!("/sessions/{}", victim.session)).as_(&admin);
    let session = session.await.json_or_null();
    assert!(session["revoked_at"].is_null(), "{session}");
}

/// A live view (`GET /invocations/events`) of a confined caller hears nothing of another
/// environment's invocations, while the tenant's unconfined admin hears them.
#[tokio::test]
async fn invocation_events_stay_in_their_environment() {
    let app = TestApp::spawn().await;
    let (admin, attacker, victim) = setup(&app).await;
    // An approver of every environment who did not create the victim's token.
    let approver = token(
        &app,
        &admin,
        json!({"actor_id": "alice", "scopes": [scope::APPROVE], "environments": ["*"]}),
    )
    .await;
    let poll = |token: String| {
        let poll = app.get("/invocations/events?wait_seconds=5").as_(token);
        tokio::spawn(async move { poll.await.json() })
    };
    let confined = poll(attacker.clone());
    let unconfined = poll(admin.clone());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let reply = app.post(format!("/invocations/{}:reject", victim.invocation));
    let reply = reply.as_(&approver).json(json!({"comment": "no"})).await;
    reply.expect_status(StatusCode::OK);
    let heard = unconfined.await.unwrap().to_string();
    assert!(heard.contains(&victim.invocation), "{heard}");
    assert!(heard.contains("\"environment\":\"prod\""), "{heard}");
    let confined = confined.await.unwrap().to_string();
    assert!(!confined.contains(&victim.invocation), "{confined}");
}
