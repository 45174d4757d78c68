//! The journal as a transparency log, as a service (CONTRACT §13): signed checkpoints, Merkle
//! proofs, witnesses and their cosignatures. The REST handlers and the dashboard call these.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use engine::note::{self, Checkpoint, Note, NoteSignature, VerifierKey};
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use serde::{Deserialize, Serialize};
use serde_json::json;

use aperture_types::error::{AppError, ErrorCode};

use crate::error::ServiceError;
use crate::journal::tree::{self, TreeError};
use crate::principal::Principal;
use crate::services::Services;
use crate::store;

/// Who may read checkpoints and proofs.
const READERS: &[&str] = &[scope::READ, scope::WITNESS];

impl From<TreeError> for ServiceError {
    fn from(e: TreeError) -> Self {
        match e {
            TreeError::Store(e) => e.into(),
            TreeError::OutOfRange(why) => AppError::new(ErrorCode::InvalidArgument, why).into(),
            other => ServiceError::Other(other.into()),
        }
    }
}

/// One checkpoint as listed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointView {
    /// Records it covers.
    pub tree_size: i64,
    /// The signed note, with the witnesses' cosignature lines after the log's signatures.
    pub note: String,
    /// RFC 3339.
    pub made_at: String,
}

/// The note of a stored checkpoint with its cosignatures appended.
async fn with_cosignatures(
    store: &store::Store,
    tenant: &str,
    c: &store::checkpoints::StoredCheckpoint,
) -> Result<String, sqlx::Error> {
    let mut note = c.note.clone();
    for cosignature in store::checkpoints::cosignatures(store, tenant, c.tree_size).await? {
        note.push_str(&cosignature.line);
        note.push('\n');
    }
    Ok(note)
}

/// `GET /journal/checkpoints`: newest first, at most `limit` (1–500), before tree size
/// `before`.
pub async fn list(
    state: &Services,
    p: &Principal,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<CheckpointView>, ServiceError> {
    p.require_any(READERS)?;
    if !(1..=500).contains(&limit) {
        return Err(AppError::invalid_field("limit", "between 1 and 500").into());
    }
    let mut out = Vec::new();
    for c in store::checkpoints::list(&state.store, &p.tenant_id, before, limit).await? {
        out.push(CheckpointView {
            tree_size: c.tree_size,
            note: with_cosignatures(&state.store, &p.tenant_id, &c).await?,
            made_at: store::rfc3339(c.made_at),
        });
    }
    Ok(out)
}

/// The latest checkpoint note of `tenant`, cosignatures included (`None`: it has none).
pub async fn latest_note(state: &Services, tenant: &str) -> Result<Option<String>, ServiceError> {
    let Some(c) = store::checkpoints::latest(&state.store, tenant).await? else {
        return Ok(None);
    };
    Ok(Some(with_cosignatures(&state.store, tenant, &c).await?))
}

/// A proof: `{"tree_size", "leaf_index"?, "hashes"}` with hashes in standard base64.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Proof {
    /// The tree the proof is in.
    pub tree_size: u64,
    /// For an inclusion proof: the leaf (`seq - 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_index: Option<u64>,
    /// The proof's hashes, standard base64.
    pub hashes: Vec<String>,
}

fn positive(field: &str, value: Option<i64>) -> Result<u64, AppError> {
    value
        .filter(|v| *v >= 1)
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| AppError::invalid_field(field, "a whole number from 1"))
}

/// `GET /journal/proofs/inclusion?seq&tree_size`.
pub async fn inclusion(
    state: &Services,
    p: &Principal,
    seq: Option<i64>,
    tree_size: Option<i64>,
) -> Result<Proof, ServiceError> {
    p.require_any(READERS)?;
    let seq = positive("seq", seq)?;
    let size = positive("tree_size", tree_size)?;
    if seq > size {
        return Err(AppError::invalid_field("seq", "at most tree_size").into());
    }
    let hashes = tree::inclusion(&state.store, &p.tenant_id, seq - 1, size).await?;
    Ok(Proof {
        tree_size: size,
        leaf_index: Some(seq - 1),
        hashes: hashes.iter().map(|h| STANDARD.encode(h)).collect(),
    })
}

