//! Requests of an upstream's to the calling client while one of its tools runs (sampling,
//! elicitation, roots), relayed only where they belong.
//!
//! The connector attributes a request to exactly one call in flight
//! ([`crate::upstream::UpstreamAsk`]); this module decides it for that call ([`for_call`]):
//! - the call's rule must list the kind in `client_requests` (else `policy_denied`);
//! - the call must have a connected client that declared the capability ([`Abilities`]):
//!   REST, worker-run and hosted calls have none (else `not_callable`);
//! - the request is journaled before it leaves (`kind: "client_request"`, the request's
//!   digest signed; nothing is relayed unless it is recorded), and its outcome after (the
//!   answer's digest);
//! - what reaches the client is rewritten: `includeContext` is `"none"` (the client's other
//!   conversations are not the upstream's business) and the texts a person or model reads
//!   start with `[<upstream>/<tool>]`, so the asker is never mistaken for the gateway.
//!
//! A refused request is answered to the upstream with a JSON-RPC error; the call goes on.

use engine::policy::ClientRequest;
use engine::receipt::{Decision, ReasonCode, Receipt, ReceiptKind};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::journal::{self, Journal};
use crate::upstream::{AskFn, AskRefusal, UpstreamAsk};

/// JSON-RPC "Invalid Request": what a refused request is answered with.
const REFUSED: i32 = -32600;
/// JSON-RPC "Internal error": the client went away before answering.
const UNANSWERED: i32 = -32603;

/// What a client declared it can do for servers: `initialize`'s `capabilities` (2025 eras) or
/// a request's `io.modelcontextprotocol/clientCapabilities` (2026-07-28).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Abilities {
    /// `sampling`.
    pub sampling: bool,
    /// `elicitation` in form mode (an empty `elicitation` object means form mode).
    pub elicitation: bool,
    /// `elicitation.url`.
    pub elicitation_url: bool,
    /// `roots`.
    pub roots: bool,
}

impl Abilities {
    /// What `capabilities` declares.
    pub fn declared(capabilities: &Value) -> Self {
        let has = |key: &str| capabilities.get(key).is_some_and(Value::is_object);
        let elicitation = capabilities.get("elicitation").and_then(Value::as_object);
        Self {
            sampling: has("sampling"),
            elicitation: elicitation.is_some_and(|e| e.is_empty() || e.contains_key("form")),
            elicitation_url: elicitation.is_some_and(|e| e.contains_key("url")),
            roots: has("roots"),
        }
    }

    /// Whether the client can answer `kind`.
    pub fn can(self, kind: ClientRequest) -> bool {
        match kind {
            ClientRequest::Sampling => self.sampling,
            ClientRequest::Elicitation => self.elicitation,
            ClientRequest::ElicitationUrl => self.elicitation_url,
            ClientRequest::Roots => self.roots,
        }
    }

    /// As `ClientCapabilities`: what the gateway tells a 2026-07-28 upstream its caller can
    /// answer (the four kinds, nothing else the client declared).
    pub fn capabilities(self) -> Value {
        let mut capabilities = Map::new();
        if self.sampling {
            capabilities.insert("sampling".into(), json!({}));
        }
        if self.elicitation || self.elicitation_url {
            let mut modes = Map::new();
            if self.elicitation {
                modes.insert("form".into(), json!({}));
            }
            if self.elicitation_url {
                modes.insert("url".into(), json!({}));
            }
            capabilities.insert("elicitation".into(), Value::Object(modes));
        }
        if self.roots {
            capabilities.insert("roots".into(), json!({}));
        }
        Value::Object(capabilities)
    }

    /// Whether it can answer anything.
    pub fn any(self) -> bool {
        ClientRequest::ALL.into_iter().any(|k| self.can(k))
    }

