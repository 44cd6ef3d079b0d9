//! Execution-level cache and step results, read from the lake in bulk.
//!
//! The executions table is the cache: a unit whose `execution_spec_id` has a
//! successful execution is not dispatched, and that execution's outputs
//! (from `execution_edges`) stand in for it. Each look-up reads, in bulk,
//! only the files and row groups that can hold the step's keys (key and
//! bloom filters) or one streamed scan of the columns it needs, matched in
//! memory against the step's set of keys — never one query per unit.

use std::collections::{BTreeMap, HashMap, HashSet};

use deltalake::arrow::array::{Array, BooleanArray};

use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::delta::scan::{self, Select};
use crate::lake::{Lake, delta::table, layout};
use crate::records::Direction;

/// The execution cache's look-up, shared with the committer (a spec
/// succeeds once), so it lives below both, in the lake.
pub use crate::lake::spec_successes::successful_runs;

/// Output artifacts of the given runs: run id → (role, artifact id), sorted.
pub async fn outputs_of(
    lake: &Lake,
    run_ids: &HashSet<String>,
) -> Result<HashMap<String, Vec<(String, ArtifactId)>>> {
    let mut out: HashMap<String, Vec<(String, ArtifactId)>> = HashMap::new();
    if run_ids.is_empty() {
        return Ok(out);
    }
    let spec = layout::execution_edges_table();
    let handle = table::open(lake.root(), &spec).await?;
    Select::columns(scan::columns(&["execution_run_id", "role", "artifact_id"]))
        .filter(scan::equals("direction", Direction::Output.as_str()))
        .for_each_batch(&handle, &spec.name, |batch| {
            let runs = scan::text_column(batch, 0, &spec.name)?;
            let roles = scan::text_column(batch, 1, &spec.name)?;
            let ids = scan::text_column(batch, 2, &spec.name)?;
            for row in 0..batch.num_rows() {
                let run = runs.value(row);
                if run_ids.contains(run) {
                    out.entry(run.to_owned())
                        .or_default()
                        .push((roles.value(row).to_owned(), ids.value(row).parse()?));
                }
            }
            Ok(())
        })
        .await?;
    for list in out.values_mut() {
        list.sort();
        list.dedup();
    }
    Ok(out)
}

/// The committed result of one execution of a step run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionResult {
    /// Whether it succeeded.
    pub success: bool,
    /// Its error.
    pub error: Option<String>,
}

/// Every committed execution of a step run: run id → result. Reads only the
/// step's partition.
pub async fn step_results(
    lake: &Lake,
    step_number: i32,
    step_run_id: &str,
) -> Result<BTreeMap<String, ExecutionResult>> {
    let spec = layout::executions_table();
    let handle = table::open(lake.root(), &spec).await?;
    let filter = scan::equals(layout::STEP_COLUMN, step_number)
        .and(scan::equals("step_run_id", step_run_id));
    let mut out = BTreeMap::new();
    Select::columns(scan::columns(&["execution_run_id", "success", "error"]))
        .filter(filter)
        .for_each_batch(&handle, &spec.name, |batch| {
            let runs = scan::text_column(batch, 0, &spec.name)?;
            let ok = batch
                .column(1)
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| Error::Internal("`executions.success` is not boolean".into()))?;
            let errors = scan::text_column(batch, 2, &spec.name)?;
            for row in 0..batch.num_rows() {
                out.insert(
                    runs.value(row).to_owned(),
                    ExecutionResult {
                        success: ok.value(row),
                        error: errors.is_valid(row).then(|| errors.value(row).to_owned()),
                    },
                );
            }
            Ok(())
        })
        .await?;
    Ok(out)
}
