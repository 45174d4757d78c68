//! Policy impact replay (`POST /policies:replay`): what a draft policy would have changed over
//! the tenant's recorded tool calls.
//!
//! Every decision receipt of a call in the window (the journal, read in pages of
//! [`PAGE`] by position through the pool, never the writer) names its tool, tool version,
//! actor, environment and session, and the mode its tool had; the session gives the preset and
//! entity. The draft is run through the same engine a grant runs ([`engine::manifest::build`],
//! once per distinct context, over the current catalog) and the tool's mode under the draft is
//! compared with the recorded one. Where the draft narrows a tool's arguments (allowed values,
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

use app::error::AppError;
use engine::catalog::CatalogTool;
use engine::manifest::{self, Manifest};
use engine::narrow::ValidatorCache;
use engine::policy::{ExposureContext, Policy};
use engine::scope;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Principal;
use crate::error::ServiceError;
use crate::store::{self, Store};

/// Receipts read per page.
pub const PAGE: i64 = 2_000;
/// Example receipt ids per change.
pub const EXAMPLES: usize = 3;
/// The window when the request names none: the last seven days.
pub const DEFAULT_WINDOW_MS: i64 = 7 * 24 * 3_600 * 1_000;
/// The longest window a replay covers.
pub const MAX_WINDOW_MS: i64 = 92 * 24 * 3_600 * 1_000;

/// `POST /policies:replay`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// The draft policy document.
    pub policy: Value,
    /// RFC 3339, inclusive; `until` minus seven days when absent.
    #[serde(default)]
    pub since: Option<String>,
    /// RFC 3339, exclusive; now when absent.
    #[serde(default)]
    pub until: Option<String>,
}

/// Calls of one tool by one actor that would move from one mode to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Canonical tool name.
    pub tool: String,
    /// Actor of the calls.
    pub actor: String,
    /// The mode the calls were decided under (or `deny` when their arguments were refused).
    pub from: String,
    /// The mode the draft gives the tool (or `deny` when it would refuse their arguments).
    pub to: String,
    /// How many calls.
    pub count: u64,
    /// Receipt ids of some of them.
    pub examples: Vec<String>,
    /// The tool's definition changed since (some of) these calls: the draft was applied to
    /// its current descriptor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub definition_changed: bool,
}

