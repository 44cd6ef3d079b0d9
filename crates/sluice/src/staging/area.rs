//! Where staged units live: a folder on a filesystem, or the lake's
//! `_staging/` prefix in its object store.
//!
//! The two keep one layout (`{step}_{op}/{id[0:2]}/{id}.sluice`, one file
//! or object per unit, `.commits/` for manifests, `.quarantine/` for units
//! that cannot be committed) and one rule: a unit is committed only once
//! it is there whole.
//!
//! A folder seals a unit's file by `rename` and fsyncs on shared filesystems
//! ([`writer`](super::writer)). A store has no rename and needs none: a
//! unit is one object ([`bundle`](super::bundle)), put if
//! absent (`StoreArea::put_if_absent`), so the one PUT that writes a unit seals it —
//! whole or absent, never half-staged — and a put whose outcome is unknown
//! (a timeout, a retried put answered 412) is settled by reading it back;
//! one holding another worker's bytes means the unit was sealed already.
//!
//! Listing a store's `_staging/` is trusted to show every sealed unit:
//! S3 (since December 2020) and Azure Blob Storage list with read-after-
//! write consistency, so a sentinel whose put returned is in every listing
//! started after it. A listing that races a worker may miss a sentinel put
//! meanwhile; that unit is committed by the next commit, never lost.

use std::path::{Path, PathBuf};

use super::paths;
use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;
pub(crate) use crate::lake::io::store_area::StoreArea;
use crate::lake::layout::STAGING_DIR;

/// Where a lake's workers stage and its committer reads.
#[derive(Clone)]
pub enum StagingArea {
    /// A folder (the lake's `_staging/`, or one given).
    Dir(PathBuf),
    /// The `_staging/` prefix of a lake in an object store.
    Store(StoreArea),
}

impl StagingArea {
    /// The staging area of the lake at `root`.
    pub fn of_lake(root: &LakeRoot) -> StagingArea {
        match root {
            LakeRoot::Local(path) => StagingArea::Dir(super::default_root(path)),
            LakeRoot::Store(store) => {
                StagingArea::Store(StoreArea::new(store.clone(), STAGING_DIR))
            }
        }
    }

    /// The folder, for an area on a filesystem.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            StagingArea::Dir(dir) => Some(dir),
            StagingArea::Store(_) => None,
        }
    }

    /// Where `relative` (`/`-separated, below the area) is, as messages
    /// and reports show it: a path, or the store URL without credentials.
    pub fn shown(&self, relative: &str) -> PathBuf {
        match self {
            StagingArea::Dir(dir) => dir.join(relative),
            StagingArea::Store(area) => area.shown(relative),
        }
    }
}

impl std::fmt::Debug for StagingArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StagingArea::Dir(dir) => f.debug_tuple("Dir").field(dir).finish(),
            StagingArea::Store(area) => f.debug_tuple("Store").field(&area.to_string()).finish(),
        }
    }
}

/// Whether the unit `name` (a run id or a batch id) of a step, written by a
/// worker that is now dead, is sealed in `area`: its file or object is in
/// place. When it is not, what the worker left of it in a folder (a
/// partial file under a hidden name) is removed (a store never holds half
/// a unit: it is one object, whole or absent).
pub(crate) async fn sealed_or_cleared(
    area: &StagingArea,
    step: i32,
    operation: &str,
    name: &str,
) -> Result<bool> {
    let relative = paths::unit_relative(step, operation, name)?;
    match area {
        StagingArea::Dir(root) => {
            let file = root.join(relative);
            if file.is_file() {
                return Ok(true);
            }
            let Some(shard) = file.parent() else { return Ok(false) };
            let entries = match std::fs::read_dir(shard) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(Error::io(shard, e)),
            };
            for entry in entries.flatten() {
                let partial = entry.file_name();
                if paths::partial_unit_of(&partial.to_string_lossy()) == Some(name) {
                    match std::fs::remove_file(entry.path()) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(Error::io(entry.path(), e));
                        }
                        _ => {}
                    }
                }
            }
            Ok(false)
        }
        StagingArea::Store(store) => store.exists(&relative).await,
    }
}

