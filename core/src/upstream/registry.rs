//! Registered upstreams: registration (`POST /upstreams`, `aperture upstream add`), their live
//! connections, and syncing their tools into the tenant's catalog.
//!
//! Over the API a tenant admin must not be able to run commands on the gateway's host or reach
//! its private network: `stdio` upstreams are refused unless the operator set
//! `APERTURE_ALLOW_STDIO_UPSTREAMS=1`, and URLs resolving to loopback, private or link-local
//! addresses unless `APERTURE_ALLOW_PRIVATE_UPSTREAMS=1` (the connector enforces the latter on
//! every connection too). Specs keep their secrets (env values, headers) server-side only.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use engine::descriptor::ToolDescriptor;
use engine::drift::{Action, Definition, DriftClass};
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use serde::{Deserialize, Serialize};
use serde_json::json;

use aperture_types::dto::{RegisterUpstreamRequest, SyncReport, UpstreamView};
use aperture_types::error::{AppError, ErrorCode, FieldError};

use super::{Connection, Connector, UpstreamError, UpstreamSpec, check_url, import};
use crate::error::ServiceError;
use crate::ids;
use crate::journal::{self, Author, Journal};
use crate::principal::Principal;
use crate::store::catalog::{Drift, Revised};
use crate::store::{self, Store, upstreams::UpstreamRow};

/// How long connecting (and listing) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The spec as stored (secrets included; never returned).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
enum StoredSpec {
    Stdio {
        command: Vec<String>,
        env: BTreeMap<String, String>,
    },
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl From<&StoredSpec> for UpstreamSpec {
    fn from(s: &StoredSpec) -> Self {
        match s {
            StoredSpec::Stdio { command, env } => UpstreamSpec::Stdio {
                command: command.clone(),
                env: env.clone(),
            },
            StoredSpec::StreamableHttp { url, headers } => UpstreamSpec::StreamableHttp {
                url: url.clone(),
                headers: headers.clone(),
            },
        }
    }
}

/// `PUT /upstreams/{id}/credentials`: exactly one of the two, the whole new set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialsRequest {
    /// An HTTP upstream's headers.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// A stdio upstream's environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
}

/// Resource updates this node may fall behind on before some are missed.
const UPDATES_BUFFER: usize = 1024;

/// Live connections to upstreams, shared by every request.
pub struct Upstreams {
    connector: Connector,
    allow_stdio: bool,
    allow_private: bool,
    /// Seals and opens the stored specs (their credentials are encrypted at rest).
    secrets: Arc<crate::secrets::SecretBox>,
    /// By upstream id: the connection and the credential version it was made with.
    live: tokio::sync::Mutex<HashMap<String, (i64, Arc<Connection>)>>,
    /// Every connection's `notifications/resources/updated`, as they arrive on this node.
    updates: tokio::sync::broadcast::Sender<ResourceUpdated>,
}

/// An upstream's `notifications/resources/updated`, heard on this node's connection to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUpdated {
    pub tenant_id: String,
    pub upstream_id: String,
    /// As the upstream sent it.
    pub uri: String,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("allow_stdio", &self.allow_stdio)
            .field("allow_private", &self.allow_private)
            .finish()
    }
}

fn view(row: &UpstreamRow, tools: usize) -> UpstreamView {
    UpstreamView {
        id: row.id.clone(),
        name: row.name.clone(),
        transport: row.transport.clone(),
        endpoint: row.endpoint.clone(),
        fingerprint: row.fingerprint.clone(),
        status: row.status.clone(),
        last_error: row.last_error.clone(),
        last_synced_at: row.last_synced_at.map(store::rfc3339),
        tools: tools as u64,
        created_at: store::rfc3339(row.created_at),
        credential_version: row.credential_version,
    }
}

fn upstream_error(e: UpstreamError) -> ServiceError {
    match e {
        UpstreamError::InvalidSpec { reason } | UpstreamError::UrlRefused { reason } => {
            AppError::new(ErrorCode::InvalidArgument, reason).into()
        }
        other => AppError::new(ErrorCode::Unavailable, other.to_string()).into(),
    }
}

impl Upstreams {
    /// A registry; the flags are the operator's (`APERTURE_ALLOW_STDIO_UPSTREAMS`,
    /// `APERTURE_ALLOW_PRIVATE_UPSTREAMS`), `secrets` the keys stored specs are sealed with.
    pub fn new(
        allow_stdio: bool,
        allow_private: bool,
        secrets: Arc<crate::secrets::SecretBox>,
    ) -> Self {
        Self {
            connector: Connector::new(allow_private),
            allow_stdio,
            allow_private,
            secrets,
            live: tokio::sync::Mutex::new(HashMap::new()),
            updates: tokio::sync::broadcast::channel(UPDATES_BUFFER).0,
        }
    }

    /// The upstreams' resource updates heard on this node from now on
    /// ([`crate::live::resources`] hands them to every node).
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<ResourceUpdated> {
        self.updates.subscribe()
    }

