//! Issue 47 (item 3): requests of an upstream's to the client while one of its tools runs
//! (sampling, elicitation, roots), relayed only where they belong: on the call's own stream, to
//! a client that declared the capability, when the tool's rule lists the kind in
//! `client_requests`; the client's answer accepted only from the calling principal; everything
//! else refused to the upstream; each request and its outcome journaled
//! (`kind: "client_request"`).

use std::time::Duration;

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Db, HttpFixture, Requests, TestApp, echo_of, rpc};
use crate::streams::Stream;

const ASK: &str = "mcp__fixture__ask";
const WITHIN: Duration = Duration::from_secs(15);

struct Setup {
    app: TestApp,
    agent: String,
}

async fn setup(client_requests: Value) -> Setup {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let rules = json!([{"id": "ask", "match": {"name": ASK}, "mode": "allow",
                        "client_requests": client_requests}]);
    app.activate_policy(&admin, "asking", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    Setup { app, agent }
}

impl Setup {
    /// `initialize` as `token` from a client declaring `capabilities`: its `Mcp-Session-Id`.
    async fn connect(&self, token: &str, capabilities: Value) -> String {
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                            "clientInfo": {"name": "asked", "version": "1"}});
        let response = self
            .app
            .mcp_post(token)
            .json(rpc(0, "initialize", params))
            .await;
        response.header("mcp-session-id").to_owned()
    }

    /// `tools/list` on `session`.
    async fn list(&self, session: &str) -> Value {
        let post = self.app.mcp_post(&self.agent);
        let post = post.header("mcp-session-id", session);
        let post = post.header("mcp-protocol-version", "2025-11-25");
        post.json(rpc(1, "tools/list", json!({}))).await.json()["result"].clone()
    }

    /// `ask {kind}` on `session` from a client that takes streams: the stream.
    async fn ask(&self, session: &str, list: &Value, kind: &str) -> Stream {
        let params = json!({"name": ASK, "arguments": {"kind": kind}, "_meta": echo_of(list, ASK)});
        let post = self.app.post_raw("/mcp").as_(&self.agent);
        let post = post.header("accept", "application/json, text/event-stream");
        let post = post.header("mcp-session-id", session);
        let post = post.header("mcp-protocol-version", "2025-11-25");
        Stream::open(post.json(rpc(9, "tools/call", params))).await
    }

    /// Posts `answer` (a JSON-RPC response) as `token` on `session`: the status.
    async fn answer(&self, token: &str, session: &str, answer: Value) -> StatusCode {
        let post = self.app.mcp_post(token).header("mcp-session-id", session);
        let post = post.header("mcp-protocol-version", "2025-11-25");
        post.json(answer).await.status()
    }

    /// The `client_request` records of the journal: their decision, reason and disclosures.
    async fn records(&self) -> Vec<(String, String, Value)> {
        let records = aperture_core::store::journal::search(
            &self.app.store,
            "default",
            &aperture_core::store::journal::ReceiptFilter::default(),
            500,
        )
        .await
        .unwrap();
        let mut found: Vec<(String, String, Value)> = records
            .iter()
            .filter_map(|r| {
                let receipt: Value = serde_json::from_str(&r.receipt).unwrap();
                (receipt["kind"] == "client_request").then(|| {
                    (
                        receipt["decision"].as_str().unwrap().to_owned(),
                        receipt["reason"].as_str().unwrap().to_owned(),
                        serde_json::from_str(&r.disclosures).unwrap(),
                    )
                })
            })
            .collect();
        // Oldest first.
        found.reverse();
        found
    }
}

/// The next message on `stream` that is a request of the gateway's.
async fn next_request(stream: &mut Stream) -> Value {
    loop {
        let (_, message) = stream
            .message(WITHIN)
            .await
            .expect("a request on the stream");
        if message.get("method").is_some() && message.get("id").is_some() {
            return message;
        }
    }
}

/// The call's result at the end of `stream`.
async fn result(stream: &mut Stream) -> Value {
    let rest = stream.rest(WITHIN).await;
    let (_, last) = rest.last().expect("the call's answer").clone();
    assert!(last.get("error").is_none(), "{last}");
    last["result"].clone()
}

