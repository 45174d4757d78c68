//! The tool catalog as a service: `GET /tools`, the admin's `PUT /tools/{name}`, and drift
//! triage (CONTRACT §14): the tenant's `GET`/`PUT /catalog/drift`, what a sync holds
//! ([`triage`]), and the admin's `POST /tools/{name}:accept` and `:keep-held`; the same for
//! resources, templates and prompts ([`triage_item`], `GET /catalog/items`,
//! `POST /catalog/items:accept` and `:keep-held`).

use engine::descriptor::ToolDescriptor;
use engine::drift::{self, Definition, DriftClass, Settings};
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use serde_json::{Value, json};

use aperture_types::dto::{
    CatalogItemView, CatalogItemsView, DescribeToolRequest, DriftDecisionRequest,
    DriftDecisionView, HeldView, ItemChangeRequest, ItemDecisionView, ToolRowView,
};
use aperture_types::error::{AppError, ErrorCode, FieldError};

use crate::error::ServiceError;
use crate::journal::Journal;
use crate::principal::Principal;
use crate::store::catalog::{Drift, Held, Revised};
use crate::store::items::{ItemDrift, ItemRow, Kind};
use crate::store::{self, Store};

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `GET /tools` (read): every tool, held ones with their triage.
pub async fn list(store: &Store, principal: &Principal) -> Result<Vec<ToolRowView>, ServiceError> {
    principal.require(scope::READ)?;
    Ok(store::catalog::list_revised(store, &principal.tenant_id)
        .await?
        .into_iter()
        .map(row_view)
        .collect())
}

/// A catalog row as `GET /tools` and the Tools page show it.
pub fn row_view(row: Revised) -> ToolRowView {
    let definition = Definition::from(&row.tool);
    let held = row.drift.held.as_ref().map(|held| {
        let accepted = row.drift.accepted_or(&row.tool);
        HeldView {
            changes: names(&held.changes),
            since: store::rfc3339(held.since),
            definition_hash: row.tool.definition_hash(),
            accepted_definition_hash: accepted.applied_to(&row.tool).definition_hash(),
            accepted: accepted.to_stored(),
            kept: held.kept_hash.is_some(),
        }
    });
    ToolRowView {
        updated_at: store::rfc3339(row.updated_at),
        definition_hash: row.tool.definition_hash(),
        flags: names(&drift::flags(&definition)),
        held,
        tool: row.tool,
    }
}

fn names(classes: &[DriftClass]) -> Vec<String> {
    classes.iter().map(|c| c.as_str().to_owned()).collect()
}

/// The tenant's drift triage (the defaults when it never set one).
pub async fn settings_of(store: &Store, tenant_id: &str) -> Result<Settings, ServiceError> {
    Ok(
        match store::catalog::drift_settings(store, tenant_id).await? {
            None => Settings::default(),
            // Written only after validation; a document this build cannot read (a class renamed
            // by a later build) falls back to holding what it names wrongly, never to accepting.
            Some((document, _, _)) => Settings::from_json(&document).unwrap_or_else(|_| {
                let mut settings = Settings::default();
                if let Value::Object(map) = &document {
                    for (key, value) in map {
                        if let (Some(class), Some("accept")) =
                            (DriftClass::parse(key), value.as_str())
                        {
                            settings.set(class, drift::Action::Accept);
                        }
                    }
                }
                settings
            }),
        },
    )
}

/// `GET /catalog/drift` (admin): `{"<class>": "accept" | "hold"}` for every class.
pub async fn drift_settings(store: &Store, principal: &Principal) -> Result<Value, ServiceError> {
    principal.require(scope::ADMIN)?;
    Ok(settings_of(store, &principal.tenant_id).await?.to_json())
}

