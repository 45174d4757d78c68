//! Resources, resource templates and prompts behind the tenant's policy: what a principal may
//! list in an environment, and where a read or a get of it goes.
//!
//! One [`Exposure`] answers both questions from the same loaded parts (the policy active in the
//! environment, the catalogued items, the upstreams' names), so a principal can read exactly
//! what it can list: a resource is listed and readable when it is offered by exactly one
//! upstream and the first resource rule selecting it allows it; a template when every URI it
//! expands to is allowed ([`engine::policy::Policy::select_template`]); a URI no listed
//! resource names is readable only as the expansion of a listed template, and only when the
//! URI itself is allowed; a prompt when its rule allows it. Anything else — unknown, hidden,
//! denied, offered by two upstreams, held by drift triage — is refused alike (the caller sees
//! "not found").

use std::collections::HashMap;
use std::time::Duration;

use aperture_types::error::AppError;
use engine::policy::{Destination, ExposureContext, Mode, Policy, RedactionProfile, Rule};
use engine::receipt::{Decision, ReasonCode, ReceiptKind};
use serde_json::{Map, Value, json};

use crate::error::ServiceError;
use crate::journal::{self, Journal};
use crate::policies;
use crate::principal::Principal;
use crate::store::{
    self, Store,
    items::{ItemRow, Kind},
};
use crate::upstream::Upstreams;

/// A read or get's contents are capped at this many bytes (as JSON).
pub const MAX_CONTENT_BYTES: usize = 1024 * 1024;

/// How long an upstream may take to answer a read or a get.
const DEADLINE: Duration = Duration::from_secs(30);

/// What one principal may see of resources and prompts in one environment.
#[derive(Debug, Clone)]
pub struct Exposure {
    policy: Policy,
    policy_version: u64,
    ctx: ExposureContext,
    /// Upstream id → name (rules name upstreams by name).
    upstreams: HashMap<String, String>,
    resources: Vec<ItemRow>,
    templates: Vec<ItemRow>,
    prompts: Vec<ItemRow>,
}

/// Where a read or get goes, or why it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To this upstream, naming the item as it does.
    Allowed {
        upstream_id: String,
        /// The URI to forward (normalised) or the prompt's own name.
        raw: String,
        /// The deciding rule.
        rule_id: Option<String>,
        /// Its redaction profile's name (`safe` when none).
        redaction: String,
        /// Its cap on what comes back (`max_result_bytes`), if any.
        max_bytes: Option<i64>,
        /// What a prompt may ask the client while it is got (the rule's `client_requests`).
        client_requests: Vec<engine::policy::ClientRequest>,
    },
    /// Refused (answered as not found), with what decided it.
    Refused {
        /// `not_callable` (unknown, hidden, shared) or `policy_denied`.
        denied: bool,
        rule_id: Option<String>,
    },
}

impl Exposure {
    /// The parts, for `principal`'s actor in `environment` (which it must be allowed to use).
    pub async fn load(
        store: &Store,
        principal: &Principal,
        environment: &str,
    ) -> Result<Self, ServiceError> {
        principal.may_use(environment)?;
        let (policy, policy_version) =
            policies::effective(store, &principal.tenant_id, environment).await?;
        Self::of_actor(
            store,
            &principal.tenant_id,
            policy,
            policy_version,
            ExposureContext {
                environment: environment.to_owned(),
                actor: principal.actor_id.clone(),
                preset: None,
                entity: None,
            },
        )
        .await
    }

    /// The parts for `ctx` in `tenant_id` under `policy` (the caller chose it).
    async fn of_actor(
        store: &Store,
        tenant_id: &str,
        policy: Policy,
        policy_version: u64,
        ctx: ExposureContext,
    ) -> Result<Self, ServiceError> {
        let upstreams = store::upstreams::list(store, tenant_id)
            .await?
            .into_iter()
            .map(|u| (u.id, u.name))
            .collect();
        Ok(Self::from_parts(
            policy,
            policy_version,
            ctx,
            upstreams,
            store::items::list(store, tenant_id, Kind::Resource).await?,
            store::items::list(store, tenant_id, Kind::Template).await?,
            store::items::list(store, tenant_id, Kind::Prompt).await?,
        ))
    }

    /// What the session `ctx` describes may list under the policy active in its environment now
    /// (the sessions page: resources and prompts are decided per request, not pinned in a
    /// manifest): `(resources, templates, prompts)` as `resources/list`,
    /// `resources/templates/list` and `prompts/list` would answer, prompts under their canonical
    /// names.
    pub async fn listed_for(
        store: &Store,
        tenant_id: &str,
        ctx: ExposureContext,
    ) -> Result<(Vec<Value>, Vec<Value>, Vec<Value>), ServiceError> {
        let (policy, version) = policies::effective(store, tenant_id, &ctx.environment).await?;
        let e = Self::of_actor(store, tenant_id, policy, version, ctx).await?;
        Ok((e.resources(), e.templates(), e.prompts()))
    }

    /// The tenant's catalogued resources, templates and prompts as the policy preview takes
    /// them ([`engine::preview::CatalogItem`]): each with its upstream's name and whether it
    /// routes to exactly one upstream, which no policy changes.
    pub async fn catalog(
        store: &Store,
        tenant_id: &str,
    ) -> Result<Vec<engine::preview::CatalogItem>, ServiceError> {
        let ctx = ExposureContext {
            environment: String::new(),
            actor: String::new(),
            preset: None,
            entity: None,
        };
        let nothing = Policy {
            name: "catalog".into(),
            default_mode: Mode::Hide,
            rules: vec![],
            redaction_profiles: Default::default(),
        };
        Ok(Self::of_actor(store, tenant_id, nothing, 0, ctx)
            .await?
            .items())
    }

