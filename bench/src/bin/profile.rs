//! Runs one benchmarked operation in a loop, for `perf record` (criterion's own loop is harder
//! to read in a profile). Prints the mean time per iteration.
//!
//! `cargo run --release --bin profile -- <decide|decide-cold|manifest|cedar> <rules> <iterations>`

use std::hint::black_box;
use std::time::Instant;

#[cfg(feature = "cedar")]
use aperture_bench::CedarFixture;
use aperture_bench::{Fixture, context};
use engine::manifest;
use engine::narrow::ValidatorCache;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let op = args.first().map_or("decide", String::as_str);
    let rules: usize = args.get(1).map_or(50, |s| s.parse().expect("rules"));
    let iterations: u64 = args
        .get(2)
        .map_or(1_000_000, |s| s.parse().expect("iterations"));
    let start;
    match op {
        "decide" => {
            let f = Fixture::new(rules);
            start = Instant::now();
            for _ in 0..iterations {
                black_box(f.decide_with(black_box(&f.cache)));
            }
        }
        "decide-cold" => {
            let f = Fixture::new(rules);
            start = Instant::now();
            for _ in 0..iterations {
                black_box(f.decide_with(&ValidatorCache::new()));
            }
        }
        "manifest" => {
            let f = Fixture::new(rules);
            let ctx = context();
            start = Instant::now();
            for _ in 0..iterations {
                black_box(manifest::build(black_box(&f.catalog), &f.policy, 1, &ctx));
            }
        }
        #[cfg(feature = "cedar")]
        "cedar" => {
            let f = CedarFixture::new(rules);
            start = Instant::now();
            for _ in 0..iterations {
                black_box(f.is_authorized());
            }
        }
        "hash-breakdown" => {
            // Per-tool cost of `definition_hash`, split into its steps, over the whole catalog.
            let catalog = aperture_bench::catalog();
            let time = |what: &str, f: &dyn Fn(&engine::descriptor::ToolDescriptor) -> usize| {
                let t = Instant::now();
                let mut n = 0;
                for _ in 0..iterations {
                    for tool in &catalog {
                        n += black_box(f(tool));
                    }
                }
                let per =
                    t.elapsed().as_nanos() as f64 / (iterations as f64 * catalog.len() as f64);
                println!("{what:<44} {per:>8.0} ns/tool ({n} bytes total)");
            };
            let object = |t: &engine::descriptor::ToolDescriptor| {
                serde_json::json!({
                    "name": t.name, "version": t.version, "title": t.title,
                    "description": t.description, "inputSchema": t.input_schema,
                    "outputSchema": t.output_schema, "annotations": t.annotations,
                })
            };
            time("build the definition object (clones)", &|t| {
                object(t).as_object().map_or(0, |m| m.len())
            });
            time("  + serde_json::to_vec (not canonical)", &|t| {
                serde_json::to_vec(&object(t)).map_or(0, |v| v.len())
            });
            time("  + serde_json_canonicalizer (engine)", &|t| {
                engine::canonical::to_canonical_bytes(&object(t)).map_or(0, |v| v.len())
            });
            time("  + experimental JCS writer", &|t| {
                aperture_bench::jcs::to_vec(&object(t)).len()
            });
            time("  + experimental JCS writer + SHA-256", &|t| {
                aperture_bench::jcs::hash(&object(t)).len()
            });
            time("definition_hash (engine)", &|t| {
                t.definition_hash().map_or(0, |h| h.len())
            });
            start = Instant::now();
        }
        other => panic!("unknown operation {other}"),
    }
    let per = start.elapsed().as_nanos() as f64 / iterations as f64;
    println!("{op} rules={rules}: {per:.0} ns/iter over {iterations} iterations");
}
