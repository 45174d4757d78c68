//! Write-time validation of policies, with field paths (`rules[3].invocation.max_result_bytes`).
//!
//! Policy fields are not decoration: a limit the runtime cannot enforce is refused here, so a
//! policy never appears stricter than the runtime actually is. What the runtime can enforce is
//! an input ([`RuntimeCapabilities`]), because validation cannot see the deployment's wiring.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::policy::{InvocationPolicy, Mode, Policy, RedactionProfile, SAFE_PROFILE, Selector};

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// JSON path into the policy document.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// What the deployment can enforce; validation refuses anything beyond it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeCapabilities {
    /// A limiter shared by every server process is configured (PostgreSQL or Redis).
    pub shared_rate_limiter: bool,
    /// Longest execution deadline the executor honours.
    pub max_duration_millis: i64,
    /// Largest result the executor can buffer and measure.
    pub max_result_bytes: i64,
    /// Highest rate a bucket may allow.
    pub max_per_minute: i64,
}

impl Default for RuntimeCapabilities {
    /// A single node without a shared limiter: 5 minute deadline, 16 MiB results.
    fn default() -> Self {
        Self {
            shared_rate_limiter: false,
            max_duration_millis: 5 * 60 * 1000,
            max_result_bytes: 16 * 1024 * 1024,
            max_per_minute: 100_000,
        }
    }
}

/// Longest manifest lease, in seconds; `expires_after_seconds` can only shorten it.
pub const MAX_LEASE_SECONDS: i64 = 15 * 60;

/// Keywords a `schema_overlay` may use: each can only narrow what the tool accepts.
const NARROWING_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "enum",
    "const",
    "items",
    "additionalProperties",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "title",
    "description",
];

/// Parses a policy document; unknown fields and wrong types are reported with their path.
pub fn parse_policy(document: &Value) -> Result<Policy, Vec<FieldError>> {
    serde_path_to_error::deserialize::<_, Policy>(document).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        vec![FieldError::new(path, e.inner().to_string())]
    })
}

/// Parses and validates.
pub fn parse_and_validate(
    document: &Value,
    caps: &RuntimeCapabilities,
) -> Result<Policy, Vec<FieldError>> {
    let policy = parse_policy(document)?;
    validate(&policy, caps)?;
    Ok(policy)
}

fn is_id(s: &str, max: usize, extra: &[u8]) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || extra.contains(&b))
}