    /// Every catalogued item with whether it routes to exactly one upstream: a resource that
    /// one upstream offers and no other's template expands to, a template in conflict with
    /// none ([`Self::template_conflicted`]), a prompt one upstream offers. An item whose
    /// upstream is gone is left out.
    pub fn items(&self) -> Vec<engine::preview::CatalogItem> {
        use engine::preview::{CatalogItem, ItemKind};
        let mut out = Vec::new();
        let rows = [
            (ItemKind::Resource, &self.resources),
            (ItemKind::Template, &self.templates),
            (ItemKind::Prompt, &self.prompts),
        ];
        for (kind, rows) in rows {
            for row in rows {
                let Some(upstream) = self.upstreams.get(&row.upstream_id) else {
                    continue;
                };
                let routable = match kind {
                    ItemKind::Resource => self.candidates(&row.key).len() == 1,
                    ItemKind::Template => !self.template_conflicted(row),
                    ItemKind::Prompt => {
                        self.prompts.iter().filter(|r| r.key == row.key).count() == 1
                    }
                };
                out.push(CatalogItem {
                    kind,
                    upstream: upstream.clone(),
                    key: row.key.clone(),
                    routable,
                    held: row.drift.held.is_some(),
                });
            }
        }
        out
    }

    /// An exposure of given parts.
    pub fn from_parts(
        policy: Policy,
        policy_version: u64,
        ctx: ExposureContext,
        upstreams: HashMap<String, String>,
        resources: Vec<ItemRow>,
        templates: Vec<ItemRow>,
        prompts: Vec<ItemRow>,
    ) -> Self {
        Self {
            policy,
            policy_version,
            ctx,
            upstreams,
            resources,
            templates,
            prompts,
        }
    }

    /// The policy decided with, and its version.
    pub fn policy(&self) -> (&str, u64) {
        (&self.policy.name, self.policy_version)
    }

    /// The environment.
    pub fn environment(&self) -> &str {
        &self.ctx.environment
    }

    /// The redaction profile called `name` (the built-in `safe` when the policy lacks it).
    fn profile(&self, name: &str) -> RedactionProfile {
        self.policy
            .profile(name)
            .unwrap_or_else(RedactionProfile::safe)
    }

    fn resource_mode(&self, upstream: &str, uri: &str) -> Mode {
        self.policy.select_resource(upstream, uri, &self.ctx).mode
    }

    fn template_mode(&self, upstream: &str, template: &str) -> Mode {
        self.policy
            .select_template(upstream, template, &self.ctx)
            .mode
    }

    /// The resources the principal may list (and read), as the upstream lists them with the
    /// normalised URI: offered by one upstream, no other upstream's template expanding to it,
    /// and allowed.
    pub fn resources(&self) -> Vec<Value> {
        self.resources
            .iter()
            .filter(|row| {
                row.drift.held.is_none()
                    && self
                        .upstreams
                        .get(&row.upstream_id)
                        .is_some_and(|up| self.resource_mode(up, &row.key) == Mode::Allow)
                    && self.candidates(&row.key).len() == 1
            })
            .map(|row| listed(row, "uri"))
            .collect()
    }

    /// The upstreams a read of `uri` could go to: those offering it, and those with a template
    /// that expands to it. A read goes only where there is exactly one.
    fn candidates(&self, uri: &str) -> std::collections::BTreeSet<&str> {
        self.resources
            .iter()
            .filter(|r| r.key == uri)
            .chain(
                self.templates
                    .iter()
                    .filter(|t| engine::uri::template_matches(&t.key, uri)),
            )
            .map(|row| row.upstream_id.as_str())
            .collect()
    }

    /// The resource templates the principal may list (every expansion readable): offered by
    /// one upstream and in conflict with none ([`Self::template_conflicted`]).
    pub fn templates(&self) -> Vec<Value> {
        self.templates
            .iter()
            .filter(|row| self.template_listed(row))
            .map(|row| listed(row, "uriTemplate"))
            .collect()
    }

    /// Whether template `row` is listed: no conflict, and allowed.
    fn template_listed(&self, row: &ItemRow) -> bool {
        let Some(upstream) = self.upstreams.get(&row.upstream_id) else {
            return false;
        };
        row.drift.held.is_none()
            && !self.template_conflicted(row)
            && self.template_mode(upstream, &row.key) == Mode::Allow
    }

    /// Whether a URI `row` expands to could also be another upstream's: another upstream's
    /// template whose literal start is related to this one's (one begins the other: some URI
    /// may match both), or another upstream's resource it matches. Such a URI would route to
    /// two upstreams; the template is then neither listed nor used.
    fn template_conflicted(&self, row: &ItemRow) -> bool {
        let start = engine::uri::template_prefix(&row.key);
        self.templates.iter().any(|other| {
            let other_start = engine::uri::template_prefix(&other.key);
            other.upstream_id != row.upstream_id
                && (start.starts_with(other_start) || other_start.starts_with(start))
        }) || self.resources.iter().any(|r| {
            r.upstream_id != row.upstream_id && engine::uri::template_matches(&row.key, &r.key)
        })
    }

    /// The prompts the principal may list (and get), under their canonical names.
    pub fn prompts(&self) -> Vec<Value> {
        self.prompts_named(false)
    }

    /// The prompts the principal may list, each under the name it is advertised by
    /// ([`Exposure::advertised_prompts`]); with `upstream_names`, each also carries its
    /// canonical name in `_meta.canonicalName`.
    pub fn prompts_named(&self, upstream_names: bool) -> Vec<Value> {
        self.advertised_prompts(upstream_names)
            .into_iter()
            .map(|(row, name)| {
                let mut item = listed(row, "name");
                if let Value::Object(map) = &mut item {
                    map.insert("name".into(), Value::String(name));
                    if upstream_names {
                        let meta = map.entry("_meta").or_insert_with(|| json!({}));
                        if let Value::Object(meta) = meta {
                            meta.insert("canonicalName".into(), Value::String(row.key.clone()));
                        }
                    }
                }
                item
            })
            .collect()
    }

    /// The listed prompts with the name each is advertised by: with `upstream_names` (a tenant's
    /// `tool_names: "upstream"`, for `/mcp`), the upstream's own name where it is unique among
    /// them, does not start with `mcp__` and is no listed prompt's canonical name; otherwise,
    /// and always without, the canonical `mcp__<upstream>__<prompt>`.
    fn advertised_prompts(&self, upstream_names: bool) -> Vec<(&ItemRow, String)> {
        let listed: Vec<&ItemRow> = self
            .prompts
            .iter()
            .filter(|row| matches!(self.route_prompt(&row.key), Route::Allowed { .. }))
            .collect();
        listed
            .iter()
            .map(|row| {
                let own = &row.raw;
                let keeps_own = upstream_names
                    && !own.starts_with("mcp__")
                    && listed.iter().filter(|r| &r.raw == own).count() == 1
                    && !listed.iter().any(|r| &r.key == own);
                let name = if keeps_own { own } else { &row.key };
                (*row, name.clone())
            })
            .collect()
    }

