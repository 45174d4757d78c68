//! Issue 47 (item 2): resources, templates and prompts through `/mcp` behind the tenant's
//! policy — listed exactly where readable, refused as not found with a receipt, normalised
//! URIs, content passed through the rule's redaction profile, every read and get journaled.

use engine::scope;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, rpc};

struct Setup {
    app: TestApp,
    admin: String,
    agent: String,
}

async fn setup(rules: Value) -> Setup {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    app.activate_policy(&admin, "items", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    Setup { app, admin, agent }
}

const RULES: &str = r#"[
    {"id": "no-secrets", "resource": {"uri": "secret://*"}, "mode": "deny"},
    {"id": "docs", "resource": {"uri": "docs://*"}, "mode": "allow"},
    {"id": "greet", "prompt": "mcp__fixture__greet", "mode": "allow"}
]"#;

impl Setup {
    async fn rpc(&self, method: &str, params: Value) -> Value {
        self.app.mcp(&self.agent, rpc(7, method, params)).await
    }

    /// The same in 2026-07-28.
    async fn stateless(&self, method: &str, params: Value, name: Option<&str>) -> Value {
        let mut params = params;
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}});
        let mut post = self.app.mcp_post(&self.agent);
        post = post.header("mcp-protocol-version", "2026-07-28");
        post = post.header("mcp-method", method);
        if let Some(name) = name {
            post = post.header("mcp-name", name);
        }
        post.json(rpc(8, method, params)).await.json()
    }

    /// Neither `resources/list` nor `resources/templates/list` lists anything.
    async fn assert_no_resources_listed(&self) {
        let resources = self.keys_of("resources/list", "resources", "uri").await;
        assert!(resources.is_empty(), "{resources:?}");
        let templates = self
            .keys_of(
                "resources/templates/list",
                "resourceTemplates",
                "uriTemplate",
            )
            .await;
        assert!(templates.is_empty(), "{templates:?}");
    }

    async fn keys_of(&self, method: &str, list: &str, field: &str) -> Vec<String> {
        let answer = self.rpc(method, json!({})).await;
        answer["result"][list]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|i| i[field].as_str().unwrap().to_owned())
            .collect()
    }
}

#[tokio::test]
async fn nothing_is_exposed_until_a_rule_says_so() {
    let s = setup(json!([{"id": "all-tools", "mode": "allow"}])).await;
    s.assert_no_resources_listed().await;
    assert!(
        s.keys_of("prompts/list", "prompts", "name")
            .await
            .is_empty()
    );
    let read = s
        .rpc("resources/read", json!({"uri": "docs://readme"}))
        .await;
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let receipt = &read["error"]["data"]["receipt"];
    assert_eq!(receipt["decision"], "deny");
    assert_eq!(receipt["reason"], "not_callable");
    assert!(!read.to_string().contains("Read me first"));
}

