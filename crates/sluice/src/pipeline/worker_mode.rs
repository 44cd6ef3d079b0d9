//! Worker modes — a local worker serving chunks of jobs on stdin, a SLURM
//! array task running its slice — and how both run units: in chunks,
//! inputs read once, executions sealed in groups.
//!
//! A trivial unit computes for microseconds; what it cost was around it: a
//! job line and a report line, an input read, and a staged unit of its own
//! (a folder and a file made by the worker, read and removed by the
//! committer). A chunk reads every input of its units in one look-up and
//! stages the executions it ran within [`SEAL_AFTER`] as one batch: one
//! file for many units.
//!
//! Nobody's results are put at risk by sharing a file. A worker says which
//! unit it starts before it starts it, and names the staged unit it is about
//! to seal before it seals it ([`WorkerEvent`]); if it dies, the
//! orchestrator fails the unit it was running (the one that may have killed
//! it) and sends the others it had not sealed to another worker, so a crash
//! still fails one unit and loses no one else's work. Each unit's outcome
//! is its own execution row, whatever file it travelled in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::ops::Operations;
use super::unit::{UnitJob, UnitReport, WorkerEvent, WorkerPhases};
use super::worker::{run_unit, worker_id};
use crate::artifact::{Artifact, ArtifactId};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::staging::{StagedExecution, StagingArea, StagingWriter, paths};

/// How long a worker keeps ran units unsealed before it seals them, when
/// its chunk is not done yet: what a dead worker may leave to be run again.
const SEAL_AFTER: Duration = Duration::from_millis(500);

/// The most units run as one chunk (their inputs read in one look-up), by a
/// local worker or a SLURM task: what a chunk's prefetch may hold.
pub(crate) const CHUNK_MOST: usize = 256;

/// Run `jobs` (one step's), staging their executions in groups sealed at
/// least every [`SEAL_AFTER`] and at the end, and tell `emit` what
/// happens. Errors are returned only when staging fails or
/// `emit` does.
pub(crate) async fn run_chunk(
    lake: &Lake,
    operations: &Operations,
    writer: &StagingWriter,
    jobs: &[&UnitJob],
    worker_id: &str,
    emit: &mut (dyn FnMut(WorkerEvent) -> Result<()> + Send),
) -> Result<()> {
    let mut phases = WorkerPhases::default();
    let reading = Instant::now();
    let prefetched = prefetch(lake, operations, jobs)
        .instrument(tracing::debug_span!("input_read", units = jobs.len()))
        .await;
    phases.input_read += reading.elapsed().as_secs_f64();
    let mut group: Vec<(StagedExecution, UnitReport)> = Vec::new();
    let mut opened = Instant::now();
    for job in jobs {
        emit(WorkerEvent::Started { run_id: job.run_id.clone() })?;
        if group.is_empty() {
            opened = Instant::now();
        }
        let span = tracing::debug_span!("unit", run = %job.run_id);
        let ran = run_unit(lake, operations, job, prefetched.as_ref(), worker_id, &mut phases)
            .instrument(span)
            .await?;
        group.push(ran);
        if opened.elapsed() >= SEAL_AFTER {
            seal(writer, std::mem::take(&mut group), std::mem::take(&mut phases), emit).await?;
        }
    }
    seal(writer, group, phases, emit).await
}