    /// The canonical name of the prompt advertised as `name` ([`Exposure::advertised_prompts`]);
    /// `name` itself when no listed prompt is advertised by it.
    pub fn canonical_prompt(&self, name: &str, upstream_names: bool) -> String {
        if !upstream_names {
            return name.to_owned();
        }
        self.advertised_prompts(true)
            .into_iter()
            .find(|(_, advertised)| advertised == name)
            .map_or_else(|| name.to_owned(), |(row, _)| row.key.clone())
    }

    /// Where a read of `uri` (normalised) goes: to the one upstream that offers it or has a
    /// template expanding to it (none, or two: refused). The resource it names decides; else a
    /// listed template that expands to it does.
    pub fn route_read(&self, uri: &str) -> Route {
        let refused = Route::Refused {
            denied: false,
            rule_id: None,
        };
        let candidates = self.candidates(uri);
        let Some(upstream_id) = candidates.first().filter(|_| candidates.len() == 1) else {
            return refused;
        };
        let Some(upstream) = self.upstreams.get(*upstream_id) else {
            return refused;
        };
        let selection = self.policy.select_resource(upstream, uri, &self.ctx);
        if let Some(row) = self.resources.iter().find(|r| r.key == uri) {
            if row.drift.held.is_some() {
                // Held by drift triage: not listed, so not readable.
                return refused;
            }
            return self.route(row, uri, selection.mode, selection.rule);
        }
        let matching: Vec<&ItemRow> = self
            .templates
            .iter()
            .filter(|row| engine::uri::template_matches(&row.key, uri))
            .collect();
        let Some(first) = matching.first() else {
            return refused;
        };
        let mode = if matching.iter().any(|row| self.template_listed(row)) {
            selection.mode
        } else if selection.mode == Mode::Deny {
            Mode::Deny
        } else {
            Mode::Hide
        };
        self.route(first, uri, mode, selection.rule)
    }

    /// Where a get of prompt `name` (canonical) goes.
    pub fn route_prompt(&self, name: &str) -> Route {
        let mut offered = self.prompts.iter().filter(|r| r.key == name);
        let (Some(row), None) = (offered.next(), offered.next()) else {
            return Route::Refused {
                denied: false,
                rule_id: None,
            };
        };
        if !self.upstreams.contains_key(&row.upstream_id) || row.drift.held.is_some() {
            return Route::Refused {
                denied: false,
                rule_id: None,
            };
        }
        let selection = self.policy.select_prompt(name, &self.ctx);
        let raw = row.raw.clone();
        self.route(row, &raw, selection.mode, selection.rule)
    }

    fn route(&self, row: &ItemRow, raw: &str, mode: Mode, rule: Option<&Rule>) -> Route {
        let rule_id = rule.map(|r| r.id.clone());
        match mode {
            Mode::Allow => Route::Allowed {
                upstream_id: row.upstream_id.clone(),
                raw: raw.to_owned(),
                rule_id,
                redaction: rule
                    .and_then(|r| r.redaction.clone())
                    .unwrap_or_else(|| engine::policy::SAFE_PROFILE.to_owned()),
                max_bytes: rule
                    .and_then(|r| r.invocation.as_ref())
                    .and_then(|i| i.max_result_bytes),
                client_requests: rule.map(|r| r.client_requests.clone()).unwrap_or_default(),
            },
            Mode::Deny => Route::Refused {
                denied: true,
                rule_id,
            },
            _ => Route::Refused {
                denied: false,
                rule_id,
            },
        }
    }
}

/// What a read or a get came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The upstream's result, redacted as the deciding rule says.
    Found(Value),
    /// Refused, unknown or gone alike; the receipt of the refusal (for `error.data.receipt`).
    NotFound { receipt: Value },
    /// The upstream failed (or answered too much); the receipt says so.
    Failed { message: String, receipt: Value },
    /// The upstream's input round for the client (a prompt got over the 2026-07-28 link,
    /// [`Rounds`]): its `InputRequiredResult` as relayed, with what the surface seals under
    /// `_meta[crate::execution::ROUND_STATE]` and the round's receipt.
    InputRequired(Value),
}

/// A 2026-07-28 `prompts/get` from a client that can be asked: got over the gateway's
/// 2026-07-28 link when the upstream has one, with what the previous input round gathered; an
/// upstream's `input_required` answer is relayed ([`crate::relay::input_round`]) as
/// [`Answer::InputRequired`].
#[derive(Debug, Clone)]
pub struct Rounds {
    /// The client: what it declared it can answer.
    pub client: crate::relay::ClientRelay,
    /// The previous round's answers and the upstream's state (nothing on the first round).
    pub round: crate::relay::Round,
    /// The first round's decision receipt id, on a retry (the decision names it: `retry_of`).
    pub first: Option<String>,
    /// The level the client listens at.
    pub log_level: Option<crate::upstream::LogLevel>,
}

/// What is asked for.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// `resources/read` of a URI (as sent).
    Read { uri: &'a str },
    /// `prompts/get` of a prompt (its canonical name) with its arguments, and what it carries
    /// through input rounds ([`Rounds`]; 2026-07-28 clients that can be asked).
    Get {
        name: &'a str,
        arguments: Option<&'a Map<String, Value>>,
        rounds: Option<&'a Rounds>,
    },
}

/// `uri` as it is matched and forwarded ([`engine::uri::normalize`]); a spelling it refuses
/// is the caller's error (`uri`).
fn normalized(uri: &str) -> Result<String, ServiceError> {
    engine::uri::normalize(uri).map_err(|e| AppError::invalid_field("uri", e.to_string()).into())
}

