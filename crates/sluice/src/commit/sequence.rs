//! One commit sequence, phase by phase.
//!
//! ```text
//!  load ─▶ claim ─▶ manifest ─▶ commit tables ─▶ complete ─▶ clean
//! ```
//!
//! What is durable after each phase, and what `recover` does from there:
//!
//! - **load** (`Loaded`): nothing written. Bad run directories are in
//!   quarantine; the rest are still sealed in staging. A crash: the next
//!   commit loads them again.
//! - **claim**: the journal holds `started(seq, token, versions before)`.
//!   The number was computed from the journal version the row is committed
//!   on top of, so no two sequences share it. A crash now leaves a started
//!   row with no manifest: `recover` records it `abandoned` once its
//!   committer is gone (no table was touched); its runs are still sealed.
//! - **manifest** (`Claimed`): `_staging/.commits/{seq}.json` lists the
//!   sequence's run directories and token. From here on, `recover` finishes
//!   the sequence from the manifest.
//! - **commit tables**: content tables → index → artifact_edges →
//!   execution_edges → executions, one de-duplicating Delta commit each (see
//!   [`crate::lake::append`]), tagged with the sequence number and token. A
//!   table that already holds a commit with this token (after the version the
//!   started row recorded) is skipped: that is the only evidence a finish
//!   accepts, never a number compared with another.
//! - **complete**: the journal holds `completed(seq, token, versions after,
//!   each table commit's version)`. Readers now see the whole sequence.
//! - **clean**: run directories, then the manifest, are removed.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;

use deltalake::arrow::array::{Array, ArrayRef, LargeBinaryArray, new_null_array};
use deltalake::arrow::compute::cast;
use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;

use super::load::{LoadedRun, Rejection, load_run};
use super::manifest::{self, Manifest};
use super::quarantine::{quarantine_in, remove_in};
use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::append::{Append, Appended, Dedup, Gate};
use crate::lake::delta::table;
use crate::lake::delta::tip::Tip;
use crate::lake::io::location::LakeRoot;
use crate::lake::journal::tip::JournalTip;
use crate::lake::journal::{JournalEntry, Phase, SEQ_KEY, TXN_APP_ID};
use crate::lake::keys::key_filter::Key;
use crate::lake::layout::{self, TableKind, TableSpec};
use crate::staging::{RunDir, StagingArea};

/// What every sequence of one commit shares.
pub(super) struct Context<'a> {
    pub lake: &'a Lake,
    pub staging: &'a StagingArea,
    pub sync: bool,
    /// The highest sequence number the tables record, checked against the
    /// journal before every claim.
    pub tables_seq: i64,
    /// `commit:<table>`: fail that table's commit (tests).
    pub failpoint: Option<String>,
    /// The journal, kept at its head between this commit's appends.
    pub journal: tokio::sync::Mutex<JournalTip>,
}

/// What one sequence did.
#[derive(Debug, Default)]
pub(super) struct SequenceReport {
    pub runs: usize,
    /// Staged runs found already committed (their staging was removed).
    pub already_committed: usize,
    pub quarantined: Vec<(PathBuf, String)>,
    pub rows_added: BTreeMap<String, u64>,
    pub rows_deduplicated: BTreeMap<String, u64>,
    /// Runs committed superseded: their spec succeeded first in a run
    /// another committer committed while this one committed.
    pub superseded: Vec<String>,
}

/// Runs loaded and validated; nothing written yet.
pub(super) struct Loaded {
    runs: Vec<LoadedRun>,
    report: SequenceReport,
    /// The executions version at which no kept success's spec had
    /// succeeded yet (checked by [`drop_committed`]).
    specs_checked_at: u64,
}

/// A sequence that owns a number and a token, with its manifest on disk.
pub(super) struct Claimed {
    seq: i64,
    token: String,
    /// Every table's version before the sequence.
    before: BTreeMap<String, u64>,
    runs: Vec<LoadedRun>,
    report: SequenceReport,
    specs_checked_at: u64,
}

impl Loaded {
    /// Load and validate run directories on all cores; quarantine every run
    /// that fails, including runs whose edges point at artifacts neither the
    /// commit nor the lake holds.
    pub(super) async fn load(ctx: &Context<'_>, dirs: Vec<RunDir>) -> Result<Loaded> {
        Ok(Self::load_within(ctx, dirs, u64::MAX).await?.0)
    }

