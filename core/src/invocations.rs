//! The durable invocation runtime: calls bound at authorization and carried to exactly one
//! outcome (seed: "Runtime authorization binding"; CONTRACT §5, §7, §8).
//!
//! A call in mode `approval_required` — and any call that carries `_meta.invocation_id` — is
//! stored as an invocation next to its journaled decision: the engine's `BoundCall` (effective
//! arguments, limits, redaction, pinned target) plus who called with which token. An approver
//! releases exactly that binding (`POST /invocations/{id}:approve` echoing its `args_hash`);
//! the [`Worker`] executes released invocations without any HTTP context, re-checking the
//! stored binding against the signed decision receipt so that nothing — tool, schema,
//! arguments, tenant, target — can be swapped in between. A rejection or an expiry becomes a
//! stored, protocol-valid tool result. Every status change is a conditional update, so racing
//! approvers, workers or nodes produce one outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engine::decision::BoundCall;
use engine::receipt::{Decision, ReasonCode, Receipt, ReceiptKind};
use engine::scope;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use aperture_types::error::{AppError, ErrorCode};

use crate::error::ServiceError;
use crate::execution::{self, CallContext};
use crate::journal::{self, Journal};
use crate::principal::{Principal, PrincipalKind};
/// A durable invocation as stored (the views of this module are what callers are shown).
pub use crate::store::invocations::InvocationRow;
use crate::store::invocations::{self as rows, Change};
use crate::store::{self, Store, cache};
use crate::upstream::Upstreams;

/// An invocation left in a transient status (`approving`, `rejecting`, `expiring`) by a
/// process that stopped is taken up again after this long.
const STALE_MS: i64 = 30_000;

/// A `running` invocation whose heartbeat stopped this long ago belongs to a process that is
/// gone: it is recorded as interrupted, never run again.
const RUNNING_STALE_MS: i64 = crate::heartbeat::STALE_MS;

/// Whether `row` was bound to exactly the call `bound` describes (same tool, version, schema
/// and arguments): a retry under the same `invocation_id`.
pub fn same_binding(row: &InvocationRow, bound: &BoundCall) -> bool {
    row.tool == bound.tool
        && row.tool_version == bound.tool_version
        && row.schema_hash == bound.schema_hash
        && row.args_hash == bound.args_hash
}

/// The status a caller sees: `input_required` while an approver may still act, `working` while
/// it runs, `completed`, `rejected` or `expired` once the result is final.
pub fn caller_status(status: &str) -> &'static str {
    match status {
        "input_required" | "approving" | "rejecting" | "expiring" => "input_required",
        "applying" => "staged",
        "approved" | "running" | "ending" => "working",
        "staged" => "staged",
        "confirmation_required" => "confirmation_required",
        "rejected" => "rejected",
        "expired" => "expired",
        "cancelling" | "cancelled" => "cancelled",
        "invalidated" => "invalidated",
        _ => "completed",
    }
}

/// What a caller gets for an invocation: its final result once there is one, otherwise a
/// status result (`isError: false`, `_meta: {status, invocation_id, receipt}`) carrying the
/// receipt that decided it.
pub async fn outcome(store: &Store, row: &InvocationRow) -> Result<Value, ServiceError> {
    if let Some(result) = &row.result
        && let Ok(value) = serde_json::from_str::<Value>(result)
    {
        return Ok(value);
    }
    let receipt = store::journal::by_receipt_id(store, &row.tenant_id, &row.decision_receipt_id)
        .await?
        .and_then(|r| serde_json::from_str::<Value>(&r.receipt).ok())
        .unwrap_or(Value::Null);
    Ok(status_result(caller_status(&row.status), &row.id, &receipt))
}

/// Whether an invocation in `status` is settled: it has its final outcome (a result, a
/// rejection, an expiry, a cancellation), and waits for nothing.
pub fn is_settled(status: &str) -> bool {
    matches!(
        caller_status(status),
        "completed" | "rejected" | "expired" | "cancelled" | "invalidated"
    )
}

/// A status result as a client that cannot echo an `invocation_id` reads it: to hear how it
/// ends, it repeats the identical call.
pub fn ask_to_repeat(result: &mut Value) {
    let status = result
        .pointer("/_meta/status")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text = match status {
        "input_required" => {
            "This call needs an approver's release. It is parked; nothing has run yet. Make the identical call again to hear how it stands, and to get its result once it is decided."
        }
        "staged" => {
            "This change is staged for an approver to apply; nothing has run yet. Make the identical call again to hear how it stands, and to get its result once it is applied."
        }
        "working" => "This call is running. Make the identical call again to get its result.",
        _ => return,
    };
    if let Some(content) = result.pointer_mut("/content/0/text") {
        *content = Value::String(text.to_owned());
    }
}

/// A status result for a parked or running invocation.
pub fn status_result(status: &str, invocation_id: &str, receipt: &Value) -> Value {
    let text = match status {
        "input_required" => {
            "This call needs an approver's release. It is parked; nothing has run yet. Retry with the same invocation_id to get the result once it is decided."
        }
        "working" => "This call is running. Retry with the same invocation_id to get its result.",
        _ => "This call has an outcome; read it with GET /invocations/{id}.",
    };
    json!({
        "content": [{"type": "text", "text": text}],
        "isError": false,
        "_meta": {"status": status, "invocation_id": invocation_id, "receipt": receipt}
    })
}

/// The invocation as the API shows it. `arguments` are the effective arguments as bound: what
/// an approver releases is exactly what runs.
pub fn view(row: &InvocationRow) -> Value {
    serde_json::to_value(typed_view(row)).unwrap_or(Value::Null)
}

