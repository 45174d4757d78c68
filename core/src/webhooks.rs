//! Webhooks: a tenant's approvers hear about calls that wait for them (issue 28).
//!
//! An admin registers a URL and the events it wants (`POST /webhooks`); the URL passes the same
//! address guard as upstream URLs, and its signing secret (`whsec_…`, shown once) is sealed at
//! rest like upstream credentials. Events come from an outbox: the transaction that parks,
//! decides, expires or cancels an invocation also inserts one delivery per webhook that wants
//! the event ([`crate::store::webhooks::enqueue`]), so a node that stops right after the change
//! loses nothing and no change is announced twice. The sender of whichever node claims a due
//! delivery first posts it, signed as the Standard Webhooks specification says (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`), and retries a failed one on a backoff schedule
//! (`APERTURE_WEBHOOK_RETRY_SECONDS`); every attempt is kept for admins. The payload carries
//! ids, the tool, the status and links to the approval page and the decision receipt, never
//! argument values.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aperture_types::dto::{
    CreateWebhookRequest, CreatedWebhook, WebhookAttemptView, WebhookDeliveryView, WebhookPanel,
    WebhookView, WebhooksView,
};
use aperture_types::error::{AppError, ErrorCode};
use base64::Engine as _;
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use rand::RngCore as _;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::error::ServiceError;
use crate::journal::Journal;
use crate::principal::Principal;
use crate::secrets::{SecretBox, webhook_aad};
use crate::store::webhooks::{self as rows, Attempt, DeliveryRow, WebhookRow};
use crate::store::{self, Store};

/// A receiver's answer that it wants no more deliveries (Standard Webhooks: `410 Gone`): the
/// delivery fails at once instead of being retried.
const GONE: u16 = 410;

/// The events a webhook may ask for.
pub const EVENTS: [&str; 4] = [
    "invocation.parked",
    "invocation.decided",
    "invocation.expired",
    "invocation.cancelled",
];

/// One attempt's limit (connecting, sending, the receiver's answer).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a claimed delivery is held by its sender: longer than an attempt can take; one
/// whose sender stopped is due again after it.
const CLAIM_FOR_MS: i64 = 60_000;
/// Deliveries one pass sends at once.
const BATCH: i64 = 16;
/// Webhooks a tenant may have.
const MAX_PER_TENANT: usize = 20;
/// Longest URL accepted.
const MAX_URL: usize = 2048;
/// How often the sender looks for due deliveries without being woken.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// Deliveries per webhook the admin pages show.
pub const SHOWN_DELIVERIES: i64 = 20;

/// The tenant-independent part: keys, the address rule, the schedule and the HTTP client.
pub struct Webhooks {
    secrets: Arc<SecretBox>,
    allow_private: bool,
    retry: Vec<Duration>,
    public_base: String,
    http: upstream_reqwest::Client,
    wake: Notify,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("allow_private", &self.allow_private)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Resolves a receiver's name as the upstream guard does: unless private addresses are
/// allowed, a name with any internal address is refused at every connection (DNS rebinding
/// after registration included).
struct GuardedResolver {
    public_only: bool,
}

impl upstream_reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: upstream_reqwest::dns::Name) -> upstream_reqwest::dns::Resolving {
        let public_only = self.public_only;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = crate::upstream::resolve(&host, 0, public_only)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addresses.into_iter()) as upstream_reqwest::dns::Addrs)
        })
    }
}

fn view(row: &WebhookRow, tally: Option<&(String, i64, i64, i64, Option<i64>)>) -> WebhookView {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    WebhookView {
        id: row.id.clone(),
        url: row.url.clone(),
        events: row.event_types(),
        created_by: row.created_by.clone(),
        created_at: store::rfc3339(row.created_at),
        pending: tally.map_or(0, |t| count(t.1)),
        delivered: tally.map_or(0, |t| count(t.2)),
        failed: tally.map_or(0, |t| count(t.3)),
        last_delivered_at: tally.and_then(|t| t.4).map(store::rfc3339),
    }
}

fn delivery_view(d: &DeliveryRow, history: Vec<WebhookAttemptView>) -> WebhookDeliveryView {
    let tool = serde_json::from_str::<Value>(&d.data)
        .ok()
        .and_then(|v| v.get("tool").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    WebhookDeliveryView {
        id: d.id.clone(),
        event: d.event.clone(),
        invocation_id: d.subject.clone(),
        tool,
        status: d.status.clone(),
        attempts: d.attempts,
        next_attempt_at: (d.status == "pending").then(|| store::rfc3339(d.next_attempt_at)),
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        created_at: store::rfc3339(d.created_at),
        delivered_at: d.delivered_at.map(store::rfc3339),
        history,
    }
}

/// A webhook URL as the journal records it: its origin and a digest of the whole. Chat
/// services' webhook URLs are credentials in their path (anyone who has one can post), and the
/// journal is read by more people than the admins who see the URL itself.
fn journaled_url(url: &str) -> Value {
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(url.as_bytes()));
    json!({
        "origin": crate::config::origin_of(url),
        "sha256": digest,
    })
}

