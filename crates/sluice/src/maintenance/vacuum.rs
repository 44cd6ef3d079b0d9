//! Vacuum: remove data files no version within the retention needs, and
//! sluice's own leftovers.
//!
//! Delta VACUUM deletes files that no table version newer than the retention
//! references: time travel to a version older than the retention is no
//! longer possible afterwards, and a reader still reading such a version
//! fails. The default retention is 168 hours (7 days); a shorter one is
//! refused unless forced, and the report says what it risks. `full` also
//! removes files no version ever referenced (left by a writer that died
//! before its commit). sluice's own leftovers under the same retention:
//! key filters whose files are all gone, SLURM task folders, units of
//! workers that died before sealing them, empty staging shard folders, and
//! kept files no `file_ref` references.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use deltalake::operations::vacuum::VacuumMode;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::lake::layout::STAGING_DIR;
use crate::lake::{Lake, delta::table};
use crate::lake::{keys::key_filter, keys::sidecar};
use crate::progress::Progress;
use crate::staging::StagingArea;
use crate::staging::paths::is_real_dir;
use crate::staging::scan::scan_area;

/// The default retention: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(168 * 3600);

/// What to vacuum.
#[derive(Debug, Clone)]
pub struct VacuumOptions {
    /// One table (default: every table).
    pub table: Option<String>,
    /// Files older than this that no newer version needs are removed.
    pub retention: Duration,
    /// Allow a retention shorter than the default.
    pub force: bool,
    /// Also remove files no version ever referenced.
    pub full: bool,
    /// Only list what would be removed.
    pub dry_run: bool,
    /// Told before each table.
    pub progress: Progress,
}

impl Default for VacuumOptions {
    fn default() -> Self {
        VacuumOptions {
            table: None,
            retention: DEFAULT_RETENTION,
            force: false,
            full: false,
            dry_run: false,
            progress: Progress::default(),
        }
    }
}

/// What vacuum removed (or would remove, in a dry run).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct VacuumReport {
    /// Whether nothing was removed.
    pub dry_run: bool,
    /// Data files, per table (relative to the table).
    pub files: Vec<(String, Vec<String>)>,
    /// Bytes of those data files.
    pub bytes: u64,
    /// sluice's own leftovers (paths relative to the lake).
    pub leftovers: Vec<String>,
    /// Wall time.
    pub seconds: f64,
}

/// Vacuum the lake.
pub async fn vacuum(lake: &Lake, options: &VacuumOptions) -> Result<VacuumReport> {
    if options.retention < DEFAULT_RETENTION && !options.force {
        return Err(Error::InvalidInput(format!(
            "a retention of {:.0}h is shorter than the default {}h: readers still reading older versions would fail, \
             and time travel before it becomes impossible. Help: pass --force to accept that",
            options.retention.as_secs_f64() / 3600.0,
            DEFAULT_RETENTION.as_secs() / 3600
        )));
    }
    let _writer = lake.writer(crate::lake::writer::WriteKind::Vacuum).begin().await?;
    let retention = chrono::Duration::from_std(options.retention)
        .map_err(|e| Error::InvalidInput(format!("retention: {e}")))?;
    let clock = std::time::Instant::now();
    let mut report = VacuumReport { dry_run: options.dry_run, ..VacuumReport::default() };
    let specs = super::select_tables(lake, options.table.as_deref()).await?;
    for (done, spec) in specs.iter().enumerate() {
        options.progress.report(done, specs.len(), &spec.name);
        if !options.dry_run {
            // Settle first (the writer protocol): a compaction killed before
            // undoing its race is undone while the files it replaced, which
            // the undo brings back, are still in storage.
            super::unfinished::finish_tables(lake, Some(&spec.name)).await?;
        }
        let handle = table::open(lake.root(), spec).await?;
        let run = |handle: deltalake::DeltaTable, dry_run: bool| {
            handle
                .vacuum()
                .with_retention_period(retention)
                .with_enforce_retention_duration(false)
                .with_mode(if options.full { VacuumMode::Full } else { VacuumMode::Lite })
                .with_dry_run(dry_run)
        };
        // The dry run lists the files while they can still be measured.
        let (handle, listed) = run(handle, true).await.map_err(|e| Error::delta(&spec.name, e))?;
        // Measured as storage answers; a file it cannot measure counts 0.
        let sizes: std::collections::BTreeMap<String, u64> =
            table::file_sizes(&handle, &listed.files_deleted)
                .await
                .into_iter()
                .filter_map(|(file, size)| Some((file, size.ok()?)))
                .collect();
        let mut files = if options.dry_run {
            listed.files_deleted
        } else {
            let (_, removed) = run(handle, false).await.map_err(|e| Error::delta(&spec.name, e))?;
            removed.files_deleted
        };
        report.bytes += files.iter().filter_map(|f| sizes.get(f)).sum::<u64>();
        files.sort();
        report.files.push((spec.name.clone(), files));
    }
    options.progress.finish(specs.len());
    report.leftovers = leftovers(lake, options).await?;
    // After the tables: what `file_refs` still holds in storage is what a
    // version within the retention may reference.
    let file_refs = lake.registry().descriptor(crate::artifact::FILE_REF)?.table_name();
    if options.table.as_deref().is_none_or(|t| t == file_refs) {
        report.leftovers.extend(
            super::unreferenced_files::collect(lake, options.retention, options.dry_run).await?,
        );
        report.leftovers.sort();
    }
    report.seconds = clock.elapsed().as_secs_f64();
    Ok(report)
}

