//! `[[check]]`s: SQL over what a step made, gating the steps that read it.

use serde_json::Value;

use super::pipeline::step;
use super::{Lake, json_lines};

/// gen → stats → keep reads gen and stats; `other` reads nothing of them.
fn pipeline(threshold: u32, extra: &str) -> String {
    format!(
        r#"name = "checked"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 3, rows = 20 }}

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = {{ t = "gen.data" }}

[[step]]
name = "other"
operation = "generate_data"
params = {{ tables = 2, rows = 5, seed = 9 }}

[[step]]
name = "keep"
operation = "filter"
inputs = {{ candidates = "gen.data" }}
params = {{ metric = "stats.metrics", where = "mean > -100" }}

[[check]]
name = "enough_rows"
step = "gen"
sql = "SELECT sum(row_count) > {threshold} AS ok, sum(row_count) AS rows FROM new_rows"

[[check]]
name = "small_means"
step = "stats"
sql = "SELECT max(x_mean) < 0.01 FROM new_rows"
severity = "warn"
{extra}
"#
    )
}

fn run(lake: &Lake, dir: &std::path::Path, text: &str) -> (bool, Value) {
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    let out = lake.run(&["run", file.to_str().unwrap(), "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.success(), report)
}

/// A failing `error` check stops exactly the steps that read what it
/// checked (directly or through a stopped step) and the run fails; the
/// other steps run; the checks table holds what was observed; reads with
/// `--require-checks` refuse the checked artifacts until the check, run
/// again alone with a new threshold, passes.
#[test]
fn a_failing_error_check_stops_exactly_the_steps_downstream() {
    let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
    let told = dir.path().join("told.json");
    let hook =
        format!("[hooks]\non_check_failed = [\"sh\", \"-c\", \"cat >> {}\"]\n", told.display());
    let (ok, report) = run(&lake, dir.path(), &pipeline(1000, &hook));
    assert!(!ok, "{report:#}");
    // The hook was told once, with the run's summary.
    let body: Value = serde_json::from_str(&std::fs::read_to_string(&told).unwrap()).unwrap();
    assert_eq!(body["event"], "check_failed");
    assert_eq!(body["checks"][0]["name"], "enough_rows");
    let ran: Vec<&str> =
        report["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(ran, ["gen", "other"], "{report:#}");
    assert_eq!(step(&report, "other")["status"], "completed");
    let blocked: Vec<&str> =
        report["blocked"].as_array().unwrap().iter().map(|b| b[0].as_str().unwrap()).collect();
    assert_eq!(blocked, ["stats", "keep"], "{report:#}");
    assert!(report["blocked"][0][1].as_str().unwrap().contains("check `enough_rows`"));

    let rows = json_lines(&lake.ok(&[
        "sql",
        "--format",
        "ndjson",
        "SELECT check_name, severity, passed, observed, rows_examined FROM checks",
    ]));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["passed"], false);
    assert_eq!(rows[0]["rows_examined"], 3);
    let observed: Value = serde_json::from_str(rows[0]["observed"].as_str().unwrap()).unwrap();
    assert_eq!(observed["rows"], 60, "three tables of 20 rows");

    let status = lake.ok(&["status"]);
    assert!(status.contains("check `enough_rows` on step `gen` FAILED"), "{status}");
    assert!(status.contains("not reached: blocked: check `enough_rows`"), "{status}");
    assert!(
        status.starts_with("pipeline `checked` run") && status.contains(": failed"),
        "{status}"
    );

    // The checked outputs: refused by a reader that requires checks.
    let made = lake.csv("SELECT artifact_id FROM data WHERE origin_step_number = 1 LIMIT 1");
    let id = made.lines().nth(1).unwrap();
    let refused = lake.fails(&["get", "--require-checks", id]);
    assert!(refused.contains("fails check `enough_rows` on step `gen`"), "{refused}");
    lake.fails(&["show", "--require-checks", id]);
    lake.ok(&["get", id]);
    // `other`'s outputs were never checked.
    let other = lake.csv("SELECT artifact_id FROM data WHERE origin_step_number = 3 LIMIT 1");
    lake.ok(&["show", "--require-checks", other.lines().nth(1).unwrap()]);

    // The check, run again alone with a threshold the data meets, passes
    // and the artifacts may be read; a rerun of the pipeline goes on.
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, pipeline(50, "")).unwrap();
    let again = lake.ok(&["checks", file.to_str().unwrap(), "--name", "enough_rows"]);
    assert!(again.contains("check `enough_rows` on step `gen` passed over 3 rows"), "{again}");
    lake.ok(&["get", "--require-checks", id]);
    let (ok, report) = run(&lake, dir.path(), &pipeline(50, ""));
    assert!(ok, "{report:#}");
    assert_eq!(report["steps"].as_array().unwrap().len(), 4);
    // The warn check failed and only recorded.
    let warned = report["checks"].as_array().unwrap();
    assert!(
        warned.iter().any(|c| c["name"] == "small_means" && c["passed"] == false),
        "{report:#}"
    );
}

/// A check that cannot be evaluated (a column that is not there) fails with
/// the reason; checks that name a missing step or role, or hold no SQL,
/// are refused before anything runs.
#[test]
fn checks_that_cannot_be_judged_fail_and_bad_ones_are_refused() {
    let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
    let extra = "[[check]]\nname = \"typo\"\nstep = \"stats\"\nsql = \"SELECT max(no_such) < 1 FROM new_rows\"\n";
    let (ok, report) = run(&lake, dir.path(), &pipeline(10, extra));
    assert!(!ok, "{report:#}");
    let typo = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "typo").unwrap();
    assert!(typo["error"].as_str().unwrap().contains("no_such"), "{typo}");
    assert_eq!(report["blocked"][0][0], "keep", "{report:#}");

    for (bad, says) in [
        ("step = \"nope\"\nsql = \"SELECT true\"", "no step `nope`"),
        ("step = \"gen\"\nrole = \"x\"\nsql = \"SELECT true\"", "no output role `x`"),
        ("step = \"gen\"\nsql = \"SELEKT\"", "is not SQL"),
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, pipeline(10, &format!("[[check]]\nname = \"bad\"\n{bad}\n")))
            .unwrap();
        let err = lake.fails(&["check", file.to_str().unwrap()]);
        assert!(err.contains(says), "{bad}: {err}");
    }
}