#[tokio::test]
async fn a_principal_reads_and_gets_exactly_what_it_can_list() {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let s = setup(rules).await;
    let keys: Vec<engine::receipt::Jwk> = s.app.keys().await;
    assert_eq!(
        s.keys_of("resources/list", "resources", "uri").await,
        ["docs://guide/setup", "docs://readme"]
    );
    assert_eq!(
        s.keys_of(
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate"
        )
        .await,
        ["docs://pages/{page}"]
    );
    assert_eq!(
        s.keys_of("prompts/list", "prompts", "name").await,
        ["mcp__fixture__greet"]
    );

    // Listed: read, as the URI normalises.
    for uri in ["docs://readme", "DOCS://readme", "docs://%72eadme"] {
        let read = s.rpc("resources/read", json!({"uri": uri})).await;
        assert_eq!(
            read["result"]["contents"][0]["text"], "Read me first.",
            "{uri}: {read}"
        );
        let receipt = &read["result"]["_meta"]["receipt"];
        assert_eq!(receipt["kind"], "execution");
        engine::receipt::verify_receipt_json(receipt, &keys).unwrap();
    }
    let page = s
        .rpc("resources/read", json!({"uri": "docs://pages/intro"}))
        .await;
    assert_eq!(
        page["result"]["contents"][0]["text"], "Page intro",
        "{page}"
    );

    // Denied, and refused spellings: not found, or invalid; the secret never leaves.
    let secret = s
        .rpc("resources/read", json!({"uri": "secret://keys/one"}))
        .await;
    assert_eq!(secret["error"]["code"], -32002, "{secret}");
    assert_eq!(
        secret["error"]["data"]["receipt"]["reason"],
        "policy_denied"
    );
    assert!(!secret.to_string().contains("TOPSECRET"));
    for walk in [
        "docs://pages/../../secret://keys/one",
        "docs://pages/%2e%2e/x",
        "docs://pages/a%2Fb",
    ] {
        let refused = s.rpc("resources/read", json!({"uri": walk})).await;
        assert_eq!(refused["error"]["code"], -32602, "{walk}: {refused}");
    }

    let got = s
        .rpc(
            "prompts/get",
            json!({"name": "mcp__fixture__greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"], "Hello, Ada!",
        "{got}"
    );
    let hidden = s
        .rpc("prompts/get", json!({"name": "mcp__fixture__summarize"}))
        .await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    assert_eq!(hidden["error"]["data"]["receipt"]["decision"], "deny");

    // Every read and get is journaled, with what was asked in its disclosures.
    let records = aperture_core::store::journal::search(
        &s.app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter {
            actor_id: Some("agent".into()),
            ..Default::default()
        },
        100,
    )
    .await
    .unwrap();
    let asked: Vec<Value> = records
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.disclosures).unwrap())
        .filter(|d| d.get("resource").is_some() || d.get("prompt").is_some())
        .collect();
    assert!(asked.iter().any(|d| d["resource"] == "secret://keys/one"));
    assert!(
        asked
            .iter()
            .any(|d| d["prompt"] == "mcp__fixture__summarize")
    );
    // Allowed ones twice (decision, outcome); refused ones once.
    assert_eq!(asked.len(), 3 * 2 + 2 + 1 + 2 + 1, "{asked:?}");
}

#[tokio::test]
async fn the_2026_era_answers_not_found_as_invalid_params_and_lists_carry_cache_hints() {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let s = setup(rules).await;
    let listed = s.stateless("resources/list", json!({}), None).await;
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    assert_eq!(listed["result"]["cacheScope"], "private");
    assert!(listed["result"]["ttlMs"].is_u64());
    let uri = "secret://keys/one";
    let missing = s
        .stateless("resources/read", json!({"uri": uri}), Some(uri))
        .await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert_eq!(missing["error"]["data"]["uri"], uri);
    let read = s
        .stateless(
            "resources/read",
            json!({"uri": "docs://readme"}),
            Some("docs://readme"),
        )
        .await;
    assert_eq!(
        read["result"]["contents"][0]["text"], "Read me first.",
        "{read}"
    );
}

/// A URI two upstreams offer routes to neither: it is not listed and cannot be read.
#[tokio::test]
async fn what_two_upstreams_offer_is_exposed_by_neither() {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let s = setup(rules).await;
    let body = json!({"name": "other", "transport": "stdio",
                      "command": crate::helpers::fixture_command()});
    s.app
        .post("/upstreams")
        .as_(&s.admin)
        .json(body)
        .await
        .expect_created();
    s.assert_no_resources_listed().await;
    let read = s
        .rpc("resources/read", json!({"uri": "docs://readme"}))
        .await;
    assert_eq!(read["error"]["code"], -32002, "{read}");
    // Prompts are each upstream's own.
    assert_eq!(
        s.keys_of("prompts/list", "prompts", "name").await,
        ["mcp__fixture__greet"]
    );
}

