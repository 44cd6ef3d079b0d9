//! Batch staging: one sealed directory holding many executions of a step.
//! A batch commits exactly what its executions staged one by one would, is
//! quarantined whole when any of it is bad, commits only its new runs when
//! some are already in the lake, and recovers exactly once.

use std::collections::HashSet;

use crate::commit::{scalar, table_counts, writer};
use crate::common::{edit_unit, file_mut, lake, unit_files};
use sluice::Lake;
use sluice::commit::REASON_FILE;
use sluice::staging::synthetic::{self, SyntheticSpec};
use sluice::staging::{self, StagedExecution};

fn executions(
    lake: &Lake,
    spec: &SyntheticSpec,
    range: std::ops::Range<u64>,
) -> Vec<StagedExecution> {
    range.map(|i| synthetic::execution(spec, lake.registry(), i).unwrap().0).collect()
}

/// The sealed staging directories left in a lake's staging root.
fn sealed(lake: &Lake) -> Vec<staging::RunDir> {
    staging::scan(&staging::default_root(lake.root().local().unwrap()), None).unwrap().sealed
}

/// Every committed key of the tables a commit writes, for comparing lakes.
async fn keys(lake: &Lake) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        "SELECT artifact_id FROM metrics ORDER BY 1",
        "SELECT concat(artifact_id, artifact_type, CAST(origin_step_number AS VARCHAR)) FROM index ORDER BY 1",
        "SELECT concat(execution_run_id, CAST(success AS VARCHAR)) FROM executions ORDER BY 1",
        "SELECT concat(execution_run_id, direction, role, artifact_id) FROM execution_edges ORDER BY 1",
        "SELECT concat(execution_run_id, source_artifact_id, target_artifact_id) FROM artifact_edges ORDER BY 1",
    ] {
        let result = lake.sql(sql).execute().await.unwrap();
        let text = sluice::query::format::render(&result.batches, sluice::query::OutputFormat::Csv)
            .unwrap();
        out.push(text);
    }
    out
}

#[tokio::test]
async fn a_batch_commits_what_its_executions_staged_one_by_one_would() {
    let spec = SyntheticSpec {
        seed: 21,
        duplicate_fraction: 0.3,
        fail_fraction: 0.1,
        ..SyntheticSpec::default()
    };
    let (_a, single) = lake().await;
    synthetic::stage_range(&writer(&single), &spec, single.registry(), 0..40).unwrap();
    let one_by_one = single.commit().execute().await.unwrap();

    let (_b, batched) = lake().await;
    let staged = synthetic::stage_range(
        &writer(&batched),
        &SyntheticSpec { batch: 8, ..spec.clone() },
        batched.registry(),
        0..40,
    )
    .unwrap();
    assert_eq!(staged.succeeded + staged.failed, 40);
    let dirs = sealed(&batched);
    assert_eq!(dirs.len(), 5, "five directories of eight executions");
    assert!(dirs.iter().all(|d| d.is_batch() && d.staged_run_ids().unwrap().len() == 8));

    let report = batched.commit().with_chunk_size(2).execute().await.unwrap();
    assert_eq!(report.runs_committed, 40, "{report:?}");
    assert_eq!(report.sequences.len(), 3, "chunks count directories: {report:?}");
    assert!(report.quarantined.is_empty(), "{report:?}");
    assert_eq!(report.rows_added, one_by_one.rows_added);
    assert_eq!(keys(&batched).await, keys(&single).await);
    assert!(sealed(&batched).is_empty(), "staging removed");
    assert_eq!(
        scalar(&batched, "SELECT sum(run_count) FROM commits WHERE phase = 'completed'").await,
        "40",
        "the journal counts executions, not directories"
    );
}

