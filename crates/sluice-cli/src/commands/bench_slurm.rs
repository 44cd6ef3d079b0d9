//! `sluice bench slurm`: a step of many small units on SLURM against the
//! same step on the local backend, each run as users run it (`sluice run`
//! in a new process on a new lake), on the same machine in the same bench.
//!
//! The workload is two steps of N units — `generate_data` of N 10-row
//! tables (no inputs), then `compute_metrics` of each (one input read per
//! unit) — so that both a step's dispatch and its tasks' input reads are
//! in the figure. On SLURM the steps say `units_per_worker = "auto"` (unless
//! `--units-per-task` says otherwise): one array task per CPU slot of the
//! partition, each running its share.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use super::bench_load::{peak_of, sluice_process, workload};
use super::bench_results::Figure;
use crate::output::print;

/// Issue 45, goal 4: a SLURM step at most twice the local one.
const GOAL_RATIO: f64 = 2.0;

fn pipeline_text(units: u64, per_task: Option<&str>) -> String {
    let (backend, batch) = match per_task {
        Some(n) => ("backend = \"slurm\"\n", format!("batch = {{ units_per_worker = {n} }}\n")),
        None => ("", String::new()),
    };
    format!(
        "name = \"bench-slurm\"\n{backend}\
         [[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = {units}, rows = 10 }}\n{batch}\
         [[step]]\nname = \"stats\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"gen.data\" }}\n{batch}"
    )
}

fn slurm_running() -> bool {
    std::process::Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

/// Where the two lakes go: beside the bench's lake (on the same shared
/// file system the tasks see), never inside it.
fn runs_dir(root: &Path) -> PathBuf {
    let name = root.file_name().map_or_else(|| "lake".into(), |n| n.to_string_lossy().into_owned());
    root.with_file_name(format!("{name}.slurm-runs"))
}

/// One backend's run: wall seconds, each step's (name, seconds, units),
/// and the orchestrator's peak RSS.
struct Run {
    wall: f64,
    steps: Vec<(String, f64, u64)>,
    peak: f64,
}

/// `per_task`: none for the local backend, else the SLURM steps'
/// `units_per_worker` as TOML.
fn run(dir: &Path, units: u64, workers: usize, per_task: Option<&str>) -> anyhow::Result<Run> {
    let name = if per_task.is_some() { "slurm" } else { "local" };
    let lake = dir.join(name);
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, pipeline_text(units, per_task))
        .with_context(|| format!("writing {}", file.display()))?;
    sluice_process(&lake, "init", &[OsStr::new("-q")])?;
    let workers = workers.to_string();
    let args =
        [file.as_os_str(), OsStr::new("--workers"), OsStr::new(&workers), OsStr::new("--json")];
    let clock = Instant::now();
    let out = sluice_process(&lake, "run", &args)?;
    let wall = clock.elapsed().as_secs_f64();
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading the JSON report of sluice run")?;
    let mut steps = Vec::new();
    for step in report["steps"].as_array().into_iter().flatten() {
        let failed = step["failed"].as_u64().unwrap_or(0);
        anyhow::ensure!(
            failed == 0,
            "{name}: step {} had {failed} failed units: {step}",
            step["name"]
        );
        steps.push((
            step["name"].as_str().unwrap_or("?").to_owned(),
            step["seconds"].as_f64().unwrap_or(0.0),
            step["dispatched"].as_u64().unwrap_or(0),
        ));
    }
    Ok(Run { wall, steps, peak: peak_of(&out.stderr) })
}

/// Run both and compare, or say why not.
pub async fn slurm(
    root: &Path,
    units: u64,
    workers: usize,
    units_per_task: &str,
) -> anyhow::Result<Vec<Figure>> {
    let per_task = match units_per_task {
        "auto" => "\"auto\"".to_owned(),
        n => n.parse::<u64>().ok().filter(|n| *n > 0).map(|n| n.to_string()).ok_or_else(|| {
            anyhow::anyhow!("--units-per-task takes a number of units or \"auto\", not `{n}`")
        })?,
    };
    if !slurm_running() {
        print(
            "bench slurm: skipped, SLURM is not running here (`sinfo` does not answer); \
             `bash scripts/slurm.sh up` starts a single-node SLURM",
        )?;
        return Ok(Vec::new());
    }
    let dir = runs_dir(root);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let local = run(&dir, units, workers, None)?;
    let slurm = run(&dir, units, workers, Some(&per_task))?;
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    let mut lines = vec![format!(
        "workload: 2 steps of {units} units (generate_data of 10-row tables, compute_metrics of each), `sluice run` in a new process on a new lake: local backend with {workers} workers (baseline), then SLURM with units_per_worker = {per_task}"
    )];
    let what = workload(&lines[0]).to_owned();
    let mut figures = Vec::new();
    for ((name, base, n), (_, secs, _)) in local.steps.iter().zip(&slurm.steps) {
        let ratio = secs / base.max(1e-9);
        lines.push(format!(
            "step {name} ({n} units): local {base:.2} s, SLURM {secs:.2} s, ratio {ratio:.2} (goal <= {GOAL_RATIO})"
        ));
        figures.push(
            Figure::new("slurm", &what, &format!("step {name} on SLURM"), *secs, "s")
                .against(format!("the same step on the local backend: {base:.2} s"), ratio)
                .goal("45.4"),
        );
    }
    lines.push(format!(
        "whole run: local {:.2} s, SLURM {:.2} s; peak RSS of the orchestrator: local {:.0} MiB, SLURM {:.0} MiB",
        local.wall, slurm.wall, local.peak, slurm.peak
    ));
    figures.push(Figure::new(
        "slurm",
        &what,
        "peak RSS of the orchestrator on SLURM",
        slurm.peak,
        "MiB",
    ));
    print(&lines.join("\n"))?;
    Ok(figures)
}
