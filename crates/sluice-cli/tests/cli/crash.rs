//! Crash recovery with real processes: `sluice commit` — and `sluice
//! recover` itself — are killed with SIGKILL at many moments; after each
//! kill a `sluice recover` that runs to the end must produce exactly the lake
//! an uninterrupted commit produces, and a journal that accounts for every
//! sequence.

use std::path::Path;
use std::time::Instant;

use sluice::query::OutputFormat;
use sluice::query::format::render;

use crate::Lake;

/// Tables the commit writes, with the order that makes a dump canonical.
pub(crate) const TABLES: [(&str, &str); 9] = [
    ("metrics", "artifact_id"),
    ("configs", "artifact_id"),
    ("data", "artifact_id"),
    ("file_refs", "artifact_id"),
    ("samples", "artifact_id"),
    ("index", "artifact_id"),
    ("artifact_edges", "execution_run_id, source_artifact_id, target_artifact_id"),
    ("execution_edges", "execution_run_id, direction, role, artifact_id"),
    ("executions", "execution_run_id"),
];

/// A declared custom type, so the commit writes a custom table too.
const SLUICE_TOML: &str = r#"
[[artifact_type]]
key = "sample"
table = "artifacts/samples"
columns = [
  { name = "label", type = "string" },
  { name = "value", type = "float64" },
]
"#;

pub(crate) fn new_lake() -> Lake {
    let lake = Lake::new();
    std::fs::create_dir_all(&lake.root).unwrap();
    std::fs::write(lake.root.join("sluice.toml"), SLUICE_TOML).unwrap();
    lake.ok(&["init"]);
    lake
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
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
pub(crate) fn dump(root: &Path) -> (Vec<String>, u64) {
    dump_at(root, None)
}

/// [`dump`] of the lake as of a point.
pub(crate) fn dump_at(root: &Path, as_of: Option<sluice::query::AsOf>) -> (Vec<String>, u64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let lake = sluice::Lake::open(root).await.unwrap();
        let mut out = Vec::new();
        let mut duplicates = 0;
        for (table, key) in TABLES {
            let rows = lake
                .sql(format!("SELECT * FROM {table} ORDER BY {key}"))
                .with_as_of(as_of.clone())
                .execute()
                .await
                .unwrap();
            out.push(render(&rows.batches, OutputFormat::Csv).unwrap());
            let dup = lake
                .sql(format!("SELECT count(*) - count(DISTINCT ({key})) AS d FROM {table}"))
                .with_as_of(as_of.clone())
                .execute()
                .await
                .unwrap();
            let text = render(&dup.batches, OutputFormat::Csv).unwrap();
            duplicates += text.lines().nth(1).unwrap().parse::<u64>().unwrap();
        }
        (out, duplicates)
    })
}

/// `sluice bench stage --mixed`: `executions` runs of 5 artifacts of every
/// kind (20% duplicates), referenced files under `files`, each in its own
/// staging directory or in batches of `batch`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_mixed(
    lake: &Lake,
    files: &Path,
    executions: u64,
    workers: u64,
    fail_fraction: f64,
    seed: u64,
    step: i32,
    batch: u64,
) {
    lake.ok(&[
        "bench",
        "stage",
        "--batch",
        &batch.to_string(),
        "--executions",
        &executions.to_string(),
        "--workers",
        &workers.to_string(),
        "--duplicate-fraction",
        "0.2",
        "--fail-fraction",
        &fail_fraction.to_string(),
        "--seed",
        &seed.to_string(),
        "--step",
        &step.to_string(),
        "--artifacts-per-execution",
        "5",
        "--mixed",
        files.to_str().unwrap(),
    ]);
}

