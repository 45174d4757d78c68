//! Deterministic inputs for the Aperture benchmarks: a catalog of MCP tools, policies of N
//! rules, and the equivalent Cedar policy set, plus a fixture that sets up one call exactly as
//! the server would (manifest built once, validator cache warmed once).
//!
//! Shared by `benches/decision.rs` (criterion) and `src/bin/profile.rs` (a loop to run under
//! `perf`), so both measure the very same input.

pub mod experiments;

#[cfg(feature = "cedar")]
use std::str::FromStr;

#[cfg(feature = "cedar")]
use cedar_policy::{Authorizer, Context, Entities, EntityUid, PolicySet, Request};
use engine::catalog::CatalogTool;
use engine::decision::{CallDecision, CallRequest, Caller, Grant, decide};
use engine::descriptor::{ToolDescriptor, ToolSource};
use engine::manifest::{self, Manifest};
use engine::narrow::ValidatorCache;
use engine::policy::{ExposureContext, Mode, Policy};
use engine::receipt::{Decision as Verdict, ReasonCode};
use engine::scope::ScopeSet;
use engine::validate::{self, RuntimeCapabilities};
use serde_json::{Map, Value, json};

/// Tools in the catalog.
pub const CATALOG_SIZE: usize = 1_000;
/// Upstream MCP servers the catalog's tools come from (50 tools each).
pub const SERVERS: usize = 20;
/// Index of the benchmarked tool in the catalog.
pub const TARGET_INDEX: usize = 357;
/// The clock of every call.
pub const NOW_MS: i64 = 1_700_000_000_000;

const FAMILIES: [&str; 10] = [
    "github",
    "billing",
    "files",
    "search",
    "crm",
    "mail",
    "calendar",
    "tickets",
    "deploy",
    "analytics",
];

/// Canonical name of catalog tool `i`.
pub fn tool_name(i: usize) -> String {
    format!("mcp__srv{:02}__tool_{i:04}", i / (CATALOG_SIZE / SERVERS))
}

/// Name of the benchmarked tool.
pub fn target_name() -> String {
    tool_name(TARGET_INDEX)
}

fn server_of(i: usize) -> usize {
    i / (CATALOG_SIZE / SERVERS)
}

/// A small deterministic generator (SplitMix64), so inputs never depend on a crate's RNG.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The pool of argument shapes input schemas are drawn from.
fn property(name: &str) -> Value {
    match name {
        "repo" => {
            json!({"type": "string", "maxLength": 100, "description": "Repository, owner/name."})
        }
        "owner" => json!({"type": "string", "maxLength": 64, "description": "Account owning it."}),
        "title" => json!({"type": "string", "maxLength": 200, "description": "Short title."}),
        "body" => json!({"type": "string", "maxLength": 4000, "description": "Markdown body."}),
        "query" => json!({"type": "string", "maxLength": 256, "description": "Search query."}),
        "path" => json!({"type": "string", "maxLength": 1024, "description": "File path."}),
        "branch" => json!({
            "type": "string", "maxLength": 255, "pattern": "^[A-Za-z0-9._/-]+$",
            "description": "Branch name."
        }),
        "priority" => json!({
            "type": "string", "enum": ["low", "medium", "high", "urgent"],
            "description": "Priority."
        }),
        "state" => json!({"type": "string", "enum": ["open", "closed", "all"]}),
        "limit" => json!({
            "type": "integer", "minimum": 1, "maximum": 100, "description": "Page size."
        }),
        "dry_run" => json!({"type": "boolean", "description": "Simulate only."}),
        "tags" => json!({
            "type": "array", "items": {"type": "string", "maxLength": 32}, "maxItems": 10
        }),
        other => panic!("no property {other}"),
    }
}

const POOL: [&str; 12] = [
    "repo", "owner", "title", "body", "query", "path", "branch", "priority", "state", "limit",
    "dry_run", "tags",
];