/// The decision receipt of `principal` asking for `subject` under `exposure` (a denial,
/// `not_callable`, until the route says otherwise), and its disclosures: `subject`'s fields.
fn decision(
    exposure: &Exposure,
    principal: &Principal,
    subject: &Value,
) -> Result<(engine::receipt::Receipt, engine::receipt::Disclosures), ServiceError> {
    let (policy_id, policy_version) = exposure.policy();
    let mut r = journal::receipt(
        ReceiptKind::Decision,
        Decision::Deny,
        ReasonCode::NotCallable,
        &principal.tenant_id,
        &principal.actor_id,
        principal.principal_id(),
    );
    r.environment = Some(exposure.environment().to_owned());
    r.policy_id = Some(policy_id.to_owned());
    r.policy_version = Some(policy_version);
    let mut d = journal::disclosures();
    for (key, value) in subject.as_object().into_iter().flatten() {
        d.insert_extra(key, value.clone())
            .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    }
    Ok((r, d))
}

/// Journals a refusal (`policy_denied` when a rule denied it, else `not_callable`, as decided
/// by `rule_id`): not found, with the receipt.
async fn refused(
    journal: &Journal,
    (mut r, mut d): (engine::receipt::Receipt, engine::receipt::Disclosures),
    denied: bool,
    rule_id: Option<String>,
) -> Result<Answer, ServiceError> {
    if denied {
        r.reason = ReasonCode::PolicyDenied;
    }
    d.matched_rule_id = rule_id;
    let receipt = journal.append(r, &d).await?;
    let receipt = serde_json::to_value(&receipt).unwrap_or(Value::Null);
    Ok(Answer::NotFound { receipt })
}

/// `resources/read` or `prompts/get` of `principal` in `environment`: decided by the policy
/// ([`Exposure`]), journaled (the URI or prompt in the disclosures, whose digest the receipt
/// signs; nothing is asked of the upstream when the journal cannot record), forwarded to the one
/// upstream it routes to, capped at the rule's `max_result_bytes` or [`MAX_CONTENT_BYTES`], its
/// text passed through the deciding rule's redaction profile, and the outcome journaled. With
/// `upstream_names`, a prompt may be named as it is advertised
/// ([`Exposure::canonical_prompt`]).
pub async fn answer(
    store: &Store,
    journal: &Journal,
    upstreams: &Upstreams,
    principal: &Principal,
    environment: &str,
    asked: Asked<'_>,
    upstream_names: bool,
) -> Result<Answer, ServiceError> {
    let exposure = Exposure::load(store, principal, environment).await?;
    // A prompt asked for by the name it is advertised by: decided, journaled and forwarded as
    // the prompt it is (its canonical name).
    let canonical;
    let asked = match asked {
        Asked::Get {
            name,
            arguments,
            rounds,
        } => {
            canonical = exposure.canonical_prompt(name, upstream_names);
            Asked::Get {
                name: &canonical,
                arguments,
                rounds,
            }
        }
        read => read,
    };
    let (subject, route) = match asked {
        Asked::Read { uri } => {
            let uri = normalized(uri)?;
            let route = exposure.route_read(&uri);
            (json!({"resource": uri}), route)
        }
        Asked::Get { name, .. } => (json!({"prompt": name}), exposure.route_prompt(name)),
    };
    let (mut r, mut d) = decision(&exposure, principal, &subject)?;
    if let Asked::Get { name, .. } = asked {
        r.tool = Some(name.to_owned());
    }
    let rounds = match asked {
        Asked::Get { rounds, .. } => rounds,
        Asked::Read { .. } => None,
    };
    if let Some(first) = rounds.and_then(|r| r.first.as_ref()) {
        d.insert_extra("retry_of", Value::String(first.clone()))
            .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    }
    let (upstream_id, raw, redaction, cap, client_requests) = match route {
        Route::Refused { denied, rule_id } => {
            return refused(journal, (r, d), denied, rule_id).await;
        }
        Route::Allowed {
            upstream_id,
            raw,
            rule_id,
            redaction,
            max_bytes,
            client_requests,
        } => {
            r.decision = Decision::Allow;
            r.reason = ReasonCode::Ok;
            d.matched_rule_id = rule_id;
            d.insert_extra("upstream_id", Value::String(upstream_id.clone()))
                .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
            let cap = max_bytes
                .and_then(|m| usize::try_from(m).ok())
                .map_or(MAX_CONTENT_BYTES, |m| m.min(MAX_CONTENT_BYTES));
            (upstream_id, raw, redaction, cap, client_requests)
        }
    };
    let decided = journal.append(r.clone(), &d).await?;
    let profile = exposure.profile(&redaction);
    if let Some(rounds) = rounds.filter(|r| !r.round.asked.is_empty()) {
        crate::relay::record_answers(journal, &decided, &rounds.round).await;
    }
    let outcome = match rounds.and_then(|r| r.round.upstream_id.as_ref()) {
        // The upstream that asked no longer serves the prompt: its state goes nowhere else.
        Some(asker) if *asker != upstream_id => Err((
            ReasonCode::TargetDrift,
            "the upstream that asked for the client's input no longer serves the prompt".into(),
        )),
        _ => {
            forward(
                store,
                journal,
                upstreams,
                principal,
                (&upstream_id, &raw, cap),
                asked,
            )
            .await
        }
    };
    // A round for the client: relayed, or refused as a whole.
    let outcome = match outcome {
        Ok(result) if crate::execution::is_input_round(&result) => {
            let upstream = exposure
                .upstreams
                .get(&upstream_id)
                .cloned()
                .unwrap_or_default();
            let client = rounds.map(|r| &r.client);
            crate::relay::input_round(
                journal,
                client,
                &client_requests,
                &decided,
                &upstream,
                &raw,
                &result,
            )
            .await
            .map(|relayed| {
                crate::execution::relayed_round(relayed, &decided, &upstream, &upstream_id)
            })
        }
        other => other,
    };
    r.kind = ReceiptKind::Execution;
    r.receipt_id = crate::ids::new_ordered_id("rcp");
    d.insert_extra(
        "decision_receipt_id",
        Value::String(decided.receipt_id.clone()),
    )
    .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    match outcome {
        Ok(mut round) if crate::execution::is_input_round(&round) => {
            let keys: Vec<Value> = round["inputRequests"]
                .as_object()
                .map(|requests| requests.keys().cloned().map(Value::String).collect())
                .unwrap_or_default();
            d.insert_extra("input_required", Value::Array(keys))
                .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
            let receipt = journal.append(r, &d).await?;
            if let Some(Value::Object(meta)) = round.get_mut("_meta") {
                meta.insert(
                    "receipt".into(),
                    serde_json::to_value(&receipt).unwrap_or(Value::Null),
                );
            }
            Ok(Answer::InputRequired(round))
        }
        Ok(result) => {
            let receipt = journal.append(r, &d).await?;
            let mut result = redacted(result, &profile);
            if let Some(meta) = result.as_object_mut() {
                meta.insert(
                    "_meta".into(),
                    json!({"receipt": serde_json::to_value(&receipt).unwrap_or(Value::Null)}),
                );
            }
            Ok(Answer::Found(result))
        }
        Err((reason, message)) => {
            r.decision = Decision::Deny;
            r.reason = reason;
            d.upstream_error = Some(engine::redact::text_for(
                &message,
                &profile,
                Destination::Logs,
            ));
            let receipt = journal.append(r, &d).await?;
            let receipt = serde_json::to_value(&receipt).unwrap_or(Value::Null);
            Ok(Answer::Failed {
                message: short(reason).to_owned(),
                receipt,
            })
        }
    }
}

