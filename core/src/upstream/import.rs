//! From an upstream's `tools/list` to tool descriptors (CONTRACT §11).
//!
//! Each tool gets the canonical name `mcp__<server>__<tool>` and keeps its raw server and tool
//! names beside it. Canonical names never collide: when two tools of one upstream would share
//! one (`read file` and `read_file`), neither is imported, because picking one would let the
//! upstream decide which tool a policy written for that name governs. Imported tools carry the
//! risk label `unknown`, so the default policy hides them until an admin describes them.

use std::collections::HashMap;

use engine::descriptor::{
    MAX_NAME_LEN, NameError, RISK_UNKNOWN, ToolDescriptor, ToolSource, canonical_mcp_name,
};

use super::RawTool;

/// Version of an imported tool until an admin assigns one (`PUT /tools/{name}`).
const INITIAL_VERSION: &str = "1";

/// What an import produced: the descriptors, and the tools left out with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportReport {
    /// Imported tools, in the upstream's order.
    pub tools: Vec<ToolDescriptor>,
    /// Tools not imported, in the upstream's order.
    pub skipped: Vec<SkippedTool>,
}

/// A tool that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedTool {
    /// The name the upstream lists it under.
    pub raw_name: String,
    /// Why it was left out.
    pub reason: SkipReason,
}

/// Why a tool was not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    /// The upstream lists it without a name.
    #[error("the tool has no name")]
    EmptyName,
    /// `mcp__<server>__<tool>` would be longer than 128 characters.
    #[error("its canonical name would exceed {MAX_NAME_LEN} characters")]
    NameTooLong,
    /// Another tool of the same upstream has the same canonical name (or the same raw name).
    #[error("its canonical name `{canonical}` collides with another tool of the upstream")]
    Collision {
        /// The contested canonical name.
        canonical: String,
    },
    /// `inputSchema` is not a JSON object, so its arguments cannot be described or checked.
    #[error("its input schema is not a JSON object")]
    InputSchemaNotObject,
}