/// Completions only for what the caller can list; values that would form a URI it cannot read
/// are left out.
#[tokio::test]
async fn completions_follow_what_can_be_listed() {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let s = setup(rules).await;
    let complete = |reference: Value, name: &str, value: &str| {
        let params = json!({"ref": reference, "argument": {"name": name, "value": value}});
        s.rpc("completion/complete", params)
    };
    let names = complete(
        json!({"type": "ref/prompt", "name": "mcp__fixture__greet"}),
        "name",
        "al",
    )
    .await;
    assert_eq!(
        names["result"]["completion"]["values"],
        json!(["alice", "albert"]),
        "{names}"
    );
    let hidden = complete(
        json!({"type": "ref/prompt", "name": "mcp__fixture__summarize"}),
        "x",
        "",
    )
    .await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    let pages = complete(
        json!({"type": "ref/resource", "uri": "docs://pages/{page}"}),
        "page",
        "",
    )
    .await;
    let completion = &pages["result"]["completion"];
    assert_eq!(
        completion["values"],
        json!(["intro", "install", "internal"]),
        "{pages}"
    );
    assert_eq!(completion["total"], 3);
    let unknown = complete(
        json!({"type": "ref/resource", "uri": "secret://{x}"}),
        "x",
        "",
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

/// A resource rule may cap what comes back (`max_result_bytes`): more is refused, with its
/// receipt, and nothing of it reaches the caller.
#[tokio::test]
async fn a_rule_caps_what_a_read_returns() {
    let s = setup(json!([
        {"id": "small", "resource": {"uri": "docs://guide/*"}, "mode": "allow",
         "invocation": {"max_result_bytes": 20}},
        {"id": "docs", "resource": {"uri": "docs://*"}, "mode": "allow"}
    ]))
    .await;
    let big = s
        .rpc("resources/read", json!({"uri": "docs://guide/setup"}))
        .await;
    assert_eq!(big["error"]["code"], -32603, "{big}");
    assert_eq!(
        big["error"]["data"]["receipt"]["reason"],
        "result_too_large"
    );
    assert!(!big.to_string().contains("installer"), "{big}");
    let fine = s
        .rpc("resources/read", json!({"uri": "docs://readme"}))
        .await;
    assert_eq!(
        fine["result"]["contents"][0]["text"], "Read me first.",
        "{fine}"
    );
    let refused = s
        .app
        .put("/policies/items")
        .as_(&s.admin)
        .json(json!({"rules": [{"id": "x", "prompt": "p", "mode": "allow",
                                "invocation": {"max_duration_millis": 5}}]}))
        .await;
    refused.expect_field_error("rules[0].invocation");
}

/// The live preview covers resources, templates and prompts: `POST /policies:preview` says of
/// each catalogued one what the draft would do (the same engine function the editor runs in the
/// browser, over the catalog the editor's server function hands it), and one that two upstreams
/// offer is never listed whatever the draft says.
#[tokio::test]
async fn the_preview_covers_resources_templates_and_prompts() {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let s = setup(rules.clone()).await;
    let preview = s
        .app
        .post("/policies:preview")
        .as_(&s.admin)
        .json(json!({"policy": {"rules": rules}, "context": {"actor": "agent"}}))
        .await
        .expect_ok();
    let modes = |list: &str| -> Vec<(String, String, bool, Value)> {
        preview[list]
            .as_array()
            .unwrap_or_else(|| panic!("{list}: {preview}"))
            .iter()
            .map(|i| {
                (
                    i["key"].as_str().unwrap().to_owned(),
                    i["mode"].as_str().unwrap().to_owned(),
                    i["listed"].as_bool().unwrap(),
                    i["rule_id"].clone(),
                )
            })
            .collect()
    };
    let resources = modes("resources");
    assert!(
        resources.contains(&("docs://readme".into(), "allow".into(), true, json!("docs"))),
        "{resources:?}"
    );
    assert!(
        resources.contains(&(
            "secret://keys/one".into(),
            "deny".into(),
            false,
            json!("no-secrets")
        )),
        "{resources:?}"
    );
    let templates = modes("resource_templates");
    assert!(
        templates.contains(&(
            "docs://pages/{page}".into(),
            "allow".into(),
            true,
            json!("docs")
        )),
        "{templates:?}"
    );
    let prompts = modes("prompts");
    assert!(
        prompts.contains(&(
            "mcp__fixture__greet".into(),
            "allow".into(),
            true,
            json!("greet")
        )),
        "{prompts:?}"
    );
    assert!(
        prompts.contains(&(
            "mcp__fixture__summarize".into(),
            "hide".into(),
            false,
            Value::Null
        )),
        "{prompts:?}"
    );
    // What the preview lists is what /mcp lists.
    let listed = |list: &[(String, String, bool, Value)]| -> Vec<String> {
        let mut keys: Vec<String> = list.iter().filter(|i| i.2).map(|i| i.0.clone()).collect();
        keys.sort();
        keys
    };
    let mut served = s.keys_of("resources/list", "resources", "uri").await;
    served.sort();
    assert_eq!(listed(&resources), served);

    // The editor's server function hands the browser the same catalog.
    let browser = s.app.new_browser();
    s.app
        .sign_in(&browser, "admin", crate::helpers::ADMIN_PASSWORD)
        .await
        .expect_status(reqwest::StatusCode::OK);
    let data = s
        .app
        .server_fn(&browser, "policies/editor")
        .body("id=items")
        .await
        .expect_ok();
    let items = data["items"].as_array().expect("items");
    assert!(
        items.iter().any(|i| i["kind"] == "template"
            && i["key"] == "docs://pages/{page}"
            && i["upstream"] == "fixture"
            && i["routable"] == true),
        "{items:?}"
    );
    assert!(
        items
            .iter()
            .any(|i| i["kind"] == "prompt" && i["key"] == "mcp__fixture__greet")
    );

    // A second upstream offering the same resources: the preview says neither is listed.
    let body = json!({"name": "other", "transport": "stdio",
                      "command": crate::helpers::fixture_command()});
    s.app
        .post("/upstreams")
        .as_(&s.admin)
        .json(body)
        .await
        .expect_created();
    let shared = s
        .app
        .post("/policies:preview")
        .as_(&s.admin)
        .json(json!({"policy": {"rules": rules}}))
        .await
        .expect_ok();
    let readme: Vec<&Value> = shared["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["key"] == "docs://readme")
        .collect();
    assert_eq!(readme.len(), 2, "{shared}");
    assert!(
        readme
            .iter()
            .all(|i| i["listed"] == false && i["routable"] == false && i["mode"] == "allow"),
        "{readme:?}"
    );
}

/// The sessions page shows what a session's actor may list of resources, templates and prompts
/// in its environment now.
#[tokio::test]
async fn a_session_shows_the_resources_and_prompts_its_actor_may_reach() {
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let s = setup(rules).await;
    let list = s.app.mcp_list(&s.agent, json!({})).await;
    let session = list["_meta"]["session_id"].as_str().unwrap().to_owned();
    let browser = &s.app.browser;
    s.app
        .sign_in(browser, "admin", crate::helpers::ADMIN_PASSWORD)
        .await
        .expect_status(reqwest::StatusCode::OK);
    let detail = s
        .app
        .server_fn(browser, "sessions/get")
        .body(format!("id={session}"))
        .await
        .expect_ok();
    let keys = |list: &str, key: &str| -> Vec<String> {
        detail[list]
            .as_array()
            .unwrap_or_else(|| panic!("{list}: {detail}"))
            .iter()
            .map(|i| i[key].as_str().unwrap().to_owned())
            .collect()
    };
    let mut resources = keys("resources", "uri");
    resources.sort();
    let mut served = s.keys_of("resources/list", "resources", "uri").await;
    served.sort();
    assert!(!resources.is_empty());
    assert_eq!(resources, served);
    assert!(!resources.iter().any(|r| r.starts_with("secret://")));
    assert_eq!(
        keys("resource_templates", "uriTemplate"),
        ["docs://pages/{page}"]
    );
    assert_eq!(keys("prompts", "name"), ["mcp__fixture__greet"]);
    // The page itself, as plain HTML.
    let page = s
        .app
        .in_browser(reqwest::Method::GET, &format!("/sessions/{session}"))
        .await;
    let html = page.text();
    assert!(html.contains("data-testid=\"session-prompts\""), "{html}");
    assert!(html.contains("mcp__fixture__greet"));
}
