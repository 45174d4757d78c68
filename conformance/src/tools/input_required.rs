//! The multi round-trip tools of SEP-2322 (`input-required-result-*`; stateless wire only).
//!
//! Each answers a call it cannot finish yet with an `InputRequiredResult`: the questions it
//! needs answered (`inputRequests`, keyed), and where a flow spans rounds, a sealed
//! `requestState` recording its progress. The client calls again with `inputResponses` and the
//! state echoed back. A question whose answer is missing or malformed is asked again; answers
//! to questions never asked are ignored; a state this server did not seal is refused
//! (`-32602`). On the 2025 wire rmcp refuses to send an `InputRequiredResult` at all.

use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ErrorData, InputRequest, InputRequests,
    InputRequiredResult, JsonObject,
};
use serde_json::{Value, json};

use super::Call;
use crate::input::{self, content_text};

/// One question, with the key its answer comes back under.
type Question = (&'static str, InputRequest);

/// `test_input_required_result_elicitation`: asks for the user's name (key `user_name`).
pub fn elicitation(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let questions = [("user_name", ask_name("What is your name?")?)];
    Ok(gather(call, &questions, None, |answers| {
        greeting(answers.first().copied())
    }))
}

/// `test_input_required_result_sampling`: asks the client's model a question.
pub fn sampling(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let questions = [(
        "sample_request",
        input::sampling("What is the capital of France?", 100),
    )];
    Ok(gather(call, &questions, None, |answers| {
        format!("Sampled: {}", sampled_text(answers.first().copied()))
    }))
}

/// `test_input_required_result_list_roots`: asks for the client's roots.
pub fn list_roots(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let questions = [("roots_request", input::list_roots())];
    Ok(gather(call, &questions, None, |answers| {
        format!("Found {} root(s)", root_count(answers.first().copied()))
    }))
}

/// `test_input_required_result_request_state` and `…_tampered_state`: asks for a confirmation,
/// its progress sealed in `requestState`; a retry whose state does not open is refused.
pub fn confirmation(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let state = opened_state(call)?.unwrap_or_else(|| json!({ "step": "confirm" }));
    let confirm = input::elicitation(
        "Please confirm",
        json!({ "ok": { "type": "boolean", "description": "Whether to go ahead" } }),
        &["ok"],
    )?;
    let questions = [("confirm", confirm)];
    Ok(gather(call, &questions, Some(state), |answers| {
        let confirmed = answers
            .first()
            .and_then(|answer| answer.get("content")?.get("ok")?.as_bool())
            .unwrap_or(false);
        format!("Confirmed: state-ok (ok={confirmed})")
    }))
}

/// `test_input_required_result_multiple_inputs`: an elicitation, a sampling and the roots, in
/// one round.
pub fn multiple(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let state = opened_state(call)?.unwrap_or_else(|| json!({ "step": "gather" }));
    let questions = [
        ("user_name", ask_name("What is your name?")?),
        ("greeting", input::sampling("Generate a greeting", 50)),
        ("client_roots", input::list_roots()),
    ];
    Ok(gather(call, &questions, Some(state), |answers| {
        let [name, sampled, roots] = [0, 1, 2].map(|index| answers.get(index).copied());
        format!(
            "{} Greeting: {}. Roots: {}.",
            greeting(name),
            sampled_text(sampled),
            root_count(roots)
        )
    }))
}

/// `test_input_required_result_multi_round`: the name in a first round, the favourite colour in
/// a second, each round's progress sealed in a fresh `requestState`.
pub fn multi_round(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let state = opened_state(call)?;
    let round = state
        .as_ref()
        .and_then(|state| state.get("round")?.as_u64())
        .unwrap_or(1);
    if round == 1 {
        let questions = [("step1", ask_name("Step 1: What is your name?")?)];
        let Some(name) = answered_text(call, "step1", "name") else {
            return Ok(ask(call, &questions, json!({ "round": 1 })));
        };
        // The first answer is in: the second round's state carries it.
        let questions = [("step2", ask_colour()?)];
        return Ok(ask(call, &questions, json!({ "round": 2, "name": name })));
    }
    let name = state
        .as_ref()
        .and_then(|state| state.get("name")?.as_str())
        .unwrap_or("someone")
        .to_owned();
    let Some(colour) = answered_text(call, "step2", "color") else {
        let questions = [("step2", ask_colour()?)];
        return Ok(ask(call, &questions, json!({ "round": 2, "name": name })));
    };
    Ok(complete(format!("{name}'s favourite colour is {colour}")))
}

/// `test_input_required_result_capabilities`: asks only for what the request's
/// `clientCapabilities` declare the client can answer.
pub fn by_capabilities(call: &Call<'_>) -> Result<CallToolResponse, ErrorData> {
    let capabilities = call.context.client_capabilities().unwrap_or_default();
    let mut questions = Vec::new();
    if capabilities.elicitation.is_some() {
        questions.push(("user_name", ask_name("What is your name?")?));
    }
    if capabilities.sampling.is_some() {
        questions.push(("greeting", input::sampling("Generate a greeting", 50)));
    }
    if capabilities.roots.is_some() {
        questions.push(("client_roots", input::list_roots()));
    }
    let asked: Vec<&str> = questions.iter().map(|(key, _)| *key).collect();
    Ok(gather(call, &questions, None, |_| {
        format!("Answered: {}", asked.join(", "))
    }))
}

/// The call's result once every question is answered (`finish` gets the answers, in order),
/// or the questions still open.
fn gather(
    call: &Call<'_>,
    questions: &[Question],
    state: Option<Value>,
    finish: impl FnOnce(&[&JsonObject]) -> String,
) -> CallToolResponse {
    let answers: Vec<&JsonObject> = questions
        .iter()
        .filter_map(|(key, _)| input::answer(call.responses(), key))
        .collect();
    if answers.len() == questions.len() {
        return complete(finish(&answers));
    }
    let open: InputRequests = questions
        .iter()
        .filter(|(key, _)| input::answer(call.responses(), key).is_none())
        .map(|(key, question)| ((*key).to_owned(), question.clone()))
        .collect();
    let state = state.map(|state| seal(call, state));
    InputRequiredResult::new(Some(open), state).into()
}

/// Asks `questions`, with `state` sealed for the next round.
fn ask(call: &Call<'_>, questions: &[Question], state: Value) -> CallToolResponse {
    let requests: InputRequests = questions
        .iter()
        .map(|(key, question)| ((*key).to_owned(), question.clone()))
        .collect();
    InputRequiredResult::new(Some(requests), Some(seal(call, state))).into()
}

/// The state the retried call echoes, opened: `None` on a first call, `-32602` when it was not
/// sealed by this server for this tool, or was altered.
fn opened_state(call: &Call<'_>) -> Result<Option<Value>, ErrorData> {
    let Some(sealed) = call.params.request_state.as_deref() else {
        return Ok(None);
    };
    let refused = || ErrorData::invalid_params("requestState integrity check failed", None);
    let state = call.state.shared.seal.open(sealed).map_err(|_| refused())?;
    if state.get("tool").and_then(Value::as_str) != Some(call.params.name.as_ref()) {
        return Err(refused());
    }
    Ok(Some(state))
}

/// `state`, bound to the tool and sealed.
fn seal(call: &Call<'_>, mut state: Value) -> String {
    if let Some(members) = state.as_object_mut() {
        members.insert("tool".to_owned(), Value::from(call.params.name.as_ref()));
    }
    call.state.shared.seal.seal(&state)
}

/// The text field `field` of the elicitation answered under `key`.
fn answered_text(call: &Call<'_>, key: &str, field: &str) -> Option<String> {
    content_text(input::answer(call.responses(), key)?, field).map(str::to_owned)
}

fn ask_name(message: &str) -> Result<InputRequest, ErrorData> {
    input::elicitation(message, json!({ "name": { "type": "string" } }), &["name"])
}

fn ask_colour() -> Result<InputRequest, ErrorData> {
    input::elicitation(
        "Step 2: What is your favorite color?",
        json!({ "color": { "type": "string" } }),
        &["color"],
    )
}

/// `Hello, <name>!` for an accepted name elicitation.
fn greeting(answer: Option<&JsonObject>) -> String {
    match answer.and_then(|answer| content_text(answer, "name")) {
        Some(name) => format!("Hello, {name}!"),
        None => "Hello, stranger!".to_owned(),
    }
}

/// The text of a `CreateMessageResult`.
fn sampled_text(answer: Option<&JsonObject>) -> &str {
    answer
        .and_then(|answer| answer.get("content")?.get("text")?.as_str())
        .unwrap_or("(no text)")
}

/// How many roots a `ListRootsResult` lists.
fn root_count(answer: Option<&JsonObject>) -> usize {
    answer
        .and_then(|answer| answer.get("roots")?.as_array())
        .map_or(0, Vec::len)
}

fn complete(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}
