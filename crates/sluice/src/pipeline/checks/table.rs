//! The `checks` table: one row per check evaluated, written through the
//! writer protocol as the steps table's rows are, and read back by
//! `status` and by readers that require checks.

use std::collections::BTreeMap;

use deltalake::arrow::array::RecordBatch;
use serde::Serialize;
use serde_json::Value;

use super::{CheckResult, Severity};
use crate::artifact::arrow_convert::{build_array, read_value};
use crate::artifact::{ArtifactId, FieldValue, canonical_json};
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::append::Append;
use crate::lake::delta::scan::{self, Select};
use crate::lake::delta::table;
use crate::lake::layout;
use crate::lake::writer::WriteKind;

/// Where a check ran: the run, the step run and its number.
#[derive(Debug, Clone)]
pub(crate) struct CheckedStep<'a> {
    pub pipeline_run_id: &'a str,
    pub step_run_id: &'a str,
    pub step_number: i32,
}

/// Append `results` to the `checks` table, through the writer protocol as
/// the steps table's rows are (written again should a restore claimed
/// meanwhile have undone them).
pub(crate) async fn record(
    lake: &Lake,
    at: &CheckedStep<'_>,
    results: &[CheckResult],
) -> Result<()> {
    if results.is_empty() {
        return Ok(());
    }
    let spec = layout::checks_table();
    let now = chrono::Utc::now().timestamp_micros();
    let rows: Vec<BTreeMap<&str, FieldValue>> =
        results.iter().map(|r| row(at, r, now)).collect::<Result<_>>()?;
    let ids: Vec<String> =
        rows.iter().filter_map(|r| r["check_run_id"].as_str().map(str::to_owned)).collect();
    let mut writer = lake.writer(WriteKind::Step).begin().await?;
    let mut again = false;
    loop {
        if !again || !recorded(lake, &ids).await? {
            let mut tip = lake.put_tip(&spec).await?;
            let schema = table::arrow_schema(tip.table(), &spec)?;
            let mut columns = Vec::new();
            for field in schema.fields() {
                let values: Vec<&FieldValue> = rows
                    .iter()
                    .map(|r| r.get(field.name().as_str()).unwrap_or(&FieldValue::Null))
                    .collect();
                columns.push(build_array(&spec.name, field, values.into_iter())?);
            }
            let batch = RecordBatch::try_new(schema, columns)
                .map_err(|e| Error::arrow("building checks rows", e))?;
            Append::new(lake.root(), &spec, vec![batch]).execute_on_tip(&mut tip).await?;
            lake.handles().keep_tip(&spec, tip);
        }
        if writer.wrote_whole(lake, &spec.name).await? {
            return Ok(());
        }
        again = true;
    }
}

fn row<'a>(
    at: &CheckedStep<'_>,
    result: &CheckResult,
    now: i64,
) -> Result<BTreeMap<&'a str, FieldValue>> {
    let s = |v: &str| FieldValue::String(v.to_owned());
    let observed = match &result.observed {
        Some(value) => s(&canonical_json::to_string(value)?),
        None => FieldValue::Null,
    };
    Ok(BTreeMap::from([
        ("check_run_id", s(&crate::host::unique_id())),
        ("pipeline_run_id", s(at.pipeline_run_id)),
        ("step_run_id", s(at.step_run_id)),
        ("step_number", FieldValue::Int(i64::from(at.step_number))),
        ("step_name", s(&result.step)),
        ("check_name", s(&result.name)),
        ("severity", s(result.severity.as_str())),
        ("passed", FieldValue::Bool(result.passed)),
        ("observed", observed),
        ("rows_examined", FieldValue::Int(result.rows_examined)),
        ("error", result.error.as_deref().map_or(FieldValue::Null, s)),
        ("timestamp", FieldValue::TimestampMicros(now)),
        (
            "metadata",
            s(&canonical_json::to_string(&serde_json::json!({
                "artifacts": result.artifacts.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }))?),
        ),
    ]))
}

