//! Tool security descriptors: what a tool is, and the server-owned facts that decide how it may
//! be exposed (family, risk labels, required scope, version).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical;
use crate::fork::{McpIdentity, ToolIdentity};

/// The longest canonical tool name (CONTRACT §11).
pub const MAX_NAME_LEN: usize = 128;

/// Risk label of read-only tools.
pub const RISK_READ: &str = "read";
/// Risk label of tools that change state.
pub const RISK_WRITE: &str = "write";
/// Risk label of tools whose changes cannot be undone.
pub const RISK_DESTRUCTIVE: &str = "destructive";
/// Risk label of tools nobody has described yet; the default policy hides them.
pub const RISK_UNKNOWN: &str = "unknown";

/// Where a tool comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolSource {
    /// Implemented by Aperture itself; its canonical name is its own.
    Builtin,
    /// Imported from an upstream MCP server. The raw names are kept because fork allowlist
    /// patterns match them, not the sanitized canonical name.
    Mcp {
        /// `ups_…` id of the upstream registration.
        upstream_id: String,
        /// Raw server (upstream) name.
        server: String,
        /// Raw tool name as the server lists it.
        tool: String,
    },
}

impl ToolSource {
    /// The identity of the tool called `name` from this source, as fork allowlists see it.
    pub fn identity<'a>(&'a self, name: &'a str) -> ToolIdentity<'a> {
        ToolIdentity {
            name,
            mcp: match self {
                ToolSource::Builtin => None,
                ToolSource::Mcp { server, tool, .. } => Some(McpIdentity { server, tool }),
            },
        }
    }
}

/// A tool and its security descriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// Canonical, model-visible name (`mcp__<server>__<tool>` for MCP tools).
    pub name: String,
    /// Version the admin assigned (or the upstream reported); calls must echo it.
    pub version: String,
    /// Human title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Description shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema (2020-12) of the arguments.
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, when the tool declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP annotations (`readOnlyHint`, …), advertised as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// A grouping policies can select (`github`, `billing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Risk labels (`read`, `write`, `destructive`, `unknown`, …). Empty means `["unknown"]`.
    #[serde(default)]
    pub risk: Vec<String>,
    /// Scope a caller must hold to call the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_scope: Option<String>,
    /// Built-in or MCP, with the raw identity.
    pub source: ToolSource,
    /// Name of a boolean argument that makes the tool simulate instead of act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_argument: Option<String>,
    /// Price of one call in cents, for the spend gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cents: Option<u64>,
}

impl ToolDescriptor {
    /// The risk labels, with an empty list read as `["unknown"]` (fail closed).
    pub fn risk_labels(&self) -> Vec<&str> {
        if self.risk.is_empty() {
            vec![RISK_UNKNOWN]
        } else {
            self.risk.iter().map(String::as_str).collect()
        }
    }

    /// The identity fork allowlists match against.
    pub fn identity(&self) -> ToolIdentity<'_> {
        self.source.identity(&self.name)
    }

    /// Fingerprint of everything about the tool's definition that the manifest advertises or
    /// that a call is checked against. A change of any of it after a grant is drift.
    pub fn definition_hash(&self) -> String {
        use canonical::Field;
        let mut h = canonical::HashSink::new();
        canonical::write_fields(
            &[
                (
                    "annotations",
                    Field::json_or_null(self.annotations.as_ref()),
                ),
                (
                    "description",
                    Field::str_or_null(self.description.as_deref()),
                ),
                ("inputSchema", Field::Json(&self.input_schema)),
                ("name", Field::Str(&self.name)),
                (
                    "outputSchema",
                    Field::json_or_null(self.output_schema.as_ref()),
                ),
                ("title", Field::str_or_null(self.title.as_deref())),
                ("version", Field::Str(&self.version)),
            ],
            &mut h,
        );
        h.finish()
    }
}

