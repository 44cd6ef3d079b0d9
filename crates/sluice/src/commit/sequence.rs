//! One commit sequence: validate, de-duplicate, commit every table in order.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use deltalake::arrow::array::{Array, ArrayRef, BooleanArray, new_null_array};
use deltalake::arrow::compute::{cast, concat_batches, filter_record_batch};
use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::CommitProperties;

use super::journal::{self, JournalEntry, Manifest, Phase, TXN_APP_ID};
use super::load::{LoadedRun, load_run};
use super::natural_key;
use super::quarantine::{quarantine, remove_run};
use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::layout::{self, TableKind};
use crate::lake::table;
use crate::query::scan;
use crate::staging::RunDir;
use crate::staging::paths::parse_step_dir;
use crate::store::arrow_convert::read_value;

pub(super) struct Context<'a> {
    pub lake: &'a Lake,
    pub staging_root: &'a Path,
    pub sync: bool,
}

#[derive(Debug, Default)]
pub(super) struct SequenceReport {
    pub runs: usize,
    pub quarantined: Vec<(PathBuf, String)>,
    pub rows_added: BTreeMap<String, u64>,
    pub rows_deduplicated: BTreeMap<String, u64>,
}

/// Commit a fresh chunk of sealed run directories as sequence `seq`.
pub(super) async fn run(ctx: &Context<'_>, seq: i64, runs: Vec<RunDir>) -> Result<SequenceReport> {
    let mut report = SequenceReport::default();
    let loaded = load_valid(ctx, runs, &mut report).await?;
    if loaded.is_empty() {
        return Ok(report);
    }
    let manifest = Manifest {
        seq,
        runs: loaded.iter().map(|r| relative(ctx.staging_root, &r.dir.path)).collect(),
    };
    journal::write_manifest(ctx.staging_root, &manifest, ctx.sync)?;
    commit_loaded(ctx, seq, loaded, report, false).await
}

/// Finish a sequence found in a manifest left by an interrupted commit.
pub(super) async fn finish(
    ctx: &Context<'_>,
    manifest: Manifest,
    completed: bool,
) -> Result<SequenceReport> {
    let mut report = SequenceReport::default();
    let runs: Vec<RunDir> = manifest
        .runs
        .iter()
        .filter_map(|p| run_dir_from(ctx.staging_root, p))
        .filter(|r| r.path.is_dir())
        .collect();
    if completed {
        // Everything committed; only the clean-up was interrupted.
        for run in &runs {
            remove_run(run)?;
        }
        journal::remove_manifest(ctx.staging_root, manifest.seq)?;
        return Ok(report);
    }
    tracing::info!(
        seq = manifest.seq,
        runs = runs.len(),
        "finishing an interrupted commit sequence"
    );
    let loaded = load_valid(ctx, runs, &mut report).await?;
    commit_loaded(ctx, manifest.seq, loaded, report, true).await
}

fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| path.to_path_buf())
}

fn run_dir_from(root: &Path, relative: &Path) -> Option<RunDir> {
    let parts: Vec<&str> = relative.iter().filter_map(|c| c.to_str()).collect();
    let [step_dir, _, _, run_id] = parts.as_slice() else { return None };
    let (step, operation) = parse_step_dir(step_dir)?;
    Some(RunDir {
        step,
        operation: operation.to_owned(),
        run_id: (*run_id).to_owned(),
        path: root.join(relative),
    })
}

/// Load and validate runs; quarantine every run that fails, including runs
/// whose edges point at artifacts neither the commit nor the lake holds.
async fn load_valid(
    ctx: &Context<'_>,
    runs: Vec<RunDir>,
    report: &mut SequenceReport,
) -> Result<Vec<LoadedRun>> {
    let registry = ctx.lake.registry().clone();
    let specs = ctx.lake.table_specs();
    let results = tokio::task::spawn_blocking(move || load_parallel(&registry, &specs, runs))
        .await
        .map_err(|e| Error::Internal(format!("loading staged runs: {e}")))?;
    let mut loaded = Vec::with_capacity(results.len());
    for (result, dir) in results {
        match result {
            Ok(run) => loaded.push(run),
            Err(rejection) => {
                let to = quarantine(ctx.staging_root, &dir, &rejection.to_string())?;
                report.quarantined.push((to, rejection.to_string()));
            }
        }
    }

    // Edges must point at artifacts in this commit or in the lake. Removing a
    // run can orphan another's edges, so repeat until nothing changes.
    let mut known_in_lake: BTreeSet<String> = BTreeSet::new();
    let mut asked: BTreeSet<String> = BTreeSet::new();
    loop {
        let in_commit: HashSet<&String> = loaded.iter().flat_map(|r| r.artifacts.keys()).collect();
        let to_ask: Vec<String> = loaded
            .iter()
            .flat_map(|r| r.referenced.iter())
            .filter(|id| !in_commit.contains(id) && !asked.contains(*id))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let parsed: Vec<ArtifactId> = to_ask.iter().filter_map(|id| id.parse().ok()).collect();
        asked.extend(to_ask);
        let present = ctx.lake.existing_ids(&layout::index_table(), parsed.into_iter()).await?;
        known_in_lake.extend(present.iter().map(ArtifactId::to_hex));

        let mut bad = Vec::new();
        for (i, run) in loaded.iter().enumerate() {
            if let Some(id) = run
                .referenced
                .iter()
                .find(|id| !in_commit.contains(id) && !known_in_lake.contains(*id))
            {
                bad.push((
                    i,
                    format!("edge to unknown artifact `{id}` (not in this commit nor in the lake)"),
                ));
            }
        }
        if bad.is_empty() {
            return Ok(loaded);
        }
        for (i, reason) in bad.into_iter().rev() {
            let run = loaded.remove(i);
            let to = quarantine(ctx.staging_root, &run.dir, &reason)?;
            report.quarantined.push((to, reason));
        }
    }
}

