//! The execution stage of a call: what a bound call needs from the server
//! ([`CallContext`]), running it through its pinned upstream with the granted deadline and
//! result cap, the output redacted for where it goes ([`OutputTo`]), and its execution receipt
//! recorded ([`execute`]); with the small pieces every stage answers with ([`tool_result`],
//! [`record`]). Both a call in its own request ([`crate::calls`]) and a released or queued
//! invocation ([`crate::invocations`]) end here, so neither of those modules needs the other's
//! execution path.

use std::time::Duration;

use engine::decision::BoundCall;
use engine::descriptor::ToolSource;
use engine::manifest::ExecutionTarget;
use engine::narrow::ValidatorCache;
use engine::policy::{Destination, Mode};
use engine::receipt::{Decision, ReasonCode, Receipt, ReceiptKind};
use engine::redact;
use serde_json::{Map, Value, json};

use crate::error::ServiceError;
use crate::journal::{self, Journal};
use crate::store::{Store, cache};
use crate::upstream::{Upstreams, check_result_size};

/// Deadline of a call whose rule sets none.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// Everything a call needs from the server.
pub struct CallContext<'a> {
    /// Store.
    pub store: &'a Store,
    /// Journal.
    pub journal: &'a Journal,
    /// Upstream connections.
    pub upstreams: &'a Upstreams,
    /// Compiled validators of advertised schemas.
    pub validators: &'a ValidatorCache,
    /// How long a parked invocation waits for an approver.
    pub parked_expiry: Duration,
    /// Events to every node; wakes the invocation worker (an async job was accepted).
    pub events: &'a crate::events::Bus,
    /// Rate buckets are counted by the shared limiter (`APERTURE_RATE_LIMITER=database`).
    pub rate_limiter: bool,
    /// `max_cost_cents` is checked against tool prices (`APERTURE_SPEND_GATE=catalog`).
    pub spend_gate: bool,
    /// Where results go, and so what they are redacted for.
    pub output_to: OutputTo,
    /// How long an `idempotency_key` de-duplicates.
    pub idempotency_retention: Duration,
    /// Turns `true` when the caller cancels the call in flight (crate::cancel); `None` where
    /// nobody can.
    pub cancelled: Option<tokio::sync::watch::Receiver<bool>>,
    /// Where the upstream's progress on the call goes, when the caller asked for it
    /// (`_meta.progressToken` on a streamed `tools/call`); `None` where nobody listens.
    pub progress: Option<ProgressSink>,
    /// The call's connected client, which the upstream's requests (sampling, elicitation,
    /// roots) may reach where the call's rule lets them ([`crate::relay`]); `None` where no
    /// client is connected (REST, workers, hosted agents): they are refused.
    pub client: Option<crate::relay::ClientRelay>,
    /// Where the upstream's log messages about the call go, from which level up, when the
    /// caller listens (a level set for its session, or named by the request); `None`: dropped.
    pub log: Option<LogSink>,
    /// The call's `Mcp-Param-*` headers (2026-07-28 `/mcp`), checked against the advertised
    /// schema's `x-mcp-header` parameters before anything is decided; `None` where the
    /// transport has no such headers.
    pub param_headers: Option<engine::headers::ParamHeaders>,
    /// A 2026-07-28 `/mcp` call from a client that can be asked: it goes over the gateway's
    /// 2026-07-28 link when its upstream has one, carrying what the previous input round
    /// gathered, and an upstream's `input_required` answer is relayed as the call's round
    /// ([`crate::relay::input_round`]); `None` elsewhere.
    pub round: Option<crate::relay::Round>,
}

/// Where a call's log messages go ([`CallContext::log`]): those at `level` or above, their data
/// redacted as the tool's output is for where it goes. A caller that reads too slowly misses
/// some.
#[derive(Debug, Clone)]
pub struct LogSink {
    /// The least severe level the caller hears.
    pub level: crate::upstream::LogLevel,
    /// Where they go.
    pub to: tokio::sync::mpsc::Sender<crate::upstream::UpstreamLog>,
}

