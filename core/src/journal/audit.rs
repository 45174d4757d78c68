//! What `aperture journal verify` checks beyond the chains: each tenant's journal against
//! every signed checkpoint of it, from the database and from the sink outside it, and against
//! the trees seen outside the database (witnesses' states, the operator's `--expect`). A chain
//! cannot see its own tail cut off, nor records reissued under the deleted positions; a
//! checkpoint signed before can: its tree size and root no longer match. Nor can anything in
//! the database see a whole tenant erased, or the journal, its checkpoints and the sink all
//! rolled back together to an earlier cosigned size: only what a witness kept can.

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
    /// The trees seen outside the database that the journal holds, in words.
    pub held: Vec<String>,
    /// Everything wrong, in words.
    pub problems: Vec<String>,
}

/// A tree someone outside the database saw: a witness (its state file, with the origin and
/// the root it cosigned) or the operator (`aperture journal verify --expect <tenant>:<size>`).
/// The tenant's journal must still hold at least `size` records, and when the root is known,
/// its first `size` records must hash to it.
#[derive(Debug, Clone)]
pub struct Expected {
    /// Tenant.
    pub tenant_id: String,
    /// Records seen (at least 1).
    pub size: u64,
    /// The root of the tree of `size` records, when known.
    pub root: Option<merkle::Hash>,
    /// The log the witness followed, when known.
    pub origin: Option<String>,
    /// Who saw it, in words (`the witness state w.json`, `--expect acme:12`).
    pub from: String,
}

/// What a tree size is wanted for: a signed checkpoint found in the database or the sink, or
/// a tree seen outside the database.
enum Wanted<'a> {
    Checkpoint(&'static str),
    Seen(&'a Expected),
}

/// A checkpoint as found in one place.
struct Found {
    from: &'static str,
    note: Result<Note, note::NoteError>,
}

/// Every tenant with a journal, a log, a sink file or a tree seen outside the database.
async fn every_tenant(
    store: &Store,
    sink: Option<&Path>,
    expected: &[Expected],
) -> Result<Vec<String>, sqlx::Error> {
    let mut tenants: BTreeSet<String> = store::journal::tenants(store).await?.into_iter().collect();
    tenants.extend(store::checkpoints::logged_tenants(store).await?);
    tenants.extend(expected.iter().map(|e| e.tenant_id.clone()));
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
/// carry valid cosignatures of at least `quorum` of them. Each of `expected` must be held:
/// its tenant's journal has at least its size of records in sequence, hashing to its root
/// when known, under its origin when known.
pub async fn verify_checkpoints(
    store: &Store,
    keys: &JwkSet,
    sink: Option<&Path>,
    witnesses: &[VerifierKey],
    quorum: usize,
    expected: &[Expected],
) -> Result<Vec<CheckpointReport>, sqlx::Error> {
    let mut reports = Vec::new();
    for tenant in every_tenant(store, sink, expected).await? {
        let seen: Vec<&Expected> = expected.iter().filter(|e| e.tenant_id == tenant).collect();
        reports.push(verify_tenant(store, &tenant, keys, sink, witnesses, quorum, &seen).await?);
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
    expected: &[&Expected],
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
    // Tree size → root, from every checkpoint whose signature holds and every tree seen
    // outside the database (whose root may be unknown).
    let mut wanted: BTreeMap<u64, Vec<(Wanted, Option<merkle::Hash>)>> = BTreeMap::new();
    for e in expected {
        if let Some(want) = &e.origin {
            match &origin {
                Some(o) if o == want => {}
                Some(o) => report.problems.push(format!(
                    "{}: the witness followed the log {want}, the tenant's log is {o}",
                    e.from
                )),
                None => report.problems.push(format!(
                    "{}: the witness followed the log {want}; the database has no log of the \
                     tenant (its checkpoints were deleted)",
                    e.from
                )),
            }
        }
        wanted
            .entry(e.size)
            .or_default()
            .push((Wanted::Seen(e), e.root));
    }
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
        wanted
            .entry(c.size)
            .or_default()
            .push((Wanted::Checkpoint(f.from), Some(c.root)));
    }
    // The journal's roots at those sizes, from the receipts themselves.
    let mut tree = Frontier::new();
    let mut sizes = wanted.iter().peekable();
    let mut after = 0i64;
    // Whether the tenant has any record at all.
    let mut any = false;
    'read: while sizes.peek().is_some() {
        let page = store::journal::page(store, tenant, after, 500).await?;
        if page.is_empty() {
            break;
        }
        any = true;
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
                    for (what, want) in roots {
                        let matches = want.is_none_or(|w| w == root);
                        match what {
                            Wanted::Checkpoint(_) if matches => {
                                report.matched += 1;
                                report.largest = report.largest.max(*size);
                            }
                            Wanted::Checkpoint(from) => report.problems.push(format!(
                                "checkpoint of size {size} ({from}): the journal's first {size} \
                                 records do not hash to its root (records were changed, removed \
                                 or reissued)"
                            )),
                            Wanted::Seen(e) if matches => report.held.push(format!(
                                "{}: the journal holds the {size} records{}",
                                e.from,
                                if want.is_some() {
                                    ", with the root the witness cosigned"
                                } else {
                                    ""
                                }
                            )),
                            Wanted::Seen(e) => report.problems.push(format!(
                                "{}: the journal's first {size} records do not hash to the root \
                                 the witness cosigned (records were changed, removed or reissued)",
                                e.from
                            )),
                        }
                    }
                }
            }
        }
    }
    for (size, roots) in sizes {
        for (what, _) in roots {
            report.problems.push(match what {
                Wanted::Checkpoint(from) => format!(
                    "checkpoint of size {size} ({from}): the journal has only {} records in \
                     sequence (records were deleted)",
                    tree.size()
                ),
                Wanted::Seen(e) if !any => format!(
                    "{}: expected at least {size} records, found 0 (the tenant has no journal: \
                     erased, or never in this database)",
                    e.from
                ),
                Wanted::Seen(e) => format!(
                    "{}: expected at least {size} records, found {} in sequence (records were \
                     deleted, or the journal was rolled back)",
                    e.from,
                    tree.size()
                ),
            });
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
