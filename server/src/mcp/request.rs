//! A `/mcp` message, parsed once: the JSON-RPC envelope read into a [`Message`], its method
//! into a [`Method`]. `params` stay the JSON they arrived as — a call's `arguments` and `_meta`
//! are what `args_hash` covers and what is forwarded, so nothing is re-serialized on the way.
//!
//! A client's answer to a request of the gateway's (sampling, elicitation, roots) is a
//! [`Message::Response`], a notification a [`Message::Notification`]; a method the gateway
//! serves is one [`Method`], dispatched once.

use serde_json::Value;

use super::{INVALID_REQUEST, PARSE_ERROR, error};

/// The methods `/mcp` answers (notifications aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Initialize,
    Ping,
    Discover,
    ToolsList,
    ToolsCall,
    ResourcesList,
    ResourcesTemplatesList,
    ResourcesRead,
    ResourcesSubscribe,
    ResourcesUnsubscribe,
    PromptsList,
    PromptsGet,
    CompletionComplete,
    LoggingSetLevel,
    SubscriptionsListen,
    TasksGet,
    TasksResult,
    TasksCancel,
    TasksList,
    TasksUpdate,
}

impl Method {
    /// Every method, in the order the contract lists them.
    pub const ALL: [Method; 20] = [
        Method::Initialize,
        Method::Ping,
        Method::Discover,
        Method::ToolsList,
        Method::ToolsCall,
        Method::ResourcesList,
        Method::ResourcesTemplatesList,
        Method::ResourcesRead,
        Method::ResourcesSubscribe,
        Method::ResourcesUnsubscribe,
        Method::PromptsList,
        Method::PromptsGet,
        Method::CompletionComplete,
        Method::LoggingSetLevel,
        Method::SubscriptionsListen,
        Method::TasksGet,
        Method::TasksResult,
        Method::TasksCancel,
        Method::TasksList,
        Method::TasksUpdate,
    ];

    /// The method's name on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            Method::Initialize => "initialize",
            Method::Ping => "ping",
            Method::Discover => "server/discover",
            Method::ToolsList => "tools/list",
            Method::ToolsCall => "tools/call",
            Method::ResourcesList => "resources/list",
            Method::ResourcesTemplatesList => "resources/templates/list",
            Method::ResourcesRead => "resources/read",
            Method::ResourcesSubscribe => "resources/subscribe",
            Method::ResourcesUnsubscribe => "resources/unsubscribe",
            Method::PromptsList => "prompts/list",
            Method::PromptsGet => "prompts/get",
            Method::CompletionComplete => "completion/complete",
            Method::LoggingSetLevel => "logging/setLevel",
            Method::SubscriptionsListen => "subscriptions/listen",
            Method::TasksGet => "tasks/get",
            Method::TasksResult => "tasks/result",
            Method::TasksCancel => "tasks/cancel",
            Method::TasksList => "tasks/list",
            Method::TasksUpdate => "tasks/update",
        }
    }

    /// The method named `name`, if `/mcp` serves it.
    pub fn parse(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The names of [`Method::ALL`].
pub const NAMES: [&str; Method::ALL.len()] = {
    let mut names = [""; Method::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Method::ALL[i].name();
        i += 1;
    }
    names
};

/// One message a client posted.
#[derive(Debug)]
pub enum Message {
    /// A request: it is answered.
    Request(Request),
    /// A notification (no `id`): never answered.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// An `id` without a method: a client's answer to a request of the server's (its `result`
    /// or its `error`), or garbage (neither).
    Response {
        id: Value,
        result: Option<Value>,
        error: Option<Value>,
    },
    /// Neither an `id` nor a method: nothing to answer.
    Empty,
}

/// A request as it arrived.
#[derive(Debug)]
pub struct Request {
    /// The client's id, as sent.
    pub id: Value,
    /// The method as named (it may be one `/mcp` does not serve: [`Method::parse`]).
    pub method: String,
    /// The params, as sent (absent: none).
    pub params: Option<Value>,
}

/// Reads a posted body. Not JSON, not one JSON object, or a method under another `jsonrpc`
/// than `"2.0"`: the JSON-RPC error that answers it.
pub fn parse(body: &[u8]) -> Result<Message, Value> {
    let message: Value = serde_json::from_slice(body)
        .map_err(|e| error(&Value::Null, PARSE_ERROR, format!("not JSON: {e}")))?;
    let Value::Object(mut obj) = message else {
        return Err(error(
            &Value::Null,
            INVALID_REQUEST,
            "batches and non-objects are not accepted",
        ));
    };
    let id = obj.remove("id");
    // Taken, not copied: a call's arguments and `_meta` are read from here on.
    let params = obj.remove("params");
    let method = match obj.remove("method") {
        Some(Value::String(method)) => method,
        _ => {
            return Ok(match id {
                Some(id) => Message::Response {
                    id,
                    result: obj.remove("result"),
                    error: obj.remove("error"),
                },
                None => Message::Empty,
            });
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error(
            &id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "jsonrpc must be \"2.0\"",
        ));
    }
    Ok(match id {
        Some(id) => Message::Request(Request { id, method, params }),
        None => Message::Notification { method, params },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_method_round_trips_by_name() {
        for method in Method::ALL {
            assert_eq!(Method::parse(method.name()), Some(method));
        }
        assert_eq!(NAMES.len(), Method::ALL.len());
        assert_eq!(Method::parse("resources/watch"), None);
    }

    #[test]
    fn the_envelope_is_read_once_and_params_stay_as_sent() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"b":1.50,"a":[]}}}"#;
        let Ok(Message::Request(request)) = parse(body) else {
            panic!("a request");
        };
        assert_eq!(request.id, json!(7));
        assert_eq!(request.method, "tools/call");
        assert_eq!(
            request.params,
            Some(json!({"name": "t", "arguments": {"b": 1.5, "a": []}}))
        );
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#),
            Ok(Message::Notification { .. })
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Ok(Message::Response { .. })
        ));
        assert!(matches!(parse(b"{}"), Ok(Message::Empty)));
        let refused = |body: &[u8]| parse(body).err().map(|e| e["error"]["code"].clone());
        assert_eq!(refused(b"not json"), Some(json!(PARSE_ERROR)));
        assert_eq!(refused(b"[]"), Some(json!(INVALID_REQUEST)));
        assert_eq!(
            refused(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            Some(json!(INVALID_REQUEST))
        );
    }
}
