//! `sluice run`: real pipelines with real worker processes.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::{Lake, json_lines};

struct Fixture {
    lake: Lake,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture { lake: Lake::new(), dir: tempfile::tempdir().unwrap() }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `sluice run --json`; returns (success, report).
    fn run(&self, pipeline: &str, workers: &str) -> (bool, Value) {
        let file = self.write("pipeline.toml", pipeline);
        let out = self.lake.run(&["run", file.to_str().unwrap(), "--json", "--workers", workers]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("no JSON report ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
        });
        (out.status.success(), report)
    }

    fn run_ok(&self, pipeline: &str) -> Value {
        let (ok, report) = self.run(pipeline, "2");
        assert!(ok, "run failed: {report:#}");
        report
    }

    fn ids(&self, sql: &str) -> BTreeSet<String> {
        json_lines(&self.lake.ok(&["sql", "--format", "ndjson", sql]))
            .iter()
            .map(|r| r.as_object().unwrap().values().next().unwrap().as_str().unwrap().to_owned())
            .collect()
    }

    fn count(&self, sql: &str) -> i64 {
        let rows = json_lines(&self.lake.ok(&["sql", "--format", "ndjson", sql]));
        rows[0].as_object().unwrap().values().next().unwrap().as_i64().unwrap()
    }
}

/// Step `name` of a `sluice run --json` report.
pub(crate) fn step<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {report:#}"))
}

fn dispatched(report: &Value) -> u64 {
    report["steps"].as_array().unwrap().iter().map(|s| s["dispatched"].as_u64().unwrap()).sum()
}

const COPY: &str = r#"for f in inputs/t/*; do cp "$f" "outputs/t/$(basename "$f")"; done"#;

fn linear(where_clause: &str) -> String {
    linear_seeded(where_clause, 3)
}

fn linear_seeded(where_clause: &str, seed: u64) -> String {
    format!(
        r#"name = "linear"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 6, rows = 50, seed = {seed} }}

[[step]]
name = "square"
operation = "command"
command = ["sh", "-c", "for f in inputs/t/*.csv; do awk -F, -v OFS=, 'NR == 1 {{ print; next }} {{ $2 = $2 * $2; print }}' \"$f\" > outputs/t/$(basename $f); done"]
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
batch = {{ artifacts_per_unit = 2 }}

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = {{ t = "square.t" }}

[[step]]
name = "keep"
operation = "filter"
inputs = {{ candidates = "square.t" }}
params = {{ metric = "stats.metrics", where = "{where_clause}" }}
"#
    )
}

