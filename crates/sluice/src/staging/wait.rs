//! Waiting for workers' results on a shared filesystem.
//!
//! NFS caches directory entries and attributes, so a file another node
//! just created may be invisible here for a while, and `stat` may answer from
//! a stale cache. For every expected run the orchestrator therefore:
//!
//! 1. computes the run's unit file from its run id (no directory walk);
//! 2. lists every ancestor directory from the staging root down (a READDIR
//!    per level, which refreshes the client's directory cache);
//! 3. opens the unit file and reads one byte (open triggers close-to-open
//!    consistency; a `stat`/`exists` check would not);
//!
//! and polls the runs still missing with exponential backoff capped at 5 s,
//! until all are there or the timeout passes. On timeout it reports exactly
//! which runs are missing; what is there can still be committed.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::paths::unit_file;
use crate::error::Result;

/// How long and how often to poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitOptions {
    /// Give up after this long (default 10 minutes).
    pub timeout: Duration,
    /// First pause between polls (default 50 ms); doubled after each poll.
    pub initial_backoff: Duration,
    /// Longest pause between polls (default 5 s).
    pub max_backoff: Duration,
}

impl Default for WaitOptions {
    fn default() -> Self {
        WaitOptions {
            timeout: Duration::from_secs(600),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A run the orchestrator dispatched and expects results for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExpectedRun {
    /// Step number.
    pub step: i32,
    /// Operation name.
    pub operation: String,
    /// Execution run id.
    pub run_id: String,
}

/// What a wait found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitOutcome {
    /// Runs whose unit was read, with their unit files.
    pub ready: Vec<(ExpectedRun, PathBuf)>,
    /// Runs still without a readable unit when the wait ended.
    pub missing: Vec<ExpectedRun>,
    /// Number of polling rounds.
    pub polls: u32,
}

/// Whether the unit file `file` can be opened and read (one byte).
pub fn unit_readable(file: &Path) -> bool {
    let mut byte = [0u8; 1];
    std::fs::File::open(file).and_then(|mut f| f.read(&mut byte)).is_ok_and(|n| n == 1)
}

/// List every directory from `root` down to `file`'s folder, once per round.
fn refresh_ancestors(root: &Path, file: &Path, listed: &mut BTreeSet<PathBuf>) {
    let Some(relative) = file.parent().and_then(|dir| dir.strip_prefix(root).ok()) else {
        return;
    };
    let mut current = root.to_path_buf();
    let list = |p: &Path, listed: &mut BTreeSet<PathBuf>| {
        if listed.insert(p.to_path_buf())
            && let Ok(entries) = std::fs::read_dir(p)
        {
            entries.for_each(drop);
        }
    };
    list(&current, listed);
    for component in relative.components() {
        current.push(component);
        list(&current, listed);
    }
}

/// Wait for the units of `expected` runs under `staging_root`.
pub fn wait_for_runs(
    staging_root: &Path,
    expected: &[ExpectedRun],
    options: WaitOptions,
) -> Result<WaitOutcome> {
    let mut pending: Vec<(ExpectedRun, PathBuf)> = Vec::with_capacity(expected.len());
    for run in expected {
        pending
            .push((run.clone(), unit_file(staging_root, run.step, &run.operation, &run.run_id)?));
    }
    let start = Instant::now();
    let mut backoff = options.initial_backoff;
    let mut outcome = WaitOutcome::default();
    loop {
        outcome.polls += 1;
        let mut listed = BTreeSet::new();
        let mut still = Vec::with_capacity(pending.len());
        for (run, file) in pending {
            refresh_ancestors(staging_root, &file, &mut listed);
            if unit_readable(&file) {
                outcome.ready.push((run, file));
            } else {
                still.push((run, file));
            }
        }
        pending = still;
        let elapsed = start.elapsed();
        if pending.is_empty() || elapsed >= options.timeout {
            break;
        }
        std::thread::sleep(backoff.min(options.timeout - elapsed));
        backoff = (backoff * 2).min(options.max_backoff);
    }
    if !pending.is_empty() && !options.timeout.is_zero() {
        tracing::warn!(missing = pending.len(), "timed out waiting for staged results");
    }
    outcome.missing = pending.into_iter().map(|(run, _)| run).collect();
    Ok(outcome)
}

/// [`wait_for_runs`] in a staging area: in a store, each poll is one
/// listing of every step prefix the runs are staged under (no per-unit
/// request), and a unit is there when its one object is — a store lists
/// consistently, so no refresh is needed.
pub async fn wait_in_area(
    area: &super::StagingArea,
    expected: &[ExpectedRun],
    options: WaitOptions,
) -> Result<WaitOutcome> {
    let store = match area {
        super::StagingArea::Dir(root) => {
            let (root, expected) = (root.clone(), expected.to_vec());
            return tokio::task::spawn_blocking(move || wait_for_runs(&root, &expected, options))
                .await
                .map_err(|e| crate::error::Error::task("waiting for sentinels", e))?;
        }
        super::StagingArea::Store(store) => store,
    };
    let mut pending: Vec<(ExpectedRun, String)> = Vec::with_capacity(expected.len());
    for run in expected {
        pending.push((
            run.clone(),
            super::paths::unit_relative(run.step, &run.operation, &run.run_id)?,
        ));
    }
    let steps: BTreeSet<String> = pending
        .iter()
        .filter_map(|(_, object)| object.split('/').next().map(|s| format!("{s}/")))
        .collect();
    let start = Instant::now();
    let mut backoff = options.initial_backoff;
    let mut outcome = WaitOutcome::default();
    loop {
        outcome.polls += 1;
        let mut present = BTreeSet::new();
        for step in &steps {
            present.extend(store.list(step).await?);
        }
        let (ready, still): (Vec<_>, Vec<_>) =
            pending.into_iter().partition(|(_, object)| present.contains(object));
        outcome.ready.extend(ready.into_iter().map(|(run, object)| (run, area.shown(&object))));
        pending = still;
        let elapsed = start.elapsed();
        if pending.is_empty() || elapsed >= options.timeout {
            break;
        }
        tokio::time::sleep(backoff.min(options.timeout - elapsed)).await;
        backoff = (backoff * 2).min(options.max_backoff);
    }
    outcome.missing = pending.into_iter().map(|(run, _)| run).collect();
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> ExpectedRun {
        ExpectedRun { step: 1, operation: "op".into(), run_id: id.into() }
    }

    fn seal(root: &Path, id: &str) {
        put(root, id, b"SLUICE");
    }

    fn put(root: &Path, id: &str, bytes: &[u8]) {
        let file = unit_file(root, 1, "op", id).unwrap();
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, bytes).unwrap();
    }

    #[test]
    fn files_appearing_late_are_found() {
        let root = tempfile::tempdir().unwrap();
        seal(root.path(), "aaaa0001");
        let late_root = root.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            seal(&late_root, "bbbb0002");
        });
        let options = WaitOptions { timeout: Duration::from_secs(10), ..WaitOptions::default() };
        let outcome =
            wait_for_runs(root.path(), &[run("aaaa0001"), run("bbbb0002")], options).unwrap();
        writer.join().unwrap();
        assert!(outcome.missing.is_empty(), "{outcome:?}");
        assert_eq!(outcome.ready.len(), 2);
        assert!(outcome.polls >= 2, "the late run needed more than one poll: {outcome:?}");
    }

    #[test]
    fn timeout_lists_exactly_the_missing_runs() {
        let root = tempfile::tempdir().unwrap();
        seal(root.path(), "aaaa0001");
        // A partial unit (crashed worker) counts as missing, and so does an
        // empty unit file (a zero-byte read is not a result).
        let partial = unit_file(root.path(), 1, "op", "cccc0003").unwrap();
        std::fs::create_dir_all(partial.parent().unwrap()).unwrap();
        std::fs::write(partial.with_file_name(super::super::paths::partial_name("cccc0003")), b"x")
            .unwrap();
        put(root.path(), "dddd0004", b"");
        let options = WaitOptions {
            timeout: Duration::from_millis(400),
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
        };
        let expected = [run("aaaa0001"), run("bbbb0002"), run("cccc0003"), run("dddd0004")];
        let started = Instant::now();
        let outcome = wait_for_runs(root.path(), &expected, options).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(400));
        assert!(started.elapsed() < Duration::from_secs(3), "backoff respects the timeout");
        assert_eq!(outcome.missing, vec![run("bbbb0002"), run("cccc0003"), run("dddd0004")]);
        assert_eq!(outcome.ready.len(), 1);
    }

    #[test]
    fn backoff_is_capped() {
        let root = tempfile::tempdir().unwrap();
        let options = WaitOptions {
            timeout: Duration::from_millis(700),
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(40),
        };
        let outcome = wait_for_runs(root.path(), &[run("eeee0005")], options).unwrap();
        // 10+20+40+40+… ms: capped pauses mean many polls within 700 ms.
        assert!(outcome.polls >= 10, "{outcome:?}");
    }
}
