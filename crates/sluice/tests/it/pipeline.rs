//! Pipelines through the library, in process: a linked Rust operation, file
//! ingestion, and what the cache does when inputs change.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use sluice::Draft;
use sluice::pipeline::StepError;
use sluice::pipeline::operation::{Operation, Output, Signature, UnitContext};
use sluice::pipeline::{Operations, Pipeline, PipelineConfig, StepStatus};

use crate::common;

/// A user's operation: every number of a metric, doubled.
#[derive(Default)]
struct DoubleMetrics;

fn double(v: &Value) -> Value {
    match v {
        Value::Number(n) => n.as_f64().map_or(Value::Null, |x| json!(2.0 * x)),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), double(v))).collect()),
        other => other.clone(),
    }
}

impl Operation for DoubleMetrics {
    fn name(&self) -> &str {
        "double_metrics"
    }

    fn outputs(&self, s: &Signature<'_>) -> Result<BTreeMap<String, String>, StepError> {
        if s.input_types.values().any(|t| t != "metric") {
            return Err("takes metrics".into());
        }
        Ok(BTreeMap::from([("doubled".into(), "metric".into())]))
    }

    fn run(&self, ctx: &UnitContext) -> sluice::Result<Vec<Output>> {
        ctx.all_inputs()
            .map(|m| {
                Ok(Output::New {
                    role: "doubled".into(),
                    draft: Draft::metric(double(&m.json_content()?))?,
                    derived_from: Some(vec![m.id]),
                })
            })
            .collect()
    }
}

sluice::register_operation!(DoubleMetrics);

fn pipeline(text: &str, lake: &sluice::Lake) -> Pipeline {
    let config = PipelineConfig::parse(text, Path::new("test.toml")).unwrap();
    Pipeline::validate(config, &Operations::linked().unwrap(), lake.registry()).unwrap()
}

#[tokio::test]
async fn a_linked_rust_operation_runs_in_a_pipeline() {
    let (_dir, lake) = common::lake().await;
    let text = r#"
name = "rust-op"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 4, rows = 10 }
[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "gen.data" }
[[step]]
name = "double"
operation = "double_metrics"
inputs = { m = "stats.metrics" }
"#;
    let ops = Operations::linked().unwrap();
    assert!(ops.names().contains(&"double_metrics".to_owned()));
    let report =
        lake.run(pipeline(text, &lake), ops.clone()).with_workers(2).execute().await.unwrap();
    assert_eq!(report.failed_units(), 0);
    assert_eq!(report.steps[2].outputs["doubled"], 4);
    // Each doubled metric derives from its metric, and has twice its rows.
    let rows = lake
        .sql(
            "SELECT s.content AS a, d.content AS b FROM artifact_edges e \
             JOIN metrics s ON s.artifact_id = e.source_artifact_id \
             JOIN metrics d ON d.artifact_id = e.target_artifact_id WHERE e.target_role = 'doubled'",
        )
        .execute()
        .await
        .unwrap();
    assert_eq!(rows.num_rows(), 4);
    let json_rows =
        sluice::query::format::render(&rows.batches, sluice::query::OutputFormat::Json).unwrap();
    for line in json_rows.lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let a: Value = serde_json::from_str(row["a"].as_str().unwrap()).unwrap();
        let b: Value = serde_json::from_str(row["b"].as_str().unwrap()).unwrap();
        assert_eq!(b["rows"].as_f64().unwrap(), 2.0 * a["rows"].as_f64().unwrap());
    }
    // The same steps in another pipeline file are the same work: all skipped.
    let again = lake
        .run(pipeline(&text.replace("rust-op", "renamed"), &lake), ops)
        .execute()
        .await
        .unwrap();
    assert!(again.steps.iter().all(|s| s.status == StepStatus::Skipped), "{again:?}");
}

#[tokio::test]
async fn ingest_files_reruns_only_changed_files() {
    let (_dir, lake) = common::lake().await;
    let files = tempfile::tempdir().unwrap();
    for i in 0..5 {
        std::fs::write(files.path().join(format!("f{i}.txt")), format!("content {i}")).unwrap();
    }
    std::fs::write(files.path().join("skip.bin"), "not matched").unwrap();
    let text = format!(
        "name = \"ingest\"\n[[step]]\nname = \"in\"\noperation = \"ingest_files\"\nparams = {{ paths = \"{}/*.txt\" }}\n",
        files.path().display()
    );
    let ops = Operations::linked().unwrap();
    let first = lake.run(pipeline(&text, &lake), ops.clone()).execute().await.unwrap();
    assert_eq!(first.steps[0].dispatched, 5);
    assert_eq!(first.steps[0].outputs["files"], 5);
    let refs = lake.list("file_ref", &sluice::store::ListFilter::default()).await.unwrap();
    assert_eq!(refs.len(), 5);
    assert!(refs.iter().all(|r| r.field("path").as_str().unwrap().ends_with(".txt")));

    let same = lake.run(pipeline(&text, &lake), ops.clone()).execute().await.unwrap();
    assert_eq!(same.steps[0].status, StepStatus::Skipped);

    // One file changes: only its unit runs; the others come from the cache.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(files.path().join("f2.txt"), "changed content").unwrap();
    let changed = lake.run(pipeline(&text, &lake), ops).execute().await.unwrap();
    let step = &changed.steps[0];
    assert_eq!((step.dispatched, step.cached), (1, 4), "{step:?}");
    assert_eq!(step.outputs["files"], 5);
    let hashes = lake.sql("SELECT DISTINCT content_hash FROM file_refs").execute().await.unwrap();
    let n: usize = hashes.batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n, 6, "the old and the new content of f2 are both recorded");
}

