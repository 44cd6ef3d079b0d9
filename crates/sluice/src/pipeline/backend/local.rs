//! The local backend: a pool of worker processes.
//!
//! Each worker is the `sluice` binary (or a user's binary built on it) in
//! worker mode, started in its own process group so that a Ctrl-C in the
//! terminal reaches only the orchestrator. The orchestrator writes one
//! [`UnitJob`] per line to a worker's stdin and reads one [`UnitReport`]
//! line back. If a worker dies mid-unit (even by SIGKILL), that unit is
//! `Lost` and a fresh worker takes the next one: a crash fails one unit,
//! never the step.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Dispatch, Outcome};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::io::location::LakeRoot;
use crate::pipeline::ops::Operations;
use crate::pipeline::unit::{UnitJob, UnitReport};
use crate::pipeline::worker::{execute_unit, worker_id};
use crate::staging::StagingWriter;

/// How long past a step's time limit a worker may take to answer before it
/// is killed (its tool enforces the limit itself; this is a backstop).
const UNIT_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

type Queue = Arc<Mutex<VecDeque<UnitJob>>>;
type Results = Arc<Mutex<Vec<(String, Outcome)>>>;

fn next(queue: &Queue, dispatch: &Dispatch) -> Option<UnitJob> {
    if dispatch.stopping() {
        return None;
    }
    queue.lock().ok()?.pop_front()
}

/// Run `jobs` and return every dispatched unit's outcome (units never
/// dispatched because dispatching stopped are absent).
pub async fn run(
    lake: &Lake,
    operations: &Operations,
    writer: &StagingWriter,
    dispatch: &Dispatch,
    jobs: Vec<UnitJob>,
) -> Result<Vec<(String, Outcome)>> {
    let lanes = dispatch.workers.max(1).min(jobs.len().max(1));
    let queue: Queue = Arc::new(Mutex::new(jobs.into()));
    let results: Results = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..lanes {
        let (queue, results, dispatch) = (queue.clone(), results.clone(), dispatch.clone());
        match dispatch.worker_program.clone() {
            Some(program) => {
                tasks.spawn(
                    async move { process_lane(&program, &queue, &results, &dispatch).await },
                );
            }
            None => {
                let (lake, operations, writer) = (lake.clone(), operations.clone(), writer.clone());
                tasks.spawn(async move {
                    let id = worker_id();
                    while let Some(job) = next(&queue, &dispatch) {
                        let report = execute_unit(&lake, &operations, &writer, &job, &id).await?;
                        dispatch.finished(report.success);
                        push(&results, job.run_id.clone(), Outcome::Reported(report));
                    }
                    Ok(())
                });
            }
        }
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| Error::task("a dispatch lane", e))??;
    }
    let out = results.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default();
    Ok(out)
}

fn push(results: &Results, run_id: String, outcome: Outcome) {
    if let Ok(mut r) = results.lock() {
        r.push((run_id, outcome));
    }
}

struct Worker {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

fn spawn_worker(program: &std::path::Path, dispatch: &Dispatch) -> Result<Worker> {
    let mut command = tokio::process::Command::new(program);
    match &dispatch.lake {
        LakeRoot::Local(root) => command.arg("--lake").arg(root),
        // A store's URL may carry credentials (a SAS token): it goes to the
        // worker in its environment, which other users cannot read, not in
        // its arguments, which they can.
        LakeRoot::Store(store) => command.env(crate::lake::LAKE_ENV, store.url().as_str()),
    };
    let mut child = command
        .arg("__worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io(program, e))?;
    let stdin = child.stdin.take().ok_or_else(|| Error::Internal("worker stdin".into()))?;
    let stdout = child.stdout.take().ok_or_else(|| Error::Internal("worker stdout".into()))?;
    Ok(Worker { child, stdin, lines: BufReader::new(stdout).lines() })
}

async fn process_lane(
    program: &std::path::Path,
    queue: &Queue,
    results: &Results,
    dispatch: &Dispatch,
) -> Result<()> {
    let mut worker: Option<Worker> = None;
    while let Some(job) = next(queue, dispatch) {
        let w = match worker.as_mut() {
            Some(w) => w,
            None => worker.insert(spawn_worker(program, dispatch)?),
        };
        let line = serde_json::to_string(&job).map_err(|e| Error::json("a unit job", e))?;
        let sent = async {
            w.stdin.write_all(line.as_bytes()).await?;
            w.stdin.write_all(b"\n").await?;
            w.stdin.flush().await
        }
        .await;
        // A unit's tool enforces the step's time limit itself; this is the
        // backstop for an operation that hangs in the worker.
        let limit = job.step.time_limit_on(job.backend).ok().flatten().map(|l| l + UNIT_GRACE);
        let reply = match sent {
            Ok(()) => match limit {
                Some(limit) => match tokio::time::timeout(limit, w.lines.next_line()).await {
                    Ok(line) => line.ok().flatten(),
                    Err(_) => {
                        let why = format!(
                            "timed out: no result within the step's time limit ({:.0}s); the worker was killed",
                            limit.as_secs_f64()
                        );
                        if let Some(mut dead) = worker.take() {
                            // The worker leads its process group.
                            if let Some(pid) = dead.child.id() {
                                crate::pipeline::process::kill_group(pid);
                            }
                            let _ = dead.child.wait().await;
                        }
                        dispatch.finished(false);
                        push(results, job.run_id.clone(), Outcome::Lost(why));
                        continue;
                    }
                },
                None => w.lines.next_line().await.ok().flatten(),
            },
            Err(_) => None,
        };
        let report = reply.and_then(|l| serde_json::from_str::<UnitReport>(&l).ok());
        match report {
            Some(report) => {
                dispatch.finished(report.success);
                push(results, job.run_id.clone(), Outcome::Reported(report));
            }
            None => {
                // The worker died mid-unit: fail this unit, start a new worker.
                let mut dead = worker.take().map(|w| w.child);
                let status = match dead.as_mut() {
                    Some(child) => {
                        let _ = child.start_kill();
                        child.wait().await.ok()
                    }
                    None => None,
                };
                let why = status
                    .map_or_else(|| "unknown status".to_owned(), crate::pipeline::describe_exit);
                dispatch.finished(false);
                push(
                    results,
                    job.run_id.clone(),
                    Outcome::Lost(format!("worker process died while running this unit ({why})")),
                );
            }
        }
    }
    if let Some(mut w) = worker {
        drop(w.stdin);
        let _ = w.child.wait().await;
    }
    Ok(())
}
