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

use std::collections::{BTreeMap, BTreeSet, HashSet};
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

        // candidate → the metrics that derive from it.
        let clock = std::time::Instant::now();
        let metric_of = ctx.block_on(derivations(&ctx.lake, &candidate_set, &metrics))?;
        let edges_ms = clock.elapsed().as_millis() as u64;
        let passing = ctx.block_on(passing_metrics(&ctx.lake, &metrics, &predicate))?;
        // Where a filter's time goes, for `SLUICE_LOG=debug`.
        tracing::debug!(
            candidates = candidates.len(),
            metrics = metrics.len(),
            edges_ms,
            metrics_ms = clock.elapsed().as_millis() as u64 - edges_ms,
            "filter read"
        );
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

/// The derivation edges from one of `sources` to one of `targets`, as
/// source → its targets.
///
/// One pass over the edges table's two id columns (edges into other types
/// pruned by the scan), matched against the two sets in memory: a stream of
/// any length costs one read of the table, where `IN` lists of ids would
/// each read all of it again.
async fn derivations(
    lake: &crate::Lake,
    sources: &BTreeSet<ArtifactId>,
    targets: &[ArtifactId],
) -> Result<BTreeMap<ArtifactId, Vec<ArtifactId>>> {
    let mut out: BTreeMap<ArtifactId, Vec<ArtifactId>> = BTreeMap::new();
    if sources.is_empty() || targets.is_empty() {
        return Ok(out);
    }
    let targets: HashSet<ArtifactId> = targets.iter().copied().collect();
    let spec = layout::artifact_edges_table();
    let handle = table::open(lake.root(), &spec).await?;
    Select::columns(scan::columns(&["source_artifact_id", "target_artifact_id"]))
        .filter(scan::equals("target_artifact_type", crate::artifact::METRIC))
        .for_each_batch(&handle, &spec.name, |batch| {
            let s = scan::text_column(batch, 0, &spec.name)?;
            let t = scan::text_column(batch, 1, &spec.name)?;
            for row in 0..batch.num_rows() {
                let (Ok(source), Ok(target)) = (s.value(row).parse(), t.value(row).parse()) else {
                    continue;
                };
                if targets.contains(&target) && sources.contains(&source) {
                    out.entry(source).or_default().push(target);
                }
            }
            Ok(())
        })
        .await?;
    Ok(out)
}

/// Metrics decoded into one Arrow batch for the predicate.
const METRICS_PER_BATCH: usize = 16_384;

/// The metrics among `ids` whose content satisfies `predicate`.
///
/// The metrics are read by one pass over the step partitions that hold them
/// ([`crate::Lake::for_each_in_partitions`]) and kept only as lines of JSON
/// (their content and id), so that memory follows the metrics' text, not
/// the artifacts read; the schema is inferred over all the lines at once (a
/// key missing from some metrics is null there, a key that is an integer in
/// some and a float in others is a float), then the lines are decoded
/// [`METRICS_PER_BATCH`] at a time and the predicate runs over them.
async fn passing_metrics(
    lake: &crate::Lake,
    ids: &[ArtifactId],
    predicate: &str,
) -> Result<BTreeSet<ArtifactId>> {
    passing_metrics_by(lake, ids, predicate, METRICS_PER_BATCH).await
}