/// What of a log message may reach the caller: its data passes the tool's redaction profile as
/// a text result would (data that is not text, as its JSON), or the message is dropped.
fn relayable_log(
    mut log: crate::upstream::UpstreamLog,
    profile: &engine::policy::RedactionProfile,
    destinations: &[Destination],
) -> Option<crate::upstream::UpstreamLog> {
    let text = match &log.data {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let as_result = json!({"content": [{"type": "text", "text": text}]});
    let (redacted, report) = redact::redact_for(&as_result, profile, destinations);
    let kept = redacted["content"][0]["text"].as_str()?;
    if report.withheld || kept.is_empty() {
        return None;
    }
    if kept != text {
        log.data = Value::String(kept.to_owned());
    }
    Some(log)
}

/// The upstream's progress on a call, on its way to the caller: numbers as the upstream sent
/// them, the message redacted as the tool's output is for where it goes (dropped when the
/// redaction would leave nothing of it). A caller that reads too slowly misses some.
pub type ProgressSink = tokio::sync::mpsc::Sender<crate::upstream::Progress>;

/// What of the upstream's progress may reach the caller: `message` passes the tool's redaction
/// profile as a text result would, or is dropped.
fn relayable(
    mut progress: crate::upstream::Progress,
    profile: &engine::policy::RedactionProfile,
    destinations: &[Destination],
) -> crate::upstream::Progress {
    if let Some(message) = progress.message.take() {
        let as_result = json!({"content": [{"type": "text", "text": message}]});
        let (redacted, report) = redact::redact_for(&as_result, profile, destinations);
        let text = redacted["content"][0]["text"].as_str();
        progress.message = match text {
            Some(t) if !report.withheld && t == message => Some(message),
            Some(t) if !report.withheld && !t.is_empty() => Some(t.to_owned()),
            _ => None,
        };
    }
    progress
}

/// Where a call's result goes (CONTRACT §11 destinations): what a redaction profile must list
/// for the output to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputTo {
    /// An MCP (`/mcp`) or REST caller: `mcp`.
    #[default]
    Mcp,
    /// A hosted agent: its model reads the result (`llm`) and its transcript stores exactly
    /// what the model was sent (`transcript`).
    HostedAgent,
}

impl OutputTo {
    /// The destinations the output reaches.
    pub fn destinations(self) -> &'static [Destination] {
        match self {
            Self::Mcp => &[Destination::Mcp],
            Self::HostedAgent => &[Destination::Llm, Destination::Transcript],
        }
    }

    /// As stored with an invocation.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mcp => "mcp",
            Self::HostedAgent => "hosted_agent",
        }
    }

    /// From [`OutputTo::as_str`]; anything else is an MCP caller (its own redaction).
    pub fn parse(s: &str) -> Self {
        match s {
            "hosted_agent" => Self::HostedAgent,
            _ => Self::Mcp,
        }
    }
}

/// The text of a refusal's tool result.
pub(crate) fn short(reason: ReasonCode) -> &'static str {
    match reason {
        ReasonCode::ManifestBindingMismatch => {
            "The call does not match a current manifest of this session: list the tools again."
        }
        ReasonCode::LeaseExpired => "The manifest lease expired: list the tools again.",
        ReasonCode::ActorMismatch => "This session belongs to another actor.",
        ReasonCode::NotCallable => "No such tool.",
        ReasonCode::ExecutionAllowlist => "This fork may not execute that tool.",
        ReasonCode::PolicyDenied => "Policy does not allow this tool.",
        ReasonCode::ScopeMissing => "The caller lacks the scope this tool requires.",
        ReasonCode::SchemaHashMissing => {
            "The call must echo the tool's schemaHash from the manifest."
        }
        ReasonCode::ToolVersionMismatch => "The call must echo the tool version from the manifest.",
        ReasonCode::SchemaHashMismatch => {
            "The echoed schemaHash is not the one granted: list the tools again."
        }
        ReasonCode::ManifestDrift => {
            "The tool changed since the manifest was granted: list the tools again."
        }
        ReasonCode::ArgumentsInvalid => {
            "The arguments do not match the tool's advertised input schema."
        }
        ReasonCode::SpendGateUnavailable => {
            "This tool has a spending cap this gateway cannot enforce yet, so it was not run."
        }
        ReasonCode::RateLimited => "Rate limit reached; try again later.",
        ReasonCode::JournalUnavailable => {
            "The decision could not be recorded, so nothing ran. Try again shortly."
        }
        ReasonCode::ExecutionTimeout => "The tool did not finish within its deadline.",
        ReasonCode::ResultTooLarge => "The tool's result was larger than policy allows.",
        ReasonCode::UpstreamError => "The tool's server failed.",
        ReasonCode::Cancelled => "The call was cancelled.",
        _ => "The call was refused.",
    }
}