#[tokio::test]
async fn a_sampling_request_reaches_the_caller_rewritten_and_its_answer_goes_back() {
    let s = setup(json!(["sampling", "elicitation"])).await;
    let session = s
        .connect(&s.agent, json!({"sampling": {}, "elicitation": {}}))
        .await;
    let list = s.list(&session).await;
    let mut stream = s.ask(&session, &list, "sampling").await;
    let request = next_request(&mut stream).await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let params = &request["params"];
    // The client's other conversations are not the upstream's business, and the person
    // sees who asks.
    assert_eq!(params["includeContext"], "none", "{params}");
    assert_eq!(
        params["messages"][0]["content"]["text"],
        "[fixture/ask] Summarize the weather"
    );
    assert!(!params.to_string().contains("io.aperture/call"));

    // Attack: another principal of the tenant answers in the caller's place: refused, and the
    // call still waits for the caller.
    let mallory = s.app.token("default", "mallory", &[scope::RUN]).await;
    let mallory_session = s.connect(&mallory, json!({"sampling": {}})).await;
    let forged = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "FORGED"}, "model": "m"}});
    assert_eq!(
        s.answer(&mallory, &mallory_session, forged).await,
        StatusCode::NOT_FOUND
    );

    let answer = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "sunny"}, "model": "m"}});
    assert_eq!(
        s.answer(&s.agent, &session, answer.clone()).await,
        StatusCode::ACCEPTED
    );
    // Answered once: the same answer again is not awaited.
    assert_eq!(
        s.answer(&s.agent, &session, answer).await,
        StatusCode::NOT_FOUND
    );
    let result = result(&mut stream).await;
    assert_eq!(
        result["structuredContent"]["answer"]["content"]["text"], "sunny",
        "{result}"
    );

    // Journaled before it left, and its outcome after: digests, never the texts.
    let records = s.records().await;
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records
            .iter()
            .all(|(decision, reason, _)| decision == "allow" && reason == "ok")
    );
    let about: Vec<&Value> = records
        .iter()
        .map(|(_, _, d)| &d["client_request"])
        .collect();
    assert!(about.iter().any(|a| a["request_digest"].is_string()));
    assert!(about.iter().any(|a| a["response_digest"].is_string()));
    let all = format!("{records:?}");
    assert!(!all.contains("sunny") && !all.contains("weather"), "{all}");
}

#[tokio::test]
async fn an_elicitation_declined_by_the_person_goes_back_as_declined() {
    let s = setup(json!(["elicitation"])).await;
    let session = s
        .connect(&s.agent, json!({"elicitation": {"form": {}}}))
        .await;
    let list = s.list(&session).await;
    let mut stream = s.ask(&session, &list, "elicitation").await;
    let request = next_request(&mut stream).await;
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "[fixture/ask] Your name?");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "decline"}});
    assert_eq!(
        s.answer(&s.agent, &session, answer).await,
        StatusCode::ACCEPTED
    );
    let result = result(&mut stream).await;
    assert_eq!(result["structuredContent"]["answer"]["action"], "decline");
    let records = s.records().await;
    assert!(
        records
            .iter()
            .any(|(_, _, d)| d["client_request"]["action"] == "decline"),
        "{records:?}"
    );
}

/// Attack: a tool whose rule does not list the kind asks anyway; a client that did not declare
/// the capability is asked; a call with no connected client (REST) is asked. Each is refused
/// to the upstream, nothing reaches a client, and each refusal is journaled.
#[tokio::test]
async fn requests_the_rule_or_the_client_does_not_allow_are_refused_and_journaled() {
    let s = setup(json!(["sampling", "elicitation"])).await;
    let session = s.connect(&s.agent, json!({"sampling": {}})).await;
    let list = s.list(&session).await;

    // Not in the rule's client_requests.
    let mut stream = s.ask(&session, &list, "roots").await;
    let refused = result(&mut stream).await;
    assert_eq!(
        refused["structuredContent"]["refused"]["code"], -32600,
        "{refused}"
    );
    // Allowed by the rule, not declared by the client.
    let mut stream = s.ask(&session, &list, "elicitation").await;
    let refused = result(&mut stream).await;
    assert!(
        refused["structuredContent"]["refused"].is_object(),
        "{refused}"
    );

    // A REST call has no client to ask.
    let session_id = list["_meta"]["session_id"].as_str().unwrap().to_owned();
    let echo = echo_of(&list, ASK);
    let rest = s
        .app
        .post(format!("/sessions/{session_id}/calls"))
        .as_(&s.agent)
        .json(json!({"name": ASK, "arguments": {"kind": "sampling"}, "_meta": echo}))
        .await;
    let body = rest.json();
    let text = body.to_string();
    assert!(text.contains("refused"), "{text}");

    let records = s.records().await;
    let mut reasons: Vec<&str> = records.iter().map(|(_, r, _)| r.as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        ["not_callable", "not_callable", "policy_denied"],
        "{records:?}"
    );
    assert!(records.iter().all(|(d, _, _)| d == "deny"));
}