    /// [`Loaded::load`] of the runs whose decoded rows fit in `budget`
    /// bytes, taken in order (the first always); the runs left over come
    /// back, not loaded. A chunk is cut by what its rows hold in memory
    /// once decoded, which compressed file sizes do not tell (100 MB of
    /// zeros stage as 44 KB).
    pub(super) async fn load_within(
        ctx: &Context<'_>,
        dirs: Vec<RunDir>,
        budget: u64,
    ) -> Result<(Loaded, Vec<RunDir>)> {
        let mut report = SequenceReport::default();
        let registry = ctx.lake.registry().clone();
        let specs = ctx.lake.table_specs();
        let (dirs, mut left, fetched) = match ctx.staging {
            StagingArea::Dir(_) => (dirs, Vec::new(), None),
            StagingArea::Store(store) => {
                let (fetched, left) = fetch_units(store, dirs, budget).await?;
                let dirs = fetched.iter().map(|(dir, _)| dir.clone()).collect();
                (dirs, left, Some(fetched))
            }
        };
        let results = tokio::task::spawn_blocking(move || match fetched {
            None => load_parallel(&registry, &specs, dirs, budget),
            Some(fetched) => load_fetched_parallel(&registry, &specs, fetched, budget),
        })
        .await
        .map_err(|e| Error::task("loading staged runs", e))?;
        let mut runs = Vec::with_capacity(results.len());
        let mut fetched_left = Vec::new();
        for (result, dir) in results {
            let Some(result) = result else {
                fetched_left.push(dir);
                continue;
            };
            match result {
                Ok(run) => runs.push(run),
                Err(rejection) => {
                    reject_run(ctx, &dir, &rejection.to_string(), &mut report).await?
                }
            }
        }
        fetched_left.append(&mut left);
        let left = fetched_left;
        let clock = std::time::Instant::now();
        let specs_checked_at = drop_committed(ctx, &mut runs, &mut report).await?;
        let committed_ms = clock.elapsed().as_millis() as u64;
        drop_orphan_edges(ctx, &mut runs, &mut report).await?;
        tracing::debug!(
            runs = runs.len(),
            committed_ms,
            edges_ms = clock.elapsed().as_millis() as u64 - committed_ms,
            "loaded and checked"
        );
        Ok((Loaded { runs, report, specs_checked_at }, left))
    }

    /// Whether nothing is left to commit.
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// What loading did (quarantined runs), when nothing is committed.
    pub(super) fn into_report(self) -> SequenceReport {
        self.report
    }

    /// Claim a sequence number in the journal, then write the manifest.
    pub(super) async fn claim(self, ctx: &Context<'_>) -> Result<Claimed> {
        let root = ctx.lake.root();
        let specs = ctx.lake.table_specs();
        let (before, _) = ctx.lake.handles().tip_heads(root, &specs).await?;
        let token = crate::host::unique_id();
        let owner = crate::host::owner();
        let tables_seq = ctx.tables_seq;
        let run_count = executions(&self.runs) as i64;
        let claimed = ctx
            .journal
            .lock()
            .await
            .append(root, |j| {
                check_journal(j.max_seq(), tables_seq)?;
                // Ordered against restores by the journal itself: a restore
                // claimed by a writer that shares no lock with this one
                // is settled before any sequence starts.
                if let Some(open) = j.unfinished().into_iter().find(|e| e.is_restore()) {
                    return Err(Error::RestoreInProgress {
                        seq: open.seq,
                        what: open.reason.clone().unwrap_or_else(|| "restore".into()),
                        owner: open.owner.clone(),
                    });
                }
                Ok(Some(JournalEntry {
                    seq: j.max_seq().max(tables_seq) + 1,
                    phase: Some(Phase::Started),
                    run_count,
                    table_versions: before.clone(),
                    token: token.clone(),
                    owner: owner.clone(),
                    ..JournalEntry::default()
                }))
            })
            .await?
            .ok_or_else(|| Error::Internal("the journal claim wrote nothing".into()))?;
        let manifest = Manifest {
            seq: claimed.seq,
            token: token.clone(),
            runs: self.runs.iter().map(|r| manifest::relative_in(ctx.staging, &r.dir)).collect(),
        };
        manifest::write_in(ctx.staging, &manifest, ctx.sync).await?;
        Ok(Claimed {
            seq: claimed.seq,
            token,
            before,
            runs: self.runs,
            report: self.report,
            specs_checked_at: self.specs_checked_at,
        })
    }

