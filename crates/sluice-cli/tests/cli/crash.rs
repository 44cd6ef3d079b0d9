//! Crash recovery with real processes: `sluice commit` is killed with SIGKILL
//! at many moments; after each kill `sluice recover` must produce exactly the
//! lake an uninterrupted commit produces.

use std::path::Path;
use std::time::Instant;

use sluice::query::OutputFormat;
use sluice::query::format::render;

use crate::Lake;

/// Tables the commit writes, with the order that makes a dump canonical.
const TABLES: [(&str, &str); 5] = [
    ("metrics", "artifact_id"),
    ("index", "artifact_id"),
    ("artifact_edges", "execution_run_id, source_artifact_id, target_artifact_id"),
    ("execution_edges", "execution_run_id, direction, role, artifact_id"),
    ("executions", "execution_run_id"),
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every row of every committed table, sorted, as CSV; and the duplicate-key count.
fn dump(root: &Path) -> (Vec<String>, u64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let lake = sluice::Lake::open(root).await.unwrap();
        let mut out = Vec::new();
        let mut duplicates = 0;
        for (table, key) in TABLES {
            let rows =
                lake.sql(format!("SELECT * FROM {table} ORDER BY {key}")).execute().await.unwrap();
            out.push(render(&rows.batches, OutputFormat::Csv).unwrap());
            let dup = lake
                .sql(format!("SELECT count(*) - count(DISTINCT ({key})) AS d FROM {table}"))
                .execute()
                .await
                .unwrap();
            let text = render(&dup.batches, OutputFormat::Csv).unwrap();
            duplicates += text.lines().nth(1).unwrap().parse::<u64>().unwrap();
        }
        (out, duplicates)
    })
}

/// A pseudo-random fraction in [0, 1) from a trial number.
fn fraction(trial: u64) -> f64 {
    let h = blake3::hash(&trial.to_le_bytes());
    let mut x = [0u8; 8];
    x.copy_from_slice(&h.as_bytes()[..8]);
    (u64::from_le_bytes(x) >> 11) as f64 / (1u64 << 53) as f64
}

