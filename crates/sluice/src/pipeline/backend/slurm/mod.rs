//! The SLURM backend: one job array per step (or several, where the
//! cluster caps an array's size).
//!
//! The orchestrator (on a login node, no daemon of ours) writes the step's
//! units to `<lake>/_slurm/<step_run_id>/units.jsonl` and submits
//! `sbatch --array=0-(T-1)[%throttle]`; array task `t` runs the same binary
//! in worker mode on units `t*K .. (t+1)*K` ([`layout`]: `units_per_worker`,
//! a number or `"auto"`). A task stages the units it runs in batches, as a
//! local worker does, and says in its record
//! ([`crate::pipeline::task_records`]) which staged unit holds which units;
//! the rename of that record says it is done.
//! Results travel through staging on the shared filesystem. The
//! orchestrator waits until every task's record is done or the arrays have
//! left the queue (one `squeue` for all of them, polled with backoff), then
//! waits for the staged units the tasks sealed with the NFS-safe protocol
//! ([`crate::staging::wait_for_runs`]). Units still missing get a failed
//! execution whose error tells cancelled, failed, timed-out and
//! out-of-memory tasks apart (from one `scontrol` per array, or `sacct`
//! when accounting is on), says whether the task had run the unit, and
//! names the task's log file. On Ctrl-C the arrays are cancelled with
//! `scancel`; what finished is kept.

mod layout;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use self::layout::Layout;
use super::{Dispatch, Outcome};
use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;
use crate::pipeline::config::{StepConfig, UnitsPerTask};
use crate::pipeline::retry::FailureKind;
use crate::pipeline::task_records as records;
use crate::pipeline::unit::{UnitJob, UnitReport};
use crate::pipeline::worker_program::shell_quote;
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

/// The `sbatch` arguments of one array of a step: `count` tasks, the
/// first of them the step's task `first`, after job `after` when set.
pub fn sbatch_args(
    step: &StepConfig,
    (first, count): (usize, usize),
    after: Option<&str>,
    log_dir: &Path,
    script: &Path,
) -> Vec<String> {
    let r = &step.resources;
    let mut array = format!("0-{}", count.saturating_sub(1));
    if let Some(t) = r.throttle {
        array.push_str(&format!("%{t}"));
    }
    let mut args = vec![
        "--parsable".to_owned(),
        format!("--array={array}"),
        format!("--job-name=sluice-{}", step.name),
        format!("--output={}/%A_%a.log", log_dir.display()),
    ];
    if let Some(job) = after {
        args.push(format!("--dependency=afterany:{job}"));
    }
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
    args.push(first.to_string());
    args
}

/// A step's submitted arrays: where their files are and how units map to
/// tasks and tasks to arrays.
struct Array {
    /// The job id of each array, in [`Layout::arrays`]' order.
    job_ids: Vec<String>,
    layout: Layout,
    /// The step's task folder (units, script, logs, records).
    dir: PathBuf,
    /// Run id → position in the units file.
    index: HashMap<String, usize>,
}

impl Array {
    fn task_of(&self, run_id: &str) -> usize {
        self.index.get(run_id).map_or(0, |i| i / self.layout.per_task)
    }

    fn records(&self) -> PathBuf {
        records::records_dir(&self.dir.join("units.jsonl"))
    }