/// Subscriptions one holder (an MCP session, a listening stream) may keep at once.
pub const MAX_SUBSCRIPTIONS: i64 = 100;

/// The holder name of listening stream `stream_id` (2026-07-28 `subscriptions/listen`).
pub fn listen_holder(stream_id: &str) -> String {
    format!("lst_{stream_id}")
}

/// `resources/subscribe` of `uri` by `principal` in `environment`, for `holder` (its
/// `Mcp-Session-Id`, or a listening stream: [`listen_holder`]): decided like a read (what it
/// can read, it can subscribe to; anything else answers as not found) and journaled, the one
/// upstream that offers it asked to tell of its changes, and the subscription kept where every
/// node finds it. `Found({})` when subscribed. What reaches the holder later is decided again
/// at delivery ([`crate::live::resources`]).
pub async fn subscribe(
    store: &Store,
    journal: &Journal,
    upstreams: &Upstreams,
    principal: &Principal,
    environment: &str,
    uri: &str,
    holder: &str,
) -> Result<Answer, ServiceError> {
    let uri = normalized(uri)?;
    let exposure = Exposure::load(store, principal, environment).await?;
    let route = exposure.route_read(&uri);
    let subject = json!({"resource": uri, "subscribe": true});
    let (mut r, mut d) = decision(&exposure, principal, &subject)?;
    let (upstream_id, raw) = match route {
        Route::Refused { denied, rule_id } => {
            return refused(journal, (r, d), denied, rule_id).await;
        }
        Route::Allowed {
            upstream_id,
            raw,
            rule_id,
            ..
        } => {
            d.matched_rule_id = rule_id;
            d.insert_extra("upstream_id", Value::String(upstream_id.clone()))
                .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
            (upstream_id, raw)
        }
    };
    let subscribed =
        subscribe_upstream(store, journal, upstreams, principal, &upstream_id, &raw).await;
    let kept = match subscribed {
        Ok(()) => {
            let row = store::subscriptions::SubscriptionRow {
                holder: holder.to_owned(),
                uri: uri.clone(),
                tenant_id: principal.tenant_id.clone(),
                principal: principal.principal_id().to_owned(),
                environment: exposure.environment().to_owned(),
                upstream_id,
                raw_uri: raw,
            };
            store::subscriptions::add(store, &row, store::now_ms(), MAX_SUBSCRIPTIONS)
                .await
                .map_err(|e| ServiceError::Other(e.into()))?
                .then_some(())
                .ok_or((
                    ReasonCode::RateLimited,
                    format!("at most {MAX_SUBSCRIPTIONS} subscriptions at once"),
                ))
        }
        Err(e) => Err(e),
    };
    match kept {
        Ok(()) => {
            r.decision = Decision::Allow;
            r.reason = ReasonCode::Ok;
            journal.append(r, &d).await?;
            Ok(Answer::Found(json!({})))
        }
        Err((reason, message)) => {
            r.reason = reason;
            d.upstream_error = Some(message.clone());
            let receipt = journal.append(r, &d).await?;
            let receipt = serde_json::to_value(&receipt).unwrap_or(Value::Null);
            Ok(Answer::Failed { message, receipt })
        }
    }
}

/// Asks upstream `upstream_id` (this node's connection to it) to tell of `raw`'s changes.
async fn subscribe_upstream(
    store: &Store,
    journal: &Journal,
    upstreams: &Upstreams,
    principal: &Principal,
    upstream_id: &str,
    raw: &str,
) -> Result<(), (ReasonCode, String)> {
    let failed = |e: String| (ReasonCode::UpstreamError, e);
    let connection = connected(store, journal, upstreams, principal, upstream_id).await?;
    if !connection.offers().subscribe {
        return Err(failed(
            "the upstream that offers this resource does not offer subscriptions".into(),
        ));
    }
    connection
        .subscribe(raw)
        .await
        .map_err(|e| failed(e.to_string()))
}

/// This node's connection to `principal`'s upstream `upstream_id` (made if it has none); a
/// failure as its reason and text.
async fn connected(
    store: &Store,
    journal: &Journal,
    upstreams: &Upstreams,
    principal: &Principal,
    upstream_id: &str,
) -> Result<std::sync::Arc<crate::upstream::Connection>, (ReasonCode, String)> {
    let failed = |e: String| (ReasonCode::UpstreamError, e);
    let row = store::upstreams::find(store, &principal.tenant_id, upstream_id)
        .await
        .map_err(|e| failed(e.to_string()))?
        .ok_or_else(|| failed("the upstream is no longer registered".into()))?;
    upstreams
        .connection(store, journal, &row)
        .await
        .map_err(|e| failed(e.to_string()))
}

