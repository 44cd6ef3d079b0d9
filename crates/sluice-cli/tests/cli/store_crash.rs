//! Crash tests on a lake in an object store (moto's S3 and Azurite), with
//! real processes killed by SIGKILL: the commit kill loop, a reader beside
//! a commit loop, and an orchestrator killed mid-step then rerun. The same
//! guarantees as on a filesystem, with no lock anywhere: a store has none.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::stores::{StoreLake, azurite_lake, moto_lake};

/// The tables a commit of metrics writes, with the order that makes a dump
/// canonical.
const TABLES: [(&str, &str); 5] = [
    ("metrics", "artifact_id"),
    ("index", "artifact_id"),
    ("artifact_edges", "execution_run_id, source_artifact_id, target_artifact_id"),
    ("execution_edges", "execution_run_id, direction, role, artifact_id"),
    ("executions", "execution_run_id"),
];

/// Every row of the committed tables, sorted, as CSV. Each trial stages
/// the workload anew, so executions are compared without the columns a
/// staging worker stamps (its id, its clock).
fn dump(lake: &StoreLake) -> Vec<String> {
    TABLES
        .iter()
        .map(|(table, key)| {
            let columns = match *table {
                "executions" => {
                    "execution_run_id, execution_spec_id, step_run_id, origin_step_number, \
                     operation_name, params, success, error"
                }
                _ => "*",
            };
            let sql = format!("SELECT {columns} FROM {table} ORDER BY {key}");
            lake.ok(&["sql", "--format", "csv", &sql])
        })
        .collect()
}

fn count(lake: &StoreLake, sql: &str) -> i64 {
    let csv = lake.ok(&["sql", "--format", "csv", sql]);
    csv.lines().nth(1).unwrap().parse().unwrap()
}

/// Stage `executions` synthetic runs (30% duplicate content, 5% failures)
/// with two worker processes, straight into the store; `batch` > 1 stages
/// them in batches.
fn stage(lake: &StoreLake, executions: u64, seed: u64, step: i32, batch: u64) {
    lake.ok(&[
        "bench",
        "stage",
        "--executions",
        &executions.to_string(),
        "--workers",
        "2",
        "--duplicate-fraction",
        "0.3",
        "--fail-fraction",
        "0.05",
        "--seed",
        &seed.to_string(),
        "--step",
        &step.to_string(),
        "--batch",
        &batch.to_string(),
    ]);
}

/// The workload of the commit kill loop: two steps of single units and
/// one of batches.
fn stage_workload(lake: &StoreLake) {
    lake.ok(&["init"]);
    stage(lake, 120, 42, 1, 1);
    stage(lake, 120, 43, 2, 1);
    stage(lake, 100, 44, 3, 10);
}