/// `PUT /catalog/drift` (admin, journaled): replaces the tenant's triage; a class left out gets
/// its default. It decides what later syncs hold; tools held already stay held until an admin
/// decides.
pub async fn put_drift_settings(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    document: &Value,
) -> Result<Value, ServiceError> {
    principal.require(scope::ADMIN)?;
    let settings = Settings::from_json(document).map_err(|errors| {
        AppError::invalid(
            errors
                .into_iter()
                .map(|e| FieldError {
                    path: e.path,
                    message: e.message,
                })
                .collect(),
        )
    })?;
    let document = settings.to_json();
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "catalog.drift",
            json!({"drift": document}),
        )
        .await?;
    store::catalog::put_drift_settings(
        store,
        &principal.tenant_id,
        &document,
        &principal.as_creator(),
    )
    .await?;
    Ok(document)
}

/// The triage of a tool a sync lists as `listed` (with the descriptor of `existing` already
/// merged in), for the tenant's `settings`, at `now` (ms). Against the definition last
/// accepted: a change that holds nothing the tenant holds makes `listed` the accepted one.
pub fn triage(existing: &Revised, listed: &ToolDescriptor, settings: &Settings, now: i64) -> Drift {
    let accepted = existing.drift.accepted_or(&existing.tool);
    let current = Definition::from(listed);
    // A hold waits for an admin while the upstream keeps offering the same definition, also
    // when the tenant's setting changed since (it decides what later changes hold).
    if let Some(held) = &existing.drift.held
        && !held.changes.contains(&DriftClass::Removed)
        && Definition::from(&existing.tool) == current
    {
        return existing.drift.clone();
    }
    let changes = drift::classify(&accepted, Some(&current));
    if !settings.holds(&changes) {
        return Drift::default();
    }
    // Changed again (or back from a removal): asked again, held since the first hold.
    let before = existing.drift.held.as_ref();
    Drift {
        accepted: Some(accepted),
        held: Some(Held {
            changes,
            since: before.map_or(now, |h| h.since),
            kept_hash: None,
        }),
    }
}

/// The triage of a tool the upstream no longer lists, when the tenant holds removals.
pub fn triage_removed(existing: &Revised, now: i64) -> Drift {
    let before = existing.drift.held.as_ref();
    let was_removed = before.is_some_and(|h| h.changes == [DriftClass::Removed]);
    Drift {
        accepted: existing.drift.accepted.clone(),
        held: Some(Held {
            changes: vec![DriftClass::Removed],
            since: before.map_or(now, |h| h.since),
            kept_hash: before
                .and_then(|h| h.kept_hash.clone())
                .filter(|_| was_removed),
        }),
    }
}

/// 409 for a decision about a held definition that is no longer the held one (`what` changed
/// again after the admin reviewed it; it is held now as `definition_hash`).
fn changed_since_reviewed(what: &str, definition_hash: &str) -> ServiceError {
    AppError {
        code: ErrorCode::Conflict,
        message: format!(
            "{what} changed since it was reviewed: its held definition is now {definition_hash}"
        ),
        details: Some(aperture_types::error::ErrorDetails {
            fields: vec![FieldError {
                path: "definition_hash".into(),
                message: "not the held definition's hash".into(),
            }],
        }),
    }
    .into()
}

/// `POST /tools/{name}:accept` (admin, journaled with the old and new definition hashes): the
/// held definition becomes the accepted one and enters manifests (a held removal: the tool
/// leaves the catalog).
pub async fn accept(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    name: &str,
    request: &DriftDecisionRequest,
) -> Result<DriftDecisionView, ServiceError> {
    decide(store, journal, principal, name, request, true).await
}

/// `POST /tools/{name}:keep-held` (admin, journaled): the tool stays out of manifests, and the
/// Tools page stops asking until the upstream changes it again.
pub async fn keep_held(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    name: &str,
    request: &DriftDecisionRequest,
) -> Result<DriftDecisionView, ServiceError> {
    decide(store, journal, principal, name, request, false).await
}

