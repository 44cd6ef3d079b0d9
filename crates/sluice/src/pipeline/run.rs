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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use super::backend::{self, Dispatch, Outcome, slurm::SlurmOptions};
use super::cache;
use super::config::{BackendKind, FailurePolicy};
use super::operation::Operations;
use super::plan::{self, Unit};
use super::steps_log::{self, StepRecord, StepStatus, Streams};
use super::validate::Pipeline;
use super::worker::{UnitJob, stage_failure, worker_id};
use crate::artifact::{ArtifactId, canonical_json};
use crate::error::Result;
use crate::lake::Lake;
use crate::staging::{self, StagingWriter, SyncPolicy};

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
    StepFinished(StepSummary),
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
    /// Units that succeeded (cached included).
    pub succeeded: usize,
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
}

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
    /// Wall time, seconds.
    pub seconds: f64,
}

impl RunReport {
    /// Units that failed, over all steps.
    pub fn failed_units(&self) -> usize {
        self.steps.iter().map(|s| s.failed).sum()
    }
}

/// Failures kept in a step's summary and metadata.
const FAILURES_KEPT: usize = 20;

/// Run a pipeline. Build it with [`Lake::run`].
#[must_use = "a run does nothing until executed"]
pub struct RunBuilder<'a> {
    lake: &'a Lake,
    pipeline: Pipeline,
    operations: Operations,
    backend: Option<BackendKind>,
    workers: usize,
    worker_program: Option<PathBuf>,
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

    /// The binary to start as worker (`<program> --lake L __worker`); without
    /// one, local units run as tasks of this process.
    pub fn with_worker_program(mut self, program: Option<PathBuf>) -> Self {
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

    fn emit(&self, event: RunEvent) {
        if let Some(o) = &self.observer {
            o(event);
        }
    }

    /// Run the pipeline.
    pub async fn execute(self) -> Result<RunReport> {
        let started = Instant::now();
        // Anything a crashed run left sealed is committed first.
        let recovered = self.lake.recover().execute().await?;
        if recovered.runs_committed > 0 {
            tracing::info!(
                runs = recovered.runs_committed,
                "recovered staging left by an earlier run"
            );
        }
        let config = &self.pipeline.config;
        let mut report = RunReport {
            pipeline: config.name.clone(),
            pipeline_run_id: plan::new_run_id(),
            steps: Vec::new(),
            cancelled: false,
            stopped_by_failure: false,
            seconds: 0.0,
        };
        let mut streams: Vec<Streams> = Vec::new();
        let mut specs: Vec<String> = Vec::new();
        for index in 0..config.steps.len() {
            if self.cancel.load(Ordering::SeqCst) {
                report.cancelled = true;
                break;
            }
            let (summary, outputs, spec) =
                self.run_step(index, &streams, &specs, &report.pipeline_run_id).await?;
            let status = summary.status;
            self.emit(RunEvent::StepFinished(summary.clone()));
            report.steps.push(summary);
            streams.push(outputs);
            specs.push(spec);
            match status {
                StepStatus::Cancelled => {
                    report.cancelled = true;
                    break;
                }
                StepStatus::Failed => {
                    report.stopped_by_failure = true;
                    break;
                }
                _ => {}
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    async fn run_step(
        &self,
        index: usize,
        streams: &[Streams],
        specs: &[String],
        pipeline_run_id: &str,
    ) -> Result<(StepSummary, Streams, String)> {
        let clock = Instant::now();
        let config = &self.pipeline.config;
        let step = &config.steps[index];
        let op = self.pipeline.operations[index].clone();
        let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
        let mut timings: BTreeMap<&str, f64> = BTreeMap::new();
        let mut phase = Instant::now();
        let mut lap = |name: &'static str, timings: &mut BTreeMap<&str, f64>| {
            timings.insert(name, phase.elapsed().as_secs_f64());
            phase = Instant::now();
        };

        // 1. Inputs and units.
        let mut inputs: BTreeMap<String, Vec<ArtifactId>> = BTreeMap::new();
        let mut input_types = BTreeMap::new();
        let mut upstream = Vec::new();
        for (role, r) in &self.pipeline.inputs[index] {
            let j = config.step_index(&r.step).unwrap_or(0);
            inputs.insert(
                role.clone(),
                streams.get(j).and_then(|s| s.get(&r.role)).cloned().unwrap_or_default(),
            );
            input_types.insert(
                role.clone(),
                self.pipeline.outputs[j].get(&r.role).cloned().unwrap_or_default(),
            );
            upstream.push(specs.get(j).cloned().unwrap_or_default());
        }
        let units = plan::plan_units(step, op.as_ref(), &inputs)
            .map_err(|e| config.step_error(index, e))?;
        let step_spec_id = plan::step_spec_id(step, op.as_ref(), &upstream, &units)?;
        let step_run_id = plan::new_run_id();
        let params = canonical_json::to_string(&serde_json::Value::Object(step.params.clone()))?;
        let record = |status: StepStatus| StepRecord {
            step_run_id: step_run_id.clone(),
            step_spec_id: step_spec_id.clone(),
            pipeline_run_id: pipeline_run_id.to_owned(),
            step_number: number,
            step_name: step.name.clone(),
            status,
            operation_name: step.operation.clone(),
            params: params.clone(),
            total_count: None,
            succeeded_count: None,
            failed_count: None,
            timestamp: chrono::Utc::now().timestamp_micros(),
            duration_seconds: None,
            error: None,
            metadata: json!({ "pipeline": config.name }),
        };
        let mut summary = StepSummary {
            number,
            name: step.name.clone(),
            operation: step.operation.clone(),
            status: StepStatus::Running,
            step_run_id: step_run_id.clone(),
            step_spec_id: step_spec_id.clone(),
            total: units.len(),
            cached: 0,
            dispatched: 0,
            succeeded: 0,
            failed: 0,
            not_run: 0,
            outputs: BTreeMap::new(),
            failures: Vec::new(),
            seconds: 0.0,
        };
        lap("plan", &mut timings);

        // 2. Step-level cache.
        if let Some(done) = steps_log::completed_spec(self.lake, &step_spec_id).await? {
            let outputs = done.outputs();
            summary.status = StepStatus::Skipped;
            summary.cached = units.len();
            summary.succeeded = units.len();
            summary.outputs = outputs.iter().map(|(r, ids)| (r.clone(), ids.len())).collect();
            self.emit(RunEvent::StepStarted {
                number,
                name: step.name.clone(),
                total: units.len(),
                cached: units.len(),
                skipped: true,
            });
            lap("cache_lookup", &mut timings);
            summary.seconds = clock.elapsed().as_secs_f64();
            let mut row = record(StepStatus::Skipped);
            row.total_count = Some(units.len() as i64);
            row.succeeded_count = Some(units.len() as i64);
            row.failed_count = Some(0);
            row.duration_seconds = Some(summary.seconds);
            row.metadata = json!({
                "pipeline": config.name,
                "reused_step_run_id": done.step_run_id,
                "timings": timings,
            });
            steps_log::append(self.lake, &row).await?;
            return Ok((summary, outputs, step_spec_id));
        }
        steps_log::append(self.lake, &record(StepStatus::Running)).await?;

        // 3. Execution-level cache: one scan for the whole step.
        let wanted: HashSet<String> = units.iter().map(|u| u.spec_id.clone()).collect();
        let cached = cache::successful_runs(self.lake, &wanted).await?;
        lap("cache_lookup", &mut timings);
        let backend_kind = self.backend.unwrap_or_else(|| config.backend_of(index));
        let mut unit_runs: Vec<(Unit, String, bool)> = Vec::with_capacity(units.len());
        let mut jobs = Vec::new();
        for unit in units {
            match cached.get(&unit.spec_id) {
                Some(run) => {
                    let run = run.clone();
                    unit_runs.push((unit, run, true));
                }
                None => {
                    let run_id = plan::new_run_id();
                    jobs.push(UnitJob {
                        step: step.clone(),
                        step_number: number,
                        step_run_id: step_run_id.clone(),
                        pipeline_run_id: pipeline_run_id.to_owned(),
                        run_id: run_id.clone(),
                        backend: backend_kind,
                        input_types: input_types.clone(),
                        unit: unit.clone(),
                    });
                    unit_runs.push((unit, run_id, false));
                }
            }
        }
        summary.cached = unit_runs.iter().filter(|(_, _, c)| *c).count();
        self.emit(RunEvent::StepStarted {
            number,
            name: step.name.clone(),
            total: unit_runs.len(),
            cached: summary.cached,
            skipped: false,
        });

        // 4. Dispatch.
        let staging_root = staging::default_root(self.lake.root());
        let writer =
            StagingWriter::new(&staging_root, self.lake.registry().clone(), SyncPolicy::Detect);
        let observer = self.observer.clone();
        let dispatch = Dispatch {
            lake_root: self.lake.root().to_path_buf(),
            worker_program: if op.inline() { None } else { self.worker_program.clone() },
            workers: self.workers,
            stop: Arc::new(AtomicBool::new(false)),
            cancelled: self.cancel.clone(),
            fail_fast: config.failure_of(index) == FailurePolicy::FailFast,
            on_unit: Arc::new(move |success| {
                if let Some(o) = &observer {
                    o(RunEvent::UnitFinished { number, success });
                }
            }),
        };
        let job_count = jobs.len();
        let outcomes = if op.inline() || backend_kind == BackendKind::Local {
            backend::local::run(self.lake, &self.operations, &writer, &dispatch, jobs.clone())
                .await?
        } else {
            backend::slurm::run(&dispatch, &staging_root, step, jobs.clone(), &self.slurm).await?
        };
        lap("execute", &mut timings);
        let by_run: HashMap<&str, &UnitJob> = jobs.iter().map(|j| (j.run_id.as_str(), j)).collect();
        let mut dispatched: HashSet<String> = HashSet::new();
        let local_id = worker_id();
        for (run_id, outcome) in &outcomes {
            dispatched.insert(run_id.clone());
            if let (Outcome::Lost(why), Some(job)) = (outcome, by_run.get(run_id.as_str())) {
                stage_failure(&writer, job, why, &local_id)?;
            }
        }
        summary.dispatched = dispatched.len();
        summary.not_run = job_count - dispatched.len();

        // 5. Commit this step's staging.
        self.emit(RunEvent::Committing { number });
        let committed = self.lake.commit().with_step(Some(number)).execute().await?;
        let quarantined: Vec<String> = committed
            .quarantined
            .iter()
            .map(|(p, why)| format!("{}: {why}", p.display()))
            .collect();
        lap("commit", &mut timings);

        // 6. Results and outputs, from the lake.
        let results = cache::step_results(self.lake, number, &step_run_id).await?;
        let mut good_runs: HashSet<String> = HashSet::new();
        for (_, run, was_cached) in &unit_runs {
            if *was_cached {
                summary.succeeded += 1;
                good_runs.insert(run.clone());
            } else if !dispatched.contains(run) {
                continue;
            } else {
                match results.get(run) {
                    Some(r) if r.success => {
                        summary.succeeded += 1;
                        good_runs.insert(run.clone());
                    }
                    Some(r) => {
                        summary.failed += 1;
                        if summary.failures.len() < FAILURES_KEPT {
                            summary
                                .failures
                                .push((run.clone(), r.error.clone().unwrap_or_default()));
                        }
                    }
                    None => {
                        summary.failed += 1;
                        if summary.failures.len() < FAILURES_KEPT {
                            let why = quarantined
                                .iter()
                                .find(|q| q.contains(run.as_str()))
                                .cloned()
                                .unwrap_or_else(|| "its results were not committed".into());
                            summary.failures.push((run.clone(), why));
                        }
                    }
                }
            }
        }
        let outputs_by_run = cache::outputs_of(self.lake, &good_runs).await?;
        let mut outputs: Streams =
            self.pipeline.outputs[index].keys().map(|r| (r.clone(), Vec::new())).collect();
        let mut seen: HashSet<(String, ArtifactId)> = HashSet::new();
        for (_, run, _) in &unit_runs {
            for (role, id) in outputs_by_run.get(run).into_iter().flatten() {
                if seen.insert((role.clone(), *id)) {
                    outputs.entry(role.clone()).or_default().push(*id);
                }
            }
        }
        summary.outputs = outputs.iter().map(|(r, ids)| (r.clone(), ids.len())).collect();
        lap("collect", &mut timings);

        // 7. The final row.
        let cancelled = self.cancel.load(Ordering::SeqCst) && summary.not_run > 0;
        summary.status = if cancelled {
            StepStatus::Cancelled
        } else if summary.failed > 0 && (dispatch.fail_fast || summary.succeeded == 0) {
            StepStatus::Failed
        } else {
            StepStatus::Completed
        };
        summary.seconds = clock.elapsed().as_secs_f64();
        let mut row = record(summary.status);
        row.total_count = Some(summary.total as i64);
        row.succeeded_count = Some(summary.succeeded as i64);
        row.failed_count = Some((summary.failed + summary.not_run) as i64);
        row.duration_seconds = Some(summary.seconds);
        row.error = match summary.status {
            StepStatus::Cancelled => Some(format!("cancelled; {} units not run", summary.not_run)),
            StepStatus::Failed => {
                Some(format!("{} of {} units failed", summary.failed, summary.total))
            }
            _ => None,
        };
        row.metadata = json!({
            "pipeline": config.name,
            "backend": backend_kind.as_str(),
            "cached": summary.cached,
            "dispatched": summary.dispatched,
            "not_run": summary.not_run,
            "timings": timings,
            "failures": summary.failures,
            "quarantined": quarantined,
            "outputs": outputs,
        });
        steps_log::append(self.lake, &row).await?;
        Ok((summary, outputs, step_spec_id))
    }
}
