//! The commit journal (`orchestration/commits`) and per-sequence manifests.
//!
//! Delta makes each table commit atomic, not a sequence of them. A commit
//! sequence therefore leaves two traces that recovery reads:
//!
//! - a *manifest* in `staging_root/.commits/{seq}.json`, written before any
//!   table is touched, listing exactly the run directories of the sequence;
//! - journal rows: `started` before the first table commit, `completed` (with
//!   every table's version) after the last. Each table commit also carries a
//!   Delta application transaction (`sluice-commit`, seq), so recovery can
//!   tell, table by table, whether the sequence already reached it.
//!
//! The `started` row records every table's version before the sequence; while
//! a sequence is in flight, readers read those versions, which is the state
//! the last completed sequence left: a consistent snapshot of all tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifact::value::FieldValue;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::layout::{self, TableSpec};
use crate::lake::table;
use crate::query::scan;
use crate::store::arrow_convert::{build_array, read_value};

/// The Delta application-transaction id of commit sequences.
pub const TXN_APP_ID: &str = "sluice-commit";

/// Where manifests live, under the staging root.
pub const MANIFEST_DIR: &str = ".commits";

/// Phase of a journal row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The sequence is about to commit tables.
    Started,
    /// Every table of the sequence committed.
    Completed,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Started => "started",
            Phase::Completed => "completed",
        }
    }
}

/// One journal row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// Sequence number.
    pub seq: i64,
    /// Phase.
    pub phase: Phase,
    /// Run directories in the sequence.
    pub run_count: i64,
    /// Table versions before (started rows) or after (completed rows) the sequence.
    pub table_versions: BTreeMap<String, u64>,
    /// Rows added per table (completed rows only).
    pub rows_added: BTreeMap<String, u64>,
}

/// The list of run directories of one sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Sequence number.
    pub seq: i64,
    /// Run directories, relative to the staging root.
    pub runs: Vec<PathBuf>,
}

/// Read every journal row, ordered by sequence.
pub async fn read(lake: &Lake) -> Result<Vec<JournalEntry>> {
    let spec = layout::commits_table();
    let handle = table::open(lake.root(), &spec).await?;
    let batches = scan::select(
        &handle,
        &spec.name,
        &["commit_seq", "phase", "run_count", "table_versions", "rows_added"],
        None,
    )
    .await?;
    let mut out = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let get = |i: usize| read_value(batch.column(i).as_ref(), row);
            let json_map = |v: FieldValue| -> BTreeMap<String, u64> {
                v.as_str().and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default()
            };
            out.push(JournalEntry {
                seq: get(0).as_int().unwrap_or_default(),
                phase: if get(1).as_str() == Some("completed") {
                    Phase::Completed
                } else {
                    Phase::Started
                },
                run_count: get(2).as_int().unwrap_or_default(),
                table_versions: json_map(get(3)),
                rows_added: json_map(get(4)),
            });
        }
    }
    out.sort_by_key(|e| (e.seq, e.phase == Phase::Completed));
    Ok(out)
}

/// Append one journal row.
pub async fn append(lake: &Lake, entry: &JournalEntry) -> Result<()> {
    let spec = layout::commits_table();
    let handle = table::open(lake.root(), &spec).await?;
    let schema = table::arrow_schema(&handle, &spec)?;
    let text = |m: &BTreeMap<String, u64>| {
        serde_json::to_string(m).map_err(|e| Error::Internal(e.to_string()))
    };
    let now = chrono::Utc::now().timestamp_micros();
    let mut columns = Vec::new();
    for field in schema.fields() {
        let value = match field.name().as_str() {
            "commit_seq" => FieldValue::Int(entry.seq),
            "phase" => FieldValue::String(entry.phase.as_str().into()),
            "run_count" => FieldValue::Int(entry.run_count),
            "table_versions" => FieldValue::String(text(&entry.table_versions)?),
            "rows_added" => FieldValue::String(text(&entry.rows_added)?),
            "timestamp" => FieldValue::TimestampMicros(now),
            _ => FieldValue::Null,
        };
        columns.push(build_array(&spec.name, field, std::iter::once(&value))?);
    }
    let batch = deltalake::arrow::record_batch::RecordBatch::try_new(schema, columns)
        .map_err(|e| Error::arrow("building a journal row", e))?;
    table::append(handle, &spec, vec![batch]).await?;
    Ok(())
}

/// The table versions to read while a sequence is in flight (started, not
/// completed): those recorded when the earliest such sequence started, i.e.
/// the state after the last completed one. `None` means: read latest.
pub async fn pinned_versions(lake: &Lake) -> Result<Option<BTreeMap<String, u64>>> {
    let spec = layout::commits_table();
    if !table::is_table(&table::table_dir(lake.root(), &spec)) {
        return Ok(None);
    }
    let entries = read(lake).await?;
    let completed: std::collections::BTreeSet<i64> =
        entries.iter().filter(|e| e.phase == Phase::Completed).map(|e| e.seq).collect();
    Ok(entries
        .iter()
        .find(|e| e.phase == Phase::Started && !completed.contains(&e.seq))
        .map(|e| e.table_versions.clone()))
}

/// The current version of every table the commit sequence writes.
pub async fn current_versions(lake: &Lake) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for spec in lake.table_specs() {
        if spec.kind == layout::TableKind::Commits {
            continue;
        }
        out.insert(spec.name.clone(), table_txn(lake, &spec).await?.1);
    }
    Ok(out)
}

fn manifest_dir(staging_root: &Path) -> PathBuf {
    staging_root.join(MANIFEST_DIR)
}

fn manifest_path(staging_root: &Path, seq: i64) -> PathBuf {
    manifest_dir(staging_root).join(format!("{seq:012}.json"))
}

/// Write a manifest atomically (and durably when `sync`).
pub fn write_manifest(staging_root: &Path, manifest: &Manifest, sync: bool) -> Result<()> {
    let dir = manifest_dir(staging_root);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let path = manifest_path(staging_root, manifest.seq);
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec(manifest).map_err(|e| Error::Internal(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    if sync {
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    if sync {
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(&dir, e))?;
    }
    Ok(())
}

/// Every manifest left on disk, by sequence.
pub fn read_manifests(staging_root: &Path) -> Result<Vec<Manifest>> {
    let dir = manifest_dir(staging_root);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue; // a manifest whose write was interrupted: never acted on
        }
        let text = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| Error::Json {
            context: path.display().to_string(),
            message: e.to_string(),
        })?;
        out.push(manifest);
    }
    out.sort_by_key(|m| m.seq);
    Ok(out)
}

/// Remove a sequence's manifest.
pub fn remove_manifest(staging_root: &Path, seq: i64) -> Result<()> {
    let path = manifest_path(staging_root, seq);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// The Delta application-transaction version of `sluice-commit` in a table.
pub async fn table_txn(lake: &Lake, spec: &TableSpec) -> Result<(Option<i64>, u64)> {
    txn_of(&table::open(lake.root(), spec).await?, spec).await
}

/// [`table_txn`] of an already open table.
pub async fn txn_of(
    handle: &deltalake::DeltaTable,
    spec: &TableSpec,
) -> Result<(Option<i64>, u64)> {
    let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let txn = state
        .transaction_version(handle.log_store().as_ref(), TXN_APP_ID)
        .await
        .map_err(|e| Error::delta(&spec.name, e))?;
    Ok((txn, handle.version().unwrap_or_default()))
}
