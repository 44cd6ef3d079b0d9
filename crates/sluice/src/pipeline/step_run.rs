//! One step of a pipeline run, phase by phase.
//!
//! ```text
//!  plan ──▶ step cache ──hit──▶ `skipped` row, reuse the recorded streams
//!             │ miss
//!             ▼
//!  `running` row ─▶ execution cache + jobs ─▶ dispatch ─▶ commit ─▶ collect ─▶ final row
//! ```
//!
//! Each phase is one method and its wall time lands in the step's
//! `timings` (plan, cache_lookup, execute, commit, collect). What is durable
//! after each phase: nothing before `running`; after dispatch, the workers'
//! sealed staging (a crash here is committed by the next run's recover);
//! after commit, every dispatched unit's execution row.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::json;

use super::backend::slurm::SlurmOptions;
use super::backend::{self, Dispatch, Outcome};
use super::cache;
use super::config::{BackendKind, FailurePolicy, StepConfig};
use super::events::{Observer, RetryRound, RunEvent, StepSummary};
use super::operation::Operation;
use super::ops::Operations;
use super::plan;
use super::retry::RetryPolicy;
use super::steps_log::{self, StepRecord, StepStatus, Streams};
use super::unit::{Unit, UnitJob};
use super::validate::Pipeline;
use super::worker::{stage_failure, worker_id};
use crate::artifact::{ArtifactId, canonical_json};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::staging::{StagingArea, StagingWriter, SyncPolicy};

/// Failures kept in a step's summary and metadata.
const FAILURES_KEPT: usize = 20;

/// The jobs of the next retry round: one for each unit of `round` whose
/// failure the step's policy retries after this attempt, with a new run id.
fn retry_jobs(
    dispatch: &Dispatch,
    round: &[UnitJob],
    outcomes: &[(String, Outcome)],
) -> Vec<UnitJob> {
    let by_run: HashMap<&str, &UnitJob> = round.iter().map(|j| (j.run_id.as_str(), j)).collect();
    outcomes
        .iter()
        .filter_map(|(run_id, outcome)| {
            let kind = outcome.failure()?;
            let job = by_run.get(run_id.as_str())?;
            dispatch.retry.retries(kind, dispatch.attempt).then(|| UnitJob {
                run_id: plan::new_run_id(),
                attempt: dispatch.attempt + 1,
                retry_of: Some((run_id.clone(), kind)),
                ..(*job).clone()
            })
        })
        .collect()
}

/// A random number in `[0, 1)` (the jitter of a retry's delay).
fn random_share() -> f64 {
    (uuid::Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

/// A unit's execution run id, and whether the cache answered it.
struct UnitRun {
    run_id: String,
    spec_id: String,
    cached: bool,
}

/// What dispatching a step's jobs left behind.
struct Dispatched {
    /// Run ids of units that were dispatched (and so have an execution row).
    runs: HashSet<String>,
    /// Quarantined staging of this step: `path: reason`.
    quarantined: Vec<String>,
    fail_fast: bool,
    /// Set when more units failed than `max_failed_units` tolerates: the
    /// step stopped dispatching and ends failed (the limit, as written).
    gave_up: Option<String>,
    /// A retried unit's first run → the run of its last attempt.
    last_attempt: HashMap<String, String>,
}

/// What every step of a run shares: the lake, the pipeline, and how units
/// are dispatched.
pub(super) struct RunContext<'a> {
    pub lake: &'a Lake,
    pub pipeline: &'a Pipeline,
    pub operations: &'a Operations,
    /// Overrides every step's backend.
    pub backend: Option<BackendKind>,
    pub workers: usize,
    pub worker_program: Option<crate::pipeline::worker_program::WorkerProgram>,
    pub cancel: Arc<AtomicBool>,
    pub observer: Option<Observer>,
    pub slurm: &'a SlurmOptions,
}

impl RunContext<'_> {
    fn lake(&self) -> &Lake {
        self.lake
    }

    fn pipeline(&self) -> &Pipeline {
        self.pipeline
    }

    fn backend_of(&self, index: usize) -> BackendKind {
        self.backend.unwrap_or_else(|| self.pipeline.config.backend_of(index))
    }

    pub(super) fn emit(&self, event: RunEvent) {
        if let Some(o) = &self.observer {
            o(event);
        }
    }
}

