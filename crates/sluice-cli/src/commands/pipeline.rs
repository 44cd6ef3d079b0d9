//! `sluice run`, `check`, `status`, `runs` and the hidden worker mode.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use sluice::Lake;
use sluice::lake::LakeRoot;
use sluice::pipeline::status::{self, RunState};
use sluice::pipeline::worker_program;
use sluice::pipeline::{BackendKind, Operations, Pipeline, RunEvent, RunReport, StepStatus};

use crate::args::BackendArg;
use crate::output::{print, text_table};

fn micros_to_text(t: i64) -> String {
    sluice::times::from_micros(t)
}

/// Load and validate a pipeline against the lake's types.
async fn load(root: &LakeRoot, file: &Path) -> anyhow::Result<(Lake, Pipeline, Operations)> {
    let (lake, _) = Lake::init(root).await?;
    let operations = Operations::linked()?;
    let pipeline = Pipeline::load(file, &operations, lake.registry())?;
    Ok((lake, pipeline, operations))
}

pub async fn check(root: &LakeRoot, file: &Path) -> anyhow::Result<()> {
    // Validation reads the lake's types only; it creates and changes nothing.
    let pipeline = Pipeline::load(file, &Operations::linked()?, &Lake::types_at(root).await?)?;
    let mut lines =
        vec![format!("{}: pipeline `{}` is valid", file.display(), pipeline.config.name)];
    for (i, step) in pipeline.config.steps.iter().enumerate() {
        let outputs: Vec<String> =
            pipeline.outputs[i].iter().map(|(r, t)| format!("{r}: {t}")).collect();
        lines.push(format!(
            "  {}. {} ({}) → {}",
            i + 1,
            step.name,
            step.operation,
            outputs.join(", ")
        ));
    }
    print(&lines.join("\n"))?;
    // What this machine lacks is said, not fatal: the nodes may differ.
    for warning in pipeline.preflight() {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// `sluice reproduce`: the pipeline that makes an artifact again, and with
/// `run`, a run of it into a scratch lake that must make the same id.
pub async fn reproduce(
    root: &LakeRoot,
    id: &str,
    into: &Path,
    run: bool,
    workers: Option<usize>,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let id = lake.resolve(id).await?;
    let plan = sluice::lineage::reproduce::plan(&lake, id).await?;
    std::fs::create_dir_all(into).map_err(|e| sluice::Error::io(into, e))?;
    let file = into.join("pipeline.toml");
    std::fs::write(&file, &plan.text).map_err(|e| sluice::Error::io(&file, e))?;
    print(&format!(
        "{}: steps {} of {} (the lineage of artifact {id})",
        file.display(),
        plan.steps.join(", "),
        plan.source.display()
    ))?;
    if !run {
        return Ok(());
    }
    let scratch = into.join("lake");
    // The lake's declared types, so that the scratch lake takes the same artifacts.
    if let LakeRoot::Local(original) = root
        && original.join("sluice.toml").exists()
    {
        std::fs::create_dir_all(&scratch).map_err(|e| sluice::Error::io(&scratch, e))?;
        std::fs::copy(original.join("sluice.toml"), scratch.join("sluice.toml"))
            .map_err(|e| sluice::Error::io(&scratch, e))?;
    }
    let scratch = LakeRoot::Local(scratch);
    let (again, pipeline, operations) = load(&scratch, &file).await?;
    let report = run_with_progress(&again, pipeline, operations, None, workers, false).await?;
    finish(&report)?;
    match again.get(id).await {
        Ok(_) => print(&format!("reproduced: the run into {scratch} made artifact {id} again")),
        Err(e) => bail!(
            "the run into {scratch} did not make artifact {id} ({e}): it is not reproducible as recorded"
        ),
    }
}

/// `sluice checks`: a pipeline's checks again, alone.
pub async fn checks(
    root: &LakeRoot,
    file: &Path,
    name: Option<&str>,
    as_json: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let pipeline = Pipeline::load(file, &Operations::linked()?, lake.registry())?;
    let results = sluice::pipeline::recheck::rerun(&lake, &pipeline, name).await?;
    if as_json {
        print(&serde_json::to_string_pretty(&results)?)?;
    } else {
        print(checks_text(results.iter()).trim_end())?;
    }
    let failed = results.iter().filter(|c| c.blocks()).count();
    if failed > 0 {
        bail!("{failed} checks of severity error failed");
    }
    Ok(())
}

/// Run a pipeline with progress bars; the report is printed and returned.
pub async fn run_with_progress(
    lake: &Lake,
    pipeline: Pipeline,
    operations: Operations,
    backend: Option<BackendKind>,
    workers: Option<usize>,
    show_progress: bool,
) -> anyhow::Result<RunReport> {
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "\nstopping: no new units are dispatched; finished results are committed (Ctrl-C again to abort)"
            );
            flag.store(true, Ordering::SeqCst);
            if tokio::signal::ctrl_c().await.is_ok() {
                // Tools this process runs die with it; worker processes
                // notice their orchestrator is gone and exit on their own.
                sluice::pipeline::process::kill_live_groups();
                std::process::exit(130);
            }
        }
    });
    let bars: Arc<Mutex<BTreeMap<i32, (ProgressBar, usize)>>> =
        Arc::new(Mutex::new(BTreeMap::new()));
    let style =
        ProgressStyle::with_template("{prefix:<24} [{bar:25}] {pos}/{len} {msg} (eta {eta})")?
            .progress_chars("=> ");
    let observer_bars = bars.clone();
    let observer = Arc::new(move |event: RunEvent| {
        let Ok(mut bars) = observer_bars.lock() else { return };
        match event {
            RunEvent::StepStarted { number, name, total, cached, skipped } => {
                let len = (total - cached) as u64;
                let bar = if show_progress {
                    crate::output::bar(Some(len))
                } else {
                    ProgressBar::hidden()
                };
                bar.set_style(style.clone());
                bar.set_prefix(format!("{number}. {name}"));
                bar.set_message(if skipped {
                    "skipped: cached".to_owned()
                } else {
                    format!("{cached} cached")
                });
                bars.insert(number, (bar, 0));
            }
            RunEvent::UnitFinished { number, success } => {
                if let Some((bar, failed)) = bars.get_mut(&number) {
                    bar.inc(1);
                    if !success {
                        *failed += 1;
                        bar.set_message(format!("{failed} failed"));
                    }
                }
            }
            RunEvent::Committing { number } => {
                if let Some((bar, _)) = bars.get(&number) {
                    bar.set_message("committing");
                }
            }
            RunEvent::StepFinished(s) => {
                if let Some((bar, _)) = bars.get(&s.number) {
                    bar.finish_with_message(format!(
                        "{}: {} ok, {} cached, {} failed",
                        s.status.as_str(),
                        s.succeeded,
                        s.cached,
                        s.failed
                    ));
                }
            }
        }
    });
    let mut builder = lake
        .run(pipeline, operations)
        .with_worker_program(Some(worker_program::current()?))
        .with_backend(backend)
        .with_cancel_flag(cancel)
        .with_observer(observer);
    if let Some(w) = workers {
        builder = builder.with_workers(w);
    }
    let report = Box::pin(builder.execute()).await;
    // Checkpoints the step commits started in the background are written
    // before the process ends (a short-lived process would drop them).
    lake.settle().await;
    let report = report?;
    if let Ok(bars) = bars.lock() {
        for (bar, _) in bars.values() {
            bar.finish_and_clear();
        }
    }
    Ok(report)
}

