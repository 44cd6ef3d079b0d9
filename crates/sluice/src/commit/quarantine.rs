//! Moving a bad unit aside, with the reason next to it — and back.
//!
//! Quarantine keeps a run that cannot be committed (damaged, inconsistent,
//! or too large for this process) where nothing commits it and nothing
//! deletes it. Each quarantined folder remembers where it was staged, so
//! [`requeue`] can put it back once its cause is gone (fixed by hand, or a
//! `recover` on a node with more memory).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub(crate) use crate::staging::area::remove_unit as remove_in;
use crate::staging::area::unit_object;
use crate::staging::bundle::UNIT_OBJECT;
use crate::staging::{RunDir, Shape, StagingArea};

/// Where quarantined run directories go, under the staging root.
pub const QUARANTINE_DIR: &str = ".quarantine";

/// The file written into a quarantined directory.
pub const REASON_FILE: &str = "QUARANTINE_REASON.txt";

/// Where a quarantined directory was staged, relative to the staging root
/// (a dot file: loading a run ignores it).
const ORIGIN_FILE: &str = ".quarantine-origin";

/// Move `run` to the folder `staging_root/.quarantine/{step}_{op}/{run_id}`
/// (its file as `unit.sluice` in it, or an older sluice's folder as that
/// folder) and write the reason into it. Returns the new location.
pub fn quarantine(staging_root: &Path, run: &RunDir, reason: &str) -> Result<PathBuf> {
    let place = match run.shape {
        Shape::Folder => run.path.as_path(),
        Shape::File | Shape::Partial => run.path.parent().unwrap_or(&run.path),
    };
    if !crate::staging::paths::no_link_below(staging_root, place) {
        return Err(Error::InvalidInput(format!(
            "{}: a staged run, or a folder above it, is a symbolic link; refusing to move it",
            run.path.display()
        )));
    }
    let parent = staging_root.join(QUARANTINE_DIR).join(format!("{}_{}", run.step, run.operation));
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let mut target = parent.join(&run.run_id);
    let mut n = 1;
    while target.exists() {
        target = parent.join(format!("{}.{n}", run.run_id));
        n += 1;
    }
    match run.shape {
        Shape::Folder => {
            std::fs::rename(&run.path, &target).map_err(|e| Error::io(&run.path, e))?
        }
        Shape::File | Shape::Partial => {
            std::fs::create_dir(&target).map_err(|e| Error::io(&target, e))?;
            let object = target.join(UNIT_OBJECT);
            std::fs::rename(&run.path, &object).map_err(|e| Error::io(&run.path, e))?;
        }
    }
    let file = target.join(ORIGIN_FILE);
    std::fs::write(&file, run.relative().as_bytes()).map_err(|e| Error::io(&file, e))?;
    let note = target.join(REASON_FILE);
    std::fs::write(&note, format!("{reason}\n")).map_err(|e| Error::io(&note, e))?;
    tracing::warn!(run = %run.run_id, %reason, to = %target.display(), "quarantined staged run");
    Ok(target)
}

/// Move every quarantined unit back where it was staged, for the next
/// commit to try again. Returns the units moved back; a unit whose place is
/// taken, or quarantined before origins were recorded, stays (and is
/// reported by `doctor`).
pub fn requeue(staging_root: &Path) -> Result<Vec<PathBuf>> {
    let quarantine = staging_root.join(QUARANTINE_DIR);
    let mut moved = Vec::new();
    let groups = match std::fs::read_dir(&quarantine) {
        Ok(groups) => groups,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(moved),
        Err(e) => return Err(Error::io(&quarantine, e)),
    };
    for group in groups {
        let group = group.map_err(|e| Error::io(&quarantine, e))?.path();
        if !crate::staging::paths::no_link_below(staging_root, &group) || !group.is_dir() {
            continue;
        }
        for held in std::fs::read_dir(&group).map_err(|e| Error::io(&group, e))? {
            let held = held.map_err(|e| Error::io(&group, e))?.path();
            let Ok(origin) = std::fs::read_to_string(held.join(ORIGIN_FILE)) else { continue };
            let origin = Path::new(origin.trim());
            let Some(run) = crate::commit::manifest::run_dir_from(staging_root, origin) else {
                tracing::warn!(run = %held.display(), "a quarantined run's origin is not a staging unit; left in quarantine");
                continue;
            };
            if std::fs::symlink_metadata(&run.path).is_ok() {
                tracing::warn!(run = %held.display(), "a quarantined run's place is taken; left in quarantine");
                continue;
            }
            if let Some(parent) = run.path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            // The reason goes first: a run moved back with it would be
            // refused for an unexpected file.
            let note = held.join(REASON_FILE);
            match std::fs::remove_file(&note) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&note, e)),
            }
            match run.shape {
                Shape::Folder => {
                    std::fs::rename(&held, &run.path).map_err(|e| Error::io(&held, e))?;
                    let _ = std::fs::remove_file(run.path.join(ORIGIN_FILE));
                }
                Shape::File | Shape::Partial => {
                    let object = held.join(UNIT_OBJECT);
                    std::fs::rename(&object, &run.path).map_err(|e| Error::io(&object, e))?;
                    let _ = std::fs::remove_file(held.join(ORIGIN_FILE));
                    let _ = std::fs::remove_dir(&held);
                }
            }
            moved.push(run.path);
        }
        let _ = std::fs::remove_dir(&group);
    }
    Ok(moved)
}

