//! Exposure manifests: what one session may see and call, built from the catalog, the policy
//! and the session's context. Deterministic: the same inputs give the same manifest, tools in
//! name order, so the server and the dashboard's preview (wasm) agree byte for byte.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::CatalogTool;
use crate::descriptor::{ToolDescriptor, ToolSource};
use crate::fork::ToolIdentity;
use crate::narrow::{self, Narrowing, ValidatorCache};
use crate::policy::{ExposureContext, InvocationPolicy, Mode, Policy, RedactionProfile};
use crate::validate::MAX_LEASE_SECONDS;

/// A tool as `tools/list` advertises it: the object `schemaHash` is computed over
/// (CONTRACT §3; `_meta` excluded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdvertisedTool {
    /// Canonical name.
    pub name: String,
    /// Title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The narrowed input schema.
    pub input_schema: Value,
    /// Output schema as the tool declares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Annotations as the tool declares them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl AdvertisedTool {
    /// `schemaHash`: `sha256:` + SHA-256 of the JCS bytes of this object.
    pub fn schema_hash(&self) -> String {
        advertised_schema_hash(
            &self.name,
            self.title.as_deref(),
            self.description.as_deref(),
            &self.input_schema,
            self.output_schema.as_ref(),
            self.annotations.as_ref(),
        )
    }
}

pub use crate::canonical::advertised_schema_hash;

/// One tool of a manifest, listed or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Canonical name.
    pub name: String,
    /// The version calls must echo.
    pub tool_version: String,
    /// Exposure mode (`hide` for tools not listed).
    pub mode: Mode,
    /// The deciding rule (`None`: `default_mode`). Disclosed to admins only.
    pub rule_id: Option<String>,
    /// The rule's reason text. Disclosed to admins only.
    pub rule_reason: String,
    /// What `tools/list` shows.
    pub advertised: AdvertisedTool,
    /// Hash of [`Self::advertised`].
    pub schema_hash: String,
    /// Fingerprint of the live definition at grant time (drift detection).
    pub definition_hash: String,
    /// The redaction profile for the tool's output.
    pub redaction: RedactionProfile,
    /// The rule's invocation policy.
    pub invocation: Option<InvocationPolicy>,
    /// What the tool may ask of the calling client while it runs (the rule's
    /// `client_requests`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_requests: Vec<crate::policy::ClientRequest>,
    /// What the server adds to each call: fixed arguments, a policy-added idempotency key
    /// (`None` when narrowing failed; the tool is hidden). The narrowed schema is
    /// [`AdvertisedTool::input_schema`].
    pub narrowed: Option<Narrowing>,
    /// Why the policy could not be applied to this tool (then it is hidden: fail closed).
    pub error: Option<String>,
    /// Scope a caller must hold.
    pub required_scope: Option<String>,
    /// Price of one call, for the spend gate.
    pub price_cents: Option<u64>,
    /// Built-in or MCP, with the raw identity fork allowlists match.
    pub source: ToolSource,
    /// Where calls of an MCP tool run, pinned when the manifest is granted (the server fills
    /// it in; the engine knows no upstreams). A call whose upstream no longer matches is refused
    /// with `target_drift`, never retargeted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<ExecutionTarget>,
}

/// The execution target of an MCP tool: which registration of which endpoint, with which
/// credentials, over which connection, for which environment (seed: target pinning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionTarget {
    /// `ups_…` id of the upstream registration (a new registration is a new id).
    pub upstream_id: String,
    /// Fingerprint of the normalized endpoint (URL, or command line) of that registration.
    pub endpoint_fingerprint: String,
    /// The registration's credential version (headers or environment replaced in place count it
    /// up). Targets pinned before versions existed read as 0, the version of a registration
    /// whose credentials were never replaced.
    #[serde(default)]
    pub credential_version: i64,
    /// How the gateway connects to it: `stdio` or `streamable_http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The environment of the session it was pinned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
}

impl ExecutionTarget {
    /// Whether a call pinned to `self` may run at `now`, the target the tool has at execution:
    /// the same registration, endpoint, credentials and connection. (The environment is the
    /// session's own and cannot differ.)
    pub fn still_is(&self, now: &ExecutionTarget) -> bool {
        self.upstream_id == now.upstream_id
            && self.endpoint_fingerprint == now.endpoint_fingerprint
            && self.credential_version == now.credential_version
            && (self.transport.is_none() || self.transport == now.transport)
    }
}

impl ManifestEntry {
    /// The identity fork allowlists match against.
    pub fn identity(&self) -> ToolIdentity<'_> {
        self.source.identity(&self.name)
    }
}

