//! The `steps` table: every state transition of every step, appended.
//!
//! A step run writes `running` when it starts and one final row:
//! `completed` (possibly with failed units, under the `continue` policy),
//! `failed`, `skipped` (its spec completed before) or `cancelled`. The final
//! row's metadata holds the counts, per-phase timings and the step's output
//! streams (role → artifact ids in stream order), so that a later run that
//! skips the step can wire its outputs downstream without any other lookup.

use std::collections::BTreeMap;
use std::time::Duration;

use deltalake::DeltaTable;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::prelude::Expr;
use serde::{Deserialize, Serialize};

use crate::artifact::arrow_convert::{build_array, read_value};
use crate::artifact::{ArtifactId, FieldValue, canonical_json};
use crate::error::{Error, Result};
use crate::lake::append::Append;
use crate::lake::delta::scan::{self, Select};
use crate::lake::layout::TableSpec;
use crate::lake::writer::{WriteKind, Writer};
use crate::lake::{Lake, delta::table, layout};

/// A step's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Dispatching or waiting for units.
    Running,
    /// Finished; some units may have failed (see the counts).
    Completed,
    /// Stopped by a failure (fail_fast, or every unit failed).
    Failed,
    /// Its spec completed before: nothing ran.
    Skipped,
    /// Interrupted (Ctrl-C).
    Cancelled,
    /// Its orchestrator died while it ran (recorded by the next `run` or
    /// `status`).
    Abandoned,
    /// Never started: a step before it failed or the run was cancelled (as
    /// dbt's SKIP); `error` says which.
    NotReached,
}

impl StepStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Running => "running",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Cancelled => "cancelled",
            StepStatus::Abandoned => "abandoned",
            StepStatus::NotReached => "not_reached",
        }
    }

    /// Parse a stored name.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Skipped,
            Self::Cancelled,
            Self::Abandoned,
            Self::NotReached,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// Output streams of a step: role → artifact ids in stream order.
pub type Streams = BTreeMap<String, Vec<ArtifactId>>;

/// One row of the steps table.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// The step run.
    pub step_run_id: String,
    /// The step's spec (its cache key).
    pub step_spec_id: String,
    /// The pipeline run.
    pub pipeline_run_id: String,
    /// 1-based position in the pipeline.
    pub step_number: i32,
    /// Name.
    pub step_name: String,
    /// State.
    pub status: StepStatus,
    /// Operation.
    pub operation_name: String,
    /// Canonical params.
    pub params: String,
    /// Units in the step.
    pub total_count: Option<i64>,
    /// Units that succeeded (cached ones included).
    pub succeeded_count: Option<i64>,
    /// Units that failed.
    pub failed_count: Option<i64>,
    /// When, µs since the epoch.
    pub timestamp: i64,
    /// Wall time of the step run.
    pub duration_seconds: Option<f64>,
    /// Why the step failed or was cancelled.
    pub error: Option<String>,
    /// JSON: pipeline name, counts (cached, dispatched), timings, outputs.
    pub metadata: serde_json::Value,
}

impl StepRecord {
    fn value(&self, column: &str) -> Result<FieldValue> {
        let s = |v: &str| FieldValue::String(v.to_owned());
        let int = |v: Option<i64>| v.map_or(FieldValue::Null, FieldValue::Int);
        Ok(match column {
            "step_run_id" => s(&self.step_run_id),
            "step_spec_id" => s(&self.step_spec_id),
            "pipeline_run_id" => s(&self.pipeline_run_id),
            "step_number" => FieldValue::Int(i64::from(self.step_number)),
            "step_name" => s(&self.step_name),
            "status" => s(self.status.as_str()),
            "operation_name" => s(&self.operation_name),
            "params" => s(&self.params),
            "total_count" => int(self.total_count),
            "succeeded_count" => int(self.succeeded_count),
            "failed_count" => int(self.failed_count),
            "timestamp" => FieldValue::TimestampMicros(self.timestamp),
            "duration_seconds" => self.duration_seconds.map_or(FieldValue::Null, FieldValue::Float),
            "error" => self.error.as_deref().map_or(FieldValue::Null, s),
            "metadata" => FieldValue::String(canonical_json::to_string(&self.metadata)?),
            _ => FieldValue::Null,
        })
    }

