//! Staging: how workers hand results to the committer without touching Delta.
//!
//! ```text
//!  worker A ─┐   staging_root/
//!  worker B ─┼─▶   {step}_{op}/{id[0:2]}/{id[2:4]}/{run_id}/
//!  worker C ─┘       metrics.parquet … index.parquet artifact_edges.parquet
//!                    execution_edges.parquet executions.parquet  ◀─ sentinel, last
//!                                     │
//!  committer ◀── scan (sealed only) ──┘
//! ```
//!
//! A worker with many small units may stage a *batch* instead: one directory
//! `{step}_{op}/{b[0:2]}/{b[2:4]}/{b}.batch/` with the same files, each holding
//! the rows of all its executions, and one sentinel listing them all. A
//! commit of N small executions then reads 5·N/K files instead of 5·N
//! (opening and decoding a tiny Parquet file is most of what such a commit
//! costs), and every guarantee stays: a batch is sealed by its sentinel
//! like a run directory, validated and quarantined whole (one worker wrote
//! it), and committed in part when some of its runs are already in the lake.
//!
//! Invariants:
//! 1. A worker writes only inside its own run directory; names that could
//!    escape it (`..`, `/`, NUL, absurd length) are rejected.
//! 2. Every file appears atomically (temporary name, then rename).
//! 3. `executions.parquet` is written last; a directory without it is never
//!    committed.
//! 4. On shared filesystems, files and then the directory are fsynced, and
//!    the orchestrator waits with the NFS-safe protocol in [`wait`].
//! 5. In an object store ([`area`]) the layout is the same below the lake's
//!    `_staging/` prefix, and a unit's files are one object
//!    ([`bundle::UNIT_OBJECT`]) put if absent: written and sealed at once.

pub mod area;
pub mod bundle;
pub mod fs_kind;
pub mod paths;
pub mod scan;
pub mod synthetic;
pub mod wait;
pub mod writer;

/// The file whose presence seals a run directory.
pub const SENTINEL: &str = "executions.parquet";

/// The default staging root of a lake.
pub fn default_root(lake_root: &std::path::Path) -> std::path::PathBuf {
    crate::lake::layout::staging_root(lake_root)
}

pub use area::StagingArea;
pub use fs_kind::SyncPolicy;
pub use scan::{RunDir, StagingScan, scan};
pub use wait::{ExpectedRun, WaitOptions, WaitOutcome, wait_for_runs};
pub use writer::{StagedExecution, StagingWriter};