/// A 2026-07-28 request `method` with `params` (protocol fields added to its `_meta`) as
/// `token`; `name` mirrored in `Mcp-Name`.
async fn stateless(app: &impl Requests, token: &str, method: &str, params: Value) -> Value {
    stateless_reply(app, token, method, params).await.1
}

/// [`stateless`], with the answer's HTTP status.
async fn stateless_reply(
    app: &impl Requests,
    token: &str,
    method: &str,
    mut params: Value,
) -> (StatusCode, Value) {
    let meta = params["_meta"].as_object_mut().map(std::mem::take);
    let mut meta = meta.unwrap_or_default();
    meta.insert(
        "io.modelcontextprotocol/protocolVersion".into(),
        json!("2026-07-28"),
    );
    meta.entry("io.modelcontextprotocol/clientCapabilities")
        .or_insert(json!({}));
    params["_meta"] = Value::Object(meta);
    let mut post = app.mcp_post(token);
    post = post.header("mcp-protocol-version", "2026-07-28");
    post = post.header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        post = post.header("mcp-name", name);
    }
    // Each request an id of its own, as clients send them.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let reply = post.json(rpc(id, method, params)).await;
    let answer = reply.json();
    assert_eq!(answer["id"], id, "answered to its own id: {answer}");
    (reply.status(), answer)
}

/// Issue 47 (item 6, `server-stateless`): in 2026-07-28 a tool that fails because its upstream
/// asked the client for something the request did not declare it can answer is refused with
/// -32021 (HTTP 400) naming the capability — whether the request declared nothing or something
/// else. A tool that carries on without the answer keeps its result.
#[tokio::test]
async fn in_2026_a_tool_that_fails_for_an_undeclared_capability_is_refused_naming_it() {
    let s = setup(json!(["sampling", "elicitation"])).await;
    let listed = stateless(&s.app, &s.agent, "tools/list", json!({})).await;
    let list = listed["result"].clone();
    let call = |arguments: Value, capabilities: Value| {
        let mut meta = echo_of(&list, ASK);
        meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
        json!({"name": ASK, "arguments": arguments, "_meta": meta})
    };

    // Declared nothing; the tool cannot do without the sample.
    let params = call(json!({"kind": "sampling", "must": true}), json!({}));
    let (status, refused) = stateless_reply(&s.app, &s.agent, "tools/call", params).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{refused}"
    );
    // Declared elicitation only (the call goes the input_required way), asked for sampling.
    let params = call(
        json!({"kind": "sampling", "must": true}),
        json!({"elicitation": {}}),
    );
    let (status, refused) = stateless_reply(&s.app, &s.agent, "tools/call", params).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // A tool that does without the answer keeps its result.
    let params = call(json!({"kind": "sampling"}), json!({}));
    let (status, answered) = stateless_reply(&s.app, &s.agent, "tools/call", params).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert!(
        answered["result"]["structuredContent"]["refused"].is_object(),
        "{answered}"
    );
    // Each refusal to the upstream was journaled as such.
    let records = s.records().await;
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(
        records
            .iter()
            .all(|(d, r, _)| d == "deny" && r == "not_callable")
    );
}

