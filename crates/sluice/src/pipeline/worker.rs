//! The worker side of a pipeline: run one unit and describe what it stages.
//!
//! A worker process (`sluice __worker`, see
//! [`worker_mode`](super::worker_mode)) runs each unit's operation here and
//! stages what it made through [`StagingWriter`]: output artifacts,
//! input/output execution edges, derivation edges and the execution row. A failed unit stages its
//! input edges and an execution row with `success = false` and the error, so
//! the failure is recorded in the lake and the unit reruns next time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use tracing::Instrument;

use super::operation::{Output, UnitContext};
use super::ops::Operations;
use super::retry::FailureKind;
use super::unit::{UnitJob, UnitReport, WorkerPhases};
use crate::artifact::{Artifact, ArtifactId, canonical_json};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::records::{ArtifactEdge, Direction, ExecutionEdge, ExecutionRecord};
use crate::staging::{StagedExecution, StagingWriter, area, paths};

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The operation's results, before staging.
struct Produced {
    artifacts: Vec<Artifact>,
    outputs: Vec<(String, ArtifactId)>,
    derivations: Vec<(ArtifactId, String, Vec<ArtifactId>)>,
}

/// Run one unit: its execution as it is to be staged (success or
/// failure), and the report the orchestrator gets once it is sealed.
/// `prefetched` holds input artifacts read for a whole chunk of units;
/// inputs missing from it are read here. Errors are returned only when the
/// execution cannot even be described (its metadata cannot be encoded).
pub(crate) async fn run_unit(
    lake: &Lake,
    operations: &Operations,
    job: &UnitJob,
    prefetched: Option<&BTreeMap<ArtifactId, Artifact>>,
    worker_id: &str,
    phases: &mut WorkerPhases,
) -> Result<(StagedExecution, UnitReport)> {
    let started = now_micros();
    let clock = Instant::now();
    let Ran { outcome, tool_output, loaded, failure } =
        run_operation(lake, operations, job, prefetched, phases).await;
    let (produced, error) = match outcome {
        Ok(produced) => (Some(produced), None),
        // A failure says what the unit was given, by name where the inputs
        // have one: from the inputs the operation loaded, else read (only
        // their names matter, and failures are rare).
        Err(error) => {
            let names = match loaded {
                Some(inputs) => names_of(inputs.values().flatten()),
                None => input_names(lake, &job.unit).await,
            };
            (None, Some(with_inputs(error.to_string(), &job.unit, &names)))
        }
    };
    let failure = error.as_ref().map(|_| failure.unwrap_or(FailureKind::Error));
    let mut metadata = serde_json::json!({
        "pipeline_run_id": job.pipeline_run_id,
        "step_name": job.step.name,
        "unit_index": job.unit.index,
        "seconds": clock.elapsed().as_secs_f64(),
    });
    if !job.unit.sources.is_empty() {
        metadata["sources"] = serde_json::Value::Array(job.unit.sources.clone());
    }
    attempt_metadata(&mut metadata, job, failure);
    metadata["provenance"] = super::provenance::of_step(&job.step);
    let staged =
        staged_execution(job, produced, error.clone(), tool_output, started, worker_id, metadata)?;
    let report = UnitReport {
        run_id: job.run_id.clone(),
        success: staged.execution.success,
        error,
        failure,
    };
    Ok((staged, report))
}

/// Stage a failed execution for a unit whose worker could not (it died, its
/// SLURM task was cancelled or ran out of memory). Leftovers of the dead
/// worker's unsealed directory are removed first.
pub async fn stage_failure(
    writer: &StagingWriter,
    job: &UnitJob,
    error: &str,
    failure: FailureKind,
    worker_id: &str,
) -> Result<()> {
    let (step, operation, run_id) = (job.step_number, &job.step.operation, &job.run_id);
    paths::validate_run_id(run_id)?;
    if area::sealed_or_cleared(writer.area(), step, operation, run_id).await? {
        return Ok(());
    }
    // The dead worker's sandbox (best effort: it only costs space).
    let _ = std::fs::remove_dir_all(work_dir(&job.run_id));
    let mut metadata = serde_json::json!({
        "pipeline_run_id": job.pipeline_run_id,
        "step_name": job.step.name,
        "unit_index": job.unit.index,
        "recorded_by": "orchestrator",
    });
    attempt_metadata(&mut metadata, job, Some(failure));
    let staged = staged_execution(
        job,
        None,
        Some(with_inputs(error.to_owned(), &job.unit, &BTreeMap::new())),
        None,
        now_micros(),
        worker_id,
        metadata,
    )?;
    let writer = writer.clone();
    tokio::task::spawn_blocking(move || writer.write(&staged))
        .await
        .map_err(|e| Error::task("staging a lost unit's failure", e))??;
    Ok(())
}

