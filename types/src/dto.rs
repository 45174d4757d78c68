//! Data the dashboard and the REST API exchange: requests and views. Never database rows: the
//! server maps its rows into these, so a column added for bookkeeping never leaks.

use serde::{Deserialize, Serialize};

/// The signed-in person, as the dashboard shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    /// Tenant the user belongs to.
    pub tenant_id: String,
    /// The user's name (also their actor id).
    pub username: String,
    /// Scopes held.
    pub scopes: Vec<String>,
}

impl Me {
    /// Whether the user holds `scope` (with `:admin` implying the other Aperture scopes).
    pub fn can(&self, scope: &str) -> bool {
        engine::scope::ScopeSet::parse(&self.scopes).is_ok_and(|s| s.satisfies(scope))
    }
}

/// `POST /tokens` and the dashboard's token form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// The actor every call made with this token is attributed to.
    pub actor_id: String,
    /// Scopes granted.
    pub scopes: Vec<String>,
    /// A label for people (optional).
    #[serde(default)]
    pub name: Option<String>,
    /// Expiry as RFC 3339 (optional; no expiry when absent).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Environments the token may open sessions in (`*`: every one); the tenant's default
    /// environment when absent.
    #[serde(default)]
    pub environments: Option<Vec<String>>,
}

/// An API token as listed. The secret is never part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    /// `tok_…`
    pub id: String,
    /// Actor of the calls made with it.
    pub actor_id: String,
    /// Label.
    pub name: Option<String>,
    /// Scopes granted.
    pub scopes: Vec<String>,
    /// The principal that created it.
    pub created_by: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, when it stops working.
    pub expires_at: Option<String>,
    /// RFC 3339, when it was revoked.
    pub revoked_at: Option<String>,
    /// RFC 3339, last successful authentication.
    pub last_used_at: Option<String>,
    /// `active`, `expired` or `revoked`.
    pub status: TokenStatus,
    /// Environments it may open sessions in (`*`: every one).
    #[serde(default)]
    pub environments: Vec<String>,
}

/// Whether a token still authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenStatus {
    /// Authenticates.
    Active,
    /// Past its `expires_at`.
    Expired,
    /// Revoked by an admin.
    Revoked,
}

/// A token just created: the only time its secret is ever shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    /// The stored token.
    pub token: TokenView,
    /// `apt_…`; shown once, never stored.
    pub secret: String,
}

/// `POST /users` and the dashboard's user form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    /// Sign-in name, unique in the tenant.
    pub username: String,
    /// Initial password.
    pub password: String,
    /// Scopes granted.
    pub scopes: Vec<String>,
    /// Environments the user may open sessions in (`*`: every one); the tenant's default
    /// environment when absent.
    #[serde(default)]
    pub environments: Option<Vec<String>>,
}

/// `PUT /users/{username}/scopes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateScopesRequest {
    /// The complete new set of scopes.
    pub scopes: Vec<String>,
    /// The complete new set of environments (unchanged when absent).
    #[serde(default)]
    pub environments: Option<Vec<String>>,
}

/// A dashboard user as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    /// `usr_…`: the immutable id receipts name as the principal.
    #[serde(default)]
    pub id: String,
    /// Sign-in name.
    pub username: String,
    /// Scopes held.
    pub scopes: Vec<String>,
    /// RFC 3339.
    pub created_at: String,
    /// Who created the user (`operator` for the command line).
    pub created_by: String,
    /// Environments the user may open sessions in (`*`: every one).
    #[serde(default)]
    pub environments: Vec<String>,
}

/// Counts for the overview page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    /// The signed-in user.
    pub me: Me,
    /// Tokens that still authenticate.
    pub active_tokens: u64,
    /// Users in the tenant.
    pub users: u64,
    /// Whether the figures below were read (they need the read scope).
    pub can_read: bool,
    /// Call decisions of the last 24 hours, per hour.
    pub last_day: Activity,
    /// Call decisions of the last 7 days, per day.
    pub last_week: Activity,
    /// The most frequent deny reasons of the last 7 days, most frequent first.
    pub top_deny_reasons: Vec<ReasonCount>,
    /// Calls waiting for a person (parked or staged).
    pub waiting: u64,
    /// RFC 3339: when the oldest of them was parked.
    pub oldest_waiting_at: Option<String>,
    /// The call that has waited longest.
    #[serde(default)]
    pub oldest_waiting: Option<WaitingCall>,
    /// The journal chain as the background verifier last saw it (`None` before its first pass).
    pub chain: Option<ChainView>,
    /// The journal's latest signed checkpoint (`None`: none made yet).
    pub checkpoint: Option<CheckpointRow>,
    /// RFC 3339: when these figures were read.
    pub now: String,
}

