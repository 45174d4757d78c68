//! `tools/call` under an exposure session, in the contract's stages, each a function of its
//! own: [`authorize`] (the engine's decision against the stored grant, then the binding's checks:
//! confirmation, retry and idempotency keys, rate buckets, the spend gate), [`record_decision`]
//! (the decision receipt journaled), [`bind_invocation`] (modes that wait for a person or a
//! worker — `approval_required`, `staged_change`, `async_job_only`, `confirmation_required` —
//! and calls carrying `_meta.invocation_id` are bound as invocations, [`crate::invocations`],
//! so that a retry returns the first call's outcome), and [`run`] (for `allow`, and
//! `dry_run_only` with a declared dry-run argument: execution through the upstream,
//! [`crate::execution`]).
//!
//! Fail closed: when the journal cannot record the decision, nothing executes and the caller
//! gets a signed `journal_unavailable` denial with `seq` and `prev_hash` null.

use std::time::Duration;

use engine::decision::{self, BoundCall, CallRequest, Caller, Grant as EngineGrant};
use engine::policy::Mode;
use engine::receipt::{Decision, ReasonCode, Receipt, ReceiptKind};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::ServiceError;
use crate::execution::{CallContext, execute, short, target_json, tool_result};
use crate::journal::{self, Journal};
use crate::principal::Principal;
use crate::settings::mcp::Binding;
use crate::store::{self, cache};

/// What a `tools/call` carries besides the tool and its arguments (CONTRACT §4).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CallMeta {
    /// `ses_…`
    pub session_id: Option<String>,
    /// `man_…`
    pub manifest_id: Option<String>,
    /// `lea_…`
    pub lease_id: Option<String>,
    /// The version granted.
    pub tool_version: Option<String>,
    /// The `schemaHash` granted.
    pub expected_schema_hash: Option<String>,
    /// Equality assertion only.
    pub actor_id: Option<String>,
    /// Hosted agent turn.
    pub turn_id: Option<String>,
    /// The caller's retry key: a retry with the same binding gets the same outcome.
    pub invocation_id: Option<String>,
    /// The token a `confirmation_required` answer gave, to confirm the identical call.
    pub confirmation_token: Option<String>,
    /// Where a `/mcp` call without an echo binds when the tenant binds implicitly (a hint,
    /// like `tools/list`'s; [`crate::implicit`]).
    pub environment: Option<String>,
}

/// `params` of `tools/call`.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolCall {
    /// Tool name as listed.
    pub name: String,
    /// Arguments (absent means `{}`).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The echo.
    #[serde(default, rename = "_meta")]
    pub meta: CallMeta,
    /// How the call came by its echo: sent by the client, or filled in from the grant it was
    /// bound to implicitly ([`crate::implicit::bind`]); never read from the wire.
    #[serde(skip)]
    pub binding: crate::settings::mcp::Binding,
}

/// Journals a denial decided at `decided_at` and answers it.
async fn denial_at(
    journal: &Journal,
    r: Receipt,
    d: &engine::receipt::Disclosures,
    decided_at: Option<i64>,
) -> Result<Value, ServiceError> {
    let (receipt, _) = journal.record_decision_at(&r, d, decided_at).await?;
    Ok(tool_result(
        &receipt,
        true,
        short(receipt.reason),
        Map::new(),
    ))
}

/// A hosted agent's call decided before the checks of `tools/call` could see it: a call of a
/// tool its model was not declared, outside its fork's execution allowlist, left unrun because
/// its caller's rights were withdrawn, or of the built-in `agent` tool (a sub-agent launched,
/// or refused).
pub struct Unchecked<'a> {
    /// The agent's exposure session.
    pub session: &'a crate::store::exposure::SessionRow,
    /// The manifest the agent's model was declared.
    pub manifest_id: &'a str,
    /// The policy that granted it, and its version.
    pub policy: (&'a str, u64),
    /// The turn.
    pub turn_id: &'a str,
    /// The tool the model named.
    pub tool: &'a str,
    /// `deny`, or `allow` for a sub-agent the `agent` tool launched.
    pub decision: Decision,
    /// `not_callable`, `execution_allowlist`, or `cancelled` (left unrun: the caller's rights
    /// were withdrawn in the middle of a batch), `arguments_invalid` or `ok` (the `agent` tool).
    pub reason: ReasonCode,
    /// For the built-in `agent` tool: the hash of its declaration (its `tool_version` is
    /// `builtin`).
    pub builtin_hash: Option<&'a str>,
    /// What the model was told.
    pub detail: &'a str,
}

/// Journals the decision receipt of an [`Unchecked`] call (every decision is journaled,
/// CONTRACT §6); when the journal cannot record, the signed unrecorded denial.
pub async fn record_unchecked(
    cx: &CallContext<'_>,
    principal: &Principal,
    call: Unchecked<'_>,
) -> Receipt {
    let mut r = journal::receipt(
        ReceiptKind::Decision,
        call.decision,
        call.reason,
        &principal.tenant_id,
        &principal.actor_id,
        principal.principal_id(),
    );
    r.session_id = Some(call.session.id.clone());
    r.environment = Some(call.session.environment.clone());
    r.manifest_id = Some(call.manifest_id.to_owned());
    r.policy_id = Some(call.policy.0.to_owned());
    r.policy_version = Some(call.policy.1);
    r.turn_id = Some(call.turn_id.to_owned());
    r.tool = Some(call.tool.to_owned());
    if let Some(hash) = call.builtin_hash {
        r.tool_version = Some(BUILTIN_VERSION.to_owned());
        r.schema_hash = Some(hash.to_owned());
    }
    let mut d = journal::disclosures();
    d.insert_extra("detail", Value::String(call.detail.to_owned()))
        .ok();
    cx.journal.record_decision(&r, &d).await.0
}

/// The `tool_version` receipts give a built-in tool (the hosted runtime's `agent` tool).
pub const BUILTIN_VERSION: &str = "builtin";

/// A call's stages, as CONTRACT §5 orders them: [`authorize`] (the engine's decision against
/// the grant, then what the binding asks: confirmation, retry and idempotency keys, rate
/// buckets, the spend gate), [`record_decision`] (the decision journaled: nothing runs that is
/// not recorded), [`bind_invocation`] (a call that waits for a person or a worker, or carries a
/// retry key, is bound durably and answered with its status), then [`run`] (the upstream call
/// and its execution receipt, [`crate::execution`]).
///
/// The answer is always a tool result (denials included, each with its receipt in `_meta`);
/// only failures of the server itself are errors.
///
/// A `confirmation_required` call bound implicitly (its client cannot echo a confirmation
/// token) from a client that can be asked is confirmed by asking the person
/// ([`ask_to_confirm`]).
pub async fn call(
    cx: &CallContext<'_>,
    principal: &Principal,
    path_session: Option<&str>,
    call: &ToolCall,
) -> Result<Value, ServiceError> {
    let answer = staged(cx, principal, path_session, call).await?;
    match confirmation_to_ask(cx, call, &answer) {
        Some(ask) => ask_to_confirm(cx, principal, path_session, call, ask).await,
        None => Ok(answer),
    }
}

