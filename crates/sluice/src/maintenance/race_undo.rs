//! Undoing a compaction that met another rewrite of its files.
//!
//! delta-rs commits an OPTIMIZE with its own retries, and its conflict
//! checker counts only data-changing removes as conflicts: an OPTIMIZE
//! committed on top of another rewrite of the same files keeps both copies
//! of their rows. A compaction records the version it read; the versions
//! between that one and its own are read back, and one that met such a
//! rewrite is undone exactly, as the table's next version. The compaction
//! itself does it; `recover` and the next compaction of the table do it for
//! one killed before it could (see [`unfinished`](super::unfinished)).

use std::collections::HashSet;

use deltalake::kernel::{Action, Add, Remove};
use deltalake::protocol::DeltaOperation;

use crate::error::{Error, Result};
use crate::lake::append;
use crate::lake::layout::TableSpec;
use crate::lake::{Lake, delta::table};

/// The commit metadata key of the version a compaction read (and committed
/// on top of, or past, with delta-rs's retries).
pub(crate) const READ_KEY: &str = "sluice_compaction_read";

/// The commit metadata key naming the compaction (by token) an undo undoes.
pub(crate) const UNDOES_KEY: &str = "sluice_undoes";

/// A committed compaction: what it read, where it landed, its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compaction {
    pub(crate) read: u64,
    pub(crate) version: u64,
    pub(crate) token: String,
}

/// What [`Compaction::undo_if_raced`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undo {
    /// It met no other rewrite of its files: it stands.
    NotRaced,
    /// It met one and is undone now.
    Undone,
    /// It met one and an earlier undo (its own, or `recover`'s) undid it.
    AlreadyUndone,
    /// It met one, but its output was rewritten again: it cannot be undone.
    Rewritten,
}

impl Undo {
    pub(crate) const REWRITTEN: &str = "a compaction that met another rewrite could not be undone (its output was rewritten again); `sluice ingest dedup` or a restore removes the duplicate rows";
}

impl Compaction {
    /// The compaction a commit's actions record, if it is one of sluice's.
    pub(crate) fn of_commit(actions: &[Action], version: u64) -> Option<Compaction> {
        let read = actions.iter().find_map(|a| match a {
            Action::CommitInfo(info) => info.info.get(READ_KEY).and_then(|v| v.as_u64()),
            _ => None,
        })?;
        let token = append::commit_text(actions, append::TOKEN_KEY)?;
        Some(Compaction { read, version, token })
    }
}

impl Compaction {
    /// If a version between the one it read and its own removed a file it
    /// also removed, undo it, as exactly the table's next version: its
    /// output goes, and the files only it removed come back (still in
    /// storage: vacuum keeps them for the retention). Called by the
    /// compaction itself and by `recover` and the next compaction of the
    /// table for one killed before it could (see
    /// [`unfinished`](super::unfinished)); an undo already committed is
    /// found by its [`UNDOES_KEY`] and not made twice.
    ///
    /// With no lock, another compaction may have read the table after this
    /// one committed and before it was undone, and rewritten its output:
    /// that later compaction is undone first (it only moved rows, so its
    /// undo loses nothing), then this one. `handle` is any handle of the
    /// table (its log is read).
    pub(crate) async fn undo_if_raced(
        &self,
        lake: &Lake,
        spec: &TableSpec,
        handle: &deltalake::DeltaTable,
    ) -> Result<Undo> {
        if self.version <= self.read + 1 {
            return Ok(Undo::NotRaced);
        }
        let rewrite = Rewrite::of(handle, &spec.name, self).await?;
        if rewrite.raced.is_empty() {
            return Ok(Undo::NotRaced);
        }
        self.undo(lake, spec, &rewrite, 0).await
    }

