//! The SLURM backend: one job array per step.
//!
//! The orchestrator (on a login node, no daemon of ours) writes the step's
//! units to `<lake>/_slurm/<step_run_id>/units.jsonl` and submits
//! `sbatch --array=0-(T-1)[%throttle]`; array task `t` runs the same binary in
//! worker mode on units `t*K .. (t+1)*K` (`units_per_worker = K`). Results
//! travel through staging on the shared filesystem. The orchestrator polls
//! `squeue` until the array has left the queue, then waits for the expected
//! sentinels with the NFS-safe protocol ([`crate::staging::wait_for_runs`]).
//! Units still missing get a failed execution whose error tells cancelled,
//! failed, timed-out and out-of-memory tasks apart (from `scontrol`, or
//! `sacct` when accounting is on) and names the task's log file.
//! On Ctrl-C the array is cancelled with `scancel`; what finished is kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Dispatch, Outcome};
use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;
use crate::pipeline::config::StepConfig;
use crate::pipeline::unit::UnitJob;
use crate::staging::{ExpectedRun, StagingArea, WaitOptions, WaitOutcome, wait::wait_in_area};

/// Settings of the SLURM backend.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// How long to wait for sentinels after the array left the queue.
    pub sentinel_timeout: Duration,
    /// Longest pause between `squeue` polls.
    pub max_poll: Duration,
    /// How long `squeue` may keep failing before the step gives up waiting.
    pub squeue_patience: Duration,
}

impl Default for SlurmOptions {
    fn default() -> Self {
        SlurmOptions {
            sentinel_timeout: Duration::from_secs(60),
            max_poll: Duration::from_secs(5),
            squeue_patience: Duration::from_secs(600),
        }
    }
}

fn command_output(program: &str, args: &[String]) -> Result<String> {
    command_output_with(program, args, None)
}

