//! Checks a receipt the way an outside verifier would, in the browser: its Ed25519 signature
//! over the JCS bytes (with the published key it names), its record hash, and its links to the
//! records before and after it. The same engine code as `aperture receipt verify`.

use serde_json::Value;

use crate::dto::ReceiptDetail;

/// One check and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// Whether it holds.
    pub ok: bool,
    /// Details for a person.
    pub detail: String,
}

/// Every check of one receipt, in the order a person reads them.
pub fn checks(d: &ReceiptDetail) -> Vec<Check> {
    // A member named twice is refused: another reader could see the other value.
    let receipt: Value = match engine::canonical::parse_strict(&d.receipt) {
        Ok(v) => v,
        Err(e) => {
            return vec![Check {
                name: "signature",
                ok: false,
                detail: format!("the receipt is not JSON: {e}"),
            }];
        }
    };
    let key_id = receipt
        .get("key_id")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned();
    let mut out = vec![
        match engine::receipt::verify_receipt_json(&receipt, &d.keys.keys) {
            Ok(()) => Check {
                name: "signature",
                ok: true,
                detail: format!("valid Ed25519 signature by {key_id}"),
            },
            Err(e) => Check {
                name: "signature",
                ok: false,
                detail: format!("invalid: {e}"),
            },
        },
    ];
    // What the filters and counts read is what was signed.
    out.push(
        match serde_json::from_value::<engine::receipt::Receipt>(receipt.clone()) {
            Ok(parsed) => match d.columns.mismatch(&parsed) {
                None => Check {
                    name: "stored columns",
                    ok: true,
                    detail: "what the filters and counts read matches the signed receipt".into(),
                },
                Some(problem) => Check {
                    name: "stored columns",
                    ok: false,
                    detail: problem.to_string(),
                },
            },
            Err(e) => Check {
                name: "stored columns",
                ok: false,
                detail: format!("the receipt cannot be read: {e}"),
            },
        },
    );
    let hash = engine::canonical::hash_value(&receipt);
    out.push(Check {
        name: "record hash",
        ok: hash == d.record_hash,
        detail: if hash == d.record_hash {
            format!("the receipt hashes to the stored {hash}")
        } else {
            format!(
                "the receipt hashes to {hash}, the journal stores {}",
                d.record_hash
            )
        },
    });
    let prev = receipt.get("prev_hash").and_then(Value::as_str);
    let expected_prev = match &d.previous {
        Some(p) => Some(p.record_hash.clone()),
        None if d.seq == 1 => Some(engine::canonical::ZERO_HASH.to_owned()),
        None => None,
    };
    out.push(match expected_prev {
        Some(want) => Check {
            name: "link to the previous record",
            ok: prev == Some(want.as_str()),
            detail: if prev == Some(want.as_str()) {
                if d.seq == 1 {
                    "first record of the journal".into()
                } else {
                    format!("prev_hash is record {}'s hash", d.seq - 1)
                }
            } else {
                format!(
                    "prev_hash is {}, record {}'s hash is {want}",
                    prev.unwrap_or("missing"),
                    d.seq - 1
                )
            },
        },
        None => Check {
            name: "link to the previous record",
            ok: false,
            detail: format!("record {} is missing from the journal", d.seq - 1),
        },
    });
    if let Some(next) = &d.next {
        let ok = next.prev_hash.as_deref() == Some(d.record_hash.as_str());
        out.push(Check {
            name: "link from the next record",
            ok,
            detail: if ok {
                format!("record {} names this record's hash", next.seq)
            } else {
                format!(
                    "record {} names {} instead",
                    next.seq,
                    next.prev_hash.as_deref().unwrap_or("nothing")
                )
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dto::ChainNeighbour;
    use engine::receipt::{
        Decision, JwkSet, ReasonCode, Receipt, ReceiptKind, Signer, receipt_hash, sign_receipt,
    };

    fn receipt(seq: u64, prev_hash: &str, signer: &Signer) -> Receipt {
        sign_receipt(
            Receipt {
                receipt_id: format!("rcp_{seq}"),
                kind: ReceiptKind::Decision,
                decision: Decision::Deny,
                reason: ReasonCode::PolicyDenied,
                tenant_id: "t".into(),
                environment: None,
                session_id: None,
                manifest_id: None,
                actor_id: "a".into(),
                // Records from seq 2 on name their principal; the first was made before
                // receipts had one (issue 45): a chain across the upgrade.
                principal: (seq > 1).then(|| "tok_0123".into()),
                turn_id: None,
                invocation_id: None,
                tool: Some("x".into()),
                tool_version: None,
                schema_hash: None,
                args_hash: None,
                policy_id: None,
                policy_version: None,
                mode: None,
                binding: None,
                limits: None,
                redaction: None,
                target: None,
                issued_at: "2026-11-30T00:00:00Z".into(),
                seq: Some(seq),
                prev_hash: Some(prev_hash.into()),
                disclosures_digest: "sha256:00".into(),
                key_id: String::new(),
                signature: String::new(),
            },
            signer,
        )
        .unwrap()
    }

    fn detail(r: &Receipt, prev: Option<&Receipt>, signer: &Signer) -> ReceiptDetail {
        ReceiptDetail {
            receipt: serde_json::to_string(r).unwrap(),
            disclosures: Value::Null,
            seq: r.seq.unwrap() as i64,
            record_hash: receipt_hash(r).unwrap(),
            previous: prev.map(|p| ChainNeighbour {
                seq: p.seq.unwrap() as i64,
                receipt_id: p.receipt_id.clone(),
                record_hash: receipt_hash(p).unwrap(),
                prev_hash: p.prev_hash.clone(),
            }),
            next: None,
            keys: JwkSet {
                keys: vec![signer.jwk()],
            },
            columns: engine::receipt::RowColumns {
                tenant_id: r.tenant_id.clone(),
                seq: r.seq.unwrap() as i64,
                receipt_id: r.receipt_id.clone(),
                kind: r.kind.as_str().into(),
                decision: r.decision.as_str().into(),
                reason: r.reason.as_str().into(),
                tool: r.tool.clone(),
                session_id: r.session_id.clone(),
                actor_id: r.actor_id.clone(),
                issued_at: r.issued_at.clone(),
            },
        }
    }

    fn check<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap()
    }

    /// Issue 22: a row whose filtered columns were rewritten (a denial shown as allowed by
    /// the filters and counts) fails on the receipt's page, naming the column.
    #[test]
    fn a_rewritten_column_fails_and_is_named() {
        let signer = Signer::from_seed(&[7; 32]);
        let first = receipt(1, engine::canonical::ZERO_HASH, &signer);
        let mut d = detail(&first, None, &signer);
        d.columns.decision = "allow".into();
        let checks = checks(&d);
        let c = check(&checks, "stored columns");
        assert!(!c.ok);
        assert_eq!(
            c.detail,
            "column `decision` says allow, the signed receipt says deny"
        );
        let mut d = detail(&first, None, &signer);
        d.columns.tool = None;
        assert_eq!(
            check(&super::checks(&d), "stored columns").detail,
            "column `tool` says nothing, the signed receipt says x"
        );
    }

    /// A receipt made before `principal` existed (the first) and one after it both pass.
    #[test]
    fn a_journaled_receipt_passes_every_check() {
        let signer = Signer::from_seed(&[7; 32]);
        let first = receipt(1, engine::canonical::ZERO_HASH, &signer);
        let second = receipt(2, &receipt_hash(&first).unwrap(), &signer);
        assert!(first.principal.is_none() && second.principal.is_some());
        assert!(!detail(&first, None, &signer).receipt.contains("principal"));
        for (r, prev) in [(&first, None), (&second, Some(&first))] {
            let checks = checks(&detail(r, prev, &signer));
            assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        }
    }

    #[test]
    fn a_tampered_receipt_fails_plainly() {
        let signer = Signer::from_seed(&[7; 32]);
        let first = receipt(1, engine::canonical::ZERO_HASH, &signer);
        let mut d = detail(&first, None, &signer);
        d.receipt = d.receipt.replace("\"deny\"", "\"allow\"");
        let checks = checks(&d);
        assert!(!checks[0].ok && checks[0].detail.starts_with("invalid"));
        assert!(
            !check(&checks, "record hash").ok,
            "the record hash no longer matches"
        );
        // Another key's signature does not pass either.
        let mut d = detail(&first, None, &signer);
        d.keys.keys = vec![Signer::from_seed(&[8; 32]).jwk()];
        assert!(!checks_ok(&d));
    }

    fn checks_ok(d: &ReceiptDetail) -> bool {
        checks(d).iter().all(|c| c.ok)
    }
}
