//! The policy editor's model: a policy as a person types it.
//!
//! Every field is kept as typed (text for numbers and JSON), so an invalid entry stays on screen
//! with its error instead of being lost. [`Draft::document`] turns the draft into the policy
//! document the server stores, with the entries that cannot become JSON reported under the same
//! field paths the engine uses (`rules[0].invocation.max_result_bytes`), so the editor shows
//! both kinds of error next to the field they concern.

use engine::policy::{Mode, Policy, RedactionProfile, Rule, Selector, SummaryMode};
use serde_json::{Map, Value};

use crate::error::FieldError;

/// Selector keys a rule condition can use, with what the editor calls them.
pub const CONDITION_KINDS: [(&str, &str); 9] = [
    ("name", "Tool name is"),
    ("prefix", "Tool name starts with"),
    ("family", "Family is"),
    ("risk", "Has risk label"),
    ("risk_exactly", "Risk labels are exactly"),
    ("environment", "Environment is"),
    ("preset", "Preset is"),
    ("entity", "Entity is"),
    ("actor", "Actor is"),
];

/// What a rule can select, with what the editor calls it.
pub const SELECTS: [(&str, &str); 3] = [
    ("tools", "Tools"),
    ("resources", "Resources and templates"),
    ("prompts", "Prompts"),
];

/// Condition keys a resource or prompt rule may add (its context).
pub const CONTEXT_KINDS: [&str; 2] = ["environment", "actor"];

/// Destinations a redaction profile can let output reach.
pub const DESTINATIONS: [&str; 4] = ["llm", "mcp", "transcript", "logs"];

/// One condition of a rule's `match`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionDraft {
    /// Stable key for rendering lists.
    pub key: u64,
    /// A key of [`CONDITION_KINDS`].
    pub kind: String,
    /// The value as typed (`risk_exactly`: labels separated by commas).
    pub value: String,
}

/// A rule's invocation policy, as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationDraft {
    /// JSON object.
    pub fixed_arguments: String,
    /// JSON object of arrays.
    pub allowed_values: String,
    /// JSON schema fragment.
    pub schema_overlay: String,
    /// Pinned connection mode.
    pub connection_mode: String,
    /// Whether an idempotency key is required.
    pub requires_idempotency: bool,
    /// Whole number, as typed.
    pub max_duration_millis: String,
    /// Whole number, as typed.
    pub max_result_bytes: String,
    /// Whole number, as typed.
    pub expires_after_seconds: String,
    /// Whole number, as typed.
    pub max_cost_cents: String,
    /// Rate bucket name (no bucket when empty and `rate_per_minute` is empty).
    pub rate_bucket: String,
    /// Whole number, as typed.
    pub rate_per_minute: String,
}

impl InvocationDraft {
    /// Whether nothing is set (the rule then has no `invocation`).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One rule, as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleDraft {
    /// Stable key for rendering lists.
    pub key: u64,
    /// Rule id.
    pub id: String,
    /// A key of [`SELECTS`]: what the rule selects.
    pub selects: String,
    /// Resource rules: the upstream's registered name (any upstream when empty).
    pub resource_upstream: String,
    /// Resource rules: a normalised URI, exact or a prefix ending `*`.
    pub resource_uri: String,
    /// Prompt rules: a canonical prompt name, exact or a prefix ending `*`.
    pub prompt: String,
    /// Tool rules: what the tools may ask of the calling client (`sampling`, …).
    pub client_requests: Vec<String>,
    /// `match` conditions, all of which must hold.
    pub conditions: Vec<ConditionDraft>,
    /// Mode (wire name).
    pub mode: String,
    /// Why.
    pub reason: String,
    /// Redaction profile name (`safe` when empty).
    pub redaction: String,
    /// Narrowing and limits.
    pub invocation: InvocationDraft,
}

/// One redaction profile, as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDraft {
    /// Stable key for rendering lists.
    pub key: u64,
    /// Profile name.
    pub name: String,
    /// `truncate` or `omit`.
    pub summary: String,
    /// Whole number, as typed.
    pub max_bytes: String,
    /// Destinations allowed.
    pub destinations: Vec<String>,
}