/// An execution's attempt (`attempt`; on a retry, `retry_of` and
/// `retry_reason`) and, when it failed, how (`failure`), in its metadata.
fn attempt_metadata(metadata: &mut serde_json::Value, job: &UnitJob, failure: Option<FailureKind>) {
    metadata["attempt"] = job.attempt.into();
    if let Some((run, reason)) = &job.retry_of {
        metadata["retry_of"] = run.as_str().into();
        metadata["retry_reason"] = reason.to_string().into();
    }
    if let Some(kind) = failure {
        metadata["failure"] = kind.to_string().into();
    }
}

/// What running a unit gave.
struct Ran {
    /// Its results, or why there are none.
    outcome: Result<Produced>,
    /// The tail of what its tool printed.
    tool_output: Option<String>,
    /// When it failed after loading them, its input artifacts.
    loaded: Option<BTreeMap<String, Vec<Artifact>>>,
    /// How it failed, when its operation said.
    failure: Option<FailureKind>,
}

impl Ran {
    fn failed(error: Error) -> Self {
        Ran { outcome: Err(error), tool_output: None, loaded: None, failure: None }
    }
}

/// Run a unit's operation (see [`Ran`]).
async fn run_operation(
    lake: &Lake,
    operations: &Operations,
    job: &UnitJob,
    prefetched: Option<&BTreeMap<ArtifactId, Artifact>>,
    phases: &mut WorkerPhases,
) -> Ran {
    let reading = Instant::now();
    let prepared = async {
        let op = operations.get(&job.step.operation)?;
        let inputs = if op.needs_content() {
            load_inputs(lake, job, prefetched).await?
        } else {
            BTreeMap::new()
        };
        Ok::<_, Error>((op, inputs))
    };
    let prepared = prepared.instrument(tracing::debug_span!("input_read")).await;
    phases.input_read += reading.elapsed().as_secs_f64();
    let (op, inputs) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return Ran::failed(e),
    };
    let loaded = op.needs_content();
    // The sandbox is made when the operation first asks for it (most
    // built-ins never do: a folder made and removed per unit cost more
    // than the unit).
    let work_dir = work_dir(&job.run_id);
    let ctx = UnitContext::new(job, inputs, work_dir.clone(), lake.clone());
    let registry = lake.registry().clone();
    let step_number = job.step_number;
    let computing = Instant::now();
    let span = tracing::debug_span!("compute");
    let result = tokio::task::spawn_blocking(move || {
        let _phase = span.entered();
        let result = op.run(&ctx);
        let tool_output = ctx.take_tool_output();
        let failure = ctx.take_failure();
        let outcome = result.and_then(|outputs| finalize(outputs, &registry, step_number));
        let made_sandbox = ctx.made_work_dir();
        let loaded = (outcome.is_err() && loaded).then_some(ctx.inputs);
        (Ran { outcome, tool_output, loaded, failure }, made_sandbox)
    })
    .await;
    phases.compute += computing.elapsed().as_secs_f64();
    let (result, made_sandbox) = match result {
        Ok((ran, made)) => (Ok(ran), made),
        // A panic may have left a sandbox behind.
        Err(e) => (Err(e), true),
    };
    if made_sandbox {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    match result {
        Ok(ran) => ran,
        Err(e) if e.is_panic() => {
            Ran::failed(Error::operation(&job.step.operation, "the operation panicked"))
        }
        Err(e) => Ran::failed(Error::task(format!("operation `{}`", job.step.operation), e)),
    }
}

