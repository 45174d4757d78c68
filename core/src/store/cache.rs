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
//!
//! The cache is bounded by bytes (`APERTURE_READ_CACHE_MIB`, `config::DEFAULT_READ_CACHE_BYTES`): each entry is
//! weighed when it is kept (the heap its parts take, estimated from their JSON form with
//! [`json_bytes`], which errs on the large side), and the least recently used entries go when a
//! new one does not fit. A cached grant keeps only the tools its manifest lists: a call of any
//! other tool is refused whether the manifest names it hidden or not at all (`not_callable`
//! either way), so a grant costs what it lists, not the catalog.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use engine::catalog::CatalogTool;
use engine::descriptor::ToolSource;
use engine::fork::ExecutionAllowlist;
use engine::manifest::Manifest;

use super::exposure::SessionRow;
use super::tokens::TokenRow;
use super::upstreams::UpstreamRow;
use super::{Store, catalog, exposure, tokens, upstreams};

/// What an entry costs besides its parts: the map's slot, the key, the `Arc` and the struct.
const ENTRY_OVERHEAD: usize = 256;

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

/// What the cache is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// A token by the SHA-256 of its secret.
    Token(String),
    /// A grant by tenant and manifest id.
    Grant(String, String),
    /// A catalog tool by tenant and name.
    Tool(String, String),
}

/// An entry.
#[derive(Debug, Clone)]
enum Entry {
    Token(Arc<Token>),
    Grant(Arc<Grant>),
    Tool(Arc<Tool>),
}

struct Entries {
    /// Generation the entries were loaded at; `None` before the first read.
    generation: Option<i64>,
    /// Least recently used first; each with its weight.
    lru: hashlink::LruCache<Key, (Entry, usize)>,
    /// The sum of the weights.
    bytes: usize,
}

impl Default for Entries {
    fn default() -> Self {
        Self {
            generation: None,
            lru: hashlink::LruCache::new_unbounded(),
            bytes: 0,
        }
    }
}

impl Entries {
    fn clear(&mut self) {
        self.lru.clear();
        self.bytes = 0;
    }

    /// Drops least recently used entries until they weigh at most `budget`.
    fn shrink_to(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some((_, (_, weight))) = self.lru.remove_lru() else {
                break;
            };
            self.bytes -= weight;
        }
    }
}

/// The cache itself, shared by the clones of a [`Store`].
pub struct ReadCache {
    entries: Mutex<Entries>,
    budget: AtomicUsize,
}

impl Default for ReadCache {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            budget: AtomicUsize::new(crate::config::DEFAULT_READ_CACHE_BYTES),
        }
    }
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCache").finish_non_exhaustive()
    }
}

impl ReadCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        crate::sync::lock(&self.entries)
    }

    /// Bounds the cache to `bytes` (entries beyond it go, least recently used first).
    pub fn set_budget(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
        self.lock().shrink_to(bytes);
    }

    /// What the entries weigh, and how many there are.
    pub fn usage(&self) -> (usize, usize) {
        let entries = self.lock();
        (entries.bytes, entries.lru.len())
    }

    /// An entry, only when the cache holds the generation the caller read (it is then the
    /// most recently used).
    fn hit(&self, fresh: &Fresh, key: &Key) -> Option<Entry> {
        let mut entries = self.lock();
        if entries.generation == Some(fresh.generation) {
            entries.lru.get(key).map(|(entry, _)| entry.clone())
        } else {
            None
        }
    }

    /// Keeps `entry` (weighing `weight`) when the cache still holds `fresh`'s generation,
    /// making room by dropping the least recently used entries; one heavier than the whole
    /// budget is not kept.
    fn keep(&self, fresh: &Fresh, key: Key, entry: Entry, weight: usize) {
        let budget = self.budget.load(Ordering::Relaxed);
        if weight > budget {
            return;
        }
        let mut entries = self.lock();
        if entries.generation != Some(fresh.generation) {
            return;
        }
        if let Some((_, old)) = entries.lru.insert(key, (entry, weight)) {
            entries.bytes -= old;
        }
        entries.bytes += weight;
        entries.shrink_to(budget);
    }
}

/// Heap bytes of a JSON value as `serde_json` holds it (strings, arrays of values, maps with a
/// key, a value and a share of a tree node per entry): the weight of what an entry keeps in a
/// parsed or typed form, which takes no more.
pub fn json_bytes(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    const VALUE: usize = std::mem::size_of::<Value>();
    const MAP_ENTRY: usize = 24 + VALUE + 16;
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => s.len(),
        Value::Array(items) => items.len() * VALUE + items.iter().map(json_bytes).sum::<usize>(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| MAP_ENTRY + k.len() + json_bytes(v))
            .sum(),
    }
}