/// `commit` SIGKILLed at random moments (and every third trial the first
/// `recover` too), then `recover`: the lake equals an uninterrupted
/// commit's, the journal is closed, staging is empty, and recovering again
/// changes nothing.
fn commit_kill_loop(make: fn() -> Option<StoreLake>) {
    let Some(reference) = make() else { return };
    stage_workload(&reference);
    let started = Instant::now();
    reference.ok(&["commit", "--chunk", "60"]);
    let full = started.elapsed();
    let expected = dump(&reference);
    assert!(expected[4].lines().count() > 300, "every execution committed");
    let trials = crate::depth("SLUICE_STORE_CRASH_TRIALS", 20, 3);
    let mut killed = 0;
    for trial in 0..trials {
        let lake = make().unwrap();
        stage_workload(&lake);
        let delay = full.mul_f64(crate::crash::fraction(trial) * 1.1);
        killed += u64::from(crate::crash::kill_command_after(
            lake.command(&["commit", "--chunk", "60"]),
            delay,
        ));
        // Before anything finishes what the kill left, a reader sees whole
        // sequences only: the dead committer's manifest, in the store, holds
        // readers back.
        assert_consistent(&lake, &format!("trial {trial}, after the kill at {delay:?}"));
        if trial % 3 == 0 {
            let early = full.mul_f64(crate::crash::fraction(trial + 1000) * 0.5);
            crate::crash::kill_command_after(lake.command(&["recover"]), early);
        }
        lake.ok(&["recover"]);
        let got = dump(&lake);
        for (i, (table, _)) in TABLES.iter().enumerate() {
            assert!(
                got[i] == expected[i],
                "trial {trial}: `{table}` differs from the uninterrupted commit (kill at {delay:?})"
            );
        }
        // Staging and the journal are settled. (Integrity may list data
        // files a killed commit wrote and never committed: `vacuum --full`
        // removes those, as on a filesystem.)
        let doctor = lake.run(&["doctor", "--json"]);
        let doctor: Value = serde_json::from_slice(&doctor.stdout).unwrap();
        for settled in ["unsealed", "quarantined", "pending_manifests", "unfinished_sequences"] {
            assert_eq!(doctor[settled], serde_json::json!([]), "trial {trial}: {doctor:#}");
        }
        assert_eq!(doctor["sealed_waiting"], 0, "trial {trial}: {doctor:#}");
        assert!(doctor["journal_behind"].is_null(), "trial {trial}: {doctor:#}");
        let integrity = &doctor["integrity"];
        assert_eq!(
            integrity["missing_files"],
            serde_json::json!({}),
            "trial {trial}: {integrity:#}"
        );
        for whole in ["index_without_content", "content_without_index"] {
            let counts = integrity[whole].as_object().unwrap();
            assert!(counts.values().all(|n| n == 0), "trial {trial}: {integrity:#}");
        }
        for whole in ["dangling_execution_edges", "dangling_artifact_edges"] {
            assert_eq!(integrity[whole], 0, "trial {trial}: {integrity:#}");
        }
        let again: Value = serde_json::from_str(&lake.ok(&["recover", "--json"])).unwrap();
        assert_eq!(again["runs_committed"], 0, "trial {trial}: {again}");
    }
    assert!(killed * 4 >= trials * 3, "most trials killed a running commit: {killed}/{trials}");
}

#[test]
fn on_s3_a_commit_killed_at_random_moments_recovers_exactly() {
    commit_kill_loop(moto_lake);
}

#[test]
fn on_azure_a_commit_killed_at_random_moments_recovers_exactly() {
    commit_kill_loop(azurite_lake);
}

/// `commit --chunk-mib` bounds each sequence by the bytes staged, as the
/// store's listing gives each unit's size (there is no file to ask): 20
/// units of ~139 KB in chunks of 1 MiB are three sequences, every row
/// committed once, the same rows as one unbounded commit of the same
/// workload.
fn commit_chunks_by_staged_bytes(make: fn() -> Option<StoreLake>) {
    let Some(chunked) = make() else { return };
    let whole = make().unwrap();
    for lake in [&chunked, &whole] {
        lake.ok(&["init"]);
        stage(lake, 2000, 3, 1, 100);
    }
    let report: Value =
        serde_json::from_str(&chunked.ok(&["commit", "--chunk-mib", "1", "--json"])).unwrap();
    assert_eq!(report["runs_committed"], 2000, "{report}");
    assert_eq!(report["sequences"].as_array().map(Vec::len), Some(3), "{report}");
    let report: Value =
        serde_json::from_str(&whole.ok(&["commit", "--chunk-mib", "1024", "--json"])).unwrap();
    assert_eq!(report["sequences"].as_array().map(Vec::len), Some(1), "{report}");
    assert!(dump(&chunked) == dump(&whole), "chunked and whole commits differ");
    assert_eq!(assert_consistent(&chunked, "after the chunked commit"), 2000);
}

#[test]
fn on_s3_commit_chunks_by_staged_bytes() {
    commit_chunks_by_staged_bytes(moto_lake);
}

