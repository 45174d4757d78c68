//! What happens inside a node, recorded for the operator's `GET /metrics` (served by
//! the server's `scrape`) in the Prometheus text format.
//!
//! Recorded where it happens, through the `metrics` crate's macros (no-ops until a recorder is
//! installed, as in every process without `APERTURE_METRICS_TOKEN`); rendered by
//! `metrics-exporter-prometheus`'s recorder, which this module installs once per process. The
//! gauges that describe shared state (invocations waiting, the journal's chains) are read when
//! the endpoint is asked, not kept up to date on the call path.
//!
//! The endpoint is process-wide: upstream names and deny reasons of every tenant. It answers
//! only the operator's `APERTURE_METRICS_TOKEN` as a bearer token, never a tenant's API token,
//! and is not served at all without one.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `aperture_calls_total` | counter | `decision`, `reason`: every `tools/call` decision receipt |
//! | `aperture_executions_total` | counter | `decision`, `reason`: every execution receipt |
//! | `aperture_receipts_unrecorded_total` | counter | `kind`: receipts signed but not journaled |
//! | `aperture_call_stage_seconds` | histogram | `stage`: `decide`, `journal`, `upstream` |
//! | `aperture_journal_batch_records` | histogram | records per journal commit |
//! | `aperture_journal_commit_seconds` | histogram | one batch's commit (with retries) |
//! | `aperture_journal_commit_failures_total` | counter | batches the database refused |
//! | `aperture_journal_queue_depth` | gauge | appends waiting for the writer |
//! | `aperture_journal_contended_total` | counter | batches that found a position taken by another node |
//! | `aperture_upstream_calls_total` | counter | `tenant`, `upstream`, `outcome` (`ok` or the reason) |
//! | `aperture_upstream_call_seconds` | histogram | `tenant`, `upstream` |
//! | `aperture_invocations_waiting` | gauge | `status`: parked, staged, confirmation, queued |
//! | `aperture_invocations_oldest_waiting_seconds` | gauge | `status` |
//! | `aperture_journal_chain_verified` | gauge | `tenant`: 1 verifies, 0 a bad record found |
//! | `aperture_journal_chain_verified_records` | gauge | `tenant` |
//! | `aperture_sign_in_failures_total` | counter | `reason`: `wrong_credentials`, `throttled` |
//! | `aperture_draining` | gauge | 1 once `SIGTERM` was received |
//! | `aperture_build_info` | gauge | `version` |

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Seconds: from 100 µs (a decision from the read cache) to 30 s (a slow upstream).
const SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Records per commit: the writer batches up to 256.
const RECORDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// How often histograms' samples are folded into their buckets when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's recorder (once; later calls return the same handle). `None` when
/// another recorder was installed first, which only a test harness could do.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("aperture_journal_batch_records".into()),
                        RECORDS,
                    )
                });
            let recorder = match builder {
                Ok(builder) => builder.build_recorder(),
                Err(e) => {
                    tracing::error!(error = %e, "the metrics recorder could not be built");
                    return None;
                }
            };
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics stays empty");
                return None;
            }
            describe();
            metrics::gauge!("aperture_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                })
                .ok();
            Some(handle)
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "aperture_calls_total",
        "tools/call decisions journaled or signed unrecorded, by decision and reason"
    );
    describe_counter!(
        "aperture_executions_total",
        "Execution receipts (what ran at an upstream, or why it could not), by decision and reason"
    );
    describe_counter!(
        "aperture_receipts_unrecorded_total",
        "Receipts signed but not journaled (the journal could not record), by kind"
    );
    describe_histogram!(
        "aperture_call_stage_seconds",
        metrics::Unit::Seconds,
        "Time a tools/call spends deciding, journaling and at its upstream"
    );
    describe_histogram!(
        "aperture_journal_batch_records",
        "Records committed together by the journal writer"
    );
    describe_histogram!(
        "aperture_journal_commit_seconds",
        metrics::Unit::Seconds,
        "One journal batch: chaining, signing and the database commit"
    );
    describe_counter!(
        "aperture_journal_commit_failures_total",
        "Journal batches the database refused (their records are denials or spooled)"
    );
    describe_gauge!(
        "aperture_journal_queue_depth",
        "Appends waiting for the journal writer"
    );
    describe_counter!(
        "aperture_upstream_calls_total",
        "Calls to upstream MCP servers, by tenant, upstream and outcome (ok or the reason)"
    );
    describe_histogram!(
        "aperture_upstream_call_seconds",
        metrics::Unit::Seconds,
        "Upstream tools/call latency, by tenant and upstream"
    );
    describe_gauge!(
        "aperture_invocations_waiting",
        "Invocations waiting, in the shared database (the same on every node), by status"
    );
    describe_gauge!(
        "aperture_invocations_oldest_waiting_seconds",
        metrics::Unit::Seconds,
        "Age of the oldest invocation waiting, by status"
    );
    describe_gauge!(
        "aperture_journal_chain_verified",
        "1 while the background verifier finds the tenant's chain whole, 0 once it found a bad record"
    );
    describe_gauge!(
        "aperture_journal_chain_verified_records",
        "The last record of the tenant's chain the background verifier checked"
    );
    describe_counter!(
        "aperture_sign_in_failures_total",
        "Failed dashboard sign-ins, by reason"
    );
    describe_gauge!(
        "aperture_draining",
        "1 once the node was asked to stop: it takes no new requests and finishes the ones it has"
    );
}

/// A stage of a call, timed from `started`.
pub fn stage(stage: &'static str, started: std::time::Instant) {
    metrics::histogram!("aperture_call_stage_seconds", "stage" => stage)
        .record(started.elapsed().as_secs_f64());
}

/// A receipt the journal committed (`journaled`) or that was signed without being recorded.
pub fn receipt(r: &engine::receipt::Receipt, journaled: bool) {
    use engine::receipt::ReceiptKind;
    let (decision, reason) = (r.decision.as_str(), r.reason.as_str());
    match r.kind {
        ReceiptKind::Decision if r.tool.is_some() => {
            metrics::counter!("aperture_calls_total", "decision" => decision, "reason" => reason)
                .increment(1);
        }
        ReceiptKind::Execution => {
            metrics::counter!("aperture_executions_total", "decision" => decision, "reason" => reason)
                .increment(1);
        }
        _ => {}
    }
    if !journaled {
        metrics::counter!("aperture_receipts_unrecorded_total", "kind" => r.kind.as_str())
            .increment(1);
    }
}

/// One call to an upstream: `outcome` is `ok` or the reason it failed.
pub fn upstream_call(tenant: &str, upstream: &str, outcome: &'static str, took: Duration) {
    // Its labels are owned strings: not made on the call path of a node without metrics.
    if !matches!(HANDLE.get(), Some(Some(_))) {
        return;
    }
    let (tenant, upstream) = (tenant.to_owned(), upstream.to_owned());
    metrics::histogram!("aperture_upstream_call_seconds", "tenant" => tenant.clone(), "upstream" => upstream.clone())
        .record(took.as_secs_f64());
    metrics::counter!("aperture_upstream_calls_total", "tenant" => tenant, "upstream" => upstream, "outcome" => outcome)
        .increment(1);
}

/// A failed sign-in.
pub fn sign_in_failure(reason: &'static str) {
    metrics::counter!("aperture_sign_in_failures_total", "reason" => reason).increment(1);
}

/// The node stops taking requests.
pub fn draining() {
    metrics::gauge!("aperture_draining").set(1.0);
}
