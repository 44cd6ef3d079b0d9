//! Retries on the local backend, with real worker processes: each retry
//! condition, backoff delays within their bounds, one execution row per
//! attempt, and exactly one success per spec even when the orchestrator is
//! killed between attempts.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::pipeline::step;
use super::{Lake, depth, json_lines};

/// A `command` step body that fails as `fail` (a shell command, e.g.
/// `exit 3`) on the first `times` attempts at each table, counted in
/// `counts` (outside the sandbox, so attempts see each other's), and then
/// copies its table through.
fn flaky(counts: &Path, times: u32, fail: &str) -> String {
    format!(
        "f=$(ls inputs/t); c={}/$f; n=$(cat \"$c\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$c\"; \
         if [ $n -le {times} ]; then {fail}; fi; cp inputs/t/$f outputs/t/$f",
        counts.display()
    )
}

fn pipeline(tables: u32, body: &str, retry: &str) -> String {
    format!(
        r#"name = "flaky"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = {tables}, rows = 2 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", '{body}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
{retry}
"#
    )
}

/// `sluice run --json`: (success, report).
fn run(lake: &Lake, dir: &Path, text: &str) -> (bool, Value) {
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    let out = lake.run(&["run", file.to_str().unwrap(), "--json", "--workers", "2"]);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("no report ({e}): {}", String::from_utf8_lossy(&out.stderr));
    });
    (out.status.success(), report)
}

/// The executions of step 2: (spec, success, metadata, error), in start order.
fn attempts(lake: &Lake) -> Vec<(String, bool, Value, String)> {
    let rows = json_lines(&lake.ok(&[
        "sql",
        "--format",
        "ndjson",
        "SELECT execution_spec_id, success, metadata, error FROM executions \
         WHERE origin_step_number = 2 ORDER BY timestamp_start",
    ]));
    rows.iter()
        .map(|r| {
            let metadata = serde_json::from_str(r["metadata"].as_str().unwrap()).unwrap();
            let error = r["error"].as_str().unwrap_or_default().to_owned();
            let spec = r["execution_spec_id"].as_str().unwrap().to_owned();
            (spec, r["success"] == true, metadata, error)
        })
        .collect()
}