    /// Resume a sequence that has a manifest and a `started` row.
    pub(super) fn resume(self, started: &JournalEntry) -> Claimed {
        Claimed {
            seq: started.seq,
            token: started.token.clone(),
            before: started.table_versions.clone(),
            runs: self.runs,
            report: self.report,
            specs_checked_at: self.specs_checked_at,
        }
    }
}

/// Executions in these loaded directories.
fn executions(runs: &[LoadedRun]) -> usize {
    runs.iter().map(|r| r.executions.len()).sum()
}

/// The journal must know every sequence the tables record.
pub(super) fn check_journal(journal_seq: i64, tables_seq: i64) -> Result<()> {
    if tables_seq > journal_seq {
        return Err(Error::JournalBehind { journal: journal_seq, tables: tables_seq });
    }
    Ok(())
}

impl Claimed {
    /// The sequence number.
    pub(super) fn seq(&self) -> i64 {
        self.seq
    }

    /// Commit every table, complete the journal, clean staging.
    pub(super) async fn finish(mut self, ctx: &Context<'_>) -> Result<SequenceReport> {
        let clock = std::time::Instant::now();
        let commits = self.commit_tables(ctx).await?;
        let tables_ms = clock.elapsed().as_secs_f64() * 1e3;
        self.complete(ctx, commits).await?;
        let completed_ms = clock.elapsed().as_secs_f64() * 1e3;
        self.clean(ctx).await?;
        tracing::debug!(
            seq = self.seq,
            runs = self.runs.len(),
            tables_ms,
            completed_ms,
            total_ms = clock.elapsed().as_secs_f64() * 1e3,
            "sequence finished"
        );
        self.report.runs = executions(&self.runs);
        // Thousands of loaded runs are freed allocation by allocation (tens
        // of milliseconds for 2000 one-unit runs): off the commit's path.
        let runs = std::mem::take(&mut self.runs);
        tokio::task::spawn_blocking(move || drop(runs));
        Ok(self.report)
    }