/// [`quarantine`] in a staging area: in a store, the unit's object is
/// copied to `.quarantine/{step}_{op}/{run_id}/` with the reason and origin
/// beside it, then removed.
pub async fn quarantine_in(area: &StagingArea, run: &RunDir, reason: &str) -> Result<PathBuf> {
    let store = match area {
        StagingArea::Dir(root) => return quarantine(root, run, reason),
        StagingArea::Store(store) => store,
    };
    let origin = run.relative();
    let group = format!("{QUARANTINE_DIR}/{}_{}", run.step, run.operation);
    let mut target = format!("{group}/{}", run.run_id);
    let mut n = 1;
    while !store.list(&format!("{target}/")).await?.is_empty() {
        target = format!("{group}/{}.{n}", run.run_id);
        n += 1;
    }
    store.copy(&unit_object(run), &format!("{target}/{UNIT_OBJECT}")).await?;
    store.put(&format!("{target}/{ORIGIN_FILE}"), origin.into_bytes()).await?;
    store.put(&format!("{target}/{REASON_FILE}"), format!("{reason}\n").into_bytes()).await?;
    store.delete(&unit_object(run)).await?;
    let to = store.shown(&target);
    tracing::warn!(run = %run.run_id, %reason, to = %to.display(), "quarantined staged run");
    Ok(to)
}

/// [`requeue`] in a staging area: in a store, each quarantined unit's
/// object is copied back where it was staged (unless a unit is there),
/// then its quarantine folder is removed.
pub async fn requeue_in(area: &StagingArea) -> Result<Vec<PathBuf>> {
    let store = match area {
        StagingArea::Dir(root) => return requeue(root),
        StagingArea::Store(store) => store,
    };
    let mut held = std::collections::BTreeSet::new();
    for object in store.list(&format!("{QUARANTINE_DIR}/")).await? {
        let parts: Vec<&str> = object.splitn(4, '/').collect();
        if parts.len() == 4 {
            held.insert(parts[..3].join("/"));
        }
    }
    let mut moved = Vec::new();
    for folder in held {
        let Some(origin) = store.get(&format!("{folder}/{ORIGIN_FILE}")).await? else { continue };
        let origin = String::from_utf8_lossy(&origin).trim().to_owned();
        let Some(run) = crate::commit::manifest::run_dir_from(Path::new(""), Path::new(&origin))
            .filter(|run| run.relative() == origin)
        else {
            tracing::warn!(run = %folder, "a quarantined run's origin is not a staging unit; left in quarantine");
            continue;
        };
        if store.exists(&unit_object(&run)).await? {
            tracing::warn!(run = %folder, "a quarantined run's place is taken; left in quarantine");
            continue;
        }
        store.copy(&format!("{folder}/{UNIT_OBJECT}"), &unit_object(&run)).await?;
        store.delete_folder(&folder).await?;
        moved.push(store.shown(&origin));
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarantined_unit_goes_back_where_it_was_staged_without_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let path = crate::staging::paths::unit_file(root, 1, "gen", "run-1").unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"unit").unwrap();
        let run = RunDir::file(1, "gen", "run-1", path.clone());
        let to = quarantine(root, &run, "too large here").unwrap();
        assert!(!path.exists() && to.join(REASON_FILE).exists() && to.join(UNIT_OBJECT).exists());

        let moved = requeue(root).unwrap();
        assert_eq!(moved, vec![path.clone()]);
        assert_eq!(std::fs::read(&path).unwrap(), b"unit", "the same unit, and nothing else");
        assert!(!to.exists(), "its quarantine folder is gone");
        assert!(requeue(root).unwrap().is_empty(), "once");

        // A unit whose place is taken stays.
        let to = quarantine(root, &run, "again").unwrap();
        std::fs::write(&path, b"another").unwrap();
        assert!(requeue(root).unwrap().is_empty(), "its place is taken");
        assert!(to.join(REASON_FILE).exists());
    }

    #[test]
    fn an_older_sluices_folder_is_quarantined_and_requeued_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let path = crate::staging::paths::legacy_folder(root, 1, "gen", "run-2").unwrap();
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("executions.parquet"), b"rows").unwrap();
        let run = RunDir { shape: Shape::Folder, ..RunDir::file(1, "gen", "run-2", path.clone()) };
        let to = quarantine(root, &run, "damaged").unwrap();
        assert!(!path.exists() && to.join(REASON_FILE).exists());
        assert_eq!(requeue(root).unwrap(), vec![path.clone()]);
        let names: Vec<String> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["executions.parquet"], "nothing of the quarantine is left in it");
    }
}
