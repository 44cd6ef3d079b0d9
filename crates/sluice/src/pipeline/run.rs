//! The orchestrator: run a validated pipeline step by step.
//!
//! ```text
//! recover leftovers ─▶ for each step:
//!   inputs = upstream output streams
//!   units  = pairing + batching, each with execution_spec_id; step_spec_id
//!   step cache: spec completed before? ─ yes ─▶ record `skipped`, reuse its outputs
//!   record `running`
//!   execution cache: one scan → units with a successful execution are not dispatched
//!   dispatch the rest (inline, local workers, or a SLURM array)
//!   lost units → staged failed executions
//!   commit this step's staging
//!   read back results and outputs (one scan each) → output streams
//!   record `completed` / `failed` / `cancelled` with counts and timings
//! ```

use std::collections::BTreeMap;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;

use super::backend::slurm::SlurmOptions;
use super::checks::{self, CheckedStep};
use super::config::BackendKind;
pub use super::events::{Observer, RunEvent, StepSummary};
use super::ops::Operations;
use super::plan;
use super::step_run::{RunContext, StepRun};
use super::steps_log::{StepStatus, Streams};
use super::validate::Pipeline;
use super::worker_program::WorkerProgram;
use crate::error::Result;
use crate::lake::Lake;

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Pipeline name.
    pub pipeline: String,
    /// The run's id.
    pub pipeline_run_id: String,
    /// Steps that ran, in order.
    pub steps: Vec<StepSummary>,
    /// Whether Ctrl-C stopped it.
    pub cancelled: bool,
    /// Whether a failure stopped it.
    pub stopped_by_failure: bool,
    /// What the checks of its steps found, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<super::checks::CheckResult>,
    /// Steps not run because they read outputs a failing check blocked:
    /// (step, the check and step that blocked it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<(String, String)>,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl RunReport {
    /// Units that failed, over all steps.
    pub fn failed_units(&self) -> usize {
        self.steps.iter().map(|s| s.failed).sum()
    }

    /// Checks of severity `error` that failed.
    pub fn failed_checks(&self) -> usize {
        self.checks.iter().filter(|c| c.blocks()).count()
    }
}

/// Run a pipeline. Build it with [`Lake::run`].
#[must_use = "a run does nothing until executed"]
pub struct RunBuilder<'a> {
    lake: &'a Lake,
    pipeline: Pipeline,
    operations: Operations,
    backend: Option<BackendKind>,
    workers: usize,
    worker_program: Option<WorkerProgram>,
    cancel: Arc<AtomicBool>,
    observer: Option<Observer>,
    slurm: SlurmOptions,
}

impl std::fmt::Debug for RunBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBuilder")
            .field("pipeline", &self.pipeline.config.name)
            .field("workers", &self.workers)
            .finish()
    }
}

impl Lake {
    /// Run a validated pipeline on this lake.
    pub fn run(&self, pipeline: Pipeline, operations: Operations) -> RunBuilder<'_> {
        RunBuilder {
            lake: self,
            pipeline,
            operations,
            backend: None,
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            worker_program: None,
            cancel: Arc::new(AtomicBool::new(false)),
            observer: None,
            slurm: SlurmOptions::default(),
        }
    }
}