/// A tool result carrying `receipt` in `_meta` (with `extra` beside it).
pub fn tool_result(
    receipt: &Receipt,
    is_error: bool,
    text: &str,
    extra: Map<String, Value>,
) -> Value {
    let mut meta = extra;
    meta.insert(
        "receipt".into(),
        serde_json::to_value(receipt).unwrap_or(Value::Null),
    );
    result_with_meta(text, is_error, meta)
}

/// A tool result of one text block and `meta`, which is moved in (`json!` would copy it, the
/// receipt in it included).
fn result_with_meta(text: &str, is_error: bool, meta: Map<String, Value>) -> Value {
    let mut result = Map::with_capacity(3);
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result.insert("isError".into(), Value::Bool(is_error));
    result.insert("_meta".into(), Value::Object(meta));
    Value::Object(result)
}

/// A pinned execution target as receipts show it.
pub fn target_json(target: Option<&ExecutionTarget>) -> Option<Value> {
    target.map(|t| {
        // Members a target pinned before they existed does not have are left out, so that
        // its receipt and its stored binding still say the same.
        let mut v = json!({
            "upstream_id": t.upstream_id,
            "endpoint_fingerprint": t.endpoint_fingerprint,
        });
        if t.credential_version != 0 {
            v["credential_version"] = json!(t.credential_version);
        }
        if let Some(transport) = &t.transport {
            v["transport"] = json!(transport);
        }
        if let Some(environment) = &t.environment {
            v["environment"] = json!(environment);
        }
        v
    })
}

