//! `sluice ingest` with real processes: killed with SIGKILL at many moments
//! while files keep arriving, restarted each time; at the end every source
//! row is in the raw table exactly once and the ledger lists every file
//! once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::crash::fraction;

pub(crate) const SCHEMA: &str = "columns:\n  - { name: trip_id, type: int64, nullable: false }\n  - { name: pickup_at, type: timestamp }\n  - { name: zone, type: string, max_length: 16 }\n  - { name: fare, type: \"decimal(8,2)\" }\nprimary_key: [trip_id]\n";

/// raw → aggregate → curated, as in the library's medallion tests.
pub(crate) const TRANSFORMS: &str = include_str!("../../../sluice/tests/fixtures/medallion.toml");

pub(crate) fn sluice(config: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.arg("ingest").args(args).arg("--config").arg(config);
    c
}

pub(crate) fn write_csv(path: &Path, first: u64, rows: u64) {
    let mut out = String::with_capacity(rows as usize * 48);
    out.push_str("trip_id,pickup_at,zone,fare\n");
    for i in first..first + rows {
        out.push_str(&format!(
            "{i},2024-01-{:02}T{:02}:{:02}:00Z,Zone{},{}.{:02}\n",
            1 + i % 28,
            i % 24,
            i % 60,
            i % 9,
            3 + i % 50,
            i % 100
        ));
    }
    std::fs::write(path, out).unwrap();
}

async fn raw_counts(lake: &Path) -> (i64, i64) {
    let url = url::Url::from_directory_path(lake.join("raw/trips")).unwrap();
    let table = deltalake::open_table(url).await.unwrap();
    let ctx = deltalake::datafusion::prelude::SessionContext::new();
    ctx.register_table("trips", table.table_provider().await.unwrap()).unwrap();
    let batches = ctx
        .sql("SELECT count(*) AS n, count(DISTINCT trip_id) AS d FROM trips")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let col = |i: usize| {
        batches[0]
            .column(i)
            .as_any()
            .downcast_ref::<deltalake::arrow::array::Int64Array>()
            .unwrap()
            .value(0)
    };
    (col(0), col(1))
}