#[tokio::test]
async fn a_batch_restaging_committed_runs_commits_only_the_new_ones() {
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec = SyntheticSpec { seed: 5, ..SyntheticSpec::default() };
    synthetic::stage_range(&w, &spec, lake.registry(), 0..10).unwrap();
    lake.commit().execute().await.unwrap();
    let before = table_counts(&lake).await;

    // Runs 0..20 again in one batch: the first ten are in the lake.
    w.write_batch(&executions(&lake, &spec, 0..20)).unwrap();
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.runs_committed, 20, "{report:?}");
    assert_eq!(report.rows_added["executions"], 10, "{report:?}");
    let counts = table_counts(&lake).await;
    for (table, (rows, distinct)) in &counts {
        assert_eq!(rows, distinct, "{table}: duplicate keys");
    }
    assert_eq!(counts["executions"].0, "20");
    assert_ne!(counts, before);

    // A late, different run of a spec that already succeeded, batched with
    // a new run: only the new run and its content are committed.
    let first = synthetic::execution(&spec, lake.registry(), 0).unwrap().0;
    let mut late =
        synthetic::execution(&SyntheticSpec { seed: 77, ..spec.clone() }, lake.registry(), 0)
            .unwrap()
            .0;
    late.execution.execution_spec_id = first.execution.execution_spec_id.clone();
    let fresh = synthetic::execution(&spec, lake.registry(), 20).unwrap().0;
    w.write_batch(&[late.clone(), fresh.clone()]).unwrap();
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.rows_added["executions"], 1, "{report:?}");
    assert_eq!(report.rows_added["metrics"], 3, "only the new run's content: {report:?}");
    let late_ids: Vec<String> =
        late.artifacts.iter().map(|a| format!("'{}'", a.id.to_hex())).collect();
    assert_eq!(
        scalar(
            &lake,
            &format!("SELECT count(*) FROM index WHERE artifact_id IN ({})", late_ids.join(","))
        )
        .await,
        "0",
        "no content without its execution"
    );
    assert_eq!(
        scalar(
            &lake,
            &format!(
                "SELECT count(*) FROM execution_edges WHERE execution_run_id = '{}'",
                late.execution.execution_run_id
            )
        )
        .await,
        "0"
    );
    assert!(sealed(&lake).is_empty(), "staging removed");
}

#[tokio::test]
async fn a_bad_batch_is_quarantined_whole_and_the_rest_commits() {
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec = SyntheticSpec { seed: 9, ..SyntheticSpec::default() };
    synthetic::stage_range(&w, &spec, lake.registry(), 0..4).unwrap();
    // A batch with a truncated content file.
    let truncated = w.write_batch(&executions(&lake, &spec, 4..9)).unwrap();
    edit_unit(&truncated, |files| {
        let metrics = file_mut(files, "metrics.arrow");
        metrics.truncate(metrics.len() / 2);
    });
    // A batch whose content is nobody's output.
    let mut orphaned = executions(&lake, &spec, 9..12);
    orphaned[1].execution_edges.clear();
    orphaned[1].artifact_edges.clear();
    let orphan_dir = w.write_batch(&orphaned).unwrap();
    // A sentinel listing a run of another step.
    let mut other = executions(&lake, &spec, 12..14);
    let moved = w.write_batch(&other).unwrap();
    other[1].execution.origin_step_number = 2;
    let forged = w.write_batch(&[other[1].clone()]);
    assert!(forged.is_ok(), "a batch of one execution of step 2 is fine on its own");
    let step2 = forged.unwrap();
    let sentinel = file_mut(&mut unit_files(&step2), "executions.arrow").clone();
    edit_unit(&moved, |files| *file_mut(files, "executions.arrow") = sentinel);
    std::fs::remove_file(&step2).unwrap();

    let report = lake.commit().execute().await.unwrap();
    let reasons: Vec<&str> = report.quarantined.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(report.quarantined.len(), 3, "{reasons:#?}");
    let has = |needle: &str| reasons.iter().any(|r| r.contains(needle));
    assert!(has("metrics.arrow: unreadable Arrow IPC"), "{reasons:#?}");
    assert!(has("is the output of no execution of the batch"), "{reasons:#?}");
    assert!(has("executions.arrow: run") && has("do not match the directory"), "{reasons:#?}");
    for (path, reason) in &report.quarantined {
        assert_eq!(std::fs::read_to_string(path.join(REASON_FILE)).unwrap().trim(), reason);
    }
    assert!(!truncated.exists() && !orphan_dir.exists() && !moved.exists());
    assert_eq!(report.runs_committed, 4);
    assert_eq!(scalar(&lake, "SELECT count(*) FROM executions").await, "4");
}

#[tokio::test]
async fn the_writer_refuses_batches_that_are_not_one_steps_distinct_runs() {
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec = SyntheticSpec { seed: 3, ..SyntheticSpec::default() };
    let mut runs = executions(&lake, &spec, 0..3);
    let err = w.write_batch(&[]).unwrap_err().to_string();
    assert!(err.contains("no execution"), "{err}");
    let twice = vec![runs[0].clone(), runs[0].clone()];
    let err = w.write_batch(&twice).unwrap_err().to_string();
    assert!(err.contains("staged twice"), "{err}");
    runs[2].execution.operation_name = "other".into();
    let err = w.write_batch(&runs).unwrap_err().to_string();
    assert!(err.contains("one step"), "{err}");
    runs[2].execution.execution_run_id = "abcdef.batch".into();
    let err = w.write_batch(&runs[2..]).unwrap_err().to_string();
    assert!(err.contains("batch directories"), "{err}");
    assert!(sealed(&lake).is_empty(), "staging removed");
}

