//! Call decision and manifest build of the Aperture engine, and the same authorization question
//! answered by `cedar-policy`, on the same deterministic input (see `src/lib.rs`).
//!
//! Run with `cd bench && cargo bench`; one group with `cargo bench -- decide`.

use std::hint::black_box;
use std::time::Duration;

#[cfg(feature = "cedar")]
use aperture_bench::CedarFixture;
use aperture_bench::{CATALOG_SIZE, Fixture, context, experiments};
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use engine::canonical;
use engine::manifest;
use engine::narrow::{self, ValidatorCache};
use serde_json::{Map, Value};

const RULES: [usize; 2] = [50, 500];

/// The whole `decide` of an allowed call: binding, lease, actor, manifest lookup, scope, version
/// and schema-hash echo, drift (live definition hash compare), validation of the arguments
/// against the narrowed schema, effective arguments, `args_hash`, the bound call.
fn decide(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide");
    for rules in RULES {
        let f = Fixture::new(rules);
        // Warm: the validator of the narrowed schema is compiled once per schema hash, which is
        // the design (the server keeps one cache for the process).
        g.bench_with_input(BenchmarkId::new("warm", rules), &f, |b, f| {
            b.iter(|| black_box(f.decide_with(black_box(&f.cache))))
        });
        // Cold: a fresh cache, so the narrowed schema is compiled inside the call (the first
        // call of a tool after a process start or a cache reset).
        g.bench_with_input(BenchmarkId::new("cold", rules), &f, |b, f| {
            b.iter_batched(
                ValidatorCache::new,
                |cache| {
                    let d = f.decide_with(&cache);
                    (d, cache) // dropped outside the measurement
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// `manifest::build` of the 1,000-tool catalog. The build takes the catalog by value, each tool
/// with its stored fingerprints (the server hands it the rows it just loaded), so each
/// iteration gets a fresh copy, made and dropped outside the measurement, as is the manifest.
fn manifest_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("manifest_build");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(8));
    for rules in RULES {
        let f = Fixture::new(rules);
        let ctx = context();
        // Warm: every listed schema's validator is already in the process-wide cache (every
        // manifest after the first one under this catalog and policy).
        g.bench_with_input(
            BenchmarkId::new(format!("{CATALOG_SIZE}/warm"), rules),
            &f,
            |b, f| {
                b.iter_batched(
                    || f.fingerprinted.clone(),
                    |catalog| manifest::build(catalog, black_box(&f.policy), 1, &ctx, &f.cache),
                    BatchSize::LargeInput,
                )
            },
        );
        // Cold: a fresh cache, so every listed tool's narrowed schema is compiled (the first
        // manifest after a start, or after the catalog or policy changed every schema).
        g.bench_with_input(
            BenchmarkId::new(format!("{CATALOG_SIZE}/cold"), rules),
            &f,
            |b, f| {
                b.iter_batched(
                    || (f.fingerprinted.clone(), ValidatorCache::new()),
                    |(catalog, cache)| {
                        let m = manifest::build(catalog, &f.policy, 1, &ctx, &cache);
                        (m, cache)
                    },
                    BatchSize::LargeInput,
                )
            },
        );
    }
    g.finish();
}

#[cfg(feature = "cedar")]
/// The same question in Cedar: `Authorizer::is_authorized` for the same tool under one policy
/// per rule (request and entities built once, outside the measurement).
fn cedar(c: &mut Criterion) {
    let mut g = c.benchmark_group("cedar_is_authorized");
    for rules in RULES {
        let f = CedarFixture::new(rules);
        g.bench_with_input(BenchmarkId::from_parameter(rules), &f, |b, f| {
            b.iter(|| black_box(f.is_authorized()))
        });
    }
    g.finish();
}

/// Where the time goes: the pieces of `decide` and of a manifest entry, measured alone.
fn parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("parts");
    for rules in RULES {
        let f = Fixture::new(rules);
        let ctx = context();
        let tool = &f.catalog[aperture_bench::TARGET_INDEX];
        // The engine's rule evaluation: first match over the ordered rules (done once per tool
        // at manifest build, not per call).
        g.bench_with_input(BenchmarkId::new("select_target", rules), &f, |b, f| {
            b.iter(|| black_box(f.policy.select(black_box(tool), &ctx)).mode)
        });
        g.bench_with_input(BenchmarkId::new("select_all_1000", rules), &f, |b, f| {
            b.iter(|| {
                f.catalog
                    .iter()
                    .map(|t| f.policy.select(black_box(t), &ctx).mode as usize)
                    .sum::<usize>()
            })
        });
        // Experiment: the same scan with the risk labels computed once per tool.
        for t in &f.catalog {
            assert_eq!(
                experiments::first_match(&f.policy, t, &ctx).map(|r| &r.id),
                f.policy.select(t, &ctx).rule.map(|r| &r.id)
            );
        }
        g.bench_with_input(
            BenchmarkId::new("select_target_labels_once", rules),
            &f,
            |b, f| b.iter(|| experiments::first_match(&f.policy, black_box(tool), &ctx).is_some()),
        );
    }

    let f = Fixture::new(500);
    let entry = f.manifest.entry(&f.tool).expect("target");
    let narrowed = entry.narrowed.as_ref().expect("narrowed");
    let Value::Object(args) = &f.arguments else {
        unreachable!()
    };
    g.bench_function("manifest_entry_lookup", |b| {
        b.iter(|| black_box(f.manifest.entry(black_box(&f.tool))).is_some())
    });
    g.bench_function("live_definition_hash", |b| {
        let live = |name: &str| f.manifest.entry(name).map(|e| e.definition_hash.clone());
        b.iter(|| live(black_box(&f.tool)).as_deref() == Some(entry.definition_hash.as_str()))
    });
    g.bench_function("validate_warm_cache", |b| {
        b.iter(|| {
            f.cache.validate(
                black_box(&entry.schema_hash),
                &entry.advertised.input_schema,
                black_box(&f.arguments),
            )
        })
    });
    let validator = f
        .cache
        .get(&entry.schema_hash, &entry.advertised.input_schema)
        .expect("validator");
    g.bench_function("is_valid_only", |b| {
        b.iter(|| validator.is_valid(black_box(&f.arguments)))
    });
    g.bench_function("effective_args_and_args_hash", |b| {
        b.iter(|| {
            let eff = narrowed.effective_arguments(black_box(args));
            (canonical::args_hash_of_map(&eff), eff)
        })
    });
    // The args_hash step alone, streamed into SHA-256, and its two halves.
    let effective = narrowed.effective_arguments(args);
    let bytes = canonical::value_bytes(&Value::Object(effective.clone()));
    g.bench_function("args_hash", |b| {
        b.iter(|| canonical::args_hash_of_map(black_box(&effective)))
    });
    g.bench_function("args_jcs_bytes", |b| {
        b.iter(|| canonical::value_bytes(black_box(&Value::Object(effective.clone()))))
    });
    g.bench_function("args_sha256", |b| {
        b.iter(|| canonical::sha256_tagged(black_box(&bytes)))
    });
    // For comparison: the same bytes from serde_json_canonicalizer (the generic writer).
    g.bench_function("args_jcs_bytes_canonicalizer_crate", |b| {
        let v = Value::Object(effective.clone());
        b.iter(|| canonical::to_canonical_bytes(black_box(&v)))
    });
    g.bench_function("compile_narrowed_schema", |b| {
        b.iter(|| narrow::compile(black_box(&entry.advertised.input_schema)).is_ok())
    });

    // Pieces of one manifest entry (the benchmarked tool, with its invocation policy).
    let tool = &f.catalog[aperture_bench::TARGET_INDEX];
    let invocation = entry.invocation.clone();
    let none = Map::new();
    g.bench_function("narrow_one_tool", |b| {
        b.iter(|| narrow::narrow(black_box(&tool.input_schema), invocation.as_ref(), &none))
    });
    g.bench_function("narrow_one_tool_no_policy", |b| {
        b.iter(|| narrow::narrow(black_box(&tool.input_schema), None, &none))
    });
    g.bench_function("definition_hash_one_tool", |b| {
        b.iter(|| black_box(tool).definition_hash())
    });
    g.bench_function("schema_hash_one_tool", |b| {
        b.iter(|| black_box(&entry.advertised).schema_hash())
    });
    g.finish();
}

/// Where the time of `manifest::build` goes: each per-tool step, over the whole catalog.
fn catalog_parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("catalog_parts");
    g.sample_size(10);
    let f = Fixture::new(500);
    let ctx = context();
    let none = Map::new();
    g.bench_function("select", |b| {
        b.iter(|| {
            f.catalog
                .iter()
                .filter(|t| f.policy.select(black_box(t), &ctx).rule.is_some())
                .count()
        })
    });
    // As `manifest::entry` does it: the deciding rule's invocation policy (cloned), plus the
    // dry-run argument in dry_run_only mode.
    let inputs: Vec<_> = f
        .catalog
        .iter()
        .map(|t| {
            let sel = f.policy.select(t, &ctx);
            let mut extra = Map::new();
            if sel.mode == engine::policy::Mode::DryRunOnly
                && let Some(arg) = &t.dry_run_argument
            {
                extra.insert(arg.clone(), Value::Bool(true));
            }
            (t, sel.rule.and_then(|r| r.invocation.clone()), extra)
        })
        .collect();
    g.bench_function("narrow", |b| {
        b.iter(|| {
            inputs
                .iter()
                .filter(|(t, inv, extra)| {
                    narrow::narrow(&t.input_schema, inv.as_ref(), extra).is_ok()
                })
                .count()
        })
    });
    g.bench_function("compile_narrowed_schemas", |b| {
        b.iter(|| {
            f.manifest
                .listed()
                .filter(|e| narrow::compile(&e.advertised.input_schema).is_ok())
                .count()
        })
    });
    g.bench_function("validators_from_warm_cache", |b| {
        b.iter(|| {
            f.manifest
                .listed()
                .filter(|e| {
                    f.cache
                        .get(&e.schema_hash, &e.advertised.input_schema)
                        .is_ok()
                })
                .count()
        })
    });
    g.bench_function("narrow_without_policy", |b| {
        b.iter(|| {
            f.catalog
                .iter()
                .filter(|t| narrow::narrow(&t.input_schema, None, &none).is_ok())
                .count()
        })
    });
    // Paid once per tool when it is written to the catalog, not per manifest.
    g.bench_function("fingerprints", |b| {
        b.iter(|| {
            f.catalog
                .iter()
                .map(|t| engine::catalog::Fingerprints::of(t).schema_hash.len())
                .sum::<usize>()
        })
    });
    g.bench_function("schema_hashes", |b| {
        b.iter(|| {
            f.manifest
                .tools
                .iter()
                .map(|e| e.advertised.schema_hash().len())
                .sum::<usize>()
        })
    });
    g.bench_function("definition_hashes", |b| {
        b.iter(|| {
            f.catalog
                .iter()
                .map(|t| t.definition_hash().len())
                .sum::<usize>()
        })
    });
    g.finish();
}

/// Not a measurement: prints how this binary was built, once, at the top of the report.
fn report_build(_: &mut Criterion) {
    println!(
        "aperture-bench: cedar={}, serde_json preserve_order={}, catalog={} tools",
        cfg!(feature = "cedar"),
        aperture_bench::serde_json_preserves_order(),
        CATALOG_SIZE
    );
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

#[cfg(feature = "cedar")]
criterion_group! {
    name = benches;
    config = config();
    targets = report_build, decide, manifest_build, cedar, parts, catalog_parts
}
#[cfg(not(feature = "cedar"))]
criterion_group! {
    name = benches;
    config = config();
    targets = report_build, decide, manifest_build, parts, catalog_parts
}
criterion_main!(benches);
