//! The CLI on a lake in an object store: the moto S3 server and Azurite
//! (both started by `.ci/run`; `bash scripts/moto.sh up`,
//! `bash scripts/azurite.sh up` here), credentials from the environment as
//! users give them. Without an emulator these tests fail in CI and are
//! skipped with a note elsewhere.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

/// A lake URL and the environment that reaches its store.
pub(crate) struct StoreLake {
    pub(crate) url: String,
    env: Vec<(&'static str, String)>,
    pub(crate) cwd: tempfile::TempDir,
}

impl StoreLake {
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command.current_dir(self.cwd.path()).arg("--lake").arg(&self.url).args(args);
        command.env_remove("SLUICE_LAKE").envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// The environment that reaches the store.
    pub(crate) fn env(&self) -> &[(&'static str, String)] {
        &self.env
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "sluice --lake {} {args:?} failed:\n{}",
            self.url,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// Send one plain HTTP request to an emulator; the status code.
fn http(address: &str, request: &str) -> Option<u16> {
    let mut stream =
        TcpStream::connect_timeout(&address.parse().ok()?, Duration::from_secs(2)).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), chrono_free_nanos())
}

fn chrono_free_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

fn skip_or_fail(what: &str, start: &str) -> Option<StoreLake> {
    assert!(std::env::var_os("CI").is_none(), "CI must run the {what} tests: {start}");
    eprintln!("{what} is not running here; skipping ({start} starts it)");
    None
}

/// A new bucket on moto, and the `AWS_*` variables a user would set.
pub(crate) fn moto_lake() -> Option<StoreLake> {
    let port = std::env::var("SLUICE_MOTO_PORT").unwrap_or_else(|_| "5555".into());
    let address = format!("127.0.0.1:{port}");
    let bucket = unique("cli");
    let request = format!(
        "PUT /{bucket} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    match http(&address, &request) {
        Some(200) => {}
        Some(status) => panic!("creating bucket {bucket} on moto: HTTP {status}"),
        None => return skip_or_fail("moto", "bash scripts/moto.sh up"),
    }
    let env = vec![
        ("AWS_ENDPOINT_URL", format!("http://{address}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "sluice".into()),
        ("AWS_SECRET_ACCESS_KEY", "sluice-secret-key".into()),
        ("AWS_REGION", "us-east-1".into()),
    ];
    let cwd = tempfile::tempdir().unwrap();
    Some(StoreLake { url: format!("s3://{bucket}/lakes/cli"), env, cwd })
}

/// A new container on Azurite, and the `AZURE_STORAGE_*` variables.
pub(crate) fn azurite_lake() -> Option<StoreLake> {
    use sluice::ingest::queue::{Credential, EMULATOR_ACCOUNT, EMULATOR_KEY, create_container};
    let address = "127.0.0.1:10000";
    if TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(2)).is_err() {
        return skip_or_fail("Azurite", "bash scripts/azurite.sh up");
    }
    let container = unique("cli");
    let key = Credential::key(EMULATOR_KEY).unwrap();
    let endpoint = format!("http://{address}/{EMULATOR_ACCOUNT}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(create_container(&endpoint, EMULATOR_ACCOUNT, &key, &container)).unwrap();
    let env = vec![("AZURE_STORAGE_USE_EMULATOR", "true".into())];
    let cwd = tempfile::tempdir().unwrap();
    Some(StoreLake { url: format!("az://{container}/lakes/cli"), env, cwd })
}

/// The lake-level commands, one after the other, as a user runs them on a
/// lake in a store: nothing lands on the local disk, every read sees every
/// write, maintenance keeps every row once, a pipeline stages and commits
/// through the store with local workers and with SLURM's, and doctor finds
/// it clean.
fn lake_commands_work_on_the_store(lake: &StoreLake) {
    let init = lake.ok(&["init"]);
    assert!(init.contains("created   metrics") && init.contains(&lake.url), "{init}");
    assert!(!lake.ok(&["init"]).contains("created"), "init is idempotent");

    let ids = lake.ok(&["put", "--type", "metric", "--step", "2", r#"{"loss": 0.5}"#]);
    let more = lake.ok(&["put", "--type", "metric", "--step", "2", r#"{"loss": 0.25}"#]);
    let again = lake.ok(&["put", "--type", "metric", "--step", "2", r#"{"loss": 0.5}"#]);
    assert_eq!(ids, again, "the same content is the same artifact");
    let csv = lake.ok(&["sql", "--format", "csv", "SELECT count(*) AS n FROM metrics"]);
    assert_eq!(csv, "n\n2\n");
    let shown = lake.ok(&["show", more.trim()]);
    assert!(shown.contains("type      metric") && shown.contains("0.25"), "{shown}");
    let got = lake.ok(&["get", ids.trim()]);
    assert!(got.contains("0.5"), "{got}");

    let tables: Value = serde_json::from_str(&lake.ok(&["tables", "--json"])).unwrap();
    let metrics = tables.as_array().unwrap().iter().find(|t| t["name"] == "metrics").unwrap();
    assert_eq!((metrics["rows"].as_u64(), metrics["files"].as_u64()), (Some(2), Some(2)));
    let history = lake.ok(&["history", "--table", "metrics"]);
    assert!(history.lines().count() >= 3, "{history}");

    let compacted: Value =
        serde_json::from_str(&lake.ok(&["compact", "--table", "metrics", "--json"])).unwrap();
    assert_eq!(compacted[0]["files_after"], 1, "{compacted}");
    assert_eq!(lake.ok(&["sql", "--format", "csv", "SELECT count(*) AS n FROM metrics"]), csv);
    lake.ok(&["vacuum"]);
    lake.ok(&["checkpoint"]);
    lake.ok(&["recover"]);
    let doctor: Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert_eq!(doctor["clean"], true, "{doctor}");
    assert!(doctor["location"]["path"].as_str().unwrap().starts_with(&lake.url), "{doctor}");
    assert_eq!(lake.ok(&["sql", "--format", "csv", "SELECT count(*) AS n FROM metrics"]), csv);

    // A pipeline: two worker processes stage straight to the store, the
    // step commits from there, a rerun is cached, lineage and status read it.
    let pipeline = lake.cwd.path().join("p.toml");
    std::fs::write(
        &pipeline,
        r#"name = "p"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 6, rows = 5, seed = 1 }

[[step]]
name = "square"
operation = "command"
command = ["sh", "-c", "for f in inputs/t/*.csv; do awk -F, -v OFS=, 'NR == 1 { print; next } { $2 = $2 * $2; print }' \"$f\" > outputs/t/$(basename $f); done"]
inputs = { t = "gen.data" }
outputs = { t = "data" }
batch = { artifacts_per_unit = 2 }

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "square.t" }

[[step]]
name = "report"
operation = "command"
command = ["sh", "-c", "cat inputs/t/* > outputs/r/report.txt"]
inputs = { t = "square.t" }
outputs = { r = "file_ref" }

[[step]]
name = "readback"
operation = "command"
command = ["sh", "-c", 'echo "{\"bytes\": $(cat inputs/r/* | wc -c)}" > outputs/m/size.json']
inputs = { r = "report.r" }
outputs = { m = "metric" }
"#,
    )
    .unwrap();
    let path = pipeline.to_str().unwrap();
    let report: Value =
        serde_json::from_str(&lake.ok(&["run", path, "--workers", "2", "--json"])).unwrap();
    let dispatched = |report: &Value| -> u64 {
        report["steps"].as_array().unwrap().iter().map(|s| s["dispatched"].as_u64().unwrap()).sum()
    };
    assert_eq!(dispatched(&report), 6 + 3 + 6 + 6 + 6, "{report:#}");
    let csv = |sql: &str| lake.ok(&["sql", "--format", "csv", sql]);
    assert_eq!(csv("SELECT count(*) AS n FROM data"), "n\n12\n");
    assert_eq!(csv("SELECT count(*) AS n FROM metrics WHERE origin_step_number = 3"), "n\n6\n");
    assert_eq!(
        csv("SELECT count(*) AS n, count(DISTINCT execution_spec_id) AS d FROM executions \
             WHERE success"),
        "n,d\n27,27\n",
        "one successful execution per unit"
    );
    // The command's file outputs, all named report.txt, are kept in the
    // store apart (by content), read back by the next command's units and
    // by `get`: each is exactly the table it was made from.
    let refs = csv("SELECT artifact_id, path FROM file_refs ORDER BY path");
    let refs: Vec<(&str, &str)> =
        refs.lines().skip(1).map(|l| l.split_once(',').unwrap()).collect();
    assert_eq!(refs.len(), 6, "{refs:?}");
    let tables: BTreeSet<String> = csv("SELECT artifact_id FROM data WHERE origin_step_number = 2")
        .lines()
        .skip(1)
        .map(|id| lake.ok(&["get", id]))
        .collect();
    let mut kept = BTreeSet::new();
    for (id, path) in &refs {
        assert!(path.starts_with(&format!("{}/files/", lake.url)), "{path}");
        assert!(path.ends_with("/report.txt"), "{path}");
        kept.insert(lake.ok(&["get", id]));
    }
    assert_eq!(kept, tables, "every kept file holds its own table's bytes");
    let again: Value =
        serde_json::from_str(&lake.ok(&["run", path, "--workers", "2", "--json"])).unwrap();
    assert_eq!(dispatched(&again), 0, "a rerun is cached: {again:#}");
    let status = lake.ok(&["status"]);
    assert!(status.contains("succeeded"), "{status}");
    let metric = csv("SELECT artifact_id FROM metrics WHERE origin_step_number = 3 LIMIT 1");
    let metric = metric.lines().nth(1).unwrap();
    let lineage = lake.ok(&["lineage", metric, "--up"]);
    assert!(lineage.contains("gen") || lineage.contains("data"), "{lineage}");
    let doctor: Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert_eq!(doctor["clean"], true, "staging is empty after the run: {doctor}");

    // The SLURM backend: array tasks stage into the store, the lake's URL
    // reaching them in sbatch's environment (never in the task script);
    // the task files go to `.sluice-slurm/` where the run started.
    if crate::slurm::slurm_available() {
        let changed = std::fs::read_to_string(&pipeline).unwrap().replace("seed = 1", "seed = 2");
        std::fs::write(&pipeline, changed).unwrap();
        let report: Value =
            serde_json::from_str(&lake.ok(&["run", path, "--backend", "slurm", "--json"])).unwrap();
        assert_eq!(dispatched(&report), 6 + 3 + 6 + 6 + 6, "{report:#}");
        assert_eq!(csv("SELECT count(*) AS n FROM data"), "n\n24\n");
        let scripts = walk(&lake.cwd.path().join(".sluice-slurm"));
        let script = scripts.iter().find(|p| p.ends_with("task.sh")).expect("a task script");
        let text = std::fs::read_to_string(script).unwrap();
        assert!(!text.contains(&lake.url) && !text.contains("--lake"), "{text}");
    }
    let local: Vec<_> = std::fs::read_dir(lake.cwd.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|name| name != "p.toml" && name != ".sluice-slurm")
        .collect();
    assert!(local.is_empty(), "nothing lands on the local disk: {local:?}");
}

/// Every file below `dir`.
pub(crate) fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

#[test]
fn on_s3_the_lake_commands_work() {
    if let Some(lake) = moto_lake() {
        lake_commands_work_on_the_store(&lake);
    }
}

#[test]
fn on_azure_the_lake_commands_work() {
    if let Some(lake) = azurite_lake() {
        lake_commands_work_on_the_store(&lake);
    }
}

/// Secrets given in the environment never appear in what sluice prints,
/// even when a request fails.
#[test]
fn a_secret_never_appears_in_output_or_errors() {
    let Some(lake) = moto_lake() else { return };
    lake.ok(&["init"]);
    let secret = "sluice-secret-key";
    for args in [&["doctor", "--json"][..], &["tables", "--json"], &["sql", "SELECT * FROM nope"]] {
        let out = lake.run(args);
        let all = [out.stdout, out.stderr].concat();
        assert!(!String::from_utf8_lossy(&all).contains(secret), "{args:?}");
    }
    let wrong = StoreLake {
        url: lake.url.replace("s3://", "s3://no-such-bucket-"),
        env: lake.env.clone(),
        cwd: tempfile::tempdir().unwrap(),
    };
    let out = wrong.run(&["tables"]);
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
}

/// Two writers racing on a store, where there is no lock at all: each
/// round two `sluice put` processes start together, each with a value the
/// other also puts and one of its own. Every value is stored exactly once,
/// with its index row, whatever the interleaving: the only arbiter is the
/// conditional put of each table's next log entry.
fn racing_puts_lose_and_duplicate_nothing(lake: &StoreLake) {
    lake.ok(&["init"]);
    let rounds = crate::depth("SLUICE_STORE_RACE_ROUNDS", 100, 12);
    for round in 0..rounds {
        let racers: Vec<_> = ["a", "b"]
            .iter()
            .map(|who| {
                let shared = format!(r#"{{"round": {round}, "shared": true}}"#);
                let own = format!(r#"{{"round": {round}, "by": "{who}"}}"#);
                lake.command(&["put", "--type", "metric", "--step", "1", &shared, &own])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        crate::wait_all_succeed(racers, round);
    }
    let csv = |sql: &str| lake.ok(&["sql", "--format", "csv", sql]);
    let expected = 3 * rounds;
    assert_eq!(
        csv("SELECT count(*) AS n, count(DISTINCT artifact_id) AS d FROM metrics"),
        format!("n,d\n{expected},{expected}\n"),
        "each value once"
    );
    assert_eq!(
        csv("SELECT count(*) AS n, count(DISTINCT artifact_id) AS d FROM \"index\""),
        format!("n,d\n{expected},{expected}\n"),
        "each index row once"
    );
    let doctor: Value = serde_json::from_str(&lake.ok(&["doctor", "--json"])).unwrap();
    assert_eq!(doctor["clean"], true, "{doctor}");
}

#[test]
fn on_s3_racing_puts_lose_and_duplicate_nothing() {
    if let Some(lake) = moto_lake() {
        racing_puts_lose_and_duplicate_nothing(&lake);
    }
}

#[test]
fn on_azure_racing_puts_lose_and_duplicate_nothing() {
    if let Some(lake) = azurite_lake() {
        racing_puts_lose_and_duplicate_nothing(&lake);
    }
}

/// `put`s SIGKILLed at random moments on a store, then `recover`: every
/// put that finished is there whole, a killed one is there whole or not at
/// all (its content and index commits are finished together), nothing is
/// twice, and the lake takes the next put.
fn killed_puts_recover_exactly(lake: &StoreLake) {
    lake.ok(&["init"]);
    let trials = crate::depth("SLUICE_STORE_KILL_TRIALS", 20, 5);
    let values = |trial: u64| -> Vec<String> {
        (0..20).map(|i| format!(r#"{{"trial": {trial}, "i": {i}}}"#)).collect()
    };
    let mut finished = Vec::new();
    for trial in 0..trials {
        let values = values(trial);
        let mut args = vec!["put", "--type", "metric", "--step", "1"];
        args.extend(values.iter().map(String::as_str));
        // Spread over a put's life here (about 0.5 s) and past it, so that
        // some are killed before, between and after their commits.
        let at = (trial as f64 + crate::crash::fraction(trial)) / trials as f64;
        let delay = Duration::from_millis((at * 1200.0) as u64);
        if !crate::crash::kill_command_after(lake.command(&args), delay) {
            finished.push(trial);
        }
    }
    lake.ok(&["recover"]);
    let csv = |sql: &str| lake.ok(&["sql", "--format", "csv", sql]);
    let mut killed_but_whole = 0;
    for trial in 0..trials {
        let n = csv(&format!(
            "SELECT count(*) AS n FROM metrics m JOIN \"index\" i ON i.artifact_id = m.artifact_id \
             WHERE m.content LIKE '{{\"i\":%,\"trial\":{trial}}}'"
        ));
        let n: u64 = n.lines().nth(1).unwrap().parse().unwrap();
        assert!(n == 0 || n == 20, "trial {trial}: {n} of 20 indexed");
        assert!(n == 20 || !finished.contains(&trial), "trial {trial} finished but is missing");
        killed_but_whole += u64::from(n == 20 && !finished.contains(&trial));
    }
    let mut args = vec!["put", "--type", "metric", "--step", "1"];
    let all: Vec<String> = (0..trials).flat_map(values).collect();
    args.extend(all.iter().map(String::as_str));
    lake.ok(&args);
    let total = 20 * trials;
    for table in ["metrics", "\"index\""] {
        assert_eq!(
            csv(&format!("SELECT count(*) AS n, count(DISTINCT artifact_id) AS d FROM {table}")),
            format!("n,d\n{total},{total}\n"),
            "{table}: every value once"
        );
    }
    let killed = trials - finished.len() as u64;
    eprintln!(
        "{killed} of {trials} puts were killed, {killed_but_whole} of them after their content commit"
    );
}

#[test]
fn on_s3_killed_puts_recover_exactly() {
    if let Some(lake) = moto_lake() {
        killed_puts_recover_exactly(&lake);
    }
}

#[test]
fn on_azure_killed_puts_recover_exactly() {
    if let Some(lake) = azurite_lake() {
        killed_puts_recover_exactly(&lake);
    }
}

/// The requests one `sluice` process made to the store (each is traced at
/// `sluice::requests`), and its stdout.
fn requests_of(lake: &StoreLake, args: &[&str]) -> (usize, String) {
    let out = lake.command(args).env("SLUICE_LOG", "sluice::requests=trace").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice {args:?} failed:\n{stderr}");
    let count = stderr.lines().filter(|l| l.contains("request=")).count();
    (count, String::from_utf8(out.stdout).unwrap())
}

/// A fresh process's `put` and `get` make about as many requests on a
/// lake of 40 puts as on one of 10: what grows with the lake (log entries,
/// key filters) is read from checkpoints and packs. The difference allowed
/// is a pack's worth of key-filter bundles (read until the next pack).
fn fresh_processes_requests_stay_flat(lake: &StoreLake) {
    lake.ok(&["init"]);
    let put = |i: usize| {
        let value = format!(r#"{{"loss": {i}}}"#);
        lake.ok(&["put", "--type", "metric", "--step", &(i % 3).to_string(), &value])
    };
    let measure = |i: usize| {
        let value = format!(r#"{{"loss": {i}}}"#);
        let step = (i % 3).to_string();
        let (put, id) = requests_of(lake, &["put", "--type", "metric", "--step", &step, &value]);
        let (get, got) = requests_of(lake, &["get", id.trim()]);
        assert!(got.contains(&i.to_string()), "{got}");
        (put, get)
    };
    (0..10).for_each(|i| drop(put(i)));
    let (early_put, early_get) = measure(1000);
    (10..40).for_each(|i| drop(put(i)));
    let (late_put, late_get) = measure(2000);
    eprintln!(
        "{}: a fresh put {early_put} then {late_put} requests, a fresh get {early_get} then {late_get}",
        lake.url
    );
    let pack = 8;
    assert!(late_put <= early_put + pack, "put: {early_put} then {late_put}");
    assert!(late_get <= early_get + pack, "get: {early_get} then {late_get}");
    assert!(late_put <= 64 && late_get <= 64, "put {late_put}, get {late_get}");
}

#[test]
fn on_s3_a_fresh_process_s_requests_stay_flat_as_the_lake_grows() {
    if let Some(lake) = moto_lake() {
        fresh_processes_requests_stay_flat(&lake);
    }
}

#[test]
fn on_azure_a_fresh_process_s_requests_stay_flat_as_the_lake_grows() {
    if let Some(lake) = azurite_lake() {
        fresh_processes_requests_stay_flat(&lake);
    }
}

/// `sluice bench put` on a lake in a store states its requests per put
/// and its ratio to the same puts to local disk, measured in the same run.
#[test]
fn on_s3_bench_put_counts_requests_against_local_disk() {
    let Some(lake) = moto_lake() else { return };
    let out = lake.ok(&["bench", "put", "--count", "12", "--json"]);
    let figures: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let named = |name: &str| {
        figures.iter().find(|f| f["figure"] == name).unwrap_or_else(|| panic!("{name}: {out}"))
    };
    let per_put = named("requests per put")["value"].as_f64().unwrap();
    assert!((6.0..=64.0).contains(&per_put), "{per_put} requests per put");
    let median = named("put of one metric to the store, median");
    assert!(median["baseline"].as_str().unwrap().contains("local disk"), "{median}");
    assert!(median["ratio"].as_f64().unwrap() > 0.0, "{median}");
    let get = named("requests of open + get by id (same process)")["value"].as_f64().unwrap();
    assert!(get >= 1.0, "{get}");
}