pub async fn run(
    root: &LakeRoot,
    file: &Path,
    backend: Option<BackendArg>,
    workers: Option<usize>,
    as_json: bool,
) -> anyhow::Result<()> {
    let (lake, pipeline, operations) = load(root, file).await?;
    let backend = backend.map(|b| match b {
        BackendArg::Local => BackendKind::Local,
        BackendArg::Slurm => BackendKind::Slurm,
    });
    let report = run_with_progress(&lake, pipeline, operations, backend, workers, !as_json).await?;
    if as_json {
        print(&serde_json::to_string_pretty(&report)?)?;
    } else {
        print(&report_text(&report))?;
    }
    finish(&report)
}

/// Exit status of a run: an error when it was cancelled or units failed.
pub fn finish(report: &RunReport) -> anyhow::Result<()> {
    if report.cancelled {
        bail!("the run was cancelled; rerun it to continue where it stopped");
    }
    let failed = report.failed_units();
    if failed > 0 {
        bail!("{failed} units failed (see `sluice status`); a rerun retries only them");
    }
    let checks = report.failed_checks();
    if checks > 0 {
        bail!(
            "{checks} checks of severity error failed; the steps that read what they checked did not run (see `sluice status`)"
        );
    }
    Ok(())
}

/// The summary table of a run.
pub fn report_text(report: &RunReport) -> String {
    let rows: Vec<Vec<String>> = report
        .steps
        .iter()
        .map(|s| {
            vec![
                format!("{}. {}", s.number, s.name),
                s.operation.clone(),
                s.status.as_str().to_owned(),
                s.total.to_string(),
                s.cached.to_string(),
                s.dispatched.to_string(),
                s.failed.to_string(),
                s.outputs.iter().map(|(r, n)| format!("{r}={n}")).collect::<Vec<_>>().join(" "),
                format!("{:.2}", s.seconds),
            ]
        })
        .collect();
    let mut out = format!(
        "pipeline `{}` run {} in {:.2}s\n",
        report.pipeline, report.pipeline_run_id, report.seconds
    );
    out.push_str(&text_table(
        &["step", "operation", "status", "units", "cached", "ran", "failed", "outputs", "seconds"],
        &rows,
    ));
    out.push_str(&checks_text(report.checks.iter()));
    for (step, why) in &report.blocked {
        out.push_str(&format!("step `{step}` did not run: {why}\n"));
    }
    for s in &report.steps {
        out.push_str(&retries_text(&s.name, &s.retries));
        for (run, error) in s.failures.iter().take(5) {
            out.push_str(&format!("  failed in `{}`: run {run}: {error}\n", s.name));
        }
    }
    out
}

