//! Signed checkpoints of each tenant's journal tree (CONTRACT §13): C2SP `tlog-checkpoint`
//! bodies (origin, tree size, root) in C2SP `signed-note`s signed with the journal's key under
//! the origin as key name. Made off the call path by [`Checkpointer::run`]: every
//! `APERTURE_CHECKPOINT_INTERVAL_SECONDS` when a tree grew, every
//! [`super::CHECKPOINT_RECORDS`] records this node writes, and at shutdown; on demand for an
//! evidence bundle. Several nodes may try at once: the tree grows and a checkpoint is stored
//! only if nobody did first (conditional writes), so one of them makes each.
//!
//! Each checkpoint is stored in the database and appended to a file per tenant in
//! `APERTURE_CHECKPOINT_DIR`: a record outside the database that an intruder who rewrites the
//! journal (and deletes its newest records, or the stored checkpoints) cannot quietly follow.
//! A sink on the database's own disk does not stop whoever owns that disk; witnesses do.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use engine::merkle;
use engine::note::{self, Checkpoint, Note, VerifierKey};
use engine::receipt::Signer;

use super::tree::{Edge, TreeError};
use crate::keys::KeyRing;
use crate::store::checkpoints::{Grown, StoredCheckpoint};
use crate::store::{self, Store};

/// The origin of `tenant`'s log on `host` (`APERTURE_LOG_ORIGIN_HOST`, or the listen address).
pub fn origin(host: &str, tenant: &str) -> String {
    format!("{host}/aperture/{tenant}")
}

/// The note verifier key of `signer` for the log `origin`.
pub fn verifier_key(origin: &str, signer: &Signer) -> Option<VerifierKey> {
    VerifierKey::new(origin, note::ED25519, signer.verifying_key()).ok()
}

/// The file of `tenant`'s checkpoints in the sink folder.
pub fn sink_file(dir: &Path, tenant: &str) -> PathBuf {
    dir.join(format!("{tenant}.checkpoints"))
}

