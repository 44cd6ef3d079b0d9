//! Staging: how workers hand results to the committer without touching Delta.
//!
//! ```text
//!  worker A ─┐   staging_root/
//!  worker B ─┼─▶   {step}_{op}/{id[0:2]}/{id}.sluice   ◀─ one file per unit:
//!  worker C ─┘                                            a file per table touched
//!  committer ◀── scan (sealed only) ───────────────────┘  inside, the sentinel among them
//! ```
//!
//! A unit is one file ([`bundle`]) holding one file per table it touches
//! (`metrics` …, `index`, `artifact_edges`, `execution_edges`, and
//! `executions`, the sentinel): an Arrow IPC stream (`metrics.arrow`) for
//! small rows, a Parquet file (`data.parquet`) for large ones. The unit
//! appears whole or not at all — by rename from a hidden name in a folder,
//! by a put if absent in a store — so its appearance seals it. Staging a
//! unit creates one file and committing it removes one: no folder per unit
//! is made or removed (on this project's disk, removing a folder costs ten
//! times what removing a file does). A commit of N units opens N files.
//! (An older sluice staged a unit as a folder, first of five loose files
//! sealed by the sentinel written last, then of one unit object; such
//! folders are still committed.)
//!
//! A worker with many small units may stage a *batch* instead: one unit
//! `{step}_{op}/{b[0:2]}/{b}.sluice` (`b` a batch id) holding the rows of
//! all its executions, and a sentinel listing them all. A commit of N small
//! executions then reads N/K files and decodes 5·N/K tables instead of
//! 5·N (per-unit work is most of what such a commit costs), and every
//! guarantee stays: a batch is sealed like a unit, validated and
//! quarantined whole (one worker wrote it), and committed in part when some
//! of its runs are already in the lake.
//!
//! Invariants:
//! 1. A worker writes only its own unit's file; names that could escape
//!    it (`..`, `/`, NUL, absurd length) are rejected.
//! 2. A unit appears atomically (a hidden temporary name, then rename; in a
//!    store, one put if absent); a hidden partial file is never committed.
//! 3. On shared filesystems, the unit file and then its shard folder are
//!    fsynced, and the orchestrator waits with the NFS-safe protocol in
//!    [`wait`].
//! 4. In an object store ([`area`]) the layout is the same below the lake's
//!    `_staging/` prefix.

pub mod area;
pub mod bundle;
pub mod fs_kind;
pub mod paths;
pub mod scan;
pub mod synthetic;
pub mod wait;
pub mod writer;

/// The file of a unit that holds its executions, written last: inside
/// the unit object, and loose in a folder staged by an older sluice.
pub const SENTINEL: &str = "executions.parquet";

/// Whether the folder an older sluice staged a unit in is sealed: its unit
/// object is there (or, staged as loose files, its sentinel).
pub fn is_sealed(dir: &std::path::Path) -> bool {
    dir.join(bundle::UNIT_OBJECT).is_file() || dir.join(SENTINEL).is_file()
}

/// The default staging root of a lake.
pub fn default_root(lake_root: &std::path::Path) -> std::path::PathBuf {
    crate::lake::layout::staging_root(lake_root)
}

pub use area::StagingArea;
pub use fs_kind::SyncPolicy;
pub use scan::{RunDir, Shape, StagingScan, scan};
pub use wait::{ExpectedRun, WaitOptions, WaitOutcome, wait_for_runs};
pub use writer::{StagedExecution, StagingWriter};