/// `resources/unsubscribe` of `uri` by `principal` for `holder`: whether it held that
/// subscription. The upstream is told when nobody else holds one to the same resource (a node
/// that still hears of it later stops it then: [`release_if_unheld`]).
pub async fn unsubscribe(
    store: &Store,
    upstreams: &Upstreams,
    principal: &Principal,
    uri: &str,
    holder: &str,
) -> Result<bool, ServiceError> {
    let uri = normalized(uri)?;
    let removed = store::subscriptions::remove(
        store,
        holder,
        &uri,
        &principal.tenant_id,
        principal.principal_id(),
    )
    .await
    .map_err(|e| ServiceError::Other(e.into()))?;
    let Some(row) = removed else {
        return Ok(false);
    };
    release_if_unheld(
        store,
        upstreams,
        &row.tenant_id,
        &row.upstream_id,
        &row.raw_uri,
    )
    .await;
    Ok(true)
}

/// Ends this node's subscription upstream to `raw_uri` of `upstream_id` in `tenant_id` when
/// nobody holds one any more.
pub async fn release_if_unheld(
    store: &Store,
    upstreams: &Upstreams,
    tenant_id: &str,
    upstream_id: &str,
    raw_uri: &str,
) {
    match store::subscriptions::to_resource(store, tenant_id, upstream_id, raw_uri).await {
        Ok(rows) if rows.is_empty() => release(upstreams, upstream_id, raw_uri).await,
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "reading who subscribed to a resource"),
    }
}

async fn release(upstreams: &Upstreams, upstream_id: &str, raw_uri: &str) {
    if let Some(connection) = upstreams.connected(upstream_id).await
        && let Err(e) = connection.unsubscribe(raw_uri).await
    {
        tracing::debug!(upstream = upstream_id, error = %e, "ending a resource subscription");
    }
}

/// `completion/complete` of `principal` in `environment` (`params` as sent: `ref`, `argument`,
/// `context?`): only for a prompt or a template it can list (else not found, as a refused
/// get: `Ok(None)`), asked of the one upstream that offers it under its own names; values
/// that would form a URI (a template's) are kept only where the URI is one the principal can
/// read.
pub async fn complete(
    store: &Store,
    journal: &Journal,
    upstreams: &Upstreams,
    principal: &Principal,
    environment: &str,
    params: &Value,
    upstream_names: bool,
) -> Result<Option<Value>, ServiceError> {
    let exposure = Exposure::load(store, principal, environment).await?;
    let invalid = |path: &str, why: &str| ServiceError::from(AppError::invalid_field(path, why));
    let reference = params
        .get("ref")
        .ok_or_else(|| invalid("ref", "required"))?;
    let argument = params
        .pointer("/argument/name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("argument.name", "a string"))?;
    let mut forwarded = params.clone();
    if let Some(map) = forwarded.as_object_mut() {
        map.remove("_meta");
    }
    let (upstream_id, template) = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => {
            let name = reference
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("ref.name", "a string"))?;
            let name = exposure.canonical_prompt(name, upstream_names);
            let Route::Allowed {
                upstream_id, raw, ..
            } = exposure.route_prompt(&name)
            else {
                return Ok(None);
            };
            forwarded["ref"]["name"] = Value::String(raw);
            (upstream_id, None)
        }
        Some("ref/resource") => {
            let uri = reference
                .get("uri")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("ref.uri", "a string"))?;
            let Some(row) = exposure
                .templates
                .iter()
                .find(|t| t.key == uri && exposure.template_listed(t))
            else {
                return Ok(None);
            };
            (row.upstream_id.clone(), Some(row.key.clone()))
        }
        _ => return Err(invalid("ref.type", "ref/prompt or ref/resource")),
    };
    let Some(row) = store::upstreams::find(store, &principal.tenant_id, &upstream_id).await? else {
        return Ok(None);
    };
    let connection = upstreams
        .connection(store, journal, &row)
        .await
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    let mut result = connection
        .complete(forwarded, DEADLINE)
        .await
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    if let Some(template) = template {
        let context: std::collections::BTreeMap<String, String> = params
            .pointer("/context/arguments")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let readable = |value: &str| {
            let mut vars = context.clone();
            vars.insert(argument.to_owned(), value.to_owned());
            engine::uri::expand(&template, &vars)
                .and_then(|uri| engine::uri::normalize(&uri).ok())
                .is_some_and(|uri| matches!(exposure.route_read(&uri), Route::Allowed { .. }))
        };
        let mut kept = None;
        if let Some(Value::Array(values)) = result.pointer_mut("/completion/values") {
            let before = values.len();
            values.retain(|v| v.as_str().is_some_and(readable));
            kept = (values.len() != before).then_some(values.len());
        }
        // Some were withheld: the totals the upstream gave would count them.
        if let Some(kept) = kept
            && let Some(completion) = result.get_mut("completion").and_then(Value::as_object_mut)
        {
            completion.insert("total".into(), json!(kept));
            completion.insert("hasMore".into(), json!(false));
        }
    }
    Ok(Some(result))
}

/// A refusal as the caller reads it (never the upstream's own text).
fn short(reason: ReasonCode) -> &'static str {
    match reason {
        ReasonCode::ResultTooLarge => "the upstream answered more than the gateway passes on",
        ReasonCode::ExecutionTimeout => "the upstream did not answer in time",
        _ => "the upstream failed",
    }
}

/// The read or get, asked of upstream `upstream_id`; a failure as its reason and text.
async fn forward(
    store: &Store,
    journal: &Journal,
    upstreams: &Upstreams,
    principal: &Principal,
    (upstream_id, raw, cap): (&str, &str, usize),
    asked: Asked<'_>,
) -> Result<Value, (ReasonCode, String)> {
    let connection = connected(store, journal, upstreams, principal, upstream_id).await?;
    let answered = match asked {
        Asked::Read { .. } => connection.read_resource(raw, DEADLINE).await,
        Asked::Get {
            arguments, rounds, ..
        } => {
            let round = rounds.map(|r| crate::upstream::StatelessRound {
                capabilities: r.client.abilities.capabilities(),
                log_level: r.log_level,
                responses: r.round.responses.clone(),
                state: r.round.state.clone(),
            });
            connection
                .get_prompt(raw, arguments.cloned(), DEADLINE, round)
                .await
        }
    };
    let result = answered.map_err(|e| {
        let reason = match e {
            crate::upstream::UpstreamError::Timeout { .. } => ReasonCode::ExecutionTimeout,
            _ => ReasonCode::UpstreamError,
        };
        (reason, e.to_string())
    })?;
    if serde_json::to_vec(&result).map_or(usize::MAX, |b| b.len()) > cap {
        return Err((ReasonCode::ResultTooLarge, format!("over {cap} bytes")));
    }
    Ok(result)
}

