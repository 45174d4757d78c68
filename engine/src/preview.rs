//! The live preview of a draft policy: what a session in a given context would be granted.
//!
//! One function serves the server's `POST /policies:preview` and the dashboard's editor (wasm),
//! so what an admin sees while typing is what the server would grant.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::CatalogTool;
use crate::manifest;
use crate::narrow::ValidatorCache;
use crate::policy::{ExposureContext, Mode, Policy};
use crate::validate::{self, FieldError, RuntimeCapabilities};

/// One tool as the draft policy would expose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewTool {
    /// Canonical name.
    pub name: String,
    /// Exposure mode.
    pub mode: Mode,
    /// Whether `tools/list` would show it.
    pub listed: bool,
    /// The deciding rule (`None`: `default_mode`).
    pub rule_id: Option<String>,
    /// That rule's reason.
    pub rule_reason: String,
    /// The version calls must echo.
    #[serde(rename = "toolVersion")]
    pub tool_version: String,
    /// `schemaHash` of the advertised tool.
    #[serde(rename = "schemaHash")]
    pub schema_hash: String,
    /// The narrowed input schema.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// Why the policy could not be applied to this tool (then it is hidden).
    pub error: Option<String>,
}

/// The preview of a draft.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    /// Whether the draft is a valid policy for this deployment.
    pub valid: bool,
    /// Its problems, with field paths.
    pub errors: Vec<FieldError>,
    /// Lease length a session would get.
    pub lease_seconds: u64,
    /// Every catalog tool, in name order. Empty when the draft does not parse.
    pub tools: Vec<PreviewTool>,
    /// Every catalogued resource, in the order given. Empty when the draft does not parse.
    #[serde(default)]
    pub resources: Vec<PreviewItem>,
    /// Every catalogued resource template.
    #[serde(default)]
    pub resource_templates: Vec<PreviewItem>,
    /// Every catalogued prompt.
    #[serde(default)]
    pub prompts: Vec<PreviewItem>,
}

/// What a catalogued resource, template or prompt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A resource (its normalised URI).
    Resource,
    /// A resource template (its URI template).
    Template,
    /// A prompt (its canonical name, `mcp__<server>__<prompt>`).
    Prompt,
}

/// One catalogued resource, template or prompt as the preview needs it: what the policy
/// matches, and whether the catalog lets it be exposed at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogItem {
    /// What it is.
    pub kind: ItemKind,
    /// The registered name of the upstream offering it.
    pub upstream: String,
    /// The normalised URI, the URI template, or the canonical prompt name.
    pub key: String,
    /// Whether it routes to exactly one upstream. One that another upstream offers too (or whose
    /// URIs another upstream's template could expand to) is never exposed, whatever the policy.
    pub routable: bool,
    /// Whether drift triage holds a change of it: never exposed until an admin accepts it.
    #[serde(default)]
    pub held: bool,
}

/// One resource, template or prompt as the draft policy would expose it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewItem {
    /// The offering upstream's name.
    pub upstream: String,
    /// The normalised URI, the URI template, or the canonical prompt name.
    pub key: String,
    /// `allow`, `hide` or `deny` (a draft may say more; validation reports it).
    pub mode: Mode,
    /// Whether `resources/list`, `resources/templates/list` or `prompts/list` would show it
    /// (and a read, get, completion or subscription reach it).
    pub listed: bool,
    /// The deciding rule (`None`: no rule selects it, so it is hidden).
    pub rule_id: Option<String>,
    /// That rule's reason.
    pub rule_reason: String,
    /// Whether it routes to exactly one upstream ([`CatalogItem::routable`]).
    pub routable: bool,
    /// Whether a change of it is held ([`CatalogItem::held`]).
    #[serde(default)]
    pub held: bool,
}