/// The stages of one call ([`call`]).
async fn staged(
    cx: &CallContext<'_>,
    principal: &Principal,
    path_session: Option<&str>,
    call: &ToolCall,
) -> Result<Value, ServiceError> {
    let started = std::time::Instant::now();
    let authorized = authorize(cx, principal, path_session, call).await;
    crate::metrics::stage("decide", started);
    let authorized = match authorized? {
        Stage::Answered(answer) => return Ok(answer),
        Stage::Next(a) => a,
    };
    let started = std::time::Instant::now();
    let recorded = record_decision(cx, &authorized).await;
    crate::metrics::stage("journal", started);
    let decision_receipt = match recorded? {
        Stage::Answered(answer) => return Ok(answer),
        Stage::Next(receipt) => receipt,
    };
    if let Some(answer) = bind_invocation(cx, principal, &authorized, &decision_receipt).await? {
        return Ok(answer);
    }
    run(cx, principal, authorized, &decision_receipt).await
}

/// A confirmation the gateway asks the person for itself: the call's token, invocation and
/// decision receipt, and the client to ask.
struct ToConfirm {
    token: String,
    invocation_id: String,
    receipt: Value,
    client: crate::relay::ClientRelay,
}

/// What to ask when `answer` asks for a confirmation the caller cannot give by echoing: an
/// implicitly bound call, without a token, from a client that takes form elicitations.
fn confirmation_to_ask(cx: &CallContext<'_>, call: &ToolCall, answer: &Value) -> Option<ToConfirm> {
    if call.binding != Binding::Implicit || call.meta.confirmation_token.is_some() {
        return None;
    }
    let client = cx.client.as_ref().filter(|c| c.abilities.elicitation)?;
    let meta = answer.get("_meta")?;
    Some(ToConfirm {
        token: meta.get("confirmation_token")?.as_str()?.to_owned(),
        invocation_id: meta.get("invocation_id")?.as_str()?.to_owned(),
        receipt: meta.get("receipt").cloned().unwrap_or(Value::Null),
        client: client.clone(),
    })
}

/// How much of the arguments a confirmation shows the person.
const CONFIRM_SHOWS: usize = 512;