/// [`command_output`] with one more variable in its environment.
fn command_output_with(
    program: &str,
    args: &[String],
    env: Option<(&str, String)>,
) -> Result<String> {
    let mut command = std::process::Command::new(program);
    command.args(args);
    if let Some((name, value)) = env {
        command.env(name, value);
    }
    let out = command.output().map_err(|e| Error::Slurm {
        command: program.to_owned(),
        message: format!("cannot run it: {e} (is SLURM installed and on PATH?)"),
    })?;
    if !out.status.success() {
        return Err(Error::Slurm {
            command: format!("{program} {}", args.join(" ")),
            message: format!("failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The `sbatch` arguments of a step's array.
pub fn sbatch_args(step: &StepConfig, tasks: usize, log_dir: &Path, script: &Path) -> Vec<String> {
    let r = &step.resources;
    let mut array = format!("0-{}", tasks.saturating_sub(1));
    if let Some(t) = r.throttle {
        array.push_str(&format!("%{t}"));
    }
    let mut args = vec![
        "--parsable".to_owned(),
        format!("--array={array}"),
        format!("--job-name=sluice-{}", step.name),
        format!("--output={}/%A_%a.log", log_dir.display()),
    ];
    if let Some(c) = r.cpus {
        args.push(format!("--cpus-per-task={c}"));
    }
    if let Some(m) = r.memory_gb {
        args.push(format!("--mem={m}G"));
    }
    if let Some(t) = &r.time {
        args.push(format!("--time={t}"));
    }
    if let Some(p) = &r.partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(g) = &r.gres {
        args.push(format!("--gres={g}"));
    }
    args.extend(r.extra.iter().cloned());
    args.push(script.display().to_string());
    args
}

/// A submitted job array: where its files are and how units map to tasks.
struct Array {
    job_id: String,
    logs: PathBuf,
    per_task: usize,
    /// Run id → position in the units file.
    index: BTreeMap<String, usize>,
}

impl Array {
    fn task_of(&self, run_id: &str) -> usize {
        self.index.get(run_id).map_or(0, |i| i / self.per_task)
    }
}

/// Run a blocking SLURM command off the async runtime.
async fn slurm_command(program: &'static str, args: Vec<String>) -> Result<String> {
    tokio::task::spawn_blocking(move || command_output(program, &args))
        .await
        .map_err(|e| Error::task(format!("running `{program}`"), e))?
}

/// Where a step's task files (units, script, logs) go: `<lake>/_slurm/`;
/// for a lake in a store, `.sluice-slurm/` in the folder `sluice run`
/// started in — SLURM starts tasks there too, so the compute nodes see it
/// wherever they see the submitting folder (a shared home or work area).
fn task_dir(lake: &LakeRoot) -> Result<PathBuf> {
    match lake {
        LakeRoot::Local(root) => Ok(root.join("_slurm")),
        LakeRoot::Store(_) => {
            let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
            Ok(here.join(".sluice-slurm"))
        }
    }
}

/// Submit, wait and collect one step's units.
pub async fn run(
    dispatch: &Dispatch,
    staging: &StagingArea,
    step: &StepConfig,
    jobs: &[UnitJob],
    options: &SlurmOptions,
) -> Result<Vec<(String, Outcome)>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let array = submit(dispatch, step, jobs).await?;
    let cancelled = wait_for_queue(dispatch, &array, options).await?;
    collect(dispatch, staging, jobs, &array, cancelled, options).await
}

/// Write the units file and the task script, then `sbatch` the array.
async fn submit(dispatch: &Dispatch, step: &StepConfig, jobs: &[UnitJob]) -> Result<Array> {
    let program = dispatch.worker_program.clone().ok_or_else(|| Error::Slurm {
        command: "sbatch".into(),
        message: "the SLURM backend needs a worker program (the sluice binary)".into(),
    })?;
    let step_run_id = jobs.first().map(|j| j.step_run_id.clone()).unwrap_or_default();
    let dir = task_dir(&dispatch.lake)?.join(step_run_id);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io(&logs, e))?;
    let units_file = dir.join("units.jsonl");
    let mut text = String::new();
    for job in jobs {
        text.push_str(&serde_json::to_string(job).map_err(|e| Error::json("a unit job", e))?);
        text.push('\n');
    }
    std::fs::write(&units_file, text).map_err(|e| Error::io(&units_file, e))?;
    let per_task = step.batch.units_per_worker.max(1);
    let tasks = jobs.len().div_ceil(per_task);
    let script = dir.join("task.sh");
    // A lake in a store reaches the tasks in sbatch's environment, which
    // SLURM hands them (`--export=ALL`, its default): its URL may carry a
    // SAS token, and the script is a file others may read.
    let (lake_arg, env) = match &dispatch.lake {
        LakeRoot::Local(root) => (format!("--lake {} ", quote(&root.display().to_string())), None),
        LakeRoot::Store(store) => {
            (String::new(), Some((crate::lake::LAKE_ENV, store.url().to_string())))
        }
    };
    let body = format!(
        "#!/bin/sh\n# sluice array task: step `{}`\nexec {} {lake_arg}__worker --units {} --per-task {} --task \"$SLURM_ARRAY_TASK_ID\"\n",
        step.name,
        quote(&program.display().to_string()),
        quote(&units_file.display().to_string()),
        per_task
    );
    std::fs::write(&script, body).map_err(|e| Error::io(&script, e))?;
    let args = sbatch_args(step, tasks, &logs, &script);
    let out = tokio::task::spawn_blocking(move || command_output_with("sbatch", &args, env))
        .await
        .map_err(|e| Error::task("running `sbatch`", e))??;
    let job_id = out.trim().split(';').next().unwrap_or_default().to_owned();
    if job_id.is_empty() || !job_id.chars().all(|c| c.is_ascii_digit()) {
        return Err(Error::Slurm {
            command: "sbatch".into(),
            message: format!("printed no job id: `{}`", out.trim()),
        });
    }
    tracing::info!(job = %job_id, tasks, step = %step.name, "submitted SLURM array");
    let index = jobs.iter().enumerate().map(|(i, j)| (j.run_id.clone(), i)).collect();
    Ok(Array { job_id, logs, per_task, index })
}

/// Poll `squeue` until the array has left the queue, cancelling it on
/// Ctrl-C. Returns whether it was cancelled.
///
/// A failing `squeue` (a busy or restarting controller) is never read as
/// "the job is done": it is retried with backoff and reported. The array
/// counts as gone only when `squeue` answers without it, or says it does not
/// know the job id any more, or — after failures — the accounting records
/// (`scontrol`, `sacct`) show every task in a final state. If `squeue` keeps
/// failing longer than [`SlurmOptions::squeue_patience`], the step fails
/// with the error, leaving the array and its staging alone.
async fn wait_for_queue(
    dispatch: &Dispatch,
    array: &Array,
    options: &SlurmOptions,
) -> Result<bool> {
    let mut pause = Duration::from_millis(200);
    let mut cancelled = false;
    let mut failing_since: Option<std::time::Instant> = None;
    let mut failures = 0u32;
    loop {
        if dispatch.cancelled.load(std::sync::atomic::Ordering::SeqCst) && !cancelled {
            let _ = slurm_command("scancel", vec![array.job_id.clone()]).await;
            cancelled = true;
        }
        let args = vec!["-h".into(), "-j".into(), array.job_id.clone(), "-o".into(), "%i".into()];
        match slurm_command("squeue", args).await {
            Ok(text) if text.trim().is_empty() => return Ok(cancelled),
            Ok(_) => {
                failing_since = None;
                failures = 0;
            }
            Err(e) if e.to_string().contains("Invalid job id") => return Ok(cancelled),
            Err(e) => {
                failures += 1;
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if failures == 1 || failures.is_multiple_of(10) {
                    tracing::warn!(
                        job = %array.job_id,
                        "squeue failed ({failures} in a row), retrying: {e}"
                    );
                }
                if failures >= 3 && all_tasks_final(array).await {
                    return Ok(cancelled);
                }
                if since.elapsed() > options.squeue_patience {
                    return Err(Error::Slurm {
                        command: "squeue".into(),
                        message: format!(
                            "kept failing for {:.0}s while job {} was queued or running: {e}. Help: \
                             the array and its staging are left as they are; rerun the pipeline \
                             when the controller answers (finished units are committed then)",
                            since.elapsed().as_secs_f64(),
                            array.job_id
                        ),
                    });
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(options.max_poll);
    }
}

/// Whether the accounting records show every task of the array ended.
async fn all_tasks_final(array: &Array) -> bool {
    let id = array.job_id.clone();
    let tasks = array.index.len().div_ceil(array.per_task);
    let states = tokio::task::spawn_blocking(move || task_states(&id)).await.unwrap_or_default();
    states.len() >= tasks && states.values().all(|(state, _)| is_final(state))
}

/// A SLURM job state from which a task never runs again.
fn is_final(state: &str) -> bool {
    [
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    ]
    .iter()
    .any(|s| state.starts_with(s))
}

/// Collect the sentinels: one NFS-safe poll for everything, then a wait (up
/// to the timeout) only for units whose task completed — a cancelled,
/// failed, timed-out or killed task will not stage anything more. Units
/// still missing are `Lost`, with their task's state and log.
async fn collect(
    dispatch: &Dispatch,
    staging: &StagingArea,
    jobs: &[UnitJob],
    array: &Array,
    cancelled: bool,
    options: &SlurmOptions,
) -> Result<Vec<(String, Outcome)>> {
    let expected: Vec<ExpectedRun> = jobs
        .iter()
        .map(|j| ExpectedRun {
            step: j.step_number,
            operation: j.step.operation.clone(),
            run_id: j.run_id.clone(),
        })
        .collect();
    let poll = |runs: Vec<ExpectedRun>, timeout: Duration| async move {
        wait_in_area(staging, &runs, WaitOptions { timeout, ..WaitOptions::default() }).await
    };
    let mut results = Vec::new();
    let mut staged = |ready: &[(ExpectedRun, PathBuf)]| {
        for (run, _) in ready {
            dispatch.finished(true);
            results.push((run.run_id.clone(), Outcome::Staged));
        }
    };
    let first = poll(expected, Duration::ZERO).await?;
    staged(&first.ready);
    if first.missing.is_empty() || cancelled {
        return Ok(results);
    }
    let id = array.job_id.clone();
    let states = tokio::task::spawn_blocking(move || task_states(&id))
        .await
        .map_err(|e| Error::task("reading SLURM task states", e))?;
    let (expected_late, dead): (Vec<ExpectedRun>, Vec<ExpectedRun>) =
        first.missing.into_iter().partition(|run| {
            states.get(&array.task_of(&run.run_id)).is_none_or(|(state, _)| state == "COMPLETED")
        });
    let late = poll(expected_late, options.sentinel_timeout).await?;
    staged(&late.ready);
    let outcome = WaitOutcome {
        missing: late.missing.into_iter().chain(dead).collect(),
        ..WaitOutcome::default()
    };
    for run in &outcome.missing {
        let task = array.task_of(&run.run_id);
        let (state, exit) =
            states.get(&task).cloned().unwrap_or_else(|| ("UNKNOWN".into(), String::new()));
        let log = array.logs.join(format!("{}_{task}.log", array.job_id));
        dispatch.finished(false);
        results.push((
            run.run_id.clone(),
            Outcome::Lost(describe_state(&array.job_id, task, &state, &exit, &log)),
        ));
    }
    Ok(results)
}

/// A failed task's state as an execution error.
pub fn describe_state(job: &str, task: usize, state: &str, exit: &str, log: &Path) -> String {
    let what = match state {
        s if s.starts_with("CANCELLED") => "was cancelled".to_owned(),
        "TIMEOUT" => "timed out (hit its --time limit)".to_owned(),
        "OUT_OF_MEMORY" => "ran out of memory (hit its --mem limit)".to_owned(),
        "FAILED" => format!("failed (exit code {exit})"),
        "NODE_FAIL" => "lost its node".to_owned(),
        "PREEMPTED" => "was preempted".to_owned(),
        "COMPLETED" => "finished without staging this unit".to_owned(),
        other => format!("ended in state {other}"),
    };
    format!("SLURM task {task} of job {job} {what}; log: {}", log.display())
}

/// Array task → (state, exit code), from `scontrol` (job records stay for
/// MinJobAge after the end) or `sacct`.
fn task_states(job: &str) -> BTreeMap<usize, (String, String)> {
    let mut out = BTreeMap::new();
    if let Ok(text) =
        command_output("scontrol", &["-o".into(), "show".into(), "job".into(), job.into()])
    {
        for line in text.lines() {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            };
            if let (Some(task), Some(state)) =
                (field("ArrayTaskId").and_then(|t| t.parse().ok()), field("JobState"))
            {
                out.insert(
                    task,
                    (state.to_owned(), field("ExitCode").unwrap_or_default().to_owned()),
                );
            }
        }
    }
    if out.is_empty()
        && let Ok(text) = command_output(
            "sacct",
            &[
                "-j".into(),
                job.into(),
                "-n".into(),
                "-P".into(),
                "-X".into(),
                "-o".into(),
                "JobID,State,ExitCode".into(),
            ],
        )
    {
        for line in text.lines() {
            let parts: Vec<&str> = line.split('|').collect();
            if let [id, state, exit] = parts.as_slice()
                && let Some(task) = id.split('_').nth(1).and_then(|t| t.parse().ok())
            {
                let state = state.split_whitespace().next().unwrap_or_default();
                out.insert(task, (state.to_owned(), (*exit).to_owned()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_arguments_carry_resources_and_throttle() {
        let mut step: StepConfig = toml::from_str("name = \"s\"\noperation = \"command\"").unwrap();
        step.resources.cpus = Some(2);
        step.resources.memory_gb = Some(4);
        step.resources.time = Some("00:05:00".into());
        step.resources.throttle = Some(3);
        step.resources.extra = vec!["--exclusive".into()];
        let args = sbatch_args(&step, 10, Path::new("/l"), Path::new("/t.sh"));
        for want in [
            "--array=0-9%3",
            "--cpus-per-task=2",
            "--mem=4G",
            "--time=00:05:00",
            "--exclusive",
            "--output=/l/%A_%a.log",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        assert_eq!(args.last().map(String::as_str), Some("/t.sh"));
    }

    #[test]
    fn states_become_clear_errors() {
        let log = std::path::PathBuf::from("/x.log");
        assert!(
            describe_state("7", 2, "OUT_OF_MEMORY", "0:125", &log)
                .contains("task 2 of job 7 ran out of memory")
        );
        assert!(describe_state("7", 2, "TIMEOUT", "", &log).contains("timed out"));
        assert!(describe_state("7", 2, "CANCELLED+", "", &log).contains("cancelled"));
        assert!(describe_state("7", 2, "FAILED", "3:0", &log).contains("exit code 3:0"));
    }
}
