//! Continuing after a crash: finish what has a manifest, close what cannot
//! be finished.
//!
//! For every manifest on disk, the journal says where its sequence got to:
//!
//! - `completed` → only the clean-up was interrupted: remove its run
//!   directories and the manifest;
//! - `started` → load its run directories again and commit every table that
//!   does not hold a commit with the sequence's token yet, then complete;
//! - no row for its token → the claim never landed (the journal is checked
//!   against the tables before this runs): nothing was committed under it;
//!   remove the manifest, its runs are committed as a new sequence.
//!
//! A `started` row with neither an end row nor a manifest is a sequence
//! nobody can finish (its committer died before writing the manifest, or
//! someone removed the manifest). Once its committer is certainly gone (same
//! host, process gone) or it is older than the stale age (another host), it
//! is recorded `abandoned` with the reason, and readers stop waiting for it.
//! Whatever tables it reached keep what it wrote: each of its commits was
//! whole and de-duplicated, and content precedes index.
//!
//! An unfinished restore (a `started` row with a `restore_to` plan) needs no
//! manifest: the writer protocol settles it from the journal row before the
//! committer writes anything (see [`writer`](crate::lake::writer)); one
//! claimed since, by a writer on another host, is settled here the same way.

use std::time::Duration;

use super::CommitReport;
use super::manifest;
use super::quarantine::remove_in;
use super::sequence::{Context, Loaded};
use crate::error::Result;
use crate::lake::journal::{Journal, JournalEntry, Phase};
use crate::lake::writer::{self, WriteKind};

/// Finish manifests and abandon orphaned sequences.
pub(super) async fn recover(
    ctx: &Context<'_>,
    journal: &Journal,
    manifests: Vec<manifest::Manifest>,
    (stale_after, memory): (Duration, u64),
    report: &mut CommitReport,
) -> Result<()> {
    for manifest in &manifests {
        let (dirs, bad) = manifest.run_dirs_in(ctx.staging);
        for path in &bad {
            tracing::warn!(seq = manifest.seq, %path, "a manifest entry is not a staging run directory; ignored");
        }
        let token = manifest_token(manifest);
        if journal.has(&token, Phase::Completed) {
            for dir in &dirs {
                remove_in(ctx.staging, dir).await?;
            }
            manifest::remove_in(ctx.staging, manifest.seq).await?;
            continue;
        }
        let Some(started) = journal.of_token(&token).find(|e| e.phase() == Phase::Started) else {
            tracing::warn!(
                seq = manifest.seq,
                "a manifest without a journal claim; its runs are committed anew"
            );
            manifest::remove_in(ctx.staging, manifest.seq).await?;
            continue;
        };
        tracing::info!(
            seq = manifest.seq,
            runs = dirs.len(),
            "finishing an interrupted commit sequence"
        );
        let mut present = Vec::with_capacity(dirs.len());
        for dir in dirs {
            if super::sequence::still_staged(ctx.staging, &dir).await? {
                present.push(dir);
            }
        }
        let (mut loaded, left) = Loaded::load_within(ctx, present.clone(), memory).await?;
        if !left.is_empty() {
            if !reached_any_table(ctx, started).await? {
                // Nothing of it is committed: close it, and its runs (still
                // sealed in staging) are committed in sequences that fit.
                let reason = format!(
                    "its {} runs decode to more than the commit's memory bound ({} MiB); they are committed again in smaller sequences",
                    present.len(),
                    memory >> 20
                );
                abandon(ctx, started, &reason).await?;
                manifest::remove_in(ctx.staging, manifest.seq).await?;
                report.abandoned.push((manifest.seq, reason));
                continue;
            }
            tracing::warn!(
                seq = manifest.seq,
                "an interrupted sequence past the memory bound has committed tables already; finishing it whole"
            );
            loaded = Loaded::load(ctx, present).await?;
        }
        report.absorb(loaded.resume(started).finish(ctx).await?);
        report.recovered.push(manifest.seq);
    }
    let with_manifest: Vec<String> = manifests.iter().map(manifest_token).collect();
    for open in journal.unfinished() {
        if open.is_restore() {
            finish_restore(ctx, open, stale_after, report).await?;
            continue;
        }
        if with_manifest.contains(&open.token) {
            continue;
        }
        if let Some(reason) = orphan_reason(open, stale_after) {
            abandon(ctx, open, &reason).await?;
            report.abandoned.push((open.seq, reason));
        }
    }
    Ok(())
}

/// An interrupted restore is settled before anything else commits (a
/// commit landing between two of its table restores would be half undone).
/// One whose restorer may still be running is an error, not a race.
async fn finish_restore(
    ctx: &Context<'_>,
    open: &JournalEntry,
    stale_after: Duration,
    report: &mut CommitReport,
) -> Result<()> {
    match writer::settle_restore(ctx.lake, open, stale_after, WriteKind::Commit).await? {
        crate::lake::journal::restore::Settled::Finished(_) => report.recovered.push(open.seq),
        crate::lake::journal::restore::Settled::RolledBack { seq, reason } => {
            report.abandoned.push((seq, reason));
        }
    }
    Ok(())
}

/// Whether some table holds a commit of this sequence (after the version
/// its started row recorded).
async fn reached_any_table(ctx: &Context<'_>, started: &JournalEntry) -> Result<bool> {
    let specs = ctx.lake.table_specs();
    let tables = crate::lake::journal::sequence_tables(&specs);
    crate::lake::journal::any_table_holds(ctx.lake.root(), &tables, started, &started.token).await
}

/// Manifests written before tokens existed name sequences by number.
fn manifest_token(manifest: &manifest::Manifest) -> String {
    if manifest.token.is_empty() { format!("seq-{}", manifest.seq) } else { manifest.token.clone() }
}

/// Why an unfinished sequence without a manifest can be abandoned, if it can.
fn orphan_reason(open: &JournalEntry, stale_after: Duration) -> Option<String> {
    writer::orphan_reason(open, stale_after)
        .map(|why| format!("{why} and its manifest is missing; nothing can finish it"))
}

async fn abandon(ctx: &Context<'_>, open: &JournalEntry, reason: &str) -> Result<()> {
    let entry = JournalEntry {
        seq: open.seq,
        phase: Some(Phase::Abandoned),
        token: open.token.clone(),
        owner: crate::host::owner(),
        reason: Some(reason.to_owned()),
        ..JournalEntry::default()
    };
    tracing::warn!(seq = open.seq, %reason, "recording an unfinished commit sequence as abandoned");
    let mut journal = ctx.journal.lock().await;
    journal
        .append(ctx.lake.root(), |j| {
            let ended =
                j.has(&open.token, Phase::Completed) || j.has(&open.token, Phase::Abandoned);
            Ok((!ended).then(|| entry.clone()))
        })
        .await?;
    Ok(())
}
