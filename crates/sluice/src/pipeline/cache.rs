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
use deltalake::arrow::datatypes::DataType;

use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::key_filter::{self, Key};
use crate::lake::lookup::Lookup;
use crate::lake::scan::{self, Select};
use crate::lake::{Lake, layout, table};
use crate::records::Direction;

/// For each wanted spec id, the run id of one successful execution (the
/// latest to finish).
///
/// The executions table keeps a key filter of `execution_spec_id` per
/// commit, and a bloom filter of it per row group: only the files whose
/// filter may hold one of the specs are opened, and in them only the row
/// groups that may, so the cost follows the executions of these specs (and
/// the number of commits), not the size of the table.
pub async fn successful_runs(
    lake: &Lake,
    specs: &HashSet<String>,
) -> Result<HashMap<String, String>> {
    let mut out: HashMap<String, (i64, String)> = HashMap::new();
    if specs.is_empty() {
        return Ok(HashMap::new());
    }
    let spec = layout::executions_table();
    let handle = table::open(lake.root(), &spec).await?;
    let column = "execution_spec_id";
    let clock = std::time::Instant::now();
    let active = table::active_files(&handle, &spec)?;
    let filters = key_filter::read_column(&table::table_dir(lake.root(), &spec), column);
    let filters_ms = clock.elapsed().as_millis() as u64;
    let wanted: Vec<String> = specs.iter().cloned().collect();
    let plan = key_filter::plan(&active, &filters, &wanted, |s| Key::of_value(s));
    let plan_ms = clock.elapsed().as_millis() as u64 - filters_ms;
    let batches = Lookup::new(column, wanted)
        .columns(&[column, "execution_run_id", "timestamp_end", "success"])
        .read_planned(&handle, &spec, &plan)
        .await?;
    tracing::debug!(
        specs = specs.len(),
        filters = filters.len(),
        candidates = plan.candidates.len(),
        uncovered = plan.uncovered.len(),
        filters_ms,
        plan_ms,
        read_ms = clock.elapsed().as_millis() as u64 - filters_ms - plan_ms,
        "execution cache looked up"
    );
    for batch in &batches {
        let spec_ids = scan::text_column(batch, 0, &spec.name)?;
        let run_ids = scan::text_column(batch, 1, &spec.name)?;
        let ends = deltalake::arrow::compute::cast(batch.column(2), &DataType::Int64)
            .map_err(|e| Error::arrow(&spec.name, e))?;
        let ends = ends.as_any().downcast_ref::<deltalake::arrow::array::Int64Array>();
        let success = batch.column(3).as_any().downcast_ref::<BooleanArray>();
        for row in 0..batch.num_rows() {
            if !success.is_some_and(|s| s.is_valid(row) && s.value(row)) {
                continue;
            }
            let s = spec_ids.value(row);
            let end = ends.filter(|a| a.is_valid(row)).map_or(0, |a| a.value(row));
            let slot = out.entry(s.to_owned()).or_insert((i64::MIN, String::new()));
            if end >= slot.0 {
                *slot = (end, run_ids.value(row).to_owned());
            }
        }
    }
    Ok(out.into_iter().map(|(k, (_, run))| (k, run)).collect())
}

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
