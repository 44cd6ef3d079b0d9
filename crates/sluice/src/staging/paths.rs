//! Where a worker stages a unit, and names that may not escape it.
//!
//! ```text
//! staging_root/{step}_{operation}/{id[0:2]}/{id}.sluice
//! ```
//!
//! A unit is one file, named by its id: the run id of its one execution, or
//! a *batch* id (a unique id ending in [`BATCH_SUFFIX`]; run ids may not end
//! so, so a name says which it is). The shard level of 256 folders keeps
//! the creates of many workers apart on NFS and Lustre and any one folder
//! to a few hundred entries; the folders stay (`vacuum` removes old empty
//! ones), so staging and committing a unit creates and removes one file
//! and no folder. (On this project's ext4 disk, removing 2000 units staged
//! as a file each takes 22 ms; as a folder each below two shard levels,
//! 460–500 ms.)
//!
//! An older sluice staged a unit as a folder,
//! `{step}_{operation}/{id[0:2]}/{id[2:4]}/{id}/`; such folders are still
//! read, committed and removed ([`legacy_folder`]).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Longest accepted operation name or run id.
pub const MAX_NAME_LEN: usize = 128;

/// Shortest accepted run id (two shard levels of two characters).
pub const MIN_RUN_ID_LEN: usize = 4;

fn check_name(kind: &str, name: &str, min: usize) -> Result<()> {
    let reject =
        |why: &str| Err(Error::InvalidInput(format!("{kind} {name:?} is rejected: {why}")));
    if name.len() < min {
        return reject(&format!("shorter than {min} characters"));
    }
    if name.len() > MAX_NAME_LEN {
        return reject(&format!("longer than {MAX_NAME_LEN} characters"));
    }
    if name.contains("..") {
        return reject("contains `..`");
    }
    if name.starts_with('.') {
        return reject("starts with `.`");
    }
    if let Some(c) =
        name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return reject(&format!(
            "contains {c:?}; only ASCII letters, digits, `_`, `-` and `.` are allowed"
        ));
    }
    Ok(())
}

/// Check an operation name for use in a staging path.
pub fn validate_operation(name: &str) -> Result<()> {
    check_name("operation name", name, 1)
}

/// Check a name that becomes one path component (a role or file stem of a
/// `command` sandbox): the same rules as operation names.
pub fn validate_component(what: &str, name: &str) -> Result<()> {
    check_name(what, name, 1)
}

/// Check an execution run id for use in a staging path.
pub fn validate_run_id(run_id: &str) -> Result<()> {
    check_name("run id", run_id, MIN_RUN_ID_LEN)?;
    if is_batch_id(run_id) {
        return Err(Error::InvalidInput(format!(
            "run id {run_id:?} is rejected: names ending in `{BATCH_SUFFIX}` are batch directories"
        )));
    }
    Ok(())
}

/// The end of every batch directory's name.
pub const BATCH_SUFFIX: &str = ".batch";

/// Whether a staging directory name is a batch id (else it is a run id).
pub fn is_batch_id(name: &str) -> bool {
    name.ends_with(BATCH_SUFFIX)
}

/// A fresh batch id: 32 unique hex characters (they shard the directory)
/// and [`BATCH_SUFFIX`].
pub fn new_batch_id() -> String {
    format!("{}{BATCH_SUFFIX}", crate::host::unique_id())
}

/// Check the name of a staging directory: a run id or a batch id.
pub fn validate_dir_name(name: &str) -> Result<()> {
    match name.strip_suffix(BATCH_SUFFIX) {
        Some(id) => check_name("batch id", id, MIN_RUN_ID_LEN),
        None => validate_run_id(name),
    }
}

/// The step directory name: `{step}_{operation}`.
pub fn step_dir_name(step: i32, operation: &str) -> Result<String> {
    validate_operation(operation)?;
    if step < 0 {
        return Err(Error::InvalidInput(format!("step number {step} is negative")));
    }
    Ok(format!("{step}_{operation}"))
}

/// The end of a unit file's name.
pub const UNIT_SUFFIX: &str = ".sluice";

/// The unit `name` (a run id or a batch id) of a step, relative to the
/// staging area: `{step}_{op}/{name[0:2]}/{name}.sluice`, `/`-separated
/// (the same in a folder and in a store).
pub fn unit_relative(step: i32, operation: &str, name: &str) -> Result<String> {
    validate_dir_name(name)?;
    Ok(format!("{}/{}/{name}{UNIT_SUFFIX}", step_dir_name(step, operation)?, &name[0..2]))
}

/// The file of the unit `name` of a step below `staging_root`.
pub fn unit_file(staging_root: &Path, step: i32, operation: &str, name: &str) -> Result<PathBuf> {
    Ok(staging_root.join(unit_relative(step, operation, name)?))
}

/// The unit name of a unit file's name (`{name}.sluice`), if it is one.
pub fn unit_name_of(file_name: &str) -> Option<&str> {
    let name = file_name.strip_suffix(UNIT_SUFFIX)?;
    validate_dir_name(name).ok().map(|()| name)
}

