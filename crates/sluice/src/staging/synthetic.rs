//! Synthetic executions for load generation and tests.
//!
//! Staged exactly as real workers stage: finalized artifacts, output edges,
//! derivation edges and an execution row, through [`StagingWriter`]. Content
//! is pseudo-random (BLAKE3 of the seed and indices, so a run is
//! reproducible); a fraction of artifacts repeat content from a small shared
//! pool (cross-run duplicates), a fraction of executions fail, and a fraction
//! of workers "crash" before writing the sentinel.

use serde_json::json;

use super::writer::{StagedExecution, StagingWriter};
use crate::artifact::{Artifact, Draft};
use crate::error::Result;
use crate::records::{ArtifactEdge, Direction, ExecutionEdge, ExecutionRecord};
use crate::registry::TypeRegistry;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// Seed of every pseudo-random choice.
    pub seed: u64,
    /// Step number.
    pub step: i32,
    /// Operation name.
    pub operation: String,
    /// Output artifacts per successful execution.
    pub artifacts_per_execution: usize,
    /// Fraction of artifacts whose content comes from a shared pool.
    pub duplicate_fraction: f64,
    /// Fraction of executions that fail (staged with `success = false`).
    pub fail_fraction: f64,
    /// Fraction of workers that die before writing the sentinel.
    pub crash_fraction: f64,
    /// Mix artifact types: cycle through metric, config, data (a small CSV),
    /// file_ref (a small file written here) and the declared type `sample`
    /// (columns `label: string`, `value: float64`) when the lake has it.
    pub mixed: Option<std::path::PathBuf>,
    /// Executions per staging directory: 1 stages each in its own, more
    /// seals them in batches of this many ([`StagingWriter::write_batch`]);
    /// a batch with a crashed execution is left unsealed whole, as a
    /// worker that died before sealing it leaves it.
    pub batch: usize,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            seed: 7,
            step: 1,
            operation: "synthetic".into(),
            artifacts_per_execution: 3,
            duplicate_fraction: 0.0,
            fail_fraction: 0.0,
            crash_fraction: 0.0,
            mixed: None,
            batch: 1,
        }
    }
}

/// What one call staged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyntheticReport {
    /// Sealed successful executions.
    pub succeeded: usize,
    /// Sealed failed executions.
    pub failed: usize,
    /// Unsealed (crashed) executions.
    pub crashed: usize,
}

/// A reproducible number in [0, 1) from a seed and indices (BLAKE3).
pub fn uniform(seed: u64, parts: &[u64]) -> f64 {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    for p in parts {
        h.update(&p.to_le_bytes());
    }
    let bytes = h.finalize();
    let mut x = [0u8; 8];
    x.copy_from_slice(&bytes.as_bytes()[..8]);
    (u64::from_le_bytes(x) >> 11) as f64 / (1u64 << 53) as f64
}

/// The run id of execution `index` of a spec: 32 hex characters.
pub fn run_id(spec: &SyntheticSpec, index: u64) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"run");
    h.update(&spec.seed.to_le_bytes());
    h.update(&spec.step.to_le_bytes());
    h.update(&index.to_le_bytes());
    h.finalize().to_hex()[..32].to_owned()
}

