//! What every `sluice bench` command shares: staging a synthetic workload
//! with worker processes as real workers stage, filling a lake with
//! artifacts, percentiles, peak memory and the workload line of a report.
//! The bench commands import it; it imports none of them.

use std::time::Instant;

use anyhow::{Context, bail};
use sluice::Lake;
use sluice::lake::LakeRoot;
use sluice::pipeline::worker_program;
use sluice::staging::synthetic::{self, SyntheticSpec};
use sluice::staging::{StagingArea, StagingWriter, SyncPolicy};

use crate::args::Workload;

fn spec(w: &Workload, seed: u64) -> SyntheticSpec {
    SyntheticSpec {
        seed,
        step: w.step,
        operation: "bench".into(),
        artifacts_per_execution: w.artifacts_per_execution,
        duplicate_fraction: w.duplicate_fraction,
        fail_fraction: w.fail_fraction,
        crash_fraction: w.crash_fraction,
        mixed: w.mixed.clone(),
        batch: w.batch as usize,
    }
}

/// The worker process: stage executions `from..to`.
pub async fn stage_worker(
    root: &LakeRoot,
    workload: &Workload,
    from: u64,
    to: u64,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let writer = StagingWriter::in_area(
        StagingArea::of_lake(lake.root()),
        lake.registry().clone(),
        SyncPolicy::Detect,
    );
    let spec = spec(workload, workload.seed);
    let registry = lake.registry().clone();
    tokio::task::spawn_blocking(move || {
        synthetic::stage_range(&writer, &spec, &registry, from..to)
    })
    .await??;
    Ok(())
}

