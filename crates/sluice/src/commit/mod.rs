//! The committer: sealed staging → Delta tables, exactly once.
//!
//! ```text
//!  recover leftover manifests ─▶ scan sealed dirs ─▶ per chunk (a sequence):
//!    1 load + validate each run dir        (bad → quarantine, reason file)
//!    2 check edges point at known artifacts (commit ∪ lake index)
//!    3 write manifest {seq, runs}           (fsynced on shared fs)
//!    4 journal: started(seq)
//!    5 de-duplicate every table on its natural key, within the sequence
//!      and against the lake
//!    6 commit content tables → index → artifact_edges → execution_edges →
//!      executions, one Delta transaction each, tagged txn(sluice-commit, seq);
//!      a table already tagged ≥ seq is skipped (it committed before a crash)
//!    7 journal: completed(seq, table versions)
//!    8 remove the run dirs, then the manifest
//! ```
//!
//! A crash anywhere leaves either no manifest (nothing committed; the dirs
//! are still sealed and get a new sequence) or a manifest whose sequence is
//! finished by the next commit or `recover`: tables the sequence reached are
//! skipped by their txn tag, the others committed. Running it any number of
//! times gives the lake an uninterrupted commit would have given. If a table
//! commit fails, the error names the table and the staging stays.

pub mod doctor;
pub mod journal;
mod load;
mod quarantine;
mod sequence;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::layout;
use crate::lake::table;
use crate::staging::{self, SyncPolicy};

pub use load::{LoadedRun, Rejection, load_run};
pub use quarantine::{QUARANTINE_DIR, REASON_FILE};

/// Default number of run directories per commit sequence: bounds memory.
pub const DEFAULT_CHUNK: usize = 1000;

/// What a commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReport {
    /// Run directories committed (including recovered ones).
    pub runs_committed: usize,
    /// Run directories without a sentinel, left in place.
    pub unsealed: Vec<PathBuf>,
    /// Run directories moved to quarantine, with the reason.
    pub quarantined: Vec<(PathBuf, String)>,
    /// Rows added per table.
    pub rows_added: std::collections::BTreeMap<String, u64>,
    /// Staged rows not added because the lake or the commit already had them.
    pub rows_deduplicated: std::collections::BTreeMap<String, u64>,
    /// Sequences committed.
    pub sequences: Vec<i64>,
    /// Sequences finished from a previous, interrupted commit.
    pub recovered: Vec<i64>,
    /// Wall time.
    pub duration: Duration,
}

impl CommitReport {
    fn absorb(&mut self, other: sequence::SequenceReport) {
        self.runs_committed += other.runs;
        self.quarantined.extend(other.quarantined);
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

/// Commit sealed staging into the lake. Build it with [`Lake::commit`].
#[must_use = "a commit does nothing until executed"]
pub struct CommitBuilder<'a> {
    lake: &'a Lake,
    staging_root: PathBuf,
    step: Option<i32>,
    chunk: usize,
    sync: SyncPolicy,
    progress: Option<Progress>,
}

impl std::fmt::Debug for CommitBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitBuilder")
            .field("staging_root", &self.staging_root)
            .field("step", &self.step)
            .field("chunk", &self.chunk)
            .finish()
    }
}

impl Lake {
    /// Commit all sealed staging under the lake's staging root.
    pub fn commit(&self) -> CommitBuilder<'_> {
        CommitBuilder {
            lake: self,
            staging_root: staging::default_root(self.root()),
            step: None,
            chunk: DEFAULT_CHUNK,
            sync: SyncPolicy::Detect,
            progress: None,
        }
    }

    /// Finish interrupted commit sequences and commit every sealed leftover
    /// staging directory (the same path as [`Lake::commit`]).
    pub fn recover(&self) -> CommitBuilder<'_> {
        self.commit()
    }
}