/// Decisions over a period, in equal buckets (oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// Length of a bucket.
    pub bucket_seconds: u64,
    /// RFC 3339 start of the first bucket.
    pub start: String,
    /// The buckets.
    pub buckets: Vec<ActivityBucket>,
}

/// Call decisions in one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityBucket {
    /// Allowed (run, dry run, or accepted as a job).
    pub allowed: u64,
    /// Denied.
    pub denied: u64,
    /// Waiting for a person (parked, staged, or awaiting confirmation).
    pub parked: u64,
}

/// A reason code and how often it was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonCount {
    /// Reason code.
    pub reason: String,
    /// How often.
    pub count: u64,
}

/// The journal chain's verification status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainView {
    /// The last record that verified.
    pub verified: u64,
    /// The first bad record, when there is one.
    pub first_bad: Option<u64>,
    /// What is wrong with it.
    pub problem: Option<String>,
    /// RFC 3339 of the check.
    pub checked_at: String,
}

/// One stored version of a policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyVersionView {
    /// Policy id.
    pub policy_id: String,
    /// From 1.
    pub version: u64,
    /// The policy document as stored.
    pub document: serde_json::Value,
    /// Who saved it.
    pub created_by: String,
    /// RFC 3339.
    pub created_at: String,
}

/// A policy in the list: its latest version and where it is active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySummary {
    /// Policy id.
    pub policy_id: String,
    /// Latest version.
    pub latest_version: u64,
    /// RFC 3339 of the latest version.
    pub updated_at: String,
    /// Environments whose new sessions get this policy.
    pub active_in: Vec<String>,
}

/// Everything the policy editor needs, in one answer: the versions (newest first; empty for a
/// policy not saved yet), where it is active, the tenant's catalog and what this deployment can
/// enforce, so the browser previews exactly what the server would grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyEditorData {
    /// Policy id.
    pub policy_id: String,
    /// Stored versions, newest first.
    pub versions: Vec<PolicyVersionView>,
    /// Environments whose new sessions get this policy.
    pub active_in: Vec<String>,
    /// The tenant's tool catalog.
    pub catalog: Vec<engine::descriptor::ToolDescriptor>,
    /// The tenant's catalogued resources, resource templates and prompts.
    #[serde(default)]
    pub items: Vec<engine::preview::CatalogItem>,
    /// What the deployment can enforce (validation depends on it).
    pub capabilities: engine::validate::RuntimeCapabilities,
    /// Whether the policy is the built-in one (read-only).
    pub builtin: bool,
}

/// `POST /policies/{id}:activate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivateRequest {
    /// Environment (`default` when absent).
    #[serde(default)]
    pub environment: Option<String>,
}

/// `POST /policies:validate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationResult {
    /// Whether the document is a valid policy for this deployment.
    pub valid: bool,
    /// Every problem, with its field path.
    pub errors: Vec<crate::error::FieldError>,
}

/// The session a preview imagines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewContext {
    /// Environment (`default` when absent).
    #[serde(default)]
    pub environment: Option<String>,
    /// Actor (the caller's own when absent).
    #[serde(default)]
    pub actor: Option<String>,
    /// Preset hint.
    #[serde(default)]
    pub preset: Option<String>,
    /// Entity hint.
    #[serde(default)]
    pub entity: Option<String>,
}

/// `POST /policies:preview`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    /// The draft policy document.
    pub policy: serde_json::Value,
    /// The imagined session.
    #[serde(default)]
    pub context: PreviewContext,
    /// Tools to preview over, besides the tenant's catalog.
    #[serde(default)]
    pub tools: Vec<engine::descriptor::ToolDescriptor>,
}