/// A new signing secret: `whsec_` and 32 random bytes in base64, as Standard Webhooks has it.
fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

impl Webhooks {
    /// Webhooks sealed with `secrets`, to receivers the upstream rule allows
    /// (`allow_private`), retried after each of `retry`, with links to `public_base`.
    pub fn new(
        secrets: Arc<SecretBox>,
        allow_private: bool,
        retry: Vec<Duration>,
        public_base: String,
    ) -> anyhow::Result<Self> {
        let tls = crate::upstream::tls_config(false)?;
        let http = upstream_reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .dns_resolver(Arc::new(GuardedResolver {
                public_only: !allow_private,
            }))
            // The guard must see the address really connected to, and a redirect could send
            // the delivery to one it never saw.
            .no_proxy()
            .redirect(upstream_reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(ATTEMPT_TIMEOUT)
            .user_agent(concat!("aperture-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            secrets,
            allow_private,
            retry,
            public_base,
            http,
            wake: Notify::new(),
        })
    }

    /// Wakes this node's sender (something may be due).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    async fn check_url(&self, url: &str) -> Result<(), String> {
        if url.len() > MAX_URL {
            return Err(format!("at most {MAX_URL} characters"));
        }
        crate::upstream::check_url(url, self.allow_private)
            .await
            .map_err(|e| match e {
                crate::upstream::UpstreamError::UrlRefused { reason } => reason.replace(
                    "upstreams must be public unless APERTURE_ALLOW_PRIVATE_UPSTREAMS=1",
                    "webhook URLs must be public unless APERTURE_ALLOW_PRIVATE_UPSTREAMS=1",
                ),
                other => other.to_string(),
            })
    }

    /// `POST /webhooks` (admin): checks the URL and the events, seals a new secret, journals
    /// the creation, and returns the secret this once.
    pub async fn create(
        &self,
        store: &Store,
        journal: &Journal,
        principal: &Principal,
        request: &CreateWebhookRequest,
    ) -> Result<CreatedWebhook, ServiceError> {
        principal.require(scope::ADMIN)?;
        let url = request.url.trim();
        if url.is_empty() {
            return Err(AppError::invalid_field("url", "required").into());
        }
        self.check_url(url)
            .await
            .map_err(|reason| AppError::invalid_field("url", reason))?;
        if request.events.is_empty() {
            return Err(AppError::invalid_field(
                "events",
                format!("at least one of {}", EVENTS.join(", ")),
            )
            .into());
        }
        let mut events = Vec::new();
        for (i, event) in request.events.iter().enumerate() {
            if !EVENTS.contains(&event.as_str()) {
                return Err(AppError::invalid_field(
                    format!("events[{i}]"),
                    format!("`{event}` is not one of {}", EVENTS.join(", ")),
                )
                .into());
            }
            if !events.contains(event) {
                events.push(event.clone());
            }
        }
        let tenant = &principal.tenant_id;
        if rows::list(store, tenant).await?.len() >= MAX_PER_TENANT {
            return Err(AppError::new(
                ErrorCode::Conflict,
                format!("a tenant has at most {MAX_PER_TENANT} webhooks; delete one first"),
            )
            .into());
        }
        let id = crate::ids::new_id("whk");
        let secret = new_secret();
        let row = WebhookRow {
            secret: self.secrets.seal(&webhook_aad(tenant, &id), &secret),
            id,
            tenant_id: tenant.clone(),
            url: url.to_owned(),
            events: serde_json::to_string(&events).map_err(anyhow::Error::from)?,
            created_by: principal.as_creator(),
            created_at: store::now_ms(),
        };
        journal
            .admin(
                tenant,
                &principal.author(),
                Decision::Allow,
                ReasonCode::Ok,
                "webhook.create",
                json!({"webhook_id": row.id, "url": journaled_url(&row.url), "events": events}),
            )
            .await?;
        rows::insert(store, &row).await?;
        Ok(CreatedWebhook {
            webhook: view(&row, None),
            secret,
        })
    }

    /// `GET /webhooks` (admin): never the secrets.
    pub async fn list(
        &self,
        store: &Store,
        principal: &Principal,
    ) -> Result<Vec<WebhookView>, ServiceError> {
        principal.require(scope::ADMIN)?;
        let tallies = rows::tallies(store, &principal.tenant_id).await?;
        Ok(rows::list(store, &principal.tenant_id)
            .await?
            .iter()
            .map(|w| view(w, tallies.iter().find(|t| t.0 == w.id)))
            .collect())
    }