impl<'a> CommitBuilder<'a> {
    /// Commit staging under another root (default: `<lake>/_staging`).
    pub fn with_staging_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.staging_root = root.into();
        self
    }

    /// Only commit one step's staging (interrupted sequences are always finished).
    pub fn with_step(mut self, step: Option<i32>) -> Self {
        self.step = step;
        self
    }

    /// Run directories per sequence (default 1000). Larger means fewer Delta
    /// commits and more memory; memory is bounded by one chunk's rows.
    pub fn with_chunk_size(mut self, chunk: usize) -> Self {
        self.chunk = chunk.max(1);
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

    /// Run the commit.
    pub async fn execute(self) -> Result<CommitReport> {
        let started = Instant::now();
        let root = self.staging_root.clone();
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        let _lock = CommitLock::wait(&root).await?;
        // `Lake::open` reconciled the tables that exist; create the missing
        // ones (e.g. the journal of a lake made before it existed).
        for spec in self.lake.table_specs() {
            if !table::is_table(&table::table_dir(self.lake.root(), &spec)) {
                table::ensure(self.lake.root(), &spec).await?;
            }
        }
        let sync = self.sync.should_sync(&root);
        let mut report = CommitReport::default();
        let ctx = sequence::Context { lake: self.lake, staging_root: &root, sync };

        // 1. Finish what an interrupted commit started.
        let mut max_seq = 0;
        let entries = journal::read(self.lake).await?;
        for manifest in journal::read_manifests(&root)? {
            max_seq = max_seq.max(manifest.seq);
            let seq = manifest.seq;
            let done = entries.iter().any(|e| e.seq == seq && e.phase == journal::Phase::Completed);
            let out = sequence::finish(&ctx, manifest, done).await?;
            report.absorb(out);
            report.recovered.push(seq);
        }
        max_seq = max_seq.max(entries.iter().map(|e| e.seq).max().unwrap_or(0));

        // 2. Commit sealed staging, one sequence per chunk.
        let scan = staging::scan(&root, self.step)?;
        report.unsealed = scan.unsealed.iter().map(|r| r.path.clone()).collect();
        if !scan.unsealed.is_empty() {
            tracing::warn!(
                count = scan.unsealed.len(),
                "staged runs without a sentinel were skipped"
            );
        }
        let total = scan.sealed.len();
        let mut done = 0;
        for chunk in scan.sealed.chunks(self.chunk) {
            max_seq += 1;
            let out = sequence::run(&ctx, max_seq, chunk.to_vec()).await?;
            if out.runs > 0 {
                report.sequences.push(max_seq);
            }
            report.absorb(out);
            done += chunk.len();
            if let Some(progress) = &self.progress {
                progress(done, total);
            }
        }
        report.duration = started.elapsed();
        Ok(report)
    }
}

/// One lake writer at a time: an exclusive advisory lock on
/// `<lake>/_staging/.commit.lock`, released by the OS if the holder dies.
/// Commits and direct puts wait for it; a waiting writer logs why.
pub(crate) struct CommitLock(std::fs::File);

impl CommitLock {
    fn open(root: &std::path::Path) -> Result<(std::fs::File, PathBuf)> {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let path = root.join(".commit.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok((file, path))
    }

    /// Wait until the lock is free, polling without blocking the runtime.
    pub(crate) async fn wait(root: &std::path::Path) -> Result<Self> {
        let (file, path) = Self::open(root)?;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(CommitLock(file)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !told {
                        tracing::info!(lock = %path.display(), "another writer holds the lake; waiting");
                        told = true;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
            }
        }
    }
}

impl Drop for CommitLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Natural-key columns of a table, for de-duplication.
pub fn natural_key(kind: &layout::TableKind) -> &'static [&'static str] {
    use layout::TableKind::*;
    match kind {
        Content(_) | Index => &["artifact_id"],
        Executions => &["execution_run_id"],
        ExecutionEdges => &["execution_run_id", "direction", "role", "artifact_id"],
        ArtifactEdges => &[
            "execution_run_id",
            "source_artifact_id",
            "target_artifact_id",
            "source_role",
            "target_role",
        ],
        Steps => &["step_run_id", "status", "timestamp"],
        Commits => &["commit_seq", "phase"],
    }
}