    /// Task `task`'s job id, index in its array and log file.
    fn task_job(&self, task: usize) -> (&str, usize, PathBuf) {
        let (array, at) = self.layout.locate(task);
        let job = self.job_ids.get(array).map_or("?", String::as_str);
        (job, at, self.dir.join("logs").join(format!("{job}_{at}.log")))
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

/// Write the units file and the task script, then `sbatch` the arrays.
async fn submit(dispatch: &Dispatch, step: &StepConfig, jobs: &[UnitJob]) -> Result<Array> {
    let program = dispatch.worker_program.clone().ok_or_else(|| Error::Slurm {
        command: "sbatch".into(),
        message: "the SLURM backend needs a worker program (the sluice binary, or Python with `-m sluice`)".into(),
    })?;
    let step_run_id = jobs.first().map(|j| j.step_run_id.clone()).unwrap_or_default();
    // A retry round is an array of its own, in a folder of its own.
    let round = match dispatch.attempt {
        1 => step_run_id,
        n => format!("{step_run_id}-attempt{n}"),
    };
    let dir = task_dir(&dispatch.lake)?.join(round);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io(&logs, e))?;
    let units_file = dir.join("units.jsonl");
    let mut text = String::new();
    for job in jobs {
        text.push_str(&serde_json::to_string(job).map_err(|e| Error::json("a unit job", e))?);
        text.push('\n');
    }
    std::fs::write(&units_file, text).map_err(|e| Error::io(&units_file, e))?;
    let (units, setting) = (jobs.len(), step.batch.units_per_worker);
    let layout = {
        let step = step.clone();
        tokio::task::spawn_blocking(move || {
            let slots = match setting {
                UnitsPerTask::Auto => layout::slots(&step),
                UnitsPerTask::Fixed(_) => None,
            };
            let cluster = layout::max_array();
            let most = step.resources.max_array.map_or(cluster, |m| cluster.min(m as usize));
            Layout::plan(units, setting, slots, most)
        })
        .await
        .map_err(|e| Error::task("reading the cluster's size", e))?
    };
    let script = dir.join("task.sh");
    // A lake in a store reaches the tasks in sbatch's environment, which
    // SLURM hands them (`--export=ALL`, its default): its URL may carry a
    // SAS token, and the script is a file others may read.
    let (lake_arg, env) = match &dispatch.lake {
        LakeRoot::Local(root) => {
            (format!("--lake {} ", shell_quote(&root.display().to_string())), None)
        }
        LakeRoot::Store(store) => {
            (String::new(), Some((crate::lake::LAKE_ENV, store.url().to_string())))
        }
    };
    // `$1`: the step's task number of the array's task 0.
    let body = format!(
        "#!/bin/sh\n# sluice array task: step `{}`\nexec {} {lake_arg}__worker --units {} --per-task {} --task \"$(( ${{1:-0}} + SLURM_ARRAY_TASK_ID ))\"\n",
        step.name,
        program.shell_words(),
        shell_quote(&units_file.display().to_string()),
        layout.per_task
    );
    std::fs::write(&script, body).map_err(|e| Error::io(&script, e))?;
    let mut job_ids: Vec<String> = Vec::new();
    for &span in &layout.arrays {
        // Under a throttle, arrays run one after the other so that it holds
        // for the step.
        let after = step.resources.throttle.and(job_ids.last().map(String::as_str));
        let args = sbatch_args(step, span, after, &logs, &script);
        let job_id = match sbatch(args, env.clone()).await {
            Ok(job_id) => job_id,
            Err(e) => {
                // Arrays already submitted would run units nobody waits for.
                if !job_ids.is_empty() {
                    let _ = slurm_command("scancel", job_ids.clone()).await;
                }
                return Err(e);
            }
        };
        tracing::info!(job = %job_id, tasks = span.1, first = span.0, units_per_task = layout.per_task, step = %step.name, "submitted SLURM array");
        job_ids.push(job_id);
    }
    let index = jobs.iter().enumerate().map(|(i, j)| (j.run_id.clone(), i)).collect();
    Ok(Array { job_ids, layout, dir, index })
}

/// Submit one array: its job id.
async fn sbatch(args: Vec<String>, env: Option<(&'static str, String)>) -> Result<String> {
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
    Ok(job_id)
}

/// Wait until every task's record is done or the arrays have left the
/// queue, cancelling them on Ctrl-C. Returns whether they were cancelled.
///
/// The records are a folder listing per tick; `squeue` (one call for every
/// array of the step) is polled with backoff. A failing `squeue` (a busy or
/// restarting controller) is never read as "the job is done": it is retried
/// with backoff and reported. The arrays count as gone only when `squeue`
/// answers without them, or says it does not know their ids any more, or —
/// after failures — the accounting records (`scontrol`, `sacct`) show every
/// task in a final state. If `squeue` keeps failing longer than
/// [`SlurmOptions::squeue_patience`], the step fails with the error,
/// leaving the arrays and their staging alone.
async fn wait_for_queue(
    dispatch: &Dispatch,
    array: &Array,
    options: &SlurmOptions,
) -> Result<bool> {
    // Listing the records is cheap next to a controller call: look often.
    let tick = if array.layout.tasks > 1000 { RECORDS_TICK * 5 } else { RECORDS_TICK };
    let mut pause = Duration::from_millis(200);
    let mut next_squeue = Instant::now();
    let mut cancelled = false;
    let mut failing_since: Option<Instant> = None;
    let mut failures = 0u32;
    let ids = array.job_ids.join(",");
    loop {
        if dispatch.cancelled.load(std::sync::atomic::Ordering::SeqCst) && !cancelled {
            let _ = slurm_command("scancel", array.job_ids.clone()).await;
            cancelled = true;
        }
        let records = array.records();
        let tasks = array.layout.tasks;
        let finished =
            tokio::task::spawn_blocking(move || records::finished_count(&records, tasks))
                .await
                .unwrap_or(0);
        if finished >= tasks {
            return Ok(cancelled);
        }
        if Instant::now() < next_squeue {
            tokio::time::sleep(tick).await;
            continue;
        }
        // A step whose failures passed its limit (`fail_fast`: the first)
        // is clearly broken: its tasks still queued or running are
        // cancelled, and the units they never ran are not run.
        if let Some(most) = dispatch.failures_tolerated()
            && !cancelled
        {
            let records = array.records();
            let (retry, attempt) = (dispatch.retry.clone(), dispatch.attempt);
            // Failures to be retried do not count (yet).
            let counts = move |kind| !retry.retries(kind, attempt);
            let failed = tokio::task::spawn_blocking(move || {
                records::failures_so_far(&records, tasks, counts)
            })
            .await
            .unwrap_or(0);
            if failed > most {
                tracing::info!(jobs = %ids, failed, "too many units failed: cancelling the arrays");
                let _ = slurm_command("scancel", array.job_ids.clone()).await;
                cancelled = true;
            }
        }
        let args = vec!["-h".into(), "-j".into(), ids.clone(), "-o".into(), "%i".into()];
        match slurm_command("squeue", args).await {
            Ok(text) if text.trim().is_empty() => return Ok(cancelled),
            Ok(_) => {
                failing_since = None;
                failures = 0;
            }
            Err(e) if e.to_string().contains("Invalid job id") => return Ok(cancelled),
            Err(e) => {
                failures += 1;
                let since = *failing_since.get_or_insert_with(Instant::now);
                if failures == 1 || failures.is_multiple_of(10) {
                    tracing::warn!(
                        jobs = %ids,
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
                            "kept failing for {:.0}s while job {ids} was queued or running: {e}. Help: \
                             the array and its staging are left as they are; rerun the pipeline \
                             when the controller answers (finished units are committed then)",
                            since.elapsed().as_secs_f64(),
                        ),
                    });
                }
            }
        }
        next_squeue = Instant::now() + pause;
        pause = (pause * 2).min(options.max_poll);
    }
}