/// A read's `contents` or a get's `messages` with every text passed through `profile` for MCP
/// clients, and binary contents withheld where the profile does not let them reach MCP
/// clients.
fn redacted(mut result: Value, profile: &RedactionProfile) -> Value {
    let to_mcp = profile.destinations.contains(&Destination::Mcp);
    let redact_text = |v: &mut Value| {
        if let Some(Value::String(text)) = v.get_mut("text") {
            *text = engine::redact::text_for(text, profile, Destination::Mcp);
        }
        if !to_mcp
            && let Some(map) = v.as_object_mut()
            && map.remove("blob").is_some()
        {
            map.insert(
                "text".into(),
                Value::String("[withheld: this content may not be sent to mcp]".into()),
            );
        }
    };
    if let Some(Value::Array(contents)) = result.get_mut("contents") {
        contents.iter_mut().for_each(redact_text);
    }
    if let Some(Value::Array(messages)) = result.get_mut("messages") {
        for message in messages {
            if let Some(content) = message.get_mut("content") {
                redact_text(content);
                if let Some(Value::Object(resource)) = content.get_mut("resource") {
                    let mut inner = Value::Object(std::mem::take(resource));
                    redact_text(&mut inner);
                    if let Value::Object(back) = inner {
                        *resource = back;
                    }
                }
            }
        }
    }
    result
}

