//! Units of work as they travel between the orchestrator and its workers.
//!
//! A [`Unit`] is what planning produces (inputs, sources, cache key); a
//! [`UnitJob`] is a unit with everything a worker process needs to run it
//! (sent as one JSON line, or one line of a SLURM units file); a
//! [`UnitReport`] is the worker's answer. A local worker is sent jobs a
//! chunk at a time (one JSON array per line) and answers with
//! [`WorkerEvent`] lines as it goes. This module depends on nothing else
//! in `pipeline` but the step's configuration, so the planner, the operations,
//! the workers and the backends can all use it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::{BackendKind, StepConfig};
use super::retry::FailureKind;
use crate::artifact::ArtifactId;

/// One unit of work of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    /// Position in the step (stream order of outputs follows it).
    pub index: usize,
    /// The cache key.
    pub spec_id: String,
    /// Input artifact ids by role.
    pub inputs: BTreeMap<String, Vec<ArtifactId>>,
    /// Source descriptors (operations without inputs).
    pub sources: Vec<Value>,
}

/// Everything a worker needs to run one unit. What every unit of a step
/// shares is shared, not copied: an orchestrator holds a step's jobs at
/// once (100,000 of them held 300 MiB when each had its own step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitJob {
    /// The step.
    #[serde(with = "shared")]
    pub step: Arc<StepConfig>,
    /// Its number (1-based; the partition of what it produces).
    pub step_number: i32,
    /// The step run this unit belongs to.
    pub step_run_id: String,
    /// The pipeline run.
    pub pipeline_run_id: String,
    /// The run id of this execution.
    pub run_id: String,
    /// Where it runs.
    pub backend: BackendKind,
    /// Type of each input role.
    #[serde(with = "shared")]
    pub input_types: Arc<BTreeMap<String, String>>,
    /// The unit.
    pub unit: Unit,
    /// Which attempt at the unit this is (1: the first; more after retries).
    #[serde(default = "first_attempt", skip_serializing_if = "is_first_attempt")]
    pub attempt: u32,
    /// The run of the attempt before this one, and how it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<(String, FailureKind)>,
}

fn first_attempt() -> u32 {
    1
}

fn is_first_attempt(attempt: &u32) -> bool {
    *attempt == 1
}

/// An `Arc<T>` on the wire as the `T` it holds.
mod shared {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<T: Serialize, S: Serializer>(
        value: &Arc<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.as_ref().serialize(serializer)
    }

    pub(super) fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Arc<T>, D::Error> {
        T::deserialize(deserializer).map(Arc::new)
    }
}

/// What a worker tells the orchestrator after a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitReport {
    /// The execution run id.
    pub run_id: String,
    /// Whether the unit succeeded.
    pub success: bool,
    /// The error, when it failed.
    pub error: Option<String>,
    /// How it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
}

impl UnitReport {
    /// How the unit failed (an error its operation said nothing more of is
    /// [`FailureKind::Error`]); `None` when it succeeded.
    pub fn failed_as(&self) -> Option<FailureKind> {
        (!self.success).then(|| self.failure.unwrap_or(FailureKind::Error))
    }
}

/// What a local worker says while it runs a chunk of jobs, one JSON line
/// each. The orchestrator learns from them which unit a dead worker was
/// running (that one failed; the others it had not sealed run again), and
/// which executions are sealed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// It began running this unit.
    Started {
        /// The unit's run id.
        run_id: String,
    },
    /// These units ran; their executions are about to be sealed as the
    /// staged unit `unit` (said before, so that a worker dying as it seals
    /// leaves the orchestrator a name to look for).
    Sealing {
        /// The staged unit: the run id of its one execution, or a batch id.
        unit: String,
        /// What the units did.
        reports: Vec<UnitReport>,
    },
    /// The staged unit is sealed: its reports stand.
    Sealed {
        /// The staged unit.
        unit: String,
        /// Where its units' time went in the worker.
        #[serde(default)]
        phases: WorkerPhases,
    },
}

/// Seconds a worker spent per phase on some units (summed over them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerPhases {
    /// Starting: from the process's spawn to its first word (orchestrator-measured).
    #[serde(default)]
    pub start: f64,
    /// Reading input artifacts (a chunk's look-up, and any unit's own).
    pub input_read: f64,
    /// The operations themselves.
    pub compute: f64,
    /// Encoding, writing and sealing staged units.
    pub staging: f64,
}

impl WorkerPhases {
    /// Add `other`'s seconds to these.
    pub fn add(&mut self, other: &WorkerPhases) {
        self.start += other.start;
        self.input_read += other.input_read;
        self.compute += other.compute;
        self.staging += other.staging;
    }
}
