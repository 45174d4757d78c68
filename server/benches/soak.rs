//! Memory as sessions grow (issue 29), not run in CI:
//!
//! ```sh
//! cargo bench -p server --bench soak                      # 20,000 sessions, 8 at a time
//! cargo bench -p server --bench soak -- 100000 8          # sessions, concurrency
//! APERTURE_READ_CACHE_MIB=64 cargo bench -p server --bench soak -- 100000
//! ```
//!
//! The real application on SQLite in front of the project's fixture MCP server (served
//! in-process over streamable HTTP) registered 40 times: a catalog of 360 tools, each a full
//! definition with its schema. The policy lists one of them. Each session is a `tools/list`
//! (a new manifest of the whole catalog, one tool listed) and one `tools/call` of that tool
//! under it, so every session adds a grant to the read cache. Every 5,000 sessions (and at
//! the end) it prints the sessions done, this process's resident memory (`VmRSS`: the server
//! and the client), what the read cache weighs and holds, and sessions per second since the
//! last line. Results: `docs/benchmarks.md`.

#![expect(clippy::expect_used, reason = "a benchmark harness")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use aperture::startup::Application;
use aperture_core::config::Config;
use serde_json::{Value, json};

/// The allocator the `aperture` binary uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIGNING_KEY: &str = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b";
/// Registrations of the fixture (9 tools each).
const UPSTREAMS: usize = 40;
const REPORT_EVERY: usize = 5_000;

/// This process's resident set, in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sessions = numbers.first().copied().unwrap_or(20_000);
    let concurrency = numbers.get(1).copied().unwrap_or(8).max(1);
    let budget_mib: usize = std::env::var("APERTURE_READ_CACHE_MIB")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(256);

    let upstream_url = common::fixture_upstream().await?;
    let dir = tempfile::tempdir()?;
    let mut config = Config::new(dir.path());
    config.addr = "127.0.0.1:0".parse()?;
    config.signing_key = Some(SIGNING_KEY.into());
    config.allow_private_upstreams = true;
    config.read_cache_bytes = budget_mib * 1024 * 1024;
    let app = Application::build(config).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let server_store = app.store();
    tokio::spawn(app.run_until_stopped());

    let store = aperture_core::store::Store::connect(&server_store_url(&dir)).await?;
    let keys = aperture_core::keys::KeyRing::load(
        &store,
        dir.path(),
        Some(SIGNING_KEY),
        &aperture_core::keys::default_published_file(dir.path()),
    )
    .await?;
    let journal = aperture_core::journal::Journal::new(store.clone(), keys);
    let admin = common::token(&store, &journal, "ops", engine::scope::ADMIN).await?;
    let agent = common::token(&store, &journal, "agent", engine::scope::RUN).await?;
    let client = reqwest::Client::new();
    let api = format!("{base}{}", aperture::api::PREFIX);
    for n in 0..UPSTREAMS {
        let registered = client
            .post(format!("{api}/upstreams"))
            .bearer_auth(&admin)
            .json(&json!({"name": format!("bench{n}"), "transport": "streamable_http", "url": upstream_url}))
            .send()
            .await?;
        anyhow::ensure!(registered.status().is_success(), "register {n}");
    }
    for (path, body) in [
        (
            "/policies/soak",
            Some(json!({"default_mode": "hide", "rules": [
                {"id": "one", "match": {"name": "mcp__bench0__echo"}, "mode": "allow"}]})),
        ),
        ("/policies/soak:activate", None),
    ] {
        let request = match body {
            Some(b) => client.put(format!("{api}{path}")).json(&b),
            None => client.post(format!("{api}{path}")),
        };
        let answer = request.bearer_auth(&admin).send().await?;
        anyhow::ensure!(answer.status().is_success(), "{path}");
    }
    let catalog: Value = client
        .get(format!("{api}/tools"))
        .bearer_auth(&admin)
        .send()
        .await?
        .json()
        .await?;
    let tools = catalog["tools"].as_array().map_or(0, Vec::len);
    println!(
        "soak: {sessions} sessions, {concurrency} at a time; catalog of {tools} tools, one listed; \
         read cache budget {budget_mib} MiB"
    );
    println!(
        "{:>9} {:>10} {:>12} {:>9} {:>11}",
        "sessions", "RSS MiB", "cache MiB", "entries", "sessions/s"
    );

    let session = {
        let (client, agent, base) = (client.clone(), agent.clone(), base.clone());
        move |n: usize| {
            let (client, agent, base) = (client.clone(), agent.clone(), base.clone());
            async move {
                let list: Value = client
                    .post(format!("{base}/mcp"))
                    .bearer_auth(&agent)
                    .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
                    .send()
                    .await
                    .expect("tools/list")
                    .json()
                    .await
                    .expect("JSON");
                let result = &list["result"];
                let tool = &result["tools"][0];
                assert_eq!(tool["name"], "mcp__bench0__echo", "{list}");
                let meta = json!({
                    "session_id": result["_meta"]["session_id"], "manifest_id": result["_meta"]["manifest_id"],
                    "lease_id": result["_meta"]["lease_id"], "tool_version": tool["_meta"]["toolVersion"],
                    "expected_schema_hash": tool["_meta"]["schemaHash"]
                });
                let answer: Value = client
                    .post(format!("{base}/mcp"))
                    .bearer_auth(&agent)
                    .json(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": "mcp__bench0__echo", "arguments": {"text": "soak"}, "_meta": meta}}))
                    .send()
                    .await
                    .expect("tools/call")
                    .json()
                    .await
                    .expect("JSON");
                assert_eq!(answer["result"]["isError"], false, "{answer}");
            }
        }
    };
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, done, session) = (next.clone(), done.clone(), session.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= sessions {
                        break;
                    }
                    session(n).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    let (mut last_n, mut last_at) = (0usize, Instant::now());
    let mut peak = 0f64;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let n = done.load(Ordering::Relaxed);
        let rss = rss_mib();
        peak = peak.max(rss);
        if n / REPORT_EVERY > last_n / REPORT_EVERY || n >= sessions {
            let (bytes, entries) = server_store.cache().usage();
            let rate = (n - last_n) as f64 / last_at.elapsed().as_secs_f64();
            println!(
                "{n:>9} {rss:>10.1} {:>12.1} {entries:>9} {rate:>11.0}",
                bytes as f64 / 1_048_576.0
            );
            (last_n, last_at) = (n, Instant::now());
        }
        if n >= sessions {
            break;
        }
    }
    for w in workers {
        w.await?;
    }
    println!(
        "done: {sessions} sessions in {:.1} s ({:.0}/s); peak RSS {peak:.1} MiB",
        started.elapsed().as_secs_f64(),
        sessions as f64 / started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn server_store_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("aperture.db").display())
}
