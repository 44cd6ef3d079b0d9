//! Whole-lake integrity checks for `sluice doctor`, and the repairs that are
//! safe.
//!
//! | check | how | `--repair` |
//! |---|---|---|
//! | data files the log references but storage lacks | Delta's file-system check, dry run | ingestion tables: forget the delivered files that lost rows — remove all their rows and record them forgotten, so dropping them again ingests them whole (see [`forget`](crate::ingest::forget)); then drop the references left (the rows were already unreadable; named in the report) |
//! | data files no retained log entry references | table folder vs. every add of the retained log | none: `sluice vacuum --full` removes them once past the retention (a writer may still be about to commit them) |
//! | edges naming an artifact the index lacks | anti-join at one consistent point | none: the edge is evidence; the artifact may come back by restore |
//! | index rows without content | anti-join per type | none: the content is gone; reported by type |
//! | content rows without an index row | anti-join per type | add the index rows, derived from the content (de-duplicated append) |
//! | live versions whose key filter has no usable key set (a lake written before key sets, a set lost or damaged) | each filter whose files are all live, its set opened | write the set from the files' keys |
//!
//! The anti-joins run within [`MEMORY_LIMIT`]: they are planned as
//! sort-merge joins whose sorts spill to the system's temporary folder, so
//! a lake of 100M artifacts is checked in bounded memory (a hash join held
//! every id of the index: 21 GB at 100M) at the cost of sorting both sides.
//! Should DataFusion report the limit exhausted (its accounting is coarse;
//! see `within_limit`), that check runs again without it.
//!
//! A missing key set costs only speed (present ids are confirmed in the
//! files), so it is reported but does not make the lake unclean.
//! Nothing a reader could still need is deleted: repairs only add rows,
//! drop references to files that no longer exist, or remove the surviving
//! rows of a delivered file that lost some (which is then delivered again).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use deltalake::arrow::compute::cast;
use deltalake::arrow::record_batch::RecordBatch;
use futures::StreamExt;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::lake::append::{self, Append, Dedup};
use crate::lake::io::location::LakeRoot;
use crate::lake::keys::key_set::KeySet;
use crate::lake::layout::{self, TableKind, TableSpec};
use crate::lake::read::result_set::ResultSet;
use crate::lake::{Lake, delta::table, keys::key_filter};
use crate::query::OutputFormat;

/// The memory the SQL checks may hold before they spill to disk.
pub const MEMORY_LIMIT: usize = 1 << 30;

/// Derived index rows appended per commit by a repair.
const REPAIR_CHUNK_ROWS: usize = 1_000_000;

/// What the integrity checks found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IntegrityReport {
    /// Per table: data files its log references that storage lacks.
    pub missing_files: BTreeMap<String, Vec<String>>,
    /// Per table: data files no retained log entry references.
    pub unreferenced_files: BTreeMap<String, Vec<String>>,
    /// Execution edges whose artifact the index lacks.
    pub dangling_execution_edges: u64,
    /// Artifact edges whose source or target the index lacks.
    pub dangling_artifact_edges: u64,
    /// Per content table: index rows whose content row is missing.
    pub index_without_content: BTreeMap<String, u64>,
    /// Per content table: content rows without an index row.
    pub content_without_index: BTreeMap<String, u64>,
    /// Per table: live versions whose key filter has no usable key set (or,
    /// for the executions table, result set; speed only, not part of
    /// [`IntegrityReport::is_clean`]).
    pub versions_without_key_sets: BTreeMap<String, Vec<u64>>,
}

impl IntegrityReport {
    /// Whether every check passed.
    pub fn is_clean(&self) -> bool {
        self.missing_files.values().all(Vec::is_empty)
            && self.unreferenced_files.values().all(Vec::is_empty)
            && self.dangling_execution_edges == 0
            && self.dangling_artifact_edges == 0
            && self.index_without_content.values().all(|n| *n == 0)
            && self.content_without_index.values().all(|n| *n == 0)
    }
}

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IntegrityRepair {
    /// Per ingestion table: the delivered files forgotten because data
    /// files of theirs were lost (all their rows removed, so dropping them
    /// again ingests them).
    pub files_forgotten: BTreeMap<String, crate::ingest::forget::Forgotten>,
    /// Per table: references to missing files dropped.
    pub references_dropped: BTreeMap<String, Vec<String>>,
    /// Per content table: index rows added for content without one.
    pub index_rows_added: BTreeMap<String, u64>,
    /// Per table: versions whose key set (and, for the executions table,
    /// result set) was written from their files.
    pub key_sets_written: BTreeMap<String, Vec<u64>>,
}