pub async fn status(root: &LakeRoot, run: Option<&str>, as_json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let state = status::status(&lake, run).await?;
    if as_json {
        return print(&serde_json::to_string_pretty(&state)?);
    }
    print(&status_text(&state))
}

/// `sluice logs`: each unit's outcome, inputs and the end of its output.
pub async fn logs(
    root: &LakeRoot,
    request: &sluice::pipeline::logs::LogsRequest,
    as_json: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let units = sluice::pipeline::logs::logs(&lake, request).await?;
    if as_json {
        return print(&serde_json::to_string_pretty(&units)?);
    }
    if units.is_empty() {
        let which = if request.all { "units" } else { "failed units" };
        return print(&format!("no {which} (`--all` shows every unit)"));
    }
    let mut out = String::new();
    for unit in &units {
        let outcome = match (&unit.error, unit.success) {
            (_, true) => "succeeded".to_owned(),
            (Some(error), false) => format!("failed: {error}"),
            (None, false) => "failed".to_owned(),
        };
        out.push_str(&format!(
            "== step {} ({}), execution {} {outcome}\n",
            unit.step_number,
            if unit.step.is_empty() { "-" } else { &unit.step },
            unit.execution_run_id
        ));
        if !unit.inputs.is_empty() {
            let inputs: Vec<String> =
                unit.inputs.iter().map(|(role, id)| format!("{role}={id}")).collect();
            out.push_str(&format!("inputs: {}\n", inputs.join(" ")));
        }
        match &unit.output {
            Some(text) => {
                out.push_str("output (the last 4 KiB of stdout and stderr):\n");
                for line in text.lines() {
                    out.push_str(&format!("  {line}\n"));
                }
            }
            None => out.push_str("output: none recorded\n"),
        }
    }
    print(&out)
}

