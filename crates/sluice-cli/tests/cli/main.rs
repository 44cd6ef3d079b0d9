//! End-to-end tests of the `sluice` binary, one fresh lake per test.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod bench;
mod checks;
mod concurrency;
mod crash;
mod docs;
mod hardening;
mod ingest;
mod interleaving;
mod lineage;
mod memory_cgroup;
mod pipeline;
mod protocol;
mod python_steps;
mod restore;
mod retries;
mod scheduling;
mod slurm;
mod store_crash;
mod store_ingest;
mod stores;
mod terminal;
mod ui;

/// How many trials, kills or rounds a kill or race loop runs: `var` when
/// set; otherwise `full` under `SLUICE_TEST_DEPTH=full` (what `.ci/run`
/// sets, so CI tries every guarantee at full depth) and `quick`, a
/// representative depth, for a developer's `make test`.
/// The artifact types of the lake at `root` (its `sluice.toml` read).
pub(crate) fn types_at(root: &Path) -> sluice::registry::TypeRegistry {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(sluice::Lake::types_at(root)).unwrap()
}

/// Wait for racing processes; each must have succeeded in `round`.
pub(crate) fn wait_all_succeed(
    children: impl IntoIterator<Item = std::process::Child>,
    round: u64,
) {
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

pub(crate) fn depth(var: &str, full: u64, quick: u64) -> u64 {
    if let Some(n) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        return n;
    }
    match std::env::var("SLUICE_TEST_DEPTH").as_deref() {
        Ok("full") => full,
        _ => quick,
    }
}

pub(crate) struct Lake {
    _dir: Option<tempfile::TempDir>,
    pub(crate) root: PathBuf,
}

impl Lake {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake");
        Lake { _dir: Some(dir), root }
    }

    /// A handle on a lake another handle owns (for a second thread).
    pub(crate) fn at(root: PathBuf) -> Self {
        Lake { _dir: None, root }
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command.arg("--lake").arg(&self.root).args(args).env_remove("SLUICE_LAKE");
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Run and require success; returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "sluice {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `sluice doctor --json` (plus `args`), whose exit status must say
    /// what its report does: 0 when clean, 1 otherwise.
    pub(crate) fn doctor(&self, args: &[&str]) -> Value {
        let mut all = vec!["doctor", "--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("doctor: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(out.status.success(), report["clean"] == true, "doctor's exit status: {report}");
        report
    }

    /// `sluice sql --format csv SQL`, which must succeed.
    pub(crate) fn csv(&self, sql: &str) -> String {
        self.ok(&["sql", "--format", "csv", sql])
    }

    /// Run with `input` on standard input; returns the output.
    pub(crate) fn run_with_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run and require failure; returns stderr.
    pub(crate) fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "sluice {args:?} should fail");
        String::from_utf8(out.stderr).unwrap()
    }
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn init_put_sql_show_round_trip() {
    let lake = Lake::new();
    let init = lake.ok(&["init"]);
    assert!(init.contains("created   metrics") && init.contains("created   steps"), "{init}");
    let again = lake.ok(&["init"]);
    assert!(!again.contains("created"), "{again}");

    let ids = lake.ok(&[
        "put",
        "--type",
        "metric",
        "--step",
        "2",
        r#"{"b": 1, "a": 2.0}"#,
        r#"{"a": 2, "b": 1}"#,
    ]);
    let ids: Vec<&str> = ids.lines().collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], ids[1], "canonical JSON: same value, same id");

    let rows = lake.ok(&["sql", "--format", "ndjson", "SELECT artifact_id, content FROM metrics"]);
    let rows = json_lines(&rows);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["content"], r#"{"a":2,"b":1}"#);

    let shown = lake.ok(&["show", ids[0]]);
    assert!(
        shown.contains("type      metric")
            && shown.contains("step      2")
            && shown.contains("\"a\": 2"),
        "{shown}"
    );

    let tables: Value = serde_json::from_str(&lake.ok(&["tables", "--json"])).unwrap();
    let metrics = tables.as_array().unwrap().iter().find(|t| t["name"] == "metrics").unwrap();
    assert_eq!(metrics["rows"], 1);
    assert_eq!(metrics["partition_columns"][0], "origin_step_number");

    let csv = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "--as-of",
        "metrics@0",
        "SELECT count(*) AS n FROM metrics",
    ]);
    assert_eq!(csv, "n\n0\n");
}