/// Turns the tools upstream `server_name` (id `upstream_id`) lists into descriptors: canonical
/// names, risk `["unknown"]`, version `"1"`, the raw identity in [`ToolSource::Mcp`]. Pure.
///
/// Fails only when `server_name` is not a valid upstream name (`[a-z0-9-]{1,32}`), which
/// registration rules out.
pub fn import(
    server_name: &str,
    upstream_id: &str,
    raw_tools: Vec<RawTool>,
) -> Result<ImportReport, NameError> {
    // Surfaces a bad server name once rather than as a skip reason on every tool.
    canonical_mcp_name(server_name, "x")?;

    let mut named: Vec<(RawTool, Result<String, SkipReason>)> = Vec::new();
    for tool in raw_tools {
        let canonical = match canonical_mcp_name(server_name, &tool.name) {
            Ok(name) => Ok(name),
            Err(NameError::EmptyTool) => Err(SkipReason::EmptyName),
            Err(NameError::TooLong) => Err(SkipReason::NameTooLong),
            Err(e @ NameError::BadServer) => return Err(e),
        };
        named.push((tool, canonical));
    }

    let mut uses: HashMap<&str, usize> = HashMap::new();
    for (_, canonical) in &named {
        if let Ok(name) = canonical {
            *uses.entry(name.as_str()).or_default() += 1;
        }
    }
    let collides: Vec<bool> = named
        .iter()
        .map(|(_, canonical)| {
            canonical
                .as_ref()
                .is_ok_and(|name| uses.get(name.as_str()).copied().unwrap_or(0) > 1)
        })
        .collect();

    let mut report = ImportReport {
        tools: Vec::new(),
        skipped: Vec::new(),
    };
    for ((tool, canonical), collides) in named.into_iter().zip(collides) {
        let skip = |reason| SkippedTool {
            raw_name: tool.name.clone(),
            reason,
        };
        let name = match canonical {
            Err(reason) => {
                report.skipped.push(skip(reason));
                continue;
            }
            Ok(name) if collides => {
                report
                    .skipped
                    .push(skip(SkipReason::Collision { canonical: name }));
                continue;
            }
            Ok(name) => name,
        };
        if !tool.input_schema.is_object() {
            report.skipped.push(skip(SkipReason::InputSchemaNotObject));
            continue;
        }
        report.tools.push(ToolDescriptor {
            name,
            version: INITIAL_VERSION.to_owned(),
            title: tool.title,
            description: tool.description,
            input_schema: tool.input_schema,
            output_schema: tool.output_schema,
            annotations: tool.annotations,
            family: None,
            risk: vec![RISK_UNKNOWN.to_owned()],
            required_scope: None,
            source: ToolSource::Mcp {
                upstream_id: upstream_id.to_owned(),
                server: server_name.to_owned(),
                tool: tool.name,
            },
            dry_run_argument: None,
            price_cents: None,
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::policy::{ExposureContext, Mode, Policy};
    use serde_json::json;

    fn raw(name: &str) -> RawTool {
        RawTool {
            name: name.to_owned(),
            title: None,
            description: Some(format!("the {name} tool")),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        }
    }

    fn names(report: &ImportReport) -> Vec<&str> {
        report.tools.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn tools_get_canonical_names_raw_identity_and_unknown_risk() {
        let mut echo = raw("echo");
        echo.title = Some("Echo".into());
        echo.output_schema = Some(json!({"type": "object"}));
        echo.annotations = Some(json!({"readOnlyHint": true}));
        let report = import("files", "ups_1", vec![echo, raw("read file")]).unwrap();
        assert!(report.skipped.is_empty());
        assert_eq!(
            names(&report),
            ["mcp__files__echo", "mcp__files__read_file"]
        );

        let echo = &report.tools[0];
        assert_eq!(echo.version, "1");
        assert_eq!(echo.title.as_deref(), Some("Echo"));
        assert_eq!(echo.description.as_deref(), Some("the echo tool"));
        assert_eq!(echo.output_schema, Some(json!({"type": "object"})));
        assert_eq!(echo.annotations, Some(json!({"readOnlyHint": true})));
        assert_eq!(echo.risk, ["unknown"]);

        // The raw name stays beside the sanitized one.
        assert_eq!(
            report.tools[1].source,
            ToolSource::Mcp {
                upstream_id: "ups_1".into(),
                server: "files".into(),
                tool: "read file".into(),
            }
        );
    }

    #[test]
    fn the_default_policy_hides_imported_tools() {
        // Even one the upstream calls read-only: annotations are hints from the upstream, the
        // risk labels are the admin's.
        let mut tool = raw("list");
        tool.annotations = Some(json!({"readOnlyHint": true}));
        let report = import("files", "ups_1", vec![tool]).unwrap();
        let ctx = ExposureContext {
            environment: "default".into(),
            actor: "agent".into(),
            preset: None,
            entity: None,
        };
        let policy = Policy::builtin_safe_read();
        let selection = policy.select(&report.tools[0], &ctx);
        assert_eq!(selection.mode, Mode::Hide);
    }

    #[test]
    fn colliding_tools_are_all_skipped() {
        let report = import(
            "files",
            "ups_1",
            vec![
                raw("read file"),
                raw("echo"),
                raw("read_file"),
                raw("read/file"),
            ],
        )
        .unwrap();
        assert_eq!(names(&report), ["mcp__files__echo"]);
        let skipped: Vec<(&str, &SkipReason)> = report
            .skipped
            .iter()
            .map(|s| (s.raw_name.as_str(), &s.reason))
            .collect();
        let collision = SkipReason::Collision {
            canonical: "mcp__files__read_file".into(),
        };
        assert_eq!(
            skipped,
            [
                ("read file", &collision),
                ("read_file", &collision),
                ("read/file", &collision)
            ]
        );
    }

    #[test]
    fn a_name_listed_twice_is_a_collision() {
        let report = import("files", "ups_1", vec![raw("echo"), raw("echo"), raw("add")]).unwrap();
        assert_eq!(names(&report), ["mcp__files__add"]);
        assert_eq!(report.skipped.len(), 2);
    }

    #[test]
    fn long_empty_and_schemaless_tools_are_skipped() {
        // `mcp__files__` is 12 characters: 116 more fit, 117 do not.
        let fits = "t".repeat(MAX_NAME_LEN - 12);
        let too_long = "t".repeat(MAX_NAME_LEN - 11);
        let mut schemaless = raw("schemaless");
        schemaless.input_schema = json!("object");
        let report = import(
            "files",
            "ups_1",
            vec![raw(&fits), raw(&too_long), raw(""), schemaless],
        )
        .unwrap();
        assert_eq!(report.tools.len(), 1);
        assert_eq!(report.tools[0].name.len(), MAX_NAME_LEN);
        let reasons: Vec<&SkipReason> = report.skipped.iter().map(|s| &s.reason).collect();
        assert_eq!(
            reasons,
            [
                &SkipReason::NameTooLong,
                &SkipReason::EmptyName,
                &SkipReason::InputSchemaNotObject
            ]
        );
        assert_eq!(report.skipped[0].raw_name, too_long);
    }

    #[test]
    fn a_bad_server_name_fails_the_import() {
        let too_long = "x".repeat(33);
        for server in ["", "Files", "my_files", too_long.as_str()] {
            assert_eq!(
                import(server, "ups_1", vec![raw("echo")]),
                Err(NameError::BadServer),
                "{server:?}"
            );
        }
    }
}

/// What an upstream offers besides tools (resources keyed by their normalised URI, templates
/// by their template, prompts by their canonical name), as the catalog keeps it.
pub use crate::store::items::Kind as ItemKind;

/// One listed resource, template or prompt, imported.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedItem {
    pub kind: ItemKind,
    /// The normalised URI, the URI template, or the canonical prompt name.
    pub key: String,
    /// As the upstream names it (the URI as listed, the prompt's own name).
    pub raw: String,
    /// As listed (`_meta` left out: it is the upstream's, not the item's).
    pub definition: serde_json::Value,
}

/// A listed item left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedItem {
    pub kind: ItemKind,
    /// Its URI, template or name as listed (cut to 256 characters).
    pub raw: String,
    pub reason: String,
}

/// What upstream `server_name` lists besides tools, imported: resources keyed by their
/// normalised URI ([`engine::uri::normalize`]; a URI that does not normalise is refused),
/// templates by their template, prompts by their canonical name. Two listings with one key
/// (the same resource under two spellings, `read file` and `read_file`) are both refused: the
/// upstream would choose which one a rule governs. Pure.
pub fn import_items(
    server_name: &str,
    resources: Vec<serde_json::Value>,
    templates: Vec<serde_json::Value>,
    prompts: Vec<serde_json::Value>,
) -> (Vec<ImportedItem>, Vec<RefusedItem>) {
    let mut imported = Vec::new();
    let mut refused = Vec::new();
    let mut refuse = |kind, raw: &str, reason: String| {
        refused.push(RefusedItem {
            kind,
            raw: raw.chars().take(256).collect(),
            reason,
        });
    };
    let listed = [
        (ItemKind::Resource, "uri", resources),
        (ItemKind::Template, "uriTemplate", templates),
        (ItemKind::Prompt, "name", prompts),
    ];
    for (kind, field, items) in listed {
        let mut keyed: Vec<ImportedItem> = Vec::new();
        for mut item in items {
            let Some(raw) = item.get(field).and_then(serde_json::Value::as_str) else {
                refuse(kind, "", format!("listed without `{field}`"));
                continue;
            };
            let raw = raw.to_owned();
            let key = match kind {
                ItemKind::Resource => engine::uri::normalize(&raw).map_err(|e| e.to_string()),
                ItemKind::Template => {
                    if raw.len() > engine::uri::MAX_URI_BYTES || !raw.contains(':') {
                        Err("not a URI template".to_owned())
                    } else {
                        Ok(raw.clone())
                    }
                }
                ItemKind::Prompt => {
                    canonical_mcp_name(server_name, &raw).map_err(|e| e.to_string())
                }
            };
            let key = match key {
                Ok(key) => key,
                Err(reason) => {
                    refuse(kind, &raw, reason);
                    continue;
                }
            };
            if let Some(map) = item.as_object_mut() {
                map.remove("_meta");
            }
            keyed.push(ImportedItem {
                kind,
                key,
                raw,
                definition: item,
            });
        }
        let mut uses: HashMap<String, usize> = HashMap::new();
        for i in &keyed {
            *uses.entry(i.key.clone()).or_default() += 1;
        }
        for item in keyed {
            if uses.get(&item.key).copied().unwrap_or(0) > 1 {
                refuse(
                    kind,
                    &item.raw,
                    format!("another of its listings is also {}", item.key),
                );
            } else {
                imported.push(item);
            }
        }
    }
    (imported, refused)
}

#[cfg(test)]
mod item_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_are_keyed_normalised_and_ambiguity_is_refused() {
        let (imported, refused) = import_items(
            "docs",
            vec![
                json!({"uri": "DOCS://readme", "name": "readme", "_meta": {"x": 1}}),
                json!({"uri": "docs://a/../b", "name": "walks"}),
                json!({"uri": "docs://twice", "name": "one"}),
                json!({"uri": "docs://%74wice", "name": "two"}),
                json!({"name": "no uri"}),
            ],
            vec![json!({"uriTemplate": "docs://pages/{page}", "name": "page"})],
            vec![
                json!({"name": "greet"}),
                json!({"name": "read file"}),
                json!({"name": "read_file"}),
            ],
        );
        let keys: Vec<(ItemKind, &str)> =
            imported.iter().map(|i| (i.kind, i.key.as_str())).collect();
        assert_eq!(
            keys,
            [
                (ItemKind::Resource, "docs://readme"),
                (ItemKind::Template, "docs://pages/{page}"),
                (ItemKind::Prompt, "mcp__docs__greet"),
            ]
        );
        assert_eq!(imported[0].raw, "DOCS://readme");
        assert!(imported[0].definition.get("_meta").is_none());
        let refused: Vec<&str> = refused.iter().map(|r| r.raw.as_str()).collect();
        assert_eq!(
            refused,
            [
                "docs://a/../b",
                "",
                "docs://twice",
                "docs://%74wice",
                "read file",
                "read_file"
            ]
        );
    }
}