/// `GET /journal/proofs/consistency?from&to`.
pub async fn consistency(
    state: &Services,
    p: &Principal,
    from: Option<i64>,
    to: Option<i64>,
) -> Result<Proof, ServiceError> {
    p.require_any(READERS)?;
    let from = positive("from", from)?;
    let to = positive("to", to)?;
    if from > to {
        return Err(AppError::invalid_field("from", "at most to").into());
    }
    let hashes = tree::consistency(&state.store, &p.tenant_id, from, to).await?;
    Ok(Proof {
        tree_size: to,
        leaf_index: None,
        hashes: hashes.iter().map(|h| STANDARD.encode(h)).collect(),
    })
}

/// A registered witness, as listed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WitnessView {
    /// Its name: the key name of its cosignatures.
    pub name: String,
    /// Its cosigner key, note verifier format.
    pub key: String,
    /// RFC 3339.
    pub created_at: String,
}

/// `POST /journal/witnesses` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewWitness {
    /// The witness's name.
    pub name: String,
    /// Its Ed25519 cosigner key, `<name>+<key id>+<base64(0x04 ‖ key)>`.
    pub key: String,
}

fn view(w: store::checkpoints::Witness) -> WitnessView {
    WitnessView {
        name: w.name,
        key: w.vkey,
        created_at: store::rfc3339(w.created_at),
    }
}

/// `POST /journal/witnesses` (admin, journaled).
pub async fn add_witness(
    state: &Services,
    p: &Principal,
    request: NewWitness,
) -> Result<WitnessView, ServiceError> {
    p.require(scope::ADMIN)?;
    if !note::valid_key_name(&request.name) || request.name.len() > 128 {
        return Err(
            AppError::invalid_field("name", "1–128 characters without spaces or `+`").into(),
        );
    }
    let key = VerifierKey::parse(&request.key)
        .map_err(|e| AppError::invalid_field("key", e.to_string()))?;
    if key.kind != note::COSIGNATURE_V1 {
        return Err(AppError::invalid_field(
            "key",
            "a cosigner key (signature type 0x04, cosignature/v1)",
        )
        .into());
    }
    if key.name != request.name {
        return Err(
            AppError::invalid_field("key", "the key's name is not the witness's name").into(),
        );
    }
    let key_text = key.to_string();
    state
        .journal
        .admin(
            &p.tenant_id,
            &p.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "witness.add",
            json!({"name": request.name, "key": key_text}),
        )
        .await?;
    if !store::checkpoints::add_witness(&state.store, &p.tenant_id, &request.name, &key_text)
        .await?
    {
        return Err(AppError::new(
            ErrorCode::Conflict,
            format!("a witness named {} exists", request.name),
        )
        .into());
    }
    let listed = store::checkpoints::witnesses(&state.store, &p.tenant_id).await?;
    listed
        .into_iter()
        .find(|w| w.name == request.name)
        .map(view)
        .ok_or_else(|| AppError::not_found("witness").into())
}

/// `GET /journal/witnesses` (admin).
pub async fn witnesses(state: &Services, p: &Principal) -> Result<Vec<WitnessView>, ServiceError> {
    p.require(scope::ADMIN)?;
    Ok(store::checkpoints::witnesses(&state.store, &p.tenant_id)
        .await?
        .into_iter()
        .map(view)
        .collect())
}

/// `DELETE /journal/witnesses/{name}` (admin, journaled).
pub async fn remove_witness(
    state: &Services,
    p: &Principal,
    name: &str,
) -> Result<(), ServiceError> {
    p.require(scope::ADMIN)?;
    let known = store::checkpoints::witnesses(&state.store, &p.tenant_id)
        .await?
        .into_iter()
        .any(|w| w.name == name);
    if !known {
        return Err(AppError::not_found("witness").into());
    }
    state
        .journal
        .admin(
            &p.tenant_id,
            &p.author(),
            Decision::Allow,
            ReasonCode::Ok,
            "witness.remove",
            json!({"name": name}),
        )
        .await?;
    store::checkpoints::remove_witness(&state.store, &p.tenant_id, name).await?;
    Ok(())
}

/// `POST /journal/checkpoints/cosignatures` body: a checkpoint note of this log carrying the
/// witness's `cosignature/v1` line (the log's own signature lines may stay in it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CosignedNote {
    /// The note.
    pub note: String,
}

/// What a cosignature post stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Cosigned {
    /// The checkpoint cosigned.
    pub tree_size: i64,
    /// The witnesses whose cosignatures were stored.
    pub witnesses: Vec<String>,
}

