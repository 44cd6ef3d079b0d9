//! What units printed, for `sluice logs`: a failed unit's error, its
//! inputs and the end of its output, found by pipeline run or by execution.
//!
//! Nothing new is recorded for this: a unit's last 4 KiB of stdout and
//! stderr are already in `executions.tool_output`, its error in `error`,
//! its inputs in `execution_edges`. This module finds the units a user
//! names — a run (id or prefix; the latest by default), optionally one of
//! its steps, or one execution (id or prefix) — and reads those columns.

use std::collections::BTreeMap;

use deltalake::arrow::array::{
    Array, BooleanArray, Int32Array, RecordBatch, TimestampMicrosecondArray,
};
use deltalake::datafusion::prelude::{Expr, lit};
use serde::Serialize;

use super::status::{self, RunState};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::delta::scan::{self, Select, text_column};
use crate::lake::journal::snapshot::LakeSnapshot;
use crate::lake::layout::{self, TableSpec};

/// One unit's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitLog {
    /// The step's number.
    pub step_number: i32,
    /// The step's name (empty when the unit was found by execution id and
    /// its run is not in the steps table).
    pub step: String,
    /// The execution's run id.
    pub execution_run_id: String,
    /// Whether it succeeded.
    pub success: bool,
    /// Why it failed.
    pub error: Option<String>,
    /// The last 4 KiB of its stdout and stderr, when it ran a program.
    pub output: Option<String>,
    /// Its inputs: (role, artifact id).
    pub inputs: Vec<(String, String)>,
}

/// Which units [`logs`] reads.
#[derive(Debug, Clone, Default)]
pub struct LogsRequest {
    /// A pipeline run or an execution, by id or unique prefix; the latest
    /// run when `None`.
    pub target: Option<String>,
    /// Only this step of the run (name or number).
    pub step: Option<String>,
    /// Every unit, not only the failed ones.
    pub all: bool,
}

/// The units a request names, in step order.
pub async fn logs(lake: &Lake, request: &LogsRequest) -> Result<Vec<UnitLog>> {
    let target = request.target.as_deref();
    // A reader: steps whose orchestrator died show abandoned, unrecorded.
    let runs = status::runs_as_seen(lake).await?;
    let matching: Vec<&RunState> = match target {
        None => runs.iter().take(1).collect(),
        Some(prefix) => runs.iter().filter(|r| r.pipeline_run_id.starts_with(prefix)).collect(),
    };
    let filter = match (matching.as_slice(), target) {
        ([run], _) => run_filter(run, request)?,
        ([], None) => {
            return Err(Error::InvalidInput(
                "no pipeline has run in this lake yet. Help: `sluice run pipeline.toml`".into(),
            ));
        }
        ([], Some(id)) => execution_filter(id)?,
        (many, prefix) => {
            return Err(Error::InvalidInput(format!(
                "run id prefix `{}` matches {} runs; give more of the id",
                prefix.unwrap_or_default(),
                many.len()
            )));
        }
    };
    // A run shows its failed units (all with `all`); an execution named by
    // id is shown whatever its outcome.
    let filter = if request.all || matching.is_empty() {
        filter
    } else {
        filter.and(scan::equals("success", false))
    };
    // One point of the lake for both reads: a unit and its inputs as of
    // the same lake version.
    let point = lake.read_point().await?;
    let batches = read(
        lake,
        &point,
        &layout::executions_table(),
        &[
            "execution_run_id",
            "step_run_id",
            layout::STEP_COLUMN,
            "success",
            "error",
            "tool_output",
            "timestamp_start",
        ],
        filter,
    )
    .await?;
    let names = step_names(&runs);
    let mut units = Vec::new();
    for batch in &batches {
        units.extend(unit_rows(batch, &names)?);
    }
    units.sort_by_key(|(unit, started)| (unit.step_number, *started));
    let mut units: Vec<UnitLog> = units.into_iter().map(|(unit, _)| unit).collect();
    if units.is_empty() && target.is_some() && matching.is_empty() {
        return Err(Error::InvalidInput(format!(
            "no pipeline run or execution `{}`. Help: `sluice runs` lists runs",
            target.unwrap_or_default()
        )));
    }
    // (An execution has one row: two rows are two executions.)
    if let [one, two, ..] = units.as_slice()
        && matching.is_empty()
    {
        return Err(Error::InvalidInput(format!(
            "execution id prefix `{}` matches several executions ({}, {}, …); give more of the id",
            target.unwrap_or_default(),
            one.execution_run_id,
            two.execution_run_id
        )));
    }
    add_inputs(lake, &point, &mut units).await?;
    Ok(units)
}