/// An item's listing: its definition as the upstream listed it, with `field` set to its key
/// (the normalised URI, the template, the canonical prompt name).
fn listed(row: &ItemRow, field: &str) -> Value {
    let mut item: Value = serde_json::from_str(&row.definition).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut item {
        map.insert(field.to_owned(), Value::String(row.key.clone()));
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn row(upstream: &str, kind: Kind, key: &str) -> ItemRow {
        ItemRow {
            upstream_id: format!("ups_{upstream}"),
            kind,
            key: key.to_owned(),
            raw: key.to_owned(),
            definition: json!({"name": key}).to_string(),
            definition_hash: String::new(),
            drift: Default::default(),
        }
    }

    fn exposure(rules: Value, resources: &[(&str, &str)], templates: &[(&str, &str)]) -> Exposure {
        let policy: Policy = serde_json::from_value(json!({"name": "p", "rules": rules})).unwrap();
        Exposure::from_parts(
            policy,
            1,
            ExposureContext {
                environment: "default".into(),
                actor: "bot".into(),
                preset: None,
                entity: None,
            },
            ["a", "b"]
                .iter()
                .map(|u| (format!("ups_{u}"), (*u).to_owned()))
                .collect(),
            resources
                .iter()
                .map(|(u, k)| row(u, Kind::Resource, k))
                .collect(),
            templates
                .iter()
                .map(|(u, k)| row(u, Kind::Template, k))
                .collect(),
            vec![
                row("a", Kind::Prompt, "mcp__a__greet"),
                row("a", Kind::Prompt, "mcp__a__secret"),
            ],
        )
    }

    fn keys(items: &[Value], field: &str) -> Vec<String> {
        items
            .iter()
            .map(|i| i[field].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn prompts_keep_their_upstream_names_only_where_those_are_unambiguous() {
        let prompt = |upstream: &str, raw: &str| ItemRow {
            raw: raw.to_owned(),
            ..row(upstream, Kind::Prompt, &format!("mcp__{upstream}__{raw}"))
        };
        let mut e = exposure(
            json!([{"id": "all", "prompt": "*", "mode": "allow"}]),
            &[],
            &[],
        );
        e.prompts = vec![
            prompt("a", "greet"),
            prompt("b", "greet"),
            prompt("a", "summarize"),
            prompt("b", "mcp__x"),
            // Its own name is another prompt's canonical name.
            prompt("b", "mcp__a__summarize"),
        ];
        let names = |upstream_names| keys(&e.prompts_named(upstream_names), "name");
        assert_eq!(
            names(true),
            [
                "mcp__a__greet",
                "mcp__b__greet",
                "summarize",
                "mcp__b__mcp__x",
                "mcp__b__mcp__a__summarize"
            ]
        );
        assert_eq!(
            names(false),
            [
                "mcp__a__greet",
                "mcp__b__greet",
                "mcp__a__summarize",
                "mcp__b__mcp__x",
                "mcp__b__mcp__a__summarize"
            ]
        );
        let listed = e.prompts_named(true);
        assert_eq!(listed[2]["_meta"]["canonicalName"], "mcp__a__summarize");
        assert!(e.prompts_named(false)[2].get("_meta").is_none());
        // Asked for by the name it is advertised by, it is the prompt it is.
        assert_eq!(e.canonical_prompt("summarize", true), "mcp__a__summarize");
        assert_eq!(e.canonical_prompt("summarize", false), "summarize");
        assert_eq!(e.canonical_prompt("greet", true), "greet");
        assert_eq!(
            e.canonical_prompt("mcp__a__summarize", true),
            "mcp__a__summarize"
        );
    }

    #[test]
    fn shared_hidden_and_denied_items_are_neither_listed_nor_read() {
        let e = exposure(
            json!([
                {"id": "no-secret", "resource": {"uri": "test://h/secret*"}, "mode": "deny"},
                {"id": "docs", "resource": {"uri": "test://h/*"}, "mode": "allow"},
                {"id": "greet", "prompt": "mcp__a__greet", "mode": "allow"}
            ]),
            &[
                ("a", "test://h/doc"),
                ("a", "test://h/secret"),
                ("a", "test://h/both"),
                ("b", "test://h/both"),
                ("a", "test://x/other"),
            ],
            &[("a", "test://h/pages/{p}")],
        );
        assert_eq!(keys(&e.resources(), "uri"), ["test://h/doc"]);
        assert_eq!(keys(&e.templates(), "uriTemplate"), ["test://h/pages/{p}"]);
        assert_eq!(keys(&e.prompts(), "name"), ["mcp__a__greet"]);
        assert!(
            matches!(e.route_read("test://h/doc"), Route::Allowed { ref upstream_id, .. } if upstream_id == "ups_a")
        );
        assert_eq!(
            e.route_read("test://h/secret"),
            Route::Refused {
                denied: true,
                rule_id: Some("no-secret".into())
            }
        );
        assert!(matches!(
            e.route_read("test://h/both"),
            Route::Refused { denied: false, .. }
        ));
        assert!(matches!(
            e.route_read("test://x/other"),
            Route::Refused { .. }
        ));
        assert!(matches!(
            e.route_read("test://h/pages/1"),
            Route::Allowed { .. }
        ));
        assert!(matches!(
            e.route_read("test://h/nothing"),
            Route::Refused { .. }
        ));
        assert!(
            matches!(e.route_prompt("mcp__a__greet"), Route::Allowed { ref raw, .. } if raw == "mcp__a__greet")
        );
        assert!(matches!(
            e.route_prompt("mcp__a__secret"),
            Route::Refused { .. }
        ));
        assert!(matches!(
            e.route_prompt("mcp__a__none"),
            Route::Refused { .. }
        ));
    }

    proptest! {
        /// Issue 47: what a principal can list is exactly what it can read: over generated
        /// policies, catalogues and URIs, a URI is readable if and only if it is a listed
        /// resource or an expansion of a listed template; a prompt can be got if and only if
        /// it is listed.
        #[test]
        fn what_can_be_listed_is_exactly_what_can_be_read(
            rules in proptest::collection::vec((0usize..3, "[ab]{0,2}", any::<bool>(), 0usize..3, 0usize..3), 0..6),
            resources in proptest::collection::vec((0usize..2, "[ab]{1,3}"), 0..6),
            templates in proptest::collection::vec((0usize..2, "[ab]{0,2}"), 0..3),
            probes in proptest::collection::vec("[ab]{1,4}", 1..8),
        ) {
            let modes = ["allow", "hide", "deny"];
            let upstreams = [None, Some("a"), Some("b")];
            let rules: Vec<Value> = rules.iter().enumerate().map(|(i, (up, text, prefix, m, kind))| {
                if *kind == 2 {
                    let name = format!("mcp__a__{text}{}", if *prefix { "*" } else { "" });
                    return json!({"id": format!("r{i}"), "prompt": name, "mode": modes[*m]});
                }
                let mut sel = json!({"uri": format!("test://h/{text}{}", if *prefix { "*" } else { "" })});
                if let Some(u) = upstreams[*up] {
                    sel["upstream"] = json!(u);
                }
                json!({"id": format!("r{i}"), "resource": sel, "mode": modes[*m]})
            }).collect();
            let names = ["a", "b"];
            let resources: Vec<(&str, String)> = resources.iter().map(|(u, k)| (names[*u], format!("test://h/{k}"))).collect();
            let templates: Vec<(&str, String)> = templates.iter().map(|(u, k)| (names[*u], format!("test://h/{k}{{id}}"))).collect();
            let r: Vec<(&str, &str)> = resources.iter().map(|(u, k)| (*u, k.as_str())).collect();
            let t: Vec<(&str, &str)> = templates.iter().map(|(u, k)| (*u, k.as_str())).collect();
            let e = exposure(Value::Array(rules), &r, &t);
            let listed = keys(&e.resources(), "uri");
            let listed_templates = keys(&e.templates(), "uriTemplate");
            let mut universe: Vec<String> = probes.iter().map(|p| format!("test://h/{p}")).collect();
            universe.extend(resources.iter().map(|(_, k)| k.clone()));
            for uri in universe {
                let readable = matches!(e.route_read(&uri), Route::Allowed { .. });
                let by_template = listed_templates.iter().any(|t| engine::uri::template_matches(t, &uri));
                let shown = listed.contains(&uri) || by_template;
                prop_assert_eq!(readable, shown, "{} (listed {:?}, templates {:?})", uri, listed, listed_templates);
            }
            let prompts = keys(&e.prompts(), "name");
            for name in ["mcp__a__greet", "mcp__a__secret", "mcp__a__x"] {
                let got = matches!(e.route_prompt(name), Route::Allowed { .. });
                prop_assert_eq!(got, prompts.iter().any(|p| p == name), "{}", name);
            }
        }
    }

    /// Issue 47: a resource, template or prompt whose change drift triage holds is neither
    /// listed nor readable, and the preview's catalog says it is held.
    #[test]
    fn a_held_item_is_neither_listed_nor_readable() {
        let held = || crate::store::items::ItemDrift {
            accepted: Some("{}".into()),
            held: Some(crate::store::items::Held {
                changes: vec![engine::drift::DriftClass::HiddenCharacters],
                since: 1,
                kept_hash: None,
            }),
        };
        let mut e = exposure(
            json!([{"id": "docs", "resource": {"uri": "docs://*"}, "mode": "allow"},
                   {"id": "all", "prompt": "*", "mode": "allow"}]),
            &[("a", "docs://readme"), ("a", "docs://guide")],
            &[("a", "docs://pages/{page}")],
        );
        assert_eq!(
            keys(&e.resources(), "uri"),
            ["docs://readme", "docs://guide"]
        );
        assert!(matches!(
            e.route_read("docs://readme"),
            Route::Allowed { .. }
        ));
        assert!(matches!(
            e.route_read("docs://pages/x"),
            Route::Allowed { .. }
        ));
        e.resources[0].drift = held();
        e.templates[0].drift = held();
        e.prompts[0].drift = held();
        assert_eq!(keys(&e.resources(), "uri"), ["docs://guide"]);
        assert!(e.templates().is_empty());
        assert_eq!(keys(&e.prompts(), "name"), ["mcp__a__secret"]);
        for uri in ["docs://readme", "docs://pages/x"] {
            assert!(
                matches!(e.route_read(uri), Route::Refused { denied: false, .. }),
                "{uri}"
            );
        }
        assert!(matches!(
            e.route_prompt("mcp__a__greet"),
            Route::Refused { denied: false, .. }
        ));
        let catalog = e.items();
        let readme = catalog.iter().find(|i| i.key == "docs://readme").unwrap();
        assert!(readme.held && readme.routable);
        assert!(
            !catalog
                .iter()
                .find(|i| i.key == "docs://guide")
                .unwrap()
                .held
        );
    }
}
