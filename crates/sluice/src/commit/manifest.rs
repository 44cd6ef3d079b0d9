//! Manifests: the staged units of one commit sequence, on disk.
//!
//! A sequence writes `_staging/.commits/{seq}.json` after its journal claim
//! and before its first table commit, and removes it last. While it exists,
//! the sequence can be finished by anyone (`recover`): the manifest says
//! which units belong to it and which token its table commits carry. A
//! manifest is read as untrusted input: every path must be a staged unit
//! (`{step}_{op}/{id[0:2]}/{id}.sluice`, or an older sluice's folder
//! `{step}_{op}/{id[0:2]}/{id[2:4]}/{id}`, each component validated), so no
//! manifest can point a clean-up outside staging.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lake::layout::{self, MANIFEST_DIR};
use crate::staging::paths::{parse_step_dir, validate_dir_name};
use crate::staging::{RunDir, Shape, StagingArea};

/// The run directories of one sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Sequence number.
    pub seq: i64,
    /// The sequence's token (in every table commit it makes).
    #[serde(default)]
    pub token: String,
    /// Run directories, relative to the staging root.
    pub runs: Vec<PathBuf>,
}

impl Manifest {
    /// The run directories, each checked to be a staging run directory.
    /// Entries that are not are returned as errors, to be reported.
    pub fn run_dirs_in(&self, area: &StagingArea) -> (Vec<RunDir>, Vec<String>) {
        let StagingArea::Store(_) = area else {
            return self.run_dirs(area.dir().expect("a folder area"));
        };
        let mut dirs = Vec::new();
        let mut bad = Vec::new();
        for path in &self.runs {
            match run_dir_from(Path::new(""), path) {
                Some(mut dir) => {
                    dir.path = area.shown(&dir.relative());
                    dirs.push(dir);
                }
                None => bad.push(path.display().to_string()),
            }
        }
        (dirs, bad)
    }

    /// [`Manifest::run_dirs_in`] a folder.
    pub fn run_dirs(&self, staging_root: &Path) -> (Vec<RunDir>, Vec<String>) {
        let mut dirs = Vec::new();
        let mut bad = Vec::new();
        for path in &self.runs {
            match run_dir_from(staging_root, path) {
                Some(dir) if below_no_link(staging_root, &dir) => dirs.push(dir),
                _ => bad.push(path.display().to_string()),
            }
        }
        (dirs, bad)
    }
}

/// Whether no folder from the staging root down to `run` is a symbolic link
/// (nor `run` itself, for an older sluice's folder).
fn below_no_link(staging_root: &Path, run: &RunDir) -> bool {
    let place = match run.shape {
        Shape::Folder => run.path.as_path(),
        Shape::File | Shape::Partial => run.path.parent().unwrap_or(&run.path),
    };
    crate::staging::paths::no_link_below(staging_root, place)
}

/// A staged unit from its path relative to the staging root — a unit file
/// `{step}_{op}/{id[0:2]}/{id}.sluice`, or an older sluice's folder
/// `{step}_{op}/{id[0:2]}/{id[2:4]}/{id}` — or `None` if the path is
/// anything else (absolute, `..`, wrong shape).
pub fn run_dir_from(root: &Path, relative: &Path) -> Option<RunDir> {
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?),
            _ => return None,
        }
    }
    let (step_dir, run_id, shape) = match parts.as_slice() {
        [step_dir, shard, file] => {
            let id = crate::staging::paths::unit_name_of(file)?;
            (id.get(0..2)? == *shard).then_some((*step_dir, id, Shape::File))?
        }
        [step_dir, shard1, shard2, id] => {
            validate_dir_name(id).ok()?;
            (id.get(0..2)? == *shard1 && id.get(2..4)? == *shard2).then_some((
                *step_dir,
                *id,
                Shape::Folder,
            ))?
        }
        _ => return None,
    };
    let (step, operation) = parse_step_dir(step_dir)?;
    let mut path = root.to_path_buf();
    path.extend(&parts);
    let operation = operation.to_owned();
    Some(RunDir { step, operation, run_id: run_id.to_owned(), path, shape, listed_bytes: None })
}

/// A run directory's path relative to the staging root.
pub fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| path.to_path_buf())
}

fn manifest_dir(staging_root: &Path) -> PathBuf {
    staging_root.join(MANIFEST_DIR)
}

fn manifest_path(staging_root: &Path, seq: i64) -> PathBuf {
    layout::manifest_file(staging_root, seq)
}

/// Write a manifest atomically (and durably when `sync`).
pub fn write(staging_root: &Path, manifest: &Manifest, sync: bool) -> Result<()> {
    let dir = manifest_dir(staging_root);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let path = manifest_path(staging_root, manifest.seq);
    let tmp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    let text = serde_json::to_vec(manifest).map_err(|e| Error::json("a commit manifest", e))?;
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    if sync {
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    if sync {
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(&dir, e))?;
    }
    Ok(())
}