#[test]
fn ingestion_killed_at_random_moments_lands_every_row_exactly_once() {
    let kills: u64 = crate::depth("SLUICE_INGEST_KILLS", 50, 6);
    let (files, rows_per_file) = (200u64, 5_000u64);
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("schemas")).unwrap();
    std::fs::write(root.join("schemas/trips.yaml"), SCHEMA).unwrap();
    let config = root.join("lakehouse.toml");
    std::fs::write(
        &config,
        format!("lake = \"lake\"\n[queue]\nsettle_ms = 0\npoll_ms = 50\nretry_delay_ms = 0\nvisibility_timeout_secs = 30\n[ingest]\nworkers = 2\nflush_interval_ms = 200\nflush_rows = 50000\n{TRANSFORMS}"),
    )
    .unwrap();
    // Files are written aside, then arrive (atomically) while the loop runs.
    let outbox = root.join("outbox");
    std::fs::create_dir_all(&outbox).unwrap();
    for f in 0..files {
        write_csv(&outbox.join(format!("trips-{f:04}.csv")), f * rows_per_file, rows_per_file);
    }
    let landing = root.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    let arrivals = {
        let (outbox, landing) = (outbox.clone(), landing.clone());
        std::thread::spawn(move || {
            for f in 0..files {
                let name = format!("trips-{f:04}.csv");
                std::fs::rename(outbox.join(&name), landing.join(&name)).unwrap();
                std::thread::sleep(Duration::from_millis(if f % 25 == 0 { 400 } else { 60 }));
            }
        })
    };
    let mut killed = 0;
    for k in 0..kills {
        let delay = Duration::from_millis(300 + (fraction(k + 9000) * 1700.0) as u64);
        killed += u64::from(crate::crash::kill_command_after(
            sluice(&config, &["run", "--watch"]),
            delay,
        ));
    }
    arrivals.join().unwrap();
    assert_eq!(killed, kills, "every run was killed while it ran");
    // Restarted without interruption: whatever was claimed, written or
    // committed by a killed process is finished exactly once.
    let out = sluice(&config, &["run", "--once", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (n, distinct) = rt.block_on(raw_counts(&root.join("lake")));
    assert_eq!(n, (files * rows_per_file) as i64, "every source row landed");
    assert_eq!(distinct, n, "no row twice");
    let ledger = rt.block_on(sluice::ingest::ledger::read(&root.join("lake"))).unwrap();
    let ok: std::collections::BTreeSet<&str> =
        ledger.iter().filter(|r| r.status == "ok").map(|r| r.file_key.as_str()).collect();
    assert_eq!(ok.len() as u64, files);
    assert_eq!(
        ledger.iter().filter(|r| r.status == "ok").count() as u64,
        files,
        "each file listed once"
    );
    assert!(ledger.iter().all(|r| r.status == "ok"), "nothing dead or duplicate");
    // Kills count as deliveries (a run killed before its first commit has
    // delivered its first files once more); a file is dead-lettered after
    // max_deliveries (100) of them, more than this loop's kills. Say how
    // close this run came.
    let most = ledger.iter().map(|r| r.attempts).max().unwrap_or_default();
    eprintln!("kill loop: the most deliveries of one file was {most} (max_deliveries 100)");
    let status = sluice(&config, &["status", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["queue"]["waiting"], 0, "{status}");
    assert_eq!(status["queue"]["in_flight"], 0, "{status}");
    assert_eq!(status["tables"]["trips"]["rows"], files * rows_per_file);
    // Curated, transformed after commits of processes that were killed at
    // any moment: every key once, totals exactly those of the source rows.
    let curated = crate::Lake::at(root.join("lake")).ok(&["sql", "--format", "csv", DAILY]);
    let curated: Vec<String> = curated.lines().skip(1).map(str::to_owned).collect();
    assert_eq!(
        curated,
        expected_daily(files * rows_per_file),
        "curated totals equal the source rows'"
    );
}

/// The curated table of [`TRANSFORMS`], as CSV rows (without the header)
/// of [`expected_daily`].
pub(crate) const DAILY: &str = "SELECT CAST(day AS VARCHAR), zone, trips, CAST(revenue * 100 AS BIGINT) FROM daily ORDER BY 1, 2";

/// What [`DAILY`] holds once the first `rows` trips [`write_csv`] writes
/// are ingested and transformed.
pub(crate) fn expected_daily(rows: u64) -> Vec<String> {
    let mut expected: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for i in 0..rows {
        let e = expected.entry(format!("2024-01-{:02},Zone{}", 1 + i % 28, i % 9)).or_default();
        e.0 += 1;
        e.1 += (3 + i % 50) * 100 + i % 100;
    }
    expected.into_iter().map(|(k, (n, cents))| format!("{k},{n},{cents}")).collect()
}

#[test]
fn the_demo_ingests_its_files_and_its_totals_match_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("d");
    let out = ingest_demo(&demo);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ingested 5 files, 5000 rows") && text.contains("1 dead-lettered"),
        "{text}"
    );
    assert!(text.contains("`twelve` is not a valid"), "the bad file's reason is shown: {text}");
    // Revenue per zone, and trips and revenue per day and zone, computed from
    // the archived CSV files, in cents.
    let mut expected: std::collections::BTreeMap<String, u64> = Default::default();
    let mut daily: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for entry in std::fs::read_dir(demo.join("landing/.sluice/done/trips")).unwrap() {
        let content = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in content.lines().skip(1) {
            let cells: Vec<&str> = line.split(',').collect();
            let (units, cents) = cells[4].split_once('.').unwrap();
            let cents = units.parse::<u64>().unwrap() * 100 + cents.parse::<u64>().unwrap();
            *expected.entry(cells[2].to_owned()).or_default() += cents;
            let day = &cells[1][..10];
            let e = daily.entry(format!("{day},{}", cells[2])).or_default();
            e.0 += 1;
            e.1 += cents;
        }
    }
    let lake = crate::Lake::at(demo.join("lake"));
    let got = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT zone, CAST(sum(fare) * 100 AS BIGINT) FROM trips GROUP BY zone ORDER BY zone",
    ]);
    let got: Vec<(String, u64)> = got
        .lines()
        .skip(1)
        .map(|l| {
            let (z, c) = l.split_once(',').unwrap();
            (z.to_owned(), c.parse().unwrap())
        })
        .collect();
    assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
    // The curated table, built incrementally in two waves through the
    // aggregate, holds the same totals per day and zone, each key once.
    let curated = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT CAST(day AS VARCHAR), zone, trips, CAST(revenue * 100 AS BIGINT) FROM trips_daily ORDER BY 1, 2",
    ]);
    let curated: Vec<String> = curated.lines().skip(1).map(str::to_owned).collect();
    let daily: Vec<String> =
        daily.into_iter().map(|(key, (n, cents))| format!("{key},{n},{cents}")).collect();
    assert_eq!(curated, daily);
    assert!(text.contains("top 5 curated rows by revenue"), "{text}");
    let dedup = sluice(&demo.join("lakehouse.toml"), &["dedup", "raw/trips"]).output().unwrap();
    let dedup = String::from_utf8_lossy(&dedup.stdout);
    assert!(dedup.contains("5000 rows before, 5000 after; 0 exact duplicates"), "{dedup}");
}

