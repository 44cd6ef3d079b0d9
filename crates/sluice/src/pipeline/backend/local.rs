//! The local backend: a pool of worker processes.
//!
//! Each worker is the `sluice` binary (or a user's binary built on it) in
//! worker mode, started in its own process group so that a Ctrl-C in the
//! terminal reaches only the orchestrator. The orchestrator sends a worker
//! a chunk of [`UnitJob`]s at a time (one JSON array per line; [`Chunks`]
//! sizes them so that a chunk takes a fraction of a second) and reads its
//! [`WorkerEvent`] lines back: which unit it starts, which units it is about
//! to seal and that they are sealed. If a worker dies mid-chunk (even by
//! SIGKILL), the unit it was running is `Lost`, units it had sealed stand,
//! and the others go back to the queue for a fresh worker: a crash fails
//! one unit, never the step, and loses no other unit's work.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Dispatch, Outcome};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::io::location::LakeRoot;
use crate::pipeline::ops::Operations;
use crate::pipeline::retry::FailureKind;
use crate::pipeline::unit::{UnitJob, UnitReport, WorkerEvent, WorkerPhases};
use crate::pipeline::worker::worker_id;
use crate::pipeline::worker_mode::{CHUNK_MOST, run_chunk};
use crate::pipeline::worker_program::WorkerProgram;
use crate::staging::{StagingArea, StagingWriter, area};

/// How long past a step's time limit a worker may take to answer before it
/// is killed (its tool enforces the limit itself; this is a backstop).
const UNIT_GRACE: Duration = Duration::from_secs(15);

/// Positions in the step's jobs, which every lane shares (a step's jobs
/// are held once, however many units there are).
type Queue = Arc<Mutex<VecDeque<usize>>>;
type Results = Arc<Mutex<Vec<(String, Outcome)>>>;

/// How many units a lane sends at once. The first chunk is one unit; then
/// as many as the last chunk's pace says fit in [`Chunks::TARGET`], at most
/// four times the last and [`Chunks::MOST`], and never more than a share of
/// what is left, so that the lanes finish together. Short chunks keep a
/// stop (Ctrl-C, fail-fast) prompt: units already sent are run.
#[derive(Debug, Clone, Copy)]
struct Chunks {
    last: usize,
    seconds_per_unit: Option<f64>,
}

impl Chunks {
    const TARGET: f64 = 0.2;
    const MOST: usize = CHUNK_MOST;

    fn new() -> Self {
        Chunks { last: 1, seconds_per_unit: None }
    }

    fn size(&self, remaining: usize, lanes: usize) -> usize {
        let by_pace = match self.seconds_per_unit {
            None => 1,
            Some(s) => (Self::TARGET / s.max(1e-6)) as usize,
        };
        let share = remaining.div_ceil(2 * lanes.max(1));
        by_pace.min(self.last.saturating_mul(4)).min(Self::MOST).min(share).max(1)
    }

    fn ran(&mut self, units: usize, took: Duration) {
        self.last = units.max(1);
        self.seconds_per_unit = Some(took.as_secs_f64() / self.last as f64);
    }
}

/// The next chunk of at most `size(remaining)` jobs (none once dispatching stops).
fn next_chunk(queue: &Queue, dispatch: &Dispatch, chunks: &Chunks, lanes: usize) -> Vec<usize> {
    if dispatch.stopping() {
        return Vec::new();
    }
    let Ok(mut queue) = queue.lock() else { return Vec::new() };
    let n = chunks.size(queue.len(), lanes).min(queue.len());
    queue.drain(..n).collect()
}

/// Put jobs a dead worker did not finish back at the front of the queue.
fn requeue(queue: &Queue, jobs: Vec<usize>) {
    if let Ok(mut queue) = queue.lock() {
        for job in jobs.into_iter().rev() {
            queue.push_front(job);
        }
    }
}