#[test]
fn linear_pipeline_runs_then_caches_then_reruns_only_what_changed() {
    let f = Fixture::new();
    let first = f.run_ok(&linear("x_mean > 0.333"));
    assert_eq!(step(&first, "gen")["total"], 6);
    assert_eq!(step(&first, "square")["total"], 3, "2 tables per unit");
    assert_eq!(step(&first, "square")["outputs"]["t"], 6);
    assert_eq!(step(&first, "stats")["outputs"]["metrics"], 6);
    let kept = step(&first, "keep")["outputs"]["kept"].as_u64().unwrap();
    assert!((1..6).contains(&kept), "the predicate splits the tables: {kept}");
    assert_eq!(dispatched(&first), 6 + 3 + 6 + 1);

    // The filter agrees with the metrics in the lake.
    let contents = json_lines(&f.lake.ok(&[
        "sql",
        "--format",
        "json",
        "SELECT content FROM metrics WHERE origin_step_number = 3",
    ]));
    let passing = contents
        .iter()
        .map(|r| serde_json::from_str::<Value>(r["content"].as_str().unwrap()).unwrap())
        .filter(|m| m["x_mean"].as_f64().unwrap() > 0.333)
        .count();
    assert_eq!(passing as u64, kept);
    // Lineage: every metric derives from a squared table, every squared table from a generated one.
    assert_eq!(f.count("SELECT count(*) FROM artifact_edges WHERE source_artifact_type = 'data' AND target_artifact_type = 'metric'"), 6);
    assert_eq!(
        f.count(
            "SELECT count(*) FROM artifact_edges WHERE source_role = 't' AND target_role = 't'"
        ),
        6
    );

    let artifacts = f.ids("SELECT artifact_id FROM index");
    let executions = f.count("SELECT count(*) FROM executions");

    // Identical rerun: nothing dispatched, the same artifacts, no new executions.
    let again = f.run_ok(&linear("x_mean > 0.333"));
    assert_eq!(dispatched(&again), 0, "{again:#}");
    for s in again["steps"].as_array().unwrap() {
        assert_eq!(s["status"], "skipped", "{s:#}");
    }
    assert_eq!(f.ids("SELECT artifact_id FROM index"), artifacts);
    assert_eq!(f.count("SELECT count(*) FROM executions"), executions);
    assert_eq!(step(&again, "keep")["outputs"]["kept"].as_u64().unwrap(), kept);

    // A new predicate reruns only the filter.
    let changed = f.run_ok(&linear("x_mean > 0.2"));
    for name in ["gen", "square", "stats"] {
        assert_eq!(step(&changed, name)["status"], "skipped");
    }
    assert_eq!(step(&changed, "keep")["dispatched"], 1);
    assert_eq!(dispatched(&changed), 1);

    // A new seed upstream changes every input downstream: everything reruns.
    let reseeded = f.run_ok(&linear_seeded("x_mean > 0.2", 4));
    assert_eq!(step(&reseeded, "gen")["dispatched"], 6);
    assert_eq!(step(&reseeded, "square")["dispatched"], 3);
    assert_eq!(step(&reseeded, "stats")["dispatched"], 6);
    assert_eq!(step(&reseeded, "keep")["dispatched"], 1);

    // status and runs read the steps table.
    let status: Value = serde_json::from_str(&f.lake.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["pipeline"], "linear");
    assert_eq!(status["steps"].as_array().unwrap().len(), 4);
    let runs: Value = serde_json::from_str(&f.lake.ok(&["runs", "--json"])).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 4);
    let text = f.lake.ok(&["status"]);
    assert!(text.contains("4. keep") && text.contains("completed"), "{text}");
}

