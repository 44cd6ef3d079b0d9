//! Restoring the whole lake to one of its points, as one journaled
//! operation.
//!
//! Delta restores one table at a time (a commit that re-adds the files of
//! the old version and removes the newer ones). A lake is many tables, so a
//! restore is a commit sequence like any other, with its plan in the
//! journal itself:
//!
//! 1. `started(seq, token, versions before, restore_to)` — `restore_to` maps
//!    every table that changes to the version it returns to. From this row on
//!    readers stay at the versions before (the row pins them until it ends,
//!    whoever wrote it: see [`snapshot`](crate::lake::journal::snapshot));
//! 2. one Delta restore per table, carrying the token in its commit
//!    metadata and the sequence as its `sluice-commit` application
//!    transaction; a table that already holds a commit with the token is
//!    skipped, so finishing twice restores nothing twice;
//! 3. key filters for the files each restore re-added;
//! 4. `completed(seq, token, versions after, table_commits)`.
//!
//! Before step 1, [`check_available`] reads every target version back: its
//! log entry and every data file it would re-add. A restore that could not
//! finish (vacuum removed the files, log clean-up the entry) is refused
//! before anything is journaled.
//!
//! A restore killed anywhere is settled by [`settle`] from its `started`
//! row alone — every writer does it first (see [`writer`](crate::lake::writer)).
//! Settling finishes it; one that cannot be finished (its files vanished
//! after the check: a vacuum on another host) is rolled back: every table
//! it restored is restored again to the version its `started` row recorded,
//! under the token [`rollback_token`], and the sequence is recorded
//! `abandoned` with the reason. Once a table holds a roll-back commit the
//! restore is never finished, only rolled back, so a settle killed and
//! resumed never mixes the two. Each table commit is exactly the next
//! version of the table; one that loses its version reads the table again
//! and decides by the tokens it finds. Nothing is deleted: the newer files
//! stay in storage (until vacuum), so a restore can itself be undone by
//! restoring to the lake version before it.

use std::collections::BTreeMap;

use deltalake::DeltaTable;
use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::CommitProperties;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::lake::append::{self, TOKEN_KEY};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::journal::snapshot::{self, LakePoint};
use crate::lake::journal::{self, JournalEntry, Phase, SEQ_KEY, TXN_APP_ID};
use crate::lake::layout::{TableKind, TableSpec};
use crate::progress::Progress;

/// One table's part of a restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableRestore {
    /// The table.
    pub table: String,
    /// Its version now.
    pub from: u64,
    /// The version it returns to.
    pub to: u64,
}

/// What a restore changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestorePlan {
    /// The lake version (commit sequence) restored to, when the point names
    /// or resolves to one.
    pub sequence: Option<i64>,
    /// How the point was given, for messages.
    pub point: String,
    /// Every table that changes (tables already at their target are left
    /// alone).
    pub tables: Vec<TableRestore>,
}

/// What a finished restore committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreOutcome {
    /// The restore's own lake version.
    pub seq: i64,
    /// The version of each table's restore commit.
    pub table_commits: BTreeMap<String, u64>,
}

/// The tables a restore may change: every table but the journal.
fn restorable(specs: &[TableSpec]) -> impl Iterator<Item = &TableSpec> {
    specs.iter().filter(|s| s.kind != TableKind::Commits)
}

/// Plan a restore of every table to `point`. Tables created after the point
/// return to their creation (version 0, empty).
pub async fn plan(root: &LakeRoot, specs: &[TableSpec], point: &LakePoint) -> Result<RestorePlan> {
    let target = snapshot::resolve(root, specs, point).await?;
    let now = journal::versions(root, specs).await?;
    let mut tables = Vec::new();
    for spec in restorable(specs) {
        let Some(from) = now.get(&spec.name).copied() else { continue };
        let to = target.version_of(&spec.name).unwrap_or(0);
        if to < from {
            tables.push(TableRestore { table: spec.name.clone(), from, to });
        }
    }
    Ok(RestorePlan { sequence: target.sequence, point: describe(point), tables })
}