/// Whether the checks table holds every one of `ids`.
async fn recorded(lake: &Lake, ids: &[String]) -> Result<bool> {
    let found = read(lake, None).await?;
    Ok(ids.iter().all(|id| found.iter().any(|r| &r.check_run_id == id)))
}

/// One row of the `checks` table, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckRecord {
    /// The row's id.
    pub check_run_id: String,
    /// The run.
    pub pipeline_run_id: String,
    /// The step run it checked.
    pub step_run_id: String,
    /// The result.
    #[serde(flatten)]
    pub result: CheckResult,
}

/// The rows of the `checks` table (of one run, when given), oldest first;
/// none in a lake no check ever ran in.
pub async fn read(lake: &Lake, run: Option<&str>) -> Result<Vec<CheckRecord>> {
    let spec = layout::checks_table();
    if !table::exists(lake.root(), &spec).await? {
        return Ok(Vec::new());
    }
    let handle = table::open(lake.root(), &spec).await?;
    let filter = run.map(|r| scan::equals("pipeline_run_id", r));
    let names = [
        "check_run_id",
        "pipeline_run_id",
        "step_run_id",
        "step_name",
        "check_name",
        "severity",
        "passed",
        "observed",
        "rows_examined",
        "error",
        "timestamp",
        "metadata",
    ];
    let mut out = Vec::new();
    Select::columns(scan::columns(&names))
        .filter_opt(filter)
        .for_each_batch(&handle, &spec.name, |batch| {
            for at in 0..batch.num_rows() {
                let v = |i: usize| read_value(&spec.name, batch.column(i).as_ref(), at);
                let text =
                    |i: usize| v(i).map(|x| x.as_str().map(str::to_owned).unwrap_or_default());
                let observed = v(7)?.as_str().and_then(|t| serde_json::from_str(t).ok());
                let timestamp = match v(10)? {
                    FieldValue::TimestampMicros(t) => t,
                    other => other.as_int().unwrap_or_default(),
                };
                out.push((
                    timestamp,
                    CheckRecord {
                        check_run_id: text(0)?,
                        pipeline_run_id: text(1)?,
                        step_run_id: text(2)?,
                        result: CheckResult {
                            step: text(3)?,
                            name: text(4)?,
                            severity: if text(5)? == "warn" {
                                Severity::Warn
                            } else {
                                Severity::Error
                            },
                            passed: matches!(v(6)?, FieldValue::Bool(true)),
                            observed,
                            rows_examined: v(8)?.as_int().unwrap_or_default(),
                            error: v(9)?.as_str().map(str::to_owned),
                            artifacts: v(11)?
                                .as_str()
                                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                                .and_then(|m| {
                                    serde_json::from_value::<Vec<String>>(m["artifacts"].clone())
                                        .ok()
                                })
                                .unwrap_or_default()
                                .iter()
                                .filter_map(|id| id.parse().ok())
                                .collect(),
                        },
                    },
                ));
            }
            Ok(())
        })
        .await?;
    out.sort_by_key(|(t, _)| *t);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// Why `id` may not be read by a reader that requires checks: the latest
/// result of some `error` check that judged it failed (`None`: every check
/// that judged it last passed, or none did).
pub async fn refusal(lake: &Lake, id: ArtifactId) -> Result<Option<String>> {
    let rows = read(lake, None).await?;
    let mut latest: BTreeMap<(&str, &str), &CheckRecord> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.result.artifacts.contains(&id)) {
        latest.insert((row.result.step.as_str(), row.result.name.as_str()), row);
    }
    Ok(latest.values().find(|r| r.result.blocks()).map(|r| {
        format!(
            "artifact {id} fails check `{}` on step `{}` (run {}){}",
            r.result.name,
            r.result.step,
            r.pipeline_run_id,
            r.result.observed.as_ref().map(|o| format!(": observed {o}")).unwrap_or_default()
        )
    }))
}
