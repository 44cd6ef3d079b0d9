//! What `sluice status` and `sluice runs` show, read from the steps table.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::steps_log::{self, StepRecord, StepStatus};
use crate::error::{Error, Result};
use crate::lake::Lake;

/// The latest state of one step of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepState {
    /// Number.
    pub number: i32,
    /// Name.
    pub name: String,
    /// Operation.
    pub operation: String,
    /// Latest status.
    pub status: StepStatus,
    /// The step run id.
    pub step_run_id: String,
    /// Units.
    pub total: Option<i64>,
    /// Succeeded units.
    pub succeeded: Option<i64>,
    /// Failed units.
    pub failed: Option<i64>,
    /// Cached units.
    pub cached: Option<i64>,
    /// Seconds.
    pub seconds: Option<f64>,
    /// The step's error.
    pub error: Option<String>,
    /// Failed executions: (run id, error).
    pub failures: Vec<(String, String)>,
    /// Per-phase timings (seconds).
    pub timings: BTreeMap<String, f64>,
    /// Its retry rounds: attempt, units, why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<super::events::RetryRound>,
}

/// One pipeline run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunState {
    /// The run id.
    pub pipeline_run_id: String,
    /// Pipeline name.
    pub pipeline: String,
    /// First transition, µs since the epoch.
    pub started: i64,
    /// Last transition, µs since the epoch.
    pub updated: i64,
    /// Overall: the worst step status (running while any step runs).
    pub status: StepStatus,
    /// Steps in order.
    pub steps: Vec<StepState>,
    /// What its checks found (read for one run: [`status`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<super::checks::CheckRecord>,
}

fn state_of(rows: &[&StepRecord]) -> Option<StepState> {
    let last = rows.last()?;
    let meta = &last.metadata;
    Some(StepState {
        number: last.step_number,
        name: last.step_name.clone(),
        operation: last.operation_name.clone(),
        status: last.status,
        step_run_id: last.step_run_id.clone(),
        total: last.total_count,
        succeeded: last.succeeded_count,
        failed: last.failed_count,
        cached: meta.get("cached").and_then(serde_json::Value::as_i64).or(match last.status {
            StepStatus::Skipped => last.total_count,
            _ => None,
        }),
        seconds: last.duration_seconds,
        error: last.error.clone(),
        failures: meta
            .get("failures")
            .and_then(|f| serde_json::from_value(f.clone()).ok())
            .unwrap_or_default(),
        timings: meta
            .get("timings")
            .and_then(|t| serde_json::from_value(t.clone()).ok())
            .unwrap_or_default(),
        retries: meta
            .get("retries")
            .and_then(|r| serde_json::from_value(r.clone()).ok())
            .unwrap_or_default(),
    })
}

fn overall(steps: &[StepState]) -> StepStatus {
    let has = |s: StepStatus| steps.iter().any(|x| x.status == s);
    if has(StepStatus::Running) {
        StepStatus::Running
    } else if has(StepStatus::Abandoned) {
        StepStatus::Abandoned
    } else if has(StepStatus::Failed) {
        StepStatus::Failed
    } else if has(StepStatus::Cancelled) {
        StepStatus::Cancelled
    } else if steps.iter().all(|s| s.status == StepStatus::Skipped) {
        StepStatus::Skipped
    } else {
        StepStatus::Completed
    }
}

/// Every run, newest first. Steps whose orchestrator died are recorded as
/// abandoned first when the writer lock is free (else shown abandoned and
/// left for the next writer to record: reading never waits behind a
/// commit).
pub async fn runs(lake: &Lake) -> Result<Vec<RunState>> {
    // Read before closing: the abandoned rows join what was read whether
    // they were recorded or not.
    let mut rows = steps_log::read(lake, None).await?;
    rows.extend(steps_log::close_abandoned(lake, Some(Duration::ZERO)).await?);
    Ok(runs_of(&rows))
}

/// Every run, newest first, as [`runs`] has them, without writing
/// anything: steps whose orchestrator died are shown abandoned, not
/// recorded so (what a read-only viewer such as `sluice ui` shows).
pub async fn runs_as_seen(lake: &Lake) -> Result<Vec<RunState>> {
    if !crate::lake::delta::table::exists(lake.root(), &crate::lake::layout::steps_table()).await? {
        return Ok(Vec::new());
    }
    let mut rows = steps_log::read(lake, None).await?;
    rows.extend(steps_log::abandoned(lake).await?);
    Ok(runs_of(&rows))
}

/// Runs from the steps table's rows, newest first.
fn runs_of(rows: &[StepRecord]) -> Vec<RunState> {
    let mut by_run: BTreeMap<&str, Vec<&StepRecord>> = BTreeMap::new();
    for row in rows {
        by_run.entry(row.pipeline_run_id.as_str()).or_default().push(row);
    }
    let mut out = Vec::new();
    for (run, rows) in by_run {
        let mut by_step: BTreeMap<(i32, &str), Vec<&StepRecord>> = BTreeMap::new();
        for row in &rows {
            by_step.entry((row.step_number, row.step_run_id.as_str())).or_default().push(row);
        }
        let steps: Vec<StepState> = by_step.values().filter_map(|r| state_of(r)).collect();
        out.push(RunState {
            pipeline_run_id: run.to_owned(),
            pipeline: rows
                .first()
                .and_then(|r| r.metadata.get("pipeline"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            started: rows.iter().map(|r| r.timestamp).min().unwrap_or_default(),
            updated: rows.iter().map(|r| r.timestamp).max().unwrap_or_default(),
            status: overall(&steps),
            steps,
            checks: Vec::new(),
        });
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.started));
    out
}

/// One run (by id or id prefix), or the latest.
pub async fn status(lake: &Lake, run: Option<&str>) -> Result<RunState> {
    let runs = runs(lake).await?;
    pick(lake, runs, run).await
}

/// [`status`] without writing anything (see [`runs_as_seen`]).
pub async fn status_as_seen(lake: &Lake, run: Option<&str>) -> Result<RunState> {
    let runs = runs_as_seen(lake).await?;
    pick(lake, runs, run).await
}

/// Run `run` (an id or prefix; the latest when `None`) of `runs`, with
/// what its checks found.
async fn pick(lake: &Lake, runs: Vec<RunState>, run: Option<&str>) -> Result<RunState> {
    let found = match run {
        None => runs.into_iter().next(),
        Some(prefix) => {
            let mut matching: Vec<RunState> =
                runs.into_iter().filter(|r| r.pipeline_run_id.starts_with(prefix)).collect();
            if matching.len() > 1 {
                return Err(Error::InvalidInput(format!(
                    "run id prefix `{prefix}` matches several runs"
                )));
            }
            matching.pop()
        }
    };
    let Some(mut found) = found else {
        return Err(Error::InvalidInput(match run {
            Some(r) => format!("no pipeline run `{r}`. Help: `sluice runs` lists them"),
            None => "no pipeline has run in this lake yet. Help: `sluice run pipeline.toml`".into(),
        }));
    };
    found.checks = super::checks::read(lake, Some(&found.pipeline_run_id)).await?;
    if found.checks.iter().any(|c| c.result.blocks()) && found.status == StepStatus::Completed {
        found.status = StepStatus::Failed;
    }
    Ok(found)
}