/// Validates a parsed policy against what the runtime can enforce.
pub fn validate(policy: &Policy, caps: &RuntimeCapabilities) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    if !is_id(&policy.name, 64, b"_-") {
        errors.push(FieldError::new(
            "name",
            "1–64 characters of a-z, 0-9, _ and -",
        ));
    }
    for (name, profile) in &policy.redaction_profiles {
        validate_profile(
            &format!("redaction_profiles.{name}"),
            name,
            profile,
            caps,
            &mut errors,
        );
    }
    let mut ids = BTreeSet::new();
    for (i, rule) in policy.rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        if !is_id(&rule.id, 64, b"_.-") {
            errors.push(FieldError::new(
                format!("{at}.id"),
                "1–64 characters of a-z, 0-9, _ . and -",
            ));
        } else if !ids.insert(rule.id.as_str()) {
            errors.push(FieldError::new(
                format!("{at}.id"),
                format!("another rule is already called {}", rule.id),
            ));
        }
        if rule.reason.len() > 500 {
            errors.push(FieldError::new(
                format!("{at}.reason"),
                "at most 500 characters",
            ));
        }
        if let Some(set) = &rule.selector.risk_exactly
            && set.is_empty()
        {
            errors.push(FieldError::new(
                format!("{at}.match.risk_exactly"),
                "name at least one risk label",
            ));
        }
        if let Some(profile) = &rule.redaction
            && profile != SAFE_PROFILE
            && !policy.redaction_profiles.contains_key(profile)
        {
            errors.push(FieldError::new(
                format!("{at}.redaction"),
                format!("no redaction profile is called {profile}"),
            ));
        }
        if let Some(inv) = &rule.invocation {
            validate_invocation(&format!("{at}.invocation"), inv, caps, &mut errors);
        }
        if !rule.selects_tools() {
            validate_item_rule(&at, rule, &mut errors);
        }
    }
    hints_only_narrow(policy, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// A rule that selects resources or prompts: one of the two, with context keys only, a mode
/// of `allow`, `hide` or `deny`, no invocation policy, and a URI written as normalised.
fn validate_item_rule(at: &str, rule: &crate::policy::Rule, errors: &mut Vec<FieldError>) {
    if rule.resource.is_some() && rule.prompt.is_some() {
        errors.push(FieldError::new(
            at,
            "a rule selects resources or prompts, not both",
        ));
    }
    if rule.selector.names_a_tool() || rule.selector.has_hint() {
        errors.push(FieldError::new(
            format!("{at}.match"),
            "a resource or prompt rule may add only environment and actor",
        ));
    }
    if !matches!(rule.mode, Mode::Allow | Mode::Hide | Mode::Deny) {
        errors.push(FieldError::new(
            format!("{at}.mode"),
            "resources and prompts are allow, hide or deny",
        ));
    }
    // A prompt may ask the client while it is got (a 2026-07-28 input round); a read may not.
    if rule.resource.is_some() && !rule.client_requests.is_empty() {
        errors.push(FieldError::new(
            format!("{at}.client_requests"),
            "a resource read asks the client nothing: client_requests belongs to tool and prompt rules",
        ));
    }
    // Only a cap on what comes back (`max_result_bytes`, checked with the rest of the rule's
    // invocation policy): nothing of theirs has arguments to narrow or a run to limit.
    if let Some(inv) = &rule.invocation
        && *inv
            != (InvocationPolicy {
                max_result_bytes: inv.max_result_bytes,
                ..InvocationPolicy::default()
            })
    {
        errors.push(FieldError::new(
            format!("{at}.invocation"),
            "resources and prompts take only max_result_bytes",
        ));
    }
    if let Some(sel) = &rule.resource {
        if let Some(upstream) = &sel.upstream
            && (upstream.is_empty()
                || upstream.len() > 64
                || !upstream.bytes().all(|b| b.is_ascii_graphic()))
        {
            errors.push(FieldError::new(
                format!("{at}.resource.upstream"),
                "an upstream's name: 1–64 printable characters",
            ));
        }
        let (text, prefix) = match sel.uri.strip_suffix('*') {
            Some(p) => (p, true),
            None => (sel.uri.as_str(), false),
        };
        let path = format!("{at}.resource.uri");
        if !(prefix && text.is_empty()) {
            match crate::uri::normalize(text) {
                Ok(normal) if normal == text => {}
                Ok(normal) => errors.push(FieldError::new(
                    path,
                    format!("write the URI as it is matched, normalised: {normal}"),
                )),
                // A prefix may end part-way (`test:`); an exact URI must be one.
                Err(_) if prefix && crate::uri::normalize(&format!("{text}x")).is_ok() => {}
                Err(e) => errors.push(FieldError::new(path, e.to_string())),
            }
        }
    }
    if let Some(prompt) = &rule.prompt {
        let name = prompt.strip_suffix('*').unwrap_or(prompt);
        if prompt.is_empty()
            || prompt.len() > 256
            || !name.bytes().all(|b| b.is_ascii_graphic() && b != b'*')
        {
            errors.push(FieldError::new(
                format!("{at}.prompt"),
                "a canonical prompt name (mcp__<server>__<prompt>), or a prefix ending *",
            ));
        }
    }
}

/// `preset` and `entity` are hints the client chooses, so a rule that needs one may only
/// narrow: for a tool such a rule decides, the mode it gives must be at least as strict as every
/// mode the same policy could give that tool without the hint (a later rule without hints that
/// could match the same tools, or `default_mode` when none surely does). Otherwise a client
/// would choose its own, looser policy by naming a preset.
fn hints_only_narrow(policy: &Policy, errors: &mut Vec<FieldError>) {
    for (i, rule) in policy.rules.iter().enumerate() {
        if !rule.selector.has_hint() || !rule.selects_tools() {
            continue;
        }
        let base = Selector {
            preset: None,
            entity: None,
            ..rule.selector.clone()
        };
        let mut looser: Option<(String, Mode)> = None;
        let mut reaches_default = true;
        for later in policy.rules.iter().skip(i + 1) {
            if later.selector.has_hint()
                || !later.selects_tools()
                || !compatible(&base, &later.selector)
            {
                continue;
            }
            if later.mode.strictness() > rule.mode.strictness() && looser.is_none() {
                looser = Some((format!("rule {}", later.id), later.mode));
            }
            if implies(&base, &later.selector) {
                reaches_default = false;
                break;
            }
        }
        if reaches_default
            && looser.is_none()
            && policy.default_mode.strictness() > rule.mode.strictness()
        {
            looser = Some(("the default mode".to_owned(), policy.default_mode));
        }
        if let Some((by, mode)) = looser {
            errors.push(FieldError::new(
                format!("rules[{i}].mode"),
                format!(
                    "a rule matching a client's hint (preset or entity) may only narrow: without the hint, {by} gives these tools {}, which {} loosens",
                    mode.as_str(),
                    rule.mode.as_str()
                ),
            ));
        }
    }
}

/// Whether some tool in some context could match both selectors (hint keys aside).
fn compatible(a: &Selector, b: &Selector) -> bool {
    let differ =
        |x: &Option<String>, y: &Option<String>| matches!((x, y), (Some(x), Some(y)) if x != y);
    fn as_set(l: &Option<Vec<String>>) -> Option<BTreeSet<&str>> {
        l.as_ref().map(|l| l.iter().map(String::as_str).collect())
    }
    let name_vs_prefix = |name: &Option<String>, prefix: &Option<String>| matches!((name, prefix), (Some(n), Some(p)) if !n.starts_with(p.as_str()));
    let prefixes_apart = matches!((&a.prefix, &b.prefix), (Some(x), Some(y)) if !x.starts_with(y.as_str()) && !y.starts_with(x.as_str()));
    let exactly_apart =
        matches!((as_set(&a.risk_exactly), as_set(&b.risk_exactly)), (Some(x), Some(y)) if x != y);
    let risk_outside = |risk: &Option<String>, exactly: &Option<Vec<String>>| matches!((risk, exactly), (Some(r), Some(e)) if !e.contains(r));
    !(differ(&a.name, &b.name)
        || name_vs_prefix(&a.name, &b.prefix)
        || name_vs_prefix(&b.name, &a.prefix)
        || prefixes_apart
        || differ(&a.family, &b.family)
        || exactly_apart
        || risk_outside(&a.risk, &b.risk_exactly)
        || risk_outside(&b.risk, &a.risk_exactly)
        || differ(&a.environment, &b.environment)
        || differ(&a.actor, &b.actor))
}

/// Whether every tool and context `a` matches is also matched by `b` (`b` without hints).
fn implies(a: &Selector, b: &Selector) -> bool {
    let same = |x: &Option<String>, y: &Option<String>| y.is_none() || x == y;
    let prefix = match &b.prefix {
        None => true,
        Some(p) => {
            a.name.as_ref().is_some_and(|n| n.starts_with(p.as_str()))
                || a.prefix.as_ref().is_some_and(|q| q.starts_with(p.as_str()))
        }
    };
    let risk = match &b.risk {
        None => true,
        Some(r) => {
            a.risk.as_ref() == Some(r) || a.risk_exactly.as_ref().is_some_and(|e| e.contains(r))
        }
    };
    let exactly = match &b.risk_exactly {
        None => true,
        Some(e) => a.risk_exactly.as_ref().is_some_and(|f| {
            f.iter().collect::<BTreeSet<_>>() == e.iter().collect::<BTreeSet<_>>()
        }),
    };
    same(&a.name, &b.name)
        && prefix
        && same(&a.family, &b.family)
        && risk
        && exactly
        && same(&a.environment, &b.environment)
        && same(&a.actor, &b.actor)
}

fn validate_profile(
    at: &str,
    name: &str,
    p: &RedactionProfile,
    caps: &RuntimeCapabilities,
    errors: &mut Vec<FieldError>,
) {
    if !is_id(name, 64, b"_-") {
        errors.push(FieldError::new(
            at,
            "profile names are 1–64 characters of a-z, 0-9, _ and -",
        ));
    }
    if p.max_bytes <= 0 {
        errors.push(FieldError::new(
            format!("{at}.max_bytes"),
            "must be positive",
        ));
    } else if p.max_bytes > caps.max_result_bytes {
        errors.push(FieldError::new(
            format!("{at}.max_bytes"),
            format!(
                "at most {} (the largest result this runtime handles)",
                caps.max_result_bytes
            ),
        ));
    }
    if p.destinations.is_empty() {
        errors.push(FieldError::new(
            format!("{at}.destinations"),
            "name at least one destination",
        ));
    }
    let unique: BTreeSet<_> = p.destinations.iter().collect();
    if unique.len() != p.destinations.len() {
        errors.push(FieldError::new(
            format!("{at}.destinations"),
            "destinations are listed twice",
        ));
    }
}

fn limit(
    at: String,
    value: Option<i64>,
    min: i64,
    ceiling: i64,
    what: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(v) = value else { return };
    if v < 0 {
        errors.push(FieldError::new(at, "must not be negative"));
    } else if v < min {
        errors.push(FieldError::new(at, format!("must be at least {min}")));
    } else if v > ceiling {
        errors.push(FieldError::new(at, format!("at most {ceiling}: {what}")));
    }
}

fn validate_invocation(
    at: &str,
    inv: &InvocationPolicy,
    caps: &RuntimeCapabilities,
    errors: &mut Vec<FieldError>,
) {
    limit(
        format!("{at}.max_duration_millis"),
        inv.max_duration_millis,
        1,
        caps.max_duration_millis,
        "a longer deadline is more than this runtime can enforce",
        errors,
    );
    limit(
        format!("{at}.max_result_bytes"),
        inv.max_result_bytes,
        1,
        caps.max_result_bytes,
        "larger results are more than this runtime can measure",
        errors,
    );
    limit(
        format!("{at}.expires_after_seconds"),
        inv.expires_after_seconds,
        1,
        MAX_LEASE_SECONDS,
        "a lease never lasts longer than 15 minutes",
        errors,
    );
    // Accepted whatever the wiring: enforced (or refused) at execution by the spend gate.
    limit(
        format!("{at}.max_cost_cents"),
        inv.max_cost_cents,
        0,
        i64::MAX,
        "",
        errors,
    );
    if let Some(bucket) = &inv.rate_bucket {
        if !caps.shared_rate_limiter {
            errors.push(FieldError::new(
                format!("{at}.rate_bucket"),
                "no shared rate limiter is configured (APERTURE_RATE_LIMITER), so a rate bucket cannot be enforced",
            ));
        }
        if !is_id(&bucket.name, 64, b"_.-") {
            errors.push(FieldError::new(
                format!("{at}.rate_bucket.name"),
                "1–64 characters of a-z, 0-9, _ . and -",
            ));
        }
        limit(
            format!("{at}.rate_bucket.per_minute"),
            Some(bucket.per_minute),
            1,
            caps.max_per_minute,
            "the limiter does not count faster",
            errors,
        );
    }
    if inv.fixed_arguments.contains_key("idempotency_key") {
        errors.push(FieldError::new(
            format!("{at}.fixed_arguments.idempotency_key"),
            "the idempotency key is chosen per call, it cannot be fixed",
        ));
    }
    if inv.connection_mode.is_some() && inv.fixed_arguments.contains_key("connection_mode") {
        errors.push(FieldError::new(
            format!("{at}.connection_mode"),
            "pinned twice: here and in fixed_arguments.connection_mode",
        ));
    }
    for (name, values) in &inv.allowed_values {
        if values.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.allowed_values.{name}"),
                "name at least one value",
            ));
        }
        if inv.fixed_arguments.contains_key(name) {
            errors.push(FieldError::new(
                format!("{at}.allowed_values.{name}"),
                "this argument is fixed by the server; allowed values would never apply",
            ));
        }
    }
    if let Some(overlay) = &inv.schema_overlay {
        check_overlay(&format!("{at}.schema_overlay"), overlay, errors);
    }
}

