//! Evidence bundles (CONTRACT §13, `docs/evidence.md`): everything a third party needs to check,
//! offline and without the gateway's database, that a session's receipts and manifests are
//! authentic and recorded in the tenant's journal — every signed manifest document of the
//! session, every receipt of it, an inclusion proof of each receipt in a signed checkpoint of
//! the journal's Merkle tree, the checkpoint, its witnesses' cosignatures and the public keys.
//!
//! [`verify`] is the one verifier: `aperture evidence verify` runs it, and so does the
//! dashboard in the browser (compiled to wasm). What it proves is authenticity and inclusion;
//! not that the bundle is complete (a bundle can leave receipts out).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical;
use crate::merkle::{self, Hash};
use crate::note::{self, Checkpoint, Note, NoteSignature, VerifierKey};
use crate::receipt::{
    JwkSet, ManifestDocument, verify_manifest_with_keys, verify_receipt_json,
    verifying_key_from_jwk,
};

/// The `format` member.
pub const FORMAT: &str = "aperture-evidence/v1";

/// A signed manifest document, as `GET /sessions/{id}/manifest` serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedManifest {
    /// The document.
    pub document: Value,
    /// base64url Ed25519 over its JCS bytes.
    pub manifest_signature: String,
}

/// The inclusion proof of one receipt in the bundled checkpoint's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptProof {
    /// The receipt it is for.
    pub receipt_id: String,
    /// Its leaf: `seq - 1`.
    pub leaf_index: u64,
    /// RFC 9162 inclusion path, standard base64.
    pub hashes: Vec<String>,
}

/// An evidence bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// [`FORMAT`].
    pub format: String,
    /// The session: `session_id`, `tenant_id`, `environment`, `actor_id`, `parent_id` (a
    /// fork's), `forks` (its children's ids), `created_at`.
    pub session: Value,
    /// Every signed manifest document of the session, oldest first.
    pub manifests: Vec<SignedManifest>,
    /// Every receipt of the session, in journal order.
    pub receipts: Vec<Value>,
    /// The receipts' disclosures by receipt id, only when asked for (`?disclosures=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disclosures: Option<Map<String, Value>>,
    /// One inclusion proof per receipt, in the same order.
    pub proofs: Vec<ReceiptProof>,
    /// The checkpoint note (its text and the log's signature lines).
    pub checkpoint: String,
    /// Witnesses' cosignature lines of the checkpoint.
    pub cosignatures: Vec<String>,
    /// The journal's public keys (JWK set).
    pub keys: JwkSet,
}

/// Where the keys that were trusted came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysFrom {
    /// The bundle's own `keys` (whoever made the bundle chose them).
    Bundle,
    /// Keys the verifier pinned.
    Trusted,
}

/// What a bundle proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The session.
    pub session_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Receipts authentic and included.
    pub receipts: usize,
    /// Manifest documents authentic.
    pub manifests: usize,
    /// Disclosures that match their receipts' digests.
    pub disclosures: usize,
    /// The checkpoint's log.
    pub origin: String,
    /// Its tree size.
    pub tree_size: u64,
    /// Key ids that signed the checkpoint.
    pub checkpoint_keys: Vec<String>,
    /// Witness names whose cosignatures verified (among those given).
    pub cosigned_by: Vec<String>,
    /// Where the trusted keys came from.
    pub keys_from: KeysFrom,
}

impl std::fmt::Display for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "session {} (tenant {}): {} receipts and {} manifest documents are signed by {} and \
             the receipts are in the journal tree of {} records of {}, whose checkpoint is signed \
             by {}",
            self.session_id,
            self.tenant_id,
            self.receipts,
            self.manifests,
            match self.keys_from {
                KeysFrom::Trusted => "trusted keys",
                KeysFrom::Bundle => "the bundle's own keys (not pinned: give trusted keys)",
            },
            self.tree_size,
            self.origin,
            self.checkpoint_keys.join(", ")
        )?;
        if self.disclosures > 0 {
            writeln!(f, "{} disclosures match their receipts", self.disclosures)?;
        }
        if !self.cosigned_by.is_empty() {
            writeln!(f, "cosigned by {}", self.cosigned_by.join(", "))?;
        }
        write!(
            f,
            "this proves authenticity and inclusion, not that the bundle holds every record"
        )
    }
}