/// The unit's input artifacts, content included, by role in stream order:
/// from `prefetched`, and those it lacks read from the lake.
async fn load_inputs(
    lake: &Lake,
    job: &UnitJob,
    prefetched: Option<&BTreeMap<ArtifactId, Artifact>>,
) -> Result<BTreeMap<String, Vec<Artifact>>> {
    let ids: Vec<ArtifactId> = job.unit.inputs.values().flatten().copied().collect();
    let mut found = BTreeMap::new();
    let mut missing = Vec::new();
    for id in ids {
        match prefetched.and_then(|p| p.get(&id)) {
            Some(artifact) => {
                found.insert(id, artifact.clone());
            }
            None => missing.push(id),
        }
    }
    if !missing.is_empty() {
        found.extend(lake.get_many(&missing).await?);
    }
    let mut inputs = BTreeMap::new();
    for (role, ids) in &job.unit.inputs {
        let mut list = Vec::with_capacity(ids.len());
        for id in ids {
            let artifact = found.get(id).cloned().ok_or_else(|| {
                Error::InvalidInput(format!("input `{role}` artifact {id} is not in the lake"))
            })?;
            list.push(artifact);
        }
        inputs.insert(role.clone(), list);
    }
    found.clear();
    Ok(inputs)
}

fn finalize(
    outputs: Vec<Output>,
    registry: &crate::registry::TypeRegistry,
    step: i32,
) -> Result<Produced> {
    let mut produced =
        Produced { artifacts: Vec::new(), outputs: Vec::new(), derivations: Vec::new() };
    let mut seen = BTreeSet::new();
    for output in outputs {
        match output {
            Output::New { role, draft, derived_from } => {
                let type_key = draft.type_key().to_owned();
                let artifact = draft.with_step(step).finalize(registry).map_err(|e| {
                    Error::operation("output", format!("role `{role}` ({type_key}): {e}"))
                })?;
                produced.outputs.push((role.clone(), artifact.id));
                produced.derivations.push((artifact.id, role, derived_from.unwrap_or_default()));
                if seen.insert(artifact.id) {
                    produced.artifacts.push(artifact);
                }
            }
            Output::Existing { role, id } => produced.outputs.push((role, id)),
        }
    }
    Ok(produced)
}

fn staged_execution(
    job: &UnitJob,
    produced: Option<Produced>,
    error: Option<String>,
    tool_output: Option<String>,
    started: i64,
    worker_id: &str,
    metadata: serde_json::Value,
) -> Result<StagedExecution> {
    let run = &job.run_id;
    let mut execution_edges = BTreeSet::new();
    let mut input_role: BTreeMap<ArtifactId, &String> = BTreeMap::new();
    for (role, ids) in &job.unit.inputs {
        for id in ids {
            input_role.entry(*id).or_insert(role);
            execution_edges.insert(ExecutionEdge::new(run, Direction::Input, role, id));
        }
    }
    let mut artifact_edges = BTreeSet::new();
    let mut artifacts = Vec::new();
    if let Some(produced) = produced {
        let types: BTreeMap<ArtifactId, &str> =
            produced.artifacts.iter().map(|a| (a.id, a.type_key.as_str())).collect();
        for (role, id) in &produced.outputs {
            execution_edges.insert(ExecutionEdge::new(run, Direction::Output, role, id));
        }
        for (target, target_role, sources) in &produced.derivations {
            let sources: Vec<ArtifactId> = if sources.is_empty() {
                input_role.keys().copied().collect()
            } else {
                sources.clone()
            };
            for source in sources {
                let Some(source_role) = input_role.get(&source) else { continue };
                artifact_edges.insert(ArtifactEdge {
                    execution_run_id: run.clone(),
                    source_artifact_id: source.to_hex(),
                    target_artifact_id: target.to_hex(),
                    source_artifact_type: job
                        .input_types
                        .get(*source_role)
                        .cloned()
                        .unwrap_or_default(),
                    target_artifact_type: types
                        .get(target)
                        .map(|t| (*t).to_owned())
                        .unwrap_or_default(),
                    source_role: (*source_role).clone(),
                    target_role: target_role.clone(),
                    group_id: Some(job.unit.spec_id.clone()),
                    step_boundary: true,
                });
            }
        }
        artifacts = produced.artifacts;
    }
    let execution = ExecutionRecord {
        execution_run_id: run.clone(),
        execution_spec_id: job.unit.spec_id.clone(),
        step_run_id: job.step_run_id.clone(),
        origin_step_number: job.step_number,
        operation_name: job.step.operation.clone(),
        params: canonical_json::to_string(&serde_json::Value::Object(job.step.params.clone()))?,
        timestamp_start: started,
        timestamp_end: Some(now_micros()),
        worker_id: Some(worker_id.to_owned()),
        compute_backend: Some(job.backend.as_str().to_owned()),
        success: error.is_none(),
        error,
        tool_output,
        metadata: canonical_json::to_string(&metadata)?,
    };
    Ok(StagedExecution {
        execution,
        artifacts,
        execution_edges: execution_edges.into_iter().collect(),
        artifact_edges: artifact_edges.into_iter().collect(),
    })
}