    /// As stored: the kinds' names, space-separated.
    pub fn to_text(self) -> String {
        ClientRequest::ALL
            .into_iter()
            .filter(|k| self.can(*k))
            .map(ClientRequest::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// From [`Abilities::to_text`].
    pub fn from_text(text: &str) -> Self {
        let named = |kind: ClientRequest| text.split(' ').any(|k| k == kind.as_str());
        Self {
            sampling: named(ClientRequest::Sampling),
            elicitation: named(ClientRequest::Elicitation),
            elicitation_url: named(ClientRequest::ElicitationUrl),
            roots: named(ClientRequest::Roots),
        }
    }
}

/// A request on its way to the call's client, and where its answer goes.
#[derive(Debug)]
pub struct Ask {
    /// The upstream that asks (its registered name).
    pub upstream: String,
    /// The id of the call's decision receipt.
    pub decision_receipt_id: String,
    /// The JSON-RPC method.
    pub method: &'static str,
    /// Its params, rewritten for the client.
    pub params: Value,
    /// The client's result, or its error.
    pub answer: oneshot::Sender<Result<Value, ClientError>>,
}

/// A client's JSON-RPC error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientError {
    /// Its code.
    pub code: i64,
    /// Its message.
    pub message: String,
}

/// A call's connected client: what it declared, and where requests for it go (the surface
/// sends them on the call's own stream and routes the answers back).
#[derive(Debug, Clone)]
pub struct ClientRelay {
    /// What it can answer.
    pub abilities: Abilities,
    /// Where requests for it go.
    pub asks: mpsc::Sender<Ask>,
    /// What the upstream asked for that the client had not declared.
    pub missing: Missing,
}

impl ClientRelay {
    /// A client that declared `abilities`; its requests go to `asks`.
    pub fn new(abilities: Abilities, asks: mpsc::Sender<Ask>) -> Self {
        Self {
            abilities,
            asks,
            missing: Missing::default(),
        }
    }
}

/// The kinds of request a call's upstream made that its client had not declared it can
/// answer (each refused to the upstream). A 2026-07-28 call that failed after one is answered
/// `-32021` naming them ([`Missing::required`]): the client learns what to declare.
#[derive(Debug, Clone, Default)]
pub struct Missing(std::sync::Arc<std::sync::Mutex<Vec<ClientRequest>>>);

impl Missing {
    fn note(&self, kind: ClientRequest) {
        let mut kinds = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }

    /// The client capabilities that were missing, as `ClientCapabilities` (`{"sampling": {}}`,
    /// `{"elicitation": {"url": {}}}`, …); `None` when nothing was.
    pub fn required(&self) -> Option<Value> {
        let kinds = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kinds.is_empty() {
            return None;
        }
        let mut required = Map::new();
        for kind in kinds.iter() {
            let (key, value) = match kind {
                ClientRequest::Sampling => ("sampling", json!({})),
                ClientRequest::Elicitation => ("elicitation", json!({})),
                ClientRequest::ElicitationUrl => ("elicitation", json!({"url": {}})),
                ClientRequest::Roots => ("roots", json!({})),
            };
            required.insert(key.to_owned(), value);
        }
        Some(Value::Object(required))
    }
}

/// The request handler of one call: decides, journals and relays each request the call's
/// upstream sends ([`crate::upstream::Connection::call_tool_asking`]). `decision` is the
/// call's decision receipt (who, which tool, which grant); `allowed` its rule's
/// `client_requests`; `upstream` and `tool` name the asker to the person.
pub fn for_call(
    journal: &Journal,
    client: Option<ClientRelay>,
    allowed: Vec<ClientRequest>,
    decision: &Receipt,
    upstream: &str,
    tool: &str,
) -> AskFn {
    let journal = journal.clone();
    let template = decision.clone();
    let upstream = upstream.to_owned();
    let prefix = format!("[{upstream}/{tool}]");
    std::sync::Arc::new(move |ask: UpstreamAsk| {
        let journal = journal.clone();
        let client = client.clone();
        let allowed = allowed.contains(&ask.kind);
        let template = template.clone();
        let prefix = prefix.clone();
        let upstream = upstream.clone();
        Box::pin(async move {
            let asker = Asker {
                upstream: &upstream,
                prefix: &prefix,
                decision: &template,
            };
            relay(&journal, client.as_ref(), allowed, &asker, ask).await
        })
    })
}

/// Why a request of `kind` is not relayed, if it is not: the rule does not list it
/// (`allowed`), the call has no client, or the client did not declare it (noted as missing).
fn refusal(
    allowed: bool,
    client: Option<&ClientRelay>,
    kind: ClientRequest,
) -> Option<(ReasonCode, &'static str)> {
    if !allowed {
        return Some((
            ReasonCode::PolicyDenied,
            "the rule does not list it in client_requests",
        ));
    }
    match client {
        None => Some((
            ReasonCode::NotCallable,
            "the call has no connected client (REST, a worker, a hosted agent)",
        )),
        Some(c) if !c.abilities.can(kind) => {
            c.missing.note(kind);
            Some((
                ReasonCode::NotCallable,
                "the client did not declare this capability",
            ))
        }
        Some(_) => None,
    }
}

/// Who asks: the upstream, how its requests are marked, the call's decision.
struct Asker<'a> {
    upstream: &'a str,
    prefix: &'a str,
    decision: &'a Receipt,
}