#[test]
fn fan_out_fan_in_zip_and_cross() {
    let f = Fixture::new();
    let pipeline = format!(
        r#"name = "shapes"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 3, rows = 10 }}

[[step]]
name = "left"
operation = "command"
command = ["sh", "-c", '{COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}

[[step]]
name = "right"
operation = "compute_metrics"
inputs = {{ t = "gen.data" }}

[[step]]
name = "both"
operation = "merge"
inputs = {{ a = "gen.data", b = "left.t" }}

[[step]]
name = "pairs"
operation = "command"
command = ["sh", "-c", 'ls inputs/d inputs/m > /dev/null && echo "{{\"n\": $(ls inputs/d inputs/m | wc -l)}}" > outputs/o/pair.json']
inputs = {{ d = "gen.data", m = "right.metrics" }}
outputs = {{ o = "metric" }}

[[step]]
name = "grid"
operation = "command"
command = ["sh", "-c", 'echo "{{\"grid\": \"$(ls inputs/d)-$(ls inputs/m)\"}}" > outputs/o/cell.json']
inputs = {{ d = "gen.data", m = "right.metrics" }}
outputs = {{ o = "metric" }}
pairing = "cross"
"#
    );
    let report = f.run_ok(&pipeline);
    // Fan-out: two steps read gen; fan-in: merge of identical copies is deduplicated.
    assert_eq!(step(&report, "left")["outputs"]["t"], 3);
    assert_eq!(step(&report, "right")["outputs"]["metrics"], 3);
    assert_eq!(step(&report, "both")["outputs"]["merged"], 3, "copies have the same content ids");
    // zip: 3 units of (table, metric); cross: 9.
    assert_eq!(step(&report, "pairs")["total"], 3);
    assert_eq!(step(&report, "grid")["total"], 9);
    assert_eq!(step(&report, "grid")["outputs"]["o"], 9, "every combination differs");
    assert_eq!(f.count("SELECT count(*) FROM execution_edges e JOIN executions x ON e.execution_run_id = x.execution_run_id WHERE x.origin_step_number = 6 AND e.direction = 'input'"), 18);
}

/// Units of one run that each write a file output of the same name keep
/// each its own bytes: the lake keeps files by content, so one never
/// overwrites another that an artifact already references; the next
/// command gets each file, checked, and `get` returns it.
#[test]
fn file_outputs_of_one_name_are_kept_apart_and_read_back() {
    let f = Fixture::new();
    let pipeline = r#"name = "files"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 4, rows = 5 }

[[step]]
name = "report"
operation = "command"
command = ["sh", "-c", "cat inputs/t/* > outputs/r/report.txt"]
inputs = { t = "gen.data" }
outputs = { r = "file_ref" }

[[step]]
name = "readback"
operation = "command"
command = ["sh", "-c", "cp inputs/r/* outputs/t/back.csv"]
inputs = { r = "report.r" }
outputs = { t = "data" }
"#;
    let report = f.run_ok(pipeline);
    assert_eq!(step(&report, "report")["outputs"]["r"], 4);
    assert_eq!(step(&report, "readback")["outputs"]["t"], 4);
    let contents = |sql: &str| -> BTreeSet<String> {
        f.ids(sql).iter().map(|id| f.lake.ok(&["get", id])).collect()
    };
    let tables = contents("SELECT artifact_id FROM data WHERE origin_step_number = 1");
    assert_eq!(tables.len(), 4);
    assert_eq!(contents("SELECT artifact_id FROM file_refs"), tables, "`get` of each kept file");
    // Each readback unit's copy is a table gen made, byte for byte (so the
    // same artifact): no fifth table.
    assert_eq!(f.count("SELECT count(*) FROM data"), 4, "each unit read its own kept file");
    let hashes = f.ids("SELECT content_hash FROM file_refs");
    let paths = f.ids("SELECT path FROM file_refs");
    assert_eq!((hashes.len(), paths.len()), (4, 4));
    for path in paths {
        let path = std::path::Path::new(&path);
        assert!(path.ends_with("report.txt") && path.starts_with(&f.lake.root), "{path:?}");
        let hash = blake3::hash(&std::fs::read(path).unwrap()).to_hex().to_string();
        assert!(hashes.contains(&hash), "{path:?} holds the bytes its reference names");
    }
}

#[test]
fn partial_failure_is_recorded_and_a_rerun_runs_only_the_failed_units() {
    let f = Fixture::new();
    let marker = f.dir.path().join("broken");
    std::fs::write(&marker, "").unwrap();
    let pipeline = format!(
        r#"name = "flaky"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 5, rows = 5 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'if [ -e {marker} ] && [ -e inputs/t/table_0002.csv ]; then echo "bad table" >&2; exit 3; fi; {COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#,
        marker = marker.display()
    );
    let (ok, first) = f.run(&pipeline, "2");
    assert!(!ok, "a failed unit makes the run exit non-zero");
    let work = step(&first, "work");
    assert_eq!(work["status"], "completed", "continue keeps the good results");
    assert_eq!(work["failed"], 1);
    assert_eq!(work["outputs"]["t"], 4);
    let failure = &work["failures"][0];
    assert!(failure[1].as_str().unwrap().contains("exit status 3"), "{failure}");
    // The error names what the unit was given.
    let bad_input = f.ids(
        "SELECT artifact_id FROM data WHERE original_name = 'table_0002.csv' \
         AND origin_step_number = 1",
    );
    let bad_input = bad_input.iter().next().unwrap();
    assert!(
        failure[1]
            .as_str()
            .unwrap()
            .ends_with(&format!("(inputs: t={bad_input} \"table_0002.csv\")")),
        "{failure}"
    );
    let tool = f.lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT tool_output FROM executions WHERE NOT success",
    ]);
    assert!(tool.contains("bad table"), "{tool}");
    let status = f.lake.ok(&["status"]);
    assert!(status.contains("exit status 3") && status.contains("tool_output"), "{status}");
    // `sluice logs`: the failed unit, its inputs and what it printed.
    let logs = f.lake.ok(&["logs"]);
    assert_eq!(logs.matches("== step").count(), 1, "only the failed unit: {logs}");
    assert!(
        logs.starts_with("== step 2 (work), execution ")
            && logs.contains("failed: ")
            && logs.contains("exit status 3")
            && logs.contains("\ninputs: t=")
            && logs.contains("\n  bad table\n"),
        "{logs}"
    );
    let all = f.lake.ok(&["logs", "--all", "--step", "work"]);
    assert_eq!(all.matches("== step 2 (work)").count(), 5, "{all}");
    assert_eq!(all.matches(" succeeded\n").count(), 4, "{all}");
    let failed_run = failure[0].as_str().unwrap();
    let one = f.lake.ok(&["logs", &failed_run[..10]]);
    assert!(one.contains(failed_run) && one.contains("bad table"), "{one}");
    let stderr = f.lake.fails(&["logs", "--step", "nope"]);
    assert!(stderr.contains("has no step `nope`; its steps: 1 (gen), 2 (work)"), "{stderr}");

    std::fs::remove_file(&marker).unwrap();
    let second = f.run_ok(&pipeline);
    assert_eq!(step(&second, "gen")["status"], "skipped");
    assert_eq!(step(&second, "work")["dispatched"], 1, "only the failed unit reruns");
    assert_eq!(step(&second, "work")["cached"], 4);
    assert_eq!(step(&second, "work")["outputs"]["t"], 5);
}

