//! Property tests of the committer against a simple model: whatever mix of
//! sealed and unsealed runs, duplicated content and commit batches, the lake
//! holds each sealed run once, each distinct content once, nothing unsealed,
//! and committing again adds nothing — with runs staged one directory each
//! or in batches, and batches that re-stage runs already committed.

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::json;
use sluice::Draft;
use sluice::records::{Direction, ExecutionEdge, ExecutionRecord};
use sluice::staging::StagedExecution;

use crate::commit::{scalar, table_counts, writer};

#[derive(Debug, Clone)]
struct Run {
    pool_values: Vec<u8>,
    sealed: bool,
    batch: usize,
}

fn run_strategy() -> impl Strategy<Value = Run> {
    (prop::collection::vec(0u8..6, 0..4), prop::bool::weighted(0.8), 0usize..3)
        .prop_map(|(pool_values, sealed, batch)| Run { pool_values, sealed, batch })
}

fn staged(lake: &sluice::Lake, index: usize, run: &Run) -> StagedExecution {
    let run_id = format!("{index:08x}{:024x}", index * 7919);
    let artifacts: Vec<_> = run
        .pool_values
        .iter()
        .map(|v| {
            Draft::metric(json!({"pool": v}))
                .unwrap()
                .with_step(1)
                .finalize(lake.registry())
                .unwrap()
        })
        .collect();
    StagedExecution {
        execution: ExecutionRecord {
            execution_run_id: run_id.clone(),
            execution_spec_id: format!("spec-{index}"),
            step_run_id: "s".into(),
            origin_step_number: 1,
            operation_name: "prop".into(),
            params: "{}".into(),
            timestamp_start: 0,
            timestamp_end: None,
            worker_id: None,
            compute_backend: None,
            success: true,
            error: None,
            tool_output: None,
            metadata: "{}".into(),
        },
        execution_edges: artifacts
            .iter()
            .map(|a| ExecutionEdge {
                execution_run_id: run_id.clone(),
                direction: Direction::Output,
                role: "out".into(),
                artifact_id: a.id.to_hex(),
            })
            .collect(),
        artifact_edges: vec![],
        artifacts,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn lake_matches_the_model(
        runs in prop::collection::vec(run_strategy(), 1..10),
        batched in prop::collection::vec(prop::bool::ANY, 3),
        restage in prop::bool::ANY,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (_dir, lake) = crate::common::lake().await;
            let w = writer(&lake);
            for (round, &batched) in batched.iter().enumerate() {
                let mut batch = Vec::new();
                for (i, run) in runs.iter().enumerate() {
                    let s = staged(&lake, i, run);
                    if run.batch == round && !run.sealed {
                        w.write_unsealed(&s).unwrap();
                    } else if run.batch == round && !batched {
                        w.write(&s).unwrap();
                    } else if run.sealed && (run.batch == round || (restage && run.batch < round)) {
                        // A batch: this round's runs, and maybe again the
                        // runs earlier rounds committed.
                        batch.push(s);
                    }
                }
                if batched && !batch.is_empty() {
                    w.write_batch(&batch).unwrap();
                }
                lake.commit().with_chunk_size(3).execute().await.unwrap();
            }
            let sealed: Vec<&Run> = runs.iter().filter(|r| r.sealed).collect();
            let contents: BTreeSet<u8> = sealed.iter().flat_map(|r| r.pool_values.iter().copied()).collect();
            let edges: usize = sealed.iter().map(|r| r.pool_values.iter().collect::<BTreeSet<_>>().len()).sum();
            let counts = table_counts(&lake).await;
            for (table, (rows, distinct)) in &counts {
                assert_eq!(rows, distinct, "{table}: duplicate keys");
            }
            assert_eq!(counts["executions"].0, sealed.len().to_string());
            assert_eq!(counts["metrics"].0, contents.len().to_string());
            assert_eq!(counts["index"].0, contents.len().to_string());
            assert_eq!(counts["execution_edges"].0, edges.to_string());
            let unsealed_ids: Vec<String> = runs
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.sealed)
                .map(|(i, _)| format!("'{i:08x}{:024x}'", i * 7919))
                .collect();
            if !unsealed_ids.is_empty() {
                let n = scalar(&lake, &format!(
                    "SELECT count(*) FROM executions WHERE execution_run_id IN ({})", unsealed_ids.join(","))).await;
                assert_eq!(n, "0", "an unsealed run was committed");
            }
            // Idempotence: again, nothing is added.
            let again = lake.commit().execute().await.unwrap();
            assert!(again.rows_added.values().all(|n| *n == 0), "{again:?}");
            assert_eq!(table_counts(&lake).await, counts);
        });
    }
}
