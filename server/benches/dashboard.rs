//! Page-load benchmark of the dashboard with a large journal (issue 6), not run in CI:
//!
//! ```sh
//! cargo bench -p server --bench dashboard             # 100,000 receipts
//! cargo bench -p server --bench dashboard -- 20000    # another journal size
//! ```
//!
//! The real application (SQLite, signed receipts) on 127.0.0.1. The journal is filled through
//! the journal itself (signed, hash-chained records with a mix of kinds, decisions, reasons,
//! tools, actors and sessions, all issued "now", which is the worst case for the overview's
//! charts: every record falls in the last 24 hours). The loads start once the server is at
//! rest: the journal's filter copies (`journal_facets`) made and the background verifier's
//! first pass over the journal done, as a dashboard user meets it (measured during that
//! catch-up, the receipts pages were 1–2 ms slower). Then a signed-in browser's requests are
//! replayed: each page is fetched whole (server-side rendered, every resource resolved), one
//! at a time, and the time to the last byte is reported. Results: `docs/benchmarks.md`.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark harness"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aperture::startup::Application;
use aperture_core::config::Config;
use aperture_core::journal::{self, Journal};
use aperture_core::store::Store;
use engine::receipt::{Decision, ReasonCode, ReceiptKind};

/// The allocator the `aperture` binary uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIGNING_KEY: &str = "0909090909090909090909090909090909090909090909090909090909090909";
const PASSWORD: &str = "bench-admin-password";
const METRICS_TOKEN: &str = "bench-metrics-token-0123456789";

/// Appends `n` records, 64 writers at a time (group commit).
async fn fill(journal: &Journal, n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (journal, next) = (journal.clone(), next.clone());
        writers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let (kind, decision, reason) = match i % 20 {
                    0..=7 => (ReceiptKind::Decision, Decision::Allow, ReasonCode::Ok),
                    8..=14 => (ReceiptKind::Execution, Decision::Allow, ReasonCode::Ok),
                    15 => (
                        ReceiptKind::Decision,
                        Decision::Deny,
                        ReasonCode::SchemaHashMismatch,
                    ),
                    16 => (
                        ReceiptKind::Decision,
                        Decision::Deny,
                        ReasonCode::NotCallable,
                    ),
                    17 => (
                        ReceiptKind::Decision,
                        Decision::Deny,
                        ReasonCode::PolicyDenied,
                    ),
                    18 => (ReceiptKind::Decision, Decision::Park, ReasonCode::Ok),
                    _ => (ReceiptKind::Manifest, Decision::Allow, ReasonCode::Ok),
                };
                let mut r = journal::receipt(
                    kind,
                    decision,
                    reason,
                    "default",
                    &format!("agent-{}", i % 50),
                    "operator",
                );
                r.tool = Some(format!("mcp__srv{:02}__tool_{:03}", i % 7, i % 300));
                r.session_id = Some(format!("ses_{:032x}", i % 2_000));
                journal
                    .append(r, &journal::disclosures())
                    .await
                    .expect("the journal records");
            }
        });
    }
    writers.join_all().await;
}

