//! 2026-07-28 `tools/call`s whose upstream asks the client something while they run
//! (sampling, elicitation, roots): the era has no call streams, so the call is answered
//! `input_required` — the requests under their keys, and a `requestState` the gateway sealed
//! ([`aperture_core::relay::RequestState`]). The client retries the same call with
//! `inputResponses` and the `requestState`; the retry must match the state in every part
//! (principal, tenant, tool, arguments, grant), is decided again (a new decision receipt naming
//! the first), and goes on as the state says:
//!
//! - **An upstream that speaks 2026-07-28** (over the gateway's 2026-07-28 link) asks in its
//!   own `input_required` answer; the gateway relays the round under the upstream's keys
//!   ([`aperture_core::relay::input_round`]) and seals the upstream's `requestState` inside
//!   its own. Nothing waits on the gateway: the retry sends the call to the upstream again with
//!   the client's answers (only to the requests relayed) and the upstream's state. A retry may
//!   reach any node of the cluster (the state is sealed under the key every node holds).
//!   `inputResponses` without a `requestState` the gateway issued never reach the upstream (a
//!   client cannot answer what the gateway did not relay): the upstream asks again.
//! - **An upstream of the 2025 eras** asks on its call's stream; the call's run waits,
//!   suspended on this node ([`aperture_core::live::asks::Runs`]), and the gateway files the
//!   request under a key of its own; the retry's answer goes to the waiting run, which then
//!   ends or asks again. A retry that reaches another node, or comes after the run was given
//!   up (ten minutes), finds no run: it is refused with -32602 and the client calls the tool
//!   again from the start (the first run is abandoned; its upstream hears that the client did
//!   not answer).
//!
//! A round whose request accepts a stream and asked for progress (`_meta.progressToken`) or
//! log messages (`_meta["io.modelcontextprotocol/logLevel"]`) is answered as one: the
//! upstream's progress and log messages while the run goes on, then the round's result. A
//! round that ends before the upstream said anything is answered plainly (so a refusal keeps
//! its HTTP status).

use std::time::Duration;

use std::convert::Infallible;

use axum::Json;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use aperture_core::calls::{self, ToolCall};
use aperture_core::error::ServiceError;
use aperture_core::execution::{LogSink, ProgressSink};
use aperture_core::execution::{ROUND_STATE, is_input_round};
use aperture_core::live::asks::{self, Next, Suspended};
use aperture_core::relay::{
    Abilities, ClientRelay, Continues, REQUEST_STATE_TTL_MS, RequestState, Round as UpstreamRound,
};
use aperture_core::upstream::LogLevel;
use engine::headers::ParamHeaders;

use super::{INTERNAL_ERROR, INVALID_PARAMS, Streaming, error, ok};
use crate::auth::Principal;
use crate::auth::principal::authenticate_bearer;
use crate::state::AppState;

/// How many of the run's next steps may wait to be read.
const NEXT_BUFFER: usize = 4;

/// Whether a 2026-07-28 `tools/call` goes through here: it continues a suspended run
/// (`requestState`), or its client declared it can be asked something.
pub(super) fn applies(params: &Value) -> bool {
    params.get("requestState").is_some() || declared(params).any()
}

/// What the request's `_meta` says its client can answer.
pub(super) fn declared(params: &Value) -> Abilities {
    let capabilities = params
        .get("_meta")
        .and_then(|m| m.get(super::META_CAPABILITIES))
        .unwrap_or(&Value::Null);
    Abilities::declared(capabilities)
}

/// How a round's client listens: whether it takes a stream, and the level from which it hears
/// the upstream's log messages.
pub(super) struct Listening {
    /// `Accept` lists `text/event-stream`.
    pub stream: bool,
    /// `_meta["io.modelcontextprotocol/logLevel"]`.
    pub log_level: Option<LogLevel>,
    /// `_meta.progressToken` is there.
    pub progress: bool,
}

/// A run's next steps, and what its retry must present again.
struct Round {
    binding: Binding,
    next: mpsc::Receiver<Next>,
}

