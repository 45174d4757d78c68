//! The upstream's answer to a `tools/call`, decoded as what it is expected to be.
//!
//! rmcp decodes every message from a server through its untagged `JsonRpcMessage` and
//! `ServerResult`: the message is buffered whole, then tried as a request, then as each of
//! the results before `CallToolResult` (fifteen of them), each failure an error built and
//! dropped. And an answer that arrives as an event stream goes to a task of its own, which
//! hands each decoded message to the transport's worker through a channel.
//!
//! For a `tools/call` sent by [`super::http::UpstreamHttp`] the answer is decoded here first,
//! in one pass, as a response with that call's id and a `CallToolResult` — only when it is
//! exactly that: no member outside the JSON-RPC response's and no member outside the result's
//! (`content`, `structuredContent`, `isError`, `_meta`, `resultType`), the result type
//! `complete` when given, and one of the first three present (what rmcp's own decoding of
//! that result requires). Such a message is one that rmcp's decoding also takes for a
//! `CallToolResult` (`decodes_as_rmcp_does` checks the shapes); anything else — an error, a
//! task, a request for input, a message with other members — is left to rmcp, decoded as
//! before.
//!
//! On an event stream ([`first_answer`]) the events before the first message (a priming event
//! with an id and no data) are skipped; when that first message is the answer and comes
//! within [`WAIT_FOR_ANSWER`] of the stream's headers, the answer is handed to rmcp as a JSON
//! response and the stream is read to its end (at most 50 ms, as rmcp does after an answer,
//! so that the connection is reused). When it is anything else — progress, a request from the
//! server, an event of another type, an error, the end of the stream, or nothing yet — every
//! event read so far is handed to rmcp again, in order, ahead of the rest of the stream, and
//! rmcp handles them as it always did.

use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::stream::{self, BoxStream, StreamExt};
use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, ClientRequest, ContentBlock, JsonRpcMessage,
    JsonRpcResponse, JsonRpcVersion2_0, MetaObject, RequestId, ResultType, ServerJsonRpcMessage,
    ServerResult,
};
use rmcp::transport::streamable_http_client::SseError;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use sse_stream::Sse;

/// How long the rest of a stream is read after its answer (rmcp's own figure).
const DRAIN_FOR: Duration = Duration::from_millis(50);
/// How long the answer is waited for here. rmcp counts a POST against its transport's limit
/// of concurrent requests (16) until the POST returns, which for an event stream is as soon as
/// its headers arrive: a call that takes longer than this goes to rmcp as it always did, so
/// that slow calls do not hold those places (a JSON answer holds one until it arrives, as in
/// rmcp's own client).
const WAIT_FOR_ANSWER: Duration = Duration::from_millis(2);
/// Events without a message read before giving up on finding the answer first.
const MAX_SKIPPED: usize = 16;

/// The id of `message` when it is a `tools/call` request, whose answer is decoded here.
pub(super) fn expected_call(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Request(request)
            if matches!(request.request, ClientRequest::CallToolRequest(_)) =>
        {
            Some(&request.id)
        }
        _ => None,
    }
}

/// A JSON-RPC response, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    #[expect(dead_code, reason = "checked by its type: the version must be \"2.0\"")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    result: CallToolFields,
}

/// The members of a `CallToolResult`, nothing else, read as rmcp reads them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallToolFields {
    #[serde(default)]
    result_type: Option<ResultType>,
    content: Option<Vec<ContentBlock>>,
    /// A present `null` stays `Some(Value::Null)`, as in rmcp.
    #[serde(default, deserialize_with = "present")]
    structured_content: Option<Value>,
    is_error: Option<bool>,
    #[serde(rename = "_meta")]
    meta: Option<MetaObject>,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// `text` as the answer to the call `id`, when it is exactly a `CallToolResult` for it
/// (see the module's documentation); `None` leaves it to rmcp.
pub(super) fn call_answer(text: &[u8], id: &RequestId) -> Option<ServerJsonRpcMessage> {
    let answer: Answer = serde_json::from_slice(text).ok()?;
    let fields = answer.result;
    if answer.id != *id
        || fields
            .result_type
            .as_ref()
            .is_some_and(|t| !t.is_complete())
        || fields.content.is_none()
            && fields.structured_content.is_none()
            && fields.is_error.is_none()
    {
        return None;
    }
    let mut result = CallToolResult::default();
    result.result_type = fields.result_type;
    result.content = fields.content.unwrap_or_default();
    result.structured_content = fields.structured_content;
    result.is_error = fields.is_error;
    result.meta = fields.meta;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id: answer.id,
        result: ServerResult::CallToolResult(result),
    }))
}