/// Refuses overlay constructs that could widen a schema. Merging (see `narrow`) then takes the
/// stricter of each pair, so an overlay that passes here can only narrow.
fn check_overlay(at: &str, overlay: &Value, errors: &mut Vec<FieldError>) {
    let Value::Object(map) = overlay else {
        errors.push(FieldError::new(at, "a schema overlay is a JSON object"));
        return;
    };
    for (key, value) in map {
        let here = format!("{at}.{key}");
        if !NARROWING_KEYWORDS.contains(&key.as_str()) {
            errors.push(FieldError::new(
                here,
                format!("`{key}` could widen the schema; overlays may only narrow"),
            ));
            continue;
        }
        match key.as_str() {
            "additionalProperties" if *value != Value::Bool(false) => {
                errors.push(FieldError::new(
                    here,
                    "may only be false (an overlay cannot allow more properties)",
                ));
            }
            "uniqueItems" if *value != Value::Bool(true) => {
                errors.push(FieldError::new(here, "may only be true"));
            }
            "properties" => match value {
                Value::Object(props) => {
                    for (name, sub) in props {
                        check_overlay(&format!("{here}.{name}"), sub, errors);
                    }
                }
                _ => errors.push(FieldError::new(here, "must be an object of overlays")),
            },
            "items" => check_overlay(&here, value, errors),
            "required"
                if !value
                    .as_array()
                    .is_some_and(|a| a.iter().all(Value::is_string)) =>
            {
                errors.push(FieldError::new(here, "must be a list of property names"));
            }
            "enum" if value.as_array().is_none_or(|a| a.is_empty()) => {
                errors.push(FieldError::new(here, "must be a non-empty list"));
            }
            "type"
                if !(value.is_string()
                    || value
                        .as_array()
                        .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))) =>
            {
                errors.push(FieldError::new(
                    here,
                    "must be a type name or a list of them",
                ));
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties"
                if value.as_u64().is_none() =>
            {
                errors.push(FieldError::new(here, "must be a non-negative integer"));
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
                if !value.is_number() =>
            {
                errors.push(FieldError::new(here, "must be a number"));
            }
            "multipleOf" if !value.as_f64().is_some_and(|f| f > 0.0) => {
                errors.push(FieldError::new(here, "must be a positive number"));
            }
            "pattern" | "format" | "title" | "description" if !value.is_string() => {
                errors.push(FieldError::new(here, "must be a string"));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(doc: Value, caps: &RuntimeCapabilities) -> Vec<String> {
        match parse_and_validate(&doc, caps) {
            Ok(_) => vec![],
            Err(errors) => errors.into_iter().map(|e| e.path).collect(),
        }
    }

    /// Issue 47: resource and prompt rules are checked as what they are: one kind, context keys
    /// only, `allow`/`hide`/`deny`, no invocation policy, URIs written as normalised.
    #[test]
    fn resource_and_prompt_rules_are_validated_with_field_paths() {
        let caps = RuntimeCapabilities::default();
        let refused = |rules: Value| paths(json!({"name": "p", "rules": rules}), &caps);
        assert!(
            refused(json!([
                {"id": "a", "resource": {"uri": "test://h/docs/*"}, "mode": "allow",
                 "match": {"environment": "dev", "actor": "x"}},
                {"id": "b", "resource": {"upstream": "fs", "uri": "file:///etc/motd"}, "mode": "deny"},
                {"id": "c", "resource": {"uri": "*"}, "mode": "hide"},
                {"id": "d", "resource": {"uri": "test:*"}, "mode": "allow"},
                {"id": "e", "prompt": "mcp__fs__*", "mode": "allow"},
                {"id": "f", "resource": {"uri": "x:/big"}, "mode": "allow",
                 "invocation": {"max_result_bytes": 10}}
            ]))
            .is_empty()
        );
        assert_eq!(
            refused(json!([
                {"id": "a", "resource": {"uri": "x:/a"}, "prompt": "p", "mode": "allow"},
                {"id": "b", "resource": {"uri": "x:/a"}, "mode": "allow", "match": {"risk": "read"}},
                {"id": "c", "prompt": "p", "mode": "approval_required"},
                {"id": "d", "prompt": "p", "mode": "allow", "invocation": {"max_duration_millis": 10}},
                {"id": "e", "resource": {"uri": "TEST://H/a"}, "mode": "allow"},
                {"id": "f", "resource": {"uri": "test://h/../etc"}, "mode": "allow"},
                {"id": "g", "prompt": "", "mode": "allow"},
                {"id": "h", "prompt": "a*b", "mode": "allow"},
                {"id": "i", "resource": {"upstream": "", "uri": "*"}, "mode": "allow"},
                {"id": "j", "prompt": "p", "mode": "allow", "match": {"preset": "x"}}
            ])),
            [
                "rules[0]",
                "rules[1].match",
                "rules[2].mode",
                "rules[3].invocation",
                "rules[4].resource.uri",
                "rules[5].resource.uri",
                "rules[6].prompt",
                "rules[7].prompt",
                "rules[8].resource.upstream",
                "rules[9].match"
            ]
        );
        assert_eq!(
            refused(
                json!([{"id": "a", "resource": {"uri": "x:/a", "colour": 1}, "mode": "allow"}])
            ),
            ["rules[0].resource.colour"]
        );
    }

    /// Issue 47: `client_requests` names what a tool or a prompt may ask of the client; it
    /// belongs to tool and prompt rules, and only the four kinds exist.
    #[test]
    fn client_requests_belong_to_tool_and_prompt_rules() {
        let caps = RuntimeCapabilities::default();
        let refused = |rules: Value| paths(json!({"name": "p", "rules": rules}), &caps);
        assert!(
            refused(json!([{"id": "a", "match": {"name": "t"}, "mode": "allow",
                "client_requests": ["sampling", "elicitation", "elicitation_url", "roots"]}]))
            .is_empty()
        );
        assert_eq!(
            refused(json!([
                {"id": "a", "resource": {"uri": "x:/a"}, "mode": "allow", "client_requests": ["roots"]},
                {"id": "b", "prompt": "p", "mode": "allow", "client_requests": ["sampling"]}
            ])),
            ["rules[0].client_requests"]
        );
        assert!(
            !refused(json!([{"id": "a", "mode": "allow", "client_requests": ["telepathy"]}]))
                .is_empty()
        );
    }

    /// Issue 23: a rule that needs a client's hint (`preset`, `entity`) may only narrow what
    /// the same policy gives without the hint; property: for every tool and context, naming the
    /// hint never makes the mode less strict (checked by brute force over a small universe).
    #[test]
    fn hint_rules_may_only_narrow() {
        let caps = RuntimeCapabilities::default();
        let refused = |rules: Value| paths(json!({"name": "p", "rules": rules}), &caps);
        // Loosens a later rule, or the default.
        assert_eq!(
            refused(
                json!([{"id": "a", "match": {"preset": "x"}, "mode": "allow"},
                           {"id": "b", "match": {"risk": "read"}, "mode": "deny"}])
            ),
            ["rules[0].mode"]
        );
        assert_eq!(
            refused(json!([{"id": "a", "match": {"entity": "e", "name": "t"}, "mode": "allow"}])),
            ["rules[0].mode"]
        );
        // Narrows: stricter than every rule it could shadow, and a later rule always catches.
        assert!(
            refused(json!([
                {"id": "a", "match": {"entity": "e", "risk": "read"}, "mode": "approval_required"},
                {"id": "b", "match": {"risk": "read"}, "mode": "allow"}
            ]))
            .is_empty()
        );
        assert!(
            refused(json!([
                {"id": "a", "match": {"preset": "x"}, "mode": "hide"},
                {"id": "b", "mode": "allow"}
            ]))
            .is_empty()
        );
        // A later rule that cannot match the same tools does not count.
        assert!(
            refused(json!([
                {"id": "a", "match": {"preset": "x", "name": "t1"}, "mode": "approval_required"},
                {"id": "b", "match": {"name": "t2"}, "mode": "deny"},
                {"id": "c", "mode": "allow"}
            ]))
            .is_empty()
        );

        // Brute force: every accepted policy of two or three rules over a small universe never
        // loosens a tool's mode when a hint is named.
        use crate::descriptor::{ToolDescriptor, ToolSource};
        use crate::policy::ExposureContext;
        let tools: Vec<ToolDescriptor> =
            [("t1", vec!["read"]), ("t2", vec!["write"]), ("t3", vec![])]
                .into_iter()
                .map(|(name, risk)| ToolDescriptor {
                    name: name.into(),
                    version: "1".into(),
                    title: None,
                    description: None,
                    input_schema: json!({"type": "object"}),
                    output_schema: None,
                    annotations: None,
                    family: None,
                    risk: risk.into_iter().map(str::to_owned).collect(),
                    required_scope: None,
                    source: ToolSource::Builtin,
                    dry_run_argument: None,
                    price_cents: None,
                })
                .collect();
        let selectors = [
            json!({}),
            json!({"risk": "read"}),
            json!({"name": "t2"}),
            json!({"preset": "x"}),
            json!({"entity": "e", "risk": "read"}),
            json!({"preset": "x", "name": "t3"}),
        ];
        let modes = ["allow", "approval_required", "deny", "hide"];
        let rule = |i: usize, sel: &Value, mode: &str| json!({"id": format!("r{i}"), "match": sel, "mode": mode});
        let plain = ExposureContext {
            environment: "default".into(),
            actor: "a".into(),
            preset: None,
            entity: None,
        };
        let hinted = ExposureContext {
            preset: Some("x".into()),
            entity: Some("e".into()),
            ..plain.clone()
        };
        let mut accepted = 0;
        for s1 in &selectors {
            for m1 in modes {
                for s2 in &selectors {
                    for m2 in modes {
                        let doc = json!({"name": "p", "rules": [rule(0, s1, m1), rule(1, s2, m2)]});
                        let Ok(policy) = parse_and_validate(&doc, &caps) else {
                            continue;
                        };
                        accepted += 1;
                        for t in &tools {
                            let without = policy.select(t, &plain).mode;
                            let with = policy.select(t, &hinted).mode;
                            assert!(
                                with.strictness() >= without.strictness(),
                                "{doc} loosens {} from {} to {}",
                                t.name,
                                without.as_str(),
                                with.as_str()
                            );
                        }
                    }
                }
            }
        }
        assert!(
            accepted > 100,
            "the check leaves most policies alone: {accepted}"
        );
    }

    fn with_invocation(inv: Value) -> Value {
        json!({"name": "p", "rules": [
            {"id": "a", "match": {"name": "x"}, "mode": "allow"},
            {"id": "b", "match": {"name": "y"}, "mode": "allow"},
            {"id": "c", "match": {"name": "z"}, "mode": "allow"},
            {"id": "d", "match": {"name": "w"}, "mode": "allow", "invocation": inv}
        ]})
    }

    /// Seed: "A negative limit is invalid"
    #[test]
    fn negative_limits_are_invalid() {
        let caps = RuntimeCapabilities::default();
        for key in [
            "max_duration_millis",
            "max_result_bytes",
            "expires_after_seconds",
            "max_cost_cents",
        ] {
            let got = paths(with_invocation(json!({ key: -1 })), &caps);
            assert_eq!(got, vec![format!("rules[3].invocation.{key}")]);
        }
    }

    /// Seed: "a ceiling too large to enforce is refused"
    #[test]
    fn ceilings_beyond_the_runtime_are_refused() {
        let caps = RuntimeCapabilities::default();
        assert_eq!(
            paths(
                with_invocation(json!({"max_result_bytes": caps.max_result_bytes + 1})),
                &caps
            ),
            vec!["rules[3].invocation.max_result_bytes"]
        );
        assert_eq!(
            paths(
                with_invocation(json!({"max_duration_millis": caps.max_duration_millis + 1})),
                &caps
            ),
            vec!["rules[3].invocation.max_duration_millis"]
        );
        assert_eq!(
            paths(
                with_invocation(json!({"expires_after_seconds": 901})),
                &caps
            ),
            vec!["rules[3].invocation.expires_after_seconds"]
        );
        assert!(
            paths(
                with_invocation(json!({"max_result_bytes": caps.max_result_bytes})),
                &caps
            )
            .is_empty()
        );
    }

    /// Seed: "a rate_bucket without a distributed limiter is rejected when the policy is written"
    #[test]
    fn rate_buckets_need_a_shared_limiter() {
        let inv = json!({"rate_bucket": {"name": "gh", "per_minute": 60}});
        let single = RuntimeCapabilities::default();
        assert_eq!(
            paths(with_invocation(inv.clone()), &single),
            vec!["rules[3].invocation.rate_bucket"]
        );
        let shared = RuntimeCapabilities {
            shared_rate_limiter: true,
            ..single
        };
        assert!(paths(with_invocation(inv), &shared).is_empty());
    }

    /// Seed: "A max_cost_cents ceiling is accepted — it is enforceable against the price
    /// connector pricing resolves before provider I/O"
    #[test]
    fn max_cost_cents_is_accepted_without_wiring() {
        assert!(
            paths(
                with_invocation(json!({"max_cost_cents": 25})),
                &RuntimeCapabilities::default()
            )
            .is_empty()
        );
    }

    #[test]
    fn unknown_fields_are_refused_with_their_path() {
        let caps = RuntimeCapabilities::default();
        assert_eq!(
            paths(with_invocation(json!({"max_results": 3})), &caps),
            vec!["rules[3].invocation.max_results"]
        );
        assert_eq!(
            paths(json!({"name": "p", "colour": 1}), &caps),
            vec!["colour"]
        );
        assert_eq!(
            paths(
                json!({"name": "p", "rules": [{"id": "a", "mode": "sometimes"}]}),
                &caps
            ),
            vec!["rules[0].mode"]
        );
    }

    /// Issue: overlays that would widen a schema are refused.
    #[test]
    fn widening_overlays_are_refused() {
        let caps = RuntimeCapabilities::default();
        let cases = [
            (
                json!({"additionalProperties": true}),
                "rules[3].invocation.schema_overlay.additionalProperties",
            ),
            (
                json!({"anyOf": [{}]}),
                "rules[3].invocation.schema_overlay.anyOf",
            ),
            (
                json!({"properties": {"q": {"oneOf": []}}}),
                "rules[3].invocation.schema_overlay.properties.q.oneOf",
            ),
            (
                json!({"items": {"additionalProperties": {}}}),
                "rules[3].invocation.schema_overlay.items.additionalProperties",
            ),
            (
                json!({"enum": []}),
                "rules[3].invocation.schema_overlay.enum",
            ),
            (json!([1]), "rules[3].invocation.schema_overlay"),
        ];
        for (overlay, path) in cases {
            assert_eq!(
                paths(with_invocation(json!({"schema_overlay": overlay})), &caps),
                vec![path]
            );
        }
        let narrowing = json!({"schema_overlay": {"properties": {"q": {"maxLength": 10}}, "required": ["q"], "additionalProperties": false}});
        assert!(paths(with_invocation(narrowing), &caps).is_empty());
    }

    #[test]
    fn rules_and_profiles_are_checked() {
        let caps = RuntimeCapabilities::default();
        let doc = json!({
            "name": "Bad Name",
            "rules": [
                {"id": "a", "mode": "allow", "redaction": "missing"},
                {"id": "a", "mode": "allow"}
            ],
            "redaction_profiles": {"tiny": {"summary": "truncate", "max_bytes": 0, "destinations": []}}
        });
        let mut got = paths(doc, &caps);
        got.sort();
        assert_eq!(
            got,
            vec![
                "name",
                "redaction_profiles.tiny.destinations",
                "redaction_profiles.tiny.max_bytes",
                "rules[0].redaction",
                "rules[1].id"
            ]
        );
    }

    #[test]
    fn the_builtin_policy_is_valid() {
        assert!(
            validate(
                &Policy::builtin_safe_read(),
                &RuntimeCapabilities::default()
            )
            .is_ok()
        );
        let doc = serde_json::to_value(Policy::builtin_safe_read()).unwrap();
        assert_eq!(
            parse_and_validate(&doc, &RuntimeCapabilities::default()).unwrap(),
            Policy::builtin_safe_read()
        );
    }
}
