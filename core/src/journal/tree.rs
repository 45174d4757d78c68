//! Each tenant's journal as an RFC 6962 Merkle tree (CONTRACT §13), kept in the database in
//! tiles (C2SP tlog-tiles' layout): tile (level L, index i) holds the hashes of the complete
//! nodes of height 8·L numbered 256·i onwards. A proof asks for O(log n) subtrees; each is a
//! handful of complete nodes, each hashed from at most 128 hashes of one tile. So a proof reads
//! a few tiles whatever the journal's length, and the tree grows by appending to the last tile
//! of each level, off the call path ([`Edge::grow`], run by the checkpointer).
//!
//! The leaf of record `seq` (leaf index `seq - 1`) is the RFC 8785 text of its signed receipt,
//! as the journal stores it; `aperture journal verify` recomputes every leaf from the receipt
//! itself, so a stored text that is not the receipt's canonical form shows as a changed leaf.

use std::collections::{BTreeSet, HashMap};

use engine::merkle::{self, Hash, ProofError, Subtrees};

use crate::store::{self, Store};

/// Hashes per tile.
const WIDTH: u64 = 256;
/// Tree levels per tile level.
const HEIGHT: u32 = 8;
/// Why a tree or proof could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// The database refused.
    #[error("journal tree store: {0}")]
    Store(#[from] sqlx::Error),
    /// A size or index outside the stored tree.
    #[error("{0}")]
    OutOfRange(String),
    /// A tile the tree should have is missing or short (the database was changed).
    #[error("the stored tree is missing tile {0}/{1}")]
    MissingTile(u32, u64),
    /// Another node grew the tree at the same time; try again.
    #[error("the tree was grown by another node meanwhile")]
    Raced,
}

/// The complete aligned subtrees `[start, end)` decomposes into, as `(height, index)`, left
/// to right. The ranges RFC 9162's proofs ask for start at a multiple of a power of two at
/// least their length, so these are the binary decomposition of the length, largest first,
/// and folding their roots from the right gives `MTH(D[start:end])`.
fn blocks(start: u64, end: u64) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let mut height = if at == 0 { 63 } else { at.trailing_zeros() };
        while height > 0 && (1u64 << height > end - at) {
            height -= 1;
        }
        out.push((height, at >> height));
        at += 1 << height;
    }
    out
}

/// Where node `(height, index)`'s hashes are: its tile, the offset and count of the hashes of
/// height `8·level` under it.
fn under(height: u32, index: u64) -> ((u32, u64), usize, usize) {
    let level = height / HEIGHT;
    let rest = height % HEIGHT;
    let first = index << rest;
    let tile = first / WIDTH;
    (
        (level, tile),
        usize::try_from(first % WIDTH).unwrap_or(usize::MAX),
        1usize << rest,
    )
}

/// Records which tiles a proof will read (the ranges a proof asks for do not depend on the
/// hashes, so a first pass with this learns them).
#[derive(Default)]
struct Needs(BTreeSet<(u32, u64)>);

impl Subtrees for Needs {
    type Error = std::convert::Infallible;
    fn subtree(&mut self, start: u64, end: u64) -> Result<Hash, Self::Error> {
        for (height, index) in blocks(start, end) {
            self.0.insert(under(height, index).0);
        }
        Ok([0; 32])
    }
}

/// Tiles read from the store.
struct Tiles(HashMap<(u32, u64), Vec<u8>>);

impl Subtrees for Tiles {
    type Error = TreeError;
    fn subtree(&mut self, start: u64, end: u64) -> Result<Hash, TreeError> {
        let mut roots = Vec::new();
        for (height, index) in blocks(start, end) {
            let ((level, tile), offset, count) = under(height, index);
            let bytes = self
                .0
                .get(&(level, tile))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let hashes = bytes
                .get(offset * 32..(offset + count) * 32)
                .ok_or(TreeError::MissingTile(level, tile))?;
            let hashes: Vec<Hash> = hashes
                .chunks_exact(32)
                .map(|c| c.try_into().unwrap_or([0; 32]))
                .collect();
            roots.push(merkle::root_of(&hashes));
        }
        let mut roots = roots.into_iter().rev();
        let last = roots.next().unwrap_or_else(merkle::empty_root);
        Ok(roots.fold(last, |right, left| merkle::node_hash(&left, &right)))
    }
}

