//! Call decisions: whether a `tools/call` may proceed under the manifest it presents, checked
//! in the order of CONTRACT §5 (the first failure decides), and — when it may — the exact
//! binding that will execute.
//!
//! The engine answers the questions it can answer from the grant alone. The runtime adds the
//! ones that need the world (`rate_limited`, `spend_gate_unavailable`, `journal_unavailable`,
//! `target_drift`) after this decision and before anything runs.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical;
use crate::fork::ExecutionAllowlist;
use crate::manifest::Manifest;
use crate::narrow::ValidatorCache;
use crate::policy::{Mode, RateBucket, RedactionProfile};
use crate::receipt::{Decision as Verdict, ReasonCode};
use crate::scope::ScopeSet;

/// The session and manifest a call is checked against, as the server stored them at grant.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// The manifest.
    pub manifest: &'a Manifest,
    /// Tenant of the session.
    pub tenant_id: &'a str,
    /// `ses_…`
    pub session_id: &'a str,
    /// `man_…`
    pub manifest_id: &'a str,
    /// `lea_…`
    pub lease_id: &'a str,
    /// Lease end, epoch ms.
    pub lease_expires_at_ms: i64,
    /// The actor pinned into the session and manifest.
    pub actor_id: &'a str,
}

/// The authenticated caller.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The principal's tenant.
    pub tenant_id: &'a str,
    /// The principal's actor (from the token, never from the request).
    pub actor_id: &'a str,
    /// The principal's scopes.
    pub scopes: &'a ScopeSet,
}

/// What a `tools/call` carries (CONTRACT §4).
#[derive(Debug, Clone, Copy)]
pub struct CallRequest<'a> {
    /// `_meta.session_id`
    pub session_id: Option<&'a str>,
    /// `_meta.manifest_id`
    pub manifest_id: Option<&'a str>,
    /// `_meta.lease_id`
    pub lease_id: Option<&'a str>,
    /// `params.name`
    pub tool: &'a str,
    /// `_meta.tool_version`
    pub tool_version: Option<&'a str>,
    /// `_meta.expected_schema_hash`
    pub expected_schema_hash: Option<&'a str>,
    /// `_meta.actor_id`: only an equality assertion.
    pub actor_id: Option<&'a str>,
    /// `params.arguments` (absent means `{}`).
    pub arguments: Option<&'a Value>,
}

fn verdict_of(mode: Mode) -> Verdict {
    match mode {
        Mode::Allow => Verdict::Allow,
        Mode::DryRunOnly => Verdict::DryRun,
        Mode::ApprovalRequired => Verdict::Park,
        Mode::ConfirmationRequired => Verdict::Confirm,
        Mode::AsyncJobOnly => Verdict::Async,
        Mode::StagedChange => Verdict::Stage,
        Mode::Hide | Mode::Deny => Verdict::Deny,
    }
}

/// Execution limits snapshotted at authorization.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_millis: Option<i64>,
    /// Result size cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<i64>,
    /// Price cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_cents: Option<i64>,
    /// Shared rate bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bucket: Option<RateBucket>,
}

/// Exactly what was authorized: nothing between authorization and execution may change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundCall {
    /// Canonical tool name.
    pub tool: String,
    /// Tool version granted.
    pub tool_version: String,
    /// `schemaHash` granted.
    pub schema_hash: String,
    /// The granted tool definition's fingerprint: what an approver is shown and must echo, and
    /// what the tool must still be defined as when the call runs. `None` in bindings stored
    /// before it was recorded (read from the grant then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_hash: Option<String>,
    /// Hash of the effective arguments.
    pub args_hash: String,
    /// Agent arguments plus server-fixed ones.
    pub effective_arguments: Map<String, Value>,
    /// Whether the policy added `idempotency_key` (the tool does not know it: it is taken out
    /// of what the tool receives).
    #[serde(default)]
    pub strips_idempotency_key: bool,
    /// Whether the rule requires an `idempotency_key` (the gateway de-duplicates by it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_idempotency: bool,
    /// The exposure mode.
    pub mode: Mode,
    /// Limits.
    pub limits: Limits,
    /// Output redaction.
    pub redaction: RedactionProfile,
    /// The deciding rule (for disclosures).
    pub rule_id: Option<String>,
    /// What the tool may ask of the calling client while it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_requests: Vec<crate::policy::ClientRequest>,
    /// Price of the call, for the spend gate.
    pub price_cents: Option<u64>,
    /// Where it runs, as pinned in the manifest (MCP tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<crate::manifest::ExecutionTarget>,
}

impl BoundCall {
    /// The `idempotency_key` the call de-duplicates by, when its rule requires one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.requires_idempotency
            .then(|| self.effective_arguments.get(crate::narrow::IDEMPOTENCY_KEY))
            .flatten()
            .and_then(Value::as_str)
    }

    /// What the tool receives: the effective arguments without a policy-added idempotency key.
    pub fn upstream_arguments(&self) -> Map<String, Value> {
        let mut args = self.effective_arguments.clone();
        if self.strips_idempotency_key {
            args.remove(crate::narrow::IDEMPOTENCY_KEY);
        }
        args
    }
}

/// The engine's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CallDecision {
    /// What to do.
    pub verdict: Verdict,
    /// Why: `ok` or the first failing check's code.
    pub reason: ReasonCode,
    /// Detail for disclosures (validation problems, the rule's reason); never for callers.
    pub detail: Option<String>,
    /// The binding, when the call got past every check.
    pub bound: Option<BoundCall>,
}

impl CallDecision {
    fn deny(reason: ReasonCode) -> Self {
        Self {
            verdict: Verdict::Deny,
            reason,
            detail: None,
            bound: None,
        }
    }