/// The benchmarked tool's input schema: six properties, two required, closed.
fn target_schema() -> Value {
    let names = ["repo", "owner", "title", "priority", "limit", "dry_run"];
    let props: Map<String, Value> = names
        .iter()
        .map(|n| ((*n).to_owned(), property(n)))
        .collect();
    json!({
        "type": "object",
        "properties": props,
        "required": ["repo", "title"],
        "additionalProperties": false
    })
}

fn schema_for(i: usize, mix: &mut Mix) -> Value {
    let count = 3 + i % 4; // 3..=6 properties
    let mut names: Vec<&str> = Vec::with_capacity(count);
    while names.len() < count {
        let n = POOL[mix.below(POOL.len())];
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let props: Map<String, Value> = names
        .iter()
        .map(|n| ((*n).to_owned(), property(n)))
        .collect();
    let required: Vec<&str> = names.iter().take(1 + i % 2).copied().collect();
    let mut schema = json!({"type": "object", "properties": props, "required": required});
    if i.is_multiple_of(2) {
        schema["additionalProperties"] = json!(false);
    }
    schema
}

fn risk_for(i: usize) -> Vec<String> {
    let labels: &[&str] = match i % 8 {
        0..=2 => &["read"],
        3 | 4 => &["write"],
        5 => &["write", "destructive"],
        6 => &["read", "pii"],
        _ => &[], // unknown
    };
    labels.iter().map(|s| (*s).to_owned()).collect()
}

/// The catalog: [`CATALOG_SIZE`] MCP tools from [`SERVERS`] upstreams, with 3–6 argument
/// schemas (enums, `maxLength`, patterns, `required`, mostly closed), mixed risk labels and
/// families. Deterministic.
pub fn catalog() -> Vec<ToolDescriptor> {
    let mut mix = Mix(0x00A9_E47E);
    (0..CATALOG_SIZE)
        .map(|i| {
            let server = server_of(i);
            let raw_tool = format!("tool_{i:04}");
            let mut input_schema = schema_for(i, &mut mix);
            let mut risk = risk_for(i);
            let mut family = match i {
                _ if i % 13 == 0 => None,
                _ if i % 7 == 0 => Some("admin".to_owned()),
                _ => Some(FAMILIES[server % FAMILIES.len()].to_owned()),
            };
            let mut required_scope = None;
            if i == TARGET_INDEX {
                input_schema = target_schema();
                risk = vec!["write".to_owned()];
                family = Some("tickets".to_owned());
                required_scope = Some("tickets:write".to_owned());
            }
            let read_only = risk.iter().all(|r| r == "read");
            let has_dry_run = input_schema["properties"].get("dry_run").is_some();
            ToolDescriptor {
                name: tool_name(i),
                version: format!("1.{}", i % 5),
                title: Some(format!("Tool {i} of server {server}")),
                description: Some(format!(
                    "Does operation {i} against upstream srv{server:02}. Returns a JSON summary."
                )),
                input_schema,
                output_schema: (i % 3 == 0).then(|| {
                    json!({"type": "object", "properties": {
                        "ok": {"type": "boolean"}, "id": {"type": "string"}
                    }})
                }),
                annotations: Some(json!({"readOnlyHint": read_only})),
                family,
                risk,
                required_scope,
                source: ToolSource::Mcp {
                    upstream_id: format!("ups_{server:04}"),
                    server: format!("srv{server:02}"),
                    tool: raw_tool,
                },
                dry_run_argument: has_dry_run.then(|| "dry_run".to_owned()),
                price_cents: None,
            }
        })
        .collect()
}

/// An invocation policy built from a tool's own schema, so narrowing succeeds: one string
/// argument fixed, one enum restricted to two values, one `maxLength` tightened.
fn invocation_for(tool: &ToolDescriptor) -> Value {
    let props = tool.input_schema["properties"]
        .as_object()
        .expect("object schema");
    let mut inv = Map::new();
    let fixed = ["owner", "repo", "path", "query"]
        .into_iter()
        .find(|p| props.contains_key(*p));
    if let Some(f) = fixed {
        inv.insert("fixed_arguments".into(), json!({ f: "acme" }));
    }
    if let Some((name, prop)) = props.iter().find(|(_, p)| p.get("enum").is_some()) {
        let values: Vec<Value> = prop["enum"]
            .as_array()
            .expect("enum")
            .iter()
            .take(2)
            .cloned()
            .collect();
        inv.insert("allowed_values".into(), json!({ name: values }));
    }
    if let Some((name, prop)) = props
        .iter()
        .find(|(n, p)| Some(n.as_str()) != fixed && p.get("maxLength").is_some())
    {
        let max = prop["maxLength"].as_u64().expect("maxLength") / 2;
        inv.insert(
            "schema_overlay".into(),
            json!({"properties": { name: {"maxLength": max} }}),
        );
    }
    inv.insert("max_result_bytes".into(), json!(65_536));
    Value::Object(inv)
}

/// A policy document of `rules` rules over `catalog`. The benchmarked tool is matched only by
/// the second-to-last rule (first-match has to try every rule before it); the last rule
/// allows plain read tools. Earlier rules mix name, prefix, family and risk selectors (alone and
/// combined), every mode, limits, and — on one rule in ten — an invocation policy with fixed
/// arguments, allowed values and a `maxLength` overlay. Deterministic.
pub fn policy_document(rules: usize, catalog: &[ToolDescriptor]) -> Value {
    assert!(rules >= 3, "need room for the target rule");
    let target_server = server_of(TARGET_INDEX);
    let mut mix = Mix(0x5EED + rules as u64);
    let other_tool = |mix: &mut Mix| loop {
        let i = mix.below(CATALOG_SIZE);
        if i != TARGET_INDEX {
            break i;
        }
    };
    let other_server = |mix: &mut Mix| loop {
        let s = mix.below(SERVERS);
        if s != target_server {
            break format!("mcp__srv{s:02}__");
        }
    };
    // Families other than the target's (`tickets`).
    let other_family = |mix: &mut Mix| loop {
        let f = FAMILIES[mix.below(FAMILIES.len())];
        if f != "tickets" {
            break f;
        }
    };
    let mut out = Vec::with_capacity(rules);
    for k in 0..rules - 2 {
        let id = format!("r{k:03}");
        let rule = match k % 10 {
            0 => {
                let i = other_tool(&mut mix);
                json!({"id": id, "match": {"name": tool_name(i)}, "mode": "allow",
                       "reason": "narrowed for the agent",
                       "invocation": invocation_for(&catalog[i])})
            }
            1 => json!({"id": id, "match": {"name": tool_name(other_tool(&mut mix))},
                        "mode": "deny", "reason": "blocked by security review"}),
            2 => {
                json!({"id": id, "match": {"prefix": other_server(&mut mix), "risk": "destructive"},
                        "mode": "deny", "reason": "no destructive calls on this upstream"})
            }
            3 => json!({"id": id, "match": {"family": other_family(&mut mix), "risk": "write"},
                        "mode": "approval_required", "reason": "writes need a human"}),
            4 => json!({"id": id, "match": {"prefix": other_server(&mut mix)}, "mode": "allow",
                        "invocation": {"max_result_bytes": 262_144, "max_duration_millis": 20_000}}),
            5 => json!({"id": id, "match": {"name": tool_name(other_tool(&mut mix))},
                        "mode": "dry_run_only"}),
            6 => json!({"id": id, "match": {"family": other_family(&mut mix), "risk": "pii"},
                        "mode": "hide", "reason": "personal data"}),
            7 => json!({"id": id, "match": {"prefix": other_server(&mut mix), "risk": "read"},
                        "mode": "allow"}),
            8 => json!({"id": id, "match": {"family": other_family(&mut mix)},
                        "mode": "confirmation_required"}),
            _ => json!({"id": id, "match": {"name": tool_name(other_tool(&mut mix))},
                        "mode": if k % 20 == 9 { "async_job_only" } else { "staged_change" }}),
        };
        out.push(rule);
    }
    out.push(json!({
        "id": "target", "match": {"name": target_name()}, "mode": "allow",
        "reason": "ticket filing, owner pinned",
        "invocation": {
            "fixed_arguments": {"owner": "acme"},
            "allowed_values": {"priority": ["low", "medium"]},
            "schema_overlay": {"properties": {"title": {"maxLength": 80}}},
            "max_result_bytes": 65_536,
            "max_duration_millis": 30_000
        }
    }));
    out.push(json!({"id": "reads", "match": {"risk": "read"}, "mode": "allow"}));
    json!({"name": format!("bench-{rules}"), "default_mode": "hide", "rules": out})
}

/// The policy of `rules` rules, parsed and validated (panics when invalid).
pub fn policy(rules: usize, catalog: &[ToolDescriptor]) -> Policy {
    let doc = policy_document(rules, catalog);
    let policy = validate::parse_policy(&doc).unwrap_or_else(|e| panic!("parse: {e:?}"));
    validate::validate(&policy, &RuntimeCapabilities::default())
        .unwrap_or_else(|e| panic!("invalid benchmark policy: {e:?}"));
    assert_eq!(policy.rules.len(), rules);
    policy
}

/// The session's context.
pub fn context() -> ExposureContext {
    ExposureContext {
        environment: "default".into(),
        actor: "bot".into(),
        preset: None,
        entity: None,
    }
}

/// The arguments of the benchmarked call (valid against the narrowed schema).
pub fn call_arguments() -> Value {
    json!({
        "repo": "acme/aperture",
        "title": "Flaky test in the decision engine",
        "priority": "low",
        "limit": 20,
        "dry_run": false
    })
}

/// One call set up as the server sets it up.
pub struct Fixture {
    /// The catalog.
    pub catalog: Vec<ToolDescriptor>,
    /// The catalog as the server loads it: each tool with the fingerprints stored beside it.
    pub fingerprinted: Vec<CatalogTool>,
    /// The policy.
    pub policy: Policy,
    /// Manifest of the catalog under the policy.
    pub manifest: Manifest,
    /// The caller's scopes.
    pub scopes: ScopeSet,
    /// Validator cache (filled by the manifest build in [`Fixture::new`]).
    pub cache: ValidatorCache,
    /// The call's arguments.
    pub arguments: Value,
    /// The benchmarked tool.
    pub tool: String,
    /// The version and schema hash the client echoes (from its `tools/list`).
    pub echo: (String, String),
}

impl Fixture {
    /// Builds the catalog, the policy of `rules` rules and the manifest, checks that the
    /// benchmarked call is allowed and decided by the intended rule, and warms the cache.
    pub fn new(rules: usize) -> Self {
        let catalog = catalog();
        let policy = policy(rules, &catalog);
        let cache = ValidatorCache::new();
        let fingerprinted: Vec<CatalogTool> =
            catalog.iter().cloned().map(CatalogTool::new).collect();
        let manifest = manifest::build(fingerprinted.clone(), &policy, 1, &context(), &cache);
        let f = Self {
            catalog,
            fingerprinted,
            policy,
            manifest,
            scopes: ScopeSet::parse(["agent_tool_exposure:run", "tickets:write"]).expect("scopes"),
            cache,
            arguments: call_arguments(),
            tool: target_name(),
            echo: (String::new(), String::new()),
        };
        let entry = f.manifest.entry(&f.tool).expect("target in manifest");
        let echo = (entry.tool_version.clone(), entry.schema_hash.clone());
        assert_eq!(entry.rule_id.as_deref(), Some("target"));
        assert_eq!(entry.mode, Mode::Allow);
        assert!(entry.error.is_none(), "{:?}", entry.error);
        let listed = f.manifest.listed().count();
        assert!(listed > 100, "only {listed} tools listed");
        let errors = f
            .manifest
            .tools
            .iter()
            .filter(|t| t.error.is_some())
            .count();
        assert_eq!(errors, 0, "some tools could not be narrowed");
        let f = Self { echo, ..f };
        let d = f.decide_with(&f.cache);
        assert_eq!(
            (d.verdict, d.reason),
            (Verdict::Allow, ReasonCode::Ok),
            "{d:?}"
        );
        let bound = d.bound.expect("bound");
        assert_eq!(bound.effective_arguments.get("owner"), Some(&json!("acme")));
        f
    }

    /// The grant the session holds.
    pub fn grant(&self) -> Grant<'_> {
        Grant {
            manifest: &self.manifest,
            tenant_id: "ten_bench",
            session_id: "ses_bench",
            manifest_id: "man_bench",
            lease_id: "lea_bench",
            lease_expires_at_ms: NOW_MS + 900_000,
            actor_id: "bot",
        }
    }

    /// The `tools/call` as a well-behaved client sends it (echoing version and schema hash).
    pub fn call(&self) -> CallRequest<'_> {
        CallRequest {
            session_id: Some("ses_bench"),
            manifest_id: Some("man_bench"),
            lease_id: Some("lea_bench"),
            tool: &self.tool,
            tool_version: Some(&self.echo.0),
            expected_schema_hash: Some(&self.echo.1),
            actor_id: None,
            arguments: Some(&self.arguments),
        }
    }

    /// The authenticated caller.
    pub fn caller(&self) -> Caller<'_> {
        Caller {
            tenant_id: "ten_bench",
            actor_id: "bot",
            scopes: &self.scopes,
        }
    }

    /// Decides the call with `cache`; the live catalog answers from the manifest (no drift).
    pub fn decide_with(&self, cache: &ValidatorCache) -> CallDecision {
        let live = |name: &str| self.manifest.entry(name).map(|e| e.definition_hash.clone());
        decide(
            &self.grant(),
            &self.caller(),
            &self.call(),
            NOW_MS,
            None,
            &live,
            cache,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Cedar

/// Whether `serde_json` was built with `preserve_order` (its `Map` is then an `IndexMap`).
/// cedar-policy turns it on; the server build does not have it.
pub fn serde_json_preserves_order() -> bool {
    let map: Map<String, Value> = serde_json::from_str(r#"{"b":1,"a":2}"#).expect("json");
    map.keys().next().map(String::as_str) == Some("b")
}

#[cfg(feature = "cedar")]
fn cedar_str(s: &str) -> String {
    // Names, prefixes, families and labels here are [a-z0-9_-]; nothing needs escaping.
    assert!(
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    );
    format!("\"{s}\"")
}

#[cfg(feature = "cedar")]
/// The Cedar policy set equivalent to the policy document: one policy per rule, `permit` for
/// every callable mode and `forbid` for `deny`/`hide`, with the selector as a `when` condition
/// over the resource's `name`, `family` and `risk` attributes. Cedar has no rule order (a
/// matching `forbid` always wins); the generated policies are such that no `forbid` matches
/// the benchmarked tool, so both sides answer the same.
pub fn cedar_policies(document: &Value) -> String {
    let mut out = String::new();
    for rule in document["rules"].as_array().expect("rules") {
        let sel = &rule["match"];
        let mut conds = Vec::new();
        if let Some(n) = sel.get("name").and_then(Value::as_str) {
            conds.push(format!("resource.name == {}", cedar_str(n)));
        }
        if let Some(p) = sel.get("prefix").and_then(Value::as_str) {
            conds.push(format!("resource.name like \"{p}*\""));
        }
        if let Some(f) = sel.get("family").and_then(Value::as_str) {
            conds.push(format!(
                "resource has family && resource.family == {}",
                cedar_str(f)
            ));
        }
        if let Some(r) = sel.get("risk").and_then(Value::as_str) {
            conds.push(format!("resource.risk.contains({})", cedar_str(r)));
        }
        let mode = rule["mode"].as_str().expect("mode");
        let effect = if matches!(mode, "deny" | "hide") {
            "forbid"
        } else {
            "permit"
        };
        let when = if conds.is_empty() {
            "true".to_owned()
        } else {
            conds.join(" && ")
        };
        let id = rule["id"].as_str().expect("id");
        out.push_str(&format!(
            "@id(\"{id}\")\n@mode(\"{mode}\")\n{effect}(principal, action == Action::\"call\", resource is Tool)\nwhen {{ {when} }};\n\n"
        ));
    }
    out
}

#[cfg(feature = "cedar")]
/// Everything Cedar needs to answer "may `bot` call the benchmarked tool?".
pub struct CedarFixture {
    /// The authorizer.
    pub authorizer: Authorizer,
    /// One policy per rule.
    pub policies: PolicySet,
    /// The principal and the tool (with `name`, `family`, `risk`).
    pub entities: Entities,
    /// The request.
    pub request: Request,
    /// Policy source text.
    pub source: String,
}

#[cfg(feature = "cedar")]
impl CedarFixture {
    /// The Cedar equivalent of [`Fixture::new`] for `rules` rules; checks the answer is Allow.
    pub fn new(rules: usize) -> Self {
        let catalog = catalog();
        let doc = policy_document(rules, &catalog);
        let source = cedar_policies(&doc);
        let policies = PolicySet::from_str(&source).expect("cedar policies parse");
        assert_eq!(policies.policies().count(), rules);
        let tool = &catalog[TARGET_INDEX];
        let entities = Entities::from_json_value(
            json!([
                {"uid": {"type": "Agent", "id": "bot"}, "attrs": {}, "parents": []},
                {"uid": {"type": "Tool", "id": tool.name}, "parents": [], "attrs": {
                    "name": tool.name,
                    "family": tool.family,
                    "risk": tool.risk_labels(),
                }}
            ]),
            None,
        )
        .expect("entities");
        let request = Request::new(
            EntityUid::from_str("Agent::\"bot\"").expect("principal"),
            EntityUid::from_str("Action::\"call\"").expect("action"),
            EntityUid::from_str(&format!("Tool::\"{}\"", tool.name)).expect("resource"),
            Context::empty(),
            None,
        )
        .expect("request");
        let f = Self {
            authorizer: Authorizer::new(),
            policies,
            entities,
            request,
            source,
        };
        let response = f.is_authorized();
        assert_eq!(response.decision(), cedar_policy::Decision::Allow);
        let reasons: Vec<String> = response
            .diagnostics()
            .reason()
            .map(|id| {
                f.policies
                    .policy(id)
                    .and_then(|p| p.annotation("id").map(str::to_owned))
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(reasons, vec!["target".to_owned()], "determining policies");
        assert!(response.diagnostics().errors().next().is_none());
        f
    }

    /// One authorization.
    pub fn is_authorized(&self) -> cedar_policy::Response {
        self.authorizer
            .is_authorized(&self.request, &self.policies, &self.entities)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_set_up_the_intended_call() {
        for rules in [50, 500] {
            let f = Fixture::new(rules);
            assert_eq!(f.manifest.tools.len(), CATALOG_SIZE);
            #[cfg(feature = "cedar")]
            CedarFixture::new(rules);
        }
    }

    #[test]
    fn inputs_are_deterministic() {
        assert_eq!(catalog(), catalog());
        let c = catalog();
        assert_eq!(policy_document(50, &c), policy_document(50, &c));
    }
}
