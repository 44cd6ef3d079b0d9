//! The SLURM backend on a real single-node SLURM (`scripts/slurm.sh up`,
//! which `.ci/run` runs). Without SLURM these tests fail in CI (`CI` set) and
//! are skipped with a note elsewhere.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Lake;
use crate::pipeline::step;

pub(crate) fn slurm_available() -> bool {
    let up = std::process::Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the SLURM tests: start SLURM with `bash scripts/slurm.sh up`"
        );
        eprintln!("SLURM is not running here; skipping (bash scripts/slurm.sh up starts it)");
    }
    up
}

/// Write `text` as `dir/pipeline.toml` and run it: the process's output and
/// its JSON report.
fn run_file(lake: &Lake, dir: &Path, text: &str) -> (std::process::Output, Value) {
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    let out = lake.run(&["run", file.to_str().unwrap(), "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out, report)
}

/// Start `sluice run --json FILE` and wait until a task made `marker`:
/// the run's process and when it was started.
fn spawn_until(lake: &Lake, file: &Path, marker: &Path) -> (std::process::Child, Instant) {
    let child = lake
        .command(&["run", file.to_str().unwrap(), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !marker.exists() {
        assert!(started.elapsed() < Duration::from_secs(240), "no task started");
        std::thread::sleep(Duration::from_millis(200));
    }
    (child, started)
}

/// A pipeline of `tables` generated tables, then a `command` step `step`
/// on SLURM that runs `script` on each (table in `inputs/t/`, copies out
/// to `outputs/t/`), with more of the step's `settings`.
fn after_gen(pipeline: &str, tables: u32, step: &str, script: &str, settings: &str) -> String {
    format!(
        r#"name = "{pipeline}"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = {tables}, rows = 5 }}

[[step]]
name = "{step}"
operation = "command"
command = ["sh", "-c", '''{script}''']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
backend = "slurm"
{settings}
"#
    )
}

fn pipeline(dir: &Path, marker: &Path) -> String {
    format!(
        r#"name = "on-slurm"
backend = "slurm"

[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 6, rows = 20 }}
batch = {{ units_per_worker = 2 }}

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", '''
if [ -e inputs/t/table_0001.csv ]; then echo "table 1 is bad" >&2; exit 4; fi
if [ -e inputs/t/table_0004.csv ] && [ -e {marker} ]; then touch {dir}/killed-task-started; sleep 600; fi
for f in inputs/t/*; do cp "$f" outputs/t/; done
''']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
resources = {{ cpus = 1, memory_gb = 1, time = "00:10:00" }}

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = {{ t = "work.t" }}
backend = "local"
"#,
        marker = marker.display(),
        dir = dir.display(),
    )
}

#[test]
fn a_pipeline_runs_on_slurm_with_a_failing_and_a_killed_task() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("kill-me");
    std::fs::write(&marker, "").unwrap();
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, pipeline(dir.path(), &marker)).unwrap();

    let child = lake
        .command(&["run", file.to_str().unwrap(), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Cancel the array task that hangs, from outside, as an operator would,
    // once it is the only task of the step left in the queue.
    let started = Instant::now();
    let hanging = loop {
        assert!(started.elapsed() < Duration::from_secs(300), "the hanging task never ran alone");
        std::thread::sleep(Duration::from_millis(300));
        if !dir.path().join("killed-task-started").exists() {
            continue;
        }
        let jobs = std::process::Command::new("squeue")
            .args(["-h", "-n", "sluice-work", "-o", "%i"])
            .output()
            .unwrap();
        let queued: Vec<String> = String::from_utf8_lossy(&jobs.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if let [only] = queued.as_slice() {
            break only.clone();
        }
    };
    assert!(std::process::Command::new("scancel").arg(&hanging).status().unwrap().success());

    let out = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(!out.status.success(), "failed units make the run fail");
    let work = step(&report, "work");
    assert_eq!(work["total"], 6);
    assert_eq!(work["succeeded"], 4, "{work:#}");
    assert_eq!(work["failed"], 2, "{work:#}");
    let errors: Vec<&str> =
        work["failures"].as_array().unwrap().iter().map(|f| f[1].as_str().unwrap()).collect();
    assert!(errors.iter().any(|e| e.contains("exit status 4")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("was cancelled") && e.contains("log:")), "{errors:?}");
    let stats = step(&report, "stats");
    assert_eq!(stats["outputs"]["metrics"], 4, "the good results flow on");
    let backends = lake.csv(
        "SELECT DISTINCT compute_backend, worker_id LIKE '%slurm-%' AS in_task \
         FROM executions WHERE origin_step_number = 1",
    );
    assert!(backends.contains("slurm,true"), "{backends}");

    // Fix both problems: a rerun on SLURM submits only the two failed units.
    std::fs::remove_file(&marker).unwrap();
    let fixed = pipeline(dir.path(), &marker).replace("exit 4", "true");
    std::fs::write(&file, fixed).unwrap();
    let again = lake.run(&["run", file.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    let work = step(&report, "work");
    // The command changed, so its units are new work; gen is cached whole.
    assert_eq!(report["steps"][0]["status"], "skipped");
    assert_eq!(work["failed"], 0, "{work:#}");
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
}

#[test]
fn a_task_over_its_time_limit_is_reported_as_timed_out() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let script = "if [ -e inputs/t/table_0001.csv ]; then sleep 600; fi; cp inputs/t/* outputs/t/";
    let settings = "resources = { time = \"00:01:00\" }";
    let (out, report) =
        run_file(&lake, dir.path(), &after_gen("too-slow", 2, "slow", script, settings));
    assert!(!out.status.success(), "a unit over its time limit fails the run");
    let slow = step(&report, "slow");
    assert_eq!(slow["succeeded"], 1, "{slow:#}");
    assert_eq!(slow["failed"], 1, "{slow:#}");
    let error = slow["failures"][0][1].as_str().unwrap();
    assert!(error.contains("timed out") && error.contains("--time"), "{error}");
    let stored = lake.csv("SELECT error FROM executions WHERE NOT success");
    assert!(stored.contains("timed out"), "{stored}");
}

#[test]
fn ctrl_c_cancels_the_running_array() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipeline.toml");
    let script = format!("touch {}/started; sleep 600", dir.path().display());
    std::fs::write(&file, after_gen("interrupted", 3, "hang", &script, "")).unwrap();
    let (child, started) = spawn_until(&lake, &file, &dir.path().join("started"));
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(300), "the run did not stop promptly");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cancelled"], true, "{report:#}");
    let hang = step(&report, "hang");
    assert_eq!(hang["status"], "cancelled", "{hang:#}");
    assert_eq!(hang["not_run"], 3, "{hang:#}");
    let queued = std::process::Command::new("squeue")
        .args(["-h", "-n", "sluice-hang", "-o", "%i"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&queued.stdout).trim().is_empty(), "the array was cancelled");
    let status = lake.ok(&["status"]);
    assert!(status.contains("cancelled"), "{status}");
}

#[test]
fn item8_a_failing_squeue_is_retried_and_never_loses_running_units() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    // A `squeue` that fails like a busy controller for its calls 2 to 7, then
    // answers truly: the array is still running during the failures.
    let shims = dir.path().join("bin");
    std::fs::create_dir_all(&shims).unwrap();
    let real = String::from_utf8(
        std::process::Command::new("sh").args(["-c", "command -v squeue"]).output().unwrap().stdout,
    )
    .unwrap();
    let counter = dir.path().join("squeue-calls");
    let shim = shims.join("squeue");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}\n\
             if [ $n -ge 2 ] && [ $n -le 7 ]; then echo 'squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation' >&2; exit 1; fi\n\
             exec {real} \"$@\"\n",
            c = counter.display(),
            real = real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let file = dir.path().join("pipeline.toml");
    let script = "sleep 4; cp inputs/t/* outputs/t/";
    std::fs::write(&file, after_gen("busy-controller", 3, "work", script, "")).unwrap();
    let path = format!("{}:{}", shims.display(), std::env::var("PATH").unwrap_or_default());
    let out = lake
        .command(&["run", file.to_str().unwrap(), "--json"])
        .env("PATH", path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("squeue failed"), "the failures were reported: {stderr}");
    let calls: u32 = std::fs::read_to_string(&counter).unwrap().trim().parse().unwrap();
    // squeue was asked again after failing (the units were not declared
    // dead on the first failure); the run may end before the shim answers
    // truly again, once every task's result is on disk.
    assert!(calls >= 3, "squeue was retried ({calls} calls)");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let work = step(&report, "work");
    assert_eq!(work["succeeded"], 3, "{work:#}");
    assert_eq!(work["failed"], 0, "{work:#}");
    // No content without its execution: every data artifact of step 2 is an
    // output of a successful execution.
    let orphans = lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT count(*) AS n FROM data WHERE origin_step_number = 2 AND artifact_id NOT IN \
         (SELECT e.artifact_id FROM execution_edges e JOIN executions x ON e.execution_run_id = x.execution_run_id WHERE x.success AND e.direction = 'output')",
    ]);
    assert_eq!(orphans, "n\n0\n");
}

/// Twenty units in two tasks (`units_per_worker = "auto"` under a throttle
/// of 2): a unit that kills its task fails alone with what the task had
/// sealed before it kept, and the units the task never reached fail saying
/// so; a rerun runs exactly those.
#[test]
fn auto_sized_tasks_run_many_units_and_a_killed_task_keeps_what_it_staged() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("kill-me");
    std::fs::write(&marker, "").unwrap();
    let text = |marker: &Path| {
        let script = format!(
            "if [ -e inputs/t/table_0012.csv ]; then sleep 1; fi\n\
             if [ -e inputs/t/table_0013.csv ] && [ -e {} ]; then kill -9 $PPID; sleep 5; fi\n\
             cp inputs/t/* outputs/t/",
            marker.display()
        );
        let settings = "batch = { units_per_worker = \"auto\" }\nresources = { throttle = 2 }";
        after_gen("packed", 20, "packed", &script, settings)
    };
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, text(&marker)).unwrap();
    let out = lake.run(&["run", file.to_str().unwrap(), "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(!out.status.success(), "a killed task fails the run");
    let work = step(&report, "packed");
    assert_eq!(work["total"], 20, "{work:#}");
    // Task 0 ran units 0-9; task 1 sealed 10-12 (unit 12 took over the
    // seal interval), was killed by unit 13 and never reached 14-19.
    assert_eq!(work["succeeded"], 13, "{work:#}");
    assert_eq!(work["failed"], 7, "{work:#}");
    let computed = work["worker_seconds"]["compute"].as_f64().unwrap();
    assert!(computed > 1.0, "the tasks' time is read from their records: {work:#}");
    let errors = lake.csv(
        "SELECT error FROM executions WHERE origin_step_number = 2 AND NOT success ORDER BY error",
    );
    assert_eq!(errors.matches("(while running this unit)").count(), 1, "{errors}");
    assert_eq!(errors.matches("(before running this unit)").count(), 6, "{errors}");
    assert!(errors.contains("SLURM task 1 of job") && errors.contains("log:"), "{errors}");
    let tasks = lake.csv(
        "SELECT count(DISTINCT worker_id) AS n FROM executions \
         WHERE origin_step_number = 2 AND success",
    );
    assert_eq!(tasks, "n\n2\n", "twenty units ran in two array tasks");

    std::fs::remove_file(&marker).unwrap();
    let again = lake.run(&["run", file.to_str().unwrap(), "--json"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    let work = step(&report, "packed");
    assert_eq!(work["dispatched"], 7, "only the failed units run again: {work:#}");
    assert_eq!(work["failed"], 0, "{work:#}");
    let data =
        lake.csv("SELECT count(*) AS n FROM executions WHERE origin_step_number = 2 AND success");
    assert_eq!(data, "n\n20\n");
}

/// A step of more tasks than an array may hold goes in several arrays, one
/// after the other under a throttle; a task of the last array that dies is
/// named with its own job and log.
/// A step on SLURM whose failures pass `max_failed_units` has its arrays
/// cancelled as the orchestrator sees the tasks' records: the units never
/// run are recorded as not run, not failed, and the step fails saying so.
#[test]
fn a_step_past_max_failed_units_has_its_array_cancelled() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let settings = "max_failed_units = 2\nresources = { throttle = 1 }";
    let (out, report) =
        run_file(&lake, dir.path(), &after_gen("broken", 16, "fails", "exit 3", settings));
    assert!(!out.status.success(), "the step fails");
    let fails = step(&report, "fails");
    assert_eq!(fails["status"], "failed", "{fails:#}");
    let (failed, not_run) = (fails["failed"].as_u64().unwrap(), fails["not_run"].as_u64().unwrap());
    assert!(failed > 2 && not_run > 0 && failed + not_run == 16, "{fails:#}");
    let status = lake.ok(&["status"]);
    assert!(status.contains("max_failed_units = 2"), "{status}");
}

#[test]
fn a_step_larger_than_an_array_is_submitted_as_several() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let script = "if [ -e inputs/t/table_0004.csv ]; then kill -9 $PPID; sleep 5; fi; cp inputs/t/* outputs/t/";
    let settings = "resources = { throttle = 1, max_array = 2 }";
    let (out, report) =
        run_file(&lake, dir.path(), &after_gen("arrays", 5, "spread", script, settings));
    assert!(!out.status.success(), "a dead task fails the run");
    let work = step(&report, "spread");
    assert_eq!(work["succeeded"], 4, "{work:#}");
    assert_eq!(work["failed"], 1, "{work:#}");
    // Five tasks in arrays of two, two and one: three job ids in the logs.
    let slurm = lake.root.join("_slurm");
    let step_dir = std::fs::read_dir(&slurm)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("logs").read_dir().is_ok_and(|mut d| d.next().is_some()))
        .expect("the step's task folder");
    let mut jobs: Vec<u64> = std::fs::read_dir(step_dir.join("logs"))
        .unwrap()
        .map(|e| {
            e.unwrap().file_name().to_string_lossy().split('_').next().unwrap().parse().unwrap()
        })
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    let error = work["failures"][0][1].as_str().unwrap();
    let log = error.split("log: ").nth(1).unwrap().split(' ').next().unwrap();
    assert!(error.contains("SLURM task 0 of job"), "the last array's first task: {error}");
    assert!(Path::new(log).exists(), "the named log is the task's own: {error}");
    assert!(log.contains(&format!("{}_0.log", jobs[2])), "{error} vs {jobs:?}");
}

#[test]
fn python_steps_run_in_array_tasks_and_a_raising_unit_fails_alone() {
    if !slurm_available() {
        return;
    }
    let Some(python) = super::python() else { return };
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("feats.py"),
        "def stats(table):\n    if table['x'][0] < 0.3:\n        raise ValueError('low start')\n    return {'m': {'rows': table.height, 'x0': float(table['x'][0])}}\n",
    )
    .unwrap();
    let text = format!(
        r#"name = "py-slurm"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 6, rows = 8, seed = 5 }}

[[step]]
name = "stats"
operation = "python"
function = "feats.py:stats"
python = "{python}"
inputs = {{ table = "gen.data" }}
outputs = {{ m = "metric" }}
backend = "slurm"
batch = {{ units_per_worker = 3 }}
"#,
        python = python.display()
    );
    let (out, report) = run_file(&lake, dir.path(), &text);
    assert!(!out.status.success(), "a raising unit fails the run");
    let stats = step(&report, "stats");
    let (ok, failed) = (stats["succeeded"].as_u64().unwrap(), stats["failed"].as_u64().unwrap());
    assert!(ok >= 1 && failed >= 1 && ok + failed == 6, "{stats:#}");
    let backends =
        lake.csv("SELECT DISTINCT compute_backend FROM executions WHERE operation_name = 'python'");
    assert_eq!(backends.trim(), "compute_backend\nslurm");
    let errors = lake.csv("SELECT error FROM executions WHERE NOT success");
    assert!(
        errors.contains("raised ValueError: low start") && errors.contains("feats.py"),
        "{errors}"
    );
    assert_eq!(
        lake.csv("SELECT count(*) AS n FROM metrics").trim(),
        format!("n\n{ok}"),
        "every other unit of a task kept its result"
    );
}

/// Retries on SLURM: each retry round is one new array of only the units
/// that failed, under the step's throttle; a unit that fails twice keeps
/// three attempt rows and one success; a task that dies (its units lost)
/// is retried under `retry_on = ["lost"]`.
#[test]
fn failed_units_are_resubmitted_as_one_array_of_just_them() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts");
    std::fs::create_dir_all(&counts).unwrap();
    // Tables 0 and 2 fail twice with exit 3; 1 and 3 succeed at once.
    let script = format!(
        "f=$(ls inputs/t); c={}/$f; n=$(cat \"$c\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$c\"; \
         case $f in *[02].csv) [ $n -le 2 ] && exit 3;; esac; cp inputs/t/$f outputs/t/$f",
        counts.display()
    );
    let settings = "retries = 2\nretry_on = [3]\nresources = { throttle = 1 }\nbatch = { units_per_worker = 1 }";
    let (out, report) =
        run_file(&lake, dir.path(), &after_gen("retried", 4, "flaky", &script, settings));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let work = step(&report, "flaky");
    assert_eq!(
        (work["succeeded"].as_u64(), work["failed"].as_u64()),
        (Some(4), Some(0)),
        "{work:#}"
    );
    let rounds = work["retries"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{work:#}");
    assert!(rounds.iter().all(|r| r["units"] == 2 && r["reasons"]["exit:3"] == 2), "{work:#}");
    // Each retry round is an array of its own holding just the failed units,
    // submitted with the step's throttle.
    let run = work["step_run_id"].as_str().unwrap();
    for attempt in [2, 3] {
        let round = lake.root.join("_slurm").join(format!("{run}-attempt{attempt}"));
        let units = std::fs::read_to_string(round.join("units.jsonl")).unwrap();
        assert_eq!(units.lines().count(), 2, "attempt {attempt}");
        let log = std::fs::read_dir(round.join("logs")).unwrap().next().unwrap().unwrap();
        let job = log.file_name().to_string_lossy().split('_').next().unwrap().to_owned();
        let shown = std::process::Command::new("scontrol")
            .args(["-o", "show", "job", &job])
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.contains("ArrayTaskThrottle=1"), "attempt {attempt}: {shown}");
    }
    let rows = lake.csv(
        "SELECT count(*) AS attempts, sum(CAST(success AS INT)) AS ok FROM executions \
         WHERE origin_step_number = 2",
    );
    assert_eq!(rows, "attempts,ok\n8,4\n", "two units × three attempts, two × one");
    let status = lake.ok(&["status"]);
    assert!(status.contains("retried 2 units as attempt 3"), "{status}");

    // A task that dies loses its unit: retried when `lost` is a condition.
    let lake = Lake::new();
    let script = format!(
        "c={}/killed; if [ ! -e $c ]; then touch $c; kill -9 $PPID; sleep 5; fi; cp inputs/t/* outputs/t/",
        counts.display()
    );
    let settings = "retries = 1\nretry_on = [\"lost\"]\nbatch = { units_per_worker = 1 }";
    let (out, report) =
        run_file(&lake, dir.path(), &after_gen("lost", 1, "dies", &script, settings));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let work = step(&report, "dies");
    assert_eq!(work["retries"][0]["reasons"]["lost"], 1, "{work:#}");
    let failure =
        lake.csv("SELECT error FROM executions WHERE origin_step_number = 2 AND NOT success");
    assert!(failure.contains("SLURM task 0 of job"), "{failure}");
}

/// A task the scheduler preempts (a job of the higher-tier partition
/// `urgent` takes the node; `PreemptMode=CANCEL`, as `scripts/slurm.sh`
/// configures) fails its unit as `preempted`, read from SLURM's job record,
/// and `retry_on = ["preempted"]` runs it again.
#[test]
fn a_preempted_task_is_retried() {
    if !slurm_available() {
        return;
    }
    let lake = Lake::new();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!(
        "if [ ! -e {0} ]; then touch {0}; sleep 120; fi; cp inputs/t/* outputs/t/",
        started.display()
    );
    let settings = "retries = 1\nretry_on = [\"preempted\"]";
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, after_gen("preempted", 1, "long", &script, settings)).unwrap();
    let (child, clock) = spawn_until(&lake, &file, &started);
    let urgent = std::process::Command::new("sbatch")
        .args(["--parsable", "-p", "urgent", "--exclusive", "--wrap", "sleep 1", "-o", "/dev/null"])
        .output()
        .unwrap();
    assert!(urgent.status.success(), "{}", String::from_utf8_lossy(&urgent.stderr));
    let out = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{report:#}");
    let work = step(&report, "long");
    assert_eq!(work["retries"][0]["reasons"]["preempted"], 1, "{work:#}");
    assert!(clock.elapsed() < Duration::from_secs(100), "the first attempt did not run out");
    let failure = lake
        .csv("SELECT error, metadata FROM executions WHERE origin_step_number = 2 AND NOT success");
    assert!(failure.contains("was preempted") && failure.contains("preempted"), "{failure}");
}