/// How often the orchestrator lists the tasks' records while it waits.
const RECORDS_TICK: Duration = Duration::from_millis(100);

/// Whether the accounting records show every task of the arrays ended.
async fn all_tasks_final(array: &Array) -> bool {
    let ids = array.job_ids.clone();
    let layout = array.layout.clone();
    let tasks = layout.tasks;
    let states =
        tokio::task::spawn_blocking(move || task_states(&ids, &layout)).await.unwrap_or_default();
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

/// Collect what the tasks staged: read every task's record, wait for the
/// staged units they sealed (one NFS-safe poll for all, then up to the
/// timeout for those not yet visible), and take a staged unit a dead task
/// was sealing when it is there. Units no staged unit holds are `Lost`,
/// with their task's state, whether it had run them, and its log.
async fn collect(
    dispatch: &Dispatch,
    staging: &StagingArea,
    jobs: &[UnitJob],
    array: &Array,
    cancelled: bool,
    options: &SlurmOptions,
) -> Result<Vec<(String, Outcome)>> {
    let Some(first) = jobs.first() else {
        return Ok(Vec::new());
    };
    let dir = array.records();
    let tasks = array.layout.tasks;
    let records = tokio::task::spawn_blocking(move || {
        (0..tasks).map(|t| records::read(&dir, t)).collect::<Result<Vec<_>>>()
    })
    .await
    .map_err(|e| Error::task("reading the tasks' records", e))??;
    let staged_unit = |unit: &str| ExpectedRun {
        step: first.step_number,
        operation: first.step.operation.clone(),
        run_id: unit.to_owned(),
    };
    for record in &records {
        dispatch.spent(&record.phases);
    }
    // Staged unit → the reports of its units; the ones a task said it sealed.
    let mut reports: HashMap<String, Vec<UnitReport>> = HashMap::new();
    let mut said_sealed: HashSet<&str> = HashSet::new();
    let (mut sealed, mut sealing) = (Vec::new(), Vec::new());
    for record in &records {
        for (unit, units) in &record.sealed {
            reports.insert(unit.clone(), units.clone());
            said_sealed.insert(unit);
            sealed.push(staged_unit(unit));
        }
        if let Some((unit, units)) = &record.sealing {
            reports.insert(unit.clone(), units.clone());
            sealing.push(staged_unit(unit));
        }
    }
    let poll = |runs: Vec<ExpectedRun>, timeout: Duration| async move {
        wait_in_area(staging, &runs, WaitOptions { timeout, ..WaitOptions::default() }).await
    };
    let mut results = Vec::new();
    let mut settled: HashSet<String> = HashSet::new();
    let mut take = |ready: Vec<(ExpectedRun, PathBuf)>, results: &mut Vec<(String, Outcome)>| {
        for (unit, _) in ready {
            for report in reports.remove(&unit.run_id).unwrap_or_default() {
                dispatch.finished(report.failed_as());
                settled.insert(report.run_id.clone());
                results.push((report.run_id.clone(), Outcome::Reported(report)));
            }
        }
    };
    let sealed_count = sealed.len();
    let first_poll = poll(sealed.into_iter().chain(sealing).collect(), Duration::ZERO).await?;
    take(first_poll.ready, &mut results);
    if cancelled {
        // Cancelled units were not run: they are not failures.
        return Ok(results);
    }
    // What a task said it sealed is on its way through the shared file
    // system; what a dead task was sealing may never come.
    let late: Vec<ExpectedRun> = first_poll
        .missing
        .into_iter()
        .filter(|unit| said_sealed.contains(unit.run_id.as_str()))
        .collect();
    let late = if late.is_empty() {
        WaitOutcome { missing: late, ..WaitOutcome::default() }
    } else {
        poll(late, options.sentinel_timeout).await?
    };
    take(late.ready, &mut results);
    // Run → the staged unit its task sealed and this host does not see.
    let invisible: HashMap<&str, &str> = late
        .missing
        .iter()
        .flat_map(|unit| {
            let units = reports.get(&unit.run_id).into_iter().flatten();
            units.map(|r| (r.run_id.as_str(), unit.run_id.as_str()))
        })
        .collect();
    tracing::debug!(
        sealed = sealed_count,
        settled = settled.len(),
        "SLURM tasks' staged units read"
    );
    if settled.len() == jobs.len() {
        return Ok(results);
    }
    let missing = jobs.iter().filter(|j| !settled.contains(&j.run_id));
    results.extend(lost(dispatch, array, missing, &records, &invisible, options).await?);
    Ok(results)
}

/// The outcome of units no staged unit holds: why (the task's state,
/// where it stopped, its log; or the staged unit this host does not see)
/// and what kind of failure that is.
async fn lost(
    dispatch: &Dispatch,
    array: &Array,
    missing: impl Iterator<Item = &UnitJob>,
    records: &[records::TaskRecord],
    invisible: &HashMap<&str, &str>,
    options: &SlurmOptions,
) -> Result<Vec<(String, Outcome)>> {
    let ids = array.job_ids.clone();
    let layout = array.layout.clone();
    let states = tokio::task::spawn_blocking(move || task_states(&ids, &layout))
        .await
        .map_err(|e| Error::task("reading SLURM task states", e))?;
    let mut results = Vec::new();
    for job in missing {
        let task = array.task_of(&job.run_id);
        let (job_id, at, log) = array.task_job(task);
        let (why, kind) = match invisible.get(job.run_id.as_str()) {
            Some(unit) => (
                format!(
                    "SLURM task {at} of job {job_id} sealed this unit's results in staged unit {unit}, \
                     which is not visible here after {:.0}s (is the shared file system lagging?); log: {}",
                    options.sentinel_timeout.as_secs_f64(),
                    log.display()
                ),
                FailureKind::Lost,
            ),
            None => {
                let (state, exit) =
                    states.get(&task).cloned().unwrap_or_else(|| ("UNKNOWN".into(), String::new()));
                let said = describe_state(job_id, at, &state, &exit, &log);
                let kind = FailureKind::of_slurm_state(&state).unwrap_or(FailureKind::Lost);
                (format!("{said}{}", where_it_stopped(records.get(task), &job.run_id)), kind)
            }
        };
        dispatch.finished(Some(kind));
        results.push((job.run_id.clone(), Outcome::Lost(why, kind)));
    }
    Ok(results)
}

/// Where, by its record, a dead task stopped with respect to unit `run_id`
/// (nothing when it left no word of its units).
fn where_it_stopped(record: Option<&records::TaskRecord>, run_id: &str) -> &'static str {
    match record {
        Some(r) if r.running.as_deref() == Some(run_id) => " (while running this unit)",
        Some(r) if r.ran.iter().any(|ran| ran == run_id) => {
            " (after running this unit, before staging it)"
        }
        Some(r)
            if r.sealing
                .as_ref()
                .is_some_and(|(_, units)| units.iter().any(|u| u.run_id == run_id)) =>
        {
            " (after running this unit, while staging it)"
        }
        Some(r) if r.running.is_some() || !r.sealed.is_empty() => " (before running this unit)",
        _ => "",
    }
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

/// The step's task → (state, exit code), from `scontrol` (job records stay
/// for MinJobAge after the end; one call per array) or `sacct` (one call
/// for all of them).
fn task_states(job_ids: &[String], layout: &Layout) -> BTreeMap<usize, (String, String)> {
    let mut out = BTreeMap::new();
    for (job, &(first, _)) in job_ids.iter().zip(&layout.arrays) {
        let Ok(text) =
            command_output("scontrol", &["-o".into(), "show".into(), "job".into(), job.clone()])
        else {
            continue;
        };
        for line in text.lines() {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            };
            if let (Some(task), Some(state)) =
                (field("ArrayTaskId").and_then(|t| t.parse::<usize>().ok()), field("JobState"))
            {
                out.insert(
                    first + task,
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
                job_ids.join(","),
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
                && let Some((job, task)) = id.split_once('_')
                && let Some(array) = job_ids.iter().position(|j| j == job)
                && let Ok(task) = task.parse::<usize>()
            {
                let state = state.split_whitespace().next().unwrap_or_default();
                let first = layout.arrays.get(array).map_or(0, |a| a.0);
                out.insert(first + task, (state.to_owned(), (*exit).to_owned()));
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
        let args = sbatch_args(&step, (20, 10), Some("41"), Path::new("/l"), Path::new("/t.sh"));
        for want in [
            "--array=0-9%3",
            "--cpus-per-task=2",
            "--mem=4G",
            "--time=00:05:00",
            "--exclusive",
            "--output=/l/%A_%a.log",
            "--dependency=afterany:41",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        assert_eq!(args[args.len() - 2..], ["/t.sh", "20"], "the script, then its first task");
    }

    #[test]
    fn a_lost_unit_says_where_its_task_stopped() {
        use crate::pipeline::unit::UnitReport;
        let report = |run: &str| UnitReport {
            run_id: run.into(),
            success: true,
            error: None,
            failure: None,
        };
        let record = records::TaskRecord {
            finished: false,
            sealed: vec![("s".into(), vec![report("a")])],
            sealing: Some(("t".into(), vec![report("b")])),
            ran: vec!["c".into()],
            running: Some("d".into()),
            phases: Default::default(),
        };
        let at = |run| where_it_stopped(Some(&record), run);
        assert_eq!(at("b"), " (after running this unit, while staging it)");
        assert_eq!(at("c"), " (after running this unit, before staging it)");
        assert_eq!(at("d"), " (while running this unit)");
        assert_eq!(at("e"), " (before running this unit)");
        assert_eq!(where_it_stopped(None, "e"), "");
        assert_eq!(where_it_stopped(Some(&records::TaskRecord::default()), "e"), "");
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