/// `PUT /tools/{name}`: the server-owned security descriptor of a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescribeToolRequest {
    /// A grouping policies can select.
    #[serde(default)]
    pub family: Option<String>,
    /// Risk labels (`read`, `write`, `destructive`, …).
    pub risk: Vec<String>,
    /// Scope callers must hold.
    #[serde(default)]
    pub required_scope: Option<String>,
    /// Version calls must echo.
    #[serde(default)]
    pub version: Option<String>,
    /// Name of the tool's boolean dry-run argument.
    #[serde(default)]
    pub dry_run_argument: Option<String>,
    /// Price of one call in cents.
    #[serde(default)]
    pub price_cents: Option<u64>,
}

/// `POST /sessions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    /// Environment (`default` when absent).
    #[serde(default)]
    pub environment: Option<String>,
    /// Preset hint policies may select on.
    #[serde(default)]
    pub preset: Option<String>,
    /// Entity hint (recorded).
    #[serde(default)]
    pub entity: Option<String>,
}

/// An exposure session as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// `ses_…`
    pub session_id: String,
    /// Environment.
    pub environment: String,
    /// The pinned actor.
    pub actor_id: String,
    /// Preset hint.
    pub preset: Option<String>,
    /// Entity hint.
    pub entity: Option<String>,
    /// Parent of a fork.
    pub parent_id: Option<String>,
    /// The fork's execution allowlist.
    pub fork_tools: Option<Vec<String>>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub revoked_at: Option<String>,
    /// The latest manifest.
    pub manifest_id: Option<String>,
    /// Its lease.
    pub lease_id: Option<String>,
    /// RFC 3339.
    pub lease_expires_at: Option<String>,
}

/// `POST /upstreams` (CONTRACT §11). `env` and `headers` are write-only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterUpstreamRequest {
    /// `[a-z0-9-]{1,32}`: the `<server>` of `mcp__<server>__<tool>`.
    pub name: String,
    /// `stdio` or `streamable_http`.
    pub transport: String,
    /// The program and its arguments (stdio).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Environment of the process (stdio; write-only).
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// The MCP endpoint (streamable_http).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent with every request, e.g. credentials (streamable_http; write-only).
    #[serde(default)]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
}

/// An upstream as listed: never its secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamView {
    /// `ups_…`
    pub id: String,
    /// Name.
    pub name: String,
    /// `stdio` or `streamable_http`.
    pub transport: String,
    /// Command line or URL, without secrets.
    pub endpoint: String,
    /// Fingerprint of the normalized endpoint (calls pin it).
    pub fingerprint: String,
    /// `registered`, `connected` or `error`.
    pub status: String,
    /// The last connection or sync error.
    pub last_error: Option<String>,
    /// RFC 3339.
    pub last_synced_at: Option<String>,
    /// Tools in the catalog from this upstream.
    pub tools: u64,
    /// RFC 3339.
    pub created_at: String,
    /// How often its credentials were replaced (`PUT /upstreams/{id}/credentials`); manifests
    /// pin it.
    #[serde(default)]
    pub credential_version: i64,
}

/// A tool an upstream lists that was not imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedToolView {
    /// The upstream's name for it.
    pub raw_name: String,
    /// Why.
    pub reason: String,
}

/// What a sync did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReport {
    /// `ups_…`
    pub upstream_id: String,
    /// Tools now in the catalog from this upstream.
    pub tools: u64,
    /// New tools (risk `unknown` until an admin describes them).
    pub added: Vec<String>,
    /// Tools whose definition changed (sessions granted before see `manifest_drift`).
    pub changed: Vec<String>,
    /// Tools the upstream no longer lists.
    pub removed: Vec<String>,
    /// Tools whose change is held for review by the tenant's drift triage (left out of
    /// manifests until an admin accepts it), with the classes found.
    #[serde(default)]
    pub held: Vec<HeldChangeView>,
    /// Tools not imported, with the reason.
    pub skipped: Vec<SkippedToolView>,
    /// Resources, templates and prompts the upstream offers, as catalogued.
    #[serde(default)]
    pub items: ItemsReport,
}

