//! The 2025 wire's sessions: rmcp's in-memory sessions, and a stream the server closes
//! mid-call (SEP-1699, `server-sse-polling`).
//!
//! A server may end a request's SSE stream before the response and let the client poll: the
//! client reconnects with `GET` and `Last-Event-ID`, and the session replays what it missed.
//! rmcp's [`LocalSessionManager`] caches every event of a request's stream and replays it on
//! such a `GET`, but a handler cannot reach its own stream to close it. [`Sessions`] wraps the
//! manager and ends the stream of a `test_reconnection` call after its first event, the priming
//! event (an id and no data, sent first on every stream): what the tool sends later is cached
//! and delivered on the client's reconnection.

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};

/// The tool whose stream is closed mid-call.
const RECONNECTION_TOOL: &str = "test_reconnection";

/// The reconnection delay each stream's priming event names (rmcp's default is 3 s). rmcp's
/// sessions resume a request's stream only until its response is sent, and a client honors
/// the delay before it resumes: `test_reconnection`'s stream, closed mid-call, must be
/// resumable before its result (`RECONNECTION_WORK` later) is sent, whoever the client is.
const SSE_RETRY: Duration = Duration::from_millis(100);

/// rmcp's in-memory sessions, closing `test_reconnection`'s stream after its priming event.
pub struct Sessions {
    inner: LocalSessionManager,
}

impl Default for Sessions {
    fn default() -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.sse_retry = Some(SSE_RETRY);
        Self { inner }
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let closes_mid_call = is_reconnection_call(&message);
        let stream = self.inner.create_stream(id, message).await?;
        Ok(if closes_mid_call {
            // The priming event only; the rest waits in the session's cache for the client.
            stream.take(1).left_stream()
        } else {
            stream.right_stream()
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }

    fn event_store(&self) -> Option<std::sync::Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// Whether `message` calls the tool whose stream is closed mid-call.
fn is_reconnection_call(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        message,
        ClientJsonRpcMessage::Request(request)
            if matches!(
                &request.request,
                ClientRequest::CallToolRequest(call) if call.params.name == RECONNECTION_TOOL
            )
    )
}