/// The journal after recovery: no sequence left open, each sequence
/// completed at most once, numbers never reused by two attempts, and the
/// tables' highest sequence known to the journal.
pub(crate) fn check_journal(root: &Path, trial: u64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let lake = sluice::Lake::open(root).await.unwrap();
        let journal = sluice::lake::journal::read(&root.into(), None).await.unwrap();
        assert!(
            journal.unfinished().is_empty(),
            "trial {trial}: open sequences {:?}",
            journal.unfinished()
        );
        let mut tokens_per_seq = std::collections::BTreeMap::new();
        let mut completed = std::collections::BTreeMap::new();
        for e in journal.entries() {
            tokens_per_seq
                .entry(e.seq)
                .or_insert_with(std::collections::BTreeSet::new)
                .insert(e.token.clone());
            if e.phase() == sluice::lake::journal::Phase::Completed {
                *completed.entry(e.seq).or_insert(0) += 1;
            }
        }
        assert!(
            tokens_per_seq.values().all(|t| t.len() == 1),
            "trial {trial}: a number claimed twice"
        );
        assert!(completed.values().all(|n| *n == 1), "trial {trial}: {completed:?}");
        let tables = sluice::lake::journal::highest_table_seq(&root.into(), &lake.table_specs())
            .await
            .unwrap();
        assert!(tables.is_none_or(|(seq, _)| seq <= journal.max_seq()), "trial {trial}");
        let d = sluice::commit::doctor::diagnose(&lake).await.unwrap();
        assert!(
            d.journal_behind.is_none() && d.pending_manifests.is_empty(),
            "trial {trial}: {d:?}"
        );
    })
}

/// A pseudo-random fraction in [0, 1) from a trial number.
pub(crate) fn fraction(trial: u64) -> f64 {
    let h = blake3::hash(&trial.to_le_bytes());
    let mut x = [0u8; 8];
    x.copy_from_slice(&h.as_bytes()[..8]);
    (u64::from_le_bytes(x) >> 11) as f64 / (1u64 << 53) as f64
}

fn trials() -> u64 {
    crate::depth("SLUICE_CRASH_TRIALS", 50, 4)
}

/// Kill `args` after `delay` unless it finished; returns whether it was killed.
pub(crate) fn kill_after(lake: &Lake, args: &[&str], delay: std::time::Duration) -> bool {
    kill_command_after(lake.command(args), delay)
}

/// Run `command`, SIGKILL it after `delay` unless it finished; returns
/// whether it was killed.
pub(crate) fn kill_command_after(
    mut command: std::process::Command,
    delay: std::time::Duration,
) -> bool {
    kill_child_after(spawn_quiet(&mut command), delay)
}

/// Start `command` with its output discarded.
pub(crate) fn spawn_quiet(command: &mut std::process::Command) -> std::process::Child {
    command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap()
}

/// SIGKILL a running child `delay` from now unless it finished first;
/// returns whether it was killed.
pub(crate) fn kill_child_after(mut child: std::process::Child, delay: std::time::Duration) -> bool {
    std::thread::sleep(delay);
    let finished = child.try_wait().unwrap().is_some();
    if !finished {
        child.kill().unwrap(); // SIGKILL
    }
    child.wait().unwrap();
    !finished
}

