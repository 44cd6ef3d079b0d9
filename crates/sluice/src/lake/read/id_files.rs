//! Which data files of a table may hold given ids, kept per table version.
//!
//! A look-up by id plans with the table's active files, the key-filter
//! sidecars of the column looked up, and each file's size and partition
//! values. None of that depends on the ids, only on the table version (and
//! on sidecars, which appear just after their version's commit). A process
//! that looks ids up one call at a time — a worker fetching each unit's
//! inputs, a lineage walk, `sluice get` in a loop — used to walk the file
//! list, list and match the sidecars and work out which files no filter
//! covers on every call: a cost that grows with the table, paid per id. The
//! [`Lake`] now keeps one [`IdFiles`] per table and column, for the version
//! it was read at, and reads it again only when the table moved.
//!
//! A file may be uncovered when its version's sidecar has not been written
//! yet. While a kept [`IdFiles`] has uncovered files, it is read again when
//! the sidecar folder changed since (its modification time moved, or was
//! too recent, when read, to tell a later change from an earlier one).
//! Correctness never rests on this: an uncovered file is read for every id.
//!
//! Like the kept table handles (see [`crate::lake::delta::handles`]), what is kept
//! assumes the lake's tables are not deleted and made anew under a live
//! [`Lake`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use deltalake::DeltaTable;

use crate::artifact::ArtifactId;
use crate::error::Result;
use crate::lake::Lake;
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::keys::in_store::StoreKeys;
use crate::lake::keys::key_filter::{self, Candidates, Key, LookupPlan, Planner};
use crate::lake::layout::TableSpec;
use crate::lake::read::lookup::FileIndex;

/// How old the sidecar folder's modification time must be, when read, to
/// stand for every change up to then (file systems stamp with a coarse
/// clock: a change in the same tick as the one read leaves it unchanged).
const SETTLED: Duration = Duration::from_secs(2);

/// Which data files of one table version may hold given ids, by its key
/// filters (files no filter covers included): a look-up by id reads the
/// files of the commits that added those ids instead of every file (ids are
/// random, so file statistics cannot prune).
#[derive(Debug)]
pub(crate) struct IdFiles {
    version: Option<u64>,
    planner: Planner,
    /// The version's active files.
    active: Arc<Vec<String>>,
    /// Sizes and partition values of the version's files (`None`: the file
    /// list cannot say, and each look-up asks the add-action table).
    index: Option<Arc<FileIndex>>,
    /// The sidecar folder's modification time when its sidecars were read,
    /// if it was settled then.
    sidecars_seen: Option<SystemTime>,
}

impl IdFiles {
    /// Read the planning state of `handle`'s version: active files and the
    /// sidecars of `column` (the de-duplication key when `None`). From
    /// `previous` (kept for this table and column), the active files and
    /// index are taken whole when it is of the same version (only its
    /// sidecars changed), else the sources of files it indexed.
    async fn read(
        root: &LakeRoot,
        handle: &DeltaTable,
        spec: &TableSpec,
        column: Option<&str>,
        previous: Option<&IdFiles>,
    ) -> Result<Self> {
        let dir = root.local().map(|root| table::table_dir(root, spec));
        // Stamped before the listing: a sidecar written after it moves it.
        let sidecars_seen = dir.as_deref().and_then(settled_stamp);
        let version = handle.version();
        // The planner leaves out filters whose files are not all active.
        let filters = match (root, column) {
            (LakeRoot::Local(root), Some(column)) => {
                key_filter::read_column(&table::table_dir(root, spec), column)
            }
            (LakeRoot::Local(root), None) => key_filter::read_all(&table::table_dir(root, spec)),
            (LakeRoot::Store(store), column) => {
                let keys = StoreKeys::of(store, spec);
                let head = version.unwrap_or_default();
                keys.look(head).await;
                keys.held(head, None, column)
            }
        };
        let (active, index) = match previous.filter(|p| p.version == version) {
            Some(same) => (same.active.clone(), same.index.clone()),
            None => {
                let previous = previous.and_then(|p| p.index.as_deref());
                let index = FileIndex::of(handle, spec, previous)?.map(Arc::new);
                let active = match &index {
                    Some(index) => index.paths(),
                    None => table::active_files(handle, spec)?,
                };
                (Arc::new(active), index)
            }
        };
        Ok(IdFiles {
            version,
            planner: Planner::new(&active, &filters),
            active,
            index,
            sidecars_seen,
        })
    }