/// Runs `proof` twice: once to learn the tiles it reads, then over those tiles.
async fn with_tiles<T>(
    store: &Store,
    tenant: &str,
    size: u64,
    proof: impl Fn(&mut dyn FnMut(u64, u64) -> Result<Hash, TreeError>) -> Result<T, TreeError>,
) -> Result<T, TreeError> {
    let held = store::checkpoints::log(store, tenant)
        .await?
        .map_or(0, |l| u64::try_from(l.tree_size).unwrap_or(0));
    if size > held {
        return Err(TreeError::OutOfRange(format!(
            "tree size {size} is larger than the tree ({held} records)"
        )));
    }
    let mut needs = Needs::default();
    proof(&mut |s, e| Ok(needs.subtree(s, e).unwrap_or([0; 32])))?;
    let mut tiles = HashMap::new();
    for (level, idx) in needs.0 {
        tiles.insert(
            (level, idx),
            store::checkpoints::tile(store, tenant, level, idx).await?,
        );
    }
    let mut tiles = Tiles(tiles);
    proof(&mut |s, e| tiles.subtree(s, e))
}

/// A [`Subtrees`] over a closure.
struct Closure<'a>(&'a mut dyn FnMut(u64, u64) -> Result<Hash, TreeError>);

impl Subtrees for Closure<'_> {
    type Error = TreeError;
    fn subtree(&mut self, start: u64, end: u64) -> Result<Hash, TreeError> {
        (self.0)(start, end)
    }
}

fn unwrap_proof(e: ProofError<TreeError>) -> TreeError {
    match e {
        ProofError::OutOfRange(what) => TreeError::OutOfRange(what.to_owned()),
        ProofError::Source(e) => e,
    }
}

/// The root of the first `size` records of `tenant`'s stored tree.
pub async fn root(store: &Store, tenant: &str, size: u64) -> Result<Hash, TreeError> {
    if size == 0 {
        return Ok(merkle::empty_root());
    }
    with_tiles(store, tenant, size, |f| f(0, size)).await
}

/// The inclusion proof of leaf `index` in the tree of `size` records.
pub async fn inclusion(
    store: &Store,
    tenant: &str,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, TreeError> {
    with_tiles(store, tenant, size, |f| {
        merkle::inclusion_proof(index, size, &mut Closure(f)).map_err(unwrap_proof)
    })
    .await
}

/// The inclusion proofs of several leaves in the tree of `size` records, reading each tile
/// they need once.
pub async fn inclusions(
    store: &Store,
    tenant: &str,
    indexes: &[u64],
    size: u64,
) -> Result<Vec<Vec<Hash>>, TreeError> {
    with_tiles(store, tenant, size, |f| {
        indexes
            .iter()
            .map(|index| {
                merkle::inclusion_proof(*index, size, &mut Closure(&mut *f)).map_err(unwrap_proof)
            })
            .collect()
    })
    .await
}

/// The consistency proof from the tree of `old` records to the tree of `new`.
pub async fn consistency(
    store: &Store,
    tenant: &str,
    old: u64,
    new: u64,
) -> Result<Vec<Hash>, TreeError> {
    with_tiles(store, tenant, new, |f| {
        merkle::consistency_proof(old, new, &mut Closure(f)).map_err(unwrap_proof)
    })
    .await
}

/// The right edge of a tree: for each level, the hashes of its last, incomplete tile (empty
/// where the level's hashes fill whole tiles). It is all that appending leaves changes and all
/// that the root is made of, so a checkpointer that keeps it grows the tree and signs its root
/// without reading a tile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edge {
    size: u64,
    partial: Vec<Vec<u8>>,
}

impl Edge {
    /// Leaves in the tree.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The right edge of `tenant`'s stored tree of `size` leaves.
    pub async fn load(store: &Store, tenant: &str, size: u64) -> Result<Self, TreeError> {
        let mut tiles = HashMap::new();
        for (level, idx) in Self::tiles_of(size) {
            tiles.insert(
                (level, idx),
                store::checkpoints::tile(store, tenant, level, idx).await?,
            );
        }
        Self::from_tiles(size, |level, idx| {
            tiles.get(&(level, idx)).cloned().unwrap_or_default()
        })
    }

