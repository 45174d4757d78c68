use super::*;
use crate::descriptor::{ToolDescriptor, ToolSource};
use crate::manifest::{self, Manifest};
use crate::policy::{ExposureContext, Policy};
use serde_json::json;

const NOW: i64 = 1_000_000;

fn tools() -> Vec<ToolDescriptor> {
    let base = |name: &str, risk: &[&str]| ToolDescriptor {
        name: name.into(),
        version: "2".into(),
        title: None,
        description: Some(format!("{name} tool")),
        input_schema: json!({
            "type": "object",
            "properties": {"q": {"type": "string", "maxLength": 20}, "owner": {"type": "string"}},
            "required": ["q"]
        }),
        output_schema: None,
        annotations: None,
        family: None,
        risk: risk.iter().map(|s| (*s).to_owned()).collect(),
        required_scope: None,
        source: ToolSource::Builtin,
        dry_run_argument: None,
        price_cents: None,
    };
    let mut scoped = base("scoped", &["read"]);
    scoped.required_scope = Some("github:read".into());
    let mut mcp = base("mcp__gh__read_issue", &["read"]);
    mcp.source = ToolSource::Mcp {
        upstream_id: "ups_1".into(),
        server: "gh".into(),
        tool: "read_issue".into(),
    };
    vec![
        base("search", &["read"]),
        base("hidden", &["write"]),
        base("forbidden", &["write"]),
        base("approve_me", &["write"]),
        base("fixed", &["read"]),
        base("once", &["read"]),
        scoped,
        mcp,
    ]
}

fn policy() -> Policy {
    serde_json::from_value(json!({
        "name": "p",
        "rules": [
            {"id": "no", "match": {"name": "forbidden"}, "mode": "deny", "reason": "never"},
            {"id": "ask", "match": {"name": "approve_me"}, "mode": "approval_required"},
            {"id": "fix", "match": {"name": "fixed"}, "mode": "allow",
             "invocation": {"fixed_arguments": {"owner": "acme"}, "max_result_bytes": 100, "max_duration_millis": 50}},
            {"id": "idem", "match": {"name": "once"}, "mode": "allow",
             "invocation": {"requires_idempotency": true}},
            {"id": "read", "match": {"risk": "read"}, "mode": "allow"}
        ]
    }))
    .unwrap()
}

struct Fixture {
    manifest: Manifest,
    scopes: ScopeSet,
    cache: ValidatorCache,
}

impl Fixture {
    fn new() -> Self {
        let ctx = ExposureContext {
            environment: "default".into(),
            actor: "bot".into(),
            preset: None,
            entity: None,
        };
        let cache = ValidatorCache::new();
        Self {
            manifest: manifest::build(tools(), &policy(), 4, &ctx, &cache),
            scopes: ScopeSet::parse(["agent_tool_exposure:run"]).unwrap(),
            cache,
        }
    }

    fn grant(&self) -> Grant<'_> {
        Grant {
            manifest: &self.manifest,
            tenant_id: "t1",
            session_id: "ses_1",
            manifest_id: "man_1",
            lease_id: "lea_1",
            lease_expires_at_ms: NOW + 1000,
            actor_id: "bot",
        }
    }

    fn call<'a>(&'a self, tool: &'a str, args: &'a Value) -> CallRequest<'a> {
        let entry = self.manifest.entry(tool);
        CallRequest {
            session_id: Some("ses_1"),
            manifest_id: Some("man_1"),
            lease_id: Some("lea_1"),
            tool,
            tool_version: entry.map(|e| e.tool_version.as_str()),
            expected_schema_hash: entry.map(|e| e.schema_hash.as_str()),
            actor_id: None,
            arguments: Some(args),
        }
    }

    fn decide_with(
        &self,
        call: &CallRequest<'_>,
        caller: &Caller<'_>,
        allowlist: Option<&ExecutionAllowlist>,
    ) -> CallDecision {
        let live = |name: &str| self.manifest.entry(name).map(|e| e.definition_hash.clone());
        decide(
            &self.grant(),
            caller,
            call,
            NOW,
            allowlist,
            &live,
            &self.cache,
        )
    }

    fn decide(&self, call: &CallRequest<'_>) -> CallDecision {
        let caller = Caller {
            tenant_id: "t1",
            actor_id: "bot",
            scopes: &self.scopes,
        };
        self.decide_with(call, &caller, None)
    }
}