/// The weight of a part that serializes: its JSON form's heap bytes.
fn weigh(part: &impl serde::Serialize) -> usize {
    serde_json::to_value(part).map_or(4096, |v| json_bytes(&v))
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
        entries.clear();
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
    let key = Key::Token(secret_sha256.to_owned());
    if let Some(Entry::Token(hit)) = store.cache().hit(fresh, &key) {
        return Ok(Some(hit));
    }
    let Some(row) = tokens::find_by_secret_hash(store, secret_sha256).await? else {
        return Ok(None);
    };
    let r = &row;
    let weight = ENTRY_OVERHEAD
        + secret_sha256.len()
        + [&r.id, &r.tenant_id, &r.actor_id, &r.created_by]
            .iter()
            .map(|s| s.len())
            .sum::<usize>()
        + r.name.as_ref().map_or(0, String::len)
        + r.scopes
            .iter()
            .chain(&r.environments)
            .map(|s| 24 + s.len())
            .sum::<usize>();
    let token = Arc::new(Token {
        last_used_at: AtomicI64::new(row.last_used_at.unwrap_or(0)),
        row,
    });
    store
        .cache()
        .keep(fresh, key, Entry::Token(token.clone()), weight);
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
    let key = Key::Grant(tenant_id.to_owned(), manifest_id.to_owned());
    if let Some(Entry::Grant(hit)) = store.cache().hit(fresh, &key) {
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
    // Only what the manifest lists: a call of anything else is refused alike.
    let manifest = serde_json::from_str::<Manifest>(&row.manifest)
        .ok()
        .map(|mut m| {
            m.tools.retain(|e| e.mode.is_listed());
            // Without this the vector keeps room for every catalog tool (each entry is
            // several hundred bytes inline), which is what the soak found.
            m.tools.shrink_to_fit();
            m
        });
    let weight = ENTRY_OVERHEAD
        + manifest.as_ref().map_or(0, |m| {
            m.tools.capacity() * std::mem::size_of::<engine::manifest::ManifestEntry>()
                + weigh(&m.tools)
                + weigh(&m.context)
                + m.policy_id.len()
        })
        + session.as_ref().map_or(0, |s| {
            ENTRY_OVERHEAD + s.fork_tools.as_ref().map_or(0, |f| 2 * f.len())
        })
        + row.id.len()
        + row.lease_id.len();
    let grant = Arc::new(Grant {
        manifest,
        manifest_id: row.id,
        lease_id: row.lease_id,
        lease_expires_at: row.lease_expires_at,
        session,
        allowlist,
    });
    store
        .cache()
        .keep(fresh, key, Entry::Grant(grant.clone()), weight);
    Ok(Some(grant))
}

/// A tenant's catalog tool `name` with its upstream, or `None` when the catalog lacks it.
pub async fn tool(
    store: &Store,
    fresh: &Fresh,
    tenant_id: &str,
    name: &str,
) -> Result<Option<Arc<Tool>>, sqlx::Error> {
    let key = Key::Tool(tenant_id.to_owned(), name.to_owned());
    if let Some(Entry::Tool(hit)) = store.cache().hit(fresh, &key) {
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
    let weight = ENTRY_OVERHEAD
        + weigh(&found.tool)
        + upstream.as_ref().map_or(0, |u| {
            ENTRY_OVERHEAD + u.spec.len() + u.endpoint.len() + u.name.len() + u.fingerprint.len()
        });
    let tool = Arc::new(Tool {
        tool: found,
        upstream,
    });
    store
        .cache()
        .keep(fresh, key, Entry::Tool(tool.clone()), weight);
    Ok(Some(tool))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str) -> Entry {
        Entry::Token(Arc::new(Token {
            row: TokenRow {
                id: id.into(),
                tenant_id: "t".into(),
                actor_id: "a".into(),
                name: None,
                scopes: vec![],
                created_by: "ops".into(),
                created_by_actor: None,
                created_at: 0,
                expires_at: None,
                revoked_at: None,
                last_used_at: None,
                environments: vec![],
            },
            last_used_at: AtomicI64::new(0),
        }))
    }

    fn held(cache: &ReadCache, fresh: &Fresh, id: &str) -> bool {
        cache.hit(fresh, &Key::Token(id.into())).is_some()
    }

    #[test]
    fn the_least_recently_used_entries_go_when_the_budget_is_reached() {
        let cache = ReadCache::default();
        cache.set_budget(250);
        let fresh = Fresh {
            generation: 1,
            verified: true,
        };
        cache.lock().generation = Some(1);
        for id in ["a", "b", "c"] {
            cache.keep(&fresh, Key::Token(id.into()), token(id), 100);
        }
        // Not emptied whole: only the oldest went.
        assert!(!held(&cache, &fresh, "a"));
        assert!(held(&cache, &fresh, "b") && held(&cache, &fresh, "c"));
        assert_eq!(cache.usage(), (200, 2));
        // `b` was used after `c`: `c` is the least recently used now.
        assert!(held(&cache, &fresh, "b"));
        cache.keep(&fresh, Key::Token("d".into()), token("d"), 100);
        assert!(!held(&cache, &fresh, "c"));
        assert!(held(&cache, &fresh, "b") && held(&cache, &fresh, "d"));
        // Replacing an entry counts its new weight only.
        cache.keep(&fresh, Key::Token("d".into()), token("d"), 150);
        assert_eq!(cache.usage(), (250, 2));
        // Heavier than the whole budget: not kept, nothing evicted for it.
        cache.keep(&fresh, Key::Token("e".into()), token("e"), 251);
        assert!(!held(&cache, &fresh, "e"));
        assert_eq!(cache.usage(), (250, 2));
        // A smaller budget applies at once.
        cache.set_budget(150);
        assert_eq!(cache.usage().1, 1);
        // Another generation: nothing is kept under an older one, and nothing old is served.
        let newer = Fresh {
            generation: 2,
            verified: true,
        };
        {
            // What `fresh` does when the counter moved.
            let mut entries = cache.lock();
            entries.clear();
            entries.generation = Some(2);
        }
        assert!(!held(&cache, &newer, "d"));
        assert_eq!(cache.usage(), (0, 0));
        cache.keep(&fresh, Key::Token("f".into()), token("f"), 10);
        assert!(!held(&cache, &newer, "f"));
    }

    #[test]
    fn json_is_weighed_by_what_it_holds() {
        let small = json_bytes(&serde_json::json!({"a": "x"}));
        let large = json_bytes(&serde_json::json!({"a": "x".repeat(10_000)}));
        assert!(large >= 10_000 + small - 1);
        assert!(json_bytes(&serde_json::json!([1, 2, 3])) >= 3 * 16);
        assert_eq!(json_bytes(&serde_json::json!(null)), 0);
    }
}