    /// Whether this still plans `version` of the table in `dir` as well as
    /// reading it again would.
    fn serves(&self, dir: Option<&Path>, version: Option<u64>) -> bool {
        self.version == version
            && (self.planner.uncovered().is_empty()
                || dir.is_none()
                || self.sidecars_seen.is_some_and(|seen| dir.and_then(folder_stamp) == Some(seen)))
    }

    /// The files no filter covers (read for every id) and those whose
    /// filter may hold some of `ids` (read for those only, see
    /// [`crate::lake::read::lookup::Lookup::read_planned`]); `None` when no file can
    /// hold any.
    pub(crate) fn plan(&self, ids: &[ArtifactId]) -> Option<LookupPlan<String>> {
        let plan = self.planner.plan(ids, |id| Key::from(id));
        let plan = LookupPlan {
            uncovered: plan.uncovered,
            candidates: plan
                .candidates
                .into_iter()
                .map(|c| Candidates {
                    version: c.version,
                    files: c.files,
                    keys: c.keys.iter().map(ArtifactId::to_hex).collect(),
                })
                .collect(),
        };
        (!plan.uncovered.is_empty() || !plan.candidates.is_empty()).then_some(plan)
    }

    /// Sizes and partition values of the version's files, when known.
    pub(crate) fn index(&self) -> Option<&FileIndex> {
        self.index.as_deref()
    }
}

/// A table's short name and the column looked up (`None`: its key).
type TableColumn = (String, Option<String>);

/// The [`IdFiles`] a lake keeps, by table and column.
#[derive(Debug, Default)]
pub(crate) struct KeptIdFiles(Mutex<HashMap<TableColumn, Arc<IdFiles>>>);

impl Lake {
    /// The [`IdFiles`] of `handle`'s version for look-ups by `column` (the
    /// table's de-duplication key when `None`): the one kept, if it serves
    /// that version, else read now and kept.
    pub(crate) async fn id_files(
        &self,
        handle: &DeltaTable,
        spec: &TableSpec,
        column: Option<&str>,
    ) -> Result<Arc<IdFiles>> {
        let key = (spec.name.clone(), column.map(str::to_owned));
        let kept = self.id_files.0.lock().ok().and_then(|kept| kept.get(&key).cloned());
        let dir = self.root().local().map(|root| table::table_dir(root, spec));
        if let Some(kept) = &kept
            && kept.serves(dir.as_deref(), handle.version())
        {
            return Ok(kept.clone());
        }
        let read = IdFiles::read(self.root(), handle, spec, column, kept.as_deref());
        let fresh = Arc::new(Box::pin(read).await?);
        if let Ok(mut kept) = self.id_files.0.lock() {
            // An older version's look-ups (time travel, a pinned point)
            // never displace a newer version's.
            let newer = kept.get(&key).is_none_or(|k| k.version <= fresh.version);
            if newer {
                kept.insert(key, fresh.clone());
            }
        }
        Ok(fresh)
    }
}

/// The modification time of the table's sidecar folder.
fn folder_stamp(table_dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(crate::lake::keys::sidecar::keys_dir(table_dir))
        .and_then(|m| m.modified())
        .ok()
}