fn describe(point: &LakePoint) -> String {
    match point {
        LakePoint::Latest => "the latest lake version".into(),
        LakePoint::Sequence(seq) => format!("lake version {seq}"),
        LakePoint::Time(at) => format!("the lake at {}", crate::times::text(*at)),
        LakePoint::Tables(t) => {
            let parts: Vec<String> = t.iter().map(|(n, v)| format!("{n}@{v}")).collect();
            format!("tables at {}", parts.join(","))
        }
    }
}

/// Test hooks of a restore (never set in normal use).
#[derive(Debug, Clone, Default)]
pub struct RestoreHooks {
    /// `restore:<table>` fails before that table, after every table before it.
    pub failpoint: Option<String>,
    /// A pause before each table, so a crash test can kill the restore
    /// between table commits at will.
    pub pause: Option<std::time::Duration>,
}

/// Record the restore in the journal, then carry it out (see
/// [`RestoreHooks`] for `hooks`).
pub async fn execute(
    root: &LakeRoot,
    specs: &[TableSpec],
    plan: &RestorePlan,
    hooks: &RestoreHooks,
    progress: &Progress,
) -> Result<RestoreOutcome> {
    let before = journal::versions(root, specs).await?;
    let tables_seq = journal::highest_table_seq(root, specs).await?.map_or(0, |(seq, _)| seq);
    let started = JournalEntry {
        phase: Some(Phase::Started),
        table_versions: before,
        token: crate::host::unique_id(),
        owner: crate::host::owner(),
        reason: Some(format!("restore to {}", plan.point)),
        restore_to: plan.tables.iter().map(|t| (t.table.clone(), t.to)).collect(),
        ..JournalEntry::default()
    };
    let claimed = journal::append(root, |j| {
        if let Some(open) = j.unfinished().first() {
            return Err(Error::InvalidInput(format!(
                "commit sequence {} (started by {}) has not finished; run `sluice recover` first",
                open.seq, open.owner
            )));
        }
        Ok(Some(JournalEntry { seq: j.max_seq().max(tables_seq) + 1, ..started.clone() }))
    })
    .await?
    .ok_or_else(|| Error::Internal("the restore claim wrote nothing".into()))?;
    match finish(root, specs, &claimed, hooks, progress).await {
        Ok(outcome) => Ok(outcome),
        // A simulated crash leaves the restore to `recover`, as a real one.
        Err(e @ Error::Injected { .. }) => Err(e),
        Err(e) => {
            let reason = e.to_string();
            roll_back(root, specs, &claimed, &reason).await?;
            Err(Error::RestoreRolledBack { seq: claimed.seq, reason })
        }
    }
}

/// Whether a plan can be carried out: every table's target version is
/// still in its log and every data file it would re-add is in storage. A
/// restore is refused here, before it is journaled, rather than left
/// half done.
pub async fn check_available(
    root: &LakeRoot,
    specs: &[TableSpec],
    plan: &RestorePlan,
) -> Result<()> {
    for step in &plan.tables {
        let Some(spec) = specs.iter().find(|s| s.name == step.table) else { continue };
        let unavailable = |reason: String| Error::RestoreUnavailable {
            point: plan.point.clone(),
            table: step.table.clone(),
            version: step.to,
            reason,
        };
        let target = table::open_at(root, spec, step.to).await.map_err(|e| {
            unavailable(format!("its log no longer holds that version (log entries expire; {e})"))
        })?;
        let now = table::open(root, spec).await?;
        let live: std::collections::HashSet<String> =
            table::active_files(&now, spec)?.into_iter().collect();
        let readd: Vec<String> = table::active_files(&target, spec)?
            .into_iter()
            .filter(|path| !live.contains(path))
            .collect();
        if let Some((first, count)) = table::missing_files(&target, &spec.name, &readd).await? {
            return Err(unavailable(format!(
                "{count} of the {} data files it would bring back are gone from storage (first: {first}); \
                 vacuum removes files a table stopped using once they are older than its retention",
                readd.len()
            )));
        }
    }
    Ok(())
}