async fn decide(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    name: &str,
    request: &DriftDecisionRequest,
    accept: bool,
) -> Result<DriftDecisionView, ServiceError> {
    principal.require(scope::ADMIN)?;
    let mut journaled: Option<DriftDecisionView> = None;
    for _ in 0..WRITE_ATTEMPTS {
        let Some(current) = store::catalog::find_revised(store, &principal.tenant_id, name).await?
        else {
            return Err(AppError::not_found("tool").into());
        };
        let Some(held) = &current.drift.held else {
            return Err(
                AppError::new(ErrorCode::Conflict, format!("no change of {name} is held")).into(),
            );
        };
        let definition_hash = current.tool.definition_hash();
        if let Some(seen) = &request.definition_hash
            && *seen != definition_hash
        {
            return Err(changed_since_reviewed(name, &definition_hash));
        }
        let removed = held.changes.contains(&DriftClass::Removed);
        let view = DriftDecisionView {
            tool: name.to_owned(),
            decision: if accept { "accept" } else { "keep_held" }.to_owned(),
            changes: names(&held.changes),
            accepted_definition_hash: current
                .drift
                .accepted_or(&current.tool)
                .applied_to(&current.tool)
                .definition_hash(),
            definition_hash,
            removed: accept && removed,
        };
        // Journaled before the catalog changes (once, also when the write is redone on a row
        // a sync changed in between; a different definition is refused above).
        if journaled.as_ref() != Some(&view) {
            journal
                .admin(
                    &principal.tenant_id,
                    &principal.author(),
                    Decision::Allow,
                    ReasonCode::Ok,
                    if accept {
                        "tool.accept"
                    } else {
                        "tool.keep_held"
                    },
                    serde_json::to_value(&view).map_err(anyhow::Error::from)?,
                )
                .await?;
            journaled = Some(view.clone());
        }
        let written = if accept && removed {
            store::catalog::delete_if(store, &principal.tenant_id, name, current.revision).await?
        } else if accept {
            store::catalog::set_drift_if(
                store,
                &principal.tenant_id,
                name,
                &Drift::default(),
                current.revision,
            )
            .await?
        } else {
            let mut kept = current.drift.clone();
            if let Some(h) = &mut kept.held {
                h.kept_hash = Some(view.definition_hash.clone());
            }
            store::catalog::set_drift_if(store, &principal.tenant_id, name, &kept, current.revision)
                .await?
        };
        if written {
            return Ok(view);
        }
    }
    Err(ServiceError::Other(anyhow::anyhow!(
        "tool {name} kept changing while a held change was decided"
    )))
}

/// `PUT /tools/{name}` (admin): sets the server-owned descriptor of a tool in the catalog.
/// Journaled. The tool's own definition is not touched.
pub async fn describe(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    name: &str,
    request: &DescribeToolRequest,
) -> Result<ToolDescriptor, ServiceError> {
    principal.require(scope::ADMIN)?;
    // Read, change the descriptor, write only if nobody wrote in between (an upstream sync
    // updating the definition); otherwise do it again on what is there now. Journaled once.
    let mut journaled = false;
    for _ in 0..WRITE_ATTEMPTS {
        let Some(current) = store::catalog::find_revised(store, &principal.tenant_id, name).await?
        else {
            return Err(AppError::not_found("tool").into());
        };
        let mut tool = current.tool;
        validate_descriptor(&tool, request)?;
        tool.risk = request.risk.clone();
        tool.family = request.family.clone();
        tool.required_scope = request.required_scope.clone();
        if let Some(v) = &request.version {
            tool.version = v.clone();
        }
        tool.dry_run_argument = request.dry_run_argument.clone();
        tool.price_cents = request.price_cents;
        if !journaled {
            journal
                .admin(
                    &principal.tenant_id,
                    &principal.author(),
                    Decision::Allow,
                    ReasonCode::Ok,
                    "tool.describe",
                    json!({"tool": name, "descriptor": request}),
                )
                .await?;
            journaled = true;
        }
        if store::catalog::write_if(store, &principal.tenant_id, &tool, Some(current.revision))
            .await?
        {
            return Ok(tool);
        }
    }
    Err(ServiceError::Other(anyhow::anyhow!(
        "tool {name} kept changing while its descriptor was written"
    )))
}