/// `POST /journal/checkpoints/cosignatures` (witness): stores the cosignatures of registered
/// witnesses over a stored checkpoint. A note that is not a stored checkpoint of this tenant,
/// or that carries a cosignature line of no registered witness (or one that does not verify),
/// is refused as a whole.
pub async fn cosign(
    state: &Services,
    p: &Principal,
    request: CosignedNote,
) -> Result<Cosigned, ServiceError> {
    p.require(scope::WITNESS)?;
    let note =
        Note::parse(&request.note).map_err(|e| AppError::invalid_field("note", e.to_string()))?;
    let checkpoint = Checkpoint::parse(&note.text)
        .map_err(|e| AppError::invalid_field("note", e.to_string()))?;
    let size = i64::try_from(checkpoint.size).unwrap_or(i64::MAX);
    let stored = store::checkpoints::at(&state.store, &p.tenant_id, size)
        .await?
        .and_then(|c| Note::parse(&c.note).ok())
        .filter(|c| c.text == note.text)
        .ok_or_else(|| AppError::invalid_field("note", "not a checkpoint this log has made"))?;
    let registered: Vec<(String, VerifierKey)> =
        store::checkpoints::witnesses(&state.store, &p.tenant_id)
            .await?
            .into_iter()
            .filter_map(|w| Some((w.name, VerifierKey::parse(&w.vkey).ok()?)))
            .collect();
    let mut stored_lines = Vec::new();
    for line in &note.signatures {
        if stored.signatures.contains(line) {
            continue; // the log's own signature
        }
        let Some((name, key)) = registered
            .iter()
            .find(|(name, key)| *name == line.name && key.id() == line.id)
        else {
            return Err(AppError::new(
                ErrorCode::PermissionDenied,
                format!("{} is not a registered witness of this log", line.name),
            )
            .into());
        };
        let one = Note {
            text: note.text.clone(),
            signatures: vec![line.clone()],
        };
        let time = one.verify_cosignature(key).map_err(|e| {
            AppError::invalid_field("note", format!("the cosignature of {name}: {e}"))
        })?;
        stored_lines.push((name.clone(), line.clone(), time));
    }
    if stored_lines.is_empty() {
        return Err(AppError::invalid_field("note", "carries no cosignature").into());
    }
    let mut witnesses = Vec::new();
    for (name, line, time) in stored_lines {
        store::checkpoints::add_cosignature(
            &state.store,
            &p.tenant_id,
            size,
            &store::checkpoints::Cosignature {
                witness: name.clone(),
                line: NoteSignature::line(&line),
                signed_at: i64::try_from(time).unwrap_or(i64::MAX),
            },
        )
        .await?;
        witnesses.push(name);
    }
    Ok(Cosigned {
        tree_size: size,
        witnesses,
    })
}

/// The newest `limit` checkpoints of `tenant` as the dashboard shows them.
pub async fn rows(
    state: &Services,
    tenant: &str,
    limit: i64,
) -> Result<Vec<aperture_types::dto::CheckpointRow>, ServiceError> {
    let mut out = Vec::new();
    for c in store::checkpoints::list(&state.store, tenant, None, limit).await? {
        let cosigners = store::checkpoints::cosignatures(&state.store, tenant, c.tree_size)
            .await?
            .into_iter()
            .map(|c| c.witness)
            .collect();
        out.push(aperture_types::dto::CheckpointRow {
            tree_size: c.tree_size,
            made_at: store::rfc3339(c.made_at),
            cosigners,
            note: with_cosignatures(&state.store, tenant, &c).await?,
        });
    }
    Ok(out)
}

/// The dashboard's Journal page (read or witness; witnesses listed for admins).
pub async fn journal_view(
    state: &Services,
    p: &Principal,
) -> Result<aperture_types::dto::JournalView, ServiceError> {
    p.require_any(READERS)?;
    let origin = state.checkpoints.origin_of(&p.tenant_id).await?;
    let verifier_key =
        crate::journal::checkpoints::verifier_key(&origin, state.journal.keys().signer())
            .map(|k| k.to_string())
            .unwrap_or_default();
    let witnesses = if p.scopes.satisfies(scope::ADMIN) {
        witnesses(state, p)
            .await?
            .into_iter()
            .map(|w| aperture_types::dto::WitnessRow {
                name: w.name,
                key: w.key,
                created_at: w.created_at,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(aperture_types::dto::JournalView {
        origin,
        verifier_key,
        checkpoints: rows(state, &p.tenant_id, 20).await?,
        witnesses,
        now: store::rfc3339(store::now_ms()),
    })
}
