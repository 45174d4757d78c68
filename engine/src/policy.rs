//! Tenant policies: ordered rules that map tools to exposure modes, redaction profiles, and
//! invocation policies (CONTRACT §11).
//!
//! # Precedence
//!
//! Rules are tried in the order written; the **first rule whose selector matches decides** the
//! tool's mode, reason, redaction profile and invocation policy. A selector with several keys
//! matches only when all of them hold. When no rule matches, `default_mode` decides (and it
//! defaults to `hide`: no rule never means allow). The same function, [`Policy::select`], is used
//! by the manifest builder, the server and the dashboard's live preview, so precedence cannot
//! differ between them.
//!
//! # Resources and prompts
//!
//! A rule with `resource: {"upstream"?, "uri"}` selects resources (and resource templates) and
//! nothing else; one with `prompt` selects prompts and nothing else; either may add context
//! keys (`match.environment`, `match.actor`). Their modes are `allow`, `hide` and `deny`; of
//! an invocation policy they take only `max_result_bytes`.
//! `default_mode` governs tools only: a resource or prompt no rule selects is hidden, so a
//! policy written before rules could name them exposes none ([`Policy::select_resource`],
//! [`Policy::select_prompt`], [`Policy::select_template`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::descriptor::{RISK_READ, ToolDescriptor};
use crate::uri;

/// Name of the built-in default policy.
pub const BUILTIN_SAFE_READ: &str = "builtin_safe_read";
/// Name of the built-in redaction profile: summaries of at most 8 KB.
pub const SAFE_PROFILE: &str = "safe";
/// Byte cap of the built-in `safe` profile.
pub const SAFE_MAX_BYTES: u64 = 8 * 1024;

/// How a tool is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Listed; a valid call executes.
    Allow,
    /// Not listed; a call is `not_callable`, exactly like an unknown tool.
    Hide,
    /// Listed but never callable (`policy_denied`).
    Deny,
    /// Validated, bound and journaled, not executed (or run with the dry-run argument).
    DryRunOnly,
    /// Parked until an approver releases exactly that binding.
    ApprovalRequired,
    /// The same actor must repeat the identical call with a confirmation token.
    ConfirmationRequired,
    /// Accepted at once, executed by a worker, result fetched later.
    AsyncJobOnly,
    /// Recorded as a staged change, executed when an approver applies it.
    StagedChange,
}

impl Mode {
    /// Every mode, in documentation order.
    pub const ALL: [Mode; 8] = [
        Mode::Allow,
        Mode::Hide,
        Mode::Deny,
        Mode::DryRunOnly,
        Mode::ApprovalRequired,
        Mode::ConfirmationRequired,
        Mode::AsyncJobOnly,
        Mode::StagedChange,
    ];

    /// The snake_case name used on the wire (`dry_run_only`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Allow => "allow",
            Mode::Hide => "hide",
            Mode::Deny => "deny",
            Mode::DryRunOnly => "dry_run_only",
            Mode::ApprovalRequired => "approval_required",
            Mode::ConfirmationRequired => "confirmation_required",
            Mode::AsyncJobOnly => "async_job_only",
            Mode::StagedChange => "staged_change",
        }
    }

    /// Whether `tools/list` shows the tool.
    pub fn is_listed(self) -> bool {
        self != Mode::Hide
    }

    /// How much a mode holds a call back, for comparing what a client's hint may change:
    /// `allow` 0; `async_job_only` 1 (runs, later); `confirmation_required` 2 (the same actor
    /// confirms); `dry_run_only` 3 (never for real); `approval_required`, `staged_change` 4 (a
    /// person releases it); `deny`, `hide` 5 (never runs).
    pub fn strictness(self) -> u8 {
        match self {
            Mode::Allow => 0,
            Mode::AsyncJobOnly => 1,
            Mode::ConfirmationRequired => 2,
            Mode::DryRunOnly => 3,
            Mode::ApprovalRequired | Mode::StagedChange => 4,
            Mode::Deny | Mode::Hide => 5,
        }
    }
}

