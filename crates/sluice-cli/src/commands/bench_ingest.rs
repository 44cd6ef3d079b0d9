//! `sluice bench ingest`: CSV files to a raw table, against the limit of
//! the same work without sluice.
//!
//! - limit: the same files, read by arrow's CSV reader with the declared
//!   types and rewritten as zstd Parquet, one file per input, by as many
//!   threads as ingestion has workers (no queue, no Delta, no ledger);
//! - ingest: `sluice ingest run --once` over the same files in a landing
//!   zone (claim, hash, parse, cast with violation checks, Parquet, one Delta
//!   commit per flush with the files' keys, ledger, archive);
//! - flush latency: `--flushes` one-row files, each its own flush and commit
//!   (median and p99 of the commit).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use deltalake::arrow::csv::ReaderBuilder;
use deltalake::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use deltalake::parquet::arrow::ArrowWriter;
use sluice::ingest::{IngestConfig, Ingestor, Mode};

use super::bench_results::Figure;
use super::ingest::{DEMO_SCHEMA as SCHEMA, demo_trips};
use crate::output::print;

/// The demo's columns as Arrow types, for the limit's reader.
fn arrow_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("trip_id", DataType::Int64, false),
        Field::new(
            "pickup_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("zone", DataType::Utf8, false),
        Field::new("passengers", DataType::Int32, true),
        Field::new("fare", DataType::Decimal128(10, 2), false),
        Field::new("tip", DataType::Decimal128(10, 2), true),
    ]))
}

/// Rewrite every file as zstd Parquet with `threads` threads; rows/s.
fn limit(files: &[PathBuf], out: &Path, threads: usize) -> anyhow::Result<(u64, f64)> {
    std::fs::create_dir_all(out)?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    let rows = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<u64> {
                    let mut rows = 0u64;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(path) = files.get(i) else { return Ok(rows) };
                        let reader = ReaderBuilder::new(arrow_schema())
                            .with_header(true)
                            .with_batch_size(8192)
                            .build(std::fs::File::open(path)?)?;
                        let target = std::fs::File::create(out.join(format!("{i}.parquet")))?;
                        let mut writer = ArrowWriter::try_new(
                            target,
                            arrow_schema(),
                            Some(sluice::lake::delta::table::writer_properties()),
                        )?;
                        for batch in reader {
                            let batch = batch?;
                            rows += batch.num_rows() as u64;
                            writer.write(&batch)?;
                        }
                        writer.close()?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| anyhow::anyhow!("a thread panicked"))?)
            .sum::<anyhow::Result<u64>>()
    })?;
    Ok((rows, started.elapsed().as_secs_f64()))
}