/// Run every check (reads only).
pub async fn check(lake: &Lake) -> Result<IntegrityReport> {
    let mut report = IntegrityReport::default();
    for spec in super::select_tables(lake, None).await? {
        let handle = table::open(lake.root(), &spec).await?;
        let missing = missing_files(handle.clone(), &spec, true).await?;
        if !missing.is_empty() {
            report.missing_files.insert(spec.name.clone(), missing);
        }
        let unreferenced = unreferenced_files(lake.root(), &handle, &spec).await?;
        if !unreferenced.is_empty() {
            report.unreferenced_files.insert(spec.name.clone(), unreferenced);
        }
        let unset: Vec<u64> =
            without_key_sets(lake.root(), &handle, &spec)?.into_iter().map(|(v, _)| v).collect();
        if !unset.is_empty() {
            report.versions_without_key_sets.insert(spec.name.clone(), unset);
        }
    }
    let mut with_artifacts = true;
    for spec in [layout::index_table(), layout::execution_edges_table()]
        .into_iter()
        .chain([layout::artifact_edges_table()])
    {
        with_artifacts &= table::exists(lake.root(), &spec).await?;
    }
    if !report.missing_files.is_empty() || !with_artifacts {
        // The SQL checks below would fail on the missing files; a lake
        // that only ingests has no artifacts to check.
        return Ok(report);
    }
    report.dangling_execution_edges = count(
        lake,
        "SELECT count(*) FROM execution_edges e WHERE NOT EXISTS \
         (SELECT 1 FROM \"index\" i WHERE i.artifact_id = e.artifact_id)",
    )
    .await?;
    report.dangling_artifact_edges = count(
        lake,
        "SELECT count(*) FROM artifact_edges e WHERE \
         NOT EXISTS (SELECT 1 FROM \"index\" i WHERE i.artifact_id = e.source_artifact_id) \
         OR NOT EXISTS (SELECT 1 FROM \"index\" i WHERE i.artifact_id = e.target_artifact_id)",
    )
    .await?;
    for (spec, key) in content_tables(lake).await? {
        let orphans = count(
            lake,
            &format!(
                "SELECT count(*) FROM \"index\" i WHERE i.artifact_type = '{key}' AND NOT EXISTS \
                 (SELECT 1 FROM \"{t}\" c WHERE c.artifact_id = i.artifact_id)",
                t = spec.name
            ),
        )
        .await?;
        let unindexed = count(lake, &unindexed_sql(&spec, &key, "count(*)")).await?;
        report.index_without_content.insert(spec.name.clone(), orphans);
        report.content_without_index.insert(spec.name.clone(), unindexed);
    }
    Ok(report)
}

/// Repair what can be repaired safely (see the module doc). Holds the
/// writer lock.
pub async fn repair(lake: &Lake) -> Result<IntegrityRepair> {
    let _writer = lake.writer(crate::lake::writer::WriteKind::Repair).begin().await?;
    let mut out = IntegrityRepair::default();
    for spec in super::select_tables(lake, None).await? {
        if spec.kind == TableKind::Ingestion {
            let handle = table::open(lake.root(), &spec).await?;
            let lost: BTreeSet<String> =
                missing_files(handle, &spec, true).await?.into_iter().collect();
            if !lost.is_empty()
                && let Some(forgotten) =
                    crate::ingest::forget::forget_lost(lake.root(), &spec, &lost).await?
            {
                out.files_forgotten.insert(spec.name.clone(), forgotten);
            }
        }
        // What no forgetting removed (a lake table, or a lost file whose
        // origin the log no longer holds).
        let handle = table::open(lake.root(), &spec).await?;
        let dropped = missing_files(handle, &spec, false).await?;
        if !dropped.is_empty() {
            tracing::warn!(table = %spec.name, files = dropped.len(), "dropped references to missing data files");
            out.references_dropped.insert(spec.name.clone(), dropped);
        }
        let handle = table::open(lake.root(), &spec).await?;
        let mut written = Vec::new();
        for (version, files) in without_key_sets(lake.root(), &handle, &spec)? {
            if append::write_key_set(lake.root(), &handle, &spec, version, &files).await? {
                written.push(version);
            }
        }
        if !written.is_empty() {
            out.key_sets_written.insert(spec.name.clone(), written);
        }
    }
    for (spec, key) in content_tables(lake).await? {
        let added = index_unindexed_content(lake, &spec, &key).await?;
        if added > 0 {
            out.index_rows_added.insert(spec.name.clone(), added);
        }
    }
    Ok(out)
}

/// Add index rows, derived from the content, for the content rows of one
/// table that have none (within [`MEMORY_LIMIT`]); how many were added. Rows
/// appended before a failure are found indexed when it runs again.
pub(crate) async fn index_unindexed_content(
    lake: &Lake,
    spec: &TableSpec,
    key: &str,
) -> Result<u64> {
    let index = layout::index_table();
    within_limit(MEMORY_LIMIT, |limit| add_missing_index_rows(lake, &index, spec, key, limit)).await
}