fn older_than(path: &std::path::Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|a| a >= age)
}

/// Units of workers that died before sealing them, untouched for longer
/// than the retention: nothing will ever seal them (a worker writes a
/// unit's files and its sentinel within moments). Removed unless a dry
/// run; their places as the staging area shows them. (A unit in a store is
/// one object, put whole or not at all: none is ever left unsealed.)
async fn crashed_units(lake: &Lake, options: &VacuumOptions) -> Result<Vec<String>> {
    let area = StagingArea::of_lake(lake.root());
    let mut out = Vec::new();
    for unit in scan_area(&area, None).await?.unsealed {
        if !older_than(&unit.path, options.retention) {
            continue;
        }
        if !options.dry_run {
            crate::staging::area::remove_unit(&area, &unit).await?;
        }
        out.push(unit.path.display().to_string());
    }
    Ok(out)
}

/// Key filters (and key and result sets) whose files are all gone, SLURM
/// task folders, crashed workers' units and empty staging shards, older
/// than the retention; removed unless a dry run.
async fn leftovers(lake: &Lake, options: &VacuumOptions) -> Result<Vec<String>> {
    let crashed = match options.table {
        None => crashed_units(lake, options).await?,
        Some(_) => Vec::new(),
    };
    // The rest are a filesystem's: a lake in a store keeps its sidecars
    // beside its log and has no SLURM folders or staging shards.
    let Some(root) = lake.root().local() else { return Ok(crashed) };
    let mut found = Vec::new();
    for spec in super::select_tables(lake, options.table.as_deref()).await? {
        let dir = table::table_dir(root, &spec);
        let keys = dir.join(key_filter::KEYS_DIR);
        let Ok(entries) = std::fs::read_dir(&keys) else { continue };
        let handle = table::open(lake.root(), &spec).await?;
        let active: std::collections::BTreeSet<String> =
            table::active_files(&handle, &spec)?.into_iter().collect();
        // The data files a sidecar file describes: a bundle's filters name
        // them; a single key or result set goes with its version's single
        // key filter (same name, `.keys`) or, beside a bundle (repair adds
        // one there), with the bundle.
        let bundle_files = |path: &std::path::Path| {
            sidecar::first_filter(path)
                .and_then(|span| span.read())
                .and_then(|b| key_filter::files_of(&b))
        };
        let files_named = |path: &std::path::Path| -> Option<Vec<String>> {
            let single = |path: &std::path::Path| {
                std::fs::read(path).ok().and_then(|b| key_filter::files_of(&b))
            };
            match path.extension().and_then(|e| e.to_str()) {
                Some("side") => bundle_files(path),
                Some("set" | "results") => single(&path.with_extension("keys"))
                    .or_else(|| bundle_files(&path.with_extension("side"))),
                _ => single(path),
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name() == key_filter::RETIRED_DIR {
                // Compaction moved these there: they cover nothing live.
                for retired in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                    if older_than(&retired.path(), options.retention) {
                        found.push(retired.path());
                    }
                }
                continue;
            }
            let stale =
                files_named(&path).is_none_or(|files| files.iter().all(|f| !active.contains(f)));
            if stale && older_than(&path, options.retention) {
                found.push(path);
            }
        }
    }
    if options.table.is_none() {
        for entry in std::fs::read_dir(root.join("_slurm")).into_iter().flatten().flatten() {
            if older_than(&entry.path(), options.retention) {
                found.push(entry.path());
            }
        }
    }
    let shards = match options.table {
        None => empty_staging_shards(&root.join(STAGING_DIR), options.retention),
        Some(_) => Vec::new(),
    };
    let mut out = Vec::new();
    let all = found.into_iter().map(|p| (p, false)).chain(shards.into_iter().map(|p| (p, true)));
    for (path, shard) in all {
        if !options.dry_run && !remove_leftover(&path, shard)? {
            continue;
        }
        out.push(path.strip_prefix(root).unwrap_or(&path).display().to_string());
    }
    out.extend(crashed.into_iter().map(|path| {
        let path = PathBuf::from(path);
        path.strip_prefix(root).unwrap_or(&path).display().to_string()
    }));
    out.sort();
    Ok(out)
}

