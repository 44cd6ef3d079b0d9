//! `sluice ingest dedup`: remove exact duplicate rows from a table that was
//! written outside sluice (or before its keys were enforced).
//!
//! Every row is hashed (BLAKE3 over its Arrow row encoding, all columns);
//! the first row of each hash is kept, in the table's file order. Only the
//! files holding a duplicate are rewritten: their kept rows go to new files,
//! and the commit removes the old ones and adds the new as exactly the
//! version after the one that was read, so a writer appending meanwhile is
//! never overwritten (the dedup starts over on top of it instead).

use std::collections::HashSet;

use deltalake::DeltaTable;
use deltalake::arrow::array::BooleanArray;
use deltalake::arrow::compute::filter_record_batch;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::arrow::row::{RowConverter, SortField};
use deltalake::kernel::{Action, Add, Remove};
use deltalake::protocol::DeltaOperation;
use serde::Serialize;

use super::transform::source;
use crate::error::{Error, Result};
use crate::lake::append::{self, CommitSpec};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::TableSpec;

/// How many times a dedup starts over after another writer committed.
const MAX_ATTEMPTS: usize = 20;

/// What a dedup found and did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DedupReport {
    /// The table.
    pub table: String,
    /// Rows before.
    pub rows_before: u64,
    /// Rows after (= before with `--dry-run`).
    pub rows_after: u64,
    /// Duplicate rows found.
    pub duplicates: u64,
    /// Data files rewritten (to be, with `--dry-run`).
    pub files_rewritten: usize,
    /// The version the rewrite committed (`None`: nothing to do, or a dry run).
    pub version: Option<u64>,
}

/// Remove exact duplicate rows of the ingestion table `spec` of the lake
/// (see the module doc).
pub async fn dedup(lake: &LakeRoot, spec: &TableSpec, dry_run: bool) -> Result<DedupReport> {
    // Begin as a writer of the lake (lake/writer.rs).
    let _writer = match dry_run {
        false => Some(crate::lake::writer::ingestion(lake).await?),
        true => None,
    };
    let name = spec.name.as_str();
    for _ in 0..MAX_ATTEMPTS {
        let mut handle = table::open(lake, spec).await?;
        let found = find(&handle, name).await?;
        let mut report = DedupReport {
            table: name.to_owned(),
            rows_before: found.rows,
            rows_after: found.rows,
            duplicates: found.duplicates,
            files_rewritten: found.rewrites.len(),
            version: None,
        };
        if dry_run || found.rewrites.is_empty() {
            return Ok(report);
        }
        let kept: Vec<RecordBatch> = found.rewrites.iter().flat_map(|r| r.kept.clone()).collect();
        let adds = append::write_files(&handle, name, &kept, table::writer_properties()).await?;
        let mut actions: Vec<Action> =
            found.rewrites.iter().map(|r| Action::Remove(r.remove.clone())).collect();
        actions.extend(adds.iter().cloned().map(Action::Add));
        let operation = DeltaOperation::Delete {
            predicate: Some("exact duplicate rows (sluice ingest dedup)".into()),
        };
        let spec = CommitSpec::default();
        if let Some(version) =
            append::try_commit_actions_next(&mut handle, name, actions, operation, &spec, &adds)
                .await?
        {
            report.rows_after = found.rows - found.duplicates;
            report.version = Some(version);
            return Ok(report);
        }
        append::remove_files(&handle, &adds).await;
        tracing::debug!(table = name, "another writer committed during the dedup; starting over");
    }
    Err(Error::operation(
        "dedup",
        format!("table `{name}`: other writers committed {MAX_ATTEMPTS} times during the dedup"),
    ))
}

/// A file holding duplicates and the rows of it that stay.
struct Rewrite {
    remove: Remove,
    kept: Vec<RecordBatch>,
}

struct Found {
    rows: u64,
    duplicates: u64,
    rewrites: Vec<Rewrite>,
}

/// Hash every row, file by file; collect the files with a row seen before.
async fn find(handle: &DeltaTable, name: &str) -> Result<Found> {
    let snapshot = handle.snapshot().map_err(|e| Error::delta(name, e))?;
    let mut files: Vec<(Add, Remove)> = snapshot
        .log_data()
        .iter()
        .map(|f| {
            let add = Add {
                path: f.path().into_owned(),
                partition_values: f.partition_values_map(),
                size: f.size(),
                modification_time: f.modification_time(),
                data_change: true,
                ..Add::default()
            };
            (add, f.remove_action(true))
        })
        .collect();
    files.sort_by(|(a, _), (b, _)| {
        (a.modification_time, &a.path).cmp(&(b.modification_time, &b.path))
    });
    let schema = snapshot.snapshot().arrow_schema();
    let converter = RowConverter::new(
        schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect(),
    )
    .map_err(|e| Error::arrow(format!("hashing the rows of `{name}`"), e))?;
    let mut seen: HashSet<[u8; 32]> = HashSet::new();
    let mut found = Found { rows: 0, duplicates: 0, rewrites: Vec::new() };
    for (file, remove) in files {
        let rows = source::read(handle, name, std::slice::from_ref(&file)).await?;
        let mut kept = Vec::with_capacity(rows.batches.len());
        let mut dropped = 0u64;
        for batch in rows.batches {
            let encoded = converter
                .convert_columns(batch.columns())
                .map_err(|e| Error::arrow(format!("hashing the rows of `{name}`"), e))?;
            let keep: BooleanArray = encoded
                .iter()
                .map(|row| Some(seen.insert(*blake3::hash(row.as_ref()).as_bytes())))
                .collect();
            dropped += (batch.num_rows() - keep.true_count()) as u64;
            found.rows += batch.num_rows() as u64;
            kept.push(
                filter_record_batch(&batch, &keep)
                    .map_err(|e| Error::arrow(format!("table `{name}`"), e))?,
            );
        }
        if dropped > 0 {
            found.duplicates += dropped;
            found.rewrites.push(Rewrite { remove, kept });
        }
    }
    Ok(found)
}