fn config(dir: &Path, workers: usize, flush_rows: usize) -> anyhow::Result<IngestConfig> {
    let path = dir.join("lakehouse.toml");
    std::fs::write(
        &path,
        format!(
            "lake = \"lake\"\n[queue]\nsettle_ms = 0\npoll_ms = 5\nafter_ingest = \"delete\"\n[ingest]\nworkers = {workers}\nflush_rows = {flush_rows}\nflush_interval_ms = 1000\n"
        ),
    )?;
    Ok(IngestConfig::load(&path)?)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `sluice bench ingest` (see the module doc).
pub async fn ingest(
    dir: Option<PathBuf>,
    files: u64,
    rows_per_file: u64,
    workers: usize,
    flushes: u64,
) -> anyhow::Result<Vec<Figure>> {
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("sluice-bench-ingest-{}", std::process::id()))
    });
    if dir.exists() {
        anyhow::bail!("{} exists; give an empty or new --dir", dir.display());
    }
    let source = dir.join("source");
    std::fs::create_dir_all(&source).with_context(|| format!("creating {}", source.display()))?;
    std::fs::create_dir_all(dir.join("schemas"))?;
    std::fs::write(dir.join("schemas/trips.yaml"), SCHEMA)?;
    let paths: Vec<PathBuf> = (0..files)
        .map(|f| {
            let path = source.join(format!("trips-{f:05}.csv"));
            std::fs::write(&path, demo_trips(f, rows_per_file))?;
            Ok(path)
        })
        .collect::<anyhow::Result<_>>()?;
    let total = files * rows_per_file;
    let bytes: u64 = paths.iter().filter_map(|p| p.metadata().ok()).map(|m| m.len()).sum();

    let (limit_rows, limit_secs) = limit(&paths, &dir.join("limit"), workers)?;
    anyhow::ensure!(limit_rows == total, "the limit read {limit_rows} rows of {total}");

    let landing = dir.join("landing/trips");
    std::fs::create_dir_all(&landing)?;
    for p in &paths {
        let name = p.file_name().context("a source file has no name")?;
        std::fs::hard_link(p, landing.join(name))
            .or_else(|_| std::fs::copy(p, landing.join(name)).map(|_| ()))?;
    }
    let ingestor = Ingestor::open(config(&dir, workers, 500_000)?).await?;
    let report = ingestor.run(Mode::Once, None).await?;
    anyhow::ensure!(report.rows == total, "ingested {} rows of {total}", report.rows);

    // Small flushes: one-row files, each committed alone.
    let small = dir.join("small");
    std::fs::create_dir_all(small.join("landing/trips"))?;
    std::fs::create_dir_all(small.join("schemas"))?;
    std::fs::write(small.join("schemas/trips.yaml"), SCHEMA)?;
    let ingestor = Ingestor::open(config(&small, workers, 1)?).await?;
    for f in 0..flushes {
        std::fs::write(
            small.join(format!("landing/trips/one-{f:05}.csv")),
            demo_trips(total + f, 1),
        )?;
    }
    let small_report = ingestor.run(Mode::Once, None).await?;
    let mut latency = small_report.flush_seconds.clone();
    latency.sort_by(f64::total_cmp);

    let limit_rate = total as f64 / limit_secs;
    let rate = total as f64 / report.seconds;
    let (median, p99) = (percentile(&latency, 0.5), percentile(&latency, 0.99));
    let what = format!("{files} CSV files x {rows_per_file} rows, {workers} workers");
    let figures = vec![
        Figure::new("ingest", &what, "CSV to raw", rate, "rows/s")
            .against("arrow CSV to zstd Parquet, same threads (limit)", rate / limit_rate),
        Figure::new("ingest", &what, "CSV to raw", rate, "rows/s")
            .against("goal: 1,200,000 rows/s", rate / 1_200_000.0),
        Figure::new(
            "ingest",
            &format!("{flushes} one-row files"),
            "flush commit, median",
            median * 1e3,
            "ms",
        ),
        Figure::new(
            "ingest",
            &format!("{flushes} one-row files"),
            "flush commit, p99",
            p99 * 1e3,
            "ms",
        )
        .against("the median", if median > 0.0 { p99 / median } else { 0.0 }),
    ];
    print(&format!(
        "workload: {files} CSV files × {rows_per_file} rows = {total} rows ({:.0} MiB), {workers} workers\n\
         limit (arrow CSV → zstd Parquet, no Delta, {workers} threads): {limit_secs:.2} s, {limit_rate:.0} rows/s\n\
         sluice ingest → raw (claim, hash, cast + checks, Delta commits, ledger): {:.2} s, {rate:.0} rows/s in {} commits\n\
         ratio to the limit: {:.2} (target ≥ 0.6); target rate ≥ 1,200,000 rows/s: {}\n\
         flush latency over {} one-file flushes: median {:.1} ms, p99 {:.1} ms (p99/median {:.1})\n\
         work dir: {}",
        bytes as f64 / (1 << 20) as f64,
        report.seconds,
        report.commits,
        rate / limit_rate,
        if rate >= 1_200_000.0 { "met" } else { "not met" },
        latency.len(),
        median * 1e3,
        p99 * 1e3,
        if median > 0.0 { p99 / median } else { 0.0 },
        dir.display()
    ))?;
    Ok(figures)
}
