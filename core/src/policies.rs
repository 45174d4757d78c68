//! Policies as a service: versions, activation and validation, behind `/policies` (and, later,
//! the dashboard's editor). Validation is the engine's, against what this deployment can
//! enforce.

use engine::environment;
use engine::policy::{BUILTIN_SAFE_READ, ExposureContext, Policy};
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use engine::validate::{self, RuntimeCapabilities};
use serde_json::{Value, json};

use aperture_types::dto::{
    ActivateRequest, PolicyEditorData, PolicySummary, PolicyVersionView, PreviewRequest,
    ValidationResult,
};
use aperture_types::error::{AppError, FieldError};

use crate::error::ServiceError;
use crate::journal::Journal;
use crate::principal::Principal;
use crate::store::{self, Store, policies::VersionRow};

fn field_errors(errors: Vec<validate::FieldError>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|e| FieldError {
            path: e.path,
            message: e.message,
        })
        .collect()
}

fn view(row: VersionRow) -> Result<PolicyVersionView, ServiceError> {
    let document: Value =
        serde_json::from_str(&row.document).map_err(|e| ServiceError::Other(e.into()))?;
    Ok(PolicyVersionView {
        policy_id: row.policy_id,
        version: u64::try_from(row.version).unwrap_or(0),
        document,
        created_by: row.created_by,
        created_at: store::rfc3339(row.created_at),
    })
}

/// Parses and validates a document for policy `id` (its `name` defaults to `id` and must equal
/// it when given).
/// `caps` is what the deployment can enforce: a rate bucket without a shared limiter is refused
/// rather than accepted and ignored.
pub fn check(
    id: &str,
    mut document: Value,
    caps: &RuntimeCapabilities,
) -> Result<Policy, Vec<FieldError>> {
    if let Value::Object(map) = &mut document {
        match map.get("name") {
            None => {
                map.insert("name".into(), Value::String(id.to_owned()));
            }
            Some(Value::String(name)) if name == id => {}
            Some(_) => {
                return Err(vec![FieldError {
                    path: "name".into(),
                    message: format!("must be the policy id, {id}"),
                }]);
            }
        }
    }
    validate::parse_and_validate(&document, caps).map_err(field_errors)
}

/// `POST /policies:validate`: validity and every problem, without storing anything.
pub fn validate_document(
    principal: &Principal,
    document: Value,
    caps: &RuntimeCapabilities,
) -> Result<ValidationResult, ServiceError> {
    principal.require(scope::READ)?;
    let id = document
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("draft")
        .to_owned();
    Ok(match check(&id, document, caps) {
        Ok(_) => ValidationResult {
            valid: true,
            errors: vec![],
        },
        Err(errors) => ValidationResult {
            valid: false,
            errors,
        },
    })
}

/// `PUT /policies/{id}`: stores a new immutable version (422 with field paths when invalid).
pub async fn put(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    id: &str,
    document: Value,
    caps: &RuntimeCapabilities,
) -> Result<PolicyVersionView, ServiceError> {
    principal.require(scope::WRITE)?;
    if !environment::is_name(id) {
        return Err(AppError::invalid_field(
            "id",
            "policy ids are 1–64 characters of a-z, 0-9, _ and -",
        )
        .into());
    }
    if id == BUILTIN_SAFE_READ {
        return Err(AppError::invalid_field(
            "id",
            "builtin_safe_read is built in and cannot be changed",
        )
        .into());
    }
    let policy = check(id, document, caps).map_err(AppError::invalid)?;
    let canonical = serde_json::to_string(&policy).map_err(|e| ServiceError::Other(e.into()))?;
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "policy.put",
            json!({"policy_id": id, "document": policy}),
        )
        .await?;
    let row = store::policies::insert_next(
        store,
        &principal.tenant_id,
        id,
        &canonical,
        &principal.as_creator(),
    )
    .await?;
    tracing::info!(policy = %id, version = row.version, by = %principal.actor_id, "policy saved");
    view(row)
}

