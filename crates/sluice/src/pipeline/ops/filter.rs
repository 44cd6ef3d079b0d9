//! `filter`: keep the candidates whose metric satisfies a predicate.
//!
//! ```toml
//! [[step]]
//! name = "keep"
//! operation = "filter"
//! inputs = { candidates = "generate.data" }
//! params = { metric = "stats.stats", where = "mean > 0.5" }
//! ```
//!
//! A candidate's metric is found through provenance: a metric of the
//! `metric` stream that derives directly from the candidate (an
//! `artifact_edges` row candidate → metric). `where` is a SQL boolean
//! expression over the metric's top-level keys, evaluated by DataFusion.
//! A candidate is kept if any of its metrics satisfies it; candidates without
//! a metric are dropped (and counted in the tool output).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltalake::arrow::array::{Array, StringArray};
use deltalake::arrow::json::reader::{ReaderBuilder, infer_json_schema};
use deltalake::datafusion::datasource::MemTable;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::dialect::GenericDialect;
use deltalake::datafusion::sql::sqlparser::parser::Parser;

use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::delta::scan::{self, Select};
use crate::lake::{delta::table, layout};
use crate::pipeline::config::{StepConfig, StepError};
use crate::pipeline::operation::{Grouping, Operation, Output, Signature, UnitContext};

/// The `filter` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct FilterOp;

const ID_COLUMN: &str = "__sluice_artifact_id";

fn predicate(step: &StepConfig) -> std::result::Result<String, StepError> {
    let text = step.params.get("where").and_then(|v| v.as_str()).ok_or_else(|| {
        StepError::MissingParam {
            name: "where".into(),
            expected: "a SQL predicate over the metric's keys".into(),
        }
    })?;
    Parser::new(&GenericDialect {}).try_with_sql(text).and_then(|mut p| p.parse_expr()).map_err(
        |e| StepError::BadParam {
            name: "where".into(),
            problem: format!("= \"{text}\" is not a SQL expression: {e}"),
        },
    )?;
    Ok(text.to_owned())
}

impl Operation for FilterOp {
    fn name(&self) -> &str {
        "filter"
    }

    fn known_params(&self) -> Option<&'static [&'static str]> {
        Some(&["metric", "where"])
    }

    fn implicit_inputs(&self, step: &StepConfig) -> BTreeMap<String, String> {
        step.params
            .get("metric")
            .and_then(|v| v.as_str())
            .map(|r| BTreeMap::from([("metric".to_owned(), r.to_owned())]))
            .unwrap_or_default()
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        let candidates = s
            .input_types
            .get("candidates")
            .ok_or_else(|| StepError::Shape("needs an input role `candidates`".into()))?;
        if let Some(extra) = s.input_types.keys().find(|r| *r != "candidates" && *r != "metric") {
            return Err(StepError::Shape(format!(
                "unexpected input `{extra}` (filter takes `candidates` and params.metric)"
            )));
        }
        match s.input_types.get("metric") {
            None => {
                return Err(StepError::MissingParam {
                    name: "metric".into(),
                    expected: "\"<step>.<role>\" of metrics".into(),
                });
            }
            Some(t) if t != crate::artifact::METRIC => {
                return Err(StepError::Shape(format!(
                    "params.metric refers to `{t}` artifacts, but filter needs `metric` ones"
                )));
            }
            Some(_) => {}
        }
        predicate(s.step)?;
        Ok(BTreeMap::from([("kept".into(), candidates.clone())]))
    }

    fn grouping(&self) -> Grouping {
        Grouping::WholeStream
    }

    fn inline(&self) -> bool {
        true
    }

    fn needs_content(&self) -> bool {
        false
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let predicate = predicate(&ctx.step)
            .map_err(|source| Error::Step { operation: "filter".into(), source })?;
        let candidates = ctx.input_ids.get("candidates").cloned().unwrap_or_default();
        let metrics: Vec<ArtifactId> = ctx.input_ids.get("metric").cloned().unwrap_or_default();
        let candidate_set: BTreeSet<ArtifactId> = candidates.iter().copied().collect();

        // metric → the candidates it derives from.
        let edges = ctx.block_on(derivations(&ctx.lake, &metrics))?;
        let mut metric_of: BTreeMap<ArtifactId, Vec<ArtifactId>> = BTreeMap::new();
        for (source, target) in edges {
            if candidate_set.contains(&source) {
                metric_of.entry(source).or_default().push(target);
            }
        }
        let passing = ctx.block_on(passing_metrics(&ctx.lake, &metrics, &predicate))?;
        let without_metric = candidates.iter().filter(|c| !metric_of.contains_key(c)).count();
        let kept: Vec<ArtifactId> = candidates
            .iter()
            .filter(|c| metric_of.get(c).is_some_and(|ms| ms.iter().any(|m| passing.contains(m))))
            .copied()
            .collect();
        ctx.set_tool_output(format!(
            "filter `{predicate}`: kept {} of {} candidates ({} without a metric)",
            kept.len(),
            candidates.len(),
            without_metric
        ));
        Ok(kept.into_iter().map(|id| Output::Existing { role: "kept".into(), id }).collect())
    }
}

