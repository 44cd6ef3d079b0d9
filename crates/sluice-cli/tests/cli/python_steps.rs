//! `operation = "python"`: pipeline steps written as Python functions, run
//! by worker processes that keep their interpreters, with the interpreter
//! of the venv `make test` sets up (`SLUICE_PYTHON`, which has polars).

use std::path::PathBuf;

use serde_json::Value;

use super::{Lake, json_lines};
use crate::pipeline::step;

struct Fixture {
    lake: Lake,
    dir: tempfile::TempDir,
    python: PathBuf,
}

impl Fixture {
    fn new() -> Option<Self> {
        let python = super::python()?;
        Some(Fixture { lake: Lake::new(), dir: tempfile::tempdir().unwrap(), python })
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn pipeline(&self, steps: &str) -> PathBuf {
        let text = format!(
            "name = \"py\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = 6, rows = 8, seed = 5 }}\n{}",
            steps.replace("PYTHON", &self.python.display().to_string())
        );
        self.write("pipeline.toml", &text)
    }

    /// `sluice run --json` of `steps` after a 6-table `gen`, from the
    /// fixture's folder with it on PYTHONPATH: (success, report, stderr).
    fn run(&self, steps: &str) -> (bool, Value, String) {
        let file = self.pipeline(steps);
        let out = self
            .lake
            .command(&["run", file.to_str().unwrap(), "--json", "--workers", "2"])
            .current_dir(self.dir.path())
            .env("PYTHONPATH", self.dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("no JSON report ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
        });
        (out.status.success(), report, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn check(&self, steps: &str) -> (bool, String) {
        let file = self.pipeline(steps);
        let out = self
            .lake
            .command(&["check", file.to_str().unwrap()])
            .current_dir(self.dir.path())
            .env("PYTHONPATH", self.dir.path())
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn rows(&self, sql: &str) -> Vec<Value> {
        json_lines(&self.lake.ok(&["sql", "--format", "ndjson", sql]))
    }
}

const FEATURES: &str = r#"
import polars as pl

def stats(table, scale):
    return {"metrics": {"rows": table.height, "x_sum": round(float(table["x"].sum()) * scale, 6)}}
"#;

const SPLIT: &str = r#"
def halves(table):
    n = table.height // 2
    return {"parts": [table.head(n), table.tail(table.height - n)], "sizes": {"n": table.height}}
"#;

const STEPS: &str = r#"
[[step]]
name = "stats"
operation = "python"
function = "features:stats"
python = "PYTHON"
inputs = { table = "gen.data" }
outputs = { metrics = "metric" }
params = { scale = 2 }

[[step]]
name = "split"
operation = "python"
function = "split.py:halves"
python = "PYTHON"
inputs = { table = "gen.data" }
outputs = { parts = "data", sizes = "config" }

[[step]]
name = "pair"
operation = "python"
function = "split.py:count_all"
python = "PYTHON"
inputs = { part = "split.parts" }
outputs = { total = "metric" }
batch = { artifacts_per_unit = 4 }
"#;

const COUNT_ALL: &str = r#"
def count_all(part):
    assert isinstance(part, list), type(part)
    return {"total": {"rows": sum(p.height for p in part), "tables": len(part)}}
"#;

#[test]
fn python_steps_run_fan_out_are_cached_and_an_edited_module_reruns_its_steps() {
    let Some(f) = Fixture::new() else { return };
    f.write("features.py", FEATURES);
    f.write("split.py", &format!("{SPLIT}{COUNT_ALL}"));
    let (ok, first, stderr) = f.run(STEPS);
    assert!(ok, "{first:#}\n{stderr}");
    assert_eq!(step(&first, "stats")["outputs"]["metrics"], 6);
    assert_eq!(step(&first, "split")["outputs"]["parts"], 12, "each unit returned a list of two");
    assert_eq!(step(&first, "split")["outputs"]["sizes"], 1, "equal configs are one artifact");
    // 12 parts, 4 per unit: each unit got its role as a list.
    assert_eq!(step(&first, "pair")["total"], 3);
    // Every unit saw 4 halves of 4 rows: one total, stored once.
    let totals = f.rows("SELECT content FROM metrics WHERE origin_step_number = 4");
    assert_eq!(totals.len(), 1, "{totals:?}");
    let content: Value = serde_json::from_str(totals[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, serde_json::json!({"rows": 16, "tables": 4}));
    // The function saw each table and its params: the sums are Polars' own.
    let metrics = f.rows("SELECT content FROM metrics WHERE origin_step_number = 2");
    for m in &metrics {
        let content: Value = serde_json::from_str(m["content"].as_str().unwrap()).unwrap();
        assert_eq!(content["rows"], 8, "{content}");
        assert!(content["x_sum"].as_f64().unwrap() > 0.0, "{content}");
    }
    let derived =
        f.rows("SELECT count(*) AS n FROM artifact_edges WHERE target_artifact_type = 'metric'");
    assert!(derived[0]["n"].as_i64().unwrap() >= 6, "outputs derive from the unit's inputs");

    let (ok, again, _) = f.run(STEPS);
    assert!(ok);
    for name in ["stats", "split", "pair"] {
        assert_eq!(step(&again, name)["dispatched"], 0, "{name} is cached: {again:#}");
    }

    // Editing the module of one function reruns that step's units only.
    f.write("features.py", &FEATURES.replace("round(", "1 + round("));
    let (ok, edited, _) = f.run(STEPS);
    assert!(ok);
    assert_eq!(step(&edited, "stats")["dispatched"], 6, "{edited:#}");
    assert_eq!(step(&edited, "split")["dispatched"], 0);
    assert_eq!(step(&edited, "pair")["dispatched"], 0);
    // A param is part of the key too.
    let (ok, rescaled, _) = f.run(&STEPS.replace("scale = 2", "scale = 3"));
    assert!(ok);
    assert_eq!(step(&rescaled, "stats")["dispatched"], 6);
}

#[test]
fn a_unit_that_raises_or_kills_its_interpreter_fails_alone_with_its_traceback() {
    let Some(f) = Fixture::new() else { return };
    f.write(
        "flaky.py",
        r#"
import os, signal

def judge(table, mode):
    if table["x"][0] < 0.3:
        raise ValueError(f"x starts low in a table of {table.height}")
    if mode == "exit" and table["x"][0] > 0.7:
        os._exit(3)
    if mode == "kill" and table["x"][0] > 0.7:
        os.kill(os.getpid(), signal.SIGKILL)
    print("judged a table of", table.height)
    return {"verdicts": {"x0": float(table["x"][0])}}
"#,
    );
    let steps = |mode: &str| {
        format!(
            r#"
[[step]]
name = "judge"
operation = "python"
function = "flaky.py:judge"
python = "PYTHON"
inputs = {{ table = "gen.data" }}
outputs = {{ verdicts = "metric" }}
params = {{ mode = "{mode}" }}
"#
        )
    };
    for mode in ["exit", "kill"] {
        let (ok, report, _) = f.run(&steps(mode));
        assert!(!ok, "failed units make the run fail");
        let judge = step(&report, "judge");
        let failed = judge["failed"].as_u64().unwrap();
        let succeeded = judge["outputs"]["verdicts"].as_u64().unwrap();
        assert!(failed >= 1 && succeeded >= 1, "{report:#}");
        assert_eq!(failed + succeeded, 6, "every other unit kept its result: {report:#}");
        let errors = f.rows(&format!(
            "SELECT error, tool_output FROM executions WHERE NOT success AND origin_step_number = 2 \
             AND error LIKE '%{}%'",
            if mode == "exit" { "exit status 3" } else { "signal 9" }
        ));
        assert!(!errors.is_empty(), "{mode}: a unit that killed its interpreter failed alone");
        assert!(
            errors[0]["error"].as_str().unwrap().contains("killed its interpreter"),
            "{errors:?}"
        );
    }
    let raised = f.rows(
        "SELECT error, tool_output FROM executions WHERE NOT success AND error LIKE '%ValueError%'",
    );
    assert!(!raised.is_empty());
    let error = raised[0]["error"].as_str().unwrap();
    assert!(
        error.contains("step `judge`")
            && error.contains("raised ValueError: x starts low")
            && error.contains("Traceback (most recent call last)")
            && error.contains("flaky.py\", line 6, in judge"),
        "the traceback is stored, from the user's code: {error}"
    );
    assert!(!error.contains("<string>"), "no frame of the worker's own: {error}");
    let status = f.lake.ok(&["status"]);
    assert!(status.contains("x starts low") && status.contains("Traceback"), "{status}");
    let printed =
        f.rows("SELECT tool_output FROM executions WHERE success AND origin_step_number = 2");
    assert!(
        printed.iter().any(|r| r["tool_output"].as_str().is_some_and(|t| t.contains("judged"))),
        "what the function printed is kept: {printed:?}"
    );
}

#[test]
fn bad_python_steps_are_refused_naming_the_step_the_function_and_what_was_expected() {
    let Some(f) = Fixture::new() else { return };
    f.write(
        "funcs.py",
        r#"
def good(table):
    return {"m": {"n": table.height}}

def wants_more(table, threshold):
    return {"m": {}}

def returns_list(table):
    return [1, 2]

def returns_text_metric(table):
    return {"m": "fine"}

def returns_unknown_role(table):
    return {"extra": {"n": 1}}

def returns_bad_data(table):
    return {"m": {"n": 1}, "d": "not a frame"}

import dataclasses, datetime

@dataclasses.dataclass
class Seen:
    at: datetime.datetime

def returns_a_naive_time(table):
    return {"m": Seen(datetime.datetime(2026, 12, 7, 8, 30))}

not_a_function = 3
"#,
    );
    let step_of = |function: &str, outputs: &str, params: &str| {
        format!(
            r#"
[[step]]
name = "bad"
operation = "python"
function = "{function}"
python = "PYTHON"
inputs = {{ table = "gen.data" }}
outputs = {{ {outputs} }}
{params}
"#
        )
    };
    let refused = [
        (step_of("funcs.py:missing", "m = \"metric\"", ""), "has no `missing`"),
        (step_of("no_such_module:f", "m = \"metric\"", ""), "no module `no_such_module`"),
        (step_of("gone.py:f", "m = \"metric\"", ""), "gone.py"),
        (step_of("funcs.py:not_a_function", "m = \"metric\"", ""), "not a function"),
        (step_of("funcs.py:wants_more", "m = \"metric\"", ""), "needs `threshold`"),
        (
            step_of("funcs.py:good", "m = \"metric\"", "params = { scale = 2 }"),
            "takes (table) but the step gives it `scale`",
        ),
        (step_of("funcs.py:good", "", ""), "declares its outputs"),
        (step_of("funcs:good", "m = \"metric\"", "").replace("function", "functon"), "functon"),
    ];
    for (steps, expected) in &refused {
        let (ok, stderr) = f.check(steps);
        assert!(!ok, "check accepted {steps}");
        assert!(stderr.contains(expected), "{expected:?} not in: {stderr}");
        if *expected != "functon" {
            assert!(stderr.contains("step `bad`"), "names the step: {stderr}");
        }
    }
    assert!(f.check(&step_of("funcs.py:good", "m = \"metric\"", "")).0);
    assert!(f.check(&step_of("funcs:good", "m = \"metric\"", "")).0, "a module on PYTHONPATH");

    let at_the_unit = [
        (
            "funcs.py:returns_list",
            "m = \"metric\"",
            "returned a list; a python step returns a dict",
        ),
        (
            "funcs.py:returns_text_metric",
            "m = \"metric\"",
            "output `m` (metric) takes a dict, a dataclass or a pydantic model, got str",
        ),
        (
            "funcs.py:returns_unknown_role",
            "m = \"metric\"",
            "output role(s) extra the step does not declare",
        ),
        (
            "funcs.py:returns_bad_data",
            "m = \"metric\", d = \"data\"",
            "output `d` (data) takes a polars.DataFrame",
        ),
        (
            "funcs.py:returns_a_naive_time",
            "m = \"metric\"",
            "output `m`, field `at` 2026-12-07T08:30:00: a time without a timezone is ambiguous",
        ),
    ];
    for (function, outputs, expected) in at_the_unit {
        let (ok, report, _) = f.run(&step_of(function, outputs, ""));
        assert!(!ok, "{function}");
        let bad = step(&report, "bad");
        assert_eq!(bad["failed"], 6, "{function}: {report:#}");
        let failure = bad["failures"][0][1].as_str().unwrap();
        assert!(
            failure.contains(expected)
                && failure.contains("step `bad`")
                && failure.contains(function),
            "{expected:?} not in: {failure}"
        );
    }
    let committed = f.rows("SELECT count(*) AS n FROM metrics");
    assert_eq!(committed[0]["n"], 0, "nothing of a failed unit is committed");
}
