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
    /// compaction itself and by `recover` for one killed before it could
    /// (see [`unfinished`](super::unfinished)); an undo already committed
    /// by either is found by its [`UNDOES_KEY`] and not made twice.
    /// `handle` is any handle of the table (its log is read).
    pub(crate) async fn undo_if_raced(
        &self,
        lake: &Lake,
        spec: &TableSpec,
        handle: &deltalake::DeltaTable,
    ) -> Result<Undo> {
        let (name, version) = (&spec.name, self.version);
        if version <= self.read + 1 {
            return Ok(Undo::NotRaced);
        }
        let ours = table::commit_actions(handle, name, version).await?;
        let removed: Vec<&Remove> = ours
            .iter()
            .filter_map(|a| if let Action::Remove(r) = a { Some(r) } else { None })
            .collect();
        let added: Vec<&Add> = ours
            .iter()
            .filter_map(|a| if let Action::Add(a) = a { Some(a) } else { None })
            .collect();
        let mut raced = HashSet::new();
        for between in self.read + 1..version {
            for action in table::commit_actions(handle, name, between).await? {
                if let Action::Remove(r) = action
                    && removed.iter().any(|ours| ours.path == r.path)
                {
                    raced.insert(r.path);
                }
            }
        }
        if raced.is_empty() {
            return Ok(Undo::NotRaced);
        }
        let mut actions: Vec<Action> = added.iter().map(|a| append::removal(a, false)).collect();
        actions.extend(removed.iter().filter(|r| !raced.contains(&r.path)).map(|r| {
            Action::Add(Add {
                path: r.path.clone(),
                partition_values: r.partition_values.clone().unwrap_or_default(),
                size: r.size.unwrap_or_default(),
                modification_time: chrono::Utc::now().timestamp_millis(),
                data_change: false,
                ..Add::default()
            })
        }));
        let operation = DeltaOperation::Optimize { predicate: None, target_size: 0 };
        let undo = append::CommitSpec {
            metadata: vec![(UNDOES_KEY.to_owned(), serde_json::json!(self.token))],
            ..Default::default()
        };
        for _ in 0..UNDO_ATTEMPTS {
            let mut handle = table::open(lake.root(), spec).await?;
            let head = handle.version().unwrap_or_default();
            if self.undone_by(&handle, name, head).await? {
                return Ok(Undo::AlreadyUndone);
            }
            let live: HashSet<String> = table::active_files(&handle, spec)?.into_iter().collect();
            if !added.iter().all(|a| live.contains(&a.path)) {
                return Ok(Undo::Rewritten);
            }
            tracing::warn!(table = %name, files = raced.len(), "a compaction met another rewrite of the same files; undoing it");
            let committed = append::try_commit_actions_next(
                &mut handle,
                name,
                actions.clone(),
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
}

/// Attempts at undoing a compaction while other writers take versions.
const UNDO_ATTEMPTS: usize = 100;
