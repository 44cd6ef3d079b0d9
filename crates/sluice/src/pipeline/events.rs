//! What a run reports while it goes: progress events and step summaries.
//!
//! A leaf of `pipeline`: the orchestrator (`run`) and each step
//! (`step_run`) emit these; a CLI or a library user observes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::steps_log::StepStatus;

/// Progress of a run, for a progress display.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A step was planned.
    StepStarted {
        /// 1-based number.
        number: i32,
        /// Name.
        name: String,
        /// Units in the step.
        total: usize,
        /// Units answered by the cache.
        cached: usize,
        /// Whether the whole step was skipped.
        skipped: bool,
    },
    /// A dispatched unit finished.
    UnitFinished {
        /// Step number.
        number: i32,
        /// Whether it succeeded.
        success: bool,
    },
    /// The step's results are being committed.
    Committing {
        /// Step number.
        number: i32,
    },
    /// A step finished.
    StepFinished(Box<StepSummary>),
}

/// Observer of run progress.
pub type Observer = Arc<dyn Fn(RunEvent) + Send + Sync>;

/// What one step did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSummary {
    /// 1-based number.
    pub number: i32,
    /// Name.
    pub name: String,
    /// Operation.
    pub operation: String,
    /// Final status.
    pub status: StepStatus,
    /// The step run id.
    pub step_run_id: String,
    /// The step spec id.
    pub step_spec_id: String,
    /// Units in the step.
    pub total: usize,
    /// Units answered by the execution cache (all of them when skipped).
    pub cached: usize,
    /// Units dispatched.
    pub dispatched: usize,
    /// Units that succeeded (cached and adopted included).
    pub succeeded: usize,
    /// Units dispatched here whose spec another run (another orchestrator
    /// of the same pipeline) made succeed first: its outputs are used.
    pub adopted: usize,
    /// Units that failed.
    pub failed: usize,
    /// Units not dispatched because the run stopped.
    pub not_run: usize,
    /// Output artifacts per role.
    pub outputs: BTreeMap<String, usize>,
    /// Failed executions: (run id, error), the first few.
    pub failures: Vec<(String, String)>,
    /// Wall time, seconds.
    pub seconds: f64,
    /// The step's phases in wall seconds: plan, cache_lookup, execute,
    /// commit, collect.
    pub timings: BTreeMap<String, f64>,
    /// Where its workers' time went, in seconds summed over workers (local
    /// backend; zero elsewhere).
    pub worker_seconds: super::unit::WorkerPhases,
    /// Its retry rounds, in order (none when no unit was retried).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<RetryRound>,
}

/// One round of retries of a step.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RetryRound {
    /// The attempt its units made (2 for the first retry).
    pub attempt: u32,
    /// Units dispatched again.
    pub units: usize,
    /// Why, by failure kind (`exit:3`, `timeout`, `preempted`…): units.
    pub reasons: BTreeMap<String, usize>,
    /// How long the round waited before it was dispatched, seconds.
    pub delay_seconds: f64,
}