/// How many of `step`'s units may run at once on this machine: at most
/// `workers`, and no more than its `resources.cpus` fit in the cores this
/// process may use and its `resources.memory_gb` in the memory it may use
/// (a 4-CPU unit takes four cores' slots). A unit that needs more than the
/// machine has is an error saying so.
pub fn fitting_lanes(
    step: &crate::pipeline::config::StepConfig,
    workers: usize,
) -> std::result::Result<usize, String> {
    let mut lanes = workers.max(1);
    if let Some(cpus) = step.resources.cpus.filter(|c| *c > 1) {
        let cores = crate::host::cores();
        let fit = cores / cpus as usize;
        if fit == 0 {
            return Err(format!(
                "a unit needs resources.cpus = {cpus}, but this machine gives this process {cores} cores \
                 (run the step on SLURM, or lower resources.cpus)"
            ));
        }
        lanes = lanes.min(fit);
    }
    if let (Some(gb), Some(ceiling)) = (step.resources.memory_gb, crate::host::memory_ceiling()) {
        let fit =
            usize::try_from(ceiling.bytes / (u64::from(gb.max(1)) << 30)).unwrap_or(usize::MAX);
        if fit == 0 {
            return Err(format!(
                "a unit needs resources.memory_gb = {gb}, more than {ceiling} \
                 (run the step on SLURM, or lower resources.memory_gb)"
            ));
        }
        lanes = lanes.min(fit);
    }
    Ok(lanes)
}

