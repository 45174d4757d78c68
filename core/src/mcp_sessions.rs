//! The MCP sessions of the 2025 eras: the `Mcp-Session-Id` `initialize` hands out belongs to
//! the principal that initialized, in the database so that every node decides alike. It ends
//! after [`IDLE_MS`] without a request or when its client deletes it, and a principal keeps at
//! most [`PER_PRINCIPAL`] (the least recently used go first). An id that is not one of the
//! caller's live sessions — made up, another principal's, ended — names no session (the
//! surface answers 404).

use crate::error::ServiceError;
use crate::principal::Principal;
use crate::relay::Abilities;
use crate::store::{self, Store};
use crate::upstream::LogLevel;

/// How long a session lives without a request.
pub const IDLE_MS: i64 = 30 * 60 * 1000;
/// Sessions one principal keeps.
pub const PER_PRINCIPAL: i64 = 64;
/// A session's last use is written at most this often (a request in between reads only).
const TOUCH_EVERY_MS: i64 = 60 * 1000;

/// Opens a session for `principal`, whose client declared `abilities`: its new id.
pub async fn open(
    store: &Store,
    principal: &Principal,
    abilities: Abilities,
) -> Result<String, ServiceError> {
    let id = crate::ids::new_id("mcp");
    store::mcp_sessions::open(
        store,
        &id,
        &principal.tenant_id,
        principal.principal_id(),
        &abilities.to_text(),
        store::now_ms(),
        PER_PRINCIPAL,
    )
    .await?;
    Ok(id)
}

/// What a live session holds for its client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Session {
    /// What the client declared at `initialize` that it can do for servers.
    pub abilities: Abilities,
    /// The level `logging/setLevel` set; `None`: no log messages reach the client.
    pub log_level: Option<LogLevel>,
}

/// What `principal`'s live session `id` holds; `None` when `id` is not one of `principal`'s
/// live sessions. A use of it keeps it alive.
pub async fn live(
    store: &Store,
    principal: &Principal,
    id: &str,
) -> Result<Option<Session>, ServiceError> {
    let now = store::now_ms();
    let used =
        store::mcp_sessions::last_used(store, id, &principal.tenant_id, principal.principal_id())
            .await?;
    match used {
        Some((at, abilities, log_level)) if now - at <= IDLE_MS => {
            if now - at >= TOUCH_EVERY_MS {
                store::mcp_sessions::touch(store, id, now).await?;
            }
            Ok(Some(Session {
                abilities: Abilities::from_text(&abilities),
                log_level: log_level.as_deref().and_then(LogLevel::parse),
            }))
        }
        _ => Ok(None),
    }
}

/// Sets the log level of `principal`'s live session `id` (`logging/setLevel`); whether it is
/// one.
pub async fn set_log_level(
    store: &Store,
    principal: &Principal,
    id: &str,
    level: LogLevel,
) -> Result<bool, ServiceError> {
    if live(store, principal, id).await?.is_none() {
        return Ok(false);
    }
    Ok(store::mcp_sessions::set_log_level(
        store,
        id,
        &principal.tenant_id,
        principal.principal_id(),
        level.as_str(),
    )
    .await?)
}

/// Ends `principal`'s session `id`; whether it was theirs and live.
pub async fn close(store: &Store, principal: &Principal, id: &str) -> Result<bool, ServiceError> {
    if live(store, principal, id).await?.is_none() {
        return Ok(false);
    }
    let closed =
        store::mcp_sessions::close(store, id, &principal.tenant_id, principal.principal_id())
            .await?;
    // Its subscriptions end with it.
    store::subscriptions::delete_orphans(store).await?;
    Ok(closed)
}

/// Forgets the sessions idle longer than [`IDLE_MS`] at `now`, and their subscriptions.
pub async fn tidy(store: &Store, now: i64) -> Result<(), ServiceError> {
    store::mcp_sessions::delete_idle(store, now - IDLE_MS).await?;
    Ok(store::subscriptions::delete_orphans(store).await?)
}
