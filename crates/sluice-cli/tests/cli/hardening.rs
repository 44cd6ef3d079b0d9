//! Exactly-once under faults, with real processes: committers that do not
//! share a lock, readers racing commits, a busy SLURM controller, held
//! locks, dead orchestrators.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Lake, json_lines, types_at, wait_all_succeed};

fn count(lake: &Lake, sql: &str) -> i64 {
    let rows = json_lines(&lake.ok(&["sql", "--format", "ndjson", sql]));
    rows[0].as_object().unwrap().values().next().unwrap().as_i64().unwrap()
}

/// Stage synthetic executions as workers would (in this process: the
/// committers are the processes under test).
fn stage(lake: &Lake, executions: u64, seed: u64) {
    use sluice::staging::synthetic::{self, SyntheticSpec};
    let registry = types_at(&lake.root);
    let writer = sluice::staging::StagingWriter::new(
        sluice::staging::default_root(&lake.root),
        registry.clone(),
        sluice::staging::SyncPolicy::Never,
    );
    let spec = SyntheticSpec { seed, duplicate_fraction: 0.3, ..SyntheticSpec::default() };
    synthetic::stage_range(&writer, &spec, &registry, 0..executions).unwrap();
}

/// Duplicate natural keys over every table a commit writes.
fn duplicate_keys(lake: &Lake) -> BTreeMap<&'static str, i64> {
    [
        ("metrics", "artifact_id"),
        ("index", "artifact_id"),
        ("executions", "execution_run_id"),
        ("execution_edges", "concat(execution_run_id, direction, role, artifact_id)"),
        (
            "artifact_edges",
            "concat(execution_run_id, source_artifact_id, target_artifact_id, source_role, target_role)",
        ),
        ("commits", "concat(commit_seq, phase, token)"),
    ]
    .into_iter()
    .map(|(t, k)| (t, count(lake, &format!("SELECT count(*) - count(DISTINCT {k}) FROM {t}"))))
    .collect()
}

/// `sluice commit` with the writer lock disabled (the test-only switch).
fn unlocked_commit(lake: &Lake, chunk: &str) -> Child {
    lake.command(&["commit", "--chunk", chunk])
        .env("SLUICE_UNSAFE_NO_LOCK", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for processes of one round; each must succeed.
#[test]
fn two_committers_without_a_lock_lose_and_duplicate_nothing() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let rounds: u64 = crate::depth("SLUICE_RACE_ROUNDS", 100, 10);
    let mut staged = 0;
    for round in 0..rounds {
        // Overlapping (same staging seen by both) and disjoint (staged
        // between their scans) work, committed by two processes at once
        // with the lock disabled.
        let n = 3 + round % 5;
        stage(&lake, n, 1000 + round);
        staged += n;
        let a = unlocked_commit(&lake, "2");
        if round % 2 == 0 {
            stage(&lake, 2, 5000 + round);
            staged += 2;
        }
        let b = unlocked_commit(&lake, "3");
        wait_all_succeed([a, b], round);
    }
    lake.ok(&["commit"]);
    let runs = count(&lake, "SELECT count(*) FROM executions");
    assert_eq!(runs, staged as i64, "no staged run lost");
    for (table, dups) in duplicate_keys(&lake) {
        assert_eq!(dups, 0, "duplicate keys in {table}");
    }
    // Every index row has its content; no edge or execution lacks its run.
    assert_eq!(
        count(
            &lake,
            "SELECT count(*) FROM index i LEFT JOIN metrics m ON i.artifact_id = m.artifact_id WHERE m.artifact_id IS NULL"
        ),
        0
    );
    let left = sluice::staging::scan(&lake.root.join("_staging"), None).unwrap();
    assert!(left.sealed.is_empty(), "{left:?}");
    let doctor = lake.doctor(&[]);
    assert!(doctor["quarantined"].as_array().unwrap().is_empty(), "{doctor:#}");
}

/// Checks a reader runs against one point of the lake: no index row without
/// its content, no edge or index row of a run whose execution is not
/// visible (the last table a sequence commits), no half sequence.
const CONSISTENCY: &str = "SELECT \
    (SELECT count(*) FROM index i LEFT JOIN metrics m ON i.artifact_id = m.artifact_id WHERE m.artifact_id IS NULL) AS index_without_content, \
    (SELECT count(*) FROM execution_edges e LEFT JOIN executions x ON e.execution_run_id = x.execution_run_id WHERE x.execution_run_id IS NULL) AS edges_without_execution, \
    (SELECT count(*) FROM index) AS indexed, \
    (SELECT count(*) FROM executions) AS executions";

#[test]
fn a_reader_beside_a_commit_loop_never_sees_half_a_sequence() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    stage(&lake, 60, 1);
    let committer = std::thread::spawn({
        let root = lake.root.clone();
        move || {
            let lake = Lake::at(root);
            for seed in 2..2 + crate::depth("SLUICE_READER_COMMITS", 12, 5) {
                lake.ok(&["commit", "--chunk", "7"]);
                stage(&lake, 25, seed);
            }
            lake.ok(&["commit", "--chunk", "7"]);
        }
    });
    let mut reads = 0;
    let mut seen_executions = Vec::new();
    while !committer.is_finished() {
        let row = &json_lines(&lake.ok(&["sql", "--format", "ndjson", CONSISTENCY]))[0];
        assert_eq!(row["index_without_content"], 0, "{row}");
        assert_eq!(row["edges_without_execution"], 0, "{row}");
        seen_executions.push(row["executions"].as_i64().unwrap());
        reads += 1;
    }
    committer.join().unwrap();
    assert!(reads >= 5, "the reader ran beside the commits ({reads} reads)");
    assert!(seen_executions.windows(2).all(|w| w[0] <= w[1]), "{seen_executions:?}");
    // Every executions count a reader saw is a whole number of sequences:
    // the state after some lake version.
    let history = json_lines(&lake.ok(&[
        "sql",
        "--format",
        "json",
        "SELECT commit_seq FROM commits WHERE phase = 'completed' ORDER BY commit_seq",
    ]));
    let mut totals = vec![0i64];
    for h in &history {
        let seq = h["commit_seq"].as_i64().unwrap().to_string();
        let at = json_lines(&lake.ok(&[
            "sql",
            "--format",
            "json",
            "--as-of",
            &seq,
            "SELECT count(*) AS n FROM executions",
        ]));
        totals.push(at[0]["n"].as_i64().unwrap());
    }
    for seen in &seen_executions {
        assert!(
            totals.contains(seen),
            "{seen} executions is not the state after any sequence: {totals:?}"
        );
    }
}

