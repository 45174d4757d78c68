//! Exposure sessions and manifests as a service: creating a session, granting a manifest and a
//! lease under the policy active at that moment (the same grant answers MCP `tools/list`),
//! reading and revoking sessions.

use engine::descriptor::ToolSource;
use engine::fork::ExecutionAllowlist;
use engine::manifest::{self, ExecutionTarget, Manifest};
use engine::narrow::ValidatorCache;
use engine::policy::ExposureContext;
use engine::receipt::{self, Decision, ManifestDocTool, ManifestDocument, ReasonCode, ReceiptKind};
use engine::scope;
use serde_json::{Map, Value, json};

use aperture_types::dto::{CreateSessionRequest, SessionView};
use aperture_types::error::AppError;

use crate::error::ServiceError;
use crate::ids;
use crate::journal::{self, Journal};
use crate::policies;
use crate::principal::Principal;
use crate::store::{
    self, Store,
    exposure::{ManifestRow, SessionRow},
};
use engine::environment::{DEFAULT_ENVIRONMENT, is_environment};

/// A granted manifest, as stored and as signed.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The session.
    pub session: SessionRow,
    /// The stored row (ids, lease).
    pub row: ManifestRow,
    /// The engine's manifest.
    pub manifest: Manifest,
    /// The signed document.
    pub document: ManifestDocument,
}

fn hint(field: &str, value: &Option<String>) -> Result<(), AppError> {
    match value {
        Some(v) if v.is_empty() || v.len() > 128 || v.chars().any(char::is_control) => {
            Err(AppError::invalid_field(field, "1–128 printable characters"))
        }
        _ => Ok(()),
    }
}

/// Whether `principal` may read `session`: `:read` reads all, `:run` its own; either only in
/// an environment it may use.
fn may_read(principal: &Principal, session: &SessionRow) -> bool {
    principal.sees(&session.environment)
        && (principal.scopes.satisfies(scope::READ)
            || (principal.scopes.satisfies(scope::RUN) && session.actor_id == principal.actor_id))
}

/// Whether `session` is `principal`'s own to list, call and fork: its tenant's, its actor's,
/// in an environment it may use, not revoked. Anything else is refused like an unknown id.
fn is_own(principal: &Principal, session: &SessionRow) -> bool {
    session.actor_id == principal.actor_id
        && session.tenant_id == principal.tenant_id
        && session.revoked_at.is_none()
        && principal.sees(&session.environment)
}

/// Who a grant answers through `/mcp` (the default: REST, hosted agents).
#[derive(Debug, Clone, Copy, Default)]
pub struct Listing<'a> {
    /// A `/mcp` listing: the tenant's `tool_names` setting names its tools.
    pub mcp: bool,
    /// The 2025-era MCP connection (`Mcp-Session-Id`) whose `tools/list` this answers: its
    /// `list_changed` stream watches the grant.
    pub mcp_session: Option<&'a str>,
    /// A plain `tools/list` (no `session_id`, `preset` or `entity` hint): the principal's calls
    /// without an echo may bind to it (`binding: "implicit"`, [`crate::implicit`]).
    pub plain: bool,
    /// Granted for a call without an echo that found no grant to bind to: its manifest
    /// receipt says it was made implicitly.
    pub for_implicit_call: bool,
}

/// `POST /sessions` (run): a new session in an environment, with its first manifest.
/// `listed_by`: the `/mcp` listing this answers, if any.
pub async fn create(
    store: &Store,
    journal: &Journal,
    validators: &ValidatorCache,
    principal: &Principal,
    request: &CreateSessionRequest,
    listed_by: Listing<'_>,
) -> Result<Grant, ServiceError> {
    principal.require(scope::RUN)?;
    let environment = request
        .environment
        .clone()
        .unwrap_or_else(|| DEFAULT_ENVIRONMENT.to_owned());
    if !is_environment(&environment) {
        return Err(
            AppError::invalid_field("environment", "1–64 characters of a-z, 0-9, _ and -").into(),
        );
    }
    hint("preset", &request.preset)?;
    hint("entity", &request.entity)?;
    // The environment chooses the policy: a caller may name only its own environments.
    principal.may_use(&environment)?;
    let session = SessionRow {
        id: ids::new_id("ses"),
        tenant_id: principal.tenant_id.clone(),
        environment,
        actor_id: principal.actor_id.clone(),
        preset: request.preset.clone(),
        entity: request.entity.clone(),
        parent_id: None,
        fork_tools: None,
        created_at: store::now_ms(),
        revoked_at: None,
    };
    // A listing with a hint never becomes a call's implicit grant.
    let listed_by = Listing {
        plain: listed_by.plain && request.preset.is_none() && request.entity.is_none(),
        ..listed_by
    };
    store::exposure::insert_session(store, &session).await?;
    grant_listed(store, journal, validators, principal, session, listed_by).await
}