/// How a restore left unfinished was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// It was carried out to the end.
    Finished(RestoreOutcome),
    /// It could not be; every table it had restored went back to its
    /// version before the restore, and the sequence is `abandoned`.
    RolledBack {
        /// The restore's lake version.
        seq: i64,
        /// Why it could not be finished.
        reason: String,
    },
}

/// Finish the restore a `started` row describes or, when it cannot be
/// finished, roll it back (see the module's documentation). Only an
/// injected failure (a simulated crash) leaves it unfinished.
pub async fn settle(
    root: &LakeRoot,
    specs: &[TableSpec],
    started: &JournalEntry,
    progress: &Progress,
) -> Result<Settled> {
    let reason = if rollback_began(root, specs, started).await? {
        "an earlier attempt had begun to roll it back".to_owned()
    } else {
        match finish(root, specs, started, &RestoreHooks::default(), progress).await {
            Ok(outcome) => return Ok(Settled::Finished(outcome)),
            Err(e @ Error::Injected { .. }) => return Err(e),
            Err(e) => e.to_string(),
        }
    };
    roll_back(root, specs, started, &reason).await?;
    Ok(Settled::RolledBack { seq: started.seq, reason })
}

/// The token a restore's roll-back commits carry.
pub fn rollback_token(token: &str) -> String {
    format!("{token}/rollback")
}

/// Whether some table already holds a roll-back commit of this restore.
async fn rollback_began(
    root: &LakeRoot,
    specs: &[TableSpec],
    started: &JournalEntry,
) -> Result<bool> {
    let tables: Vec<&TableSpec> =
        restorable(specs).filter(|s| started.restore_to.contains_key(&s.name)).collect();
    journal::any_table_holds(root, &tables, started, &rollback_token(&started.token)).await
}

/// Return every table this restore committed to the version it had before
/// the restore (skipping tables already returned), then record the
/// sequence `abandoned` with `reason`.
async fn roll_back(
    root: &LakeRoot,
    specs: &[TableSpec],
    started: &JournalEntry,
    reason: &str,
) -> Result<()> {
    tracing::warn!(seq = started.seq, %reason, "rolling back a restore that cannot finish");
    let undo = rollback_token(&started.token);
    for spec in restorable(specs).filter(|s| started.restore_to.contains_key(&s.name)) {
        let since = started.table_versions.get(&spec.name).copied().unwrap_or(0);
        for _ in 0..journal::MAX_ATTEMPTS {
            let handle = table::open(root, spec).await?;
            let head = handle.version().unwrap_or_default();
            let Some(restored) =
                append::find_token(&handle, &spec.name, &started.token, since + 1, head).await?
            else {
                break;
            };
            if append::find_token(&handle, &spec.name, &undo, restored + 1, head).await?.is_some() {
                break;
            }
            if commit_restore(handle, spec, since, started.seq, &undo).await?.is_some() {
                break;
            }
        }
    }
    let abandoned = JournalEntry {
        seq: started.seq,
        phase: Some(Phase::Abandoned),
        token: started.token.clone(),
        owner: crate::host::owner(),
        reason: Some(format!(
            "{}: could not be finished ({reason}); every table it had restored was returned to its version before it",
            started.reason.as_deref().unwrap_or("restore")
        )),
        ..JournalEntry::default()
    };
    journal::append(root, |j| {
        let ended =
            j.has(&started.token, Phase::Completed) || j.has(&started.token, Phase::Abandoned);
        Ok((!ended).then(|| abandoned.clone()))
    })
    .await?;
    Ok(())
}

