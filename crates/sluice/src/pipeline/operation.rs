//! Operations: what a step does to each unit of its inputs.
//!
//! An operation is a Rust type implementing [`Operation`]. The built-ins live
//! in [`super::ops`]; a user's crate registers its own with
//! [`register_operation!`](crate::register_operation) and every binary that
//! links it (their own binary calling `sluice_cli::main_entry`) knows them in
//! `sluice run` and in its worker processes, SLURM array tasks included.
//!
//! An operation never writes to the lake: it returns [`Output`]s and the
//! worker stages them (artifacts, edges, the execution row) for the committer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::config::{StepConfig, StepError};
use super::retry::FailureKind;
use super::unit::UnitJob;
use crate::artifact::{Artifact, ArtifactId, Draft};
use crate::error::{Error, Result};
use crate::lake::Lake;

/// What validation knows when it asks an operation for its output roles.
#[derive(Debug)]
pub struct Signature<'a> {
    /// The step.
    pub step: &'a StepConfig,
    /// Type of every input role (implicit ones included).
    pub input_types: &'a BTreeMap<String, String>,
}

/// How a step's inputs become units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Pair the roles (zip or cross) and batch `artifacts_per_unit` sets per unit.
    Paired,
    /// One unit with every input artifact of every role (filter, merge).
    WholeStream,
}

/// An operation a step can run.
pub trait Operation: Send + Sync + 'static {
    /// The name steps use in `operation = "…"`.
    fn name(&self) -> &str;

    /// Bump when the operation's behaviour changes: it is part of every
    /// execution's cache key, so results of older versions are not reused.
    fn version(&self) -> String {
        "1".into()
    }

    /// Output role → artifact type for this step, or why the step is invalid
    /// (wrong input types, missing params). Called before anything runs.
    fn outputs(
        &self,
        signature: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError>;

    /// The params the operation reads, or `None` for any (an operation that
    /// passes them on, as `command` does). A key outside the list fails
    /// validation naming it, so a typo (`sed` for `seed`) never runs, nor
    /// enters the cache key.
    fn known_params(&self) -> Option<&'static [&'static str]> {
        None
    }

    /// Inputs the operation takes from its params rather than `inputs`
    /// (role → `"<step>.<role>"`), e.g. `filter`'s `metric`.
    fn implicit_inputs(&self, _step: &StepConfig) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// For operations without inputs: one JSON descriptor per unit of work
    /// (e.g. one per table to generate, one per file to ingest). Descriptors
    /// are part of the cache key.
    fn source_units(&self, _step: &StepConfig) -> Result<Option<Vec<serde_json::Value>>> {
        Ok(None)
    }

    /// Files whose content the operation's behaviour depends on, beyond its
    /// params (a `command` step's scripts): path → BLAKE3 of the content.
    /// Part of every cache key of the step, so editing one reruns the step.
    fn depends_on(&self, _step: &StepConfig) -> Result<BTreeMap<String, String>> {
        Ok(BTreeMap::new())
    }

    /// What else identifies the operation's behaviour in this step, beyond
    /// its params and files (a `python` step's function and interpreter
    /// version). Part of every cache key of the step.
    fn identity(&self, _step: &StepConfig) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }

    /// How inputs are grouped into units.
    fn grouping(&self) -> Grouping {
        Grouping::Paired
    }

    /// Run in the orchestrating process instead of a worker (cheap
    /// operations that only read the lake, like `filter`).
    fn inline(&self) -> bool {
        false
    }

    /// Whether the unit's input artifacts are loaded (content included) into
    /// [`UnitContext::inputs`]; operations that only pass ids on say no.
    fn needs_content(&self) -> bool {
        true
    }

    /// Run one unit. Called on a blocking thread inside the tokio runtime: use
    /// [`UnitContext::block_on`] for async lake reads.
    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>>;
}

/// One result of a unit.
#[derive(Debug, Clone)]
pub enum Output {
    /// A new artifact for `role`. `derived_from` lists the input artifacts it
    /// derives from; `None` means every input of the unit.
    New {
        /// Output role.
        role: String,
        /// The artifact (the worker sets its step and finalizes it).
        draft: Draft,
        /// Lineage.
        derived_from: Option<Vec<ArtifactId>>,
    },
    /// An artifact already in the lake passed on under `role` (filter, merge).
    Existing {
        /// Output role.
        role: String,
        /// The artifact.
        id: ArtifactId,
    },
}