    /// This node's live connection to upstream `id`, if it has one (nothing is connected).
    pub async fn connected(&self, id: &str) -> Option<Arc<Connection>> {
        self.live
            .lock()
            .await
            .get(id)
            .map(|(_, c)| c.clone())
            .filter(|c| !c.is_closed())
    }

    /// A row's spec, opened.
    fn stored_spec(&self, row: &UpstreamRow) -> Result<StoredSpec, String> {
        let json = self
            .secrets
            .open(
                &crate::secrets::upstream_aad(&row.tenant_id, &row.id),
                &row.spec,
            )
            .map_err(|e| format!("stored spec: {e}"))?;
        serde_json::from_str(&json).map_err(|e| format!("stored spec: {e}"))
    }

    /// Seals every stored spec that is not sealed under the current key: plaintext ones from
    /// before secrets were encrypted (at start-up) and ones under an older key (after a
    /// rotation). Returns how many it sealed.
    pub async fn reseal_all(&self, store: &Store) -> anyhow::Result<usize> {
        let current = format!("enc:v1:{}:", self.secrets.current_id());
        let mut sealed = 0;
        for (tenant_id, id, spec) in store::upstreams::all_specs(store).await? {
            if spec.starts_with(&current) {
                continue;
            }
            let aad = crate::secrets::upstream_aad(&tenant_id, &id);
            let plain = if crate::secrets::SecretBox::is_sealed(&spec) {
                self.secrets
                    .open(&aad, &spec)
                    .map_err(|e| anyhow::anyhow!("upstream {id} of tenant {tenant_id}: {e}"))?
            } else {
                // From before encryption: it must at least be a spec.
                serde_json::from_str::<StoredSpec>(&spec).map_err(|e| {
                    anyhow::anyhow!("upstream {id} of tenant {tenant_id}: stored spec: {e}")
                })?;
                spec.clone()
            };
            let new = self.secrets.seal(&aad, &plain);
            if store::upstreams::reseal_spec(store, &tenant_id, &id, &spec, &new).await? {
                sealed += 1;
            }
        }
        Ok(sealed)
    }

    /// `POST /upstreams` (admin): validates, guards, connects, imports the tools.
    pub async fn register(
        &self,
        store: &Store,
        journal: &Journal,
        principal: &Principal,
        request: &RegisterUpstreamRequest,
    ) -> Result<(UpstreamView, SyncReport), ServiceError> {
        principal.require(scope::ADMIN)?;
        if request.transport == "stdio" && !self.allow_stdio {
            return Err(AppError::invalid_field(
                "transport",
                "stdio upstreams run a command on the gateway's host; only the operator may add them (aperture upstream add, or APERTURE_ALLOW_STDIO_UPSTREAMS=1)",
            )
            .into());
        }
        self.register_unchecked(
            store,
            journal,
            &principal.tenant_id,
            &principal.author(),
            request,
        )
        .await
    }

    /// Registration without the API's restrictions on stdio (the operator's command line); the
    /// private-address rule still applies unless the operator lifted it.
    pub async fn register_unchecked(
        &self,
        store: &Store,
        journal: &Journal,
        tenant_id: &str,
        by: &Author,
        request: &RegisterUpstreamRequest,
    ) -> Result<(UpstreamView, SyncReport), ServiceError> {
        let stored = parse(request)?;
        let spec = UpstreamSpec::from(&stored);
        spec.validate().map_err(upstream_error)?;
        if let UpstreamSpec::StreamableHttp { url, .. } = &spec {
            check_url(url, self.allow_private)
                .await
                .map_err(|e| match e {
                    UpstreamError::UrlRefused { reason } => {
                        ServiceError::from(AppError::invalid_field("url", reason))
                    }
                    other => upstream_error(other),
                })?;
        }
        let id = ids::new_id("ups");
        let spec_json =
            serde_json::to_string(&stored).map_err(|e| ServiceError::Other(e.into()))?;
        let row = UpstreamRow {
            spec: self
                .secrets
                .seal(&crate::secrets::upstream_aad(tenant_id, &id), &spec_json),
            id,
            tenant_id: tenant_id.to_owned(),
            name: request.name.clone(),
            transport: request.transport.clone(),
            endpoint: spec.endpoint(),
            fingerprint: spec.fingerprint(),
            status: "registered".into(),
            last_error: None,
            last_synced_at: None,
            created_by: by.actor_id.clone(),
            created_at: store::now_ms(),
            credential_version: 0,
        };
        journal
            .admin(
                tenant_id,
                by,
                Decision::Allow,
                ReasonCode::Ok,
                "upstream.register",
                json!({"upstream_id": row.id, "name": row.name, "endpoint": row.endpoint}),
            )
            .await?;
        if !store::upstreams::insert(store, &row).await? {
            return Err(AppError {
                code: ErrorCode::Conflict,
                message: format!("an upstream is already called {}", row.name),
                details: Some(aperture_types::error::ErrorDetails {
                    fields: vec![FieldError {
                        path: "name".into(),
                        message: "already taken".into(),
                    }],
                }),
            }
            .into());
        }
        let report = self.sync_row(store, journal, &row).await?;
        let row = store::upstreams::find(store, tenant_id, &row.id)
            .await?
            .unwrap_or(row);
        Ok((view(&row, report.tools as usize), report))
    }