    /// The output streams recorded in the metadata of a final row.
    pub fn outputs(&self) -> Streams {
        self.metadata
            .get("outputs")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }
}

/// Append one row, through the writer protocol ([`crate::lake::writer`]):
/// it waits for the writer lock, settles any unfinished restore first, and
/// is written again should a restore claimed meanwhile have undone it — a
/// restore covers the steps table, so a row written between two of its
/// table commits would otherwise vanish.
pub async fn append(lake: &Lake, record: &StepRecord) -> Result<()> {
    let mut writer = lake.writer(WriteKind::Step).begin().await?;
    append_as(lake, &mut writer, record).await
}

/// Append `record` as `writer`: exactly the table's next version; on a
/// second attempt (a restore met) only when the restore removed it.
async fn append_as(lake: &Lake, writer: &mut Writer, record: &StepRecord) -> Result<()> {
    let spec = layout::steps_table();
    let mut again = false;
    loop {
        if !again || !is_recorded(lake, record).await? {
            let mut tip = lake.put_tip(&spec).await?;
            let batch = row_batch(tip.table(), &spec, record)?;
            Append::new(lake.root(), &spec, vec![batch]).execute_on_tip(&mut tip).await?;
            lake.handles().keep_tip(&spec, tip);
        }
        if writer.wrote_whole(lake, &spec.name).await? {
            return Ok(());
        }
        again = true;
    }
}

/// Whether the steps table holds `record` (its natural key: step run,
/// status, time).
async fn is_recorded(lake: &Lake, record: &StepRecord) -> Result<bool> {
    let filter = scan::equals("step_run_id", record.step_run_id.as_str())
        .and(scan::equals("status", record.status.as_str()));
    let rows = read(lake, Some(filter)).await?;
    Ok(rows.iter().any(|r| r.timestamp == record.timestamp))
}

fn row_batch(handle: &DeltaTable, spec: &TableSpec, record: &StepRecord) -> Result<RecordBatch> {
    let schema = table::arrow_schema(handle, spec)?;
    let mut columns = Vec::new();
    for field in schema.fields() {
        let value = record.value(field.name())?;
        columns.push(build_array(&spec.name, field, std::iter::once(&value))?);
    }
    RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow("building a steps row", e))
}

const COLUMNS: [&str; 15] = [
    "step_run_id",
    "step_spec_id",
    "pipeline_run_id",
    "step_number",
    "step_name",
    "status",
    "operation_name",
    "params",
    "total_count",
    "succeeded_count",
    "failed_count",
    "timestamp",
    "duration_seconds",
    "error",
    "metadata",
];

/// Rows matching a filter over the steps table, ordered by time.
pub async fn read(lake: &Lake, filter: Option<Expr>) -> Result<Vec<StepRecord>> {
    let spec = layout::steps_table();
    let handle = table::open(lake.root(), &spec).await?;
    let mut out = Vec::new();
    let select = Select::columns(scan::columns(&COLUMNS)).filter_opt(filter);
    select
        .for_each_batch(&handle, &spec.name, |batch| {
            for row in 0..batch.num_rows() {
                out.push(parse_row(batch, row, &spec.name)?);
            }
            Ok(())
        })
        .await?;
    out.sort_by_key(|r| (r.timestamp, r.step_number));
    Ok(out)
}

/// One row of the steps table. A status or metadata sluice cannot read is an
/// error naming the row: the step cache is decided from them.
fn parse_row(batch: &RecordBatch, row: usize, table: &str) -> Result<StepRecord> {
    let values = (0..batch.num_columns())
        .map(|i| read_value(table, batch.column(i).as_ref(), row))
        .collect::<Result<Vec<_>>>()?;
    let get = |i: usize| values[i].clone();
    let text = |i: usize| values[i].as_str().map(str::to_owned);
    let step_run_id = text(0).unwrap_or_default();
    let at = |column: &str| format!("step run `{step_run_id}`, column `{column}`");
    let status = text(5).unwrap_or_default();
    let status = StepStatus::parse(&status).ok_or_else(|| {
        Error::corrupt(table, at("status"), format!("unknown step status `{status}`"))
    })?;
    let metadata = match text(14) {
        None => serde_json::Value::Null,
        Some(t) => serde_json::from_str(&t)
            .map_err(|e| Error::corrupt(table, at("metadata"), format!("not JSON: {e}")))?,
    };
    Ok(StepRecord {
        step_spec_id: text(1).unwrap_or_default(),
        pipeline_run_id: text(2).unwrap_or_default(),
        step_number: get(3).as_int().and_then(|v| i32::try_from(v).ok()).unwrap_or_default(),
        step_name: text(4).unwrap_or_default(),
        status,
        operation_name: text(6).unwrap_or_default(),
        params: text(7).unwrap_or_default(),
        total_count: get(8).as_int(),
        succeeded_count: get(9).as_int(),
        failed_count: get(10).as_int(),
        timestamp: match get(11) {
            FieldValue::TimestampMicros(t) => t,
            other => other.as_int().unwrap_or_default(),
        },
        duration_seconds: match get(12) {
            FieldValue::Float(f) => Some(f),
            _ => None,
        },
        error: text(13),
        metadata,
        step_run_id,
    })
}

