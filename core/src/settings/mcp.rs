//! `GET`/`PUT /settings/mcp` (admin, journaled): `{"binding": "echo" | "implicit",
//! "tool_names": "prefixed" | "upstream", "environments"?: {"<env>": {"binding"?,
//! "tool_names"?}}}`. The defaults, `echo` and `prefixed`, are the seed's contract; an
//! environment's override departs from them only there, so convenience in `dev` does not weaken
//! `prod`. The settings govern `/mcp` only: REST, Connect, gRPC, the bridge and hosted agents
//! keep the echo and the canonical names.

use std::collections::BTreeMap;

use engine::environment::is_environment;
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use serde_json::{Map, Value, json};

use aperture_types::error::{AppError, FieldError};

use crate::error::ServiceError;
use crate::journal::Journal;
use crate::principal::Principal;
use crate::store::{self, Store};

/// The settings document's name under `/settings/`.
const NAME: &str = "mcp";

/// At most this many environments carry overrides.
const MAX_ENVIRONMENTS: usize = 64;

/// How a `/mcp` `tools/call` is bound to the grant it runs under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Binding {
    /// The call echoes `_meta.session_id`, `manifest_id`, `lease_id`, `tool_version` and
    /// `expected_schema_hash` from its listing (the seed's contract).
    #[default]
    Echo,
    /// A call carrying none of the five binds to the principal's newest live plain listing
    /// (a tenant's deliberate departure from the echo rule; receipts say so).
    Implicit,
}

impl Binding {
    /// Its name in documents and receipts.
    pub const fn as_str(self) -> &'static str {
        match self {
            Binding::Echo => "echo",
            Binding::Implicit => "implicit",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "echo" => Some(Binding::Echo),
            "implicit" => Some(Binding::Implicit),
            _ => None,
        }
    }
}

/// Which names `/mcp` lists tools under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolNames {
    /// The canonical `mcp__<upstream>__<tool>`.
    #[default]
    Prefixed,
    /// The upstream's own name where it is unique within the manifest (pinned in the grant).
    Upstream,
}

impl ToolNames {
    /// Its name in documents.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolNames::Prefixed => "prefixed",
            ToolNames::Upstream => "upstream",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "prefixed" => Some(ToolNames::Prefixed),
            "upstream" => Some(ToolNames::Upstream),
            _ => None,
        }
    }
}

/// What holds in one environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Effective {
    pub binding: Binding,
    pub tool_names: ToolNames,
}

/// An environment's departures from the tenant-wide settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Override {
    binding: Option<Binding>,
    tool_names: Option<ToolNames>,
}

/// A tenant's MCP settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpSettings {
    /// Everywhere an environment does not say otherwise.
    pub all: Effective,
    environments: BTreeMap<String, Override>,
}

impl McpSettings {
    /// What holds in `environment`.
    pub fn in_environment(&self, environment: &str) -> Effective {
        let mut effective = self.all;
        if let Some(o) = self.environments.get(environment) {
            effective.binding = o.binding.unwrap_or(effective.binding);
            effective.tool_names = o.tool_names.unwrap_or(effective.tool_names);
        }
        effective
    }

    /// Whether some environment binds implicitly.
    pub fn any_implicit(&self) -> bool {
        self.all.binding == Binding::Implicit
            || self
                .environments
                .values()
                .any(|o| o.binding == Some(Binding::Implicit))
    }

    /// Reads a document; every field left out gets its default. The errors name their paths.
    pub fn parse(document: &Value) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut settings = McpSettings::default();
        let Value::Object(map) = document else {
            return Err(vec![field("", "must be an object")]);
        };
        for (key, value) in map {
            match key.as_str() {
                "binding" => settings.all.binding = binding(value, "binding", &mut errors),
                "tool_names" => {
                    settings.all.tool_names = tool_names(value, "tool_names", &mut errors)
                }
                "environments" => {
                    settings.environments = environments(value, &mut errors);
                }
                other => errors.push(field(other, "is not a setting of /settings/mcp")),
            }
        }
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }

    /// The document, every field spelled out.
    pub fn to_json(&self) -> Value {
        let environments: Map<String, Value> = self
            .environments
            .iter()
            .map(|(env, o)| {
                let mut m = Map::new();
                if let Some(b) = o.binding {
                    m.insert("binding".into(), b.as_str().into());
                }
                if let Some(t) = o.tool_names {
                    m.insert("tool_names".into(), t.as_str().into());
                }
                (env.clone(), Value::Object(m))
            })
            .collect();
        json!({
            "binding": self.all.binding.as_str(),
            "tool_names": self.all.tool_names.as_str(),
            "environments": environments,
        })
    }
}

