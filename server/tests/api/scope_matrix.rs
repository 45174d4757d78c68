//! Every REST route against no token, each scope, a revoked token, an expired token and another
//! tenant's token. The table below must name exactly the routes the server has.

use aperture::api::RouteSpec;
use engine::scope::{self, APERTURE_SCOPES, ScopeSet};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Reply, Requests, TestApp};

/// How to exercise one route: a concrete request, the success status, and what a foreign
/// tenant's admin must (not) be able to see or change.
struct Case {
    method: Method,
    path: &'static str,
}

const CASES: &[Case] = &[
    Case {
        method: Method::GET,
        path: "/tokens",
    },
    Case {
        method: Method::POST,
        path: "/tokens",
    },
    Case {
        method: Method::DELETE,
        path: "/tokens/{id}",
    },
    Case {
        method: Method::GET,
        path: "/policies",
    },
    Case {
        method: Method::POST,
        path: "/policies:validate",
    },
    Case {
        method: Method::POST,
        path: "/policies:preview",
    },
    Case {
        method: Method::POST,
        path: "/policies:replay",
    },
    Case {
        method: Method::GET,
        path: "/policies/{id}",
    },
    Case {
        method: Method::GET,
        path: "/policies/{id}/versions",
    },
    Case {
        method: Method::PUT,
        path: "/policies/{id}",
    },
    Case {
        method: Method::POST,
        path: "/policies/{id}:activate",
    },
    Case {
        method: Method::GET,
        path: "/invocations",
    },
    Case {
        method: Method::GET,
        path: "/invocations/events",
    },
    Case {
        method: Method::GET,
        path: "/invocations/{id}",
    },
    Case {
        method: Method::POST,
        path: "/invocations/{id}:approve",
    },
    Case {
        method: Method::POST,
        path: "/invocations/{id}:apply",
    },
    Case {
        method: Method::POST,
        path: "/invocations/{id}:reject",
    },
    Case {
        method: Method::POST,
        path: "/invocations/{id}:cancel",
    },
    Case {
        method: Method::GET,
        path: "/sessions/{id}/evidence",
    },
    Case {
        method: Method::GET,
        path: "/journal/checkpoints",
    },
    Case {
        method: Method::POST,
        path: "/journal/checkpoints/cosignatures",
    },
    Case {
        method: Method::GET,
        path: "/journal/proofs/inclusion",
    },
    Case {
        method: Method::GET,
        path: "/journal/proofs/consistency",
    },
    Case {
        method: Method::GET,
        path: "/journal/witnesses",
    },
    Case {
        method: Method::POST,
        path: "/journal/witnesses",
    },
    Case {
        method: Method::DELETE,
        path: "/journal/witnesses/{name}",
    },
    Case {
        method: Method::GET,
        path: "/receipts",
    },
    Case {
        method: Method::GET,
        path: "/receipts/{id}",
    },
    Case {
        method: Method::GET,
        path: "/tools",
    },
    Case {
        method: Method::PUT,
        path: "/tools/{name}",
    },
    Case {
        method: Method::POST,
        path: "/tools/{name}:accept",
    },
    Case {
        method: Method::POST,
        path: "/tools/{name}:keep-held",
    },
    Case {
        method: Method::GET,
        path: "/catalog/items",
    },
    Case {
        method: Method::POST,
        path: "/catalog/items:accept",
    },
    Case {
        method: Method::POST,
        path: "/catalog/items:keep-held",
    },
    Case {
        method: Method::GET,
        path: "/catalog/drift",
    },
    Case {
        method: Method::PUT,
        path: "/catalog/drift",
    },
    Case {
        method: Method::GET,
        path: "/settings/mcp",
    },
    Case {
        method: Method::PUT,
        path: "/settings/mcp",
    },
    Case {
        method: Method::GET,
        path: "/sessions",
    },
    Case {
        method: Method::POST,
        path: "/sessions",
    },
    Case {
        method: Method::GET,
        path: "/sessions/{id}",
    },
    Case {
        method: Method::GET,
        path: "/sessions/{id}/manifest",
    },
    Case {
        method: Method::POST,
        path: "/sessions/{id}:revoke",
    },
    Case {
        method: Method::POST,
        path: "/sessions/{id}/calls",
    },
    Case {
        method: Method::POST,
        path: "/sessions/{id}/forks",
    },
    Case {
        method: Method::POST,
        path: "/agents",
    },
    Case {
        method: Method::GET,
        path: "/agents",
    },
    Case {
        method: Method::GET,
        path: "/agents/{id}",
    },
    Case {
        method: Method::POST,
        path: "/agents/{id}/turns",
    },
    Case {
        method: Method::GET,
        path: "/upstreams",
    },
    Case {
        method: Method::POST,
        path: "/upstreams",
    },
    Case {
        method: Method::POST,
        path: "/upstreams/{id}:sync",
    },
    Case {
        method: Method::DELETE,
        path: "/upstreams/{id}",
    },
    Case {
        method: Method::PUT,
        path: "/upstreams/{id}/credentials",
    },
    Case {
        method: Method::GET,
        path: "/users",
    },
    Case {
        method: Method::POST,
        path: "/users",
    },
    Case {
        method: Method::PUT,
        path: "/users/{username}/scopes",
    },
    Case {
        method: Method::GET,
        path: "/webhooks",
    },
    Case {
        method: Method::POST,
        path: "/webhooks",
    },
    Case {
        method: Method::DELETE,
        path: "/webhooks/{id}",
    },
    Case {
        method: Method::GET,
        path: "/webhooks/{id}/deliveries",
    },
];