#[test]
fn bench_ingest_reports_rate_ratio_to_its_limit_and_flush_latency() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("bench");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "ingest", "--files", "4", "--rows-per-file", "2500", "--flushes", "10"])
        .arg("--dir")
        .arg(&work)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("workload: 4 CSV files × 2500 rows = 10000 rows"), "{text}");
    assert!(text.contains("limit (arrow CSV → zstd Parquet"), "{text}");
    assert!(text.contains("ratio to the limit: "), "{text}");
    assert!(text.contains("flush latency over 10 one-file flushes"), "{text}");
    // The raw table holds every row once; the limit wrote its Parquet files.
    let lake = crate::Lake::at(work.join("lake"));
    assert_eq!(
        lake.ok(&["sql", "--format", "csv", "SELECT count(DISTINCT trip_id) FROM trips"])
            .lines()
            .nth(1),
        Some("10000")
    );
    assert_eq!(std::fs::read_dir(work.join("limit")).unwrap().count(), 4);
}

/// The trips schema and a config with no transforms, files claimed at once.
fn minimal_config(root: &Path) -> PathBuf {
    ingest_config(root, SCHEMA, "lake = \"lake\"\n[queue]\nsettle_ms = 0\n")
}

/// `schemas/trips.yaml` and `lakehouse.toml` under `root`; the config's path.
pub(crate) fn ingest_config(root: &Path, schema: &str, config: &str) -> PathBuf {
    std::fs::create_dir_all(root.join("schemas")).unwrap();
    std::fs::write(root.join("schemas/trips.yaml"), schema).unwrap();
    let path = root.join("lakehouse.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// A file larger than 2 GiB is streamed: every row lands, and the ingest
/// process's peak memory is bounded by its batches and data-file buffers,
/// not by the file.
#[test]
fn a_file_over_two_gigabytes_is_ingested_in_bounded_memory() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = minimal_config(root);
    // One block of rows, written again and again (raw tables append; the
    // primary key is not enforced there): 2 GiB and a bit.
    let block_rows = 20_000u64;
    let block_path = root.join("block.csv");
    write_csv(&block_path, 0, block_rows);
    let text = std::fs::read_to_string(&block_path).unwrap();
    let (header, block) = text.split_once('\n').unwrap();
    let blocks = (2u64 << 30) / block.len() as u64 + 1;
    std::fs::create_dir_all(root.join("landing/trips")).unwrap();
    let big = root.join("landing/trips/big.csv");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&big).unwrap());
    writeln!(out, "{header}").unwrap();
    for _ in 0..blocks {
        out.write_all(block.as_bytes()).unwrap();
    }
    out.into_inner().unwrap().sync_all().unwrap();
    let size = std::fs::metadata(&big).unwrap().len();
    assert!(size > 2 << 30, "{size}");

    let run = sluice(&config, &["run", "--once", "--json"])
        .env("SLUICE_REPORT_PEAK_RSS", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let rows = blocks * block_rows;
    assert_eq!((report["files"].as_u64(), report["rows"].as_u64()), (Some(1), Some(rows)));
    let counted = crate::Lake::at(root.join("lake")).ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT count(*) FROM trips",
    ]);
    assert_eq!(counted.lines().nth(1), Some(rows.to_string().as_str()), "{counted}");
    let peak: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak RSS MiB: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS reported: {stderr}"));
    eprintln!("2 GiB file: {rows} rows, {} MiB, peak RSS {peak:.0} MiB", size >> 20);
    assert!(peak < 512.0, "peak RSS {peak:.0} MiB for a {} MiB file", size >> 20);
}

