//! Compaction: Delta OPTIMIZE per partition, Z-ordered, zstd — then key
//! filters for the files it wrote.
//!
//! A lake built by thousands of small commits has thousands of small files:
//! every scan opens them all, every open replays their add actions. OPTIMIZE
//! rewrites each partition's files into a few large ones in one commit
//! (removes + adds, so readers at older versions are unaffected). Z-ordering
//! by the column a table is looked up by (`artifact_id` for content and the
//! index, `execution_spec_id` for executions, the artifact columns for edge
//! tables) gives each new file a narrow range of that column, so file
//! statistics prune lookups on their own. The key filters of the replaced
//! files no longer count (their files are gone); compaction writes new ones
//! for the files it added, so de-duplication reads as little as before.
//!
//! Compaction then writes a checkpoint at its version: without it, every
//! open after it would replay one remove action per replaced file.
//!
//! The journal is the exception: it is rewritten by its own exactly-next
//! rewrite, never by OPTIMIZE (see [`compact_journal`]).
//!
//! A compaction racing a commit loses nothing: each is one Delta commit, and
//! a de-duplicating append that finds the compaction took its version checks
//! what it added (rewritten rows of keys it already knew were present) and
//! commits on top (see [`crate::lake::append`]).

use std::num::NonZeroU64;
use std::time::Instant;

use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::optimize::OptimizeType;
use deltalake::{FilterOp, FilterValue};
use serde::Serialize;

use super::race_undo::{Compaction, READ_KEY, Undo};
use crate::error::{Error, Result};
use crate::lake::append;
use crate::lake::layout::{STEP_COLUMN, TableKind, TableSpec};
use crate::lake::{Lake, delta::table, journal, keys::key_filter};
use crate::progress::Progress;

/// What to compact.
#[derive(Debug, Clone, Default)]
pub struct CompactOptions {
    /// One table (default: every table).
    pub table: Option<String>,
    /// One step's partition (partitioned tables only).
    pub step: Option<i32>,
    /// Z-order columns (default: per table, see the module doc; empty means
    /// plain bin-packing).
    pub zorder: Option<Vec<String>>,
    /// Target file size in bytes (default: Delta's, 100 MiB).
    pub target_size: Option<u64>,
    /// Only say what would be compacted.
    pub dry_run: bool,
    /// Told before each table.
    pub progress: Progress,
}

/// What compaction did to one table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompactReport {
    /// The table.
    pub table: String,
    /// Z-order columns used (empty: bin-packing).
    pub zorder: Vec<String>,
    /// Active files before.
    pub files_before: u64,
    /// Active files after.
    pub files_after: u64,
    /// Bytes of active files before.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// The version compaction committed (none in a dry run, or when there
    /// was nothing to do).
    pub version: Option<u64>,
    /// Sidecar files moved out of the look-ups' way: those of versions
    /// whose files are all gone (see [`key_filter::retire_dead`]).
    pub sidecars_retired: usize,
    /// Wall time.
    pub seconds: f64,
}

/// Retire the sidecars of the versions whose files `handle` (the table as
/// compacted) no longer holds.
fn retire(lake: &Lake, spec: &TableSpec, handle: &deltalake::DeltaTable) -> Result<usize> {
    let live = table::active_files(handle, spec)?;
    let live = live.iter().map(String::as_str).collect();
    Ok(lake
        .root()
        .local()
        .map_or(0, |root| key_filter::retire_dead(&table::table_dir(root, spec), &live)))
}

/// Compact the journal by its own rewrite, committed as exactly the
/// version after the one it read ([`journal::rewrite_if_more_files_than`]):
/// OPTIMIZE, which delta-rs commits on top of whatever came first, could
/// land on another rewrite of the same row files and keep both copies of
/// every journal row.
async fn compact_journal(
    lake: &Lake,
    spec: &TableSpec,
    mut report: CompactReport,
    clock: Instant,
) -> Result<CompactReport> {
    report.version = journal::rewrite_if_more_files_than(lake.root(), 1).await?;
    let handle = table::open(lake.root(), spec).await?;
    (report.files_after, report.bytes_after) = file_stats(&handle, spec)?;
    report.sidecars_retired = retire(lake, spec, &handle)?;
    report.seconds = clock.elapsed().as_secs_f64();
    Ok(report)
}

/// The columns a table is Z-ordered by unless told otherwise.
pub fn default_zorder(spec: &TableSpec) -> Vec<String> {
    let columns: &[&str] = match spec.kind {
        TableKind::Content(_) | TableKind::Index => &["artifact_id"],
        TableKind::Executions => &["execution_spec_id"],
        TableKind::ArtifactEdges => &["source_artifact_id", "target_artifact_id"],
        TableKind::ExecutionEdges => &["artifact_id"],
        TableKind::Steps | TableKind::Checks | TableKind::Commits | TableKind::Ingestion => &[],
    };
    columns.iter().map(|c| (*c).to_owned()).collect()
}

fn file_stats(handle: &deltalake::DeltaTable, spec: &TableSpec) -> Result<(u64, u64)> {
    use deltalake::arrow::array::{Array, Int64Array};
    let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let adds = state.add_actions_table(true).map_err(|e| Error::delta(&spec.name, e))?;
    let bytes = adds
        .column_by_name("size_bytes")
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
        .map_or(0, |a| (0..a.len()).map(|i| a.value(i).max(0) as u64).sum());
    Ok((adds.num_rows() as u64, bytes))
}