    /// `POST /upstreams/{id}:sync` (write): re-lists the tools, imports new ones, updates
    /// changed definitions (keeping the admin's descriptors), removes vanished ones.
    pub async fn sync(
        &self,
        store: &Store,
        journal: &Journal,
        principal: &Principal,
        id: &str,
    ) -> Result<SyncReport, ServiceError> {
        principal.require(scope::WRITE)?;
        let row = store::upstreams::find(store, &principal.tenant_id, id)
            .await?
            .ok_or_else(|| AppError::not_found("upstream"))?;
        journal
            .admin(
                &principal.tenant_id,
                &principal.author(),
                Decision::Allow,
                ReasonCode::Ok,
                "upstream.sync",
                json!({"upstream_id": row.id}),
            )
            .await?;
        self.sync_row(store, journal, &row).await
    }

    /// `DELETE /upstreams/{id}` (admin): closes the connection and removes the registration and
    /// its tools from the catalog; returns the names of the tools removed. Manifests granted
    /// before stay as they were, and their calls of these tools are refused (`manifest_drift`,
    /// or `target_drift` if an upstream of the same name is registered again).
    pub async fn remove(
        &self,
        store: &Store,
        journal: &Journal,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<String>, ServiceError> {
        principal.require(scope::ADMIN)?;
        let row = store::upstreams::find(store, &principal.tenant_id, id)
            .await?
            .ok_or_else(|| AppError::not_found("upstream"))?;
        journal
            .admin(
                &principal.tenant_id,
                &principal.author(),
                Decision::Allow,
                ReasonCode::Ok,
                "upstream.remove",
                json!({"upstream_id": row.id, "name": row.name, "endpoint": row.endpoint}),
            )
            .await?;
        self.forget(&row.id).await;
        let removed = store::catalog::remove_missing(store, &row.tenant_id, &row.id, &[]).await?;
        store::items::remove_upstream(store, &row.tenant_id, &row.id).await?;
        store::upstreams::delete(store, &row.tenant_id, &row.id).await?;
        Ok(removed)
    }

    async fn sync_row(
        &self,
        store: &Store,
        journal: &Journal,
        row: &UpstreamRow,
    ) -> Result<SyncReport, ServiceError> {
        let connection = self.connection(store, journal, row).await;
        let listed = match &connection {
            Ok(c) => c.list_tools().await,
            Err(e) => Err(e.clone()),
        };
        let (raw, connection) = match (listed, connection) {
            (Ok(raw), Ok(connection)) => (raw, connection),
            (Err(e), _) | (_, Err(e)) => {
                self.forget(&row.id).await;
                store::upstreams::set_status(store, &row.id, "error", Some(&e.to_string()), false)
                    .await?;
                return Err(upstream_error(e));
            }
        };
        let mut report = apply_listing(store, journal, row, raw).await?;
        report.items = apply_items(store, journal, row, &connection).await?;
        Ok(report)
    }

    /// `PUT /upstreams/{id}/credentials` (admin): replaces the whole set of an HTTP upstream's
    /// `headers`, or a stdio upstream's `env` (only where tenant admins may run commands on
    /// this host, [`Upstreams::set_credentials_unchecked`] otherwise). Values are never echoed
    /// or journaled (only their names). Grants pinned to the old credentials are `target_drift`.
    pub async fn set_credentials(
        &self,
        store: &Store,
        journal: &Journal,
        principal: &Principal,
        id: &str,
        request: &CredentialsRequest,
    ) -> Result<UpstreamView, ServiceError> {
        principal.require(scope::ADMIN)?;
        if request.env.is_some() && !self.allow_stdio {
            return Err(AppError::new(
                ErrorCode::PermissionDenied,
                "a stdio upstream's environment can run code on this host (LD_PRELOAD and the like); only the operator sets it (aperture upstream credentials, or APERTURE_ALLOW_STDIO_UPSTREAMS=1)",
            )
            .into());
        }
        self.set_credentials_unchecked(
            store,
            journal,
            &principal.tenant_id,
            &principal.author(),
            id,
            request,
        )
        .await
    }

    /// [`Upstreams::set_credentials`] without the API's restriction on stdio environments (the
    /// operator's command line).
    pub async fn set_credentials_unchecked(
        &self,
        store: &Store,
        journal: &Journal,
        tenant_id: &str,
        by: &Author,
        id: &str,
        request: &CredentialsRequest,
    ) -> Result<UpstreamView, ServiceError> {
        let row = store::upstreams::find(store, tenant_id, id)
            .await?
            .ok_or_else(|| AppError::not_found("upstream"))?;
        let stored = self
            .stored_spec(&row)
            .map_err(|e| ServiceError::Other(anyhow::anyhow!("upstream {}: {e}", row.id)))?;
        let (replaced, field, names) = match (stored, &request.headers, &request.env) {
            (StoredSpec::StreamableHttp { url, .. }, Some(headers), None) => (
                StoredSpec::StreamableHttp {
                    url,
                    headers: headers.clone(),
                },
                "headers",
                headers.keys().cloned().collect::<Vec<_>>(),
            ),
            (StoredSpec::Stdio { command, .. }, None, Some(env)) => (
                StoredSpec::Stdio {
                    command,
                    env: env.clone(),
                },
                "env",
                env.keys().cloned().collect(),
            ),
            (StoredSpec::StreamableHttp { .. }, _, _) => {
                return Err(AppError::invalid_field(
                    "headers",
                    "a streamable_http upstream's credentials are its headers (the whole set)",
                )
                .into());
            }
            (StoredSpec::Stdio { .. }, _, _) => {
                return Err(AppError::invalid_field(
                    "env",
                    "a stdio upstream's credentials are its environment (the whole set)",
                )
                .into());
            }
        };
        UpstreamSpec::from(&replaced)
            .validate()
            .map_err(|e| match e {
                UpstreamError::InvalidSpec { reason } => {
                    ServiceError::from(AppError::invalid_field(field, reason))
                }
                other => upstream_error(other),
            })?;
        let spec = serde_json::to_string(&replaced).map_err(|e| ServiceError::Other(e.into()))?;
        let spec = self
            .secrets
            .seal(&crate::secrets::upstream_aad(tenant_id, &row.id), &spec);
        journal
            .admin(
                tenant_id,
                by,
                Decision::Allow,
                ReasonCode::Ok,
                "upstream.credentials",
                {
                    let mut detail = json!({"upstream_id": row.id, "credential_version": row.credential_version + 1});
                    detail[field] = json!(names);
                    detail
                },
            )
            .await?;
        if store::upstreams::replace_credentials(
            store,
            tenant_id,
            &row.id,
            &spec,
            row.credential_version,
        )
        .await?
        .is_none()
        {
            return Err(AppError::new(
                ErrorCode::Conflict,
                "the upstream changed meanwhile (removed, or its credentials replaced); read it again",
            )
            .into());
        }
        // This node's connection goes now; other nodes reconnect when they see the new version.
        self.forget(&row.id).await;
        let row = store::upstreams::find(store, tenant_id, &row.id)
            .await?
            .ok_or_else(|| AppError::not_found("upstream"))?;
        let tools = store::catalog::list(store, tenant_id)
            .await?
            .iter()
            .filter(|t| matches!(&t.source, engine::descriptor::ToolSource::Mcp { upstream_id, .. } if *upstream_id == row.id))
            .count();
        Ok(view(&row, tools))
    }

    /// The live connection to an upstream, connecting when there is none (or it closed). A new
    /// connection is watched: when the upstream says its tool list changed
    /// (`notifications/tools/list_changed`), the catalog is synced with it at once, so calls
    /// under older grants meet `manifest_drift` without waiting for an admin's sync; a sync
    /// that changed the catalog is journaled (`upstream.sync`, triggered by `list_changed`).
    pub async fn connection(
        &self,
        store: &Store,
        journal: &Journal,
        row: &UpstreamRow,
    ) -> Result<Arc<Connection>, UpstreamError> {
        let mut live = self.live.lock().await;
        match live.get(&row.id) {
            Some((version, c)) if *version == row.credential_version && !c.is_closed() => {
                return Ok(c.clone());
            }
            // Its credentials were replaced (on this node or another): connect with the new ones.
            Some((_, old)) => old.close().await,
            None => {}
        }
        let stored = self
            .stored_spec(row)
            .map_err(|reason| UpstreamError::InvalidSpec { reason })?;
        let connection = Arc::new(
            self.connector
                .connect(&UpstreamSpec::from(&stored), CONNECT_TIMEOUT)
                .await?,
        );
        connection.on_unattributed(unattributed(journal, row));
        live.insert(row.id.clone(), (row.credential_version, connection.clone()));
        tokio::spawn(follow_list_changes(
            store.clone(),
            journal.clone(),
            row.clone(),
            Arc::downgrade(&connection),
        ));
        tokio::spawn(follow_resource_updates(
            connection.resources_updated(),
            row.clone(),
            self.updates.clone(),
        ));
        Ok(connection)
    }

    async fn forget(&self, id: &str) {
        if let Some((_, c)) = self.live.lock().await.remove(id) {
            c.close().await;
        }
    }

    /// Closes every connection (shutdown, tests).
    pub async fn close_all(&self) {
        let all: Vec<_> = self
            .live
            .lock()
            .await
            .drain()
            .map(|(_, (_, c))| c)
            .collect();
        for c in all {
            c.close().await;
        }
    }
}

/// Journals each request of `row`'s for a client that belongs to no call in flight (it was
/// refused): a `client_request` record attributed to the upstream.
fn unattributed(journal: &Journal, row: &UpstreamRow) -> super::UnattributedFn {
    let journal = journal.clone();
    let tenant = row.tenant_id.clone();
    let actor = format!("upstream:{}", row.name);
    let upstream_id = row.id.clone();
    Arc::new(move |method: &'static str| {
        let mut r = journal::receipt(
            engine::receipt::ReceiptKind::ClientRequest,
            Decision::Deny,
            ReasonCode::NotCallable,
            &tenant,
            &actor,
            journal::OPERATOR,
        );
        r.issued_at = String::new();
        let mut d = journal::disclosures();
        d.insert_extra(
            "client_request",
            json!({
                "method": method,
                "upstream_id": upstream_id,
                "refused": "it belongs to no call in flight (the standalone stream, between calls, or several calls in flight on a stdio connection)",
            }),
        )
        .ok();
        let journal = journal.clone();
        tokio::spawn(async move {
            journal.record_outcome(r, &d).await;
        });
    })
}

