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
use std::path::Path;
use std::time::Duration;

use super::{Dispatch, Outcome};
use crate::error::{Error, Result};
use crate::pipeline::config::StepConfig;
use crate::pipeline::worker::UnitJob;
use crate::staging::{ExpectedRun, WaitOptions, WaitOutcome, wait_for_runs};

/// Settings of the SLURM backend.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// How long to wait for sentinels after the array left the queue.
    pub sentinel_timeout: Duration,
    /// Longest pause between `squeue` polls.
    pub max_poll: Duration,
}

impl Default for SlurmOptions {
    fn default() -> Self {
        SlurmOptions { sentinel_timeout: Duration::from_secs(60), max_poll: Duration::from_secs(5) }
    }
}

fn command_output(program: &str, args: &[String]) -> Result<String> {
    let out = std::process::Command::new(program).args(args).output().map_err(|e| {
        Error::operation(
            "slurm",
            format!("cannot run `{program}`: {e} (is SLURM installed and on PATH?)"),
        )
    })?;
    if !out.status.success() {
        return Err(Error::operation(
            "slurm",
            format!(
                "`{program} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
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

/// Submit, wait and collect one step's units.
pub async fn run(
    dispatch: &Dispatch,
    staging_root: &Path,
    step: &StepConfig,
    jobs: Vec<UnitJob>,
    options: &SlurmOptions,
) -> Result<Vec<(String, Outcome)>> {
    let Some(first) = jobs.first() else { return Ok(Vec::new()) };
    let program = dispatch.worker_program.clone().ok_or_else(|| {
        Error::operation("slurm", "the SLURM backend needs a worker program (the sluice binary)")
    })?;
    let dir = dispatch.lake_root.join("_slurm").join(&first.step_run_id);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io(&logs, e))?;
    let units_file = dir.join("units.jsonl");
    let mut text = String::new();
    for job in &jobs {
        text.push_str(&serde_json::to_string(job).map_err(|e| Error::Internal(e.to_string()))?);
        text.push('\n');
    }
    std::fs::write(&units_file, text).map_err(|e| Error::io(&units_file, e))?;
    let per_task = step.batch.units_per_worker.max(1);
    let tasks = jobs.len().div_ceil(per_task);
    let script = dir.join("task.sh");
    let body = format!(
        "#!/bin/sh\n# sluice array task: step `{}`\nexec {} --lake {} __worker --units {} --per-task {} --task \"$SLURM_ARRAY_TASK_ID\"\n",
        step.name,
        quote(&program.display().to_string()),
        quote(&dispatch.lake_root.display().to_string()),
        quote(&units_file.display().to_string()),
        per_task
    );
    std::fs::write(&script, body).map_err(|e| Error::io(&script, e))?;
    let args = sbatch_args(step, tasks, &logs, &script);
    let out = tokio::task::spawn_blocking(move || command_output("sbatch", &args))
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    let job_id = out.trim().split(';').next().unwrap_or_default().to_owned();
    if job_id.is_empty() || !job_id.chars().all(|c| c.is_ascii_digit()) {
        return Err(Error::operation(
            "slurm",
            format!("sbatch printed no job id: `{}`", out.trim()),
        ));
    }
    tracing::info!(job = %job_id, tasks, step = %step.name, "submitted SLURM array");

    // Wait for the array to leave the queue (or cancel it on Ctrl-C).
    let mut pause = Duration::from_millis(200);
    let mut cancelled = false;
    loop {
        if dispatch.cancelled.load(std::sync::atomic::Ordering::SeqCst) && !cancelled {
            let id = job_id.clone();
            let _ = tokio::task::spawn_blocking(move || command_output("scancel", &[id])).await;
            cancelled = true;
        }
        let id = job_id.clone();
        let queued = tokio::task::spawn_blocking(move || {
            command_output("squeue", &["-h".into(), "-j".into(), id, "-o".into(), "%i".into()])
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
        match queued {
            Ok(text) if text.trim().is_empty() => break,
            // squeue fails on a job id it no longer knows: the job is done.
            Err(_) => break,
            Ok(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(options.max_poll);
    }

    // Collect the sentinels.
    let expected: Vec<ExpectedRun> = jobs
        .iter()
        .map(|j| ExpectedRun {
            step: j.step_number,
            operation: j.step.operation.clone(),
            run_id: j.run_id.clone(),
        })
        .collect();
    // One NFS-safe poll for everything; then wait (up to the timeout) only
    // for units whose task completed: a cancelled, failed, timed-out or
    // killed task will not stage anything more.
    let poll = |runs: Vec<ExpectedRun>, timeout: Duration| {
        let root = staging_root.to_path_buf();
        async move {
            let wait = WaitOptions { timeout, ..WaitOptions::default() };
            tokio::task::spawn_blocking(move || wait_for_runs(&root, &runs, wait))
                .await
                .map_err(|e| Error::Internal(e.to_string()))?
        }
    };
    let first = poll(expected, Duration::ZERO).await?;
    let mut results = Vec::new();
    let staged = |ready: &[(ExpectedRun, std::path::PathBuf)],
                  results: &mut Vec<(String, Outcome)>| {
        for (run, _) in ready {
            dispatch.finished(true);
            results.push((run.run_id.clone(), Outcome::Staged));
        }
    };
    staged(&first.ready, &mut results);
    if first.missing.is_empty() || cancelled {
        return Ok(results);
    }
    let id = job_id.clone();
    let states = tokio::task::spawn_blocking(move || task_states(&id))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
    let index: BTreeMap<&str, usize> =
        jobs.iter().enumerate().map(|(i, j)| (j.run_id.as_str(), i)).collect();
    let task_of = |run: &ExpectedRun| index.get(run.run_id.as_str()).map_or(0, |i| i / per_task);
    let (expected_late, dead): (Vec<ExpectedRun>, Vec<ExpectedRun>) = first
        .missing
        .into_iter()
        .partition(|run| states.get(&task_of(run)).is_none_or(|(state, _)| state == "COMPLETED"));
    let late = poll(expected_late, options.sentinel_timeout).await?;
    staged(&late.ready, &mut results);
    let outcome = WaitOutcome {
        missing: late.missing.into_iter().chain(dead).collect(),
        ..WaitOutcome::default()
    };
    for run in &outcome.missing {
        let task = index.get(run.run_id.as_str()).map_or(0, |i| i / per_task);
        let (state, exit) =
            states.get(&task).cloned().unwrap_or_else(|| ("UNKNOWN".into(), String::new()));
        let log = logs.join(format!("{job_id}_{task}.log"));
        dispatch.finished(false);
        results.push((
            run.run_id.clone(),
            Outcome::Lost(describe_state(&job_id, task, &state, &exit, &log)),
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