#[test]
fn a_killed_worker_fails_only_its_unit() {
    let f = Fixture::new();
    let pipeline = format!(
        r#"name = "kill"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 6, rows = 5 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'if [ -e inputs/t/table_0003.csv ]; then kill -9 $PPID; sleep 5; fi; {COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#
    );
    let (ok, report) = f.run(&pipeline, "2");
    assert!(!ok);
    let work = step(&report, "work");
    assert_eq!(work["failed"], 1, "{work:#}");
    assert_eq!(work["succeeded"], 5);
    assert!(work["failures"][0][1].as_str().unwrap().contains("SIGKILL"), "{work:#}");
    assert_eq!(f.count("SELECT count(*) FROM executions WHERE origin_step_number = 2 AND NOT success AND error LIKE '%worker process died%'"), 1);
}

/// Units travel to a worker in chunks and are staged in groups: a worker
/// killed mid-chunk must fail the unit it was running and nothing else —
/// the units it ran but had not sealed run again elsewhere, and no unit
/// is committed twice or lost.
#[test]
fn a_worker_killed_mid_chunk_fails_one_unit_and_loses_no_other() {
    let f = Fixture::new();
    let pipeline = format!(
        r#"name = "kill-chunk"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 60, rows = 3 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'if [ -e inputs/t/table_0041.csv ]; then kill -9 $PPID; sleep 5; fi; {COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#
    );
    let (ok, report) = f.run(&pipeline, "2");
    assert!(!ok);
    let work = step(&report, "work");
    assert_eq!(
        (work["failed"].as_u64(), work["succeeded"].as_u64()),
        (Some(1), Some(59)),
        "{work:#}"
    );
    assert_eq!(work["outputs"]["t"], 59);
    // Two workers started (one again after the kill): their start is timed.
    assert!(work["worker_seconds"]["start"].as_f64().unwrap() > 0.0, "{work:#}");
    assert!(work["failures"][0][1].as_str().unwrap().contains("SIGKILL"), "{work:#}");
    // One execution row per unit: 59 successes and the killed one.
    assert_eq!(f.count("SELECT count(*) FROM executions WHERE origin_step_number = 2"), 60);
    assert_eq!(
        f.count(
            "SELECT count(DISTINCT execution_spec_id) FROM executions WHERE origin_step_number = 2"
        ),
        60
    );
    assert_eq!(
        f.count("SELECT count(*) FROM executions WHERE origin_step_number = 2 AND success"),
        59
    );
    // A rerun runs the killed unit alone (and it kills its worker again).
    let (_, again) = f.run(&pipeline, "2");
    let work = step(&again, "work");
    assert_eq!(
        (work["dispatched"].as_u64(), work["failed"].as_u64()),
        (Some(1), Some(1)),
        "{work:#}"
    );
}

/// A whole-stream step over more artifacts than one `IN (…)` list holds
/// (2048): delta-rs walks such a filter recursively, which overflowed a
/// runtime thread's stack at 10,000 candidates.
#[test]
fn a_filter_over_thousands_of_candidates_runs() {
    let f = Fixture::new();
    let pipeline = r#"name = "wide"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 2500, rows = 2 }

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "gen.data" }

[[step]]
name = "keep"
operation = "filter"
inputs = { candidates = "gen.data" }
params = { metric = "stats.metrics", where = "rows = 2" }
"#;
    let report = f.run_ok(pipeline);
    assert_eq!(step(&report, "keep")["outputs"]["kept"], 2500, "{report:#}");
}