/// [`view`] as the dashboard's type; the rule is left out (callers never see it).
pub fn typed_view(row: &InvocationRow) -> aperture_types::dto::InvocationView {
    let bound = serde_json::from_str::<BoundCall>(&row.binding).ok();
    aperture_types::dto::InvocationView {
        invocation_id: row.id.clone(),
        status: row.status.clone(),
        caller_status: caller_status(&row.status).to_owned(),
        session_id: row.session_id.clone(),
        manifest_id: row.manifest_id.clone(),
        client_invocation_id: row.client_key.clone(),
        turn_id: row.turn_id.clone(),
        actor_id: row.actor_id.clone(),
        tool: row.tool.clone(),
        tool_version: row.tool_version.clone(),
        schema_hash: row.schema_hash.clone(),
        args_hash: row.args_hash.clone(),
        definition_hash: bound.as_ref().and_then(|b| b.definition_hash.clone()),
        granted_tool: None,
        arguments: bound
            .as_ref()
            .map(|b| Value::Object(b.upstream_arguments())),
        mode: row.mode.clone(),
        limits: bound
            .as_ref()
            .and_then(|b| serde_json::to_value(&b.limits).ok()),
        policy_id: row.policy_id.clone(),
        policy_version: row.policy_version,
        decision_receipt_id: row.decision_receipt_id.clone(),
        approval_receipt_id: row.approval_receipt_id.clone(),
        decided_by: row.decided_by.clone(),
        decided_at: row.decided_at.map(store::rfc3339),
        comment: row.decision_comment.clone(),
        created_at: store::rfc3339(row.created_at),
        expires_at: row.expires_at.map(store::rfc3339),
        result: row
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str::<Value>(r).ok()),
        rule_id: None,
        rule_reason: None,
    }
}

/// Body of `:approve` and `:reject`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// The `args_hash` the approver was shown (required to approve).
    #[serde(default)]
    pub args_hash: Option<String>,
    /// The `definition_hash` of the tool the approver was shown (required to approve).
    #[serde(default)]
    pub definition_hash: Option<String>,
    /// Why.
    #[serde(default)]
    pub comment: Option<String>,
}

/// Most characters of an approver's comment.
const MAX_COMMENT: usize = 2000;

/// The stored decision receipt of an invocation, as signed.
async fn decision_receipt(store: &Store, row: &InvocationRow) -> Result<Receipt, ServiceError> {
    let stored = store::journal::by_receipt_id(store, &row.tenant_id, &row.decision_receipt_id)
        .await?
        .ok_or_else(|| {
            ServiceError::Other(anyhow::anyhow!(
                "decision receipt {} of {} is missing from the journal",
                row.decision_receipt_id,
                row.id
            ))
        })?;
    serde_json::from_str(&stored.receipt).map_err(|e| {
        ServiceError::Other(anyhow::anyhow!(
            "decision receipt {} does not parse: {e}",
            row.decision_receipt_id
        ))
    })
}

/// A receipt about `row` (approval, rejection, expiry, execution) carrying the binding of its
/// decision receipt. `principal`: who acted (an approver, a canceller, the server); `None`
/// keeps the decision's, the caller's (what a released call executes, it executes for them).
fn follow_up(
    decision: &Receipt,
    kind: ReceiptKind,
    actor_id: &str,
    principal: Option<&str>,
) -> Receipt {
    let mut r = decision.clone();
    r.receipt_id = crate::ids::new_ordered_id("rcp");
    r.kind = kind;
    r.actor_id = actor_id.to_owned();
    if let Some(principal) = principal {
        r.principal = Some(principal.to_owned());
    }
    r.seq = None;
    r.prev_hash = None;
    r.signature = String::new();
    r
}

/// Checks an approver's right to decide `row`: not the invocation's own actor, not the
/// principal that created the caller's token (CONTRACT §1).
fn may_decide(approver: &Principal, row: &InvocationRow) -> Result<(), AppError> {
    if approver.actor_id == row.actor_id {
        return Err(AppError::new(
            ErrorCode::PermissionDenied,
            "the invocation's own actor cannot decide it",
        ));
    }
    // `created_by` is `user:<name>` for a dashboard user and the actor id for a token: the same
    // person either way.
    let creator = |c: &str| c.strip_prefix("user:").unwrap_or(c).to_owned();
    if row
        .token_created_by
        .as_deref()
        .is_some_and(|c| creator(c) == creator(&approver.as_creator()))
    {
        return Err(AppError::new(
            ErrorCode::PermissionDenied,
            "the principal that created the caller's token cannot decide its invocations",
        ));
    }
    if let PrincipalKind::Token { token_id, .. } = &approver.kind
        && row.token_id.as_deref() == Some(token_id.as_str())
    {
        return Err(AppError::new(
            ErrorCode::PermissionDenied,
            "the token that made the call cannot decide it",
        ));
    }
    Ok(())
}

/// What an approver does to an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Release a parked call (`input_required`).
    Approve,
    /// Apply a staged change (`staged`).
    Apply,
    /// Reject either.
    Reject,
}