/// Load run directories on all cores (reading and checking them is most of a
/// commit's work), keeping their order.
fn load_parallel(
    registry: &crate::registry::TypeRegistry,
    specs: &[crate::lake::layout::TableSpec],
    runs: Vec<RunDir>,
) -> Vec<(std::result::Result<LoadedRun, super::Rejection>, RunDir)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    let per = runs.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .chunks(per)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|dir| (load_run(registry, specs, dir), dir.clone()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(results) => results,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// Give a staged batch exactly the table's schema: columns by name, cast to
/// the table's types, nulls for columns the staged file does not have.
fn conform(batch: &RecordBatch, schema: &SchemaRef, table: &str) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = match batch.column_by_name(field.name()) {
            Some(c) if c.data_type() == field.data_type() => c.clone(),
            Some(c) => cast(c, field.data_type())
                .map_err(|e| Error::arrow(format!("table `{table}`"), e))?,
            None => new_null_array(field.data_type(), batch.num_rows()),
        };
        columns.push(column);
    }
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::arrow(format!("table `{table}` rows"), e))
}

fn row_keys(batch: &RecordBatch, columns: &[&str]) -> Vec<String> {
    let arrays: Vec<Option<&ArrayRef>> = columns.iter().map(|c| batch.column_by_name(c)).collect();
    (0..batch.num_rows())
        .map(|row| {
            arrays
                .iter()
                .map(|a| {
                    a.map(|a| read_value(a.as_ref(), row).to_json().to_string()).unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join("\u{0}")
        })
        .collect()
}

fn keep(batch: &RecordBatch, mask: Vec<bool>, table: &str) -> Result<RecordBatch> {
    filter_record_batch(batch, &BooleanArray::from(mask))
        .map_err(|e| Error::arrow(format!("table `{table}`"), e))
}

/// Fault injection for tests: with `SLUICE_FAILPOINT=commit:<table>` the
/// commit of that table fails, as a Delta error would, after every table
/// before it in the order committed.
fn failpoint(table: &str) -> Result<()> {
    match std::env::var("SLUICE_FAILPOINT") {
        Ok(point) if point.strip_prefix("commit:") == Some(table) => Err(Error::Internal(format!(
            "injected failure (SLUICE_FAILPOINT) committing table `{table}`"
        ))),
        _ => Ok(()),
    }
}

/// The `artifact_id` column of a content or index batch, parsed.
fn artifact_ids(batch: &RecordBatch) -> Result<Vec<ArtifactId>> {
    let column = batch
        .column_by_name("artifact_id")
        .ok_or_else(|| Error::Internal("a content batch without `artifact_id`".into()))?;
    (0..batch.num_rows())
        .map(|row| read_value(column.as_ref(), row).as_str().unwrap_or_default().parse())
        .collect()
}

/// Run ids of this sequence that an earlier sequence already committed.
async fn committed_runs(lake: &Lake, runs: &[LoadedRun]) -> Result<BTreeSet<String>> {
    let spec = layout::executions_table();
    let handle = table::open(lake.root(), &spec).await?;
    let mut steps: Vec<i32> = runs.iter().map(|r| r.dir.step).collect();
    steps.sort_unstable();
    steps.dedup();
    let ids: Vec<String> = runs.iter().map(|r| r.dir.run_id.clone()).collect();
    let mut out = BTreeSet::new();
    for chunk in ids.chunks(scan::IN_LIST_CHUNK) {
        let filter = format!(
            "{} AND {}",
            scan::in_list_int("origin_step_number", steps.iter().copied()),
            scan::in_list("execution_run_id", chunk.iter().cloned())
        );
        out.extend(
            scan::select_strings(&handle, &spec.name, "execution_run_id", Some(&filter), None)
                .await?,
        );
    }
    Ok(out)
}

async fn commit_loaded(
    ctx: &Context<'_>,
    seq: i64,
    loaded: Vec<LoadedRun>,
    mut report: SequenceReport,
    recovering: bool,
) -> Result<SequenceReport> {
    let lake = ctx.lake;
    let already_started = recovering
        && journal::read(lake).await?.iter().any(|e| e.seq == seq && e.phase == Phase::Started);
    if !already_started {
        journal::append(
            lake,
            &JournalEntry {
                seq,
                phase: Phase::Started,
                run_count: loaded.len() as i64,
                table_versions: journal::current_versions(lake).await?,
                rows_added: BTreeMap::new(),
            },
        )
        .await?;
    }
    let earlier = committed_runs(lake, &loaded).await?;
    let mut versions = BTreeMap::new();
    for spec in lake.table_specs() {
        if matches!(spec.kind, TableKind::Steps | TableKind::Commits) {
            continue;
        }
        failpoint(&spec.name)?;
        let handle = table::open(lake.root(), &spec).await?;
        let (txn, version) = journal::txn_of(&handle, &spec).await?;
        if txn.is_some_and(|t| t >= seq) {
            versions.insert(spec.name.clone(), version);
            report.rows_added.entry(spec.name.clone()).or_insert(0);
            continue; // this sequence reached the table before a crash
        }
        let per_run_table = matches!(
            spec.kind,
            TableKind::Executions | TableKind::ExecutionEdges | TableKind::ArtifactEdges
        );
        let schema = table::arrow_schema(&handle, &spec)?;
        let mut staged = Vec::new();
        for run in &loaded {
            if per_run_table && earlier.contains(&run.dir.run_id) {
                continue;
            }
            if let Some(batch) = run.tables.get(&spec.name) {
                staged.push(conform(batch, &schema, &spec.name)?);
            }
        }
        let staged_rows: u64 = loaded
            .iter()
            .filter_map(|r| r.tables.get(&spec.name))
            .map(|b| b.num_rows() as u64)
            .sum();
        let batch = concat_batches(&schema, &staged)
            .map_err(|e| Error::arrow(format!("table `{}`", spec.name), e))?;

        // Within the sequence: first occurrence of each natural key wins.
        let mut seen = HashSet::new();
        let mask: Vec<bool> =
            row_keys(&batch, natural_key(&spec.kind)).into_iter().map(|k| seen.insert(k)).collect();
        let mut batch = keep(&batch, mask, &spec.name)?;

        // Against the lake: content-addressed tables by artifact id.
        let mut added_ids = Vec::new();
        if matches!(spec.kind, TableKind::Content(_) | TableKind::Index) && batch.num_rows() > 0 {
            let parsed = artifact_ids(&batch)?;
            let present = lake.existing_ids(&spec, parsed.iter().copied()).await?;
            let mask = parsed.iter().map(|id| !present.contains(id)).collect();
            batch = keep(&batch, mask, &spec.name)?;
            added_ids = parsed.into_iter().filter(|id| !present.contains(id)).collect();
        }

        let fresh = batch.num_rows() as u64;
        report.rows_added.insert(spec.name.clone(), fresh);
        report.rows_deduplicated.insert(spec.name.clone(), staged_rows - fresh);
        if fresh == 0 {
            versions.insert(spec.name.clone(), version);
            continue;
        }
        let properties = CommitProperties::default()
            .with_application_transaction(Transaction::new(TXN_APP_ID, seq))
            .with_metadata([("sluice_commit_seq".to_owned(), serde_json::json!(seq))]);
        let written = table::append_with(handle, &spec, vec![batch], Some(properties)).await?;
        let version = written.version().unwrap_or_default();
        table::record_keys(lake.root(), &spec, version, &added_ids);
        versions.insert(spec.name.clone(), version);
    }
    let steps = layout::steps_table();
    versions.insert(steps.name.clone(), journal::table_txn(lake, &steps).await?.1);
    journal::append(
        lake,
        &JournalEntry {
            seq,
            phase: Phase::Completed,
            run_count: loaded.len() as i64,
            table_versions: versions,
            rows_added: report.rows_added.clone(),
        },
    )
    .await?;
    for run in &loaded {
        remove_run(&run.dir)?;
    }
    journal::remove_manifest(ctx.staging_root, seq)?;
    report.runs = loaded.len();
    Ok(report)
}