/// Staging shard folders that held nothing when looked at, older than the
/// retention. Only real folders are entered: a link is never followed.
fn empty_staging_shards(staging: &Path, retention: Duration) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let real_dirs = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| is_real_dir(p))
            .collect()
    };
    for step in real_dirs(staging) {
        if step.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
            continue;
        }
        let empty = |dir: &Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        for shard in real_dirs(&step) {
            // An older sluice's second shard level first: emptied, it
            // leaves its first level empty too, for a later vacuum.
            for inner in real_dirs(&shard) {
                if empty(&inner) && older_than(&inner, retention) {
                    found.push(inner);
                }
            }
            if empty(&shard) && older_than(&shard, retention) {
                found.push(shard);
            }
        }
    }
    found
}

/// Remove one leftover; whether it was removed. A staging shard (`shard`)
/// is removed with `remove_dir`, which fails on a folder no longer empty:
/// workers take no lock, and one may have staged a run there since it was
/// judged empty. Other folders (SLURM task folders) are removed whole.
fn remove_leftover(path: &Path, staging_shard: bool) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(path, e)),
    };
    let removed = match (meta.is_dir(), staging_shard) {
        (true, true) => std::fs::remove_dir(path),
        (true, false) => std::fs::remove_dir_all(path),
        (false, _) => std::fs::remove_file(path),
    };
    match removed {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) if staging_shard && e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
            tracing::debug!(path = %path.display(), "a staging shard filled since it was judged empty; kept");
            Ok(false)
        }
        Err(e) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod leftover_tests {
    use super::*;

    #[test]
    fn a_staging_shard_filled_after_it_was_judged_empty_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join(STAGING_DIR);
        let shard = staging.join("1_op/ab");
        std::fs::create_dir_all(&shard).unwrap();
        let judged = empty_staging_shards(&staging, Duration::ZERO);
        assert_eq!(judged, vec![shard.clone()]);
        // A worker (no lock) stages a unit there before the removal.
        let unit = shard.join("abcdef0123.sluice");
        std::fs::write(&unit, b"staged").unwrap();
        assert!(!remove_leftover(&shard, true).unwrap());
        assert!(unit.is_file(), "the staged unit was removed");
        // Empty, it goes.
        std::fs::remove_file(&unit).unwrap();
        assert!(remove_leftover(&shard, true).unwrap());
        assert!(!shard.exists());
    }

    #[test]
    fn an_older_sluices_empty_second_shard_level_goes_first() {
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join(STAGING_DIR);
        let inner = staging.join("1_op/ab/cd");
        std::fs::create_dir_all(&inner).unwrap();
        assert_eq!(empty_staging_shards(&staging, Duration::ZERO), vec![inner.clone()]);
        assert!(remove_leftover(&inner, true).unwrap());
        assert_eq!(empty_staging_shards(&staging, Duration::ZERO), vec![staging.join("1_op/ab")]);
    }

    #[test]
    fn a_linked_staging_folder_is_not_entered() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("other-lake/_staging/1_op/ab/cd");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let staging = dir.path().join("lake").join(STAGING_DIR);
        std::fs::create_dir_all(&staging).unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("other-lake/_staging/1_op"),
            staging.join("1_op"),
        )
        .unwrap();
        assert!(empty_staging_shards(&staging, Duration::ZERO).is_empty());
    }
}