/// How often a sync re-reads a tool row that another write changed under it before giving up.
const WRITE_ATTEMPTS: u32 = 8;

/// Catalogues what the upstream offers besides tools (what its capabilities declare): its
/// resources, templates and prompts, imported ([`super::import_items`]) and stored in place of
/// what it offered before, each changed one triaged against the definition the tenant last
/// accepted like a tool ([`crate::catalog::triage_item`]: a held item is neither listed nor
/// readable until an admin decides; each new hold is journaled, attributed to the upstream).
/// A listing that fails keeps what was catalogued and is reported. Reports what another
/// upstream offers too (exposed by neither).
async fn apply_items(
    store: &Store,
    journal: &Journal,
    row: &UpstreamRow,
    connection: &super::Connection,
) -> Result<aperture_types::dto::ItemsReport, ServiceError> {
    use aperture_types::dto::{HeldItemView, ItemsReport, RefusedItemView, SharedItemView};
    use store::items::Kind;
    let settings = crate::catalog::settings_of(store, &row.tenant_id).await?;
    let offers = connection.offers();
    let mut report = ItemsReport::default();
    let resources = match offers.resources {
        true => connection.list_resources().await,
        false => Ok(Vec::new()),
    };
    let templates = match offers.resources {
        true => connection.list_resource_templates().await,
        false => Ok(Vec::new()),
    };
    let prompts = match offers.prompts {
        true => connection.list_prompts().await,
        false => Ok(Vec::new()),
    };
    // A listing that failed leaves its kind as catalogued before.
    let mut unlisted = Vec::new();
    let mut listed = |kind: Kind, items: Result<Vec<serde_json::Value>, super::UpstreamError>| {
        items.unwrap_or_else(|e| {
            report.refused.push(RefusedItemView {
                kind: kind.as_str().to_owned(),
                raw: String::new(),
                reason: format!("the listing failed, the catalogue keeps what it had: {e}"),
            });
            unlisted.push(kind);
            Vec::new()
        })
    };
    let (imported, refused) = super::import_items(
        &row.name,
        listed(Kind::Resource, resources),
        listed(Kind::Template, templates),
        listed(Kind::Prompt, prompts),
    );
    report
        .refused
        .extend(refused.into_iter().map(|r| RefusedItemView {
            kind: r.kind.as_str().to_owned(),
            raw: r.raw,
            reason: r.reason,
        }));
    for kind in [Kind::Resource, Kind::Template, Kind::Prompt] {
        if unlisted.contains(&kind) {
            continue;
        }
        let before = store::items::of_upstream(store, &row.tenant_id, &row.id, kind).await?;
        let now = store::now_ms();
        let mut holds = Vec::new();
        let rows: Vec<store::items::ItemRow> = imported
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| {
                let definition_hash = engine::canonical::hash_value(&i.definition);
                let existing = before.iter().find(|b| b.key == i.key);
                let drift = existing.map_or_else(Default::default, |e| {
                    crate::catalog::triage_item(e, &i.definition, &definition_hash, &settings, now)
                });
                if let Some(held) = &drift.held {
                    report.held.push(HeldItemView {
                        kind: kind.as_str().to_owned(),
                        key: i.key.clone(),
                        changes: held.changes.iter().map(|c| c.as_str().into()).collect(),
                    });
                    let was = existing.and_then(|e| {
                        e.drift
                            .held
                            .as_ref()
                            .map(|h| (h.changes.clone(), e.definition_hash.clone()))
                    });
                    if was != Some((held.changes.clone(), definition_hash.clone())) {
                        holds.push((i.key.clone(), held.changes.clone(), definition_hash.clone()));
                    }
                }
                store::items::ItemRow {
                    upstream_id: row.id.clone(),
                    kind,
                    key: i.key.clone(),
                    raw: i.raw.clone(),
                    definition: i.definition.to_string(),
                    definition_hash,
                    drift,
                }
            })
            .collect();
        let count = u64::try_from(rows.len()).unwrap_or(u64::MAX);
        match kind {
            Kind::Resource => report.resources = count,
            Kind::Template => report.templates = count,
            Kind::Prompt => report.prompts = count,
        }
        store::items::replace(store, &row.tenant_id, &row.id, kind, &rows).await?;
        // Each new hold is evidence (recorded after the catalog holds the item: a hold that
        // cannot be journaled still holds).
        for (key, changes, definition_hash) in holds {
            let changes: Vec<&str> = changes.iter().map(|c| c.as_str()).collect();
            journal
                .admin(
                    &row.tenant_id,
                    &Author::new(format!("upstream:{}", row.name), journal::OPERATOR),
                    Decision::Allow,
                    ReasonCode::Ok,
                    "item.held",
                    json!({
                        "kind": kind.as_str(), "key": key, "upstream_id": row.id,
                        "changes": changes, "definition_hash": definition_hash,
                    }),
                )
                .await?;
        }
        // What another upstream offers too.
        let all = store::items::list(store, &row.tenant_id, kind).await?;
        for mine in rows {
            let upstream_ids: Vec<String> = all
                .iter()
                .filter(|other| other.key == mine.key)
                .map(|other| other.upstream_id.clone())
                .collect();
            if upstream_ids.len() > 1 {
                report.shared.push(SharedItemView {
                    kind: kind.as_str().to_owned(),
                    key: mine.key,
                    upstream_ids,
                });
            }
        }
    }
    Ok(report)
}