    /// The tiles (level, index) the right edge of a tree of `size` leaves lies in.
    fn tiles_of(size: u64) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        let mut nodes = size;
        let mut level = 0;
        while nodes > 0 {
            if !nodes.is_multiple_of(WIDTH) {
                out.push((level, nodes / WIDTH));
            }
            nodes /= WIDTH;
            level += 1;
        }
        out
    }

    /// The right edge of a tree of `size` leaves whose tiles `tile` gives.
    fn from_tiles(size: u64, mut tile: impl FnMut(u32, u64) -> Vec<u8>) -> Result<Self, TreeError> {
        let mut partial = Vec::new();
        let mut nodes = size;
        let mut level = 0;
        while nodes > 0 {
            let want = usize::try_from(nodes % WIDTH).unwrap_or(0) * 32;
            let mut hashes = if want == 0 {
                Vec::new()
            } else {
                tile(level, nodes / WIDTH)
            };
            if hashes.len() < want {
                return Err(TreeError::MissingTile(level, nodes / WIDTH));
            }
            hashes.truncate(want);
            partial.push(hashes);
            nodes /= WIDTH;
            level += 1;
        }
        Ok(Self { size, partial })
    }

    /// Appends `leaves` (leaf hashes) and returns the tiles that changed (level, index,
    /// hashes): the last tile of each level, extended, and any new ones.
    pub fn grow(&mut self, leaves: &[Hash]) -> Vec<(u32, u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut level = 0usize;
        // Nodes of height 8·level before the new ones, and the new ones.
        let mut before = self.size;
        let mut new: Vec<Hash> = leaves.to_vec();
        while !new.is_empty() {
            if self.partial.len() <= level {
                self.partial.push(Vec::new());
            }
            let level_u32 = u32::try_from(level).unwrap_or(u32::MAX);
            let mut tile = before / WIDTH;
            let mut hashes = std::mem::take(&mut self.partial[level]);
            let mut completed = Vec::new();
            for h in &new {
                hashes.extend_from_slice(h);
                if hashes.len() == WIDTH as usize * 32 {
                    let nodes: Vec<Hash> = hashes
                        .chunks_exact(32)
                        .map(|c| c.try_into().unwrap_or([0; 32]))
                        .collect();
                    completed.push(merkle::root_of(&nodes));
                    out.push((level_u32, tile, std::mem::take(&mut hashes)));
                    tile += 1;
                }
            }
            if !hashes.is_empty() {
                out.push((level_u32, tile, hashes.clone()));
            }
            self.partial[level] = hashes;
            before /= WIDTH;
            new = completed;
            level += 1;
        }
        self.size += leaves.len() as u64;
        out
    }

    /// The tree's root (RFC 9162 `MTH` of all its leaves).
    pub fn root(&self) -> Result<Hash, TreeError> {
        if self.size == 0 {
            return Ok(merkle::empty_root());
        }
        // The root's complete subtrees lie in the last tile of each level.
        let mut tiles = HashMap::new();
        let mut nodes = self.size;
        for (level, hashes) in self.partial.iter().enumerate() {
            let level = u32::try_from(level).unwrap_or(u32::MAX);
            tiles.insert((level, nodes / WIDTH), hashes.clone());
            nodes /= WIDTH;
        }
        Tiles(tiles).subtree(0, self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_decompose_proof_ranges_into_complete_subtrees() {
        assert_eq!(blocks(0, 1), vec![(0, 0)]);
        assert_eq!(blocks(0, 6), vec![(2, 0), (1, 2)]);
        assert_eq!(blocks(8, 13), vec![(2, 2), (0, 12)]);
        assert_eq!(blocks(0, 1 << 20), vec![(20, 0)]);
        // Every range a proof asks for, against the in-memory tree.
        let leaves: Vec<Hash> = (0..600u32)
            .map(|i| merkle::leaf_hash(&i.to_be_bytes()))
            .collect();
        struct Blocks<'a>(&'a [Hash]);
        impl Subtrees for Blocks<'_> {
            type Error = std::convert::Infallible;
            fn subtree(&mut self, s: u64, e: u64) -> Result<Hash, Self::Error> {
                let roots: Vec<Hash> = blocks(s, e)
                    .into_iter()
                    .map(|(h, i)| {
                        let a = (i << h) as usize;
                        merkle::root_of(&self.0[a..a + (1 << h)])
                    })
                    .collect();
                let mut r = roots.into_iter().rev();
                let last = r.next().unwrap();
                Ok(r.fold(last, |right, left| merkle::node_hash(&left, &right)))
            }
        }
        for n in [1u64, 2, 3, 7, 255, 256, 257, 511, 600] {
            let mut tree: &[Hash] = &leaves[..n as usize];
            for m in [0, n / 3, n - 1] {
                assert_eq!(
                    merkle::inclusion_proof(m, n, &mut Blocks(&leaves[..n as usize])).unwrap(),
                    merkle::inclusion_proof(m, n, &mut tree).unwrap()
                );
            }
            for old in [1, n / 2, n] {
                if old == 0 {
                    continue;
                }
                assert_eq!(
                    merkle::consistency_proof(old, n, &mut Blocks(&leaves[..n as usize])).unwrap(),
                    merkle::consistency_proof(old, n, &mut tree).unwrap()
                );
            }
        }
    }

    /// Grows an edge by `chunks` of `leaves`, checking after each that its root is the
    /// tree's, that the tiles it wrote hold the same tree, and that an edge loaded from them
    /// is the same edge.
    fn grow_in(leaves: &[Hash], chunks: impl Iterator<Item = usize>, check_every: usize) {
        let mut edge = Edge::default();
        let mut stored: HashMap<(u32, u64), Vec<u8>> = HashMap::new();
        for (step, chunk) in chunks.enumerate() {
            let from = edge.size() as usize;
            let to = (from + chunk).min(leaves.len());
            for (level, idx, hashes) in edge.grow(&leaves[from..to]) {
                stored.insert((level, idx), hashes);
            }
            assert_eq!(edge.size() as usize, to);
            let loaded = Edge::from_tiles(edge.size(), |l, i| {
                stored.get(&(l, i)).cloned().unwrap_or_default()
            })
            .unwrap();
            assert_eq!(loaded, edge, "at {to}");
            if step % check_every == 0 || to == leaves.len() {
                let root = merkle::root_of(&leaves[..to]);
                assert_eq!(edge.root().unwrap(), root, "root at {to}");
                let mut tiles = Tiles(stored.clone());
                assert_eq!(tiles.subtree(0, to as u64).unwrap(), root, "tiles at {to}");
            }
            if to == leaves.len() {
                return;
            }
        }
    }

    #[test]
    fn an_edge_grows_like_the_tree_it_is_the_edge_of() {
        let leaves: Vec<Hash> = (0..70_000u32)
            .map(|i| merkle::leaf_hash(&i.to_be_bytes()))
            .collect();
        assert_eq!(Edge::default().root().unwrap(), merkle::empty_root());
        // One at a time across the first tiles' borders.
        grow_in(&leaves[..600], std::iter::repeat(1), 1);
        // Uneven chunks (a few thousand, as a checkpoint's) past a second-level tile (65,536
        // leaves), and one chunk of everything.
        let mut x = 7u64;
        let chunks = std::iter::from_fn(move || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            Some(1 + (x >> 33) as usize % 3_000)
        });
        grow_in(&leaves, chunks, 5);
        grow_in(&leaves, std::iter::once(leaves.len()), 1);
        // A missing tile is named, not guessed.
        assert!(matches!(
            Edge::from_tiles(300, |_, _| Vec::new()),
            Err(TreeError::MissingTile(0, 1))
        ));
    }

    #[test]
    fn a_node_s_hashes_lie_in_one_tile() {
        assert_eq!(under(0, 5), ((0, 0), 5, 1));
        assert_eq!(under(0, 300), ((0, 1), 44, 1));
        assert_eq!(under(3, 40), ((0, 1), 64, 8));
        assert_eq!(under(8, 3), ((1, 0), 3, 1));
        assert_eq!(under(9, 200), ((1, 1), 144, 2));
    }
}
