//! The writer protocol, tried where operations meet: a put after a killed
//! restore, a restore whose files vacuum removed, staging folders that link
//! elsewhere, a journal that cannot be read. Each test is the repro of a
//! way the lake once lost an acknowledged write or wedged.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::crash::{TABLES, dump, new_lake, spawn_quiet, stage_mixed};
use crate::{Lake, types_at};

/// A lake with three lake versions (commits of every kind of artifact).
fn three_versions() -> Lake {
    let lake = new_lake();
    let files = lake.root.join("referenced-files");
    for (step, seed) in [(1, 42), (2, 43), (3, 44)] {
        stage_mixed(&lake, &files, 30, 1, 0.0, seed, step, 1);
        lake.ok(&["commit"]);
    }
    lake
}

fn journal_versions(root: &Path) -> usize {
    std::fs::read_dir(root.join("orchestration/commits/_delta_log"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().strip_suffix(".json").is_some_and(|v| v.parse::<u64>().is_ok())
        })
        .count()
}

fn journal(root: &Path) -> sluice::lake::journal::Journal {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(sluice::lake::journal::read(&root.into(), None)).unwrap()
}

fn count(lake: &Lake, sql: &str) -> i64 {
    let rows = crate::json_lines(&lake.ok(&["sql", "--format", "ndjson", sql]));
    rows[0].as_object().unwrap().values().next().unwrap().as_i64().unwrap()
}