/// One step of a run, from planning to its final `steps` row.
pub(super) struct StepRun<'r, 'a> {
    runner: &'r RunContext<'a>,
    index: usize,
    number: i32,
    step: &'r StepConfig,
    op: Arc<dyn Operation>,
    pipeline_run_id: String,
    step_run_id: String,
    step_spec_id: String,
    params: String,
    units: Vec<Unit>,
    input_types: BTreeMap<String, String>,
    summary: StepSummary,
    clock: Instant,
    phase: Instant,
}

impl<'r, 'a> StepRun<'r, 'a> {
    /// Plan step `index`: its inputs from the upstream streams, its units and
    /// their cache keys, and the step's own cache key.
    pub(super) fn plan(
        runner: &'r RunContext<'a>,
        index: usize,
        streams: &[Streams],
        specs: &[String],
        pipeline_run_id: &str,
    ) -> Result<Self> {
        let clock = Instant::now();
        let pipeline = runner.pipeline();
        let config = &pipeline.config;
        let step = &config.steps[index];
        let op = pipeline.operations[index].clone();
        let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
        let mut inputs: BTreeMap<String, Vec<ArtifactId>> = BTreeMap::new();
        let mut input_types = BTreeMap::new();
        let mut upstream = Vec::new();
        for (role, r) in &pipeline.inputs[index] {
            let j = config.step_index(&r.step).unwrap_or(0);
            inputs.insert(
                role.clone(),
                streams.get(j).and_then(|s| s.get(&r.role)).cloned().unwrap_or_default(),
            );
            input_types.insert(
                role.clone(),
                pipeline.outputs[j].get(&r.role).cloned().unwrap_or_default(),
            );
            upstream.push(specs.get(j).cloned().unwrap_or_default());
        }
        let units = plan::plan_units(step, op.as_ref(), &inputs)
            .map_err(|e| config.step_error(index, e.to_string()))?;
        let step_spec_id = plan::step_spec_id(step, op.as_ref(), &upstream, &units)?;
        let step_run_id = plan::new_run_id();
        let params = canonical_json::to_string(&serde_json::Value::Object(step.params.clone()))?;
        let summary = StepSummary {
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
            adopted: 0,
            failed: 0,
            not_run: 0,
            outputs: BTreeMap::new(),
            failures: Vec::new(),
            seconds: 0.0,
            timings: BTreeMap::new(),
            worker_seconds: Default::default(),
            retries: Vec::new(),
        };
        let mut run = StepRun {
            runner,
            index,
            number,
            step,
            op,
            pipeline_run_id: pipeline_run_id.to_owned(),
            step_run_id,
            step_spec_id,
            params,
            units,
            input_types,
            summary,
            clock,
            phase: clock,
        };
        run.lap("plan");
        Ok(run)
    }

