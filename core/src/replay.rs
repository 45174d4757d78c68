//! Policy impact replay (`POST /policies:replay`): what a draft policy would have changed over
//! the tenant's recorded tool calls.
//!
//! Every decision receipt of a call in the window (the journal, read in pages of
//! [`PAGE`] by position through the pool, never the writer) names its tool, actor,
//! environment, session and manifest, and the mode its tool had; the sessions give the preset
//! and entity, the signed manifests the definition the call was granted (both read once per
//! page). The draft is run through the same engine a grant runs ([`engine::manifest::build`],
//! once per tool and context, on the tool's current descriptor) and the tool's mode under the
//! draft is compared with the recorded one. Where the draft narrows a tool's arguments (allowed values,
//! a schema overlay, a required idempotency key), whether a call would pass depends on its
//! arguments: the call is checked against the narrowed schema when its disclosures still hold
//! its effective arguments, and counted as not replayable when they do not (purged, or a tool
//! the catalog no longer has). Nothing is guessed.
//!
//! The answer groups calls that would move by tool, actor and the two modes (`from`, `to`:
//! modes, or `deny` for a call whose arguments the draft refuses), with up to [`EXAMPLES`]
//! receipt ids each, and marks the groups whose tool's definition changed since the calls were
//! made (its definition hash is not the one the call's signed manifest granted).

use std::collections::{BTreeMap, HashMap};

use aperture_types::error::AppError;
use engine::catalog::CatalogTool;
use engine::manifest::{self, Manifest};
use engine::narrow::ValidatorCache;
use engine::policy::{ExposureContext, Policy};
use engine::scope;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ServiceError;
use crate::principal::Principal;
use crate::store::{self, Store};

/// Receipts read per page.
pub const PAGE: i64 = 2_000;
/// Example receipt ids per change.
pub const EXAMPLES: usize = 3;
/// The window when the request names none: the last seven days.
pub const DEFAULT_WINDOW_MS: i64 = 7 * 24 * 3_600 * 1_000;
/// The longest window a replay covers.
pub const MAX_WINDOW_MS: i64 = 92 * 24 * 3_600 * 1_000;

pub use aperture_types::dto::{PolicyChange as Change, ReplayReport, ReplayRequest};

/// The members of a decision receipt the replay reads.
#[derive(Debug, Deserialize)]
struct Recorded {
    receipt_id: String,
    tool: Option<String>,
    actor_id: String,
    #[serde(default)]
    environment: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    manifest_id: Option<String>,
    #[serde(default)]
    mode: Option<String>,
    decision: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
struct Disclosed {
    #[serde(default)]
    effective_arguments: Option<Value>,
}

/// Replays `request.policy` over the tenant's decision receipts in the window.
pub async fn replay(
    store: &Store,
    principal: &Principal,
    request: ReplayRequest,
) -> Result<ReplayReport, ServiceError> {
    principal.require(scope::READ)?;
    let mut document = request.policy;
    // Like a preview, a draft may leave its name to the id it will be saved under.
    if let Value::Object(map) = &mut document {
        map.entry("name")
            .or_insert_with(|| Value::String("draft".into()));
    }
    let draft = engine::validate::parse_policy(&document).map_err(|errors| {
        AppError::invalid(
            errors
                .into_iter()
                .map(|e| aperture_types::error::FieldError {
                    path: if e.path.is_empty() {
                        "policy".into()
                    } else {
                        format!("policy.{}", e.path)
                    },
                    message: e.message,
                })
                .collect(),
        )
    })?;
    let now = store::now_ms();
    let until = match &request.until {
        Some(t) => store::parse_rfc3339(t)
            .ok_or_else(|| AppError::invalid_field("until", "an RFC 3339 time"))?,
        None => now,
    };
    let since = match &request.since {
        Some(t) => store::parse_rfc3339(t)
            .ok_or_else(|| AppError::invalid_field("since", "an RFC 3339 time"))?,
        None => until - DEFAULT_WINDOW_MS,
    };
    if since >= until {
        return Err(AppError::invalid_field("since", "before until").into());
    }
    if until - since > MAX_WINDOW_MS {
        return Err(AppError::invalid_field("since", "at most 92 days before until").into());
    }
    let catalog: HashMap<String, CatalogTool> =
        store::catalog::list_fingerprinted(store, &principal.tenant_id)
            .await?
            .into_iter()
            .map(|t| (t.tool.name.clone(), t))
            .collect();
    let mut replay = Replayer {
        draft,
        catalog,
        validators: ValidatorCache::new(),
        applied: HashMap::new(),
        sessions: HashMap::new(),
        granted: HashMap::new(),
        changes: BTreeMap::new(),
        replayed: 0,
        not_replayable: 0,
    };
    let mut after = 0;
    loop {
        let page =
            store::journal::decision_page(store, &principal.tenant_id, since, until, after, PAGE)
                .await?;
        let Some((last, _, _)) = page.last() else {
            break;
        };
        after = *last;
        let full = i64::try_from(page.len()).unwrap_or(0) == PAGE;
        let recorded: Vec<(Recorded, String)> = page
            .into_iter()
            .filter_map(|(_, receipt, disclosures)| {
                serde_json::from_str::<Recorded>(&receipt)
                    .ok()
                    .filter(|r| r.tool.is_some())
                    // A confined reader replays its environments' calls only (a decision of no
                    // environment reached no session, and is not replayable anyway).
                    .filter(|r| {
                        principal.confined_to().is_none()
                            || r.environment.as_deref().is_some_and(|e| principal.sees(e))
                    })
                    .map(|r| (r, disclosures))
            })
            .collect();
        replay
            .look_up(store, &principal.tenant_id, &recorded)
            .await?;
        for (r, disclosures) in recorded {
            replay.one(r, &disclosures);
        }
        if !full {
            break;
        }
    }
    let mut changes: Vec<Change> = replay.changes.into_values().collect();
    changes.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.tool.cmp(&b.tool))
            .then_with(|| a.actor.cmp(&b.actor))
    });
    Ok(ReplayReport {
        replayed: replay.replayed,
        not_replayable: replay.not_replayable,
        changes,
        since: store::rfc3339(since),
        until: store::rfc3339(until),
    })
}

