//! HTTP benchmark of the gateway (issue 4), not run in CI:
//!
//! ```sh
//! cargo bench -p server --bench gateway                 # 20,000 calls, 64 at a time
//! cargo bench -p server --bench gateway -- 50000 32     # calls, concurrency
//! APERTURE_JOURNAL_SYNC=full cargo bench -p server --bench gateway
//! # each client pauses between calls (sleep, spin or evict, see `Gap`): what a call costs
//! # when the caller's threads park or its caches go cold between calls, as in a gateway
//! APERTURE_BENCH_GAP=evict cargo bench -p server --bench gateway -- 5000 1
//! # what the journal's signed checkpoints cost (the node makes none during the run):
//! APERTURE_BENCH_WITHOUT_CHECKPOINTS=1 cargo bench -p server --bench gateway
//! # the journal and everything else in PostgreSQL (a database made for the run, then dropped):
//! APERTURE_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p server --bench gateway
//! # N nodes on that database (each an application with its own journal writer, in this one
//! # process), the calls spread over them in turn:
//! APERTURE_BENCH_NODES=2 APERTURE_BENCH_POSTGRES_URL=… cargo bench -p server --bench gateway
//! ```
//!
//! One run, one machine: the real application (SQLite journal, signed receipts, group commit)
//! on 127.0.0.1 in front of the project's fixture MCP server served in-process over streamable
//! HTTP; a client sends `tools/call` for `echo` to `/mcp` with the manifest echo in `_meta`.
//! Then the same number of calls goes to the same upstream directly, through the same MCP
//! client the gateway uses, and through a plain reverse proxy in front of it (Debian's `nginx`,
//! started by the benchmark with a configuration of its own: keep-alive to the upstream, no
//! buffering; `scripts/bench-gateway` installs it when missing, and without it the proxy path
//! is left out). A gateway cannot beat the plain proxy; how close it comes is the measure.
//! On SQLite two more paths measure the floor of a gateway that keeps the contract (see
//! [`Floor`]): one hop of the gateway's HTTP server stack alone, and that hop with a signed
//! record committed durably before the upstream is called and another before the answer,
//! nothing else.
//! Reports calls/s and p50/p90/p99 latency of each path, the latency the gateway adds, and
//! the gateway's throughput and p50 as ratios of the others. Then `resources/read` of one
//! resource, through the gateway (a resource rule allowing it) and from the upstream directly.
//! Results: `docs/benchmarks.md`.

#![expect(clippy::expect_used, reason = "a benchmark harness")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aperture::startup::Application;
use aperture_core::config::Config;
use aperture_core::store::Store;
use aperture_core::upstream::{Connector, UpstreamSpec};
use serde_json::{Map, Value, json};

/// The allocator the `aperture` binary uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIGNING_KEY: &str = "0909090909090909090909090909090909090909090909090909090909090909";
/// `APERTURE_SECRETS_KEY` of every node when there are several.
const SECRETS_KEY: &str = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a";

/// `APERTURE_METRICS_TOKEN` of the benchmarked nodes.
const METRICS_TOKEN: &str = "bench-metrics";

/// `(sum in seconds, count)` of each stage of `aperture_call_stage_seconds` the node at `base`
/// has recorded so far.
async fn stages(
    client: &reqwest::Client,
    base: &str,
) -> std::collections::BTreeMap<String, (f64, f64)> {
    let text = client
        .get(format!("{base}/metrics"))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("metrics text");
    let mut out = std::collections::BTreeMap::<String, (f64, f64)>::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("aperture_call_stage_seconds_") else {
            continue;
        };
        let (which, rest) = rest.split_once('{').unwrap_or((rest, ""));
        let Some(stage) = rest
            .split_once("stage=\"")
            .and_then(|(_, s)| s.split_once('"'))
            .map(|(s, _)| s.to_owned())
        else {
            continue;
        };
        let value: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        let entry = out.entry(stage).or_default();
        match which {
            "sum" => entry.0 += value,
            "count" => entry.1 += value,
            _ => {}
        }
    }
    out
}