#[test]
fn fail_fast_stops_dispatching_and_the_pipeline() {
    let f = Fixture::new();
    let pipeline = format!(
        r#"name = "ff"
failure = "fail_fast"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 8, rows = 5 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'if [ -e inputs/t/table_0001.csv ]; then exit 1; fi; {COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}

[[step]]
name = "after"
operation = "compute_metrics"
inputs = {{ t = "work.t" }}
"#
    );
    let (ok, report) = f.run(&pipeline, "1");
    assert!(!ok);
    assert_eq!(report["stopped_by_failure"], true);
    let work = step(&report, "work");
    assert_eq!(work["status"], "failed");
    assert!(work["not_run"].as_u64().unwrap() > 0, "{work:#}");
    assert_eq!(report["steps"].as_array().unwrap().len(), 2, "`after` never ran");
}

/// A step whose units fail past `max_failed_units` (a count, or a share of
/// the units dispatched) stops dispatching and ends failed, the units it
/// never ran recorded as not run and the steps after it not reached; under
/// the limit it completes with its failures, as before; a limit that is
/// neither a count nor a share is refused naming it.
#[test]
fn a_step_past_max_failed_units_stops_early_and_fails() {
    let f = Fixture::new();
    // Units of even tables fail, so every other unit fails.
    let pipeline = |limit: &str| {
        format!(
            r#"name = "broken"
max_failed_units = {limit}
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 40, rows = 2 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'case $(ls inputs/t) in *[02468].csv) exit 3;; esac; {COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}

[[step]]
name = "after"
operation = "compute_metrics"
inputs = {{ t = "work.t" }}
"#
        )
    };
    for limit in ["3", "\"10%\""] {
        let (ok, report) = f.run(&pipeline(limit), "1");
        assert!(!ok, "{limit}: {report:#}");
        assert_eq!(report["stopped_by_failure"], true, "{limit}");
        let work = step(&report, "work");
        assert_eq!(work["status"], "failed", "{limit}: {work:#}");
        // Past the limit (3, or 10% of the units this run dispatched: those
        // an earlier run made succeed are cached): dispatching stopped
        // within a chunk of it, long before every unit ran.
        let number = |key: &str| work[key].as_u64().unwrap();
        let (failed, not_run) = (number("failed"), number("not_run"));
        let allowed = match limit {
            "3" => 3,
            _ => (number("total") - number("cached")) / 10,
        };
        assert!(failed > allowed && not_run > 0, "{limit}: {work:#}");
        assert_eq!(report["steps"].as_array().unwrap().len(), 2, "`after` never ran");
        let status = f.lake.ok(&["status"]);
        assert!(status.contains("max_failed_units"), "{status}");
    }
    // Under the limit the step completes with its failures.
    let (_, report) = f.run(&pipeline("30"), "1");
    let work = step(&report, "work");
    assert_eq!(work["status"], "completed", "{work:#}");
    assert_eq!(
        (work["failed"].as_u64(), work["not_run"].as_u64()),
        (Some(20), Some(0)),
        "{work:#}"
    );
    // A limit that is neither.
    let file = f.dir.path().join("bad.toml");
    std::fs::write(&file, pipeline("\"lots\"")).unwrap();
    let out = f.lake.run(&["check", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("max_failed_units = \"lots\""), "{err}");
}

/// A listener on 127.0.0.1 that answers `status` to every request and
/// hands each request's method line and body to the test.
fn http_listener(status: u16) -> (String, std::sync::mpsc::Receiver<(String, String)>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let reply =
                format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            reader.get_mut().write_all(reply.as_bytes()).unwrap();
            let _ = tx.send((request.trim().to_owned(), String::from_utf8(body).unwrap()));
        }
    });
    (url, rx)
}