/// A file dropped again under a name already ingested is a redelivery only
/// when its bytes are the same: new bytes are new data, ingested and
/// recorded as such, never skipped in silence.
#[test]
fn a_known_name_with_new_content_is_new_data_not_a_redelivery() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = minimal_config(root);
    let landing = root.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    let run = |expect: &str| {
        let out = sluice(&config, &["run", "--once"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(expect), "expected `{expect}` in: {stdout}");
        stdout
    };
    let lake = crate::Lake::at(root.join("lake"));
    let rows = || {
        let csv = lake.ok(&["sql", "--format", "csv", "SELECT count(*) FROM trips"]);
        csv.lines().nth(1).unwrap().parse::<u64>().unwrap()
    };
    write_csv(&landing.join("day.csv"), 0, 10);
    run("ingested 1 file, 10 rows");
    // The same name, the same bytes: a redelivery, skipped.
    write_csv(&landing.join("day.csv"), 0, 10);
    run("1 duplicate skipped");
    assert_eq!(rows(), 10);
    // The same name, new bytes: new data.
    write_csv(&landing.join("day.csv"), 100, 7);
    run("ingested 1 file, 7 rows");
    assert_eq!(rows(), 17);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ledger = rt.block_on(sluice::ingest::ledger::read(&root.join("lake"))).unwrap();
    let ok: Vec<_> = ledger.iter().filter(|r| r.status == "ok").collect();
    assert_eq!(ok.len(), 2, "{ledger:?}");
    assert!(ok.iter().all(|r| r.file_key == "trips/day.csv"));
    assert_ne!(ok[0].content_hash, ok[1].content_hash);
    assert!(
        ok.iter().any(|r| r.error.as_deref().is_some_and(|e| e.contains("new content"))),
        "{ledger:?}"
    );
}

/// Data files of a table folder not in any `_`-prefixed folder.
fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && !name.starts_with('_') {
            out.extend(parquet_files(&path));
        } else if name.ends_with(".parquet") {
            out.push(path);
        }
    }
    out
}