/// Executes a bound call through its pinned upstream and journals the execution receipt; `r` is
/// the decision's receipt (it becomes the execution receipt), `extra` goes to the disclosures.
pub async fn execute(
    cx: &CallContext<'_>,
    tool: Option<&cache::Tool>,
    bound: BoundCall,
    mut r: Receipt,
    decision: &Receipt,
    extra: Map<String, Value>,
) -> Result<Value, ServiceError> {
    r.kind = ReceiptKind::Execution;
    r.receipt_id = crate::ids::new_ordered_id("rcp");
    let mut d = journal::disclosures();
    // What ran, as authorized (CONTRACT §6): the effective arguments here; the mode, limits and
    // redaction in the receipt, as the decision snapshotted them.
    d.effective_arguments = Some(Value::Object(bound.effective_arguments.clone()));
    for (k, v) in extra {
        d.insert_extra(&k, v).ok();
    }
    d.insert_extra(
        "decision_receipt_id",
        Value::String(decision.receipt_id.clone()),
    )
    .ok();
    let target = tool.and_then(|t| match (&t.tool.tool.source, &t.upstream) {
        (ToolSource::Mcp { tool: raw, .. }, Some(upstream)) => Some((upstream, raw.as_str())),
        _ => None,
    });
    // The target pinned at the grant must be the one the tool has now: a re-registered or moved
    // upstream is never called in its place.
    let current = target.as_ref().map(|(u, _)| ExecutionTarget {
        upstream_id: u.id.clone(),
        endpoint_fingerprint: u.fingerprint.clone(),
        credential_version: u.credential_version,
        transport: Some(u.transport.clone()),
        environment: None,
    });
    r.target = target_json(bound.target.as_ref());
    let moved = match (&bound.target, &current) {
        (Some(pinned), Some(now)) => !pinned.still_is(now),
        (Some(_), None) => true,
        (None, _) => false,
    };
    let outcome = match &target {
        _ if moved => Err((
            ReasonCode::TargetDrift,
            "the tool's upstream was re-registered, moved or given other credentials since the manifest was granted; list the tools again".to_owned(),
        )),
        None => Err((
            ReasonCode::UpstreamError,
            "the tool has no connected upstream".to_owned(),
        )),
        Some(_) if bound.target.is_none() => Err((
            ReasonCode::TargetDrift,
            "no execution target was pinned for this tool when the manifest was granted; list the tools again".to_owned(),
        )),
        Some((upstream, _))
            if cx
                .round
                .as_ref()
                .and_then(|r| r.upstream_id.as_ref())
                .is_some_and(|id| *id != upstream.id) =>
        {
            Err((
                ReasonCode::TargetDrift,
                "the upstream that asked for the client's input no longer serves the tool; call it again without requestState".to_owned(),
            ))
        }
        Some((upstream, raw)) => {
            let deadline = bound
                .limits
                .max_duration_millis
                .and_then(|m| u64::try_from(m).ok())
                .map_or(DEFAULT_DEADLINE, Duration::from_millis);
            let started = std::time::Instant::now();
            let called = match cx.upstreams.connection(cx.store, cx.journal, upstream).await {
                Err(e) => Err((ReasonCode::UpstreamError, e.to_string())),
                Ok(conn) => {
                    let progress = cx.progress.clone().map(|sink| {
                        let profile = bound.redaction.clone();
                        let destinations = cx.output_to.destinations();
                        let relay: crate::upstream::ProgressFn = std::sync::Arc::new(move |p| {
                            // Full: this one is missed (progress is a hint, never the result).
                            let _ = sink.try_send(relayable(p, &profile, destinations));
                        });
                        relay
                    });
                    let asks = crate::relay::for_call(
                        cx.journal,
                        cx.client.clone(),
                        bound.client_requests.clone(),
                        decision,
                        &upstream.name,
                        raw,
                    );
                    let log = cx.log.clone().map(|sink| {
                        let profile = bound.redaction.clone();
                        let destinations = cx.output_to.destinations();
                        let relay: crate::upstream::LogFn = std::sync::Arc::new(move |log| {
                            if log.level < sink.level {
                                return;
                            }
                            // Full: this one is missed (a log message is never the result).
                            if let Some(log) = relayable_log(log, &profile, destinations) {
                                let _ = sink.to.try_send(log);
                            }
                        });
                        relay
                    });
                    let round = cx.round.as_ref().map(|round| crate::upstream::StatelessRound {
                        capabilities: cx
                            .client
                            .as_ref()
                            .map_or_else(|| json!({}), |c| c.abilities.capabilities()),
                        log_level: cx.log.as_ref().map(|l| l.level),
                        responses: round.responses.clone(),
                        state: round.state.clone(),
                    });
                    if let Some(round) = cx.round.as_ref().filter(|r| !r.asked.is_empty()) {
                        crate::relay::record_answers(cx.journal, decision, round).await;
                    }
                    let hooks = crate::upstream::CallHooks {
                        progress,
                        ask: Some(asks),
                        log,
                        round,
                    };
                    let call =
                        conn.call_tool_with(raw, bound.upstream_arguments(), deadline, hooks);
                    let mut cancelled = cx.cancelled.clone();
                    tokio::select! {
                        called = call => {
                            called.map_err(|e| (reason_of(e.reason_code()), e.to_string()))
                        }
                        // Dropping the upstream request tells the upstream to cancel it.
                        Some(Ok(_)) = async {
                            match cancelled.as_mut() {
                                Some(c) => Some(c.wait_for(|c| *c).await.map(|_| ())),
                                None => None,
                            }
                        } => Err((
                            ReasonCode::Cancelled,
                            "the caller cancelled the call (notifications/cancelled) while the upstream ran it; the upstream was told to cancel it too".to_owned(),
                        )),
                    }
                }
            };
            let label = match &called {
                Ok(_) => "ok",
                Err((reason, _)) => reason.as_str(),
            };
            crate::metrics::upstream_call(
                &upstream.tenant_id,
                &upstream.name,
                label,
                started.elapsed(),
            );
            crate::metrics::stage("upstream", started);
            match called {
                    Err(e) => Err(e),
                    Ok(result) => {
                        let cap = bound
                            .limits
                            .max_result_bytes
                            .and_then(|m| usize::try_from(m).ok());
                        match check_result_size(&result, cap) {
                            Err(e) => Err((ReasonCode::ResultTooLarge, e.to_string())),
                            Ok(_) if is_input_round(&result) => {
                                crate::relay::input_round(
                                    cx.journal,
                                    cx.client.as_ref(),
                                    &bound.client_requests,
                                    decision,
                                    &upstream.name,
                                    raw,
                                    &result,
                                )
                                .await
                                .map(|relayed| {
                                    relayed_round(relayed, decision, &upstream.name, &upstream.id)
                                })
                            }
                            Ok(_) => Ok(result),
                        }
                    }
            }
        }
    };
    match outcome {
        // A round for the client: what it is asked, not the tool's output.
        Ok(mut round) if is_input_round(&round) => {
            r.decision = Decision::Allow;
            r.reason = ReasonCode::Ok;
            let keys: Vec<Value> = round["inputRequests"]
                .as_object()
                .map(|requests| requests.keys().cloned().map(Value::String).collect())
                .unwrap_or_default();
            d.insert_extra("input_required", Value::Array(keys)).ok();
            let recorded = record_execution(cx.journal, r, &d).await;
            if let Some(Value::Object(meta)) = round.get_mut("_meta") {
                meta.extend(recorded);
            }
            Ok(round)
        }
        Ok(result) => {
            let (redacted, report) =
                redact::redact_for(&result, &bound.redaction, cx.output_to.destinations());
            if report.withheld {
                d.insert_extra("redacted_bytes", json!(report.bytes_removed))
                    .ok();
            }
            // `dry_run_only` ran with the tool's dry-run argument fixed to true: a dry run,
            // in its receipt and in the answer (CONTRACT §7).
            let dry_run = bound.mode == Mode::DryRunOnly;
            r.decision = if dry_run {
                Decision::DryRun
            } else {
                Decision::Allow
            };
            r.reason = ReasonCode::Ok;
            let recorded = record_execution(cx.journal, r, &d).await;
            let mut out = redacted;
            if let Value::Object(map) = &mut out {
                let meta = map.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(meta) = meta {
                    if dry_run {
                        meta.insert("dry_run".into(), Value::Bool(true));
                    }
                    meta.extend(recorded);
                }
            }
            Ok(out)
        }
        Err((reason, detail)) => {
            // The upstream's text reaches the journal's disclosures (the `logs` destination)
            // only as the rule's profile lets it.
            d.upstream_error = Some(redact::text_for(
                &detail,
                &bound.redaction,
                engine::policy::Destination::Logs,
            ));
            r.decision = Decision::Deny;
            r.reason = reason;
            let recorded = record_execution(cx.journal, r, &d).await;
            Ok(result_with_meta(short(reason), true, recorded))
        }
    }
}