/// [`passing_metrics`], decoding `per_batch` metrics at a time.
async fn passing_metrics_by(
    lake: &crate::Lake,
    ids: &[ArtifactId],
    predicate: &str,
    per_batch: usize,
) -> Result<BTreeSet<ArtifactId>> {
    let context = |e: &dyn std::fmt::Display| {
        Error::operation("filter", format!("reading metrics as a table: {e}"))
    };
    let clock = std::time::Instant::now();
    let mut lines: Vec<u8> = Vec::new();
    lake.for_each_in_partitions(ids, |artifact| {
        let mut value = artifact.json_content()?;
        if let Some(object) = value.as_object_mut() {
            object.insert(ID_COLUMN.into(), serde_json::Value::String(artifact.id.to_hex()));
            serde_json::to_writer(&mut lines, &value).map_err(|e| context(&e))?;
            lines.push(b'\n');
        }
        Ok(())
    })
    .await?;
    if lines.is_empty() {
        return Ok(BTreeSet::new());
    }
    let read_ms = clock.elapsed().as_millis() as u64;
    let (schema, _) = infer_json_schema(lines.as_slice(), None).map_err(|e| context(&e))?;
    let schema = Arc::new(schema);
    let batches = ReaderBuilder::new(schema.clone())
        .with_batch_size(per_batch.max(1))
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
    let batches = df.collect().await?;
    tracing::debug!(
        read_ms,
        judged_ms = clock.elapsed().as_millis() as u64 - read_ms,
        "filter metrics judged"
    );
    let mut out = BTreeSet::new();
    for batch in batches {
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
        // Decoded two at a time: `loss` is an integer in one batch and a
        // float in another, missing from a third; `name` only in the last.
        let passing = passing_metrics_by(&lake, &ids, "loss > 1", 2).await.unwrap();
        assert_eq!(passing, BTreeSet::from([ids[1], ids[4]]));
        let named = passing_metrics_by(&lake, &ids, "name = 'x'", 2).await.unwrap();
        assert_eq!(named, BTreeSet::from([ids[3]]));
        assert_eq!(passing_metrics_by(&lake, &ids, "loss > 1", 100).await.unwrap(), passing);
        assert!(passing_metrics_by(&lake, &[], "loss > 1", 2).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn only_the_asked_metrics_of_the_partitions_read_are_judged() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let metric = |loss: f64, step: i32| {
            Draft::metric(json!({ "loss": loss }))
                .unwrap()
                .with_step(step)
                .finalize(lake.registry())
                .unwrap()
        };
        // Asked: one of step 1 and one of step 4; not asked, though in the
        // same partitions and passing: the others.
        let (a, b, c, d) = (metric(5.0, 1), metric(6.0, 1), metric(7.0, 4), metric(8.0, 2));
        lake.put(&[a.clone(), b.clone(), c.clone(), d.clone()]).await.unwrap();
        let absent = metric(9.0, 1).id;
        let passing =
            passing_metrics_by(&lake, &[a.id, c.id, absent], "loss > 1", 1).await.unwrap();
        assert_eq!(passing, BTreeSet::from([a.id, c.id]));
    }

    #[tokio::test]
    async fn derivations_pair_only_asked_sources_with_asked_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let text = r#"
name = "p"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 3, rows = 4 }
[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "gen.data" }
"#;
        let config =
            crate::pipeline::PipelineConfig::parse(text, std::path::Path::new("p.toml")).unwrap();
        let ops = crate::pipeline::Operations::linked().unwrap();
        let pipeline = crate::pipeline::Pipeline::validate(config, &ops, lake.registry()).unwrap();
        lake.run(pipeline, ops).with_workers(1).execute().await.unwrap();
        let ids = |type_key: &'static str| {
            let lake = lake.clone();
            async move {
                let all = lake.list(type_key, &crate::store::ListFilter::default()).await.unwrap();
                all.iter().map(|a| a.id).collect::<Vec<ArtifactId>>()
            }
        };
        let (data, metrics) = (ids("data").await, ids("metric").await);
        assert_eq!((data.len(), metrics.len()), (3, 3));
        let sources: BTreeSet<ArtifactId> = data[..2].iter().copied().collect();
        let found = derivations(&lake, &sources, &metrics).await.unwrap();
        assert_eq!(found.keys().copied().collect::<BTreeSet<_>>(), sources);
        assert!(found.values().all(|ms| ms.len() == 1 && metrics.contains(&ms[0])));
        let none = derivations(&lake, &sources, &metrics[..0]).await.unwrap();
        assert!(none.is_empty());
    }
}