    /// Run the planned step; returns its summary, output streams and spec id.
    pub(super) async fn execute(mut self) -> Result<(StepSummary, Streams, String)> {
        let lake = self.runner.lake();
        if let Some(done) = steps_log::completed_spec(lake, &self.step_spec_id).await? {
            return self.skip(done).await;
        }
        steps_log::append(lake, &self.record(StepStatus::Running)).await?;
        let backend_kind = self.runner.backend_of(self.index);
        // From here on a step that cannot go on (`sbatch` missing, a
        // commit refused) is recorded failed with the reason, never left
        // `running` to be blamed later on a dead orchestrator.
        let (mut unit_runs, jobs) = match self.jobs(backend_kind).await {
            Ok(planned) => planned,
            Err(e) => return Err(self.failed(e).await),
        };
        let dispatched = match self.dispatch(jobs, backend_kind).await {
            Ok(dispatched) => dispatched,
            Err(e) => return Err(self.failed(e).await),
        };
        // A retried unit's outcome is its last attempt's.
        for u in &mut unit_runs {
            if let Some(last) = dispatched.last_attempt.get(&u.run_id) {
                u.run_id.clone_from(last);
            }
        }
        let outputs = match self.collect(&unit_runs, &dispatched).await {
            Ok(outputs) => outputs,
            Err(e) => return Err(self.failed(e).await),
        };
        self.finish(outputs, backend_kind, &dispatched).await
    }

    /// Record the step failed with `error` as its reason (best effort: the
    /// error is what the caller reports either way), and give it back.
    async fn failed(&mut self, error: Error) -> Error {
        self.summary.status = StepStatus::Failed;
        self.summary.seconds = self.clock.elapsed().as_secs_f64();
        let mut row = self.record(StepStatus::Failed);
        row.duration_seconds = Some(self.summary.seconds);
        row.error = Some(error.to_string());
        if let Err(e) = steps_log::append(self.runner.lake(), &row).await {
            tracing::warn!(step = %self.step.name, error = %e, "could not record the step as failed");
        }
        error
    }

    /// Add the time since the last lap to phase `name` (a phase run in
    /// several rounds adds up).
    fn lap(&mut self, name: &'static str) {
        *self.summary.timings.entry(name.to_owned()).or_default() +=
            self.phase.elapsed().as_secs_f64();
        self.phase = Instant::now();
    }

    /// Where the step's inputs come from: role → `"<step>.<role>"` (drawn by
    /// `sluice graph`).
    fn input_refs(&self) -> BTreeMap<String, String> {
        self.runner.pipeline().inputs[self.index]
            .iter()
            .map(|(role, r)| (role.clone(), r.to_string()))
            .collect()
    }

    /// A `steps` row of this step run in `status`, counts not yet filled in.
    fn record(&self, status: StepStatus) -> StepRecord {
        StepRecord {
            step_run_id: self.step_run_id.clone(),
            step_spec_id: self.step_spec_id.clone(),
            pipeline_run_id: self.pipeline_run_id.clone(),
            step_number: self.number,
            step_name: self.step.name.clone(),
            status,
            operation_name: self.step.operation.clone(),
            params: self.params.clone(),
            total_count: None,
            succeeded_count: None,
            failed_count: None,
            timestamp: chrono::Utc::now().timestamp_micros(),
            duration_seconds: None,
            error: None,
            metadata: json!({
                "pipeline": self.runner.pipeline().config.name,
                "owner": crate::host::owner(),
                "inputs": self.input_refs(),
                "provenance": super::provenance::pipeline_file(&self.runner.pipeline().config.path),
            }),
        }
    }

    /// Step cache hit: record `skipped` and reuse the recorded output streams.
    async fn skip(mut self, done: StepRecord) -> Result<(StepSummary, Streams, String)> {
        let total = self.units.len();
        let outputs = done.outputs();
        self.summary.status = StepStatus::Skipped;
        self.summary.cached = total;
        self.summary.succeeded = total;
        self.summary.outputs = outputs.iter().map(|(r, ids)| (r.clone(), ids.len())).collect();
        self.runner.emit(RunEvent::StepStarted {
            number: self.number,
            name: self.step.name.clone(),
            total,
            cached: total,
            skipped: true,
        });
        self.lap("cache_lookup");
        self.summary.seconds = self.clock.elapsed().as_secs_f64();
        let mut row = self.record(StepStatus::Skipped);
        row.total_count = Some(total as i64);
        row.succeeded_count = Some(total as i64);
        row.failed_count = Some(0);
        row.duration_seconds = Some(self.summary.seconds);
        row.metadata = json!({
            "pipeline": self.runner.pipeline().config.name,
            "reused_step_run_id": done.step_run_id,
            "timings": self.summary.timings,
            "inputs": self.input_refs(),
            "outputs": outputs,
        });
        steps_log::append(self.runner.lake(), &row).await?;
        Ok((self.summary, outputs, self.step_spec_id))
    }