/// Issue 47 (item 3, 2026-07-28): the upstream's request comes back as an `input_required`
/// result with a sealed `requestState`; the retry with the answer continues the same run,
/// decided again; a retry that does not match the state in every part is refused.
#[tokio::test]
async fn in_2026_a_request_for_the_client_is_an_input_required_result_and_the_retry_continues() {
    let s = setup(json!(["elicitation"])).await;
    let listed = stateless(&s.app, &s.agent, "tools/list", json!({})).await;
    let list = listed["result"].clone();
    let mut meta = echo_of(&list, ASK);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
    let params = json!({"name": ASK, "arguments": {"kind": "elicitation"}, "_meta": meta});
    let first = stateless(&s.app, &s.agent, "tools/call", params.clone()).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "[fixture/ask] Your name?");
    let sealed = result["requestState"].as_str().unwrap().to_owned();
    assert!(
        !sealed.contains("agent") && !sealed.contains(ASK),
        "{sealed}"
    );

    let answer = json!({key.clone(): {"action": "accept", "content": {"name": "Ada"}}});
    let retry = |params: &Value, state: &str| {
        let mut params = params.clone();
        params["inputResponses"] = answer.clone();
        params["requestState"] = json!(state);
        params
    };
    // Attack: the state with other arguments, another principal's retry, a changed state.
    let mut other_args = retry(&params, &sealed);
    other_args["arguments"]["kind"] = json!("roots");
    let refused = stateless(&s.app, &s.agent, "tools/call", other_args).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let mallory = s.app.token("default", "mallory", &[scope::RUN]).await;
    let refused = stateless(&s.app, &mallory, "tools/call", retry(&params, &sealed)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let mut tampered = sealed.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let refused = stateless(&s.app, &s.agent, "tools/call", retry(&params, &tampered)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The caller's retry: the run goes on with the answer and ends.
    let done = stateless(&s.app, &s.agent, "tools/call", retry(&params, &sealed)).await;
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(
        result["structuredContent"]["answer"]["content"]["name"], "Ada",
        "{done}"
    );
    // The run is over: the same state again finds nothing.
    let again = stateless(&s.app, &s.agent, "tools/call", retry(&params, &sealed)).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");

    // The retry was decided again, and its decision names the first.
    let records = aperture_core::store::journal::search(
        &s.app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter::default(),
        500,
    )
    .await
    .unwrap();
    let retried: Vec<Value> = records
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.disclosures).unwrap())
        .filter(|d| d.get("retry_of").is_some())
        .collect();
    assert_eq!(retried.len(), 1, "{retried:?}");
    let relayed = s.records().await;
    assert_eq!(relayed.len(), 2, "{relayed:?}");
    assert_eq!(
        retried[0]["retry_of"], relayed[0].2["decision_receipt_id"],
        "{retried:?} {relayed:?}"
    );
}

/// A gateway on `db` (when that backend is there) with the fixture upstream served over
/// streamable HTTP (where it speaks 2026-07-28 too), and an admin token.
async fn over_http(db: Db) -> Option<(TestApp, String, HttpFixture)> {
    let app = TestApp::spawn_with(db, |c| c.allow_private_upstreams = true).await?;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let fixture = app.register_http_fixture(&admin).await;
    Some((app, admin, fixture))
}