/// What [`first_answer`] found on a stream.
#[expect(
    clippy::large_enum_variant,
    reason = "moved once, into rmcp's `StreamableHttpPostResponse::Json`, which holds it unboxed"
)]
pub(super) enum FirstEvent {
    /// The call's answer, first of the stream's messages.
    Answer(ServerJsonRpcMessage),
    /// Anything else: the stream as it was, the events already read first.
    Stream(BoxStream<'static, Result<Sse, SseError>>),
}

/// Reads `events` up to their first message: the answer to the call `id`, or the stream
/// back as it was (see the module's documentation).
pub(super) async fn first_answer(
    mut events: BoxStream<'static, Result<Sse, SseError>>,
    id: &RequestId,
) -> FirstEvent {
    let mut read = Vec::new();
    let mut failed = None;
    let waited = tokio::time::sleep(WAIT_FOR_ANSWER);
    tokio::pin!(waited);
    while read.len() < MAX_SKIPPED {
        let next = tokio::select! {
            biased;
            next = events.next() => next,
            () = &mut waited => break,
        };
        let event = match next {
            Some(Ok(event)) => event,
            // rmcp decides what an error or the end means (resuming, failing the call).
            Some(Err(error)) => {
                failed = Some(error);
                break;
            }
            None => break,
        };
        if !matches!(event.event.as_deref(), None | Some("" | "message")) {
            // A control event (rmcp's to handle, as it handles the rest).
            read.push(event);
            break;
        }
        match event.data.as_deref().filter(|data| !data.trim().is_empty()) {
            None => read.push(event),
            Some(data) => match call_answer(data.as_bytes(), id) {
                Some(answer) => {
                    drain(events);
                    return FirstEvent::Answer(answer);
                }
                None => {
                    read.push(event);
                    break;
                }
            },
        }
    }
    let head = read.into_iter().map(Ok).chain(failed.map(Err));
    // Fused: the stream may have ended already, and is polled again after what was read.
    FirstEvent::Stream(stream::iter(head).chain(events.fuse()).boxed())
}

/// Reads what follows an answer, as rmcp does, so that the connection goes back to the pool:
/// at once when the stream has ended already (the usual case), else on a task of its own.
fn drain(mut events: BoxStream<'static, Result<Sse, SseError>>) {
    if let Some(None) = events.next().now_or_never() {
        return;
    }
    tokio::spawn(async move {
        let _ =
            tokio::time::timeout(DRAIN_FOR, async { while events.next().await.is_some() {} }).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    /// The call's id and result, when `message` answers a call with a `CallToolResult`.
    fn call_result(message: ServerJsonRpcMessage) -> Option<(RequestId, CallToolResult)> {
        match message {
            JsonRpcMessage::Response(JsonRpcResponse {
                id,
                result: ServerResult::CallToolResult(result),
                ..
            }) => Some((id, result)),
            _ => None,
        }
    }

    /// What rmcp's own decoding makes of `text`, as [`call_result`].
    fn rmcp_decodes(text: &str) -> Option<(RequestId, CallToolResult)> {
        call_result(serde_json::from_str(text).expect("rmcp decodes it"))
    }

    /// Every shape this module takes for a `CallToolResult` is one rmcp's own decoding takes
    /// for the same: should rmcp reorder its results or give one of them these members, this
    /// fails.
    #[test]
    fn decodes_as_rmcp_does() {
        let shapes = [
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":{"n":1}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":null}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"_meta":{"k":"v"}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","content":[]}}"#,
            r#"{"result":{"content":[{"type":"image","data":"AA==","mimeType":"image/png"},
                {"type":"resource","resource":{"uri":"file:///a","text":"t"}},
                {"type":"resource_link","uri":"file:///b","name":"b"}],
                "structuredContent":[1,2]},"id":7,"jsonrpc":"2.0"}"#,
        ];
        for shape in shapes {
            let ours = call_answer(shape.as_bytes(), &id(7)).and_then(call_result);
            assert!(ours.is_some(), "{shape}");
            assert_eq!(ours, rmcp_decodes(shape), "{shape}");
        }
        let named = r#"{"jsonrpc":"2.0","id":"call-1","result":{"content":[]}}"#;
        let ours = call_answer(named.as_bytes(), &RequestId::String("call-1".into()));
        assert_eq!(ours.and_then(call_result), rmcp_decodes(named));
    }

    /// What is not exactly a `CallToolResult` for this call is rmcp's to decode.
    #[test]
    fn leaves_everything_else_to_rmcp() {
        let others = [
            // another call's answer
            r#"{"jsonrpc":"2.0","id":8,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":"7","result":{"content":[]}}"#,
            // errors, tasks, requests for input
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"task":{"taskId":"t"},"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"task","content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","content":[]}}"#,
            // members of other results or messages
            r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[],"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","result":{"content":[]}}"#,
            // no member rmcp requires
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"_meta":{}}}"#,
            // not JSON-RPC 2.0, not this shape, not JSON
            r#"{"jsonrpc":"1.0","id":7,"result":{"content":[]}}"#,
            r#"{"id":7,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":"text"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"nope"}]}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}"#,
            "",
        ];
        for other in others {
            assert!(call_answer(other.as_bytes(), &id(7)).is_none(), "{other}");
        }
    }

    fn event(data: &str) -> Sse {
        Sse::default().data(data)
    }

    const ANSWER: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
    const PROGRESS: &str = concat!(
        r#"{"jsonrpc":"2.0","method":"notifications/progress","#,
        r#""params":{"progressToken":1,"progress":1}}"#
    );

    fn events(list: Vec<Result<Sse, SseError>>) -> BoxStream<'static, Result<Sse, SseError>> {
        stream::iter(list).boxed()
    }

    async fn rest(found: FirstEvent) -> Vec<Result<Sse, String>> {
        let FirstEvent::Stream(stream) = found else {
            panic!("the answer was taken from a stream that had to go to rmcp");
        };
        stream.map(|e| e.map_err(|e| e.to_string())).collect().await
    }

    #[tokio::test]
    async fn the_answer_first_after_priming_is_taken() {
        let priming = Sse::default().id("0").retry(3000);
        let found = first_answer(events(vec![Ok(priming), Ok(event(ANSWER))]), &id(7)).await;
        let FirstEvent::Answer(answer) = found else {
            panic!("the answer was left to rmcp");
        };
        assert_eq!(call_result(answer), rmcp_decodes(ANSWER));
    }

    /// The stream is not waited for after the answer (its rest is drained on a task).
    #[tokio::test]
    async fn the_answer_is_taken_before_the_stream_ends() {
        let open = stream::iter(vec![Ok(event(ANSWER)), Ok(event(PROGRESS))])
            .chain(stream::pending())
            .boxed();
        let found = tokio::time::timeout(Duration::from_secs(5), first_answer(open, &id(7)))
            .await
            .expect("the answer is returned while the stream stays open");
        assert!(matches!(found, FirstEvent::Answer(_)));
    }

    /// A call that takes longer than [`WAIT_FOR_ANSWER`] goes to rmcp (as every event-stream
    /// answer did before), so that it does not hold one of the transport's places for
    /// concurrent requests while it runs.
    #[tokio::test]
    async fn a_slow_answer_is_left_to_rmcp() {
        let priming = Sse::default().id("0");
        let slow = stream::iter(vec![Ok(priming.clone())])
            .chain(stream::pending())
            .boxed();
        let found = tokio::time::timeout(Duration::from_secs(5), first_answer(slow, &id(7)))
            .await
            .expect("the stream is handed on without its answer");
        let FirstEvent::Stream(mut stream) = found else {
            panic!("no answer came");
        };
        let first = stream.next().await.expect("an event").expect("ok");
        assert_eq!(first, priming);
        assert!(
            stream.next().now_or_never().is_none(),
            "the rest is still open"
        );
    }

    /// Progress, another call's answer, an error, an event of another type or the end before
    /// any message: rmcp gets every event read, in order, then the rest.
    #[tokio::test]
    async fn anything_else_first_goes_to_rmcp_whole() {
        let priming = Sse::default().id("0");
        let cases = vec![
            vec![Ok(priming.clone()), Ok(event(PROGRESS)), Ok(event(ANSWER))],
            vec![
                Ok(event(&ANSWER.replace("\"id\":7", "\"id\":8"))),
                Ok(event(ANSWER)),
            ],
            vec![
                Ok(Sse::default().event("endpoint").data(ANSWER)),
                Ok(event(ANSWER)),
            ],
            vec![
                Ok(priming.clone()),
                Ok(event("not json")),
                Ok(event(ANSWER)),
            ],
            vec![Ok(priming.clone())],
        ];
        for case in cases {
            let expected: Vec<Result<Sse, String>> = case
                .iter()
                .map(|e| Ok(e.as_ref().expect("ok").clone()))
                .collect();
            let found = first_answer(events(case), &id(7)).await;
            assert_eq!(rest(found).await, expected);
        }
        let failing = vec![
            Ok(priming.clone()),
            Err(SseError::InvalidLine),
            Ok(event(ANSWER)),
        ];
        let found = first_answer(events(failing), &id(7)).await;
        assert_eq!(
            rest(found).await,
            vec![
                Ok(priming),
                Err(SseError::InvalidLine.to_string()),
                Ok(event(ANSWER)),
            ]
        );
    }
}