/// Derive index rows for the content rows of one table that have none and
/// append them, streamed in chunks of [`REPAIR_CHUNK_ROWS`] (a lost index
/// is as big as its tables). Each chunk is its own de-duplicated append: an
/// interrupted repair leaves whole chunks, and running it again adds the
/// rest.
async fn add_missing_index_rows(
    lake: &Lake,
    index: &TableSpec,
    spec: &TableSpec,
    key: &str,
    memory_limit: Option<usize>,
) -> Result<u64> {
    let columns =
        format!("c.artifact_id, '{key}' AS artifact_type, c.origin_step_number, c.metadata");
    let sql = unindexed_sql(spec, key, &columns);
    let (ctx, _) = lake.sql(&sql).with_memory_limit(memory_limit).context().await?;
    let mut stream = ctx.sql(&sql).await?.execute_stream().await?;
    let handle = table::open(lake.root(), index).await?;
    let schema = table::arrow_schema(&handle, index)?;
    let (mut added, mut chunk, mut rows) = (0, Vec::new(), 0);
    loop {
        let next = stream.next().await.transpose()?;
        let done = next.is_none();
        if let Some(batch) = next {
            let columns = schema
                .fields()
                .iter()
                .zip(batch.columns())
                .map(|(field, column)| cast(column, field.data_type()))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::arrow("casting derived index rows", e))?;
            rows += batch.num_rows();
            chunk.push(
                RecordBatch::try_new(schema.clone(), columns)
                    .map_err(|e| Error::arrow("building derived index rows", e))?,
            );
        }
        if rows > 0 && (done || rows >= REPAIR_CHUNK_ROWS) {
            let appended =
                Append::new(lake.root(), index, std::mem::take(&mut chunk)).execute().await?;
            added += appended.rows_added;
            rows = 0;
        }
        if done {
            return Ok(added);
        }
    }
}

/// Run `work` within `limit` bytes ([`MEMORY_LIMIT`] for the doctor), and
/// once more without a limit if DataFusion gives up for want of memory.
/// Its accounting can ask one spillable operator for more than its fair
/// share of the pool (seen on a 20 MB lake of a few hundred small files at
/// a 256 MiB limit, not at 64 MiB or 1 GiB): a doctor that fails on a
/// healthy lake helps nobody.
async fn within_limit<T, F>(limit: usize, work: impl Fn(Option<usize>) -> F) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    match work(Some(limit)).await {
        Err(Error::Sql { source })
            if matches!(
                source.find_root(),
                deltalake::datafusion::error::DataFusionError::ResourcesExhausted(_)
            ) =>
        {
            tracing::warn!(error = %source, "an integrity check did not fit its memory limit; running it without one");
            work(None).await
        }
        other => other,
    }
}

/// The versions of a table whose key filter covers only live files but
/// whose key set (or, for the executions, result set) is missing, damaged
/// or for other files; with those files.
fn without_key_sets(
    root: &LakeRoot,
    handle: &deltalake::DeltaTable,
    spec: &TableSpec,
) -> Result<Vec<(u64, Vec<String>)>> {
    // Key sets are kept on a filesystem only.
    let (Some(root), false) = (root.local(), Dedup::of(&spec.kind) == Dedup::Nothing) else {
        return Ok(Vec::new());
    };
    let dir = table::table_dir(root, spec);
    let active: BTreeSet<String> = table::active_files(handle, spec)?.into_iter().collect();
    Ok(key_filter::files_all(&dir)
        .into_iter()
        .filter(|(_, files)| !files.is_empty() && files.iter().all(|f| active.contains(f)))
        .filter(|(version, files)| {
            KeySet::open(&dir, *version, files).is_none()
                || (spec.kind == TableKind::Executions
                    && ResultSet::open(&dir, *version, files).is_none())
        })
        .collect())
}

pub(crate) async fn content_tables(lake: &Lake) -> Result<Vec<(TableSpec, String)>> {
    Ok(lake
        .existing_table_specs()
        .await?
        .into_iter()
        .filter_map(|s| match &s.kind {
            TableKind::Content(key) => {
                let key = key.clone();
                Some((s, key))
            }
            _ => None,
        })
        .collect())
}

fn unindexed_sql(spec: &TableSpec, key: &str, columns: &str) -> String {
    format!(
        "SELECT {columns} FROM \"{t}\" c WHERE NOT EXISTS \
         (SELECT 1 FROM \"index\" i WHERE i.artifact_id = c.artifact_id AND i.artifact_type = '{key}')",
        t = spec.name
    )
}

async fn count(lake: &Lake, sql: &str) -> Result<u64> {
    let result =
        within_limit(MEMORY_LIMIT, |limit| lake.sql(sql).with_memory_limit(limit).execute())
            .await?;
    let text = crate::query::format::render(&result.batches, OutputFormat::Csv)?;
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| Error::Internal(format!("a count query returned {text:?}")))
}