/// What a sync catalogued besides tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemsReport {
    /// Resources now in the catalog from this upstream.
    pub resources: u64,
    /// Resource templates.
    pub templates: u64,
    /// Prompts.
    pub prompts: u64,
    /// Items not catalogued (a URI that does not normalise, two listings with one key, a
    /// listing that failed), with the reason.
    pub refused: Vec<RefusedItemView>,
    /// Items another upstream offers too: exposed by neither until one stops.
    pub shared: Vec<SharedItemView>,
    /// Items whose change the tenant's drift triage holds: neither listed nor readable until an
    /// admin accepts it.
    #[serde(default)]
    pub held: Vec<HeldItemView>,
}

/// A resource, template or prompt held by drift triage, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldItemView {
    /// `resource`, `template` or `prompt`.
    pub kind: String,
    /// The normalised URI, the template or the canonical prompt name.
    pub key: String,
    /// The classes of the change.
    pub changes: Vec<String>,
}

/// A resource, template or prompt a sync did not catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedItemView {
    /// `resource`, `template` or `prompt`.
    pub kind: String,
    /// Its URI, template or name as listed.
    pub raw: String,
    /// Why.
    pub reason: String,
}

/// An item several upstreams offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedItemView {
    /// `resource`, `template` or `prompt`.
    pub kind: String,
    /// The normalised URI, the template or the canonical prompt name.
    pub key: String,
    /// Every upstream that offers it.
    pub upstream_ids: Vec<String>,
}

/// A tool a sync held, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldChangeView {
    /// The tool.
    pub tool: String,
    /// The drift classes of its change.
    pub changes: Vec<String>,
}

/// `POST /sessions/{id}/forks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The fork's execution allowlist; absent: unrestricted; `[]`: deny all.
    #[serde(default)]
    pub fork_tools: Option<Vec<String>>,
}

/// An invocation (a call stored with its binding) as listed by `GET /invocations` and the
/// dashboard's approvals queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvocationView {
    /// `inv_…`
    pub invocation_id: String,
    /// Internal status (`input_required`, `approved`, `completed`, …).
    pub status: String,
    /// What the caller is told (`input_required`, `working`, `completed`, …).
    pub caller_status: String,
    /// Exposure session.
    pub session_id: String,
    /// Manifest the call was granted under.
    pub manifest_id: String,
    /// The caller's `_meta.invocation_id`, when it gave one.
    pub client_invocation_id: Option<String>,
    /// Hosted-agent turn, when any.
    pub turn_id: Option<String>,
    /// Who called.
    pub actor_id: String,
    /// Canonical tool name.
    pub tool: String,
    /// Tool version bound.
    pub tool_version: String,
    /// `schemaHash` bound.
    pub schema_hash: String,
    /// `args_hash` of the effective arguments (an approver echoes it).
    pub args_hash: String,
    /// The granted tool definition's fingerprint (an approver echoes it beside `args_hash`;
    /// a call whose tool is no longer defined so is not run: `manifest_drift`).
    #[serde(default)]
    pub definition_hash: Option<String>,
    /// The tool as the caller was granted it, for the approver (dashboard only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_tool: Option<GrantedToolView>,
    /// The arguments exactly as the upstream will receive them.
    pub arguments: Option<serde_json::Value>,
    /// Exposure mode.
    pub mode: String,
    /// Limits bound with the call.
    pub limits: Option<serde_json::Value>,
    /// Policy that decided.
    pub policy_id: String,
    /// Its version.
    pub policy_version: i64,
    /// Receipt of the decision.
    pub decision_receipt_id: String,
    /// Receipt of the approval or rejection.
    pub approval_receipt_id: Option<String>,
    /// Who approved, applied or rejected.
    pub decided_by: Option<String>,
    /// RFC 3339.
    pub decided_at: Option<String>,
    /// The approver's comment.
    pub comment: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; a parked call not decided by then expires.
    pub expires_at: Option<String>,
    /// The tool result, once there is one.
    pub result: Option<serde_json::Value>,
    /// The deciding rule (dashboard only; never shown to callers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// That rule's reason (dashboard only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_reason: Option<String>,
}