async fn relay(
    journal: &Journal,
    client: Option<&ClientRelay>,
    allowed: bool,
    asker: &Asker<'_>,
    ask: UpstreamAsk,
) -> Result<Value, AskRefusal> {
    let decision = asker.decision;
    let refused = refusal(allowed, client, ask.kind);
    let params = rewrite(ask.kind, ask.params, asker.prefix);
    let mut about = json!({
        "method": ask.method,
        "kind": ask.kind.as_str(),
        "request_digest": engine::canonical::hash_value(&params),
    });
    if let Some((_, why)) = refused {
        about["refused"] = json!(why);
    }
    let mut r = record_of(decision);
    let (decision_now, reason) = match refused {
        Some((reason, _)) => (Decision::Deny, reason),
        None => (Decision::Allow, ReasonCode::Ok),
    };
    r.decision = decision_now;
    r.reason = reason;
    let (request_receipt, journaled) = journal
        .record_decision(&r, &disclosures(decision, about))
        .await;
    if let Some((_, why)) = refused {
        return Err(AskRefusal::new(
            REFUSED,
            format!("{} was not relayed: {why}", ask.method),
        ));
    }
    if !journaled {
        return Err(AskRefusal::new(
            REFUSED,
            format!("{} was not relayed: it could not be recorded", ask.method),
        ));
    }
    let Some(client) = client else {
        return Err(AskRefusal::new(REFUSED, "no client"));
    };
    let (answer_tx, answer_rx) = oneshot::channel();
    let sent = client
        .asks
        .send(Ask {
            upstream: asker.upstream.to_owned(),
            decision_receipt_id: decision.receipt_id.clone(),
            method: ask.method,
            params,
            answer: answer_tx,
        })
        .await;
    let answer = match sent {
        Ok(()) => answer_rx.await.unwrap_or_else(|_| {
            Err(ClientError {
                code: i64::from(UNANSWERED),
                message: "the client did not answer".into(),
            })
        }),
        Err(_) => Err(ClientError {
            code: i64::from(UNANSWERED),
            message: "the client is gone".into(),
        }),
    };
    let mut outcome = json!({
        "method": ask.method,
        "kind": ask.kind.as_str(),
        "request_receipt_id": request_receipt.receipt_id,
    });
    let mut r = record_of(decision);
    match &answer {
        Ok(result) => {
            outcome["response_digest"] = json!(engine::canonical::hash_value(result));
            if let Some(action) = result.get("action").and_then(Value::as_str) {
                outcome["action"] = json!(action);
            }
            r.decision = Decision::Allow;
            r.reason = ReasonCode::Ok;
        }
        Err(e) => {
            outcome["client_error"] = json!({"code": e.code, "message": e.message});
            r.decision = Decision::Deny;
            r.reason = ReasonCode::Cancelled;
        }
    }
    journal
        .record_outcome(r, &disclosures(decision, outcome))
        .await;
    answer.map_err(|e| {
        AskRefusal::new(
            i32::try_from(e.code).unwrap_or(UNANSWERED),
            format!("the client answered with an error: {}", e.message),
        )
    })
}

/// What a 2026-07-28 call carries from one input round to the next
/// ([`crate::execution::CallContext::round`]): nothing on its first round; on a retry the
/// surface checked against its sealed [`RequestState`], the client's answers to the requests
/// the gateway relayed and the upstream's own `requestState`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    /// The upstream the previous round came from (its id): the call must still go there.
    pub upstream_id: Option<String>,
    /// The client's answers, under the upstream's keys (only the keys relayed).
    pub responses: Option<Map<String, Value>>,
    /// The upstream's `requestState`, as it gave it.
    pub state: Option<String>,
    /// The requests relayed in the previous round: each key's `client_request` receipt id.
    pub asked: std::collections::BTreeMap<String, String>,
}

/// An upstream's `input_required` round as its client receives it ([`input_round`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Relayed {
    /// `inputRequests`, rewritten for the client, under the upstream's keys.
    pub requests: Map<String, Value>,
    /// The upstream's `requestState` (sealed by the surface before the client sees it).
    pub state: Option<String>,
    /// Each request's `client_request` receipt id, by key.
    pub asked: std::collections::BTreeMap<String, String>,
}