fn q() -> Value {
    json!({"q": "rust"})
}

#[test]
fn a_valid_call_is_allowed_and_bound() {
    let f = Fixture::new();
    let args = q();
    let d = f.decide(&f.call("search", &args));
    assert_eq!((d.verdict, d.reason), (Verdict::Allow, ReasonCode::Ok));
    let bound = d.bound.unwrap();
    assert_eq!(bound.tool, "search");
    assert_eq!(bound.tool_version, "2");
    assert_eq!(bound.args_hash, canonical::args_hash(&args).unwrap());
}

/// Issue 3: `requires_idempotency` adds a required, non-empty `idempotency_key`; it is part of
/// the bound (hashed) arguments but the tool, which does not declare it, never receives it.
#[test]
fn a_policy_added_idempotency_key_is_bound_but_not_sent_to_the_tool() {
    let f = Fixture::new();
    let missing = q();
    let d = f.decide(&f.call("once", &missing));
    assert_eq!(d.reason, ReasonCode::ArgumentsInvalid, "{d:?}");
    let args = json!({"q": "rust", "idempotency_key": "k1"});
    let bound = f.decide(&f.call("once", &args)).bound.unwrap();
    assert_eq!(bound.args_hash, canonical::args_hash(&args).unwrap());
    assert_eq!(Value::Object(bound.effective_arguments.clone()), args);
    assert_eq!(Value::Object(bound.upstream_arguments()), q());
    // Arguments of a tool without the policy are passed as they are.
    let plain = f.decide(&f.call("search", &missing)).bound.unwrap();
    assert_eq!(Value::Object(plain.upstream_arguments()), q());
}

/// Seed: "The presented session/manifest lease does not match (manifest-binding mismatch)."
#[test]
fn binding_mismatches_are_denied_first() {
    let f = Fixture::new();
    let args = q();
    for mutate in [
        (|c: &mut CallRequest<'_>| c.session_id = Some("ses_other")) as fn(&mut CallRequest<'_>),
        |c| c.manifest_id = Some("man_other"),
        |c| c.lease_id = None,
    ] {
        // Even for an unknown tool and an expired lease: binding is checked first.
        let mut call = f.call("nope", &args);
        mutate(&mut call);
        assert_eq!(f.decide(&call).reason, ReasonCode::ManifestBindingMismatch);
    }
    // Another tenant's principal presenting the right ids.
    let caller = Caller {
        tenant_id: "t2",
        actor_id: "bot",
        scopes: &f.scopes,
    };
    assert_eq!(
        f.decide_with(&f.call("search", &args), &caller, None)
            .reason,
        ReasonCode::ManifestBindingMismatch
    );
}

#[test]
fn expired_leases_are_denied() {
    let f = Fixture::new();
    let args = q();
    let live = |name: &str| f.manifest.entry(name).map(|e| e.definition_hash.clone());
    let caller = Caller {
        tenant_id: "t1",
        actor_id: "bot",
        scopes: &f.scopes,
    };
    let d = decide(
        &f.grant(),
        &caller,
        &f.call("search", &args),
        NOW + 1000,
        None,
        &live,
        &f.cache,
    );
    assert_eq!(d.reason, ReasonCode::LeaseExpired);
}

