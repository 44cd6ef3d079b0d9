//! Checks: SQL over what a step's outputs hold, run after the step, that
//! gate what the steps after it see.
//!
//! ```toml
//! [[check]]
//! name = "enough_rows"
//! step = "gen"
//! sql = "SELECT sum(row_count) > 1000 FROM new_rows"
//! severity = "error"            # or "warn": recorded, never gating
//! ```
//!
//! A check's query reads `new_rows_<role>` for each output role of its
//! step, and `new_rows` when the step has one output role (or the check
//! names one with `role`): one row per artifact the role's stream holds in
//! this run — for metric and config artifacts their JSON's top-level keys
//! as columns, for other types their table's columns (data: `row_count`,
//! `size_bytes`, `columns`, `format`, `original_name`), always
//! `artifact_id`. Only those artifacts are read, by id. The query returns
//! one row whose first column says whether the check passed; the row is
//! kept as the observed value.
//!
//! Results are rows of the `checks` table. An `error` check that fails (or
//! cannot be evaluated) blocks its step's outputs (or its `role`'s): every
//! step that reads them, directly or through another blocked step, is not
//! run and is recorded `not_reached` naming the check, the other steps run,
//! and the run ends failed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use deltalake::arrow::array::{Array, BooleanArray, RecordBatch};
use deltalake::arrow::datatypes::{DataType, Field, Schema};
use deltalake::arrow::json::reader::{ReaderBuilder, infer_json_schema};
use deltalake::datafusion::datasource::MemTable;
use deltalake::datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod table;

pub use table::{CheckRecord, read, refusal};
pub(crate) use table::{CheckedStep, record};

use super::steps_log::Streams;
use crate::artifact::{Artifact, ArtifactId, FieldValue, canonical_json};
use crate::error::{Error, Result};
use crate::lake::Lake;

/// How much a failing check matters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Recorded, and shown; nothing stops.
    Warn,
    /// Blocks the checked outputs from the steps after.
    #[default]
    Error,
}

impl Severity {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warn => "warn",
            Severity::Error => "error",
        }
    }
}

/// A `[[check]]` of a pipeline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckConfig {
    /// Its name (unique in the pipeline).
    pub name: String,
    /// The step whose outputs it checks.
    pub step: String,
    /// The output role it checks (default: every role of the step; with
    /// one, `new_rows` is it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The query: one row, the first column a boolean.
    pub sql: String,
    /// `error` (default) or `warn`.
    #[serde(default)]
    pub severity: Severity,
}

/// What one check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check.
    pub name: String,
    /// The step it checked.
    pub step: String,
    /// Its severity.
    pub severity: Severity,
    /// Whether it passed.
    pub passed: bool,
    /// The query's row (column → value), when it ran.
    pub observed: Option<Value>,
    /// Rows the query could read.
    pub rows_examined: i64,
    /// Why it could not be evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The artifacts it judged (recorded in the row's metadata, so that a
    /// read with `--require-checks` knows what a failing check covers).
    #[serde(skip)]
    pub artifacts: Vec<ArtifactId>,
}

impl CheckResult {
    /// Whether it blocks what it checked.
    pub fn blocks(&self) -> bool {
        !self.passed && self.severity == Severity::Error
    }
}

/// What is wrong with `check`, given the output roles of its step (`None`
/// when the step does not exist).
pub(crate) fn problem(check: &CheckConfig, roles: Option<Vec<&str>>) -> Option<String> {
    let Some(roles) = roles else {
        return Some(format!("check `{}`: no step `{}`", check.name, check.step));
    };
    if let Some(role) = &check.role
        && !roles.contains(&role.as_str())
    {
        return Some(format!(
            "check `{}`: step `{}` has no output role `{role}` (it has {})",
            check.name,
            check.step,
            roles.join(", ")
        ));
    }
    use deltalake::datafusion::sql::sqlparser::{dialect::GenericDialect, parser::Parser};
    if let Err(e) = Parser::parse_sql(&GenericDialect {}, &check.sql) {
        return Some(format!("check `{}`: sql = \"{}\" is not SQL: {e}", check.name, check.sql));
    }
    None
}

