//! Table handles a [`Lake`](super::Lake) keeps between calls.
//!
//! Opening a Delta table replays its log from the last checkpoint (up to
//! 100 JSON commits by default), and a `put` or a read by id used to open
//! each table it touches, several times. A kept handle is instead brought up
//! to date: one listing of the log for versions after its own, and only
//! those are read. A handle is only a starting point — every write still
//! commits as exactly the version after the one its checks read, so a stale
//! handle costs a retry, never a duplicate.
//!
//! delta-rs handles get slower with every commit applied to them (their log
//! segment grows from the version they were opened at; see
//! `../shared/notes/deltalake-1x.md`), so a handle is reopened from scratch
//! once it has moved [`REOPEN_AFTER`] versions past where it was opened.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use deltalake::DeltaTable;

use super::layout::TableSpec;
use super::table;
use crate::error::{Error, Result};

/// Versions a handle may move past its opening before it is reopened.
pub const REOPEN_AFTER: u64 = 100;

/// A handle lent out by [`Handles`], to be given back with
/// [`Handles::keep`].
#[derive(Debug, Clone)]
pub struct Leased {
    /// The table.
    pub table: DeltaTable,
    opened_at: u64,
}

impl Leased {
    /// `kept` brought up to date, or — when there is none, or it has moved
    /// [`REOPEN_AFTER`] versions past its opening — the table `open` opens.
    pub async fn latest(
        kept: Option<Leased>,
        name: &str,
        open: impl std::future::Future<Output = Result<DeltaTable>>,
    ) -> Result<Leased> {
        if let Some(mut leased) = kept {
            leased.table.update_incremental(None).await.map_err(|e| Error::delta(name, e))?;
            if version(&leased.table) <= leased.opened_at + REOPEN_AFTER {
                return Ok(leased);
            }
        }
        let table = open.await?;
        Ok(Leased { opened_at: version(&table), table })
    }

    /// The same lease, moved on to `table` (the same table after a commit).
    pub fn moved(&self, table: DeltaTable) -> Leased {
        Leased { table, opened_at: self.opened_at }
    }
}

/// The handles of one lake, by table name.
#[derive(Debug, Default)]
pub struct Handles {
    kept: Mutex<HashMap<String, Leased>>,
}

impl Handles {
    fn get(&self, name: &str) -> Option<Leased> {
        self.kept.lock().ok().and_then(|kept| kept.get(name).cloned())
    }

    /// The table at its latest version.
    pub async fn latest(&self, root: &Path, spec: &TableSpec) -> Result<Leased> {
        Leased::latest(self.get(&spec.name), &spec.name, table::open(root, spec)).await
    }

    /// The table's latest version: through the kept handle when there is
    /// one (only the log entries since it are listed), else probed without
    /// loading the table (a process that reads one table of the lake does
    /// not load the others to learn their heads).
    pub async fn head(&self, root: &Path, spec: &TableSpec) -> Result<u64> {
        match self.get(&spec.name) {
            Some(kept) => {
                let leased =
                    Leased::latest(Some(kept), &spec.name, table::open(root, spec)).await?;
                let head = version(&leased.table);
                self.keep(spec, leased);
                Ok(head)
            }
            None => table::latest_version(root, spec).await,
        }
    }

    /// The table at `at` (not cached when older than the kept handle).
    pub async fn at(&self, root: &Path, spec: &TableSpec, at: u64) -> Result<Leased> {
        if let Some(mut leased) = self.get(&spec.name)
            && version(&leased.table) <= at
            && at <= leased.opened_at + REOPEN_AFTER
        {
            if version(&leased.table) < at {
                leased.table.load_version(at).await.map_err(|e| Error::delta(&spec.name, e))?;
            }
            return Ok(leased);
        }
        let table = table::open_at(root, spec, at).await?;
        Ok(Leased { opened_at: at, table })
    }

    /// Keep `leased` if it is newer than the handle kept for its table.
    pub fn keep(&self, spec: &TableSpec, leased: Leased) {
        let Ok(mut kept) = self.kept.lock() else { return };
        let newer =
            kept.get(&spec.name).is_none_or(|k| version(&k.table) <= version(&leased.table));
        if newer {
            kept.insert(spec.name.clone(), leased);
        }
    }
}

fn version(table: &DeltaTable) -> u64 {
    table.version().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::layout;

    #[tokio::test]
    async fn a_kept_handle_follows_other_writers_and_serves_old_versions_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let spec = layout::index_table();
        let handles = Handles::default();
        let first = handles.latest(lake.root(), &spec).await.unwrap();
        let v0 = version(&first.table);
        handles.keep(&spec, first);
        // Another writer (a separate lake object) commits twice.
        let other = crate::Lake::open(dir.path()).await.unwrap();
        for i in 0..2 {
            let a = crate::Draft::metric(serde_json::json!({"other": i}))
                .unwrap()
                .finalize(other.registry())
                .unwrap();
            other.put(&[a]).await.unwrap();
        }
        let now = handles.latest(lake.root(), &spec).await.unwrap();
        assert_eq!(version(&now.table), v0 + 2, "brought up to date");
        handles.keep(&spec, now);
        let old = handles.at(lake.root(), &spec, v0).await.unwrap();
        assert_eq!(version(&old.table), v0, "an older version is opened fresh");
        handles.keep(&spec, old);
        let kept = handles.get(&spec.name).unwrap();
        assert_eq!(version(&kept.table), v0 + 2, "an older handle never replaces a newer one");
    }
}
