//! `policy_parse`: arbitrary bytes as a policy document (`PUT /policies/{id}` body).
//!
//! Invariants, for any input that is UTF-8 JSON:
//! - `parse_and_validate` never panics, with the default (single node) capabilities and with a
//!   shared rate limiter configured;
//! - when it accepts the document, the policy re-serialized with serde_json and parsed again is
//!   accepted again and equal to the first parse (the write path and the read path agree);
//! - `Policy::select` for a fixed sample tool in a few contexts never panics and, when it picks a
//!   rule, picks one of the policy's rules;
//! - narrowing the sample tool's input schema with each rule's invocation policy (with and
//!   without a dry-run argument fixed) never panics, and a narrowed schema can be hashed.
#![no_main]

use engine::canonical;
use engine::descriptor::{ToolDescriptor, ToolSource};
use engine::narrow::narrow;
use engine::policy::{ExposureContext, Mode};
use engine::validate::{RuntimeCapabilities, parse_and_validate};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

/// An MCP tool with a schema that exercises every narrowing step: typed and enum properties,
/// a `$ref` into `$defs`, a nested object, an array and a required list.
fn sample_tool() -> ToolDescriptor {
    ToolDescriptor {
        name: "mcp__github__list_issues".into(),
        version: "1".into(),
        title: Some("List issues".into()),
        description: Some("Lists the issues of a repository".into()),
        input_schema: json!({
            "type": "object",
            "properties": {
                "owner": {"type": "string", "minLength": 1, "maxLength": 39},
                "repo": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
                "state": {"type": "string", "enum": ["open", "closed", "all"]},
                "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
                "per_page": {"type": "integer", "minimum": 1, "maximum": 100},
                "since": {"$ref": "#/$defs/timestamp"},
                "filter": {
                    "type": "object",
                    "properties": {"assignee": {"type": "string"}},
                    "additionalProperties": false
                },
                "connection_mode": {"type": "string", "enum": ["primary", "read_replica"]},
                "dry_run": {"type": "boolean"}
            },
            "required": ["owner", "repo"],
            "$defs": {"timestamp": {"type": "string", "format": "date-time"}}
        }),
        output_schema: None,
        annotations: Some(json!({"readOnlyHint": true})),
        family: Some("github".into()),
        risk: vec!["read".into()],
        required_scope: None,
        source: ToolSource::Mcp {
            upstream_id: "ups_github".into(),
            server: "github".into(),
            tool: "list_issues".into(),
        },
        dry_run_argument: Some("dry_run".into()),
        price_cents: None,
    }
}

fn contexts() -> [ExposureContext; 2] {
    [
        ExposureContext {
            environment: "default".into(),
            actor: "bot".into(),
            preset: None,
            entity: None,
        },
        ExposureContext {
            environment: "prod".into(),
            actor: "support-agent".into(),
            preset: Some("triage".into()),
            entity: None,
        },
    ]
}

fn check(document: &Value, caps: &RuntimeCapabilities, tool: &ToolDescriptor) {
    let Ok(policy) = parse_and_validate(document, caps) else {
        return;
    };

    // Round trip through serde_json text: accepted again, and equal.
    let text = serde_json::to_string(&policy).expect("a parsed policy serializes");
    let reparsed: Value = serde_json::from_str(&text).expect("serialized policy is JSON");
    match parse_and_validate(&reparsed, caps) {
        Ok(again) => assert_eq!(
            again, policy,
            "policy changed in a serde round trip: {text}"
        ),
        Err(errors) => panic!("re-serialized policy was refused: {errors:?}\n{text}"),
    }

    // Selection never panics and only ever names one of the policy's rules.
    for ctx in contexts() {
        let selection = policy.select(tool, &ctx);
        if let Some(rule) = selection.rule {
            assert!(
                policy.rules.iter().any(|r| std::ptr::eq(r, rule)),
                "select returned a rule that is not in the policy"
            );
        } else {
            assert_eq!(selection.mode, policy.default_mode);
        }
        assert!(Mode::ALL.contains(&selection.mode));
    }

    // Narrowing with every rule's invocation policy never panics.
    let mut dry_run = Map::new();
    dry_run.insert("dry_run".into(), Value::Bool(true));
    for rule in &policy.rules {
        for extra in [&Map::new(), &dry_run] {
            if let Ok(narrowed) = narrow(&tool.input_schema, rule.invocation.as_ref(), extra) {
                // The advertised schema has a schemaHash.
                canonical::hash_of(&narrowed.schema).expect("a narrowed schema canonicalizes");
                let effective = narrowed.effective_arguments(&Map::new());
                let _ = narrowed.upstream_arguments(&effective);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(document) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let tool = sample_tool();
    let single = RuntimeCapabilities::default();
    let shared = RuntimeCapabilities {
        shared_rate_limiter: true,
        ..RuntimeCapabilities::default()
    };
    check(&document, &single, &tool);
    check(&document, &shared, &tool);
});