/// A policy being edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// Policy id (the document's `name`).
    pub name: String,
    /// Mode of tools no rule matches.
    pub default_mode: String,
    /// Rules, in order.
    pub rules: Vec<RuleDraft>,
    /// Redaction profiles, in the order shown.
    pub profiles: Vec<ProfileDraft>,
    next_key: u64,
}

fn json_text(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn opt_num(n: Option<i64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

impl Draft {
    /// An empty policy called `name`: no rules, everything hidden.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            default_mode: Mode::Hide.as_str().to_owned(),
            rules: vec![],
            profiles: vec![],
            next_key: 1,
        }
    }

    /// The draft of a stored document. A document that does not parse as a policy (it cannot
    /// have been stored by this version, but the editor must not panic on it) gives an empty
    /// draft.
    pub fn from_document(name: &str, document: &Value) -> Self {
        let mut draft = Self::new(name);
        let Ok(policy) = engine::validate::parse_policy(document) else {
            return draft;
        };
        draft.load(&policy);
        draft
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn load(&mut self, policy: &Policy) {
        self.default_mode = policy.default_mode.as_str().to_owned();
        for rule in &policy.rules {
            let r = self.rule_draft(rule);
            self.rules.push(r);
        }
        for (name, profile) in &policy.redaction_profiles {
            let key = self.key();
            self.profiles.push(profile_draft(key, name, profile));
        }
    }

    fn rule_draft(&mut self, rule: &Rule) -> RuleDraft {
        let key = self.key();
        let conditions = selector_pairs(&rule.selector)
            .into_iter()
            .map(|(kind, value)| ConditionDraft {
                key: self.key(),
                kind: kind.to_owned(),
                value,
            })
            .collect();
        let invocation = rule
            .invocation
            .as_ref()
            .map(|inv| InvocationDraft {
                fixed_arguments: if inv.fixed_arguments.is_empty() {
                    String::new()
                } else {
                    json_text(&Value::Object(inv.fixed_arguments.clone()))
                },
                allowed_values: if inv.allowed_values.is_empty() {
                    String::new()
                } else {
                    json_text(&serde_json::to_value(&inv.allowed_values).unwrap_or(Value::Null))
                },
                schema_overlay: inv
                    .schema_overlay
                    .as_ref()
                    .map(json_text)
                    .unwrap_or_default(),
                connection_mode: inv.connection_mode.clone().unwrap_or_default(),
                requires_idempotency: inv.requires_idempotency,
                max_duration_millis: opt_num(inv.max_duration_millis),
                max_result_bytes: opt_num(inv.max_result_bytes),
                expires_after_seconds: opt_num(inv.expires_after_seconds),
                max_cost_cents: opt_num(inv.max_cost_cents),
                rate_bucket: inv
                    .rate_bucket
                    .as_ref()
                    .map(|b| b.name.clone())
                    .unwrap_or_default(),
                rate_per_minute: opt_num(inv.rate_bucket.as_ref().map(|b| b.per_minute)),
            })
            .unwrap_or_default();
        let selects = if rule.resource.is_some() {
            "resources"
        } else if rule.prompt.is_some() {
            "prompts"
        } else {
            "tools"
        };
        RuleDraft {
            key,
            id: rule.id.clone(),
            selects: selects.into(),
            resource_upstream: rule
                .resource
                .as_ref()
                .and_then(|r| r.upstream.clone())
                .unwrap_or_default(),
            resource_uri: rule
                .resource
                .as_ref()
                .map(|r| r.uri.clone())
                .unwrap_or_default(),
            prompt: rule.prompt.clone().unwrap_or_default(),
            client_requests: rule
                .client_requests
                .iter()
                .map(|c| c.as_str().to_owned())
                .collect(),
            conditions,
            mode: rule.mode.as_str().to_owned(),
            reason: rule.reason.clone(),
            redaction: rule.redaction.clone().unwrap_or_default(),
            invocation,
        }
    }

    /// Appends an empty rule (`rule-N`, allow, one name condition) and returns its key.
    pub fn add_rule(&mut self) -> u64 {
        let key = self.key();
        let mut n = self.rules.len() + 1;
        while self.rules.iter().any(|r| r.id == format!("rule-{n}")) {
            n += 1;
        }
        let condition = ConditionDraft {
            key: self.key(),
            kind: "name".into(),
            value: String::new(),
        };
        self.rules.push(RuleDraft {
            key,
            id: format!("rule-{n}"),
            selects: "tools".into(),
            resource_upstream: String::new(),
            resource_uri: String::new(),
            prompt: String::new(),
            client_requests: vec![],
            conditions: vec![condition],
            mode: Mode::Allow.as_str().into(),
            reason: String::new(),
            redaction: String::new(),
            invocation: InvocationDraft::default(),
        });
        key
    }

    /// Removes the rule with `key`.
    pub fn remove_rule(&mut self, key: u64) {
        self.rules.retain(|r| r.key != key);
    }

    /// Moves the rule with `key` one place up (`-1`) or down (`1`); nothing at either end.
    pub fn move_rule(&mut self, key: u64, by: isize) {
        let Some(i) = self.rules.iter().position(|r| r.key == key) else {
            return;
        };
        let Some(j) = i.checked_add_signed(by) else {
            return;
        };
        if j < self.rules.len() {
            self.rules.swap(i, j);
        }
    }

    /// The rule with `key`, to change it.
    pub fn rule_mut(&mut self, key: u64) -> Option<&mut RuleDraft> {
        self.rules.iter_mut().find(|r| r.key == key)
    }

    /// Makes the rule with `key` select `selects` (a key of [`SELECTS`]). A resource or prompt
    /// rule keeps only its context conditions (environment, actor) that have a value, and asks
    /// nothing of the client.
    pub fn set_selects(&mut self, key: u64, selects: &str) {
        if let Some(r) = self.rule_mut(key) {
            r.selects = selects.to_owned();
            if selects != "tools" {
                r.conditions.retain(|c| {
                    CONTEXT_KINDS.contains(&c.kind.as_str()) && !c.value.trim().is_empty()
                });
            }
        }
    }

    /// Adds a condition to the rule with `key` (of a kind it does not have yet, a context kind
    /// for resource and prompt rules).
    pub fn add_condition(&mut self, rule: u64) {
        let key = self.key();
        if let Some(r) = self.rule_mut(rule) {
            let kinds: Vec<&str> = if r.selects == "tools" {
                CONDITION_KINDS.iter().map(|(k, _)| *k).collect()
            } else {
                CONTEXT_KINDS.to_vec()
            };
            let kind = kinds
                .iter()
                .copied()
                .find(|k| !r.conditions.iter().any(|c| c.kind == *k))
                .unwrap_or(kinds[0]);
            r.conditions.push(ConditionDraft {
                key,
                kind: kind.into(),
                value: String::new(),
            });
        }
    }

    /// Appends a profile (`profile-N`, truncate to 8 KiB, model and MCP) and returns its key.
    pub fn add_profile(&mut self) -> u64 {
        let key = self.key();
        let mut n = self.profiles.len() + 1;
        while self
            .profiles
            .iter()
            .any(|p| p.name == format!("profile-{n}"))
        {
            n += 1;
        }
        self.profiles.push(profile_draft(
            key,
            &format!("profile-{n}"),
            &RedactionProfile::safe(),
        ));
        key
    }

    /// The profile with `key`, to change it.
    pub fn profile_mut(&mut self, key: u64) -> Option<&mut ProfileDraft> {
        self.profiles.iter_mut().find(|p| p.key == key)
    }

    /// The policy document, and the entries that could not become JSON (under the engine's
    /// field paths). Such entries are left out of the document, so the rest can still be
    /// previewed; the editor refuses to save while there are any.
    pub fn document(&self) -> (Value, Vec<FieldError>) {
        let mut errors = Vec::new();
        let mut doc = Map::new();
        doc.insert("name".into(), Value::String(self.name.clone()));
        doc.insert(
            "default_mode".into(),
            Value::String(self.default_mode.clone()),
        );
        let rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| rule_document(&format!("rules[{i}]"), r, &mut errors))
            .collect();
        doc.insert("rules".into(), Value::Array(rules));
        let mut profiles = Map::new();
        for p in &self.profiles {
            let at = format!("redaction_profiles.{}", p.name);
            let mut profile = Map::new();
            profile.insert("summary".into(), Value::String(p.summary.clone()));
            if let Some(n) = number(&format!("{at}.max_bytes"), &p.max_bytes, true, &mut errors) {
                profile.insert("max_bytes".into(), n);
            }
            profile.insert(
                "destinations".into(),
                Value::Array(
                    DESTINATIONS
                        .iter()
                        .filter(|d| p.destinations.iter().any(|x| x == *d))
                        .map(|d| Value::String((*d).to_owned()))
                        .collect(),
                ),
            );
            if profiles.contains_key(&p.name) {
                errors.push(FieldError {
                    path: format!("{at}.name"),
                    message: format!("another profile is already called {}", p.name),
                });
            }
            profiles.insert(p.name.clone(), Value::Object(profile));
        }
        doc.insert("redaction_profiles".into(), Value::Object(profiles));
        (Value::Object(doc), errors)
    }
}