/// Which tools (and in which context) a rule applies to. Absent keys match anything; present
/// keys must all hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Exact canonical tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Canonical name prefix (`mcp__github__`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The descriptor's family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// A risk label that is among the tool's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<String>,
    /// The tool's risk labels are exactly this set (order and duplicates ignored). Lets a
    /// policy say "read and nothing else", as `builtin_safe_read` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk_exactly: Option<Vec<String>>,
    /// The session's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The session's preset (a hint the client chooses: write-time validation lets a rule
    /// matching it only narrow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// The session's entity (a hint the client chooses, like `preset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// The session's actor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}

/// What a session is about, as far as selectors care.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExposureContext {
    /// Environment (`default` unless given).
    pub environment: String,
    /// The authenticated actor.
    pub actor: String,
    /// Optional preset hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Optional entity hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
}

impl Selector {
    /// Whether the selector holds for `tool` in `ctx`.
    pub fn matches(&self, tool: &ToolDescriptor, ctx: &ExposureContext) -> bool {
        self.matches_with(tool, &tool.risk_labels(), ctx)
    }

    /// [`Selector::matches`] with the tool's risk labels computed once by the caller (a first
    /// match over many rules reads them once, not once per rule).
    fn matches_with(&self, tool: &ToolDescriptor, labels: &[&str], ctx: &ExposureContext) -> bool {
        self.name.as_ref().is_none_or(|n| *n == tool.name)
            && self
                .prefix
                .as_ref()
                .is_none_or(|p| tool.name.starts_with(p.as_str()))
            && self
                .family
                .as_ref()
                .is_none_or(|f| tool.family.as_ref() == Some(f))
            && self
                .risk
                .as_ref()
                .is_none_or(|r| labels.contains(&r.as_str()))
            && self.risk_exactly.as_ref().is_none_or(|want| {
                want.iter().all(|w| labels.contains(&w.as_str()))
                    && labels.iter().all(|l| want.iter().any(|w| w == l))
            })
            && self
                .environment
                .as_ref()
                .is_none_or(|e| *e == ctx.environment)
            && self
                .preset
                .as_ref()
                .is_none_or(|p| ctx.preset.as_ref() == Some(p))
            && self
                .entity
                .as_ref()
                .is_none_or(|e| ctx.entity.as_ref() == Some(e))
            && self.actor.as_ref().is_none_or(|a| *a == ctx.actor)
    }

    /// Whether the selector's context keys (`environment`, `actor`) hold in `ctx`: all a
    /// resource or prompt rule may add to what it selects.
    pub fn matches_context(&self, ctx: &ExposureContext) -> bool {
        self.environment
            .as_ref()
            .is_none_or(|e| *e == ctx.environment)
            && self.actor.as_ref().is_none_or(|a| *a == ctx.actor)
    }

    /// Whether the selector names anything about a tool (name, prefix, family, risk).
    pub fn names_a_tool(&self) -> bool {
        self.name.is_some()
            || self.prefix.is_some()
            || self.family.is_some()
            || self.risk.is_some()
            || self.risk_exactly.is_some()
    }

    /// Whether the selector needs a hint the client chooses (`preset`, `entity`).
    pub fn has_hint(&self) -> bool {
        self.preset.is_some() || self.entity.is_some()
    }
}

/// How tool output is reduced before it reaches a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummaryMode {
    /// Text is cut to `max_bytes` (on a character boundary) with a note of what was cut.
    Truncate,
    /// Content is withheld; only its size is reported.
    Omit,
}

/// Where tool output may go (CONTRACT §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destination {
    /// Tool result content a model reads.
    Llm,
    /// The MCP response.
    Mcp,
    /// Hosted agent transcripts.
    Transcript,
    /// Server logs and journal disclosures.
    Logs,
}

impl Destination {
    /// The name on the wire (`llm`, `mcp`, `transcript`, `logs`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Llm => "llm",
            Self::Mcp => "mcp",
            Self::Transcript => "transcript",
            Self::Logs => "logs",
        }
    }
}

/// A redaction profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionProfile {
    /// How output is reduced.
    pub summary: SummaryMode,
    /// Byte cap of what passes.
    pub max_bytes: i64,
    /// Destinations output may reach; others get nothing.
    pub destinations: Vec<Destination>,
}

impl RedactionProfile {
    /// The built-in `safe` profile: truncate to 8 KB, for models, MCP clients and hosted
    /// agents' transcripts.
    pub fn safe() -> Self {
        Self {
            summary: SummaryMode::Truncate,
            max_bytes: SAFE_MAX_BYTES as i64,
            destinations: vec![Destination::Llm, Destination::Mcp, Destination::Transcript],
        }
    }
}