/// Every input artifact of the chunk's units, read in one look-up, when
/// its operation reads content and the chunk has more than one unit. A
/// failure here is not the units': each then reads its own inputs and
/// fails on its own if it must.
async fn prefetch(
    lake: &Lake,
    operations: &Operations,
    jobs: &[&UnitJob],
) -> Option<BTreeMap<ArtifactId, Artifact>> {
    let first = jobs.first()?;
    if jobs.len() < 2 || !operations.get(&first.step.operation).ok()?.needs_content() {
        return None;
    }
    let mut ids: Vec<ArtifactId> =
        jobs.iter().flat_map(|j| j.unit.inputs.values().flatten().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    match lake.get_many(&ids).await {
        Ok(found) => Some(found),
        Err(e) => {
            tracing::debug!(error = %e, "a chunk's inputs could not be read at once; each unit reads its own");
            None
        }
    }
}

/// Stage `group` as one sealed unit (its one execution's, or a batch), said
/// before and after.
async fn seal(
    writer: &StagingWriter,
    group: Vec<(StagedExecution, UnitReport)>,
    mut phases: WorkerPhases,
    emit: &mut (dyn FnMut(WorkerEvent) -> Result<()> + Send),
) -> Result<()> {
    let (staged, reports): (Vec<StagedExecution>, Vec<UnitReport>) = group.into_iter().unzip();
    let unit = match staged.as_slice() {
        [] => return Ok(()),
        [one] => one.execution.execution_run_id.clone(),
        _ => paths::new_batch_id(),
    };
    emit(WorkerEvent::Sealing { unit: unit.clone(), reports })?;
    let writer = writer.clone();
    let name = unit.clone();
    let clock = Instant::now();
    let span = tracing::debug_span!("staging", units = staged.len());
    tokio::task::spawn_blocking(move || {
        let _phase = span.entered();
        match staged.as_slice() {
            [one] => writer.write(one),
            _ => writer.write_batch_as(&name, &staged),
        }
    })
    .await
    .map_err(|e| Error::task("staging a chunk's units", e))??;
    phases.staging += clock.elapsed().as_secs_f64();
    emit(WorkerEvent::Sealed { unit, phases })
}

fn staging_writer(lake: &Lake) -> Result<StagingWriter> {
    Ok(StagingWriter::in_area(
        StagingArea::of_lake(lake.root()),
        lake.registry().clone(),
        crate::staging::SyncPolicy::Detect,
    ))
}

/// Worker mode for the local backend: read chunks of [`UnitJob`]s (a JSON
/// array per line) from stdin, run each ([`run_chunk`]) and say
/// what happens as [`WorkerEvent`] lines on stdout. Returns at EOF.
pub async fn serve_stdin(lake: &Lake, operations: &Operations) -> Result<()> {
    use std::io::{BufRead, Write};
    let lake = &lake.clone().with_snapshot_reads();
    let writer = staging_writer(lake)?;
    let id = worker_id();
    // A worker never outlives its orchestrator (even when it is SIGKILLed
    // mid-unit): it would stage results nobody waits for.
    super::process::watch_parent();
    let mut emit = |event: WorkerEvent| -> Result<()> {
        let mut text =
            serde_json::to_string(&event).map_err(|e| Error::json("a worker event", e))?;
        text.push('\n');
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(|e| Error::io("<stdout>", e))
    };
    loop {
        // Plain blocking stdin on a blocking thread, one line at a time.
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|n| (n, line))
        })
        .await
        .map_err(|e| Error::task("reading stdin", e))?
        .map_err(|e| Error::io("<stdin>", e))?;
        let (n, line) = line;
        if n == 0 {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let jobs: Vec<UnitJob> = serde_json::from_str(&line)
            .map_err(|e| Error::json("a chunk of unit jobs on stdin", e))?;
        let jobs: Vec<&UnitJob> = jobs.iter().collect();
        run_chunk(lake, operations, &writer, &jobs, &id, &mut emit).await?;
    }
    Ok(())
}

/// Worker mode for a SLURM array task: run units `task*per_task ..
/// (task+1)*per_task` of a units file (one [`UnitJob`] per line) in chunks,
/// staging them in groups as a local worker does, and say what it did in
/// the task's record ([`super::task_records`]), whose final name
/// tells the orchestrator the task is done.
pub async fn run_slice(
    lake: &Lake,
    operations: &Operations,
    units_file: &std::path::Path,
    task: usize,
    per_task: usize,
) -> Result<usize> {
    use super::task_records::{TaskRecorder, records_dir};
    let text = std::fs::read_to_string(units_file).map_err(|e| Error::io(units_file, e))?;
    let lake = &lake.clone().with_snapshot_reads();
    let writer = staging_writer(lake)?;
    let id = worker_id();
    let jobs = text
        .lines()
        .skip(task * per_task)
        .take(per_task.max(1))
        .map(|line| {
            serde_json::from_str::<UnitJob>(line)
                .map_err(|e| Error::json(format!("a unit job in {}", units_file.display()), e))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut record = TaskRecorder::open(&records_dir(units_file), task)?;
    let mut emit = |event: WorkerEvent| record.record(&event);
    let slice: Vec<&UnitJob> = jobs.iter().collect();
    for chunk in slice.chunks(CHUNK_MOST) {
        run_chunk(lake, operations, &writer, chunk, &id, &mut emit).await?;
    }
    record.finish()?;
    Ok(jobs.len())
}