/// Asks the person to confirm the call (`elicitation/create`, on the call's stream or as an
/// `input_required` result): accepted, the call is confirmed with its token as an echoing
/// client would confirm it, and runs; declined, cancelled or unanswered, nothing runs and the
/// refusal is journaled (`approval_rejected`; the token, never shown to the client, expires
/// with the invocation).
async fn ask_to_confirm(
    cx: &CallContext<'_>,
    principal: &Principal,
    path_session: Option<&str>,
    call: &ToolCall,
    ask: ToConfirm,
) -> Result<Value, ServiceError> {
    let mut shown = call
        .arguments
        .as_ref()
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    if shown.len() > CONFIRM_SHOWS {
        let mut end = CONFIRM_SHOWS;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push('…');
    }
    let params = json!({
        "mode": "form",
        "message": format!("[aperture] Confirm: run {} with {shown}?", call.name),
        "requestedSchema": {"type": "object", "properties": {}},
    });
    let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
    let sent = ask
        .client
        .asks
        .send(crate::relay::Ask {
            upstream: "aperture".into(),
            decision_receipt_id: ask.receipt["receipt_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            method: "elicitation/create",
            params,
            answer: answer_tx,
        })
        .await;
    let action = match sent {
        Ok(()) => match answer_rx.await {
            Ok(Ok(result)) => result["action"].as_str().unwrap_or("invalid").to_owned(),
            Ok(Err(_)) => "error".to_owned(),
            Err(_) => "unanswered".to_owned(),
        },
        Err(_) => "unanswered".to_owned(),
    };
    if action == "accept" {
        let mut confirmed = call.clone();
        confirmed.meta.confirmation_token = Some(ask.token);
        return staged(cx, principal, path_session, &confirmed).await;
    }
    let mut r = journal::receipt(
        ReceiptKind::Approval,
        Decision::Deny,
        ReasonCode::ApprovalRejected,
        &principal.tenant_id,
        &principal.actor_id,
        principal.principal_id(),
    );
    r.invocation_id = Some(ask.invocation_id.clone());
    r.tool = Some(call.name.clone());
    r.binding = Some(call.binding.as_str().to_owned());
    let mut d = journal::disclosures();
    d.insert_extra(
        "confirmation",
        json!({"asked": "elicitation", "action": action}),
    )
    .ok();
    let (receipt, _) = cx.journal.record_decision(&r, &d).await;
    let mut extra = Map::new();
    extra.insert("invocation_id".into(), Value::String(ask.invocation_id));
    Ok(tool_result(
        &receipt,
        true,
        "The call was not confirmed, so nothing ran.",
        extra,
    ))
}

/// A call suspended while its client answers the upstream's request (2026-07-28
/// `input_required`), decided again when the client retries it: the engine's checks of
/// CONTRACT §5 against the grant and the policy as they are now, journaled as a new decision
/// receipt that names the first (`retry_of`). What the first decision spent (a confirmation,
/// a retry or idempotency key, a rate bucket's count, the spend gate) is not spent again: the
/// retry continues the same run. `Ok(Ok(receipt))`: still allowed (the journaled receipt);
/// `Ok(Err(answer))`: refused now (journaled; the run is to be abandoned).
pub async fn decide_again(
    cx: &CallContext<'_>,
    principal: &Principal,
    call: &ToolCall,
    first: &str,
) -> Result<Result<Receipt, Value>, ServiceError> {
    Ok(decided_again(cx, principal, call, first)
        .await?
        .map(|(_, receipt)| receipt))
}

/// A 2026-07-28 call whose upstream answered `input_required` over the gateway's 2026-07-28
/// link, retried by its client with the answers ([`CallContext::round`]): decided again as
/// [`decide_again`] decides (a new decision receipt naming the first, nothing the first
/// spent spent again), then, still allowed, sent to the upstream again with the answers and
/// the upstream's state (the upstream keeps no run between rounds). The answer is a tool
/// result, or the upstream's next round.
pub async fn continue_round(
    cx: &CallContext<'_>,
    principal: &Principal,
    call: &ToolCall,
    first: &str,
) -> Result<Value, ServiceError> {
    let (decided, receipt) = match decided_again(cx, principal, call, first).await? {
        Ok(decided) => decided,
        Err(answer) => return Ok(answer),
    };
    execute(
        cx,
        decided.tool.as_deref(),
        decided.bound,
        decided.r,
        &receipt,
        Map::new(),
    )
    .await
}

/// [`decide_again`], with what the decision was made on.
async fn decided_again(
    cx: &CallContext<'_>,
    principal: &Principal,
    call: &ToolCall,
    first: &str,
) -> Result<Result<(Decided, Receipt), Value>, ServiceError> {
    let mut decided = match decide(cx, principal, None, call).await? {
        Stage::Answered(answer) => return Ok(Err(answer)),
        Stage::Next(decided) => decided,
    };
    decided
        .d
        .insert_extra("retry_of", Value::String(first.to_owned()))
        .ok();
    // A call that would now wait (its rule became approval_required, …) does not go on; one
    // that awaits the confirmation being answered does.
    if !matches!(
        decided.r.decision,
        Decision::Allow | Decision::DryRun | Decision::Confirm
    ) {
        decided.r.decision = Decision::Deny;
        decided.r.reason = ReasonCode::PolicyDenied;
        let answer = denial_at(cx.journal, decided.r, &decided.d, decided.decided_at).await?;
        return Ok(Err(answer));
    }
    let (receipt, recorded) = cx
        .journal
        .record_decision_at(&decided.r, &decided.d, decided.decided_at)
        .await?;
    if !recorded {
        return Ok(Err(tool_result(
            &receipt,
            true,
            short(ReasonCode::JournalUnavailable),
            Map::new(),
        )));
    }
    Ok(Ok((decided, receipt)))
}

/// What a stage hands on: the caller's answer (a denial, a replayed outcome, a status), or
/// what the next stage needs.
enum Stage<T> {
    Answered(Value),
    Next(T),
}

/// A call the engine and the binding's checks allowed to go on: its decision receipt and
/// disclosures (not yet journaled), the bound call, and how it proceeds.
struct Authorized {
    /// The decision receipt, unsigned.
    r: Receipt,
    d: engine::receipt::Disclosures,
    /// The store generation the decision read at, when the record must confirm it.
    decided_at: Option<i64>,
    bound: BoundCall,
    /// The tool as the catalog has it now (its upstream, its dry-run argument).
    tool: Option<std::sync::Arc<cache::Tool>>,
    /// The session the grant belongs to.
    bound_session: String,
    manifest_id: String,
    turn_id: Option<String>,
    /// The caller's `_meta.invocation_id`.
    client_key: Option<String>,
    idempotency: Option<IdempotencyClaim>,
    /// Carried past this request by the durable runtime (parked, staged, queued, awaiting
    /// confirmation).
    deferred: Option<Deferred>,
    /// Executed now (`allow`, or `dry_run_only` with the tool's dry-run argument).
    runs: bool,
    invocation_id: Option<String>,
    /// The token a `confirmation_required` answer gives the caller.
    confirmation: Option<String>,
    /// Bound implicitly, and waits: its repeat finds it ([`repeated`]).
    waits_implicitly: bool,
}

/// A call the engine allowed, with what it was decided on ([`decide`]), for the binding's
/// checks ([`check_binding`]).
struct Decided {
    /// The decision receipt, unsigned.
    r: Receipt,
    d: engine::receipt::Disclosures,
    /// The store generation the decision read at, when the record must confirm it.
    decided_at: Option<i64>,
    /// The generation everything was read at.
    fresh: cache::Fresh,
    bound: BoundCall,
    /// The tool as the catalog has it now (its upstream, its dry-run argument).
    tool: Option<std::sync::Arc<cache::Tool>>,
    /// The session the grant belongs to.
    bound_session: String,
}

/// How a deferred mode is stored and answered.
#[derive(Debug, Clone, Copy)]
struct Deferred {
    /// The invocation's stored status.
    status: &'static str,
    /// The decision receipt's decision.
    decision: Decision,
    /// The status the caller sees.
    caller_status: &'static str,
    /// It waits for a person until it expires.
    waits_for_person: bool,
}

impl Deferred {
    fn of(mode: Mode) -> Option<Self> {
        let (status, decision, caller_status, waits_for_person) = match mode {
            Mode::ApprovalRequired => ("input_required", Decision::Park, "input_required", true),
            Mode::StagedChange => ("staged", Decision::Stage, "staged", true),
            Mode::AsyncJobOnly => ("approved", Decision::Async, "working", false),
            Mode::ConfirmationRequired => (
                "confirmation_required",
                Decision::Confirm,
                "confirmation_required",
                true,
            ),
            _ => return None,
        };
        Some(Self {
            status,
            decision,
            caller_status,
            waits_for_person,
        })
    }
}

/// Stage one: the engine's decision against the grant the call presents, then the binding's
/// own checks. A refusal is journaled and answered here.
async fn authorize(
    cx: &CallContext<'_>,
    principal: &Principal,
    path_session: Option<&str>,
    call: &ToolCall,
) -> Result<Stage<Authorized>, ServiceError> {
    match decide(cx, principal, path_session, call).await? {
        Stage::Next(decided) => check_binding(cx, principal, call, decided).await,
        Stage::Answered(answer) => Ok(Stage::Answered(answer)),
    }
}

/// Stage one, first half: what the call is decided on, gathered — the store's generation, the
/// grant it presents (if it is one of this tenant's, in an environment the caller may use) and
/// the tool as the catalog has it now — and the engine's checks of CONTRACT §5 run on it
/// ([`decision::decide`]). A call the engine refuses is journaled and answered here; one it
/// allows comes back bound, with its receipt and disclosures not yet journaled.
async fn decide(
    cx: &CallContext<'_>,
    principal: &Principal,
    path_session: Option<&str>,
    call: &ToolCall,
) -> Result<Stage<Decided>, ServiceError> {
    let session_id = call
        .meta
        .session_id
        .clone()
        .or(path_session.map(str::to_owned));
    let now = store::now_ms();
    // Everything read below is current as of this generation of the store's counter: read
    // for this request, or (the principal's, from `/mcp`) the one the cache holds, which the
    // decision record confirms when it is committed.
    let fresh = match principal.read_at {
        Some(at) => at,
        None => cache::fresh(cx.store).await?,
    };
    let decided_at = fresh.unconfirmed();
    // The grant the call presents, if it is one of this tenant's.
    let grant = match &call.meta.manifest_id {
        Some(id) => cache::grant(cx.store, &fresh, &principal.tenant_id, id).await?,
        None => None,
    };
    let mut r = journal::receipt(
        ReceiptKind::Decision,
        Decision::Deny,
        ReasonCode::ManifestBindingMismatch,
        &principal.tenant_id,
        &principal.actor_id,
        principal.principal_id(),
    );
    r.session_id = session_id.clone();
    r.manifest_id = call.meta.manifest_id.clone();
    r.turn_id = call.meta.turn_id.clone();
    r.tool = Some(call.name.clone());
    r.environment = principal.own_environment().map(str::to_owned);
    if call.binding == Binding::Implicit {
        r.binding = Some(call.binding.as_str().to_owned());
    }
    let mut d = journal::disclosures();
    // A grant in an environment the caller may not use is refused like an unknown one; only
    // the disclosures say which environment it was.
    let grant = match grant {
        Some(g)
            if g.session
                .as_ref()
                .is_some_and(|s| !principal.sees(&s.environment)) =>
        {
            if let Some(s) = &g.session {
                d.insert_extra("environment", Value::String(s.environment.clone()))
                    .ok();
            }
            None
        }
        other => other,
    };

    let manifest = grant.as_ref().and_then(|g| g.manifest.as_ref());
    // The transport's `Mcp-Param-*` headers mirror the arguments of the tool as advertised:
    // one that disagrees is a malformed request, refused before anything is decided.
    if let Some(headers) = &cx.param_headers
        && let Some(entry) = manifest
            .and_then(|m| m.entry(&call.name))
            .filter(|e| e.mode.is_listed())
    {
        engine::headers::check(
            &entry.advertised.input_schema,
            call.arguments.as_ref(),
            headers,
        )
        .map_err(ServiceError::HeaderMismatch)?;
    }
    let mut tool = None;
    let decided = match (
        &grant,
        grant.as_ref().and_then(|g| g.session.as_ref()),
        manifest,
    ) {
        (Some(g), Some(s), Some(manifest))
            if s.revoked_at.is_none() && path_session.is_none_or(|p| p == s.id) =>
        {
            r.environment = Some(s.environment.clone());
            r.policy_id = Some(manifest.policy_id.clone());
            r.policy_version = Some(manifest.policy_version);
            match &g.allowlist {
                // A stored allowlist that no longer parses must not become "unrestricted".
                Err(()) => Some(decision::CallDecision {
                    verdict: Decision::Deny,
                    reason: ReasonCode::ExecutionAllowlist,
                    detail: None,
                    bound: None,
                }),
                Ok(allowlist) => {
                    let grant = EngineGrant {
                        manifest,
                        tenant_id: &s.tenant_id,
                        session_id: &s.id,
                        manifest_id: &g.manifest_id,
                        lease_id: &g.lease_id,
                        lease_expires_at_ms: g.lease_expires_at,
                        actor_id: &s.actor_id,
                    };
                    let caller = Caller {
                        tenant_id: &principal.tenant_id,
                        actor_id: &principal.actor_id,
                        scopes: &principal.scopes,
                    };
                    let request = CallRequest {
                        session_id: session_id.as_deref(),
                        manifest_id: call.meta.manifest_id.as_deref(),
                        lease_id: call.meta.lease_id.as_deref(),
                        tool: &call.name,
                        tool_version: call.meta.tool_version.as_deref(),
                        expected_schema_hash: call.meta.expected_schema_hash.as_deref(),
                        actor_id: call.meta.actor_id.as_deref(),
                        arguments: call.arguments.as_ref(),
                    };
                    // The tool as the catalog has it now, by its canonical name (a `/mcp` call
                    // may name it as its upstream does, when the grant listed it so).
                    let canonical = manifest
                        .entry(&call.name)
                        .map_or(call.name.as_str(), |e| e.name.as_str());
                    tool = cache::tool(cx.store, &fresh, &s.tenant_id, canonical).await?;
                    let live = tool
                        .as_ref()
                        .map(|t| (t.tool.tool.name.as_str(), &t.tool.fingerprints));
                    let lookup = |name: &str| {
                        live.filter(|(n, _)| *n == name)
                            .map(|(_, f)| f.definition_hash.clone())
                    };
                    Some(decision::decide(
                        &grant,
                        &caller,
                        &request,
                        now,
                        allowlist.as_ref(),
                        &lookup,
                        cx.validators,
                    ))
                }
            }
        }
        _ => None,
    };
    let Some(decided) = decided else {
        return denial_at(cx.journal, r, &d, decided_at)
            .await
            .map(Stage::Answered);
    };
    r.decision = decided.verdict;
    r.reason = decided.reason;
    if let Some(detail) = &decided.detail {
        d.insert_extra("detail", Value::String(detail.clone())).ok();
    }
    let entry = manifest
        .and_then(|m| m.entry(&call.name))
        .filter(|e| e.mode.is_listed());
    if let Some(e) = entry {
        // Receipts keep the canonical identity, whatever name the call used.
        r.tool = Some(e.name.clone());
        r.tool_version = Some(e.tool_version.clone());
        r.schema_hash = Some(e.schema_hash.clone());
        r.mode = Some(e.mode.as_str().to_owned());
        d.matched_rule_id = e.rule_id.clone();
        d.rule_reason = Some(e.rule_reason.clone()).filter(|s| !s.is_empty());
    }
    let Some(bound) = decided.bound.clone() else {
        return denial_at(cx.journal, r, &d, decided_at)
            .await
            .map(Stage::Answered);
    };
    r.args_hash = Some(bound.args_hash.clone());
    // The target pinned at the grant is part of what this decision authorizes.
    r.target = target_json(bound.target.as_ref());
    r.limits = serde_json::to_value(&bound.limits).ok();
    r.redaction = serde_json::to_value(&bound.redaction).ok();
    d.effective_arguments = Some(Value::Object(bound.effective_arguments.clone()));
    let bound_session = grant
        .as_ref()
        .and_then(|g| g.session.as_ref())
        .map(|s| s.id.clone())
        .unwrap_or_default();
    Ok(Stage::Next(Decided {
        r,
        d,
        decided_at,
        fresh,
        bound,
        tool,
        bound_session,
    }))
}

/// Stage one, second half: the binding's checks on a call the engine allowed, in CONTRACT §5's
/// order after the arguments — a confirmation presented, the caller's retry key, the tool's
/// idempotency key, rate limits and the spend gate — and how it proceeds (run now, dry run,
/// or carried by the durable runtime). A refusal is journaled and answered here.
async fn check_binding(
    cx: &CallContext<'_>,
    principal: &Principal,
    call: &ToolCall,
    decided: Decided,
) -> Result<Stage<Authorized>, ServiceError> {
    let Decided {
        mut r,
        mut d,
        mut decided_at,
        fresh,
        bound,
        tool,
        bound_session,
    } = decided;
    // What follows may write before the decision is journaled (a confirmation spent, a rate
    // bucket counted) or answer from a stored invocation: only on reads confirmed current now.
    // A generation that moved means deciding again.
    let confirms =
        bound.mode == Mode::ConfirmationRequired && call.meta.confirmation_token.is_some();
    let counts = bound.limits.rate_bucket.is_some() && cx.rate_limiter;
    let claims = bound.idempotency_key().is_some();
    // A call bound implicitly that waits is found again by repeating it (a stored invocation).
    let implicit = call.binding == Binding::Implicit;
    let waits_implicitly = implicit
        && matches!(
            bound.mode,
            Mode::ApprovalRequired | Mode::StagedChange | Mode::AsyncJobOnly
        );
    if decided_at.is_some()
        && (confirms || counts || claims || waits_implicitly || call.meta.invocation_id.is_some())
    {
        if cache::confirm(cx.store, fresh).await?.is_none() {
            return Err(ServiceError::StaleRead);
        }
        decided_at = None;
    }
    // The same actor repeating a call that needs confirmation, with the token it was given.
    if bound.mode == Mode::ConfirmationRequired
        && let Some(token) = &call.meta.confirmation_token
    {
        return confirm(cx, principal, &bound_session, token, bound, tool, r, d)
            .await
            .map(Stage::Answered);
    }
    // A client that cannot echo cannot carry a confirmation token either: unless the person
    // can be asked (an elicitation, [`ask_to_confirm`]), the call is refused, with its receipt.
    let can_ask = cx.client.as_ref().is_some_and(|c| c.abilities.elicitation);
    if implicit && bound.mode == Mode::ConfirmationRequired && !can_ask {
        r.decision = Decision::Deny;
        r.reason = ReasonCode::PolicyDenied;
        d.insert_extra(
            "detail",
            Value::String(
                "confirmation_required needs a confirmation this client cannot give (no echo, no elicitation)"
                    .into(),
            ),
        )
        .ok();
        return denial_at(cx.journal, r, &d, decided_at)
            .await
            .map(Stage::Answered);
    }
    // The same call repeated while it waits: its invocation's status, then its outcome once.
    if waits_implicitly && let Some(answer) = repeated(cx, principal, call, &bound, &r, &d).await? {
        return Ok(Stage::Answered(answer));
    }
    // The caller's retry key: a retry gets the outcome of the first call under it, never a
    // second run (nor a second count against a rate bucket); another call under the same key
    // is refused.
    let client_key = call.meta.invocation_id.clone();
    if let Some(key) = &client_key {
        if key.is_empty()
            || key.chars().count() > MAX_CLIENT_KEY
            || key.len() > MAX_CLIENT_ID_BYTES
            || key.trim() != key
        {
            r.decision = Decision::Deny;
            r.reason = ReasonCode::ManifestBindingMismatch;
            d.insert_extra(
                "detail",
                Value::String(
                    "invocation_id must be 1 to 200 characters (at most 256 bytes) without surrounding whitespace"
                        .into(),
                ),
            )
            .ok();
            return denial_at(cx.journal, r, &d, decided_at)
                .await
                .map(Stage::Answered);
        }
        let mut existing = store::invocations::find_by_client_key(
            cx.store,
            &principal.tenant_id,
            &bound_session,
            key,
        )
        .await?;
        if existing.is_none() && key.starts_with("inv_") {
            // The id this gateway answered with, echoed back as the retry key: the same
            // invocation (the caller's own, in this session), never a second one.
            existing = store::invocations::find(cx.store, &principal.tenant_id, key)
                .await?
                .filter(|row| {
                    row.session_id == bound_session && row.actor_id == principal.actor_id
                });
        }
        if let Some(existing) = existing {
            return replay(cx, &existing, &bound, r, d)
                .await
                .map(Stage::Answered);
        }
    }
    // `requires_idempotency`: the first call under (tenant, actor, tool, key) within the
    // retention is the one that runs; the same key again gets its outcome (and counts against
    // no rate bucket), with other arguments a refusal. Not bound to a manifest, so it holds
    // across a re-list and a restart.
    let idempotency = match bound.idempotency_key() {
        None => None,
        // Stored for the retention: bounded like every identifier a client chooses.
        Some(key) if key.len() > MAX_CLIENT_ID_BYTES => {
            r.decision = Decision::Deny;
            r.reason = ReasonCode::ManifestBindingMismatch;
            d.insert_extra(
                "detail",
                Value::String("idempotency_key must be at most 256 bytes".into()),
            )
            .ok();
            return denial_at(cx.journal, r, &d, decided_at)
                .await
                .map(Stage::Answered);
        }
        Some(key) => match claim_idempotency(cx, principal, &bound, key).await? {
            Claimed::Ours(claim) => Some(claim),
            Claimed::Replay(first) => {
                return crate::invocations::outcome(cx.store, &first)
                    .await
                    .map(Stage::Answered);
            }
            Claimed::Refused(detail) => {
                r.decision = Decision::Deny;
                r.reason = ReasonCode::ManifestBindingMismatch;
                d.insert_extra("detail", Value::String(detail)).ok();
                return denial_at(cx.journal, r, &d, decided_at)
                    .await
                    .map(Stage::Answered);
            }
        },
    };
    if let Some((reason, detail)) = runtime_refusal(cx, principal, &bound).await {
        release_idempotency(cx, idempotency.as_ref()).await?;
        r.decision = Decision::Deny;
        r.reason = reason;
        d.insert_extra("detail", Value::String(detail)).ok();
        return denial_at(cx.journal, r, &d, decided_at)
            .await
            .map(Stage::Answered);
    }
    let deferred = Deferred::of(bound.mode);
    let invocation_id = match &idempotency {
        Some(claim) => Some(claim.invocation_id.clone()),
        None => (client_key.is_some() || deferred.is_some()).then(|| crate::ids::new_id("inv")),
    };
    r.invocation_id = invocation_id.clone();
    let runs = match bound.mode {
        Mode::Allow => true,
        // Executed only with the tool's own dry-run argument fixed to true (the manifest fixed
        // it at grant time); otherwise validated, bound and journaled, not executed.
        Mode::DryRunOnly => tool
            .as_ref()
            .filter(|t| t.tool.tool.name == bound.tool)
            .and_then(|t| t.tool.tool.dry_run_argument.as_ref())
            .is_some_and(|a| bound.effective_arguments.get(a) == Some(&Value::Bool(true))),
        _ => match deferred {
            Some(deferred) => {
                r.decision = deferred.decision;
                r.reason = ReasonCode::Ok;
                false
            }
            // `hide` and `deny` never get here (the engine refused them).
            None => {
                release_idempotency(cx, idempotency.as_ref()).await?;
                r.decision = Decision::Deny;
                r.reason = ReasonCode::PolicyDenied;
                return denial_at(cx.journal, r, &d, decided_at)
                    .await
                    .map(Stage::Answered);
            }
        },
    };
    let confirmation = (bound.mode == Mode::ConfirmationRequired).then(new_confirmation_token);
    Ok(Stage::Next(Authorized {
        waits_implicitly,
        r,
        d,
        decided_at,
        bound,
        tool,
        bound_session,
        manifest_id: call.meta.manifest_id.clone().unwrap_or_default(),
        turn_id: call.meta.turn_id.clone(),
        client_key,
        idempotency,
        deferred,
        runs,
        invocation_id,
        confirmation,
    }))
}

/// CONTRACT §5 after the arguments: rate limits (counted by the shared limiter when one is
/// configured; a rule with a bucket and no limiter is refused, never run unlimited), then the
/// spend gate (without one a capped rule is refused rather than run uncapped). The refusal's
/// reason and detail, if any.
async fn runtime_refusal(
    cx: &CallContext<'_>,
    principal: &Principal,
    bound: &BoundCall,
) -> Option<(ReasonCode, String)> {
    let runtime_refusal = if let Some(bucket) = &bound.limits.rate_bucket {
        if cx.rate_limiter {
            match store::rate_buckets::take(
                cx.store,
                &principal.tenant_id,
                &bucket.name,
                bucket.per_minute,
                store::now_ms(),
            )
            .await
            {
                Ok(true) => None,
                Ok(false) => Some((
                    ReasonCode::RateLimited,
                    format!("rate bucket {} is used up for this minute", bucket.name),
                )),
                Err(e) => {
                    tracing::error!(error = %e, "the rate limiter cannot count; refusing");
                    Some((
                        ReasonCode::RateLimited,
                        "the rate limiter is unavailable".to_owned(),
                    ))
                }
            }
        } else {
            Some((
                ReasonCode::RateLimited,
                "no shared rate limiter is configured".to_owned(),
            ))
        }
    } else {
        None
    };
    runtime_refusal.or_else(|| {
        let cap = bound.limits.max_cost_cents?;
        if !cx.spend_gate {
            return Some((
                ReasonCode::SpendGateUnavailable,
                "no spend gate is configured, so a capped rule cannot run".to_owned(),
            ));
        }
        // The price is the tool's descriptor as granted, known before the upstream is contacted.
        match bound.price_cents {
            None => Some((
                ReasonCode::PolicyDenied,
                "the tool has no price, so its cost cannot be held to the rule's cap".to_owned(),
            )),
            Some(price) if i64::try_from(price).map_or(true, |p| p > cap) => Some((
                ReasonCode::PolicyDenied,
                format!("a call costs {price} cents, over the rule's cap of {cap}"),
            )),
            Some(_) => None,
        }
    })
}

/// Stage two: the decision journaled. Not recorded means not run (a signed
/// `journal_unavailable` denial answers), and an idempotency key claimed for it is free again.
async fn record_decision(
    cx: &CallContext<'_>,
    a: &Authorized,
) -> Result<Stage<Receipt>, ServiceError> {
    let recorded = cx
        .journal
        .record_decision_at(&a.r, &a.d, a.decided_at)
        .await;
    if !matches!(recorded, Ok((_, true))) {
        // Never recorded, so never run: the key is free again.
        release_idempotency(cx, a.idempotency.as_ref()).await?;
    }
    let (decision_receipt, recorded) = recorded?;
    if !recorded {
        return Ok(Stage::Answered(tool_result(
            &decision_receipt,
            true,
            short(ReasonCode::JournalUnavailable),
            Map::new(),
        )));
    }
    Ok(Stage::Next(decision_receipt))
}

/// Stage three: a call that waits (for a person, a worker or a confirmation) or carries a retry
/// or idempotency key is bound durably as an invocation; a deferred one, or a dry run that is
/// not executed, is answered here. `None`: go on and run it.
async fn bind_invocation(
    cx: &CallContext<'_>,
    principal: &Principal,
    a: &Authorized,
    decision_receipt: &Receipt,
) -> Result<Option<Value>, ServiceError> {
    let bound = &a.bound;
    let dry_run = (!a.runs && a.deferred.is_none()).then(|| {
        let mut extra = Map::new();
        extra.insert("dry_run".into(), Value::Bool(true));
        tool_result(
            decision_receipt,
            false,
            "Validated and recorded as a dry run; nothing was executed.",
            extra,
        )
    });
    if let Some(id) = &a.invocation_id {
        let now = store::now_ms();
        let (token_id, token_created_by) = match &principal.kind {
            crate::principal::PrincipalKind::Token {
                token_id,
                created_by,
            } => (Some(token_id.clone()), Some(created_by.clone())),
            _ => (None, None),
        };
        let waits = match (bound.mode, a.deferred) {
            (Mode::ConfirmationRequired, _) => Some(CONFIRMATION_TTL),
            (_, Some(d)) if d.waits_for_person => Some(cx.parked_expiry),
            _ => None,
        };
        let r = &a.r;
        let (bound_session, client_key, confirmation, deferred, runs) = (
            &a.bound_session,
            &a.client_key,
            &a.confirmation,
            a.deferred,
            a.runs,
        );
        let row = store::invocations::InvocationRow {
            id: id.clone(),
            tenant_id: principal.tenant_id.clone(),
            session_id: bound_session.clone(),
            manifest_id: a.manifest_id.clone(),
            client_key: client_key.clone(),
            turn_id: a.turn_id.clone(),
            actor_id: principal.actor_id.clone(),
            token_id,
            token_created_by,
            tool: bound.tool.clone(),
            tool_version: bound.tool_version.clone(),
            schema_hash: bound.schema_hash.clone(),
            args_hash: bound.args_hash.clone(),
            mode: bound.mode.as_str().to_owned(),
            binding: serde_json::to_string(&bound)
                .map_err(|e| ServiceError::Other(anyhow::anyhow!("binding: {e}")))?,
            policy_id: r.policy_id.clone().unwrap_or_default(),
            policy_version: r
                .policy_version
                .and_then(|v| i64::try_from(v).ok())
                .unwrap_or(0),
            decision_receipt_id: decision_receipt.receipt_id.clone(),
            status: match deferred {
                Some(d) => d.status,
                None if runs => "running",
                None => "completed",
            }
            .to_owned(),
            result: dry_run.as_ref().map(Value::to_string),
            decided_by: None,
            decided_by_principal: None,
            decided_at: None,
            decision_comment: None,
            approval_receipt_id: None,
            confirmation_sha256: confirmation
                .as_ref()
                .map(|t| crate::principal::secret_hash(t)),
            created_at: now,
            expires_at: waits
                .map(|w| now.saturating_add(i64::try_from(w.as_millis()).unwrap_or(i64::MAX))),
            updated_at: now,
            output_to: cx.output_to.as_str().to_owned(),
        };
        if !store::invocations::insert(cx.store, &row).await? {
            release_idempotency(cx, a.idempotency.as_ref()).await?;
            // A concurrent call under the same key was bound first: its outcome, not a second run.
            let existing = store::invocations::find_by_client_key(
                cx.store,
                &principal.tenant_id,
                bound_session,
                client_key.as_deref().unwrap_or_default(),
            )
            .await?
            .ok_or_else(|| ServiceError::Other(anyhow::anyhow!("invocation {id} vanished")))?;
            let mut r = a.r.clone();
            r.invocation_id = None;
            return replay(cx, &existing, bound, r, a.d.clone()).await.map(Some);
        }
        // The approvals queue on every node hears of a call that waits for a person, the
        // workers of one that waits for them.
        let kind = match row.status.as_str() {
            "input_required" | "staged" => Some("invocation.parked"),
            "approved" => Some("invocation.queued"),
            _ => None,
        };
        if let Some(kind) = kind {
            crate::invocations::publish(cx.events, kind, &row, &row.status).await;
        }
        if a.waits_implicitly {
            store::invocations::insert_implicit_wait(
                cx.store,
                id,
                implicit_call(principal, &a.manifest_id, bound),
            )
            .await?;
        }
    }
    if let Some(deferred) = a.deferred {
        if bound.mode == Mode::AsyncJobOnly {
            cx.events.worker().notify_one();
        }
        let receipt = serde_json::to_value(decision_receipt).unwrap_or(Value::Null);
        let mut result = crate::invocations::status_result(
            deferred.caller_status,
            a.invocation_id.as_deref().unwrap_or_default(),
            &receipt,
        );
        if let Some(token) = &a.confirmation
            && let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut)
        {
            meta.insert("confirmation_token".into(), Value::String(token.clone()));
        }
        if a.waits_implicitly {
            crate::invocations::ask_to_repeat(&mut result);
        }
        return Ok(Some(result));
    }
    Ok(dry_run)
}