    /// Execution cache (one scan for the whole step): units with a
    /// successful execution reuse it; the others become jobs with fresh run ids.
    async fn jobs(&mut self, backend_kind: BackendKind) -> Result<(Vec<UnitRun>, Vec<UnitJob>)> {
        let wanted: HashSet<String> = self.units.iter().map(|u| u.spec_id.clone()).collect();
        let cached = cache::successful_runs(self.runner.lake(), &wanted).await?;
        self.lap("cache_lookup");
        let mut unit_runs = Vec::with_capacity(self.units.len());
        let mut jobs = Vec::new();
        let step = Arc::new(self.step.clone());
        let input_types = Arc::new(self.input_types.clone());
        for unit in std::mem::take(&mut self.units) {
            if let Some(run) = cached.get(&unit.spec_id) {
                unit_runs.push(UnitRun {
                    run_id: run.clone(),
                    spec_id: unit.spec_id.clone(),
                    cached: true,
                });
                continue;
            }
            let run_id = plan::new_run_id();
            unit_runs.push(UnitRun {
                run_id: run_id.clone(),
                spec_id: unit.spec_id.clone(),
                cached: false,
            });
            jobs.push(UnitJob {
                step: step.clone(),
                step_number: self.number,
                step_run_id: self.step_run_id.clone(),
                pipeline_run_id: self.pipeline_run_id.clone(),
                run_id: run_id.clone(),
                backend: backend_kind,
                input_types: input_types.clone(),
                unit,
                attempt: 1,
                retry_of: None,
            });
        }
        self.summary.cached = unit_runs.iter().filter(|u| u.cached).count();
        self.runner.emit(RunEvent::StepStarted {
            number: self.number,
            name: self.step.name.clone(),
            total: unit_runs.len(),
            cached: self.summary.cached,
            skipped: false,
        });
        Ok((unit_runs, jobs))
    }

    /// The dispatch state of this step's first round; `workers`: the
    /// units it may run at once.
    fn new_dispatch(
        &self,
        workers: usize,
        max_failed: Option<usize>,
        retry: RetryPolicy,
    ) -> Dispatch {
        let runner = self.runner;
        let observer = runner.observer.clone();
        let number = self.number;
        Dispatch {
            lake: runner.lake().root().clone(),
            worker_program: if self.op.inline() { None } else { runner.worker_program.clone() },
            workers,
            stop: Arc::new(AtomicBool::new(false)),
            cancelled: runner.cancel.clone(),
            fail_fast: runner.pipeline().config.failure_of(self.index) == FailurePolicy::FailFast,
            max_failed,
            failed: Arc::default(),
            retry: Arc::new(retry),
            attempt: 1,
            on_unit: Arc::new(move |success| {
                if let Some(o) = &observer {
                    o(RunEvent::UnitFinished { number, success });
                }
            }),
            phases: Arc::default(),
        }
    }