/// The `_meta` member under which an input round's answer carries, to the surface that seals
/// it, what the client must not read: the upstream's `requestState`, the relayed requests'
/// receipt ids, the decision the round belongs to. The surface removes it.
pub const ROUND_STATE: &str = "io.aperture/round";

/// Whether an upstream's answer is an `input_required` round ([`CallContext::round`]).
pub fn is_input_round(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// A relayed input round ([`crate::relay::input_round`]) as the answer of a call or a get
/// `decision` decided: the client's `InputRequiredResult`, with what the surface seals under
/// `_meta[ROUND_STATE]` (the upstream's state, the requests' receipts, the decision, the
/// upstream that asked).
pub fn relayed_round(
    relayed: crate::relay::Relayed,
    decision: &Receipt,
    upstream: &str,
    upstream_id: &str,
) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": relayed.requests,
        "_meta": {
            ROUND_STATE: {
                "state": relayed.state,
                "asked": relayed.asked,
                "decision_receipt_id": decision.receipt_id,
                "upstream": upstream,
                "upstream_id": upstream_id,
            },
        },
    })
}

/// Records an execution receipt ([`Journal::record_outcome`]), which (unlike a decision)
/// describes what already happened, as the `_meta` members that say where it went: journaled,
/// `receipt`; spooled, `receipt_pending: true` and its `receipt_id` (never a denial attached to
/// what ran); neither, the signed, unrecorded `journal_unavailable` receipt.
async fn record_execution(
    journal: &Journal,
    r: Receipt,
    d: &engine::receipt::Disclosures,
) -> Map<String, Value> {
    let mut meta = Map::new();
    let started = std::time::Instant::now();
    let recorded = journal.record_outcome(r, d).await;
    crate::metrics::stage("journal", started);
    match recorded {
        journal::Recorded::Journaled(receipt) | journal::Recorded::Unrecorded(receipt) => {
            meta.insert(
                "receipt".into(),
                serde_json::to_value(&receipt).unwrap_or(Value::Null),
            );
        }
        journal::Recorded::Spooled(receipt_id) => {
            meta.insert("receipt_pending".into(), Value::Bool(true));
            meta.insert("receipt_id".into(), Value::String(receipt_id));
        }
    }
    meta
}

fn reason_of(code: &str) -> ReasonCode {
    code.parse().unwrap_or(ReasonCode::UpstreamError)
}
