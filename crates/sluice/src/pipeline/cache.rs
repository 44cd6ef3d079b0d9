//! Execution-level cache and step results, read from the lake in bulk.
//!
//! The executions table is the cache: a unit whose `execution_spec_id` has a
//! successful execution is not dispatched, and that execution's outputs
//! (from `execution_edges`) stand in for it. Each look-up is one streamed
//! scan of the columns it needs, matched in memory against the step's set of
//! keys — never one query per unit.

use std::collections::{BTreeMap, HashMap, HashSet};

use deltalake::arrow::array::{Array, BooleanArray, StringArray};
use deltalake::arrow::record_batch::RecordBatch;

use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::{Lake, layout, table};
use crate::query::scan;

/// A text column as a plain `StringArray`, whatever the scan produced
/// (`Utf8`, `Utf8View`, dictionary).
pub(crate) fn strings(batch: &RecordBatch, i: usize, table: &str) -> Result<StringArray> {
    let column = deltalake::arrow::compute::cast(
        batch.column(i),
        &deltalake::arrow::datatypes::DataType::Utf8,
    )
    .map_err(|e| Error::arrow(format!("`{table}` column {i}"), e))?;
    column
        .as_any()
        .downcast_ref::<StringArray>()
        .cloned()
        .ok_or_else(|| Error::Internal(format!("`{table}` column {i} is not text")))
}

/// For each wanted spec id, the run id of one successful execution (the
/// latest to finish).
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
    scan::for_each_batch(
        &handle,
        &spec.name,
        &["execution_spec_id", "execution_run_id", "CAST(timestamp_end AS BIGINT) AS t"],
        Some("success"),
        |batch| {
            let spec_ids = strings(batch, 0, "executions")?;
            let run_ids = strings(batch, 1, "executions")?;
            let ends =
                batch.column(2).as_any().downcast_ref::<deltalake::arrow::array::Int64Array>();
            for row in 0..batch.num_rows() {
                let s = spec_ids.value(row);
                if !specs.contains(s) {
                    continue;
                }
                let end = ends.filter(|a| a.is_valid(row)).map_or(0, |a| a.value(row));
                let slot = out.entry(s.to_owned()).or_insert((i64::MIN, String::new()));
                if end >= slot.0 {
                    *slot = (end, run_ids.value(row).to_owned());
                }
            }
            Ok(())
        },
    )
    .await?;
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
    scan::for_each_batch(
        &handle,
        &spec.name,
        &["execution_run_id", "role", "artifact_id"],
        Some("direction = 'output'"),
        |batch| {
            let runs = strings(batch, 0, "execution_edges")?;
            let roles = strings(batch, 1, "execution_edges")?;
            let ids = strings(batch, 2, "execution_edges")?;
            for row in 0..batch.num_rows() {
                let run = runs.value(row);
                if run_ids.contains(run) {
                    out.entry(run.to_owned())
                        .or_default()
                        .push((roles.value(row).to_owned(), ids.value(row).parse()?));
                }
            }
            Ok(())
        },
    )
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
    let filter = format!(
        "origin_step_number = {step_number} AND step_run_id = '{}'",
        step_run_id.replace('\'', "''")
    );
    let mut out = BTreeMap::new();
    scan::for_each_batch(
        &handle,
        &spec.name,
        &["execution_run_id", "success", "error"],
        Some(&filter),
        |batch| {
            let runs = strings(batch, 0, "executions")?;
            let ok = batch
                .column(1)
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| Error::Internal("`executions.success` is not boolean".into()))?;
            let errors = strings(batch, 2, "executions")?;
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
        },
    )
    .await?;
    Ok(out)
}