    fn deny_because(reason: ReasonCode, detail: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            reason,
            detail: Some(detail.into()),
            bound: None,
        }
    }
}

/// The live definition of a tool, for drift detection.
pub trait LiveCatalog {
    /// The current definition hash of `tool`, or `None` when the tool is gone.
    fn definition_hash(&self, tool: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> LiveCatalog for F {
    fn definition_hash(&self, tool: &str) -> Option<String> {
        self(tool)
    }
}

/// Decides a call. Checks, in order (CONTRACT §5): manifest binding, lease, actor, callable,
/// fork allowlist, policy deny, scope, schema hash presence, tool version, schema hash, drift,
/// arguments.
pub fn decide(
    grant: &Grant<'_>,
    caller: &Caller<'_>,
    call: &CallRequest<'_>,
    now_ms: i64,
    allowlist: Option<&ExecutionAllowlist>,
    live: &dyn LiveCatalog,
    validators: &ValidatorCache,
) -> CallDecision {
    // Seed: "The presented session/manifest lease does not match (manifest-binding mismatch)."
    let binding_ok = caller.tenant_id == grant.tenant_id
        && call.session_id == Some(grant.session_id)
        && call.manifest_id == Some(grant.manifest_id)
        && call.lease_id == Some(grant.lease_id);
    if !binding_ok {
        return CallDecision::deny(ReasonCode::ManifestBindingMismatch);
    }
    if now_ms >= grant.lease_expires_at_ms {
        return CallDecision::deny(ReasonCode::LeaseExpired);
    }
    // Seed: "Actor identity is derived from the authenticated principal; an actor_id supplied by
    // a client is only an equality assertion and cannot choose another identity."
    if caller.actor_id != grant.actor_id || call.actor_id.is_some_and(|a| a != caller.actor_id) {
        return CallDecision::deny(ReasonCode::ActorMismatch);
    }
    // Seed: "The tool is not visible or not callable in this manifest." Hidden and unknown
    // tools are indistinguishable.
    let Some(entry) = grant
        .manifest
        .entry(call.tool)
        .filter(|e| e.mode.is_listed())
    else {
        return CallDecision::deny(ReasonCode::NotCallable);
    };
    // Fork seed: a disallowed call is rejected before tool construction, hooks, permission
    // classification, scheduling or approval.
    if let Some(list) = allowlist
        && !list.allows(&entry.identity())
    {
        return CallDecision::deny_because(
            ReasonCode::ExecutionAllowlist,
            list.rejection_message(call.tool),
        );
    }
    if entry.mode == Mode::Deny {
        return CallDecision::deny_because(ReasonCode::PolicyDenied, entry.rule_reason.clone());
    }
    // Seed: "The tool's required scope is not satisfied."
    if let Some(scope) = &entry.required_scope
        && !caller.scopes.satisfies(scope)
    {
        return CallDecision::deny_because(ReasonCode::ScopeMissing, scope.clone());
    }
    // Seed: "The echoed expected_schema_hash is missing or does not match the pinned hash."
    let Some(echoed_hash) = call.expected_schema_hash.filter(|h| !h.is_empty()) else {
        return CallDecision::deny(ReasonCode::SchemaHashMissing);
    };
    if call.tool_version != Some(entry.tool_version.as_str()) {
        return CallDecision::deny(ReasonCode::ToolVersionMismatch);
    }
    if echoed_hash != entry.schema_hash {
        return CallDecision::deny(ReasonCode::SchemaHashMismatch);
    }
    // Seed: "The manifest has drifted (the tool's advertised schema changed since the grant)."
    if live.definition_hash(&entry.name).as_deref() != Some(entry.definition_hash.as_str()) {
        return CallDecision::deny(ReasonCode::ManifestDrift);
    }
    let Some(narrowed) = &entry.narrowed else {
        return CallDecision::deny(ReasonCode::NotCallable);
    };
    // Seed: "The arguments do not validate against the exact narrowed schema advertised in the
    // grant."
    let empty = Value::Object(Map::new());
    let arguments = call.arguments.unwrap_or(&empty);
    let Value::Object(args) = arguments else {
        return CallDecision::deny_because(
            ReasonCode::ArgumentsInvalid,
            "arguments must be an object",
        );
    };
    if let Err(problems) = validators.validate(
        &entry.schema_hash,
        &entry.advertised.input_schema,
        arguments,
    ) {
        return CallDecision::deny_because(ReasonCode::ArgumentsInvalid, problems);
    }
    let effective = narrowed.effective_arguments(args);
    let args_hash = canonical::args_hash_of_map(&effective);
    let inv = entry.invocation.as_ref();
    let bound = BoundCall {
        tool: entry.name.clone(),
        tool_version: entry.tool_version.clone(),
        schema_hash: entry.schema_hash.clone(),
        definition_hash: Some(entry.definition_hash.clone()),
        args_hash,
        strips_idempotency_key: narrowed.adds_idempotency_key,
        requires_idempotency: inv.is_some_and(|i| i.requires_idempotency),
        effective_arguments: effective,
        mode: entry.mode,
        limits: Limits {
            max_duration_millis: inv.and_then(|i| i.max_duration_millis),
            max_result_bytes: inv.and_then(|i| i.max_result_bytes),
            max_cost_cents: inv.and_then(|i| i.max_cost_cents),
            rate_bucket: inv.and_then(|i| i.rate_bucket.clone()),
        },
        redaction: entry.redaction.clone(),
        rule_id: entry.rule_id.clone(),
        client_requests: entry.client_requests.clone(),
        price_cents: entry.price_cents,
        target: entry.target.clone(),
    };
    CallDecision {
        verdict: verdict_of(entry.mode),
        reason: ReasonCode::Ok,
        detail: None,
        bound: Some(bound),
    }
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
