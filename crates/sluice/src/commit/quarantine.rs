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
pub fn remove_run(run: &RunDir) -> Result<()> {
    match std::fs::remove_dir_all(&run.path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&run.path, e)),
    }
    // Shard directories are shared; removing one that is not empty fails, harmlessly.
    let mut parent = run.path.parent();
    for _ in 0..2 {
        if let Some(p) = parent {
            let _ = std::fs::remove_dir(p);
            parent = p.parent();
        }
    }
    Ok(())
}