/// Answers the call: a JSON-RPC response with its HTTP status, or a stream ending in one.
pub(super) async fn call(
    state: &AppState,
    principal: &Principal,
    secret: &str,
    id: &Value,
    params: Value,
    param_headers: ParamHeaders,
    listening: Listening,
) -> Response {
    let token = super::progress_token(&params).cloned();
    let round = match params.get("requestState") {
        Some(Value::String(sealed)) => {
            let sealed = sealed.clone();
            retry(
                state,
                principal,
                secret,
                id,
                params,
                &sealed,
                param_headers,
                &listening,
            )
            .await
        }
        Some(_) => Err((
            StatusCode::OK,
            error(id, INVALID_PARAMS, "requestState must be a string"),
        )),
        None => Ok(start(
            state,
            principal,
            secret,
            id,
            params,
            param_headers,
            &listening,
            Continuation::default(),
        )),
    };
    match round {
        Ok(round) => answer(state, principal, id, round, listening.stream, token).await,
        Err((status, answer)) => plain(status, answer),
    }
}

/// A round's answer as a plain JSON response.
fn plain(status: StatusCode, answer: Value) -> Response {
    (status, Json(super::complete(answer, false))).into_response()
}

/// Answers a round: plainly when it ends before the upstream says anything (or the client
/// takes no stream), else as a stream of what the upstream tells, ending with the result.
async fn answer(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    round: Round,
    stream: bool,
    token: Option<Value>,
) -> Response {
    let Round { binding, mut next } = round;
    let first = match next.recv().await {
        // Told but nobody listens: dropped until the round ends.
        Some(Next::Progress(_) | Next::Log(_)) if !stream => None,
        other => other,
    };
    if !stream || matches!(first, Some(Next::Done(_) | Next::Ask(_)) | None) {
        let (status, answer) = self::round(state, principal, id, binding, first, next, None).await;
        return plain(status, answer);
    }
    let (events, mut received) = mpsc::channel::<Value>(NEXT_BUFFER);
    let state = state.clone();
    let principal = principal.clone();
    let id = id.clone();
    tokio::spawn(async move {
        let told = Told {
            to: &events,
            token: token.as_ref(),
        };
        let (_, answer) =
            self::round(&state, &principal, &id, binding, first, next, Some(told)).await;
        let _ = events.send(super::complete(answer, false)).await;
    });
    let events = futures_util::stream::poll_fn(move |cx| received.poll_recv(cx))
        .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
    let mut response = Sse::new(events).into_response();
    response.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    response
}

/// Where a streamed round's notifications go, and the progress token its request named.
#[derive(Clone, Copy)]
struct Told<'a> {
    to: &'a mpsc::Sender<Value>,
    token: Option<&'a Value>,
}

/// What a run carries from an upstream's previous input round: the client's answers and the
/// upstream's state, and the first decision it continues (none on the first round).
#[derive(Default)]
struct Continuation {
    round: UpstreamRound,
    first: Option<String>,
}

