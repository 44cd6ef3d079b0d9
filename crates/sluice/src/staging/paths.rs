//! Where a worker's staging directory is, and names that may not escape it.
//!
//! ```text
//! staging_root/{step}_{operation}/{run_id[0:2]}/{run_id[2:4]}/{run_id}/
//! ```
//!
//! The two shard levels keep any one directory to at most a few hundred
//! entries even with millions of executions, which matters on NFS and Lustre.

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
    check_name("run id", run_id, MIN_RUN_ID_LEN)
}

/// The step directory name: `{step}_{operation}`.
pub fn step_dir_name(step: i32, operation: &str) -> Result<String> {
    validate_operation(operation)?;
    if step < 0 {
        return Err(Error::InvalidInput(format!("step number {step} is negative")));
    }
    Ok(format!("{step}_{operation}"))
}

/// The staging directory of one execution run.
pub fn run_dir(staging_root: &Path, step: i32, operation: &str, run_id: &str) -> Result<PathBuf> {
    validate_run_id(run_id)?;
    Ok(staging_root
        .join(step_dir_name(step, operation)?)
        .join(&run_id[0..2])
        .join(&run_id[2..4])
        .join(run_id))
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
    fn layout_is_sharded_by_run_id() {
        let dir = run_dir(Path::new("/s"), 3, "tool_b", "abcdef0123").unwrap();
        assert_eq!(dir, Path::new("/s/3_tool_b/ab/cd/abcdef0123"));
        assert_eq!(parse_step_dir("3_tool_b"), Some((3, "tool_b")));
        assert_eq!(parse_step_dir("x_tool"), None);
    }

    #[test]
    fn path_tricks_are_rejected() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in ["..", "../x", "a/b", "a\0b", "", ".hidden", "a b", long.as_str()] {
            assert!(validate_operation(bad).is_err(), "operation {bad:?}");
            assert!(validate_run_id(bad).is_err(), "run id {bad:?}");
        }
        assert!(validate_run_id("abc").is_err(), "too short to shard");
        assert!(run_dir(Path::new("/s"), -1, "op", "abcd").is_err());
        let err = validate_run_id("ab/../../etc").unwrap_err().to_string();
        assert!(err.contains("run id") && err.contains("rejected"), "{err}");
    }
}
