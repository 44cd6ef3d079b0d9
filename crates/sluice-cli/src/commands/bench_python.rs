//! `sluice bench python`: pipeline steps written as Python functions.
//!
//! Two figures, each from pipelines run as their users run them (`sluice
//! run --workers W` in a new process on a new lake):
//!
//! - the per-unit cost of a Python step over a built-in one: the same
//!   10-row tables through `compute_metrics`, then through a Python
//!   function computing a few of the same statistics with Polars; the
//!   difference of the two steps' seconds per unit (issue 41's goal: at
//!   most 1 ms);
//! - the seed system's bench shape with its metrics computed in Python
//!   (generate N tables → Python metrics → filter), end to end, against
//!   the seed's 101.3 s for the same shape (issue 45's measurement, quoted,
//!   not run here; issue 41's goal: at least 20× faster).

use std::path::Path;

use anyhow::Context;

use super::bench_load::{run_as_process, workload};
use super::bench_results::Figure;
use crate::output::print;

/// The seed system's time for its bench shape (issue 45).
const SEED_SECONDS: f64 = 101.3;
/// Issue 41's goals.
const GOAL_MS_PER_UNIT: f64 = 1.0;
const GOAL_TIMES_FASTER: f64 = 20.0;

const FUNCTIONS: &str = r#"
def metrics(t):
    x = t["x"]
    return {"metrics": {"rows": t.height, "mean": float(x.mean()),
                        "x_min": float(x.min()), "x_max": float(x.max())}}
"#;

fn pipeline(tables: u64, metrics_step: &str) -> String {
    format!(
        "name = \"bench-python\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = {tables}, rows = 10 }}\n\
         [[step]]\nname = \"stats\"\n{metrics_step}inputs = {{ t = \"gen.data\" }}\n\
         [[step]]\nname = \"keep\"\noperation = \"filter\"\ninputs = {{ candidates = \"gen.data\" }}\n\
         params = {{ metric = \"stats.metrics\", where = \"mean > 0.5\" }}\n"
    )
}

fn python_step(python: Option<&Path>) -> String {
    let interpreter =
        python.map(|p| format!("python = {:?}\n", p.display().to_string())).unwrap_or_default();
    format!(
        "operation = \"python\"\nfunction = \"metrics.py:metrics\"\noutputs = {{ metrics = \"metric\" }}\n{interpreter}"
    )
}

/// One run of `text` in a new lake under `dir`: wall seconds and the
/// metrics step's seconds.
fn run_once(dir: &Path, name: &str, text: &str, workers: usize) -> anyhow::Result<(f64, f64)> {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    let (wall, report, _) = run_as_process(&dir.join(name), &file, workers)?;
    let stats = report["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == "stats"))
        .context("the report has no step `stats`")?;
    Ok((wall, stats["seconds"].as_f64().unwrap_or(0.0)))
}

pub async fn python(
    root: &Path,
    units: u64,
    tables: u64,
    workers: usize,
    interpreter: Option<&Path>,
) -> anyhow::Result<Vec<Figure>> {
    let name = root.file_name().map_or_else(|| "lake".into(), |n| n.to_string_lossy().into_owned());
    let dir = root.with_file_name(format!("{name}.python-rounds"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("metrics.py"), FUNCTIONS).context("writing the step's module")?;

    let builtin = pipeline(units, "operation = \"compute_metrics\"\n");
    let (_, builtin_step) = run_once(&dir, "builtin", &builtin, workers)?;
    let (_, python_step_secs) =
        run_once(&dir, "python", &pipeline(units, &python_step(interpreter)), workers)?;
    let (seed_wall, seed_step) =
        run_once(&dir, "seed", &pipeline(tables, &python_step(interpreter)), workers)?;
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;

    let extra_ms = 1000.0 * (python_step_secs - builtin_step) / units.max(1) as f64;
    let per_unit = format!(
        "workload: a metrics step over {units} tables of 10 rows (one unit each), {workers} workers: a Python function (polars: rows, mean, min, max of x) against compute_metrics, each `sluice run` a new process on a new lake"
    );
    let seed = format!(
        "workload: the seed's bench shape with metrics in Python: generate_data of {tables} tables of 10 rows -> a Python metrics function per table -> filter, `sluice run --workers {workers}` in a new process on a new lake"
    );
    print(&[
        per_unit.clone(),
        format!(
            "compute_metrics step {builtin_step:.2} s, Python step {python_step_secs:.2} s: {extra_ms:.3} ms more per unit (goal <= {GOAL_MS_PER_UNIT} ms)"
        ),
        seed.clone(),
        format!(
            "end to end {seed_wall:.2} s (its Python step {seed_step:.2} s); the seed's Python system: {SEED_SECONDS} s (issue 45, not this run): {:.0}x faster (goal >= {GOAL_TIMES_FASTER}x)",
            SEED_SECONDS / seed_wall
        ),
    ]
    .join("\n"))?;
    Ok(vec![
        Figure::new("python", workload(&per_unit), "Python step's extra time per unit", extra_ms, "ms")
            .against(format!("compute_metrics, {builtin_step:.2} s in this run"), python_step_secs / builtin_step.max(1e-9))
            .goal("41.speed.1"),
        Figure::new("python", workload(&seed), "end to end as a process", seed_wall, "s")
            .against(
                format!("the seed's Python system: {SEED_SECONDS} s (issue 45, not measured in this run)"),
                seed_wall / SEED_SECONDS,
            )
            .goal("41.speed.2"),
    ])
}