    /// Commit every table of the sequence, in order. Returns the version of
    /// each table commit the sequence made (or found by its token).
    ///
    /// The order is the protocol: content tables → index → artifact_edges →
    /// execution_edges → executions, each committed only after the one
    /// before it. The last three need nothing from the others to prepare, so
    /// they de-duplicate and write their files beside the content and index
    /// commits and wait, each at a [`Gate`], for the table before it; a
    /// failure closes every later gate, whose files are given up.
    async fn commit_tables(&mut self, ctx: &Context<'_>) -> Result<BTreeMap<String, u64>> {
        let lake = ctx.lake;
        let specs: Vec<TableSpec> = lake
            .table_specs()
            .into_iter()
            .filter(|s| {
                !matches!(s.kind, TableKind::Steps | TableKind::Checks | TableKind::Commits)
            })
            .collect();
        let (tail, head): (Vec<TableSpec>, Vec<TableSpec>) = specs.into_iter().partition(|s| {
            matches!(
                s.kind,
                TableKind::ArtifactEdges | TableKind::ExecutionEdges | TableKind::Executions
            )
        });
        let (index_done, mut before) = tokio::sync::oneshot::channel::<bool>();
        let mut tail_tasks = Vec::new();
        for spec in tail {
            let (done, next) = tokio::sync::oneshot::channel::<bool>();
            let ready = futures::FutureExt::shared(before);
            let gate = Gate::new({
                let ready = ready.clone();
                async move { ready.await == Ok(true) }
            });
            let batches: Vec<RecordBatch> = self
                .runs
                .iter()
                .flat_map(|run| run.tables.get(&spec.name).into_iter().flatten().cloned())
                .collect();
            let lake = lake.clone();
            let failpoint = ctx.failpoint.clone();
            let (seq, token) = (self.seq, self.token.clone());
            let since = self.before.get(&spec.name).copied().unwrap_or_default();
            let checked = (spec.kind == TableKind::Executions).then_some(self.specs_checked_at);
            tail_tasks.push(tokio::spawn(async move {
                let result = async {
                    failpoint_check(failpoint.as_deref(), &spec.name)?;
                    let (mut tip, conformed) = conformed_on_tip(&lake, &spec, &batches).await?;
                    let appended = append_one(
                        lake.root(),
                        &spec,
                        conformed,
                        (seq, token, since),
                        &mut tip,
                        (Some(gate), checked),
                        None,
                    )
                    .await;
                    lake.handles().keep_tip(&spec, tip);
                    appended
                }
                .await;
                // Done only once the table before it is done too: an append
                // that had nothing to commit must not let the next one pass
                // ahead of the order.
                let passed = ready.await == Ok(true);
                let _ = done.send(passed && result.is_ok());
                (spec.name.clone(), result)
            }));
            before = next;
        }
        drop(before);

        let mut commits = BTreeMap::new();
        let head_result = self.commit_head(ctx, head, &mut commits).await;
        let _ = index_done.send(head_result.is_ok());
        let mut first_error = head_result.err();
        for task in tail_tasks {
            let (name, result) = task.await.map_err(|e| Error::task("committing a table", e))?;
            match result {
                Ok(appended) => self.record(&name, &appended, &mut commits),
                // A later table that gave up because an earlier one failed
                // is not the cause: report the first failure in the order.
                Err(e) => {
                    if first_error.is_none() {
                        first_error = Some(e);
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(commits),
        }
    }

    /// Content tables, then the index, one after the other.
    async fn commit_head(
        &mut self,
        ctx: &Context<'_>,
        specs: Vec<TableSpec>,
        commits: &mut BTreeMap<String, u64>,
    ) -> Result<()> {
        let lake = ctx.lake;
        let mut content_present: Vec<(TableSpec, BTreeSet<String>)> = Vec::new();
        for spec in specs {
            failpoint_check(ctx.failpoint.as_deref(), &spec.name)?;
            let staged = self.runs.iter().flat_map(|r| r.tables.get(&spec.name)).flatten();
            let (mut tip, mut batches) = conformed_on_tip(lake, &spec, staged).await?;
            let mut indexed = None;
            if spec.kind == TableKind::Index
                && content_present.iter().any(|(_, ids)| !ids.is_empty())
            {
                let (rows, present) =
                    crate::store::repoint_to_content(lake, &tip, &spec, batches, &content_present)
                        .await?;
                batches = rows;
                indexed = Some((tip.head(), present));
            }
            let since = self.before.get(&spec.name).copied().unwrap_or_default();
            let sequence = (self.seq, self.token.clone(), since);
            let appended =
                append_one(lake.root(), &spec, batches, sequence, &mut tip, (None, None), indexed)
                    .await;
            lake.handles().keep_tip(&spec, tip);
            let appended = appended?;
            self.record(&spec.name, &appended, commits);
            if matches!(spec.kind, TableKind::Content(_)) {
                content_present.push((spec.clone(), appended.present_keys));
            }
        }
        Ok(())
    }

    /// Note one table's append in the report and the commit versions.
    fn record(&mut self, table: &str, appended: &Appended, commits: &mut BTreeMap<String, u64>) {
        if let Some(version) = appended.committed {
            commits.insert(table.to_owned(), version);
        }
        self.report.rows_added.insert(table.to_owned(), appended.rows_added);
        self.report.rows_deduplicated.insert(table.to_owned(), appended.rows_skipped);
        self.report.superseded.extend(appended.superseded.iter().cloned());
    }

    /// Record `completed` (once, whoever finishes the sequence).
    async fn complete(&self, ctx: &Context<'_>, commits: BTreeMap<String, u64>) -> Result<()> {
        let specs = ctx.lake.table_specs();
        let (after, _) = ctx.lake.handles().tip_heads(ctx.lake.root(), &specs).await?;
        let entry = JournalEntry {
            seq: self.seq,
            phase: Some(Phase::Completed),
            run_count: executions(&self.runs) as i64,
            table_versions: after,
            table_commits: commits,
            rows_added: self.report.rows_added.clone(),
            token: self.token.clone(),
            owner: crate::host::owner(),
            ..JournalEntry::default()
        };
        let mut journal = ctx.journal.lock().await;
        journal
            .append(ctx.lake.root(), |j| {
                Ok((!j.has(&self.token, Phase::Completed)).then(|| entry.clone()))
            })
            .await?;
        Ok(())
    }

    /// Remove the committed run directories, then the manifest.
    async fn clean(&self, ctx: &Context<'_>) -> Result<()> {
        let units: Vec<_> = self.runs.iter().map(|run| &run.dir).collect();
        crate::staging::area::remove_units(ctx.staging, &units).await?;
        manifest::remove_in(ctx.staging, self.seq).await
    }
}

/// A run that cannot be committed goes to quarantine with its reason —
/// unless it vanished or was committed meanwhile (another committer took it:
/// possible only when the writer lock is not shared), which is no fault.
async fn reject_run(
    ctx: &Context<'_>,
    dir: &RunDir,
    reason: &str,
    report: &mut SequenceReport,
) -> Result<()> {
    if !still_staged(ctx.staging, dir).await? {
        tracing::info!(run = %dir.run_id, "a staged run vanished while loading (committed elsewhere)");
        return Ok(());
    }
    if runs_committed(ctx.lake, dir).await? {
        tracing::info!(run = %dir.run_id, "a staged run was committed meanwhile; removing it");
        return remove_in(ctx.staging, dir).await;
    }
    let to = quarantine_in(ctx.staging, dir, reason).await?;
    report.quarantined.push((to, reason.to_owned()));
    Ok(())
}

/// Whether a unit is still in staging (a unit gone meanwhile was taken by
/// another committer).
pub(super) async fn still_staged(area: &StagingArea, dir: &RunDir) -> Result<bool> {
    match area {
        StagingArea::Dir(_) => Ok(std::fs::symlink_metadata(&dir.path).is_ok()),
        StagingArea::Store(store) => store.exists(&crate::staging::area::unit_object(dir)).await,
    }
}

/// Runs that must not be committed again, removed from staging:
///
/// - a run whose execution row the lake already holds: staging of it now is
///   a copy, or the late result of a unit already recorded (a SLURM task
///   declared lost) — never content without its execution;
/// - a successful run of a spec that already succeeded (in the lake, or
///   earlier in this chunk): the late result of a worker whose orchestrator
///   died, finishing after a rerun did the same work. A spec succeeds once.
async fn drop_committed(
    ctx: &Context<'_>,
    runs: &mut Vec<LoadedRun>,
    report: &mut SequenceReport,
) -> Result<u64> {
    let spec = layout::executions_table();
    if runs.is_empty() || !table::exists(ctx.lake.root(), &spec).await? {
        return Ok(0);
    }
    let clock = std::time::Instant::now();
    let lake = ctx.lake;
    let mut tip = lake.handles().latest_tip(lake.root(), &spec).await?;
    tip.follow("execution_spec_id");
    let open_ms = clock.elapsed().as_millis() as u64;
    let ids: BTreeSet<String> =
        runs.iter().flat_map(|r| r.executions.iter().map(|e| e.run_id.clone())).collect();
    let keys: Vec<Key> = ids.iter().map(|id| Key::of_text(id)).collect();
    let committed = if tip.holds_none(&keys) {
        BTreeSet::new()
    } else {
        crate::lake::append::present_keys_on_tip(lake.root(), &tip, &spec, Dedup::RunId, &ids)
            .await?
    };
    let runs_ms = clock.elapsed().as_millis() as u64 - open_ms;
    let succeeded = succeeded_specs(lake, &tip, runs).await;
    let checked_at = tip.head();
    lake.handles().keep_tip(&spec, tip);
    let mut succeeded = succeeded?;
    tracing::debug!(
        open_ms,
        runs_ms,
        specs_ms = clock.elapsed().as_millis() as u64 - open_ms - runs_ms,
        "checked which staged runs are committed"
    );
    let mut kept = Vec::with_capacity(runs.len());
    for mut run in runs.drain(..) {
        let mut keep = BTreeSet::new();
        for e in &run.executions {
            let repeat = e.success && !succeeded.insert(e.spec_id.clone());
            if committed.contains(&e.run_id) || repeat {
                tracing::info!(
                    run = %e.run_id, dir = %run.dir.run_id, spec = %e.spec_id, repeat,
                    "staged run already committed (or its spec already succeeded); not committed again"
                );
            } else {
                keep.insert(e.run_id.clone());
            }
        }
        report.already_committed += run.executions.len() - keep.len();
        if keep.is_empty() {
            remove_in(ctx.staging, &run.dir).await?;
        } else {
            if keep.len() < run.executions.len() {
                run.retain_runs(&keep)?;
            }
            kept.push(run);
        }
    }
    *runs = kept;
    Ok(checked_at)
}

/// Which specs of these runs' successful executions already succeeded in
/// the lake: none when the executions' tip rules them all out from its
/// `execution_spec_id` key filters, else the execution cache's look-up
/// (key and bloom filters), so the cost follows these specs, not the table.
async fn succeeded_specs(lake: &Lake, tip: &Tip, runs: &[LoadedRun]) -> Result<BTreeSet<String>> {
    let specs: HashSet<String> = runs
        .iter()
        .flat_map(|r| r.executions.iter())
        .filter(|e| e.success)
        .map(|e| e.spec_id.clone())
        .collect();
    let keys: Vec<Key> = specs.iter().map(|s| Key::of_value(s)).collect();
    if specs.is_empty() || tip.holds_none_in("execution_spec_id", &keys) {
        return Ok(BTreeSet::new());
    }
    Ok(crate::lake::spec_successes::successful_runs(lake, &specs).await?.into_keys().collect())
}

/// Whether every execution of a staging directory is in the lake (a batch
/// whose sentinel cannot be read is not).
async fn runs_committed(lake: &Lake, dir: &RunDir) -> Result<bool> {
    let spec = layout::executions_table();
    if !table::exists(lake.root(), &spec).await? {
        return Ok(false);
    }
    let Ok(wanted) = dir.staged_run_ids() else { return Ok(false) };
    if wanted.is_empty() {
        return Ok(false);
    }
    let wanted: BTreeSet<String> = wanted.into_iter().collect();
    let handle = table::open(lake.root(), &spec).await?;
    let found =
        crate::lake::append::present_keys(lake.root(), &handle, &spec, Dedup::RunId, &wanted)
            .await?;
    Ok(found.len() == wanted.len())
}

/// Edges must point at artifacts in this commit or in the lake. Removing a
/// run can orphan another's edges, so repeat until nothing changes.
async fn drop_orphan_edges(
    ctx: &Context<'_>,
    runs: &mut Vec<LoadedRun>,
    report: &mut SequenceReport,
) -> Result<()> {
    let mut known_in_lake: HashSet<ArtifactId> = HashSet::new();
    let mut asked: HashSet<ArtifactId> = HashSet::new();
    loop {
        let in_commit: HashSet<ArtifactId> =
            runs.iter().flat_map(|r| r.artifacts.keys().copied()).collect();
        let to_ask: Vec<ArtifactId> = runs
            .iter()
            .flat_map(|r| r.referenced.iter().copied())
            .filter(|id| !in_commit.contains(id) && asked.insert(*id))
            .collect();
        let present = ctx.lake.existing_ids(&layout::index_table(), to_ask.into_iter()).await?;
        known_in_lake.extend(present);

        let mut bad = Vec::new();
        for (i, run) in runs.iter().enumerate() {
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
            return Ok(());
        }
        for (i, reason) in bad.into_iter().rev() {
            let run = runs.remove(i);
            reject_run(ctx, &run.dir, &reason, report).await?;
        }
    }
}

/// Load run directories on all cores (reading and checking them is most of a
/// commit's work), keeping their order.
/// Load runs on all cores until their decoded rows reach `budget` bytes;
/// `None` for the runs left over.
fn load_parallel(
    registry: &crate::registry::TypeRegistry,
    specs: &[TableSpec],
    runs: Vec<RunDir>,
    budget: u64,
) -> Vec<(Option<std::result::Result<LoadedRun, Rejection>>, RunDir)> {
    let loaded = crate::host::on_cores_within(
        &runs,
        budget,
        |dir| load_run(registry, specs, dir),
        |result| result.as_ref().map_or(0, LoadedRun::decoded_bytes),
    );
    loaded.into_iter().zip(runs).collect()
}

/// [`load_parallel`] of units fetched from a store.
fn load_fetched_parallel(
    registry: &crate::registry::TypeRegistry,
    specs: &[TableSpec],
    fetched: Vec<(RunDir, Option<bytes::Bytes>)>,
    budget: u64,
) -> Vec<(Option<std::result::Result<LoadedRun, Rejection>>, RunDir)> {
    let loaded = crate::host::on_cores_within(
        &fetched,
        budget,
        |(dir, object)| super::load::load_fetched(registry, specs, dir, object.as_ref()),
        |result| result.as_ref().map_or(0, LoadedRun::decoded_bytes),
    );
    loaded.into_iter().zip(fetched.into_iter().map(|(dir, _)| dir)).collect()
}

/// How many units are fetched from a store at once.
const FETCH_CONCURRENCY: usize = 64;

/// The objects of sealed units in a store (one GET each), in order, until
/// their bytes reach `budget` (the first always); the units left over come
/// back. A request that fails fails the commit: a unit is quarantined for
/// what it holds, never for a store that did not answer. A unit gone
/// meanwhile (another committer took it) is fetched as `None`, and
/// loading it finds nothing and leaves it ([`reject_run`] checks it is
/// gone).
async fn fetch_units(
    store: &crate::staging::area::StoreArea,
    dirs: Vec<RunDir>,
    budget: u64,
) -> Result<(Vec<(RunDir, Option<bytes::Bytes>)>, Vec<RunDir>)> {
    use futures::{StreamExt, TryStreamExt};
    let mut fetched = Vec::new();
    let mut bytes = 0u64;
    let mut pending = dirs.into_iter().peekable();
    while pending.peek().is_some() && (fetched.is_empty() || bytes < budget) {
        let round: Vec<RunDir> = pending.by_ref().take(FETCH_CONCURRENCY).collect();
        let got: Vec<(RunDir, Option<bytes::Bytes>)> = futures::stream::iter(round)
            .map(|dir| async move {
                let object = store.get(&crate::staging::area::unit_object(&dir)).await?;
                Ok::<_, Error>((dir, object))
            })
            .buffered(FETCH_CONCURRENCY)
            .try_collect()
            .await?;
        bytes += got.iter().filter_map(|(_, b)| b.as_ref()).map(|b| b.len() as u64).sum::<u64>();
        fetched.extend(got);
    }
    Ok((fetched, pending.collect()))
}

/// The kept tip of a table at its latest version, and its staged rows in
/// exactly its schema ([`conform`]).
async fn conformed_on_tip<'b>(
    lake: &Lake,
    spec: &TableSpec,
    staged: impl IntoIterator<Item = &'b RecordBatch>,
) -> Result<(Tip, Vec<RecordBatch>)> {
    let tip = lake.handles().latest_tip(lake.root(), spec).await?;
    let schema = table::arrow_schema(tip.table(), spec)?;
    let mut batches = Vec::new();
    for batch in staged {
        match conform(batch, &schema, &spec.name) {
            Ok(conformed) => batches.extend(conformed),
            Err(e) => {
                lake.handles().keep_tip(spec, tip);
                return Err(e);
            }
        }
    }
    match joined(&schema, batches, &spec.name) {
        Ok(batches) => Ok((tip, batches)),
        Err(e) => {
            lake.handles().keep_tip(spec, tip);
            Err(e)
        }
    }
}

/// Rows of a table joined into batches of up to this many bytes.
const JOINED_BATCH_BYTES: usize = 64 << 20;

/// The staged rows of a sequence joined into few batches. A commit of
/// thousands of one-unit runs stages a batch of a row or two per unit and
/// table; every step after (de-duplication, key filters, the Parquet
/// write) costs per batch as well as per row, so the rows are joined once
/// here. A batch stays under [`JOINED_BATCH_BYTES`] (a large one stays
/// alone), far below what a binary array holds.
fn joined(schema: &SchemaRef, batches: Vec<RecordBatch>, table: &str) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut group: Vec<RecordBatch> = Vec::new();
    let mut bytes = 0;
    let mut flush = |group: &mut Vec<RecordBatch>| -> Result<()> {
        match group.len() {
            0 => {}
            1 => out.extend(group.pop()),
            _ => {
                let one = deltalake::arrow::compute::concat_batches(schema, group.iter())
                    .map_err(|e| Error::arrow(format!("table `{table}` rows"), e))?;
                group.clear();
                out.push(one);
            }
        }
        Ok(())
    };
    for batch in batches {
        let size = batch.get_array_memory_size();
        if !group.is_empty() && bytes + size > JOINED_BATCH_BYTES {
            flush(&mut group)?;
            bytes = 0;
        }
        bytes += size;
        group.push(batch);
    }
    flush(&mut group)?;
    Ok(out)
}

/// Bytes of binary values per written batch at most: a Delta binary column
/// is an Arrow `Binary` array with 32-bit offsets (2 GiB per array).
const MAX_BINARY_BATCH: usize = 1 << 30;

/// Give a staged batch exactly the table's schema: columns by name, cast to
/// the table's types, nulls for columns the staged file does not have. A
/// batch whose binary values add up to more than one array can hold is cut
/// into several.
fn conform(batch: &RecordBatch, schema: &SchemaRef, table: &str) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for (offset, len) in slices(batch) {
        let part = batch.slice(offset, len);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = match part.column_by_name(field.name()) {
                Some(c) if c.data_type() == field.data_type() => c.clone(),
                Some(c) => cast(c, field.data_type())
                    .map_err(|e| Error::arrow(format!("table `{table}`"), e))?,
                None => new_null_array(field.data_type(), part.num_rows()),
            };
            columns.push(column);
        }
        out.push(
            RecordBatch::try_new(schema.clone(), columns)
                .map_err(|e| Error::arrow(format!("table `{table}` rows"), e))?,
        );
    }
    Ok(out)
}