/// A run starts: the call (or, continuing an upstream's round, the call again); its answer,
/// or its first request for the client.
#[allow(clippy::too_many_arguments)]
fn start(
    state: &AppState,
    principal: &Principal,
    secret: &str,
    id: &Value,
    params: Value,
    param_headers: ParamHeaders,
    listening: &Listening,
    continuation: Continuation,
) -> Round {
    let abilities = declared(&params);
    let mut binding = Binding::of(principal, &params);
    binding.first.clone_from(&continuation.first);
    let (next_tx, next) = mpsc::channel(NEXT_BUFFER);
    let (asks_tx, mut asks) = mpsc::channel(NEXT_BUFFER);
    let (progress_tx, mut progress) = mpsc::channel(NEXT_BUFFER);
    let (logs_tx, mut logs) = mpsc::channel(NEXT_BUFFER);
    let streaming = Streaming {
        progress: listening.progress.then_some(progress_tx as ProgressSink),
        client: Some(ClientRelay::new(abilities, asks_tx)),
        log: listening
            .log_level
            .map(|level| LogSink { level, to: logs_tx }),
        param_headers: Some(param_headers),
        round: Some(continuation.round),
        continues: continuation.first,
    };
    let task_state = state.clone();
    let task_principal = principal.clone();
    let task_secret = secret.to_owned();
    let task_id = id.clone();
    tokio::spawn(async move {
        let call = super::tools_call(
            &task_state,
            &task_principal,
            &task_secret,
            &task_id,
            params,
            None,
            streaming,
        );
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                // What the upstream told before it answered goes first.
                biased;
                Some(ask) = asks.recv() => {
                    // Nobody reads any more (the run was given up): the ask's answer is
                    // dropped with it, and the upstream hears the client did not answer.
                    let _ = next_tx.send(Next::Ask(ask)).await;
                }
                // What the upstream tells is dropped when nobody keeps up (never waited on:
                // the run must go on while its round is between requests).
                Some(p) = progress.recv() => { let _ = next_tx.try_send(Next::Progress(p)); }
                Some(l) = logs.recv() => { let _ = next_tx.try_send(Next::Log(l)); }
                answer = &mut call => break answer,
            }
        };
        // Told just before the answer, still waiting to be passed on.
        while let Ok(p) = progress.try_recv() {
            let _ = next_tx.send(Next::Progress(p)).await;
        }
        while let Ok(l) = logs.try_recv() {
            let _ = next_tx.send(Next::Log(l)).await;
        }
        let answer = answer.unwrap_or_else(|()| {
            error(
                &task_id,
                super::INVALID_REQUEST,
                "the bearer token no longer authenticates",
            )
        });
        let _ = next_tx.send(Next::Done(answer)).await;
    });
    Round { binding, next }
}

/// What the call presented that its retry must present again.
pub(super) struct Binding {
    tenant_id: String,
    principal: String,
    tool: String,
    args_hash: String,
    grant: Option<String>,
    /// The first decision, when the call continues an upstream's round.
    pub(super) first: Option<String>,
}

