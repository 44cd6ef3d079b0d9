//! The committer: sealed staging → Delta tables, exactly once.
//!
//! ```text
//!  check journal ─▶ recover (finish manifests, abandon orphans) ─▶ scan sealed dirs
//!    ─▶ per chunk (≤ N runs, ≤ B staged bytes), one sequence:
//!         load + validate ─▶ claim (journal) ─▶ manifest ─▶ commit tables ─▶ complete ─▶ clean
//! ```
//!
//! Correctness rests on what Delta guarantees, never on a lock: every table
//! commit — and every journal row — is made as exactly the version after
//! the one its decision was based on (put-if-absent per version), so
//!
//! - a sequence number is claimed by exactly one committer;
//! - de-duplication checks each key against the very version it commits on
//!   top of, so no two writers both add a key;
//! - a retry finds its own earlier table commits by the sequence's token and
//!   skips only those.
//!
//! The writer lock (`_staging/.commit.lock`) is a courtesy that keeps two
//! committers from doing the same work twice; two committers on hosts that
//! do not share it still lose and duplicate nothing. See [`sequence`] for
//! what a crash can interrupt and how `recover` continues from each phase.

pub mod doctor;
mod load;
pub mod manifest;
mod quarantine;
mod recovery;
mod sequence;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lake::writer::{self, WriteKind};
use crate::lake::{Lake, delta::table, journal, layout};
use crate::staging::{self, RunDir, StagingArea, SyncPolicy};

pub use load::{LoadedRun, Rejection, load_run};
pub use quarantine::{QUARANTINE_DIR, REASON_FILE};

/// Default number of run directories per commit sequence.
pub const DEFAULT_CHUNK: usize = 1000;

/// Default staged bytes per commit sequence: with the run count, bounds a
/// commit's memory (see [`CommitBuilder::with_chunk_bytes`]).
pub const DEFAULT_CHUNK_BYTES: u64 = 256 << 20;

/// Default bound on the decoded rows one commit sequence holds in memory
/// (see [`CommitBuilder::with_memory_limit`]), unless the process's memory
/// limit calls for less ([`default_memory`]).
pub const DEFAULT_CHUNK_MEMORY: u64 = 1 << 30;

/// The share of a memory limit (a SLURM job's `--mem`, a container's) one
/// sequence's decoded rows may take: committing a run costs several times
/// its decoded size while it is validated, conformed and written (a heap
/// profile of a 20 MiB payload showed six copies at the peak), and the
/// process itself needs its own.
pub const MEMORY_LIMIT_SHARE: u64 = 8;

/// The bound on one sequence's decoded rows when none is given:
/// [`DEFAULT_CHUNK_MEMORY`], or an eighth of the cgroup's memory limit
/// when that is smaller, so `recover` under a small limit is not killed on
/// every attempt.
pub fn default_memory() -> u64 {
    let limit = crate::host::memory_limit().map_or(u64::MAX, |l| l / MEMORY_LIMIT_SHARE);
    DEFAULT_CHUNK_MEMORY.min(limit).max(1 << 20)
}

/// What a commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReport {
    /// Executions committed, or found already committed, including
    /// recovered ones (a batch directory counts each of its executions).
    pub runs_committed: usize,
    /// Run directories without a sentinel, left in place.
    pub unsealed: Vec<PathBuf>,
    /// Run directories moved to quarantine, with the reason.
    pub quarantined: Vec<(PathBuf, String)>,
    /// Quarantined run directories moved back into staging to be tried
    /// again ([`CommitBuilder::with_requeue`]).
    pub requeued: Vec<PathBuf>,
    /// Rows added per table.
    pub rows_added: std::collections::BTreeMap<String, u64>,
    /// Staged rows not added because the lake or the commit already had them.
    pub rows_deduplicated: std::collections::BTreeMap<String, u64>,
    /// Sequences committed.
    pub sequences: Vec<i64>,
    /// Sequences finished from a previous, interrupted commit.
    pub recovered: Vec<i64>,
    /// Started sequences recorded as abandoned (their committer and
    /// manifest are gone), with the reason.
    pub abandoned: Vec<(i64, String)>,
    /// Successful runs committed superseded: another committer, sharing no
    /// lock with this one, committed a success of the same spec first.
    pub superseded: Vec<String>,
    /// What `recover` finished of puts and compactions killed between
    /// their two commits (see [`unfinished`](crate::maintenance::unfinished)).
    pub unfinished: crate::maintenance::unfinished::Finished,
    /// Wall time.
    pub duration: Duration,
}