/// Issue 47 (item 3, 2026-07-28, an upstream that speaks it): the upstream's own
/// `input_required` round is relayed under the upstream's keys, rewritten, each request
/// journaled; the upstream's `requestState` travels sealed inside the gateway's, and the
/// retry (decided again) brings the client's answers and the upstream's state back to it.
/// Attacks: answers sent without a state the gateway issued never reach the upstream; a state
/// for other arguments, another principal's retry, a changed state are refused; a kind the
/// tool's rule does not list is refused before anything reaches the client.
#[tokio::test]
async fn in_2026_an_upstream_s_own_input_round_is_relayed_under_its_keys_and_state() {
    let (app, admin, _fixture) = over_http(Db::Sqlite).await.unwrap();
    let rules = json!([{"id": "ask", "match": {"name": ASK}, "mode": "allow",
                        "client_requests": ["elicitation"]}]);
    app.activate_policy(&admin, "asking", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let s = Setup { app, agent };
    let listed = stateless(&s.app, &s.agent, "tools/list", json!({})).await;
    let list = listed["result"].clone();
    let mut meta = echo_of(&list, ASK);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
    let params = json!({"name": ASK, "arguments": {"kind": "elicitation"}, "_meta": meta});
    let answer = json!({"question": {"action": "accept", "content": {"name": "Ada"}}});

    // Attack: answering the upstream's question without a round the gateway relayed.
    let mut unasked = params.clone();
    unasked["inputResponses"] = answer.clone();
    let first = stateless(&s.app, &s.agent, "tools/call", unasked).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    // The upstream's key, its request rewritten; its state never shown.
    let request = &result["inputRequests"]["question"];
    assert_eq!(request["method"], "elicitation/create", "{first}");
    assert_eq!(request["params"]["message"], "[fixture/ask] Your name?");
    let sealed = result["requestState"].as_str().unwrap().to_owned();
    assert!(!sealed.contains("fixture-state"), "{sealed}");
    assert!(
        result["_meta"].get("io.aperture/round").is_none(),
        "{first}"
    );
    assert_eq!(result["_meta"]["receipt"]["reason"], "ok", "{first}");

    let retry = |state: &str| {
        let mut params = params.clone();
        params["inputResponses"] = answer.clone();
        params["inputResponses"]["smuggled"] = json!({"action": "accept", "content": {}});
        params["requestState"] = json!(state);
        params
    };
    let mut other_args = retry(&sealed);
    other_args["arguments"]["kind"] = json!("roots");
    let refused = stateless(&s.app, &s.agent, "tools/call", other_args).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let mallory = s.app.token("default", "mallory", &[scope::RUN]).await;
    let refused = stateless(&s.app, &mallory, "tools/call", retry(&sealed)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let mut tampered = sealed.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let refused = stateless(&s.app, &s.agent, "tools/call", retry(&tampered)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The caller's retry: the answer and the upstream's own state reach the upstream.
    let done = stateless(&s.app, &s.agent, "tools/call", retry(&sealed)).await;
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(
        result["structuredContent"]["answer"]["content"]["name"], "Ada",
        "{done}"
    );
    assert_eq!(
        result["structuredContent"]["state"], "fixture-state:elicitation",
        "{done}"
    );
    // Only the answer to the request relayed went on.
    assert_eq!(
        result["structuredContent"]["keys"],
        json!(["question"]),
        "{done}"
    );

    // A kind the rule does not list: refused, nothing relayed.
    let mut sampling = params.clone();
    sampling["arguments"]["kind"] = json!("sampling");
    sampling["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"elicitation": {}, "sampling": {}});
    let refused = stateless(&s.app, &s.agent, "tools/call", sampling).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        refused["result"].get("inputRequests").is_none(),
        "{refused}"
    );

    // Journaled: the relayed request, its answer's outcome, the refusal.
    let records = s.records().await;
    let kinds: Vec<(&str, &str)> = records
        .iter()
        .map(|(d, r, _)| (d.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("allow", "ok"), ("allow", "ok"), ("deny", "policy_denied")],
        "{records:?}"
    );
    assert_eq!(records[0].2["client_request"]["key"], "question");
    let outcome = &records[1].2["client_request"];
    assert_eq!(outcome["action"], "accept", "{outcome}");
    assert!(outcome["response_digest"].is_string(), "{outcome}");
    // The retry was decided again, naming the first decision.
    let journal = aperture_core::store::journal::search(
        &s.app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter::default(),
        500,
    )
    .await
    .unwrap();
    let retried: Vec<Value> = journal
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.disclosures).unwrap())
        .filter(|d| d.get("retry_of").is_some())
        .collect();
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(
        retried[0]["retry_of"], records[0].2["decision_receipt_id"],
        "{retried:?}"
    );
}

/// Issue 47 (item 3: "state what happens when a retry reaches another node"): nothing of an
/// upstream's round waits on the node that relayed it, so its retry may reach any node of the
/// cluster (the state is sealed under the key every node holds) and completes there.
#[tokio::test]
async fn in_2026_the_retry_of_an_upstream_s_round_completes_on_another_node() {
    let Some((app, admin, _fixture)) = over_http(Db::Postgres).await else {
        return;
    };
    let rules = json!([{"id": "ask", "match": {"name": ASK}, "mode": "allow",
                        "client_requests": ["roots"]}]);
    app.activate_policy(&admin, "asking", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let other = app
        .another_node_with(|c| c.allow_private_upstreams = true)
        .await;
    let listed = stateless(&app, &agent, "tools/list", json!({})).await;
    let mut meta = echo_of(&listed["result"], ASK);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"roots": {}});
    let mut params = json!({"name": ASK, "arguments": {"kind": "roots"}, "_meta": meta});
    let first = stateless(&app, &agent, "tools/call", params.clone()).await;
    assert_eq!(
        first["result"]["inputRequests"]["question"]["method"], "roots/list",
        "{first}"
    );
    params["requestState"] = first["result"]["requestState"].clone();
    params["inputResponses"] = json!({"question": {"roots": [{"uri": "file:///work"}]}});
    let done = stateless(&other, &agent, "tools/call", params).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["answer"]["roots"][0]["uri"], "file:///work",
        "{done}"
    );
}

