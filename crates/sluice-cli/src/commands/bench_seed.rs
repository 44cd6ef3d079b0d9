//! `sluice bench seed`: the seed system's own bench pipeline, run as its
//! users run it — `sluice run pipeline.toml --workers 2` in a new process on
//! a new lake — so that the figure holds process start, lake open and every
//! step, and each step's share of it.
//!
//! The pipeline: `generate_data` of N tables of 10 rows (one unit per
//! table), `compute_metrics` of each table, `filter` of the tables by
//! their metrics' mean. The seed's Python system ran the same shape in
//! 101.3, 106.7 and 101.4 s on this machine (issue 45); it is not run here,
//! so that figure is quoted, not measured in the same run.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::bench_load::{peak_rss_mib, run_as_process, workload};
use super::bench_results::Figure;
use crate::output::print;

/// The seed system's time for 1000 tables, as issue 45 measured it.
const SEED_SECONDS: f64 = 101.3;
/// Goal 1 of issue 45.
const GOAL_SECONDS: f64 = 1.0;

/// Where the rounds' lakes go: beside the bench's lake, never inside it.
fn rounds_dir(root: &Path) -> PathBuf {
    let name = root.file_name().map_or_else(|| "lake".into(), |n| n.to_string_lossy().into_owned());
    root.with_file_name(format!("{name}.seed-rounds"))
}

/// Run the seed pipeline `rounds` times, each in a new lake by a new process.
pub async fn seed(
    root: &Path,
    tables: u64,
    workers: usize,
    rounds: usize,
) -> anyhow::Result<Vec<Figure>> {
    let dir = rounds_dir(root);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, super::bench_load::pipeline_text(tables))
        .with_context(|| format!("writing {}", file.display()))?;
    let mut lines = vec![format!(
        "workload: the seed system's bench pipeline as a process: generate_data of {tables} tables of 10 rows (one unit each) -> compute_metrics of each -> filter, `sluice run --workers {workers}` in a new process on a new lake, {rounds} round{}",
        if rounds == 1 { "" } else { "s" }
    )];
    let mut walls = Vec::new();
    let mut peaks = Vec::new();
    for round in 1..=rounds.max(1) {
        let lake = dir.join(format!("round-{round}"));
        let (wall, report, peak) = run_as_process(&lake, &file, workers)?;
        lines.push(shares(round, wall, &report));
        walls.push(wall);
        peaks.push(peak);
    }
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    let mut sorted = walls.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let peak = peaks.iter().copied().fold(0.0, f64::max);
    lines.push(format!(
        "median: {median:.2} s ({}); goal 1.0 s: ratio {:.2}; the seed system's {SEED_SECONDS} s (issue 45, not this run): {:.0}x faster",
        walls.iter().map(|w| format!("{w:.2}")).collect::<Vec<_>>().join(", "),
        median / GOAL_SECONDS,
        SEED_SECONDS / median
    ));
    lines.push(format!(
        "peak RSS of the orchestrator: {peak:.0} MiB; this bench: {:.0} MiB",
        peak_rss_mib()
    ));
    let what = workload(&lines[0]).to_owned();
    print(&lines.join("\n"))?;
    Ok(vec![
        Figure::new("seed", &what, "end to end as a process (median)", median, "s")
            .against("goal: 1.0 s", median / GOAL_SECONDS)
            .goal("45.1"),
        Figure::new("seed", &what, "end to end as a process (median)", median, "s").against(
            format!(
                "the seed's Python system: {SEED_SECONDS} s (issue 45, not measured in this run)"
            ),
            median / SEED_SECONDS,
        ),
        Figure::new("seed", &what, "peak RSS of the orchestrator", peak, "MiB"),
    ])
}

/// One round's line: its wall time and each step's share of it, the
/// step's phases (wall) and its workers' (summed over them); what is left
/// is process start, lake open, recovery and the run's own rows.
fn shares(round: usize, wall: f64, report: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    let mut steps = 0.0;
    for step in report["steps"].as_array().into_iter().flatten() {
        let timings = &step["timings"];
        let secs = step["seconds"].as_f64().unwrap_or(0.0)
            + timings["bookkeeping"].as_f64().unwrap_or(0.0);
        steps += secs;
        let units = step["dispatched"].as_u64().unwrap_or(0);
        let phase =
            |v: &serde_json::Value, k: &str| format!("{k} {:.3}", v[k].as_f64().unwrap_or(0.0));
        let own: Vec<String> =
            ["plan", "cache_lookup", "execute", "commit", "collect", "bookkeeping"]
                .iter()
                .map(|k| phase(timings, k))
                .collect();
        let workers = &step["worker_seconds"];
        let theirs: Vec<String> = ["start", "input_read", "compute", "staging"]
            .iter()
            .map(|k| phase(workers, k))
            .collect();
        parts.push(format!(
            "\n  {} {secs:.3} s ({:.0}%, {units} unit{}): {}; workers (s summed): {}",
            step["name"].as_str().unwrap_or("?"),
            100.0 * secs / wall,
            if units == 1 { "" } else { "s" },
            own.join(", "),
            theirs.join(", ")
        ));
    }
    let rest = (wall - steps).max(0.0);
    parts.push(format!(
        "\n  process start, lake open, recovery and run rows {rest:.3} s ({:.0}%)",
        100.0 * rest / wall
    ));
    format!("round {round}: {wall:.2} s{}", parts.concat())
}