#[test]
fn on_azure_commit_chunks_by_staged_bytes() {
    commit_chunks_by_staged_bytes(azurite_lake);
}

/// Index rows without their content, artifacts without the execution
/// that made them (every artifact of these workloads is staged by one),
/// edges without their execution: never seen by a reader, whatever a
/// commit is doing.
const CONSISTENCY: &str = "SELECT \
    (SELECT count(*) FROM index i LEFT JOIN metrics m ON i.artifact_id = m.artifact_id WHERE m.artifact_id IS NULL) AS index_without_content, \
    (SELECT count(*) FROM index i LEFT JOIN (SELECT DISTINCT artifact_id FROM execution_edges) e ON i.artifact_id = e.artifact_id WHERE e.artifact_id IS NULL) AS index_without_execution, \
    (SELECT count(*) FROM execution_edges e LEFT JOIN executions x ON e.execution_run_id = x.execution_run_id WHERE x.execution_run_id IS NULL) AS edges_without_execution, \
    (SELECT count(*) FROM executions) AS executions";

/// A sequence whose committer stopped after its content tables (an
/// injected failure at the index commit; the process exits) is hidden from
/// readers while its manifest waits in the store, then finished whole by
/// `recover`.
fn failed_table_commit_hidden_until_recovered(make: fn() -> Option<StoreLake>) {
    let Some(lake) = make() else { return };
    lake.ok(&["init"]);
    stage(&lake, 30, 5, 1, 1);
    let failed = lake.command(&["commit"]).env("SLUICE_FAILPOINT", "commit:index").output();
    let failed = failed.unwrap();
    assert!(!failed.status.success(), "the injected failure stops the commit");
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("table `index`"), "the error names the table: {err}");
    let committed = count(&lake, "SELECT count(*) FROM metrics");
    assert_eq!(committed, 0, "readers see the last completed state while the sequence is open");
    assert_consistent(&lake, "after the failed commit");
    let report: Value = serde_json::from_str(&lake.ok(&["recover", "--json"])).unwrap();
    assert_eq!(report["recovered_sequences"].as_array().map(Vec::len), Some(1), "{report}");
    assert!(count(&lake, "SELECT count(*) FROM metrics") > 0, "finished by recover");
    assert_consistent(&lake, "after recover");
}

#[test]
fn on_s3_a_failed_table_commit_is_hidden_until_recovered() {
    failed_table_commit_hidden_until_recovered(moto_lake);
}

#[test]
fn on_azure_a_failed_table_commit_is_hidden_until_recovered() {
    failed_table_commit_hidden_until_recovered(azurite_lake);
}

/// Read [`CONSISTENCY`], assert it found nothing half committed, and
/// return the executions seen.
fn assert_consistent(lake: &StoreLake, when: &str) -> i64 {
    let out = lake.ok(&["sql", "--format", "ndjson", CONSISTENCY]);
    let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(row["index_without_content"], 0, "{when}: {row}");
    assert_eq!(row["index_without_execution"], 0, "{when}: {row}");
    assert_eq!(row["edges_without_execution"], 0, "{when}: {row}");
    row["executions"].as_i64().unwrap()
}

/// A reader beside a loop of commits (each of several sequences) sees the
/// lake after some whole sequence, never half of one.
fn reader_beside_commits(make: fn() -> Option<StoreLake>) {
    let Some(lake) = make() else { return };
    lake.ok(&["init"]);
    stage(&lake, 40, 1, 1, 1);
    let rounds = crate::depth("SLUICE_STORE_READER_COMMITS", 8, 3);
    let mut seen = Vec::new();
    std::thread::scope(|scope| {
        let committer = scope.spawn(|| {
            for seed in 2..2 + rounds {
                lake.ok(&["commit", "--chunk", "7"]);
                stage(&lake, 20, seed, 1, 1);
            }
            lake.ok(&["commit", "--chunk", "7"]);
        });
        while !committer.is_finished() {
            seen.push(assert_consistent(&lake, "beside the commits"));
        }
        committer.join().unwrap();
    });
    assert!(seen.len() >= 3, "the reader ran beside the commits ({} reads)", seen.len());
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    let completed = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT commit_seq FROM commits WHERE phase = 'completed' ORDER BY commit_seq",
    ]);
    let mut totals = vec![0i64];
    for seq in completed.lines().skip(1) {
        let at = lake.ok(&[
            "sql",
            "--format",
            "csv",
            "--as-of",
            seq,
            "SELECT count(*) AS n FROM executions",
        ]);
        totals.push(at.lines().nth(1).unwrap().parse().unwrap());
    }
    for n in &seen {
        assert!(totals.contains(n), "{n} executions is no sequence's end state: {totals:?}");
    }
}