/// The original names of a unit's inputs that have one (data, file_ref),
/// best effort: a failure is reported either way.
async fn input_names(
    lake: &Lake,
    unit: &crate::pipeline::unit::Unit,
) -> BTreeMap<ArtifactId, String> {
    let ids: Vec<ArtifactId> = unit.inputs.values().flatten().take(64).copied().collect();
    let Ok(found) = lake.get_many(&ids).await else { return BTreeMap::new() };
    names_of(found.values())
}

/// Id → original name of the artifacts that have one.
fn names_of<'a>(artifacts: impl Iterator<Item = &'a Artifact>) -> BTreeMap<ArtifactId, String> {
    artifacts
        .filter_map(|a| a.field("original_name").as_str().map(|n| (a.id, n.to_owned())))
        .collect()
}

/// A failed unit's error followed by what it was given, so the error alone
/// says which input broke it: `… (inputs: t=3a942b02… "table_0002.csv")`,
/// at most a few per role, or the source descriptors of a unit without
/// inputs.
fn with_inputs(
    error: String,
    unit: &crate::pipeline::unit::Unit,
    names: &BTreeMap<ArtifactId, String>,
) -> String {
    const SHOWN: usize = 3;
    let mut given: Vec<String> = Vec::new();
    for (role, ids) in &unit.inputs {
        let named = |id: &ArtifactId| match names.get(id) {
            Some(name) => format!("{role}={id} {name:?}"),
            None => format!("{role}={id}"),
        };
        let mut listed: Vec<String> = ids.iter().take(SHOWN).map(named).collect();
        if ids.len() > SHOWN {
            listed.push(format!("and {} more {role}", ids.len() - SHOWN));
        }
        given.extend(listed);
    }
    if given.is_empty() {
        given.extend(unit.sources.iter().take(SHOWN).map(|s| format!("source {s}")));
    }
    if given.is_empty() {
        return error;
    }
    format!("{error} (inputs: {})", given.join(", "))
}

/// The environment variable that sets where unit sandboxes are made.
pub const WORK_DIR_ENV: &str = "SLUICE_WORK_DIR";

/// A unit's sandbox: `$SLUICE_WORK_DIR/<run id>`, default under the system
/// temporary folder — never inside the lake.
pub fn work_dir(run_id: &str) -> std::path::PathBuf {
    std::env::var_os(WORK_DIR_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sluice-work"))
        .join(run_id)
}

/// This process's worker id: `host:pid`, plus the SLURM job/task when set.
pub fn worker_id() -> String {
    let mut id = format!("{}:{}", crate::host::hostname(), std::process::id());
    if let (Ok(job), Ok(task)) =
        (std::env::var("SLURM_ARRAY_JOB_ID"), std::env::var("SLURM_ARRAY_TASK_ID"))
    {
        id.push_str(&format!(":slurm-{job}_{task}"));
    }
    id
}