/// Row ranges of a batch whose binary values stay under [`MAX_BINARY_BATCH`]
/// bytes per column.
fn slices(batch: &RecordBatch) -> Vec<(usize, usize)> {
    let binaries: Vec<&LargeBinaryArray> = batch
        .columns()
        .iter()
        .filter_map(|c| c.as_any().downcast_ref::<LargeBinaryArray>())
        .collect();
    if binaries.is_empty() {
        return vec![(0, batch.num_rows())];
    }
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, vec![0usize; binaries.len()]);
    for row in 0..batch.num_rows() {
        let sizes: Vec<usize> = binaries.iter().map(|b| b.value_length(row) as usize).collect();
        if row > start && bytes.iter().zip(&sizes).any(|(b, s)| b + s > MAX_BINARY_BATCH) {
            out.push((start, row - start));
            start = row;
            bytes.iter_mut().for_each(|b| *b = 0);
        }
        bytes.iter_mut().zip(&sizes).for_each(|(b, s)| *b += s);
    }
    out.push((start, batch.num_rows() - start));
    out
}

/// One table's de-duplicating append of a sequence (number, token, the
/// table's version before it), tagged with its number and token, on the
/// table's tip.
async fn append_one(
    root: &LakeRoot,
    spec: &TableSpec,
    batches: Vec<RecordBatch>,
    (seq, token, since): (i64, String, u64),
    tip: &mut Tip,
    (gate, specs_checked_at): (Option<Gate>, Option<u64>),
    present: Option<(u64, BTreeSet<String>)>,
) -> Result<Appended> {
    let clock = std::time::Instant::now();
    let mut append = Append::new(root, spec, batches)
        .with_app_transaction(TXN_APP_ID, seq)
        .with_metadata(SEQ_KEY, serde_json::json!(seq))
        .with_token(token, since);
    if let Some(gate) = gate {
        append = append.with_gate(gate);
    }
    if let Some((version, keys)) = present {
        append = append.with_present_at(version, keys);
    }
    if let Some(checked) = specs_checked_at {
        append = append.with_unique_success(checked);
    }
    let appended = append.execute_on_tip(tip).await?;
    tracing::debug!(
        seq, table = %spec.name, rows = appended.rows_added,
        skipped = appended.rows_skipped, ms = clock.elapsed().as_millis() as u64,
        "table committed"
    );
    Ok(appended)
}

