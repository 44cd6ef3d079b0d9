//! Operations meeting at random, with real processes: three slots run a
//! random mix of `put`, `run` (a small pipeline), `commit`, `restore`,
//! `compact`, `vacuum` (within its retention) and, on a folder, `ingest run
//! --once`, a third of them SIGKILLed at a random moment — on a folder with
//! the writer lock and then with it defeated (as on two hosts), and on a
//! lake in S3 (moto) and in Azure (Azurite), where there is no lock at all.
//! Afterwards `recover`, and: every acknowledged put is present exactly once
//! (or a restore claimed after it undid it whole), no index row lacks its
//! content, no table holds a key twice, no sequence is left open, every
//! landed file's rows are in its table once, no content row lacks its index
//! row (`recover` finishes puts killed between the two), a final pipeline
//! run and commit succeed, and `doctor` finds nothing but what it is
//! documented to find after `vacuum --full` (killed writers' files).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::crash::{dump, fraction, new_lake};
use crate::stores::{StoreLake, azurite_lake, moto_lake};

/// How many operations each half (locked, unlocked) runs.
fn operations() -> u64 {
    crate::depth("SLUICE_INTERLEAVE_OPS", 100, 20)
}

/// How many operations a lake in a store runs (its requests are slower).
fn store_operations() -> u64 {
    crate::depth("SLUICE_STORE_INTERLEAVE_OPS", 45, 12)
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

/// Where the operations run.
enum Target<'a> {
    /// A lake folder, its writer lock defeated when `unlocked`.
    Folder { root: PathBuf, unlocked: bool },
    /// A lake in an object store.
    Store(&'a StoreLake),
}

/// Ingestion into the lake folder: its config and landing folder.
struct Ingestion {
    config: PathBuf,
    landing: PathBuf,
}

struct World<'a> {
    target: Target<'a>,
    ingestion: Option<Ingestion>,
    pipeline: PathBuf,
}