#[tokio::test]
async fn an_unsealed_batch_is_left_and_a_sealed_one_is_found_by_its_runs() {
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec = SyntheticSpec { seed: 13, ..SyntheticSpec::default() };
    let unsealed = w.write_batch_unsealed(&executions(&lake, &spec, 0..5)).unwrap();
    let wanted = w.write_batch(&executions(&lake, &spec, 5..10)).unwrap();
    let other = w.write_batch(&executions(&lake, &spec, 10..15)).unwrap();

    // A step commits only the units it dispatched: a batch holding one of
    // them is taken whole, another batch is left.
    let runs: HashSet<String> = HashSet::from([synthetic::run_id(&spec, 7)]);
    let report = lake.commit().with_runs(Some(runs)).execute().await.unwrap();
    assert_eq!(report.runs_committed, 5, "{report:?}");
    assert_eq!(report.unsealed, vec![unsealed.clone()]);
    assert!(!wanted.exists() && other.exists() && unsealed.exists());

    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.runs_committed, 5);
    assert_eq!(scalar(&lake, "SELECT count(*) FROM executions").await, "10");
    assert!(unsealed.is_file(), "never committed nor removed");
    assert!(
        staging::scan(&staging::default_root(lake.root().local().unwrap()), None)
            .unwrap()
            .sealed
            .is_empty()
    );
}

#[tokio::test]
async fn a_batch_commit_interrupted_between_tables_recovers_exactly_once() {
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec =
        SyntheticSpec { seed: 17, duplicate_fraction: 0.3, batch: 6, ..SyntheticSpec::default() };
    synthetic::stage_range(&w, &spec, lake.registry(), 0..30).unwrap();
    // Beside the batches, three runs staged one directory each.
    synthetic::stage_range(
        &w,
        &SyntheticSpec { batch: 1, ..spec.clone() },
        lake.registry(),
        30..33,
    )
    .unwrap();
    for point in ["commit:index", "commit:execution_edges", "commit:executions"] {
        let err = lake.commit().with_failpoint(Some(point.into())).execute().await.unwrap_err();
        assert!(err.to_string().contains("committing table"), "{err}");
    }
    let report = lake.recover().execute().await.unwrap();
    assert!(report.quarantined.is_empty(), "{report:?}");
    let counts = table_counts(&lake).await;
    for (table, (rows, distinct)) in &counts {
        assert_eq!(rows, distinct, "{table}: duplicate keys");
    }
    assert_eq!(counts["executions"].0, "33");
    assert!(sealed(&lake).is_empty(), "staging removed");
    let again = lake.recover().execute().await.unwrap();
    assert!(again.rows_added.values().all(|n| *n == 0), "{again:?}");
    assert_eq!(table_counts(&lake).await, counts);
}

/// The tables commit in a fixed order even though the last three prepare
/// their commits beside the others: when one fails, every table before it
/// holds the sequence's commit and none after it does.
#[tokio::test]
async fn a_failed_table_commit_leaves_every_later_table_untouched() {
    let order = ["metrics", "index", "artifact_edges", "execution_edges", "executions"];
    for (failing, table) in order.iter().enumerate() {
        let (_dir, lake) = lake().await;
        let spec = SyntheticSpec { seed: 31, batch: 5, ..SyntheticSpec::default() };
        synthetic::stage_range(&writer(&lake), &spec, lake.registry(), 0..20).unwrap();
        let before =
            sluice::lake::journal::versions(lake.root(), &lake.table_specs()).await.unwrap();
        let err = lake
            .commit()
            .with_failpoint(Some(format!("commit:{table}")))
            .execute()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("committing table `{table}`")), "{table}: {err}");
        let after =
            sluice::lake::journal::versions(lake.root(), &lake.table_specs()).await.unwrap();
        for (i, other) in order.iter().enumerate() {
            let moved = after[*other] > before[*other];
            assert_eq!(moved, i < failing, "failing at `{table}`: `{other}` moved = {moved}");
        }
        let report = lake.recover().execute().await.unwrap();
        assert_eq!(report.recovered.len(), 1, "{report:?}");
        assert_eq!(scalar(&lake, "SELECT count(*) FROM executions").await, "20");
    }
}