/// (source, target) derivation edges whose target is one of `targets`.
async fn derivations(
    lake: &crate::Lake,
    targets: &[ArtifactId],
) -> Result<Vec<(ArtifactId, ArtifactId)>> {
    let spec = layout::artifact_edges_table();
    let handle = table::open(lake.root(), &spec).await?;
    let mut out = Vec::new();
    for chunk in targets.chunks(scan::IN_LIST_CHUNK) {
        let filter = scan::in_list("target_artifact_id", chunk.iter().map(ArtifactId::to_hex));
        let batches = Select::columns(scan::columns(&["source_artifact_id", "target_artifact_id"]))
            .filter(filter)
            .collect(&handle, &spec.name)
            .await?;
        for batch in &batches {
            let s = scan::text_column(batch, 0, &spec.name)?;
            let t = scan::text_column(batch, 1, &spec.name)?;
            for row in 0..batch.num_rows() {
                if let (Ok(s), Ok(t)) = (s.value(row).parse(), t.value(row).parse()) {
                    out.push((s, t));
                }
            }
        }
    }
    Ok(out)
}

/// Metrics read by id at once: what `filter` holds of them as artifacts.
const METRICS_AT_ONCE: usize = 16_384;

/// The metrics among `ids` whose content satisfies `predicate`.
///
/// The metrics are read [`METRICS_AT_ONCE`] at a time and kept only as
/// lines of JSON (their content and id), so that memory follows the
/// metrics' text, not the artifacts read; the schema is inferred over all
/// the lines at once (a key missing from some metrics is null there, a key
/// that is an integer in some and a float in others is a float), then the
/// lines are decoded in batches and the predicate runs over them.
async fn passing_metrics(
    lake: &crate::Lake,
    ids: &[ArtifactId],
    predicate: &str,
) -> Result<BTreeSet<ArtifactId>> {
    passing_metrics_by(lake, ids, predicate, METRICS_AT_ONCE).await
}

/// [`passing_metrics`], reading `at_once` metrics at a time.
async fn passing_metrics_by(
    lake: &crate::Lake,
    ids: &[ArtifactId],
    predicate: &str,
    at_once: usize,
) -> Result<BTreeSet<ArtifactId>> {
    let context = |e: &dyn std::fmt::Display| {
        Error::operation("filter", format!("reading metrics as a table: {e}"))
    };
    let mut lines: Vec<u8> = Vec::new();
    for chunk in ids.chunks(at_once.max(1)) {
        for artifact in lake.get_many(chunk).await?.values() {
            let mut value = artifact.json_content()?;
            if let Some(object) = value.as_object_mut() {
                object.insert(ID_COLUMN.into(), serde_json::Value::String(artifact.id.to_hex()));
                serde_json::to_writer(&mut lines, &value).map_err(|e| context(&e))?;
                lines.push(b'\n');
            }
        }
    }
    if lines.is_empty() {
        return Ok(BTreeSet::new());
    }
    let (schema, _) = infer_json_schema(lines.as_slice(), None).map_err(|e| context(&e))?;
    let schema = Arc::new(schema);
    let batches = ReaderBuilder::new(schema.clone())
        .with_batch_size(at_once.max(1))
        .build(lines.as_slice())
        .map_err(|e| context(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| context(&e))?;
    drop(lines);
    let ctx = SessionContext::new();
    let table = MemTable::try_new(schema, vec![batches])?;
    ctx.register_table("m", Arc::new(table))?;
    let df = ctx
        .sql(&format!("SELECT {ID_COLUMN} FROM m WHERE {predicate}"))
        .await
        .map_err(|e| Error::operation("filter", format!("predicate `{predicate}`: {e}")))?;
    let mut out = BTreeSet::new();
    for batch in df.collect().await? {
        let column = deltalake::arrow::compute::cast(
            batch.column(0),
            &deltalake::arrow::datatypes::DataType::Utf8,
        )
        .map_err(|e| Error::arrow("filter ids", e))?;
        if let Some(ids) = column.as_any().downcast_ref::<StringArray>() {
            for row in 0..ids.len() {
                if let Ok(id) = ids.value(row).parse() {
                    out.insert(id);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::Draft;
    use serde_json::json;

    #[tokio::test]
    async fn metrics_read_in_parts_are_judged_as_one_table() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let contents = [
            json!({"loss": 1}),
            json!({"loss": 2.5}),
            json!({"other": 1}),
            json!({"loss": 0.5, "name": "x"}),
            json!({"loss": 7, "name": "y"}),
        ];
        let artifacts: Vec<_> = contents
            .iter()
            .map(|c| {
                Draft::metric(c.clone()).unwrap().with_step(1).finalize(lake.registry()).unwrap()
            })
            .collect();
        lake.put(&artifacts).await.unwrap();
        let ids: Vec<ArtifactId> = artifacts.iter().map(|a| a.id).collect();
        // Two at a time: `loss` is an integer in one part and a float in
        // another, missing from a third; `name` only in the last parts.
        let passing = passing_metrics_by(&lake, &ids, "loss > 1", 2).await.unwrap();
        assert_eq!(passing, BTreeSet::from([ids[1], ids[4]]));
        let named = passing_metrics_by(&lake, &ids, "name = 'x'", 2).await.unwrap();
        assert_eq!(named, BTreeSet::from([ids[3]]));
        assert_eq!(passing_metrics_by(&lake, &ids, "loss > 1", 100).await.unwrap(), passing);
        assert!(passing_metrics_by(&lake, &[], "loss > 1", 2).await.unwrap().is_empty());
    }
}