#[test]
fn a_held_lock_is_reported_and_wait_gives_up_naming_the_holder() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    stage(&lake, 5, 1);
    // Hold the lock as another committer would.
    let lock_path = lake.root.join("_staging/.commit.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap();
    file.lock().unwrap();
    std::fs::write(&lock_path, "otherhost 4242 2026-11-30T08:00:00Z\n").unwrap();
    let started = Instant::now();
    let err = lake.fails(&["commit", "--wait", "1"]);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(err.contains("waiting for the lake's writer lock"), "{err}");
    assert!(err.contains("pid 4242 on otherhost since 2026-11-30T08:00:00Z"), "{err}");
    assert!(err.contains("gave up waiting"), "{err}");
    // Without --wait it keeps waiting (and says so) until the lock is free.
    let mut waiting =
        lake.command(&["commit"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(waiting.try_wait().unwrap().is_none(), "it waits");
    file.unlock().unwrap();
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("held by pid 4242"));
    assert_eq!(count(&lake, "SELECT count(*) FROM executions"), 5);
}

fn pipeline_file(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A pipeline whose second step keeps workers busy for a while.
fn slow_pipeline(units: u32, seconds: f64) -> String {
    format!(
        r#"name = "slow"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = {units}, rows = 5 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'sleep {seconds}; for f in inputs/t/*; do cp "$f" outputs/t/; done']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = {{ t = "work.t" }}
"#
    )
}

fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Processes whose command line mentions this lake (workers, tools).
fn processes_of(lake: &Lake) -> Vec<String> {
    let root = lake.root.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&root))
        .collect()
}