fn profile_draft(key: u64, name: &str, profile: &RedactionProfile) -> ProfileDraft {
    ProfileDraft {
        key,
        name: name.to_owned(),
        summary: match profile.summary {
            SummaryMode::Truncate => "truncate",
            SummaryMode::Omit => "omit",
        }
        .into(),
        max_bytes: profile.max_bytes.to_string(),
        destinations: profile
            .destinations
            .iter()
            .filter_map(|d| serde_json::to_value(d).ok())
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
    }
}

fn selector_pairs(s: &Selector) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut put = |k: &'static str, v: &Option<String>| {
        if let Some(v) = v {
            out.push((k, v.clone()));
        }
    };
    put("name", &s.name);
    put("prefix", &s.prefix);
    put("family", &s.family);
    put("risk", &s.risk);
    put(
        "risk_exactly",
        &s.risk_exactly.as_ref().map(|l| l.join(", ")),
    );
    put("environment", &s.environment);
    put("preset", &s.preset);
    put("entity", &s.entity);
    put("actor", &s.actor);
    out
}

/// A whole number as typed: empty is absent, anything else must parse.
fn number(path: &str, text: &str, required: bool, errors: &mut Vec<FieldError>) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        if required {
            errors.push(FieldError {
                path: path.into(),
                message: "required".into(),
            });
        }
        return None;
    }
    match t.parse::<i64>() {
        Ok(n) => Some(Value::from(n)),
        Err(_) => {
            errors.push(FieldError {
                path: path.into(),
                message: "must be a whole number".into(),
            });
            None
        }
    }
}

