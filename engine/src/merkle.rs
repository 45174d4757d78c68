//! The journal as an RFC 6962 / RFC 9162 Merkle tree (CONTRACT §13): per tenant, leaf index
//! `seq - 1`, leaf = the RFC 8785 bytes of the signed receipt, leaf hash `SHA-256(0x00 ‖ leaf)`,
//! node hash `SHA-256(0x01 ‖ left ‖ right)`.
//!
//! What is here is the tree's arithmetic, independent of where hashes are kept:
//!
//! - [`Frontier`]: the root of a growing tree from its leaves one at a time, keeping only the
//!   roots of its largest complete subtrees (one per set bit of the size).
//! - [`inclusion_proof`] and [`consistency_proof`]: RFC 9162 §2.1.3.1 and §2.1.4.1, over a
//!   caller's [`Subtrees`] (the server reads stored hashes; tests hash leaves in memory). Every
//!   range they ask for starts at a multiple of a power of two at least as large as the range,
//!   so a store of complete aligned subtrees answers each from at most `log2(size)` of them.
//! - [`verify_inclusion`] and [`verify_consistency`]: RFC 9162 §2.1.3.2 and §2.1.4.2, for
//!   verifiers that hold only a root (an auditor, a witness, the evidence bundle check).
//!
//! Why not a crate: the maintained ones (`ct-merkle`, `rs_merkle`) keep every leaf in memory
//! to make proofs; the journal's trees live in the database and are read a subtree at a time.
//! The tests check everything here against a direct transcription of the RFC's recursive
//! definitions over many tree sizes.

use sha2::{Digest, Sha256};

/// A node or leaf hash.
pub type Hash = [u8; 32];

/// `SHA-256(0x00 ‖ leaf)`.
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(leaf);
    h.finalize().into()
}

/// `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree: `SHA-256()` of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two smaller than `n` (`n` ≥ 2): where RFC 9162 splits a tree of `n`
/// leaves.
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// The root of a tree that grows a leaf at a time, without keeping its leaves: the roots of the
/// complete subtrees its size decomposes into, largest (leftmost) first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// One root per set bit of `size`, from the highest bit down.
    peaks: Vec<Hash>,
}

impl Frontier {
    /// The empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tree of `size` leaves given by its peaks (the roots of the complete subtrees of the
    /// binary decomposition of `size`, largest first). `None` when their count does not match
    /// the size.
    pub fn from_peaks(size: u64, peaks: Vec<Hash>) -> Option<Self> {
        (peaks.len() == size.count_ones() as usize).then_some(Self { size, peaks })
    }

    /// Leaves so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The peaks (see [`Frontier::from_peaks`]).
    pub fn peaks(&self) -> &[Hash] {
        &self.peaks
    }

    /// Appends a leaf by its hash ([`leaf_hash`]).
    pub fn push(&mut self, leaf: Hash) {
        let mut carry = leaf;
        // Each trailing set bit of the old size is a complete subtree of the new leaf's size
        // on its left: merge them while they last.
        let mut size = self.size;
        while size & 1 == 1 {
            let left = self.peaks.pop().unwrap_or(carry);
            carry = node_hash(&left, &carry);
            size >>= 1;
        }
        self.peaks.push(carry);
        self.size += 1;
    }

    /// The tree's root hash (RFC 9162 `MTH`).
    pub fn root(&self) -> Hash {
        let mut peaks = self.peaks.iter().rev();
        let Some(last) = peaks.next() else {
            return empty_root();
        };
        // The right edge folds from the smallest subtree up: MTH(D[k:n]) is the right child.
        peaks.fold(*last, |right, left| node_hash(left, &right))
    }
}

/// Hashes of subtrees of one tree, as a proof needs them.
pub trait Subtrees {
    /// Why a hash could not be had (a store error, say).
    type Error;
    /// `MTH(D[start:end])`, the root of the leaves `start..end` (`end > start`).
    fn subtree(&mut self, start: u64, end: u64) -> Result<Hash, Self::Error>;
}