/// Tenant `default` fixtures a route may point at.
/// Routes where `:run` only reaches the caller's own resources (the fixtures belong to
/// `victim`, so a `:run` holder gets 404).
const OWN_ROUTES: &[&str] = &[
    "/sessions/{id}",
    "/sessions/{id}/evidence",
    "/sessions/{id}/manifest",
    "/sessions/{id}:revoke",
    "/invocations/{id}",
    "/invocations/{id}:cancel",
    "/agents/{id}",
];

/// Routes that only ever reach the caller's own resources, whatever its scopes (forking someone
/// else's session would pin another actor).
const ONLY_OWN_ROUTES: &[&str] = &["/sessions/{id}/forks", "/agents/{id}/turns"];

/// The key of a resource of the victim's upstream whose change is held.
const VICTIM_HELD_ITEM: &str = "victim://held";

struct Fixtures {
    victim_token_id: String,
    victim_receipt_id: String,
    victim_session_id: String,
    victim_upstream_id: String,
    victim_invocation_id: String,
    victim_staged_id: String,
    victim_agent_id: String,
    victim_witness: String,
    /// A webhook of `default`.
    victim_webhook_id: String,
    /// The definition hash of `victim_tool`, which the victim's invocations are bound to.
    victim_definition_hash: String,
    /// A tool of `default` whose change is held for review.
    victim_held_tool: String,
    /// A note cosigning `default`'s latest checkpoint by the registered witness `matrix-w`.
    cosigned_note: String,
}

/// The cosigner key of witness `name` in these tests.
fn witness_key(name: &str) -> engine::note::VerifierKey {
    engine::note::VerifierKey::new(
        name,
        engine::note::COSIGNATURE_V1,
        engine::receipt::Signer::from_seed(&[42; 32]).verifying_key(),
    )
    .unwrap()
}