/// A rate bucket shared by every server process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateBucket {
    /// Bucket name; calls of every tool naming it share it.
    pub name: String,
    /// Calls allowed per minute.
    pub per_minute: i64,
}

/// How calls of a tool are narrowed and limited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationPolicy {
    /// Arguments the server sets; removed from the advertised schema, merged into every call.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub fixed_arguments: Map<String, Value>,
    /// Top-level argument → the only values allowed (advertised as an `enum`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allowed_values: BTreeMap<String, Vec<Value>>,
    /// A schema fragment merged into the advertised schema; it may only narrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_overlay: Option<Value>,
    /// Pinned `connection_mode`, applied as a server-fixed argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_mode: Option<String>,
    /// Adds a required, non-empty `idempotency_key` argument.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_idempotency: bool,
    /// Execution deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_millis: Option<i64>,
    /// Larger output is rejected before it reaches the journal, model or client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<i64>,
    /// Shortens the manifest lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after_seconds: Option<i64>,
    /// Caps the price of one call (enforced by the spend gate at execution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_cents: Option<i64>,
    /// Shared rate limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bucket: Option<RateBucket>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Identifier, unique in the policy (recorded in disclosures, never shown to callers).
    pub id: String,
    /// Which tools and contexts.
    #[serde(rename = "match", default)]
    pub selector: Selector,
    /// What happens to them.
    pub mode: Mode,
    /// Why (for admins; never shown to callers).
    #[serde(default)]
    pub reason: String,
    /// Name of a redaction profile (`safe` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction: Option<String>,
    /// Narrowing and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<InvocationPolicy>,
    /// Selects resources instead of tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceSelector>,
    /// Selects prompts instead of tools: a canonical name (`mcp__<server>__<prompt>`), exact
    /// or a prefix ending `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// What the selected tools may ask of the calling client while they run, or the selected
    /// prompts while they are got (tool and prompt rules); none when absent (least privilege).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_requests: Vec<ClientRequest>,
}

/// A request an upstream may send the client while one of its tools runs, relayed by the
/// gateway only where the deciding rule lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientRequest {
    /// `sampling/createMessage`: the client's model answers.
    Sampling,
    /// `elicitation/create` in form mode: the person fills in a form.
    Elicitation,
    /// `elicitation/create` in URL mode: the person is sent to a page.
    ElicitationUrl,
    /// `roots/list`: the client's roots.
    Roots,
}

impl ClientRequest {
    /// Every kind, as policies name them.
    pub const ALL: [ClientRequest; 4] = [
        ClientRequest::Sampling,
        ClientRequest::Elicitation,
        ClientRequest::ElicitationUrl,
        ClientRequest::Roots,
    ];

    /// The name in policies and receipts.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClientRequest::Sampling => "sampling",
            ClientRequest::Elicitation => "elicitation",
            ClientRequest::ElicitationUrl => "elicitation_url",
            ClientRequest::Roots => "roots",
        }
    }
}

impl Rule {
    /// Whether the rule selects tools (it names no resource and no prompt).
    pub fn selects_tools(&self) -> bool {
        self.resource.is_none() && self.prompt.is_none()
    }
}

/// Which resources a rule selects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSelector {
    /// The upstream's registered name; absent: any upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// A normalised URI ([`uri::normalize`]), exact, or a prefix ending `*`.
    pub uri: String,
}

impl ResourceSelector {
    /// Whether it selects `uri` (normalised) of `upstream`.
    fn matches(&self, upstream: &str, uri: &str) -> bool {
        self.upstream.as_deref().is_none_or(|u| u == upstream) && pattern_matches(&self.uri, uri)
    }
}

/// `pattern`, exact or a prefix ending `*`, against `text`.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => text.starts_with(prefix),
        None => pattern == text,
    }
}

fn default_mode() -> Mode {
    Mode::Hide
}

/// A tenant policy (one immutable version of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Policy id (`[a-z0-9_-]{1,64}`).
    pub name: String,
    /// Mode of tools no rule matches; `hide` when absent.
    #[serde(default = "default_mode")]
    pub default_mode: Mode,
    /// Ordered rules; the first match decides.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Named redaction profiles; `safe` exists even when not listed.
    #[serde(default)]
    pub redaction_profiles: BTreeMap<String, RedactionProfile>,
}

