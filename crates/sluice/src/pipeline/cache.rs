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
use crate::lake::key_filter::{self, Key};
use crate::lake::lookup::Lookup;
use crate::lake::result_set::{self, SpecResult};
use crate::lake::scan::{self, Select};
use crate::lake::{Lake, layout, table};
use crate::records::Direction;

/// For each wanted spec id, the run id of one successful execution (the
/// latest to finish; the larger run id on a tie).
///
/// The executions table keeps a key filter of `execution_spec_id` per
/// commit: only the versions whose filter may hold one of the specs are
/// looked at. Each such version's result set (see
/// [`result_set`](crate::lake::result_set)) answers for it from one block
/// per spec; the files of versions without a usable set are read, only the
/// row groups whose bloom filter may hold a spec. So the cost follows the
/// executions of these specs (and the number of commits), not the size of
/// the table.
pub async fn successful_runs(
    lake: &Lake,
    specs: &HashSet<String>,
) -> Result<HashMap<String, String>> {
    if specs.is_empty() {
        return Ok(HashMap::new());
    }
    let spec = layout::executions_table();
    let handle = table::open(lake.root(), &spec).await?;
    let column = "execution_spec_id";
    let clock = std::time::Instant::now();
    let active = table::active_files(&handle, &spec)?;
    let dir = table::table_dir(lake.root(), &spec);
    let filters = key_filter::read_column(&dir, column);
    let filters_ms = clock.elapsed().as_millis() as u64;
    let wanted: Vec<String> = specs.iter().cloned().collect();
    let mut plan = key_filter::plan(&active, &filters, &wanted, |s| Key::of_value(s));
    let candidates = plan.candidates.len();
    let mut latest: BTreeMap<String, SpecResult> = BTreeMap::new();
    for (spec_id, result) in result_set::settle(&dir, &mut plan, |s| Key::of_value(s)) {
        result_set::keep_latest(&mut latest, spec_id, result);
    }
    let plan_ms = clock.elapsed().as_millis() as u64 - filters_ms;
    if !plan.candidates.is_empty() || !plan.uncovered.is_empty() {
        let batches = Lookup::new(column, wanted)
            .columns(&result_set::COLUMNS)
            .read_planned(&handle, &spec, &plan)
            .await?;
        for batch in &batches {
            result_set::for_each_success(batch, &spec.name, |spec_id, result| {
                result_set::keep_latest(&mut latest, spec_id.to_owned(), result);
            })?;
        }
    }
    tracing::debug!(
        specs = specs.len(),
        filters = filters.len(),
        candidates,
        settled = candidates - plan.candidates.len(),
        uncovered = plan.uncovered.len(),
        filters_ms,
        plan_ms,
        read_ms = clock.elapsed().as_millis() as u64 - filters_ms - plan_ms,
        "execution cache looked up"
    );
    Ok(latest.into_iter().map(|(spec, result)| (spec, result.run_id)).collect())
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
