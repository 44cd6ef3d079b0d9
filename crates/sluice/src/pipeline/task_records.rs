//! What an array task says it did, in a file the orchestrator reads: the
//! SLURM counterpart of a local worker's event lines on stdout.
//!
//! A task runs many units and stages them in batches, so the orchestrator
//! cannot wait for one staged file per unit; it needs each task's word on
//! which staged unit holds which units. Task `t` appends
//! [`WorkerEvent`] lines to `tasks/.t.events.part` as it goes — "started
//! unit", "sealing staged unit X with these reports", "sealed X" — and
//! renames the file to `tasks/t.events` when it has sealed everything. The
//! rename is the task's "done": the orchestrator stops waiting on the queue
//! once every task's file has its final name, and reads a dead task's
//! `.part` file to learn what it sealed and which unit it was running.
//!
//! No line is synced on its own. A line a crash took with it can only say
//! less than what happened: a batch sealed without its "sealing" line is a
//! result whose units the orchestrator records as lost, and a late result
//! of a unit recorded as lost is discarded at commit (the committer's rule,
//! not this file's), so the file never has to be durable to be safe.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::pipeline::unit::{UnitReport, WorkerEvent, WorkerPhases};

/// The folder of a step's task records, beside its units file.
pub(crate) fn records_dir(units_file: &Path) -> PathBuf {
    units_file.parent().unwrap_or(Path::new(".")).join("tasks")
}

fn running_name(task: usize) -> String {
    format!(".{task}.events.part")
}

fn finished_name(task: usize) -> String {
    format!("{task}.events")
}

/// A task's record as it writes it.
pub(crate) struct TaskRecorder {
    file: std::fs::File,
    running: PathBuf,
    finished: PathBuf,
}

impl TaskRecorder {
    /// Open (or, for a task SLURM runs again, reopen to append to) task
    /// `task`'s record in `dir`.
    pub(crate) fn open(dir: &Path, task: usize) -> Result<TaskRecorder> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let running = dir.join(running_name(task));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&running)
            .map_err(|e| Error::io(&running, e))?;
        Ok(TaskRecorder { file, running, finished: dir.join(finished_name(task)) })
    }

    /// Append one event as a line.
    pub(crate) fn record(&mut self, event: &WorkerEvent) -> Result<()> {
        let mut line =
            serde_json::to_string(event).map_err(|e| Error::json("a task's event", e))?;
        line.push('\n');
        self.file.write_all(line.as_bytes()).map_err(|e| Error::io(&self.running, e))
    }

    /// Give the record its final name: every unit of the task is accounted for.
    pub(crate) fn finish(self) -> Result<()> {
        drop(self.file);
        std::fs::rename(&self.running, &self.finished).map_err(|e| Error::io(&self.running, e))
    }
}

/// How many tasks below `tasks` have finished their record.
pub(crate) fn finished_count(dir: &Path, tasks: usize) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name();
            name.to_str()?.strip_suffix(".events")?.parse::<usize>().ok()
        })
        .filter(|&task| task < tasks)
        .collect::<HashSet<_>>()
        .len()
}

/// How many units the tasks below `tasks` have reported failed so far (in
/// staged units they sealed or were sealing): what a step's
/// `max_failed_units` is judged by while its array runs.
pub(crate) fn failures_so_far(
    dir: &Path,
    tasks: usize,
    counts: impl Fn(crate::pipeline::retry::FailureKind) -> bool,
) -> usize {
    (0..tasks)
        .filter_map(|task| read(dir, task).ok())
        .map(|record| {
            let sealed = record.sealed.iter().flat_map(|(_, reports)| reports);
            let sealing = record.sealing.iter().flat_map(|(_, reports)| reports);
            sealed.chain(sealing).filter(|report| report.failed_as().is_some_and(&counts)).count()
        })
        .sum()
}

/// What a task's record says, read after the task ended (or was never
/// seen to start).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct TaskRecord {
    /// The record has its final name: the task sealed every unit it ran.
    pub finished: bool,
    /// Staged units it sealed, with the reports of their units.
    pub sealed: Vec<(String, Vec<UnitReport>)>,
    /// A staged unit it said it was sealing when it stopped.
    pub sealing: Option<(String, Vec<UnitReport>)>,
    /// Units it ran whose staged unit it had not started to seal.
    pub ran: Vec<String>,
    /// The unit it had started and not finished when it stopped.
    pub running: Option<String>,
    /// Where the time of the units it sealed went.
    pub phases: WorkerPhases,
}