/// The tool of a waiting call as its caller was granted it: what the approver reviews.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrantedToolView {
    /// Title, when the tool has one.
    pub title: Option<String>,
    /// Description, as the caller's model read it.
    pub description: Option<String>,
    /// Risky content the definition carries (`instructions_added`, `hidden_characters`,
    /// `urls_added`).
    pub flags: Vec<String>,
    /// The tool is no longer defined as granted (changed, held or gone): approving would not
    /// run the call.
    pub changed: bool,
}

/// The approvals page: calls waiting for a person (oldest first) and recent decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsView {
    /// Parked (`input_required`) and staged (`staged`) invocations, oldest first.
    pub waiting: Vec<InvocationView>,
    /// The latest invocations no longer waiting, newest first.
    pub recent: Vec<InvocationView>,
    /// Whether the signed-in user may approve, apply or reject (and cancel any waiting call).
    pub can_decide: bool,
    /// The signed-in user's actor id, and whether it may cancel its own waiting calls (run
    /// scope).
    pub me: String,
    /// See [`ApprovalsView::me`].
    pub can_cancel_own: bool,
    /// RFC 3339: the server's time when the list was read (ages are measured against it).
    pub now: String,
}

/// Filters of the receipts browser, as typed (every field optional; empty means no filter).
/// `since` and `until` are RFC 3339 or `YYYY-MM-DDTHH:MM` (a browser's local-time input, read
/// as UTC).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptQuery {
    /// `allow`, `deny`, …
    #[serde(default)]
    pub decision: Option<String>,
    /// Reason code.
    #[serde(default)]
    pub reason: Option<String>,
    /// Canonical tool name.
    #[serde(default)]
    pub tool: Option<String>,
    /// Actor.
    #[serde(default)]
    pub actor_id: Option<String>,
    /// Session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// From (inclusive).
    #[serde(default)]
    pub since: Option<String>,
    /// To (exclusive).
    #[serde(default)]
    pub until: Option<String>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One receipt in the browser's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptRowView {
    /// `rcp_…`
    pub receipt_id: String,
    /// Position in the tenant's journal.
    pub seq: i64,
    /// `decision`, `execution`, `manifest`, `approval`, `admin`.
    pub kind: String,
    /// `allow`, `deny`, …
    pub decision: String,
    /// Reason code.
    pub reason: String,
    /// Tool, when the record concerns one.
    pub tool: Option<String>,
    /// Actor.
    pub actor_id: String,
    /// Session, when any.
    pub session_id: Option<String>,
    /// RFC 3339.
    pub issued_at: String,
}

/// A page of receipts, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptPage {
    /// The page.
    pub rows: Vec<ReceiptRowView>,
    /// Cursor of the next (older) page, when there is one.
    pub next_cursor: Option<String>,
}

/// A neighbour of a record in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainNeighbour {
    /// Its position.
    pub seq: i64,
    /// Its receipt.
    pub receipt_id: String,
    /// Its stored record hash.
    pub record_hash: String,
    /// The `prev_hash` it names.
    pub prev_hash: Option<String>,
}

/// One receipt with what is needed to check it in the browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceiptDetail {
    /// The signed receipt exactly as stored (JSON text).
    pub receipt: String,
    /// Its disclosures (what callers never see).
    pub disclosures: serde_json::Value,
    /// Position in the chain.
    pub seq: i64,
    /// Stored record hash.
    pub record_hash: String,
    /// The record before it.
    pub previous: Option<ChainNeighbour>,
    /// The record after it.
    pub next: Option<ChainNeighbour>,
    /// Every public key that ever signed.
    pub keys: engine::receipt::JwkSet,
    /// The journal row's copies of receipt members, which the receipts filters, the
    /// overview's counts and the export read: checked against the signed receipt.
    pub columns: engine::receipt::RowColumns,
}