/// The condition for a run's units (optionally one step's).
fn run_filter(run: &RunState, request: &LogsRequest) -> Result<Expr> {
    let steps: Vec<_> = match &request.step {
        None => run.steps.iter().collect(),
        Some(step) => {
            let found: Vec<_> = run
                .steps
                .iter()
                .filter(|s| s.name == *step || s.number.to_string() == *step)
                .collect();
            if found.is_empty() {
                let known: Vec<String> =
                    run.steps.iter().map(|s| format!("{} ({})", s.number, s.name)).collect();
                return Err(Error::InvalidInput(format!(
                    "run {} has no step `{step}`; its steps: {}",
                    run.pipeline_run_id,
                    known.join(", ")
                )));
            }
            found
        }
    };
    if steps.is_empty() {
        return Ok(lit(false));
    }
    Ok(scan::in_list("step_run_id", steps.iter().map(|s| s.step_run_id.clone())))
}

/// The condition for the executions whose run id starts with `prefix`.
fn execution_filter(prefix: &str) -> Result<Expr> {
    if prefix.len() < 4 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidInput(format!(
            "no pipeline run `{prefix}`, and it is not an execution id (hex digits, at least 4). \
             Help: `sluice runs` lists runs"
        )));
    }
    Ok(scan::starts_with("execution_run_id", &prefix.to_ascii_lowercase()))
}

/// The rows of a table at `point` (none before the table exists).
async fn read(
    lake: &Lake,
    point: &LakeSnapshot,
    spec: &TableSpec,
    columns: &[&str],
    filter: Expr,
) -> Result<Vec<RecordBatch>> {
    let Some(handle) = lake.read_table(spec, point).await? else { return Ok(Vec::new()) };
    Select::columns(scan::columns(columns)).filter(filter).collect(&handle, &spec.name).await
}

/// Step run id → step name, over every run.
fn step_names(runs: &[RunState]) -> BTreeMap<String, String> {
    runs.iter()
        .flat_map(|r| r.steps.iter())
        .map(|s| (s.step_run_id.clone(), s.name.clone()))
        .collect()
}

/// Units of an executions batch, each with its start time.
fn unit_rows(batch: &RecordBatch, names: &BTreeMap<String, String>) -> Result<Vec<(UnitLog, i64)>> {
    let table = "executions";
    let runs = text_column(batch, 0, table)?;
    let steps = text_column(batch, 1, table)?;
    let numbers = batch.column(2).as_any().downcast_ref::<Int32Array>();
    let success = batch.column(3).as_any().downcast_ref::<BooleanArray>();
    let errors = text_column(batch, 4, table)?;
    let outputs = text_column(batch, 5, table)?;
    let started = batch.column(6).as_any().downcast_ref::<TimestampMicrosecondArray>();
    let (Some(numbers), Some(success), Some(started)) = (numbers, success, started) else {
        return Err(Error::Internal("executions: unexpected column types".into()));
    };
    let text = |a: &deltalake::arrow::array::StringArray, i: usize| {
        a.is_valid(i).then(|| a.value(i).to_owned()).filter(|t| !t.is_empty())
    };
    Ok((0..batch.num_rows())
        .map(|i| {
            let unit = UnitLog {
                step_number: numbers.value(i),
                step: names.get(steps.value(i)).cloned().unwrap_or_default(),
                execution_run_id: runs.value(i).to_owned(),
                success: success.value(i),
                error: text(&errors, i),
                output: text(&outputs, i),
                inputs: Vec::new(),
            };
            (unit, started.value(i))
        })
        .collect())
}

/// Fill in each unit's inputs from `execution_edges`.
async fn add_inputs(lake: &Lake, point: &LakeSnapshot, units: &mut [UnitLog]) -> Result<()> {
    if units.is_empty() {
        return Ok(());
    }
    let runs = units.iter().map(|u| u.execution_run_id.clone());
    let filter = scan::in_list("execution_run_id", runs)
        .and(scan::equals("direction", crate::records::Direction::Input.as_str()));
    let batches = read(
        lake,
        point,
        &layout::execution_edges_table(),
        &["execution_run_id", "role", "artifact_id"],
        filter,
    )
    .await?;
    let mut by_run: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for batch in &batches {
        let runs = text_column(batch, 0, "execution_edges")?;
        let roles = text_column(batch, 1, "execution_edges")?;
        let ids = text_column(batch, 2, "execution_edges")?;
        for i in 0..batch.num_rows() {
            by_run
                .entry(runs.value(i).to_owned())
                .or_default()
                .push((roles.value(i).to_owned(), ids.value(i).to_owned()));
        }
    }
    for unit in units {
        let mut inputs = by_run.remove(&unit.execution_run_id).unwrap_or_default();
        inputs.sort();
        unit.inputs = inputs;
    }
    Ok(())
}