/// Start `sluice restore --to VERSION` pausing `pause` before each table;
/// returns once its `started` row is journaled.
fn spawn_restore(lake: &Lake, to: u32, pause: Duration) -> std::process::Child {
    let before = journal_versions(&lake.root);
    let mut command = lake.command(&["restore", "--to", &to.to_string()]);
    command.env("SLUICE_RESTORE_PAUSE_MS", pause.as_millis().to_string());
    let mut child = spawn_quiet(&mut command);
    let deadline = Instant::now() + Duration::from_secs(120);
    while journal_versions(&lake.root) == before {
        assert!(child.try_wait().unwrap().is_none(), "the restore exited before journaling");
        assert!(Instant::now() < deadline, "the restore never journaled");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// SIGKILL a restore started `started` ago by [`spawn_restore`] once
/// `tables_done` pauses have passed.
fn kill_restore_after(
    mut child: std::process::Child,
    started: Instant,
    pause: Duration,
    tables_done: u32,
) {
    let kill_at = started + pause * tables_done + pause / 2;
    std::thread::sleep(kill_at.saturating_duration_since(Instant::now()));
    assert!(child.try_wait().unwrap().is_none(), "the restore finished before the kill");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Start `sluice restore --to 1` pausing `pause` before each table, wait
/// until its `started` row is journaled and `tables_done` pauses have
/// passed, then SIGKILL it.
fn kill_restore_midway(lake: &Lake, pause: Duration, tables_done: u32) {
    let child = spawn_restore(lake, 1, pause);
    kill_restore_after(child, Instant::now(), pause, tables_done);
}

#[test]
fn a_put_after_a_killed_restore_is_never_lost() {
    let lake = three_versions();
    kill_restore_midway(&lake, Duration::from_millis(1500), 2);
    let open = journal(&lake.root);
    assert!(
        open.unfinished().iter().any(|e| e.is_restore()),
        "the kill must leave the restore unfinished"
    );
    // The put settles the restore first (its restorer is gone), then writes.
    let id = lake.ok(&["put", "--type", "metric", r#"{"x": 1}"#]).trim().to_owned();
    assert_eq!(id.len(), 32, "{id}");
    let after = journal(&lake.root);
    assert!(after.unfinished().is_empty(), "the put left the restore unfinished");
    lake.ok(&["recover"]);
    let shown = lake.ok(&["show", &id]);
    assert!(shown.contains("\"x\": 1"), "{shown}");
    assert_eq!(count(&lake, &format!("SELECT count(*) FROM index WHERE artifact_id = '{id}'")), 1);
    assert_eq!(
        count(&lake, &format!("SELECT count(*) FROM metrics WHERE artifact_id = '{id}'")),
        1
    );
    // The restore itself was carried out whole: as of lake version 1, plus the put.
    let executions = count(&lake, "SELECT count(*) FROM executions");
    let at_one = crate::json_lines(&lake.ok(&[
        "sql",
        "--format",
        "json",
        "--as-of",
        "1",
        "SELECT count(*) AS n FROM executions",
    ]))[0]["n"]
        .as_i64()
        .unwrap();
    assert_eq!(executions, at_one);
    assert_eq!(dump(&lake.root).1, 0, "duplicate keys");
}

/// Data files of a table's folder (recursively), relative to it.
fn data_files(table: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![table.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() && !name.starts_with('_') {
                todo.push(path);
            } else if name.ends_with(".parquet") {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn a_restore_to_vacuumed_files_is_refused_and_the_lake_stays_writable() {
    let lake = three_versions();
    lake.ok(&["compact", "--table", "executions"]);
    lake.ok(&["vacuum", "--retention-hours", "0", "--force"]);
    let before = dump(&lake.root);
    let err = lake.fails(&["restore", "--to", "1"]);
    assert!(
        err.contains("executions")
            && err.contains("gone from storage")
            && err.contains("Nothing was changed"),
        "{err}"
    );
    assert!(journal(&lake.root).unfinished().is_empty(), "nothing may be journaled");
    assert_eq!(dump(&lake.root), before, "a refused restore changes nothing");
    // The lake stays writable: a commit, a recover and a doctor all succeed.
    let files = lake.root.join("referenced-files");
    stage_mixed(&lake, &files, 10, 1, 0.0, 99, 4, 1);
    lake.ok(&["commit"]);
    lake.ok(&["recover"]);
    let doctor = lake.ok(&["doctor"]);
    assert!(doctor.contains("clean"), "{doctor}");
    // A restore to a version whose files are still there works.
    lake.ok(&["restore", "--to", "4"]);
}

#[test]
fn a_restore_whose_files_vanish_midway_is_rolled_back_not_wedged() {
    let lake = three_versions();
    lake.ok(&["compact", "--table", "executions"]);
    let before = dump(&lake.root);
    // The compacted-away files of `executions` are what a restore to 1
    // brings back; they vanish while the restore pauses before its first
    // table (a vacuum on a host that shares no lock, a hand-run `rm`).
    let live: Vec<PathBuf> = data_files(&lake.root.join("orchestration/executions"));
    let mut command = lake.command(&["restore", "--to", "1"]);
    command.env("SLUICE_RESTORE_PAUSE_MS", "1500");
    let child = command.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let journaled = journal_versions(&lake.root);
    while journal_versions(&lake.root) == journaled {
        assert!(Instant::now() < deadline, "the restore never journaled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let compacted_to = compacted_output(&lake.root.join("orchestration/executions"));
    for file in live.iter().filter(|f| !compacted_to.contains(f)) {
        std::fs::remove_file(file).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the restore cannot succeed without its files");
    assert!(stderr.contains("rolled back"), "{stderr}");
    let journal = journal(&lake.root);
    assert!(journal.unfinished().is_empty(), "the restore must be closed, not left open");
    // Every table is as before the restore (the rows; versions moved on).
    let now = dump(&lake.root);
    for (i, (table, _)) in TABLES.iter().enumerate() {
        assert!(now.0[i] == before.0[i], "`{table}` differs from before the restore");
    }
    let files = lake.root.join("referenced-files");
    stage_mixed(&lake, &files, 10, 1, 0.0, 99, 4, 1);
    lake.ok(&["commit"]);
    // The journal says what happened, and the restore is no lake version.
    let abandoned: Vec<_> = journal
        .entries()
        .iter()
        .filter(|e| e.is_restore() || e.phase() == sluice::lake::journal::Phase::Abandoned)
        .filter(|e| e.phase() == sluice::lake::journal::Phase::Abandoned)
        .collect();
    assert_eq!(abandoned.len(), 1, "{:?}", journal.entries());
    let why = abandoned[0].reason.clone().unwrap_or_default();
    assert!(why.contains("returned to its version before"), "{why}");
    let history = lake.ok(&["history", "--json"]);
    assert!(!history.contains("restore to"), "{history}");
}

/// The data files the last (compaction) commit of a table added.
fn compacted_output(table: &Path) -> Vec<PathBuf> {
    let log = table.join("_delta_log");
    let last = std::fs::read_dir(&log)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json").and_then(|v| v.parse::<u64>().ok())
        })
        .filter(|v| {
            let text = std::fs::read_to_string(log.join(format!("{v:020}.json"))).unwrap();
            text.contains("OPTIMIZE")
        })
        .max()
        .expect("a compaction commit");
    let text = std::fs::read_to_string(log.join(format!("{last:020}.json"))).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["add"]["path"].as_str().map(|p| table.join(p)))
        .collect()
}

#[test]
fn staging_folders_that_link_to_another_lake_are_never_followed() {
    let ours = new_lake();
    let theirs = new_lake();
    let files = theirs.root.join("referenced-files");
    stage_mixed(&theirs, &files, 5, 1, 0.0, 7, 1, 1);
    let their_staging = theirs.root.join("_staging");
    let step_dir = std::fs::read_dir(&their_staging)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .unwrap();
    let step_name = step_dir.file_name().unwrap().to_owned();
    let shard = std::fs::read_dir(&step_dir).unwrap().next().unwrap().unwrap().path();
    // A step folder that is a link, and a shard folder that is a link.
    let our_staging = ours.root.join("_staging");
    std::fs::create_dir_all(&our_staging).unwrap();
    std::os::unix::fs::symlink(&step_dir, our_staging.join(&step_name)).unwrap();
    let real_step = our_staging.join("2_generate_data");
    std::fs::create_dir_all(&real_step).unwrap();
    std::os::unix::fs::symlink(&shard, real_step.join(shard.file_name().unwrap())).unwrap();
    let staged_before = data_files(&their_staging).len();
    ours.ok(&["commit"]);
    ours.ok(&["recover"]);
    assert_eq!(
        count(&ours, "SELECT count(*) FROM executions"),
        0,
        "their runs committed into ours"
    );
    assert_eq!(data_files(&their_staging).len(), staged_before, "their staging was touched");
    let doctor = ours.doctor(&[]);
    assert!(doctor.to_string().contains(&step_name.to_string_lossy().into_owned()), "{doctor}");
    // Their lake commits its own staging as ever.
    theirs.ok(&["commit"]);
    assert_eq!(count(&theirs, "SELECT count(*) FROM executions"), 5);
}

#[test]
fn a_damaged_journal_is_rebuilt_from_the_tables() {
    let lake = three_versions();
    let expected = count(&lake, "SELECT count(*) FROM executions");
    let journal_dir = lake.root.join("orchestration/commits");
    let victim = data_files(&journal_dir).into_iter().next().unwrap();
    std::fs::write(&victim, b"not parquet at all").unwrap();
    let repaired = lake.ok(&["doctor", "--repair"]);
    assert!(repaired.contains("could not be read") && repaired.contains("rebuilt"), "{repaired}");
    assert_eq!(count(&lake, "SELECT count(*) FROM executions"), expected);
    let history: serde_json::Value =
        serde_json::from_str(&lake.ok(&["history", "--json"])).unwrap();
    assert_eq!(history.as_array().unwrap().len(), 3, "{history}");
    // The lake is writable again and the journal consistent.
    let files = lake.root.join("referenced-files");
    stage_mixed(&lake, &files, 10, 1, 0.0, 99, 4, 1);
    lake.ok(&["commit"]);
    crate::crash::check_journal(&lake.root, 0);
    // The damaged journal was kept, not deleted.
    let kept = std::fs::read_dir(lake.root.join("orchestration"))
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().starts_with("_commits.unreadable-"));
    assert!(kept);
}

/// A pipeline whose middle step keeps two orchestrators' workers busy at
/// the same time, so both run (and commit) the same units.
const TWIN_PIPELINE: &str = r#"name = "twins"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 6, rows = 5 }

[[step]]
name = "work"
operation = "command"
command = ["sh", "-c", 'sleep 0.4; for f in inputs/t/*; do cp "$f" outputs/t/; done']
inputs = { t = "gen.data" }
outputs = { t = "data" }

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "work.t" }
"#;

/// Run two orchestrators of one pipeline at once; both must succeed.
fn run_twins(lake: &Lake, pipeline: &Path, unlocked: bool, trial: u32) {
    let children: Vec<_> = (0..2)
        .map(|_| {
            let mut command = lake.command(&["run", pipeline.to_str().unwrap(), "--workers", "2"]);
            if unlocked {
                command.env("SLUICE_UNSAFE_NO_LOCK", "1");
            }
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            command.spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "trial {trial} (unlocked: {unlocked}): an orchestrator failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn two_orchestrators_without_a_shared_lock_make_each_spec_succeed_once() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = dir.path().join("p.toml");
    std::fs::write(&pipeline, TWIN_PIPELINE).unwrap();
    let alone = Lake::new();
    alone.ok(&["init"]);
    alone.ok(&["run", pipeline.to_str().unwrap()]);
    let units = count(&alone, "SELECT count(*) FROM executions WHERE success");
    for trial in 0..4 {
        let unlocked = trial < 3;
        let lake = new_lake();
        run_twins(&lake, &pipeline, unlocked, trial);
        let twice = count(
            &lake,
            "SELECT count(*) FROM (SELECT execution_spec_id FROM executions WHERE success \
             GROUP BY execution_spec_id HAVING count(*) > 1)",
        );
        assert_eq!(twice, 0, "trial {trial}: a spec succeeded twice");
        // Every unit succeeded, once, as in a run alone.
        let specs =
            count(&lake, "SELECT count(DISTINCT execution_spec_id) FROM executions WHERE success");
        assert_eq!(specs, units, "trial {trial}");
        // A run committed second is recorded as what it was, not lost.
        let superseded = count(
            &lake,
            "SELECT count(*) FROM executions WHERE NOT success AND error LIKE 'superseded:%'",
        );
        let failed = count(&lake, "SELECT count(*) FROM executions WHERE NOT success");
        eprintln!("trial {trial} (unlocked: {unlocked}): {superseded} runs committed superseded");
        assert_eq!(failed, superseded, "trial {trial}: only superseded runs may be unsuccessful");
        assert_eq!(dump(&lake.root).1, 0, "trial {trial}: duplicate keys");
        // A rerun finds every unit cached.
        let rerun = lake.ok(&["run", pipeline.to_str().unwrap(), "--json"]);
        assert!(!rerun.contains("\"failed\": 1"), "{rerun}");
    }
}

/// Two compactions of the same tables at once, on hosts that share no lock:
/// delta-rs commits the second OPTIMIZE on top of the first (its conflict
/// checker ignores removes without a data change), which kept both copies
/// of the rows; the compaction that met the other is now undone exactly.
#[test]
fn two_compactions_without_a_lock_never_duplicate_rows() {
    let lake = new_lake();
    let files = lake.root.join("referenced-files");
    let rounds: u64 = crate::depth("SLUICE_RACE_ROUNDS", 12, 4);
    for round in 0..rounds {
        stage_mixed(&lake, &files, 6, 1, 0.0, 500 + round, 1 + (round % 2) as i32, 1);
        lake.ok(&["commit"]);
        let racers: Vec<_> = (0..2)
            .map(|_| {
                lake.command(&["compact"])
                    .env("SLUICE_UNSAFE_NO_LOCK", "1")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        crate::wait_all_succeed(racers, round);
        let (_, duplicates) = dump(&lake.root);
        assert_eq!(duplicates, 0, "round {round}: duplicate keys after racing compactions");
        crate::crash::check_journal(&lake.root, round);
    }
    assert_eq!(count(&lake, "SELECT count(*) FROM executions"), 6 * rounds as i64);
}

/// A declared type holding one large text value: staged zstd, a run of
/// zeros is a few KiB on disk and tens of MiB decoded.
const BLOB_TYPE: &str = r#"
[[artifact_type]]
key = "blob"
table = "artifacts/blobs"
columns = [ { name = "payload", type = "string" } ]
"#;

/// Stage `runs` executions, each with one blob of `mib` MiB of zeros.
fn stage_blobs(root: &Path, runs: usize, mib: usize, seed: usize) {
    use sluice::records::{Direction, ExecutionEdge, ExecutionRecord};
    let registry = types_at(root);
    let writer = sluice::staging::StagingWriter::new(
        sluice::staging::default_root(root),
        registry.clone(),
        sluice::staging::SyncPolicy::Never,
    );
    for i in 0..runs {
        let mut payload = "0".repeat(mib << 20);
        payload.push_str(&format!("{seed}-{i}"));
        let artifact = sluice::Draft::new("blob", Default::default())
            .with_field("payload", sluice::artifact::value::FieldValue::String(payload))
            .with_step(1)
            .finalize(&registry)
            .unwrap();
        let run_id = format!("{:04x}{:08x}", seed, i);
        let staged = sluice::staging::StagedExecution {
            execution: ExecutionRecord {
                execution_run_id: run_id.clone(),
                execution_spec_id: format!("spec-{run_id}"),
                step_run_id: "blobs".into(),
                origin_step_number: 1,
                operation_name: "blob".into(),
                params: "{}".into(),
                timestamp_start: 1_700_000_000_000_000,
                timestamp_end: Some(1_700_000_000_500_000),
                worker_id: None,
                compute_backend: Some("local".into()),
                success: true,
                error: None,
                tool_output: None,
                metadata: "{}".into(),
            },
            execution_edges: vec![ExecutionEdge {
                execution_run_id: run_id,
                direction: Direction::Output,
                role: "blob".into(),
                artifact_id: artifact.id.to_hex(),
            }],
            artifact_edges: Vec::new(),
            artifacts: vec![artifact],
        };
        writer.write(&staged).unwrap();
    }
}

/// Peak RSS (MiB) of `sluice <args>`, which must succeed; and its stdout.
fn peak_of(lake: &Lake, args: &[&str], env: &[(&str, &str)]) -> (f64, String) {
    let mut command = lake.command(args);
    command.env("SLUICE_REPORT_PEAK_RSS", "1");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice {args:?}: {stderr}");
    let peak = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak RSS MiB: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS: {stderr}"));
    (peak, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn blob_lake() -> Lake {
    let lake = Lake::new();
    std::fs::create_dir_all(&lake.root).unwrap();
    std::fs::write(lake.root.join("sluice.toml"), BLOB_TYPE).unwrap();
    lake.ok(&["init"]);
    lake
}

/// Runs of compressible data (each a few KiB staged, 40 MiB decoded): a
/// commit cut by staged size loads them all at once; cut by decoded size
/// it holds about one. Measured against the unbounded commit of the same
/// staging in the same test, and so is `recover` of an interrupted
/// sequence whose runs do not fit: it is closed and its runs committed in
/// sequences that do.
#[test]
fn commit_and_recover_memory_follows_decoded_size_not_staged_size() {
    let (runs, mib) = (12, 20);
    let unbounded = blob_lake();
    stage_blobs(&unbounded.root, runs, mib, 1);
    let staged: u64 = sluice::staging::scan(&unbounded.root.join("_staging"), None)
        .unwrap()
        .sealed
        .iter()
        .map(|run| run.object_path().metadata().unwrap().len())
        .sum();
    assert!(staged < (runs as u64) << 20, "the staging is small: {staged} bytes");
    let (all_at_once, _) =
        peak_of(&unbounded, &["commit", "--memory-mib", "100000", "--json"], &[]);
    // The process's own footprint: the same commit of runs with tiny blobs.
    let tiny = blob_lake();
    stage_blobs(&tiny.root, runs, 0, 1);
    let (base, _) = peak_of(&tiny, &["commit", "--memory-mib", "100000", "--json"], &[]);
    let grown = |peak: f64| peak - base;

    let bounded = blob_lake();
    stage_blobs(&bounded.root, runs, mib, 1);
    let (peak, report) = peak_of(&bounded, &["commit", "--memory-mib", "16", "--json"], &[]);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    // At most one run per loading thread past the bound (≤ 8 threads).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    let sequences = report["sequences"].as_array().unwrap().len();
    assert!(sequences >= runs.div_ceil(threads), "{report}");
    eprintln!(
        "commit of {runs} x {mib} MiB decoded: peak {peak:.0} MiB bounded ({sequences} sequences), {all_at_once:.0} MiB at once, {base:.0} MiB with tiny runs"
    );
    // What the bound controls is how many decoded runs a sequence holds;
    // each run's own processing (copies while validating, conforming and
    // writing) still costs several times its decoded size (measured here:
    // ~300 MiB of growth for two 20 MiB runs), which no chunking removes.
    assert!(
        grown(peak) < 0.85 * grown(all_at_once),
        "bounded {peak:.0} MiB vs {all_at_once:.0} MiB at once (base {base:.0} MiB)"
    );
    assert_eq!(count(&bounded, "SELECT count(*) FROM blobs"), runs as i64);
    assert_eq!(dump_blobs(&bounded), dump_blobs(&unbounded));

    // An interrupted sequence claimed all runs at once (as an older sluice,
    // or a larger bound, would have): recover closes it and commits them
    // within the bound.
    let interrupted = blob_lake();
    stage_blobs(&interrupted.root, runs, mib, 1);
    let out = interrupted
        .command(&["commit", "--memory-mib", "100000"])
        .env("SLUICE_FAILPOINT", "commit:blobs")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let (recovered, report) =
        peak_of(&interrupted, &["recover", "--memory-mib", "16", "--json"], &[]);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["abandoned_sequences"].as_array().unwrap().len(), 1, "{report}");
    eprintln!("recover of the same: peak {recovered:.0} MiB");
    assert!(
        grown(recovered) < 0.85 * grown(all_at_once),
        "recover {recovered:.0} MiB vs {all_at_once:.0} MiB at once (base {base:.0} MiB)"
    );
    assert_eq!(dump_blobs(&interrupted), dump_blobs(&unbounded));
    crate::crash::check_journal(&interrupted.root, 0);
}

fn dump_blobs(lake: &Lake) -> String {
    lake.ok(&[
        "sql",
        "--format",
        "csv",
        "SELECT artifact_id, length(payload) FROM blobs ORDER BY 1",
    ])
}

/// Under a real memory limit (a cgroup of its own, as SLURM's `--mem` gives
/// a job), a commit that holds every compressible run at once (20 MiB
/// decoded each, a few KiB staged) is killed by the kernel; `recover` with
/// the default bound — an eighth of the limit, read from the cgroup — then
/// commits every run within it, and the lake is exact and writable.
#[test]
fn under_a_memory_limit_the_default_bound_commits_what_all_at_once_cannot() {
    use std::os::unix::process::ExitStatusExt;
    let (limit_mib, runs, mib) = (450, 24, 20);
    let test = "under_a_memory_limit_the_default_bound_commits_what_all_at_once_cannot";
    let Some(group) = crate::memory_cgroup::memory_cgroup_or_skip(limit_mib, test) else {
        return;
    };
    let lake = blob_lake();
    stage_blobs(&lake.root, runs, mib, 1);
    let out = group.output(&lake.command(&["commit", "--memory-mib", "100000"]));
    assert_eq!(
        out.status.signal(),
        Some(9),
        "all {runs} runs at once fit in {limit_mib} MiB after all: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    group.reset_peak();
    let out = group.output(&lake.command(&["recover", "--json"]));
    assert!(
        out.status.success(),
        "recover under the limit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["runs_committed"], runs, "{report}");
    assert!(report["sequences"].as_array().unwrap().len() >= 4, "{report}");
    eprintln!("peak charge of the group: {:?}", group.peak_mib());
    let bytes = runs as i64 * (mib << 20) as i64
        + (0..runs).map(|i| format!("1-{i}").len() as i64).sum::<i64>();
    assert_eq!(count(&lake, "SELECT count(*) FROM blobs"), runs as i64);
    assert_eq!(count(&lake, "SELECT sum(length(payload)) FROM blobs"), bytes);
    crate::crash::check_journal(&lake.root, 0);
    lake.ok(&["put", "--type", "metric", "{\"x\": 1}"]);
}

/// A single run whose commit needs more memory than the process may use
/// (60 MiB of compressible text, a few KiB staged, under a 300 MiB
/// cgroup) was loaded anyway and killed on every `recover`, wedging the
/// staging. Its size is read from its files' footers before it is loaded:
/// it is quarantined with the reason, the runs beside it are committed, the
/// lake stays writable under the limit, and `recover --requeue` on a node
/// with room commits it whole.
#[test]
fn a_run_too_large_for_the_memory_limit_is_quarantined_and_committed_where_it_fits() {
    let (limit_mib, mib) = (300, 60);
    let test = "a_run_too_large_for_the_memory_limit_is_quarantined_and_committed_where_it_fits";
    let Some(group) = crate::memory_cgroup::memory_cgroup_or_skip(limit_mib, test) else {
        return;
    };
    let lake = blob_lake();
    stage_blobs(&lake.root, 1, mib, 1);
    stage_blobs(&lake.root, 3, 1, 2);
    let out = group.output(&lake.command(&["recover", "--json"]));
    assert!(
        out.status.success(),
        "recover under the limit ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["runs_committed"], 3, "{report}");
    let quarantined = report["quarantined"].as_array().unwrap();
    assert_eq!(quarantined.len(), 1, "{report}");
    let reason = quarantined[0]["reason"].as_str().unwrap();
    let decoded: f64 = reason
        .strip_prefix("its staged rows decode to about ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{reason}"));
    assert!(
        (mib as f64..mib as f64 + 1.0).contains(&decoded)
            && reason.contains(&format!("more than this process's memory limit ({limit_mib} MiB"))
            && reason.contains("sluice recover --requeue"),
        "{reason}"
    );
    assert_eq!(count(&lake, "SELECT count(*) FROM blobs"), 3);
    let put = group.output(&lake.command(&["put", "--type", "metric", "{\"x\": 1}"]));
    assert!(put.status.success(), "the lake stays writable under the limit");

    let requeued = lake.ok(&["recover", "--requeue", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&requeued).unwrap();
    assert_eq!(report["requeued"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["runs_committed"], 1, "{report}");
    assert_eq!(report["quarantined"].as_array().unwrap().len(), 0, "{report}");
    let bytes = (mib << 20) as i64 + "1-0".len() as i64 + 3 * ((1 << 20) + "2-0".len() as i64);
    assert_eq!(count(&lake, "SELECT count(*) FROM blobs"), 4);
    assert_eq!(count(&lake, "SELECT sum(length(payload)) FROM blobs"), bytes);
    crate::crash::check_journal(&lake.root, 0);
    let doctor = lake.doctor(&[]);
    assert_eq!(doctor["quarantined"].as_array().map(Vec::len), Some(0), "{doctor}");
}

/// Log entries of a table folder.
fn log_versions(table: &Path) -> usize {
    std::fs::read_dir(table.join("_delta_log"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.strip_suffix(".json").is_some_and(|v| v.parse::<u64>().is_ok())
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_put_killed_between_its_content_and_index_commits_is_made_whole_by_recover() {
    let lake = new_lake();
    lake.ok(&["put", "--type", "metric", r#"{"first": 1}"#]);
    let metrics = lake.root.join("artifacts/metrics");
    let unindexed = "SELECT count(*) FROM metrics m WHERE NOT EXISTS \
                     (SELECT 1 FROM index i WHERE i.artifact_id = m.artifact_id)";
    let mut hit = false;
    for trial in 0..5 {
        // Large enough that writing the index rows takes a while after the
        // content commit: the kill lands between the two.
        let lines: String =
            (0..20_000).map(|i| format!("{{\"trial\": {trial}, \"i\": {i}}}\n")).collect();
        let input = lake.root.join(format!("put-{trial}.jsonl"));
        std::fs::write(&input, lines).unwrap();
        let before = log_versions(&metrics);
        let mut command = lake.command(&["put", "--type", "metric", "-"]);
        command.stdin(std::fs::File::open(&input).unwrap());
        let mut child = spawn_quiet(&mut command);
        let deadline = Instant::now() + Duration::from_secs(120);
        while log_versions(&metrics) == before && child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the put never committed its content");
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill();
        child.wait().unwrap();
        let half = count(&lake, unindexed);
        if half == 0 {
            continue; // the index commit was faster than the kill: try again
        }
        hit = true;
        assert_eq!(half, 20_000, "the content commit is whole");
        let recovered = lake.ok(&["recover"]);
        assert!(recovered.contains("finished killed puts: 20000"), "{recovered}");
        assert_eq!(count(&lake, unindexed), 0, "recover left content without index rows");
        let indexed = count(
            &lake,
            &format!("SELECT count(*) FROM metrics WHERE content LIKE '%\"trial\":{trial}}}%'"),
        );
        assert_eq!(indexed, 20_000);
        // Once: a second recover finds nothing to finish, and doctor is clean.
        let again = lake.ok(&["recover"]);
        assert!(!again.contains("finished killed puts"), "{again}");
        let doctor = lake.doctor(&[]);
        assert_eq!(doctor["integrity"]["content_without_index"]["metrics"], 0, "{doctor}");
        break;
    }
    assert!(hit, "no kill landed between the content and index commits in 5 trials");
}

/// Ingestion begins as a writer too (lake/writer.rs), on a lake that also
/// holds artifact tables: a restore still running does not hold it up (it
/// touches no ingestion table), and one whose restorer was killed is
/// settled by it, so an ingest-only process never leaves the lake pinned.
#[test]
fn ingestion_is_not_held_by_a_live_restore_and_settles_a_dead_one() {
    let lake = three_versions();
    let dir = lake.root.parent().unwrap().join("ingest");
    let settings = format!(
        "lake = {:?}\n[queue]\nsettle_ms = 0\npoll_ms = 20\nretry_delay_ms = 0\n",
        lake.root.display().to_string()
    );
    let config = crate::ingest::ingest_config(&dir, crate::ingest::SCHEMA, &settings);
    let landing = dir.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    crate::ingest::write_csv(&landing.join("a.csv"), 0, 10);

    let before = journal_versions(&lake.root);
    let mut command = lake.command(&["restore", "--to", "1"]);
    command.env("SLUICE_RESTORE_PAUSE_MS", "4000");
    let mut restore = spawn_quiet(&mut command);
    let deadline = Instant::now() + Duration::from_secs(120);
    while journal_versions(&lake.root) == before {
        assert!(Instant::now() < deadline, "the restore never journaled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = crate::ingest::sluice(&config, &["run", "--once"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(restore.try_wait().unwrap().is_none(), "the restore ended before the check");
    let open = journal(&lake.root);
    assert!(open.unfinished().iter().any(|e| e.is_restore()), "a live restore is left to it");

    restore.kill().unwrap();
    restore.wait().unwrap();
    crate::ingest::write_csv(&landing.join("b.csv"), 100, 10);
    let out = crate::ingest::sluice(&config, &["run", "--once"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(journal(&lake.root).unfinished().is_empty(), "the dead restorer's restore is settled");
    assert_eq!(count(&lake, "SELECT count(*) FROM trips"), 20);
    assert_eq!(dump(&lake.root).1, 0, "duplicate keys");
    lake.ok(&["commit"]);
}

/// A pipeline whose second step waits, so its orchestrator can be killed
/// with the step `running`.
fn waiting_pipeline(marker: &Path) -> String {
    format!(
        r#"name = "waits"
[[step]]
name = "gen"
operation = "generate_data"
params = {{ tables = 2, rows = 3 }}

[[step]]
name = "wait"
operation = "command"
command = ["sh", "-c", 'touch {}; sleep 60']
inputs = {{ t = "gen.data" }}
outputs = {{ t = "data" }}
"#,
        marker.display()
    )
}

const QUICK_PIPELINE: &str = r#"name = "quick"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 3, rows = 2 }
"#;

/// A step row is written by a writer of the protocol: `status` recording a
/// dead orchestrator's step as abandoned, after a restore was killed
/// midway, settles the restore before it writes — else the restore's
/// finish undoes the row, as it undid a put's index row. While a restore
/// runs, `status` does not wait for it: it shows the step abandoned and
/// leaves the row to a later writer.
#[test]
fn a_step_row_is_never_undone_by_a_restore_it_met() {
    let lake = three_versions();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("waiting");
    let waits = dir.path().join("waits.toml");
    std::fs::write(&waits, waiting_pipeline(&marker)).unwrap();
    let quick = dir.path().join("quick.toml");
    std::fs::write(&quick, QUICK_PIPELINE).unwrap();

    // Lake version 4: the waiting run's `gen`; its `wait` step is running.
    let mut command = lake.command(&["run", waits.to_str().unwrap()]);
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut orchestrator = spawn_quiet(&mut command);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the waiting step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Lake version 5 holds that `running` row; the quick run after it
    // (version 6) is what a restore to 5 undoes.
    stage_mixed(&lake, &lake.root.join("referenced-files"), 10, 1, 0.0, 45, 4, 1);
    lake.ok(&["commit"]);
    lake.ok(&["run", quick.to_str().unwrap()]);
    let group = format!("-{}", orchestrator.id());
    assert!(
        std::process::Command::new("kill").args(["-9", "--", &group]).status().unwrap().success()
    );
    orchestrator.wait().unwrap();
    let steps_row = |status: &str| {
        count(
            &lake,
            &format!("SELECT count(*) FROM steps WHERE status = '{status}' AND step_name = 'wait'"),
        )
    };
    assert_eq!(steps_row("running"), 1);
    let rows = crate::json_lines(&lake.ok(&[
        "sql",
        "--format",
        "ndjson",
        "SELECT pipeline_run_id FROM steps WHERE step_name = 'wait'",
    ]));
    let run = rows[0]["pipeline_run_id"].as_str().unwrap().to_owned();

    // While a restore runs, `status` shows the step abandoned at once and
    // writes nothing.
    let pause = Duration::from_millis(1500);
    let started = Instant::now();
    let restore = spawn_restore(&lake, 5, pause);
    let shown = lake.ok(&["status", &run]);
    assert!(started.elapsed() < pause * 2, "status waited for the restore");
    assert!(shown.contains("abandoned"), "{shown}");
    kill_restore_after(restore, started, pause, 2);
    assert!(journal(&lake.root).unfinished().iter().any(|e| e.is_restore()));

    // After the kill, `status` settles the restore, then records the row.
    let shown = lake.ok(&["status", &run]);
    assert!(shown.contains("abandoned"), "{shown}");
    assert!(journal(&lake.root).unfinished().is_empty(), "status left the restore unfinished");
    lake.ok(&["recover"]);
    assert_eq!(steps_row("abandoned"), 1, "the abandoned row was undone");
    assert_eq!(steps_row("running"), 1);
    // The restore was carried out whole: the quick run is undone.
    assert_eq!(
        count(
            &lake,
            "SELECT count(*) FROM steps WHERE step_name = 'gen' AND metadata LIKE '%quick%'"
        ),
        0
    );
    assert_eq!(dump(&lake.root).1, 0, "duplicate keys");
}
