//! Lineage on a known DAG (fan-out, a filter, a command step, cross
//! pairing, a merge): the walk returns exactly the expected graph, and every
//! format shows it.

use std::collections::BTreeSet;
use std::path::Path;

use sluice::lineage::render::{self, Format};
use sluice::lineage::{Direction, LineageGraph};
use sluice::pipeline::{Operations, Pipeline, PipelineConfig};
use sluice::{ArtifactId, Lake};

use crate::common::lake;

const PIPELINE: &str = r#"name = "dag"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 2, rows = 4, seed = 5 }

[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "gen.data" }

[[step]]
name = "keep"
operation = "filter"
inputs = { candidates = "gen.data" }
params = { metric = "stats.metrics", where = "rows > 0" }

[[step]]
name = "twice"
operation = "command"
command = ["sh", "-c", 'for f in inputs/t/*; do cat "$f" "$f" > "outputs/t/$(basename "$f")"; done']
inputs = { t = "keep.kept" }
outputs = { t = "data" }

[[step]]
name = "pairs"
operation = "command"
command = ["sh", "-c", 'echo "{\"pair\": \"$(ls inputs/x) $(ls inputs/y)\"}" > outputs/p/p.json']
inputs = { x = "gen.data", y = "stats.metrics" }
pairing = "cross"
outputs = { p = "metric" }

[[step]]
name = "all"
operation = "merge"
inputs = { a = "gen.data", b = "twice.t" }
"#;

async fn ids(lake: &Lake, sql: &str) -> Vec<ArtifactId> {
    let r = lake.sql(sql).execute().await.unwrap();
    let csv = sluice::query::format::render(&r.batches, sluice::query::OutputFormat::Csv).unwrap();
    csv.lines().skip(1).map(|l| l.parse().unwrap()).collect()
}

