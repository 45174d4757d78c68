//! What an upstream offers besides tools: resources, resource templates and prompts (listed
//! every page, bounded like tools), and reading, getting and completing them under a deadline.
//! Every listed item and every answer is handed on as the JSON the upstream sent (the catalog
//! and the gateway decide what of it goes further); errors are scrubbed of the upstream's
//! secrets like a call's.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{
    ClientRequest, CompleteRequestParams, GetPromptRequest, GetPromptRequestParams,
    GetPromptResponse, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerResult, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::PeerRequestOptions;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Connection, MAX_LIST_PAGES};
use crate::sync::lock;
use crate::upstream::UpstreamError;

/// At most this many resources, templates or prompts in one listing.
const MAX_ITEMS: usize = 10_000;

/// What the upstream declared it serves (its `initialize` capabilities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    pub resources: bool,
    pub prompts: bool,
    pub completions: bool,
    /// `resources.subscribe`.
    pub subscribe: bool,
}

impl Connection {
    /// What the upstream declared it serves besides tools.
    pub fn offers(&self) -> Offers {
        let Some(info) = self.peer.peer_info() else {
            return Offers::default();
        };
        let caps = &info.capabilities;
        Offers {
            resources: caps.resources.is_some(),
            prompts: caps.prompts.is_some(),
            completions: caps.completions.is_some(),
            subscribe: caps
                .resources
                .as_ref()
                .and_then(|r| r.subscribe)
                .unwrap_or(false),
        }
    }

    /// Every resource the upstream lists (`resources/list`, every page), as sent.
    pub async fn list_resources(&self) -> Result<Vec<Value>, UpstreamError> {
        self.list_items("resources/list", |params| async move {
            let page = self.peer.list_resources(params).await?;
            Ok((to_values(&page.resources), page.next_cursor))
        })
        .await
    }

    /// Every resource template (`resources/templates/list`, every page), as sent.
    pub async fn list_resource_templates(&self) -> Result<Vec<Value>, UpstreamError> {
        self.list_items("resources/templates/list", |params| async move {
            let page = self.peer.list_resource_templates(params).await?;
            Ok((to_values(&page.resource_templates), page.next_cursor))
        })
        .await
    }

    /// Every prompt (`prompts/list`, every page), as sent.
    pub async fn list_prompts(&self) -> Result<Vec<Value>, UpstreamError> {
        self.list_items("prompts/list", |params| async move {
            let page = self.peer.list_prompts(params).await?;
            Ok((to_values(&page.prompts), page.next_cursor))
        })
        .await
    }

