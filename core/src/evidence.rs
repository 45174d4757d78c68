//! Evidence bundles of sessions (CONTRACT §13, `docs/evidence.md`): one RFC 8785 document a
//! third party verifies offline with [`engine::evidence::verify`] (`aperture evidence
//! verify`, the dashboard in the browser, or a verifier of their own).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use engine::evidence::{Bundle, FORMAT, ReceiptProof, SignedManifest};
use engine::scope;
use serde_json::{Map, Value, json};

use aperture_types::error::{AppError, ErrorCode};

use crate::error::ServiceError;
use crate::journal::tree;
use crate::principal::Principal;
use crate::services::Services;
use crate::store;

/// Most receipts one bundle holds.
pub const MAX_RECEIPTS: usize = 100_000;

/// The bundle of session `id` as RFC 8785 bytes: read, or run for one's own session;
/// disclosures only for `:read` callers who ask.
pub async fn bundle(
    state: &Services,
    p: &Principal,
    id: &str,
    disclosures: bool,
) -> Result<Vec<u8>, ServiceError> {
    let session = crate::exposure::readable(&state.store, p, id).await?;
    if disclosures {
        p.require(scope::READ)?;
    }
    let tenant = &session.tenant_id;
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = store::journal::of_session(&state.store, tenant, id, after, 1_000).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        rows.extend(page);
        if rows.len() > MAX_RECEIPTS {
            return Err(AppError::new(
                ErrorCode::InvalidArgument,
                format!("the session has more than {MAX_RECEIPTS} receipts"),
            )
            .into());
        }
    }
    // A checkpoint that covers the newest receipt: the latest one, or one made now.
    let newest = rows.last().map_or(0, |r| r.seq);
    let mut checkpoint = store::checkpoints::latest(&state.store, tenant).await?;
    if checkpoint
        .as_ref()
        .is_none_or(|c| c.tree_size < newest.max(1))
    {
        checkpoint = state
            .checkpoints
            .checkpoint(tenant)
            .await
            .map_err(|e| ServiceError::Other(e.into()))?;
    }
    let checkpoint = checkpoint.ok_or_else(|| {
        AppError::new(ErrorCode::Unavailable, "the journal has no checkpoint yet")
    })?;
    let size = u64::try_from(checkpoint.tree_size).unwrap_or(0);
    let indexes: Vec<u64> = rows
        .iter()
        .map(|r| u64::try_from(r.seq - 1).unwrap_or(0))
        .collect();
    let paths = tree::inclusions(&state.store, tenant, &indexes, size).await?;
    let mut receipts = Vec::with_capacity(rows.len());
    let mut proofs = Vec::with_capacity(rows.len());
    let mut all_disclosures = Map::new();
    for (row, path) in rows.iter().zip(paths) {
        let receipt: Value =
            serde_json::from_str(&row.receipt).map_err(|e| ServiceError::Other(e.into()))?;
        proofs.push(ReceiptProof {
            receipt_id: row.columns.receipt_id.clone(),
            leaf_index: u64::try_from(row.seq - 1).unwrap_or(0),
            hashes: path.iter().map(|h| STANDARD.encode(h)).collect(),
        });
        if disclosures {
            all_disclosures.insert(
                row.columns.receipt_id.clone(),
                serde_json::from_str(&row.disclosures)
                    .map_err(|e| ServiceError::Other(e.into()))?,
            );
        }
        receipts.push(receipt);
    }
    let manifests = store::exposure::manifests_of(&state.store, tenant, id)
        .await?
        .into_iter()
        .map(|m| {
            Ok(SignedManifest {
                document: serde_json::from_str(&m.document)?,
                manifest_signature: m.signature,
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()
        .map_err(|e| ServiceError::Other(e.into()))?;
    let mut facts = json!({
        "session_id": session.id,
        "tenant_id": session.tenant_id,
        "environment": session.environment,
        "actor_id": session.actor_id,
        "created_at": store::rfc3339(session.created_at),
        "forks": store::exposure::fork_ids(&state.store, tenant, id).await?,
    });
    for (name, value) in [
        ("parent_id", session.parent_id.map(Value::String)),
        (
            "fork_tools",
            session
                .fork_tools
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok()),
        ),
        (
            "revoked_at",
            session.revoked_at.map(|t| Value::String(store::rfc3339(t))),
        ),
    ] {
        if let (Some(v), Some(map)) = (value, facts.as_object_mut()) {
            map.insert(name.to_owned(), v);
        }
    }
    let cosignatures = store::checkpoints::cosignatures(&state.store, tenant, checkpoint.tree_size)
        .await?
        .into_iter()
        .map(|c| c.line)
        .collect();
    let bundle = Bundle {
        format: FORMAT.to_owned(),
        session: facts,
        manifests,
        receipts,
        disclosures: disclosures.then_some(all_disclosures),
        proofs,
        checkpoint: checkpoint.note,
        cosignatures,
        keys: state.journal.keys().published().await?,
    };
    let value = serde_json::to_value(&bundle).map_err(|e| ServiceError::Other(e.into()))?;
    Ok(engine::canonical::value_bytes(&value))
}
