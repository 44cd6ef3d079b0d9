#![allow(clippy::unwrap_used, missing_docs)]

//! The execution-cache check of a step as the executions table grows.
//!
//! A lake holds N executions (`SLUICE_BENCH_EXECUTIONS`, default
//! "100000,1000000"); the bench times `cache::successful_runs` for 100k unit
//! specs of which half have a successful execution. Compare
//! `cache_check/executions_1000000` with `cache_check/executions_100000`:
//! the check is one streamed scan of two columns, so it grows with the table,
//! never with one query per unit.

use std::collections::HashSet;

use criterion::{Criterion, criterion_group, criterion_main};
use sluice::Lake;
use sluice::lake::{delta::table, layout};
use sluice::pipeline::cache;
use sluice::records::{ExecutionRecord, records_batch};

fn spec_id(i: u64) -> String {
    blake3::hash(&i.to_le_bytes()).to_hex()[..32].to_owned()
}

async fn lake_with(dir: &std::path::Path, n: u64) -> Lake {
    let (lake, _) = Lake::init(dir).await.unwrap();
    let spec = layout::executions_table();
    let mut done = 0;
    while done < n {
        let end = (done + 100_000).min(n);
        let records: Vec<ExecutionRecord> = (done..end)
            .map(|i| ExecutionRecord {
                execution_run_id: spec_id((i + 1) << 40),
                execution_spec_id: spec_id(i),
                step_run_id: "bench".into(),
                origin_step_number: (i % 4) as i32,
                operation_name: "bench".into(),
                params: "{}".into(),
                timestamp_start: 0,
                timestamp_end: Some(1),
                worker_id: None,
                compute_backend: Some("local".into()),
                success: i % 10 != 0,
                error: None,
                tool_output: None,
                metadata: "{}".into(),
            })
            .collect();
        let handle = table::open(lake.root(), &spec).await.unwrap();
        let schema = table::arrow_schema(&handle, &spec).unwrap();
        let batch = records_batch(&spec, &schema, &records).unwrap();
        table::append(handle, &spec, vec![batch]).await.unwrap();
        done = end;
    }
    lake
}

fn bench_cache(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sizes: Vec<u64> = std::env::var("SLUICE_BENCH_EXECUTIONS")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // 100k specs: even ones exist in every lake (below 100k), odd ones never.
    let wanted: HashSet<String> = (0..100_000u64)
        .map(|i| if i % 2 == 0 { spec_id(i) } else { spec_id(u64::MAX - i) })
        .collect();
    let mut group = c.benchmark_group("cache_check");
    group.sample_size(10);
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let lake = rt.block_on(lake_with(dir.path(), n));
        group.bench_function(format!("executions_{n}"), |b| {
            b.iter(|| {
                let hits = rt.block_on(cache::successful_runs(&lake, &wanted)).unwrap();
                assert!(hits.len() >= 40_000);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_cache);
criterion_main!(benches);