/// Grants a new manifest and lease for `session` under the policy active now, signs it, stores
/// it, and journals it. The caller must be the session's actor.
pub async fn grant(
    store: &Store,
    journal: &Journal,
    validators: &ValidatorCache,
    principal: &Principal,
    session: SessionRow,
) -> Result<Grant, ServiceError> {
    grant_listed(
        store,
        journal,
        validators,
        principal,
        session,
        Listing::default(),
    )
    .await
}

/// [`grant`], for the `/mcp` listing `listed_by` when there is one.
async fn grant_listed(
    store: &Store,
    journal: &Journal,
    validators: &ValidatorCache,
    principal: &Principal,
    session: SessionRow,
    listed_by: Listing<'_>,
) -> Result<Grant, ServiceError> {
    // A session opened while the caller could use its environment is listed again only while
    // it still can; until then it is as unknown as a random id.
    if !is_own(principal, &session) {
        return Err(AppError::not_found("session").into());
    }
    let mut manifest = build(store, validators, &session).await?;
    if listed_by.mcp && upstream_names(store, &session).await? {
        manifest.use_upstream_names();
    }
    let now = store::now_ms();
    let lease_expires_at = now + i64::try_from(manifest.lease_seconds).unwrap_or(0) * 1000;
    let manifest_id = ids::new_id("man");
    let lease_id = ids::new_id("lea");
    let document = ManifestDocument {
        manifest_id: manifest_id.clone(),
        session_id: session.id.clone(),
        tenant_id: session.tenant_id.clone(),
        environment: session.environment.clone(),
        actor_id: session.actor_id.clone(),
        policy_id: manifest.policy_id.clone(),
        policy_version: manifest.policy_version,
        lease_id: lease_id.clone(),
        lease_expires_at: store::rfc3339(lease_expires_at),
        issued_at: store::rfc3339(now),
        key_id: journal.keys().signer().key_id().to_owned(),
        tools: manifest
            .listed()
            .map(|t| ManifestDocTool {
                name: t.name.clone(),
                tool_version: t.tool_version.clone(),
                schema_hash: t.schema_hash.clone(),
                exposure_mode: t.mode.as_str().to_owned(),
            })
            .collect(),
        preset: session.preset.clone(),
        entity: session.entity.clone(),
        copied_from: None,
        execution_allowed_tools: None,
    };
    let signature = receipt::sign_manifest(&document, journal.keys().signer())
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("signing a manifest: {e}")))?;
    let row = ManifestRow {
        id: manifest_id,
        tenant_id: session.tenant_id.clone(),
        session_id: session.id.clone(),
        lease_id,
        lease_expires_at,
        issued_at: now,
        manifest: to_json(&manifest)?,
        document: to_json(&document)?,
        signature,
    };
    let implicitly = listed_by.for_implicit_call;
    record_grant(
        journal, principal, &session, &row, &document, None, implicitly,
    )
    .await?;
    let listed_by = store::exposure::ListedBy {
        mcp_session: listed_by.mcp_session,
        bindable_by: listed_by.plain.then(|| principal.principal_id()),
    };
    store::exposure::insert_manifest(store, &row, listed_by).await?;
    Ok(Grant {
        session,
        row,
        manifest,
        document,
    })
}