/// What the policy says about one tool in one context.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection<'p> {
    /// The mode.
    pub mode: Mode,
    /// The deciding rule, or `None` when `default_mode` decided.
    pub rule: Option<&'p Rule>,
    /// The redaction profile that applies.
    pub redaction: RedactionProfile,
}

impl Policy {
    /// `builtin_safe_read`: allows tools whose risk labels are exactly `["read"]`, hides the rest.
    pub fn builtin_safe_read() -> Self {
        Self {
            name: BUILTIN_SAFE_READ.into(),
            default_mode: Mode::Hide,
            rules: vec![Rule {
                id: "read-only".into(),
                selector: Selector {
                    risk_exactly: Some(vec![RISK_READ.into()]),
                    ..Selector::default()
                },
                mode: Mode::Allow,
                reason: "read-only tools are safe to expose".into(),
                redaction: Some(SAFE_PROFILE.into()),
                invocation: None,
                resource: None,
                prompt: None,
                client_requests: Vec::new(),
            }],
            redaction_profiles: BTreeMap::from([(
                SAFE_PROFILE.to_owned(),
                RedactionProfile::safe(),
            )]),
        }
    }

    /// The redaction profile called `name` (`safe` is always defined).
    pub fn profile(&self, name: &str) -> Option<RedactionProfile> {
        self.redaction_profiles
            .get(name)
            .cloned()
            .or_else(|| (name == SAFE_PROFILE).then(RedactionProfile::safe))
    }

