//! Issue 47 (item 2): what a principal can list is exactly what it can read, get, complete or
//! subscribe to, through `/mcp`, in each of its environments — checked over generated policies
//! (resource and prompt rules with every mode, URI patterns, upstream names, actor and
//! environment conditions) and principals confined to different environments, and what the
//! policy editor's live preview (`POST /policies:preview`) says is listed. Zero mismatches.

use engine::scope;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, rpc};

/// URIs asked for: the fixture's resources, expansions of its template, and others.
const URIS: [&str; 7] = [
    "docs://readme",
    "docs://guide/setup",
    "secret://keys/one",
    "docs://pages/intro",
    "docs://pages/internal",
    "docs://unknown",
    "docs://pages/a/b",
];
const PROMPTS: [&str; 3] = [
    "mcp__fixture__greet",
    "mcp__fixture__summarize",
    "mcp__fixture__missing",
];
const URI_PATTERNS: [&str; 9] = [
    "docs://*",
    "docs://readme",
    "docs://guide/*",
    "docs://pages/*",
    "docs://pages/intro",
    "secret://*",
    "*",
    "docs://pages/",
    "docs://unknown",
];
const PROMPT_PATTERNS: [&str; 4] = [
    "mcp__fixture__greet",
    "mcp__fixture__*",
    "mcp__fixture__summarize",
    "mcp__other__*",
];
const MODES: [&str; 3] = ["allow", "hide", "deny"];
/// Principals: actor and environments.
const PRINCIPALS: [(&str, &[&str]); 3] = [
    ("agent-a", &["default"]),
    ("agent-b", &["prod"]),
    ("agent-c", &["default", "prod"]),
];

/// A policy of one to five generated rules.
fn policy(rng: &mut StdRng) -> Value {
    let rules: Vec<Value> = (0..rng.gen_range(1..=5))
        .map(|i| {
            let mode = MODES[rng.gen_range(0..MODES.len())];
            let mut rule = if rng.gen_bool(0.7) {
                let mut selector =
                    json!({"uri": URI_PATTERNS[rng.gen_range(0..URI_PATTERNS.len())]});
                match rng.gen_range(0..4) {
                    0 => selector["upstream"] = json!("fixture"),
                    1 => selector["upstream"] = json!("other"),
                    _ => {}
                }
                json!({"id": format!("r{i}"), "resource": selector, "mode": mode})
            } else {
                let prompt = PROMPT_PATTERNS[rng.gen_range(0..PROMPT_PATTERNS.len())];
                json!({"id": format!("r{i}"), "prompt": prompt, "mode": mode})
            };
            match rng.gen_range(0..5) {
                0 => rule["match"] = json!({"actor": PRINCIPALS[rng.gen_range(0..3)].0}),
                1 => rule["match"] = json!({"environment": "prod"}),
                _ => {}
            }
            rule
        })
        .collect();
    json!({"rules": rules})
}

/// Whether `uri` is an expansion of the one-variable template `template` (a segment).
fn expands(template: &str, uri: &str) -> bool {
    let Some((prefix, rest)) = template.split_once('{') else {
        return template == uri;
    };
    let Some((_, suffix)) = rest.split_once('}') else {
        return false;
    };
    uri.strip_prefix(prefix)
        .and_then(|u| u.strip_suffix(suffix))
        .is_some_and(|value| !value.is_empty() && !value.contains('/'))
}