/// Delta's file-system check: active files storage lacks (dry run), or drop
/// their references (`dry_run = false`).
async fn missing_files(
    handle: deltalake::DeltaTable,
    spec: &TableSpec,
    dry_run: bool,
) -> Result<Vec<String>> {
    let (_, metrics) = handle
        .filesystem_check()
        .with_dry_run(dry_run)
        .await
        .map_err(|e| Error::delta(&spec.name, e))?;
    Ok(metrics.files_removed)
}

/// Parquet files in the table's folder that neither the current version nor
/// any commit the log still holds references.
async fn unreferenced_files(
    root: &LakeRoot,
    handle: &deltalake::DeltaTable,
    spec: &TableSpec,
) -> Result<Vec<String>> {
    let mut known: BTreeSet<String> = table::active_files(handle, spec)?.into_iter().collect();
    let head = handle.version().unwrap_or_default();
    for version in 0..=head {
        let Ok(actions) = table::commit_actions(handle, &spec.name, version).await else {
            continue; // cleaned up after a checkpoint
        };
        known.extend(key_filter::added_files(&actions));
        for action in actions {
            if let deltalake::kernel::Action::Remove(r) = action {
                known.insert(r.path);
            }
        }
    }
    let mut out = Vec::new();
    let mut found = |relative: String| {
        if !known.contains(&relative) {
            out.push(relative);
        }
    };
    match root {
        LakeRoot::Local(root) => {
            let dir = table::table_dir(root, spec);
            walk_parquet(&dir, &dir, &mut found)?;
        }
        LakeRoot::Store(store) => {
            use futures::TryStreamExt;
            let prefix = store.object(&spec.path);
            let listed: Vec<object_store::ObjectMeta> =
                store.store().list(Some(&prefix)).try_collect().await.map_err(|source| {
                    Error::Store { what: format!("listing {store}{}", spec.path), source }
                })?;
            for meta in listed {
                let Some(relative) = meta.location.prefix_match(&prefix) else { continue };
                let relative: Vec<String> = relative.map(|part| part.as_ref().to_owned()).collect();
                let is_data = relative.first().is_some_and(|first| !first.starts_with('_'))
                    && relative.last().is_some_and(|last| last.ends_with(".parquet"));
                if is_data {
                    found(relative.join("/"));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

fn walk_parquet(base: &Path, dir: &Path, found: &mut impl FnMut(String)) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('_') || name.starts_with('.') {
            continue; // _delta_log, sluice's key filters, temporary files
        }
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            walk_parquet(base, &path, found)?;
        } else if name.ends_with(".parquet")
            && let Ok(relative) = path.strip_prefix(base)
        {
            found(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A check DataFusion cannot run within its limit is run again without
    /// one, with the same answer; a check that fits runs once.
    #[tokio::test]
    async fn a_check_that_does_not_fit_its_limit_runs_again_without_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lake, _) = Lake::init(dir.path()).await.expect("lake");
        let artifacts: Vec<_> = (0..3000)
            .map(|i| {
                crate::Draft::metric(serde_json::json!({"i": i}))
                    .expect("metric")
                    .with_step(1 + i % 2)
                    .finalize(lake.registry())
                    .expect("finalize")
            })
            .collect();
        lake.put(&artifacts).await.expect("put");
        let anti = "SELECT count(*) FROM \"index\" i WHERE NOT EXISTS \
                    (SELECT 1 FROM metrics m WHERE m.artifact_id = i.artifact_id \
                    AND m.origin_step_number = 1)";
        let asked = Mutex::new(Vec::new());
        let run = |limit: Option<usize>| {
            asked.lock().expect("lock").push(limit);
            lake.sql(anti).with_memory_limit(limit).execute()
        };
        // 1 KiB holds no batch: DataFusion reports its resources exhausted.
        let tiny = lake.sql(anti).with_memory_limit(Some(1 << 10)).execute().await;
        assert!(
            matches!(&tiny, Err(Error::Sql { source }) if matches!(
                source.find_root(),
                deltalake::datafusion::error::DataFusionError::ResourcesExhausted(_)
            )),
            "{tiny:?}"
        );
        let result = within_limit(1 << 10, run).await.expect("runs without the limit");
        let text = crate::query::format::render(&result.batches, OutputFormat::Csv).expect("csv");
        assert_eq!(text.lines().nth(1), Some("1500"), "{text}");
        assert_eq!(*asked.lock().expect("lock"), vec![Some(1 << 10), None]);
        asked.lock().expect("lock").clear();
        within_limit(MEMORY_LIMIT, run).await.expect("fits");
        assert_eq!(*asked.lock().expect("lock"), vec![Some(MEMORY_LIMIT)]);
    }
}