impl World<'_> {
    fn sluice(&self, args: &[&str]) -> Command {
        match &self.target {
            Target::Folder { root, unlocked } => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
                c.arg("--lake").arg(root).args(args).env_remove("SLUICE_LAKE");
                if *unlocked {
                    c.env("SLUICE_UNSAFE_NO_LOCK", "1");
                }
                c
            }
            Target::Store(lake) => lake.command(args),
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.sluice(args).output().unwrap();
        assert!(
            out.status.success(),
            "sluice {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The one number a query selects.
    fn count(&self, sql: &str) -> i64 {
        let rows = crate::json_lines(&self.ok(&["sql", "--format", "ndjson", sql]));
        rows[0].as_object().unwrap().values().next().unwrap().as_i64().unwrap()
    }

    fn ingest(&self) -> Option<Command> {
        let ingestion = self.ingestion.as_ref()?;
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.args(["ingest", "run", "--once", "--config"]).arg(&ingestion.config);
        Some(c)
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
fn one_operation(world: &World<'_>, log: &Mutex<Log>, i: u64) {
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
        _ => match (&world.ingestion, world.ingest()) {
            (Some(ingestion), Some(ingest)) => {
                let rows = 3 + i % 5;
                let name = format!("f{i}.csv");
                let tmp = ingestion.landing.join(format!(".{name}.tmp"));
                let mut text = String::from("trip_id,zone\n");
                for r in 0..rows {
                    text.push_str(&format!("{},z{}\n", i * 1000 + r, r % 3));
                }
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(&tmp, ingestion.landing.join(&name)).unwrap();
                log.lock().unwrap().landed_rows += rows;
                ("ingest", ingest)
            }
            // A store lake's ingestion is tested on its own (store_ingest).
            _ => ("commit", world.sluice(&["commit"])),
        },
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

/// Restores that were claimed after `at_us` and completed: the only thing
/// that may undo an acknowledged put. A restore is claimed when its
/// journal row's Delta version is committed: the row's own `timestamp` is
/// taken before its data file is uploaded (on a loaded machine and a store,
/// a second or more earlier), so the claim's time is read from the
/// journal's history (the commit's time, in milliseconds: a claim in the
/// same millisecond as the ack counts as after it).
fn restores_after(world: &World<'_>, at_us: i64) -> bool {
    let claims = crate::json_lines(&world.ok(&[
        "sql",
        "--format",
        "ndjson",
        "SELECT s.position FROM commits s WHERE s.restore_to IS NOT NULL AND s.phase = 'started' \
         AND EXISTS (SELECT 1 FROM commits c WHERE c.token = s.token AND c.phase = 'completed')",
    ]));
    if claims.is_empty() {
        return false;
    }
    let history: Vec<serde_json::Value> = serde_json::from_str(
        &world.ok(&["history", "--table", "commits", "--json", "--limit", "100000"]),
    )
    .unwrap();
    claims.iter().any(|claim| {
        let version = claim["position"].as_i64().unwrap();
        history.iter().filter(|h| h["version"].as_i64() == Some(version)).any(|h| {
            let time = h["time"].as_str().unwrap();
            let committed = chrono::DateTime::parse_from_rfc3339(time).unwrap().timestamp_micros();
            committed + 999 >= at_us
        })
    })
}

/// Three slots run `ops` random operations between them.
fn interleave(world: &World<'_>, ops: u64, seed: u64) -> Log {
    let log = Mutex::new(Log::default());
    std::thread::scope(|scope| {
        for slot in 0..3 {
            let log = &log;
            scope.spawn(move || {
                let mut i = slot;
                while i < ops {
                    one_operation(world, log, seed + i);
                    i += 3;
                }
            });
        }
    });
    log.into_inner().unwrap()
}

/// A few lake versions to restore to, then the operations, then the
/// checks of the module docs.
fn run_world(world: &World<'_>, ops: u64, seed: u64) {
    for i in 0..4 {
        world.ok(&["run", world.pipeline_for(i * 3).to_str().unwrap()]);
    }
    let log = interleave(world, ops, seed);
    let place = match &world.target {
        Target::Folder { unlocked, .. } => format!("a folder, unlocked: {unlocked}"),
        Target::Store(lake) => lake.url.clone(),
    };
    eprintln!("{place}; (ok, failed, killed) per operation: {:?}", log.outcomes);

    // Settle: recover must succeed (nothing wedged); ingestion drains.
    world.ok(&["recover"]);
    if let Some(ingestion) = &world.ingestion {
        drain(world, ingestion);
    }

    // Every acknowledged put, once, unless a restore claimed after it undid it.
    for acked in &log.acked {
        let n =
            world.count(&format!("SELECT count(*) FROM index WHERE artifact_id = '{}'", acked.id));
        let m = world
            .count(&format!("SELECT count(*) FROM metrics WHERE artifact_id = '{}'", acked.id));
        assert!(n <= 1 && m <= 1, "{} held twice", acked.id);
        if n == 0 || m == 0 {
            assert!(
                restores_after(world, acked.at_us),
                "acknowledged put {} lost (index {n}, content {m}) with no restore after it",
                acked.id
            );
            assert_eq!((n, m), (0, 0), "put {} half undone", acked.id);
        }
    }
    // No index row without its content, no key twice, nothing open.
    let orphans = world.count(
        "SELECT count(*) FROM index i WHERE i.artifact_type = 'metric' \
         AND NOT EXISTS (SELECT 1 FROM metrics m WHERE m.artifact_id = i.artifact_id)",
    );
    assert_eq!(orphans, 0, "index rows whose content is missing");
    // Nothing unacknowledged half visible: `recover` finished every put
    // killed between its content and index commits.
    let unindexed = world.count(
        "SELECT count(*) FROM metrics m WHERE NOT EXISTS \
         (SELECT 1 FROM index i WHERE i.artifact_id = m.artifact_id)",
    );
    assert_eq!(unindexed, 0, "content rows without an index row after recover");
    for (table, key) in [
        ("index", "artifact_id"),
        ("metrics", "artifact_id"),
        ("data", "artifact_id"),
        ("executions", "execution_run_id"),
    ] {
        let twice = world.count(&format!("SELECT count(*) - count(DISTINCT {key}) FROM {table}"));
        assert_eq!(twice, 0, "`{table}` holds a key twice");
    }
    if let Target::Folder { root, .. } = &world.target {
        assert_eq!(dump(root).1, 0, "duplicate keys");
        crate::crash::check_journal(root, 0);
    }
    // Every landed row, once.
    if world.ingestion.is_some() {
        let trips = world.count("SELECT count(*) FROM trips");
        let distinct = world.count("SELECT count(DISTINCT trip_id) FROM trips");
        assert_eq!((trips, distinct), (log.landed_rows as i64, log.landed_rows as i64));
    }
    // Not wedged: a pipeline run and a commit succeed.
    world.ok(&["run", world.pipeline_for(ops + 1000).to_str().unwrap()]);
    world.ok(&["commit"]);
    // What crashes and restores leave is what they are documented to leave,
    // and the maintenance commands clear it: runs staged against inputs a
    // restore (forced beside a running pipeline) removed are quarantined,
    // naming the missing input; killed writers leave data files no commit
    // names, which `vacuum --full` removes.
    world.ok(&["vacuum", "--full", "--retention-hours", "0", "--force"]);
    // (`doctor` fails when it finds anything, quarantined runs included.)
    let doctor = world.sluice(&["doctor", "--json"]).output().unwrap();
    let doctor: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    for (_, reason) in quarantined(&doctor) {
        assert!(reason.contains("edge to unknown artifact"), "quarantined: {reason}");
    }
    // Nothing else: every other finding is empty.
    let findings =
        doctor.as_object().unwrap().iter().filter(|(k, _)| {
            !["clean", "repaired", "location", "quarantined"].contains(&k.as_str())
        });
    for (finding, value) in findings {
        assert!(nothing_in(value), "{place}: doctor found {finding}: {doctor:#}");
    }
    if quarantined(&doctor).is_empty() {
        assert_eq!(doctor["clean"], true, "{place}: {doctor:#}");
    }
}

/// Whether a finding of `doctor --json` lists nothing: no entry, no count.
fn nothing_in(finding: &Value) -> bool {
    match finding {
        Value::Null => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(items) => items.is_empty(),
        Value::Object(parts) => parts.values().all(nothing_in),
        Value::Bool(_) | Value::String(_) => false,
    }
}

/// Ingestion drains the landing folder.
fn drain(world: &World<'_>, ingestion: &Ingestion) {
    for _ in 0..20 {
        let out = world.ingest().unwrap().output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        if std::fs::read_dir(&ingestion.landing)
            .unwrap()
            .flatten()
            .all(|e| e.file_name().to_string_lossy().starts_with('.'))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(2100));
    }
    panic!("landing never drained");
}

/// The quarantined runs `doctor --json` lists: (where, why).
fn quarantined(doctor: &Value) -> Vec<(String, String)> {
    let listed = doctor["quarantined"].as_array().cloned().unwrap_or_default();
    listed
        .iter()
        .map(|run| {
            let text = |key: &str| run[key].as_str().unwrap_or_default().to_owned();
            (text("path"), text("reason"))
        })
        .collect()
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
    let world = World {
        target: Target::Folder { root: lake.root.clone(), unlocked },
        ingestion: Some(Ingestion { config, landing }),
        pipeline: root.join("p.toml"),
    };
    run_world(&world, ops, seed);
}

fn run_on_store(lake: &StoreLake) {
    lake.ok(&["init"]);
    let world = World {
        target: Target::Store(lake),
        ingestion: None,
        pipeline: lake.cwd.path().join("p.toml"),
    };
    run_world(&world, store_operations(), 200_000);
}

#[test]
fn random_interleavings_lose_no_acknowledged_write_and_wedge_nothing() {
    let ops = operations();
    run_half(false, ops, 0);
    run_half(true, ops, 100_000);
}

#[test]
fn on_s3_random_interleavings_lose_no_acknowledged_write_and_wedge_nothing() {
    if let Some(lake) = moto_lake() {
        run_on_store(&lake);
    }
}

#[test]
fn on_azure_random_interleavings_lose_no_acknowledged_write_and_wedge_nothing() {
    if let Some(lake) = azurite_lake() {
        run_on_store(&lake);
    }
}