/// Leaf hashes in memory are their own [`Subtrees`].
impl Subtrees for &[Hash] {
    type Error = std::convert::Infallible;
    fn subtree(&mut self, start: u64, end: u64) -> Result<Hash, Self::Error> {
        Ok(root_of(&self[to_usize(start)..to_usize(end)]))
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The root of leaf hashes held in memory.
pub fn root_of(leaves: &[Hash]) -> Hash {
    let mut f = Frontier::new();
    for leaf in leaves {
        f.push(*leaf);
    }
    f.root()
}

/// Why a proof could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError<E> {
    /// The indexes do not describe a proof (a leaf outside the tree, an old size larger than
    /// the new one, an empty tree).
    #[error("{0}")]
    OutOfRange(&'static str),
    /// The subtree source failed.
    #[error("{0}")]
    Source(E),
}

/// The inclusion proof of leaf `index` in the tree of `size` leaves (RFC 9162 §2.1.3.1), its
/// hashes from the leaf's sibling up.
pub fn inclusion_proof<S: Subtrees>(
    index: u64,
    size: u64,
    tree: &mut S,
) -> Result<Vec<Hash>, ProofError<S::Error>> {
    if index >= size {
        return Err(ProofError::OutOfRange("the leaf is not in the tree"));
    }
    let mut proof = Vec::new();
    // Walk down from the root, remembering the sibling at each level; the proof lists them
    // from the bottom up.
    let (mut start, mut end) = (0u64, size);
    while end - start > 1 {
        let k = split(end - start);
        let mid = start + k;
        if index < mid {
            proof.push(tree.subtree(mid, end).map_err(ProofError::Source)?);
            end = mid;
        } else {
            proof.push(tree.subtree(start, mid).map_err(ProofError::Source)?);
            start = mid;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// The consistency proof from the tree of `old` leaves to the tree of `new` leaves (RFC 9162
/// §2.1.4.1). Empty when `old` is 0 or equals `new`.
pub fn consistency_proof<S: Subtrees>(
    old: u64,
    new: u64,
    tree: &mut S,
) -> Result<Vec<Hash>, ProofError<S::Error>> {
    if old > new {
        return Err(ProofError::OutOfRange(
            "the old tree is larger than the new one",
        ));
    }
    if old == 0 || old == new {
        return Ok(Vec::new());
    }
    // SUBPROOF(m, D[start:end], b), unrolled: each step records a sibling and descends.
    let mut proof = Vec::new();
    let (mut start, mut end, mut m) = (0u64, new, old);
    let mut whole = true;
    loop {
        if m == end - start {
            if !whole {
                proof.push(tree.subtree(start, end).map_err(ProofError::Source)?);
            }
            break;
        }
        let k = split(end - start);
        if m <= k {
            proof.push(tree.subtree(start + k, end).map_err(ProofError::Source)?);
            end = start + k;
        } else {
            proof.push(tree.subtree(start, start + k).map_err(ProofError::Source)?);
            start += k;
            m -= k;
            whole = false;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// Why a proof does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyProofError {
    /// The indexes are impossible (a leaf outside the tree, an old tree larger than the new).
    #[error("{0}")]
    OutOfRange(&'static str),
    /// The proof has the wrong number of hashes for the tree sizes.
    #[error("the proof has the wrong number of hashes")]
    WrongLength,
    /// The hashes do not lead to the root.
    #[error("the proof does not lead to the root hash")]
    RootMismatch,
}

/// Checks that `leaf` (a [`leaf_hash`]) is leaf `index` of the tree of `size` leaves whose root
/// is `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), VerifyProofError> {
    if index >= size {
        return Err(VerifyProofError::OutOfRange("the leaf is not in the tree"));
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s == 0 {
            return Err(VerifyProofError::WrongLength);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(VerifyProofError::WrongLength);
    }
    if r != *root {
        return Err(VerifyProofError::RootMismatch);
    }
    Ok(())
}

/// Checks that the tree of `old` leaves with root `old_root` is a prefix of the tree of `new`
/// leaves with root `new_root` (RFC 9162 §2.1.4.2). An empty old tree is a prefix of every
/// tree; equal sizes need equal roots and an empty proof.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), VerifyProofError> {
    if old > new {
        return Err(VerifyProofError::OutOfRange(
            "the old tree is larger than the new one",
        ));
    }
    if old == 0 || old == new {
        if !proof.is_empty() {
            return Err(VerifyProofError::WrongLength);
        }
        return if old == 0 || old_root == new_root {
            Ok(())
        } else {
            Err(VerifyProofError::RootMismatch)
        };
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return Err(VerifyProofError::WrongLength);
    };
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(VerifyProofError::WrongLength);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(VerifyProofError::WrongLength);
    }
    if fr != *old_root || sr != *new_root {
        return Err(VerifyProofError::RootMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A direct transcription of RFC 9162 §2.1.1, §2.1.3.1 and §2.1.4.1: recursion over slices
    // of leaf data, nothing shared with the code above but the two hash functions.

    fn k_of(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    fn mth(d: &[Vec<u8>]) -> Hash {
        match d.len() {
            0 => Sha256::digest([]).into(),
            1 => leaf_hash(&d[0]),
            n => {
                let k = k_of(n);
                node_hash(&mth(&d[..k]), &mth(&d[k..]))
            }
        }
    }

    fn path(m: usize, d: &[Vec<u8>]) -> Vec<Hash> {
        let n = d.len();
        if n == 1 {
            return Vec::new();
        }
        let k = k_of(n);
        if m < k {
            let mut p = path(m, &d[..k]);
            p.push(mth(&d[k..]));
            p
        } else {
            let mut p = path(m - k, &d[k..]);
            p.push(mth(&d[..k]));
            p
        }
    }

    fn subproof(m: usize, d: &[Vec<u8>], b: bool) -> Vec<Hash> {
        let n = d.len();
        if m == n {
            return if b { Vec::new() } else { vec![mth(d)] };
        }
        let k = k_of(n);
        if m <= k {
            let mut p = subproof(m, &d[..k], b);
            p.push(mth(&d[k..]));
            p
        } else {
            let mut p = subproof(m - k, &d[k..], false);
            p.push(mth(&d[..k]));
            p
        }
    }

    fn data(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("leaf {i}").into_bytes()).collect()
    }

    fn hashes(d: &[Vec<u8>]) -> Vec<Hash> {
        d.iter().map(|l| leaf_hash(l)).collect()
    }

    #[test]
    fn roots_equal_the_rfc_definition_for_every_size_up_to_300() {
        let d = data(300);
        let leaves = hashes(&d);
        let mut f = Frontier::new();
        assert_eq!(f.root(), mth(&[]));
        for n in 1..=300 {
            f.push(leaves[n - 1]);
            assert_eq!(f.size(), n as u64);
            assert_eq!(f.root(), mth(&d[..n]), "size {n}");
            let again = Frontier::from_peaks(f.size(), f.peaks().to_vec()).unwrap();
            assert_eq!(again, f);
        }
        assert!(Frontier::from_peaks(3, vec![[0; 32]]).is_none());
    }

    #[test]
    fn roots_and_a_proof_equal_certificate_transparency_s_published_vectors() {
        // The leaves and tree heads every RFC 6962 implementation tests against.
        let leaves: Vec<Hash> = [
            "",
            "00",
            "10",
            "2021",
            "3031",
            "40414243",
            "5051525354555657",
            "606162636465666768696a6b6c6d6e6f",
        ]
        .iter()
        .map(|h| leaf_hash(&hex::decode(h).unwrap()))
        .collect();
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        for (n, root) in roots.iter().enumerate() {
            assert_eq!(hex::encode(root_of(&leaves[..=n])), *root, "size {}", n + 1);
        }
        let mut tree: &[Hash] = &leaves;
        let proof: Vec<String> = inclusion_proof(0, 8, &mut tree)
            .unwrap()
            .iter()
            .map(hex::encode)
            .collect();
        assert_eq!(
            proof,
            [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ]
        );
    }

    #[test]
    fn the_empty_root_is_the_hash_of_nothing() {
        // RFC 6962 §2.1: MTH({}) = SHA-256().
        assert_eq!(
            hex::encode(empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn proofs_equal_the_rfc_definition_and_verify_for_every_pair_up_to_70() {
        let d = data(70);
        let leaves = hashes(&d);
        for n in 1..=70usize {
            let root = mth(&d[..n]);
            let mut tree: &[Hash] = &leaves[..n];
            for (m, leaf) in leaves[..n].iter().enumerate() {
                let proof = inclusion_proof(m as u64, n as u64, &mut tree).unwrap();
                assert_eq!(proof, path(m, &d[..n]), "inclusion {m} in {n}");
                verify_inclusion(leaf, m as u64, n as u64, &proof, &root).unwrap();
            }
            for m in 1..=n {
                let proof = consistency_proof(m as u64, n as u64, &mut tree).unwrap();
                let expected = if m == n {
                    Vec::new()
                } else {
                    subproof(m, &d[..n], true)
                };
                assert_eq!(proof, expected, "consistency {m} to {n}");
                verify_consistency(m as u64, n as u64, &mth(&d[..m]), &root, &proof).unwrap();
            }
        }
    }

    #[test]
    fn impossible_indexes_are_refused() {
        let leaves = hashes(&data(4));
        let mut tree: &[Hash] = &leaves;
        assert!(matches!(
            inclusion_proof(4, 4, &mut tree),
            Err(ProofError::OutOfRange(_))
        ));
        assert!(matches!(
            consistency_proof(5, 4, &mut tree),
            Err(ProofError::OutOfRange(_))
        ));
        let root = root_of(&leaves);
        assert!(verify_inclusion(&leaves[0], 4, 4, &[], &root).is_err());
        assert!(verify_consistency(5, 4, &root, &root, &[]).is_err());
        // Equal sizes: the roots must be equal and the proof empty.
        assert!(verify_consistency(4, 4, &root, &root, &[]).is_ok());
        assert!(verify_consistency(4, 4, &leaves[0], &root, &[]).is_err());
        assert!(verify_consistency(4, 4, &root, &root, &[root]).is_err());
        assert!(verify_consistency(0, 4, &empty_root(), &root, &[]).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_changed_hash_or_index_never_verifies(
            n in 2usize..600,
            m_seed in any::<u64>(),
            which in any::<usize>(),
            bit in 0u8..8,
        ) {
            let d = data(n);
            let leaves = hashes(&d);
            let root = mth(&d);
            let mut tree: &[Hash] = &leaves;
            let m = (m_seed % n as u64) as usize;

            let proof = inclusion_proof(m as u64, n as u64, &mut tree).unwrap();
            prop_assert_eq!(&proof, &path(m, &d));
            prop_assert!(verify_inclusion(&leaves[m], m as u64, n as u64, &proof, &root).is_ok());
            // Another leaf at that index, the leaf at another index, a flipped proof bit, a
            // proof cut short: never.
            let other = (m + 1) % n;
            prop_assert!(verify_inclusion(&leaves[other], m as u64, n as u64, &proof, &root).is_err());
            prop_assert!(verify_inclusion(&leaves[m], other as u64, n as u64, &proof, &root).is_err());
            if !proof.is_empty() {
                let mut bad = proof.clone();
                let i = which % bad.len();
                bad[i][which % 32] ^= 1 << bit;
                prop_assert!(verify_inclusion(&leaves[m], m as u64, n as u64, &bad, &root).is_err());
                prop_assert!(verify_inclusion(&leaves[m], m as u64, n as u64, &proof[..proof.len() - 1], &root).is_err());
            }

            let old = m + 1;
            let old_root = mth(&d[..old]);
            let proof = consistency_proof(old as u64, n as u64, &mut tree).unwrap();
            prop_assert!(verify_consistency(old as u64, n as u64, &old_root, &root, &proof).is_ok());
            if old < n {
                prop_assert_eq!(&proof, &subproof(old, &d, true));
                // A history rewritten below the old size is inconsistent.
                let mut rewritten = d.clone();
                rewritten[which % old].push(b'!');
                prop_assert!(verify_consistency(old as u64, n as u64, &old_root, &mth(&rewritten), &proof).is_err());
                let mut bad = proof.clone();
                let i = which % bad.len();
                bad[i][which % 32] ^= 1 << bit;
                prop_assert!(verify_consistency(old as u64, n as u64, &old_root, &root, &bad).is_err());
                prop_assert!(verify_consistency(old as u64, n as u64, &old_root, &root, &proof[1..]).is_err());
            }
        }
    }
}