/// The kind of an input request, by its method (and an elicitation's mode).
fn kind_of(method: &str, params: &Value) -> Option<(ClientRequest, &'static str)> {
    match method {
        "sampling/createMessage" => Some((ClientRequest::Sampling, "sampling/createMessage")),
        "elicitation/create" if params.get("mode").and_then(Value::as_str) == Some("url") => {
            Some((ClientRequest::ElicitationUrl, "elicitation/create"))
        }
        "elicitation/create" => Some((ClientRequest::Elicitation, "elicitation/create")),
        "roots/list" => Some((ClientRequest::Roots, "roots/list")),
        _ => None,
    }
}

/// Decides an upstream's `input_required` answer (2026-07-28, over the gateway's 2026-07-28
/// link) for the call `decision` decided, as [`for_call`] decides a request on a call's
/// stream: each request must be of a kind the rule lists in `client_requests` (else
/// `policy_denied`) and the client declared (else `not_callable`, noted as missing), and is
/// journaled (`kind: "client_request"`, its digest signed) before it leaves, rewritten as
/// [`for_call`] rewrites. One request refused refuses the round: the call ends with that
/// refusal, and nothing of the round reaches the client. `result` is the upstream's
/// `InputRequiredResult`.
pub async fn input_round(
    journal: &Journal,
    client: Option<&ClientRelay>,
    allowed: &[ClientRequest],
    decision: &Receipt,
    upstream: &str,
    tool: &str,
    result: &Value,
) -> Result<Relayed, (ReasonCode, String)> {
    let prefix = format!("[{upstream}/{tool}]");
    let state = match result.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(state)) => Some(state.clone()),
        Some(_) => {
            return Err((
                ReasonCode::UpstreamError,
                "the upstream's requestState is not a string".into(),
            ));
        }
    };
    let asked_for = match result.get("inputRequests") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(requests)) => requests.clone(),
        Some(_) => {
            return Err((
                ReasonCode::UpstreamError,
                "the upstream's inputRequests is not an object".into(),
            ));
        }
    };
    let mut relayed = Relayed {
        requests: Map::new(),
        state,
        asked: std::collections::BTreeMap::new(),
    };
    // Each request decided first: one refused refuses the round, and only the refusals are
    // journaled then (nothing of the round leaves).
    let mut decided = Vec::with_capacity(asked_for.len());
    for (key, request) in asked_for {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
        let Some((kind, method)) = kind_of(method, &params) else {
            return Err((
                ReasonCode::UpstreamError,
                format!(
                    "the upstream asked the client for `{method}`, which is not a request a client answers"
                ),
            ));
        };
        let refused = refusal(allowed.contains(&kind), client, kind);
        decided.push((key, kind, method, rewrite(kind, params, &prefix), refused));
    }
    let round_refused = decided.iter().any(|(.., refused)| refused.is_some());
    let mut refusal = None;
    for (key, kind, method, params, refused) in decided {
        if round_refused && refused.is_none() {
            continue;
        }
        let mut about = json!({
            "method": method,
            "kind": kind.as_str(),
            "key": key,
            "request_digest": engine::canonical::hash_value(&params),
        });
        if let Some((_, why)) = refused {
            about["refused"] = json!(why);
        }
        let mut r = record_of(decision);
        (r.decision, r.reason) = match refused {
            Some((reason, _)) => (Decision::Deny, reason),
            None => (Decision::Allow, ReasonCode::Ok),
        };
        let (receipt, journaled) = journal
            .record_decision(&r, &disclosures(decision, about))
            .await;
        match refused {
            Some((reason, why)) => {
                refusal.get_or_insert((reason, format!("{method} was not relayed: {why}")));
            }
            None if !journaled => {
                refusal.get_or_insert((
                    ReasonCode::JournalUnavailable,
                    format!("{method} was not relayed: it could not be recorded"),
                ));
            }
            None => {
                relayed.asked.insert(key.clone(), receipt.receipt_id);
                relayed
                    .requests
                    .insert(key, json!({"method": method, "params": params}));
            }
        }
    }
    match refusal {
        Some(refused) => Err(refused),
        None => Ok(relayed),
    }
}