/// Every note in a sink file, in the order they were appended. Notes follow each other
/// directly: a note's text lines never begin with the em dash its signature lines begin with.
pub fn read_sink(text: &str) -> Vec<Result<Note, note::NoteError>> {
    let mut notes = Vec::new();
    let mut current = String::new();
    let mut in_signatures = false;
    for line in text.split_inclusive('\n') {
        let signature = line.starts_with('\u{2014}');
        if in_signatures && !signature {
            notes.push(Note::parse(&current));
            current.clear();
            in_signatures = false;
        }
        if line == "\n" {
            in_signatures = true;
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        notes.push(Note::parse(&current));
    }
    notes
}

/// Why a checkpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The tree could not grow.
    #[error(transparent)]
    Tree(#[from] TreeError),
    /// The database refused.
    #[error("checkpoint store: {0}")]
    Store(#[from] sqlx::Error),
    /// The note could not be made.
    #[error("checkpoint note: {0}")]
    Note(#[from] note::NoteError),
}

/// Makes checkpoints.
#[derive(Debug)]
pub struct Checkpointer {
    store: Store,
    keys: KeyRing,
    host: String,
    sink: Option<PathBuf>,
    interval: Duration,
    /// The journal whose committed leaves this node's trees grow by ([`Checkpointer::run`]).
    journal: OnceLock<super::Journal>,
    /// What this node knows of each tenant's tree; held while a checkpoint is made, so this
    /// node makes one at a time.
    trees: tokio::sync::Mutex<HashMap<String, Known>>,
}

/// A tenant's tree as this node last grew it, and its latest checkpoint. Good while the
/// stored tree is still that size (no other node grew it since).
#[derive(Debug)]
struct Known {
    edge: Edge,
    latest: Option<StoredCheckpoint>,
}

/// Leaves taken (and hashed) at a time while a tree grows; the tiles of a longer stretch (the
/// first tree of a long journal) are written a page per transaction.
const GROW_PAGE: usize = 2_048;

impl Checkpointer {
    /// A checkpointer over `store` signing with `keys`, naming new logs after `host`,
    /// appending to files in `sink` (none: the database only).
    pub fn new(
        store: Store,
        keys: KeyRing,
        host: String,
        sink: Option<PathBuf>,
        interval: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            keys,
            host,
            sink,
            interval,
            journal: OnceLock::new(),
            trees: tokio::sync::Mutex::default(),
        })
    }

    /// Grows trees by the leaves `journal` commits (it keeps them from now on) rather than
    /// reading them back from the database; the journal is read only for records it did not
    /// commit (other nodes', or more than it keeps).
    pub fn attach(&self, journal: &super::Journal) {
        journal.keep_leaves();
        // A second journal is not attached: the first keeps its leaves for this checkpointer.
        let _ = self.journal.set(journal.clone());
    }

    /// The origin `tenant`'s log has (fixed at its first checkpoint) or will have.
    pub async fn origin_of(&self, tenant: &str) -> Result<String, sqlx::Error> {
        Ok(store::checkpoints::log(&self.store, tenant)
            .await?
            .map_or_else(|| origin(&self.host, tenant), |l| l.origin))
    }

    /// Grows `tenant`'s tree to its journal's head and signs a checkpoint of it, unless the
    /// latest checkpoint already covers every record. Returns the latest checkpoint either way
    /// (`None`: the tenant has no record).
    pub async fn checkpoint(
        &self,
        tenant: &str,
    ) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        let mut trees = self.trees.lock().await;
        for _ in 0..4 {
            match self.grow_and_sign(&mut trees, tenant).await {
                // Another node grew it: go on from where it got to.
                Err(CheckpointError::Tree(TreeError::Raced)) => continue,
                other => return other,
            }
        }
        Err(TreeError::Raced.into())
    }

    async fn grow_and_sign(
        &self,
        trees: &mut HashMap<String, Known>,
        tenant: &str,
    ) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        let log = store::checkpoints::log(&self.store, tenant).await?;
        let held = log
            .as_ref()
            .map_or(0, |l| u64::try_from(l.tree_size).unwrap_or(0));
        let origin = log.map_or_else(|| origin(&self.host, tenant), |l| l.origin);
        let Known {
            mut edge,
            mut latest,
        } = match trees.remove(tenant) {
            Some(known) if known.edge.size() == held => known,
            _ => Known {
                edge: Edge::load(&self.store, tenant, held).await?,
                latest: store::checkpoints::latest(&self.store, tenant).await?,
            },
        };
        let size = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        loop {
            let page = self.leaves(tenant, edge.size()).await?;
            let at_head = page.len() < GROW_PAGE;
            let hashes: Vec<_> = page
                .iter()
                .map(|text| merkle::leaf_hash(text.as_bytes()))
                .collect();
            drop(page);
            let from = edge.size();
            let tiles = edge.grow(&hashes);
            let to = edge.size();
            if !at_head {
                let grown = store::checkpoints::grow(
                    &self.store,
                    tenant,
                    &origin,
                    size(from),
                    size(to),
                    &tiles,
                    None,
                )
                .await?;
                if grown == Grown::Raced {
                    return Err(TreeError::Raced.into());
                }
                continue;
            }
            let covered = latest.as_ref().is_some_and(|l| l.tree_size >= size(to));
            if to == 0 || (tiles.is_empty() && covered) {
                trees.insert(
                    tenant.to_owned(),
                    Known {
                        edge,
                        latest: latest.clone(),
                    },
                );
                return Ok(latest);
            }
            let note = self.sign(&origin, to, edge.root()?, latest.as_ref())?;
            let made_at = store::now_ms();
            let stored = if tiles.is_empty() {
                store::checkpoints::insert(&self.store, tenant, size(to), &note, made_at).await?
            } else {
                match store::checkpoints::grow(
                    &self.store,
                    tenant,
                    &origin,
                    size(from),
                    size(to),
                    &tiles,
                    Some((&note, made_at)),
                )
                .await?
                {
                    Grown::Raced => return Err(TreeError::Raced.into()),
                    Grown::Grown { checkpoint_stored } => checkpoint_stored,
                }
            };
            latest = if stored {
                self.append_to_sink(tenant, note.clone()).await;
                tracing::debug!(tenant, size = to, "checkpoint made");
                Some(StoredCheckpoint {
                    tree_size: size(to),
                    note,
                    made_at,
                })
            } else {
                store::checkpoints::at(&self.store, tenant, size(to)).await?
            };
            trees.insert(
                tenant.to_owned(),
                Known {
                    edge,
                    latest: latest.clone(),
                },
            );
            return Ok(latest);
        }
    }

    /// Up to [`GROW_PAGE`] leaf texts of `tenant`'s records after the first `after`: those the
    /// attached journal kept, then the journal's stored ones.
    async fn leaves(&self, tenant: &str, after: u64) -> Result<Vec<String>, TreeError> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let mut page = self
            .journal
            .get()
            .map(|j| j.take_leaves(tenant, after, GROW_PAGE))
            .unwrap_or_default();
        if page.len() < GROW_PAGE {
            let from = after + i64::try_from(page.len()).unwrap_or(0);
            let limit = i64::try_from(GROW_PAGE - page.len()).unwrap_or(0);
            let stored = store::checkpoints::leaves(&self.store, tenant, from, limit).await?;
            for (i, (seq, text)) in stored.into_iter().enumerate() {
                let want = from + 1 + i64::try_from(i).unwrap_or(0);
                if seq != want {
                    return Err(TreeError::OutOfRange(format!(
                        "record {want} is missing from the journal"
                    )));
                }
                page.push(text);
            }
        }
        Ok(page)
    }

    /// The signed note of the checkpoint of `origin`'s tree of `size` leaves with `root`.
    /// After `aperture keys rotate`, the first checkpoint is signed by the old key too, so a
    /// witness that pinned it can follow to the new one.
    fn sign(
        &self,
        origin: &str,
        size: u64,
        root: engine::merkle::Hash,
        latest: Option<&StoredCheckpoint>,
    ) -> Result<String, CheckpointError> {
        let text = Checkpoint {
            origin: origin.to_owned(),
            size,
            root,
        }
        .text();
        let mut note = Note::sign(&text, origin, self.keys.signer())?;
        if let (Some(latest), Some(previous)) = (latest, self.keys.previous())
            && let Ok(last) = Note::parse(&latest.note)
        {
            let by = |s: &Signer| verifier_key(origin, s).is_some_and(|k| last.verify(&k).is_ok());
            if !by(self.keys.signer()) && by(previous) {
                note.add_signature(origin, previous)?;
            }
        }
        Ok(note.render())
    }

    /// Appends `note` to `tenant`'s sink file and syncs it, on the blocking pool (a sync
    /// would otherwise hold one of the runtime's worker threads for the disk's time).
    async fn append_to_sink(&self, tenant: &str, note: String) {
        let Some(dir) = self.sink.clone() else {
            return;
        };
        let path = sink_file(&dir, tenant);
        let write = move || -> std::io::Result<()> {
            use std::io::Write;
            crate::store::create_private_dir(&dir)?;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            file.write_all(note.as_bytes())?;
            file.sync_data()
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, tenant, "appending a checkpoint to the sink");
            }
            Err(e) => tracing::error!(error = %e, tenant, "appending a checkpoint to the sink"),
        }
    }

    /// A checkpoint of every tenant whose tree grew since its latest one.
    pub async fn run_once(&self) -> Result<(), CheckpointError> {
        for tenant in store::journal::tenants(&self.store).await? {
            self.checkpoint_or_warn(&tenant).await;
        }
        Ok(())
    }

    async fn checkpoint_or_warn(&self, tenant: &str) {
        if let Err(e) = self.checkpoint(tenant).await {
            tracing::warn!(tenant, error = %e, "making a checkpoint");
        }
    }

    /// Makes checkpoints every interval (of every tenant) and whenever `journal` has written
    /// another [`super::CHECKPOINT_RECORDS`] records (of the tenants it wrote for), growing
    /// the trees by the leaves it keeps, until the task is dropped.
    pub async fn run(self: Arc<Self>, journal: super::Journal) {
        self.attach(&journal);
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.interval) => {
                    if let Err(e) = self.run_once().await {
                        tracing::warn!(error = %e, "making checkpoints");
                    }
                }
                () = journal.grown() => {
                    for tenant in journal.tenants_with_leaves() {
                        self.checkpoint_or_warn(&tenant).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_of_several_notes_reads_back_note_by_note() {
        let signer = Signer::from_seed(&[5; 32]);
        let mut text = String::new();
        let mut made = Vec::new();
        for size in 1..=3u64 {
            let c = Checkpoint {
                origin: "h/aperture/t".into(),
                size,
                root: [size as u8; 32],
            };
            let mut n = Note::sign(&c.text(), &c.origin, &signer).unwrap();
            if size == 2 {
                n.add_signature(&c.origin, &Signer::from_seed(&[6; 32]))
                    .unwrap();
            }
            text.push_str(&n.render());
            made.push(n);
        }
        let read: Vec<Note> = read_sink(&text).into_iter().map(Result::unwrap).collect();
        assert_eq!(read, made);
        assert!(read_sink("").is_empty());
        // A cut-off last note is a bad note, not a lost one.
        let cut = &text[..text.len() - 10];
        assert!(read_sink(cut).last().unwrap().is_err());
    }
}
