//! `sluice ingest` into a lake in an object store (moto's S3 and Azurite):
//! files land in a local folder, their rows go to raw → aggregate → curated
//! tables in the store. The kill loop of `ingest.rs`, on a store: the
//! ingester SIGKILLed at many moments while files keep arriving, restarted
//! each time; at the end every row is in the lake once, every file in the
//! ledger once, and the curated totals are the source's.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::crash::{fraction, kill_command_after};
use crate::ingest::{DAILY, SCHEMA, TRANSFORMS, expected_daily, write_csv};
use crate::stores::{StoreLake, azurite_lake, moto_lake};

/// `sluice --lake <store> ingest <args> --config lakehouse.toml`.
fn ingest(lake: &StoreLake, args: &[&str]) -> Command {
    let mut command = lake.command(&["ingest"]);
    command.args(args).arg("--config").arg(lake.cwd.path().join("lakehouse.toml"));
    command
}

fn count(lake: &StoreLake, sql: &str) -> i64 {
    let csv = lake.ok(&["sql", "--format", "csv", sql]);
    csv.lines().nth(1).unwrap().parse().unwrap()
}

fn kill_loop(make: fn() -> Option<StoreLake>) {
    let Some(lake) = make() else { return };
    let root = lake.cwd.path();
    let kills = crate::depth("SLUICE_STORE_INGEST_KILLS", 12, 3);
    let (files, rows_per_file) = (40u64, 2_000u64);
    std::fs::create_dir_all(root.join("schemas")).unwrap();
    std::fs::write(root.join("schemas/trips.yaml"), SCHEMA).unwrap();
    std::fs::write(
        root.join("lakehouse.toml"),
        format!(
            "lake = \"{}\"\n[queue]\nsettle_ms = 0\npoll_ms = 50\nretry_delay_ms = 0\n\
             visibility_timeout_secs = 30\n[ingest]\nworkers = 2\nflush_interval_ms = 200\n\
             flush_rows = 20000\n{TRANSFORMS}",
            lake.url
        ),
    )
    .unwrap();
    let (outbox, landing) = (root.join("outbox"), root.join("landing/trips"));
    std::fs::create_dir_all(&outbox).unwrap();
    std::fs::create_dir_all(&landing).unwrap();
    for f in 0..files {
        write_csv(&outbox.join(format!("trips-{f:04}.csv")), f * rows_per_file, rows_per_file);
    }
    let arrivals = std::thread::spawn(move || {
        for f in 0..files {
            let name = format!("trips-{f:04}.csv");
            std::fs::rename(outbox.join(&name), landing.join(&name)).unwrap();
            std::thread::sleep(Duration::from_millis(if f % 10 == 0 { 400 } else { 80 }));
        }
    });
    let mut killed = 0;
    for k in 0..kills {
        let delay = Duration::from_millis(400 + (fraction(k + 7000) * 2000.0) as u64);
        killed += u64::from(kill_command_after(ingest(&lake, &["run", "--watch"]), delay));
    }
    arrivals.join().unwrap();
    assert_eq!(killed, kills, "every run was killed while it ran");
    let out = ingest(&lake, &["run", "--once", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let rows = (files * rows_per_file) as i64;
    assert_eq!(count(&lake, "SELECT count(*) FROM trips"), rows, "every source row landed");
    assert_eq!(count(&lake, "SELECT count(DISTINCT trip_id) FROM trips"), rows, "no row twice");
    let ok = "SELECT count(*) FROM ingest_ledger WHERE status = 'ok'";
    assert_eq!(count(&lake, ok), files as i64, "each file listed once");
    assert_eq!(count(&lake, "SELECT count(*) FROM ingest_ledger WHERE status <> 'ok'"), 0);
    let curated = lake.ok(&["sql", "--format", "csv", DAILY]);
    let curated: Vec<String> = curated.lines().skip(1).map(str::to_owned).collect();
    assert_eq!(curated, expected_daily(rows as u64), "curated totals equal the source rows'");

    // The other ingest commands on the same lake.
    let status = ingest(&lake, &["status", "--json"]).output().unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["queue"]["waiting"], 0, "{status}");
    assert_eq!(status["tables"]["trips"]["rows"], rows, "{status}");
    assert_eq!(
        status["transforms"]["daily"]["applied"], status["transforms"]["daily"]["upstream_version"],
        "{status}"
    );
    let transform = ingest(&lake, &["transform", "--json"]).output().unwrap();
    assert!(transform.status.success(), "{}", String::from_utf8_lossy(&transform.stderr));
    let dedup = ingest(&lake, &["dedup", "trips", "--dry-run", "--json"]).output().unwrap();
    assert!(dedup.status.success(), "{}", String::from_utf8_lossy(&dedup.stderr));
    let dedup: Value = serde_json::from_slice(&dedup.stdout).unwrap();
    assert_eq!(
        (dedup["rows_before"].as_i64(), dedup["duplicates"].as_i64()),
        (Some(rows), Some(0))
    );
    // Nothing of it landed on the local disk but the landing folder.
    for local in ["raw", "aggregate", "curated", "ingest", "_staging"] {
        assert!(!root.join(local).exists(), "{local}/ was made locally");
    }
}

#[test]
fn on_s3_ingestion_killed_at_random_moments_lands_every_row_exactly_once() {
    kill_loop(moto_lake);
}

#[test]
fn on_azure_ingestion_killed_at_random_moments_lands_every_row_exactly_once() {
    kill_loop(azurite_lake);
}
