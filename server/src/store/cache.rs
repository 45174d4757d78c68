//! What a `tools/call` reads, kept in memory and trusted only while the store says nothing it
//! depends on changed.
//!
//! A call needs its bearer token's row, the grant it presents (the manifest — immutable once
//! signed — and its session) and the tool's catalog row with its upstream. Reading and parsing
//! those per call costs several database round trips and a JSON parse of the whole manifest. Instead a call first
//! reads one counter, `read_generation`, which database triggers move in the same transaction
//! as any change to tokens, tools, upstreams, session revocations or removed manifests — whoever
//! makes
//! it: this server, another node on the same PostgreSQL, the command line. When the counter is
//! the one the cache was filled at, every entry still describes the store; when it moved, the
//! cache is emptied and refilled from the store as calls need entries.
//!
//! Order matters for correctness: the counter is read *before* anything is loaded, and an
//! entry is only kept when the counter has not moved since ([`Fresh`] carries the generation
//! the loader saw). A change that lands while an entry is loaded moves the counter, so the next
//! call's read discards the entry even if it was loaded from the older state.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use engine::catalog::CatalogTool;
use engine::descriptor::ToolSource;
use engine::fork::ExecutionAllowlist;
use engine::manifest::Manifest;

use super::exposure::SessionRow;
use super::tokens::TokenRow;
use super::upstreams::UpstreamRow;
use super::{Store, catalog, exposure, tokens, upstreams};

/// Entries kept per kind; a full map is emptied rather than tracked entry by entry.
const CAPACITY: usize = 16_384;

/// A grant as a call needs it: the manifest row's binding, its parsed manifest, its session.
#[derive(Debug)]
pub struct Grant {
    /// `man_…`
    pub manifest_id: String,
    /// `lea_…`
    pub lease_id: String,
    /// Epoch ms.
    pub lease_expires_at: i64,
    /// The engine's manifest; `None` when the stored JSON does not parse (the call is refused).
    pub manifest: Option<Manifest>,
    /// The session the manifest was granted in, if it still exists.
    pub session: Option<SessionRow>,
    /// The fork's execution allowlist: `Ok(None)` unrestricted, `Err` when the stored list no
    /// longer parses (the call is refused, never treated as unrestricted).
    pub allowlist: Result<Option<ExecutionAllowlist>, ()>,
}

/// A catalog tool with its upstream, as a call needs it.
#[derive(Debug)]
pub struct Tool {
    /// The tool and its fingerprints.
    pub tool: CatalogTool,
    /// Its upstream (MCP tools whose upstream is registered).
    pub upstream: Option<UpstreamRow>,
}

/// An API token's row. `last_used_at` is not part of what the counter follows (it is noted
/// at most once a minute, [`tokens::touch`]), so the entry keeps its own copy up to date.
#[derive(Debug)]
pub struct Token {
    /// The row as read.
    pub row: TokenRow,
    last_used_at: AtomicI64,
}

impl Token {
    /// When the token was last noted as used (epoch ms), if ever.
    pub fn last_used_at(&self) -> Option<i64> {
        Some(self.last_used_at.load(Ordering::Relaxed)).filter(|at| *at > 0)
    }

    /// Records that `last_used_at` was just written as `at`.
    pub fn used_at(&self, at: i64) {
        self.last_used_at.fetch_max(at, Ordering::Relaxed);
    }
}

/// The generation the cache is read at, and whether the store's counter was read to confirm it
/// ([`fresh`]) or it is the generation the cache last saw, to be confirmed when the decision is
/// journaled ([`assumed`]).
#[derive(Debug, Clone, Copy)]
pub struct Fresh {
    generation: i64,
    verified: bool,
}

impl Fresh {
    /// The generation, when the store's counter must still be found at it for what was read
    /// to count: the journal checks it in the transaction that records the decision.
    pub fn unconfirmed(&self) -> Option<i64> {
        (!self.verified).then_some(self.generation)
    }
}

#[derive(Default)]
struct Entries {
    /// Generation the entries were loaded at; `None` before the first read.
    generation: Option<i64>,
    tokens: HashMap<String, Arc<Token>>,
    grants: HashMap<(String, String), Arc<Grant>>,
    tools: HashMap<(String, String), Arc<Tool>>,
}

/// The cache itself, shared by the clones of a [`Store`].
#[derive(Default)]
pub struct ReadCache {
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCache").finish_non_exhaustive()
    }
}

impl ReadCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The entries are plain maps: a panic while one was held leaves nothing half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An entry, only when the cache holds the generation the caller read.
    fn hit<T>(&self, fresh: &Fresh, get: impl FnOnce(&Entries) -> Option<T>) -> Option<T> {
        let entries = self.lock();
        if entries.generation == Some(fresh.generation) {
            get(&entries)
        } else {
            None
        }
    }
}

fn keep<K: Eq + Hash, V>(map: &mut HashMap<K, V>, key: K, value: V) {
    if map.len() >= CAPACITY {
        map.clear();
    }
    map.insert(key, value);
}