/// A session's exposure manifest (before ids, lease times and signature, which the server adds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Policy id.
    pub policy_id: String,
    /// Policy version.
    pub policy_version: u64,
    /// The context it was built for.
    pub context: ExposureContext,
    /// Every catalog tool, in name order.
    pub tools: Vec<ManifestEntry>,
    /// Lease length: 15 minutes, shortened by listed tools' `expires_after_seconds`.
    pub lease_seconds: u64,
    /// Granted with the upstreams' own names (`/mcp` with `tool_names: "upstream"`,
    /// [`Manifest::use_upstream_names`]): each name listed instead of a canonical one, with the
    /// canonical name it stands for. `None`: every tool is listed under its canonical name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_names: Option<std::collections::BTreeMap<String, String>>,
}

impl Manifest {
    /// Lists MCP tools under the names their upstreams give them, where that is unambiguous:
    /// a name unique among the listed tools, not starting `mcp__`, and not the canonical name
    /// of any tool of the catalog (built-ins included) keeps no prefix; any other keeps its
    /// canonical name. A renamed tool's `schemaHash` covers the name it is listed under.
    /// Decided here, at grant time, and pinned in the manifest: calls name the tool either
    /// way ([`Manifest::entry`]); receipts, policies and fork allowlists keep the canonical
    /// identity.
    pub fn use_upstream_names(&mut self) {
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for t in self.listed() {
            if let ToolSource::Mcp { tool, .. } = &t.source {
                *seen.entry(tool.as_str()).or_default() += 1;
            }
        }
        let canonical: std::collections::HashSet<&str> =
            self.tools.iter().map(|t| t.name.as_str()).collect();
        let renamed: Vec<(usize, String)> = self
            .tools
            .iter()
            .enumerate()
            .filter(|(_, t)| t.mode.is_listed())
            .filter_map(|(i, t)| match &t.source {
                ToolSource::Mcp { tool, .. }
                    if seen.get(tool.as_str()) == Some(&1)
                        && !tool.starts_with("mcp__")
                        && !canonical.contains(tool.as_str()) =>
                {
                    Some((i, tool.clone()))
                }
                _ => None,
            })
            .collect();
        let mut names = std::collections::BTreeMap::new();
        for (i, name) in renamed {
            if let Some(t) = self.tools.get_mut(i) {
                t.advertised.name = name.clone();
                t.schema_hash = t.advertised.schema_hash();
                names.insert(name, t.name.clone());
            }
        }
        self.upstream_names = Some(names);
    }

    /// The tools `tools/list` shows (mode other than `hide`).
    pub fn listed(&self) -> impl Iterator<Item = &ManifestEntry> {
        self.tools.iter().filter(|t| t.mode.is_listed())
    }

    /// The entry of `name`, listed or not: its canonical name, or the upstream's own name it
    /// is listed under ([`Manifest::use_upstream_names`]).
    pub fn entry(&self, name: &str) -> Option<&ManifestEntry> {
        let find = |name: &str| {
            self.tools
                .binary_search_by(|t| t.name.as_str().cmp(name))
                .ok()
                .and_then(|i| self.tools.get(i))
        };
        find(name).or_else(|| {
            let canonical = self.upstream_names.as_ref()?.get(name)?;
            find(canonical)
        })
    }
}

/// Builds the manifest of `catalog` under `policy` for `ctx`.
///
/// Every listed tool's advertised schema must compile: its validator is taken from (or added
/// to) `validators`, so calls find it ready, and a schema that does not compile hides the tool
/// with the reason in [`ManifestEntry::error`] (fail closed).
///
/// The catalog is taken by value: its schemas become the manifest's, moved rather than copied.
/// Give [`CatalogTool`]s with stored fingerprints; plain descriptors are fingerprinted here.
pub fn build<T: Into<CatalogTool>>(
    catalog: impl IntoIterator<Item = T>,
    policy: &Policy,
    policy_version: u64,
    ctx: &ExposureContext,
    validators: &ValidatorCache,
) -> Manifest {
    let mut tools: Vec<ManifestEntry> = catalog
        .into_iter()
        .map(|tool| entry(tool.into(), policy, ctx, validators))
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    let lease_seconds = tools
        .iter()
        .filter(|t| t.mode.is_listed())
        .filter_map(|t| t.invocation.as_ref()?.expires_after_seconds)
        .filter(|s| *s > 0)
        .fold(MAX_LEASE_SECONDS, i64::min);
    Manifest {
        policy_id: policy.name.clone(),
        policy_version,
        context: ctx.clone(),
        tools,
        lease_seconds: u64::try_from(lease_seconds).unwrap_or(0),
        upstream_names: None,
    }
}

