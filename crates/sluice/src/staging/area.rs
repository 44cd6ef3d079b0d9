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
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;

use super::paths;
use crate::error::{Error, Result};
use crate::lake::io::location::{LakeRoot, StoreRoot};
use crate::lake::layout::STAGING_DIR;

/// Where a lake's workers stage and its committer reads.
#[derive(Clone)]
pub enum StagingArea {
    /// A folder (the lake's `_staging/`, or one given).
    Dir(PathBuf),
    /// The `_staging/` prefix of a lake in an object store.
    Store(StoreArea),
}

/// The `_staging/` prefix of a lake in an object store.
#[derive(Clone)]
pub struct StoreArea {
    lake: Arc<StoreRoot>,
}

impl StagingArea {
    /// The staging area of the lake at `root`.
    pub fn of_lake(root: &LakeRoot) -> StagingArea {
        match root {
            LakeRoot::Local(path) => StagingArea::Dir(super::default_root(path)),
            LakeRoot::Store(store) => StagingArea::Store(StoreArea { lake: store.clone() }),
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

impl std::fmt::Display for StoreArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{STAGING_DIR}/", self.lake)
    }
}

impl StoreArea {
    /// The store object at `relative` below the area.
    fn object(&self, relative: &str) -> ObjectPath {
        self.lake.object(&format!("{STAGING_DIR}/{relative}"))
    }

    /// Where `relative` is, as messages show it.
    pub(crate) fn shown(&self, relative: &str) -> PathBuf {
        PathBuf::from(format!("{self}{relative}"))
    }

    fn failed(&self, doing: &str, relative: &str, source: object_store::Error) -> Error {
        Error::Store { what: format!("{doing} {}", self.shown(relative).display()), source }
    }

    /// The lake's root, for the small files it reads and writes whole.
    fn root(&self) -> LakeRoot {
        LakeRoot::Store(self.lake.clone())
    }

    /// Put `bytes` at `relative` (a PUT is atomic: whole or absent).
    pub(crate) async fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<()> {
        self.root().write_file(&format!("{STAGING_DIR}/{relative}"), bytes).await
    }

    /// Put `bytes` at `relative` unless an object is there: `Ok(true)` when
    /// it holds ours (this call's, or an earlier attempt's whose answer was
    /// lost), `Ok(false)` when another writer's.
    pub(crate) async fn put_if_absent(&self, relative: &str, bytes: &[u8]) -> Result<bool> {
        crate::lake::io::log_entry::put_if_absent(
            self.lake.store().as_ref(),
            &self.object(relative),
            bytes,
        )
        .await
    }

    /// The bytes at `relative`, `None` when absent.
    pub(crate) async fn get(&self, relative: &str) -> Result<Option<Bytes>> {
        self.root().read_file(&format!("{STAGING_DIR}/{relative}")).await
    }

    /// Whether an object is at `relative`.
    pub(crate) async fn exists(&self, relative: &str) -> Result<bool> {
        self.root().file_exists(&format!("{STAGING_DIR}/{relative}")).await
    }

    /// The names (below the area) of every object below `relative` (a
    /// folder; `""` for the whole area), sorted.
    pub(crate) async fn list(&self, relative: &str) -> Result<Vec<String>> {
        let base = self.object("");
        let prefix = self.object(relative);
        let found: Vec<object_store::ObjectMeta> = self
            .lake
            .store()
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| self.failed("listing", relative, e))?;
        let mut out: Vec<String> = found
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.prefix_match(&base)?;
                Some(name.map(|p| p.as_ref().to_owned()).collect::<Vec<_>>().join("/"))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Remove the object at `relative` (absent is fine).
    pub(crate) async fn delete(&self, relative: &str) -> Result<()> {
        self.delete_many(vec![relative.to_owned()]).await
    }

    /// Remove the objects at `relatives` (absent ones are fine), in as few
    /// requests as the store allows (S3 and Azure delete in batches). A
    /// removal is idempotent, so a batch that fails (Azure's batch POST is
    /// not retried by the client: a connection the emulator closed fails
    /// it) is sent again, up to [`DELETE_ATTEMPTS`] times.
    pub(crate) async fn delete_many(&self, relatives: Vec<String>) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let locations: Vec<object_store::Result<ObjectPath>> =
                relatives.iter().map(|r| Ok(self.object(r))).collect();
            let outcome: object_store::Result<Vec<ObjectPath>> = self
                .lake
                .store()
                .delete_stream(futures::stream::iter(locations).boxed())
                .or_else(|e| async move {
                    match e {
                        object_store::Error::NotFound { path, .. } => Ok(ObjectPath::from(path)),
                        e => Err(e),
                    }
                })
                .try_collect()
                .await;
            match outcome {
                Ok(_) => return Ok(()),
                Err(e) if attempt < DELETE_ATTEMPTS => {
                    tracing::debug!(error = %e, attempt, "removing staged objects failed; again");
                    tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                }
                Err(e) => {
                    let first = relatives.first().map_or("", String::as_str);
                    return Err(self.failed("removing", first, e));
                }
            }
        }
    }

    /// Remove every object below the folder `relative`.
    pub(crate) async fn delete_folder(&self, relative: &str) -> Result<()> {
        let folder = format!("{}/", relative.trim_end_matches('/'));
        let listed: Vec<String> = self.list(&folder).await?;
        if listed.is_empty() { Ok(()) } else { self.delete_many(listed).await }
    }

    /// Copy the object at `from` to `to` (both below the area).
    pub(crate) async fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.lake
            .store()
            .copy(&self.object(from), &self.object(to))
            .await
            .map_err(|e| self.failed("copying", from, e))
    }
}

/// How many times a batch of removals is sent before its failure is
/// reported.
const DELETE_ATTEMPTS: u32 = 4;

/// A unit's folder relative to the area: `{step}_{op}/{id[0:2]}/{id[2:4]}/{id}`.
pub(crate) fn unit_relative(step: i32, operation: &str, name: &str) -> Result<String> {
    paths::validate_dir_name(name)?;
    Ok(format!("{}/{}/{}/{name}", paths::step_dir_name(step, operation)?, &name[0..2], &name[2..4]))
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
/// removals; in a folder, [`remove_run`] each.
pub(crate) async fn remove_units(area: &StagingArea, units: &[&super::RunDir]) -> Result<()> {
    match area {
        StagingArea::Dir(root) => units.iter().try_for_each(|run| remove_run(root, run)),
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