/// A worker's uncommitted data files that vanish before the flush (a
/// `vacuum --full` with a forced short retention beside an ingestion, which
/// takes no lock) are never committed: the file is delivered again and
/// lands whole, and no commit names a missing file.
#[test]
fn data_files_that_vanish_before_the_flush_are_delivered_again_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = ingest_config(
        root,
        SCHEMA,
        "lake = \"lake\"\n[queue]\nsettle_ms = 0\npoll_ms = 20\nretry_delay_ms = 0\n[ingest]\nworkers = 1\nflush_interval_ms = 3000\nflush_rows = 1000000\n",
    );
    let landing = root.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    // A first file makes the table.
    write_csv(&landing.join("first.csv"), 0, 10);
    assert!(sluice(&config, &["run", "--once"]).status().unwrap().success());
    let table = root.join("lake/raw/trips");
    let committed = parquet_files(&table);
    write_csv(&landing.join("second.csv"), 100, 20);
    let mut child = sluice(&config, &["run", "--watch"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The worker writes the file's data files, uncommitted, then the flush
    // waits out its interval: remove them in between.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let fresh = loop {
        let fresh: Vec<PathBuf> =
            parquet_files(&table).into_iter().filter(|f| !committed.contains(f)).collect();
        if !fresh.is_empty() {
            break fresh;
        }
        assert!(std::time::Instant::now() < deadline, "the worker wrote nothing");
        std::thread::sleep(Duration::from_millis(20));
    };
    for f in &fresh {
        std::fs::remove_file(f).unwrap();
    }
    // The flush notices, delivers the file again; the next flush lands it.
    let lake = crate::Lake::at(root.join("lake"));
    let rows = || {
        let csv = lake.ok(&["sql", "--format", "csv", "SELECT count(*) FROM trips"]);
        csv.lines().nth(1).unwrap().parse::<u64>().unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while rows() < 30 {
        assert!(std::time::Instant::now() < deadline, "the file never landed");
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("vanished before the commit"), "{stderr}");
    assert_eq!(rows(), 30);
    // Every file a commit names is readable: a whole-table read succeeds.
    let all = lake.ok(&["sql", "--format", "csv", "SELECT sum(trip_id) FROM trips"]);
    let expected: u64 = (0..10).chain(100..120).sum();
    assert_eq!(all.lines().nth(1), Some(expected.to_string().as_str()), "{all}");
}

/// The data files a table commit lists for the delivered file `key`.
fn data_files_of(table: &Path, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(table.join("_delta_log")).unwrap().flatten() {
        if !entry.file_name().to_string_lossy().ends_with(".json") {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            let Some(files) = action.pointer("/commitInfo/sluice_ingest") else { continue };
            for file in files.as_array().unwrap() {
                if file["key"] == key {
                    let paths = file["paths"].as_array().unwrap();
                    out.extend(paths.iter().map(|p| p.as_str().unwrap().to_owned()));
                }
            }
        }
    }
    out
}

/// A data file of an ingested file is lost (a forced `vacuum --full`
/// beside an ingestion, a disk fault). `doctor --repair` removes all of
/// that file's rows — not only the lost ones — and forgets it, keeping
/// every other file's rows; the same file dropped again then lands whole,
/// instead of being skipped as a redelivery with its rows gone for good.
#[test]
fn a_repair_that_drops_an_ingested_file_s_rows_forgets_it_so_it_lands_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, landing) = three_files_landed(root);
    assert!(sluice(&config, &["run", "--once"]).status().unwrap().success());
    let table = root.join("lake/raw/trips");
    let of_b = data_files_of(&table, "trips/b.csv");
    assert!(of_b.len() > 1, "b.csv spans several zones: {of_b:?}");
    std::fs::remove_file(table.join(&of_b[0])).unwrap();

    let lake = crate::Lake::at(root.join("lake"));
    let query = |sql: &str| {
        let csv = lake.ok(&["sql", "--format", "csv", sql]);
        csv.lines().nth(1).unwrap().to_owned()
    };
    let report = lake.ok(&["doctor", "--repair"]);
    assert!(report.contains("trips/b.csv"), "{report}");
    assert!(!report.contains("trips/a.csv") && !report.contains("trips/c.csv"), "{report}");
    // Every row of b is gone (not only the lost zone's); a's and c's stay.
    let kept: u64 = (0..30).chain(200..230).sum();
    assert_eq!(query("SELECT count(*) FROM trips"), "60");
    assert_eq!(query("SELECT sum(trip_id) FROM trips"), kept.to_string());
    let doctor: serde_json::Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert_eq!(doctor["clean"], true, "{doctor}");

    // The same file dropped again lands whole, exactly once.
    std::fs::copy(root.join("landing/.sluice/done/trips/b.csv"), landing.join("b.csv")).unwrap();
    assert!(sluice(&config, &["run", "--once"]).status().unwrap().success());
    assert_eq!(query("SELECT count(*) FROM trips"), "90");
    assert_eq!(query("SELECT count(DISTINCT trip_id) FROM trips"), "90");
    // And once more: now it is a redelivery again.
    std::fs::copy(root.join("landing/.sluice/done/trips/b.csv"), landing.join("b.csv")).unwrap();
    assert!(sluice(&config, &["run", "--once"]).status().unwrap().success());
    assert_eq!(query("SELECT count(*) FROM trips"), "90");
    let status = sluice(&config, &["status", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["tables"]["trips"]["files"], 3, "{status}");
    assert_eq!(status["tables"]["trips"]["rows"], 90, "{status}");
    // The ledger tells the story: ingested, forgotten, ingested again.
    let ledger = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT status, count(*) AS n FROM ingest_ledger WHERE file_key = 'trips/b.csv' \
         GROUP BY status ORDER BY status",
    ]);
    assert_eq!(ledger.lines().skip(1).collect::<Vec<_>>(), ["forgotten,1", "ok,2"]);
}