    /// Run the jobs on their backend in rounds: the first, then as many
    /// rounds of retries as the step's policy asks for, each committed
    /// before the next is dispatched (after its delay).
    async fn dispatch(
        &mut self,
        jobs: Vec<UnitJob>,
        backend_kind: BackendKind,
    ) -> Result<Dispatched> {
        let config = &self.runner.pipeline().config;
        let limit = config.max_failed_units_of(self.index);
        let retry = config.retry_of(self.index).map_err(|e| config.step_error(self.index, e))?;
        let mut workers = self.runner.workers;
        if self.op.inline() || backend_kind == BackendKind::Local {
            workers = backend::local::fitting_lanes(self.step, workers)
                .map_err(|e| config.step_error(self.index, e))?;
        }
        if let Some(most) = config.concurrency_of(self.index) {
            workers = workers.min(most);
        }
        let max_failed = limit.map(|l| l.allowed(jobs.len()));
        let mut dispatch = self.new_dispatch(workers, max_failed, retry);
        let job_count = jobs.len();
        let mut round: Arc<[UnitJob]> = jobs.into();
        let mut runs = HashSet::new();
        let mut quarantined = Vec::new();
        // Run of an attempt → the unit's first run, and first → last.
        let mut first_of: HashMap<String, String> = HashMap::new();
        let mut last_attempt: HashMap<String, String> = HashMap::new();
        let mut first_round = 0;
        loop {
            let outcomes = self.round(&dispatch, &round, backend_kind, &mut quarantined).await?;
            if dispatch.attempt == 1 {
                first_round = outcomes.len();
            }
            for (run_id, _) in &outcomes {
                runs.insert(run_id.clone());
                if let Some(first) = first_of.get(run_id) {
                    last_attempt.insert(first.clone(), run_id.clone());
                }
            }
            let again = retry_jobs(&dispatch, &round, &outcomes);
            if again.is_empty() || dispatch.stopping() {
                break;
            }
            let delay = dispatch.retry.delay_before(dispatch.attempt, random_share());
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            for job in &again {
                if let Some((previous, kind)) = &job.retry_of {
                    *reasons.entry(kind.to_string()).or_default() += 1;
                    let first = first_of.get(previous).unwrap_or(previous).clone();
                    first_of.insert(job.run_id.clone(), first);
                }
            }
            tracing::info!(
                step = %self.step.name,
                units = again.len(),
                attempt = dispatch.attempt + 1,
                delay_seconds = delay.as_secs_f64(),
                ?reasons,
                "retrying failed units"
            );
            self.summary.retries.push(RetryRound {
                attempt: dispatch.attempt + 1,
                units: again.len(),
                reasons,
                delay_seconds: delay.as_secs_f64(),
            });
            if !self.wait_unless_cancelled(delay).await {
                break;
            }
            dispatch.attempt += 1;
            round = again.into();
        }
        self.summary.dispatched = first_round;
        self.summary.not_run = job_count - first_round;
        let gave_up = limit.filter(|_| dispatch.gave_up()).map(|l| l.to_string());
        Ok(Dispatched { runs, quarantined, fail_fast: dispatch.fail_fast, gave_up, last_attempt })
    }

    /// One round: run `jobs` on their backend, stage a failed execution for
    /// every unit whose worker was lost, then commit the round's staging.
    async fn round(
        &mut self,
        dispatch: &Dispatch,
        jobs: &Arc<[UnitJob]>,
        backend_kind: BackendKind,
        quarantined: &mut Vec<String>,
    ) -> Result<Vec<(String, Outcome)>> {
        let runner = self.runner;
        let lake = runner.lake();
        let area = StagingArea::of_lake(lake.root());
        let writer =
            StagingWriter::in_area(area.clone(), lake.registry().clone(), SyncPolicy::Detect);
        let outcomes = if self.op.inline() || backend_kind == BackendKind::Local {
            backend::local::run(lake, runner.operations, &writer, dispatch, jobs.clone()).await?
        } else {
            backend::slurm::run(dispatch, &area, self.step, jobs, runner.slurm).await?
        };
        self.lap("execute");
        if let Ok(phases) = dispatch.phases.lock() {
            self.summary.worker_seconds = *phases;
        }
        let by_run: HashMap<&str, &UnitJob> = jobs.iter().map(|j| (j.run_id.as_str(), j)).collect();
        let local_id = worker_id();
        for (run_id, outcome) in &outcomes {
            if let (Outcome::Lost(why, kind), Some(job)) = (outcome, by_run.get(run_id.as_str())) {
                stage_failure(&writer, job, why, *kind, &local_id).await?;
            }
        }
        let number = self.number;
        self.runner.emit(RunEvent::Committing { number });
        let job_runs: HashSet<String> = jobs.iter().map(|j| j.run_id.clone()).collect();
        let committed =
            lake.commit().with_step(Some(number)).with_runs(Some(job_runs)).execute().await?;
        quarantined
            .extend(committed.quarantined.iter().map(|(p, why)| format!("{}: {why}", p.display())));
        self.lap("commit");
        Ok(outcomes)
    }