/// Approves, applies or rejects an invocation waiting for a person. Approving and applying must
/// echo the `args_hash` the approver saw; a mismatch, a second decision, an expired invocation
/// or a decision by the caller's side is refused and nothing runs.
pub async fn decide(
    store: &Store,
    journal: &Journal,
    events: &crate::events::Bus,
    principal: &Principal,
    id: &str,
    action: Action,
    request: DecideRequest,
) -> Result<Value, ServiceError> {
    // The routes check the scope too; the service checks it itself because the dashboard calls
    // it directly (a reader must not approve through a server function).
    principal.require(scope::APPROVE)?;
    let approve = action != Action::Reject;
    if request
        .comment
        .as_ref()
        .is_some_and(|c| c.chars().count() > MAX_COMMENT)
    {
        return Err(AppError::invalid_field("comment", "at most 2000 characters").into());
    }
    if approve && request.args_hash.is_none() {
        return Err(AppError::invalid_field(
            "args_hash",
            "required: the args_hash of the invocation as shown to the approver",
        )
        .into());
    }
    if approve && request.definition_hash.is_none() {
        return Err(AppError::invalid_field(
            "definition_hash",
            "required: the definition_hash of the invocation's tool as shown to the approver",
        )
        .into());
    }
    let row = find_visible(store, principal, id)
        .await?
        .ok_or_else(|| AppError::not_found("invocation"))?;
    may_decide(principal, &row)?;
    let waiting = match action {
        Action::Approve => row.status == "input_required",
        Action::Apply => row.status == "staged",
        Action::Reject => row.status == "input_required" || row.status == "staged",
    };
    if !waiting {
        let expected = match action {
            Action::Approve => "a parked call (input_required)",
            Action::Apply => "a staged change",
            Action::Reject => "a parked call or a staged change",
        };
        return Err(AppError::new(
            ErrorCode::Conflict,
            format!("the invocation is {}, not {expected}", row.status),
        )
        .into());
    }
    let from = row.status.as_str();
    if row.expires_at.is_some_and(|at| at <= store::now_ms()) {
        expire(store, journal, &row).await?;
        return Err(AppError::new(ErrorCode::Conflict, "the invocation expired").into());
    }
    if let Some(shown) = &request.args_hash
        && *shown != row.args_hash
    {
        return Err(AppError::new(
            ErrorCode::Conflict,
            "args_hash does not match the invocation's binding; nothing was released",
        )
        .into());
    }
    if approve {
        let bound = bound_definition_hash(store, &row).await?;
        if request.definition_hash != bound {
            return Err(AppError::new(
                ErrorCode::Conflict,
                "definition_hash does not match the tool definition the call was bound to; \
                 nothing was released",
            )
            .into());
        }
        // The tool is no longer defined as the caller was granted it (changed, held for review,
        // or gone): the call can never run, so it ends here, and the approver is told why.
        if !still_defined(store, &row, bound.as_deref()).await? {
            end_drifted(store, journal, &row).await?;
            return Err(AppError::new(
                ErrorCode::Conflict,
                "the tool's definition changed since the call was parked (manifest_drift): \
                 nothing was released, and the call was ended without running",
            )
            .into());
        }
    }
    let transient = match action {
        Action::Approve => "approving",
        Action::Apply => "applying",
        Action::Reject => "rejecting",
    };
    let claimed = rows::transition(
        store,
        &principal.tenant_id,
        id,
        from,
        transient,
        &Change {
            decided_by: Some(&principal.as_creator()),
            decided_by_principal: Some(principal.principal_id()),
            comment: request.comment.as_deref(),
            ..Change::default()
        },
    )
    .await?;
    if !claimed {
        return Err(
            AppError::new(ErrorCode::Conflict, "the invocation was already decided").into(),
        );
    }
    let decision = decision_receipt(store, &row).await?;
    let mut r = follow_up(
        &decision,
        ReceiptKind::Approval,
        &principal.actor_id,
        Some(principal.principal_id()),
    );
    let mut d = journal::disclosures();
    d.insert_extra("invocation_id", Value::String(row.id.clone()))
        .ok();
    if let Some(comment) = &request.comment {
        d.insert_extra("comment", Value::String(comment.clone()))
            .ok();
    }
    if approve {
        r.decision = Decision::Allow;
        r.reason = ReasonCode::Ok;
    } else {
        r.decision = Decision::Deny;
        r.reason = ReasonCode::ApprovalRejected;
    }
    let signed = match journal.append(r, &d).await {
        Ok(signed) => signed,
        Err(e) => {
            // Nothing recorded, nothing released: the invocation waits again.
            rows::transition(
                store,
                &principal.tenant_id,
                id,
                transient,
                from,
                &Change::default(),
            )
            .await?;
            return Err(e.into());
        }
    };
    let moved = if approve {
        rows::transition(
            store,
            &principal.tenant_id,
            id,
            transient,
            "approved",
            &Change {
                approval_receipt_id: Some(&signed.receipt_id),
                announce: Some("invocation.decided"),
                ..Change::default()
            },
        )
        .await?
    } else {
        let result = rejection_result(&signed, request.comment.as_deref());
        rows::transition(
            store,
            &principal.tenant_id,
            id,
            transient,
            "rejected",
            &Change {
                approval_receipt_id: Some(&signed.receipt_id),
                result: Some(&result.to_string()),
                announce: Some("invocation.decided"),
                ..Change::default()
            },
        )
        .await?
    };
    if !moved {
        return Err(ServiceError::Other(anyhow::anyhow!(
            "invocation {id} left {transient} while its decision was recorded"
        )));
    }
    // Read before the worker is woken: the answer is the decision (`approved`), not how far
    // the worker got with it meanwhile.
    let row = rows::find(store, &principal.tenant_id, id)
        .await?
        .ok_or_else(|| AppError::not_found("invocation"))?;
    if approve {
        events.worker().notify_one();
    }
    publish(events, "invocation.decided", &row, &row.status).await;
    Ok(view(&row))
}

/// Statuses a list may be filtered by.
pub const STATUSES: [&str; 15] = [
    "input_required",
    "approving",
    "approved",
    "staged",
    "applying",
    "confirmation_required",
    "running",
    "completed",
    "rejecting",
    "rejected",
    "expiring",
    "expired",
    "invalidated",
    "cancelling",
    "cancelled",
];

/// The actor whose invocations `p` may read: `None` for all of the tenant's (readers and
/// approvers, who must see the queue).
pub fn readable_actor(p: &Principal) -> Option<&str> {
    (!p.scopes.satisfies(scope::READ) && !p.scopes.satisfies(scope::APPROVE))
        .then_some(p.actor_id.as_str())
}

/// Invocation `id` of `tenant_id`, whoever made it: the caller decides who may see it.
pub async fn find(
    store: &Store,
    tenant_id: &str,
    id: &str,
) -> Result<Option<InvocationRow>, ServiceError> {
    Ok(rows::find(store, tenant_id, id).await?)
}

