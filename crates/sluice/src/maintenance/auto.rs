//! Light maintenance after each pipeline step, bounded in time.
//!
//! A step commits its outputs in a few sequences, each adding one small file
//! per table and step partition. Left alone, a step partition that many
//! runs wrote grows thousands of small files, and every scan and dedup
//! check opens them all. After a step completes, this compacts only that
//! step's partitions (content tables are partitioned by step), and only
//! where the partition holds more than `small_files` active files; it
//! starts no new compaction after `budget_seconds`. Unpartitioned tables
//! (index, edges, executions) are left to `sluice compact`.
//!
//! Checkpoints need no help: the writer of a table starts one in the
//! background after every `delta.checkpointInterval`-th commit (spaced wider
//! for tables of many entries) and drops expired log files behind it (see
//! [`crate::lake::delta::tip`]).
//!
//! Off with `[maintenance] auto = false` in `sluice.toml` or
//! `SLUICE_AUTO_MAINTENANCE=0`.

use std::time::{Duration, Instant};

use deltalake::arrow::array::{Array, StringArray};

use super::compact::{self, CompactOptions, CompactReport};
use crate::error::{Error, Result};
use crate::lake::layout::STEP_COLUMN;
use crate::lake::{Lake, delta::table};

/// Compact the partitions of `step` that have too many files. Returns what
/// was compacted.
pub async fn after_step(lake: &Lake, step: i32) -> Result<Vec<CompactReport>> {
    let config = &lake.config().maintenance;
    if !config.enabled() {
        return Ok(Vec::new());
    }
    let clock = Instant::now();
    let budget = Duration::from_secs_f64(config.budget_seconds.max(0.0));
    let mut out = Vec::new();
    for spec in super::select_tables(lake, None).await?.into_iter().filter(|s| s.is_partitioned()) {
        if clock.elapsed() > budget {
            tracing::info!(step, "automatic maintenance stopped at its time budget");
            break;
        }
        let handle = table::open(lake.root(), &spec).await?;
        let files = partition_files(&handle, &spec.name, step)?;
        if files <= config.small_files {
            continue;
        }
        let options = CompactOptions {
            table: Some(spec.name.clone()),
            step: Some(step),
            ..CompactOptions::default()
        };
        let Some(report) = compact::compact(lake, &options).await?.pop() else { continue };
        tracing::info!(table = %spec.name, step, files_before = report.files_before, files_after = report.files_after, "compacted a step partition");
        out.push(report);
    }
    Ok(out)
}

/// Active files of one step's partition.
fn partition_files(handle: &deltalake::DeltaTable, table: &str, step: i32) -> Result<usize> {
    let state = handle.snapshot().map_err(|e| Error::delta(table, e))?;
    let adds = state.add_actions_table(true).map_err(|e| Error::delta(table, e))?;
    let column = format!("partition.{STEP_COLUMN}");
    let Some(values) = adds.column_by_name(&column) else { return Ok(adds.num_rows()) };
    let wanted = step.to_string();
    if let Some(text) = values.as_any().downcast_ref::<StringArray>() {
        return Ok((0..text.len())
            .filter(|i| text.is_valid(*i) && text.value(*i) == wanted)
            .count());
    }
    let ints =
        deltalake::arrow::compute::cast(values, &deltalake::arrow::datatypes::DataType::Int64)
            .map_err(|e| Error::arrow("reading partition values", e))?;
    let ints = ints
        .as_any()
        .downcast_ref::<deltalake::arrow::array::Int64Array>()
        .ok_or_else(|| Error::Internal("partition values did not cast to Int64".into()))?;
    Ok((0..ints.len()).filter(|i| ints.is_valid(*i) && ints.value(*i) == i64::from(step)).count())
}