impl CommitReport {
    /// The restores a writer settled as it began.
    fn absorb_settled(&mut self, settled: &[crate::lake::journal::restore::Settled]) {
        for settled in settled {
            match settled {
                crate::lake::journal::restore::Settled::Finished(done) => {
                    self.recovered.push(done.seq)
                }
                crate::lake::journal::restore::Settled::RolledBack { seq, reason } => {
                    self.abandoned.push((*seq, reason.clone()));
                }
            }
        }
    }

    fn absorb(&mut self, other: sequence::SequenceReport) {
        self.runs_committed += other.runs + other.already_committed;
        self.quarantined.extend(other.quarantined);
        self.superseded.extend(other.superseded);
        for (t, n) in other.rows_added {
            *self.rows_added.entry(t).or_default() += n;
        }
        for (t, n) in other.rows_deduplicated {
            *self.rows_deduplicated.entry(t).or_default() += n;
        }
    }
}

/// Progress callback: (run dirs done, run dirs total).
pub type Progress = Box<dyn Fn(usize, usize) + Send + Sync>;

/// Commit sealed staging into the lake. Build it with [`Lake::commit`] or
/// [`Lake::recover`].
#[must_use = "a commit does nothing until executed"]
pub struct CommitBuilder<'a> {
    lake: &'a Lake,
    /// Where units are staged: a folder, or the lake's store.
    staging: StagingArea,
    step: Option<i32>,
    chunk: usize,
    chunk_bytes: u64,
    memory: u64,
    sync: SyncPolicy,
    progress: Option<Progress>,
    lock_wait: Option<Duration>,
    recover_only: bool,
    requeue: bool,
    stale_after: Duration,
    failpoint: Option<String>,
    runs: Option<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for CommitBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitBuilder")
            .field("staging", &self.staging)
            .field("step", &self.step)
            .field("chunk", &self.chunk)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("recover_only", &self.recover_only)
            .finish()
    }
}

impl Lake {
    /// Commit all sealed staging under the lake's staging root (finishing
    /// interrupted sequences first).
    pub fn commit(&self) -> CommitBuilder<'_> {
        CommitBuilder {
            lake: self,
            staging: StagingArea::of_lake(self.root()),
            step: None,
            chunk: DEFAULT_CHUNK,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            memory: default_memory(),
            sync: SyncPolicy::Detect,
            progress: None,
            lock_wait: None,
            recover_only: false,
            requeue: false,
            stale_after: writer::DEFAULT_STALE_AFTER,
            failpoint: std::env::var("SLUICE_FAILPOINT").ok(),
            runs: None,
        }
    }

    /// Bring the lake to a consistent state after a crash: finish every
    /// sequence that has a manifest, record started sequences that can never
    /// finish as abandoned (so readers stop waiting for them), then commit
    /// the sealed staging that crashed runs left behind.
    pub fn recover(&self) -> CommitBuilder<'_> {
        CommitBuilder { recover_only: true, ..self.commit() }
    }
}