/// Everything an operation sees of its unit.
#[derive(Debug)]
pub struct UnitContext {
    /// The step.
    pub step: Arc<StepConfig>,
    /// The step's number.
    pub step_number: i32,
    /// The unit's source descriptors (operations without inputs).
    pub sources: Vec<serde_json::Value>,
    /// Input artifact ids by role, in stream order.
    pub input_ids: BTreeMap<String, Vec<ArtifactId>>,
    /// Input artifacts by role, in stream order (empty when the operation
    /// does not need content).
    pub inputs: BTreeMap<String, Vec<Artifact>>,
    /// A scratch directory for this unit, made on first use
    /// ([`UnitContext::work_dir`]) and removed afterwards.
    work_dir: PathBuf,
    work_dir_made: OnceLock<std::result::Result<(), (std::io::ErrorKind, String)>>,
    /// The lake (read-only use).
    pub lake: Lake,
    /// The run id of this execution.
    pub run_id: String,
    /// The unit's wall-time limit (the step's `timeout` or `resources.time`).
    pub time_limit: Option<std::time::Duration>,
    /// The resident memory its tool may use, in bytes: the step's
    /// `resources.memory_gb` on the local backend (on SLURM, `--mem` is
    /// SLURM's to enforce).
    pub memory_limit: Option<u64>,
    tool_output: Arc<Mutex<Option<String>>>,
    failure: Mutex<Option<FailureKind>>,
    handle: tokio::runtime::Handle,
}

impl UnitContext {
    pub(crate) fn new(
        job: &UnitJob,
        inputs: BTreeMap<String, Vec<Artifact>>,
        work_dir: PathBuf,
        lake: Lake,
    ) -> Self {
        UnitContext {
            step: job.step.clone(),
            step_number: job.step_number,
            sources: job.unit.sources.clone(),
            input_ids: job.unit.inputs.clone(),
            inputs,
            work_dir,
            work_dir_made: OnceLock::new(),
            lake,
            run_id: job.run_id.clone(),
            time_limit: job.step.time_limit_on(job.backend).ok().flatten(),
            memory_limit: match job.backend {
                super::config::BackendKind::Local => {
                    job.step.resources.memory_gb.map(|gb| u64::from(gb) << 30)
                }
                _ => None,
            },
            tool_output: Arc::new(Mutex::new(None)),
            failure: Mutex::new(None),
            handle: tokio::runtime::Handle::current(),
        }
    }

    /// The operation's parameters.
    pub fn params(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.step.params
    }

    /// A parameter, or an error naming it.
    pub fn param(&self, name: &str) -> Result<&serde_json::Value> {
        self.step.params.get(name).ok_or_else(|| {
            Error::operation(&self.step.operation, format!("parameter `{name}` is required"))
        })
    }

    /// All input artifacts, every role, in role then stream order.
    pub fn all_inputs(&self) -> impl Iterator<Item = &Artifact> {
        self.inputs.values().flatten()
    }

    /// Keep a tool's output (its tail is stored in `executions.tool_output`).
    pub fn set_tool_output(&self, text: String) {
        if let Ok(mut slot) = self.tool_output.lock() {
            *slot = Some(text);
        }
    }

    pub(crate) fn take_tool_output(&self) -> Option<String> {
        self.tool_output.lock().ok().and_then(|mut s| s.take())
    }

    /// Say how the unit failed, when the error it returns is a tool's exit,
    /// signal or time limit (retries read it; an error said nothing of is
    /// [`FailureKind::Error`]).
    pub fn set_failure(&self, kind: FailureKind) {
        if let Ok(mut slot) = self.failure.lock() {
            *slot = Some(kind);
        }
    }

    pub(crate) fn take_failure(&self) -> Option<FailureKind> {
        self.failure.lock().ok().and_then(|mut s| s.take())
    }

    /// Run an async lake read from the operation's (blocking) thread.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// The unit's scratch directory, empty when first asked for (made
    /// then, so that units that need none cost no folder) and removed after
    /// the unit.
    pub fn work_dir(&self) -> Result<&Path> {
        let made = self.work_dir_made.get_or_init(|| {
            let dir = &self.work_dir;
            // A unit run again after its worker died finds the dead one's sandbox.
            let fresh = match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => std::fs::create_dir_all(dir),
            };
            fresh.map_err(|e| (e.kind(), e.to_string()))
        });
        match made {
            Ok(()) => Ok(&self.work_dir),
            Err((kind, why)) => {
                Err(Error::io(&self.work_dir, std::io::Error::new(*kind, why.clone())))
            }
        }
    }

    /// Whether [`UnitContext::work_dir`] was asked for (and so is to be removed).
    pub(crate) fn made_work_dir(&self) -> bool {
        self.work_dir_made.get().is_some()
    }
}