/// A catalog tool (`GET /tools`, the Tools page): the tool as its upstream defines it now with
/// its descriptor, and its drift triage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRowView {
    /// The tool and its descriptor (its members are the row's own in `GET /tools`).
    #[serde(flatten)]
    pub tool: engine::descriptor::ToolDescriptor,
    /// RFC 3339: when its definition, descriptor or triage last changed (sessions granted
    /// before see `manifest_drift` on their next call of it).
    pub updated_at: String,
    /// The fingerprint of the definition above (what a manifest pins and approvals echo).
    pub definition_hash: String,
    /// Set while a change of the tool is held for review: the tool is left out of manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldView>,
    /// Risky content the definition carries (`instructions_added`, `hidden_characters`,
    /// `urls_added`): shown beside a tool an admin has not described yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// A change of a tool held for review (CONTRACT §14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldView {
    /// Every drift class of the change from the accepted definition.
    pub changes: Vec<String>,
    /// RFC 3339: when the tool was first held.
    pub since: String,
    /// The held (new) definition's hash: `:accept` with it accepts exactly this definition.
    pub definition_hash: String,
    /// The hash of the definition accepted before.
    pub accepted_definition_hash: String,
    /// The definition accepted before (`title`, `description`, `input_schema`,
    /// `output_schema`, `annotations`), to compare with the tool's current one.
    pub accepted: serde_json::Value,
    /// An admin chose to keep it held (`:keep-held`): not asked again until it changes.
    pub kept: bool,
}

/// `POST /tools/{name}:accept` and `:keep-held`: what was decided, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftDecisionView {
    /// The tool.
    pub tool: String,
    /// `accept` or `keep_held`.
    pub decision: String,
    /// The classes of the change decided on.
    pub changes: Vec<String>,
    /// The definition accepted before.
    pub accepted_definition_hash: String,
    /// The held definition decided on.
    pub definition_hash: String,
    /// The accepted change was the tool's removal: it left the catalog.
    #[serde(default)]
    pub removed: bool,
}

/// The body of `POST /tools/{name}:accept` and `:keep-held` (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftDecisionRequest {
    /// The held definition's hash the admin reviewed; when given and the tool changed since,
    /// nothing is decided (409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_hash: Option<String>,
}

/// `GET /catalog/items`: one resource, resource template or prompt an upstream offers, held
/// ones with their triage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogItemView {
    /// `resource`, `template` or `prompt`.
    pub kind: String,
    /// `ups_…`
    pub upstream_id: String,
    /// The upstream's registered name.
    pub upstream: String,
    /// The normalised URI, the URI template, or the canonical prompt name.
    pub key: String,
    /// As the upstream names it.
    pub raw: String,
    /// As listed.
    pub definition: serde_json::Value,
    /// `sha256:` of its canonical JSON.
    pub definition_hash: String,
    /// The risky content it carries at all (`instructions_added`, `hidden_characters`,
    /// `urls_added`).
    pub flags: Vec<String>,
    /// Set while a change of it is held (`accepted` is the definition accepted before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldView>,
}

/// `GET /catalog/items`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogItemsView {
    /// By kind, key, then upstream.
    pub items: Vec<CatalogItemView>,
}

/// `POST /catalog/items:accept` and `:keep-held`: which item, and optionally the held
/// definition reviewed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemChangeRequest {
    /// `resource`, `template` or `prompt`.
    pub kind: String,
    /// `ups_…`
    pub upstream_id: String,
    /// The normalised URI, the URI template, or the canonical prompt name.
    pub key: String,
    /// The held definition's hash the admin reviewed; when given and the item changed since,
    /// nothing is decided (409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_hash: Option<String>,
}

/// What was decided about a held item, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemDecisionView {
    /// `resource`, `template` or `prompt`.
    pub kind: String,
    /// `ups_…`
    pub upstream_id: String,
    /// The item.
    pub key: String,
    /// `accept` or `keep_held`.
    pub decision: String,
    /// The classes of the change.
    pub changes: Vec<String>,
    /// The hash of the definition accepted before.
    pub accepted_definition_hash: String,
    /// The held definition's hash (accepted now, or kept held).
    pub definition_hash: String,
}

/// The Tools page: the catalog and the upstream servers it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolsView {
    /// Catalog tools, by name.
    pub tools: Vec<ToolRowView>,
    /// Registered upstream MCP servers.
    pub upstreams: Vec<UpstreamView>,
    /// Their resources, resource templates and prompts.
    #[serde(default)]
    pub items: Vec<CatalogItemView>,
}