/// Fetches `path` `runs` times as the signed-in browser; returns the latencies and the size.
async fn measure(
    client: &reqwest::Client,
    base: &str,
    cookie: &str,
    path: &str,
    runs: usize,
) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::with_capacity(runs);
    let mut size = 0;
    for run in 0..runs + 3 {
        let t = Instant::now();
        let response = client
            .get(format!("{base}{path}"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        let body = response.text().await.unwrap();
        let elapsed = t.elapsed();
        assert!(
            !body.contains("Sign in to Aperture") || path == "/sign-in",
            "{path} rendered the sign-in page: the cookie was not accepted"
        );
        size = body.len();
        // The first three are warm-up.
        if run >= 3 {
            latencies.push(elapsed);
        }
    }
    latencies.sort();
    (latencies, size)
}

/// Waits until the background work that follows a bulk fill is done, so that the loads
/// measure a server at rest (as a dashboard user meets it) and not the catch-up: the
/// journal's copies for the filters (`journal_facets`, where the schema has it) and the
/// background verifier's first pass over the whole journal (started by loading the overview).
async fn settle(
    client: &reqwest::Client,
    base: &str,
    cookie: &str,
    store: &Store,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let (last,): (i64,) =
        sqlx::query_as("SELECT COALESCE(MAX(seq), 0) FROM journal WHERE tenant_id = 'default'")
            .fetch_one(store.pool())
            .await?;
    loop {
        // Absent before migration 0024: nothing to wait for.
        let copied: Result<(i64,), _> = sqlx::query_as(
            "SELECT COALESCE(MAX(seq), 0) FROM journal_facets WHERE tenant_id = 'default'",
        )
        .fetch_one(store.pool())
        .await;
        match copied {
            Ok((seq,)) if seq < last => tokio::time::sleep(Duration::from_millis(100)).await,
            _ => break,
        }
    }
    let facets = t.elapsed();
    client
        .get(format!("{base}/"))
        .header("cookie", cookie)
        .send()
        .await?
        .error_for_status()?;
    let gauge = "aperture_journal_chain_verified_records{tenant=\"default\"} ";
    loop {
        let metrics = client
            .get(format!("{base}/metrics"))
            .bearer_auth(METRICS_TOKEN)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let verified = metrics
            .lines()
            .find_map(|l| l.strip_prefix(gauge)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if verified >= last as f64 {
            break;
        }
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(300),
            "the background verifier reached record {verified} of {last} in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "settled: filter copies after {:.1} s, the verifier's first pass after {:.1} s",
        facets.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let receipts: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let mut config = Config::new(dir.path());
    config.addr = "127.0.0.1:0".parse()?;
    config.signing_key = Some(SIGNING_KEY.into());
    config.bootstrap_admin_password = Some(PASSWORD.into());
    config.metrics_token = Some(METRICS_TOKEN.into());
    let database_url = config.database_url.clone();
    let app = Application::build(config).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());

    let store = Store::connect(&database_url).await?;
    let keys = aperture_core::keys::KeyRing::load(
        &store,
        dir.path(),
        Some(SIGNING_KEY),
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await?;
    let journal = Journal::new(store.clone(), keys);
    let t = Instant::now();
    fill(&journal, receipts).await;
    println!(
        "journal: {receipts} records appended in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // Sign in like the browser's form does, and keep the session cookie.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signed_in = client
        .post(format!("{base}/ui/sign-in"))
        .header("origin", &base)
        .header("accept", "application/json")
        .form(&[
            ("tenant", "default"),
            ("username", "admin"),
            ("password", PASSWORD),
        ])
        .send()
        .await?;
    let cookie = signed_in
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("; ");
    assert!(
        !cookie.is_empty(),
        "sign-in gave no cookie: {}",
        signed_in.status()
    );

    settle(&client, &base, &cookie, &store).await?;

    // A receipt in the middle of the journal, and a cursor deep into it.
    let middle: (String,) = sqlx::query_as(
        "SELECT receipt_id FROM journal WHERE tenant_id = 'default' ORDER BY seq LIMIT 1 OFFSET $1",
    )
    .bind(i64::try_from(receipts / 2).unwrap_or(0))
    .fetch_one(store.pool())
    .await?;
    let deep = receipts / 10;
    let pages = [
        "/".to_owned(),
        "/receipts".to_owned(),
        "/receipts?decision=deny".to_owned(),
        "/receipts?decision=park&reason=ok".to_owned(),
        "/receipts?tool=mcp__srv03__tool_042".to_owned(),
        "/receipts?actor_id=agent-7&decision=deny".to_owned(),
        format!("/receipts?cursor={deep}"),
        format!("/receipts/{}", middle.0),
        "/approvals".to_owned(),
        "/sessions".to_owned(),
        "/policies".to_owned(),
        "/policies/builtin_safe_read".to_owned(),
        "/tools".to_owned(),
    ];
    let runs = 30;
    println!(
        "\n{runs} sequential loads per page after 3 warm-up loads; time to the last byte of the server-rendered page\n"
    );
    println!("| page | p50 | p95 | max | HTML |");
    println!("|---|---|---|---|---|");
    let mut worst = Duration::ZERO;
    for page in &pages {
        let (lat, size) = measure(&client, &base, &cookie, page, runs).await;
        let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
        worst = worst.max(*lat.last().unwrap());
        println!(
            "| `{page}` | {} | {} | {} | {} KB |",
            ms(p(0.5)),
            ms(p(0.95)),
            ms(*lat.last().unwrap()),
            size / 1024
        );
    }
    println!(
        "\nslowest single load: {} (target: under 300 ms)",
        ms(worst)
    );
    Ok(())
}
