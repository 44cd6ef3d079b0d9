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
use deltalake::arrow::json::reader::{ReaderBuilder, infer_json_schema_from_iterator};
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

/// The metrics among `ids` whose content satisfies `predicate`.
async fn passing_metrics(
    lake: &crate::Lake,
    ids: &[ArtifactId],
    predicate: &str,
) -> Result<BTreeSet<ArtifactId>> {
    let artifacts = lake.get_many(ids).await?;
    let mut rows = Vec::with_capacity(artifacts.len());
    for artifact in artifacts.values() {
        let mut value = artifact.json_content()?;
        if let Some(object) = value.as_object_mut() {
            object.insert(ID_COLUMN.into(), serde_json::Value::String(artifact.id.to_hex()));
            rows.push(value);
        }
    }
    if rows.is_empty() {
        return Ok(BTreeSet::new());
    }
    let context = |e: &dyn std::fmt::Display| {
        Error::operation("filter", format!("reading metrics as a table: {e}"))
    };
    let schema = infer_json_schema_from_iterator(rows.iter().map(Ok)).map_err(|e| context(&e))?;
    let schema = Arc::new(schema);
    let mut decoder =
        ReaderBuilder::new(schema.clone()).build_decoder().map_err(|e| context(&e))?;
    decoder.serialize(&rows).map_err(|e| context(&e))?;
    let batch = decoder.flush().map_err(|e| context(&e))?.ok_or_else(|| context(&"no rows"))?;
    let ctx = SessionContext::new();
    let table = MemTable::try_new(schema, vec![vec![batch]])?;
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
