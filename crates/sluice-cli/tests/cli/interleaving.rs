//! Operations meeting at random, with real processes: three slots run a
//! random mix of `put`, `run` (a small pipeline), `commit`, `restore`,
//! `compact`, `vacuum` (within its retention) and `ingest run --once`, a
//! third of them SIGKILLed at a random moment, first with the writer lock
//! and then with it defeated (as on two hosts). Afterwards `recover`, and:
//! every acknowledged put is present exactly once (or a restore claimed
//! after it undid it whole), no index row lacks its content, no table holds
//! a key twice, no sequence is left open, every landed file's rows are in
//! its table once, no content row lacks its index row (`recover` finishes
//! puts killed between the two), a final pipeline run and commit succeed,
//! and `doctor` is clean after `vacuum --full` (killed writers' files).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Lake;
use crate::crash::{dump, fraction, new_lake};

/// How many operations each half (locked, unlocked) runs.
fn operations() -> u64 {
    crate::depth("SLUICE_INTERLEAVE_OPS", 100, 20)
}

const SCHEMA: &str = "columns:\n  - { name: trip_id, type: int64, nullable: false }\n  - { name: zone, type: string }\n";

/// A put acknowledged by its process: the id, and when (µs since the epoch).
#[derive(Debug, Clone)]
struct Acked {
    id: String,
    at_us: i64,
}

#[derive(Default)]
struct Log {
    acked: Vec<Acked>,
    landed_rows: u64,
    outcomes: BTreeMap<&'static str, (u32, u32, u32)>,
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

struct World {
    lake: PathBuf,
    config: PathBuf,
    landing: PathBuf,
    pipeline: PathBuf,
    unlocked: bool,
}

impl World {
    fn sluice(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.arg("--lake").arg(&self.lake).args(args).env_remove("SLUICE_LAKE");
        if self.unlocked {
            c.env("SLUICE_UNSAFE_NO_LOCK", "1");
        }
        c
    }

    fn ingest(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.args(["ingest", "run", "--once", "--config"]).arg(&self.config);
        c
    }

    /// The pipeline file for operation `i`: a seed per few operations, so
    /// runs both hit the cache and do new work.
    fn pipeline_for(&self, i: u64) -> PathBuf {
        let path = self.pipeline.with_file_name(format!("p{i}.toml"));
        std::fs::write(
            &path,
            format!(
                "name = \"mix\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = 3, rows = 4, seed = {} }}\n\n[[step]]\nname = \"stats\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"gen.data\" }}\n",
                i / 3
            ),
        )
        .unwrap();
        path
    }
}

/// Run one random operation `i`; SIGKILL it at a random moment one time in three.
fn one_operation(world: &World, log: &Mutex<Log>, i: u64) {
    let pick = fraction(i * 7 + 1);
    let kill = fraction(i * 7 + 2) < 0.33;
    let delay = Duration::from_millis((fraction(i * 7 + 3) * 900.0) as u64);
    let (name, mut command): (&'static str, Command) = match (pick * 8.0) as u32 {
        0 | 1 => {
            let value = format!(r#"{{"op": {i}, "x": {}}}"#, fraction(i * 7 + 4));
            ("put", world.sluice(&["put", "--type", "metric", "--step", "1", &value]))
        }
        2 => ("run", world.sluice(&["run", world.pipeline_for(i).to_str().unwrap()])),
        3 => ("commit", world.sluice(&["commit"])),
        4 => {
            let to = 1 + (fraction(i * 7 + 5) * 4.0) as u64;
            ("restore", world.sluice(&["restore", "--to", &to.to_string(), "--force"]))
        }
        5 => ("compact", world.sluice(&["compact"])),
        6 => ("vacuum", world.sluice(&["vacuum"])),
        _ => {
            let rows = 3 + i % 5;
            let name = format!("f{i}.csv");
            let tmp = world.landing.join(format!(".{name}.tmp"));
            let mut text = String::from("trip_id,zone\n");
            for r in 0..rows {
                text.push_str(&format!("{},z{}\n", i * 1000 + r, r % 3));
            }
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, world.landing.join(&name)).unwrap();
            log.lock().unwrap().landed_rows += rows;
            ("ingest", world.ingest())
        }
    };
    let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    let pid = child.id();
    let out = if kill {
        let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
        while started.elapsed() < delay && !waiter.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !waiter.is_finished() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        waiter.join().unwrap()
    } else {
        child.wait_with_output().unwrap()
    };
    let mut log = log.lock().unwrap();
    let entry = log.outcomes.entry(name).or_default();
    match out.status.code() {
        Some(0) => entry.0 += 1,
        Some(_) => entry.1 += 1,
        None => entry.2 += 1,
    }
    if name == "put" && out.status.success() {
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(id.len(), 32, "a put acknowledged without an id: {id:?}");
        log.acked.push(Acked { id, at_us: now_us() });
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{name} panicked:\n{stderr}");
}

fn count(lake: &Lake, sql: &str) -> i64 {
    let rows = crate::json_lines(&lake.ok(&["sql", "--format", "ndjson", sql]));
    rows[0].as_object().unwrap().values().next().unwrap().as_i64().unwrap()
}

/// Restores that were claimed after `at_us` and completed: the only thing
/// that may undo an acknowledged put.
fn restores_after(root: &Path, at_us: i64) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let journal = rt.block_on(sluice::lake::journal::read(&root.into(), None)).unwrap();
    journal.entries().iter().any(|started| {
        started.is_restore()
            && started.phase() == sluice::lake::journal::Phase::Started
            && started.timestamp > at_us
            && journal.has(&started.token, sluice::lake::journal::Phase::Completed)
    })
}

fn run_half(unlocked: bool, ops: u64, seed: u64) {
    let lake = new_lake();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = crate::ingest::ingest_config(
        root,
        SCHEMA,
        &format!(
            "lake = \"{}\"\n[queue]\nsettle_ms = 0\npoll_ms = 20\nretry_delay_ms = 0\nvisibility_timeout_secs = 2\nmax_attempts = 50\n[ingest]\nworkers = 1\nflush_interval_ms = 50\n",
            lake.root.display()
        ),
    );
    let landing = root.join("landing/trips");
    std::fs::create_dir_all(&landing).unwrap();
    let world = Arc::new(World {
        lake: lake.root.clone(),
        config,
        landing,
        pipeline: root.join("p.toml"),
        unlocked,
    });
    // A few lake versions to restore to.
    for i in 0..4 {
        lake.ok(&["run", world.pipeline_for(i * 3).to_str().unwrap()]);
    }
    let log = Arc::new(Mutex::new(Log::default()));
    let slots: Vec<_> = (0..3)
        .map(|slot| {
            let (world, log) = (world.clone(), log.clone());
            std::thread::spawn(move || {
                let mut i = slot;
                while i < ops {
                    one_operation(&world, &log, seed + i);
                    i += 3;
                }
            })
        })
        .collect();
    for slot in slots {
        slot.join().unwrap();
    }
    let log = log.lock().unwrap();
    eprintln!("unlocked: {unlocked}; (ok, failed, killed) per operation: {:?}", log.outcomes);

    // Settle: recover must succeed (nothing wedged); ingestion drains.
    lake.ok(&["recover"]);
    let mut drained = false;
    for _ in 0..20 {
        let out = world.ingest().output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        if std::fs::read_dir(&world.landing).unwrap().flatten().all(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with('.')
        }) {
            drained = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(2100));
    }
    assert!(drained, "landing never drained");

