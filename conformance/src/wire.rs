//! Which of the two protocol wires a request arrived on, and what each wire expects of a result.
//!
//! The same URL serves both: the 2025 stateful wire (an `initialize` handshake, then requests
//! inside an `Mcp-Session-Id` session) and the 2026-07-28 stateless wire (every request carries
//! its protocol version, client info and capabilities in `_meta`). rmcp routes each request and
//! tells the handler the version through its [`RequestContext`].

use rmcp::RoleServer;
use rmcp::model::{
    CacheScope, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, ProtocolVersion, ReadResourceResult,
};
use rmcp::service::RequestContext;

/// How long a list or read result may be cached on the stateless wire (SEP-2549): the fixtures
/// never change while the server runs.
const CACHE_TTL_MS: u64 = 300_000;

/// The wire of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// 2025-03-26 to 2025-11-25: a session, server-to-client requests on its streams.
    Session,
    /// 2026-07-28: no session; the server asks for input with an `InputRequiredResult`.
    Stateless,
}

impl Wire {
    /// The wire `context`'s request arrived on.
    pub fn of(context: &RequestContext<RoleServer>) -> Self {
        let stateless = context
            .protocol_version()
            .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if stateless {
            Wire::Stateless
        } else {
            Wire::Session
        }
    }

    /// `result` with the caching hints this wire wants: `ttlMs` and `cacheScope` are required
    /// on list and read results at 2026-07-28, and unknown before it.
    pub fn cacheable<R: CacheHints>(self, result: R, scope: CacheScope) -> R {
        match self {
            Wire::Session => result,
            Wire::Stateless => result.with_hints(CACHE_TTL_MS, scope),
        }
    }
}

/// A result that may carry SEP-2549 caching hints.
pub trait CacheHints {
    /// The result, fresh for `ttl_ms` milliseconds to caches of `scope`.
    fn with_hints(self, ttl_ms: u64, scope: CacheScope) -> Self;
}

/// Implements [`CacheHints`] through the builders every cacheable rmcp result has.
macro_rules! cache_hints {
    ($($result:ty),*) => {$(
        impl CacheHints for $result {
            fn with_hints(self, ttl_ms: u64, scope: CacheScope) -> Self {
                self.with_ttl_ms(ttl_ms).with_cache_scope(scope)
            }
        }
    )*};
}

cache_hints!(
    ListToolsResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ReadResourceResult
);