/// Build the staged execution number `index`.
pub fn execution(
    spec: &SyntheticSpec,
    registry: &TypeRegistry,
    index: u64,
) -> Result<(StagedExecution, bool)> {
    let run = run_id(spec, index);
    let failed = uniform(spec.seed, &[1, index]) < spec.fail_fraction;
    let crashed = uniform(spec.seed, &[2, index]) < spec.crash_fraction;
    let mut artifacts: Vec<Artifact> = Vec::new();
    if !failed {
        for j in 0..spec.artifacts_per_execution as u64 {
            let value = if uniform(spec.seed, &[3, index, j]) < spec.duplicate_fraction {
                json!({"pool": (uniform(spec.seed, &[4, index, j]) * 16.0) as u64})
            } else {
                json!({"score": uniform(spec.seed, &[5, index, j]), "run": run, "j": j})
            };
            let draft = match &spec.mixed {
                Some(files) => mixed_draft(registry, files, j, &value)?,
                None => Draft::metric(value)?,
            };
            artifacts.push(draft.with_step(spec.step).finalize(registry)?);
        }
    }
    let execution_edges = artifacts
        .iter()
        .map(|a| ExecutionEdge::new(&run, Direction::Output, "scores", &a.id))
        .collect();
    let artifact_edges = artifacts
        .iter()
        .skip(1)
        .map(|a| ArtifactEdge {
            execution_run_id: run.clone(),
            source_artifact_id: artifacts[0].id.to_hex(),
            target_artifact_id: a.id.to_hex(),
            source_artifact_type: "metric".into(),
            target_artifact_type: "metric".into(),
            source_role: "scores".into(),
            target_role: "scores".into(),
            group_id: None,
            step_boundary: false,
        })
        .collect();
    let start = 1_764_000_000_000_000 + index as i64 * 1000;
    let staged = StagedExecution {
        execution: ExecutionRecord {
            execution_run_id: run.clone(),
            execution_spec_id: format!("spec-{}", &run[..16]),
            step_run_id: format!("step-{}-{}", spec.seed, spec.step),
            origin_step_number: spec.step,
            operation_name: spec.operation.clone(),
            params: "{}".into(),
            timestamp_start: start,
            timestamp_end: Some(start + 500),
            worker_id: Some(format!("pid-{}", std::process::id())),
            compute_backend: Some("synthetic".into()),
            success: !failed,
            error: failed.then(|| "synthetic failure".into()),
            tool_output: None,
            metadata: "{}".into(),
        },
        artifacts,
        execution_edges,
        artifact_edges,
    };
    Ok((staged, crashed))
}

/// The `j`-th artifact of a mixed execution, from a JSON value.
fn mixed_draft(
    registry: &TypeRegistry,
    files: &std::path::Path,
    j: u64,
    value: &serde_json::Value,
) -> Result<Draft> {
    let text = crate::artifact::canonical_json::to_string(value)?;
    let kinds = if registry.get("sample").is_ok() { 5 } else { 4 };
    Ok(match j % kinds {
        0 => Draft::metric(value.clone())?,
        1 => Draft::config(json!({ "config": value }))?,
        2 => {
            let digest = blake3::hash(text.as_bytes()).to_hex();
            let csv = format!("key,v\n{},{}\n", &digest[..12], text.len());
            Draft::data(csv.into_bytes(), crate::artifact::DataFormat::Csv)
        }
        3 => {
            std::fs::create_dir_all(files).map_err(|e| crate::error::Error::io(files, e))?;
            let path = files.join(format!("{}.txt", &blake3::hash(text.as_bytes()).to_hex()[..24]));
            if !path.exists() {
                std::fs::write(&path, &text).map_err(|e| crate::error::Error::io(&path, e))?;
            }
            Draft::file_ref(&path)?
        }
        _ => Draft::from_json_object(
            registry,
            "sample",
            &json!({ "label": text, "value": text.len() as f64 }),
        )?,
    })
}

/// Stage executions `range` of a spec, one directory per execution or in
/// batches of `spec.batch`.
pub fn stage_range(
    writer: &StagingWriter,
    spec: &SyntheticSpec,
    registry: &TypeRegistry,
    range: std::ops::Range<u64>,
) -> Result<SyntheticReport> {
    let mut report = SyntheticReport::default();
    let mut batch = Vec::new();
    let mut batch_crashed = false;
    for index in range.clone() {
        let (staged, crashed) = execution(spec, registry, index)?;
        if spec.batch > 1 {
            batch_crashed |= crashed;
            batch.push(staged);
            if batch.len() == spec.batch || index + 1 == range.end {
                stage_batch(writer, std::mem::take(&mut batch), batch_crashed, &mut report)?;
                batch_crashed = false;
            }
        } else if crashed {
            writer.write_unsealed(&staged)?;
            report.crashed += 1;
        } else {
            writer.write(&staged)?;
            count(&staged, &mut report);
        }
    }
    Ok(report)
}

fn stage_batch(
    writer: &StagingWriter,
    batch: Vec<StagedExecution>,
    crashed: bool,
    report: &mut SyntheticReport,
) -> Result<()> {
    if crashed {
        writer.write_batch_unsealed(&batch)?;
        report.crashed += batch.len();
    } else {
        writer.write_batch(&batch)?;
        batch.iter().for_each(|staged| count(staged, report));
    }
    Ok(())
}

fn count(staged: &StagedExecution, report: &mut SyntheticReport) {
    if staged.execution.success {
        report.succeeded += 1;
    } else {
        report.failed += 1;
    }
}