/// Stage a workload with `workers` processes; returns seconds.
pub(crate) async fn stage(
    root: &LakeRoot,
    workload: &Workload,
    workers: u64,
) -> anyhow::Result<f64> {
    // A workload's run ids follow from its seed: staging left by an earlier
    // `bench stage` of the same seed and step would collide with them.
    let area = StagingArea::of_lake(root);
    let scan = sluice::staging::scan::scan_area(&area, Some(workload.step)).await?;
    let mut staged = std::collections::HashSet::new();
    for dir in &scan.sealed {
        staged.extend(dir.staged_run_ids_in(&area).await.unwrap_or_default());
    }
    let spec = spec(workload, workload.seed);
    let taken =
        (0..workload.executions).filter(|&i| staged.contains(&synthetic::run_id(&spec, i))).count();
    if taken > 0 {
        bail!(
            "{root} already holds {taken} of this workload's staged runs (step {}, seed {}) from an \
             earlier `sluice bench stage`: commit them (`sluice commit`), pass another --seed, or \
             give the bench a new --lake",
            workload.step,
            workload.seed
        );
    }
    let program = worker_program::current()?;
    let workers = workers.max(1);
    let per = workload.executions.div_ceil(workers);
    let started = Instant::now();
    let mut children = Vec::new();
    for w in 0..workers {
        let (from, to) = (w * per, ((w + 1) * per).min(workload.executions));
        if from >= to {
            continue;
        }
        let mut command = tokio::process::Command::from(program.command());
        match root {
            LakeRoot::Local(path) => command.arg("--lake").arg(path),
            // A store URL may carry a SAS token: in the environment, not in
            // arguments other users can read.
            LakeRoot::Store(store) => command.env("SLUICE_LAKE", store.url().as_str()),
        };
        command.arg("__stage-worker");
        if let Some(files) = &workload.mixed {
            command.arg("--mixed").arg(files);
        }
        let child = command
            .args(["--executions", &workload.executions.to_string()])
            .args(["--artifacts-per-execution", &workload.artifacts_per_execution.to_string()])
            .args(["--duplicate-fraction", &workload.duplicate_fraction.to_string()])
            .args(["--fail-fraction", &workload.fail_fraction.to_string()])
            .args(["--crash-fraction", &workload.crash_fraction.to_string()])
            .args(["--seed", &workload.seed.to_string()])
            .args(["--step", &workload.step.to_string()])
            .args(["--batch", &workload.batch.to_string()])
            .args(["--from", &from.to_string(), "--to", &to.to_string()])
            .spawn()
            .context("starting a staging worker")?;
        children.push(child);
    }
    for mut child in children {
        let status = child.wait().await?;
        if !status.success() {
            bail!("a staging worker failed: {status}");
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Add `n` unique metric artifacts to the lake, in commits of `per_commit`,
/// spread over 10 steps (not timed as part of the figures).
pub(crate) async fn fill(lake: &Lake, n: u64, per_commit: u64, seed: u64) -> anyhow::Result<()> {
    let mut done = 0;
    while done < n {
        let end = (done + per_commit.max(1)).min(n);
        let artifacts = (done..end)
            .map(|i| {
                sluice::Draft::metric(serde_json::json!({"fill": i, "seed": seed}))?
                    .with_step((i % 10) as i32)
                    .finalize(lake.registry())
            })
            .collect::<sluice::Result<Vec<_>>>()?;
        lake.append_unchecked(&artifacts).await?;
        done = end;
    }
    Ok(())
}

/// The median and the 99th percentile of `ms` (0 for none).
pub(crate) fn median_p99(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms.get(((ms.len().max(1) - 1) as f64 * p).round() as usize).copied();
    (at(0.5).unwrap_or(0.0), at(0.99).unwrap_or(0.0))
}

pub(crate) fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Run this binary as `sluice --lake LAKE COMMAND ARGS…` in a new process
/// that reports its peak RSS on stderr (read it with [`peak_of`]); its
/// output, or an error holding its stderr.
pub(crate) fn sluice_process(
    lake: &std::path::Path,
    command: &str,
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<std::process::Output> {
    let out = worker_program::current()?
        .command()
        .arg("--lake")
        .arg(lake)
        .arg(command)
        .args(args)
        .env("SLUICE_REPORT_PEAK_RSS", "1")
        .output()
        .with_context(|| format!("running sluice {command}"))?;
    if !out.status.success() {
        bail!("sluice {command} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out)
}

/// `sluice run FILE --workers W --json` on a new lake at `lake`, as a user
/// runs it (the lake made first, by its own process): the run's wall
/// seconds, its JSON report, and the orchestrator's peak RSS (MiB).
pub(crate) fn run_as_process(
    lake: &std::path::Path,
    file: &std::path::Path,
    workers: usize,
) -> anyhow::Result<(f64, serde_json::Value, f64)> {
    use std::ffi::OsStr;
    sluice_process(lake, "init", &[OsStr::new("-q")])?;
    let clock = std::time::Instant::now();
    let workers = workers.to_string();
    let args =
        [file.as_os_str(), OsStr::new("--workers"), OsStr::new(&workers), OsStr::new("--json")];
    let out = sluice_process(lake, "run", &args)?;
    let wall = clock.elapsed().as_secs_f64();
    let report =
        serde_json::from_slice(&out.stdout).context("reading the JSON report of sluice run")?;
    Ok((wall, report, peak_of(&out.stderr)))
}

/// The peak RSS a [`sluice_process`] reported on its stderr, MiB.
pub(crate) fn peak_of(stderr: &[u8]) -> f64 {
    String::from_utf8_lossy(stderr)
        .lines()
        .find_map(|l| l.strip_prefix("peak RSS MiB: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A bench's first line without its `workload: ` label.
pub(crate) fn workload(line: &str) -> &str {
    line.strip_prefix("workload: ").unwrap_or(line)
}

/// The workload line of a report.
pub(crate) fn describe(w: &Workload, workers: u64) -> String {
    let staged = match w.batch {
        1 => "one staging directory per execution".to_owned(),
        k => format!("staged in batches of {k} executions"),
    };
    format!(
        "{} executions x {} artifacts, {} worker processes, duplicate {:.2}, fail {:.2}, crash {:.2}, {staged}",
        w.executions,
        w.artifacts_per_execution,
        workers,
        w.duplicate_fraction,
        w.fail_fraction,
        w.crash_fraction
    )
}

/// The bench pipeline: `half` `generate_data` units of a 10-row table,
/// `half` `compute_metrics` units, one `filter` unit.
pub(crate) fn pipeline_text(half: u64) -> String {
    format!(
        "name = \"bench\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = {half}, rows = 10 }}\n\
         [[step]]\nname = \"stats\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"gen.data\" }}\n\
         [[step]]\nname = \"keep\"\noperation = \"filter\"\ninputs = {{ candidates = \"gen.data\" }}\n\
         params = {{ metric = \"stats.metrics\", where = \"mean > 0.5\" }}\n"
    )
}

/// Run the pipeline in `file` on `lake` with `workers` local worker
/// processes, as `sluice run` does; its seconds and executions dispatched.
pub(crate) async fn run_pipeline_file(
    lake: &Lake,
    file: &std::path::Path,
    operations: &sluice::pipeline::Operations,
    workers: usize,
) -> anyhow::Result<(f64, usize)> {
    let pipeline = sluice::pipeline::Pipeline::load(file, operations, lake.registry())?;
    let report = super::pipeline::run_with_progress(
        lake,
        pipeline,
        operations.clone(),
        None,
        Some(workers),
        false,
    )
    .await?;
    super::pipeline::finish(&report)?;
    Ok((report.seconds, report.steps.iter().map(|s| s.dispatched).sum()))
}