/// What a context of the draft grants: the manifest the engine builds.
type Context = (String, String, Option<String>, Option<String>);

/// A session's preset and entity.
type Hints = (Option<String>, Option<String>);

/// What the draft does with one tool in one context, as the engine's manifest entry says.
struct Applied {
    /// The entry's mode.
    mode: &'static str,
    /// The tool's definition hash now.
    definition_hash: String,
    /// For a mode that runs the tool under narrowed arguments: how to check a call's.
    check: Option<Check>,
}

struct Check {
    schema_hash: String,
    schema: Value,
    /// Arguments the draft fixes (the agent does not send them).
    fixed: Vec<String>,
}

struct Replayer {
    draft: Policy,
    catalog: HashMap<String, CatalogTool>,
    validators: ValidatorCache,
    /// (tool, context) → what the draft does; `None` when the catalog has no such tool.
    applied: HashMap<(String, Context), Option<Applied>>,
    /// Session → its preset and entity (`(None, None)` when the session is gone).
    sessions: HashMap<String, Hints>,
    /// Manifest → its tools' definition hashes (what the calls were granted).
    granted: HashMap<String, HashMap<String, String>>,
    changes: BTreeMap<(String, String, String, String), Change>,
    replayed: u64,
    not_replayable: u64,
}

/// The members of a stored manifest the replay reads.
#[derive(Deserialize)]
struct GrantedTools {
    tools: Vec<GrantedTool>,
}

#[derive(Deserialize)]
struct GrantedTool {
    name: String,
    definition_hash: String,
}

impl Replayer {
    /// Reads the sessions and manifests a page names that are not known yet, in one query
    /// each (per 500).
    async fn look_up(
        &mut self,
        store: &Store,
        tenant: &str,
        page: &[(Recorded, String)],
    ) -> Result<(), ServiceError> {
        let mut sessions: Vec<String> = page
            .iter()
            .filter_map(|(r, _)| r.session_id.clone())
            .filter(|id| !self.sessions.contains_key(id))
            .collect();
        sessions.sort();
        sessions.dedup();
        if !sessions.is_empty() {
            for id in &sessions {
                self.sessions.insert(id.clone(), (None, None));
            }
            for (id, preset, entity) in
                store::exposure::session_hints(store, tenant, &sessions).await?
            {
                self.sessions.insert(id, (preset, entity));
            }
        }
        let mut manifests: Vec<String> = page
            .iter()
            .filter_map(|(r, _)| r.manifest_id.clone())
            .filter(|id| !self.granted.contains_key(id))
            .collect();
        manifests.sort();
        manifests.dedup();
        if !manifests.is_empty() {
            for id in &manifests {
                self.granted.insert(id.clone(), HashMap::new());
            }
            for (id, body) in store::exposure::manifest_bodies(store, tenant, &manifests).await? {
                if let Ok(granted) = serde_json::from_str::<GrantedTools>(&body) {
                    self.granted.insert(
                        id,
                        granted
                            .tools
                            .into_iter()
                            .map(|t| (t.name, t.definition_hash))
                            .collect(),
                    );
                }
            }
        }
        Ok(())
    }