/// Hooks fire once per run with the run's summary: a command on success
/// (the summary on its stdin), a POST on failure; a hook that fails or
/// cannot be reached is logged and the run's outcome stands; a bad hook is
/// refused before anything runs.
#[test]
fn hooks_tell_how_a_run_ended_and_never_change_it() {
    let f = Fixture::new();
    let (url, told) = http_listener(200);
    let pipeline = |fail: bool, on_failure: &str| {
        let work = if fail { "exit 5" } else { COPY };
        format!(
            r#"name = "hooked"
[hooks]
on_success = ["sh", "-c", "cat >> told.jsonl; echo >> told.jsonl"]
on_failure = {on_failure}

[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 3, rows = 2 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", '{work}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#
        )
    };
    let post = format!("{{ url = \"{url}\" }}");
    let (ok, _) = f.run(&pipeline(false, &post), "2");
    assert!(ok);
    let lines = std::fs::read_to_string(f.dir.path().join("told.jsonl")).unwrap();
    let lines: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "once per run: {lines:?}");
    assert_eq!(lines[0]["event"], "success");
    assert_eq!(lines[0]["pipeline"], "hooked");
    assert_eq!(step(&lines[0], "work")["succeeded"], 3, "{:#}", lines[0]);
    assert!(told.try_recv().is_err(), "no failure, no POST");

    let (ok, report) = f.run(&pipeline(true, &post), "2");
    assert!(!ok);
    let (request, body) = told.recv_timeout(Duration::from_secs(30)).expect("the POST");
    assert!(request.starts_with("POST /hook"), "{request}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["event"], "failure");
    assert_eq!(body["pipeline_run_id"], report["pipeline_run_id"]);
    assert_eq!(step(&body, "work")["failed"], 3, "{body:#}");
    assert!(told.try_recv().is_err(), "one POST per run");

    // Hooks that fail: the runs end as they would have.
    let (refusing, _) = http_listener(500);
    let (ok, _) = f.run(&pipeline(true, &format!("{{ url = \"{refusing}\" }}")), "2");
    assert!(!ok, "still the run's own failure");
    let file = f.write(
        "failing.toml",
        &pipeline(false, "[\"sh\", \"-c\", \"exit 9\"]")
            .replace("cat >> told.jsonl; echo >> told.jsonl", "exit 7"),
    );
    let out = f.lake.run(&["run", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a failing hook never fails the run: {err}");
    assert!(err.contains("hook on_success failed") && err.contains("exit status 7"), "{err}");

    // A bad hook is refused by validation.
    let file = f.write("bad.toml", &pipeline(false, "{ url = \"ftp://x\" }"));
    let out = f.lake.run(&["check", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("hooks.on_failure"), "{err}");
}

#[test]
fn ctrl_c_cancels_commits_what_finished_and_a_rerun_continues() {
    let f = Fixture::new();
    let pipeline = format!(
        r#"name = "slow"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 12, rows = 5 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'sleep 0.5; {COPY}']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#
    );
    let file = f.write("pipeline.toml", &pipeline);
    let child = f
        .lake
        .command(&["run", file.to_str().unwrap(), "--json", "--workers", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until some units of `work` are committed... by watching staging progress.
    let started = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let steps = f.lake.root.join("_staging");
        let work_started = std::fs::read_dir(&steps)
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("2_")))
            .unwrap_or(false);
        if work_started || started.elapsed().as_secs() > 60 {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cancelled"], true, "{report:#}");
    let work = step(&report, "work");
    assert_eq!(work["status"], "cancelled");
    let done = work["succeeded"].as_u64().unwrap();
    assert!((1..12).contains(&done), "{work:#}");
    assert_eq!(
        f.count("SELECT count(*) FROM executions WHERE origin_step_number = 2 AND success") as u64,
        done
    );
    let status = f.lake.ok(&["status"]);
    assert!(status.contains("cancelled"), "{status}");

    let rest = f.run_ok(&pipeline);
    assert_eq!(step(&rest, "work")["dispatched"].as_u64().unwrap(), 12 - done);
    assert_eq!(step(&rest, "work")["outputs"]["t"], 12);
}

#[test]
fn check_reports_validation_errors_with_file_and_line() {
    let f = Fixture::new();
    let file = f.write(
        "bad.toml",
        "name = \"bad\"\n\n[[step]]\nname = \"a\"\noperation = \"generate_data\"\n\n[[step]]\nname = \"b\"\noperation = \"compute_metrics\"\ninputs = { t = \"c.data\" }\n",
    );
    let err = f.lake.fails(&["check", file.to_str().unwrap()]);
    assert!(err.contains("bad.toml:7: step `b`: input `t` refers to unknown step `c`"), "{err}");
    let err = f.lake.fails(&["run", file.to_str().unwrap()]);
    assert!(err.contains("bad.toml:7"), "{err}");
    let good = f.write("good.toml", &linear("mean > 0"));
    let out = f.lake.ok(&["check", good.to_str().unwrap()]);
    assert!(out.contains("is valid") && out.contains("4. keep (filter) → kept: data"), "{out}");
}

#[test]
fn demo_runs_and_a_second_run_is_cached() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["demo", demo.to_str().unwrap(), "--workers", "2"])
        .env_remove("SLUICE_LAKE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("4. keep") && text.contains("Try next") && text.contains("sql"),
        "{text}"
    );
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "--lake",
            demo.join("lake").to_str().unwrap(),
            "run",
            demo.join("pipeline.toml").to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(again.status.success());
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(dispatched(&report), 0);
}

#[test]
fn a_users_binary_runs_its_rust_operation_in_worker_processes() {
    // Built by `make test` (`cargo build --examples`) next to the sluice binary.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_sluice"))
        .with_file_name("examples")
        .join("custom_operation");
    if !exe.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build the examples first: {}",
            exe.display()
        );
        eprintln!("{} is not built (cargo build --examples); skipping", exe.display());
        return;
    }
    let f = Fixture::new();
    for (name, text) in [("a.txt", "one two three"), ("b.txt", "four five")] {
        f.write(name, text);
    }
    let file = f.write(
        "words.toml",
        &format!(
            "name = \"words\"\n[[step]]\nname = \"in\"\noperation = \"ingest_files\"\nparams = {{ paths = \"{}/*.txt\" }}\n\
             [[step]]\nname = \"count\"\noperation = \"word_count\"\ninputs = {{ f = \"in.files\" }}\n",
            f.dir.path().display()
        ),
    );
    // The plain sluice binary does not know the operation...
    let err = f.lake.fails(&["check", file.to_str().unwrap()]);
    assert!(err.contains("unknown operation"), "{err}");
    // ...the user's binary does, in its workers too.
    let out = std::process::Command::new(&exe)
        .args([
            "--lake",
            f.lake.root.to_str().unwrap(),
            "run",
            file.to_str().unwrap(),
            "--json",
            "--workers",
            "2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(step(&report, "count")["outputs"]["counts"], 2);
    let words: BTreeSet<i64> =
        json_lines(&f.lake.ok(&["sql", "--format", "ndjson", "SELECT content FROM metrics"]))
            .iter()
            .map(|r| {
                serde_json::from_str::<Value>(r["content"].as_str().unwrap()).unwrap()["words"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
    assert_eq!(words, BTreeSet::from([2, 3]));
}

/// A step whose units cannot even be dispatched (`sbatch` not on PATH) is
/// recorded failed with the reason: `status` says so at once and still
/// says so once the orchestrator is gone — never `running`, never blamed
/// on a dead orchestrator — and lists the steps after it as not reached.
#[test]
fn a_step_whose_dispatch_fails_is_recorded_failed_with_the_reason() {
    let f = Fixture::new();
    let file = f.write(
        "p.toml",
        "name = \"p\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n\
         params = { tables = 2, rows = 5, seed = 1 }\nbackend = \"slurm\"\n\
         [[step]]\nname = \"stats\"\noperation = \"compute_metrics\"\n\
         inputs = { table = \"gen.data\" }\n",
    );
    let empty = f.dir.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out =
        f.lake.command(&["run", file.to_str().unwrap()]).env("PATH", &empty).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sbatch"), "{stderr}");
    for _ in 0..2 {
        let status: Value = serde_json::from_str(&f.lake.ok(&["status", "--json"])).unwrap();
        let first = &status["steps"][0];
        assert_eq!(first["status"], "failed", "{status:#}");
        assert!(first["error"].as_str().is_some_and(|e| e.contains("sbatch")), "{status:#}");
        assert_ne!(status["status"], "running", "{status:#}");
        // The step after it is listed, not reached, saying why.
        let second = &status["steps"][1];
        assert_eq!(second["name"], "stats", "{status:#}");
        assert_eq!(second["status"], "not_reached", "{status:#}");
        assert_eq!(second["error"], "not reached: step 1 (gen) failed", "{status:#}");
    }
    let runs = f.lake.ok(&["runs"]);
    assert!(!runs.contains("running") && !runs.contains("abandoned"), "{runs}");
}