/// (source, target) pairs of a step's derivations, from the edge table.
async fn derivations(lake: &Lake, operation: &str) -> BTreeSet<(ArtifactId, ArtifactId)> {
    let r = lake
        .sql(format!(
            "SELECT e.source_artifact_id, e.target_artifact_id FROM artifact_edges e \
             JOIN executions x ON e.execution_run_id = x.execution_run_id WHERE x.operation_name = '{operation}'"
        ))
        .execute()
        .await
        .unwrap();
    let csv = sluice::query::format::render(&r.batches, sluice::query::OutputFormat::Csv).unwrap();
    csv.lines()
        .skip(1)
        .map(|l| {
            let (a, b) = l.split_once(',').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

fn edge_set(graph: &LineageGraph) -> BTreeSet<(ArtifactId, ArtifactId)> {
    graph.edges.iter().map(|e| (e.source, e.target)).collect()
}

#[tokio::test]
async fn lineage_of_a_known_dag_is_exact_in_every_format() {
    let (_dir, lake) = lake().await;
    let config = PipelineConfig::parse(PIPELINE, Path::new("dag.toml")).unwrap();
    let pipeline =
        Pipeline::validate(config, &Operations::linked().unwrap(), lake.registry()).unwrap();
    let report = lake.run(pipeline, Operations::linked().unwrap()).execute().await.unwrap();
    assert!(report.steps.iter().all(|s| s.failed == 0), "{report:?}");

    let tables = ids(
        &lake,
        "SELECT artifact_id FROM data WHERE origin_step_number = 1 ORDER BY artifact_id",
    )
    .await;
    assert_eq!(tables.len(), 2);
    let stats = derivations(&lake, "compute_metrics").await; // table → its metric
    let twice: BTreeSet<_> = derivations(&lake, "command").await; // twice and pairs
    assert_eq!(stats.len(), 2);
    let a = tables[0];
    let metric_of_a = stats.iter().find(|(s, _)| *s == a).unwrap().1;

    // Down from a table: its metric, its doubled copy, and every pair it is in
    // (2 pairs with it as x); down from its metric: the 2 pairs with it as y.
    let down = lake.lineage(a).with_direction(Direction::Down).execute().await.unwrap();
    let expected_down: BTreeSet<(ArtifactId, ArtifactId)> = stats
        .iter()
        .chain(twice.iter())
        .filter(|(s, _)| *s == a || *s == metric_of_a)
        .copied()
        .collect();
    assert_eq!(edge_set(&down), expected_down);
    assert_eq!(
        down.nodes.len(),
        1 + expected_down.iter().map(|(_, t)| t).collect::<BTreeSet<_>>().len()
    );
    assert!(down.nodes.values().all(|n| n.depth >= 0));
    assert_eq!(down.nodes[&metric_of_a].depth, 1);
    let producer = down.nodes[&metric_of_a].produced_by.as_ref().unwrap();
    assert_eq!(producer.operation, "compute_metrics");
    assert_eq!(producer.step_name.as_deref(), Some("stats"));
    assert_eq!(producer.step_number, 2);

    // Up from a pair: its table and its metric, and that metric's table.
    let pair = twice.iter().find(|(s, _)| *s == metric_of_a).unwrap().1;
    let up = lake.lineage(pair).with_direction(Direction::Up).execute().await.unwrap();
    let up_edges = edge_set(&up);
    assert!(
        up_edges.contains(&(metric_of_a, pair)) && up_edges.contains(&(a, metric_of_a)),
        "{up_edges:?}"
    );
    assert!(up.nodes.values().all(|n| n.depth <= 0));
    assert_eq!(up.nodes[&a].depth, -2, "a → metric → pair: two levels up");

    // Depth limits, filters.
    let shallow =
        lake.lineage(a).with_direction(Direction::Down).with_depth(1).execute().await.unwrap();
    assert!(shallow.truncated && !shallow.nodes.contains_key(&pair));
    let metrics_only = lake.lineage(a).with_type(Some("metric".into())).execute().await.unwrap();
    assert!(metrics_only.nodes.values().all(|n| n.artifact_type == "metric" || n.id == a));

    // Every format shows every node and edge.
    let text = render::lineage(&down, Format::Text).unwrap();
    for id in down.nodes.keys() {
        assert!(text.contains(&id.to_hex()), "{text}");
    }
    assert!(
        text.contains("feeds:") && text.contains("compute_metrics in step 2 (stats)"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render::lineage(&down, Format::Json).unwrap()).unwrap();
    assert_eq!(json["edges"].as_array().unwrap().len(), expected_down.len());
    let dot = render::lineage(&down, Format::Dot).unwrap();
    let mermaid = render::lineage(&down, Format::Mermaid).unwrap();
    let html = render::lineage(&down, Format::Html).unwrap();
    for (s, t) in &expected_down {
        assert!(dot.contains(&format!("\"{s}\" -> \"{t}\"")), "{dot}");
        assert!(html.contains(&s.to_hex()) && html.contains(&t.to_hex()));
    }
    assert_eq!(mermaid.matches("-->").count(), expected_down.len());
    assert_eq!(html.matches("class=\"edge\"").count(), expected_down.len());

    // The run as a graph: six steps, streams with counts.
    let run = sluice::lineage::graph::run_graph(&lake, None).await.unwrap();
    assert_eq!(run.steps.len(), 6);
    let stream = |from: &str, to: &str| {
        run.streams.iter().find(|s| s.from == from && s.to == to).map(|s| s.artifacts)
    };
    assert_eq!(stream("gen", "stats"), Some(2));
    assert_eq!(stream("stats", "pairs"), Some(2));
    assert_eq!(stream("keep", "twice"), Some(2));
    assert_eq!(stream("twice", "all"), Some(2));
    let text = render::run(&run, Format::Text).unwrap();
    assert!(text.contains("gen.data ─2─▶ stats"), "{text}");
}

#[tokio::test]
async fn unknown_artifacts_are_a_clear_error() {
    let (_dir, lake) = lake().await;
    let err = lake.lineage("0".repeat(32).parse().unwrap()).execute().await.unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
}