/// Seed: "The authenticated actor does not match the actor pinned into the session and
/// manifest." and "an actor_id supplied by a client is only an equality assertion and cannot
/// choose another identity."
#[test]
fn actors_must_match_and_cannot_be_chosen() {
    let f = Fixture::new();
    let args = q();
    let other = Caller {
        tenant_id: "t1",
        actor_id: "mallory",
        scopes: &f.scopes,
    };
    assert_eq!(
        f.decide_with(&f.call("search", &args), &other, None).reason,
        ReasonCode::ActorMismatch
    );
    // Claiming to be the pinned actor does not help another principal.
    let mut claim = f.call("search", &args);
    claim.actor_id = Some("bot");
    assert_eq!(
        f.decide_with(&claim, &other, None).reason,
        ReasonCode::ActorMismatch
    );
    // The right principal asserting a different actor is refused too.
    let mut wrong = f.call("search", &args);
    wrong.actor_id = Some("mallory");
    assert_eq!(f.decide(&wrong).reason, ReasonCode::ActorMismatch);
    let mut same = f.call("search", &args);
    same.actor_id = Some("bot");
    assert_eq!(f.decide(&same).reason, ReasonCode::Ok);
}

/// Seed: "The tool is not visible or not callable in this manifest." (CONTRACT: a hidden tool
/// looks exactly like an unknown one.)
#[test]
fn hidden_and_unknown_tools_are_not_callable_alike() {
    let f = Fixture::new();
    let args = q();
    let hidden = f.decide(&f.call("hidden", &args));
    let unknown = f.decide(&f.call("does_not_exist", &args));
    assert_eq!(hidden.reason, ReasonCode::NotCallable);
    assert_eq!(hidden, unknown);
}

/// Fork seed: "A disallowed call produces one synthetic error response … Because this check
/// precedes scheduler construction, the rejected call cannot open an approval prompt".
#[test]
fn the_fork_allowlist_is_checked_before_policy_and_approval() {
    let f = Fixture::new();
    let args = q();
    let caller = Caller {
        tenant_id: "t1",
        actor_id: "bot",
        scopes: &f.scopes,
    };
    let list = ExecutionAllowlist::parse(&["search".to_owned()]).unwrap();
    let d = f.decide_with(&f.call("approve_me", &args), &caller, Some(&list));
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Deny, ReasonCode::ExecutionAllowlist)
    );
    assert!(d.detail.unwrap().contains("approve_me"));
    assert_eq!(
        f.decide_with(&f.call("forbidden", &args), &caller, Some(&list))
            .reason,
        ReasonCode::ExecutionAllowlist
    );
    assert_eq!(
        f.decide_with(&f.call("search", &args), &caller, Some(&list))
            .reason,
        ReasonCode::Ok
    );
    // MCP patterns match the raw identity.
    let mcp = ExecutionAllowlist::parse(&["mcp__gh__read_*".to_owned()]).unwrap();
    assert_eq!(
        f.decide_with(&f.call("mcp__gh__read_issue", &args), &caller, Some(&mcp))
            .reason,
        ReasonCode::Ok
    );
    let none = ExecutionAllowlist::parse(&[]).unwrap();
    assert_eq!(
        f.decide_with(&f.call("search", &args), &caller, Some(&none))
            .reason,
        ReasonCode::ExecutionAllowlist
    );
}

#[test]
fn deny_mode_is_listed_but_never_callable() {
    let f = Fixture::new();
    let args = q();
    assert!(f.manifest.listed().any(|t| t.name == "forbidden"));
    let d = f.decide(&f.call("forbidden", &args));
    assert_eq!(d.reason, ReasonCode::PolicyDenied);
    assert_eq!(d.detail.as_deref(), Some("never"));
}

/// Seed: "The tool's required scope is not satisfied."
#[test]
fn required_scopes_are_enforced() {
    let f = Fixture::new();
    let args = q();
    assert_eq!(
        f.decide(&f.call("scoped", &args)).reason,
        ReasonCode::ScopeMissing
    );
    let scopes = ScopeSet::parse(["github:read"]).unwrap();
    let caller = Caller {
        tenant_id: "t1",
        actor_id: "bot",
        scopes: &scopes,
    };
    assert_eq!(
        f.decide_with(&f.call("scoped", &args), &caller, None)
            .reason,
        ReasonCode::Ok
    );
}