/// A JSON editor's text: empty is absent, anything else must parse (and be an object when
/// `object` is set).
fn json(path: &str, text: &str, object: bool, errors: &mut Vec<FieldError>) -> Option<Value> {
    if text.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) if object && !v.is_object() => {
            errors.push(FieldError {
                path: path.into(),
                message: "must be a JSON object ({ … })".into(),
            });
            None
        }
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(FieldError {
                path: path.into(),
                message: format!(
                    "not valid JSON: {} (line {}, column {})",
                    json_error_text(&e),
                    e.line(),
                    e.column()
                ),
            });
            None
        }
    }
}

fn json_error_text(e: &serde_json::Error) -> String {
    // serde_json's message ends with " at line L column C", which we say ourselves.
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

fn rule_document(at: &str, r: &RuleDraft, errors: &mut Vec<FieldError>) -> Value {
    let mut rule = Map::new();
    rule.insert("id".into(), Value::String(r.id.clone()));
    let mut selector = Map::new();
    for c in &r.conditions {
        let value = if c.kind == "risk_exactly" {
            Value::Array(
                c.value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.to_owned()))
                    .collect(),
            )
        } else {
            Value::String(c.value.trim().to_owned())
        };
        if c.value.trim().is_empty() {
            errors.push(FieldError {
                path: format!("{at}.match.{}", c.kind),
                message: "enter a value, or remove the condition".into(),
            });
        }
        if selector.contains_key(&c.kind) {
            errors.push(FieldError {
                path: format!("{at}.match.{}", c.kind),
                message: "this condition appears twice in the rule".into(),
            });
        }
        selector.insert(c.kind.clone(), value);
    }
    rule.insert("match".into(), Value::Object(selector));
    match r.selects.as_str() {
        "resources" => {
            let mut sel = Map::new();
            if !r.resource_upstream.trim().is_empty() {
                sel.insert(
                    "upstream".into(),
                    Value::String(r.resource_upstream.trim().to_owned()),
                );
            }
            sel.insert(
                "uri".into(),
                Value::String(r.resource_uri.trim().to_owned()),
            );
            rule.insert("resource".into(), Value::Object(sel));
        }
        "prompts" => {
            rule.insert("prompt".into(), Value::String(r.prompt.trim().to_owned()));
            insert_client_requests(&mut rule, r);
        }
        _ => insert_client_requests(&mut rule, r),
    }
    rule.insert("mode".into(), Value::String(r.mode.clone()));
    rule.insert("reason".into(), Value::String(r.reason.clone()));
    if !r.redaction.is_empty() {
        rule.insert("redaction".into(), Value::String(r.redaction.clone()));
    }
    if !r.invocation.is_empty() {
        let inv = &r.invocation;
        let at = format!("{at}.invocation");
        let mut m = Map::new();
        let path = |k: &str| format!("{at}.{k}");
        if let Some(v) = json(&path("fixed_arguments"), &inv.fixed_arguments, true, errors) {
            m.insert("fixed_arguments".into(), v);
        }
        if let Some(v) = json(&path("allowed_values"), &inv.allowed_values, true, errors) {
            m.insert("allowed_values".into(), v);
        }
        if let Some(v) = json(&path("schema_overlay"), &inv.schema_overlay, true, errors) {
            m.insert("schema_overlay".into(), v);
        }
        if !inv.connection_mode.trim().is_empty() {
            m.insert(
                "connection_mode".into(),
                Value::String(inv.connection_mode.trim().to_owned()),
            );
        }
        if inv.requires_idempotency {
            m.insert("requires_idempotency".into(), Value::Bool(true));
        }
        for (key, text) in [
            ("max_duration_millis", &inv.max_duration_millis),
            ("max_result_bytes", &inv.max_result_bytes),
            ("expires_after_seconds", &inv.expires_after_seconds),
            ("max_cost_cents", &inv.max_cost_cents),
        ] {
            if let Some(v) = number(&path(key), text, false, errors) {
                m.insert(key.into(), v);
            }
        }
        if !inv.rate_bucket.trim().is_empty() || !inv.rate_per_minute.trim().is_empty() {
            let mut bucket = Map::new();
            bucket.insert(
                "name".into(),
                Value::String(inv.rate_bucket.trim().to_owned()),
            );
            if let Some(v) = number(
                &path("rate_bucket.per_minute"),
                &inv.rate_per_minute,
                true,
                errors,
            ) {
                bucket.insert("per_minute".into(), v);
                m.insert("rate_bucket".into(), Value::Object(bucket));
            }
        }
        rule.insert("invocation".into(), Value::Object(m));
    }
    Value::Object(rule)
}