/// Why a bundle does not verify: what failed, in words, naming the receipt or line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvidenceError(pub String);

fn fail<T>(what: impl Into<String>) -> Result<T, EvidenceError> {
    Err(EvidenceError(what.into()))
}

fn decode_hash(text: &str) -> Option<Hash> {
    STANDARD.decode(text).ok()?.try_into().ok()
}

/// Verifies a bundle (its JSON text). Keys: `trusted` when given (then nothing the bundle says
/// about keys is trusted), else the bundle's own. With `witnesses`, at least `quorum` of them
/// must have cosigned the checkpoint. A text with an object naming a member twice, anywhere,
/// is refused before anything else ([`canonical::parse_strict`]): which of the two a reader
/// takes is up to the reader, so such a bundle would not show everyone what was signed.
pub fn verify(
    text: &str,
    trusted: Option<&JwkSet>,
    witnesses: &[VerifierKey],
    quorum: usize,
) -> Result<Verified, EvidenceError> {
    let value = canonical::parse_strict(text)
        .map_err(|e| EvidenceError(format!("not an evidence bundle: {e}")))?;
    let bundle: Bundle = serde_path_to_error::deserialize(value)
        .map_err(|e| EvidenceError(format!("not an evidence bundle: {e}")))?;
    if bundle.format != FORMAT {
        return fail(format!("format is {:?}, not {FORMAT}", bundle.format));
    }
    let (keys, keys_from) = match trusted {
        Some(t) => (t, KeysFrom::Trusted),
        None => (&bundle.keys, KeysFrom::Bundle),
    };
    let text_of = |name: &str| {
        bundle
            .session
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| EvidenceError(format!("session.{name} is missing")))
    };
    let session_id = text_of("session_id")?;
    let tenant_id = text_of("tenant_id")?;

    // The checkpoint: the log's signature by a trusted key under its origin.
    let note =
        Note::parse(&bundle.checkpoint).map_err(|e| EvidenceError(format!("checkpoint: {e}")))?;
    let checkpoint =
        Checkpoint::parse(&note.text).map_err(|e| EvidenceError(format!("checkpoint: {e}")))?;
    if !checkpoint
        .origin
        .ends_with(&format!("/aperture/{tenant_id}"))
    {
        return fail(format!(
            "checkpoint: origin {} is not a log of tenant {tenant_id}",
            checkpoint.origin
        ));
    }
    let mut checkpoint_keys = Vec::new();
    for jwk in &keys.keys {
        let Ok(key) = verifying_key_from_jwk(jwk) else {
            continue;
        };
        if let Ok(vk) = VerifierKey::new(&checkpoint.origin, note::ED25519, key)
            && note.verify(&vk).is_ok()
        {
            checkpoint_keys.push(jwk.kid.clone());
        }
    }
    if checkpoint_keys.is_empty() {
        return fail(format!(
            "checkpoint: not signed by any of the {} under {}",
            match keys_from {
                KeysFrom::Trusted => "trusted keys",
                KeysFrom::Bundle => "bundle's keys",
            },
            checkpoint.origin
        ));
    }
    // Witnesses.
    let mut cosigned = note.clone();
    for line in &bundle.cosignatures {
        cosigned.signatures.push(
            NoteSignature::parse(line)
                .map_err(|e| EvidenceError(format!("cosignature {line:?}: {e}")))?,
        );
    }
    let cosigned_by: Vec<String> = witnesses
        .iter()
        .filter(|w| cosigned.verify_cosignature(w).is_ok())
        .map(|w| w.name.clone())
        .collect();
    if cosigned_by.len() < quorum {
        return fail(format!(
            "cosignatures: {} of the given witnesses cosigned the checkpoint, {quorum} asked for",
            cosigned_by.len()
        ));
    }

    // Manifests.
    for (i, m) in bundle.manifests.iter().enumerate() {
        let document: ManifestDocument = serde_json::from_value(m.document.clone())
            .map_err(|e| EvidenceError(format!("manifest {i}: {e}")))?;
        // The signature covers the document exactly as bundled.
        if canonical::value_bytes(&m.document)
            != canonical::to_canonical_bytes(&document)
                .map_err(|e| EvidenceError(format!("manifest {i}: {e}")))?
        {
            return fail(format!("manifest {i}: unknown or re-spelled members"));
        }
        verify_manifest_with_keys(&document, &m.manifest_signature, &keys.keys)
            .map_err(|e| EvidenceError(format!("manifest {} ({i}): {e}", document.manifest_id)))?;
        if document.session_id != session_id || document.tenant_id != tenant_id {
            return fail(format!(
                "manifest {}: of session {}, not {session_id}",
                document.manifest_id, document.session_id
            ));
        }
    }

    // Receipts: signed, of this session, in the checkpoint's tree.
    if bundle.proofs.len() != bundle.receipts.len() {
        return fail(format!(
            "{} receipts but {} proofs",
            bundle.receipts.len(),
            bundle.proofs.len()
        ));
    }
    let mut disclosures = 0;
    for (i, (r, proof)) in bundle.receipts.iter().zip(&bundle.proofs).enumerate() {
        let id = r
            .get("receipt_id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let what = format!("receipt {i} ({id})");
        verify_receipt_json(r, &keys.keys).map_err(|e| EvidenceError(format!("{what}: {e}")))?;
        for (member, want) in [("session_id", &session_id), ("tenant_id", &tenant_id)] {
            if r.get(member).and_then(Value::as_str) != Some(want.as_str()) {
                return fail(format!("{what}: {member} is not {want}"));
            }
        }
        let seq = r
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| EvidenceError(format!("{what}: not journaled (no seq)")))?;
        if proof.receipt_id != id || proof.leaf_index + 1 != seq {
            return fail(format!(
                "{what}: its proof is for {} at leaf {}",
                proof.receipt_id, proof.leaf_index
            ));
        }
        let hashes = proof
            .hashes
            .iter()
            .map(|h| decode_hash(h))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| EvidenceError(format!("{what}: a proof hash is not base64 SHA-256")))?;
        let leaf = merkle::leaf_hash(&canonical::value_bytes(r));
        merkle::verify_inclusion(
            &leaf,
            proof.leaf_index,
            checkpoint.size,
            &hashes,
            &checkpoint.root,
        )
        .map_err(|e| {
            EvidenceError(format!(
                "{what}: not in the checkpoint's tree of {} records: {e}",
                checkpoint.size
            ))
        })?;
        if let Some(d) = bundle.disclosures.as_ref().and_then(|all| all.get(&id)) {
            // CONTRACT §6: the digest is SHA-256 of the disclosures' JCS bytes.
            let digest = canonical::hash_value(d);
            if r.get("disclosures_digest").and_then(Value::as_str) != Some(digest.as_str()) {
                return fail(format!(
                    "{what}: the disclosures do not match its disclosures_digest"
                ));
            }
            disclosures += 1;
        }
    }
    Ok(Verified {
        session_id,
        tenant_id,
        receipts: bundle.receipts.len(),
        manifests: bundle.manifests.len(),
        disclosures,
        origin: checkpoint.origin,
        tree_size: checkpoint.size,
        checkpoint_keys,
        cosigned_by,
        keys_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::{
        Decision, ReasonCode, Receipt, ReceiptKind, Signer, receipt_canonical_bytes, receipt_hash,
        sign_receipt,
    };
    use serde_json::json;

    fn signer() -> Signer {
        Signer::from_seed(&[3; 32])
    }

    fn receipt(seq: u64, prev: &str, session: &str) -> Receipt {
        sign_receipt(
            Receipt {
                receipt_id: format!("rcp_{seq}"),
                kind: ReceiptKind::Decision,
                decision: Decision::Allow,
                reason: ReasonCode::Ok,
                tenant_id: "acme".into(),
                environment: None,
                session_id: Some(session.into()),
                manifest_id: None,
                actor_id: "a".into(),
                principal: None,
                turn_id: None,
                invocation_id: None,
                tool: Some("t".into()),
                tool_version: None,
                schema_hash: None,
                args_hash: None,
                policy_id: None,
                policy_version: None,
                mode: None,
                binding: None,
                limits: Some(json!({"calls": {"per_session": 5}})),
                redaction: None,
                target: Some(json!({"upstream_id": "ups_1", "tool": "t"})),
                issued_at: "2026-12-02T00:00:00Z".into(),
                seq: Some(seq),
                prev_hash: Some(prev.into()),
                disclosures_digest: "sha256:00".into(),
                key_id: String::new(),
                signature: String::new(),
            },
            &signer(),
        )
        .unwrap()
    }

    /// A journal of 7 records, records 2, 3 and 6 of session `ses_1`, and its bundle.
    fn bundle() -> String {
        let mut journal = Vec::new();
        let mut prev = crate::canonical::ZERO_HASH.to_owned();
        for seq in 1..=7 {
            let session = if [2, 3, 6].contains(&seq) {
                "ses_1"
            } else {
                "ses_2"
            };
            let r = receipt(seq, &prev, session);
            prev = receipt_hash(&r).unwrap();
            journal.push(r);
        }
        let leaves: Vec<Hash> = journal
            .iter()
            .map(|r| merkle::leaf_hash(&receipt_canonical_bytes(r)))
            .collect();
        let origin = "gw.example/aperture/acme";
        let note = Note::sign(
            &Checkpoint {
                origin: origin.into(),
                size: 7,
                root: merkle::root_of(&leaves),
            }
            .text(),
            origin,
            &signer(),
        )
        .unwrap();
        let mine: Vec<&Receipt> = journal
            .iter()
            .filter(|r| r.session_id.as_deref() == Some("ses_1"))
            .collect();
        let proofs = mine
            .iter()
            .map(|r| {
                let mut tree: &[Hash] = &leaves;
                ReceiptProof {
                    receipt_id: r.receipt_id.clone(),
                    leaf_index: r.seq.unwrap() - 1,
                    hashes: merkle::inclusion_proof(r.seq.unwrap() - 1, 7, &mut tree)
                        .unwrap()
                        .iter()
                        .map(|h| STANDARD.encode(h))
                        .collect(),
                }
            })
            .collect();
        let witness =
            note::cosign(&note.text, "w.example/1", &Signer::from_seed(&[4; 32]), 17).unwrap();
        let b = Bundle {
            format: FORMAT.into(),
            session: json!({"session_id": "ses_1", "tenant_id": "acme", "forks": []}),
            manifests: vec![],
            receipts: mine
                .iter()
                .map(|r| serde_json::to_value(r).unwrap())
                .collect(),
            disclosures: None,
            proofs,
            checkpoint: note.render(),
            cosignatures: vec![witness.line()],
            keys: JwkSet {
                keys: vec![signer().jwk()],
            },
        };
        String::from_utf8(canonical::value_bytes(&serde_json::to_value(b).unwrap())).unwrap()
    }

    fn witness() -> VerifierKey {
        VerifierKey::new(
            "w.example/1",
            note::COSIGNATURE_V1,
            Signer::from_seed(&[4; 32]).verifying_key(),
        )
        .unwrap()
    }

    #[test]
    fn a_bundle_verifies_with_its_keys_pinned_keys_and_a_witness() {
        let b = bundle();
        let v = verify(&b, None, &[], 0).unwrap();
        assert_eq!((v.receipts, v.tree_size), (3, 7));
        assert_eq!(v.keys_from, KeysFrom::Bundle);
        let pinned = JwkSet {
            keys: vec![signer().jwk()],
        };
        let v = verify(&b, Some(&pinned), &[witness()], 1).unwrap();
        assert_eq!(v.cosigned_by, vec!["w.example/1".to_owned()]);
        assert!(
            v.to_string()
                .contains("not that the bundle holds every record")
        );
    }

    /// `text` with `member` put first in the object `opening` opens (its first occurrence).
    fn with_member_first(text: &str, opening: &str, member: &str) -> String {
        assert!(opening.ends_with('{'), "{opening}");
        let at = text.find(opening).unwrap() + opening.len();
        format!("{}{member},{}", &text[..at], &text[at..])
    }

    /// An attacker adds a second member next to a signed one, before it: a reader that keeps
    /// the last (serde_json) sees what was signed, one that keeps the first sees the forgery.
    #[test]
    fn a_member_named_twice_anywhere_fails() {
        let b = bundle();
        verify(&b, None, &[], 0).unwrap();
        for (opening, member, pointer) in [
            ("{", r#""format":"aperture-evidence/v0""#, "/format"),
            (
                r#""receipts":[{"#,
                r#""decision":"deny""#,
                "/receipts/0/decision",
            ),
            (
                r#""receipts":[{"#,
                r#""d\u0065cision":"deny""#,
                "/receipts/0/decision",
            ),
            (
                r#""target":{"#,
                r#""upstream_id":"ups_evil""#,
                "/receipts/0/target/upstream_id",
            ),
            (
                r#""calls":{"#,
                r#""per_session":500"#,
                "/receipts/0/limits/calls/per_session",
            ),
            (
                r#""keys":{"keys":[{"#,
                r#""kid":"kid_evil""#,
                "/keys/keys/0/kid",
            ),
            (
                r#""proofs":[{"#,
                r#""leaf_index":0"#,
                "/proofs/0/leaf_index",
            ),
        ] {
            let forged = with_member_first(&b, opening, member);
            // Last-wins parsing reads the bundle as it was signed.
            assert_eq!(
                serde_json::from_str::<Value>(&forged).unwrap(),
                serde_json::from_str::<Value>(&b).unwrap(),
                "{member}"
            );
            let e = verify(&forged, None, &[], 0).unwrap_err().to_string();
            let name = pointer.rsplit('/').next().unwrap();
            assert!(
                e.contains(&format!("duplicate member {name:?} at {pointer}")),
                "{member}: {e}"
            );
        }
    }

    #[test]
    fn any_change_fails() {
        let b = bundle();
        let v: Value = serde_json::from_str(&b).unwrap();
        let mut changes: Vec<(String, Value)> = Vec::new();
        // A signed member of a receipt.
        let mut c = v.clone();
        c["receipts"][1]["decision"] = json!("deny");
        changes.push(("decision".into(), c));
        // A proof hash.
        let mut c = v.clone();
        let h = c["proofs"][0]["hashes"][0].as_str().unwrap().to_owned();
        let mut bytes = STANDARD.decode(h).unwrap();
        bytes[0] ^= 1;
        c["proofs"][0]["hashes"][0] = json!(STANDARD.encode(bytes));
        changes.push(("proof hash".into(), c));
        // The checkpoint's size line.
        let mut c = v.clone();
        let cp = c["checkpoint"]
            .as_str()
            .unwrap()
            .replacen("\n7\n", "\n8\n", 1);
        c["checkpoint"] = json!(cp);
        changes.push(("checkpoint line".into(), c));
        // A receipt of another session slipped in.
        let mut c = v.clone();
        c["receipts"][0]["session_id"] = json!("ses_2");
        changes.push(("session".into(), c));
        // Proofs swapped between receipts.
        let mut c = v.clone();
        let p0 = c["proofs"][0].clone();
        c["proofs"][0] = c["proofs"][1].clone();
        c["proofs"][1] = p0;
        changes.push(("swapped proofs".into(), c));
        for (what, c) in changes {
            assert!(
                verify(&c.to_string(), None, &[], 0).is_err(),
                "{what} verifies"
            );
        }
        // Another signer's keys pinned: the checkpoint is not theirs.
        let other = JwkSet {
            keys: vec![Signer::from_seed(&[5; 32]).jwk()],
        };
        assert!(verify(&b, Some(&other), &[], 0).is_err());
        // A witness that did not cosign does not make the quorum.
        let stranger = VerifierKey::new(
            "w.example/2",
            note::COSIGNATURE_V1,
            Signer::from_seed(&[6; 32]).verifying_key(),
        )
        .unwrap();
        assert!(verify(&b, None, &[stranger], 1).is_err());
        assert!(verify("{}", None, &[], 0).is_err());
    }
}