    /// `DELETE /webhooks/{id}` (admin): journaled, then gone with its pending deliveries.
    pub async fn delete(
        &self,
        store: &Store,
        journal: &Journal,
        principal: &Principal,
        id: &str,
    ) -> Result<WebhookView, ServiceError> {
        principal.require(scope::ADMIN)?;
        let row = rows::find(store, &principal.tenant_id, id)
            .await?
            .ok_or_else(|| AppError::not_found("webhook"))?;
        journal
            .admin(
                &principal.tenant_id,
                &principal.author(),
                Decision::Allow,
                ReasonCode::Ok,
                "webhook.delete",
                json!({"webhook_id": row.id, "url": journaled_url(&row.url)}),
            )
            .await?;
        rows::delete(store, &principal.tenant_id, id).await?;
        Ok(view(&row, None))
    }

    /// `GET /webhooks/{id}/deliveries` (admin): the latest deliveries with every attempt.
    pub async fn deliveries(
        &self,
        store: &Store,
        principal: &Principal,
        id: &str,
        limit: i64,
    ) -> Result<Vec<WebhookDeliveryView>, ServiceError> {
        principal.require(scope::ADMIN)?;
        rows::find(store, &principal.tenant_id, id)
            .await?
            .ok_or_else(|| AppError::not_found("webhook"))?;
        let deliveries = rows::deliveries(store, &principal.tenant_id, id, limit).await?;
        let ids: Vec<String> = deliveries.iter().map(|d| d.id.clone()).collect();
        let attempts = rows::attempts(store, &ids).await?;
        Ok(deliveries
            .iter()
            .map(|d| {
                let history = attempts
                    .iter()
                    .filter(|(id, _)| *id == d.id)
                    .map(|(_, a)| WebhookAttemptView {
                        attempt: a.attempt,
                        attempted_at: store::rfc3339(a.attempted_at),
                        duration_ms: a.duration_ms,
                        http_status: a.http_status,
                        error: a.error.clone(),
                    })
                    .collect();
                delivery_view(d, history)
            })
            .collect())
    }

    /// The dashboard's page: every webhook with its latest deliveries.
    pub async fn page(
        &self,
        store: &Store,
        principal: &Principal,
    ) -> Result<WebhooksView, ServiceError> {
        let mut webhooks = Vec::new();
        for webhook in self.list(store, principal).await? {
            let deliveries = self
                .deliveries(store, principal, &webhook.id, SHOWN_DELIVERIES)
                .await?;
            webhooks.push(WebhookPanel {
                webhook,
                deliveries,
            });
        }
        Ok(WebhooksView { webhooks })
    }

    /// Seals every stored secret that is not sealed under the current key (after a rotation);
    /// returns how many it sealed.
    pub async fn reseal_all(&self, store: &Store) -> anyhow::Result<usize> {
        let current = format!("enc:v1:{}:", self.secrets.current_id());
        let mut sealed = 0;
        for (tenant_id, id, secret) in rows::all_secrets(store).await? {
            if secret.starts_with(&current) {
                continue;
            }
            let aad = webhook_aad(&tenant_id, &id);
            let plain = self
                .secrets
                .open(&aad, &secret)
                .map_err(|e| anyhow::anyhow!("webhook {id} of tenant {tenant_id}: {e}"))?;
            let new = self.secrets.seal(&aad, &plain);
            if rows::reseal_secret(store, &tenant_id, &id, &secret, &new).await? {
                sealed += 1;
            }
        }
        Ok(sealed)
    }