/// The hidden name this process writes the unit `name` under before the
/// rename that seals it.
pub fn partial_name(name: &str) -> String {
    format!(".{name}{UNIT_SUFFIX}{}{}", PARTIAL_MARK, std::process::id())
}

/// What follows a unit file's name in a partial one's, before the writer's pid.
const PARTIAL_MARK: &str = ".tmp-";

/// The unit name of a partial unit file's name (a worker died before its
/// rename), if it is one.
pub fn partial_unit_of(file_name: &str) -> Option<&str> {
    let rest = file_name.strip_prefix('.')?;
    let (unit, _pid) = rest.rsplit_once(PARTIAL_MARK)?;
    unit_name_of(unit)
}

/// The folder an older sluice staged the unit `name` of a step in:
/// `{step}_{op}/{name[0:2]}/{name[2:4]}/{name}`.
pub fn legacy_folder(
    staging_root: &Path,
    step: i32,
    operation: &str,
    name: &str,
) -> Result<PathBuf> {
    validate_dir_name(name)?;
    Ok(staging_root
        .join(step_dir_name(step, operation)?)
        .join(&name[0..2])
        .join(&name[2..4])
        .join(name))
}

/// Whether `dir` is a real directory: not a symbolic link to one.
pub fn is_real_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// Whether no level of `path` below `root` (the staging root, which may
/// itself be a link the user made) is a symbolic link or a file: a step or
/// shard folder linking to another lake's staging must never make its runs
/// look like this lake's, nor be removed through. A level that does not
/// exist ends the check (nothing below it can be reached).
pub fn no_link_below(root: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(root) else { return false };
    let mut at = root.to_path_buf();
    for part in relative.components() {
        let std::path::Component::Normal(part) = part else { return false };
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) => return false,
        }
    }
    true
}

/// Parse a step directory name back into (step, operation).
pub fn parse_step_dir(name: &str) -> Option<(i32, &str)> {
    let (step, operation) = name.split_once('_')?;
    let step = step.parse().ok()?;
    validate_operation(operation).ok()?;
    Some((step, operation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_one_file_sharded_by_its_id() {
        let file = unit_file(Path::new("/s"), 3, "tool_b", "abcdef0123").unwrap();
        assert_eq!(file, Path::new("/s/3_tool_b/ab/abcdef0123.sluice"));
        assert_eq!(unit_name_of("abcdef0123.sluice"), Some("abcdef0123"));
        assert_eq!(unit_name_of("abcdef0123"), None);
        assert_eq!(unit_name_of(".abcdef0123.sluice"), None, "hidden names are never units");
        let partial = partial_name("abcdef0123");
        assert!(partial.starts_with(".abcdef0123.sluice.tmp-"), "{partial}");
        assert_eq!(partial_unit_of(&partial), Some("abcdef0123"));
        assert_eq!(partial_unit_of("abcdef0123.sluice"), None);
        let legacy = legacy_folder(Path::new("/s"), 3, "tool_b", "abcdef0123").unwrap();
        assert_eq!(legacy, Path::new("/s/3_tool_b/ab/cd/abcdef0123"));
        assert_eq!(parse_step_dir("3_tool_b"), Some((3, "tool_b")));
        assert_eq!(parse_step_dir("x_tool"), None);
    }

    #[test]
    fn path_tricks_are_rejected() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in ["..", "../x", "a/b", "a\0b", "", ".hidden", "a b", long.as_str()] {
            assert!(validate_operation(bad).is_err(), "operation {bad:?}");
            assert!(validate_run_id(bad).is_err(), "run id {bad:?}");
            assert!(unit_name_of(&format!("{bad}{UNIT_SUFFIX}")).is_none(), "unit {bad:?}");
        }
        assert!(validate_run_id("abc").is_err(), "too short to shard");
        assert!(unit_file(Path::new("/s"), -1, "op", "abcd").is_err());
        let err = validate_run_id("ab/../../etc").unwrap_err().to_string();
        assert!(err.contains("run id") && err.contains("rejected"), "{err}");
    }

    #[test]
    fn batch_ids_and_run_ids_never_share_a_name() {
        let batch = new_batch_id();
        assert!(is_batch_id(&batch) && validate_dir_name(&batch).is_ok());
        assert!(validate_run_id(&batch).is_err(), "a run id may not look like a batch");
        let file = unit_file(Path::new("/s"), 1, "op", &batch).unwrap();
        assert_eq!(file, Path::new("/s/1_op").join(&batch[0..2]).join(format!("{batch}.sluice")));
        assert_eq!(unit_name_of(&format!("{batch}.sluice")), Some(batch.as_str()));
        for bad in ["../x.batch", ".batch", "a/b.batch"] {
            assert!(validate_dir_name(bad).is_err(), "{bad:?}");
        }
    }
}