#[tokio::test]
async fn snapshot_reads_keep_the_snapshot_a_worker_started_with() {
    let (_dir, lake) = common::lake().await;
    let before = common::metrics(&lake, 1, 3);
    lake.put(&before).await.unwrap();
    let worker = lake.clone().with_snapshot_reads();
    let ids: Vec<_> = before.iter().map(|a| a.id).collect();
    assert_eq!(worker.get_many(&ids).await.unwrap().len(), 3);
    let after = common::metrics(&lake, 2, 2);
    lake.put(&after).await.unwrap();
    assert!(lake.get(after[0].id).await.is_ok(), "a plain handle reads the latest version");
    assert!(worker.get(after[0].id).await.is_err(), "the worker keeps its snapshot");
    assert_eq!(worker.get(before[1].id).await.unwrap(), before[1]);
}

/// Active data files of `data` in step 1's partition.
async fn step_one_data_files(lake: &sluice::Lake) -> usize {
    let spec = lake.table_spec("data").await.unwrap();
    let handle = sluice::lake::delta::table::open(lake.root(), &spec).await.unwrap();
    sluice::lake::delta::table::active_files(&handle, &spec)
        .unwrap()
        .iter()
        .filter(|f| f.starts_with("origin_step_number=1/"))
        .count()
}

#[tokio::test]
async fn a_step_partition_with_many_small_files_is_compacted_after_the_step() {
    for auto in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("sluice.toml"),
            format!("[maintenance]\nauto = {auto}\nsmall_files = 2\n"),
        )
        .unwrap();
        let (lake, _) = sluice::Lake::init(dir.path()).await.unwrap();
        let ops = Operations::linked().unwrap();
        for seed in 0..3 {
            let text = format!(
                "name = \"g\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\nparams = {{ tables = 2, rows = 3, seed = {seed} }}\n"
            );
            lake.run(pipeline(&text, &lake), ops.clone()).with_workers(1).execute().await.unwrap();
        }
        let files = step_one_data_files(&lake).await;
        if auto {
            assert_eq!(files, 1, "the third run left 3 files; the step compacted them");
        } else {
            assert_eq!(files, 3, "switched off: nothing compacted");
        }
        let n = lake.list("data", &sluice::store::ListFilter::default()).await.unwrap().len();
        assert_eq!(n, 6, "every artifact kept");
    }
}

/// Where a step's time went is reported: its own phases in wall seconds,
/// and its workers' (reading inputs, computing, staging) summed over them,
/// in the run report and in the step's row.
#[tokio::test]
async fn a_steps_phases_and_its_workers_time_are_reported() {
    let (_dir, lake) = common::lake().await;
    let text = r#"
name = "phases"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 6, rows = 10 }
[[step]]
name = "stats"
operation = "compute_metrics"
inputs = { t = "gen.data" }
"#;
    let report = lake
        .run(pipeline(text, &lake), Operations::linked().unwrap())
        .with_workers(2)
        .execute()
        .await
        .unwrap();
    for step in &report.steps {
        for phase in ["plan", "cache_lookup", "execute", "commit", "collect", "bookkeeping"] {
            assert!(step.timings.contains_key(phase), "{phase} missing: {:?}", step.timings);
        }
        let workers = step.worker_seconds;
        assert!(workers.compute > 0.0 && workers.staging > 0.0, "{}: {workers:?}", step.name);
    }
    assert!(report.steps[1].worker_seconds.input_read > 0.0, "{:?}", report.steps[1]);
    let row = lake
        .sql("SELECT metadata FROM steps WHERE step_name = 'stats' AND status = 'completed'")
        .execute()
        .await
        .unwrap();
    let text =
        sluice::query::format::render(&row.batches, sluice::query::OutputFormat::Json).unwrap();
    let row: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let metadata: Value = serde_json::from_str(row["metadata"].as_str().unwrap()).unwrap();
    assert!(metadata["worker_seconds"]["compute"].as_f64().unwrap() > 0.0, "{metadata:#}");
}