/// Every manifest on disk, by sequence. A manifest that is not valid JSON of
/// the expected shape is an error naming it: it may describe committed
/// tables, so it is never skipped silently.
pub fn read_all(staging_root: &Path) -> Result<Vec<Manifest>> {
    let dir = manifest_dir(staging_root);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue; // a manifest whose write was interrupted: never acted on
        }
        let text = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let manifest: Manifest = serde_json::from_slice(&text)
            .map_err(|e| Error::json(path.display().to_string(), e))?;
        if path != manifest_path(staging_root, manifest.seq) {
            return Err(Error::InvalidInput(format!(
                "{}: the manifest names sequence {}, not its file name's",
                path.display(),
                manifest.seq
            )));
        }
        out.push(manifest);
    }
    out.sort_by_key(|m| m.seq);
    Ok(out)
}

/// Remove a sequence's manifest.
pub fn remove(staging_root: &Path, seq: i64) -> Result<()> {
    let path = manifest_path(staging_root, seq);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// The manifest's name below a staging area.
fn relative_name(seq: i64) -> String {
    format!("{MANIFEST_DIR}/{seq:012}.json")
}

/// [`write`] in a staging area (in a store, one PUT: whole or absent).
pub async fn write_in(area: &StagingArea, manifest: &Manifest, sync: bool) -> Result<()> {
    let StagingArea::Store(store) = area else {
        return write(area.dir().expect("a folder area"), manifest, sync);
    };
    let text = serde_json::to_vec(manifest).map_err(|e| Error::json("a commit manifest", e))?;
    store.put(&relative_name(manifest.seq), text).await
}

/// [`read_all`] in a staging area.
pub async fn read_all_in(area: &StagingArea) -> Result<Vec<Manifest>> {
    let StagingArea::Store(store) = area else {
        return read_all(area.dir().expect("a folder area"));
    };
    let mut out = Vec::new();
    for object in store.list(&format!("{MANIFEST_DIR}/")).await? {
        if !object.ends_with(".json") {
            continue;
        }
        let Some(text) = store.get(&object).await? else { continue };
        let shown = area.shown(&object);
        let manifest: Manifest = serde_json::from_slice(&text)
            .map_err(|e| Error::json(shown.display().to_string(), e))?;
        if object != relative_name(manifest.seq) {
            return Err(Error::InvalidInput(format!(
                "{}: the manifest names sequence {}, not its file name's",
                shown.display(),
                manifest.seq
            )));
        }
        out.push(manifest);
    }
    out.sort_by_key(|m| m.seq);
    Ok(out)
}

/// [`remove`] in a staging area.
pub async fn remove_in(area: &StagingArea, seq: i64) -> Result<()> {
    match area {
        StagingArea::Dir(root) => remove(root, seq),
        StagingArea::Store(store) => store.delete(&relative_name(seq)).await,
    }
}

/// A run directory's path relative to its staging area.
pub fn relative_in(area: &StagingArea, run: &RunDir) -> PathBuf {
    match area {
        StagingArea::Dir(root) => relative(root, &run.path),
        StagingArea::Store(_) => PathBuf::from(run.relative()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_staging_run_paths_are_accepted() {
        let root = Path::new("/lake/_staging");
        let good = run_dir_from(root, Path::new("3_tool/ab/abcdef0123456789.sluice")).unwrap();
        assert_eq!(good.path, Path::new("/lake/_staging/3_tool/ab/abcdef0123456789.sluice"));
        assert_eq!(
            (good.shape, good.run_id.as_str(), good.step),
            (Shape::File, "abcdef0123456789", 3)
        );
        assert_eq!(good.relative(), "3_tool/ab/abcdef0123456789.sluice");
        let older = run_dir_from(root, Path::new("3_tool/ab/cd/abcdef0123456789")).unwrap();
        assert_eq!(older.path, Path::new("/lake/_staging/3_tool/ab/cd/abcdef0123456789"));
        assert_eq!(older.shape, Shape::Folder);
        for bad in [
            "3_tool/ab/abcdef0123456789",
            "3_tool/xx/abcdef0123456789.sluice",
            "3_tool/ab/.abcdef0123456789.sluice",
            "3_tool/ab/../abcdef0123456789.sluice",
            "0_x/../../artifacts",
            "../../artifacts/metrics",
            "/etc/passwd",
            "3_tool/ab/cd/abcdef0123456789/..",
            "3_tool/ab/cd",
            "3_tool/xx/cd/abcdef0123456789",
            "3_tool/ab/cd/ab..ef0123456789",
            "3_../ab/cd/abcdef0123456789",
            "3_tool/ab/cd/abcdef0123456789/extra",
        ] {
            assert!(run_dir_from(root, Path::new(bad)).is_none(), "{bad}");
        }
    }
}
