//! Dispatch backends: where a step's units run.
//!
//! - [`local`]: a pool of worker processes on this machine (the `sluice`
//!   binary in worker mode), or, when no worker program is set, tasks in the
//!   orchestrating process.
//! - [`slurm`]: job arrays, on a shared filesystem.
//!
//! A backend returns one [`Outcome`] per dispatched unit. A unit whose worker
//! died (or whose SLURM task was cancelled, timed out or ran out of memory)
//! is `Lost`; the orchestrator then stages a failed execution for it, so
//! every dispatched unit ends up in the executions table.

pub mod local;
pub mod slurm;

use crate::lake::io::location::LakeRoot;
use crate::pipeline::worker_program::WorkerProgram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::retry::{FailureKind, RetryPolicy};
use super::unit::{UnitReport, WorkerPhases};

/// What happened to one dispatched unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The worker ran it and staged its execution (success or failure).
    Reported(UnitReport),
    /// The worker never staged it: why, and the kind of failure that is.
    Lost(String, FailureKind),
}

impl Outcome {
    /// How the unit failed, when it did.
    pub fn failure(&self) -> Option<FailureKind> {
        match self {
            Outcome::Reported(report) => report.failed_as(),
            Outcome::Lost(_, kind) => Some(*kind),
        }
    }
}

/// Shared state of one step's dispatch.
#[derive(Clone)]
pub struct Dispatch {
    /// The lake (workers open it).
    pub lake: LakeRoot,
    /// The worker program and its leading arguments (`[exe]`), or none for
    /// in-process execution.
    pub worker_program: Option<WorkerProgram>,
    /// Worker processes (local) at most.
    pub workers: usize,
    /// Set when dispatching must stop (Ctrl-C or a fail-fast failure).
    pub stop: Arc<AtomicBool>,
    /// Set by Ctrl-C only.
    pub cancelled: Arc<AtomicBool>,
    /// Stop at the first failure.
    pub fail_fast: bool,
    /// Failures tolerated before dispatching stops (`max_failed_units`).
    pub max_failed: Option<usize>,
    /// Units that failed so far (a failure that is retried counts only
    /// when its last attempt fails).
    pub failed: Arc<AtomicUsize>,
    /// How failed units are retried.
    pub retry: Arc<RetryPolicy>,
    /// The attempt the units dispatched now are (1: the first).
    pub attempt: u32,
    /// Called after each unit: (succeeded).
    pub on_unit: Arc<dyn Fn(bool) + Send + Sync>,
    /// Where the workers' time went, summed over them (local backend).
    pub phases: Arc<std::sync::Mutex<WorkerPhases>>,
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatch")
            .field("workers", &self.workers)
            .field("fail_fast", &self.fail_fast)
            .finish()
    }
}

impl Dispatch {
    /// Whether dispatching should stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.cancelled.load(Ordering::SeqCst)
    }

    /// Add a worker's `phases` to the step's.
    pub fn spent(&self, phases: &WorkerPhases) {
        if let Ok(mut total) = self.phases.lock() {
            total.add(phases);
        }
    }

    /// Record a finished unit (`failure`: how it failed, if it did); a
    /// failure under fail-fast, or one past `max_failed`, stops
    /// dispatching. A failure the step's policy retries is neither: the
    /// unit is not finished yet.
    pub fn finished(&self, failure: Option<FailureKind>) {
        if let Some(kind) = failure {
            if self.retry.retries(kind, self.attempt) {
                return;
            }
            let failed = self.failed.fetch_add(1, Ordering::SeqCst) + 1;
            if self.failures_tolerated().is_some_and(|most| failed > most) {
                self.stop.store(true, Ordering::SeqCst);
            }
        }
        (self.on_unit)(failure.is_none());
    }

    /// The failed units the step tolerates before it stops: none under
    /// fail-fast, `max_failed` under a limit, `None` without either.
    pub fn failures_tolerated(&self) -> Option<usize> {
        if self.fail_fast { Some(0) } else { self.max_failed }
    }

    /// Whether more units failed than `max_failed` tolerates.
    pub fn gave_up(&self) -> bool {
        self.max_failed.is_some_and(|most| self.failed.load(Ordering::SeqCst) > most)
    }
}