/// Run `future` to its end from synchronous code that runs on a blocking
/// thread of the lake's runtime (a worker's staging, the committer's
/// loaders): the store's client belongs to that runtime.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> Result<F::Output> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| {
        Error::Internal("staging in an object store runs inside the lake's runtime".into())
    })?;
    Ok(match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => handle.block_on(future),
        _ => tokio::task::block_in_place(|| handle.block_on(future)),
    })
}

/// Remove committed units: in a store, their objects in one batch of
/// removals; in a folder, [`remove_run`] each, on all cores.
pub(crate) async fn remove_units(area: &StagingArea, units: &[&super::RunDir]) -> Result<()> {
    match area {
        // A unit is one file: removing it is one `unlink` (about 10 µs on
        // this project's disk, where a folder's `rmdir` costs ten times
        // that); the units are spread over the cores.
        StagingArea::Dir(root) => {
            let root = root.clone();
            let units: Vec<super::RunDir> = units.iter().map(|run| (*run).clone()).collect();
            tokio::task::spawn_blocking(move || {
                let shards = checked_shards(&root, &units)?;
                crate::host::on_cores(&units, |run| remove_checked(&root, run, &shards))
                    .into_iter()
                    .collect()
            })
            .await
            .map_err(|e| Error::task("removing committed units", e))?
        }
        StagingArea::Store(_) if units.is_empty() => Ok(()),
        StagingArea::Store(store) => {
            store.delete_many(units.iter().map(|run| unit_object(run)).collect()).await
        }
    }
}

/// The object of a unit in a store, below the area.
pub(crate) fn unit_object(run: &super::RunDir) -> String {
    match run.shape {
        super::Shape::File | super::Shape::Partial => run.relative(),
        super::Shape::Folder => format!("{}/{}", run.relative(), super::bundle::UNIT_OBJECT),
    }
}

/// Remove a unit from its staging area: in a store, its object; in a
/// folder, [`remove_run`].
pub(crate) async fn remove_unit(area: &StagingArea, run: &super::RunDir) -> Result<()> {
    match area {
        StagingArea::Dir(root) => remove_run(root, run),
        StagingArea::Store(store) => store.delete(&unit_object(run)).await,
    }
}

/// The shard folders of unit files, each checked once to be a real folder
/// inside the staging root (no level of it a link): only such folders are
/// ever removed from.
fn checked_shards(
    staging_root: &Path,
    units: &[super::RunDir],
) -> Result<std::collections::HashSet<PathBuf>> {
    let mut shards = std::collections::HashSet::new();
    for run in units.iter().filter(|run| run.shape != super::Shape::Folder) {
        let Some(shard) = run.path.parent() else { continue };
        if !shards.contains(shard) {
            check_inside(staging_root, shard, &run.path)?;
            shards.insert(shard.to_path_buf());
        }
    }
    Ok(shards)
}

/// Refuse `place` (of the staged `unit`) unless it is inside the staging
/// root and no level of it is a symbolic link or a file.
fn check_inside(staging_root: &Path, place: &Path, unit: &Path) -> Result<()> {
    if !place.starts_with(staging_root)
        || place.components().any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(Error::InvalidInput(format!(
            "{}: not a unit under the staging root {}; refusing to remove it",
            unit.display(),
            staging_root.display()
        )));
    }
    if !crate::staging::paths::no_link_below(staging_root, place) {
        return Err(Error::InvalidInput(format!(
            "{}: a staged unit, or a folder above it, is a symbolic link or a file; refusing to remove it",
            unit.display()
        )));
    }
    Ok(())
}