/// The manifest `session` would be granted now: the policy active in its environment over the
/// catalog as it stands, execution targets pinned.
async fn build(
    store: &Store,
    validators: &ValidatorCache,
    session: &SessionRow,
) -> Result<Manifest, ServiceError> {
    let (policy, policy_version) =
        policies::effective(store, &session.tenant_id, &session.environment).await?;
    let catalog = store::catalog::list_fingerprinted(store, &session.tenant_id).await?;
    let ctx = ExposureContext {
        environment: session.environment.clone(),
        actor: session.actor_id.clone(),
        preset: session.preset.clone(),
        entity: session.entity.clone(),
    };
    let mut manifest = manifest::build(catalog, &policy, policy_version, &ctx, validators);
    pin_targets(store, session, &mut manifest).await?;
    Ok(manifest)
}

/// Whether `/mcp` lists `session`'s tools under their upstreams' own names (the tenant's
/// `tool_names` in the session's environment).
async fn upstream_names(store: &Store, session: &SessionRow) -> Result<bool, ServiceError> {
    let settings = crate::settings::mcp::of(store, &session.tenant_id).await?;
    Ok(settings.in_environment(&session.environment).tool_names
        == crate::settings::mcp::ToolNames::Upstream)
}

/// One listed tool as [`listing_key`] compares it: what the listing shows (name, version,
/// definition, advertised schema, mode) and binds (the pinned target).
#[derive(Debug, PartialEq, Eq)]
pub struct ListedTool<'a> {
    name: &'a str,
    listed_as: &'a str,
    tool_version: &'a str,
    definition_hash: &'a str,
    schema_hash: &'a str,
    mode: &'static str,
    target: Option<(&'a str, &'a str, i64)>,
}

/// What a listing shows and binds, per listed tool. Two manifests with equal keys list the
/// same tools the same way; grant ids and lease times aside.
pub fn listing_key(manifest: &Manifest) -> Vec<ListedTool<'_>> {
    manifest
        .listed()
        .map(|t| ListedTool {
            name: &t.name,
            listed_as: &t.advertised.name,
            tool_version: &t.tool_version,
            definition_hash: &t.definition_hash,
            schema_hash: &t.schema_hash,
            mode: t.mode.as_str(),
            target: t.target.as_ref().map(|x| {
                (
                    x.upstream_id.as_str(),
                    x.endpoint_fingerprint.as_str(),
                    x.credential_version,
                )
            }),
        })
        .collect()
}

/// Whether the next `tools/list` of the session `listed` was granted in would list something
/// else than `listed` does: another policy or catalog for a session of its own, another grant
/// of its parent for a fork, or nothing at all (the session or its parent was revoked).
pub async fn listing_changed(
    store: &Store,
    validators: &ValidatorCache,
    listed: &ManifestRow,
) -> Result<bool, ServiceError> {
    let Some(session) =
        store::exposure::find_session(store, &listed.tenant_id, &listed.session_id).await?
    else {
        return Ok(true);
    };
    if session.revoked_at.is_some() {
        return Ok(true);
    }
    if let Some(parent_id) = &session.parent_id {
        // A fork lists a copy of its parent's current grant.
        let parent = store::exposure::find_session(store, &session.tenant_id, parent_id).await?;
        let Some(parent) = parent.filter(|p| p.revoked_at.is_none()) else {
            return Ok(true);
        };
        let current =
            store::exposure::latest_manifest(store, &parent.tenant_id, &parent.id).await?;
        return Ok(current.is_none_or(|c| c.manifest != listed.manifest));
    }
    let then: Manifest =
        serde_json::from_str(&listed.manifest).map_err(|e| ServiceError::Other(e.into()))?;
    let mut now = build(store, validators, &session).await?;
    // Watched listings are `/mcp`'s: the next one names tools as the tenant's setting says.
    if upstream_names(store, &session).await? {
        now.use_upstream_names();
    }
    Ok(
        then.upstream_names.is_some() != now.upstream_names.is_some()
            || listing_key(&then) != listing_key(&now),
    )
}

