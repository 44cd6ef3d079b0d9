//! Where staged units live: a folder on a filesystem, or the lake's
//! `_staging/` prefix in its object store.
//!
//! The two keep one layout (`{step}_{op}/{id[0:2]}/{id[2:4]}/{id}/` with the
//! same files, `.commits/` for manifests, `.quarantine/` for runs that
//! cannot be committed) and one rule: a unit is committed only once its
//! sentinel is there, and the sentinel is written last.
//!
//! A folder seals each file by `rename` and fsyncs on shared filesystems
//! ([`writer`](super::writer)). A store has no rename and needs none: a
//! unit's files travel in one object ([`bundle`](super::bundle)), put if
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

/// A unit's folder relative to the area: `{step}_{op}/{id[0:2]}/{id[2:4]}/{id}`.
pub(crate) fn unit_relative(step: i32, operation: &str, name: &str) -> Result<String> {
    paths::validate_dir_name(name)?;
    Ok(format!("{}/{}/{}/{name}", paths::step_dir_name(step, operation)?, &name[0..2], &name[2..4]))
}

/// Whether the unit `name` (a run id or a batch id) of a step, written by a
/// worker that is now dead, is sealed in `area`: its unit object is in place
/// (or, in a folder, the loose files of an older sluice). When it is not,
/// what the worker left of it in a folder is removed (a store never holds
/// half a unit: it is one object, whole or absent).
pub(crate) async fn sealed_or_cleared(
    area: &StagingArea,
    step: i32,
    operation: &str,
    name: &str,
) -> Result<bool> {
    let relative = unit_relative(step, operation, name)?;
    match area {
        StagingArea::Dir(root) => {
            let dir = root.join(relative);
            if super::is_sealed(&dir) {
                return Ok(true);
            }
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&dir, e)),
                _ => Ok(false),
            }
        }
        StagingArea::Store(store) => {
            store.exists(&format!("{relative}/{}", super::bundle::UNIT_OBJECT)).await
        }
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
        // Removing a unit's file and its folder costs about 160 µs on this
        // project's disk (measured with `unlink` and `rmdir` in a loop);
        // the units are spread over the cores.
        StagingArea::Dir(root) => {
            let root = root.clone();
            let units: Vec<super::RunDir> = units.iter().map(|run| (*run).clone()).collect();
            tokio::task::spawn_blocking(move || {
                crate::host::on_cores(&units, |run| remove_run(&root, run)).into_iter().collect()
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
    format!("{}/{}", run.relative(), super::bundle::UNIT_OBJECT)
}

/// Remove a unit from its staging area: in a store, its object; in a
/// folder, [`remove_run`].
pub(crate) async fn remove_unit(area: &StagingArea, run: &super::RunDir) -> Result<()> {
    match area {
        StagingArea::Dir(root) => remove_run(root, run),
        StagingArea::Store(store) => store.delete(&unit_object(run)).await,
    }
}

/// Remove a committed run directory and its shard directories once empty.
/// Only a real directory inside the staging root is ever removed: a path
/// that escapes it, or a symbolic link, is an error.
fn remove_run(staging_root: &Path, run: &super::RunDir) -> Result<()> {
    if !run.path.starts_with(staging_root)
        || run.path.components().any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(Error::InvalidInput(format!(
            "{}: not a run directory under the staging root {}; refusing to remove it",
            run.path.display(),
            staging_root.display()
        )));
    }
    if !crate::staging::paths::no_link_below(staging_root, &run.path) {
        return Err(Error::InvalidInput(format!(
            "{}: a staged run, or a folder above it, is a symbolic link or a file; refusing to remove it",
            run.path.display()
        )));
    }
    match std::fs::remove_dir_all(&run.path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&run.path, e)),
    }
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
