//! What `aperture journal verify` checks beyond the chains: each tenant's journal against
//! every signed checkpoint of it, from the database and from the sink outside it. A chain
//! cannot see its own tail cut off, nor records reissued under the deleted positions; a
//! checkpoint signed before can: its tree size and root no longer match.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use engine::merkle::{self, Frontier};
use engine::note::{self, Checkpoint, Note, VerifierKey};
use engine::receipt::{JwkSet, Receipt, receipt_canonical_bytes, verifying_key_from_jwk};

use super::checkpoints::{read_sink, sink_file};
use crate::store::{self, Store};

/// What the checkpoints of one tenant showed.
#[derive(Debug, Clone, Default)]
pub struct CheckpointReport {
    /// Tenant.
    pub tenant_id: String,
    /// Distinct checkpoints that matched the journal (signature and root).
    pub matched: usize,
    /// The largest matched tree size.
    pub largest: u64,
    /// Everything wrong, in words.
    pub problems: Vec<String>,
}

/// A checkpoint as found in one place.
struct Found {
    from: &'static str,
    note: Result<Note, note::NoteError>,
}

/// Every tenant with a journal, a log or a sink file.
async fn every_tenant(store: &Store, sink: Option<&Path>) -> Result<Vec<String>, sqlx::Error> {
    let mut tenants: BTreeSet<String> = store::journal::tenants(store).await?.into_iter().collect();
    tenants.extend(store::checkpoints::logged_tenants(store).await?);
    if let Some(dir) = sink
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for entry in entries.flatten() {
            if let Some(name) = entry.file_name().to_str()
                && let Some(tenant) = name.strip_suffix(".checkpoints")
                && store::tenants::is_valid_id(tenant)
            {
                tenants.insert(tenant.to_owned());
            }
        }
    }
    Ok(tenants.into_iter().collect())
}

/// Checks every tenant's journal against its checkpoints in the database and in `sink`:
/// each must be signed under the log's origin by one of `keys`, and the journal's first
/// `tree size` records must hash to its root. With `witnesses`, the newest checkpoint must
/// carry valid cosignatures of at least `quorum` of them.
pub async fn verify_checkpoints(
    store: &Store,
    keys: &JwkSet,
    sink: Option<&Path>,
    witnesses: &[VerifierKey],
    quorum: usize,
) -> Result<Vec<CheckpointReport>, sqlx::Error> {
    let mut reports = Vec::new();
    for tenant in every_tenant(store, sink).await? {
        reports.push(verify_tenant(store, &tenant, keys, sink, witnesses, quorum).await?);
    }
    Ok(reports)
}