/// Fault injection for tests: with the failpoint `commit:<table>` the
/// commit of that table fails, as a Delta error would, and so does every
/// table after it in the order committed.
fn failpoint_check(point: Option<&str>, table: &str) -> Result<()> {
    match point {
        Some(point) if point.strip_prefix("commit:") == Some(table) => {
            Err(Error::Injected { point: format!("committing table `{table}`") })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn large_binaries_are_cut_into_batches_a_binary_array_holds() {
        let big = vec![0u8; MAX_BINARY_BATCH / 2 + 1];
        let values = LargeBinaryArray::from_iter_values([&big, &big, &big, &big[..10]]);
        let batch =
            RecordBatch::try_from_iter([("content", Arc::new(values) as ArrayRef)]).unwrap();
        assert_eq!(slices(&batch), vec![(0, 1), (1, 1), (2, 2)]);
    }

    #[test]
    fn rows_of_many_units_are_joined_in_order_and_large_ones_stay_apart() {
        use deltalake::arrow::array::Int64Array;
        let one = |i: i64| {
            RecordBatch::try_from_iter([("n", Arc::new(Int64Array::from(vec![i])) as ArrayRef)])
                .unwrap()
        };
        let schema = one(0).schema();
        let batches: Vec<RecordBatch> = (0..2000).map(one).collect();
        let one_batch = joined(&schema, batches, "t").unwrap();
        assert_eq!(one_batch.len(), 1);
        let values = one_batch[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(values.values().to_vec(), (0..2000).collect::<Vec<i64>>(), "in order");

        let rows = JOINED_BATCH_BYTES / 8 / 2 + 1;
        let large = || {
            let values = Int64Array::from(vec![7; rows]);
            RecordBatch::try_from_iter([("n", Arc::new(values) as ArrayRef)]).unwrap()
        };
        let two = joined(&schema, vec![one(1), large(), large(), one(2)], "t").unwrap();
        let sizes: Vec<usize> = two.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, vec![1 + rows, rows + 1], "{sizes:?}");
    }
}
