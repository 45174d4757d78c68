//! The tamper-evident journal: one append-only, hash-chained, signed chain of receipts per
//! tenant (CONTRACT §6).
//!
//! [`Journal::append`] fills in a receipt's position (`seq`, `prev_hash`), its disclosures
//! digest and signature, and stores record and disclosures in one row. Writers in one process
//! queue on a mutex; writers in other processes (nodes sharing PostgreSQL) are kept apart by the
//! `(tenant_id, seq)` primary key: whoever loses re-reads the head and tries again.
//! [`verify`] checks every chain and signature, as `aperture journal verify` does.

use std::sync::Arc;

use engine::canonical::ZERO_HASH;
use engine::receipt::{
    self, ChainError, ChainVerifier, Decision, Disclosures, JwkSet, ReasonCode, Receipt,
    ReceiptKind,
};
use rand::RngCore;
use rand::rngs::OsRng;

use crate::ids;
use crate::keys::KeyRing;
use crate::store::{self, Store};

/// Why a record could not be appended. Callers answer `journal_unavailable` and run nothing.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database refused or is unreachable.
    #[error("journal store: {0}")]
    Store(#[from] sqlx::Error),
    /// Canonicalization or signing failed.
    #[error("journal record: {0}")]
    Record(#[from] receipt::ReceiptError),
    /// Other writers kept winning the race for the head.
    #[error("journal head contended")]
    Contended,
}

/// Appends records and signs them.
#[derive(Clone, Debug)]
pub struct Journal {
    store: Store,
    keys: KeyRing,
    writer: Arc<tokio::sync::Mutex<()>>,
}

/// A receipt with nothing but what every record has; the caller fills in the rest.
pub fn receipt(
    kind: ReceiptKind,
    decision: Decision,
    reason: ReasonCode,
    tenant_id: &str,
    actor_id: &str,
) -> Receipt {
    Receipt {
        receipt_id: ids::new_id("rcp"),
        kind,
        decision,
        reason,
        tenant_id: tenant_id.to_owned(),
        environment: None,
        session_id: None,
        manifest_id: None,
        actor_id: actor_id.to_owned(),
        turn_id: None,
        invocation_id: None,
        tool: None,
        tool_version: None,
        schema_hash: None,
        args_hash: None,
        policy_id: None,
        policy_version: None,
        mode: None,
        limits: None,
        redaction: None,
        target: None,
        issued_at: String::new(),
        seq: None,
        prev_hash: None,
        disclosures_digest: String::new(),
        key_id: String::new(),
        signature: String::new(),
    }
}

/// Fresh disclosures with a random salt.
pub fn disclosures() -> Disclosures {
    let mut salt = [0u8; 16];
    OsRng.fill_bytes(&mut salt);
    Disclosures::new(salt)
}

impl Journal {
    /// A journal over `store`, signing with `keys`.
    pub fn new(store: Store, keys: KeyRing) -> Self {
        Self {
            store,
            keys,
            writer: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// The key ring (for publishing keys and signing manifests).
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Appends `unsigned` with `disclosures` at the head of its tenant's chain and returns the
    /// signed receipt as stored.
    pub async fn append(
        &self,
        mut unsigned: Receipt,
        disclosures: &Disclosures,
    ) -> Result<Receipt, JournalError> {
        let disclosures_json = serde_json::to_string(disclosures).map_err(|e| {
            JournalError::Record(receipt::ReceiptError::Canonical(
                engine::canonical::CanonicalError(e.to_string()),
            ))
        })?;
        unsigned.disclosures_digest = receipt::disclosures_digest(disclosures)?;
        let _writer = self.writer.lock().await;
        for _ in 0..16 {
            let now = store::now_ms();
            unsigned.issued_at = store::rfc3339(now);
            let (seq, prev) = match store::journal::head(&self.store, &unsigned.tenant_id).await? {
                Some((seq, hash)) => (seq + 1, hash),
                None => (1, ZERO_HASH.to_owned()),
            };
            unsigned.seq = Some(u64::try_from(seq).unwrap_or(0));
            unsigned.prev_hash = Some(prev);
            let signed = receipt::sign_receipt(unsigned.clone(), self.keys.signer())?;
            let record_hash = receipt::receipt_hash(&signed)?;
            let receipt_json = serde_json::to_string(&signed).map_err(|e| {
                JournalError::Record(receipt::ReceiptError::Canonical(
                    engine::canonical::CanonicalError(e.to_string()),
                ))
            })?;
            let inserted = store::journal::insert(
                &self.store,
                &store::journal::NewRecord {
                    tenant_id: &signed.tenant_id,
                    seq,
                    receipt_id: &signed.receipt_id,
                    kind: signed.kind.as_str(),
                    decision: signed.decision.as_str(),
                    reason: signed.reason.as_str(),
                    tool: signed.tool.as_deref(),
                    session_id: signed.session_id.as_deref(),
                    actor_id: &signed.actor_id,
                    issued_at: now,
                    receipt: &receipt_json,
                    disclosures: &disclosures_json,
                    record_hash: &record_hash,
                },
            )
            .await?;
            if inserted {
                return Ok(signed);
            }
        }
        Err(JournalError::Contended)
    }

    /// Signs a denial that could not be journaled (`seq` and `prev_hash` null), so the caller
    /// still gets a verifiable receipt.
    pub fn sign_unrecorded(
        &self,
        mut unsigned: Receipt,
        disclosures: &Disclosures,
    ) -> Result<Receipt, JournalError> {
        unsigned.issued_at = store::rfc3339(store::now_ms());
        unsigned.seq = None;
        unsigned.prev_hash = None;
        unsigned.disclosures_digest = receipt::disclosures_digest(disclosures)?;
        Ok(receipt::sign_receipt(unsigned, self.keys.signer())?)
    }
}

/// The outcome of verifying one tenant's chain.
#[derive(Debug)]
pub struct TenantReport {
    /// Tenant.
    pub tenant_id: String,
    /// Records verified (the last good `seq`).
    pub verified: u64,
    /// The first bad record, if any.
    pub error: Option<ChainError>,
}

/// Verifies every tenant's chain: signatures against the published keys, `seq` from 1 without
/// gaps, `prev_hash` links, stored hashes and disclosure digests.
pub async fn verify(store: &Store) -> Result<Vec<TenantReport>, sqlx::Error> {
    let keys: JwkSet = crate::keys::published(store).await?;
    let mut reports = Vec::new();
    for tenant in store::journal::tenants(store).await? {
        reports.push(verify_tenant(store, &tenant, &keys).await?);
    }
    Ok(reports)
}

async fn verify_tenant(
    store: &Store,
    tenant: &str,
    keys: &JwkSet,
) -> Result<TenantReport, sqlx::Error> {
    let mut verifier = ChainVerifier::new();
    let mut after = 0;
    loop {
        let page = store::journal::page(store, tenant, after, 500).await?;
        if page.is_empty() {
            break;
        }
        for row in &page {
            after = row.seq;
            let expected = verifier.last_seq() + 1;
            let fail = |problem: receipt::ChainProblem| TenantReport {
                tenant_id: tenant.to_owned(),
                verified: expected - 1,
                error: Some(ChainError {
                    seq: expected,
                    problem,
                }),
            };
            let parsed: Result<Receipt, _> = serde_json::from_str(&row.receipt);
            let Ok(r) = parsed else {
                return Ok(fail(receipt::ChainProblem::Signature(
                    receipt::VerifyError::Malformed("the stored receipt is not a receipt".into()),
                )));
            };
            if let Err(e) = verifier.push(&r, &keys.keys) {
                return Ok(TenantReport {
                    tenant_id: tenant.to_owned(),
                    verified: expected - 1,
                    error: Some(e),
                });
            }
            let stored_hash_ok = receipt::receipt_hash(&r).is_ok_and(|h| h == row.record_hash);
            let disclosures_ok = serde_json::from_str::<Disclosures>(&row.disclosures)
                .ok()
                .and_then(|d| receipt::disclosures_match(&r, &d).ok())
                .unwrap_or(false);
            if !stored_hash_ok || !disclosures_ok || u64::try_from(row.seq).ok() != r.seq {
                return Ok(fail(receipt::ChainProblem::Signature(
                    receipt::VerifyError::Malformed(if !stored_hash_ok {
                        "the stored record hash does not match the receipt".into()
                    } else if !disclosures_ok {
                        "the stored disclosures do not match the receipt's digest".into()
                    } else {
                        "the stored position does not match the receipt's seq".into()
                    }),
                )));
            }
        }
    }
    Ok(TenantReport {
        tenant_id: tenant.to_owned(),
        verified: verifier.last_seq(),
        error: None,
    })
}

impl Journal {
    /// Journals an administrative change *before* it is made: if the journal cannot record,
    /// the change is refused (fail closed). `action` names the change (`token.create`); what it
    /// touched goes into the disclosures.
    pub async fn admin(
        &self,
        tenant_id: &str,
        actor_id: &str,
        decision: Decision,
        reason: ReasonCode,
        action: &str,
        subject: serde_json::Value,
    ) -> Result<Receipt, JournalError> {
        let mut d = disclosures();
        d.insert_extra("action", serde_json::Value::String(action.to_owned()))?;
        d.insert_extra("subject", subject)?;
        self.append(
            receipt(ReceiptKind::Admin, decision, reason, tenant_id, actor_id),
            &d,
        )
        .await
    }
}