/// Stage four: the call runs through its pinned upstream ([`crate::execution::execute`]), and
/// its invocation, if it has one, is completed with the result.
async fn run(
    cx: &CallContext<'_>,
    principal: &Principal,
    a: Authorized,
    decision_receipt: &Receipt,
) -> Result<Value, ServiceError> {
    let mut extra = Map::new();
    if let Some(id) = &a.invocation_id {
        extra.insert("invocation_id".into(), Value::String(id.clone()));
    }
    let _beat = a
        .invocation_id
        .as_deref()
        .map(|id| crate::heartbeat::Heartbeat::invocation(cx.store, &principal.tenant_id, id));
    let out = execute(cx, a.tool.as_deref(), a.bound, a.r, decision_receipt, extra).await?;
    if let Some(id) = &a.invocation_id {
        store::invocations::transition(
            cx.store,
            &principal.tenant_id,
            id,
            "running",
            "completed",
            &store::invocations::Change {
                result: Some(&out.to_string()),
                ..Default::default()
            },
        )
        .await?;
    }
    Ok(out)
}

/// What claiming an idempotency key found.
enum Claimed {
    /// The key is this call's.
    Ours(IdempotencyClaim),
    /// The key's first call, with the same arguments: its outcome is the answer.
    Replay(Box<store::invocations::InvocationRow>),
    /// Refused, and why.
    Refused(String),
}