/// Why an MCP tool cannot be given a canonical name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The upstream name is not `[a-z0-9-]{1,32}`.
    #[error("upstream names are 1–32 characters of a-z, 0-9 and -")]
    BadServer,
    /// The tool name is empty.
    #[error("the tool name is empty")]
    EmptyTool,
    /// `mcp__<server>__<tool>` would exceed [`MAX_NAME_LEN`].
    #[error("the canonical name would exceed {MAX_NAME_LEN} characters")]
    TooLong,
}

/// Whether `name` is a valid upstream (server) name: `[a-z0-9-]{1,32}`. No `_`, so the `__` in
/// `mcp__<server>__<tool>` is always the server boundary.
pub fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `mcp__<server>__<tool>` with characters of the tool name outside `[A-Za-z0-9_.-]` replaced
/// by `_` (CONTRACT §11).
pub fn canonical_mcp_name(server: &str, tool: &str) -> Result<String, NameError> {
    if !is_valid_server_name(server) {
        return Err(NameError::BadServer);
    }
    if tool.is_empty() {
        return Err(NameError::EmptyTool);
    }
    let sanitized: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("mcp__{server}__{sanitized}");
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_names_are_sanitized_and_bounded() {
        assert_eq!(
            canonical_mcp_name("github", "read file/ä").unwrap(),
            "mcp__github__read_file__"
        );
        assert_eq!(
            canonical_mcp_name("git-hub", "a.b-c_d").unwrap(),
            "mcp__git-hub__a.b-c_d"
        );
        assert_eq!(
            canonical_mcp_name("git_hub", "x"),
            Err(NameError::BadServer)
        );
        assert_eq!(canonical_mcp_name("GitHub", "x"), Err(NameError::BadServer));
        assert_eq!(canonical_mcp_name("s", ""), Err(NameError::EmptyTool));
        assert_eq!(
            canonical_mcp_name("s", &"x".repeat(200)),
            Err(NameError::TooLong)
        );
    }

    #[test]
    fn missing_risk_labels_mean_unknown() {
        let d = ToolDescriptor {
            name: "t".into(),
            version: "1".into(),
            title: None,
            description: None,
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            family: None,
            risk: vec![],
            required_scope: None,
            source: ToolSource::Builtin,
            dry_run_argument: None,
            price_cents: None,
        };
        assert_eq!(d.risk_labels(), vec!["unknown"]);
    }

    /// The definition hash is the JCS hash of the object of every defining field, absent ones as
    /// `null` (stored hashes from earlier builds stay valid), and each field changes it.
    #[test]
    fn definition_hash_is_the_hash_of_the_definition_object() {
        let mut d = ToolDescriptor {
            name: "t".into(),
            version: "1".into(),
            title: None,
            description: Some("d".into()),
            input_schema: serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            output_schema: None,
            annotations: Some(serde_json::json!({"readOnlyHint": true})),
            family: None,
            risk: vec![],
            required_scope: None,
            source: ToolSource::Builtin,
            dry_run_argument: None,
            price_cents: None,
        };
        let object = |d: &ToolDescriptor| {
            canonical::hash_of(&serde_json::json!({
                "name": d.name, "version": d.version, "title": d.title,
                "description": d.description, "inputSchema": d.input_schema,
                "outputSchema": d.output_schema, "annotations": d.annotations,
            }))
            .unwrap()
        };
        let mut seen = vec![d.definition_hash()];
        assert_eq!(seen[0], object(&d));
        d.title = Some("T".into());
        seen.push(d.definition_hash());
        d.version = "2".into();
        seen.push(d.definition_hash());
        d.output_schema = Some(serde_json::json!({"type": "object"}));
        seen.push(d.definition_hash());
        d.input_schema["properties"]["q"]["maxLength"] = serde_json::json!(3);
        seen.push(d.definition_hash());
        d.annotations = None;
        seen.push(d.definition_hash());
        assert_eq!(*seen.last().unwrap(), object(&d));
        let distinct: std::collections::HashSet<_> = seen.iter().collect();
        assert_eq!(distinct.len(), seen.len());
    }
}
