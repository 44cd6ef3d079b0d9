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
//!    whoever wrote it: see [`snapshot`](super::snapshot));
//! 2. one Delta restore per table, carrying the token in its commit
//!    metadata and the sequence as its `sluice-commit` application
//!    transaction; a table that already holds a commit with the token is
//!    skipped, so finishing twice restores nothing twice;
//! 3. key filters for the files each restore re-added;
//! 4. `completed(seq, token, versions after, table_commits)`.
//!
//! A restore killed anywhere is finished by [`finish`] from its `started`
//! row alone — `sluice recover`, and the next commit, do it first. Nothing
//! is deleted: the newer files stay in storage (until vacuum), so a restore
//! can itself be undone by restoring to the lake version before it.

use std::collections::BTreeMap;
use std::path::Path;

use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::CommitProperties;
use serde::Serialize;

use super::append::{self, TOKEN_KEY};
use super::journal::{self, JournalEntry, Phase, SEQ_KEY, TXN_APP_ID};
use super::layout::{TableKind, TableSpec};
use super::snapshot::{self, LakePoint};
use super::table;
use crate::error::{Error, Result};
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
pub async fn plan(root: &Path, specs: &[TableSpec], point: &LakePoint) -> Result<RestorePlan> {
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
        LakePoint::Time(at) => format!("the lake at {}", at.to_rfc3339()),
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
    root: &Path,
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
    finish(root, specs, &claimed, hooks, progress).await
}

/// Carry out (or finish) the restore a `started` row describes: restore
/// every table that holds no commit with its token yet, write key filters,
/// record the completion.
pub async fn finish(
    root: &Path,
    specs: &[TableSpec],
    started: &JournalEntry,
    hooks: &RestoreHooks,
    progress: &Progress,
) -> Result<RestoreOutcome> {
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
/// the restore's token; returns the version of the restore commit.
async fn restore_table(
    root: &Path,
    spec: &TableSpec,
    to: u64,
    since: u64,
    started: &JournalEntry,
) -> Result<u64> {
    let handle = table::open(root, spec).await?;
    let head = handle.version().unwrap_or_default();
    if let Some(version) =
        append::find_token(&handle, &spec.name, &started.token, since + 1, head).await?
    {
        return Ok(version);
    }
    let properties = CommitProperties::default()
        .with_application_transaction(Transaction::new(TXN_APP_ID, started.seq))
        .with_metadata([
            (TOKEN_KEY.to_owned(), serde_json::json!(started.token)),
            (SEQ_KEY.to_owned(), serde_json::json!(started.seq)),
        ]);
    let (restored, metrics) = handle
        .restore()
        .with_version_to_restore(to)
        .with_commit_properties(properties)
        .await
        .map_err(|e| Error::delta(&spec.name, e))?;
    let version = restored.version().unwrap_or_default();
    tracing::info!(
        table = %spec.name,
        to,
        version,
        files_restored = metrics.num_restored_file,
        files_removed = metrics.num_removed_file,
        "restored a table"
    );
    append::write_key_filters(root, &restored, spec, version).await?;
    Ok(version)
}