impl<'a> CommitBuilder<'a> {
    /// Commit staging under another root (default: `<lake>/_staging`).
    pub fn with_staging_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.staging = StagingArea::Dir(root.into());
        self
    }

    /// Only commit one step's staging (interrupted sequences are always finished).
    pub fn with_step(mut self, step: Option<i32>) -> Self {
        self.step = step;
        self
    }

    /// Only commit these runs' staging (interrupted sequences are always
    /// finished). A pipeline step commits exactly the units it dispatched:
    /// staging of anything else — a worker of a dead orchestrator that
    /// finished late, another pipeline — is left to `recover`.
    pub fn with_runs(mut self, runs: Option<std::collections::HashSet<String>>) -> Self {
        self.runs = runs;
        self
    }

    /// Run directories per sequence (default 1000). Larger means fewer Delta
    /// commits and more memory.
    pub fn with_chunk_size(mut self, chunk: usize) -> Self {
        self.chunk = chunk.max(1);
        self
    }

    /// Staged bytes (Parquet file sizes) per sequence (default 256 MiB).
    /// A commit holds one sequence's rows in memory: about this many bytes
    /// times their Parquet compression ratio, or one run directory if a
    /// single one is larger.
    pub fn with_chunk_bytes(mut self, bytes: u64) -> Self {
        self.chunk_bytes = bytes.max(1);
        self
    }

    /// Decoded bytes one sequence may hold in memory (default
    /// [`default_memory`]: 1 GiB, less under a memory limit): runs
    /// are loaded in order until their decoded rows reach it, the rest go
    /// to the next sequence (a single run larger than it is a sequence of
    /// its own). Staged sizes cannot bound this: compressible data decodes
    /// to thousands of times its staged size.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory = bytes.max(1);
        self
    }

    /// Move quarantined runs back into staging first, so this commit tries
    /// them again: after their cause is fixed, or on a node with the memory
    /// a run too large for another process needs.
    pub fn with_requeue(mut self, requeue: bool) -> Self {
        self.requeue = requeue;
        self
    }

    /// When to fsync manifests (default: detect a shared filesystem).
    pub fn with_sync_policy(mut self, sync: SyncPolicy) -> Self {
        self.sync = sync;
        self
    }

    /// Report progress as run directories are committed.
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Wait at most this long for the writer lock (default: as long as it
    /// takes), then fail naming its holder.
    pub fn with_lock_wait(mut self, wait: Option<Duration>) -> Self {
        self.lock_wait = wait;
        self
    }

    /// How old a started sequence of another host must be before `recover`
    /// records it as abandoned (default 1 hour). Sequences of this host are
    /// abandoned as soon as their process is gone.
    pub fn with_stale_after(mut self, age: Duration) -> Self {
        self.stale_after = age;
        self
    }

    /// Fault injection for tests: `commit:<table>` makes that table's commit
    /// fail, as a Delta error would, after every table before it. Also set
    /// by the `SLUICE_FAILPOINT` environment variable.
    #[doc(hidden)]
    pub fn with_failpoint(mut self, point: Option<String>) -> Self {
        self.failpoint = point;
        self
    }

    /// Run the commit.
    pub async fn execute(self) -> Result<CommitReport> {
        let started = Instant::now();
        let writer = self
            .lake
            .writer(WriteKind::Commit)
            .lock_wait(self.lock_wait)
            .stale_after(self.stale_after)
            .begin()
            .await?;
        let area = self.staging.clone();
        if let StagingArea::Dir(root) = &area {
            std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        }
        let locked_ms = started.elapsed().as_secs_f64() * 1e3;
        let requeued = if self.requeue { quarantine::requeue_in(&area).await? } else { Vec::new() };
        let specs = self.lake.table_specs();
        // `Lake::open` reconciled the tables that exist; create the missing
        // ones (e.g. the journal of a lake made before it existed). The
        // check below notices a journal recreated this way.
        for spec in &specs {
            if !table::exists(self.lake.root(), spec).await? {
                table::ensure(self.lake.root(), spec).await?;
            }
        }
        // The tables' heads, then the journal (the order readers use): a
        // journal behind the tables means it lost rows.
        let (_, highest) = self.lake.handles().tip_heads(self.lake.root(), &specs).await?;
        let tables_seq = highest.map_or(0, |(seq, _)| seq);
        let mut kept = self.lake.take_journal_tip().await?;
        kept.advance(self.lake.root()).await?;
        let journal = kept.journal();
        sequence::check_journal(journal.max_seq(), tables_seq)?;
        let manifests = manifest::read_all_in(&area).await?;
        // Only a crash leaves something to recover: most commits skip it
        // (and the copy of the journal it reads).
        let existing = (!manifests.is_empty() || kept.has_unfinished()).then(|| journal.clone());
        let ctx = sequence::Context {
            lake: self.lake,
            staging: &area,
            sync: area.dir().is_some_and(|root| self.sync.should_sync(root)),
            tables_seq,
            failpoint: self.failpoint.clone(),
            journal: tokio::sync::Mutex::new(kept),
        };
        let mut report = CommitReport { requeued, ..CommitReport::default() };
        report.absorb_settled(writer.settled());
        let checked_ms = started.elapsed().as_secs_f64() * 1e3;
        if let Some(existing) = existing {
            let bounds = (self.stale_after, self.memory);
            recovery::recover(&ctx, &existing, manifests, bounds, &mut report).await?;
        }
        if self.recover_only {
            report.unfinished = crate::maintenance::unfinished::finish(self.lake).await?;
        }
        let recovered_ms = started.elapsed().as_secs_f64() * 1e3;
        self.commit_sealed(&ctx, &mut report).await?;
        let committed_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut kept = ctx.journal.into_inner();
        // Best effort: a journal left fragmented only costs speed. Small
        // row files are merged by tier; a journal fragmented otherwise
        // (files of unknown size) is rewritten whole.
        let merged = match kept.merge_small_files(self.lake.root()).await {
            Ok(_) if kept.files() > journal::MAX_JOURNAL_FILES => {
                journal::compact_if_fragmented(self.lake.root()).await.map(drop)
            }
            other => other.map(drop),
        };
        if let Err(e) = merged {
            tracing::warn!(error = %e, "could not compact the commit journal");
        }
        self.lake.keep_journal_tip(kept);
        report.duration = started.elapsed();
        tracing::debug!(
            locked_ms,
            checked_ms,
            recovered_ms,
            committed_ms,
            total_ms = report.duration.as_secs_f64() * 1e3,
            "commit phases (ms since the start)"
        );
        Ok(report)
    }

    /// Commit sealed staging, one sequence per chunk.
    async fn commit_sealed(
        &self,
        ctx: &sequence::Context<'_>,
        report: &mut CommitReport,
    ) -> Result<()> {
        let clock = Instant::now();
        let scan = staging::scan::scan_area(ctx.staging, self.step).await?;
        tracing::debug!(
            sealed = scan.sealed.len(),
            ms = clock.elapsed().as_secs_f64() * 1e3,
            "staging scanned"
        );
        report.unsealed = scan.unsealed.iter().map(|r| r.path.clone()).collect();
        if !scan.unsealed.is_empty() && !self.recover_only {
            tracing::warn!(
                count = scan.unsealed.len(),
                "staged runs without a sentinel were skipped"
            );
        }
        let sealed: Vec<RunDir> = match &self.runs {
            Some(runs) => {
                let mut held = Vec::new();
                for dir in scan.sealed {
                    if holds_any(ctx.staging, &dir, runs).await {
                        held.push(dir);
                    }
                }
                held
            }
            None => scan.sealed,
        };
        let total = sealed.len();
        let mut done = 0;
        let mut pending: std::collections::VecDeque<RunDir> = sealed.into();
        while !pending.is_empty() {
            let clock = Instant::now();
            let chunk = next_chunk(&mut pending, self.chunk, self.chunk_bytes);
            let taken = chunk.len();
            let (loaded, left) = sequence::Loaded::load_within(ctx, chunk, self.memory).await?;
            let size = taken - left.len();
            if !left.is_empty() {
                tracing::debug!(
                    left = left.len(),
                    "runs past the memory bound go to the next sequence"
                );
            }
            for run in left.into_iter().rev() {
                pending.push_front(run);
            }
            if !loaded.is_empty() {
                let loaded_ms = clock.elapsed().as_secs_f64() * 1e3;
                let claimed = loaded.claim(ctx).await?;
                let seq = claimed.seq();
                let claimed_ms = clock.elapsed().as_secs_f64() * 1e3;
                tracing::debug!(seq, loaded_ms, claimed_ms, "sequence claimed");
                report.absorb(claimed.finish(ctx).await?);
                report.sequences.push(seq);
            } else {
                report.absorb(loaded.into_report());
            }
            done += size;
            if let Some(progress) = &self.progress {
                progress(done, total);
            }
        }
        Ok(())
    }
}

