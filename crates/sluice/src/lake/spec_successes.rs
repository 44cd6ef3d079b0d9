//! Which specs have a successful execution, and by which run: the one
//! look-up the execution cache (a unit whose spec succeeded is not run
//! again) and the committer (a spec succeeds once) both ask. It lives here,
//! below both, so the committer never reaches up into the pipeline.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::io::location::LakeRoot;
use super::keys::in_store::StoreKeys;
use super::keys::key_filter::{self, Key};
use super::read::lookup::Lookup;
use super::read::result_set::{self, SpecResult};
use super::{Lake, delta::table, layout};
use crate::error::Result;

/// For each wanted spec id, the run id of one successful execution (the
/// latest to finish; the larger run id on a tie).
///
/// The executions table keeps a key filter of `execution_spec_id` per
/// commit: only the versions whose filter may hold one of the specs are
/// looked at. Each such version's result set (see
/// [`result_set`](crate::lake::read::result_set)) answers for it from one block
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
    let filters = match lake.root() {
        LakeRoot::Local(root) => key_filter::read_column(&table::table_dir(root, &spec), column),
        LakeRoot::Store(store) => {
            let live = active.iter().map(String::as_str).collect();
            let head = handle.version().unwrap_or_default();
            StoreKeys::of(store, &spec).filters(head, &live, Some(column)).await
        }
    };
    let filters_ms = clock.elapsed().as_millis() as u64;
    let wanted: Vec<String> = specs.iter().cloned().collect();
    let mut plan = key_filter::plan(&active, &filters, &wanted, |s| Key::of_value(s));
    let candidates = plan.candidates.len();
    let mut latest: BTreeMap<String, SpecResult> = BTreeMap::new();
    let settled = match lake.root().local() {
        Some(root) => {
            result_set::settle(&table::table_dir(root, &spec), &mut plan, |s| Key::of_value(s))
        }
        None => Vec::new(),
    };
    for (spec_id, result) in settled {
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