/// How often a descriptor write re-reads a tool that a sync changed under it before giving up.
const WRITE_ATTEMPTS: u32 = 8;

/// Field errors of a descriptor for `tool`.
fn validate_descriptor(
    tool: &ToolDescriptor,
    request: &DescribeToolRequest,
) -> Result<(), ServiceError> {
    let mut fields = Vec::new();
    let mut bad = |path: String, message: &str| {
        fields.push(FieldError {
            path,
            message: message.into(),
        })
    };
    if request.risk.is_empty() {
        bad("risk".into(), "name at least one risk label");
    }
    for (i, label) in request.risk.iter().enumerate() {
        if !is_label(label) {
            bad(format!("risk[{i}]"), "1–32 characters of a-z, 0-9, _ and -");
        }
    }
    if let Some(f) = &request.family
        && !is_label(f)
    {
        bad("family".into(), "1–32 characters of a-z, 0-9, _ and -");
    }
    if let Some(s) = &request.required_scope
        && engine::scope::validate(s).is_err()
    {
        bad("required_scope".into(), "a scope: a-z, 0-9, _ . : and -");
    }
    if let Some(v) = &request.version
        && (v.is_empty() || v.len() > 64)
    {
        bad("version".into(), "1–64 characters");
    }
    if let Some(arg) = &request.dry_run_argument {
        let ty = tool
            .input_schema
            .pointer(&format!("/properties/{arg}/type"));
        if ty != Some(&Value::String("boolean".into())) {
            bad(
                "dry_run_argument".into(),
                "must name a boolean argument of the tool",
            );
        }
    }
    if !fields.is_empty() {
        return Err(AppError::invalid(fields).into());
    }
    Ok(())
}

/// The triage of a resource, template or prompt a sync lists as `listed` (whose hash is
/// `definition_hash`), for the tenant's `settings`, at `now` (ms): as [`triage`] for tools, over
/// the item's text ([`drift::classify_item`]) against the definition last accepted. A stored
/// definition that does not parse is compared as nothing, so anything it says is a change.
pub fn triage_item(
    existing: &ItemRow,
    listed: &Value,
    definition_hash: &str,
    settings: &Settings,
    now: i64,
) -> ItemDrift {
    // Held for the same definition: it waits for an admin.
    if existing.drift.held.is_some() && existing.definition_hash == definition_hash {
        return existing.drift.clone();
    }
    let accepted = existing
        .drift
        .accepted
        .clone()
        .unwrap_or_else(|| existing.definition.clone());
    let before: Value = serde_json::from_str(&accepted).unwrap_or(Value::Null);
    let changes = drift::classify_item(&before, listed);
    if !settings.holds(&changes) {
        return ItemDrift::default();
    }
    ItemDrift {
        accepted: Some(accepted),
        held: Some(Held {
            changes,
            since: existing.drift.held.as_ref().map_or(now, |h| h.since),
            kept_hash: None,
        }),
    }
}

/// `GET /catalog/items` (read): every resource, template and prompt the tenant's upstreams
/// offer, by kind and key, held ones with their triage.
pub async fn items(store: &Store, principal: &Principal) -> Result<CatalogItemsView, ServiceError> {
    principal.require(scope::READ)?;
    let tenant = &principal.tenant_id;
    let upstreams = store::upstreams::list(store, tenant).await?;
    let mut items = Vec::new();
    for kind in [Kind::Resource, Kind::Template, Kind::Prompt] {
        for row in store::items::list(store, tenant, kind).await? {
            let Some(upstream) = upstreams.iter().find(|u| u.id == row.upstream_id) else {
                continue;
            };
            items.push(item_view(row, &upstream.name));
        }
    }
    Ok(CatalogItemsView { items })
}

