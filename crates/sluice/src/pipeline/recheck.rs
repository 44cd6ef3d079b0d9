//! Checks run again, alone: `sluice checks pipeline.toml`.
//!
//! After a threshold is fixed (or to judge what an earlier run left), a
//! pipeline's checks run on the outputs the latest run of each checked
//! step recorded, without running anything else; their rows join the
//! `checks` table under that step run, so readers that require checks
//! follow the new verdict.

use serde_json::Value;

use super::checks::{CheckConfig, CheckResult, CheckedStep, evaluate, record};
use super::steps_log::{self, StepStatus};
use super::validate::Pipeline;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::delta::scan;

/// Run a pipeline's checks again, alone (all of them, or the one named
/// `only`), on the outputs of the latest run of each checked step that
/// completed or was skipped, and record the results as rows of that step
/// run: a reader that requires checks then follows them.
pub async fn rerun(
    lake: &Lake,
    pipeline: &Pipeline,
    only: Option<&str>,
) -> Result<Vec<CheckResult>> {
    let config = &pipeline.config;
    let chosen: Vec<&CheckConfig> =
        config.checks.iter().filter(|c| only.is_none_or(|n| n == c.name)).collect();
    if let (Some(name), true) = (only, chosen.is_empty()) {
        return Err(Error::InvalidInput(format!(
            "pipeline `{}` has no check `{name}`",
            config.name
        )));
    }
    let mut out = Vec::new();
    for (index, step) in config.steps.iter().enumerate() {
        let checks: Vec<&CheckConfig> =
            chosen.iter().copied().filter(|c| c.step == step.name).collect();
        if checks.is_empty() {
            continue;
        }
        let rows =
            steps_log::read(lake, Some(scan::equals("step_name", step.name.as_str()))).await?;
        let last = rows.iter().rev().find(|r| {
            matches!(r.status, StepStatus::Completed | StepStatus::Skipped)
                && r.metadata.get("pipeline").and_then(Value::as_str) == Some(config.name.as_str())
        });
        let Some(last) = last else {
            return Err(Error::InvalidInput(format!(
                "step `{}` of pipeline `{}` has not completed in this lake: nothing to check. \
                 Help: `sluice run` it first",
                step.name, config.name
            )));
        };
        let results = evaluate(lake, &checks, &last.outputs()).await?;
        let at = CheckedStep {
            pipeline_run_id: &last.pipeline_run_id,
            step_run_id: &last.step_run_id,
            step_number: i32::try_from(index + 1).unwrap_or(i32::MAX),
        };
        record(lake, &at, &results).await?;
        out.extend(results);
    }
    Ok(out)
}
