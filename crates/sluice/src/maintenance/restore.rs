//! `sluice restore`: every table back to one lake point, as one journaled
//! operation (see [`crate::lake::journal::restore`] for the protocol).
//!
//! A restore is refused while staging holds runs that wait for a commit:
//! they were computed against the lake as it is now, and committing them on
//! top of the restored lake is rarely what was meant. `force` restores
//! anyway; those runs are then committed by the next `commit`, on top of the
//! restored lake.

use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::lake::journal::restore::{self, RestoreHooks, RestoreOutcome, RestorePlan};
use crate::lake::journal::snapshot::LakePoint;
use crate::lake::writer::WriteKind;
use crate::lake::{Lake, journal};
use crate::progress::Progress;
use crate::staging;

/// What to restore to.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// The point: a lake version or an instant.
    pub to: LakePoint,
    /// Only say what would change.
    pub dry_run: bool,
    /// Restore even though staging holds runs waiting for a commit.
    pub force: bool,
    /// Told before each table restored.
    pub progress: Progress,
    /// Test hooks: a failpoint, a pause between tables (the CLI reads them
    /// from `SLUICE_FAILPOINT` and `SLUICE_RESTORE_PAUSE_MS`).
    #[doc(hidden)]
    pub hooks: RestoreHooks,
}

/// What a restore did (or would do).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreReport {
    /// The tables that change, and to which version.
    pub plan: RestorePlan,
    /// The restore's own lake version and commits (`None` in a dry run or
    /// when nothing changes).
    pub outcome: Option<RestoreOutcome>,
    /// Runs waiting in staging, left for the next commit.
    pub pending_runs: usize,
    /// Wall time.
    pub seconds: f64,
}

/// Restore the lake.
pub async fn restore(lake: &Lake, options: &RestoreOptions) -> Result<RestoreReport> {
    let clock = Instant::now();
    if options.to == LakePoint::Latest {
        return Err(Error::InvalidInput(
            "restore needs a point to go back to: a lake version (`sluice history` lists them) or a time".into(),
        ));
    }
    let _writer = lake.writer(WriteKind::Restore).begin().await?;
    let area = staging::StagingArea::of_lake(lake.root());
    let pending = staging::scan::scan_area(&area, None).await?;
    let pending_runs = pending.sealed.len() + pending.unsealed.len();
    let journal = journal::read(lake.root(), None).await?;
    if let Some(open) = journal.unfinished().first() {
        return Err(Error::InvalidInput(format!(
            "commit sequence {} has not finished; run `sluice recover` first",
            open.seq
        )));
    }
    if pending_runs > 0 && !options.force && !options.dry_run {
        return Err(Error::InvalidInput(format!(
            "{pending_runs} staged run(s) in {} wait for a commit; commit them first (`sluice commit`), or pass --force to restore anyway (they are then committed on top of the restored lake)",
            area.shown("").display()
        )));
    }
    let specs = lake.table_specs();
    let plan = restore::plan(lake.root(), &specs, &options.to).await?;
    restore::check_available(lake.root(), &specs, &plan).await?;
    let outcome = if options.dry_run || plan.tables.is_empty() {
        None
    } else {
        Some(restore::execute(lake.root(), &specs, &plan, &options.hooks, &options.progress).await?)
    };
    Ok(RestoreReport { plan, outcome, pending_runs, seconds: clock.elapsed().as_secs_f64() })
}