/// Check results, one line each: passed or failed, what was observed.
fn checks_text<'a>(
    checks: impl Iterator<Item = &'a sluice::pipeline::checks::CheckResult>,
) -> String {
    let mut out = String::new();
    for c in checks {
        let verdict = match (c.passed, c.severity) {
            (true, _) => "passed",
            (false, sluice::pipeline::checks::Severity::Warn) => "FAILED (warn)",
            (false, sluice::pipeline::checks::Severity::Error) => "FAILED",
        };
        let seen = match (&c.error, &c.observed) {
            (Some(e), _) => format!(": {e}"),
            (None, Some(row)) => format!(": {row}"),
            (None, None) => String::new(),
        };
        out.push_str(&format!(
            "check `{}` on step `{}` {verdict} over {} rows{seen}\n",
            c.name, c.step, c.rows_examined
        ));
    }
    out
}

/// A step's retry rounds, one line each (nothing without retries).
fn retries_text(step: &str, rounds: &[sluice::pipeline::events::RetryRound]) -> String {
    let mut out = String::new();
    for round in rounds {
        let why: Vec<String> =
            round.reasons.iter().map(|(kind, n)| format!("{kind} ×{n}")).collect();
        out.push_str(&format!(
            "step `{step}`: retried {} units as attempt {} after {:.1}s ({})\n",
            round.units,
            round.attempt,
            round.delay_seconds,
            why.join(", ")
        ));
    }
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn status_text(state: &RunState) -> String {
    let mut out = format!(
        "pipeline `{}` run {}: {} (started {}, last update {})\n",
        state.pipeline,
        state.pipeline_run_id,
        state.status.as_str(),
        micros_to_text(state.started),
        micros_to_text(state.updated)
    );
    let rows: Vec<Vec<String>> = state
        .steps
        .iter()
        .map(|s| {
            vec![
                format!("{}. {}", s.number, s.name),
                s.operation.clone(),
                s.status.as_str().to_owned(),
                opt(s.total),
                opt(s.cached),
                opt(s.succeeded),
                opt(s.failed),
                s.seconds.map_or_else(|| "-".into(), |x| format!("{x:.2}")),
            ]
        })
        .collect();
    out.push_str(&text_table(
        &["step", "operation", "status", "units", "cached", "succeeded", "failed", "seconds"],
        &rows,
    ));
    out.push_str(&checks_text(state.checks.iter().map(|c| &c.result)));
    let mut any = false;
    for s in &state.steps {
        if let Some(e) = &s.error {
            out.push_str(&format!("step `{}`: {e}\n", s.name));
        }
        out.push_str(&retries_text(&s.name, &s.retries));
        for (run, error) in &s.failures {
            if !any {
                out.push_str("failed executions:\n");
                any = true;
            }
            out.push_str(&format!("  {run} ({}): {error}\n", s.name));
        }
    }
    if any {
        out.push_str(
            "the tool output of a failed execution:\n  sluice sql \"SELECT error, tool_output FROM executions WHERE execution_run_id = '<run>'\"\n",
        );
    }
    if state.status == StepStatus::Running {
        out.push_str("(a step is still running, or its run was killed before it finished)\n");
    }
    out
}

pub async fn runs(root: &LakeRoot, as_json: bool, limit: usize) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let mut all = status::runs(&lake).await?;
    all.truncate(limit);
    if as_json {
        return print(&serde_json::to_string_pretty(&all)?);
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|r| {
            let units: i64 = r.steps.iter().filter_map(|s| s.total).sum();
            let failed: i64 = r.steps.iter().filter_map(|s| s.failed).sum();
            vec![
                r.pipeline_run_id.clone(),
                r.pipeline.clone(),
                r.status.as_str().to_owned(),
                micros_to_text(r.started),
                r.steps.len().to_string(),
                units.to_string(),
                failed.to_string(),
            ]
        })
        .collect();
    print(&text_table(&["run", "pipeline", "status", "started", "steps", "units", "failed"], &rows))
}

pub async fn worker(
    root: &LakeRoot,
    units: Option<&Path>,
    task: usize,
    per_task: usize,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let operations = Operations::linked()?;
    match units {
        Some(file) => {
            sluice::pipeline::worker_mode::run_slice(&lake, &operations, file, task, per_task)
                .await?;
        }
        None => sluice::pipeline::worker_mode::serve_stdin(&lake, &operations).await?,
    }
    Ok(())
}