fn entry(
    CatalogTool { tool, fingerprints }: CatalogTool,
    policy: &Policy,
    ctx: &ExposureContext,
    validators: &ValidatorCache,
) -> ManifestEntry {
    let selection = policy.select(&tool, ctx);
    let invocation = selection.rule.and_then(|r| r.invocation.clone());
    let client_requests = selection
        .rule
        .map(|r| r.client_requests.clone())
        .unwrap_or_default();
    let rule_id = selection.rule.map(|r| r.id.clone());
    let rule_reason = selection.rule.map(|r| r.reason.clone()).unwrap_or_default();
    let redaction = selection.redaction;
    let mut mode = selection.mode;
    let mut extra_fixed = Map::new();
    if mode == Mode::DryRunOnly
        && let Some(arg) = &tool.dry_run_argument
    {
        extra_fixed.insert(arg.clone(), Value::Bool(true));
    }
    let ToolDescriptor {
        name,
        version,
        title,
        description,
        input_schema,
        output_schema,
        annotations,
        required_scope,
        source,
        price_cents,
        ..
    } = tool;
    let mut error = None;
    // Narrowing without a policy cannot fail on an object schema; otherwise keep the tool's own
    // schema to show beside the error.
    let may_fail = !extra_fixed.is_empty()
        || invocation.is_some()
        || input_schema.get("type").is_some_and(|t| t != "object")
        || !input_schema.is_object();
    let kept = may_fail.then(|| input_schema.clone());
    let (input_schema, narrowed) =
        match narrow::narrow_owned(input_schema, invocation.as_ref(), &extra_fixed) {
            Ok(n) => (n.schema, Some(n.narrowing)),
            Err(e) => {
                error = Some(e.to_string());
                (kept.unwrap_or(Value::Null), None)
            }
        };
    let advertised = AdvertisedTool {
        name: name.clone(),
        title,
        description,
        input_schema,
        output_schema,
        annotations,
    };
    // Not narrowed: the tool is advertised exactly as it describes itself, whose hash the
    // catalog computed when the tool was written.
    let schema_hash = if extra_fixed.is_empty() && invocation.is_none() && error.is_none() {
        fingerprints.schema_hash
    } else {
        advertised.schema_hash()
    };
    let definition_hash = fingerprints.definition_hash;
    if error.is_none()
        && mode.is_listed()
        && let Err(e) = validators.get(&schema_hash, &advertised.input_schema)
    {
        error = Some(narrow::NarrowError::InvalidSchema(e).to_string());
    }
    if error.is_some() {
        mode = Mode::Hide;
    }
    ManifestEntry {
        name,
        tool_version: version,
        mode,
        rule_id,
        rule_reason,
        advertised,
        schema_hash,
        definition_hash,
        redaction,
        invocation,
        client_requests,
        narrowed,
        error,
        required_scope,
        price_cents,
        source,
        target: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical;
    use serde_json::json;

    fn tool(name: &str, risk: &[&str]) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            version: "1.0".into(),
            title: Some(format!("{name} title")),
            description: Some("does things".into()),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}, "owner": {"type": "string"}}}),
            output_schema: None,
            annotations: Some(json!({"readOnlyHint": true})),
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

    #[test]
    fn manifests_are_sorted_and_hide_what_the_policy_hides() {
        let catalog = vec![
            tool("zeta", &["read"]),
            tool("alpha", &["read"]),
            tool("write_it", &["write"]),
        ];
        let m = build(
            catalog.clone(),
            &Policy::builtin_safe_read(),
            1,
            &ctx(),
            &ValidatorCache::new(),
        );
        let names: Vec<_> = m.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["alpha", "write_it", "zeta"]);
        let listed: Vec<_> = m.listed().map(|t| t.name.as_str()).collect();
        assert_eq!(listed, vec!["alpha", "zeta"]);
        assert_eq!(m.entry("write_it").unwrap().mode, Mode::Hide);
        assert_eq!(m.lease_seconds, 900);
        // Same inputs, same manifest.
        assert_eq!(
            m,
            build(
                catalog.clone(),
                &Policy::builtin_safe_read(),
                1,
                &ctx(),
                &ValidatorCache::new()
            )
        );
    }

    fn mcp(server: &str, raw: &str, risk: &[&str]) -> ToolDescriptor {
        ToolDescriptor {
            source: ToolSource::Mcp {
                upstream_id: format!("ups_{server}"),
                server: server.into(),
                tool: raw.into(),
            },
            ..tool(&format!("mcp__{server}__{raw}"), risk)
        }
    }

    /// Issue 47: `tool_names: "upstream"` lists an MCP tool under its upstream's own name only
    /// where that is unambiguous, and every name still finds its tool.
    #[test]
    fn upstream_names_are_used_only_where_unambiguous() {
        let catalog = vec![
            mcp("a", "search", &["read"]),
            mcp("a", "fetch", &["read"]),
            mcp("b", "fetch", &["read"]),
            mcp("b", "mcp__x__y", &["read"]),
            mcp("b", "status", &["read"]),
            mcp("b", "hidden", &["write"]),
            mcp("c", "hidden", &["read"]),
            tool("status", &["read"]),
        ];
        let granted = build(
            catalog,
            &Policy::builtin_safe_read(),
            1,
            &ctx(),
            &ValidatorCache::new(),
        );
        let mut m = granted.clone();
        m.use_upstream_names();
        let listed: Vec<(&str, &str)> = m
            .listed()
            .map(|t| (t.advertised.name.as_str(), t.name.as_str()))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("mcp__a__fetch", "mcp__a__fetch"),
                ("search", "mcp__a__search"),
                ("mcp__b__fetch", "mcp__b__fetch"),
                ("mcp__b__mcp__x__y", "mcp__b__mcp__x__y"),
                ("mcp__b__status", "mcp__b__status"),
                // Unique among the listed tools (b's `hidden` is not listed).
                ("hidden", "mcp__c__hidden"),
                ("status", "status"),
            ]
        );
        // The schema hash covers the name listed; an unrenamed tool's is unchanged.
        let renamed = m.entry("search").unwrap();
        let before = granted.entry("mcp__a__search").unwrap();
        assert_eq!(renamed.name, "mcp__a__search");
        assert_ne!(renamed.schema_hash, before.schema_hash);
        assert_eq!(renamed.schema_hash, renamed.advertised.schema_hash());
        assert_eq!(
            m.entry("mcp__a__fetch").unwrap().schema_hash,
            granted.entry("mcp__a__fetch").unwrap().schema_hash
        );
        // Either name finds the tool; a name nothing is listed under finds nothing.
        assert_eq!(m.entry("mcp__a__search").unwrap().name, "mcp__a__search");
        assert!(m.entry("fetch").is_none());
        assert!(granted.entry("search").is_none());
        // Pinned: the manifest as stored keeps its names.
        let stored: Manifest = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(stored, m);
        assert_eq!(stored.entry("hidden").unwrap().name, "mcp__c__hidden");
        assert!(granted.upstream_names.is_none());
    }

    /// CONTRACT §3: a change of description or annotations is drift too.
    #[test]
    fn schema_hash_covers_what_is_advertised() {
        let base = tool("t", &["read"]);
        let hash = |t: &ToolDescriptor| {
            build(
                vec![t.clone()],
                &Policy::builtin_safe_read(),
                1,
                &ctx(),
                &ValidatorCache::new(),
            )
            .tools[0]
                .schema_hash
                .clone()
        };
        let h = hash(&base);
        assert!(h.starts_with("sha256:"));
        let mut d = base.clone();
        d.description = Some("does other things".into());
        assert_ne!(hash(&d), h);
        let mut a = base.clone();
        a.annotations = Some(json!({"readOnlyHint": false}));
        assert_ne!(hash(&a), h);
        let mut s = base.clone();
        s.input_schema["properties"]["q"]["maxLength"] = json!(5);
        assert_ne!(hash(&s), h);
        // A client can recompute it from what tools/list shows.
        let entry = &build(
            vec![base.clone()],
            &Policy::builtin_safe_read(),
            1,
            &ctx(),
            &ValidatorCache::new(),
        )
        .tools[0];
        let shown = serde_json::to_value(&entry.advertised).unwrap();
        assert_eq!(canonical::hash_of(&shown).unwrap(), entry.schema_hash);
    }

    /// Seed: "expires_after_seconds shortens the manifest lease."
    #[test]
    fn lease_is_shortened_by_listed_tools_only() {
        let policy: Policy = serde_json::from_value(json!({
            "name": "p",
            "rules": [
                {"id": "short", "match": {"name": "a"}, "mode": "allow", "invocation": {"expires_after_seconds": 120}},
                {"id": "hidden", "match": {"name": "b"}, "mode": "hide", "invocation": {"expires_after_seconds": 5}},
                {"id": "rest", "match": {}, "mode": "allow"}
            ]
        }))
        .unwrap();
        let m = build(
            vec![
                tool("a", &["read"]),
                tool("b", &["read"]),
                tool("c", &["read"]),
            ],
            &policy,
            3,
            &ctx(),
            &ValidatorCache::new(),
        );
        assert_eq!(m.lease_seconds, 120);
        assert_eq!(m.policy_version, 3);
    }

    #[test]
    fn a_policy_that_cannot_apply_hides_the_tool() {
        let policy: Policy = serde_json::from_value(json!({
            "name": "p",
            "rules": [{"id": "r", "match": {}, "mode": "allow", "invocation": {"allowed_values": {"q": [1, 2]}}}]
        }))
        .unwrap();
        let m = build(
            vec![tool("a", &["read"])],
            &policy,
            1,
            &ctx(),
            &ValidatorCache::new(),
        );
        assert_eq!(m.tools[0].mode, Mode::Hide);
        assert!(m.tools[0].error.as_deref().unwrap().contains("`q`"));
    }

    #[test]
    fn dry_run_mode_fixes_the_declared_dry_run_argument() {
        let mut t = tool("deploy", &["write"]);
        t.input_schema["properties"]["dry_run"] = json!({"type": "boolean"});
        t.dry_run_argument = Some("dry_run".into());
        let policy: Policy = serde_json::from_value(json!({
            "name": "p", "rules": [{"id": "r", "match": {"name": "deploy"}, "mode": "dry_run_only"}]
        }))
        .unwrap();
        let m = build(vec![t], &policy, 1, &ctx(), &ValidatorCache::new());
        let n = m.tools[0].narrowed.as_ref().unwrap();
        assert_eq!(n.fixed_arguments.get("dry_run"), Some(&json!(true)));
        assert!(
            m.tools[0].advertised.input_schema["properties"]
                .get("dry_run")
                .is_none()
        );
    }

    /// Issue 3: building a manifest compiles each listed tool's advertised schema once (into the
    /// shared cache calls use); one that does not compile hides the tool (fail closed), and
    /// hidden tools are not compiled at all.
    #[test]
    fn listed_schemas_are_compiled_once_and_invalid_ones_hide_the_tool() {
        let mut broken = tool("broken", &["read"]);
        broken.input_schema["properties"]["q"]["pattern"] = json!("(unclosed");
        let catalog = vec![tool("a", &["read"]), broken, tool("w", &["write"])];
        let cache = ValidatorCache::new();
        let m = build(
            catalog.clone(),
            &Policy::builtin_safe_read(),
            1,
            &ctx(),
            &cache,
        );
        assert_eq!(m.entry("a").unwrap().mode, Mode::Allow);
        let b = m.entry("broken").unwrap();
        assert_eq!(b.mode, Mode::Hide);
        assert!(
            b.error.as_deref().unwrap().contains("invalid"),
            "{:?}",
            b.error
        );
        assert_eq!(m.entry("w").unwrap().mode, Mode::Hide);
        assert_eq!(
            cache.len(),
            1,
            "only the listed, valid schema is compiled and kept"
        );
        let again = build(
            catalog.clone(),
            &Policy::builtin_safe_read(),
            1,
            &ctx(),
            &cache,
        );
        assert_eq!(again, m);
        assert_eq!(cache.len(), 1);
    }

    /// Issue 3 (speed): a tool the policy does not narrow takes its `schemaHash` from the
    /// catalog's fingerprints; it must equal the hash of what is advertised, narrowed or not.
    #[test]
    fn fingerprinted_hashes_equal_the_advertised_ones() {
        let policy: Policy = serde_json::from_value(json!({
            "name": "p",
            "rules": [
                {"id": "narrow", "match": {"name": "b"}, "mode": "allow",
                 "invocation": {"fixed_arguments": {"owner": "acme"}}},
                {"id": "rest", "match": {}, "mode": "allow"}
            ]
        }))
        .unwrap();
        let catalog = vec![tool("a", &["read"]), tool("b", &["read"])];
        let fingerprinted: Vec<CatalogTool> =
            catalog.iter().cloned().map(CatalogTool::new).collect();
        let m = build(fingerprinted, &policy, 1, &ctx(), &ValidatorCache::new());
        for (e, t) in m.tools.iter().zip(&catalog) {
            assert_eq!(e.schema_hash, e.advertised.schema_hash(), "{}", e.name);
            assert_eq!(
                e.schema_hash,
                canonical::hash_of(&serde_json::to_value(&e.advertised).unwrap()).unwrap()
            );
            assert_eq!(e.definition_hash, t.definition_hash());
        }
        assert_ne!(
            m.tools[1].schema_hash,
            crate::catalog::Fingerprints::of(&catalog[1]).schema_hash,
            "a narrowed tool has its own hash"
        );
        assert_eq!(
            m.tools[0].schema_hash,
            crate::catalog::Fingerprints::of(&catalog[0]).schema_hash
        );
    }
}