/// Journals the outcome of each request relayed in a call's previous input round, as the
/// client's retry answers it (`decision` is the retry's decision): the answer's digest and
/// action, or that it was not answered.
pub async fn record_answers(journal: &Journal, decision: &Receipt, round: &Round) {
    for (key, request_receipt_id) in &round.asked {
        let answer = round.responses.as_ref().and_then(|r| r.get(key));
        let mut outcome = json!({
            "key": key,
            "request_receipt_id": request_receipt_id,
        });
        let mut r = record_of(decision);
        match answer {
            Some(answer) => {
                outcome["response_digest"] = json!(engine::canonical::hash_value(answer));
                if let Some(action) = answer.get("action").and_then(Value::as_str) {
                    outcome["action"] = json!(action);
                }
                r.decision = Decision::Allow;
                r.reason = ReasonCode::Ok;
            }
            None => {
                outcome["client_error"] = json!({"message": "not answered in the retry"});
                r.decision = Decision::Deny;
                r.reason = ReasonCode::Cancelled;
            }
        }
        journal
            .record_outcome(r, &disclosures(decision, outcome))
            .await;
    }
}

/// A `client_request` record about the call `decision` decided.
fn record_of(decision: &Receipt) -> Receipt {
    let mut r = decision.clone();
    r.kind = ReceiptKind::ClientRequest;
    r.receipt_id = crate::ids::new_ordered_id("rcp");
    r.seq = None;
    r.prev_hash = None;
    r.signature = String::new();
    r.key_id = String::new();
    r.disclosures_digest = String::new();
    r.issued_at = String::new();
    r
}

fn disclosures(decision: &Receipt, about: Value) -> engine::receipt::Disclosures {
    let mut d = journal::disclosures();
    d.insert_extra("client_request", about).ok();
    d.insert_extra(
        "decision_receipt_id",
        Value::String(decision.receipt_id.clone()),
    )
    .ok();
    d
}

/// The request as the client receives it: sampling never includes the client's other context
/// (`includeContext: "none"`), and what a person or model reads names the asker.
fn rewrite(kind: ClientRequest, params: Value, prefix: &str) -> Value {
    let Value::Object(mut params) = params else {
        return params;
    };
    match kind {
        ClientRequest::Sampling => {
            params.insert("includeContext".into(), json!("none"));
            if let Some(Value::Array(messages)) = params.get_mut("messages") {
                for message in messages {
                    if let Some(content) = message.get_mut("content") {
                        prefix_texts(content, prefix);
                    }
                }
            }
        }
        ClientRequest::Elicitation | ClientRequest::ElicitationUrl => {
            if let Some(Value::String(message)) = params.get_mut("message") {
                *message = format!("{prefix} {message}");
            }
        }
        ClientRequest::Roots => {}
    }
    Value::Object(params)
}

/// Prefixes the text of a content block, or of each block of a list.
fn prefix_texts(content: &mut Value, prefix: &str) {
    match content {
        Value::Array(blocks) => blocks.iter_mut().for_each(|b| prefix_texts(b, prefix)),
        Value::Object(block) if block.get("type").and_then(Value::as_str) == Some("text") => {
            if let Some(Value::String(text)) = block.get_mut("text") {
                *text = format!("{prefix} {text}");
            }
        }
        _ => {}
    }
}

/// What a 2026-07-28 client echoes back (`requestState`) when it retries a call whose
/// upstream asked it something (`input_required`): sealed by the gateway (XChaCha20-Poly1305
/// under the secrets key, [`crate::secrets::SecretBox`]), so the client can neither read nor
/// change it. A retry must match all of it, and is decided again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestState {
    /// What the retry continues.
    pub continues: Continues,
    /// Tenant.
    pub tenant_id: String,
    /// The principal that called.
    pub principal: String,
    /// The tool as called.
    pub tool: String,
    /// The hash of the arguments as called.
    pub args_hash: String,
    /// The grant the call presented (`_meta.manifest_id`), if it presented one.
    pub grant: Option<String>,
    /// The upstream that asked (its registered name).
    pub upstream: String,
    /// The first decision's receipt id.
    pub first: String,
    /// Epoch milliseconds after which the retry is refused.
    pub expires_at: i64,
}

/// What a retry continues.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Continues {
    /// A run suspended on the node that holds it: an upstream of the 2025 eras asked on the
    /// call's stream, and waits for the answer under the gateway's `key`.
    Held {
        /// The suspended run.
        run: String,
        /// The key of the input request the retry answers.
        key: String,
    },
    /// An upstream's own round (its `input_required` over the gateway's 2026-07-28 link):
    /// nothing waits; the retry sends the call again with the answers and `state`.
    Upstream {
        /// The upstream's id: the retry goes to it or nowhere.
        upstream_id: String,
        /// The upstream's `requestState`, as it gave it.
        state: Option<String>,
        /// The requests relayed, by the upstream's keys: their `client_request` receipt ids.
        asked: std::collections::BTreeMap<String, String>,
    },
}