#[test]
fn errors_are_clear_and_exit_nonzero() {
    let lake = Lake::new();
    let err = lake.fails(&["sql", "SELECT 1"]);
    assert!(err.contains("not found") && err.contains("sluice init"), "{err}");
    lake.ok(&["init"]);
    let err = lake.fails(&["show", "not-an-id"]);
    assert!(err.contains("invalid artifact id `not-an-id`"), "{err}");
    let err = lake.fails(&["show", &"a".repeat(32)]);
    assert!(err.contains("not found in the lake"), "{err}");
    let err = lake.fails(&["put", "--type", "metric", "[1, 2]"]);
    assert!(err.contains("JSON object"), "{err}");
    let err = lake.fails(&["put", "--type", "file_ref", "/definitely/missing/file.bin"]);
    assert!(err.contains("/definitely/missing/file.bin"), "{err}");
    let err = lake.fails(&["sql", "--as-of", "last tuesday", "SELECT 1"]);
    assert!(err.contains("RFC 3339"), "{err}");
    let err = lake.fails(&["put", "--type", "nope", "{}"]);
    assert!(err.contains("unknown artifact type `nope`"), "{err}");
}

#[test]
fn declared_type_via_sluice_toml_and_types_listing() {
    let lake = Lake::new();
    std::fs::create_dir_all(&lake.root).unwrap();
    std::fs::write(
        lake.root.join("sluice.toml"),
        "[[artifact_type]]\nkey = \"sample\"\ntable = \"artifacts/samples\"\n\
         columns = [{ name = \"name\", type = \"string\" }, { name = \"mass\", type = \"float64\", nullable = true }]\n",
    )
    .unwrap();
    let init = lake.ok(&["init"]);
    assert!(init.contains("created   samples"), "{init}");
    let types = lake.ok(&["types"]);
    assert!(
        types.contains("sample")
            && types.contains("artifacts/samples")
            && types.contains("mass:float64?"),
        "{types}"
    );
    let id = lake.ok(&["put", "--type", "sample", "--step", "1", r#"{"name": "s1", "mass": 1.5}"#]);
    let rows = lake.csv("SELECT name, mass FROM samples WHERE origin_step_number = 1");
    assert_eq!(rows, "name,mass\ns1,1.5\n");
    let shown = lake.ok(&["show", id.trim()]);
    assert!(shown.contains("type      sample"), "{shown}");
    let err = lake.fails(&["put", "--type", "sample", r#"{"colour": "red"}"#]);
    assert!(err.contains("unknown column `colour`") && err.contains("name, mass"), "{err}");
}

/// The Python interpreter of the venv with deltalake and polars. `make test`
/// (and so CI) sets `SLUICE_PYTHON`; without it the test is skipped locally but
/// fails in CI, where a missing reader must not pass silently.
pub(crate) fn python() -> Option<PathBuf> {
    match std::env::var_os("SLUICE_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some() => {
            panic!("SLUICE_PYTHON is not set in CI: the interop test cannot run (run `make test`)")
        }
        None => {
            eprintln!("skipping: SLUICE_PYTHON not set (use `make test`)");
            None
        }
    }
}

fn delta_schema(table_dir: &Path) -> (Value, Value) {
    let mut logs: Vec<_> = std::fs::read_dir(table_dir.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    logs.sort();
    let mut found = None;
    for log in logs {
        for line in std::fs::read_to_string(log).unwrap().lines() {
            let action: Value = serde_json::from_str(line).unwrap();
            if let Some(meta) = action.get("metaData") {
                let schema: Value =
                    serde_json::from_str(meta["schemaString"].as_str().unwrap()).unwrap();
                found = Some((schema, meta["partitionColumns"].clone()));
            }
        }
    }
    found.unwrap()
}

#[test]
fn python_deltalake_and_polars_read_every_table() {
    let Some(python) = python() else { return };
    let lake = Lake::new();
    std::fs::create_dir_all(&lake.root).unwrap();
    std::fs::write(
        lake.root.join("sluice.toml"),
        "[[artifact_type]]\nkey = \"sample\"\ntable = \"artifacts/samples\"\n\
         columns = [{ name = \"name\", type = \"string\" }, { name = \"ok\", type = \"bool\" }, \
         { name = \"blob\", type = \"binary\", nullable = true }]\n",
    )
    .unwrap();
    lake.ok(&["init"]);
    let work = lake.root.parent().unwrap();
    std::fs::write(work.join("t.csv"), "x,y\n1,2\n").unwrap();
    let csv = work.join("t.csv");
    let csv = csv.to_str().unwrap();
    lake.ok(&[
        "put",
        "-t",
        "metric",
        "--step",
        "1",
        "--metadata",
        r#"{"run": "r1"}"#,
        r#"{"loss": 0.5}"#,
        r#"{"loss": 0.25}"#,
    ]);
    lake.ok(&["put", "-t", "config", "--step", "0", r#"{"lr": [0.1, 0.01]}"#]);
    lake.ok(&["put", "-t", "data", "--step", "2", csv]);
    lake.ok(&["put", "-t", "file_ref", "--step", "2", csv]);
    lake.ok(&["put", "-t", "sample", "--step", "3", r#"{"name": "s", "ok": true, "blob": "xyz"}"#]);
    // Executions, edges and the journal, through real staging and commit.
    lake.ok(&[
        "bench",
        "stage",
        "--executions",
        "6",
        "--workers",
        "1",
        "--fail-fraction",
        "0.3",
        "--seed",
        "4",
    ]);
    lake.ok(&["commit"]);

    let tables: Value = serde_json::from_str(&lake.ok(&["tables", "--json"])).unwrap();
    let mut expected = serde_json::Map::new();
    for table in tables.as_array().unwrap() {
        let name = table["name"].as_str().unwrap();
        let path = table["path"].as_str().unwrap();
        let rows =
            json_lines(&lake.ok(&["sql", "--format", "ndjson", &format!("SELECT * FROM {name}")]));
        let (schema, partitions) = delta_schema(&lake.root.join(path));
        expected.insert(
            path.to_owned(),
            serde_json::json!({"schema": schema, "partition_columns": partitions, "rows": rows}),
        );
    }
    assert_eq!(expected.len(), 12, "every table of the lake is checked");
    let expected_path = work.join("expected.json");
    std::fs::write(&expected_path, serde_json::to_string(&Value::Object(expected)).unwrap())
        .unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/read_lake.py");
    let out =
        Command::new(python).arg(script).arg(&lake.root).arg(&expected_path).output().unwrap();
    assert!(
        out.status.success(),
        "python readers disagree:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), 12, "{stdout}");
}

/// A URL sluice keeps no lake at (`gs://`, `https://`; given to `--lake`
/// or `SLUICE_LAKE`) is refused with a message, never taken for a local
/// folder named `gs:`; `file://` URLs are folders. (Lakes in S3 and Azure:
/// `stores.rs`.)
#[test]
fn a_lake_url_sluice_cannot_serve_is_refused_not_taken_for_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    for url in ["gs://b/l", "https://example.org/lake", "ftp://host/lake"] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .current_dir(dir.path())
            .args(["--lake", url, "init"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said = stderr.contains("not supported") || stderr.contains("no place");
        assert!(stderr.contains(url) && said, "{stderr}");
        assert_eq!(stderr.matches(url).count(), 1, "the URL is named once: {stderr}");
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .current_dir(dir.path())
            .env("SLUICE_LAKE", url)
            .args(["status"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was created");
    let url = format!("file://{}", dir.path().join("lake").display());
    let out =
        Command::new(env!("CARGO_BIN_EXE_sluice")).args(["--lake", &url, "init"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        dir.path().join("lake/sluice.toml").exists()
            || dir.path().join("lake/_staging").exists()
            || dir.path().join("lake").is_dir()
    );
}

/// Each cause of an error is said once, in words (no `ParserError("…")`,
/// no "caused by" copies), and a misspelt table or type names the nearest.
#[test]
fn errors_say_each_cause_once_and_suggest_the_nearest_name() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let stderr = lake.fails(&["sql", "SELEC 1"]);
    assert_eq!(
        stderr,
        "error: SQL syntax: Expected: an SQL statement, found: SELEC at Line: 1, Column: 1\n"
    );
    let stderr = lake.fails(&["sql", "SELECT * FROM metric"]);
    assert_eq!(
        stderr,
        "error: no table named `metric` (did you mean `metrics`?). Help: `sluice tables` lists them\n"
    );
    let stderr = lake.fails(&["sql", "SELECT nope FROM metrics"]);
    assert_eq!(stderr.matches("Valid fields").count(), 1, "{stderr}");
    assert!(!stderr.contains("caused by"), "{stderr}");
    let stderr = lake.fails(&["put", "--type", "metrc", "{\"x\": 1}"]);
    assert_eq!(stderr.matches("metrc").count(), 1, "{stderr}");
    assert!(stderr.contains("(did you mean `metric`?)"), "{stderr}");
    // Types in the words of sluice's schemas, not Arrow's names.
    let stderr = lake.fails(&["sql", "SELECT 'a' + 1"]);
    assert_eq!(
        stderr,
        "error: SQL: Cannot coerce arithmetic expression string + int64 to valid types\n"
    );
}

/// `doctor` exits 1 when it finds a problem and 0 when the lake is clean,
/// so it can gate cron jobs and CI; `--repair` exits 1 while anything it
/// could not repair remains, and says what.
#[test]
fn doctor_exit_status_says_whether_the_lake_is_clean() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    lake.ok(&["put", "--type", "metric", "{\"loss\": 0.5}"]);
    let clean = lake.doctor(&[]);
    assert!(clean["clean"] == true);
    // It says where the lake lives (a local filesystem here: no lock note).
    let location = &clean["location"];
    assert!(location["filesystem"].as_str().is_some_and(|f| !f.is_empty()), "{clean}");
    assert!(location["host_local_locks"].is_null(), "{clean}");
    let text = lake.ok(&["doctor"]);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("lake: {}", lake.root.display())), "{text}");
    let metrics = lake.root.join("artifacts/metrics");
    let lost =
        walk_files(&metrics).into_iter().find(|p| p.extension().is_some_and(|e| e == "parquet"));
    std::fs::remove_file(lost.expect("a metrics data file")).unwrap();
    let stderr = lake.fails(&["doctor"]);
    assert!(stderr.contains("not clean") && stderr.contains("--repair"), "{stderr}");
    assert!(lake.doctor(&[])["clean"] == false);
    // The repair drops the reference; the index row whose content is gone
    // cannot be repaired, so it is reported and the status stays 1.
    let repaired = lake.doctor(&["--repair"]);
    assert_eq!(
        repaired["repaired"]["integrity"]["references_dropped"]["metrics"].as_array().map(Vec::len),
        Some(1),
        "{repaired}"
    );
    assert!(repaired["clean"] == false, "{repaired}");
    assert_eq!(repaired["integrity"]["index_without_content"]["metrics"], 1, "{repaired}");
    let stderr = lake.fails(&["doctor", "--repair"]);
    assert!(stderr.contains("not clean after the repair"), "{stderr}");
}

fn walk_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !entry.file_name().to_string_lossy().starts_with('_') {
            out.extend(walk_files(&path));
        } else if path.is_file() {
            out.push(path);
        }
    }
    out
}

/// An empty result keeps its columns (a header and "(0 rows)"; the CSV
/// header line), `SHOW TABLES` lists every lake table, and a statement
/// whose effect would vanish with the query is refused with the reason.
#[test]
fn sql_keeps_columns_of_empty_results_lists_tables_and_refuses_ddl() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let table = lake.ok(&["sql", "SELECT artifact_id, extension FROM metrics WHERE 1 = 0"]);
    assert!(table.contains("| artifact_id | extension |"), "{table}");
    assert!(table.trim_end().ends_with("(0 rows)"), "{table}");
    let csv = lake.csv("SELECT artifact_id, extension FROM metrics WHERE 1 = 0");
    assert_eq!(csv, "artifact_id,extension\n");
    let json =
        lake.ok(&["sql", "--format", "ndjson", "SELECT artifact_id FROM metrics WHERE 1 = 0"]);
    assert_eq!(json.trim(), "", "no rows, no JSON lines: {json}");
    let tables = lake.csv(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
    );
    for name in ["commits", "executions", "index", "metrics", "steps"] {
        assert!(tables.lines().any(|l| l == name), "{name} missing: {tables}");
    }
    assert!(lake.ok(&["sql", "SHOW TABLES"]).contains("| metrics "));
    for (statement, said) in [
        ("CREATE TABLE t AS SELECT 1 AS x", "`CREATE TABLE` is refused"),
        ("INSERT INTO metrics SELECT * FROM metrics", "`INSERT INTO` is refused"),
    ] {
        let stderr = lake.fails(&["sql", statement]);
        assert!(stderr.contains(said), "{stderr}");
    }
}

/// `--version` names the revision and the build profile; a `--format`
/// sluice does not write exits 2 and lists the ones it does.
#[test]
fn version_names_the_build_and_bad_formats_list_the_choices() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice")).arg("--version").output().unwrap();
    let version = String::from_utf8(out.stdout).unwrap();
    assert!(version.starts_with(&format!("sluice {} (", env!("CARGO_PKG_VERSION"))), "{version}");
    assert!(version.trim_end().ends_with(" build)"), "{version}");
    let lake = Lake::new();
    for args in [
        vec!["sql", "--format", "xml", "SELECT 1"],
        vec!["graph", "--format", "png"],
        vec!["lineage", "00000000000000000000000000000000", "--format", "svg"],
    ] {
        let out = lake.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("possible values"), "{stderr}");
    }
}

/// `sluice check` of a valid pipeline whose `command` program this machine
/// lacks says so as a warning (the nodes that run it may have it) and
/// still exits 0.
#[test]
fn check_warns_of_a_command_program_not_on_path() {
    let lake = Lake::new();
    let file = lake.root.with_file_name("p.toml");
    std::fs::write(
        &file,
        "name = \"t\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n\
         [[step]]\nname = \"c\"\noperation = \"command\"\ninputs = { t = \"gen.data\" }\n\
         outputs = { o = \"metric\" }\ncommand = [\"no-such-program-sluice\", \"x\"]\n",
    )
    .unwrap();
    let out = lake.run(&["check", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("is valid"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        "warning: step `c`: program `no-such-program-sluice` is not on PATH here (fine if the nodes that run it have it)\n"
    );
}

/// `put -` reads the JSON on standard input: one document, or one per line
/// (`jq -c … | sluice put --type metric -`).
#[test]
fn put_reads_json_lines_from_standard_input() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    for (input, expected) in
        [("{\"a\": 1}\n{\"a\": 2}\n\n{\"a\": 3}\n", 3), ("{\n  \"b\": 1\n}\n", 1)]
    {
        let out = lake.run_with_stdin(&["put", "--type", "metric", "-"], input);
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), expected, "{input}");
    }
    assert_eq!(lake.csv("SELECT count(*) AS n FROM metrics"), "n\n4\n");
    let stderr = lake.fails(&["put", "--type", "metric", "/nonexistent"]);
    assert!(
        stderr.starts_with("error: `/nonexistent` is not JSON (give a JSON object, @FILE"),
        "{stderr}"
    );
}

/// Warnings read like cargo's (`warning: …`) and carry no colour codes
/// when stderr is not a terminal.
#[test]
fn warnings_read_like_cargo_s_without_colour_codes_off_a_terminal() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    lake.ok(&["put", "--type", "metric", "{\"a\": 1}"]);
    for file in walk_files(&lake.root.join("artifacts/metrics")) {
        if file.extension().is_some_and(|e| e == "parquet") {
            std::fs::remove_file(file).unwrap();
        }
    }
    let damaged = lake.root.parent().unwrap().join("damaged");
    crash::copy_dir(&lake.root, &damaged);
    let out = lake.run(&["doctor", "--repair"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr.starts_with("warning: dropped references to missing data files table=metrics"),
        "{stderr}"
    );
    // `--color always` colours the label; `-q` says nothing but errors.
    for (flags, expect) in [(&["--color", "always"][..], Some("\u{1b}[")), (&["-q"][..], None)] {
        let copy = lake.root.parent().unwrap().join(format!("copy{}", flags.len()));
        crash::copy_dir(&damaged, &copy);
        let mut args = vec!["doctor", "--repair"];
        args.extend_from_slice(flags);
        let out = Lake::at(copy).run(&args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        match expect {
            Some(code) => {
                assert!(stderr.contains(code) && stderr.contains("warning"), "{stderr:?}")
            }
            None => assert!(!stderr.contains("warning"), "{stderr:?}"),
        }
    }
    assert!(lake.fails(&["-q", "-v", "tables"]).contains("cannot be used with"));
}

#[test]
fn completions_and_manual_pages_cover_every_command() {
    let lake = Lake::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = lake.ok(&["completions", shell]);
        for command in ["ingest", "restore", "doctor", "completions"] {
            assert!(script.contains(command), "{shell} completion lacks {command}");
        }
    }
    let unknown = lake.fails(&["completions", "tcsh"]);
    assert!(unknown.contains("possible values"), "{unknown}");
    let page = lake.ok(&["man"]);
    assert!(page.starts_with(".ie") || page.contains(".TH sluice"), "{page}");
    assert!(page.contains("restore"), "{page}");
    let dir = lake.root.with_file_name("man");
    lake.ok(&["man", "--dir", dir.to_str().unwrap()]);
    for page in ["sluice.1", "sluice-restore.1", "sluice-ingest-run.1"] {
        let text =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    assert!(!lake.root.exists(), "printing help text made a lake");
}

#[test]
fn points_past_a_table_s_head_and_bad_points_say_so_naming_their_option() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    lake.ok(&["put", "--type", "metric", r#"{"a": 1}"#]);
    let past = "error: cannot read table `metrics` as of version 9: its latest version is 1 (`sluice history --table metrics` lists them)\n";
    assert_eq!(lake.fails(&["sql", "--as-of", "metrics@9", "SELECT * FROM metrics"]), past);
    assert_eq!(lake.fails(&["changes", "metrics", "--since", "metrics@9"]), past);
    // At the head: nothing changed since, which is no error, and the empty
    // result keeps the feed's columns.
    let csv = lake.ok(&["changes", "metrics", "--since", "metrics@1", "--format", "csv"]);
    assert!(
        csv.starts_with("artifact_id,") && csv.trim_end().ends_with("_commit_timestamp"),
        "{csv:?}"
    );
    assert_eq!(csv.lines().count(), 1, "{csv:?}");
    let table = lake.ok(&["changes", "metrics", "--since", "metrics@1"]);
    assert!(table.contains("_change_type") && table.contains("(0 rows)"), "{table}");
    assert_eq!(lake.ok(&["changes", "metrics", "--since", "metrics@1", "--format", "ndjson"]), "");
    for (args, flag) in [
        (vec!["changes", "metrics", "--since", "yesterday"], "--since `yesterday`"),
        (vec!["sql", "--as-of", "yesterday", "SELECT 1"], "--as-of `yesterday`"),
        (vec!["restore", "--to", "yesterday"], "--to `yesterday`"),
    ] {
        let stderr = lake.fails(&args);
        assert!(stderr.starts_with(&format!("error: {flag}: it is neither")), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn help_groups_the_commands_and_shows_an_example_per_command() {
    let lake = Lake::new();
    let help = lake.ok(&["--help"]);
    let groups: Vec<&str> = help.lines().filter(|l| l.ends_with(" commands:")).collect();
    assert_eq!(
        groups,
        [
            "Lake commands:",
            "Pipeline commands:",
            "Ingestion commands:",
            "Maintenance commands:",
            "Benchmark commands:",
            "Shell commands:"
        ],
        "{help}"
    );
    for command in ["init", "put", "run", "ingest", "restore", "bench", "completions"] {
        let line = format!("  {command} ");
        assert_eq!(help.lines().filter(|l| l.starts_with(&line)).count(), 1, "{command}: {help}");
        let own = lake.ok(&[command, "--help"]);
        assert!(own.contains("Example:\n  sluice "), "{command}: {own}");
    }
    assert!(!help.contains("__worker"), "{help}");
}

/// `sluice get` writes each built-in type's content as a file of its own;
/// artifact ids take unique prefixes in `get`, `show` and `lineage`.
#[test]
fn get_writes_each_type_s_content_and_ids_take_unique_prefixes() {
    let lake = Lake::new();
    lake.ok(&["init"]);
    let dir = lake.root.parent().unwrap().to_path_buf();
    let put = |args: &[&str]| {
        let mut all = vec!["put"];
        all.extend_from_slice(args);
        lake.ok(&all).trim().to_owned()
    };
    // A metric: its canonical JSON.
    let metric = put(&["--type", "metric", r#"{"b": 2, "a": 1.0}"#]);
    assert_eq!(lake.ok(&["get", &metric]), "{\"a\":1,\"b\":2}\n");
    // Data: the bytes as put.
    let csv = dir.join("results.csv");
    std::fs::write(&csv, "x,y\n1,2\n3,4\n").unwrap();
    let data = put(&["--type", "data", "--step", "1", csv.to_str().unwrap()]);
    let copy = dir.join("copy.csv");
    lake.ok(&["get", &data[..8], "-o", copy.to_str().unwrap()]);
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&csv).unwrap());
    // A file reference: the file, checked against its hash.
    let scan = dir.join("scan.bin");
    std::fs::write(&scan, [0u8, 1, 2, 255]).unwrap();
    let file_ref = put(&["--type", "file_ref", scan.to_str().unwrap()]);
    let fetched = dir.join("fetched.bin");
    lake.ok(&["get", &file_ref, "--output", fetched.to_str().unwrap()]);
    assert_eq!(std::fs::read(&fetched).unwrap(), [0u8, 1, 2, 255]);
    std::fs::write(&scan, [9u8]).unwrap();
    let changed = dir.join("changed.bin");
    let stderr = lake.fails(&["get", &file_ref, "-o", changed.to_str().unwrap()]);
    assert!(stderr.contains("scan.bin: the file changed since artifact"), "{stderr}");
    assert!(!changed.exists(), "no half file is left");
    assert!(
        std::fs::read_dir(&dir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("sluice-get")),
        "no temporary file is left"
    );

    // Prefixes: unique ones name their artifact (any case), others say why.
    assert!(lake.ok(&["show", &metric[..6]]).contains(&metric));
    assert!(lake.ok(&["show", &metric[..6].to_uppercase()]).contains(&metric));
    assert!(lake.ok(&["lineage", &data[..10]]).contains(&data));
    let stderr = lake.fails(&["show", "abc"]);
    assert!(stderr.contains("or a unique prefix of at least 4"), "{stderr}");
    let missing: Vec<String> = ["0000", "ffff"]
        .iter()
        .filter(|p| ![&metric, &data, &file_ref].iter().any(|id| id.starts_with(**p)))
        .map(|p| p.to_string())
        .collect();
    if let Some(prefix) = missing.first() {
        let stderr = lake.fails(&["get", prefix]);
        assert!(stderr.contains(&format!("artifact `{prefix}` not found")), "{stderr}");
    }
    // 1000 metrics: some two share their first four hex digits (ids are
    // deterministic, so this holds every run).
    let lines: String = (0..1000).map(|i| format!("{{\"i\": {i}}}\n")).collect();
    let out = lake.run_with_stdin(&["put", "--type", "metric", "-"], &lines);
    assert!(out.status.success());
    let ids: Vec<String> =
        String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
    let mut by_prefix: std::collections::BTreeMap<&str, Vec<&String>> = Default::default();
    let earlier = [metric.clone(), data.clone(), file_ref.clone()];
    for id in ids.iter().chain(&earlier) {
        by_prefix.entry(&id[..4]).or_default().push(id);
    }
    let (prefix, shared) = by_prefix.iter().find(|(_, v)| v.len() > 1).expect("a shared prefix");
    let stderr = lake.fails(&["get", prefix]);
    assert!(
        stderr.starts_with(&format!(
            "error: artifact id prefix `{prefix}` matches {} artifacts (",
            shared.len()
        )) && shared.iter().all(|id| stderr.contains(id.as_str()))
            && stderr.contains("give more of the id"),
        "{stderr}"
    );
}