/// Runs `calls` operations, `concurrency` at a time; returns the wall time and every latency.
/// What each client does between two calls (`APERTURE_BENCH_GAP`), outside the timed call: by
/// default nothing (back to back, every cache warm); `sleep`: its thread sleeps 300 µs, so the
/// runtime's threads park as they do between the stages of a gateway's call; `spin`: it spins
/// 300 µs; `evict`: it copies 8 MiB, pushing the call's code and data out of the caches, as a
/// gateway's other work between two upstream calls does.
#[derive(Debug, Clone, Copy)]
enum Gap {
    None,
    Sleep,
    Spin,
    Evict,
}

impl Gap {
    fn from_env() -> Self {
        match std::env::var("APERTURE_BENCH_GAP").as_deref() {
            Ok("sleep") => Self::Sleep,
            Ok("spin") => Self::Spin,
            Ok("evict") => Self::Evict,
            _ => Self::None,
        }
    }
}

fn between_calls(gap: Gap) {
    const FOR: Duration = Duration::from_micros(300);
    match gap {
        Gap::None => {}
        Gap::Sleep => std::thread::sleep(FOR),
        Gap::Spin => {
            let started = Instant::now();
            while started.elapsed() < FOR {
                std::hint::spin_loop();
            }
        }
        Gap::Evict => {
            let copied = vec![1_u8; 8 << 20].clone();
            std::hint::black_box(&copied);
        }
    }
}

async fn drive<F, Fut>(calls: usize, concurrency: usize, op: F) -> (Duration, Vec<Duration>)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let gap = Gap::from_env();
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (op, next) = (op.clone(), next.clone());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= calls {
                    return latencies;
                }
                let t = Instant::now();
                op(n).await;
                latencies.push(t.elapsed());
                between_calls(gap);
            }
        });
    }
    let mut all: Vec<Duration> = workers.join_all().await.into_iter().flatten().collect();
    let wall = start.elapsed();
    all.sort_unstable();
    (wall, all)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// CPU time (user + system) this process has used so far, from `/proc/self/stat` (Linux;
/// ticks of 1/100 s). Everything of a run — client, gateway, upstream — is this one process.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Prints one path's line; returns its calls/s and p50.
fn report(
    what: &str,
    wall: Duration,
    latencies: &[Duration],
    cpu: Option<Duration>,
) -> (f64, Duration) {
    let p50 = percentile(latencies, 0.50);
    let rate = latencies.len() as f64 / wall.as_secs_f64();
    println!(
        "| {what} | {rate:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {} |",
        p50.as_secs_f64() * 1e3,
        percentile(latencies, 0.90).as_secs_f64() * 1e3,
        percentile(latencies, 0.99).as_secs_f64() * 1e3,
        cpu.map_or("?".to_owned(), |c| format!(
            "{:.0} µs",
            c.as_secs_f64() * 1e6 / latencies.len() as f64
        )),
    );
    (rate, p50)
}

/// `of`'s throughput and p50 (calls/s, p50) as ratios of `to`'s.
fn ratio(of: (f64, Duration), to: (f64, Duration)) -> String {
    format!(
        "throughput {:.0} %, p50 {:.2}×",
        of.0 * 100.0 / to.0,
        of.1.as_secs_f64() / to.1.as_secs_f64()
    )
}

/// Runs `calls` calls of `op`, `concurrency` at a time, and prints the path's line as `what`
/// (its CPU per call counts this process's and, when given, that of process `pid` and its
/// children: nginx); its calls/s and p50.
async fn phase<F, Fut>(
    what: &str,
    calls: usize,
    concurrency: usize,
    op: Arc<F>,
    pid: Option<u32>,
) -> (f64, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let others = || pid.map_or(Some(Duration::ZERO), cpu_time_of_tree);
    let before = cpu_time().zip(others());
    let (wall, latencies) = drive(calls, concurrency, move |n| op(n)).await;
    let cpu = cpu_time()
        .zip(others())
        .zip(before)
        .map(|((a, b), (c, d))| a.saturating_sub(c) + b.saturating_sub(d));
    report(what, wall, &latencies, cpu)
}