/// `GET /policies/{id}`: the latest version (`builtin_safe_read` is always there).
pub async fn get(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<PolicyVersionView, ServiceError> {
    principal.require(scope::READ)?;
    if id == BUILTIN_SAFE_READ {
        return Ok(builtin_view());
    }
    let row = store::policies::latest(store, &principal.tenant_id, id)
        .await?
        .ok_or_else(|| AppError::not_found("policy"))?;
    view(row)
}

fn builtin_view() -> PolicyVersionView {
    PolicyVersionView {
        policy_id: BUILTIN_SAFE_READ.into(),
        version: 1,
        document: serde_json::to_value(Policy::builtin_safe_read()).unwrap_or(Value::Null),
        created_by: "aperture".into(),
        created_at: store::rfc3339(0),
    }
}

/// `GET /policies/{id}/versions`, newest first.
pub async fn versions(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Vec<PolicyVersionView>, ServiceError> {
    principal.require(scope::READ)?;
    if id == BUILTIN_SAFE_READ {
        return Ok(vec![builtin_view()]);
    }
    let rows = store::policies::versions(store, &principal.tenant_id, id).await?;
    if rows.is_empty() {
        return Err(AppError::not_found("policy").into());
    }
    rows.into_iter().map(view).collect()
}

/// The dashboard editor's view of policy `id`: its versions (none yet for a new policy), where
/// it is active, the catalog it applies to and what this deployment can enforce.
pub async fn editor(
    store: &Store,
    principal: &Principal,
    id: &str,
    caps: &RuntimeCapabilities,
) -> Result<PolicyEditorData, ServiceError> {
    principal.require(scope::READ)?;
    if !environment::is_name(id) {
        return Err(AppError::invalid_field("id", "1–64 characters of a-z, 0-9, _ and -").into());
    }
    let builtin = id == BUILTIN_SAFE_READ;
    let versions = if builtin {
        vec![builtin_view()]
    } else {
        store::policies::versions(store, &principal.tenant_id, id)
            .await?
            .into_iter()
            .map(view)
            .collect::<Result<_, _>>()?
    };
    let active_in = summaries(store, &principal.tenant_id)
        .await?
        .into_iter()
        .find(|p| p.policy_id == id)
        .map(|p| p.active_in)
        .unwrap_or_default();
    Ok(PolicyEditorData {
        policy_id: id.to_owned(),
        versions,
        active_in,
        catalog: store::catalog::list_exposable(store, &principal.tenant_id).await?,
        // The caller adds them (`items::Exposure::catalog`; items decide through this module).
        items: vec![],
        capabilities: caps.clone(),
        builtin,
    })
}

/// The reason of rule `rule_id` in version `version` of policy `policy_id`, for people who may
/// see rules (admins, readers, approvers); `None` when the version or rule is gone.
pub async fn rule_reason(
    store: &Store,
    tenant_id: &str,
    policy_id: &str,
    version: i64,
    rule_id: &str,
) -> Result<Option<String>, ServiceError> {
    let policy = if policy_id == BUILTIN_SAFE_READ {
        Some(Policy::builtin_safe_read())
    } else {
        store::policies::version(store, tenant_id, policy_id, version)
            .await?
            .and_then(|row| serde_json::from_str::<Value>(&row.document).ok())
            .and_then(|doc| validate::parse_policy(&doc).ok())
    };
    Ok(policy.and_then(|p| {
        p.rules
            .into_iter()
            .find(|r| r.id == rule_id)
            .map(|r| r.reason)
    }))
}

/// `GET /policies`: every policy with its latest version and activations.
pub async fn list(
    store: &Store,
    principal: &Principal,
) -> Result<Vec<PolicySummary>, ServiceError> {
    principal.require(scope::READ)?;
    summaries(store, &principal.tenant_id).await
}

async fn summaries(store: &Store, tenant_id: &str) -> Result<Vec<PolicySummary>, ServiceError> {
    let activations = store::policies::activations(store, tenant_id).await?;
    let active_in = |id: &str| -> Vec<String> {
        activations
            .iter()
            .filter(|(_, p)| p == id)
            .map(|(e, _)| e.clone())
            .collect()
    };
    let mut out: Vec<PolicySummary> = store::policies::list_latest(store, tenant_id)
        .await?
        .into_iter()
        .map(|row| PolicySummary {
            active_in: active_in(&row.policy_id),
            policy_id: row.policy_id,
            latest_version: u64::try_from(row.version).unwrap_or(0),
            updated_at: store::rfc3339(row.created_at),
        })
        .collect();
    out.insert(
        0,
        PolicySummary {
            policy_id: BUILTIN_SAFE_READ.into(),
            latest_version: 1,
            updated_at: store::rfc3339(0),
            active_in: active_in(BUILTIN_SAFE_READ),
        },
    );
    Ok(out)
}

/// `POST /policies/{id}:activate`: the policy of new sessions in the environment.
pub async fn activate(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    id: &str,
    request: &ActivateRequest,
) -> Result<PolicySummary, ServiceError> {
    principal.require(scope::WRITE)?;
    let environment = request
        .environment
        .clone()
        .unwrap_or_else(|| environment::DEFAULT_ENVIRONMENT.to_owned());
    if !environment::is_environment(&environment) {
        return Err(
            AppError::invalid_field("environment", "1–64 characters of a-z, 0-9, _ and -").into(),
        );
    }
    if id != BUILTIN_SAFE_READ
        && store::policies::latest(store, &principal.tenant_id, id)
            .await?
            .is_none()
    {
        return Err(AppError::not_found("policy").into());
    }
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "policy.activate",
            json!({"policy_id": id, "environment": environment}),
        )
        .await?;
    store::policies::activate(
        store,
        &principal.tenant_id,
        &environment,
        id,
        &principal.as_creator(),
    )
    .await?;
    summaries(store, &principal.tenant_id)
        .await?
        .into_iter()
        .find(|p| p.policy_id == id)
        .ok_or_else(|| AppError::not_found("policy").into())
}

/// The policy (and version) new sessions of `environment` get: the activated policy's latest
/// version, or `builtin_safe_read`. A stored document that no longer parses fails closed to
/// `builtin_safe_read`'s narrowness: nothing but pure reads.
pub async fn effective(
    store: &Store,
    tenant_id: &str,
    environment: &str,
) -> Result<(Policy, u64), ServiceError> {
    let Some(id) = store::policies::active(store, tenant_id, environment).await? else {
        return Ok((Policy::builtin_safe_read(), 1));
    };
    if id == BUILTIN_SAFE_READ {
        return Ok((Policy::builtin_safe_read(), 1));
    }
    let Some(row) = store::policies::latest(store, tenant_id, &id).await? else {
        return Ok((Policy::builtin_safe_read(), 1));
    };
    let version = u64::try_from(row.version).unwrap_or(0);
    match serde_json::from_str::<Value>(&row.document)
        .ok()
        .and_then(|v| validate::parse_policy(&v).ok())
    {
        Some(policy) => Ok((policy, version)),
        None => {
            tracing::error!(policy = %id, version, "a stored policy does not parse; using builtin_safe_read");
            Ok((Policy::builtin_safe_read(), 1))
        }
    }
}

/// `POST /policies:preview`: per-tool modes, narrowed schemas and hashes of a draft, and what it
/// says of each of `items` (the tenant's resources, templates and prompts,
/// `items::Exposure::catalog`), computed by the same engine function the dashboard runs in the
/// browser. The tool catalog is the tools given in the request.
pub fn preview(
    principal: &Principal,
    mut request: PreviewRequest,
    items: &[engine::preview::CatalogItem],
    caps: &RuntimeCapabilities,
) -> Result<engine::preview::Preview, ServiceError> {
    principal.require(scope::READ)?;
    let ctx = ExposureContext {
        environment: request
            .context
            .environment
            .unwrap_or_else(|| environment::DEFAULT_ENVIRONMENT.to_owned()),
        actor: request
            .context
            .actor
            .unwrap_or_else(|| principal.actor_id.clone()),
        preset: request.context.preset,
        entity: request.context.entity,
    };
    if request.tools.len() > 5_000 {
        return Err(AppError::invalid_field("tools", "at most 5,000 tools").into());
    }
    // Like PUT /policies/{id}, a draft may leave its name to the id it will be saved under.
    if let Value::Object(map) = &mut request.policy {
        map.entry("name")
            .or_insert_with(|| Value::String("draft".into()));
    }
    // A cache of its own: the tools of a preview are the caller's, not the catalog's, and must
    // not crowd the validators calls use.
    Ok(engine::preview::preview(
        &request.policy,
        caps,
        request.tools,
        items,
        &ctx,
        &engine::narrow::ValidatorCache::new(),
    ))
}