/// Issue 47 (items 2, 3 and 6, `input-required-result-non-tool-request`): a prompt whose
/// upstream asks the client while it is got (a 2026-07-28 input round) is relayed as a tool's
/// round is, where the prompt's rule lists the kind in `client_requests`: under the
/// upstream's key, rewritten, journaled, the retry decided again (`retry_of`) and carrying the
/// answer back. Attacks: a changed state, a state presented for another prompt; a rule that
/// lists nothing refuses the round.
#[tokio::test]
async fn in_2026_a_prompt_asks_the_client_in_an_input_round_where_its_rule_lets_it() {
    let (app, admin, _fixture) = over_http(Db::Sqlite).await.unwrap();
    let prompt = "mcp__fixture__summarize";
    let policy = |asks: Value| {
        json!({"rules": [
            {"id": "summary", "prompt": prompt, "mode": "allow", "client_requests": asks},
            {"id": "greet", "prompt": "mcp__fixture__greet", "mode": "allow"}
        ]})
    };
    app.activate_policy(&admin, "prompting", policy(json!(["elicitation"])))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let get = json!({"name": prompt, "_meta":
        {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});

    let first = stateless(&app, &agent, "prompts/get", get.clone()).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let request = &result["inputRequests"]["context"];
    assert_eq!(
        request["params"]["message"], "[fixture/summarize] For whom?",
        "{first}"
    );
    let sealed = result["requestState"].as_str().unwrap().to_owned();
    assert!(!sealed.contains("fixture-prompt-state"), "{sealed}");

    let retry = |name: &str, state: &str| {
        let mut params = get.clone();
        params["name"] = json!(name);
        if name != prompt {
            params["arguments"] = json!({"name": "x"});
        }
        params["inputResponses"] =
            json!({"context": {"action": "accept", "content": {"context": "the board"}}});
        params["requestState"] = json!(state);
        params
    };
    let mut tampered = sealed.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let refused = stateless(&app, &agent, "prompts/get", retry(prompt, &tampered)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let elsewhere = retry("mcp__fixture__greet", &sealed);
    let refused = stateless(&app, &agent, "prompts/get", elsewhere).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let done = stateless(&app, &agent, "prompts/get", retry(prompt, &sealed)).await;
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(
        result["messages"][0]["content"]["text"],
        "Summarize the text you are given, for the board.",
        "{done}"
    );

    // The rule lists nothing the prompt may ask: the round is refused, nothing relayed.
    app.activate_policy(&admin, "prompting", policy(json!([])))
        .await;
    let refused = stateless(&app, &agent, "prompts/get", get.clone()).await;
    assert!(refused.get("result").is_none(), "{refused}");
    assert_eq!(
        refused["error"]["data"]["receipt"]["reason"], "policy_denied",
        "{refused}"
    );

    // Journaled: the relayed request, its answer, the refusal; the retry names the first.
    let s = Setup { app, agent };
    let records = s.records().await;
    let kinds: Vec<(&str, &str)> = records
        .iter()
        .map(|(d, r, _)| (d.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("allow", "ok"), ("allow", "ok"), ("deny", "policy_denied")],
        "{records:?}"
    );
    let journal = aperture_core::store::journal::search(
        &s.app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter::default(),
        500,
    )
    .await
    .unwrap();
    let retried: Vec<Value> = journal
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.disclosures).unwrap())
        // The decision (its execution receipt names it, and the first, too).
        .filter(|d| d.get("retry_of").is_some() && d.get("decision_receipt_id").is_none())
        .collect();
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(
        retried[0]["retry_of"], records[0].2["decision_receipt_id"],
        "{retried:?}"
    );
}