fn names(answer: &Value, list: &str, field: &str) -> Vec<String> {
    answer["result"][list]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|i| i[field].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn what_a_principal_can_list_is_exactly_what_it_can_read_get_complete_and_subscribe_to() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let mut tokens = Vec::new();
    for (actor, environments) in PRINCIPALS {
        let body = json!({"actor_id": actor, "scopes": [scope::RUN], "environments": environments});
        let created = app.post("/tokens").as_(&admin).json(&body).await;
        let secret = created.expect_created()["secret"]
            .as_str()
            .unwrap()
            .to_owned();
        // A 2025-era connection of its own, to subscribe on.
        let initialize = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "property", "version": "1"}});
        let connected = app
            .mcp_post(&secret)
            .json(rpc(0, "initialize", initialize))
            .await;
        let session = connected.header("mcp-session-id").to_owned();
        tokens.push((actor, environments, secret, session));
    }
    let mut rng = StdRng::seed_from_u64(47);
    let mut mismatches = Vec::new();
    let mut readable_somewhere = 0;
    for case in 0..12 {
        let mut drafts = std::collections::HashMap::new();
        for environment in ["default", "prod"] {
            let id = format!("case{case}-{environment}");
            let draft = policy(&mut rng);
            drafts.insert(environment, draft.clone());
            app.put(format!("/policies/{id}"))
                .as_(&admin)
                .json(draft)
                .await
                .expect_ok();
            app.post(format!("/policies/{id}:activate"))
                .as_(&admin)
                .json(json!({"environment": environment}))
                .await
                .expect_ok();
        }
        for (actor, environments, token, session) in &tokens {
            for environment in *environments {
                let ask = |method: &str, mut params: Value| {
                    params["_meta"] = json!({"environment": environment});
                    app.mcp(token, rpc(1, method, params))
                };
                let label = format!("case {case}, {actor} in {environment}");
                let resources = names(&ask("resources/list", json!({})).await, "resources", "uri");
                let templates = names(
                    &ask("resources/templates/list", json!({})).await,
                    "resourceTemplates",
                    "uriTemplate",
                );
                let prompts = names(&ask("prompts/list", json!({})).await, "prompts", "name");
                // The live preview of the same policy for the same actor and environment lists
                // the same.
                let body = json!({"policy": drafts[environment],
                                  "context": {"actor": actor, "environment": environment}});
                let preview = app
                    .post("/policies:preview")
                    .as_(&admin)
                    .json(body)
                    .await
                    .expect_ok();
                for (list, served) in [
                    ("resources", &resources),
                    ("resource_templates", &templates),
                    ("prompts", &prompts),
                ] {
                    let mut previewed: Vec<String> = preview[list]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|i| i["listed"] == true)
                        .map(|i| i["key"].as_str().unwrap_or_default().to_owned())
                        .collect();
                    let mut served = served.clone();
                    previewed.sort();
                    served.sort();
                    if previewed != served {
                        mismatches.push(format!(
                            "{label}: preview lists {list} {previewed:?}, /mcp {served:?}"
                        ));
                    }
                }
                for uri in URIS {
                    let read = ask("resources/read", json!({"uri": uri})).await;
                    let readable = read.get("result").is_some();
                    let listed = resources.iter().any(|r| r == uri)
                        || templates.iter().any(|t| expands(t, uri));
                    readable_somewhere += usize::from(readable);
                    if readable != listed {
                        mismatches.push(format!("{label}: read {uri} {readable}, listed {listed}"));
                    }
                    if !readable && read["error"]["code"] != -32002 {
                        mismatches.push(format!("{label}: {uri} refused otherwise: {read}"));
                    }
                    let on_session = |method: &str| {
                        let params = json!({"uri": uri, "_meta": {"environment": environment}});
                        let post = app.mcp_post(token).header("mcp-session-id", session);
                        post.json(rpc(2, method, params))
                    };
                    let subscribed = on_session("resources/subscribe").await.json();
                    if subscribed.get("result").is_some() != listed {
                        mismatches.push(format!(
                            "{label}: subscribe {uri}, listed {listed}: {subscribed}"
                        ));
                    }
                    on_session("resources/unsubscribe").await.json();
                }
                for prompt in PROMPTS {
                    let got = ask(
                        "prompts/get",
                        json!({"name": prompt, "arguments": {"name": "Ada"}}),
                    )
                    .await;
                    let completed = ask(
                        "completion/complete",
                        json!({"ref": {"type": "ref/prompt", "name": prompt},
                               "argument": {"name": "name", "value": "al"}}),
                    )
                    .await;
                    let listed = prompts.iter().any(|p| p == prompt);
                    if got.get("result").is_some() != listed {
                        mismatches.push(format!("{label}: get {prompt}, listed {listed}: {got}"));
                    }
                    if completed.get("result").is_some() != listed {
                        mismatches.push(format!(
                            "{label}: complete {prompt}, listed {listed}: {completed}"
                        ));
                    }
                }
            }
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    // The generated policies exposed something: the property was not checked on nothing.
    assert!(readable_somewhere > 10, "{readable_somewhere}");
}