/// [`folder_stamp`], if it is old enough to stand for every change so far.
fn settled_stamp(table_dir: &Path) -> Option<SystemTime> {
    let stamp = folder_stamp(table_dir)?;
    let age = SystemTime::now().duration_since(stamp).ok()?;
    (age >= SETTLED).then_some(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::layout;

    /// Set a folder's modification time (as if its last change were long past).
    fn age(dir: &Path, by: Duration) {
        let folder = std::fs::File::open(dir).expect("the folder");
        folder.set_modified(SystemTime::now() - by).expect("its time set");
    }

    async fn put_metrics(lake: &Lake, tag: &str, n: usize) -> Vec<crate::Artifact> {
        let artifacts: Vec<_> = (0..n)
            .map(|i| {
                crate::Draft::metric(serde_json::json!({"tag": tag, "i": i}))
                    .expect("a metric")
                    .finalize(lake.registry())
                    .expect("an id")
            })
            .collect();
        lake.put(&artifacts).await.expect("a put");
        artifacts
    }

    async fn index_handle(lake: &Lake) -> DeltaTable {
        table::open(lake.root(), &layout::index_table()).await.expect("the index")
    }

    #[tokio::test]
    async fn a_version_is_planned_once_and_again_when_the_table_moves() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (lake, _) = crate::Lake::init(dir.path()).await.expect("a lake");
        let first = put_metrics(&lake, "first", 3).await;
        let spec = layout::index_table();
        let handle = index_handle(&lake).await;
        let kept = lake.id_files(&handle, &spec, None).await.expect("planned");
        assert!(Arc::ptr_eq(&kept, &lake.id_files(&handle, &spec, None).await.expect("again")));
        assert!(kept.planner.uncovered().is_empty(), "every file has its sidecar");
        // Another lake object commits: the next look-up plans the new version.
        let other = crate::Lake::open(dir.path()).await.expect("the lake again");
        let second = put_metrics(&other, "second", 2).await;
        let moved = index_handle(&lake).await;
        let planned = lake.id_files(&moved, &spec, None).await.expect("planned");
        assert!(!Arc::ptr_eq(&kept, &planned));
        assert_eq!(planned.version, moved.version());
        for artifact in first.iter().chain(&second) {
            assert_eq!(lake.get(artifact.id).await.expect("found").id, artifact.id);
        }
        // The older version's plan is still made right, but not kept in
        // place of the newer one.
        let old = lake.id_files(&handle, &spec, None).await.expect("the old version");
        assert_eq!(old.version, handle.version());
        let kept = lake.id_files(&moved, &spec, None).await.expect("the new version");
        assert!(Arc::ptr_eq(&kept, &planned));
    }

    #[tokio::test]
    async fn an_uncovered_file_is_read_for_every_id_until_its_sidecar_appears() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (lake, _) = crate::Lake::init(dir.path()).await.expect("a lake");
        let spec = layout::index_table();
        let first = put_metrics(&lake, "first", 2).await;
        let second = put_metrics(&lake, "second", 2).await;
        let handle = index_handle(&lake).await;
        let version = handle.version().expect("a version");
        let keys = crate::lake::keys::sidecar::keys_dir(&table::table_dir(
            lake.root().local().unwrap(),
            &spec,
        ));
        let sidecar = keys.join(format!("{version:020}.side"));
        let bytes = std::fs::read(&sidecar).expect("the last version's sidecar");
        // The sidecar not written yet; the folder changed just now, too
        // recently to tell a later change from it: read again each time.
        std::fs::remove_file(&sidecar).expect("removed");
        let lake = crate::Lake::open(dir.path()).await.expect("a fresh lake object");
        let recent = lake.id_files(&handle, &spec, None).await.expect("planned");
        assert_eq!(recent.planner.uncovered().len(), 1, "the last commit's file");
        assert_eq!(recent.sidecars_seen, None);
        let next = lake.id_files(&handle, &spec, None).await.expect("planned");
        assert!(!Arc::ptr_eq(&recent, &next), "not kept while the folder is unsettled");
        assert!(Arc::ptr_eq(&recent.active, &next.active), "the version's files not read again");
        let (Some(a), Some(b)) = (&recent.index, &next.index) else { panic!("indexed") };
        assert!(Arc::ptr_eq(a, b));
        // The folder's last change long past: kept while nothing changes.
        age(&keys, Duration::from_secs(3600));
        let uncovered = lake.id_files(&handle, &spec, None).await.expect("planned");
        assert!(uncovered.sidecars_seen.is_some());
        for artifact in first.iter().chain(&second) {
            assert_eq!(lake.get(artifact.id).await.expect("found").id, artifact.id);
        }
        let again = lake.id_files(&handle, &spec, None).await.expect("again");
        assert!(Arc::ptr_eq(&uncovered, &again), "nothing changed: kept");
        // The sidecar lands: the next look-up reads the sidecars again.
        std::fs::write(&sidecar, bytes).expect("written back");
        let covered = lake.id_files(&handle, &spec, None).await.expect("planned again");
        assert!(covered.planner.uncovered().is_empty());
        for artifact in first.iter().chain(&second) {
            assert_eq!(lake.get(artifact.id).await.expect("found").id, artifact.id);
        }
        // A plan with every file covered stands: its filters describe files
        // that never change, whatever becomes of the sidecars.
        std::fs::remove_file(&sidecar).expect("removed again");
        let kept = lake.id_files(&handle, &spec, None).await.expect("planned");
        assert!(Arc::ptr_eq(&covered, &kept));
    }
}