fn trials() -> u64 {
    std::env::var("SLUICE_CRASH_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(50)
}

#[test]
fn commit_killed_at_random_moments_recovers_exactly() {
    // One staging template: a few thousand executions, with duplicates and failures.
    let template = Lake::new();
    template.ok(&[
        "bench",
        "stage",
        "--executions",
        "2000",
        "--workers",
        "2",
        "--duplicate-fraction",
        "0.2",
        "--fail-fraction",
        "0.05",
        "--seed",
        "42",
    ]);
    let staging = template.root.join("_staging");

    // The reference: an uninterrupted commit.
    let reference = Lake::new();
    reference.ok(&["init"]);
    copy_dir(&staging, &reference.root.join("_staging"));
    let started = Instant::now();
    reference.ok(&["commit", "--chunk", "200"]);
    let full = started.elapsed();
    let (expected, duplicates) = dump(&reference.root);
    assert_eq!(duplicates, 0);
    assert!(expected[4].lines().count() > 2000, "every execution committed");

    let n = trials();
    let mut killed_mid_commit = 0;
    // Two trials at a time: each commit is mostly one core.
    let results: Vec<(u64, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u64)
            .map(|lane| {
                let staging = &staging;
                let expected = &expected;
                scope.spawn(move || {
                    let mut outcomes = Vec::new();
                    for trial in (lane..n).step_by(2) {
                        let lake = Lake::new();
                        lake.ok(&["init"]);
                        copy_dir(staging, &lake.root.join("_staging"));
                        // Kill somewhere in the commit (a little past its usual length too).
                        let delay = full.mul_f64(fraction(trial) * 1.1);
                        let mut child = lake.command(&["commit", "--chunk", "200"]).spawn().unwrap();
                        std::thread::sleep(delay);
                        let finished = child.try_wait().unwrap().is_some();
                        if !finished {
                            child.kill().unwrap(); // SIGKILL
                        }
                        child.wait().unwrap();
                        lake.ok(&["recover"]);
                        let (got, dups) = dump(&lake.root);
                        assert_eq!(dups, 0, "trial {trial}: duplicate keys after recovery (delay {delay:?})");
                        for (i, (table, _)) in TABLES.iter().enumerate() {
                            assert!(
                                got[i] == expected[i],
                                "trial {trial}: table `{table}` differs from the uninterrupted commit (delay {delay:?})"
                            );
                        }
                        let left = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap();
                        assert!(left.sealed.is_empty(), "trial {trial}: staging left behind");
                        // Recovering again changes nothing.
                        let again = lake.ok(&["recover", "--json"]);
                        let again: serde_json::Value = serde_json::from_str(&again).unwrap();
                        assert_eq!(again["runs_committed"], 0, "trial {trial}");
                        outcomes.push((trial, !finished));
                    }
                    outcomes
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    killed_mid_commit += results.iter().filter(|(_, killed)| *killed).count();
    assert_eq!(results.len() as u64, n);
    assert!(
        killed_mid_commit as u64 >= n * 3 / 4,
        "most trials killed a running commit: {killed_mid_commit}/{n}"
    );
}

#[test]
fn a_failed_table_commit_keeps_staging_and_recover_finishes_the_sequence() {
    let lake = Lake::new();
    lake.ok(&["bench", "stage", "--executions", "60", "--workers", "1", "--seed", "3"]);
    let reference = Lake::new();
    reference.ok(&["init"]);
    copy_dir(&lake.root.join("_staging"), &reference.root.join("_staging"));
    reference.ok(&["commit"]);

    // The index commit fails: content tables are committed, nothing after.
    let out = lake.command(&["commit"]).env("SLUICE_FAILPOINT", "commit:index").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("table `index`"), "the error names the table: {err}");
    let left = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap();
    assert_eq!(left.sealed.len(), 60, "staging stays when a table commit fails");
    let metrics =
        lake.ok(&["sql", "--format", "csv", "--as-of", "1", "SELECT count(*) AS n FROM metrics"]);
    assert_eq!(metrics, "n\n180\n", "the content table was committed before the failure");
    // Readers see the last completed state (nothing) while the sequence is open.
    assert_eq!(lake.ok(&["sql", "--format", "csv", "SELECT count(*) AS n FROM metrics"]), "n\n0\n");

    let report: serde_json::Value = serde_json::from_str(&lake.ok(&["recover", "--json"])).unwrap();
    assert_eq!(report["recovered_sequences"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["rows_added"]["metrics"], 0, "content is not committed twice: {report}");
    let (got, dups) = dump(&lake.root);
    assert_eq!(dups, 0);
    assert_eq!(got, dump(&reference.root).0);
    assert!(sluice::staging::scan(&lake.root.join("_staging"), None).unwrap().sealed.is_empty());
}

#[test]
fn doctor_reports_what_is_pending_and_what_was_quarantined() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    assert!(lake.ok(&["doctor"]).starts_with("clean"));
    lake.ok(&[
        "bench",
        "stage",
        "--executions",
        "20",
        "--workers",
        "1",
        "--crash-fraction",
        "0.3",
        "--seed",
        "8",
    ]);
    let d: serde_json::Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    let unsealed = d["unsealed"].as_array().unwrap().len();
    assert!(unsealed > 0 && d["sealed_waiting"].as_u64().unwrap() as usize == 20 - unsealed, "{d}");
    // Break one sealed run, then commit: it is quarantined, doctor says why.
    let sealed = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap().sealed;
    std::fs::write(sealed[0].path.join("index.parquet"), b"not parquet").unwrap();
    let out =
        lake.command(&["commit"]).env("SLUICE_FAILPOINT", "commit:executions").output().unwrap();
    assert!(!out.status.success());
    let d: serde_json::Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert_eq!(d["quarantined"].as_array().unwrap().len(), 1, "{d}");
    assert!(
        d["quarantined"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("index.parquet: unreadable Parquet"),
        "{d}"
    );
    assert_eq!(d["unfinished_sequences"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["pending_manifests"].as_array().unwrap().len(), 1, "{d}");
    lake.ok(&["recover"]);
    let d: serde_json::Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert!(
        d["unfinished_sequences"].as_array().unwrap().is_empty() && d["sealed_waiting"] == 0,
        "{d}"
    );
}