/// This call's claim of an idempotency key.
struct IdempotencyClaim {
    tenant_id: String,
    actor_id: String,
    tool: String,
    key: String,
    invocation_id: String,
}

impl IdempotencyClaim {
    fn key(&self) -> store::idempotency::Key<'_> {
        store::idempotency::Key {
            tenant_id: &self.tenant_id,
            actor_id: &self.actor_id,
            tool: &self.tool,
            key: &self.key,
        }
    }
}

/// A claim older than this whose call was never recorded belongs to a call that stopped before
/// its decision was journaled (so it never ran): another call may take the key over.
const UNRECORDED_CLAIM: Duration = Duration::from_secs(60);

/// Claims `key` for a new invocation of `bound`, or finds who has it.
async fn claim_idempotency(
    cx: &CallContext<'_>,
    principal: &Principal,
    bound: &BoundCall,
    key: &str,
) -> Result<Claimed, ServiceError> {
    let claim = IdempotencyClaim {
        tenant_id: principal.tenant_id.clone(),
        actor_id: principal.actor_id.clone(),
        tool: bound.tool.clone(),
        key: key.to_owned(),
        invocation_id: crate::ids::new_id("inv"),
    };
    let retention = i64::try_from(cx.idempotency_retention.as_millis()).unwrap_or(i64::MAX);
    // The first call under the key is recorded within milliseconds of claiming it.
    for _ in 0..40 {
        let now = store::now_ms();
        let first = store::idempotency::claim(
            cx.store,
            claim.key(),
            &claim.invocation_id,
            &bound.args_hash,
            now,
            now.saturating_add(retention),
        )
        .await?;
        let Some(first) = first else {
            return Ok(Claimed::Ours(claim));
        };
        if first.args_hash != bound.args_hash {
            return Ok(Claimed::Refused(format!(
                "idempotency_key {key:?} was already used for {} with other arguments (invocation {})",
                bound.tool, first.invocation_id
            )));
        }
        if let Some(row) =
            store::invocations::find(cx.store, &principal.tenant_id, &first.invocation_id).await?
        {
            return Ok(Claimed::Replay(Box::new(row)));
        }
        let unrecorded = i64::try_from(UNRECORDED_CLAIM.as_millis()).unwrap_or(i64::MAX);
        if now.saturating_sub(first.created_at) > unrecorded {
            store::idempotency::release(cx.store, claim.key(), &first.invocation_id).await?;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Claimed::Refused(format!(
        "a call with idempotency_key {key:?} is still being authorized; retry it"
    )))
}

/// Gives up this call's claim of its idempotency key (the call was not recorded or not run).
/// A store that cannot release it (as when the journal could not record either) must not turn
/// the caller's refusal into an error: the unrecorded claim is taken over after
/// [`UNRECORDED_CLAIM`].
async fn release_idempotency(
    cx: &CallContext<'_>,
    claim: Option<&IdempotencyClaim>,
) -> Result<(), ServiceError> {
    if let Some(claim) = claim
        && let Err(e) =
            store::idempotency::release(cx.store, claim.key(), &claim.invocation_id).await
    {
        tracing::warn!(error = %e, "releasing an idempotency key; it frees itself later");
    }
    Ok(())
}

/// How long a confirmation token stays valid.
const CONFIRMATION_TTL: Duration = Duration::from_secs(10 * 60);

/// A fresh confirmation token (`cnf_` and 32 random bytes, base64url).
fn new_confirmation_token() -> String {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!(
        "cnf_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The second half of `confirmation_required`: the same actor repeats the identical call with
/// the token it was given. The token releases exactly that binding, once; presented with any
/// other arguments (or tool, or session) it is spent without running anything.
#[expect(clippy::too_many_arguments, reason = "one call's whole context")]
async fn confirm(
    cx: &CallContext<'_>,
    principal: &Principal,
    bound_session: &str,
    token: &str,
    bound: BoundCall,
    tool: Option<std::sync::Arc<cache::Tool>>,
    mut r: Receipt,
    mut d: engine::receipt::Disclosures,
) -> Result<Value, ServiceError> {
    use store::invocations::{self as rows, Change};
    let found = rows::find_by_confirmation(
        cx.store,
        &principal.tenant_id,
        &crate::principal::secret_hash(token),
    )
    .await?;
    let refuse = |mut r: Receipt, mut d: engine::receipt::Disclosures, reason, detail: &str| {
        r.decision = Decision::Deny;
        r.reason = reason;
        d.insert_extra("detail", Value::String(detail.to_owned()))
            .ok();
        (r, d)
    };
    let Some(row) = found else {
        let (r, d) = refuse(
            r,
            d,
            ReasonCode::ManifestBindingMismatch,
            "unknown confirmation token",
        );
        return Ok(denial(cx.journal, r, &d).await);
    };
    r.invocation_id = Some(row.id.clone());
    if row.actor_id != principal.actor_id {
        let (r, d) = refuse(
            r,
            d,
            ReasonCode::ActorMismatch,
            "only the actor that made the call can confirm it",
        );
        return Ok(denial(cx.journal, r, &d).await);
    }
    let same = row.session_id == bound_session && crate::invocations::same_binding(&row, &bound);
    if row.status != "confirmation_required" {
        // A retry of a confirmation that was already used: its outcome, never a second run.
        if same {
            return crate::invocations::outcome(cx.store, &row).await;
        }
        let (r, d) = refuse(
            r,
            d,
            ReasonCode::ManifestBindingMismatch,
            "the confirmation token was already used",
        );
        return Ok(denial(cx.journal, r, &d).await);
    }
    if row.expires_at.is_some_and(|at| at <= store::now_ms()) {
        let (r, d) = refuse(
            r,
            d,
            ReasonCode::ApprovalExpired,
            "the confirmation token expired",
        );
        return Ok(denial(cx.journal, r, &d).await);
    }
    if !same {
        // A changed call spends the token: it can never release this or any other binding.
        let (r, d) = refuse(
            r,
            d,
            ReasonCode::ManifestBindingMismatch,
            "the confirmed call differs from the call the token was issued for",
        );
        let result = denial(cx.journal, r, &d).await;
        rows::transition(
            cx.store,
            &principal.tenant_id,
            &row.id,
            "confirmation_required",
            "invalidated",
            &Change {
                result: Some(&result.to_string()),
                ..Change::default()
            },
        )
        .await?;
        return Ok(result);
    }
    if !rows::transition(
        cx.store,
        &principal.tenant_id,
        &row.id,
        "confirmation_required",
        "running",
        &Change::default(),
    )
    .await?
    {
        // Confirmed concurrently: that confirmation's outcome.
        let row = rows::find(cx.store, &principal.tenant_id, &row.id)
            .await?
            .unwrap_or(row);
        return crate::invocations::outcome(cx.store, &row).await;
    }
    r.decision = Decision::Allow;
    r.reason = ReasonCode::Ok;
    d.insert_extra(
        "confirms_decision_receipt_id",
        Value::String(row.decision_receipt_id.clone()),
    )
    .ok();
    let (decision_receipt, recorded) = cx.journal.record_decision(&r, &d).await;
    if !recorded {
        rows::transition(
            cx.store,
            &principal.tenant_id,
            &row.id,
            "running",
            "confirmation_required",
            &Change::default(),
        )
        .await?;
        return Ok(tool_result(
            &decision_receipt,
            true,
            short(ReasonCode::JournalUnavailable),
            Map::new(),
        ));
    }
    let mut extra = Map::new();
    extra.insert("invocation_id".into(), Value::String(row.id.clone()));
    let tool = tool.filter(|t| t.tool.tool.name == bound.tool);
    let _beat = crate::heartbeat::Heartbeat::invocation(cx.store, &principal.tenant_id, &row.id);
    let out = execute(cx, tool.as_deref(), bound, r, &decision_receipt, extra).await?;
    rows::transition(
        cx.store,
        &principal.tenant_id,
        &row.id,
        "running",
        "completed",
        &Change {
            result: Some(&out.to_string()),
            ..Change::default()
        },
    )
    .await?;
    Ok(out)
}

/// Longest `_meta.invocation_id`, in characters.
const MAX_CLIENT_KEY: usize = 200;

/// The most bytes of any identifier a client chooses that the gateway stores, publishes or
/// echoes (a JSON-RPC `id`, `requestId`, `progressToken`, `Last-Event-ID`, `invocation_id`,
/// `idempotency_key`, a cursor): what one request can make the gateway keep stays small.
pub const MAX_CLIENT_ID_BYTES: usize = 256;

/// Journals a denial and answers it.
async fn denial(journal: &Journal, r: Receipt, d: &engine::receipt::Disclosures) -> Value {
    let (receipt, _) = journal.record_decision(&r, d).await;
    tool_result(&receipt, true, short(receipt.reason), Map::new())
}

/// A call under a retry key that is already bound: the same binding gets that invocation's
/// outcome; a different one is refused.
/// What finds an implicitly bound call's invocation again: the principal, the grant, the tool
/// and the arguments as bound.
fn implicit_call<'a>(
    principal: &'a Principal,
    manifest_id: &'a str,
    bound: &'a BoundCall,
) -> store::invocations::ImplicitCall<'a> {
    store::invocations::ImplicitCall {
        tenant_id: &principal.tenant_id,
        manifest_id,
        principal: principal.principal_id(),
        tool: &bound.tool,
        args_hash: &bound.args_hash,
    }
}

/// An implicitly bound call repeated while an identical one (same principal, grant, tool,
/// `args_hash`) waits: that invocation's status, or, once it is settled, its outcome — once;
/// `None` when there is none (the call is a new one).
async fn repeated(
    cx: &CallContext<'_>,
    principal: &Principal,
    call: &ToolCall,
    bound: &BoundCall,
    r: &Receipt,
    d: &engine::receipt::Disclosures,
) -> Result<Option<Value>, ServiceError> {
    let manifest_id = call.meta.manifest_id.as_deref().unwrap_or_default();
    let key = implicit_call(principal, manifest_id, bound);
    let Some(id) = store::invocations::implicit_wait(cx.store, key).await? else {
        return Ok(None);
    };
    let Some(existing) = store::invocations::find(cx.store, &principal.tenant_id, &id).await?
    else {
        return Ok(None);
    };
    let settled = crate::invocations::is_settled(&existing.status);
    if settled
        && !store::invocations::deliver_implicit_wait(cx.store, &principal.tenant_id, &id).await?
    {
        // Another repeat had it first: this one is a new call.
        return Ok(None);
    }
    let mut answer = replay(cx, &existing, bound, r.clone(), d.clone()).await?;
    if !settled {
        crate::invocations::ask_to_repeat(&mut answer);
    }
    Ok(Some(answer))
}

async fn replay(
    cx: &CallContext<'_>,
    existing: &store::invocations::InvocationRow,
    bound: &BoundCall,
    mut r: Receipt,
    mut d: engine::receipt::Disclosures,
) -> Result<Value, ServiceError> {
    if crate::invocations::same_binding(existing, bound) {
        return crate::invocations::outcome(cx.store, existing).await;
    }
    r.decision = Decision::Deny;
    r.reason = ReasonCode::ManifestBindingMismatch;
    d.insert_extra(
        "detail",
        Value::String(format!(
            "invocation_id is already bound to {} with other arguments or another tool",
            existing.id
        )),
    )
    .ok();
    Ok(denial(cx.journal, r, &d).await)
}