    /// Sleep `delay` before a retry round; false when Ctrl-C came meanwhile.
    async fn wait_unless_cancelled(&self, delay: std::time::Duration) -> bool {
        let until = Instant::now() + delay;
        loop {
            if self.runner.cancel.load(Ordering::SeqCst) {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            tokio::time::sleep(left.min(std::time::Duration::from_millis(100))).await;
        }
    }

    /// Count results from the lake and gather the step's output streams
    /// (unit order, then role and id; each artifact once per stream).
    async fn collect(&mut self, unit_runs: &[UnitRun], dispatched: &Dispatched) -> Result<Streams> {
        let lake = self.runner.lake();
        let results = cache::step_results(lake, self.number, &self.step_run_id).await?;
        let mut outcomes: Vec<Option<std::result::Result<(), String>>> = Vec::new();
        for u in unit_runs {
            let outcome = if u.cached {
                Some(Ok(()))
            } else if !dispatched.runs.contains(&u.run_id) {
                None
            } else {
                Some(match results.get(&u.run_id) {
                    Some(r) if r.success => Ok(()),
                    Some(r) => Err(r.error.clone().unwrap_or_default()),
                    None => Err(dispatched
                        .quarantined
                        .iter()
                        .find(|q| q.contains(u.run_id.as_str()))
                        .cloned()
                        .unwrap_or_else(|| "its results were not committed".into())),
                })
            };
            outcomes.push(outcome);
        }
        let adopted = self.adopt(unit_runs, &outcomes).await?;
        // The run whose outputs each unit contributes: its own, or the run
        // of its spec it adopted.
        let mut run_of: Vec<&str> = unit_runs.iter().map(|u| u.run_id.as_str()).collect();
        let mut good_runs: HashSet<String> = HashSet::new();
        for (i, (u, outcome)) in unit_runs.iter().zip(outcomes).enumerate() {
            let outcome = match (outcome, adopted.get(&u.spec_id)) {
                (None, _) => continue,
                (Some(Err(_)), Some(winner)) => {
                    run_of[i] = winner.as_str();
                    self.summary.adopted += 1;
                    Ok(())
                }
                (Some(outcome), _) => outcome,
            };
            match outcome {
                Ok(()) => {
                    self.summary.succeeded += 1;
                    good_runs.insert(run_of[i].to_owned());
                }
                Err(why) => {
                    self.summary.failed += 1;
                    if self.summary.failures.len() < FAILURES_KEPT {
                        self.summary.failures.push((u.run_id.clone(), why));
                    }
                }
            }
        }
        let outputs_by_run = cache::outputs_of(lake, &good_runs).await?;
        let mut outputs: Streams = self.runner.pipeline().outputs[self.index]
            .keys()
            .map(|r| (r.clone(), Vec::new()))
            .collect();
        let mut seen: HashSet<(String, ArtifactId)> = HashSet::new();
        for run in &run_of {
            for (role, id) in outputs_by_run.get(*run).into_iter().flatten() {
                if seen.insert((role.clone(), *id)) {
                    outputs.entry(role.clone()).or_default().push(*id);
                }
            }
        }
        self.summary.outputs = outputs.iter().map(|(r, ids)| (r.clone(), ids.len())).collect();
        self.lap("collect");
        Ok(outputs)
    }

    /// Units that did not succeed here but whose spec succeeded in another
    /// run — another orchestrator of the same pipeline, sharing no lock
    /// with this one, ran the same unit and committed first (this one's
    /// success is then committed superseded, or dropped when staging is
    /// read): spec → that run. A unit adopts it, as a cached unit would.
    async fn adopt(
        &self,
        unit_runs: &[UnitRun],
        outcomes: &[Option<std::result::Result<(), String>>],
    ) -> Result<HashMap<String, String>> {
        let failed: HashSet<String> = unit_runs
            .iter()
            .zip(outcomes)
            .filter(|(_, o)| matches!(o, Some(Err(_))))
            .map(|(u, _)| u.spec_id.clone())
            .collect();
        if failed.is_empty() {
            return Ok(HashMap::new());
        }
        let found = cache::successful_runs(self.runner.lake(), &failed).await?;
        if !found.is_empty() {
            tracing::info!(
                step = self.number,
                units = found.len(),
                "units another run of the same specs made succeed first are adopted"
            );
        }
        Ok(found)
    }

    /// The final row: `completed`, `failed` or `cancelled`, with counts,
    /// timings, failures and the output streams.
    async fn finish(
        mut self,
        outputs: Streams,
        backend_kind: BackendKind,
        dispatched: &Dispatched,
    ) -> Result<(StepSummary, Streams, String)> {
        let summary = &mut self.summary;
        let cancelled = self.runner.cancel.load(Ordering::SeqCst) && summary.not_run > 0;
        summary.status = if cancelled {
            StepStatus::Cancelled
        } else if summary.failed > 0
            && (dispatched.fail_fast || dispatched.gave_up.is_some() || summary.succeeded == 0)
        {
            StepStatus::Failed
        } else {
            StepStatus::Completed
        };
        summary.seconds = self.clock.elapsed().as_secs_f64();
        let mut row = self.record(self.summary.status);
        let summary = &self.summary;
        row.total_count = Some(summary.total as i64);
        row.succeeded_count = Some(summary.succeeded as i64);
        row.failed_count = Some((summary.failed + summary.not_run) as i64);
        row.duration_seconds = Some(summary.seconds);
        row.error = match summary.status {
            StepStatus::Cancelled => Some(format!("cancelled; {} units not run", summary.not_run)),
            StepStatus::Failed => Some(match &dispatched.gave_up {
                Some(limit) => format!(
                    "{} of {} units failed, more than max_failed_units = {limit}: the step stopped early, {} units not run",
                    summary.failed, summary.total, summary.not_run
                ),
                None => format!("{} of {} units failed", summary.failed, summary.total),
            }),
            _ => None,
        };
        row.metadata = json!({
            "pipeline": self.runner.pipeline().config.name,
            "backend": backend_kind.as_str(),
            "cached": summary.cached,
            "adopted": summary.adopted,
            "dispatched": summary.dispatched,
            "not_run": summary.not_run,
            "timings": summary.timings,
            "worker_seconds": summary.worker_seconds,
            "failures": summary.failures,
            "quarantined": dispatched.quarantined,
            "retries": summary.retries,
            "inputs": self.input_refs(),
            "outputs": outputs,
            "provenance": super::provenance::pipeline_file(&self.runner.pipeline().config.path),
        });
        steps_log::append(self.runner.lake(), &row).await?;
        if self.summary.dispatched > 0 {
            // Bounded and best effort: a failed compaction loses nothing.
            if let Err(e) =
                crate::maintenance::auto::after_step(self.runner.lake(), self.number).await
            {
                tracing::warn!(error = %e, "automatic maintenance after the step failed");
            }
        }
        // The final row and automatic maintenance, after the row's own
        // `seconds` (which cannot count its own writing).
        let bookkeeping = self.phase.elapsed().as_secs_f64();
        self.summary.timings.insert("bookkeeping".into(), bookkeeping);
        Ok((self.summary, outputs, self.step_spec_id))
    }
}
