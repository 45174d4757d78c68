//! The execution-receipt spool: an executed call's receipt is never lost.
//!
//! A decision is journaled before anything runs, so a journal that cannot record stops a call
//! before it reaches the upstream. The execution receipt comes after: the upstream has already
//! acted when the journal is asked to record what happened. When the journal refuses then, the
//! receipt (unsigned, with its disclosures) is appended to a file in the data directory, one
//! JSON line per receipt, and `fsync`ed before the caller is answered (`_meta.receipt_pending`).
//! [`Spool::drain`] moves spooled receipts into the journal, oldest first, once it records again
//! (also after a restart of this node: the file is read again at start). A receipt already in
//! the journal (the node stopped between recording it and rewriting the file) is not recorded
//! twice: receipt ids are unique and checked first.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use engine::receipt::{Disclosures, Receipt};
use serde::{Deserialize, Serialize};

use super::Journal;
use crate::store::{self, Store};

/// The spool file's name in its folder.
const FILE: &str = "executions.jsonl";

/// One spooled receipt: as it was to be appended.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    receipt: Receipt,
    disclosures: Disclosures,
}

/// Why the spool could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The file could not be read or written.
    #[error("execution spool: {0}")]
    Io(#[from] std::io::Error),
    /// A line of the file is not a spooled receipt.
    #[error("execution spool, line {line}: {error}")]
    Corrupt {
        line: usize,
        error: serde_json::Error,
    },
    /// The store could not be asked whether a receipt is recorded.
    #[error("execution spool: {0}")]
    Store(#[from] sqlx::Error),
}

/// The spool of one node (see the module documentation).
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    store: Store,
    /// Held while the file is appended to or rewritten.
    lock: tokio::sync::Mutex<()>,
    /// Receipts in the file.
    pending: AtomicUsize,
}

impl Spool {
    /// The spool in folder `dir` (created when missing), with what an earlier run left in it.
    pub fn open(dir: &Path, store: Store) -> Result<Self, SpoolError> {
        crate::store::create_private_dir(dir)?;
        let path = dir.join(FILE);
        let pending = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().filter(|l| !l.trim().is_empty()).count(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        if pending > 0 {
            tracing::warn!(pending, path = %path.display(), "execution receipts are waiting in the spool; they are recorded once the journal records");
        }
        Ok(Self {
            path,
            store,
            lock: tokio::sync::Mutex::new(()),
            pending: AtomicUsize::new(pending),
        })
    }

    /// Receipts waiting in the file.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Appends `receipt` and its disclosures and makes them durable before returning.
    pub async fn push(
        &self,
        receipt: &Receipt,
        disclosures: &Disclosures,
    ) -> Result<(), SpoolError> {
        let mut line = serde_json::to_vec(&Entry {
            receipt: receipt.clone(),
            disclosures: disclosures.clone(),
        })
        .map_err(|error| SpoolError::Corrupt { line: 0, error })?;
        line.push(b'\n');
        let _held = self.lock.lock().await;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let existed = path.exists();
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            file.write_all(&line)?;
            file.sync_data()?;
            if !existed {
                sync_dir(&path)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| SpoolError::Io(std::io::Error::other(e)))??;
        self.pending.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Moves spooled receipts into `journal`, oldest first, until one is refused (the journal
    /// still cannot record: the rest stays for the next try). Returns how many were moved.
    pub async fn drain(&self, journal: &Journal) -> Result<usize, SpoolError> {
        let _held = self.lock.lock().await;
        let text = match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut moved = 0;
        for (i, line) in lines.iter().enumerate() {
            let entry: Entry = serde_json::from_str(line)
                .map_err(|error| SpoolError::Corrupt { line: i + 1, error })?;
            let recorded = store::journal::by_receipt_id(
                &self.store,
                &entry.receipt.tenant_id,
                &entry.receipt.receipt_id,
            )
            .await;
            let done = match recorded {
                Ok(Some(_)) => true,
                Ok(None) => match journal.append(entry.receipt, &entry.disclosures).await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "the journal still refuses spooled execution receipts");
                        false
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "the store cannot say whether a spooled receipt is recorded");
                    false
                }
            };
            if !done {
                break;
            }
            moved += 1;
        }
        if moved > 0 {
            let rest: String = lines[moved..].iter().map(|l| format!("{l}\n")).collect();
            let path = self.path.clone();
            tokio::task::spawn_blocking(move || rewrite(&path, rest.as_bytes()))
                .await
                .map_err(|e| SpoolError::Io(std::io::Error::other(e)))??;
            self.pending.store(lines.len() - moved, Ordering::Relaxed);
            tracing::info!(
                moved,
                left = lines.len() - moved,
                "spooled execution receipts recorded"
            );
        }
        Ok(moved)
    }

    /// Drains the spool whenever it holds receipts, every `every`, until the task is aborted.
    pub async fn run(self: std::sync::Arc<Self>, journal: Journal, every: std::time::Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.pending() == 0 {
                continue;
            }
            if let Err(e) = self.drain(&journal).await {
                tracing::error!(error = %e, "draining the execution spool");
            }
        }
    }
}

/// Replaces the file at `path` with `bytes`, durably: a new file, fsynced, renamed over it.
fn rewrite(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("jsonl.tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// Makes the folder entry of `path` durable (a created or renamed file survives a crash).
fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}