    /// Sends what is due until the task is dropped (spawned by the server): woken by this
    /// node's changes and by every node's invocation events, else once a second.
    pub async fn run(self: Arc<Self>, store: Store, events: Arc<crate::events::Bus>) {
        let mut heard = events.subscribe();
        loop {
            if let Err(e) = self.pass(&store).await {
                tracing::warn!(error = %e, "sending webhook deliveries");
            }
            tokio::select! {
                () = self.wake.notified() => {}
                r = heard.recv() => match r {
                    Ok(e) if !e.kind.starts_with("invocation.") => continue,
                    // No bus any more (the server is stopping): the timer alone.
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(POLL_EVERY).await;
                    }
                    _ => {}
                },
                () = tokio::time::sleep(POLL_EVERY) => {}
            }
        }
    }

    /// One pass: claims the due deliveries and sends them at once. Returns how many it tried.
    pub async fn pass(&self, store: &Store) -> Result<usize, ServiceError> {
        let mut tried = 0;
        loop {
            let now = store::now_ms();
            let claimed = rows::claim_due(store, now, now + CLAIM_FOR_MS, BATCH).await?;
            if claimed.is_empty() {
                return Ok(tried);
            }
            tried += claimed.len();
            let sends = claimed.iter().map(|d| self.attempt(store, d));
            for done in futures_util::future::join_all(sends).await {
                if let Err(e) = done {
                    tracing::warn!(error = %e, "recording a webhook attempt");
                }
            }
        }
    }

    /// The body of a delivery: the same bytes at every attempt.
    fn body(&self, d: &DeliveryRow) -> String {
        let mut data: Value = serde_json::from_str(&d.data).unwrap_or_else(|_| json!({}));
        if let Some(map) = data.as_object_mut() {
            map.insert(
                "approval_url".into(),
                json!(format!("{}/approvals#{}", self.public_base, d.subject)),
            );
            if let Some(receipt) = map.get("decision_receipt_id").and_then(Value::as_str) {
                let url = format!("{}/receipts/{receipt}", self.public_base);
                map.insert("receipt_url".into(), json!(url));
            }
        }
        json!({
            "type": d.event,
            "timestamp": store::rfc3339(d.created_at),
            "data": data,
        })
        .to_string()
    }

    /// Makes the attempt claimed delivery `d` counts, and records it. A failed attempt is
    /// tried again after the next wait of the retry policy, except when the receiver answered
    /// [`GONE`].
    async fn attempt(&self, store: &Store, d: &DeliveryRow) -> Result<(), ServiceError> {
        let started_at = store::now_ms();
        let clock = Instant::now();
        let outcome = self.send(store, d).await;
        let gone = matches!(outcome, Ok(GONE));
        let (http_status, error) = match outcome {
            Ok(status) if (200..300).contains(&status) => (Some(i64::from(status)), None),
            Ok(GONE) => (
                Some(i64::from(GONE)),
                Some(format!(
                    "the receiver answered HTTP {GONE} Gone: it takes no more of this message, \
                     so it is not sent again"
                )),
            ),
            Ok(status) => (
                Some(i64::from(status)),
                Some(format!("the receiver answered HTTP {status}")),
            ),
            Err(e) => (None, Some(e)),
        };
        let delivered = error.is_none();
        let retry_at = if delivered || gone {
            None
        } else {
            usize::try_from(d.attempts - 1)
                .ok()
                .and_then(|i| self.retry.get(i))
                .map(|wait| store::now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
        };
        let attempt = Attempt {
            attempt: d.attempts,
            attempted_at: started_at,
            duration_ms: i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX),
            http_status,
            error,
        };
        rows::record_attempt(store, &d.id, &attempt, delivered, retry_at).await?;
        Ok(())
    }

    /// Posts delivery `d`: the receiver's HTTP status, or why it was not reached.
    async fn send(&self, store: &Store, d: &DeliveryRow) -> Result<u16, String> {
        let webhook = rows::find(store, &d.tenant_id, &d.webhook_id)
            .await
            .map_err(|e| format!("reading the webhook: {e}"))?
            .ok_or("the webhook was deleted")?;
        // IP literals never reach the resolver: the URL is checked before every attempt.
        self.check_url(&webhook.url)
            .await
            .map_err(|reason| format!("address refused: {reason}"))?;
        let secret = self
            .secrets
            .open(
                &webhook_aad(&webhook.tenant_id, &webhook.id),
                &webhook.secret,
            )
            .map_err(|e| format!("the signing secret cannot be opened: {e}"))?;
        let body = self.body(d);
        let timestamp = time::OffsetDateTime::now_utc().unix_timestamp();
        let signature = standardwebhooks::Webhook::new(&secret)
            .and_then(|w| w.sign(&d.id, timestamp, body.as_bytes()))
            .map_err(|e| format!("signing: {e}"))?;
        let response = self
            .http
            .post(&webhook.url)
            .header("content-type", "application/json")
            .header(standardwebhooks::HEADER_WEBHOOK_ID, &d.id)
            .header(
                standardwebhooks::HEADER_WEBHOOK_TIMESTAMP,
                timestamp.to_string(),
            )
            .header(standardwebhooks::HEADER_WEBHOOK_SIGNATURE, signature)
            .body(body)
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        Ok(response.status().as_u16())
    }
}

/// An error with its causes ("connecting: dns error: `x` is a loopback address …").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `APERTURE_WEBHOOK_RETRY_SECONDS`: waits after each failed attempt, comma-separated.
pub fn parse_retry(text: &str) -> Result<Vec<Duration>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| format!("`{s}` is not a number of seconds"))
        })
        .collect()
}