async fn fixtures(app: &TestApp) -> Fixtures {
    let (victim_token_id, _) = app.token_full("default", "victim", &[scope::RUN]).await;
    let (victim_receipt_id,): (String,) = sqlx::query_as(
        "SELECT receipt_id FROM journal WHERE tenant_id = 'default' ORDER BY seq DESC LIMIT 1",
    )
    .fetch_one(app.store.pool())
    .await
    .unwrap();
    for id in ["victim-policy", "victim-only"] {
        aperture_core::store::policies::insert_next(
            &app.store,
            "default",
            id,
            &format!(r#"{{"name":"{id}"}}"#),
            "operator",
        )
        .await
        .unwrap();
    }
    let tool = engine::descriptor::ToolDescriptor {
        name: "victim_tool".into(),
        version: "1".into(),
        title: None,
        description: None,
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        family: None,
        risk: vec!["read".into()],
        required_scope: None,
        source: engine::descriptor::ToolSource::Builtin,
        dry_run_argument: None,
        price_cents: None,
    };
    aperture_core::store::catalog::upsert(&app.store, "default", &tool)
        .await
        .unwrap();
    // A tool whose upstream change is held: only an admin of `default` may decide on it.
    let victim_held_tool = format!("victim_held_{}", &aperture_core::ids::new_id("t")[2..10]);
    let held = engine::descriptor::ToolDescriptor {
        name: victim_held_tool.clone(),
        description: Some("Changed upstream.".into()),
        ..tool.clone()
    };
    aperture_core::store::catalog::upsert(&app.store, "default", &held)
        .await
        .unwrap();
    let row = aperture_core::store::catalog::find_revised(&app.store, "default", &victim_held_tool)
        .await
        .unwrap()
        .unwrap();
    let triage = aperture_core::store::catalog::Drift {
        accepted: Some(engine::drift::Definition::from(&tool)),
        held: Some(aperture_core::store::catalog::Held {
            changes: vec![engine::drift::DriftClass::Description],
            since: 1,
            kept_hash: None,
        }),
    };
    assert!(
        aperture_core::store::catalog::set_drift_if(
            &app.store,
            "default",
            &victim_held_tool,
            &triage,
            row.revision
        )
        .await
        .unwrap()
    );
    let victim = aperture::auth::Principal {
        tenant_id: "default".into(),
        actor_id: "victim".into(),
        scopes: ScopeSet::parse([scope::RUN]).unwrap(),
        kind: aperture::auth::PrincipalKind::User {
            user_id: "usr_00000000000000000000000000000000".into(),
        },
        read_at: None,
        environments: vec!["*".into()],
    };
    let grant = aperture_core::exposure::create(
        &app.store,
        &app.journal,
        &engine::narrow::ValidatorCache::new(),
        &victim,
        &Default::default(),
        Default::default(),
    )
    .await
    .map_err(|e| e.into_app_error())
    .unwrap();
    let victim_upstream_id = aperture_core::ids::new_id("ups");
    let command = crate::helpers::fixture_command();
    let row = aperture_core::store::upstreams::UpstreamRow {
        id: victim_upstream_id.clone(),
        tenant_id: "default".into(),
        name: format!("victim-{}", &victim_upstream_id[4..12]),
        transport: "stdio".into(),
        // Sealed as the server stores specs (issue 24), with its key.
        spec: aperture_core::secrets::SecretBox::load(&app.data_dir, None)
            .unwrap()
            .seal(
                &aperture_core::secrets::upstream_aad("default", &victim_upstream_id),
                &json!({"transport": "stdio", "command": command, "env": {}}).to_string(),
            ),
        endpoint: "stdio".into(),
        fingerprint: "sha256:0".into(),
        status: "registered".into(),
        last_error: None,
        last_synced_at: None,
        created_by: "operator".into(),
        created_at: 0,
        credential_version: 0,
    };
    assert!(
        aperture_core::store::upstreams::insert(&app.store, &row)
            .await
            .unwrap()
    );
    // A resource of that upstream whose change is held: only an admin of `default` may decide.
    let held_item = aperture_core::store::items::ItemRow {
        upstream_id: victim_upstream_id.clone(),
        kind: aperture_core::store::items::Kind::Resource,
        key: VICTIM_HELD_ITEM.into(),
        raw: VICTIM_HELD_ITEM.into(),
        definition: json!({"uri": VICTIM_HELD_ITEM, "name": "changed"}).to_string(),
        definition_hash: "sha256:1".into(),
        drift: aperture_core::store::items::ItemDrift {
            accepted: Some(json!({"uri": VICTIM_HELD_ITEM, "name": "held"}).to_string()),
            held: Some(aperture_core::store::items::Held {
                changes: vec![engine::drift::DriftClass::Title],
                since: 1,
                kept_hash: None,
            }),
        },
    };
    aperture_core::store::items::replace(
        &app.store,
        "default",
        &victim_upstream_id,
        aperture_core::store::items::Kind::Resource,
        &[held_item],
    )
    .await
    .unwrap();
    // A call of `victim`'s parked for an approver and a staged change of theirs (their
    // bindings are not ones the worker could run: releasing them ends in a refusal, which is
    // fine here).
    let mut waiting = Vec::new();
    for (mode, status) in [
        ("approval_required", "input_required"),
        ("staged_change", "staged"),
    ] {
        let id = aperture_core::ids::new_id("inv");
        let now = aperture_core::store::now_ms();
        assert!(
            aperture_core::store::invocations::insert(
                &app.store,
                &aperture_core::store::invocations::InvocationRow {
                    id: id.clone(),
                    tenant_id: "default".into(),
                    session_id: grant.session.id.clone(),
                    manifest_id: "man_victim".into(),
                    client_key: None,
                    turn_id: None,
                    actor_id: "victim".into(),
                    token_id: Some(victim_token_id.clone()),
                    token_created_by: Some("operator".into()),
                    tool: "victim_tool".into(),
                    tool_version: "1".into(),
                    schema_hash: "sha256:schema".into(),
                    args_hash: "sha256:victim".into(),
                    mode: mode.into(),
                    binding: json!({"definition_hash": tool.definition_hash()}).to_string(),
                    policy_id: "victim-policy".into(),
                    policy_version: 1,
                    decision_receipt_id: victim_receipt_id.clone(),
                    status: status.into(),
                    result: None,
                    decided_by: None,
                    decided_by_principal: None,
                    decided_at: None,
                    decision_comment: None,
                    approval_receipt_id: None,
                    confirmation_sha256: None,
                    created_at: now,
                    expires_at: Some(now + 3_600_000),
                    updated_at: now,
                    output_to: "mcp".into(),
                },
            )
            .await
            .unwrap()
        );
        waiting.push(id);
    }
    let [victim_invocation_id, victim_staged_id]: [String; 2] =
        waiting.try_into().expect("two invocations");
    // A hosted agent of `victim`'s (its exposure session has the agent's id).
    let victim_agent_id = aperture_core::ids::new_id("agt");
    let now = aperture_core::store::now_ms();
    aperture_core::store::exposure::insert_session(
        &app.store,
        &aperture_core::store::exposure::SessionRow {
            id: victim_agent_id.clone(),
            tenant_id: "default".into(),
            environment: "default".into(),
            actor_id: "victim".into(),
            preset: None,
            entity: None,
            parent_id: None,
            fork_tools: None,
            created_at: now,
            revoked_at: None,
        },
    )
    .await
    .unwrap();
    aperture_core::store::agents::insert(
        &app.store,
        &aperture_core::store::agents::AgentRow {
            id: victim_agent_id.clone(),
            tenant_id: "default".into(),
            actor_id: "victim".into(),
            environment: "default".into(),
            system_instruction: "victim's agent".into(),
            max_turns: 3,
            parent_id: None,
            subagent_type: None,
            execution_allowed_tools: None,
            status: "idle".into(),
            status_reason: None,
            background: false,
            reported_at: None,
            runner: None,
            created_at: now,
            updated_at: now,
        },
    )
    .await
    .unwrap();
    // A witness to remove, and a checkpoint of `default` (a tree of at least two records for
    // the proofs) cosigned by the registered witness `matrix-w`.
    let victim_witness = format!("victim-w-{}", &aperture_core::ids::new_id("w")[2..14]);
    aperture_core::store::checkpoints::add_witness(
        &app.store,
        "default",
        &victim_witness,
        &witness_key(&victim_witness).to_string(),
    )
    .await
    .unwrap();
    aperture_core::store::checkpoints::add_witness(
        &app.store,
        "default",
        "matrix-w",
        &witness_key("matrix-w").to_string(),
    )
    .await
    .unwrap();
    let checkpoint = app
        .checkpoints
        .checkpoint("default")
        .await
        .unwrap()
        .expect("default has records");
    let mut note = engine::note::Note::parse(&checkpoint.note).unwrap();
    note.signatures.push(
        engine::note::cosign(
            &note.text,
            "matrix-w",
            &engine::receipt::Signer::from_seed(&[42; 32]),
            1_700_000_000,
        )
        .unwrap(),
    );
    // A webhook of `default` (one at a time: a tenant has at most 20, and admins here create
    // some of their own).
    let hooks = aperture_core::store::webhooks::list(&app.store, "default")
        .await
        .unwrap();
    let victim_webhook_id = match hooks.iter().find(|w| w.url.contains("victim")) {
        Some(w) => w.id.clone(),
        None => {
            for w in hooks {
                aperture_core::store::webhooks::delete(&app.store, "default", &w.id)
                    .await
                    .unwrap();
            }
            let id = aperture_core::ids::new_id("whk");
            aperture_core::store::webhooks::insert(
                &app.store,
                &aperture_core::store::webhooks::WebhookRow {
                    secret: aperture_core::secrets::SecretBox::load(&app.data_dir, None)
                        .unwrap()
                        .seal(
                            &aperture_core::secrets::webhook_aad("default", &id),
                            "whsec_dmljdGltLXNlY3JldC12aWN0aW0tc2VjcmV0",
                        ),
                    id: id.clone(),
                    tenant_id: "default".into(),
                    url: "https://93.184.215.14/victim-hook".into(),
                    events: r#"["invocation.parked"]"#.into(),
                    created_by: "operator".into(),
                    created_at: now,
                },
            )
            .await
            .unwrap();
            id
        }
    };
    Fixtures {
        victim_webhook_id,
        victim_witness,
        victim_held_tool,
        victim_definition_hash: tool.definition_hash(),
        cosigned_note: note.render(),
        victim_token_id,
        victim_receipt_id,
        victim_session_id: grant.session.id,
        victim_upstream_id,
        victim_invocation_id,
        victim_staged_id,
        victim_agent_id,
    }
}

fn request(case: &Case, fx: &Fixtures, n: usize) -> (String, Option<Value>) {
    match (case.method.as_str(), case.path) {
        ("GET", "/receipts/{id}") => (format!("/receipts/{}", fx.victim_receipt_id), None),
        ("GET", "/invocations/{id}") => (format!("/invocations/{}", fx.victim_invocation_id), None),
        // A long poll that answers at once.
        ("GET", "/invocations/events") => ("/invocations/events?wait_seconds=0".to_owned(), None),
        ("POST", "/invocations/{id}:approve") => (
            format!("/invocations/{}:approve", fx.victim_invocation_id),
            Some(
                json!({"args_hash": "sha256:victim", "definition_hash": fx.victim_definition_hash, "comment": "looks right"}),
            ),
        ),
        ("POST", "/invocations/{id}:apply") => (
            format!("/invocations/{}:apply", fx.victim_staged_id),
            Some(
                json!({"args_hash": "sha256:victim", "definition_hash": fx.victim_definition_hash}),
            ),
        ),
        ("POST", "/invocations/{id}:reject") => (
            format!("/invocations/{}:reject", fx.victim_invocation_id),
            Some(json!({"comment": "not today"})),
        ),
        ("POST", "/invocations/{id}:cancel") => (
            format!("/invocations/{}:cancel", fx.victim_invocation_id),
            None,
        ),
        ("GET", "/policies/{id}") => ("/policies/victim-only".into(), None),
        ("GET", "/sessions/{id}") => (format!("/sessions/{}", fx.victim_session_id), None),
        ("GET", "/sessions/{id}/evidence") => {
            (format!("/sessions/{}/evidence", fx.victim_session_id), None)
        }
        ("GET", "/sessions/{id}/manifest") => {
            (format!("/sessions/{}/manifest", fx.victim_session_id), None)
        }
        ("POST", "/sessions/{id}:revoke") => {
            (format!("/sessions/{}:revoke", fx.victim_session_id), None)
        }
        ("POST", "/sessions") => ("/sessions".into(), Some(json!({"environment": "default"}))),
        ("POST", "/agents") => ("/agents".into(), Some(json!({"max_turns": 2}))),
        ("GET", "/agents/{id}") => (format!("/agents/{}", fx.victim_agent_id), None),
        ("POST", "/agents/{id}/turns") => (
            format!("/agents/{}/turns", fx.victim_agent_id),
            Some(json!({"message": "hello"})),
        ),
        ("POST", "/sessions/{id}/forks") => (
            format!("/sessions/{}/forks", fx.victim_session_id),
            Some(json!({"fork_tools": []})),
        ),
        ("POST", "/sessions/{id}/calls") => (
            format!("/sessions/{}/calls", fx.victim_session_id),
            Some(
                json!({"name": "victim_tool", "arguments": {}, "_meta": {"manifest_id": "man_x", "lease_id": "lea_x"}}),
            ),
        ),
        ("POST", "/upstreams") => (
            "/upstreams".into(),
            Some(
                json!({"name": format!("up-{n}"), "transport": "stdio", "command": crate::helpers::fixture_command()}),
            ),
        ),
        ("POST", "/upstreams/{id}:sync") => {
            (format!("/upstreams/{}:sync", fx.victim_upstream_id), None)
        }
        ("DELETE", "/upstreams/{id}") => (format!("/upstreams/{}", fx.victim_upstream_id), None),
        ("PUT", "/upstreams/{id}/credentials") => (
            format!("/upstreams/{}/credentials", fx.victim_upstream_id),
            Some(json!({"env": {"VICTIM_TOKEN": "rotated"}})),
        ),
        ("PUT", "/tools/{name}") => (
            "/tools/victim_tool".into(),
            Some(json!({"risk": ["read", "write"]})),
        ),
        ("POST", "/tools/{name}:accept") => {
            (format!("/tools/{}:accept", fx.victim_held_tool), None)
        }
        ("POST", "/tools/{name}:keep-held") => {
            (format!("/tools/{}:keep-held", fx.victim_held_tool), None)
        }
        ("PUT", "/catalog/drift") => ("/catalog/drift".into(), Some(json!({"title": "hold"}))),
        ("POST", "/catalog/items:accept") | ("POST", "/catalog/items:keep-held") => (
            case.path.into(),
            Some(
                json!({"kind": "resource", "upstream_id": fx.victim_upstream_id,
                        "key": VICTIM_HELD_ITEM}),
            ),
        ),
        ("PUT", "/settings/mcp") => ("/settings/mcp".into(), Some(json!({"binding": "implicit"}))),
        ("GET", "/policies/{id}/versions") => ("/policies/victim-only/versions".into(), None),
        ("PUT", "/policies/{id}") => (
            "/policies/victim-policy".into(),
            Some(json!({"rules": [{"id": format!("r{n}"), "mode": "hide"}]})),
        ),
        ("POST", "/policies/{id}:activate") => (
            "/policies/victim-only:activate".into(),
            Some(json!({"environment": "prod"})),
        ),
        ("POST", "/policies:preview") => (
            "/policies:preview".into(),
            Some(json!({"policy": {"name": "draft"}, "tools": []})),
        ),
        ("POST", "/policies:validate") => (
            "/policies:validate".into(),
            Some(json!({"name": "draft", "rules": []})),
        ),
        ("POST", "/policies:replay") => (
            "/policies:replay".into(),
            Some(json!({"policy": {"rules": []}})),
        ),
        ("GET", "/journal/proofs/inclusion") => {
            ("/journal/proofs/inclusion?seq=1&tree_size=2".into(), None)
        }
        ("GET", "/journal/proofs/consistency") => {
            ("/journal/proofs/consistency?from=1&to=2".into(), None)
        }
        ("POST", "/journal/checkpoints/cosignatures") => (
            "/journal/checkpoints/cosignatures".into(),
            Some(json!({"note": fx.cosigned_note})),
        ),
        ("POST", "/journal/witnesses") => {
            let name = format!("w-{n}");
            (
                "/journal/witnesses".into(),
                Some(json!({"name": name, "key": witness_key(&name).to_string()})),
            )
        }
        ("DELETE", "/journal/witnesses/{name}") => {
            (format!("/journal/witnesses/{}", fx.victim_witness), None)
        }
        ("GET", "/webhooks/{id}/deliveries") => (
            format!("/webhooks/{}/deliveries", fx.victim_webhook_id),
            None,
        ),
        ("DELETE", "/webhooks/{id}") => (format!("/webhooks/{}", fx.victim_webhook_id), None),
        ("POST", "/webhooks") => (
            "/webhooks".into(),
            Some(
                json!({"url": format!("https://93.184.215.14/hook-{n}"), "events": ["invocation.parked"]}),
            ),
        ),
        ("GET", p) => (p.to_owned(), None),
        ("POST", "/tokens") => (
            "/tokens".into(),
            Some(json!({"actor_id": format!("bot-{n}"), "scopes": [scope::RUN]})),
        ),
        ("DELETE", "/tokens/{id}") => (format!("/tokens/{}", fx.victim_token_id), None),
        ("POST", "/users") => (
            "/users".into(),
            Some(
                json!({"username": format!("user-{n}"), "password": "long-enough-password", "scopes": [scope::READ]}),
            ),
        ),
        ("PUT", "/users/{username}/scopes") => (
            "/users/admin/scopes".into(),
            Some(json!({"scopes": [scope::ADMIN]})),
        ),
        other => panic!("no request for {other:?}"),
    }
}

/// The Connect method and message equivalent to a REST request: path parameters become the
/// fields the method table names, the body goes where it says.
fn connect_message(case: &Case, path: &str, body: Option<Value>) -> (&'static str, Value) {
    use aperture::api::connect::{METHODS, Payload};
    let method = METHODS
        .iter()
        .find(|m| m.method == case.method.as_str() && m.path == case.path)
        .unwrap_or_else(|| panic!("no Connect method for {} {}", case.method, case.path));
    let mut message = serde_json::Map::new();
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    for (key, value) in serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap() {
        message.insert(key, json!(value));
    }
    let template: Vec<&str> = case.path.split(['/', ':']).collect();
    let concrete: Vec<&str> = path.split(['/', ':']).collect();
    assert_eq!(template.len(), concrete.len(), "{path}");
    for (t, c) in template.iter().zip(concrete) {
        if let Some(name) = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            let field = method
                .params
                .iter()
                .find(|(placeholder, _)| *placeholder == name)
                .map(|(_, field)| *field)
                .unwrap();
            message.insert(field.to_owned(), json!(c));
        }
    }
    match (method.payload, body) {
        (Payload::Field(field), Some(b)) => {
            message.insert(field.to_owned(), b);
        }
        (_, Some(Value::Object(fields))) => message.extend(fields),
        _ => {}
    }
    (method.name, Value::Object(message))
}