    /// Follows `nextCursor` to the last page within the connection's timeout, bounded in
    /// pages and items; a repeated cursor is a broken upstream.
    async fn list_items<'a, F, Fut>(
        &'a self,
        method: &str,
        mut page: F,
    ) -> Result<Vec<Value>, UpstreamError>
    where
        F: FnMut(Option<PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<(Vec<Value>, Option<String>), ServiceError>> + 'a,
    {
        let protocol = |reason: String| UpstreamError::Protocol { reason };
        let all = async {
            let mut items = Vec::new();
            let mut cursor: Option<String> = None;
            let mut seen = HashSet::new();
            for _ in 0..MAX_LIST_PAGES {
                let params = cursor
                    .take()
                    .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
                let (listed, next) = page(params)
                    .await
                    .map_err(|e| self.service_error(e, method))?;
                items.extend(listed);
                if items.len() > MAX_ITEMS {
                    return Err(protocol(format!(
                        "{method}: the upstream lists over {MAX_ITEMS} items"
                    )));
                }
                match next {
                    None => return Ok(items),
                    Some(next) if !seen.insert(next.clone()) => {
                        return Err(protocol(format!("{method} repeated a cursor")));
                    }
                    Some(next) => cursor = Some(next),
                }
            }
            Err(protocol(format!(
                "{method} did not end within {MAX_LIST_PAGES} pages"
            )))
        };
        tokio::time::timeout(self.request_timeout, all)
            .await
            .map_err(|_| UpstreamError::Timeout {
                after: self.request_timeout,
            })?
    }

    /// `resources/read` of `uri` (normalised by the caller): the result as sent.
    pub async fn read_resource(
        &self,
        uri: &str,
        deadline: Duration,
    ) -> Result<Value, UpstreamError> {
        let params: ReadResourceRequestParams = from_json(json!({"uri": uri}))?;
        let read = tokio::time::timeout(deadline, self.peer.read_resource_once(params))
            .await
            .map_err(|_| UpstreamError::Timeout { after: deadline })?;
        match read {
            Ok(ReadResourceResponse::Complete(result)) => to_json(&result),
            Ok(_) => Err(UpstreamError::Protocol {
                reason: "the upstream asked for client input to read a resource, which Aperture \
                         does not relay"
                    .into(),
            }),
            Err(e) => Err(self.item_error(e, "resources/read")),
        }
    }

    /// Subscribes this connection to `notifications/resources/updated` of `uri` (as the
    /// upstream lists it), once: a URI it already subscribed to is not asked again.
    #[expect(
        deprecated,
        reason = "upstream connections speak the 2025 eras, where resources/subscribe is the way"
    )]
    pub async fn subscribe(&self, uri: &str) -> Result<(), UpstreamError> {
        if lock(&self.subscribed).contains(uri) {
            return Ok(());
        }
        let params: SubscribeRequestParams = from_json(json!({"uri": uri}))?;
        tokio::time::timeout(self.request_timeout, self.peer.subscribe(params))
            .await
            .map_err(|_| UpstreamError::Timeout {
                after: self.request_timeout,
            })?
            .map_err(|e| self.item_error(e, "resources/subscribe"))?;
        lock(&self.subscribed).insert(uri.to_owned());
        Ok(())
    }

    /// Ends this connection's subscription to `uri`, if it has one.
    #[expect(
        deprecated,
        reason = "upstream connections speak the 2025 eras, where resources/subscribe is the way"
    )]
    pub async fn unsubscribe(&self, uri: &str) -> Result<(), UpstreamError> {
        if !lock(&self.subscribed).remove(uri) {
            return Ok(());
        }
        let params: UnsubscribeRequestParams = from_json(json!({"uri": uri}))?;
        tokio::time::timeout(self.request_timeout, self.peer.unsubscribe(params))
            .await
            .map_err(|_| UpstreamError::Timeout {
                after: self.request_timeout,
            })?
            .map_err(|e| self.item_error(e, "resources/unsubscribe"))
    }

    /// The URIs of the upstream's `notifications/resources/updated` from now on, as sent.
    pub fn resources_updated(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.resources_updated.subscribe()
    }

    /// `prompts/get` of the prompt the upstream lists as `raw_name`: the result as sent. With
    /// `round` (a 2026-07-28 client that can be asked), over the 2026-07-28 link when the
    /// upstream has one, where an `input_required` answer is the result (`resultType:
    /// "input_required"`, to be relayed).
    pub async fn get_prompt(
        &self,
        raw_name: &str,
        arguments: Option<Map<String, Value>>,
        deadline: Duration,
        round: Option<super::StatelessRound>,
    ) -> Result<Value, UpstreamError> {
        let mut params: GetPromptRequestParams =
            from_json(json!({"name": raw_name, "arguments": arguments}))?;
        let link = match &round {
            Some(_) => self.stateless().await,
            None => None,
        };
        let got = match (link, round) {
            (Some(link), Some(round)) => {
                params.input_responses = round.responses.clone().map(|r| r.into_iter().collect());
                params.request_state = round.state.clone();
                let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
                let options = PeerRequestOptions::no_options().with_meta(round.meta());
                let asked = async {
                    let handle = link.peer.send_request_with_option(request, options).await?;
                    match handle.await_response().await? {
                        ServerResult::GetPromptResult(r) => Ok(GetPromptResponse::Complete(r)),
                        ServerResult::InputRequiredResult(r) => {
                            Ok(GetPromptResponse::InputRequired(r))
                        }
                        _ => Err(ServiceError::UnexpectedResponse),
                    }
                };
                match tokio::time::timeout(deadline, asked).await {
                    Ok(Ok(GetPromptResponse::InputRequired(r))) => return to_json(&r),
                    other => other,
                }
            }
            _ => tokio::time::timeout(deadline, self.peer.get_prompt_once(params)).await,
        }
        .map_err(|_| UpstreamError::Timeout { after: deadline })?;
        match got {
            Ok(GetPromptResponse::Complete(result)) => to_json(&result),
            Ok(_) => Err(UpstreamError::Protocol {
                reason: "the upstream asked for client input to get a prompt outside an input \
                         round"
                    .into(),
            }),
            Err(e) => Err(self.item_error(e, "prompts/get")),
        }
    }

    /// `completion/complete` with `params` (`ref`, `argument`, `context?`, the reference
    /// already rewritten to the upstream's own names): the result as sent.
    pub async fn complete(
        &self,
        params: Value,
        deadline: Duration,
    ) -> Result<Value, UpstreamError> {
        let params: CompleteRequestParams = from_json(params)?;
        let done = tokio::time::timeout(deadline, self.peer.complete(params))
            .await
            .map_err(|_| UpstreamError::Timeout { after: deadline })?;
        match done {
            Ok(result) => to_json(&result),
            Err(e) => Err(self.item_error(e, "completion/complete")),
        }
    }

    /// An upstream's JSON-RPC error answer as what it is (not found, invalid), scrubbed;
    /// anything else as [`Connection::service_error`].
    fn item_error(&self, error: ServiceError, method: &str) -> UpstreamError {
        match error {
            ServiceError::McpError(error) => UpstreamError::Tool {
                code: error.code.0,
                message: self.scrubber.scrub(&error.message),
            },
            other => self.service_error(other, method),
        }
    }
}

fn to_values<T: Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|i| serde_json::to_value(i).ok())
        .collect()
}

fn to_json<T: Serialize>(value: &T) -> Result<Value, UpstreamError> {
    serde_json::to_value(value).map_err(|e| UpstreamError::Protocol {
        reason: format!("the answer does not serialize: {e}"),
    })
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, UpstreamError> {
    serde_json::from_value(value).map_err(|e| UpstreamError::Protocol {
        reason: format!("the request is not one MCP accepts: {e}"),
    })
}