/// Whether an error at `path` belongs to the field at `field` (itself or something inside it).
pub fn concerns(path: &str, field: &str) -> bool {
    path == field
        || path
            .strip_prefix(field)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// A line diff of two documents as pretty JSON: `(tag, line)` with tag `' '`, `'-'` or `'+'`.
pub fn diff_lines(before: Option<&Value>, after: &Value) -> Vec<(char, String)> {
    let before = before.map(pretty_sorted).unwrap_or_default();
    let after = pretty_sorted(after);
    similar::TextDiff::from_lines(&before, &after)
        .iter_all_changes()
        .map(|c| {
            let tag = match c.tag() {
                similar::ChangeTag::Equal => ' ',
                similar::ChangeTag::Delete => '-',
                similar::ChangeTag::Insert => '+',
            };
            (tag, c.value().trim_end_matches('\n').to_owned())
        })
        .collect()
}

/// Pretty JSON with object keys in a stable order (the stored document's order may differ from
/// the editor's).
pub fn pretty_sorted(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    let mut s = serde_json::to_string_pretty(&sort(v)).unwrap_or_default();
    s.push('\n');
    s
}

/// A tool or prompt rule's `client_requests`, in the order they were given (a stored policy
/// reads back unchanged); none when it asks nothing.
fn insert_client_requests(rule: &mut Map<String, Value>, r: &RuleDraft) {
    if !r.client_requests.is_empty() {
        let asked = r
            .client_requests
            .iter()
            .map(|c| Value::String(c.clone()))
            .collect();
        rule.insert("client_requests".into(), Value::Array(asked));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored() -> Value {
        json!({
            "name": "support",
            "default_mode": "deny",
            "rules": [
                {"id": "read-gh", "match": {"prefix": "mcp__github__", "risk_exactly": ["read", "pii"]},
                 "mode": "allow", "reason": "reads", "redaction": "tight",
                 "invocation": {"fixed_arguments": {"owner": "acme"}, "allowed_values": {"state": ["open"]},
                                "requires_idempotency": true, "max_result_bytes": 4096,
                                "rate_bucket": {"name": "gh", "per_minute": 60}}},
                {"id": "rest", "match": {}, "mode": "hide", "reason": ""}
            ],
            "redaction_profiles": {"tight": {"summary": "omit", "max_bytes": 100, "destinations": ["mcp"]}}
        })
    }

    #[test]
    fn a_stored_policy_round_trips_through_the_draft() {
        let draft = Draft::from_document("support", &stored());
        let (doc, errors) = draft.document();
        assert!(errors.is_empty(), "{errors:?}");
        let original = engine::validate::parse_policy(&stored()).unwrap();
        let again = engine::validate::parse_policy(&doc).unwrap();
        assert_eq!(original, again);
    }

    /// Issue 47: resource, prompt and client-request rules survive the editor. Without their
    /// fields in the draft, saving an untouched policy turned a resource rule into a tool rule
    /// with no conditions (every tool) and dropped what tools may ask of the client.
    #[test]
    fn resource_prompt_and_client_request_rules_round_trip_through_the_draft() {
        let stored = json!({
            "name": "items",
            "rules": [
                {"id": "docs", "match": {"environment": "prod"}, "mode": "allow",
                 "resource": {"upstream": "fs", "uri": "file:///docs/*"}, "redaction": "safe",
                 "invocation": {"max_result_bytes": 2048}},
                {"id": "any-docs", "resource": {"uri": "docs://readme"}, "mode": "deny"},
                {"id": "greet", "prompt": "mcp__fs__*", "mode": "hide", "match": {"actor": "bot"}},
                {"id": "ask", "match": {"name": "mcp__fs__ask"}, "mode": "allow",
                 "client_requests": ["roots", "sampling"]}
            ]
        });
        let draft = Draft::from_document("items", &stored);
        let selects: Vec<&str> = draft.rules.iter().map(|r| r.selects.as_str()).collect();
        assert_eq!(selects, ["resources", "resources", "prompts", "tools"]);
        let (doc, errors) = draft.document();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            engine::validate::parse_policy(&stored).unwrap(),
            engine::validate::parse_policy(&doc).unwrap()
        );
    }

    #[test]
    fn a_rule_switched_to_resources_selects_them_and_asks_nothing_of_the_client() {
        let mut draft = Draft::new("p");
        let key = draft.add_rule();
        let r = draft.rule_mut(key).unwrap();
        r.conditions.clear();
        r.client_requests = vec!["elicitation".into()];
        r.selects = "resources".into();
        r.resource_uri = " docs://* ".into();
        let (doc, _) = draft.document();
        assert_eq!(doc["rules"][0]["resource"], json!({"uri": "docs://*"}));
        assert!(doc["rules"][0].get("client_requests").is_none());
        let r = draft.rule_mut(key).unwrap();
        r.selects = "prompts".into();
        r.prompt = "mcp__fs__greet".into();
        let (doc, _) = draft.document();
        assert_eq!(doc["rules"][0]["prompt"], "mcp__fs__greet");
        assert!(doc["rules"][0].get("resource").is_none());
        // A prompt may ask the client while it is got.
        assert_eq!(doc["rules"][0]["client_requests"], json!(["elicitation"]));
        let r = draft.rule_mut(key).unwrap();
        r.selects = "tools".into();
        let (doc, _) = draft.document();
        assert_eq!(doc["rules"][0]["client_requests"], json!(["elicitation"]));
    }

    #[test]
    fn entries_that_are_not_json_or_numbers_are_reported_with_engine_paths_and_left_out() {
        let mut draft = Draft::from_document("support", &stored());
        let r = &mut draft.rules[0];
        r.invocation.max_result_bytes = "12x".into();
        r.invocation.schema_overlay = "{\"properties\": ".into();
        r.invocation.fixed_arguments = "[1]".into();
        let (doc, errors) = draft.document();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "rules[0].invocation.fixed_arguments",
                "rules[0].invocation.schema_overlay",
                "rules[0].invocation.max_result_bytes"
            ]
        );
        assert!(errors[1].message.starts_with("not valid JSON"));
        let inv = &doc["rules"][0]["invocation"];
        assert!(inv.get("max_result_bytes").is_none() && inv.get("schema_overlay").is_none());
        // The typed text is kept.
        assert_eq!(draft.rules[0].invocation.max_result_bytes, "12x");
    }

    #[test]
    fn rules_are_added_moved_and_removed() {
        let mut draft = Draft::new("p");
        let a = draft.add_rule();
        let b = draft.add_rule();
        assert_eq!(
            draft
                .rules
                .iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>(),
            ["rule-1", "rule-2"]
        );
        draft.move_rule(b, -1);
        assert_eq!(draft.rules[0].key, b);
        draft.move_rule(b, -1);
        assert_eq!(draft.rules[0].key, b);
        draft.remove_rule(b);
        assert_eq!(draft.rules.len(), 1);
        assert_eq!(draft.rules[0].key, a);
        assert_eq!(draft.add_rule(), draft.rules[1].key);
        assert_eq!(draft.rules[1].id, "rule-2");
    }

    #[test]
    fn field_paths_concern_their_field_and_what_is_inside_it() {
        assert!(concerns("rules[0].invocation", "rules[0].invocation"));
        assert!(concerns(
            "rules[0].invocation.max_result_bytes",
            "rules[0].invocation"
        ));
        assert!(!concerns("rules[10].mode", "rules[1]"));
        assert!(concerns("rules[1].mode", "rules[1]"));
    }

    #[test]
    fn the_diff_shows_what_changed() {
        let before = stored();
        let mut after = stored();
        after["default_mode"] = json!("hide");
        let diff = diff_lines(Some(&before), &after);
        assert!(diff.contains(&('-', "  \"default_mode\": \"deny\",".into())));
        assert!(diff.contains(&('+', "  \"default_mode\": \"hide\",".into())));
        assert!(diff.iter().filter(|(t, _)| *t != ' ').count() == 2);
        assert!(diff_lines(None, &after).iter().all(|(t, _)| *t == '+'));
    }
}
