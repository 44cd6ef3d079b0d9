//! Machine-readable bench figures: each `sluice bench` run can append its
//! figures as JSON lines (`--results FILE`, or `SLUICE_BENCH_RESULTS`), one
//! object per figure with the workload, the value and its unit, the
//! baseline or limit it is compared with and the ratio, the goal, and where
//! it was measured (git revision, build profile, CPUs, date).
//! `scripts/bench-report` turns the file into docs/PERFORMANCE.md's table.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Which bench (`commit`, `pipeline`, `ingest`, …).
    pub bench: &'static str,
    /// The workload, in words.
    pub workload: String,
    /// What was measured.
    pub figure: String,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// What it is compared with (measured in the same run, or a goal).
    pub baseline: Option<String>,
    /// value / baseline (or baseline / value for rates, as the baseline says).
    pub ratio: Option<f64>,
    /// The goal this figure answers, if any.
    pub goal: Option<String>,
}

impl Figure {
    /// A figure without a baseline.
    pub fn new(
        bench: &'static str,
        workload: &str,
        figure: &str,
        value: f64,
        unit: &'static str,
    ) -> Figure {
        Figure {
            bench,
            workload: workload.to_owned(),
            figure: figure.to_owned(),
            value,
            unit,
            baseline: None,
            ratio: None,
            goal: None,
        }
    }

    /// Compared with `baseline`.
    pub fn against(mut self, baseline: impl Into<String>, ratio: f64) -> Figure {
        self.baseline = Some(baseline.into());
        self.ratio = Some(ratio);
        self
    }

    /// Answering `goal`.
    pub fn goal(mut self, goal: impl Into<String>) -> Figure {
        self.goal = Some(goal.into());
        self
    }
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    figure: &'a Figure,
    git_rev: &'a str,
    profile: &'static str,
    cpus: usize,
    at: String,
}

/// The revision of the source tree this binary was built from (recorded
/// by the build script; see `build.rs`).
fn git_rev() -> String {
    env!("SLUICE_GIT_REV").to_owned()
}

/// Append `figures` to the results file, if one was asked for.
pub fn record(path: Option<&Path>, figures: &[Figure]) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    for line in json_lines(figures)? {
        writeln!(file, "{line}")?;
    }
    Ok(())
}

/// Each figure as one JSON object, with where and by what it was measured.
pub fn json_lines(figures: &[Figure]) -> anyhow::Result<Vec<String>> {
    let rev = git_rev();
    let profile = if cfg!(debug_assertions) { "dev" } else { "release" };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let at = chrono::Utc::now().to_rfc3339();
    figures
        .iter()
        .map(|figure| {
            let line = Line { figure, git_rev: &rev, profile, cpus, at: at.clone() };
            Ok(serde_json::to_string(&line)?)
        })
        .collect()
}