/// Pins each MCP tool's execution target: the registration, endpoint, credential version and
/// transport its upstream has now, for the session's environment.
/// A tool whose upstream is gone gets no target, and its calls are refused (`target_drift`).
async fn pin_targets(
    store: &Store,
    session: &SessionRow,
    manifest: &mut Manifest,
) -> Result<(), ServiceError> {
    let upstreams: std::collections::HashMap<String, store::upstreams::UpstreamRow> =
        store::upstreams::list(store, &session.tenant_id)
            .await?
            .into_iter()
            .map(|u| (u.id.clone(), u))
            .collect();
    for entry in &mut manifest.tools {
        if let ToolSource::Mcp { upstream_id, .. } = &entry.source {
            entry.target = upstreams.get(upstream_id).map(|u| ExecutionTarget {
                upstream_id: upstream_id.clone(),
                endpoint_fingerprint: u.fingerprint.clone(),
                credential_version: u.credential_version,
                transport: Some(u.transport.clone()),
                environment: Some(session.environment.clone()),
            });
        }
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, ServiceError> {
    serde_json::to_string(value).map_err(|e| ServiceError::Other(e.into()))
}

impl Grant {
    /// The grant stored as `row` in `session`, its manifest and signed document read back.
    fn read(session: SessionRow, row: ManifestRow) -> Result<Self, ServiceError> {
        let manifest =
            serde_json::from_str(&row.manifest).map_err(|e| ServiceError::Other(e.into()))?;
        let document =
            serde_json::from_str(&row.document).map_err(|e| ServiceError::Other(e.into()))?;
        Ok(Self {
            session,
            row,
            manifest,
            document,
        })
    }

    /// The session's execution allowlist, when it is a restricted fork.
    pub fn allowlist(&self) -> Option<ExecutionAllowlist> {
        self.session
            .fork_tools
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
    }

    /// The MCP `tools/list` result for this grant (CONTRACT §4): listed tools with their
    /// `_meta`, and the grant's identifiers in the result's `_meta`.
    pub fn list_result(&self) -> Value {
        self.list_page(0, usize::MAX)
            .unwrap_or_else(|| json!({"tools": []}))
    }

    /// One page of [`Grant::list_result`]: at most `size` of the listed tools from `offset` on,
    /// with `nextCursor` when more follow (CONTRACT §4: the cursor pages through this grant,
    /// [`granted`]); `None` when `offset` is past the end.
    pub fn list_page(&self, offset: usize, size: usize) -> Option<Value> {
        let listed = self.manifest.listed().count();
        if offset > listed || (offset == listed && offset > 0) {
            return None;
        }
        let end = offset.saturating_add(size.max(1)).min(listed);
        let tools: Vec<Value> = self
            .manifest
            .listed()
            .skip(offset)
            .take(end - offset)
            .map(|t| {
                let mut tool = match serde_json::to_value(&t.advertised) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                let mut meta = json!({"schemaHash": t.schema_hash, "exposureMode": t.mode.as_str(), "toolVersion": t.tool_version});
                // Listed under the upstreams' own names: each says which tool it is.
                if self.manifest.upstream_names.is_some() {
                    meta["canonicalName"] = Value::String(t.name.clone());
                }
                tool.insert("_meta".into(), meta);
                // Calls that wait for an approver or a worker may run as MCP tasks.
                if matches!(
                    t.mode,
                    engine::policy::Mode::ApprovalRequired
                        | engine::policy::Mode::StagedChange
                        | engine::policy::Mode::AsyncJobOnly
                ) {
                    tool.insert("execution".into(), json!({"taskSupport": "optional"}));
                }
                Value::Object(tool)
            })
            .collect();
        let mut result = json!({
            "tools": tools,
            "_meta": {
                "session_id": self.session.id,
                "manifest_id": self.row.id,
                "lease_id": self.row.lease_id,
                "lease_expires_at": store::rfc3339(self.row.lease_expires_at),
                "policy_id": self.document.policy_id,
                "policy_version": self.document.policy_version,
                "environment": self.session.environment,
                "manifest_signature": self.row.signature,
            }
        });
        // Fork seed: the restriction notice tells the fork which visible tools it may execute.
        if let Some(list) = self.allowlist() {
            result["_meta"]["restriction_notice"] = Value::String(list.restriction_notice());
        }
        if end < listed {
            result["nextCursor"] = Value::String(cursor(&self.row.id, end));
        }
        Some(result)
    }
}

/// The `nextCursor` of a listing: the manifest it pages through and where the next page starts,
/// opaque to clients (base64url). Nothing in it is trusted: [`granted`] checks whose manifest
/// it names, and the offset only selects tools the manifest lists.
fn cursor(manifest_id: &str, offset: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{manifest_id}:{offset}"))
}

/// The manifest id and offset of a `cursor` ([`cursor`]); `None` when it is not one.
pub fn parse_cursor(cursor: &str) -> Option<(String, usize)> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (manifest_id, offset) = text.rsplit_once(':')?;
    if !manifest_id.starts_with("man_") {
        return None;
    }
    Some((manifest_id.to_owned(), offset.parse().ok()?))
}

/// The grant `manifest_id` names, read back to page through it (a `tools/list` with a cursor
/// grants nothing); `None` unless it is the caller's: its tenant's, in a session of its actor
/// that is not revoked. Unknown and someone else's are the same `None`.
pub async fn granted(
    store: &Store,
    principal: &Principal,
    manifest_id: &str,
) -> Result<Option<Grant>, ServiceError> {
    let Some(row) =
        store::exposure::find_manifest(store, &principal.tenant_id, manifest_id).await?
    else {
        return Ok(None);
    };
    let Some(session) =
        store::exposure::find_session(store, &principal.tenant_id, &row.session_id).await?
    else {
        return Ok(None);
    };
    if !is_own(principal, &session) {
        return Ok(None);
    }
    Grant::read(session, row).map(Some)
}

async fn view(store: &Store, s: SessionRow) -> Result<SessionView, ServiceError> {
    let latest = store::exposure::latest_manifest(store, &s.tenant_id, &s.id).await?;
    Ok(SessionView {
        fork_tools: s
            .fork_tools
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok()),
        session_id: s.id,
        environment: s.environment,
        actor_id: s.actor_id,
        preset: s.preset,
        entity: s.entity,
        parent_id: s.parent_id,
        created_at: store::rfc3339(s.created_at),
        revoked_at: s.revoked_at.map(store::rfc3339),
        manifest_id: latest.as_ref().map(|m| m.id.clone()),
        lease_id: latest.as_ref().map(|m| m.lease_id.clone()),
        lease_expires_at: latest.as_ref().map(|m| store::rfc3339(m.lease_expires_at)),
    })
}