fn field(path: &str, message: &str) -> FieldError {
    FieldError {
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

fn binding(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Binding {
    match value.as_str().and_then(Binding::parse) {
        Some(b) => b,
        None => {
            errors.push(field(path, "must be \"echo\" or \"implicit\""));
            Binding::Echo
        }
    }
}

fn tool_names(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> ToolNames {
    match value.as_str().and_then(ToolNames::parse) {
        Some(t) => t,
        None => {
            errors.push(field(path, "must be \"prefixed\" or \"upstream\""));
            ToolNames::Prefixed
        }
    }
}

fn environments(value: &Value, errors: &mut Vec<FieldError>) -> BTreeMap<String, Override> {
    let mut out = BTreeMap::new();
    let Value::Object(map) = value else {
        errors.push(field(
            "environments",
            "must be an object keyed by environment",
        ));
        return out;
    };
    if map.len() > MAX_ENVIRONMENTS {
        errors.push(field(
            "environments",
            &format!("at most {MAX_ENVIRONMENTS} environments"),
        ));
        return out;
    }
    for (env, value) in map {
        let at = format!("environments.{env}");
        if !is_environment(env) {
            errors.push(field(&at, "1–64 characters of a-z, 0-9, _ and -"));
            continue;
        }
        let Value::Object(o) = value else {
            errors.push(field(&at, "must be an object"));
            continue;
        };
        let mut over = Override::default();
        for (key, value) in o {
            let path = format!("{at}.{key}");
            match key.as_str() {
                "binding" => over.binding = Some(binding(value, &path, errors)),
                "tool_names" => over.tool_names = Some(tool_names(value, &path, errors)),
                _ => errors.push(field(&path, "is not a setting of an environment")),
            }
        }
        out.insert(env.clone(), over);
    }
    out
}

/// The tenant's MCP settings (the defaults when it never set any). A stored document this
/// build cannot read falls back to the defaults: the seed's strict contract, never a
/// departure from it.
pub async fn of(store: &Store, tenant_id: &str) -> Result<McpSettings, ServiceError> {
    Ok(match store::settings::get(store, tenant_id, NAME).await? {
        None => McpSettings::default(),
        Some((document, _, _)) => McpSettings::parse(&document).unwrap_or_default(),
    })
}

/// `GET /settings/mcp` (admin).
pub async fn get(store: &Store, principal: &Principal) -> Result<Value, ServiceError> {
    principal.require(scope::ADMIN)?;
    Ok(of(store, &principal.tenant_id).await?.to_json())
}

/// `PUT /settings/mcp` (admin, journaled): replaces the tenant's MCP settings; a field left out
/// gets its default.
pub async fn put(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    document: &Value,
) -> Result<Value, ServiceError> {
    principal.require(scope::ADMIN)?;
    let settings = McpSettings::parse(document).map_err(AppError::invalid)?;
    let document = settings.to_json();
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "settings.mcp",
            json!({"mcp": document}),
        )
        .await?;
    store::settings::put(
        store,
        &principal.tenant_id,
        NAME,
        &document,
        &principal.as_creator(),
    )
    .await?;
    Ok(document)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_departs_only_where_it_says() {
        let s = McpSettings::parse(&json!({
            "binding": "echo",
            "environments": {"dev": {"binding": "implicit"}, "lab": {"tool_names": "upstream"}}
        }))
        .unwrap();
        assert_eq!(s.in_environment("prod"), Effective::default());
        assert_eq!(s.in_environment("dev").binding, Binding::Implicit);
        assert_eq!(s.in_environment("dev").tool_names, ToolNames::Prefixed);
        assert_eq!(s.in_environment("lab").binding, Binding::Echo);
        assert_eq!(s.in_environment("lab").tool_names, ToolNames::Upstream);
        assert!(s.any_implicit());
        assert_eq!(McpSettings::parse(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn a_bad_document_names_every_bad_field() {
        let errors = McpSettings::parse(&json!({
            "binding": "loose",
            "tool_names": 3,
            "colour": "red",
            "environments": {"Prod!": {}, "dev": {"binding": "nope", "x": 1}, "qa": []}
        }))
        .unwrap_err();
        let mut paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "binding",
                "colour",
                "environments.Prod!",
                "environments.dev.binding",
                "environments.dev.x",
                "environments.qa",
                "tool_names"
            ]
        );
        assert!(McpSettings::parse(&json!([])).is_err());
        assert_eq!(
            McpSettings::parse(&json!({})).unwrap(),
            McpSettings::default()
        );
    }
}
