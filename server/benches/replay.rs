//! Policy impact replay over a large journal (issue 28), not run in CI:
//!
//! ```sh
//! cargo bench -p server --bench replay             # 100,000 decision receipts
//! cargo bench -p server --bench replay -- 20000    # another journal size
//! ```
//!
//! The real application (SQLite, signed receipts) on 127.0.0.1: a catalog of 300 tools, 2,000
//! exposure sessions with presets, and the journal filled through the journal itself with
//! decision receipts of calls of those tools by 50 actors (every one with its effective
//! arguments disclosed). Then `POST /policies:replay` of a draft that hides some tools, parks a
//! family and narrows one tool's arguments (so some calls are decided on their arguments),
//! timed end to end over HTTP, five times after a warm-up. Results: `docs/benchmarks.md`.

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
use aperture_core::store::{self, Store};
use engine::descriptor::{ToolDescriptor, ToolSource};
use engine::receipt::{Decision, ReasonCode, ReceiptKind};
use serde_json::json;

/// The allocator the `aperture` binary uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIGNING_KEY: &str = "0909090909090909090909090909090909090909090909090909090909090909";
const TOOLS: usize = 300;
const SESSIONS: usize = 2_000;
const ACTORS: usize = 50;

/// Appends `n` decision receipts, 64 writers at a time (group commit).
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
                let mut r = journal::receipt(
                    ReceiptKind::Decision,
                    Decision::Allow,
                    ReasonCode::Ok,
                    "default",
                    &format!("agent-{}", i % ACTORS),
                    "operator",
                );
                r.tool = Some(format!("tool_{:03}", i % TOOLS));
                r.tool_version = Some("1".into());
                r.environment = Some("default".into());
                r.session_id = Some(format!("ses_{:032x}", i % SESSIONS));
                r.mode = Some("allow".into());
                let mut d = journal::disclosures();
                d.effective_arguments = Some(json!({"text": if i % 2 == 0 { "a" } else { "b" }}));
                journal.append(r, &d).await.expect("the journal records");
            }
        });
    }
    writers.join_all().await;
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
    let database_url = config.database_url.clone();
    let app = Application::build(config).await?;
    let base = format!("http://127.0.0.1:{}{}", app.port(), aperture::api::PREFIX);
    tokio::spawn(app.run_until_stopped());

    let store = Store::connect(&database_url).await?;
    store::tenants::ensure(&store, "default").await?;
    for i in 0..TOOLS {
        let tool = ToolDescriptor {
            name: format!("tool_{i:03}"),
            version: "1".into(),
            title: None,
            description: Some(format!("Tool number {i}.")),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            output_schema: None,
            annotations: None,
            family: Some(format!("fam{}", i % 10)),
            risk: vec![if i % 3 == 0 { "read" } else { "write" }.into()],
            required_scope: None,
            source: ToolSource::Builtin,
            dry_run_argument: None,
            price_cents: None,
        };
        store::catalog::upsert(&store, "default", &tool).await?;
    }
    for i in 0..SESSIONS {
        store::exposure::insert_session(
            &store,
            &store::exposure::SessionRow {
                id: format!("ses_{i:032x}"),
                tenant_id: "default".into(),
                environment: "default".into(),
                actor_id: format!("agent-{}", i % ACTORS),
                preset: Some(format!("preset-{}", i % 3)),
                entity: None,
                parent_id: None,
                fork_tools: None,
                created_at: store::now_ms(),
                revoked_at: None,
            },
        )
        .await?;
    }
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
        "journal: {receipts} decision receipts appended in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let token = aperture_core::tokens::create_unchecked(
        &store,
        &journal,
        "default",
        &aperture_core::journal::Author::operator(),
        &app::dto::CreateTokenRequest {
            actor_id: "auditor".into(),
            scopes: vec![engine::scope::READ.into()],
            name: None,
            expires_at: None,
            environments: None,
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!(e.into_app_error().message))?
    .secret;

    let draft = json!({"policy": {"rules": [
        {"id": "hide-some", "match": {"prefix": "tool_0"}, "mode": "hide"},
        {"id": "park-fam3", "match": {"family": "fam3"}, "mode": "approval_required"},
        {"id": "narrow-150", "match": {"name": "tool_150"}, "mode": "allow",
         "invocation": {"allowed_values": {"text": ["a"]}}},
        {"id": "reads", "match": {"risk": "read"}, "mode": "allow"}
    ]}});
    let client = reqwest::Client::new();
    let mut times = Vec::new();
    let mut last = serde_json::Value::Null;
    for run in 0..6 {
        let t = Instant::now();
        let response = client
            .post(format!("{base}/policies:replay"))
            .bearer_auth(&token)
            .json(&draft)
            .send()
            .await?;
        assert!(response.status().is_success(), "{}", response.status());
        last = response.json().await?;
        // The first is warm-up.
        if run > 0 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    println!(
        "replay of {} receipts ({} not replayable, {} changes): median {}, min {}, max {}",
        last["replayed"],
        last["not_replayable"],
        last["changes"].as_array().map_or(0, Vec::len),
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1]),
    );
    assert_eq!(
        last["replayed"].as_u64().unwrap() + last["not_replayable"].as_u64().unwrap(),
        u64::try_from(receipts).unwrap(),
        "every receipt of the window was considered"
    );
    Ok(())
}