/// The same, with the repair made beside a running `ingest run --watch`:
/// the watching process learns of the forget from the table's log (its
/// set of committed files and its ledger are kept between flushes), so
/// the file dropped again lands whole, once, and a third drop is a
/// redelivery.
#[test]
fn a_file_forgotten_beside_a_watching_ingester_lands_again_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (config, landing) = three_files_landed(root);
    let mut watcher = sluice(&config, &["run", "--watch"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lake = crate::Lake::at(root.join("lake"));
    let query = |sql: &str| {
        let out = lake.run(&["sql", "--format", "csv", sql]);
        let csv = String::from_utf8_lossy(&out.stdout).into_owned();
        csv.lines().nth(1).unwrap_or_default().to_owned()
    };
    let wait_for = |sql: &str, want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while query(sql) != want {
            assert!(std::time::Instant::now() < deadline, "`{sql}` never became {want}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for("SELECT count(*) FROM trips", "90");
    let table = root.join("lake/raw/trips");
    let of_b = data_files_of(&table, "trips/b.csv");
    std::fs::remove_file(table.join(&of_b[0])).unwrap();
    let report = lake.ok(&["doctor", "--repair"]);
    assert!(report.contains("trips/b.csv"), "{report}");
    assert_eq!(query("SELECT count(*) FROM trips"), "60");

    let done = root.join("landing/.sluice/done/trips/b.csv");
    std::fs::copy(&done, landing.join("b.csv")).unwrap();
    wait_for("SELECT count(*) FROM trips", "90");
    // A third drop is a redelivery: it is archived and adds nothing.
    std::fs::copy(&done, landing.join("b.csv")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while landing.join("b.csv").exists() {
        assert!(std::time::Instant::now() < deadline, "the third drop was never taken");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = watcher.kill();
    watcher.wait().unwrap();
    assert_eq!(query("SELECT count(*) FROM trips"), "90");
    assert_eq!(query("SELECT count(DISTINCT trip_id) FROM trips"), "90");
    let ledger = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT status, count(*) AS n FROM ingest_ledger WHERE file_key = 'trips/b.csv' \
         AND status IN ('ok', 'forgotten') GROUP BY status ORDER BY status",
    ]);
    assert_eq!(ledger.lines().skip(1).collect::<Vec<_>>(), ["forgotten,1", "ok,2"]);
    let doctor: serde_json::Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert_eq!(doctor["clean"], true, "{doctor}");
}

/// A config partitioned by zone, and a.csv, b.csv and c.csv (30 rows each,
/// b spanning several zones) in its landing folder; returns the config and
/// the landing folder.
fn three_files_landed(root: &Path) -> (PathBuf, PathBuf) {
    let schema = format!("{SCHEMA}partition_by: [zone]\n");
    let config = ingest_config(
        root,
        &schema,
        "lake = \"lake\"\n[queue]\nsettle_ms = 0\npoll_ms = 20\nretry_delay_ms = 0\n\
         [ingest]\nworkers = 1\nflush_interval_ms = 100\n",
    );
    let landing = root.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    for (name, first) in [("a.csv", 0), ("b.csv", 100), ("c.csv", 200)] {
        write_csv(&landing.join(name), first, 30);
    }
    (config, landing)
}

/// A lake that only ingests answers the lake-wide commands: `tables` lists
/// its raw, aggregate and curated tables and the ledger, `history` and
/// `changes` take an ingestion table by name, `doctor` checks it, and a
/// misspelt name suggests the nearest.
#[test]
fn an_ingest_only_lake_answers_tables_history_changes_and_doctor() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("d");
    ingest_demo(&demo);
    let lake = crate::Lake::at(demo.join("lake"));
    let tables: serde_json::Value = serde_json::from_str(&lake.ok(&["tables", "--json"])).unwrap();
    let names: Vec<&str> =
        tables.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["trips", "zone_days", "trips_daily", "ingest_ledger"], "{tables}");
    assert_eq!(tables[0]["rows"], 5000, "{tables}");
    let history = lake.ok(&["history", "--table", "trips"]);
    assert!(history.lines().count() >= 3, "{history}");
    let since = lake.ok(&["changes", "trips", "--since", "trips@0", "--format", "csv"]);
    assert_eq!(since.lines().count(), 5001, "every row is a change since version 0");
    let stderr = lake.fails(&["changes", "trips", "--since", "1"]);
    assert!(stderr.contains("--since trips@VERSION"), "{stderr}");
    let stderr = lake.fails(&["history", "--table", "trip"]);
    assert!(stderr.contains("(did you mean `trips` or `trips_daily`?)"), "{stderr}");
    assert!(lake.doctor(&[])["clean"] == true);
    let shown = lake.ok(&["sql", "SHOW TABLES"]);
    for name in ["trips", "zone_days", "trips_daily", "ingest_ledger"] {
        assert!(shown.contains(&format!("| {name} ")), "{name}: {shown}");
    }
}

/// `sluice ingest demo DIR`, which must succeed.
fn ingest_demo(dir: &Path) -> std::process::Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["ingest", "demo"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// `--lake` and `SLUICE_LAKE` are never silently ignored by `ingest`: the
/// config's own lake is accepted, another one refused with both named.
#[test]
fn ingest_commands_refuse_a_lake_other_than_their_config_s() {
    let dir = tempfile::tempdir().unwrap();
    ingest_demo(dir.path());
    let config = dir.path().join("lakehouse.toml");
    let with = |lake: &Path, via_env: bool| {
        let mut c = sluice(&config, &["status", "--json"]);
        if via_env {
            c.env("SLUICE_LAKE", lake);
        } else {
            c.env_remove("SLUICE_LAKE").arg("--lake").arg(lake);
        }
        c.output().unwrap()
    };
    let own = with(&dir.path().join("lake"), false);
    assert!(own.status.success(), "{}", String::from_utf8_lossy(&own.stderr));
    let own_env = with(&dir.path().join("lake/"), true);
    assert!(own_env.status.success(), "{}", String::from_utf8_lossy(&own_env.stderr));
    for via_env in [false, true] {
        let other = with(&dir.path().join("elsewhere"), via_env);
        let stderr = String::from_utf8_lossy(&other.stderr);
        assert_eq!(other.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("elsewhere, but") && stderr.contains("names the lake"), "{stderr}");
        assert_eq!(stderr.matches("names the lake").count(), 1, "said once: {stderr}");
        assert!(!dir.path().join("elsewhere").exists(), "the refused lake was created");
    }
}

/// `[hooks] on_dead_letter` is told once per dead-lettered file, with its
/// table, file, attempts and reason; the good files land as ever.
#[test]
fn a_dead_lettered_file_is_told_to_its_hook() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let told = root.join("told.jsonl");
    let config = ingest_config(
        root,
        SCHEMA,
        &format!(
            "lake = \"lake\"\n[queue]\nsettle_ms = 0\nretry_delay_ms = 0\nmax_attempts = 1\n\
             [hooks]\non_dead_letter = [\"sh\", \"-c\", \"cat >> {}; echo >> {}\"]\n",
            told.display(),
            told.display()
        ),
    );
    let landing = root.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    write_csv(&landing.join("good.csv"), 0, 10);
    std::fs::write(landing.join("bad.csv"), "trip_id,pickup_at,zone,fare\ntwelve,x,y,z\n").unwrap();
    let out = sluice(&config, &["run", "--once"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&told)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "dead_letter");
    assert_eq!(lines[0]["table"], "trips");
    assert!(lines[0]["file"].as_str().unwrap().contains("bad.csv"), "{lines:?}");
    assert!(lines[0]["reason"].as_str().unwrap().contains("twelve"), "{lines:?}");
}