/// One session with its latest manifest and its forks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDetail {
    /// The session.
    pub session: SessionView,
    /// Its latest signed manifest document, when one was granted.
    pub manifest: Option<serde_json::Value>,
    /// Its forks.
    pub forks: Vec<SessionView>,
    /// Tools of the manifest whose catalog definition changed after it was granted.
    pub drifted: Vec<String>,
    /// The resources the session's actor may list (and read) in its environment under the
    /// policy active there now, as `resources/list` answers (decided per request, not pinned in
    /// the manifest).
    #[serde(default)]
    pub resources: Vec<serde_json::Value>,
    /// The resource templates, as `resources/templates/list` answers.
    #[serde(default)]
    pub resource_templates: Vec<serde_json::Value>,
    /// The prompts, under their canonical names, as `prompts/list` answers.
    #[serde(default)]
    pub prompts: Vec<serde_json::Value>,
}

/// A hosted agent (`GET /agents`, the agents page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    /// `agt_…` (also its exposure session).
    pub agent_id: String,
    /// Who it acts as.
    pub actor_id: String,
    /// Environment.
    pub environment: String,
    /// System instruction.
    pub system_instruction: String,
    /// Model calls one turn may make.
    pub max_turns: i64,
    /// A sub-agent's parent.
    pub parent_id: Option<String>,
    /// `fork` / `general-purpose` for sub-agents.
    pub subagent_type: Option<String>,
    /// The execution allowlist (`fork_tools`) of a restricted fork.
    pub execution_allowed_tools: Option<Vec<String>>,
    /// `idle`, `running`, `input_required`, `paused`.
    pub status: String,
    /// Why it is paused, or why its last turn could not go on.
    pub status_reason: Option<String>,
    /// Runs apart from its parent's turn; its answer reaches the parent at the parent's next
    /// turn.
    pub background: bool,
    /// RFC 3339.
    pub created_at: String,
}

/// One turn of a hosted agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTurnView {
    /// `trn_…`
    pub turn_id: String,
    /// `running`, `completed`, `input_required`, `max_turns`, `failed`, `paused`, `revoked`
    /// (the caller's token, `:run` or session was withdrawn; nothing more ran).
    pub status: String,
    /// Model calls made.
    pub model_calls: i64,
    /// Why it failed or paused.
    pub error: Option<String>,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339.
    pub ended_at: Option<String>,
}

/// One record of an agent's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptRecord {
    /// Position in the transcript.
    pub seq: i64,
    /// `message`, `agent_bootstrap` (a fork's inherited history), `launch_prompt`.
    pub kind: String,
    /// The turn that wrote it.
    pub turn_id: Option<String>,
    /// A chat message (`role`, `content`, `tool_calls`, `tool_call_id`), or for
    /// `agent_bootstrap` the list of inherited messages.
    pub body: serde_json::Value,
    /// RFC 3339.
    pub created_at: String,
}

/// A hosted agent with everything it did (`GET /agents/{id}`, the agent page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDetail {
    /// The agent.
    pub agent: AgentView,
    /// Its transcript, in order.
    pub transcript: Vec<TranscriptRecord>,
    /// Its turns, oldest first.
    pub turns: Vec<AgentTurnView>,
    /// Its sub-agents, oldest first.
    pub forks: Vec<AgentView>,
    /// Its tool calls bound as invocations (parked ones included), newest first.
    pub invocations: Vec<InvocationView>,
    /// The receipts of its session, newest first (dashboard: the latest 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receipts: Vec<ReceiptRowView>,
}

/// A signed checkpoint of the journal's Merkle tree, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRow {
    /// Records it covers.
    pub tree_size: i64,
    /// RFC 3339.
    pub made_at: String,
    /// Names of the witnesses whose cosignatures it carries.
    pub cosigners: Vec<String>,
    /// The signed note with its cosignature lines.
    pub note: String,
}

/// A registered witness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WitnessRow {
    /// Its name.
    pub name: String,
    /// Its cosigner key (note verifier format).
    pub key: String,
    /// RFC 3339.
    pub created_at: String,
}

/// The Journal page: checkpoints, the log's key, witnesses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalView {
    /// The log's origin (`<host>/aperture/<tenant>`).
    pub origin: String,
    /// The current key as a note verifier key, for witnesses and auditors to pin.
    pub verifier_key: String,
    /// The newest checkpoints, newest first.
    pub checkpoints: Vec<CheckpointRow>,
    /// Registered witnesses (admins only; empty otherwise).
    pub witnesses: Vec<WitnessRow>,
    /// RFC 3339: when this was read (ages are shown against it).
    pub now: String,
}