/// Brings the catalog in line with what the upstream lists: new tools added (risk unknown),
/// changed definitions updated (the admin's descriptor kept) and triaged against the definition
/// the tenant last accepted (a change of a class the tenant holds leaves the tool out of
/// manifests until an admin decides; each hold is journaled, attributed to the upstream),
/// vanished tools removed or, when the tenant holds removals, held.
async fn apply_listing(
    store: &Store,
    journal: &Journal,
    row: &UpstreamRow,
    raw: Vec<super::RawTool>,
) -> Result<SyncReport, ServiceError> {
    let imported = import(&row.name, &row.id, raw)
        .map_err(|e| ServiceError::Other(anyhow::anyhow!("import: {e}")))?;
    let settings = crate::catalog::settings_of(store, &row.tenant_id).await?;
    let mut report = SyncReport {
        upstream_id: row.id.clone(),
        tools: 0,
        added: vec![],
        changed: vec![],
        removed: vec![],
        held: vec![],
        skipped: vec![],
        items: Default::default(),
    };
    // Holds that are new (or hold another definition than before), to be journaled.
    let mut holds: Vec<(Revised, ToolDescriptor, Drift)> = Vec::new();
    let mut names = Vec::new();
    for listed in imported.tools {
        names.push(listed.name.clone());
        // Read, merge, write only if nobody wrote in between (an admin's descriptor, an admin's
        // decision on a held change, or another sync of the same upstream); otherwise merge
        // again with what is there now.
        let mut attempt = 0;
        loop {
            let mut tool = listed.clone();
            let current = store::catalog::find_revised(store, &row.tenant_id, &tool.name).await?;
            let written = match &current {
                Some(existing) => {
                    let existing_tool = &existing.tool;
                    // The admin's descriptor stays; only the tool's own definition follows the upstream.
                    tool.version = existing_tool.version.clone();
                    tool.family = existing_tool.family.clone();
                    tool.risk = existing_tool.risk.clone();
                    tool.required_scope = existing_tool.required_scope.clone();
                    tool.dry_run_argument = existing_tool.dry_run_argument.clone();
                    tool.price_cents = existing_tool.price_cents;
                    let drift = crate::catalog::triage(existing, &tool, &settings, store::now_ms());
                    if *existing_tool == tool && existing.drift == drift {
                        // Nothing to write: an unchanged row is not rewritten on every sync. A
                        // tool still held is still reported.
                        if let Some(held) = &drift.held {
                            report.held.push(aperture_types::dto::HeldChangeView {
                                tool: tool.name.clone(),
                                changes: held.changes.iter().map(|c| c.as_str().into()).collect(),
                            });
                        }
                        break;
                    }
                    let written = store::catalog::write_synced_if(
                        store,
                        &row.tenant_id,
                        &tool,
                        &drift,
                        Some(existing.revision),
                    )
                    .await?;
                    if written {
                        if tool.definition_hash() != existing_tool.definition_hash() {
                            report.changed.push(tool.name.clone());
                        }
                        if let Some(held) = &drift.held {
                            report.held.push(aperture_types::dto::HeldChangeView {
                                tool: tool.name.clone(),
                                changes: held.changes.iter().map(|c| c.as_str().into()).collect(),
                            });
                            if newly_held(existing, &tool, &drift) {
                                holds.push((existing.clone(), tool.clone(), drift.clone()));
                            }
                        }
                    }
                    written
                }
                None => {
                    let written =
                        store::catalog::write_if(store, &row.tenant_id, &tool, None).await?;
                    if written {
                        report.added.push(tool.name.clone());
                    }
                    written
                }
            };
            if written {
                break;
            }
            attempt += 1;
            if attempt == WRITE_ATTEMPTS {
                return Err(ServiceError::Other(anyhow::anyhow!(
                    "tool {} kept changing while it was synced",
                    tool.name
                )));
            }
        }
    }
    let hold_removals = settings.action(DriftClass::Removed) == Action::Hold;
    for name in store::catalog::names_of_upstream(store, &row.tenant_id, &row.id).await? {
        if names.contains(&name) {
            continue;
        }
        let mut attempt = 0;
        loop {
            let Some(existing) = store::catalog::find_revised(store, &row.tenant_id, &name).await?
            else {
                break;
            };
            let written = if hold_removals {
                let drift = crate::catalog::triage_removed(&existing, store::now_ms());
                if existing.drift == drift {
                    break;
                }
                let written = store::catalog::set_drift_if(
                    store,
                    &row.tenant_id,
                    &name,
                    &drift,
                    existing.revision,
                )
                .await?;
                if written {
                    report.removed.push(name.clone());
                    report.held.push(aperture_types::dto::HeldChangeView {
                        tool: name.clone(),
                        changes: vec![DriftClass::Removed.as_str().into()],
                    });
                    holds.push((existing.clone(), existing.tool.clone(), drift));
                }
                written
            } else {
                let written =
                    store::catalog::delete_if(store, &row.tenant_id, &name, existing.revision)
                        .await?;
                if written {
                    report.removed.push(name.clone());
                }
                written
            };
            if written {
                break;
            }
            attempt += 1;
            if attempt == WRITE_ATTEMPTS {
                return Err(ServiceError::Other(anyhow::anyhow!(
                    "tool {name} kept changing while it was synced"
                )));
            }
        }
    }
    report.skipped = imported
        .skipped
        .into_iter()
        .map(|s| aperture_types::dto::SkippedToolView {
            raw_name: s.raw_name,
            reason: s.reason.to_string(),
        })
        .collect();
    report.tools = names.len() as u64;
    store::upstreams::set_status(store, &row.id, "connected", None, true).await?;
    // Each hold is evidence: which definition was accepted, which one the upstream offers now.
    // Recorded after the catalog holds the tool (a hold that cannot be journaled still holds).
    for (existing, tool, drift) in holds {
        let accepted = existing.drift.accepted_or(&existing.tool).applied_to(&tool);
        let changes: Vec<&str> = drift
            .held
            .as_ref()
            .map(|h| h.changes.iter().map(|c| c.as_str()).collect())
            .unwrap_or_default();
        journal
            .admin(
                &row.tenant_id,
                &Author::new(format!("upstream:{}", row.name), journal::OPERATOR),
                Decision::Allow,
                ReasonCode::Ok,
                "tool.held",
                json!({
                    "tool": tool.name, "upstream_id": row.id, "changes": changes,
                    "accepted_definition_hash": accepted.definition_hash(),
                    "definition_hash": tool.definition_hash(),
                }),
            )
            .await?;
    }
    tracing::info!(upstream = %row.id, tools = report.tools, added = report.added.len(), changed = report.changed.len(), removed = report.removed.len(), held = report.held.len(), "upstream synced");
    Ok(report)
}

