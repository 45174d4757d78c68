//! The journal verified in the background, so the dashboard can say at once whether each
//! tenant's chain verifies ("verified up to record N", or the first bad record) without
//! verifying on the request path. The same code as `aperture journal verify`
//! ([`super::verify_tenant_from`]).
//!
//! Every pass continues each tenant's chain from where the last one stopped (new records
//! only); every [`FULL_EVERY`] a pass starts again from the first record, so a record changed
//! after it was verified is found too. Passes check every link, stored hash and disclosure
//! digest but only one signature per page of records ([`Signatures::LastOfPage`]: the links
//! vouch for the others), and a full pass waits at least [`FULL_SPACING`] times its own
//! duration after the last, so that a growing journal costs the server a bounded share of its
//! time in the background.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::receipt::ChainVerifier;

use super::Signatures;
use crate::store::{self, Store};

/// How often new records are verified.
pub const PASS_EVERY: Duration = Duration::from_secs(15);
/// How often the whole journal is verified again from its first record (at most).
pub const FULL_EVERY: Duration = Duration::from_secs(600);
/// A full pass starts no sooner than this many times the last one's duration after it ended:
/// at most a twentieth of one core goes to re-reading old records, however long the journal.
pub const FULL_SPACING: u32 = 20;

/// What the last pass found for one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStatus {
    /// The last record that verified (0: none yet).
    pub verified: u64,
    /// The first bad record and what is wrong with it.
    pub first_bad: Option<(u64, String)>,
    /// When the pass ended (epoch ms).
    pub checked_at: i64,
}

#[derive(Debug)]
struct Tenant {
    verifier: ChainVerifier,
    status: ChainStatus,
}

/// The background verifier and its cached results.
#[derive(Debug)]
pub struct ChainWatch {
    store: Store,
    tenants: Mutex<HashMap<String, Tenant>>,
    wake: tokio::sync::Notify,
}

impl ChainWatch {
    /// A watch with nothing verified yet.
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(Self {
            store,
            tenants: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// The cached status of `tenant` (`None` before its first pass).
    pub fn status(&self, tenant: &str) -> Option<ChainStatus> {
        self.lock().get(tenant).map(|t| t.status.clone())
    }

    /// The cached status of every tenant verified so far.
    pub fn statuses(&self) -> Vec<(String, ChainStatus)> {
        self.lock()
            .iter()
            .map(|(tenant, t)| (tenant.clone(), t.status.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tenant>> {
        self.tenants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Verifies every tenant's new records (`full`: every record again).
    pub async fn pass(&self, full: bool) -> Result<(), sqlx::Error> {
        let keys = crate::keys::published(&self.store).await?;
        // With tenants that have rows in journal_facets and no journal: the overview counts
        // from those rows, so its status must say they stand for nothing signed.
        for tenant in super::tenants_to_verify(&self.store).await? {
            let start = if full {
                ChainVerifier::new()
            } else {
                match self.lock().get(&tenant) {
                    // A bad record stays bad until a full pass looks again.
                    Some(t) if t.status.first_bad.is_some() => continue,
                    Some(t) => t.verifier.clone(),
                    None => ChainVerifier::new(),
                }
            };
            // Read before the chain: it covers only records that exist now, so the pass must
            // reach its size (read after, it could cover records appended during the pass).
            let checkpoint = store::checkpoints::latest(&self.store, &tenant).await?;
            let (report, verifier) = super::verify_tenant_from(
                &self.store,
                &tenant,
                &keys,
                start,
                Signatures::LastOfPage,
            )
            .await?;
            let mut first_bad = report.error.map(|e| (e.seq, e.problem.to_string()));
            // A chain cannot see its own tail cut off; the latest stored checkpoint can.
            if first_bad.is_none()
                && let Some(c) = checkpoint
                && u64::try_from(c.tree_size).unwrap_or(0) > report.verified
            {
                first_bad = Some((
                    report.verified + 1,
                    format!(
                        "missing: the signed checkpoint of {} records covers it, the journal \
                         ends at record {}",
                        c.tree_size, report.verified
                    ),
                ));
            }
            let status = ChainStatus {
                verified: report.verified,
                first_bad,
                checked_at: store::now_ms(),
            };
            if let Some((seq, problem)) = &status.first_bad {
                tracing::error!(tenant = %tenant, seq, problem = %problem, "the journal does not verify");
            }
            self.lock().insert(tenant, Tenant { verifier, status });
        }
        Ok(())
    }

    /// Starts the next incremental pass now instead of at the end of [`PASS_EVERY`] (someone
    /// is looking at the status). Never waits.
    pub fn nudge(&self) {
        self.wake.notify_one();
    }

    /// Runs passes forever (spawned by the server).
    pub async fn run(self: Arc<Self>) {
        // When the last full pass ended and how long it took.
        let mut last_full: Option<(Instant, Duration)> = None;
        loop {
            let full = last_full.is_none_or(|(ended, took)| {
                ended.elapsed() >= FULL_EVERY.max(took.saturating_mul(FULL_SPACING))
            });
            let started = Instant::now();
            match self.pass(full).await {
                Ok(()) if full => last_full = Some((Instant::now(), started.elapsed())),
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, "verifying the journal in the background"),
            }
            // At most one pass per second however often it is nudged.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = tokio::time::timeout(PASS_EVERY, self.wake.notified()).await;
        }
    }
}