pub(crate) async fn readable(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<SessionRow, ServiceError> {
    match store::exposure::find_session(store, &principal.tenant_id, id).await? {
        Some(s) if may_read(principal, &s) => Ok(s),
        _ => Err(AppError::not_found("session").into()),
    }
}

/// `GET /sessions` (read).
pub async fn list(store: &Store, principal: &Principal) -> Result<Vec<SessionView>, ServiceError> {
    principal.require(scope::READ)?;
    let mut out = Vec::new();
    for s in store::exposure::list_sessions(store, &principal.tenant_id, 500).await? {
        if principal.sees(&s.environment) {
            out.push(view(store, s).await?);
        }
    }
    Ok(out)
}

/// Session `id` of `principal`'s tenant, when it is in an environment `principal` sees:
/// another environment's session is as unknown as a random id.
pub async fn find_session(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Option<SessionRow>, ServiceError> {
    Ok(
        store::exposure::find_session(store, &principal.tenant_id, id)
            .await?
            .filter(|session| principal.sees(&session.environment)),
    )
}

/// `GET /sessions/{id}` (read, or run for one's own).
pub async fn get(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<SessionView, ServiceError> {
    let s = readable(store, principal, id).await?;
    view(store, s).await
}

/// The dashboard's view of one session (read): its latest manifest document, its forks, and
/// the listed tools whose catalog definition changed after the manifest was granted (their
/// next call is refused with `manifest_drift` until the session lists again).
pub async fn detail(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<aperture_types::dto::SessionDetail, ServiceError> {
    principal.require(scope::READ)?;
    let s = readable(store, principal, id).await?;
    let latest = store::exposure::latest_manifest(store, &s.tenant_id, &s.id).await?;
    let mut drifted = Vec::new();
    let mut manifest = None;
    if let Some(m) = &latest {
        manifest = serde_json::from_str::<Value>(&m.document).ok();
        if let Ok(granted) = serde_json::from_str::<engine::manifest::Manifest>(&m.manifest) {
            let catalog = store::catalog::list_fingerprinted(store, &s.tenant_id).await?;
            for e in granted.listed() {
                let same = catalog.iter().any(|t| {
                    t.tool.name == e.name && t.fingerprints.definition_hash == e.definition_hash
                });
                if !same {
                    drifted.push(e.name.clone());
                }
            }
        }
    }
    let forks = store::exposure::list_sessions(store, &s.tenant_id, 500)
        .await?
        .into_iter()
        .filter(|f| f.parent_id.as_deref() == Some(s.id.as_str()))
        .collect::<Vec<_>>();
    let mut fork_views = Vec::new();
    for f in forks {
        fork_views.push(view(store, f).await?);
    }
    let ctx = engine::policy::ExposureContext {
        environment: s.environment.clone(),
        actor: s.actor_id.clone(),
        preset: None,
        entity: None,
    };
    let (resources, resource_templates, prompts) =
        crate::items::Exposure::listed_for(store, &s.tenant_id, ctx).await?;
    Ok(aperture_types::dto::SessionDetail {
        session: view(store, s).await?,
        manifest,
        forks: fork_views,
        drifted,
        resources,
        resource_templates,
        prompts,
    })
}

/// `GET /sessions/{id}/manifest` (read, or run for one's own): the latest signed manifest
/// document and its signature.
pub async fn manifest_document(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Value, ServiceError> {
    let s = readable(store, principal, id).await?;
    let m = store::exposure::latest_manifest(store, &s.tenant_id, &s.id)
        .await?
        .ok_or_else(|| AppError::not_found("manifest"))?;
    let document: Value =
        serde_json::from_str(&m.document).map_err(|e| ServiceError::Other(e.into()))?;
    Ok(json!({"document": document, "manifest_signature": m.signature}))
}

/// `POST /sessions/{id}:revoke` (admin, or run for one's own): no new call is accepted under it.
pub async fn revoke(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    id: &str,
) -> Result<SessionView, ServiceError> {
    let s = match store::exposure::find_session(store, &principal.tenant_id, id).await? {
        Some(s)
            if principal.sees(&s.environment)
                && (principal.scopes.satisfies(scope::ADMIN)
                    || (principal.scopes.satisfies(scope::RUN)
                        && s.actor_id == principal.actor_id)) =>
        {
            s
        }
        _ => return Err(AppError::not_found("session").into()),
    };
    journal
        .admin(
            &principal.tenant_id,
            &principal.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "session.revoke",
            json!({"session_id": s.id}),
        )
        .await?;
    store::exposure::revoke_session(store, &principal.tenant_id, &s.id).await?;
    // Admins hold `:read` by implication and the session's own actor may read it.
    get(store, principal, id).await
}

/// `POST /sessions/{id}/forks` (run, own sessions): a child session whose declarations are the
/// parent's (same context, so the same manifest) and whose execution is narrowed by
/// `fork_tools`. A fork cannot create forks.
pub async fn fork(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    parent_id: &str,
    request: &aperture_types::dto::ForkRequest,
) -> Result<Grant, ServiceError> {
    principal.require(scope::RUN)?;
    let parent = match store::exposure::find_session(store, &principal.tenant_id, parent_id).await?
    {
        Some(p) if is_own(principal, &p) => p,
        _ => return Err(AppError::not_found("session").into()),
    };
    if parent.parent_id.is_some() {
        return Err(AppError::new(
            aperture_types::error::ErrorCode::Conflict,
            "a fork cannot create forks",
        )
        .into());
    }
    let allowlist = match &request.fork_tools {
        None => None,
        Some(entries) => Some(ExecutionAllowlist::parse(entries).map_err(|e| {
            let path = match &e {
                engine::fork::AllowlistError::RequiresForkSubagent { .. }
                | engine::fork::AllowlistError::NamedTeammate { .. } => "fork_tools".to_owned(),
                other => other
                    .to_string()
                    .split_whitespace()
                    .next()
                    .unwrap_or("fork_tools")
                    .to_owned(),
            };
            AppError::invalid_field(path, e.to_string())
        })?),
    };
    // The parent's grant must be current: a fork copies it, and a copy of an ended lease would
    // be a fork that cannot call (or, worse, a grant nobody re-checked).
    let parent_grant = current_grant_of(store, &parent).await?;
    let child = SessionRow {
        id: ids::new_id("frk"),
        tenant_id: parent.tenant_id.clone(),
        environment: parent.environment.clone(),
        actor_id: parent.actor_id.clone(),
        preset: parent.preset.clone(),
        entity: parent.entity.clone(),
        parent_id: Some(parent.id.clone()),
        fork_tools: allowlist
            .as_ref()
            .map(|l| to_json(&l.entries()))
            .transpose()?,
        created_at: store::now_ms(),
        revoked_at: None,
    };
    store::exposure::insert_session(store, &child).await?;
    copy_grant(store, journal, principal, child, &parent_grant, None).await
}

/// The grant a `tools/list` naming `session` gets: a fresh one under the policy active now, or,
/// for a fork, a copy of its parent's current grant (a fork never gets declarations of its own:
/// they are its parent's, byte for byte, names included, whatever changed since). A listing
/// that names its session is never a call's implicit grant.
pub async fn list_grant(
    store: &Store,
    journal: &Journal,
    validators: &ValidatorCache,
    principal: &Principal,
    session: SessionRow,
    listed_by: Listing<'_>,
) -> Result<Grant, ServiceError> {
    let listed_by = Listing {
        plain: false,
        for_implicit_call: false,
        ..listed_by
    };
    let Some(parent_id) = session.parent_id.clone() else {
        return grant_listed(store, journal, validators, principal, session, listed_by).await;
    };
    if !is_own(principal, &session) {
        return Err(AppError::not_found("session").into());
    }
    let parent = store::exposure::find_session(store, &session.tenant_id, &parent_id)
        .await?
        .filter(|p| p.revoked_at.is_none())
        .ok_or_else(|| {
            AppError::new(
                aperture_types::error::ErrorCode::Conflict,
                "the fork's parent session was revoked; a fork lists only its parent's grant",
            )
        })?;
    let parent_grant = current_grant_of(store, &parent).await?;
    let mcp_session = listed_by.mcp_session;
    copy_grant(
        store,
        journal,
        principal,
        session,
        &parent_grant,
        mcp_session,
    )
    .await
}

/// `session`'s latest grant while its lease lasts (`None` before the first and once it ended):
/// read, never made. A fork's revival declares its parent's tools from it without granting the
/// parent anything as a side effect.
pub async fn live_grant(store: &Store, session: SessionRow) -> Result<Option<Grant>, ServiceError> {
    let Some(row) =
        store::exposure::latest_manifest(store, &session.tenant_id, &session.id).await?
    else {
        return Ok(None);
    };
    if row.lease_expires_at <= store::now_ms() {
        return Ok(None);
    }
    Grant::read(session, row).map(Some)
}

/// `parent`'s latest manifest, when its lease has not ended (409 otherwise: the parent lists
/// again first).
async fn current_grant_of(store: &Store, parent: &SessionRow) -> Result<ManifestRow, ServiceError> {
    let conflict = |why: &str| -> ServiceError {
        AppError::new(aperture_types::error::ErrorCode::Conflict, why.to_owned()).into()
    };
    let Some(latest) =
        store::exposure::latest_manifest(store, &parent.tenant_id, &parent.id).await?
    else {
        return Err(conflict(
            "the parent session has no manifest yet; list its tools before forking",
        ));
    };
    if latest.lease_expires_at <= store::now_ms() {
        return Err(conflict(
            "the parent session's lease has expired; list its tools again before forking",
        ));
    }
    Ok(latest)
}

/// A fork's grant: `parent`'s manifest copied byte for byte (declarations, modes, schema hashes,
/// pinned targets, policy and its version), under a manifest and lease id of the fork's own that
/// end when the parent's lease ends. Signed and journaled like any grant; the receipt names the
/// parent manifest it copies.
async fn copy_grant(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    session: SessionRow,
    parent: &ManifestRow,
    listed_by: Option<&str>,
) -> Result<Grant, ServiceError> {
    if session.actor_id != principal.actor_id || session.tenant_id != principal.tenant_id {
        return Err(AppError::not_found("session").into());
    }
    let manifest: Manifest =
        serde_json::from_str(&parent.manifest).map_err(|e| ServiceError::Other(e.into()))?;
    let parent_document: ManifestDocument =
        serde_json::from_str(&parent.document).map_err(|e| ServiceError::Other(e.into()))?;
    let now = store::now_ms();
    let manifest_id = ids::new_id("man");
    let lease_id = ids::new_id("lea");
    // The fork's own allowlist, as stored (`None`: unrestricted), signed into its document.
    let execution_allowed_tools = session
        .fork_tools
        .as_deref()
        .map(serde_json::from_str::<Vec<String>>)
        .transpose()
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("stored fork_tools: {e}")))?;
    let document = ManifestDocument {
        manifest_id: manifest_id.clone(),
        session_id: session.id.clone(),
        lease_id: lease_id.clone(),
        issued_at: store::rfc3339(now),
        key_id: journal.keys().signer().key_id().to_owned(),
        copied_from: Some(parent.id.clone()),
        execution_allowed_tools,
        ..parent_document
    };
    let signature = receipt::sign_manifest(&document, journal.keys().signer())
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("signing a manifest: {e}")))?;
    let row = ManifestRow {
        id: manifest_id,
        tenant_id: session.tenant_id.clone(),
        session_id: session.id.clone(),
        lease_id,
        lease_expires_at: parent.lease_expires_at,
        issued_at: now,
        manifest: parent.manifest.clone(),
        document: to_json(&document)?,
        signature,
    };
    record_grant(
        journal,
        principal,
        &session,
        &row,
        &document,
        Some(&parent.id),
        false,
    )
    .await?;
    let listed_by = store::exposure::ListedBy {
        mcp_session: listed_by,
        bindable_by: None,
    };
    store::exposure::insert_manifest(store, &row, listed_by).await?;
    Ok(Grant {
        session,
        row,
        manifest,
        document,
    })
}

/// Journals a granted manifest (before it is stored: a grant nobody can find in the journal is
/// never handed out). `copied_from`: the parent manifest a fork's grant copies; `implicitly`:
/// granted for a call without an echo (the receipt's `binding` says so).
async fn record_grant(
    journal: &Journal,
    principal: &Principal,
    session: &SessionRow,
    row: &ManifestRow,
    document: &ManifestDocument,
    copied_from: Option<&str>,
    implicitly: bool,
) -> Result<(), ServiceError> {
    let mut r = journal::receipt(
        ReceiptKind::Manifest,
        Decision::Allow,
        ReasonCode::Ok,
        &session.tenant_id,
        &session.actor_id,
        principal.principal_id(),
    );
    r.environment = Some(session.environment.clone());
    r.session_id = Some(session.id.clone());
    r.manifest_id = Some(row.id.clone());
    r.policy_id = Some(document.policy_id.clone());
    r.policy_version = Some(document.policy_version);
    if implicitly {
        r.binding = Some(crate::settings::mcp::Binding::Implicit.as_str().to_owned());
    }
    let mut d = journal::disclosures();
    d.insert_extra("lease_id", Value::String(row.lease_id.clone()))
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    if let Some(parent) = copied_from {
        d.insert_extra("copied_from", Value::String(parent.to_owned()))
            .map_err(|e| ServiceError::Other(anyhow::anyhow!("{e}")))?;
    }
    journal.append(r, &d).await?;
    Ok(())
}