    /// Undo this compaction (leaving the files in `rewrite.raced` removed),
    /// after undoing the later compactions that rewrote its output.
    async fn undo(
        &self,
        lake: &Lake,
        spec: &TableSpec,
        rewrite: &Rewrite,
        depth: usize,
    ) -> Result<Undo> {
        let name = &spec.name;
        let operation = DeltaOperation::Optimize { predicate: None, target_size: 0 };
        let undo = append::CommitSpec {
            metadata: vec![(UNDOES_KEY.to_owned(), serde_json::json!(self.token))],
            ..Default::default()
        };
        let back = rewrite.brought_back();
        for _ in 0..UNDO_ATTEMPTS {
            let mut handle = table::open(lake.root(), spec).await?;
            let head = handle.version().unwrap_or_default();
            if self.undone_by(&handle, name, head).await? {
                return Ok(Undo::AlreadyUndone);
            }
            let live: HashSet<String> = table::active_files(&handle, spec)?.into_iter().collect();
            if !rewrite.added.iter().all(|a| live.contains(&a.path)) {
                let later = self.rewritten_by(&handle, name, head, rewrite).await?;
                if later.is_empty() || depth >= MAX_CHAIN {
                    return Ok(Undo::Rewritten);
                }
                for compaction in later.iter().rev() {
                    tracing::warn!(table = %name, version = compaction.version, "a later compaction rewrote the output of one to undo; undoing it first");
                    let theirs = Rewrite::of(&handle, name, compaction).await?;
                    let undone = Box::pin(compaction.undo(lake, spec, &theirs, depth + 1)).await?;
                    if undone == Undo::Rewritten {
                        return Ok(Undo::Rewritten);
                    }
                }
                continue;
            }
            let paths: Vec<String> = back.iter().map(|r| r.path.clone()).collect();
            if let Some((first, count)) = table::missing_files(&handle, name, &paths).await? {
                tracing::warn!(table = %name, %first, count, "a compaction to undo replaced files storage no longer has");
                return Ok(Undo::Rewritten);
            }
            tracing::warn!(table = %name, version = self.version, files = rewrite.raced.len(), "undoing a compaction that met another rewrite of the same files");
            let committed = append::try_commit_actions_next(
                &mut handle,
                name,
                rewrite.undo_actions(),
                operation.clone(),
                &undo,
                &[],
            )
            .await?;
            if committed.is_some() {
                return Ok(Undo::Undone);
            }
        }
        Err(Error::Contention { table: name.clone(), attempts: UNDO_ATTEMPTS })
    }

    /// Whether a version after the compaction's, up to `head`, undoes it.
    async fn undone_by(
        &self,
        handle: &deltalake::DeltaTable,
        name: &str,
        head: u64,
    ) -> Result<bool> {
        for version in self.version + 1..=head {
            let actions = table::commit_actions(handle, name, version).await?;
            if append::commit_text(&actions, UNDOES_KEY).as_deref() == Some(self.token.as_str()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The compactions after this one, up to `head`, that removed a file of
    /// its output, in version order; empty if anything else removed one (a
    /// restore, a delete: then it cannot be undone).
    async fn rewritten_by(
        &self,
        handle: &deltalake::DeltaTable,
        name: &str,
        head: u64,
        rewrite: &Rewrite,
    ) -> Result<Vec<Compaction>> {
        let output: HashSet<&str> = rewrite.added.iter().map(|a| a.path.as_str()).collect();
        let mut later = Vec::new();
        for version in self.version + 1..=head {
            let actions = table::commit_actions(handle, name, version).await?;
            let removes_ours = actions
                .iter()
                .any(|a| matches!(a, Action::Remove(r) if output.contains(r.path.as_str())));
            if !removes_ours {
                continue;
            }
            match Compaction::of_commit(&actions, version) {
                Some(compaction) => later.push(compaction),
                None => return Ok(Vec::new()),
            }
        }
        Ok(later)
    }
}

/// What one compaction's commit changed, and which of the files it removed
/// another rewrite between its read and its commit removed as well.
struct Rewrite {
    added: Vec<Add>,
    removed: Vec<Remove>,
    raced: HashSet<String>,
}

impl Rewrite {
    async fn of(
        handle: &deltalake::DeltaTable,
        name: &str,
        compaction: &Compaction,
    ) -> Result<Rewrite> {
        let mut rewrite = Rewrite { added: Vec::new(), removed: Vec::new(), raced: HashSet::new() };
        for action in table::commit_actions(handle, name, compaction.version).await? {
            match action {
                Action::Add(a) => rewrite.added.push(a),
                Action::Remove(r) => rewrite.removed.push(r),
                _ => {}
            }
        }
        for between in compaction.read + 1..compaction.version {
            for action in table::commit_actions(handle, name, between).await? {
                if let Action::Remove(r) = action
                    && rewrite.removed.iter().any(|ours| ours.path == r.path)
                {
                    rewrite.raced.insert(r.path);
                }
            }
        }
        Ok(rewrite)
    }

    /// The files the undo brings back: the ones only this compaction removed.
    fn brought_back(&self) -> Vec<&Remove> {
        self.removed.iter().filter(|r| !self.raced.contains(&r.path)).collect()
    }

    /// Its output goes, what it alone removed comes back; no row changes.
    fn undo_actions(&self) -> Vec<Action> {
        let mut actions: Vec<Action> =
            self.added.iter().map(|a| append::removal(a, false)).collect();
        actions.extend(self.brought_back().into_iter().map(|r| {
            Action::Add(Add {
                path: r.path.clone(),
                partition_values: r.partition_values.clone().unwrap_or_default(),
                size: r.size.unwrap_or_default(),
                modification_time: chrono::Utc::now().timestamp_millis(),
                data_change: false,
                ..Add::default()
            })
        }));
        actions
    }
}

/// How many compactions, each rewriting the last one's output, an undo
/// goes back through before it calls the first one impossible to undo.
const MAX_CHAIN: usize = 16;

/// Attempts at undoing a compaction while other writers take versions.
const UNDO_ATTEMPTS: usize = 100;
