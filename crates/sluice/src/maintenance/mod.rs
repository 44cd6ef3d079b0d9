//! Keeping a lake fast as it grows: history, checkpoints, compaction,
//! vacuum — all on Delta's own operations.
//!
//! - [`history`]: lake versions (the journal's completed sequences) and one
//!   table's Delta history.
//! - [`restore`]: every table back to one lake version or instant, as one
//!   journaled operation that `recover` finishes if it is interrupted.
//! - [`auto`]: light compaction of a step's partitions after the step,
//!   bounded in time, switchable off.
//! - [`integrity`]: whole-lake checks for `sluice doctor` (missing and
//!   unreferenced data files, dangling edges, index and content out of
//!   step) and the repairs that delete nothing a reader could need.
//! - [`unfinished`]: what `recover` finishes of puts and compactions
//!   killed between their two commits.
//! - [`checkpoint`]: write a checkpoint of every table (or one) and drop
//!   expired log entries, so opening a table replays a short log.
//! - [`compact`]: Delta OPTIMIZE per partition, Z-ordered by the column a
//!   table is looked up by, zstd; then the key filters of the new files are
//!   written, so de-duplication and lookups stay as fast as before.
//! - [`vacuum`]: Delta VACUUM with the retention enforced (shorter needs
//!   `force`), `full` for files crashed writers left; sluice's own leftovers
//!   (key filters of files no longer active, old SLURM task folders, empty
//!   staging shards, kept files no `file_ref` references) go under the same
//!   retention.
//!
//! Every operation takes the writer lock (a courtesy: each commit is still
//! checked by Delta against concurrent commits), tells the
//! [`Progress`](crate::progress::Progress) it is given before each table, and
//! reports what it did.

pub mod auto;
pub mod compact;
pub mod history;
pub mod integrity;
mod race_undo;
pub mod restore;
pub mod unfinished;
mod unreferenced_files;
pub mod vacuum;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::lake::layout::TableSpec;
use crate::lake::{Lake, delta::table};
use crate::progress::Progress;

pub use compact::{CompactOptions, CompactReport};
pub use history::{LakeVersion, TableVersion};
pub use restore::{RestoreOptions, RestoreReport};
pub use vacuum::{VacuumOptions, VacuumReport};

/// The tables an operation works on: one by name, or every table — the
/// artifact lake's and the ingestion tables (`raw/`, `aggregate/`,
/// `curated/`, the ledger) alike.
pub(crate) async fn select_tables(lake: &Lake, name: Option<&str>) -> Result<Vec<TableSpec>> {
    match name {
        Some(name) => Ok(vec![lake.table_spec(name).await?]),
        None => lake.held_table_specs().await,
    }
}

/// What [`checkpoint`] did to one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointReport {
    /// The table.
    pub table: String,
    /// The version checkpointed.
    pub version: u64,
    /// Expired log files removed.
    pub logs_removed: usize,
}

/// Checkpoint every table (or one) at its latest version, then remove log
/// entries older than the table's log retention (30 days by default) that
/// the checkpoint makes unnecessary. Delta also checkpoints every 100
/// commits on its own (`delta.checkpointInterval`).
pub async fn checkpoint(
    lake: &Lake,
    name: Option<&str>,
    progress: &Progress,
) -> Result<Vec<CheckpointReport>> {
    let _writer = lake.writer(crate::lake::writer::WriteKind::Checkpoint).begin().await?;
    let specs = select_tables(lake, name).await?;
    let mut out = Vec::new();
    for (done, spec) in specs.iter().enumerate() {
        progress.report(done, specs.len(), &spec.name);
        let handle = table::open(lake.root(), spec).await?;
        deltalake::checkpoints::create_checkpoint(&handle, None)
            .await
            .map_err(|e| Error::delta(&spec.name, e))?;
        let logs_removed = deltalake::checkpoints::cleanup_metadata(&handle, None)
            .await
            .map_err(|e| Error::delta(&spec.name, e))?;
        out.push(CheckpointReport {
            table: spec.name.clone(),
            version: handle.version().unwrap_or_default(),
            logs_removed,
        });
    }
    progress.finish(specs.len());
    Ok(out)
}