/// A unit that fails twice, then succeeds: one success and three attempt
/// rows per unit (attempt number, how it failed, the run it retried); the
/// rounds waited as exponential backoff with jitter says.
#[test]
fn a_unit_that_fails_twice_then_succeeds_keeps_three_attempts_and_one_success() {
    let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
    let counts = dir.path().join("counts");
    std::fs::create_dir_all(&counts).unwrap();
    let retry = "retries = 3\nretry_delay = \"1s\"\nbackoff = \"exponential\"\nretry_jitter = 0.5";
    let clock = Instant::now();
    let (ok, report) = run(&lake, dir.path(), &pipeline(4, &flaky(&counts, 2, "exit 3"), retry));
    let took = clock.elapsed();
    assert!(ok, "{report:#}");
    let work = step(&report, "work");
    assert_eq!((work["status"].as_str(), work["succeeded"].as_u64()), (Some("completed"), Some(4)));
    assert_eq!(work["failed"], 0, "{work:#}");
    let rounds = work["retries"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{work:#}");
    for (round, (attempt, low, high)) in rounds.iter().zip([(2, 1.0, 1.5), (3, 2.0, 3.0)]) {
        assert_eq!(round["attempt"], attempt);
        assert_eq!(round["units"], 4);
        assert_eq!(round["reasons"]["exit:3"], 4);
        let delay = round["delay_seconds"].as_f64().unwrap();
        assert!((low..=high).contains(&delay), "round {attempt}: {delay}s not in {low}..{high}");
    }
    assert!(took >= Duration::from_secs(3), "the run waited its delays: {took:?}");

    let rows = attempts(&lake);
    assert_eq!(rows.len(), 12, "{rows:#?}");
    let mut by_spec: BTreeMap<&str, Vec<(bool, &Value)>> = BTreeMap::new();
    for (spec, success, metadata, _) in &rows {
        by_spec.entry(spec).or_default().push((*success, metadata));
    }
    assert_eq!(by_spec.len(), 4);
    for (spec, tries) in &by_spec {
        let numbers: Vec<u64> = tries.iter().map(|(_, m)| m["attempt"].as_u64().unwrap()).collect();
        assert_eq!(numbers, [1, 2, 3], "{spec}");
        assert_eq!(tries.iter().filter(|(s, _)| *s).count(), 1, "{spec}: one success");
        assert!(tries[2].0, "{spec}: the third attempt succeeded");
        for (_, metadata) in &tries[..2] {
            assert_eq!(metadata["failure"], "exit:3", "{metadata}");
        }
        assert_eq!(tries[1].1["retry_reason"], "exit:3");
        assert!(tries[2].1["retry_of"].is_string());
    }
    let status = lake.ok(&["status"]);
    assert!(status.contains("retried"), "{status}");
}

/// `no_retry_on` wins over `retry_on = ["any"]`; `retry_on` limits retries
/// to what it names (a time-out, a signal), and a failure it does not name
/// runs once.
#[test]
fn retry_conditions_choose_which_failures_run_again() {
    let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
    let counts = dir.path().join("counts");
    std::fs::create_dir_all(&counts).unwrap();
    // Exit 2 means bad input: never retried.
    let body = flaky(&counts, 1, "exit 2");
    let retry = "retries = 3\nretry_on = [\"any\"]\nno_retry_on = [2]";
    let (ok, report) = run(&lake, dir.path(), &pipeline(2, &body, retry));
    let work = step(&report, "work");
    assert!(!ok && work["status"] == "failed", "{work:#}");
    assert!(work.get("retries").is_none(), "{work:#}");
    assert_eq!(attempts(&lake).len(), 2, "one attempt each");

    // Only time-outs are retried: the unit that hangs once runs again and
    // succeeds; one that exits 3 does not.
    for (fail, retried) in [("sleep 30", true), ("exit 3", false), ("kill -9 $$", true)] {
        let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
        let counts = dir.path().join("counts");
        std::fs::create_dir_all(&counts).unwrap();
        let retry = "timeout = \"2s\"\nretries = 1\nretry_on = [\"timeout\", \"SIGKILL\"]";
        let (ok, report) = run(&lake, dir.path(), &pipeline(1, &flaky(&counts, 1, fail), retry));
        let work = step(&report, "work");
        assert_eq!(ok, retried, "{fail}: {work:#}");
        let rows = attempts(&lake);
        assert_eq!(rows.len(), if retried { 2 } else { 1 }, "{fail}: {rows:#?}");
        let expected = match fail {
            "sleep 30" => "timeout",
            "exit 3" => "exit:3",
            _ => "signal:9",
        };
        assert_eq!(rows[0].2["failure"], expected, "{fail}");
    }
}

/// The orchestrator is killed (SIGKILL) at random moments of a run whose
/// units fail once and are retried; a second run finishes the step. Each
/// unit's spec then has exactly one successful execution, whatever attempt
/// the kill interrupted, and every failed attempt is a row of its own.
#[test]
fn a_run_killed_between_attempts_commits_one_success_per_spec() {
    let trials = depth("SLUICE_RETRY_KILLS", 8, 3);
    for trial in 0..trials {
        let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
        let counts = dir.path().join("counts");
        std::fs::create_dir_all(&counts).unwrap();
        let text = pipeline(6, &flaky(&counts, 1, "exit 3"), "retries = 2");
        let file = dir.path().join("pipeline.toml");
        std::fs::write(&file, &text).unwrap();
        let mut child = lake
            .command(&["run", file.to_str().unwrap(), "--workers", "2"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300 + 400 * trial));
        let _ = child.kill();
        let _ = child.wait();
        let (ok, report) = run(&lake, dir.path(), &text);
        assert!(ok, "trial {trial}: {report:#}");
        let rows = attempts(&lake);
        let mut successes: BTreeMap<&str, usize> = BTreeMap::new();
        for (spec, success, metadata, error) in &rows {
            *successes.entry(spec).or_default() += usize::from(*success);
            // A failed attempt says how; a success another run of the spec
            // beat is committed as superseded.
            if !success && !error.starts_with("superseded") {
                assert!(metadata["failure"].is_string(), "trial {trial}: {metadata}");
            }
        }
        assert_eq!(successes.len(), 6, "trial {trial}: {rows:#?}");
        assert!(successes.values().all(|n| *n == 1), "trial {trial}: {successes:?}");
    }
}