    fn one(&mut self, recorded: Recorded, disclosures: &str) {
        let Some(tool) = recorded.tool.clone() else {
            return;
        };
        let (preset, entity) = recorded
            .session_id
            .as_ref()
            .and_then(|id| self.sessions.get(id).cloned())
            .unwrap_or_default();
        let ctx: Context = (
            recorded
                .environment
                .clone()
                .unwrap_or_else(|| engine::environment::DEFAULT_ENVIRONMENT.to_owned()),
            recorded.actor_id.clone(),
            preset,
            entity,
        );
        let granted = recorded
            .manifest_id
            .as_ref()
            .and_then(|id| self.granted.get(id))
            .and_then(|tools| tools.get(&tool))
            .cloned();
        let Some((to, definition_changed)) =
            self.outcome(ctx, &tool, granted.as_deref(), disclosures)
        else {
            // The catalog no longer has the tool, or the draft's answer depends on arguments
            // the journal no longer holds.
            self.not_replayable += 1;
            return;
        };
        let from = if recorded.decision == "deny" && recorded.reason == "arguments_invalid" {
            "deny".to_owned()
        } else {
            recorded.mode.clone().unwrap_or_else(|| "deny".into())
        };
        self.replayed += 1;
        if from == to {
            return;
        }
        let change = self
            .changes
            .entry((
                tool.clone(),
                recorded.actor_id.clone(),
                from.clone(),
                to.clone(),
            ))
            .or_insert_with(|| Change {
                tool,
                actor: recorded.actor_id,
                from,
                to,
                count: 0,
                examples: Vec::new(),
                definition_changed: false,
            });
        change.count += 1;
        change.definition_changed |= definition_changed;
        if change.examples.len() < EXAMPLES {
            change.examples.push(recorded.receipt_id);
        }
    }

    /// The draft's mode for `tool` in `ctx` (`deny` when it would refuse the disclosed
    /// arguments) and whether the tool's definition is no longer `granted` (the definition hash
    /// the call's manifest had); `None` when it cannot be told.
    fn outcome(
        &mut self,
        ctx: Context,
        tool: &str,
        granted: Option<&str>,
        disclosures: &str,
    ) -> Option<(String, bool)> {
        let Replayer {
            draft,
            catalog,
            validators,
            applied,
            ..
        } = self;
        let applied = applied
            .entry((tool.to_owned(), ctx))
            .or_insert_with_key(|(tool, ctx)| {
                let found = catalog.get(tool)?;
                let context = ExposureContext {
                    environment: ctx.0.clone(),
                    actor: ctx.1.clone(),
                    preset: ctx.2.clone(),
                    entity: ctx.3.clone(),
                };
                // The same engine a grant runs, for this tool in this context.
                let manifest: Manifest =
                    manifest::build([found.clone()], draft, 0, &context, validators);
                let entry = manifest.tools.into_iter().next()?;
                let mode = entry.mode.as_str();
                let executes = !matches!(mode, "hide" | "deny");
                let narrows = entry.invocation.as_ref().is_some_and(|i| {
                    !i.allowed_values.is_empty()
                        || i.schema_overlay.is_some()
                        || i.requires_idempotency
                });
                let check = (executes && narrows).then(|| Check {
                    schema_hash: entry.schema_hash.clone(),
                    schema: entry.advertised.input_schema.clone(),
                    fixed: entry
                        .narrowed
                        .as_ref()
                        .map(|n| n.fixed_arguments.keys().cloned().collect())
                        .unwrap_or_default(),
                });
                Some(Applied {
                    mode,
                    definition_hash: entry.definition_hash,
                    check,
                })
            })
            .as_ref()?;
        let changed = granted.is_some_and(|g| g != applied.definition_hash);
        let Some(check) = &applied.check else {
            return Some((applied.mode.to_owned(), changed));
        };
        let arguments = serde_json::from_str::<Disclosed>(disclosures)
            .ok()
            .and_then(|d| d.effective_arguments);
        let Some(Value::Object(mut arguments)) = arguments else {
            return None;
        };
        // What the agent would send: the draft fixes its own arguments.
        for key in &check.fixed {
            arguments.remove(key);
        }
        let valid = validators
            .validate(&check.schema_hash, &check.schema, &Value::Object(arguments))
            .is_ok();
        let to = if valid { applied.mode } else { "deny" };
        Some((to.to_owned(), changed))
    }
}