/// Issue 47 (item 1, waiting modes): a `confirmation_required` call bound implicitly, from a
/// client that takes elicitations, is confirmed by asking the person: accepted, it runs;
/// declined, nothing runs and the refusal is journaled. Both eras.
#[tokio::test]
async fn a_stock_client_confirms_by_answering_an_elicitation() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let echo = "mcp__fixture__echo";
    let rules =
        json!([{"id": "confirm", "match": {"name": echo}, "mode": "confirmation_required"}]);
    app.activate_policy(&admin, "confirming", json!({"rules": rules}))
        .await;
    app.put("/settings/mcp")
        .as_(&admin)
        .json(json!({"binding": "implicit"}))
        .await
        .expect_ok();
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let s = Setup { app, agent };
    let session = s.connect(&s.agent, json!({"elicitation": {}})).await;
    let call = |text: &str| {
        let params = json!({"name": echo, "arguments": {"text": text}});
        let post = s.app.post_raw("/mcp").as_(&s.agent);
        let post = post.header("accept", "application/json, text/event-stream");
        let post = post.header("mcp-session-id", &session);
        let post = post.header("mcp-protocol-version", "2025-11-25");
        post.json(rpc(5, "tools/call", params))
    };

    let mut stream = Stream::open(call("confirmed")).await;
    let request = next_request(&mut stream).await;
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let message = request["params"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("[aperture] Confirm: run mcp__fixture__echo"),
        "{message}"
    );
    assert!(message.contains("confirmed"), "{message}");
    let accept = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {}}});
    assert_eq!(
        s.answer(&s.agent, &session, accept).await,
        StatusCode::ACCEPTED
    );
    let ran = result(&mut stream).await;
    assert_eq!(ran["isError"], false, "{ran}");
    assert_eq!(ran["content"][0]["text"], "confirmed", "{ran}");
    assert!(ran["_meta"].get("confirmation_token").is_none(), "{ran}");

    let mut stream = Stream::open(call("declined")).await;
    let request = next_request(&mut stream).await;
    let decline = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "decline"}});
    assert_eq!(
        s.answer(&s.agent, &session, decline).await,
        StatusCode::ACCEPTED
    );
    let refused = result(&mut stream).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(refused["_meta"]["receipt"]["reason"], "approval_rejected");
    assert_eq!(refused["_meta"]["receipt"]["kind"], "approval");
    assert!(
        !refused.to_string().contains("declined\""),
        "nothing ran: {refused}"
    );

    // 2026-07-28: the same question is an input_required result; the retry confirms.
    let params = json!({"name": echo, "arguments": {"text": "later"},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    let first = stateless(&s.app, &s.agent, "tools/call", params.clone()).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let (key, request) = first["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(request["method"], "elicitation/create");
    let mut retry = params;
    retry["inputResponses"] = json!({key.clone(): {"action": "accept", "content": {}}});
    retry["requestState"] = first["result"]["requestState"].clone();
    let done = stateless(&s.app, &s.agent, "tools/call", retry).await;
    assert_eq!(done["result"]["content"][0]["text"], "later", "{done}");
}

/// Issue 47 (item 3): two nodes share one PostgreSQL; the client's answer reaches the node that
/// does not hold the call's stream. It is kept for the node that does, which delivers it —
/// and an answer another principal posts the same way first is dropped there, never delivered.
#[tokio::test]
async fn an_answer_posted_to_another_node_reaches_the_call_and_only_the_callers() {
    let Some(app) = TestApp::spawn_postgres().await else {
        return;
    };
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    let rules = json!([{"id": "ask", "match": {"name": ASK}, "mode": "allow",
                        "client_requests": ["sampling"]}]);
    app.activate_policy(&admin, "asking", json!({"rules": rules}))
        .await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let mallory = app.token("default", "mallory", &[scope::RUN]).await;
    let other = app.another_node().await;
    let s = Setup { app, agent };
    let session = s.connect(&s.agent, json!({"sampling": {}})).await;
    let mallory_session = s.connect(&mallory, json!({"sampling": {}})).await;
    let list = s.list(&session).await;
    let mut stream = s.ask(&session, &list, "sampling").await;
    let request = next_request(&mut stream).await;
    let answer_at_other = |token: &str, session: &str, text: &str| {
        let post = other.mcp_post(token).header("mcp-session-id", session);
        let post = post.header("mcp-protocol-version", "2025-11-25");
        post.json(json!({"jsonrpc": "2.0", "id": request["id"], "result":
            {"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}}))
    };
    // The other node cannot tell whose request it is: both are kept (202).
    let forged = answer_at_other(&mallory, &mallory_session, "FORGED").await;
    assert_eq!(forged.status(), StatusCode::ACCEPTED);
    let real = answer_at_other(&s.agent, &session, "sunny").await;
    assert_eq!(real.status(), StatusCode::ACCEPTED);
    let result = result(&mut stream).await;
    assert_eq!(
        result["structuredContent"]["answer"]["content"]["text"], "sunny",
        "{result}"
    );
    // Nothing is left behind.
    let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM client_answers")
        .fetch_one(s.app.store.pool())
        .await
        .unwrap();
    assert_eq!(kept, 0);
}

/// Issue 47 (item 3): over stdio, nothing on the wire says which call a request serves; with
/// two calls in flight on the connection the upstream's request belongs to no call: refused to
/// the upstream and journaled against it, never relayed to either caller.
#[tokio::test]
async fn a_request_no_single_call_owns_is_refused_and_journaled() {
    let s = setup(json!(["sampling"])).await;
    let session = s.connect(&s.agent, json!({"sampling": {}})).await;
    let slow = "mcp__fixture__slow";
    let admin = s.app.token("default", "ops2", &[scope::ADMIN]).await;
    let rules = json!([
        {"id": "ask", "match": {"name": ASK}, "mode": "allow", "client_requests": ["sampling"]},
        {"id": "slow", "match": {"name": slow}, "mode": "allow"}
    ]);
    s.app
        .activate_policy(&admin, "asking-and-slow", json!({"rules": rules}))
        .await;
    let list = s.list(&session).await;
    // A slow call holds the connection while `ask` runs beside it.
    let params =
        json!({"name": slow, "arguments": {"millis": 1500}, "_meta": echo_of(&list, slow)});
    let post = s.app.mcp_post(&s.agent).json(rpc(3, "tools/call", params));
    let slow_call = tokio::spawn(async move { post.await.json() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut stream = s.ask(&session, &list, "sampling").await;
    let refused = result(&mut stream).await;
    assert_eq!(
        refused["structuredContent"]["refused"]["code"], -32600,
        "{refused}"
    );
    let slow_answer = slow_call.await.unwrap();
    assert_eq!(
        slow_answer["result"]["content"][0]["text"], "done",
        "{slow_answer}"
    );
    // Journaled against the upstream (the record is written in the background).
    let mut records = Vec::new();
    for _ in 0..50 {
        records = s.records().await;
        if !records.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(records.len(), 1, "{records:?}");
    let (decision, reason, disclosures) = &records[0];
    assert_eq!(
        (decision.as_str(), reason.as_str()),
        ("deny", "not_callable")
    );
    assert_eq!(
        disclosures["client_request"]["method"],
        "sampling/createMessage"
    );
    let actors = aperture_core::store::journal::search(
        &s.app.store,
        "default",
        &aperture_core::store::journal::ReceiptFilter {
            actor_id: Some("upstream:fixture".into()),
            ..Default::default()
        },
        50,
    )
    .await
    .unwrap();
    assert!(
        actors
            .iter()
            .any(|r| r.receipt.contains("\"client_request\"")),
        "journaled against the upstream"
    );
}