/// How long a `requestState` stays good, at most.
pub const REQUEST_STATE_TTL_MS: i64 = 10 * 60 * 1000;
/// The associated data sealed `requestState`s carry (a value sealed for anything else does
/// not open as one).
const REQUEST_STATE_AAD: &str = "aperture/request-state/v1";

impl RequestState {
    /// Sealed for the client.
    pub fn seal(&self, secrets: &crate::secrets::SecretBox) -> String {
        let plain = serde_json::to_string(self).unwrap_or_default();
        secrets.seal(REQUEST_STATE_AAD, &plain)
    }

    /// What a client echoed, when the gateway sealed it; `None` otherwise (forged, changed,
    /// sealed under a key no longer held).
    pub fn open(secrets: &crate::secrets::SecretBox, sealed: &str) -> Option<Self> {
        let plain = secrets.open(REQUEST_STATE_AAD, sealed).ok()?;
        serde_json::from_str(&plain).ok()
    }
}

/// The JSON-RPC request `id` of `method` with `params`, as the surface sends it to the client.
pub fn request(id: &Value, method: &str, params: Value) -> Value {
    let mut message = Map::with_capacity(4);
    message.insert("jsonrpc".into(), json!("2.0"));
    message.insert("id".into(), id.clone());
    message.insert("method".into(), json!(method));
    message.insert("params".into(), params);
    Value::Object(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_state_opens_only_as_sealed() {
        let secrets = crate::secrets::SecretBox::ephemeral();
        let state = RequestState {
            continues: Continues::Held {
                run: "run_1".into(),
                key: "ask_1".into(),
            },
            tenant_id: "t".into(),
            principal: "tok_a".into(),
            tool: "mcp__fixture__ask".into(),
            args_hash: "sha256:00".into(),
            grant: None,
            upstream: "fixture".into(),
            first: "rcp_1".into(),
            expires_at: 1,
        };
        let sealed = state.seal(&secrets);
        assert!(!sealed.contains("tok_a"), "{sealed}");
        assert_eq!(RequestState::open(&secrets, &sealed), Some(state));
        // Changed by one character, sealed under another key, or sealed for something else.
        let mut changed = sealed.clone().into_bytes();
        let last = changed.len() - 2;
        changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(changed).unwrap();
        assert_eq!(RequestState::open(&secrets, &changed), None);
        let other = crate::secrets::SecretBox::ephemeral();
        assert_eq!(RequestState::open(&other, &sealed), None);
        let elsewhere = secrets.seal(
            "another/purpose",
            &serde_json::to_string(&json!({})).unwrap(),
        );
        assert_eq!(RequestState::open(&secrets, &elsewhere), None);
    }

    #[test]
    fn declared_abilities_read_both_eras_and_round_trip() {
        let all = Abilities::declared(&json!({
            "sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}
        }));
        assert!(ClientRequest::ALL.into_iter().all(|k| all.can(k)));
        assert_eq!(Abilities::from_text(&all.to_text()), all);
        // An empty elicitation object is form mode only (2025-06-18).
        let form = Abilities::declared(&json!({"elicitation": {}}));
        assert!(form.can(ClientRequest::Elicitation) && !form.can(ClientRequest::ElicitationUrl));
        let none = Abilities::declared(&json!({"sampling": true, "experimental": {}}));
        assert!(!none.any());
        assert_eq!(Abilities::from_text(""), Abilities::default());
    }

    #[test]
    fn what_the_client_receives_names_the_asker_and_no_context() {
        let sampling = rewrite(
            ClientRequest::Sampling,
            json!({
                "messages": [
                    {"role": "user", "content": {"type": "text", "text": "hi"}},
                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "x"}]}
                ],
                "includeContext": "allServers",
                "maxTokens": 10
            }),
            "[fs/read]",
        );
        assert_eq!(sampling["includeContext"], "none");
        assert_eq!(sampling["messages"][0]["content"]["text"], "[fs/read] hi");
        assert_eq!(sampling["messages"][1]["content"][0]["text"], "[fs/read] a");
        assert_eq!(sampling["messages"][1]["content"][1]["data"], "x");
        let elicit = rewrite(
            ClientRequest::Elicitation,
            json!({"mode": "form", "message": "Your name?", "requestedSchema": {}}),
            "[fs/read]",
        );
        assert_eq!(elicit["message"], "[fs/read] Your name?");
    }
}