#[test]
fn a_killed_orchestrator_takes_its_workers_and_is_recorded_abandoned() {
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let file = pipeline_file(dir.path(), "p.toml", &slow_pipeline(8, 1.5));
    let mut run = lake
        .command(&["run", file.to_str().unwrap(), "--workers", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it while `work` runs (its staging appears).
    let started = Instant::now();
    while !lake.root.join("_staging").read_dir().is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("2_")))
    }) {
        assert!(started.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
    }
    kill9(&mut run);
    // Its workers notice and exit; nothing keeps staging for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_of(&lake).is_empty() {
        assert!(Instant::now() < deadline, "orphaned workers: {:?}", processes_of(&lake));
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = lake.ok(&["status", "--json"]);
    let status: Value = serde_json::from_str(&status).unwrap();
    let work = status["steps"].as_array().unwrap().iter().find(|s| s["name"] == "work").unwrap();
    assert_eq!(work["status"], "abandoned", "{status:#}");
    // A rerun finishes the work; no spec succeeds twice.
    lake.ok(&["run", file.to_str().unwrap(), "--workers", "2"]);
    assert_eq!(
        count(
            &lake,
            "SELECT count(*) FROM (SELECT execution_spec_id FROM executions WHERE success GROUP BY 1 HAVING count(*) > 1)"
        ),
        0
    );
    assert_eq!(
        count(&lake, "SELECT count(*) FROM executions WHERE success AND origin_step_number = 2"),
        8
    );
}

/// The artifacts, edges and successful execution specs of a lake, as text.
fn pipeline_state(lake: &Lake) -> Vec<String> {
    [
        "SELECT artifact_id, artifact_type, origin_step_number FROM index ORDER BY 1",
        "SELECT source_artifact_id, target_artifact_id FROM artifact_edges ORDER BY 1, 2",
        "SELECT DISTINCT execution_spec_id FROM executions WHERE success ORDER BY 1",
        "SELECT e.direction, e.role, e.artifact_id, x.execution_spec_id FROM execution_edges e JOIN executions x ON e.execution_run_id = x.execution_run_id WHERE x.success ORDER BY 4, 1, 2, 3",
    ]
    .iter()
    .map(|q| lake.ok(&["sql", "--format", "csv", q]))
    .collect()
}

#[test]
fn an_orchestrator_killed_at_random_moments_then_rerun_ends_as_an_uninterrupted_run() {
    let trials: u64 = crate::depth("SLUICE_PIPELINE_KILLS", 20, 3);
    let dir = tempfile::tempdir().unwrap();
    let text = slow_pipeline(6, 0.2);
    let file = pipeline_file(dir.path(), "p.toml", &text);
    let reference = Lake::new();
    let started = Instant::now();
    reference.ok(&["run", file.to_str().unwrap(), "--workers", "2"]);
    let full = started.elapsed();
    let expected = pipeline_state(&reference);
    for trial in 0..trials {
        let lake = Lake::new();
        let mut run = lake
            .command(&["run", file.to_str().unwrap(), "--workers", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let fraction = (trial as f64 + 0.5) / trials as f64;
        std::thread::sleep(full.mul_f64(fraction));
        kill9(&mut run);
        lake.ok(&["run", file.to_str().unwrap(), "--workers", "2"]);
        let got = pipeline_state(&lake);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(g == e, "trial {trial} (kill at {fraction:.2}): query {i} differs");
        }
        assert_eq!(
            count(
                &lake,
                "SELECT count(*) FROM (SELECT execution_spec_id FROM executions WHERE success GROUP BY 1 HAVING count(*) > 1)"
            ),
            0,
            "trial {trial}: a spec succeeded twice"
        );
    }
}

#[test]
fn a_compaction_racing_commits_loses_nothing() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let rounds: u64 = crate::depth("SLUICE_RACE_ROUNDS", 100, 10);
    let mut staged = 0;
    for round in 0..rounds {
        stage(&lake, 4, 20_000 + round);
        staged += 4;
        let commit = unlocked_commit(&lake, "2");
        let table = ["metrics", "index", "executions", "execution_edges"][(round % 4) as usize];
        let compact = lake
            .command(&["compact", "--table", table])
            .env("SLUICE_UNSAFE_NO_LOCK", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_all_succeed([commit, compact], round);
    }
    lake.ok(&["commit"]);
    assert_eq!(count(&lake, "SELECT count(*) FROM executions"), staged as i64, "no run lost");
    for (table, dups) in duplicate_keys(&lake) {
        assert_eq!(dups, 0, "duplicate keys in {table}");
    }
    assert_eq!(
        count(
            &lake,
            "SELECT count(*) FROM index i LEFT JOIN metrics m ON i.artifact_id = m.artifact_id WHERE m.artifact_id IS NULL"
        ),
        0
    );
}