/// Whether a sealed directory holds one of `runs` (a batch whose sentinel
/// cannot be read is left to `recover`, which quarantines it).
async fn holds_any(
    area: &StagingArea,
    dir: &RunDir,
    runs: &std::collections::HashSet<String>,
) -> bool {
    if !dir.is_batch() {
        return runs.contains(&dir.run_id);
    }
    dir.staged_run_ids_in(area).await.is_ok_and(|ids| ids.iter().any(|id| runs.contains(id)))
}

/// The next chunk off the front of `pending`: at most `runs` directories
/// and `bytes` staged bytes (a directory larger than `bytes` is a chunk of
/// its own).
fn next_chunk(
    pending: &mut std::collections::VecDeque<RunDir>,
    runs: usize,
    bytes: u64,
) -> Vec<RunDir> {
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0u64;
    while let Some(run) = pending.front() {
        let size = run.staged_bytes();
        if !chunk.is_empty() && (chunk.len() >= runs || chunk_bytes + size > bytes) {
            break;
        }
        chunk_bytes += size;
        chunk.extend(pending.pop_front());
    }
    chunk
}

/// The manifest file of a sequence (for tests and tools that inspect staging).
pub fn manifest_path(staging_root: &std::path::Path, seq: i64) -> PathBuf {
    layout::manifest_file(staging_root, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_runs_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let runs: Vec<RunDir> = (0..5)
            .map(|i| {
                let path = dir.path().join(format!("r{i}.sluice"));
                std::fs::write(&path, vec![0u8; if i == 2 { 5000 } else { 100 }]).unwrap();
                RunDir::file(1, "op", &format!("r{i}"), path)
            })
            .collect();
        let sizes = |runs: &[RunDir], n: usize, bytes: u64| {
            let mut pending: std::collections::VecDeque<RunDir> = runs.iter().cloned().collect();
            let mut out = Vec::new();
            while !pending.is_empty() {
                out.push(next_chunk(&mut pending, n, bytes).len());
            }
            out
        };
        assert_eq!(sizes(&runs, 2, u64::MAX), vec![2, 2, 1]);
        // The 5000-byte run is alone; small ones share up to 300 bytes.
        assert_eq!(sizes(&runs, 10, 300), vec![2, 1, 2]);
    }
}