/// Compact the lake's tables.
pub async fn compact(lake: &Lake, options: &CompactOptions) -> Result<Vec<CompactReport>> {
    let _writer = lake.writer(crate::lake::writer::WriteKind::Compact).begin().await?;
    let specs = super::select_tables(lake, options.table.as_deref()).await?;
    let mut out = Vec::new();
    for (done, spec) in specs.iter().enumerate() {
        options.progress.report(done, specs.len(), &spec.name);
        out.push(compact_table(lake, spec, options).await?);
    }
    options.progress.finish(specs.len());
    Ok(out)
}

/// Delta OPTIMIZE, then [`Compaction::undo_if_raced`]. delta-rs commits an OPTIMIZE
/// with its own retries whatever the commit properties say, and its
/// conflict checker counts only data-changing removes as a conflict: an
/// OPTIMIZE committed on top of another rewrite of the same files (another
/// compaction, on a host that shares no lock; the committer's journal
/// merge) leaves both copies of their rows. So the versions between the
/// one it read and its own are read back, and a compaction that met such a
/// rewrite is undone exactly. `None`: nothing was compacted.
async fn optimize(
    lake: &Lake,
    spec: &TableSpec,
    options: &CompactOptions,
    handle: deltalake::DeltaTable,
    zorder: &[String],
) -> Result<Option<deltalake::DeltaTable>> {
    let step_text = options.step.map(|s| s.to_string());
    let filters: Vec<(&str, FilterOp, FilterValue<'_>)> = match (&step_text, spec.is_partitioned())
    {
        (Some(step), true) => vec![(STEP_COLUMN, FilterOp::Eq, FilterValue::Scalar(step.as_str()))],
        _ => Vec::new(),
    };
    let read = handle.version().unwrap_or_default();
    // The commit is found by its token: the handle OPTIMIZE returns may
    // have moved past its own version.
    let token = crate::host::unique_id();
    let properties = CommitProperties::default().with_metadata([
        (append::TOKEN_KEY.to_owned(), serde_json::json!(token)),
        (READ_KEY.to_owned(), serde_json::json!(read)),
    ]);
    let mut builder = handle
        .optimize()
        .with_commit_properties(properties)
        .with_filters(&filters)
        .with_writer_properties(table::writer_properties_for(spec))
        .with_type(if zorder.is_empty() {
            OptimizeType::Compact
        } else {
            OptimizeType::ZOrder(zorder.to_vec())
        });
    if let Some(size) = options.target_size.and_then(NonZeroU64::new) {
        builder = builder.with_target_size(size);
    }
    let (optimized, _metrics) = builder.await.map_err(|e| Error::delta(&spec.name, e))?;
    let head = optimized.version().unwrap_or_default();
    let Some(version) = append::find_token(&optimized, &spec.name, &token, read + 1, head).await?
    else {
        return Ok(Some(optimized)); // nothing to compact: no commit
    };
    let compaction = Compaction { read, version, token };
    match compaction.undo_if_raced(lake, spec, &optimized).await? {
        Undo::NotRaced => Ok(Some(optimized)),
        Undo::Undone | Undo::AlreadyUndone => Ok(None),
        Undo::Rewritten => {
            Err(Error::Internal(format!("table `{}`: {}", spec.name, Undo::REWRITTEN)))
        }
    }
}

async fn compact_table(
    lake: &Lake,
    spec: &TableSpec,
    options: &CompactOptions,
) -> Result<CompactReport> {
    let clock = Instant::now();
    let handle = table::open(lake.root(), spec).await?;
    let (files_before, bytes_before) = file_stats(&handle, spec)?;
    let zorder = options.zorder.clone().unwrap_or_else(|| default_zorder(spec));
    let mut report = CompactReport {
        table: spec.name.clone(),
        zorder: zorder.clone(),
        files_before,
        files_after: files_before,
        bytes_before,
        bytes_after: bytes_before,
        version: None,
        sidecars_retired: 0,
        seconds: 0.0,
    };
    if options.dry_run || files_before <= 1 {
        if !options.dry_run {
            report.sidecars_retired = retire(lake, spec, &handle)?;
        }
        report.seconds = clock.elapsed().as_secs_f64();
        return Ok(report);
    }
    if spec.kind == TableKind::Commits {
        return compact_journal(lake, spec, report, clock).await;
    }
    // Settle first (the writer protocol): undo a compaction of this table
    // killed before undoing its race, while its output is still its own.
    let settled = super::unfinished::finish_tables(lake, Some(&spec.name)).await?;
    // Opened again only when settling committed something.
    let handle = if settled == super::unfinished::Finished::default() {
        handle
    } else {
        tracing::info!(table = %spec.name, ?settled, "settled what a killed writer left before compacting");
        table::open(lake.root(), spec).await?
    };
    let before = handle.version().unwrap_or_default();
    let Some(optimized) = optimize(lake, spec, options, handle, &zorder).await? else {
        report.seconds = clock.elapsed().as_secs_f64();
        return Ok(report);
    };
    let after = optimized.version().unwrap_or_default();
    if after > before {
        report.version = Some(after);
        append::write_key_filters(lake.root(), &optimized, spec, after).await?;
        // The next open reads the compacted file list from one checkpoint
        // instead of replaying the removes of every file compaction replaced.
        deltalake::checkpoints::create_checkpoint(&optimized, None)
            .await
            .map_err(|e| Error::delta(&spec.name, e))?;
    }
    report.sidecars_retired = retire(lake, spec, &optimized)?;
    let (files_after, bytes_after) = file_stats(&optimized, spec)?;
    report.files_after = files_after;
    report.bytes_after = bytes_after;
    report.seconds = clock.elapsed().as_secs_f64();
    Ok(report)
}