/// Run `jobs` and return every dispatched unit's outcome (units never
/// dispatched because dispatching stopped are absent).
pub async fn run(
    lake: &Lake,
    operations: &Operations,
    writer: &StagingWriter,
    dispatch: &Dispatch,
    jobs: Arc<[UnitJob]>,
) -> Result<Vec<(String, Outcome)>> {
    let lanes = dispatch.workers.max(1).min(jobs.len().max(1));
    let queue: Queue = Arc::new(Mutex::new((0..jobs.len()).collect()));
    let results: Results = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..lanes {
        let (queue, results, dispatch) = (queue.clone(), results.clone(), dispatch.clone());
        let jobs = jobs.clone();
        match dispatch.worker_program.clone() {
            Some(program) => {
                tasks.spawn(async move {
                    process_lane(&program, &jobs, &queue, &results, &dispatch, lanes).await
                });
            }
            None => {
                let (lake, operations, writer) = (lake.clone(), operations.clone(), writer.clone());
                tasks.spawn(async move {
                    let id = worker_id();
                    let mut chunks = Chunks::new();
                    loop {
                        let chunk = next_chunk(&queue, &dispatch, &chunks, lanes);
                        if chunk.is_empty() {
                            return Ok(());
                        }
                        let chunk: Vec<&UnitJob> = chunk.iter().map(|&i| &jobs[i]).collect();
                        let clock = Instant::now();
                        // In this process nothing can die mid-chunk: a unit's
                        // outcome stands once its staged unit is sealed.
                        let mut done = HashSet::new();
                        let mut emit = |event: WorkerEvent| {
                            match event {
                                WorkerEvent::Sealing { reports, .. } => {
                                    settle(reports, &mut done, &dispatch, &results);
                                }
                                WorkerEvent::Sealed { phases, .. } => dispatch.spent(&phases),
                                WorkerEvent::Started { .. } => {}
                            }
                            Ok(())
                        };
                        run_chunk(&lake, &operations, &writer, &chunk, &id, &mut emit).await?;
                        chunks.ran(chunk.len(), clock.elapsed());
                    }
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
    /// When it was spawned, until its first word.
    spawned: Option<Instant>,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

fn spawn_worker(program: &WorkerProgram, dispatch: &Dispatch) -> Result<Worker> {
    let mut command = tokio::process::Command::from(program.command());
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
        .map_err(|e| Error::io(program.program(), e))?;
    let stdin = child.stdin.take().ok_or_else(|| Error::Internal("worker stdin".into()))?;
    let stdout = child.stdout.take().ok_or_else(|| Error::Internal("worker stdout".into()))?;
    Ok(Worker {
        spawned: Some(Instant::now()),
        child,
        stdin,
        lines: BufReader::new(stdout).lines(),
    })
}

/// How a chunk sent to a worker process ended.
enum ChunkEnd {
    /// Every unit's outcome is in.
    Done,
    /// The worker died, or hangs and is to be killed.
    Died(Death),
}

/// What the orchestrator knew of a chunk when its worker stopped answering.
struct Death {
    /// Units whose outcome is in.
    done: HashSet<String>,
    /// The unit the worker said it started and did not finish.
    running: Option<String>,
    /// The staged unit it said it was sealing, and its units' reports.
    sealing: Option<(String, Vec<UnitReport>)>,
    /// Why, when it was the step's time limit.
    timed_out: Option<String>,
}

async fn process_lane(
    program: &WorkerProgram,
    jobs: &[UnitJob],
    queue: &Queue,
    results: &Results,
    dispatch: &Dispatch,
    lanes: usize,
) -> Result<()> {
    let area = StagingArea::of_lake(&dispatch.lake);
    let mut worker: Option<Worker> = None;
    let mut chunks = Chunks::new();
    loop {
        let positions = next_chunk(queue, dispatch, &chunks, lanes);
        if positions.is_empty() {
            break;
        }
        let chunk: Vec<&UnitJob> = positions.iter().map(|&i| &jobs[i]).collect();
        let w = match worker.as_mut() {
            Some(w) => w,
            None => worker.insert(spawn_worker(program, dispatch)?),
        };
        let clock = Instant::now();
        match drive_chunk(w, &chunk, dispatch, results).await {
            ChunkEnd::Done => chunks.ran(chunk.len(), clock.elapsed()),
            ChunkEnd::Died(death) => {
                let mut dead = worker.take().map(|w| w.child);
                let status = match dead.as_mut() {
                    Some(child) => {
                        // The worker leads its process group.
                        if let Some(pid) = child.id() {
                            crate::pipeline::process::kill_group(pid);
                        }
                        let _ = child.start_kill();
                        child.wait().await.ok()
                    }
                    None => None,
                };
                // Only now that it is gone can what it staged be judged.
                let (lost, again) = after_death(&area, &chunk, death, dispatch, results).await;
                if let Some((at, why)) = lost {
                    let job = chunk[at];
                    let kind = if why.is_some() { FailureKind::Timeout } else { FailureKind::Lost };
                    let why = why.unwrap_or_else(|| {
                        let status = status.map_or_else(
                            || "unknown status".to_owned(),
                            crate::pipeline::describe_exit,
                        );
                        format!("worker process died while running this unit ({status})")
                    });
                    dispatch.finished(Some(kind));
                    push(results, job.run_id.clone(), Outcome::Lost(why, kind));
                }
                requeue(queue, again.into_iter().map(|at| positions[at]).collect());
                chunks = Chunks::new();
            }
        }
    }
    if let Some(mut w) = worker {
        drop(w.stdin);
        let _ = w.child.wait().await;
    }
    Ok(())
}

/// Send `chunk` to the worker and follow its events until every unit's
/// outcome is in, or the worker is gone.
async fn drive_chunk(
    w: &mut Worker,
    chunk: &[&UnitJob],
    dispatch: &Dispatch,
    results: &Results,
) -> ChunkEnd {
    let mut done: HashSet<String> = HashSet::new();
    let mut running: Option<String> = None;
    let mut sealing: Option<(String, Vec<UnitReport>)> = None;
    let sent = match serde_json::to_string(chunk) {
        Ok(mut line) => {
            line.push('\n');
            async {
                w.stdin.write_all(line.as_bytes()).await?;
                w.stdin.flush().await
            }
            .await
            .is_ok()
        }
        Err(_) => false,
    };
    // A unit's tool enforces the step's time limit itself; this is the
    // backstop for an operation that hangs in the worker: each event
    // restarts the clock.
    let limit = chunk
        .first()
        .and_then(|job| job.step.time_limit_on(job.backend).ok().flatten())
        .map(|l| l + UNIT_GRACE);
    let mut timed_out = None;
    while sent && done.len() < chunk.len() {
        let line = match limit {
            Some(limit) => match tokio::time::timeout(limit, w.lines.next_line()).await {
                Ok(line) => line.ok().flatten(),
                Err(_) => {
                    timed_out = Some(format!(
                        "timed out: no result within the step's time limit ({:.0}s); the worker was killed",
                        limit.as_secs_f64()
                    ));
                    None
                }
            },
            None => w.lines.next_line().await.ok().flatten(),
        };
        let Some(event) = line.and_then(|l| serde_json::from_str::<WorkerEvent>(&l).ok()) else {
            break;
        };
        if let Some(spawned) = w.spawned.take() {
            let start = spawned.elapsed().as_secs_f64();
            dispatch.spent(&WorkerPhases { start, ..WorkerPhases::default() });
        }
        match event {
            WorkerEvent::Started { run_id } => running = Some(run_id),
            WorkerEvent::Sealing { unit, reports } => {
                running = None;
                sealing = Some((unit, reports));
            }
            WorkerEvent::Sealed { unit, phases } => {
                if let Some((_, reports)) = sealing.take_if(|(u, _)| *u == unit) {
                    settle(reports, &mut done, dispatch, results);
                }
                dispatch.spent(&phases);
            }
        }
    }
    if done.len() == chunk.len() {
        return ChunkEnd::Done;
    }
    ChunkEnd::Died(Death { done, running, sealing, timed_out })
}

/// The outcome of units whose worker answered for them.
fn settle(
    reports: Vec<UnitReport>,
    done: &mut HashSet<String>,
    dispatch: &Dispatch,
    results: &Results,
) {
    for report in reports {
        done.insert(report.run_id.clone());
        dispatch.finished(report.failed_as());
        push(results, report.run_id.clone(), Outcome::Reported(report));
    }
}

/// Once a chunk's worker is dead: the unit that failed (and why, when it
/// is not how the worker ended) and the units to run again, as positions
/// in the chunk.
async fn after_death(
    area: &StagingArea,
    chunk: &[&UnitJob],
    death: Death,
    dispatch: &Dispatch,
    results: &Results,
) -> (Option<(usize, Option<String>)>, Vec<usize>) {
    let Death { mut done, running, sealing, timed_out } = death;
    // Units it said it was sealing stand if their staged unit is there (it
    // died just after sealing it); if not, what it left of it goes.
    if let Some((unit, reports)) = sealing {
        let (step, operation) =
            chunk.first().map_or((0, ""), |j| (j.step_number, j.step.operation.as_str()));
        if area::sealed_or_cleared(area, step, operation, &unit).await.unwrap_or(false) {
            settle(reports, &mut done, dispatch, results);
        }
    }
    let mut left: Vec<usize> =
        (0..chunk.len()).filter(|&at| !done.contains(&chunk[at].run_id)).collect();
    // The unit it was running is the one that failed; when it was running
    // none (it died starting, or sealing), the first one left is, so that a
    // worker that cannot run this chunk at all still ends it.
    let at =
        running.and_then(|run| left.iter().position(|&at| chunk[at].run_id == run)).unwrap_or(0);
    let lost = (!left.is_empty()).then(|| (left.remove(at), timed_out));
    (lost, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_start_at_one_unit_grow_by_pace_and_share_the_tail() {
        let mut chunks = Chunks::new();
        assert_eq!(chunks.size(1000, 2), 1, "nothing measured yet");
        // 1 ms a unit: 200 fit the target, but a chunk grows at most 4×.
        chunks.ran(1, Duration::from_millis(1));
        assert_eq!(chunks.size(1000, 2), 4);
        chunks.ran(4, Duration::from_millis(4));
        assert_eq!(chunks.size(1000, 2), 16);
        chunks.ran(64, Duration::from_millis(64));
        assert_eq!(chunks.size(1000, 2), 200, "the pace bounds it");
        chunks.ran(200, Duration::from_micros(200));
        assert_eq!(chunks.size(100_000, 2), Chunks::MOST);
        // The tail is shared: at most a quarter of what is left per lane of two.
        assert_eq!(chunks.size(40, 2), 10);
        assert_eq!(chunks.size(1, 2), 1);
        // Slow units go one at a time.
        chunks.ran(4, Duration::from_secs(2));
        assert_eq!(chunks.size(1000, 2), 1);
    }
}