/// Up to `limit` of `principal`'s own invocations in the environments it sees, newest first,
/// older than `before` (`created_at`, id) when given.
pub async fn own_before(
    store: &Store,
    principal: &Principal,
    before: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<InvocationRow>, ServiceError> {
    Ok(rows::of_actor_before(
        store,
        &principal.tenant_id,
        &principal.actor_id,
        before,
        limit,
        principal.confined_to(),
    )
    .await?)
}

/// Up to `limit` of the invocations `principal` may read (see [`readable_actor`] and
/// [`find_visible`]), newest first, with `status` when given.
pub async fn list_visible(
    store: &Store,
    principal: &Principal,
    status: Option<&str>,
    limit: i64,
) -> Result<Vec<InvocationRow>, ServiceError> {
    Ok(rows::list(
        store,
        &principal.tenant_id,
        status,
        readable_actor(principal),
        limit,
        principal.confined_to(),
    )
    .await?)
}

/// Invocation `id` as `principal` may see it: its tenant's, in a session of an environment it
/// may use (CONTRACT §15). Anything else is `None`, as a random id is.
pub async fn find_visible(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Option<InvocationRow>, ServiceError> {
    let Some(row) = rows::find(store, &principal.tenant_id, id).await? else {
        return Ok(None);
    };
    if principal.confined_to().is_none() {
        return Ok(Some(row));
    }
    let session = store::exposure::find_session(store, &row.tenant_id, &row.session_id).await?;
    Ok(session
        .filter(|s| principal.sees(&s.environment))
        .map(|_| row))
}

/// Tells every node that invocation `row` changed (now `status`): the approvals queue's live
/// view and the workers. Ids, tool, mode and who decided; never arguments.
pub(crate) async fn publish(
    events: &crate::events::Bus,
    kind: &str,
    row: &InvocationRow,
    status: &str,
) {
    // Listeners confined to some environments hear only of theirs; an event whose session
    // cannot be read names none, and no confined listener hears it.
    let environment =
        store::exposure::find_session(events.store(), &row.tenant_id, &row.session_id)
            .await
            .ok()
            .flatten()
            .map(|s| s.environment);
    let data = json!({
        "tool": row.tool,
        "status": status,
        "mode": row.mode,
        "session_id": row.session_id,
        "environment": environment,
        "decided_by": row.decided_by,
    });
    events
        .publish(&row.tenant_id, kind, &row.id, &row.actor_id, data)
        .await;
}

/// The stored tool result of a rejection: the approver's comment, if any, reaches the caller
/// (whether the rejection was finished by the request or, after a stop, by the worker).
fn rejection_result(signed: &Receipt, comment: Option<&str>) -> Value {
    let text = match comment {
        Some(c) if !c.trim().is_empty() => {
            format!("An approver rejected this call; nothing ran. Their comment: {c}")
        }
        _ => "An approver rejected this call; nothing ran.".to_owned(),
    };
    execution::tool_result(signed, true, &text, Map::new())
}

/// The definition hash an invocation was bound to: its binding's, or for bindings stored before
/// it was recorded, its grant's entry for the tool.
async fn bound_definition_hash(
    store: &Store,
    row: &InvocationRow,
) -> Result<Option<String>, ServiceError> {
    if let Some(hash) = serde_json::from_str::<Value>(&row.binding)
        .ok()
        .and_then(|b| b.get("definition_hash")?.as_str().map(str::to_owned))
    {
        return Ok(Some(hash));
    }
    let fresh = cache::fresh(store).await?;
    Ok(
        cache::grant(store, &fresh, &row.tenant_id, &row.manifest_id)
            .await?
            .and_then(|g| {
                g.manifest
                    .as_ref()
                    .and_then(|m| m.entry(&row.tool))
                    .map(|e| e.definition_hash.clone())
            }),
    )
}

/// Whether the invocation's tool is still in the catalog (not held) with the definition hash
/// it was bound to.
async fn still_defined(
    store: &Store,
    row: &InvocationRow,
    bound: Option<&str>,
) -> Result<bool, ServiceError> {
    let fresh = cache::fresh(store).await?;
    let live = cache::tool(store, &fresh, &row.tenant_id, &row.tool)
        .await?
        .map(|t| t.tool.fingerprints.definition_hash.clone());
    Ok(bound.is_some() && live.as_deref() == bound)
}

/// The tool of `row` as its caller was granted it, with its flags, and whether it is still
/// defined so: what an approver reviews.
pub async fn granted_tool(
    store: &Store,
    row: &InvocationRow,
) -> Result<Option<aperture_types::dto::GrantedToolView>, ServiceError> {
    let fresh = cache::fresh(store).await?;
    let Some(grant) = cache::grant(store, &fresh, &row.tenant_id, &row.manifest_id).await? else {
        return Ok(None);
    };
    let Some(entry) = grant.manifest.as_ref().and_then(|m| m.entry(&row.tool)) else {
        return Ok(None);
    };
    let a = &entry.advertised;
    let definition = engine::drift::Definition {
        title: a.title.clone(),
        description: a.description.clone(),
        input_schema: a.input_schema.clone(),
        output_schema: a.output_schema.clone(),
        annotations: a.annotations.clone(),
    };
    let bound = bound_definition_hash(store, row).await?;
    Ok(Some(aperture_types::dto::GrantedToolView {
        title: a.title.clone(),
        description: a.description.clone(),
        flags: engine::drift::flags(&definition)
            .iter()
            .map(|c| c.as_str().to_owned())
            .collect(),
        changed: !still_defined(store, row, bound.as_deref()).await?,
    }))
}

/// Ends a waiting invocation whose tool changed since it was parked: a signed execution denial
/// (`manifest_drift`) as its stored result, as the worker records when the change comes after
/// the approval.
async fn end_drifted(
    store: &Store,
    journal: &Journal,
    row: &InvocationRow,
) -> Result<(), ServiceError> {
    if !rows::transition(
        store,
        &row.tenant_id,
        &row.id,
        &row.status,
        "ending",
        &Change::default(),
    )
    .await?
    {
        return Err(
            AppError::new(ErrorCode::Conflict, "the invocation was already decided").into(),
        );
    }
    finish_drifted(store, journal, row).await
}

/// Records the `manifest_drift` denial of an invocation claimed as `ending` and stores its
/// result (also for one a stopped process left `ending`).
async fn finish_drifted(
    store: &Store,
    journal: &Journal,
    row: &InvocationRow,
) -> Result<(), ServiceError> {
    finish_denied(
        store,
        journal,
        row,
        &Denial {
            kind: ReceiptKind::Execution,
            reason: ReasonCode::ManifestDrift,
            detail: Some("the tool changed (or is gone) since the call was parked"),
            by: None,
            principal: None,
            text: "The tool changed since this call was parked, so it was not run; call it again under a new grant.",
            from: "ending",
            to: "completed",
        },
    )
    .await
}

/// How a waiting invocation ends without running: the signed follow-up receipt it gets and the
/// status change that stores its result.
struct Denial<'a> {
    kind: ReceiptKind,
    reason: ReasonCode,
    /// Disclosed beside the receipt, when there is more to say than the reason.
    detail: Option<&'static str>,
    /// Who ended it, when a person did (disclosed as `by`).
    by: Option<&'a str>,
    /// The principal the receipt names, when not the caller's: the canceller's, or the
    /// server's own for an expiry.
    principal: Option<&'a str>,
    /// The tool result's text, for the caller and the approver.
    text: &'static str,
    from: &'static str,
    to: &'static str,
}

/// Journals `denial`'s receipt for an invocation claimed as `denial.from`, then stores the
/// denial as its result (an approval-kind receipt is also its approval receipt).
async fn finish_denied(
    store: &Store,
    journal: &Journal,
    row: &InvocationRow,
    denial: &Denial<'_>,
) -> Result<(), ServiceError> {
    let decision = decision_receipt(store, row).await?;
    let mut r = follow_up(&decision, denial.kind, &row.actor_id, denial.principal);
    r.decision = Decision::Deny;
    r.reason = denial.reason;
    let mut d = journal::disclosures();
    if let Some(detail) = denial.detail {
        d.insert_extra("detail", Value::String(detail.into())).ok();
    }
    if let Some(by) = denial.by {
        d.insert_extra("by", Value::String(by.into())).ok();
    }
    d.insert_extra("invocation_id", Value::String(row.id.clone()))
        .ok();
    let signed = journal.append(r, &d).await?;
    let result = execution::tool_result(&signed, true, denial.text, Map::new());
    rows::transition(
        store,
        &row.tenant_id,
        &row.id,
        denial.from,
        denial.to,
        &Change {
            approval_receipt_id: (denial.kind == ReceiptKind::Approval)
                .then_some(signed.receipt_id.as_str()),
            result: Some(&result.to_string()),
            // What approvers' webhooks hear: the call no longer waits for them.
            announce: Some(match denial.to {
                "expired" => "invocation.expired",
                "cancelled" => "invocation.cancelled",
                _ => "invocation.decided",
            }),
            ..Change::default()
        },
    )
    .await?;
    Ok(())
}

/// Ends a parked invocation whose time ran out with a stored `approval_expired` result; whether
/// this call ended it (`false`: someone else decided or expired it first).
async fn expire(
    store: &Store,
    journal: &Journal,
    row: &InvocationRow,
) -> Result<bool, ServiceError> {
    if !rows::transition(
        store,
        &row.tenant_id,
        &row.id,
        &row.status,
        "expiring",
        &Change::default(),
    )
    .await?
    {
        return Ok(false);
    }
    finish_expiry(store, journal, row).await.map(|()| true)
}

async fn finish_expiry(
    store: &Store,
    journal: &Journal,
    row: &InvocationRow,
) -> Result<(), ServiceError> {
    finish_denied(
        store,
        journal,
        row,
        &Denial {
            kind: ReceiptKind::Approval,
            reason: ReasonCode::ApprovalExpired,
            detail: None,
            by: None,
            principal: Some(journal::OPERATOR),
            text: "Nobody approved or confirmed this call in time; nothing ran.",
            from: "expiring",
            to: "expired",
        },
    )
    .await
}

/// Statuses an invocation may be cancelled from: waiting for a person (parked, staged, for the
/// caller's confirmation) or released and queued for the worker, which has not claimed it.
const CANCELLABLE: [&str; 4] = [
    "input_required",
    "staged",
    "confirmation_required",
    "approved",
];

/// `POST /invocations/{id}:cancel`: ends an invocation that has not started running, without
/// running it: its own caller (`:run`) or an approver (`:approve`) may. An execution receipt
/// with reason `cancelled` is journaled and its protocol-valid result (`isError: true`) stored,
/// so a caller that retries, `tasks/result` and the approvals queue all read the same final
/// outcome. Another actor's invocation looks missing to a caller; one that runs, or has ended,
/// is a conflict; nothing is cancelled when the journal cannot record it.
pub async fn cancel(
    store: &Store,
    journal: &Journal,
    events: &crate::events::Bus,
    in_flight: &crate::cancel::InFlight,
    principal: &Principal,
    id: &str,
) -> Result<Value, ServiceError> {
    let approver = principal.scopes.satisfies(scope::APPROVE);
    let row = find_visible(store, principal, id)
        .await?
        .filter(|r| {
            approver || (principal.scopes.satisfies(scope::RUN) && r.actor_id == principal.actor_id)
        })
        .ok_or_else(|| AppError::not_found("invocation"))?;
    if row.status == "running" {
        // The worker that runs it (on whichever node) stops waiting for the upstream, which is
        // told to cancel; the invocation then ends as `cancelled` with its receipt.
        crate::cancel::cancel(
            in_flight,
            events,
            &crate::cancel::Key::invocation(&row.tenant_id, &row.id),
        )
        .await;
        return Ok(view(&row));
    }
    if !CANCELLABLE.contains(&row.status.as_str()) {
        return Err(AppError::new(
            ErrorCode::Conflict,
            format!(
                "the invocation is {}: only one waiting or queued, not yet running, can be cancelled",
                row.status
            ),
        )
        .into());
    }
    if row.status != "approved" && row.expires_at.is_some_and(|at| at <= store::now_ms()) {
        expire(store, journal, &row).await?;
        return Err(AppError::new(ErrorCode::Conflict, "the invocation expired").into());
    }
    let by = principal.as_creator();
    let claimed = rows::transition(
        store,
        &principal.tenant_id,
        id,
        &row.status,
        "cancelling",
        &Change {
            decided_by: Some(&by),
            decided_by_principal: Some(principal.principal_id()),
            ..Change::default()
        },
    )
    .await?;
    if !claimed {
        return Err(AppError::new(
            ErrorCode::Conflict,
            "the invocation moved on (decided, started or ended) before it could be cancelled",
        )
        .into());
    }
    if let Err(e) = finish_cancellation(store, journal, &row, (&by, principal.principal_id())).await
    {
        // Any other failure leaves it `cancelling`, which the worker finishes.
        if !matches!(&e, ServiceError::App(a) if a.code == ErrorCode::Unavailable) {
            return Err(e);
        }
        // The journal refused: nothing recorded, nothing cancelled; it waits (or stays
        // queued) as it was.
        rows::transition(
            store,
            &principal.tenant_id,
            id,
            "cancelling",
            &row.status,
            &Change::default(),
        )
        .await?;
        if row.status == "approved" {
            events.worker().notify_one();
        }
        return Err(e);
    }
    let row = rows::find(store, &principal.tenant_id, id)
        .await?
        .ok_or_else(|| AppError::not_found("invocation"))?;
    publish(events, "invocation.cancelled", &row, "cancelled").await;
    Ok(view(&row))
}

/// Records the cancellation of `row`, claimed as `cancelling` by `by`, and stores its result.
async fn finish_cancellation(
    store: &Store,
    journal: &Journal,
    row: &InvocationRow,
    (by, principal): (&str, &str),
) -> Result<(), ServiceError> {
    finish_denied(
        store,
        journal,
        row,
        &Denial {
            kind: ReceiptKind::Execution,
            reason: ReasonCode::Cancelled,
            detail: None,
            by: Some(by),
            principal: Some(principal),
            text: "This call was cancelled before it ran; nothing ran.",
            from: "cancelling",
            to: "cancelled",
        },
    )
    .await
}

/// Executes invocations that were released, expires those that waited too long, and takes up
/// what a stopped process left behind. Needs no browser or HTTP context: only the store, the
/// journal and the upstream connections.
pub struct Worker {
    store: Store,
    journal: Journal,
    upstreams: Arc<Upstreams>,
    validators: Arc<engine::narrow::ValidatorCache>,
    events: Arc<crate::events::Bus>,
    wake: Arc<Notify>,
    parked_expiry: Duration,
    /// Set when the server stops: the worker finishes what it runs and claims nothing more.
    stopping: Arc<AtomicBool>,
    /// Where the invocation it runs can be cancelled (`:cancel`, `tasks/cancel`).
    in_flight: Arc<crate::cancel::InFlight>,
}

/// Stops a [`Worker`] between invocations ([`Worker::stopper`]).
#[derive(Clone)]
pub struct WorkerStop {
    stopping: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl WorkerStop {
    /// The worker claims no further invocation; [`Worker::run`] returns once the one it runs
    /// (if any) has its outcome recorded.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

impl Worker {
    /// A worker over the server's parts; it is woken through `events` when an invocation is
    /// released on any node.
    pub fn new(
        store: Store,
        journal: Journal,
        upstreams: Arc<Upstreams>,
        validators: Arc<engine::narrow::ValidatorCache>,
        events: Arc<crate::events::Bus>,
        parked_expiry: Duration,
        in_flight: Arc<crate::cancel::InFlight>,
    ) -> Self {
        Self {
            store,
            journal,
            upstreams,
            validators,
            wake: events.worker().clone(),
            events,
            parked_expiry,
            stopping: Arc::new(AtomicBool::new(false)),
            in_flight,
        }
    }

    /// What stops this worker gracefully.
    pub fn stopper(&self) -> WorkerStop {
        WorkerStop {
            stopping: self.stopping.clone(),
            wake: self.wake.clone(),
        }
    }

    /// Runs until stopped ([`Worker::stopper`]) or dropped: a pass when woken, and at least
    /// once a second.
    pub async fn run(self) {
        while !self.stopping.load(Ordering::SeqCst) {
            if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "invocation worker pass failed; retrying");
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// One pass over everything due. Returns how many invocations it moved. A row that fails
    /// is logged and left for the next pass; it never stops the others.
    pub async fn pass(&self) -> Result<usize, ServiceError> {
        let now = store::now_ms();
        let mut moved = 0;
        let mut tally = |what: &str, row: &InvocationRow, done: Result<bool, ServiceError>| {
            match done {
                Ok(true) => moved += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, invocation = %row.id, "{what} failed; retrying later");
                }
            }
        };
        // Released: run each exactly once (only the process that claimed it runs it). One claim
        // at a time, so a claimed row is never waiting without its runner's heartbeat.
        for _ in 0..32 {
            if self.stopping.load(Ordering::SeqCst) {
                break;
            }
            let Some(row) = rows::claim_approved(&self.store, 1).await?.pop() else {
                break;
            };
            let done = async {
                let _beat =
                    crate::heartbeat::Heartbeat::invocation(&self.store, &row.tenant_id, &row.id);
                self.execute(&row).await.map(|()| true)
            }
            .await;
            tally("execution", &row, done);
        }
        for row in rows::expired(&self.store, now, 32).await? {
            let done = expire(&self.store, &self.journal, &row).await;
            if matches!(done, Ok(true)) {
                publish(&self.events, "invocation.expired", &row, "expired").await;
            }
            tally("expiry", &row, done);
        }
        // Left behind by a process that stopped mid-way.
        let stale = now - STALE_MS;
        for (transient, waiting) in [("approving", "input_required"), ("applying", "staged")] {
            for row in rows::due(&self.store, transient, stale, 32).await? {
                // The approval may or may not have been recorded; it released nothing. It
                // waits for an approver again.
                let done = rows::transition(
                    &self.store,
                    &row.tenant_id,
                    &row.id,
                    transient,
                    waiting,
                    &Change::default(),
                )
                .await
                .map_err(ServiceError::from);
                tally("reopening", &row, done);
            }
        }
        for row in rows::due(&self.store, "rejecting", stale, 32).await? {
            // A rejection is final once claimed: record it and store its result (only one
            // `rejecting → rejected` succeeds).
            let done = self.finish_rejection(&row).await.map(|()| true);
            tally("rejection", &row, done);
        }
        for row in rows::due(&self.store, "cancelling", stale, 32).await? {
            // A cancellation is final once claimed, as a rejection is.
            let by = row.decided_by.clone().unwrap_or_else(|| "unknown".into());
            let principal = row
                .decided_by_principal
                .as_deref()
                .unwrap_or(journal::OPERATOR);
            let done = finish_cancellation(&self.store, &self.journal, &row, (&by, principal))
                .await
                .map(|()| true);
            if matches!(done, Ok(true)) {
                publish(&self.events, "invocation.cancelled", &row, "cancelled").await;
            }
            tally("cancellation", &row, done);
        }
        for row in rows::due(&self.store, "ending", stale, 32).await? {
            let done = finish_drifted(&self.store, &self.journal, &row)
                .await
                .map(|()| true);
            tally("ending", &row, done);
        }
        for row in rows::due(&self.store, "expiring", stale, 32).await? {
            let done = finish_expiry(&self.store, &self.journal, &row)
                .await
                .map(|()| true);
            tally("expiry", &row, done);
        }
        for row in rows::due(&self.store, "running", now - RUNNING_STALE_MS, 32).await? {
            let done = self.interrupted(&row).await.map(|()| true);
            tally("interruption", &row, done);
        }
        Ok(moved)
    }

    async fn finish_rejection(&self, row: &InvocationRow) -> Result<(), ServiceError> {
        let decision = decision_receipt(&self.store, row).await?;
        let approver = row.decided_by.clone().unwrap_or_else(|| "unknown".into());
        let mut r = follow_up(
            &decision,
            ReceiptKind::Approval,
            &approver,
            Some(
                row.decided_by_principal
                    .as_deref()
                    .unwrap_or(journal::OPERATOR),
            ),
        );
        r.decision = Decision::Deny;
        r.reason = ReasonCode::ApprovalRejected;
        let mut d = journal::disclosures();
        d.insert_extra("invocation_id", Value::String(row.id.clone()))
            .ok();
        let signed = self.journal.append(r, &d).await?;
        let result = rejection_result(&signed, row.decision_comment.as_deref());
        rows::transition(
            &self.store,
            &row.tenant_id,
            &row.id,
            "rejecting",
            "rejected",
            &Change {
                approval_receipt_id: Some(&signed.receipt_id),
                result: Some(&result.to_string()),
                announce: Some("invocation.decided"),
                ..Change::default()
            },
        )
        .await?;
        Ok(())
    }

    /// A call that was running when its process stopped: it may or may not have reached the
    /// upstream, and it is never run a second time. Recorded as an upstream error.
    async fn interrupted(&self, row: &InvocationRow) -> Result<(), ServiceError> {
        let decision = decision_receipt(&self.store, row).await?;
        let mut r = follow_up(&decision, ReceiptKind::Execution, &row.actor_id, None);
        r.decision = Decision::Deny;
        r.reason = ReasonCode::UpstreamError;
        let mut d = journal::disclosures();
        d.upstream_error = Some(
            "the gateway stopped while this call was running; it may or may not have reached the upstream and is not run again".into(),
        );
        d.insert_extra("invocation_id", Value::String(row.id.clone()))
            .ok();
        let signed = self.journal.append(r, &d).await?;
        let result = execution::tool_result(
            &signed,
            true,
            "The gateway stopped while this call was running. It was not run again; check the tool's state before retrying with a new invocation id.",
            Map::new(),
        );
        rows::transition(
            &self.store,
            &row.tenant_id,
            &row.id,
            "running",
            "completed",
            &Change {
                result: Some(&result.to_string()),
                ..Change::default()
            },
        )
        .await?;
        publish(&self.events, "invocation.completed", row, "completed").await;
        Ok(())
    }

    /// Runs a released invocation exactly as bound, after checking the stored binding against
    /// the signed decision receipt.
    async fn execute(&self, row: &InvocationRow) -> Result<(), ServiceError> {
        let decision = decision_receipt(&self.store, row).await?;
        let registered = self
            .in_flight
            .register(crate::cancel::Key::invocation(&row.tenant_id, &row.id));
        let cx = CallContext {
            store: &self.store,
            journal: &self.journal,
            upstreams: &self.upstreams,
            validators: &self.validators,
            parked_expiry: self.parked_expiry,
            events: &self.events,
            // Released invocations were counted and priced when they were authorized.
            rate_limiter: false,
            spend_gate: false,
            // Redacted for where the result goes, as the call that bound it said.
            output_to: execution::OutputTo::parse(&row.output_to),
            // Claimed when the call was authorized.
            idempotency_retention: crate::config::DEFAULT_IDEMPOTENCY_RETENTION,
            // Cancelled while it runs by `:cancel` / `tasks/cancel`, on any node.
            cancelled: Some(registered.cancelled.clone()),
            // Nobody waits on a released invocation's stream.
            progress: None,
            // Nobody connected can be asked for input: the upstream's requests are refused.
            client: None,
            log: None,
            param_headers: None,
            round: None,
        };
        // Tests hold the worker here, between the release and its last check.
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::worker_gate(&row.tenant_id).await;
        let result = match self.verified_binding(row, &decision).await {
            Ok(bound) => {
                let fresh = cache::fresh(&self.store).await?;
                let tool = cache::tool(&self.store, &fresh, &row.tenant_id, &bound.tool).await?;
                let tool = tool.filter(|t| t.tool.tool.name == bound.tool);
                let r = follow_up(&decision, ReceiptKind::Execution, &row.actor_id, None);
                let mut extra = Map::new();
                extra.insert("invocation_id".into(), Value::String(row.id.clone()));
                if let Some(approval) = &row.approval_receipt_id {
                    extra.insert(
                        "approval_receipt_id".into(),
                        Value::String(approval.clone()),
                    );
                }
                execution::execute(&cx, tool.as_deref(), bound, r, &decision, extra).await?
            }
            Err((reason, why)) => {
                // Not what was authorized, or no longer authorized: refuse, never run it.
                let mut r = follow_up(&decision, ReceiptKind::Execution, &row.actor_id, None);
                r.decision = Decision::Deny;
                r.reason = reason;
                let mut d = journal::disclosures();
                d.insert_extra("detail", Value::String(why)).ok();
                d.insert_extra("invocation_id", Value::String(row.id.clone()))
                    .ok();
                let signed = self.journal.append(r, &d).await?;
                // The approver and the caller read why: a changed tool is named as such.
                let text = if reason == ReasonCode::ManifestDrift {
                    "The tool changed (or is gone) since the call was authorized, so it was not \
                     run (manifest_drift); call it again under a new grant."
                } else {
                    "The call is no longer what was authorized, or no longer authorized, so it \
                     was not run."
                };
                execution::tool_result(&signed, true, text, Map::new())
            }
        };
        drop(registered);
        // A call its caller or an approver cancelled while it ran ends as cancelled.
        let cancelled = result["_meta"]["receipt"]["reason"] == ReasonCode::Cancelled.as_str();
        let (to, event) = if cancelled {
            ("cancelled", "invocation.cancelled")
        } else {
            ("completed", "invocation.completed")
        };
        rows::transition(
            &self.store,
            &row.tenant_id,
            &row.id,
            "running",
            to,
            &Change {
                result: Some(&result.to_string()),
                ..Change::default()
            },
        )
        .await?;
        publish(&self.events, event, row, to).await;
        Ok(())
    }

    /// The stored binding, when it is exactly the one the signed decision receipt authorized,
    /// released by a signed approval where the mode needs one, and still authorized now: its
    /// session and the caller's token not revoked (an expired one is not revoked), the tool not
    /// changed since the grant.
    async fn verified_binding(
        &self,
        row: &InvocationRow,
        decision: &Receipt,
    ) -> Result<BoundCall, (ReasonCode, String)> {
        let mismatch = |what: &str| {
            (
                ReasonCode::ManifestBindingMismatch,
                format!("the stored binding's {what} differs from what was authorized"),
            )
        };
        let keys = self
            .journal
            .keys()
            .published()
            .await
            .map_err(|e| (ReasonCode::ManifestBindingMismatch, format!("keys: {e}")))?;
        let verify = |receipt: &Receipt| {
            keys.keys
                .iter()
                .find(|k| k.kid == receipt.key_id)
                .is_some_and(|key| engine::receipt::verify_receipt(receipt, key).is_ok())
        };
        if !verify(decision) {
            return Err(mismatch("decision receipt signature"));
        }
        let bound: BoundCall =
            serde_json::from_str(&row.binding).map_err(|_| mismatch("encoding"))?;
        let args_hash = engine::canonical::args_hash_of_map(&bound.effective_arguments);
        let target = execution::target_json(bound.target.as_ref());
        let checks = [
            ("tenant", decision.tenant_id == row.tenant_id),
            ("actor", decision.actor_id == row.actor_id),
            (
                "session",
                decision.session_id.as_deref() == Some(&row.session_id),
            ),
            (
                "tool",
                decision.tool.as_deref() == Some(&bound.tool) && bound.tool == row.tool,
            ),
            (
                "tool_version",
                decision.tool_version.as_deref() == Some(&bound.tool_version),
            ),
            (
                "schema_hash",
                decision.schema_hash.as_deref() == Some(&bound.schema_hash),
            ),
            (
                "args_hash",
                decision.args_hash.as_deref() == Some(&args_hash) && args_hash == row.args_hash,
            ),
            ("target", decision.target == target),
            (
                "invocation",
                decision.invocation_id.as_deref() == Some(&row.id),
            ),
            (
                "decision",
                matches!(
                    decision.decision,
                    Decision::Park | Decision::Stage | Decision::Async
                ),
            ),
            (
                "mode",
                decision.mode.as_deref() == Some(bound.mode.as_str())
                    && row.mode == bound.mode.as_str(),
            ),
            (
                "limits",
                decision.limits == serde_json::to_value(&bound.limits).ok(),
            ),
            (
                "redaction",
                decision.redaction == serde_json::to_value(&bound.redaction).ok(),
            ),
        ];
        if let Some((what, _)) = checks.iter().find(|(_, ok)| !ok) {
            return Err(mismatch(what));
        }
        // Parked and staged calls run only on a signed approval of exactly this invocation.
        if matches!(decision.decision, Decision::Park | Decision::Stage) {
            let approval = match &row.approval_receipt_id {
                Some(id) => store::journal::by_receipt_id(&self.store, &row.tenant_id, id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| serde_json::from_str::<Receipt>(&r.receipt).ok()),
                None => None,
            };
            let released = approval.is_some_and(|a| {
                verify(&a)
                    && a.kind == ReceiptKind::Approval
                    && a.decision == Decision::Allow
                    && a.invocation_id.as_deref() == Some(&row.id)
                    && a.args_hash.as_deref() == Some(&row.args_hash)
            });
            if !released {
                return Err(mismatch("approval"));
            }
        }
        // Still authorized now.
        let unavailable =
            |e: sqlx::Error| (ReasonCode::ManifestBindingMismatch, format!("store: {e}"));
        let session = store::exposure::find_session(&self.store, &row.tenant_id, &row.session_id)
            .await
            .map_err(unavailable)?;
        if session.is_none_or(|s| s.revoked_at.is_some()) {
            return Err((
                ReasonCode::ManifestBindingMismatch,
                "the session was revoked after the call was authorized".into(),
            ));
        }
        // A token revoked since is a withdrawal; a token whose lifetime ended is not: what it
        // was authorized for while valid still runs (seed: recovery does not depend on an
        // expired context), and it cannot authorize anything new.
        if let Some(token_id) = &row.token_id {
            let token = store::tokens::find(&self.store, &row.tenant_id, token_id)
                .await
                .map_err(unavailable)?;
            if token.is_none_or(|t| t.revoked_at.is_some()) {
                return Err((
                    ReasonCode::ManifestBindingMismatch,
                    "the caller's token was revoked after the call was authorized".into(),
                ));
            }
        }
        let fresh = cache::fresh(&self.store).await.map_err(unavailable)?;
        let granted = cache::grant(&self.store, &fresh, &row.tenant_id, &row.manifest_id)
            .await
            .map_err(unavailable)?
            .and_then(|g| {
                g.manifest
                    .as_ref()
                    .and_then(|m| m.entry(&bound.tool))
                    .map(|e| e.definition_hash.clone())
            });
        let live = cache::tool(&self.store, &fresh, &row.tenant_id, &bound.tool)
            .await
            .map_err(unavailable)?
            .map(|t| t.tool.fingerprints.definition_hash.clone());
        if granted.is_none()
            || granted != live
            || bound
                .definition_hash
                .as_ref()
                .is_some_and(|h| Some(h) != granted.as_ref())
        {
            return Err((
                ReasonCode::ManifestDrift,
                "the tool changed (or is gone) since the call was authorized".into(),
            ));
        }
        Ok(bound)
    }
}

/// Stored statuses that wait, and their label.
pub const WAITING: &[(&str, &str)] = &[
    ("input_required", "parked"),
    ("staged", "staged"),
    ("confirmation_required", "confirmation"),
    ("approved", "queued"),
];

/// Per waiting status: how many and when the oldest was made (every tenant).
pub async fn waiting(store: &Store) -> Result<Vec<(String, i64, Option<i64>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, COUNT(*), MIN(created_at) FROM invocations \
         WHERE status IN ('input_required', 'staged', 'confirmation_required', 'approved') \
         GROUP BY status",
    )
    .fetch_all(store.pool())
    .await
}