/// Read task `task`'s record in `dir`; a line cut short by the task's end
/// is ignored.
pub(crate) fn read(dir: &Path, task: usize) -> Result<TaskRecord> {
    let finished = dir.join(finished_name(task));
    let (path, done) =
        if finished.exists() { (finished, true) } else { (dir.join(running_name(task)), false) };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let mut record = TaskRecord { finished: done, ..TaskRecord::default() };
    for event in text.lines().filter_map(|l| serde_json::from_str::<WorkerEvent>(l).ok()) {
        match event {
            WorkerEvent::Started { run_id } => {
                if let Some(done) = record.running.replace(run_id) {
                    record.ran.push(done);
                }
            }
            WorkerEvent::Sealing { unit, reports } => {
                record.running = None;
                record.ran.clear();
                record.sealing = Some((unit, reports));
            }
            WorkerEvent::Sealed { unit, phases } => {
                if let Some(sealed) = record.sealing.take_if(|(u, _)| *u == unit) {
                    record.sealed.push(sealed);
                    record.phases.add(&phases);
                }
            }
        }
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(run: &str) -> UnitReport {
        UnitReport { run_id: run.into(), success: true, error: None, failure: None }
    }

    fn compute(seconds: f64) -> WorkerPhases {
        WorkerPhases { compute: seconds, ..WorkerPhases::default() }
    }

    fn started(run: &str) -> WorkerEvent {
        WorkerEvent::Started { run_id: run.into() }
    }

    #[test]
    fn a_finished_task_names_what_it_sealed_and_counts_as_done() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = TaskRecorder::open(dir.path(), 3).unwrap();
        for event in [
            started("a"),
            started("b"),
            WorkerEvent::Sealing {
                unit: "x.batch".into(),
                reports: vec![report("a"), report("b")],
            },
            WorkerEvent::Sealed { unit: "x.batch".into(), phases: compute(0.25) },
            started("c"),
            WorkerEvent::Sealing { unit: "c".into(), reports: vec![report("c")] },
            WorkerEvent::Sealed { unit: "c".into(), phases: compute(0.5) },
        ] {
            rec.record(&event).unwrap();
        }
        assert_eq!(finished_count(dir.path(), 4), 0, "not done before its rename");
        rec.finish().unwrap();
        assert_eq!(finished_count(dir.path(), 4), 1);
        assert_eq!(finished_count(dir.path(), 3), 0, "a task beyond the step's is not counted");
        let record = read(dir.path(), 3).unwrap();
        assert!(record.finished);
        assert_eq!(record.sealed.len(), 2);
        assert_eq!(record.sealed[0].0, "x.batch");
        assert_eq!(record.sealed[0].1, vec![report("a"), report("b")]);
        assert_eq!((record.sealing, record.running, record.ran.len()), (None, None, 0));
        assert_eq!(record.phases.compute, 0.75, "the sealed units' time is summed");
    }

    #[test]
    fn a_dead_task_says_what_it_was_sealing_running_and_had_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = TaskRecorder::open(dir.path(), 0).unwrap();
        for event in [
            started("a"),
            WorkerEvent::Sealing { unit: "x.batch".into(), reports: vec![report("a")] },
            started("b"),
            started("c"),
        ] {
            rec.record(&event).unwrap();
        }
        drop(rec);
        // The kill cut its last line short.
        let part = dir.path().join(running_name(0));
        let mut f = std::fs::OpenOptions::new().append(true).open(&part).unwrap();
        f.write_all(b"{\"event\":\"sta").unwrap();
        let record = read(dir.path(), 0).unwrap();
        assert!(!record.finished);
        assert!(record.sealed.is_empty());
        assert_eq!(record.sealing.as_ref().map(|(u, _)| u.as_str()), Some("x.batch"));
        assert_eq!(record.ran, vec!["b".to_owned()]);
        assert_eq!(record.running.as_deref(), Some("c"));
        assert_eq!(read(dir.path(), 9).unwrap(), TaskRecord::default(), "never started");
    }

    #[test]
    fn a_task_run_again_appends_to_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = TaskRecorder::open(dir.path(), 1).unwrap();
        first
            .record(&WorkerEvent::Sealing { unit: "a".into(), reports: vec![report("a")] })
            .unwrap();
        first
            .record(&WorkerEvent::Sealed { unit: "a".into(), phases: Default::default() })
            .unwrap();
        drop(first);
        let mut again = TaskRecorder::open(dir.path(), 1).unwrap();
        again.record(&started("a")).unwrap();
        again
            .record(&WorkerEvent::Sealing { unit: "a".into(), reports: vec![report("a")] })
            .unwrap();
        again
            .record(&WorkerEvent::Sealed { unit: "a".into(), phases: Default::default() })
            .unwrap();
        again.finish().unwrap();
        let record = read(dir.path(), 1).unwrap();
        assert_eq!(record.sealed.len(), 2, "both attempts' seals are read");
    }
}