fn item_view(row: ItemRow, upstream: &str) -> CatalogItemView {
    let definition: Value = serde_json::from_str(&row.definition).unwrap_or(Value::Null);
    let held = row.drift.held.as_ref().map(|held| {
        let accepted: Value = row
            .drift
            .accepted
            .as_deref()
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or(Value::Null);
        HeldView {
            changes: names(&held.changes),
            since: store::rfc3339(held.since),
            definition_hash: row.definition_hash.clone(),
            accepted_definition_hash: engine::canonical::hash_value(&accepted),
            accepted,
            kept: held.kept_hash.is_some(),
        }
    });
    CatalogItemView {
        kind: row.kind.as_str().to_owned(),
        upstream_id: row.upstream_id,
        upstream: upstream.to_owned(),
        key: row.key,
        raw: row.raw,
        flags: names(&drift::item_flags(&definition)),
        definition,
        definition_hash: row.definition_hash,
        held,
    }
}

/// `POST /catalog/items:accept` (admin, journaled with the old and new definition hashes): the
/// held definition becomes the accepted one, and the item is listed and readable again (as the
/// policy says).
pub async fn accept_item(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    request: &ItemChangeRequest,
) -> Result<ItemDecisionView, ServiceError> {
    decide_item(store, journal, principal, request, true).await
}

/// `POST /catalog/items:keep-held` (admin, journaled): the item stays neither listed nor
/// readable, and is not asked about again until the upstream changes it again.
pub async fn keep_item_held(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    request: &ItemChangeRequest,
) -> Result<ItemDecisionView, ServiceError> {
    decide_item(store, journal, principal, request, false).await
}

async fn decide_item(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    request: &ItemChangeRequest,
    accept: bool,
) -> Result<ItemDecisionView, ServiceError> {
    principal.require(scope::ADMIN)?;
    let kind = match request.kind.as_str() {
        "resource" => Kind::Resource,
        "template" => Kind::Template,
        "prompt" => Kind::Prompt,
        _ => {
            return Err(AppError::invalid_field("kind", "resource, template or prompt").into());
        }
    };
    let tenant = &principal.tenant_id;
    let current = store::items::of_upstream(store, tenant, &request.upstream_id, kind)
        .await?
        .into_iter()
        .find(|r| r.key == request.key)
        .ok_or_else(|| AppError::not_found("item"))?;
    let Some(held) = &current.drift.held else {
        return Err(AppError::new(
            ErrorCode::Conflict,
            format!("no change of {} is held", request.key),
        )
        .into());
    };
    if let Some(seen) = &request.definition_hash
        && *seen != current.definition_hash
    {
        return Err(changed_since_reviewed(
            &request.key,
            &current.definition_hash,
        ));
    }
    let accepted: Value = current
        .drift
        .accepted
        .as_deref()
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or(Value::Null);
    let view = ItemDecisionView {
        kind: request.kind.clone(),
        upstream_id: current.upstream_id.clone(),
        key: current.key.clone(),
        decision: if accept { "accept" } else { "keep_held" }.to_owned(),
        changes: names(&held.changes),
        accepted_definition_hash: engine::canonical::hash_value(&accepted),
        definition_hash: current.definition_hash.clone(),
    };
    // Journaled before the catalog changes: nothing is decided that is not recorded.
    journal
        .admin(
            tenant,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            if accept {
                "item.accept"
            } else {
                "item.keep_held"
            },
            serde_json::to_value(&view).map_err(anyhow::Error::from)?,
        )
        .await?;
    let drift = if accept {
        ItemDrift::default()
    } else {
        let mut kept = current.drift.clone();
        if let Some(h) = &mut kept.held {
            h.kept_hash = Some(current.definition_hash.clone());
        }
        kept
    };
    let written = store::items::set_drift_if(
        store,
        tenant,
        (&current.upstream_id, kind, &current.key),
        &current.definition_hash,
        &drift,
    )
    .await?;
    if !written {
        return Err(AppError::new(
            ErrorCode::Conflict,
            format!(
                "{} changed while it was decided; review it again",
                request.key
            ),
        )
        .into());
    }
    Ok(view)
}