    // Every acknowledged put, once, unless a restore claimed after it undid it.
    for acked in &log.acked {
        let n =
            count(&lake, &format!("SELECT count(*) FROM index WHERE artifact_id = '{}'", acked.id));
        let m = count(
            &lake,
            &format!("SELECT count(*) FROM metrics WHERE artifact_id = '{}'", acked.id),
        );
        assert!(n <= 1 && m <= 1, "{} held twice", acked.id);
        if n == 0 || m == 0 {
            assert!(
                restores_after(&lake.root, acked.at_us),
                "acknowledged put {} lost (index {n}, content {m}) with no restore after it",
                acked.id
            );
            assert_eq!((n, m), (0, 0), "put {} half undone", acked.id);
        }
    }
    // No index row without its content, no key twice, nothing open.
    let orphans = count(
        &lake,
        "SELECT count(*) FROM index i WHERE i.artifact_type = 'metric' \
         AND NOT EXISTS (SELECT 1 FROM metrics m WHERE m.artifact_id = i.artifact_id)",
    );
    assert_eq!(orphans, 0, "index rows whose content is missing");
    // Nothing unacknowledged half visible: `recover` finished every put
    // killed between its content and index commits.
    let unindexed = count(
        &lake,
        "SELECT count(*) FROM metrics m WHERE NOT EXISTS \
         (SELECT 1 FROM index i WHERE i.artifact_id = m.artifact_id)",
    );
    assert_eq!(unindexed, 0, "content rows without an index row after recover");
    assert_eq!(dump(&lake.root).1, 0, "duplicate keys");
    crate::crash::check_journal(&lake.root, 0);
    // Every landed row, once.
    let rows = Lake::at(lake.root.clone());
    let trips = count(&rows, "SELECT count(*) FROM trips");
    let distinct = count(&rows, "SELECT count(DISTINCT trip_id) FROM trips");
    assert_eq!((trips, distinct), (log.landed_rows as i64, log.landed_rows as i64));
    // Not wedged: a pipeline run and a commit succeed.
    lake.ok(&["run", world.pipeline_for(ops + 1000).to_str().unwrap()]);
    lake.ok(&["commit"]);
    // What crashes and restores leave is what they are documented to leave,
    // and the maintenance commands clear it: runs staged against inputs a
    // restore (forced beside a running pipeline) removed are quarantined,
    // naming the missing input; killed writers leave data files no commit
    // names, which `vacuum --full` removes.
    let quarantine = lake.root.join("_staging/.quarantine");
    for reason in reasons(&quarantine) {
        assert!(reason.contains("edge to unknown artifact"), "quarantined: {reason}");
    }
    let _ = std::fs::remove_dir_all(&quarantine);
    lake.ok(&["vacuum", "--full", "--retention-hours", "0", "--force"]);
    let doctor = lake.ok(&["doctor"]);
    assert!(doctor.contains("clean"), "{doctor}");
}

/// The reasons written into quarantined run folders.
fn reasons(quarantine: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for step in std::fs::read_dir(quarantine).into_iter().flatten().flatten() {
        for run in std::fs::read_dir(step.path()).into_iter().flatten().flatten() {
            let file = run.path().join(sluice::commit::REASON_FILE);
            out.push(std::fs::read_to_string(file).unwrap_or_default());
        }
    }
    out
}

#[test]
fn random_interleavings_lose_no_acknowledged_write_and_wedge_nothing() {
    let ops = operations();
    run_half(false, ops, 0);
    run_half(true, ops, 100_000);
}