/// Remove a committed unit: its file (the shard folder stays, for the next
/// units), or an older sluice's folder and its shard folders once empty.
/// Only a unit inside the staging root, below no symbolic link, is ever
/// removed.
fn remove_run(staging_root: &Path, run: &super::RunDir) -> Result<()> {
    let shards = checked_shards(staging_root, std::slice::from_ref(run))?;
    remove_checked(staging_root, run, &shards)
}

/// [`remove_run`] of a unit whose shard folder is among `shards` (checked).
fn remove_checked(
    staging_root: &Path,
    run: &super::RunDir,
    shards: &std::collections::HashSet<PathBuf>,
) -> Result<()> {
    let gone = |result: std::io::Result<()>, path: &Path| match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    };
    if run.shape != super::Shape::Folder {
        if !run.path.parent().is_some_and(|shard| shards.contains(shard)) {
            return Err(Error::Internal(format!("{}: shard not checked", run.path.display())));
        }
        // `unlink` never follows a link: a link named like a unit goes, its
        // target stays.
        return gone(std::fs::remove_file(&run.path), &run.path);
    }
    check_inside(staging_root, &run.path, &run.path)?;
    gone(std::fs::remove_dir_all(&run.path), &run.path)?;
    // Shard directories are shared; removing one that is not empty fails, harmlessly.
    let mut parent = run.path.parent();
    for _ in 0..2 {
        if let Some(p) = parent.filter(|p| p.starts_with(staging_root) && *p != staging_root) {
            let _ = std::fs::remove_dir(p);
            parent = p.parent();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::staging::{RunDir, Shape};

    #[tokio::test]
    async fn a_dead_workers_partial_unit_is_cleared_and_a_sealed_one_stands() {
        let dir = tempfile::tempdir().unwrap();
        let area = StagingArea::Dir(dir.path().to_path_buf());
        let sealed = paths::unit_file(dir.path(), 1, "op", "aaaa0001").unwrap();
        let shard = sealed.parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&shard).unwrap();
        std::fs::write(&sealed, b"unit").unwrap();
        let partial = shard.join(paths::partial_name("aaaa0002"));
        std::fs::write(&partial, b"half").unwrap();
        // Another unit's partial file in the same shard is not ours to touch.
        let other = shard.join(paths::partial_name("aaaa0003"));
        std::fs::write(&other, b"half").unwrap();

        assert!(sealed_or_cleared(&area, 1, "op", "aaaa0001").await.unwrap());
        assert!(!sealed_or_cleared(&area, 1, "op", "aaaa0002").await.unwrap());
        assert!(!partial.exists() && other.exists() && sealed.exists());
        assert!(!sealed_or_cleared(&area, 2, "op", "bbbb0001").await.unwrap(), "no shard yet");
    }

    #[tokio::test]
    async fn committed_units_go_and_their_shard_folder_stays_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let area = StagingArea::Dir(dir.path().to_path_buf());
        let units: Vec<RunDir> = ["abcd0001", "abcd0002"]
            .into_iter()
            .map(|id| {
                let path = paths::unit_file(dir.path(), 1, "op", id).unwrap();
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, b"unit").unwrap();
                RunDir::file(1, "op", id, path)
            })
            .collect();
        remove_units(&area, &units.iter().collect::<Vec<_>>()).await.unwrap();
        assert!(units.iter().all(|u| !u.path.exists()));
        assert!(dir.path().join("1_op/ab").is_dir());
        // Removing a unit already gone is no error (another committer took it).
        remove_unit(&area, &units[0]).await.unwrap();

        // A shard folder that is a link is never removed through.
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("cdef0001.sluice");
        std::fs::write(&target, b"theirs").unwrap();
        std::fs::create_dir_all(dir.path().join("2_op")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("2_op/cd")).unwrap();
        let linked = RunDir::file(2, "op", "cdef0001", dir.path().join("2_op/cd/cdef0001.sluice"));
        let err = remove_units(&area, &[&linked]).await.unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(target.exists());
        let folder = RunDir { shape: Shape::Folder, ..linked };
        assert!(remove_unit(&area, &folder).await.is_err());
    }
}