async fn verify_tenant(
    store: &Store,
    tenant: &str,
    keys: &JwkSet,
    sink: Option<&Path>,
    witnesses: &[VerifierKey],
    quorum: usize,
) -> Result<CheckpointReport, sqlx::Error> {
    let mut report = CheckpointReport {
        tenant_id: tenant.to_owned(),
        ..CheckpointReport::default()
    };
    let mut found = Vec::new();
    let mut before = None;
    loop {
        let page = store::checkpoints::list(store, tenant, before, 500).await?;
        let Some(last) = page.last() else { break };
        before = Some(last.tree_size);
        found.extend(page.into_iter().map(|c| Found {
            from: "database",
            note: Note::parse(&c.note),
        }));
    }
    if let Some(dir) = sink {
        let path = sink_file(dir, tenant);
        match std::fs::read_to_string(&path) {
            Ok(text) => found.extend(
                read_sink(&text)
                    .into_iter()
                    .map(|note| Found { from: "sink", note }),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => report
                .problems
                .push(format!("the sink {} cannot be read: {e}", path.display())),
        }
    }
    let log = store::checkpoints::log(store, tenant).await?;
    let origin = log.as_ref().map(|l| l.origin.clone());
    // Tree size → root, from every checkpoint whose signature holds.
    let mut wanted: BTreeMap<u64, Vec<(&'static str, merkle::Hash)>> = BTreeMap::new();
    let decoded: Vec<_> = keys
        .keys
        .iter()
        .filter_map(|k| verifying_key_from_jwk(k).ok())
        .collect();
    for f in &found {
        let note = match &f.note {
            Ok(n) => n,
            Err(e) => {
                report
                    .problems
                    .push(format!("a checkpoint in the {} is unreadable: {e}", f.from));
                continue;
            }
        };
        let c = match Checkpoint::parse(&note.text) {
            Ok(c) => c,
            Err(e) => {
                report
                    .problems
                    .push(format!("a checkpoint in the {} is unreadable: {e}", f.from));
                continue;
            }
        };
        let what = format!("checkpoint of size {} ({})", c.size, f.from);
        if let Some(o) = &origin
            && *o != c.origin
        {
            report.problems.push(format!(
                "{what}: origin {} is not the log's origin {o}",
                c.origin
            ));
            continue;
        }
        let signed = decoded.iter().any(|key| {
            VerifierKey::new(&c.origin, note::ED25519, *key).is_ok_and(|k| note.verify(&k).is_ok())
        });
        if !signed {
            report.problems.push(format!(
                "{what}: not signed by a trusted key under {}",
                c.origin
            ));
            continue;
        }
        wanted.entry(c.size).or_default().push((f.from, c.root));
    }
    // The journal's roots at those sizes, from the receipts themselves.
    let mut tree = Frontier::new();
    let mut sizes = wanted.iter().peekable();
    let mut after = 0i64;
    'read: while sizes.peek().is_some() {
        let page = store::journal::page(store, tenant, after, 500).await?;
        if page.is_empty() {
            break;
        }
        for row in &page {
            if row.seq != after + 1 {
                break 'read;
            }
            after = row.seq;
            let Ok(r) = serde_json::from_str::<Receipt>(&row.receipt) else {
                break 'read;
            };
            tree.push(merkle::leaf_hash(&receipt_canonical_bytes(&r)));
            while let Some((size, _)) = sizes.peek()
                && **size == tree.size()
            {
                if let Some((size, roots)) = sizes.next() {
                    let root = tree.root();
                    for (from, want) in roots {
                        if *want == root {
                            report.matched += 1;
                            report.largest = report.largest.max(*size);
                        } else {
                            report.problems.push(format!(
                                "checkpoint of size {size} ({from}): the journal's first {size} \
                                 records do not hash to its root (records were changed, removed \
                                 or reissued)"
                            ));
                        }
                    }
                }
            }
        }
    }
    for (size, roots) in sizes {
        for (from, _) in roots {
            report.problems.push(format!(
                "checkpoint of size {size} ({from}): the journal has only {} records in \
                 sequence (records were deleted)",
                tree.size()
            ));
        }
    }
    if !witnesses.is_empty() {
        quorum_problem(store, tenant, witnesses, quorum, &mut report).await?;
    }
    Ok(report)
}

/// Checks that the newest stored checkpoint carries cosignatures of `quorum` of `witnesses`.
async fn quorum_problem(
    store: &Store,
    tenant: &str,
    witnesses: &[VerifierKey],
    quorum: usize,
    report: &mut CheckpointReport,
) -> Result<(), sqlx::Error> {
    let Some(latest) = store::checkpoints::latest(store, tenant).await? else {
        report
            .problems
            .push("no checkpoint for witnesses to have cosigned".into());
        return Ok(());
    };
    let Ok(mut note) = Note::parse(&latest.note) else {
        return Ok(());
    };
    for c in store::checkpoints::cosignatures(store, tenant, latest.tree_size).await? {
        if let Ok(line) = note::NoteSignature::parse(&c.line) {
            note.signatures.push(line);
        }
    }
    let cosigned = witnesses
        .iter()
        .filter(|w| note.verify_cosignature(w).is_ok())
        .count();
    if cosigned < quorum {
        report.problems.push(format!(
            "the newest checkpoint (size {}) is cosigned by {cosigned} of the given witnesses, \
             {quorum} asked for",
            latest.tree_size
        ));
    }
    Ok(())
}