/// `POST /policies:replay`: the draft and the window of recorded calls to replay it over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// The draft policy document.
    pub policy: serde_json::Value,
    /// RFC 3339, inclusive; `until` minus seven days when absent.
    #[serde(default)]
    pub since: Option<String>,
    /// RFC 3339, exclusive; now when absent.
    #[serde(default)]
    pub until: Option<String>,
}

/// Calls of one tool by one actor that a draft would move from one mode to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyChange {
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
    /// The tool's definition changed since (some of) these calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub definition_changed: bool,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Calls replayed.
    pub replayed: u64,
    /// Calls that could not be (argument-dependent without disclosed arguments, or of a tool
    /// the catalog no longer has).
    pub not_replayable: u64,
    /// Calls that would move, most first.
    pub changes: Vec<PolicyChange>,
    /// The window, RFC 3339.
    pub since: String,
    /// RFC 3339.
    pub until: String,
}

/// A call waiting for a person, as the overview names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingCall {
    /// `inv_…`
    pub invocation_id: String,
    /// The tool it calls.
    pub tool: String,
    /// Whose call it is.
    pub actor_id: String,
    /// `input_required` (parked) or `staged`.
    pub status: String,
    /// RFC 3339: when it was parked.
    pub created_at: String,
    /// RFC 3339: when it expires unless decided.
    pub expires_at: Option<String>,
}

/// `POST /webhooks` (admin): where a tenant's approvers hear about parked calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// An `http` or `https` URL that passes the upstream address guard.
    pub url: String,
    /// Some of `invocation.parked`, `invocation.decided`, `invocation.expired`,
    /// `invocation.cancelled`.
    pub events: Vec<String>,
}

/// A webhook as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookView {
    /// `whk_…`
    pub id: String,
    /// Where events are posted.
    pub url: String,
    /// The event types it receives.
    pub events: Vec<String>,
    /// Who created it.
    pub created_by: String,
    /// RFC 3339.
    pub created_at: String,
    /// Deliveries waiting for their next attempt.
    pub pending: u64,
    /// Deliveries the receiver accepted.
    pub delivered: u64,
    /// Deliveries that used up every retry.
    pub failed: u64,
    /// RFC 3339: the last accepted delivery.
    pub last_delivered_at: Option<String>,
}

/// `POST /webhooks` → 201: the webhook and its signing secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedWebhook {
    /// The webhook.
    pub webhook: WebhookView,
    /// `whsec_…`: verifies `webhook-signature` (Standard Webhooks). Never shown again.
    pub secret: String,
}

/// One attempt to deliver an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookAttemptView {
    /// 1 for the first.
    pub attempt: i64,
    /// RFC 3339.
    pub attempted_at: String,
    /// How long it took.
    pub duration_ms: i64,
    /// What the receiver answered.
    pub http_status: Option<i64>,
    /// Why it failed (unreachable, refused address, timeout, a non-2xx answer).
    pub error: Option<String>,
}

/// One event for one webhook and its attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDeliveryView {
    /// `msg_…`: the `webhook-id` header of every attempt.
    pub id: String,
    /// `invocation.parked`, …
    pub event: String,
    /// The invocation (`inv_…`).
    pub invocation_id: String,
    /// The tool of the invocation.
    pub tool: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// RFC 3339: the next attempt, while pending.
    pub next_attempt_at: Option<String>,
    /// The receiver's last HTTP status.
    pub last_status: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// RFC 3339: when the event happened.
    pub created_at: String,
    /// RFC 3339.
    pub delivered_at: Option<String>,
    /// Every attempt, oldest first.
    pub history: Vec<WebhookAttemptView>,
}

/// A webhook with its latest deliveries (newest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPanel {
    /// The webhook.
    pub webhook: WebhookView,
    /// Its latest deliveries.
    pub deliveries: Vec<WebhookDeliveryView>,
}

/// The dashboard's webhooks page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhooksView {
    /// The tenant's webhooks, oldest first.
    pub webhooks: Vec<WebhookPanel>,
}
