//! Runs one benchmarked operation in a loop, for `perf record` (criterion's own loop is harder
//! to read in a profile). Prints the mean time per iteration.
//!
//! `cargo run --release --bin profile -- <decide|decide-cold|manifest|manifest-cold|cedar> <rules> <iterations>`

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
    // Manifests built are dropped after the clock stops.
    let mut kept = Vec::new();
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
            // The copies of the catalog the build consumes are made before the clock starts.
            let mut copies: Vec<_> = (0..iterations).map(|_| f.fingerprinted.clone()).collect();
            start = Instant::now();
            for catalog in copies.drain(..) {
                kept.push(black_box(manifest::build(
                    catalog, &f.policy, 1, &ctx, &f.cache,
                )));
            }
        }
        "manifest-cold" => {
            let f = Fixture::new(rules);
            let ctx = context();
            let mut copies: Vec<_> = (0..iterations).map(|_| f.fingerprinted.clone()).collect();
            start = Instant::now();
            for catalog in copies.drain(..) {
                kept.push(black_box(manifest::build(
                    catalog,
                    &f.policy,
                    1,
                    &ctx,
                    &ValidatorCache::new(),
                )));
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
        "sizes" => {
            let f = Fixture::new(rules);
            let (mut def, mut adv) = (0, 0);
            for (t, e) in f.catalog.iter().zip(&f.manifest.tools) {
                def += engine::canonical::value_bytes(&serde_json::json!({
                    "name": t.name, "version": t.version, "title": t.title,
                    "description": t.description, "inputSchema": t.input_schema,
                    "outputSchema": t.output_schema, "annotations": t.annotations,
                }))
                .len();
                adv += engine::canonical::value_bytes(
                    &serde_json::to_value(&e.advertised).expect("advertised"),
                )
                .len();
            }
            println!(
                "canonical bytes per tool: definition {}, advertised {}",
                def / 1000,
                adv / 1000
            );
            start = Instant::now();
        }
        other => panic!("unknown operation {other}"),
    }
    let per = start.elapsed().as_nanos() as f64 / iterations as f64;
    println!("{op} rules={rules}: {per:.0} ns/iter over {iterations} iterations");
}