#[test]
fn on_s3_a_reader_beside_a_commit_loop_never_sees_half_a_sequence() {
    reader_beside_commits(moto_lake);
}

#[test]
fn on_azure_a_reader_beside_a_commit_loop_never_sees_half_a_sequence() {
    reader_beside_commits(azurite_lake);
}

/// A pipeline whose second step keeps two workers busy for a while.
const SLOW: &str = r#"name = "slow"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 6, rows = 5 }

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'sleep 0.3; for f in inputs/t/*; do cp "$f" outputs/t/; done']
inputs = { t = "gen.data" }
outputs = { t = "data" }

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "work.t" }
"#;

/// The orchestrator (`sluice run`, workers staging into the store)
/// SIGKILLed at moments spread over its run, then run again: every unit
/// succeeds exactly once, whatever the kill interrupted.
fn orchestrator_kill_loop(make: fn() -> Option<StoreLake>) {
    let Some(reference) = make() else { return };
    let file = reference.cwd.path().join("p.toml");
    std::fs::write(&file, SLOW).unwrap();
    let file = file.to_str().unwrap();
    let started = Instant::now();
    reference.ok(&["run", file, "--workers", "2"]);
    let full = started.elapsed();
    let units = count(&reference, "SELECT count(*) FROM executions WHERE success");
    assert_eq!(units, 18, "6 + 6 + 6 units");
    // `work` copies its inputs: the same content, the same 6 artifacts.
    let data = count(&reference, "SELECT count(*) FROM data");
    let trials = crate::depth("SLUICE_STORE_PIPELINE_KILLS", 6, 2);
    for trial in 0..trials {
        let lake = make().unwrap();
        std::fs::write(lake.cwd.path().join("p.toml"), SLOW).unwrap();
        let mut run = lake
            .command(&["run", "p.toml", "--workers", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let at = (trial as f64 + 0.5) / trials as f64;
        std::thread::sleep(full.mul_f64(at));
        run.kill().unwrap();
        run.wait().unwrap();
        std::thread::sleep(Duration::from_millis(300)); // its workers notice and exit
        lake.ok(&["run", "p.toml", "--workers", "2"]);
        let twice = count(
            &lake,
            "SELECT count(*) FROM (SELECT execution_spec_id FROM executions WHERE success \
             GROUP BY 1 HAVING count(*) > 1)",
        );
        assert_eq!(twice, 0, "trial {trial} (kill at {at:.2}): a spec succeeded twice");
        let done =
            count(&lake, "SELECT count(DISTINCT execution_spec_id) FROM executions WHERE success");
        assert_eq!(done, units, "trial {trial} (kill at {at:.2})");
        assert_eq!(count(&lake, "SELECT count(*) FROM data"), data, "trial {trial}: each once");
    }
}

#[test]
fn on_s3_an_orchestrator_killed_mid_step_then_rerun_succeeds_each_unit_once() {
    orchestrator_kill_loop(moto_lake);
}

#[test]
fn on_azure_an_orchestrator_killed_mid_step_then_rerun_succeeds_each_unit_once() {
    orchestrator_kill_loop(azurite_lake);
}
