#![allow(clippy::unwrap_used, missing_docs)]

//! Commit throughput and de-duplication cost as the lake grows.
//!
//! Each iteration stages 500 fresh synthetic executions (3 metrics each, 20%
//! pooled duplicates) through the real `StagingWriter` (not timed), then times
//! `Lake::commit`. Groups: a lake with 0 existing artifacts (the baseline),
//! and with each size in `SLUICE_BENCH_EXISTING` (default "100000,1000000").
//! Compare `commit/existing_N` with `commit/existing_0`.
//!
//! `load/batches_of_100` times what the committer does per staged
//! directory before any Delta commit: reading and validating 10 sealed
//! batches of 100 executions × 3 metrics (`load_run`, on one thread). It
//! is the part of goal 1's commit that grows with the executions.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use sluice::staging::synthetic::{self, SyntheticSpec};
use sluice::staging::{self, StagingWriter, SyncPolicy};
use sluice::{Draft, Lake};

fn sizes() -> Vec<u64> {
    let text = std::env::var("SLUICE_BENCH_EXISTING").unwrap_or_else(|_| "100000,1000000".into());
    let mut sizes = vec![0];
    sizes.extend(text.split(',').filter_map(|s| s.trim().parse::<u64>().ok()));
    sizes
}

async fn filled_lake(dir: &std::path::Path, n: u64) -> Lake {
    let (lake, _) = Lake::init(dir).await.unwrap();
    let mut done = 0;
    while done < n {
        let end = (done + 100_000).min(n);
        let artifacts: Vec<_> = (done..end)
            .map(|i| {
                Draft::metric(json!({"fill": i}))
                    .unwrap()
                    .with_step((i % 10) as i32)
                    .finalize(lake.registry())
                    .unwrap()
            })
            .collect();
        lake.append_unchecked(&artifacts).await.unwrap();
        done = end;
    }
    lake
}

fn bench_commit(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("commit");
    group.sample_size(10);
    for existing in sizes() {
        let dir = tempfile::tempdir().unwrap();
        let lake = rt.block_on(filled_lake(dir.path(), existing));
        let writer = StagingWriter::new(
            staging::default_root(lake.root().local().unwrap()),
            lake.registry().clone(),
            SyncPolicy::Never,
        );
        let mut seed = 1;
        group.bench_function(format!("existing_{existing}"), |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    seed += 1;
                    let spec =
                        SyntheticSpec { seed, duplicate_fraction: 0.2, ..SyntheticSpec::default() };
                    synthetic::stage_range(&writer, &spec, lake.registry(), 0..500).unwrap();
                    let started = Instant::now();
                    rt.block_on(lake.commit().execute()).unwrap();
                    total += started.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

fn bench_load(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (lake, _) = rt.block_on(Lake::init(dir.path())).unwrap();
    let root = staging::default_root(lake.root().local().unwrap());
    let writer = StagingWriter::new(&root, lake.registry().clone(), SyncPolicy::Never);
    let spec = SyntheticSpec { batch: 100, ..SyntheticSpec::default() };
    synthetic::stage_range(&writer, &spec, lake.registry(), 0..1000).unwrap();
    let dirs = staging::scan(&root, None).unwrap().sealed;
    assert_eq!(dirs.len(), 10);
    let specs = lake.table_specs();
    let mut group = c.benchmark_group("load");
    group.sample_size(20);
    group.bench_function("batches_of_100", |b| {
        b.iter(|| {
            for dir in &dirs {
                let loaded = sluice::commit::load_run(lake.registry(), &specs, dir).unwrap();
                assert_eq!(loaded.executions.len(), 100);
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench_commit, bench_load);
criterion_main!(benches);