/// Reads the store's counter and empties the cache when it moved. Every cached read of a
/// request goes through the [`Fresh`] this returns.
pub async fn fresh(store: &Store) -> Result<Fresh, sqlx::Error> {
    let (generation,): (i64,) =
        sqlx::query_as("SELECT generation FROM read_generation WHERE id = 1")
            .fetch_one(store.pool())
            .await?;
    let mut entries = store.cache().lock();
    // The counter only grows; a request that read an older value than another one already
    // moved the cache to keeps the cache as it is (its reads miss and go to the store).
    if entries.generation.is_none_or(|g| g < generation) {
        entries.tokens.clear();
        entries.grants.clear();
        entries.tools.clear();
        entries.generation = Some(generation);
    }
    Ok(Fresh {
        generation,
        verified: true,
    })
}

/// The generation the cache holds, without asking the store: what is read under it counts only
/// once the store's counter is found unchanged, which the journal checks in the transaction that
/// records the decision ([`Fresh::unconfirmed`]). A call saves a round trip this way; one that
/// meets a moved counter is decided again under [`fresh`]. `None` before the cache was ever
/// filled.
pub fn assumed(store: &Store) -> Option<Fresh> {
    store.cache().lock().generation.map(|generation| Fresh {
        generation,
        verified: false,
    })
}

/// Confirms an assumed generation by reading the store's counter: `Some` (confirmed) when it
/// has not moved, `None` when it has and what was read under it may be out of date.
pub async fn confirm(store: &Store, assumed: Fresh) -> Result<Option<Fresh>, sqlx::Error> {
    if assumed.verified {
        return Ok(Some(assumed));
    }
    let now = fresh(store).await?;
    Ok((now.generation == assumed.generation).then_some(now))
}

/// The token whose secret hashes to `secret_sha256`, or `None` when there is none.
pub async fn token(
    store: &Store,
    fresh: &Fresh,
    secret_sha256: &str,
) -> Result<Option<Arc<Token>>, sqlx::Error> {
    if let Some(hit) = store
        .cache()
        .hit(fresh, |e| e.tokens.get(secret_sha256).cloned())
    {
        return Ok(Some(hit));
    }
    let Some(row) = tokens::find_by_secret_hash(store, secret_sha256).await? else {
        return Ok(None);
    };
    let token = Arc::new(Token {
        last_used_at: AtomicI64::new(row.last_used_at.unwrap_or(0)),
        row,
    });
    let mut entries = store.cache().lock();
    if entries.generation == Some(fresh.generation) {
        keep(&mut entries.tokens, secret_sha256.to_owned(), token.clone());
    }
    Ok(Some(token))
}

/// The grant of manifest `manifest_id` of a tenant, or `None` when the tenant has no such
/// manifest.
pub async fn grant(
    store: &Store,
    fresh: &Fresh,
    tenant_id: &str,
    manifest_id: &str,
) -> Result<Option<Arc<Grant>>, sqlx::Error> {
    let key = (tenant_id.to_owned(), manifest_id.to_owned());
    if let Some(hit) = store.cache().hit(fresh, |e| e.grants.get(&key).cloned()) {
        return Ok(Some(hit));
    }
    let Some(row) = exposure::find_manifest(store, tenant_id, manifest_id).await? else {
        return Ok(None);
    };
    let session = exposure::find_session(store, tenant_id, &row.session_id).await?;
    let allowlist = match session.as_ref().and_then(|s| s.fork_tools.as_deref()) {
        None => Ok(None),
        Some(list) => serde_json::from_str::<ExecutionAllowlist>(list)
            .map(Some)
            .map_err(|_| ()),
    };
    let grant = Arc::new(Grant {
        manifest: serde_json::from_str(&row.manifest).ok(),
        manifest_id: row.id,
        lease_id: row.lease_id,
        lease_expires_at: row.lease_expires_at,
        session,
        allowlist,
    });
    let mut entries = store.cache().lock();
    if entries.generation == Some(fresh.generation) {
        keep(&mut entries.grants, key, grant.clone());
    }
    Ok(Some(grant))
}

/// A tenant's catalog tool `name` with its upstream, or `None` when the catalog lacks it.
pub async fn tool(
    store: &Store,
    fresh: &Fresh,
    tenant_id: &str,
    name: &str,
) -> Result<Option<Arc<Tool>>, sqlx::Error> {
    let key = (tenant_id.to_owned(), name.to_owned());
    if let Some(hit) = store.cache().hit(fresh, |e| e.tools.get(&key).cloned()) {
        return Ok(Some(hit));
    }
    let Some(found) = catalog::find_fingerprinted(store, tenant_id, name).await? else {
        return Ok(None);
    };
    let upstream = match &found.tool.source {
        ToolSource::Mcp { upstream_id, .. } => {
            upstreams::find(store, tenant_id, upstream_id).await?
        }
        _ => None,
    };
    let tool = Arc::new(Tool {
        tool: found,
        upstream,
    });
    let mut entries = store.cache().lock();
    if entries.generation == Some(fresh.generation) {
        keep(&mut entries.tools, key, tool.clone());
    }
    Ok(Some(tool))
}