/// Carry out (or finish) the restore a `started` row describes: restore
/// every table that holds no commit with its token yet, write key filters,
/// record the completion.
pub async fn finish(
    root: &LakeRoot,
    specs: &[TableSpec],
    started: &JournalEntry,
    hooks: &RestoreHooks,
    progress: &Progress,
) -> Result<RestoreOutcome> {
    // A table restored to before a column was added loses the column: the
    // next open must check the schemas again.
    crate::lake::delta::reconciled::forget(root).await?;
    let mut table_commits = BTreeMap::new();
    let tables: Vec<(&TableSpec, u64)> = restorable(specs)
        .filter_map(|spec| started.restore_to.get(&spec.name).map(|&to| (spec, to)))
        .collect();
    for (done, (spec, to)) in tables.iter().copied().enumerate() {
        progress.report(done, tables.len(), &spec.name);
        let since = started.table_versions.get(&spec.name).copied().unwrap_or(0);
        if let Some(pause) = hooks.pause {
            tokio::time::sleep(pause).await;
        }
        if hooks.failpoint.as_deref().is_some_and(|p| p == format!("restore:{}", spec.name)) {
            return Err(Error::Injected { point: format!("restoring table `{}`", spec.name) });
        }
        let version = restore_table(root, spec, to, since, started).await?;
        table_commits.insert(spec.name.clone(), version);
    }
    progress.finish(tables.len());
    let after = journal::versions(root, specs).await?;
    let done = JournalEntry {
        seq: started.seq,
        phase: Some(Phase::Completed),
        table_versions: after,
        table_commits: table_commits.clone(),
        token: started.token.clone(),
        owner: crate::host::owner(),
        reason: started.reason.clone(),
        restore_to: started.restore_to.clone(),
        ..JournalEntry::default()
    };
    journal::append(root, |j| Ok((!j.has(&started.token, Phase::Completed)).then(|| done.clone())))
        .await?;
    Ok(RestoreOutcome { seq: started.seq, table_commits })
}

/// Restore one table to `to` unless a commit after `since` already carries
/// the restore's token; returns the version of the restore commit. The
/// commit is exactly the version after the head it was planned on; one
/// that loses it reads the table again.
async fn restore_table(
    root: &LakeRoot,
    spec: &TableSpec,
    to: u64,
    since: u64,
    started: &JournalEntry,
) -> Result<u64> {
    for _ in 0..journal::MAX_ATTEMPTS {
        let handle = table::open(root, spec).await?;
        let head = handle.version().unwrap_or_default();
        if let Some(version) =
            append::find_token(&handle, &spec.name, &started.token, since + 1, head).await?
        {
            return Ok(version);
        }
        let Some(restored) = commit_restore(handle, spec, to, started.seq, &started.token).await?
        else {
            continue;
        };
        let version = restored.version().unwrap_or_default();
        append::write_key_filters(root, &restored, spec, version).await?;
        return Ok(version);
    }
    Err(Error::Contention { table: spec.name.clone(), attempts: journal::MAX_ATTEMPTS })
}

/// One Delta restore of `handle`'s table to `to`, tagged with `token` and
/// the sequence, committed as exactly the version after the handle's
/// (`None`: another writer took it).
async fn commit_restore(
    handle: DeltaTable,
    spec: &TableSpec,
    to: u64,
    seq: i64,
    token: &str,
) -> Result<Option<DeltaTable>> {
    let properties = CommitProperties::default()
        .with_max_retries(0)
        .with_application_transaction(Transaction::new(TXN_APP_ID, seq))
        .with_metadata([
            (TOKEN_KEY.to_owned(), serde_json::json!(token)),
            (SEQ_KEY.to_owned(), serde_json::json!(seq)),
        ]);
    let restored =
        handle.restore().with_version_to_restore(to).with_commit_properties(properties).await;
    match restored {
        Ok((restored, metrics)) => {
            tracing::info!(
                table = %spec.name,
                to,
                version = restored.version().unwrap_or_default(),
                files_restored = metrics.num_restored_file,
                files_removed = metrics.num_removed_file,
                "restored a table"
            );
            Ok(Some(restored))
        }
        Err(e) if append::lost_the_version(&e) => Ok(None),
        Err(e) => Err(Error::delta(&spec.name, e)),
    }
}