/// CPU time (user + system) of process `pid` and its live children (nginx's master and
/// workers), from `/proc`.
fn cpu_time_of_tree(pid: u32) -> Option<Duration> {
    let ticks = |stat: &str| -> Option<(u32, u64)> {
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ppid: u32 = fields.get(1)?.parse().ok()?;
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        Some((ppid, utime + stime))
    };
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        if let Some((ppid, t)) = ticks(&stat)
            && (p == pid || ppid == pid)
        {
            total += t;
        }
    }
    Some(Duration::from_millis(total * 10))
}

/// The processes whose parent is `pid` (nginx's workers, when `pid` is its master), from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// A plain reverse proxy (nginx: a master and its workers) in front of `upstream`
/// (`http://127.0.0.1:<port>/mcp`), in a folder of its own; stopped, workers and all, when
/// dropped. `None` when nginx is not installed.
struct Proxy {
    child: std::process::Child,
    url: String,
    nginx: &'static str,
    dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Not `Child::kill` alone: SIGKILL stops the master, and its workers live on (adopted by
        // init, still listening: two more after each run on two cores). `nginx -s stop` sends
        // the master SIGTERM (through its pid file), nginx's fast shutdown: the master stops its
        // workers and waits for them before it exits.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let workers = children_of(self.child.id());
        let signalled = std::process::Command::new(self.nginx)
            .arg("-p")
            .arg(self.dir.path())
            .arg("-c")
            .arg(self.dir.path().join("nginx.conf"))
            .args(["-s", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while signalled && Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Not stopped (no pid file yet, or a master that hangs): every process it started killed.
        eprintln!("nginx did not stop: killing its master and workers {workers:?}");
        if !workers.is_empty() {
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .args(workers.iter().map(u32::to_string))
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn proxy(upstream: &str) -> anyhow::Result<Option<Proxy>> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(nginx) = nginx else {
        println!(
            "(nginx is not installed: no plain-proxy path; scripts/bench-gateway installs it)"
        );
        return Ok(None);
    };
    let target = upstream
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = tempfile::tempdir()?;
    let d = dir.path().display();
    let conf = format!(
        "worker_processes auto;\n\
         daemon off;\n\
         error_log {d}/error.log warn;\n\
         pid {d}/nginx.pid;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
           access_log off;\n\
           client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
           upstream mcp {{ server {target}; keepalive 256; }}\n\
           server {{\n\
             listen 127.0.0.1:{port};\n\
             location / {{\n\
               proxy_pass http://mcp;\n\
               proxy_http_version 1.1;\n\
               proxy_set_header Connection \"\";\n\
               proxy_set_header Host {target};\n\
               proxy_buffering off;\n\
               proxy_request_buffering off;\n\
             }}\n\
           }}\n\
         }}\n"
    );
    let file = dir.path().join("nginx.conf");
    std::fs::write(&file, conf)?;
    let child = std::process::Command::new(nginx)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let proxy = Proxy {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
        nginx,
        dir,
    };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(Some(proxy));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!(
        "nginx did not start: {}",
        std::fs::read_to_string(proxy.dir.path().join("error.log")).unwrap_or_default()
    )
}

/// The floor a gateway that keeps the contract cannot go below: one HTTP hop (the same server
/// stack as the gateway's, the request's and the answer's JSON), a signed record committed
/// durably before the upstream is called and another before the caller is answered, and the
/// upstream called through the same client. Nothing else: no credentials, session, manifest,
/// policy, binding, schema, redaction or metrics. Its journal is a [`Journal`] of its own (the
/// application's writer, signing and SQLite store, in a folder of its own with the same
/// durability as the node's), so the gateway's background work stays out of its figures.
/// Without a journal (`journal: None`) it is the hop alone: how much of the floor is the
/// server stack rather than the records.
///
/// [`Journal`]: aperture_core::journal::Journal
struct Floor {
    journal: Option<aperture_core::journal::Journal>,
    upstream: Arc<aperture_core::upstream::Connection>,
}

/// The tenant of the floor's records.
const FLOOR_TENANT: &str = "default";

/// Serves the floor on a free port of 127.0.0.1, its journal in `dir` (none when `dir` is
/// `None`: the hop alone); the URL of its `/mcp`.
async fn floor(
    dir: Option<&std::path::Path>,
    durability: aperture_core::store::Durability,
    upstream: Arc<aperture_core::upstream::Connection>,
) -> anyhow::Result<String> {
    let journal = match dir {
        Some(dir) => {
            let url = format!("sqlite://{}?mode=rwc", dir.join("floor.db").display());
            let store = Store::connect_with(&url, durability).await?;
            store.migrate().await?;
            let keys = aperture_core::keys::KeyRing::load(
                &store,
                dir,
                Some(SIGNING_KEY),
                &aperture_core::keys::default_published_file(dir),
            )
            .await?;
            Some(aperture_core::journal::Journal::new(store, keys))
        }
        None => None,
    };
    let floor = Arc::new(Floor { journal, upstream });
    let router = axum::Router::new()
        .route("/mcp", axum::routing::post(floor_call))
        .with_state(floor);
    let port = common::serve(router, "the floor").await?;
    Ok(format!("http://127.0.0.1:{port}/mcp"))
}

/// One `tools/call` through the floor: the decision's record committed, the upstream called,
/// the execution's record committed, the answer with that record as its receipt (without a
/// journal: the upstream called, its answer passed on).
async fn floor_call(
    axum::extract::State(floor): axum::extract::State<Arc<Floor>>,
    body: axum::body::Bytes,
) -> axum::Json<Value> {
    use engine::receipt::{Decision, ReasonCode, ReceiptKind};
    let failed = |id: &Value, message: String| {
        axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}}),
        )
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return failed(&Value::Null, e.to_string()),
    };
    let id = &request["id"];
    let params = &request["params"];
    let meta = &params["_meta"];
    let tool = params["name"].as_str().unwrap_or_default();
    let arguments = params["arguments"].as_object().cloned().unwrap_or_default();
    // The records name what the gateway's name (so that they are about as long).
    let record = |kind| {
        let mut r = aperture_core::journal::receipt(
            kind,
            Decision::Allow,
            ReasonCode::Ok,
            FLOOR_TENANT,
            "agent",
            "operator",
        );
        let text = |key: &str| meta[key].as_str().map(str::to_owned);
        r.session_id = text("session_id");
        r.manifest_id = text("manifest_id");
        r.tool_version = text("tool_version");
        r.schema_hash = text("expected_schema_hash");
        r.tool = Some(tool.to_owned());
        r
    };
    let disclosures = aperture_core::journal::disclosures();
    if let Some(journal) = &floor.journal
        && let Err(e) = journal
            .append(record(ReceiptKind::Decision), &disclosures)
            .await
    {
        return failed(id, e.to_string());
    }
    let raw = tool.rsplit("__").next().unwrap_or(tool);
    let mut result = match floor
        .upstream
        .call_tool(raw, arguments, Duration::from_secs(10), None)
        .await
    {
        Ok(r) => r,
        Err(e) => return failed(id, e.to_string()),
    };
    if let Some(journal) = &floor.journal {
        let receipt = match journal
            .append(record(ReceiptKind::Execution), &disclosures)
            .await
        {
            Ok(r) => r,
            Err(e) => return failed(id, e.to_string()),
        };
        if let Some(result) = result.as_object_mut() {
            result.insert("_meta".into(), json!({ "receipt": receipt }));
        }
    }
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; the numbers are positional.
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let calls = numbers.first().copied().unwrap_or(20_000);
    let concurrency = numbers.get(1).copied().unwrap_or(64);

    let upstream_url = common::fixture_upstream().await?;
    let dir = tempfile::tempdir()?;
    let mut config = Config::new(dir.path());
    config.addr = "127.0.0.1:0".parse()?;
    config.signing_key = Some(SIGNING_KEY.into());
    config.allow_private_upstreams = true;
    // The stage timings of the application's own metrics, read after the run.
    config.metrics_token = Some(METRICS_TOKEN.into());
    config.checkpointer = std::env::var("APERTURE_BENCH_WITHOUT_CHECKPOINTS").as_deref() != Ok("1");
    if std::env::var("APERTURE_JOURNAL_SYNC").as_deref() == Ok("full") {
        config.durability = aperture_core::store::Durability::PowerLoss;
    }
    let postgres = match std::env::var("APERTURE_BENCH_POSTGRES_URL") {
        Ok(admin_url) if !admin_url.is_empty() => {
            let name = format!("aperture_bench_{}", std::process::id());
            let admin = Store::connect(&admin_url).await?;
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(admin.pool())
                .await?;
            let base = admin_url.rsplit_once('/').map_or(&*admin_url, |(b, _)| b);
            config.database_url = format!("{base}/{name}");
            Some((admin, name))
        }
        _ => None,
    };
    let backend = if postgres.is_some() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let durability = config.durability;
    let database_url = config.database_url.clone();
    let nodes: usize = std::env::var("APERTURE_BENCH_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1);
    anyhow::ensure!(
        nodes == 1 || postgres.is_some(),
        "APERTURE_BENCH_NODES needs APERTURE_BENCH_POSTGRES_URL (nodes share a PostgreSQL database)"
    );
    let mut bases = Vec::new();
    let mut journals = Vec::new();
    let mut node_dirs = Vec::new();
    for n in 0..nodes {
        let mut config = config.clone();
        if nodes > 1 {
            // Nodes share the key upstream credentials are encrypted with (docs/deploy.md):
            // a node with a key of its own could not open what another node stored.
            config.secrets_key = Some(SECRETS_KEY.into());
        }
        if n > 0 {
            let node_dir = tempfile::tempdir()?;
            config.data_dir = node_dir.path().to_path_buf();
            config.checkpoint_dir = node_dir.path().join("checkpoints");
            node_dirs.push(node_dir);
        }
        let app = Application::build(config).await?;
        bases.push(format!("http://127.0.0.1:{}", app.port()));
        journals.push(app.journal());
        tokio::spawn(app.run_until_stopped());
    }
    let base = bases[0].clone();
    let journal_stats = {
        let journals = journals.clone();
        move || {
            journals.iter().map(|j| j.stats()).fold(
                (0u64, 0u64, Duration::ZERO, Duration::ZERO, 0u64, 0u64, 0u64),
                |(r, c, b, s, a, h, d), st| {
                    (
                        r + st.records,
                        c + st.commits,
                        b + st.busy,
                        s + st.signing,
                        a + st.signed_ahead,
                        h + st.by_callers,
                        d + st.direct,
                    )
                },
            )
        }
    };

    let store = Store::connect(&database_url).await?;
    if std::env::var("APERTURE_BENCH_WITHOUT_CHECKPOINTS").as_deref() == Ok("1") {
        println!("(without the journal's signed checkpoints)");
    }
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
    let registered = client
        .post(format!("{api}/upstreams"))
        .bearer_auth(&admin)
        .json(&json!({"name": "bench", "transport": "streamable_http", "url": upstream_url}))
        .send()
        .await?;
    anyhow::ensure!(
        registered.status().is_success(),
        "register: {}",
        registered.text().await?
    );
    let described = client
        .put(format!("{api}/tools/mcp__bench__echo"))
        .bearer_auth(&admin)
        .json(&json!({"risk": ["read"]}))
        .send()
        .await?;
    anyhow::ensure!(described.status().is_success(), "describe");
    let list: Value = client
        .post(format!("{base}/mcp"))
        .bearer_auth(&agent)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await?
        .json()
        .await?;
    let result = &list["result"];
    let tool = result["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "mcp__bench__echo"))
        .expect("echo is listed");
    let meta = json!({
        "session_id": result["_meta"]["session_id"], "manifest_id": result["_meta"]["manifest_id"],
        "lease_id": result["_meta"]["lease_id"], "tool_version": tool["_meta"]["toolVersion"],
        "expected_schema_hash": tool["_meta"]["schemaHash"]
    });

    // A `tools/call` of echo through `/mcp` at `urls` (node by node in turn, as a balancer
    // would), with the manifest echo in `_meta`; its answer checked (signed: with a receipt).
    let mcp_call = |urls: Vec<String>, bearer: Option<String>, signed: bool| {
        let (client, meta) = (client.clone(), meta.clone());
        Arc::new(move |n: usize| {
            let (client, meta, bearer) = (client.clone(), meta.clone(), bearer.clone());
            let url = urls[n % urls.len()].clone();
            async move {
                let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                    "params": {"name": "mcp__bench__echo", "arguments": {"text": format!("call {n}")}, "_meta": meta}});
                let mut request = client.post(&url).json(&body);
                if let Some(bearer) = &bearer {
                    request = request.bearer_auth(bearer);
                }
                let answer: Value = request
                    .send()
                    .await
                    .expect("an answer")
                    .json()
                    .await
                    .expect("JSON");
                assert_eq!(answer["result"]["isError"], false, "{answer}");
                assert_eq!(
                    answer["result"]["_meta"]["receipt"]["signature"].is_string(),
                    signed,
                    "{answer}"
                );
            }
        })
    };
    let gateway_call = mcp_call(
        bases.iter().map(|b| format!("{b}/mcp")).collect(),
        Some(agent.clone()),
        true,
    );
    let connect = |url: String| async move {
        anyhow::Ok(Arc::new(
            Connector::new(true)
                .connect(
                    &UpstreamSpec::StreamableHttp {
                        url,
                        headers: Default::default(),
                    },
                    Duration::from_secs(10),
                )
                .await?,
        ))
    };
    let call_through = |connection: Arc<aperture_core::upstream::Connection>| {
        move |n: usize| {
            let connection = connection.clone();
            async move {
                let mut args = Map::new();
                args.insert("text".into(), Value::String(format!("call {n}")));
                connection
                    .call_tool("echo", args, Duration::from_secs(10), None)
                    .await
                    .expect("upstream answers");
            }
        }
    };
    let direct_call = Arc::new(call_through(connect(upstream_url.clone()).await?));
    let nginx = proxy(&upstream_url).await?;
    let proxied_call = match &nginx {
        Some(p) => Some(Arc::new(call_through(connect(p.url.clone()).await?))),
        None => None,
    };

    // The floor, on SQLite (the default run) only: its journal is a store of its own. And the
    // hop alone (the same server, no journal), which splits the floor into hop and records.
    let floor_dir = tempfile::tempdir()?;
    let (hop_call, floor_call) = if postgres.is_none() {
        let upstream = || connect(upstream_url.clone());
        let hop = floor(None, durability, upstream().await?).await?;
        let journaled = floor(Some(floor_dir.path()), durability, upstream().await?).await?;
        (
            Some(mcp_call(vec![hop], None, false)),
            Some(mcp_call(vec![journaled], None, true)),
        )
    } else {
        println!("(no floor path with PostgreSQL: its journal is a SQLite store of its own)");
        (None, None)
    };

    // Warm up the paths (connections, caches, validators).
    {
        let g = gateway_call.clone();
        drive(500, concurrency, move |n| g(n)).await;
        let d = direct_call.clone();
        drive(500, concurrency, move |n| d(n)).await;
        if let Some(p) = proxied_call.clone() {
            drive(500, concurrency, move |n| p(n)).await;
        }
        if let Some(h) = hop_call.clone() {
            drive(500, concurrency, move |n| h(n)).await;
        }
        if let Some(f) = floor_call.clone() {
            drive(500, concurrency, move |n| f(n)).await;
        }
    }
    println!(
        "aperture gateway benchmark: {calls} calls, {concurrency} concurrent, {backend} journal ({durability:?}), {nodes} node(s), {} cores",
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
    );
    println!(
        "| path | calls/s | p50 | p90 | p99 | CPU per call (client, gateway and upstream) |\n|---|---|---|---|---|---|"
    );
    let direct = phase(
        "upstream called directly",
        calls,
        concurrency,
        direct_call,
        None,
    )
    .await;
    let proxied = match (proxied_call, &nginx) {
        (Some(p), Some(n)) => Some(
            phase(
                "through a plain reverse proxy (nginx)",
                calls,
                concurrency,
                p,
                Some(n.child.id()),
            )
            .await,
        ),
        _ => None,
    };
    let hopped = match hop_call {
        Some(h) => Some(
            phase(
                "one hop of the gateway's HTTP stack, no journal",
                calls,
                concurrency,
                h,
                None,
            )
            .await,
        ),
        None => None,
    };
    let floored = match floor_call {
        Some(f) => Some(
            phase(
                "the floor (one hop, two signed durable records, nothing else)",
                calls,
                concurrency,
                f,
                None,
            )
            .await,
        ),
        None => None,
    };
    let g = gateway_call.clone();
    let before = cpu_time();
    let journal_before = journal_stats();
    let stages_before = stages(&client, &base).await;
    let (wall, latencies) = drive(calls, concurrency, move |n| g(n)).await;
    let cpu = cpu_time().zip(before).map(|(a, b)| a.saturating_sub(b));
    let journal_after = journal_stats();
    let stages_after = stages(&client, &base).await;
    let gateway = report(
        "through the gateway (/mcp, journaled, signed)",
        wall,
        &latencies,
        cpu,
    );
    let records = journal_after.0 - journal_before.0;
    let commits = journal_after.1 - journal_before.1;
    let busy = journal_after.2.saturating_sub(journal_before.2);
    let signing = journal_after.3.saturating_sub(journal_before.3);
    let ahead = journal_after.4 - journal_before.4;
    let by_callers = journal_after.5 - journal_before.5;
    let on_thread = journal_after.6 - journal_before.6;
    println!(
        "journal: {records} records in {commits} commits ({:.1} records per commit); writer busy {:.0} % of the run ({:.0} % signing, {:.0} % database), {:.0} µs per commit",
        records as f64 / commits.max(1) as f64,
        busy.as_secs_f64() * 100.0 / wall.as_secs_f64(),
        signing.as_secs_f64() * 100.0 / wall.as_secs_f64(),
        busy.saturating_sub(signing).as_secs_f64() * 100.0 / wall.as_secs_f64(),
        busy.as_secs_f64() * 1e6 / commits.max(1) as f64,
    );
    if by_callers > 0 {
        // SQLite: an append that finds nothing queued and the writer idle commits itself.
        println!(
            "journal: {by_callers} of the {records} records committed by their callers' own tasks"
        );
    }
    if on_thread > 0 {
        // SQLite on a file: the insert runs on the committing task's thread, not sqlx's.
        println!(
            "journal: {on_thread} of the {records} records inserted on the committing task's own thread"
        );
    }
    if ahead > 0 {
        // PostgreSQL's writer signs the next batch while the database commits the one in flight:
        // that signing overlaps the database's time, so "database" above (busy less signing)
        // understates it.
        println!(
            "journal: {ahead} of the {records} records signed while the batch before them was being committed"
        );
    }
    // Mean wall time of each stage of a call on the (first) node, as its metrics time them:
    // `journal` counts both records (the decision's and the execution's).
    let mut line = Vec::new();
    for (stage, (sum, count)) in &stages_after {
        let (sum0, count0) = stages_before.get(stage).copied().unwrap_or_default();
        let n = count - count0;
        if n > 0.0 {
            line.push(format!(
                "{stage} {:.0} µs × {:.0}",
                (sum - sum0) * 1e6 / n,
                n / latencies.len() as f64 * nodes as f64
            ));
        }
    }
    println!("stages, mean wall time × per call: {}", line.join(", "));
    println!(
        "added by the gateway at p50: {:.2} ms",
        (gateway.1.saturating_sub(direct.1)).as_secs_f64() * 1e3,
    );
    println!("gateway / direct: {}", ratio(gateway, direct));
    if let Some(proxy) = proxied {
        println!(
            "plain proxy / direct: {}; gateway / plain proxy: {}",
            ratio(proxy, direct),
            ratio(gateway, proxy)
        );
    }
    if let Some(hop) = hopped {
        println!("hop / direct: {}", ratio(hop, direct));
    }
    if let Some(floor) = floored {
        println!(
            "floor / direct: {}; gateway / floor: {}",
            ratio(floor, direct),
            ratio(gateway, floor)
        );
    }

    // `resources/read` of one resource: through the gateway (a resource rule allows it; a read
    // is decided and journaled like a call: one signed record of the decision and one of the
    // outcome) and from the upstream directly. The policy is activated only now, so the
    // `tools/call` paths above run under the same policy as before resources existed.
    let policy = json!({"rules": [
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"},
        {"id": "docs", "resource": {"uri": "docs://*"}, "mode": "allow"}
    ]});
    for (path, body) in [
        ("/policies/bench", policy),
        ("/policies/bench:activate", json!({})),
    ] {
        let request = if path.ends_with(":activate") {
            client.post(format!("{api}{path}"))
        } else {
            client.put(format!("{api}{path}"))
        };
        let answer = request.bearer_auth(&admin).json(&body).send().await?;
        anyhow::ensure!(
            answer.status().is_success(),
            "{path}: {}",
            answer.text().await?
        );
    }
    let urls: Vec<String> = bases.iter().map(|b| format!("{b}/mcp")).collect();
    let gateway_read = {
        let (client, agent) = (client.clone(), agent.clone());
        Arc::new(move |n: usize| {
            let (client, agent) = (client.clone(), agent.clone());
            let url = urls[n % urls.len()].clone();
            async move {
                let body = json!({"jsonrpc": "2.0", "id": n, "method": "resources/read",
                                  "params": {"uri": "docs://readme"}});
                let answer: Value = client
                    .post(&url)
                    .bearer_auth(&agent)
                    .json(&body)
                    .send()
                    .await
                    .expect("an answer")
                    .json()
                    .await
                    .expect("JSON");
                assert_eq!(
                    answer["result"]["contents"][0]["text"], "Read me first.",
                    "{answer}"
                );
            }
        })
    };
    let reader = connect(upstream_url.clone()).await?;
    let direct_read = Arc::new(move |_: usize| {
        let reader = reader.clone();
        async move {
            reader
                .read_resource("docs://readme", Duration::from_secs(10))
                .await
                .expect("upstream answers");
        }
    });
    {
        let (g, d) = (gateway_read.clone(), direct_read.clone());
        drive(500, concurrency, move |n| g(n)).await;
        drive(500, concurrency, move |n| d(n)).await;
    }
    let read_direct = phase(
        "resources/read, upstream called directly",
        calls,
        concurrency,
        direct_read,
        None,
    )
    .await;
    let read_gateway = phase(
        "resources/read through the gateway (/mcp, journaled, signed)",
        calls,
        concurrency,
        gateway_read,
        None,
    )
    .await;
    println!(
        "resources/read, gateway / direct: {}",
        ratio(read_gateway, read_direct)
    );
    drop(nginx);
    if let Some((admin, name)) = postgres {
        store.close().await;
        // The application's pool still holds connections: forced out (PostgreSQL 13+).
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(admin.pool())
            .await?;
    }
    Ok(())
}