/// The rows of `artifacts` as a table: `artifact_id`, then each artifact's
/// columns, with a metric's or config's JSON spread into its keys.
fn rows_of(artifacts: &[&Artifact]) -> Result<RecordBatch> {
    let mut lines = Vec::with_capacity(artifacts.len());
    for artifact in artifacts {
        let mut row = Map::new();
        row.insert("artifact_id".into(), artifact.id.to_string().into());
        for (column, value) in &artifact.fields {
            let spread = match value {
                FieldValue::String(text) if column == "content" => {
                    serde_json::from_str::<Map<String, Value>>(text).ok()
                }
                _ => None,
            };
            match (spread, value) {
                (Some(keys), _) => row.extend(keys),
                (None, FieldValue::Binary(_)) => {}
                (None, value) => {
                    row.insert(column.clone(), value.to_json());
                }
            }
        }
        lines.push(canonical_json::to_string(&Value::Object(row))?);
    }
    let context = |e: &dyn std::fmt::Display| Error::InvalidInput(format!("check rows: {e}"));
    if lines.is_empty() {
        let schema = Schema::new(vec![Field::new("artifact_id", DataType::Utf8, false)]);
        return Ok(RecordBatch::new_empty(Arc::new(schema)));
    }
    let text = lines.join("\n");
    let (schema, _) = infer_json_schema(text.as_bytes(), None).map_err(|e| context(&e))?;
    let schema = Arc::new(schema);
    let batches = ReaderBuilder::new(schema.clone())
        .build(text.as_bytes())
        .map_err(|e| context(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| context(&e))?;
    deltalake::arrow::compute::concat_batches(&schema, &batches).map_err(|e| context(&e))
}

/// Evaluate the checks of step `step` over its output streams.
pub(crate) async fn evaluate(
    lake: &Lake,
    checks: &[&CheckConfig],
    outputs: &Streams,
) -> Result<Vec<CheckResult>> {
    if checks.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<ArtifactId> = outputs.values().flatten().copied().collect();
    let artifacts = lake.get_many(&ids).await?;
    let mut tables: HashMap<&str, RecordBatch> = HashMap::new();
    for (role, ids) in outputs {
        let found: Vec<&Artifact> = ids.iter().filter_map(|id| artifacts.get(id)).collect();
        tables.insert(role.as_str(), rows_of(&found)?);
    }
    let mut results = Vec::new();
    for check in checks {
        let ctx = SessionContext::new();
        let mut examined = 0;
        let mut register = |name: String, batch: &RecordBatch| -> Result<()> {
            examined += batch.num_rows() as i64;
            let table = MemTable::try_new(batch.schema(), vec![vec![batch.clone()]])?;
            ctx.register_table(name, Arc::new(table))?;
            Ok(())
        };
        for (role, batch) in &tables {
            if check.role.as_deref().is_none_or(|r| r == *role) {
                register(format!("new_rows_{role}"), batch)?;
            }
        }
        let single = match &check.role {
            Some(role) => tables.get(role.as_str()),
            None if tables.len() == 1 => tables.values().next(),
            None => None,
        };
        if let Some(batch) = single {
            let table = MemTable::try_new(batch.schema(), vec![vec![batch.clone()]])?;
            ctx.register_table("new_rows", Arc::new(table))?;
        }
        let judged: Vec<ArtifactId> = outputs
            .iter()
            .filter(|(role, _)| check.role.as_deref().is_none_or(|r| r == role.as_str()))
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect();
        let (passed, observed, error) = match run_query(&ctx, &check.sql).await {
            Ok((passed, row)) => (passed, Some(row), None),
            Err(why) => (false, None, Some(why)),
        };
        results.push(CheckResult {
            name: check.name.clone(),
            step: check.step.clone(),
            severity: check.severity,
            passed,
            observed,
            rows_examined: examined,
            error,
            artifacts: judged,
        });
    }
    Ok(results)
}

/// Run a check's query: whether its one row's first column is true, and
/// the row; or why it cannot say.
async fn run_query(ctx: &SessionContext, sql: &str) -> std::result::Result<(bool, Value), String> {
    let batches = ctx
        .sql(sql)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let batch = batches.iter().find(|b| b.num_rows() > 0);
    let (Some(batch), 1) = (batch, rows) else {
        return Err(format!("the query returned {rows} rows, not one"));
    };
    let first = batch.column(0);
    let Some(flags) = first.as_any().downcast_ref::<BooleanArray>() else {
        return Err(format!(
            "the query's first column is {}, not a boolean (write a comparison: `count(*) > 0`)",
            first.data_type()
        ));
    };
    let passed = flags.is_valid(0) && flags.value(0);
    let mut out = Vec::new();
    {
        let mut writer = deltalake::arrow::json::ArrayWriter::new(&mut out);
        writer.write(batch).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
    }
    let row = serde_json::from_slice::<Vec<Value>>(&out)
        .ok()
        .and_then(|rows| rows.into_iter().next())
        .unwrap_or(Value::Null);
    Ok((passed, row))
}

/// Which outputs of which steps failing checks block: (step index, role) →
/// the reason, given the steps' output roles.
pub(crate) fn blocked_outputs(
    results: &[CheckResult],
    checks: &[&CheckConfig],
    step_index: usize,
    roles: &BTreeMap<String, String>,
) -> BTreeMap<(usize, String), String> {
    let mut blocked = BTreeMap::new();
    for (result, check) in results.iter().zip(checks) {
        if !result.blocks() {
            continue;
        }
        let why = format!("check `{}` on step `{}` failed", result.name, result.step);
        for role in roles.keys() {
            if check.role.as_deref().is_none_or(|r| r == role) {
                blocked.entry((step_index, role.clone())).or_insert_with(|| why.clone());
            }
        }
    }
    blocked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_keys_become_columns_and_binary_content_is_left_out() {
        let metric = crate::artifact::Draft::metric(serde_json::json!({"loss": 0.5, "rows": 3}))
            .unwrap()
            .finalize(&crate::registry::TypeRegistry::builtin())
            .unwrap();
        let data =
            crate::artifact::Draft::data(b"a,b\n1,2\n".to_vec(), crate::artifact::DataFormat::Csv)
                .finalize(&crate::registry::TypeRegistry::builtin())
                .unwrap();
        let rows = rows_of(&[&metric]).unwrap();
        let schema = rows.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert!(names.contains(&"loss") && names.contains(&"artifact_id"), "{names:?}");
        assert!(!names.contains(&"content"));
        let rows = rows_of(&[&data]).unwrap();
        let schema = rows.schema();
        assert!(schema.field_with_name("row_count").is_ok());
        assert!(schema.field_with_name("content").is_err());
        assert_eq!(rows_of(&[]).unwrap().num_rows(), 0);
    }

    #[tokio::test]
    async fn a_query_passes_on_true_and_explains_what_it_cannot_judge() {
        let ctx = SessionContext::new();
        let (passed, row) = run_query(&ctx, "SELECT 1 < 2 AS ok, 7 AS n").await.unwrap();
        assert!(passed);
        assert_eq!(row, serde_json::json!({"ok": true, "n": 7}));
        assert!(!run_query(&ctx, "SELECT 2 < 1").await.unwrap().0);
        let why = run_query(&ctx, "SELECT 3").await.unwrap_err();
        assert!(why.contains("not a boolean"), "{why}");
        let why = run_query(&ctx, "SELECT true WHERE false").await.unwrap_err();
        assert!(why.contains("0 rows"), "{why}");
    }
}
