//! Resource-aware local scheduling, with real worker processes: a step's
//! `resources.cpus` and `resources.memory_gb` bound how many of its units
//! run at once on this machine, a `concurrency_key` bounds it by name, and
//! a unit past its memory is killed as `oom`.

use std::path::Path;

use super::{Lake, json_lines};

/// The most units of one step that ran at once, from the `start end`
/// seconds each unit wrote in `dir`.
fn most_at_once(dir: &Path) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let times: Vec<f64> = text.split_whitespace().map(|t| t.parse().unwrap()).collect();
        edges.push((times[0], 1));
        edges.push((times[1], -1));
    }
    // Ends before starts at the same instant: touching is not overlapping.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// A unit that records when it ran in `dir/<step>/<table>`.
fn timed(dir: &Path, step: &str, resources: &str, extra: &str) -> String {
    let out = dir.join(step);
    std::fs::create_dir_all(&out).unwrap();
    format!(
        r#"
[[step]]
name = "{step}"
operation = "command"
command = ["sh", "-c", 'f=$(ls inputs/t); s=$(date +%s.%N); sleep 0.4; echo "$s $(date +%s.%N)" > {}/$f; cp inputs/t/$f outputs/t/$f']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
resources = {{ {resources} }}
{extra}
"#,
        out.display()
    )
}

fn machine_gib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    kib >> 20
}

/// A run of mixed-size steps under `--workers 4`: a step whose units need
/// more than half the machine's memory runs them one at a time; one whose
/// units need every core, one at a time; small units run side by side; a
/// `concurrency_key` of 2 holds its step to two.
#[test]
fn units_run_only_as_many_at_once_as_fit_the_machine() {
    let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
    let cores = std::thread::available_parallelism().unwrap().get();
    let big = machine_gib() / 2 + 1;
    let mut text = "name = \"mixed\"\n[concurrency]\napi = 2\n\
                    [[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = { tables = 6, rows = 2 }\n"
        .to_owned();
    text.push_str(&timed(dir.path(), "big", &format!("memory_gb = {big}"), ""));
    text.push_str(&timed(dir.path(), "wide", &format!("cpus = {cores}"), ""));
    text.push_str(&timed(dir.path(), "small", "memory_gb = 1", ""));
    text.push_str(&timed(dir.path(), "api", "", "concurrency_key = \"api\""));
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, &text).unwrap();
    let out = lake.run(&["run", file.to_str().unwrap(), "--workers", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        most_at_once(&dir.path().join("big")),
        1,
        "{big} GiB units on a {} GiB machine",
        machine_gib()
    );
    assert_eq!(most_at_once(&dir.path().join("wide")), 1, "{cores}-core units");
    assert!(most_at_once(&dir.path().join("small")) >= 2, "small units side by side");
    assert!(most_at_once(&dir.path().join("api")) <= 2, "the api key's limit");
    // A key no [concurrency] names, and a unit larger than the machine, are refused.
    let unknown = text.replace("concurrency_key = \"api\"", "concurrency_key = \"db\"");
    std::fs::write(&file, unknown).unwrap();
    let err = lake.fails(&["check", file.to_str().unwrap()]);
    assert!(err.contains("concurrency_key = \"db\""), "{err}");
    let huge = text.replace(&format!("memory_gb = {big}"), "memory_gb = 100000");
    std::fs::write(&file, huge).unwrap();
    let err = Lake::new().fails(&["run", file.to_str().unwrap()]);
    assert!(err.contains("resources.memory_gb = 100000"), "{err}");
}

/// A unit whose tool grows past its step's `resources.memory_gb` is killed
/// and fails as `oom`, saying so; `retry_on = ["oom"]` would retry it.
#[test]
fn a_unit_past_its_memory_is_killed_as_oom() {
    let (lake, dir) = (Lake::new(), tempfile::tempdir().unwrap());
    let text = r#"name = "hungry"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 1, rows = 2 }

[[step]]
name = "eat"
operation = "command"
command = ["python3", "-c", "import time; x = b'x' * (1536 << 20); time.sleep(20)"]
inputs = { t = "gen.data" }
outputs = { t = "data" }
resources = { memory_gb = 1 }
"#;
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    let clock = std::time::Instant::now();
    let out = lake.run(&["run", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(clock.elapsed() < std::time::Duration::from_secs(15), "killed, not waited for");
    let rows = json_lines(&lake.ok(&[
        "sql",
        "--format",
        "ndjson",
        "SELECT error, metadata FROM executions WHERE origin_step_number = 2",
    ]));
    assert!(rows[0]["error"].as_str().unwrap().contains("(oom)"), "{rows:?}");
    assert!(rows[0]["metadata"].as_str().unwrap().contains("\"failure\":\"oom\""), "{rows:?}");
}
