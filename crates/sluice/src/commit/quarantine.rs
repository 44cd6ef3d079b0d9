//! Moving a bad run directory aside, with the reason next to it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::staging::RunDir;

/// Where quarantined run directories go, under the staging root.
pub const QUARANTINE_DIR: &str = ".quarantine";

/// The file written into a quarantined directory.
pub const REASON_FILE: &str = "QUARANTINE_REASON.txt";

/// Move `run` to `staging_root/.quarantine/{step}_{op}/{run_id}` and write the
/// reason into it. Returns the new location.
pub fn quarantine(staging_root: &Path, run: &RunDir, reason: &str) -> Result<PathBuf> {
    if !crate::staging::paths::no_link_below(staging_root, &run.path) {
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
    std::fs::rename(&run.path, &target).map_err(|e| Error::io(&run.path, e))?;
    let note = target.join(REASON_FILE);
    std::fs::write(&note, format!("{reason}\n")).map_err(|e| Error::io(&note, e))?;
    tracing::warn!(run = %run.run_id, %reason, to = %target.display(), "quarantined staged run");
    Ok(target)
}

/// Remove a committed run directory and its shard directories once empty.
/// Only a real directory inside the staging root is ever removed: a path
/// that escapes it, or a symbolic link, is an error.
pub fn remove_run(staging_root: &Path, run: &RunDir) -> Result<()> {
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
