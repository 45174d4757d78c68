//! The live preview of a draft policy: what a session in a given context would be granted.
//!
//! One function serves the server's `POST /policies:preview` and the dashboard's editor (wasm),
//! so what an admin sees while typing is what the server would grant.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::CatalogTool;
use crate::manifest;
use crate::narrow::ValidatorCache;
use crate::policy::{ExposureContext, Mode};
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
}

/// Previews `draft` over `catalog` for `ctx`. A draft that parses but fails validation is still
/// previewed (the admin sees both the errors and their effect); one that does not parse is not.
pub fn preview<T: Into<CatalogTool>>(
    draft: &Value,
    caps: &RuntimeCapabilities,
    catalog: impl IntoIterator<Item = T>,
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
            };
        }
    };
    let errors = validate::validate(&policy, caps).err().unwrap_or_default();
    let m = manifest::build(catalog, &policy, 0, ctx, validators);
    Preview {
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
}