impl Binding {
    pub(super) fn of(principal: &Principal, params: &Value) -> Self {
        let arguments = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        Self {
            tenant_id: principal.tenant_id.clone(),
            principal: principal.principal_id().to_owned(),
            tool: params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            args_hash: engine::canonical::hash_value(&arguments),
            grant: params
                .get("_meta")
                .and_then(|m| m.get("manifest_id"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            first: None,
        }
    }

    fn matches(&self, state: &RequestState) -> bool {
        self.tenant_id == state.tenant_id
            && self.principal == state.principal
            && self.tool == state.tool
            && self.args_hash == state.args_hash
            && self.grant == state.grant
    }
}

/// Waits for the run's next step: its answer, or a request for the client (answered
/// `input_required`, the run held until the retry); what the upstream tells on the way goes to
/// the round's stream (`told`), or nowhere. `first` is the step already taken from `next`.
async fn round(
    state: &AppState,
    principal: &Principal,
    id: &Value,
    binding: Binding,
    mut first: Option<Next>,
    mut next: mpsc::Receiver<Next>,
    told: Option<Told<'_>>,
) -> (StatusCode, Value) {
    let ask = loop {
        let step = match first.take() {
            Some(step) => Some(step),
            None => next.recv().await,
        };
        match step {
            // The run's answer, to this request (a retry has an id of its own).
            Some(Next::Done(mut answer)) => {
                answer["id"] = id.clone();
                if let Some(result) = answer.get_mut("result").filter(|r| is_input_round(r)) {
                    seal_round(state, &binding, result);
                }
                return (super::status_of(&answer), answer);
            }
            Some(Next::Ask(ask)) => break ask,
            Some(Next::Progress(p)) => {
                if let Some(Told {
                    to,
                    token: Some(token),
                }) = told
                {
                    let _ = to.send(super::progress_notification(token, &p)).await;
                }
            }
            Some(Next::Log(l)) => {
                if let Some(Told { to, .. }) = told {
                    let _ = to.send(super::log_notification(&l)).await;
                }
            }
            None => {
                return (
                    StatusCode::OK,
                    error(id, INTERNAL_ERROR, "the call ended without an answer"),
                );
            }
        }
    };
    let run = aperture_core::ids::new_ordered_id("run");
    let key = aperture_core::ids::new_ordered_id("ask");
    let request_state = RequestState {
        continues: Continues::Held {
            run: run.clone(),
            key: key.clone(),
        },
        tenant_id: binding.tenant_id,
        principal: binding.principal,
        tool: binding.tool,
        args_hash: binding.args_hash,
        grant: binding.grant,
        upstream: ask.upstream.clone(),
        first: ask.decision_receipt_id.clone(),
        expires_at: aperture_core::clock::now_ms() + REQUEST_STATE_TTL_MS,
    };
    let sealed = request_state.seal(&state.secrets);
    let mut input_requests = Map::new();
    input_requests.insert(key, json!({"method": ask.method, "params": ask.params}));
    state.runs.hold(
        run,
        Suspended {
            owner: owner(principal),
            answer: ask.answer,
            next,
            expires_at: std::time::Instant::now()
                + Duration::from_millis(REQUEST_STATE_TTL_MS.unsigned_abs()),
        },
    );
    let result = json!({
        "resultType": "input_required",
        "inputRequests": input_requests,
        "requestState": sealed,
    });
    (StatusCode::OK, ok(id, result))
}

/// An upstream's input round on its way to the client: what only the gateway may read
/// (`_meta[ROUND_STATE]`: the upstream's state, the relayed requests' receipts, the decision)
/// sealed with the call's binding as the round's `requestState`.
pub(super) fn seal_round(state: &AppState, binding: &Binding, result: &mut Value) {
    let round = result
        .get_mut("_meta")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove(ROUND_STATE))
        .unwrap_or(Value::Null);
    let text = |key: &str| round.get(key).and_then(Value::as_str).map(str::to_owned);
    let request_state = RequestState {
        continues: Continues::Upstream {
            upstream_id: text("upstream_id").unwrap_or_default(),
            state: text("state"),
            asked: serde_json::from_value(round["asked"].clone()).unwrap_or_default(),
        },
        tenant_id: binding.tenant_id.clone(),
        principal: binding.principal.clone(),
        tool: binding.tool.clone(),
        args_hash: binding.args_hash.clone(),
        grant: binding.grant.clone(),
        upstream: text("upstream").unwrap_or_default(),
        // The first round's decision, whichever round this is.
        first: binding
            .first
            .clone()
            .or_else(|| text("decision_receipt_id"))
            .unwrap_or_default(),
        expires_at: aperture_core::clock::now_ms() + REQUEST_STATE_TTL_MS,
    };
    result["requestState"] = Value::String(request_state.seal(&state.secrets));
}

fn owner(principal: &Principal) -> asks::Owner {
    asks::Owner {
        tenant_id: principal.tenant_id.clone(),
        principal: principal.principal_id().to_owned(),
        mcp_session: None,
    }
}

/// A retry's `requestState`, opened and checked against what the retry presents (the same
/// principal and tenant, name, arguments and grant, before its expiry); why not, otherwise.
pub(super) fn opened(
    state: &AppState,
    principal: &Principal,
    params: &Value,
    sealed: &str,
) -> Result<RequestState, &'static str> {
    let request_state = RequestState::open(&state.secrets, sealed)
        .ok_or("requestState is not one this gateway issued")?;
    if !Binding::of(principal, params).matches(&request_state) {
        return Err(
            "requestState belongs to another request: the same principal must retry the same tool or prompt with the same arguments and grant",
        );
    }
    if request_state.expires_at <= aperture_core::clock::now_ms() {
        return Err("requestState has expired: send the request again without it");
    }
    Ok(request_state)
}

/// What a retry of an upstream's round carries back to it: the answers to the requests relayed
/// (other keys dropped), each a client's result (an object), and the upstream's state.
pub(super) fn upstream_round(
    params: &Value,
    upstream_id: String,
    state: Option<String>,
    asked: std::collections::BTreeMap<String, String>,
) -> Result<UpstreamRound, String> {
    let responses: Map<String, Value> = match params.get("inputResponses") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(given)) => given
            .iter()
            .filter(|(key, _)| asked.contains_key(*key))
            .map(|(key, answer)| (key.clone(), answer.clone()))
            .collect(),
        Some(_) => return Err("inputResponses must be an object".to_owned()),
    };
    if let Some((key, _)) = responses.iter().find(|(_, answer)| !answer.is_object()) {
        return Err(format!(
            "inputResponses.{key} must be the client's result (an object)"
        ));
    }
    Ok(UpstreamRound {
        upstream_id: Some(upstream_id),
        responses: Some(responses),
        state,
        asked,
    })
}