#[test]
fn commit_killed_at_random_moments_recovers_exactly() {
    // One staging template: several steps, every kind of artifact (metric,
    // config, data, file_ref, a declared type), duplicates and failures;
    // step 3 staged in batches of 25 executions per directory.
    let template = new_lake();
    let files = template.root.join("referenced-files");
    for (step, seed, n, batch) in [(1, 42, 700, 1), (2, 43, 700, 1), (3, 44, 600, 25)] {
        stage_mixed(&template, &files, n, 2, 0.05, seed, step, batch);
    }
    let staging = template.root.join("_staging");

    // The reference: an uninterrupted commit.
    let reference = new_lake();
    copy_dir(&staging, &reference.root.join("_staging"));
    let started = Instant::now();
    reference.ok(&["commit", "--chunk", "200"]);
    let full = started.elapsed();
    let (expected, duplicates) = dump(&reference.root);
    assert_eq!(duplicates, 0);
    assert!(expected[8].lines().count() > 2000, "every execution committed");
    for (i, (table, _)) in TABLES.iter().enumerate().take(5) {
        assert!(expected[i].lines().count() > 10, "{table} holds rows");
    }

    let n = trials();
    // Two trials at a time: each commit is mostly one core.
    let results: Vec<(u64, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u64)
            .map(|lane| {
                let staging = &staging;
                let expected = &expected;
                scope.spawn(move || {
                    let mut outcomes = Vec::new();
                    for trial in (lane..n).step_by(2) {
                        let lake = new_lake();
                        copy_dir(staging, &lake.root.join("_staging"));
                        // Kill the commit somewhere (a little past its usual length too);
                        // every third trial also kills the first recover.
                        let delay = full.mul_f64(fraction(trial) * 1.1);
                        let killed = kill_after(&lake, &["commit", "--chunk", "200"], delay);
                        if trial % 3 == 0 {
                            kill_after(&lake, &["recover"], full.mul_f64(fraction(trial + 1000) * 0.5));
                        }
                        lake.ok(&["recover"]);
                        let (got, dups) = dump(&lake.root);
                        assert_eq!(dups, 0, "trial {trial}: duplicate keys after recovery (delay {delay:?})");
                        for (i, (table, _)) in TABLES.iter().enumerate() {
                            assert!(
                                got[i] == expected[i],
                                "trial {trial}: table `{table}` differs from the uninterrupted commit (delay {delay:?})"
                            );
                        }
                        check_journal(&lake.root, trial);
                        let left = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap();
                        assert!(left.sealed.is_empty(), "trial {trial}: staging left behind");
                        // Recovering again changes nothing.
                        let again = lake.ok(&["recover", "--json"]);
                        let again: serde_json::Value = serde_json::from_str(&again).unwrap();
                        assert_eq!(again["runs_committed"], 0, "trial {trial}");
                        outcomes.push((trial, killed));
                    }
                    outcomes
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let killed_mid_commit = results.iter().filter(|(_, killed)| *killed).count();
    assert_eq!(results.len() as u64, n);
    assert!(
        killed_mid_commit as u64 >= n * 3 / 4,
        "most trials killed a running commit: {killed_mid_commit}/{n}"
    );
}

#[test]
fn a_failed_table_commit_keeps_staging_and_recover_finishes_the_sequence() {
    let lake = new_lake();
    lake.ok(&["bench", "stage", "--executions", "60", "--workers", "1", "--seed", "3"]);
    let reference = new_lake();
    copy_dir(&lake.root.join("_staging"), &reference.root.join("_staging"));
    reference.ok(&["commit"]);

    // The index commit fails: content tables are committed, nothing after.
    let out = lake.command(&["commit"]).env("SLUICE_FAILPOINT", "commit:index").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("table `index`"), "the error names the table: {err}");
    let left = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap();
    assert_eq!(left.sealed.len(), 60, "staging stays when a table commit fails");
    let metrics = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "--as-of",
        "metrics@1",
        "SELECT count(*) AS n FROM metrics",
    ]);
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
    let d: serde_json::Value = lake.doctor(&[]);
    let unsealed = d["unsealed"].as_array().unwrap().len();
    assert!(unsealed > 0 && d["sealed_waiting"].as_u64().unwrap() as usize == 20 - unsealed, "{d}");
    // Break one sealed run, then commit: it is quarantined, doctor says why.
    let sealed = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap().sealed;
    std::fs::write(sealed[0].object_path(), b"not a unit").unwrap();
    let out =
        lake.command(&["commit"]).env("SLUICE_FAILPOINT", "commit:executions").output().unwrap();
    assert!(!out.status.success());
    let d: serde_json::Value = lake.doctor(&[]);
    assert_eq!(d["quarantined"].as_array().unwrap().len(), 1, "{d}");
    assert!(
        d["quarantined"][0]["reason"].as_str().unwrap().contains("not a staged unit object"),
        "{d}"
    );
    assert_eq!(d["unfinished_sequences"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["pending_manifests"].as_array().unwrap().len(), 1, "{d}");
    lake.ok(&["recover"]);
    let d: serde_json::Value = lake.doctor(&[]);
    assert!(
        d["unfinished_sequences"].as_array().unwrap().is_empty() && d["sealed_waiting"] == 0,
        "{d}"
    );
}
