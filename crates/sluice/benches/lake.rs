#![allow(clippy::unwrap_used, missing_docs)]

//! Micro-benchmarks of the lake core.
//!
//! - `finalize_metrics`: canonical JSON + BLAKE3 identity of 10k metric drafts
//!   (baseline: `serde_json::to_vec` of the same values, no canonicalization).
//! - `put_metrics`: one bulk put of 1k metrics into a fresh lake (content
//!   table + index, dedup check included).
//! - `get_many`: 100 ids from a lake of 10k metrics in 10 steps, through the
//!   index and partition-pruned content reads.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;
use sluice::registry::TypeRegistry;
use sluice::{Artifact, Draft, Lake};

fn values(n: usize) -> Vec<serde_json::Value> {
    (0..n).map(|i| json!({"score": i as f64 / 7.0, "epoch": i % 13, "name": format!("run-{i}"), "tags": ["a", "b"]})).collect()
}

fn metrics(registry: &TypeRegistry, n: usize, steps: i32) -> Vec<Artifact> {
    values(n)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            Draft::metric(v).unwrap().with_step(i as i32 % steps).finalize(registry).unwrap()
        })
        .collect()
}

fn bench_finalize(c: &mut Criterion) {
    let registry = TypeRegistry::builtin();
    let vals = values(10_000);
    let mut group = c.benchmark_group("identity");
    group.bench_function("finalize_metrics_10k", |b| {
        b.iter(|| {
            for v in &vals {
                std::hint::black_box(
                    Draft::metric(v.clone()).unwrap().finalize(&registry).unwrap(),
                );
            }
        })
    });
    group.bench_function("baseline_serde_json_10k", |b| {
        b.iter(|| {
            for v in &vals {
                std::hint::black_box(serde_json::to_vec(&v.clone()).unwrap());
            }
        })
    });
    group.finish();
}

fn bench_store(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = TypeRegistry::builtin();
    let mut group = c.benchmark_group("store");
    group.sample_size(10);
    let batch = metrics(&registry, 1_000, 4);
    group.bench_function("put_metrics_1k", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let lake = rt.block_on(Lake::init(dir.path())).unwrap().0;
                (dir, lake)
            },
            |(_dir, lake)| rt.block_on(lake.put(&batch)).unwrap(),
            BatchSize::PerIteration,
        )
    });

    let dir = tempfile::tempdir().unwrap();
    let lake = rt.block_on(Lake::init(dir.path())).unwrap().0;
    let all = metrics(&registry, 10_000, 10);
    rt.block_on(lake.put(&all)).unwrap();
    let wanted: Vec<_> = all.iter().step_by(100).map(|a| a.id).collect();
    group.bench_function("get_many_100_of_10k", |b| {
        b.iter(|| assert_eq!(rt.block_on(lake.get_many(&wanted)).unwrap().len(), wanted.len()))
    });
    group.finish();
}

/// One artifact by id (what a worker does for each input) from lakes built
/// by 100k-artifact commits: 100k vs 1M (`SLUICE_BENCH_LOOKUP`). The index is
/// not partitioned and ids are random, so without key filters every index
/// file would be read; with them, only the files of the commit that added it.
fn bench_lookup(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = TypeRegistry::builtin();
    let sizes: Vec<usize> = std::env::var("SLUICE_BENCH_LOOKUP")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let mut group = c.benchmark_group("lookup");
    group.sample_size(10);
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let lake = rt.block_on(Lake::init(dir.path())).unwrap().0;
        let mut probe = None;
        for start in (0..n).step_by(100_000) {
            let chunk: Vec<Artifact> = (start..(start + 100_000).min(n))
                .map(|i| {
                    Draft::metric(serde_json::json!({ "i": i }))
                        .unwrap()
                        .with_step((i % 10) as i32)
                        .finalize(&registry)
                        .unwrap()
                })
                .collect();
            probe = Some(chunk[chunk.len() / 2].id);
            rt.block_on(lake.append_unchecked(&chunk)).unwrap();
        }
        let id = probe.unwrap();
        group.bench_function(format!("get_1_of_{n}"), |b| {
            b.iter(|| assert_eq!(rt.block_on(lake.get(id)).unwrap().id, id))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_finalize, bench_store, bench_lookup);
criterion_main!(benches);