impl RunBuilder<'_> {
    /// Override every step's backend.
    pub fn with_backend(mut self, backend: Option<BackendKind>) -> Self {
        self.backend = backend;
        self
    }

    /// Local worker processes (default: cores).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// The program to start as worker (`<program> [leading…] --lake L
    /// __worker`, see [`WorkerProgram`]); without one, local units run as
    /// tasks of this process.
    pub fn with_worker_program(mut self, program: Option<WorkerProgram>) -> Self {
        self.worker_program = program;
        self
    }

    /// A flag that stops the run when set (wire it to Ctrl-C).
    pub fn with_cancel_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = flag;
        self
    }

    /// Receive progress events.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// SLURM backend settings.
    pub fn with_slurm_options(mut self, options: SlurmOptions) -> Self {
        self.slurm = options;
        self
    }

    /// Run the pipeline, then tell its hooks how it ended.
    pub async fn execute(self) -> Result<RunReport> {
        let outcome = self.run_steps().await;
        let config = &self.pipeline.config;
        let folder = config.path.parent().filter(|p| !p.as_os_str().is_empty());
        let folder = folder.unwrap_or(std::path::Path::new("."));
        let (event, summary) = match &outcome {
            Ok(report) => {
                // As `sluice run` exits: failed when any unit failed.
                let failed = report.cancelled
                    || report.stopped_by_failure
                    || report.failed_units() > 0
                    || report.failed_checks() > 0;
                let summary = serde_json::to_value(report).unwrap_or_default();
                (if failed { "failure" } else { "success" }, summary)
            }
            Err(e) => {
                ("failure", serde_json::json!({ "pipeline": config.name, "error": e.to_string() }))
            }
        };
        if let Ok(report) = &outcome
            && report.checks.iter().any(|c| !c.passed)
        {
            config.hooks.fire("check_failed", summary.clone(), folder).await;
        }
        config.hooks.fire(event, summary, folder).await;
        outcome
    }

    async fn run_steps(&self) -> Result<RunReport> {
        let started = Instant::now();
        // Anything a crashed run left sealed is committed first.
        // Boxed, as each step below: the run's future holds one at a time.
        let recovered = Box::pin(self.lake.recover().execute()).await?;
        if recovered.runs_committed > 0 {
            tracing::info!(
                runs = recovered.runs_committed,
                "recovered staging left by an earlier run"
            );
        }
        let abandoned = super::steps_log::close_abandoned(self.lake, None).await?;
        if !abandoned.is_empty() {
            tracing::warn!(
                steps = abandoned.len(),
                "steps left running by a dead orchestrator were recorded as abandoned"
            );
        }
        let config = &self.pipeline.config;
        let mut report = RunReport {
            pipeline: config.name.clone(),
            pipeline_run_id: plan::new_run_id(),
            steps: Vec::new(),
            cancelled: false,
            stopped_by_failure: false,
            checks: Vec::new(),
            blocked: Vec::new(),
            seconds: 0.0,
        };
        let context = RunContext {
            lake: self.lake,
            pipeline: &self.pipeline,
            operations: &self.operations,
            backend: self.backend,
            workers: self.workers,
            worker_program: self.worker_program.clone(),
            cancel: self.cancel.clone(),
            observer: self.observer.clone(),
            slurm: &self.slurm,
        };
        let mut streams: Vec<Streams> = Vec::new();
        let mut specs: Vec<String> = Vec::new();
        let run_id = report.pipeline_run_id.clone();
        // (step, output role) → the failing check that keeps it from the steps after.
        let mut blocked: BTreeMap<(usize, String), String> = BTreeMap::new();
        for index in 0..config.steps.len() {
            if self.cancel.load(Ordering::SeqCst) {
                report.cancelled = true;
                self.not_reached(index.., &run_id, "the run was cancelled").await;
                break;
            }
            if let Some(why) = self.blocked_inputs(index, &blocked) {
                for role in self.pipeline.outputs[index].keys() {
                    blocked.insert((index, role.clone()), why.clone());
                }
                self.not_reached(index..=index, &run_id, &why).await;
                report.blocked.push((config.steps[index].name.clone(), why));
                streams.push(Streams::new());
                specs.push(String::new());
                continue;
            }
            let name = &config.steps[index].name;
            let upstream = format!("step {} ({name}) failed", index + 1);
            let planned = StepRun::plan(&context, index, &streams, &specs, &run_id);
            let executed = match planned {
                Ok(step) => Box::pin(step.execute()).await,
                Err(e) => Err(e),
            };
            let (summary, outputs, spec) = match executed {
                Ok(done) => done,
                Err(e) => {
                    self.not_reached(index + 1.., &run_id, &upstream).await;
                    return Err(e);
                }
            };
            let status = summary.status;
            if matches!(status, StepStatus::Completed | StepStatus::Skipped) {
                let checks = self.pipeline.checks_of(index);
                let at = CheckedStep {
                    pipeline_run_id: &run_id,
                    step_run_id: &summary.step_run_id,
                    step_number: summary.number,
                };
                let results = checks::evaluate(self.lake, &checks, &outputs).await?;
                checks::record(self.lake, &at, &results).await?;
                let roles = &self.pipeline.outputs[index];
                blocked.extend(checks::blocked_outputs(&results, &checks, index, roles));
                report.checks.extend(results);
            }
            context.emit(RunEvent::StepFinished(Box::new(summary.clone())));
            report.steps.push(summary);
            streams.push(outputs);
            specs.push(spec);
            match status {
                StepStatus::Cancelled => {
                    report.cancelled = true;
                    self.not_reached(index + 1.., &run_id, "the run was cancelled").await;
                    break;
                }
                StepStatus::Failed => {
                    report.stopped_by_failure = true;
                    self.not_reached(index + 1.., &run_id, &upstream).await;
                    break;
                }
                _ => {}
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Why step `index` may not run: an input it reads (directly) is an
    /// output a failing check blocked (a blocked step's outputs are
    /// blocked in turn, so this reaches every step downstream).
    fn blocked_inputs(
        &self,
        index: usize,
        blocked: &BTreeMap<(usize, String), String>,
    ) -> Option<String> {
        let config = &self.pipeline.config;
        self.pipeline.inputs[index].values().find_map(|r| {
            let from = config.step_index(&r.step)?;
            blocked.get(&(from, r.role.clone())).map(|why| format!("blocked: {why}"))
        })
    }

    /// Record the steps at `indices` as not reached, with why (best effort:
    /// the run reports its own outcome either way), so `status` lists every
    /// step of the pipeline, as dbt lists a skipped model.
    async fn not_reached(&self, indices: impl RangeBounds<usize>, run_id: &str, why: &str) {
        let config = &self.pipeline.config;
        for (index, step) in config.steps.iter().enumerate() {
            if !indices.contains(&index) {
                continue;
            }
            let record = super::steps_log::StepRecord {
                step_run_id: plan::new_run_id(),
                step_spec_id: String::new(),
                pipeline_run_id: run_id.to_owned(),
                step_number: index as i32 + 1,
                step_name: step.name.clone(),
                status: StepStatus::NotReached,
                operation_name: step.operation.clone(),
                params: serde_json::Value::Object(step.params.clone()).to_string(),
                total_count: None,
                succeeded_count: None,
                failed_count: None,
                timestamp: chrono::Utc::now().timestamp_micros(),
                duration_seconds: None,
                error: Some(format!("not reached: {why}")),
                metadata: serde_json::json!({ "pipeline": config.name }),
            };
            if let Err(e) = super::steps_log::append(self.lake, &record).await {
                tracing::warn!(step = %step.name, error = %e, "could not record a step as not reached");
                return;
            }
        }
    }
}