/// What the replay found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Calls replayed.
    pub replayed: u64,
    /// Calls that could not be: argument-dependent without disclosed arguments, or of a tool
    /// the catalog no longer has.
    pub not_replayable: u64,
    /// Calls that would move, by tool, actor, from and to; most calls first.
    pub changes: Vec<Change>,
    /// The window, RFC 3339.
    pub since: String,
    /// RFC 3339.
    pub until: String,
}

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
                .map(|e| app::error::FieldError {
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
    let catalog: Vec<CatalogTool> =
        store::catalog::list_fingerprinted(store, &principal.tenant_id).await?;
    let mut replay = Replayer {
        draft,
        catalog,
        validators: ValidatorCache::new(),
        manifests: HashMap::new(),
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
        for (_, receipt, disclosures) in page {
            replay
                .one(store, &principal.tenant_id, &receipt, &disclosures)
                .await?;
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

struct Replayer {
    draft: Policy,
    catalog: Vec<CatalogTool>,
    validators: ValidatorCache,
    manifests: HashMap<Context, Manifest>,
    /// Session → (preset, entity); `None` when the session is gone.
    sessions: HashMap<String, Option<Hints>>,
    /// Manifest → its tools' definition hashes (what the calls were granted).
    granted: HashMap<String, HashMap<String, String>>,
    changes: BTreeMap<(String, String, String, String), Change>,
    replayed: u64,
    not_replayable: u64,
}

impl Replayer {
    async fn one(
        &mut self,
        store: &Store,
        tenant: &str,
        receipt: &str,
        disclosures: &str,
    ) -> Result<(), ServiceError> {
        let Ok(recorded) = serde_json::from_str::<Recorded>(receipt) else {
            return Ok(());
        };
        let Some(tool) = recorded.tool.clone() else {
            return Ok(());
        };
        let (preset, entity) = match &recorded.session_id {
            Some(id) => self.session(store, tenant, id).await?.unwrap_or_default(),
            None => (None, None),
        };
        let ctx: Context = (
            recorded
                .environment
                .clone()
                .unwrap_or_else(|| crate::policies::DEFAULT_ENVIRONMENT.to_owned()),
            recorded.actor_id.clone(),
            preset,
            entity,
        );
        let granted = match &recorded.manifest_id {
            Some(id) => self.granted_definition(store, tenant, id, &tool).await?,
            None => None,
        };
        let (to, definition_changed) = {
            let Some(outcome) = self.outcome(ctx, &tool, granted.as_deref(), disclosures) else {
                // The catalog no longer has the tool, or the draft's answer depends on
                // arguments the journal no longer holds.
                self.not_replayable += 1;
                return Ok(());
            };
            outcome
        };
        let from = if recorded.decision == "deny" && recorded.reason == "arguments_invalid" {
            "deny".to_owned()
        } else {
            recorded.mode.clone().unwrap_or_else(|| "deny".into())
        };
        self.replayed += 1;
        if from == to {
            return Ok(());
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
        Ok(())
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
            manifests,
            ..
        } = self;
        let manifest: &Manifest = manifests.entry(ctx).or_insert_with_key(|ctx| {
            let context = ExposureContext {
                environment: ctx.0.clone(),
                actor: ctx.1.clone(),
                preset: ctx.2.clone(),
                entity: ctx.3.clone(),
            };
            manifest::build(catalog.iter().cloned(), draft, 0, &context, validators)
        });
        let entry = manifest.entry(tool)?;
        let changed = granted.is_some_and(|g| g != entry.definition_hash);
        let mode = entry.mode.as_str().to_owned();
        let executes = !matches!(mode.as_str(), "hide" | "deny");
        let narrows = entry.invocation.as_ref().is_some_and(|i| {
            !i.allowed_values.is_empty() || i.schema_overlay.is_some() || i.requires_idempotency
        });
        if !executes || !narrows {
            return Some((mode, changed));
        }
        let arguments = serde_json::from_str::<Disclosed>(disclosures)
            .ok()
            .and_then(|d| d.effective_arguments);
        let Some(Value::Object(mut arguments)) = arguments else {
            return None;
        };
        // What the agent would send: the draft fixes its own arguments.
        if let Some(narrowed) = &entry.narrowed {
            for key in narrowed.fixed_arguments.keys() {
                arguments.remove(key);
            }
        }
        let valid = validators
            .validate(
                &entry.schema_hash,
                &entry.advertised.input_schema,
                &Value::Object(arguments),
            )
            .is_ok();
        Some((if valid { mode } else { "deny".into() }, changed))
    }

    /// The definition hash `tool` had in manifest `id`, read once per manifest.
    async fn granted_definition(
        &mut self,
        store: &Store,
        tenant: &str,
        id: &str,
        tool: &str,
    ) -> Result<Option<String>, ServiceError> {
        if !self.granted.contains_key(id) {
            let hashes = match store::exposure::find_manifest(store, tenant, id).await? {
                Some(row) => serde_json::from_str::<Manifest>(&row.manifest)
                    .map(|m| {
                        m.tools
                            .into_iter()
                            .map(|t| (t.name, t.definition_hash))
                            .collect()
                    })
                    .unwrap_or_default(),
                None => HashMap::new(),
            };
            self.granted.insert(id.to_owned(), hashes);
        }
        Ok(self.granted.get(id).and_then(|h| h.get(tool)).cloned())
    }

    async fn session(
        &mut self,
        store: &Store,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Hints>, ServiceError> {
        if let Some(known) = self.sessions.get(id) {
            return Ok(known.clone());
        }
        let found = store::exposure::find_session(store, tenant, id)
            .await?
            .map(|s| (s.preset, s.entity));
        self.sessions.insert(id.to_owned(), found.clone());
        Ok(found)
    }
}