/// Seed: "Every tools/call under an exposed session must echo tool_version and
/// expected_schema_hash" and "The echoed expected_schema_hash is missing or does not match the
/// pinned hash."
#[test]
fn the_echo_must_be_present_and_exact() {
    let f = Fixture::new();
    let args = q();
    let mut missing = f.call("search", &args);
    missing.expected_schema_hash = None;
    assert_eq!(f.decide(&missing).reason, ReasonCode::SchemaHashMissing);
    missing.expected_schema_hash = Some("");
    assert_eq!(f.decide(&missing).reason, ReasonCode::SchemaHashMissing);
    let mut version = f.call("search", &args);
    version.tool_version = Some("1");
    assert_eq!(f.decide(&version).reason, ReasonCode::ToolVersionMismatch);
    version.tool_version = None;
    assert_eq!(f.decide(&version).reason, ReasonCode::ToolVersionMismatch);
    let mut hash = f.call("search", &args);
    hash.expected_schema_hash = Some("sha256:0000");
    assert_eq!(f.decide(&hash).reason, ReasonCode::SchemaHashMismatch);
}

/// Seed: "The manifest has drifted (the tool's advertised schema changed since the grant)."
#[test]
fn drifted_or_removed_tools_are_denied() {
    let f = Fixture::new();
    let args = q();
    let caller = Caller {
        tenant_id: "t1",
        actor_id: "bot",
        scopes: &f.scopes,
    };
    let changed = |_: &str| Some("sha256:changed".to_owned());
    let gone = |_: &str| None;
    for live in [&changed as &dyn LiveCatalog, &gone] {
        let d = decide(
            &f.grant(),
            &caller,
            &f.call("search", &args),
            NOW,
            None,
            live,
            &f.cache,
        );
        assert_eq!(d.reason, ReasonCode::ManifestDrift);
    }
}

/// Seed: "The arguments do not validate against the exact narrowed schema advertised in the
/// grant."
#[test]
fn arguments_are_validated_against_the_narrowed_schema() {
    let f = Fixture::new();
    for bad in [
        json!({}),
        json!({"q": 5}),
        json!({"q": "x".repeat(21)}),
        json!([1]),
        json!({"q": "ok", "owner": "evil"}),
    ] {
        let tool = if bad.get("owner").is_some() {
            "fixed"
        } else {
            "search"
        };
        let d = f.decide(&f.call(tool, &bad));
        assert_eq!(d.reason, ReasonCode::ArgumentsInvalid, "{bad}");
        assert!(d.bound.is_none());
    }
    // Absent arguments mean {} (and `q` is required).
    let mut none = f.call("search", &Value::Null);
    none.arguments = None;
    assert_eq!(f.decide(&none).reason, ReasonCode::ArgumentsInvalid);
}

/// Seed: "Before a tool is executed, the durable runtime records an invocation bound to … a hash
/// of the normalized arguments. The execution receipt also snapshots effective arguments,
/// execution mode, duration and result-size limits, and the output-redaction policy."
#[test]
fn the_binding_snapshots_effective_arguments_and_limits() {
    let f = Fixture::new();
    let args = q();
    let d = f.decide(&f.call("fixed", &args));
    let bound = d.bound.unwrap();
    assert_eq!(
        Value::Object(bound.effective_arguments.clone()),
        json!({"q": "rust", "owner": "acme"})
    );
    assert_eq!(
        bound.args_hash,
        canonical::args_hash(&json!({"owner": "acme", "q": "rust"})).unwrap()
    );
    assert_eq!(bound.limits.max_result_bytes, Some(100));
    assert_eq!(bound.limits.max_duration_millis, Some(50));
    assert_eq!(bound.mode, Mode::Allow);
    assert_eq!(bound.rule_id.as_deref(), Some("fix"));
}

#[test]
fn modes_map_to_verdicts() {
    let f = Fixture::new();
    let args = q();
    let d = f.decide(&f.call("approve_me", &args));
    assert_eq!((d.verdict, d.reason), (Verdict::Park, ReasonCode::Ok));
    assert!(d.bound.is_some(), "a parked call is bound too");
}