impl PreviewItem {
    /// What `policy` says of `item` in `ctx`: the first rule selecting it decides, and it is
    /// listed when that rule allows it, it routes to one upstream and no change of it is held.
    pub fn of(policy: &Policy, item: &CatalogItem, ctx: &ExposureContext) -> Self {
        let selection = match item.kind {
            ItemKind::Resource => policy.select_resource(&item.upstream, &item.key, ctx),
            ItemKind::Template => policy.select_template(&item.upstream, &item.key, ctx),
            ItemKind::Prompt => policy.select_prompt(&item.key, ctx),
        };
        Self {
            upstream: item.upstream.clone(),
            key: item.key.clone(),
            mode: selection.mode,
            listed: selection.mode == Mode::Allow && item.routable && !item.held,
            rule_id: selection.rule.map(|r| r.id.clone()),
            rule_reason: selection.rule.map(|r| r.reason.clone()).unwrap_or_default(),
            routable: item.routable,
            held: item.held,
        }
    }
}

/// Previews `draft` over `catalog` (tools) and `items` (resources, templates, prompts) for
/// `ctx`. A draft that parses but fails validation is still previewed (the admin sees both the
/// errors and their effect); one that does not parse is not.
pub fn preview<T: Into<CatalogTool>>(
    draft: &Value,
    caps: &RuntimeCapabilities,
    catalog: impl IntoIterator<Item = T>,
    items: &[CatalogItem],
    ctx: &ExposureContext,
    validators: &ValidatorCache,
) -> Preview {
    let policy = match validate::parse_policy(draft) {
        Ok(p) => p,
        Err(errors) => {
            return Preview {
                valid: false,
                errors,
                lease_seconds: 0,
                tools: vec![],
                resources: vec![],
                resource_templates: vec![],
                prompts: vec![],
            };
        }
    };
    let errors = validate::validate(&policy, caps).err().unwrap_or_default();
    let m = manifest::build(catalog, &policy, 0, ctx, validators);
    let of = |kind: ItemKind| {
        items
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| PreviewItem::of(&policy, i, ctx))
            .collect()
    };
    Preview {
        resources: of(ItemKind::Resource),
        resource_templates: of(ItemKind::Template),
        prompts: of(ItemKind::Prompt),
        valid: errors.is_empty(),
        errors,
        lease_seconds: m.lease_seconds,
        tools: m
            .tools
            .into_iter()
            .map(|t| PreviewTool {
                listed: t.mode.is_listed(),
                name: t.name,
                mode: t.mode,
                rule_id: t.rule_id,
                rule_reason: t.rule_reason,
                tool_version: t.tool_version,
                schema_hash: t.schema_hash,
                input_schema: t.advertised.input_schema,
                error: t.error,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::{ToolDescriptor, ToolSource};
    use serde_json::json;

    fn tool(name: &str, risk: &[&str]) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            version: "1".into(),
            title: None,
            description: None,
            input_schema: json!({"type": "object", "properties": {"owner": {"type": "string"}, "q": {"type": "string"}}}),
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

    #[test]
    fn a_draft_is_previewed_with_narrowed_schemas_and_its_errors() {
        let ctx = ExposureContext {
            environment: "default".into(),
            actor: "bot".into(),
            preset: None,
            entity: None,
        };
        let draft = json!({"name": "d", "rules": [
            {"id": "r", "match": {"name": "a"}, "mode": "allow",
             "invocation": {"fixed_arguments": {"owner": "acme"}, "max_result_bytes": -5}}
        ]});
        let p = preview(
            &draft,
            &RuntimeCapabilities::default(),
            vec![tool("a", &["read"]), tool("b", &["read"])],
            &[],
            &ctx,
            &ValidatorCache::new(),
        );
        assert!(!p.valid);
        assert_eq!(p.errors[0].path, "rules[0].invocation.max_result_bytes");
        assert_eq!(p.tools.len(), 2);
        assert_eq!(p.tools[0].mode, Mode::Allow);
        assert!(p.tools[0].input_schema["properties"].get("owner").is_none());
        assert_eq!(p.tools[1].mode, Mode::Hide);
        assert!(!p.tools[1].listed);
        let unparsable = preview(
            &json!({"name": 3}),
            &RuntimeCapabilities::default(),
            vec![tool("a", &["read"])],
            &[],
            &ctx,
            &ValidatorCache::new(),
        );
        assert!(!unparsable.valid && unparsable.tools.is_empty());
        assert_eq!(unparsable.errors[0].path, "name");
    }

    #[test]
    fn the_preview_matches_the_manifest_the_server_would_build() {
        let ctx = ExposureContext {
            environment: "prod".into(),
            actor: "bot".into(),
            preset: None,
            entity: None,
        };
        let draft = serde_json::to_value(crate::policy::Policy::builtin_safe_read()).unwrap();
        let catalog = [tool("a", &["read"]), tool("w", &["write"])];
        let p = preview(
            &draft,
            &RuntimeCapabilities::default(),
            catalog.to_vec(),
            &[],
            &ctx,
            &ValidatorCache::new(),
        );
        let m = manifest::build(
            catalog.to_vec(),
            &crate::policy::Policy::builtin_safe_read(),
            1,
            &ctx,
            &ValidatorCache::new(),
        );
        for (pt, mt) in p.tools.iter().zip(&m.tools) {
            assert_eq!((pt.mode, &pt.schema_hash), (mt.mode, &mt.schema_hash));
        }
    }

    /// Issue 47: the preview covers resources, templates and prompts: the first rule selecting
    /// each decides, `default_mode` never does, and one that routes to two upstreams is never
    /// listed whatever the rule says.
    #[test]
    fn resources_templates_and_prompts_are_previewed_by_their_own_rules() {
        let ctx = ExposureContext {
            environment: "default".into(),
            actor: "bot".into(),
            preset: None,
            entity: None,
        };
        let draft = json!({"name": "d", "default_mode": "allow", "rules": [
            {"id": "secret", "resource": {"uri": "test://docs/secret/*"}, "mode": "deny", "reason": "no"},
            {"id": "docs", "resource": {"uri": "test://docs/*"}, "mode": "allow"},
            {"id": "greet", "prompt": "mcp__a__greet*", "mode": "allow"}
        ]});
        let item = |kind, key: &str, routable| CatalogItem {
            kind,
            upstream: "a".into(),
            key: key.into(),
            routable,
            held: false,
        };
        let items = [
            item(ItemKind::Resource, "test://docs/readme", true),
            item(ItemKind::Resource, "test://docs/secret/key", true),
            item(ItemKind::Resource, "test://docs/shared", false),
            item(ItemKind::Resource, "test://other/x", true),
            item(ItemKind::Template, "test://docs/{name}", true),
            item(ItemKind::Template, "test://{any}", true),
            item(ItemKind::Prompt, "mcp__a__greet", true),
            item(ItemKind::Prompt, "mcp__a__other", true),
            CatalogItem {
                held: true,
                ..item(ItemKind::Prompt, "mcp__a__greet2", true)
            },
        ];
        let p = preview(
            &draft,
            &RuntimeCapabilities::default(),
            vec![tool("t", &["read"])],
            &items,
            &ctx,
            &ValidatorCache::new(),
        );
        let seen = |list: &[PreviewItem]| {
            list.iter()
                .map(|i| (i.key.clone(), i.mode, i.listed, i.rule_id.clone()))
                .collect::<Vec<_>>()
        };
        let r = |k: &str, m, l, rule: Option<&str>| (k.to_owned(), m, l, rule.map(str::to_owned));
        assert_eq!(
            seen(&p.resources),
            vec![
                r("test://docs/readme", Mode::Allow, true, Some("docs")),
                r("test://docs/secret/key", Mode::Deny, false, Some("secret")),
                r("test://docs/shared", Mode::Allow, false, Some("docs")),
                r("test://other/x", Mode::Hide, false, None),
            ]
        );
        assert_eq!(p.resources[1].rule_reason, "no");
        assert_eq!(
            seen(&p.resource_templates),
            vec![
                // The deny rule could select some expansion of each: it decides, and neither
                // template is listed (a template is listed only when every expansion is allowed).
                r("test://docs/{name}", Mode::Deny, false, Some("secret")),
                r("test://{any}", Mode::Deny, false, Some("secret")),
            ]
        );
        assert_eq!(
            seen(&p.prompts),
            vec![
                r("mcp__a__greet", Mode::Allow, true, Some("greet")),
                r("mcp__a__other", Mode::Hide, false, None),
                // Held by drift triage: allowed, but not listed until an admin accepts it.
                r("mcp__a__greet2", Mode::Allow, false, Some("greet")),
            ]
        );
        assert_eq!(p.tools[0].mode, Mode::Allow);
    }
}