    /// Applies the precedence documented on this module: first matching rule, else
    /// `default_mode`. A rule naming a profile that does not exist (only possible for a policy
    /// that skipped validation) fails closed to `hide`.
    pub fn select(&self, tool: &ToolDescriptor, ctx: &ExposureContext) -> Selection<'_> {
        let labels = tool.risk_labels();
        let rule = self
            .rules
            .iter()
            .find(|r| r.selects_tools() && r.selector.matches_with(tool, &labels, ctx));
        match rule {
            Some(_) => self.selection_of(rule),
            None => Selection {
                mode: self.default_mode,
                ..self.selection_of(None)
            },
        }
    }

    /// The selection of `rule` (its profile; `hide` when the profile does not exist), or
    /// `hide` by no rule (tools: `default_mode`, [`Self::select`]).
    fn selection_of<'p>(&'p self, rule: Option<&'p Rule>) -> Selection<'p> {
        let Some(rule) = rule else {
            return Selection {
                mode: Mode::Hide,
                rule: None,
                redaction: RedactionProfile::safe(),
            };
        };
        let profile_name = rule.redaction.as_deref().unwrap_or(SAFE_PROFILE);
        match self.profile(profile_name) {
            Some(redaction) => Selection {
                mode: rule.mode,
                rule: Some(rule),
                redaction,
            },
            None => Selection {
                mode: Mode::Hide,
                rule: Some(rule),
                redaction: RedactionProfile::safe(),
            },
        }
    }

    /// What the policy says about resource `uri` (normalised) of `upstream` in `ctx`: the first
    /// resource rule that selects it, else `hide` (never `default_mode`).
    pub fn select_resource(
        &self,
        upstream: &str,
        uri: &str,
        ctx: &ExposureContext,
    ) -> Selection<'_> {
        let rule = self.rules.iter().find(|r| {
            r.resource
                .as_ref()
                .is_some_and(|sel| sel.matches(upstream, uri))
                && r.selector.matches_context(ctx)
        });
        self.selection_of(rule)
    }

    /// What the policy says about prompt `name` (canonical) in `ctx`: the first prompt rule
    /// that selects it, else `hide`.
    pub fn select_prompt(&self, name: &str, ctx: &ExposureContext) -> Selection<'_> {
        let rule = self.rules.iter().find(|r| {
            r.prompt
                .as_deref()
                .is_some_and(|p| pattern_matches(p, name))
                && r.selector.matches_context(ctx)
        });
        self.selection_of(rule)
    }

    /// What the policy says about resource template `template` of `upstream` in `ctx`: a
    /// template is `allow`ed only when every URI it can expand to is ([`Self::select_resource`]
    /// allows each), so a principal reads exactly what it can list: the first resource rule
    /// that could select one of its expansions must select all of them (a prefix its literal
    /// start begins with) and allow; anything else hides it.
    pub fn select_template(
        &self,
        upstream: &str,
        template: &str,
        ctx: &ExposureContext,
    ) -> Selection<'_> {
        let start = uri::template_prefix(template);
        let first = self.rules.iter().find(|r| {
            let Some(sel) = &r.resource else {
                return false;
            };
            if !r.selector.matches_context(ctx)
                || sel.upstream.as_deref().is_some_and(|u| u != upstream)
            {
                return false;
            }
            // Could it select some expansion?
            match sel.uri.strip_suffix('*') {
                Some(prefix) => start.starts_with(prefix) || prefix.starts_with(start),
                None => uri::template_matches(template, &sel.uri),
            }
        });
        let covers_all = first.is_some_and(|r| {
            r.resource
                .as_ref()
                .and_then(|sel| sel.uri.strip_suffix('*'))
                .is_some_and(|prefix| start.starts_with(prefix))
        });
        match first {
            Some(rule) if covers_all => self.selection_of(Some(rule)),
            // A rule that selects only some expansions, or none at all: hidden.
            Some(rule) => Selection {
                mode: if rule.mode == Mode::Allow {
                    Mode::Hide
                } else {
                    rule.mode
                },
                ..self.selection_of(Some(rule))
            },
            None => self.selection_of(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::ToolSource;
    use serde_json::json;

    pub(crate) fn tool(name: &str, risk: &[&str]) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            version: "1".into(),
            title: None,
            description: None,
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            family: None,
            risk: risk.iter().map(|s| (*s).to_owned()).collect(),
            required_scope: None,
            source: ToolSource::Builtin,
            dry_run_argument: None,
            price_cents: None,
        }
    }

    fn ctx() -> ExposureContext {
        ExposureContext {
            environment: "default".into(),
            actor: "bot".into(),
            preset: None,
            entity: None,
        }
    }

    /// Seed: "The default policy, builtin_safe_read, is deliberately narrow: it exposes only
    /// read, non-mutating tools and hides everything else. Write, destructive, and unknown tools
    /// require an explicit policy that opts them in."
    #[test]
    fn builtin_safe_read_exposes_only_pure_read_tools() {
        let p = Policy::builtin_safe_read();
        assert_eq!(p.select(&tool("r", &["read"]), &ctx()).mode, Mode::Allow);
        for risk in [
            &["write"][..],
            &["destructive"],
            &["unknown"],
            &[],
            &["read", "write"],
            &["read", "pii"],
        ] {
            assert_eq!(
                p.select(&tool("t", risk), &ctx()).mode,
                Mode::Hide,
                "{risk:?}"
            );
        }
    }

    /// Seed: "The built-in safe profile summarizes to at most 8 KB."
    #[test]
    fn the_safe_profile_is_8_kb() {
        let p = Policy::builtin_safe_read();
        let s = p.select(&tool("r", &["read"]), &ctx());
        assert_eq!(s.redaction.max_bytes, 8192);
        assert_eq!(s.redaction.summary, SummaryMode::Truncate);
    }

    /// Seed: "Rules — selectors that match tools by name, prefix, family, or risk label, each
    /// assigning an exposure mode … and a reason." The first matching rule decides.
    #[test]
    fn first_matching_rule_decides_and_selectors_combine() {
        let p: Policy = serde_json::from_value(json!({
            "name": "p",
            "rules": [
                {"id": "deny-delete", "match": {"prefix": "mcp__gh__", "risk": "destructive"}, "mode": "deny", "reason": "no"},
                {"id": "gh", "match": {"prefix": "mcp__gh__"}, "mode": "approval_required"},
                {"id": "fam", "match": {"family": "billing"}, "mode": "dry_run_only"},
                {"id": "prod", "match": {"name": "deploy", "environment": "prod"}, "mode": "staged_change"},
                {"id": "me", "match": {"actor": "bot", "preset": "triage"}, "mode": "allow"}
            ]
        }))
        .unwrap();
        let c = ctx();
        assert_eq!(
            p.select(&tool("mcp__gh__delete", &["write", "destructive"]), &c)
                .mode,
            Mode::Deny
        );
        assert_eq!(
            p.select(&tool("mcp__gh__delete", &["write", "destructive"]), &c)
                .rule
                .unwrap()
                .id,
            "deny-delete"
        );
        assert_eq!(
            p.select(&tool("mcp__gh__issue", &["write"]), &c).mode,
            Mode::ApprovalRequired
        );
        let mut billing = tool("charge", &["write"]);
        billing.family = Some("billing".into());
        assert_eq!(p.select(&billing, &c).mode, Mode::DryRunOnly);
        assert_eq!(p.select(&tool("deploy", &["write"]), &c).mode, Mode::Hide);
        let prod = ExposureContext {
            environment: "prod".into(),
            ..ctx()
        };
        assert_eq!(
            p.select(&tool("deploy", &["write"]), &prod).mode,
            Mode::StagedChange
        );
        let triage = ExposureContext {
            preset: Some("triage".into()),
            entity: None,
            ..ctx()
        };
        assert_eq!(p.select(&tool("x", &["write"]), &triage).mode, Mode::Allow);
        let other = ExposureContext {
            actor: "someone".into(),
            preset: Some("triage".into()),
            entity: None,
            ..ctx()
        };
        assert_eq!(p.select(&tool("x", &["write"]), &other).mode, Mode::Hide);
    }

    /// Style: never "no rules means allow".
    #[test]
    fn no_rules_means_hide() {
        let p: Policy = serde_json::from_value(json!({"name": "empty"})).unwrap();
        assert_eq!(p.select(&tool("r", &["read"]), &ctx()).mode, Mode::Hide);
        assert!(p.select(&tool("r", &["read"]), &ctx()).rule.is_none());
    }

    #[test]
    fn a_missing_profile_fails_closed() {
        let p: Policy = serde_json::from_value(json!({
            "name": "p", "default_mode": "allow",
            "rules": [{"id": "r", "match": {}, "mode": "allow", "redaction": "nope"}]
        }))
        .unwrap();
        assert_eq!(p.select(&tool("x", &["read"]), &ctx()).mode, Mode::Hide);
    }

    #[test]
    fn modes_use_snake_case_names() {
        for m in Mode::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), json!(m.as_str()));
        }
    }

    fn policy(rules: serde_json::Value, default_mode: &str) -> Policy {
        serde_json::from_value(json!({"name": "p", "default_mode": default_mode, "rules": rules}))
            .unwrap()
    }

    /// Issue 47: `default_mode` governs tools only; resources and prompts need explicit rules,
    /// and a resource or prompt rule selects no tool.
    #[test]
    fn resources_and_prompts_need_rules_of_their_own() {
        let open = policy(json!([]), "allow");
        assert_eq!(open.select(&tool("t", &[]), &ctx()).mode, Mode::Allow);
        assert_eq!(
            open.select_resource("fs", "file:///a", &ctx()).mode,
            Mode::Hide
        );
        assert_eq!(open.select_prompt("mcp__fs__p", &ctx()).mode, Mode::Hide);
        assert_eq!(
            open.select_template("fs", "file:///{+p}", &ctx()).mode,
            Mode::Hide
        );
        let items = policy(
            json!([{"id": "all-files", "resource": {"uri": "*"}, "mode": "allow"},
                   {"id": "all-prompts", "prompt": "*", "mode": "allow"}]),
            "hide",
        );
        assert_eq!(items.select(&tool("t", &["read"]), &ctx()).mode, Mode::Hide);
        assert_eq!(
            items.select_resource("fs", "file:///a", &ctx()).mode,
            Mode::Allow
        );
        assert_eq!(items.select_prompt("mcp__fs__p", &ctx()).mode, Mode::Allow);
    }

    #[test]
    fn the_first_resource_rule_that_selects_a_uri_decides() {
        let p = policy(
            json!([
                {"id": "secret", "resource": {"uri": "test://docs/secret/*"}, "mode": "deny"},
                {"id": "one", "resource": {"upstream": "a", "uri": "test://docs/readme"}, "mode": "hide"},
                {"id": "docs", "resource": {"uri": "test://docs/*"}, "mode": "allow"},
                {"id": "ops", "resource": {"uri": "test://ops/*"}, "mode": "allow",
                 "match": {"actor": "ops"}},
                {"id": "greet", "prompt": "mcp__a__greet", "mode": "allow"},
                {"id": "a-prompts", "prompt": "mcp__a__*", "mode": "deny"}
            ]),
            "allow",
        );
        let c = ctx();
        let mode = |up: &str, uri: &str| p.select_resource(up, uri, &c).mode;
        assert_eq!(mode("a", "test://docs/secret/x"), Mode::Deny);
        assert_eq!(mode("a", "test://docs/readme"), Mode::Hide);
        assert_eq!(mode("b", "test://docs/readme"), Mode::Allow);
        assert_eq!(mode("a", "test://docs/guide"), Mode::Allow);
        assert_eq!(mode("a", "test://docsx"), Mode::Hide);
        assert_eq!(mode("a", "test://ops/x"), Mode::Hide);
        let ops = ExposureContext {
            actor: "ops".into(),
            ..ctx()
        };
        assert_eq!(
            p.select_resource("a", "test://ops/x", &ops).mode,
            Mode::Allow
        );
        assert_eq!(
            p.select_resource("a", "test://ops/x", &ops)
                .rule
                .unwrap()
                .id,
            "ops"
        );
        assert_eq!(p.select_prompt("mcp__a__greet", &c).mode, Mode::Allow);
        assert_eq!(p.select_prompt("mcp__a__other", &c).mode, Mode::Deny);
        assert_eq!(p.select_prompt("mcp__b__greet", &c).mode, Mode::Hide);
    }

    /// A template is listed only when every URI it expands to is readable.
    #[test]
    fn a_template_is_allowed_only_when_all_its_expansions_are() {
        let p = policy(
            json!([
                {"id": "secret", "resource": {"uri": "test://t/secret*"}, "mode": "deny"},
                {"id": "one", "resource": {"uri": "test://t/x/1"}, "mode": "allow"},
                {"id": "t", "resource": {"uri": "test://t/*"}, "mode": "allow"},
                {"id": "b-only", "resource": {"upstream": "b", "uri": "test://u/*"}, "mode": "allow"}
            ]),
            "hide",
        );
        let c = ctx();
        let mode = |up: &str, t: &str| p.select_template(up, t, &c).mode;
        // An earlier rule may select some expansions: not every one is allowed.
        assert_eq!(mode("a", "test://t/{id}"), Mode::Deny);
        assert_eq!(mode("a", "test://t/x/{id}"), Mode::Hide);
        assert_eq!(mode("a", "test://t/y/{id}"), Mode::Allow);
        assert_eq!(mode("a", "test://u/{id}"), Mode::Hide);
        assert_eq!(mode("b", "test://u/{id}"), Mode::Allow);
        assert_eq!(mode("a", "test://v/{id}"), Mode::Hide);
    }

    proptest::proptest! {
        /// Listing a template never shows a URI that cannot be read.
        #[test]
        fn an_allowed_template_expands_only_to_allowed_uris(
            rules in proptest::collection::vec(
                (0usize..3, "[ab]{0,3}", proptest::bool::ANY, 0usize..3), 0..6),
            template in (0usize..3, "[ab]{0,2}"),
            values in proptest::collection::vec("[ab]{1,3}", 1..6),
        ) {
            let modes = ["allow", "hide", "deny"];
            let upstreams = [None, Some("a"), Some("b")];
            let rules: Vec<serde_json::Value> = rules
                .iter()
                .enumerate()
                .map(|(i, (up, text, prefix, m))| {
                    let uri = format!("test://h/{text}{}", if *prefix { "*" } else { "" });
                    let mut sel = json!({"uri": uri});
                    if let Some(u) = upstreams[*up] {
                        sel["upstream"] = json!(u);
                    }
                    json!({"id": format!("r{i}"), "resource": sel, "mode": modes[*m]})
                })
                .collect();
            let p = policy(serde_json::Value::Array(rules), "allow");
            let up = ["a", "b", "c"][template.0];
            let t = format!("test://h/{}{{id}}", template.1);
            if p.select_template(up, &t, &ctx()).mode == Mode::Allow {
                for v in &values {
                    let uri = format!("test://h/{}{v}", template.1);
                    proptest::prop_assert!(crate::uri::template_matches(&t, &uri));
                    proptest::prop_assert_eq!(p.select_resource(up, &uri, &ctx()).mode, Mode::Allow, "{} under {:?}", uri, p.rules);
                }
            }
        }
    }
}