/// Whether `drift` holds something not held before: the tool was not held, or held for another
/// definition or other classes.
fn newly_held(existing: &Revised, tool: &ToolDescriptor, drift: &Drift) -> bool {
    match (&existing.drift.held, &drift.held) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(before), Some(now)) => {
            before.changes != now.changes
                || Definition::from(&existing.tool) != Definition::from(tool)
        }
    }
}

/// Hands on every `notifications/resources/updated` of a connection (`heard`), naming its
/// upstream; ends with the connection.
async fn follow_resource_updates(
    mut heard: tokio::sync::broadcast::Receiver<String>,
    row: UpstreamRow,
    to: tokio::sync::broadcast::Sender<ResourceUpdated>,
) {
    loop {
        match heard.recv().await {
            Ok(uri) => {
                // Nobody listening on this node is fine.
                let _ = to.send(ResourceUpdated {
                    tenant_id: row.tenant_id.clone(),
                    upstream_id: row.id.clone(),
                    uri,
                });
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(upstream = %row.id, missed, "resource updates were missed");
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Re-syncs the catalog each time `connection` signals a changed tool list; ends with it.
async fn follow_list_changes(
    store: Store,
    journal: Journal,
    row: UpstreamRow,
    connection: std::sync::Weak<Connection>,
) {
    let Some(mut changed) = connection.upgrade().map(|c| c.tools_changed()) else {
        return;
    };
    while changed.changed().await.is_ok() {
        let Some(c) = connection.upgrade().filter(|c| !c.is_closed()) else {
            return;
        };
        let outcome = match c.list_tools().await {
            Ok(raw) => apply_listing(&store, &journal, &row, raw).await,
            Err(e) => Err(upstream_error(e)),
        };
        match outcome {
            // The catalog follows the upstream first (older grants' calls then meet drift), and
            // what changed is recorded, attributed to the upstream itself.
            Ok(report)
                if !(report.added.is_empty()
                    && report.changed.is_empty()
                    && report.removed.is_empty()) =>
            {
                let recorded = journal
                    .admin(
                        &row.tenant_id,
                        &Author::new(format!("upstream:{}", row.name), journal::OPERATOR),
                        Decision::Allow,
                        ReasonCode::Ok,
                        "upstream.sync",
                        json!({
                            "upstream_id": row.id, "trigger": "list_changed",
                            "added": report.added, "changed": report.changed, "removed": report.removed,
                            "held": report.held.iter().map(|h| &h.tool).collect::<Vec<_>>(),
                        }),
                    )
                    .await;
                if let Err(e) = recorded {
                    tracing::error!(upstream = %row.id, error = %e, "an automatic re-sync could not be journaled");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(upstream = %row.id, error = %e.into_app_error().message, "re-sync after list_changed failed");
            }
        }
    }
}

/// `GET /upstreams` (read): no spec, no secret, only what may be shown.
pub async fn list(store: &Store, principal: &Principal) -> Result<Vec<UpstreamView>, ServiceError> {
    principal.require(scope::READ)?;
    list_unchecked(store, &principal.tenant_id).await
}

/// The upstreams of `tenant_id`, as [`list`] shows them, for the operator's command line.
pub async fn list_unchecked(
    store: &Store,
    tenant_id: &str,
) -> Result<Vec<UpstreamView>, ServiceError> {
    let catalog = store::catalog::list(store, tenant_id).await?;
    Ok(store::upstreams::list(store, tenant_id)
        .await?
        .iter()
        .map(|row| {
            let tools = catalog
                .iter()
                .filter(|t| matches!(&t.source, engine::descriptor::ToolSource::Mcp { upstream_id, .. } if *upstream_id == row.id))
                .count();
            view(row, tools)
        })
        .collect())
}

fn parse(request: &RegisterUpstreamRequest) -> Result<StoredSpec, ServiceError> {
    let mut fields = Vec::new();
    if !engine::descriptor::is_valid_server_name(&request.name) {
        fields.push(FieldError {
            path: "name".into(),
            message: "1–32 characters of a-z, 0-9 and - (no _)".into(),
        });
    }
    let spec = match request.transport.as_str() {
        "stdio" => {
            if request.url.is_some() {
                fields.push(FieldError {
                    path: "url".into(),
                    message: "stdio upstreams have a command, not a URL".into(),
                });
            }
            if request.headers.is_some() {
                fields.push(FieldError {
                    path: "headers".into(),
                    message: "stdio upstreams take no HTTP headers; pass credentials in env".into(),
                });
            }
            match &request.command {
                Some(c) if !c.is_empty() => Some(StoredSpec::Stdio {
                    command: c.clone(),
                    env: request.env.clone().unwrap_or_default(),
                }),
                _ => {
                    fields.push(FieldError {
                        path: "command".into(),
                        message: "required for stdio: the program and its arguments".into(),
                    });
                    None
                }
            }
        }
        "streamable_http" => {
            if request.command.is_some() {
                fields.push(FieldError {
                    path: "command".into(),
                    message: "streamable_http upstreams have a URL, not a command".into(),
                });
            }
            if request.env.is_some() {
                fields.push(FieldError {
                    path: "env".into(),
                    message: "streamable_http upstreams take no environment (it is for stdio \
                              processes); send credentials as headers"
                        .into(),
                });
            }
            match &request.url {
                Some(u) if !u.is_empty() => Some(StoredSpec::StreamableHttp {
                    url: u.clone(),
                    headers: request.headers.clone().unwrap_or_default(),
                }),
                _ => {
                    fields.push(FieldError {
                        path: "url".into(),
                        message: "required for streamable_http".into(),
                    });
                    None
                }
            }
        }
        _ => {
            fields.push(FieldError {
                path: "transport".into(),
                message: "stdio or streamable_http".into(),
            });
            None
        }
    };
    match (fields.is_empty(), spec) {
        (true, Some(spec)) => Ok(spec),
        _ => Err(AppError::invalid(fields).into()),
    }
}