/// Steps left `running` by an orchestrator that is certainly gone (its
/// `owner`, recorded in the running row, names a process of this host that
/// no longer exists): their last rows. Steps of other hosts' orchestrators
/// are not judged.
pub async fn orphaned_running(lake: &Lake) -> Result<Vec<StepRecord>> {
    // A lake that only ingests has run no step.
    if !table::exists(lake.root(), &layout::steps_table()).await? {
        return Ok(Vec::new());
    }
    let rows = read(lake, None).await?;
    let mut last: BTreeMap<&str, &StepRecord> = BTreeMap::new();
    for row in &rows {
        last.insert(row.step_run_id.as_str(), row);
    }
    Ok(last
        .values()
        .filter(|r| r.status == StepStatus::Running)
        .filter(|r| {
            r.metadata
                .get("owner")
                .and_then(serde_json::Value::as_str)
                .is_some_and(crate::host::owner_is_dead)
        })
        .map(|r| (*r).clone())
        .collect())
}

/// The `abandoned` rows that would end the steps [`orphaned_running`]
/// finds, not recorded (what a read-only view shows).
pub async fn abandoned(lake: &Lake) -> Result<Vec<StepRecord>> {
    Ok(orphaned_running(lake)
        .await?
        .into_iter()
        .map(|row| {
            let owner = row.metadata.get("owner").and_then(serde_json::Value::as_str);
            let error =
                format!("its orchestrator ({}) died while the step ran", owner.unwrap_or("?"));
            StepRecord {
                status: StepStatus::Abandoned,
                timestamp: chrono::Utc::now().timestamp_micros(),
                error: Some(error),
                ..row
            }
        })
        .collect())
}

/// End `abandoned` every step [`orphaned_running`] finds; returns the
/// `abandoned` rows. With `wait` `None`
/// they are recorded, waiting for the writer lock as long as it takes;
/// with `Some(limit)` a writer that cannot begin within it (the lock held,
/// a restore running) leaves them unrecorded — a reader such as `status`
/// shows them without waiting behind a long commit, and the next writer
/// records them.
pub async fn close_abandoned(lake: &Lake, wait: Option<Duration>) -> Result<Vec<StepRecord>> {
    let ended = abandoned(lake).await?;
    if ended.is_empty() {
        return Ok(ended);
    }
    let mut writer = match lake.writer(WriteKind::Step).lock_wait(wait).begin().await {
        Ok(writer) => writer,
        Err(e @ (Error::LockTimeout { .. } | Error::RestoreInProgress { .. }))
            if wait.is_some() =>
        {
            tracing::debug!(error = %e, "steps left running by a dead orchestrator are not recorded abandoned yet");
            return Ok(ended);
        }
        Err(e) => return Err(e),
    };
    for row in &ended {
        append_as(lake, &mut writer, row).await?;
    }
    Ok(ended)
}

/// The latest `completed` row of a step spec with no failed units: the
/// step-level cache.
pub async fn completed_spec(lake: &Lake, step_spec_id: &str) -> Result<Option<StepRecord>> {
    let filter = scan::equals("step_spec_id", step_spec_id)
        .and(scan::equals("status", StepStatus::Completed.as_str()));
    let rows = read(lake, Some(filter)).await?;
    Ok(rows
        .into_iter()
        .rev()
        .find(|r| r.failed_count.unwrap_or(0) == 0 && r.metadata.get("outputs").is_some()))
}
