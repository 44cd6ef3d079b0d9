//! Rows of the provenance and orchestration tables.
//!
//! These are the records a worker stages next to its artifacts: the
//! execution itself, its input/output edges, and the derivation edges between
//! artifacts. Each converts to a row of its table's schema.

use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;

use crate::artifact::arrow_convert::build_array;
use crate::artifact::value::FieldValue;
use crate::error::{Error, Result};
use crate::lake::layout::TableSpec;

/// Whether an execution edge is an input or an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// The artifact was consumed.
    Input,
    /// The artifact was produced.
    Output,
}

impl Direction {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Input => "input",
            Direction::Output => "output",
        }
    }
}

/// One row of `orchestration/executions`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRecord {
    /// Unique id of this run of the execution.
    pub execution_run_id: String,
    /// Content-derived id of what was executed (the cache key).
    pub execution_spec_id: String,
    /// The step run it belongs to.
    pub step_run_id: String,
    /// Step number (partition column).
    pub origin_step_number: i32,
    /// Operation name.
    pub operation_name: String,
    /// Parameters, as canonical JSON text.
    pub params: String,
    /// Start, µs since the epoch (UTC).
    pub timestamp_start: i64,
    /// End, µs since the epoch (UTC).
    pub timestamp_end: Option<i64>,
    /// Which worker ran it.
    pub worker_id: Option<String>,
    /// `local`, `slurm`, …
    pub compute_backend: Option<String>,
    /// Whether it succeeded.
    pub success: bool,
    /// The error, when it failed.
    pub error: Option<String>,
    /// Tail of the tool's stdout/stderr.
    pub tool_output: Option<String>,
    /// JSON metadata text.
    pub metadata: String,
}

/// One row of `provenance/execution_edges`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionEdge {
    /// The execution run.
    pub execution_run_id: String,
    /// Input or output.
    pub direction: Direction,
    /// The role of the artifact in the operation.
    pub role: String,
    /// The artifact.
    pub artifact_id: String,
}

impl ExecutionEdge {
    /// The edge of run `run` to artifact `id`, in `role`.
    pub fn new(run: &str, direction: Direction, role: &str, id: &crate::ArtifactId) -> Self {
        ExecutionEdge {
            execution_run_id: run.to_owned(),
            direction,
            role: role.to_owned(),
            artifact_id: id.to_hex(),
        }
    }
}

/// One row of `provenance/artifact_edges`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactEdge {
    /// The execution run that derived target from source.
    pub execution_run_id: String,
    /// Source artifact.
    pub source_artifact_id: String,
    /// Target artifact.
    pub target_artifact_id: String,
    /// Source type key.
    pub source_artifact_type: String,
    /// Target type key.
    pub target_artifact_type: String,
    /// Source role.
    pub source_role: String,
    /// Target role.
    pub target_role: String,
    /// Groups edges of one paired unit, if any.
    pub group_id: Option<String>,
    /// Whether the edge crosses from one step to the next.
    pub step_boundary: bool,
}

fn s(v: &str) -> FieldValue {
    FieldValue::String(v.to_owned())
}

fn opt(v: &Option<String>) -> FieldValue {
    v.as_ref().map_or(FieldValue::Null, |x| FieldValue::String(x.clone()))
}

/// A record that is one row of a table.
pub trait Record {
    /// The value of a column of this record's row.
    fn value(&self, column: &str) -> FieldValue;
}

impl Record for ExecutionRecord {
    fn value(&self, column: &str) -> FieldValue {
        match column {
            "execution_run_id" => s(&self.execution_run_id),
            "execution_spec_id" => s(&self.execution_spec_id),
            "step_run_id" => s(&self.step_run_id),
            "origin_step_number" => FieldValue::Int(i64::from(self.origin_step_number)),
            "operation_name" => s(&self.operation_name),
            "params" => s(&self.params),
            "timestamp_start" => FieldValue::TimestampMicros(self.timestamp_start),
            "timestamp_end" => {
                self.timestamp_end.map_or(FieldValue::Null, FieldValue::TimestampMicros)
            }
            "worker_id" => opt(&self.worker_id),
            "compute_backend" => opt(&self.compute_backend),
            "success" => FieldValue::Bool(self.success),
            "error" => opt(&self.error),
            "tool_output" => opt(&self.tool_output),
            "metadata" => s(&self.metadata),
            _ => FieldValue::Null,
        }
    }
}

impl Record for ExecutionEdge {
    fn value(&self, column: &str) -> FieldValue {
        match column {
            "execution_run_id" => s(&self.execution_run_id),
            "direction" => s(self.direction.as_str()),
            "role" => s(&self.role),
            "artifact_id" => s(&self.artifact_id),
            _ => FieldValue::Null,
        }
    }
}

impl Record for ArtifactEdge {
    fn value(&self, column: &str) -> FieldValue {
        match column {
            "execution_run_id" => s(&self.execution_run_id),
            "source_artifact_id" => s(&self.source_artifact_id),
            "target_artifact_id" => s(&self.target_artifact_id),
            "source_artifact_type" => s(&self.source_artifact_type),
            "target_artifact_type" => s(&self.target_artifact_type),
            "source_role" => s(&self.source_role),
            "target_role" => s(&self.target_role),
            "group_id" => opt(&self.group_id),
            "step_boundary" => FieldValue::Bool(self.step_boundary),
            _ => FieldValue::Null,
        }
    }
}

/// Rows of a table from records, in `schema` (the table's Arrow schema).
pub fn records_batch<R: Record>(
    spec: &TableSpec,
    schema: &SchemaRef,
    records: &[R],
) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values: Vec<FieldValue> = records.iter().map(|r| r.value(field.name())).collect();
        columns.push(build_array(&spec.name, field, values.iter())?);
    }
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::arrow(format!("building `{}` rows", spec.name), e))
}