/// A retry with the client's answer: checked against the sealed state, decided again, and the
/// answer handed to the waiting run.
#[allow(clippy::too_many_arguments)]
async fn retry(
    state: &AppState,
    principal: &Principal,
    secret: &str,
    id: &Value,
    params: Value,
    sealed: &str,
    param_headers: ParamHeaders,
    listening: &Listening,
) -> Result<Round, (StatusCode, Value)> {
    let refuse = |message: &str| Err((StatusCode::OK, error(id, INVALID_PARAMS, message)));
    let request_state = match opened(state, principal, &params, sealed) {
        Ok(opened) => opened,
        Err(why) => return refuse(why),
    };
    let binding = Binding::of(principal, &params);
    let (run_id, key) = match request_state.continues {
        Continues::Held { run, key } => (run, key),
        Continues::Upstream {
            upstream_id,
            state: upstream_state,
            asked,
        } => {
            let round = match upstream_round(&params, upstream_id, upstream_state, asked) {
                Ok(round) => round,
                Err(why) => return refuse(&why),
            };
            let continuation = Continuation {
                round,
                first: Some(request_state.first),
            };
            return Ok(start(
                state,
                principal,
                secret,
                id,
                params,
                param_headers,
                listening,
                continuation,
            ));
        }
    };
    let Some(answer) = params
        .get("inputResponses")
        .and_then(|r| r.get(&key))
        .cloned()
    else {
        return refuse(&format!(
            "inputResponses.{key} is required: it answers the input request"
        ));
    };
    let Some(run) = state.runs.take(&run_id, &owner(principal)) else {
        return refuse(
            "the call this requestState continues is not held here (it ended, was given up, or runs on another node): call the tool again without requestState",
        );
    };
    // Decided again on reads confirmed by the store.
    let Ok(confirmed) = authenticate_bearer(&state.store, secret).await else {
        return Err((
            StatusCode::OK,
            error(
                id,
                super::INVALID_REQUEST,
                "the bearer token no longer authenticates",
            ),
        ));
    };
    let mut call: ToolCall = match serde_json::from_value(params) {
        Ok(c) => c,
        Err(e) => return refuse(&format!("invalid tools/call params: {e}")),
    };
    if let Err(e) = aperture_core::implicit::bind(
        &state.store,
        &state.journal,
        &state.validators,
        &confirmed,
        None,
        &mut call,
    )
    .await
    {
        tracing::error!(error = %e.into_app_error().message, "binding a retried call");
        return Err((
            StatusCode::OK,
            error(id, INTERNAL_ERROR, "the call could not be bound"),
        ));
    }
    let mut cx = state.call_context();
    cx.param_headers = Some(param_headers);
    match calls::decide_again(&cx, &confirmed, &call, &request_state.first).await {
        // Refused now: the run is dropped (its upstream hears the client did not answer).
        Ok(Err(denial)) => Err((StatusCode::OK, ok(id, denial))),
        // The retry's headers do not mirror it: refused as the transport refuses; the run
        // waits on for a well-formed retry.
        Err(ServiceError::HeaderMismatch(why)) => {
            state.runs.hold(run_id, run);
            Err((
                StatusCode::BAD_REQUEST,
                error(id, super::HEADER_MISMATCH, why),
            ))
        }
        Err(e) => Err((
            StatusCode::OK,
            error(id, INTERNAL_ERROR, e.into_app_error().message),
        )),
        Ok(Ok(_receipt)) => {
            let Suspended {
                answer: to, next, ..
            } = run;
            if to.send(Ok(answer)).is_err() {
                return Err((
                    StatusCode::OK,
                    error(id, INTERNAL_ERROR, "the call ended before the answer came"),
                ));
            }
            Ok(Round { binding, next })
        }
    }
}