async fn send(
    app: &TestApp,
    case: &Case,
    path: &str,
    body: &Option<Value>,
    token: Option<&str>,
) -> Reply {
    let mut call = app.request(case.method.clone(), path);
    if let Some(t) = token {
        call = call.as_(t);
    }
    if let Some(b) = body {
        call = call.json(b);
    }
    call.await
}

#[tokio::test]
async fn every_route_enforces_its_scope() {
    let app = TestApp::spawn().await;
    let specs: Vec<RouteSpec> = aperture::api::route_specs();
    let mut declared: Vec<(String, String)> = specs
        .iter()
        .map(|s| (s.method.to_string(), s.path.to_owned()))
        .collect();
    let mut tested: Vec<(String, String)> = CASES
        .iter()
        .map(|c| (c.method.to_string(), c.path.to_owned()))
        .collect();
    declared.sort();
    tested.sort();
    assert_eq!(
        declared, tested,
        "the scope matrix must cover exactly the server's routes"
    );

    let revoked = {
        let (id, secret) = app.token_full("default", "revoked", &[scope::ADMIN]).await;
        aperture_core::store::tokens::revoke(&app.store, "default", &id)
            .await
            .unwrap()
            .unwrap();
        secret
    };
    let expired = {
        let (id, secret) = app.token_full("default", "expired", &[scope::ADMIN]).await;
        sqlx::query("UPDATE api_tokens SET expires_at = $1 WHERE id = $2")
            .bind(aperture_core::store::now_ms() - 1)
            .bind(&id)
            .execute(app.store.pool())
            .await
            .unwrap();
        secret
    };

    let mut n = 0;
    for case in CASES {
        let spec = specs
            .iter()
            .find(|s| s.method == case.method && s.path == case.path)
            .unwrap();
        let label = format!("{} {}", case.method, case.path);

        // No token, a garbage token, a revoked one and an expired one: 401 with a challenge.
        let fx = fixtures(&app).await;
        let (path, body) = request(case, &fx, n);
        for token in [
            None,
            Some("apt_not-a-real-token"),
            Some(revoked.as_str()),
            Some(expired.as_str()),
        ] {
            let response = send(&app, case, &path, &body, token).await;
            assert!(
                response.headers().contains_key("www-authenticate"),
                "{label}"
            );
            response.expect_error(StatusCode::UNAUTHORIZED, "unauthenticated");
        }

        // Each scope alone: allowed exactly when it satisfies the route's scope.
        for held in APERTURE_SCOPES.into_iter().chain(["github:read"]) {
            n += 1;
            let fx = fixtures(&app).await;
            let (path, body) = request(case, &fx, n);
            let token = app.token("default", &format!("holder-{n}"), &[held]).await;
            let response = send(&app, case, &path, &body, Some(&token)).await;
            let set = ScopeSet::parse([held]).unwrap();
            let allowed = spec.scopes.iter().any(|s| set.satisfies(s));
            // Routes open to `:run` "for one's own" answer 404 for someone else's resource.
            let only_as_own = allowed
                && (ONLY_OWN_ROUTES.contains(&case.path)
                    || (!spec
                        .scopes
                        .iter()
                        .any(|s| *s != scope::RUN && set.satisfies(s))
                        && OWN_ROUTES.contains(&case.path)));
            if only_as_own {
                assert_eq!(
                    response.status(),
                    StatusCode::NOT_FOUND,
                    "{label} with {held}: someone else's"
                );
            } else if allowed {
                assert!(
                    response.status().is_success(),
                    "{label} with {held}: {}",
                    response.status()
                );
            } else {
                response.expect_error(StatusCode::FORBIDDEN, "permission_denied");
            }

            // The same method over Connect, on fresh fixtures: the same answer (a created
            // resource is 200 there).
            let (rest_status, rest_code) = {
                let fx = fixtures(&app).await;
                let (path, body) = request(case, &fx, n + 100_000);
                let response = send(&app, case, &path, &body, Some(&token)).await;
                let status = response.status();
                let body: Value = response.json_or_null();
                (status, body["error"]["code"].clone())
            };
            let fx = fixtures(&app).await;
            let (path, body) = request(case, &fx, n + 200_000);
            let (name, message) = connect_message(case, &path, body);
            let response = app.post_raw(format!("{}/{name}", aperture::api::connect::SERVICE));
            let response = response.as_(&token).json(&message).await;
            // Connect's statuses: a success is 200; an invalid argument is 400 (not 422).
            let expected = match rest_status {
                StatusCode::CREATED => StatusCode::OK,
                StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
                s => s,
            };
            assert_eq!(
                response.status(),
                expected,
                "Connect {name} with {held}: {message}"
            );
            if !expected.is_success() {
                // The same error, in the Connect protocol's shape and code names.
                let body: Value = response.json();
                let code: app::error::ErrorCode =
                    serde_json::from_value(rest_code.clone()).unwrap();
                assert_eq!(
                    body["code"],
                    aperture::api::connect::connect_code(code),
                    "Connect {name} with {held}: {body}"
                );
            }
        }

        // Bad input from an admin: malformed JSON, the wrong JSON type, unknown and mistyped
        // fields. Never a 5xx, on either mount.
        if case.method != Method::GET && case.method != Method::DELETE {
            let admin = app
                .token("default", &format!("fuzz-{n}"), &[scope::ADMIN])
                .await;
            for bad in [
                "{",
                "[1, 2]",
                "\"text\"",
                r#"{"zzz": {"deep": [1]}}"#,
                r#"{"name": 7, "rules": "no", "scopes": {}, "args_hash": 1, "arguments": []}"#,
            ] {
                let fx = fixtures(&app).await;
                let (path, _) = request(case, &fx, n + 300_000);
                let response = app
                    .request(case.method.clone(), &path)
                    .as_(&admin)
                    .header("content-type", "application/json")
                    .body(bad)
                    .await;
                assert!(
                    !response.status().is_server_error(),
                    "{label} with {bad}: {}",
                    response.status()
                );
                let (name, _) = connect_message(case, &path, None);
                let response = app
                    .post_raw(format!("{}/{name}", aperture::api::connect::SERVICE))
                    .as_(&admin)
                    .header("content-type", "application/json")
                    .body(bad)
                    .await;
                assert!(
                    !response.status().is_server_error(),
                    "Connect {name} with {bad}: {}",
                    response.status()
                );
            }
        }

        // Connect without a token: 401 like REST.
        let fx = fixtures(&app).await;
        let (path, body) = request(case, &fx, n);
        let (name, message) = connect_message(case, &path, body);
        let reply = app.post_raw(format!("{}/{name}", aperture::api::connect::SERVICE));
        let reply = reply.json(&message).await;
        reply.expect_status(StatusCode::UNAUTHORIZED);

        // Another tenant's admin: authenticated, but sees and touches only its own tenant.
        n += 1;
        let fx = fixtures(&app).await;
        let (path, body) = request(case, &fx, n);
        let foreign = app.token("other", "intruder", &[scope::ADMIN]).await;
        let response = send(&app, case, &path, &body, Some(&foreign)).await;
        let status = response.status();
        let text = response.text();
        match (case.method.as_str(), case.path) {
            ("PUT", "/policies/{id}") => {
                // Policy ids are per tenant: the intruder saved its own `victim-policy`.
                assert_eq!(status, StatusCode::OK, "{label}: {text}");
                let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    body["version"], 1,
                    "{label}: a new policy of its own tenant"
                );
            }
            ("POST", "/sessions/{id}/calls") => {
                // A call is answered with a tool result; another tenant's ids bind to nothing.
                assert_eq!(status, StatusCode::OK, "{label}: {text}");
                let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(body["isError"], true);
                assert_eq!(
                    body["_meta"]["receipt"]["reason"],
                    "manifest_binding_mismatch"
                );
                assert_eq!(body["_meta"]["receipt"]["tenant_id"], "other");
            }
            ("POST", "/journal/checkpoints/cosignatures") => {
                // Not a checkpoint of the intruder's own log.
                assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{label}: {text}");
            }
            ("GET", "/journal/proofs/inclusion") | ("GET", "/journal/proofs/consistency") => {
                // Proofs in the intruder's own tenant's tree, which is smaller.
                assert!(
                    status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::OK,
                    "{label}: {text}"
                );
                assert!(!text.contains("victim"), "{label} leaked: {text}");
            }
            ("POST", "/policies:validate") | ("POST", "/policies:preview") => {
                assert_eq!(status, StatusCode::OK, "{label}")
            }
            ("POST", "/policies:replay") => {
                // Over the intruder's own tenant's calls, never the victim's.
                assert_eq!(status, StatusCode::OK, "{label}: {text}");
                assert!(!text.contains("victim"), "{label} leaked: {text}");
            }
            ("PUT", "/catalog/drift") => {
                // The intruder's own tenant's triage, not `default`'s.
                assert_eq!(status, StatusCode::OK, "{label}: {text}");
                let own = aperture_core::store::catalog::drift_settings(&app.store, "other")
                    .await
                    .unwrap()
                    .expect("written for the intruder's tenant");
                assert_eq!(own.0["title"], "hold");
            }
            ("PUT", "/settings/mcp") => {
                // The intruder's own tenant's settings, never `default`'s.
                assert_eq!(status, StatusCode::OK, "{label}: {text}");
                let own = aperture_core::settings::mcp::of(&app.store, "other")
                    .await
                    .map_err(|e| e.into_app_error())
                    .unwrap();
                assert_eq!(
                    own.all.binding,
                    aperture_core::settings::mcp::Binding::Implicit
                );
            }
            ("GET", "/policies/{id}")
            | ("GET", "/policies/{id}/versions")
            | ("POST", "/policies/{id}:activate") => {
                assert_eq!(status, StatusCode::NOT_FOUND, "{label}: {text}");
            }
            ("GET", "/sessions/{id}")
            | ("GET", "/sessions/{id}/evidence")
            | ("GET", "/sessions/{id}/manifest")
            | ("POST", "/sessions/{id}:revoke")
            | ("PUT", "/tools/{name}")
            | ("POST", "/tools/{name}:accept")
            | ("POST", "/tools/{name}:keep-held")
            | ("POST", "/catalog/items:accept")
            | ("POST", "/catalog/items:keep-held")
            | ("POST", "/upstreams/{id}:sync")
            | ("POST", "/sessions/{id}/forks")
            | ("GET", "/agents/{id}")
            | ("GET", "/webhooks/{id}/deliveries")
            | ("POST", "/agents/{id}/turns") => {
                assert_eq!(status, StatusCode::NOT_FOUND, "{label}: {text}");
            }
            ("GET", "/receipts/{id}")
            | ("GET", "/invocations/{id}")
            | ("POST", "/invocations/{id}:approve")
            | ("POST", "/invocations/{id}:apply")
            | ("POST", "/invocations/{id}:reject")
            | ("POST", "/invocations/{id}:cancel") => {
                assert_eq!(status, StatusCode::NOT_FOUND, "{label}: {text}");
            }
            ("GET", _) => {
                assert_eq!(status, StatusCode::OK, "{label}");
                assert!(
                    !text.contains("victim")
                        && !text.contains("\"username\":\"admin\"")
                        && !text.contains("\"tenant_id\":\"default\""),
                    "{label} leaked: {text}"
                );
            }
            ("POST", _) => assert_eq!(status, StatusCode::CREATED, "{label}"),
            _ => {
                assert_eq!(status, StatusCode::NOT_FOUND, "{label}: {text}");
            }
        }
    }

    // The foreign tenant changed nothing in `default`: every victim token is still active unless
    // revoked by a `default` admin, and admin kept its scopes.
    let admin = aperture_core::store::users::find(&app.store, "default", "admin")
        .await
        .unwrap()
        .unwrap();
    assert!(admin.scopes.contains(&scope::ADMIN.to_owned()));
    let users_in_default = aperture_core::store::users::list(&app.store, "default")
        .await
        .unwrap();
    let users_in_other = aperture_core::store::users::list(&app.store, "other")
        .await
        .unwrap();
    assert!(users_in_other.iter().all(|u| {
        !users_in_default
            .iter()
            .any(|d| d.username == u.username && d.username == "admin")
    }));
}
