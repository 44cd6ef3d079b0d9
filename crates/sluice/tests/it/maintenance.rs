//! Compaction, vacuum, checkpoints and history on real lakes.

use std::time::Duration;

use sluice::maintenance::{self, CompactOptions, VacuumOptions};
use sluice::query::AsOf;
use sluice::staging::synthetic::{self, SyntheticSpec};

use crate::commit::{scalar, writer};
use crate::common::{lake, metrics};

async fn digest(lake: &sluice::Lake, table: &str, key: &str) -> String {
    scalar(lake, &format!("SELECT count(*) || ':' || sum(length({key})) || ':' || min({key}) || ':' || max({key}) FROM {table}")).await
}

async fn many_small_commits(lake: &sluice::Lake) {
    for seed in 0..8 {
        let spec = SyntheticSpec {
            seed,
            duplicate_fraction: 0.2,
            step: 1 + (seed % 2) as i32,
            ..SyntheticSpec::default()
        };
        synthetic::stage_range(&writer(lake), &spec, lake.registry(), 0..15).unwrap();
        lake.commit().execute().await.unwrap();
    }
}

#[tokio::test]
async fn compaction_keeps_every_row_and_dedup_stays_exact() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let tables = [
        ("metrics", "artifact_id"),
        ("index", "artifact_id"),
        ("executions", "execution_run_id"),
        ("execution_edges", "artifact_id"),
    ];
    let mut before = Vec::new();
    for (t, k) in tables {
        before.push(digest(&lake, t, k).await);
    }
    let pruned = scalar(&lake, "SELECT count(*) FROM metrics WHERE origin_step_number = 2").await;
    let reports = maintenance::compact::compact(&lake, &CompactOptions::default()).await.unwrap();
    let metrics_report = reports.iter().find(|r| r.table == "metrics").unwrap();
    assert!(metrics_report.files_after < metrics_report.files_before, "{metrics_report:?}");
    assert_eq!(metrics_report.zorder, vec!["artifact_id".to_owned()]);
    for (i, (t, k)) in tables.iter().enumerate() {
        assert_eq!(digest(&lake, t, k).await, before[i], "{t} rows changed");
    }
    assert_eq!(
        scalar(&lake, "SELECT count(*) FROM metrics WHERE origin_step_number = 2").await,
        pruned
    );

    // The compacted files have key filters: committing the same content again
    // adds nothing, new content is added once.
    let again =
        SyntheticSpec { seed: 3, duplicate_fraction: 0.2, step: 2, ..SyntheticSpec::default() };
    synthetic::stage_range(&writer(&lake), &again, lake.registry(), 100..120).unwrap();
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.runs_committed, 20);
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
    let keys = lake.root().join("artifacts/metrics/_sluice_keys");
    let version = metrics_report.version.unwrap();
    assert!(
        keys.join(format!("{version:020}.keys")).exists(),
        "compaction wrote the key filter of its files"
    );
    // Lookups by id through the compacted files.
    let any = metrics(&lake, 1, 1);
    lake.put(&any).await.unwrap();
    assert_eq!(lake.get(any[0].id).await.unwrap().id, any[0].id);
}

#[tokio::test]
async fn vacuum_dry_run_lists_what_it_removes_and_keeps_time_travel_in_retention() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let v1 = maintenance::history::lake_history(&lake, None).await.unwrap();
    assert_eq!(v1.len(), 8);
    let first = v1.last().unwrap().version;
    let count_then = |lake: &sluice::Lake| {
        let lake = lake.clone();
        async move {
            let r = lake
                // count(DISTINCT ..) must read the files; count(*) is answered from statistics.
                .sql("SELECT count(DISTINCT artifact_id) AS n FROM metrics")
                .with_as_of(Some(AsOf::Lake(first)))
                .execute()
                .await;
            r.map(|r| r.num_rows())
        }
    };
    maintenance::compact::compact(
        &lake,
        &CompactOptions { table: Some("metrics".into()), ..CompactOptions::default() },
    )
    .await
    .unwrap();
    // Within the retention nothing goes and old versions still read.
    let kept = maintenance::vacuum::vacuum(&lake, &VacuumOptions::default()).await.unwrap();
    assert!(kept.files.iter().all(|(_, f)| f.is_empty()), "{kept:?}");
    assert!(count_then(&lake).await.is_ok());
    // A short retention needs --force, and says why.
    let short = VacuumOptions { retention: Duration::ZERO, ..VacuumOptions::default() };
    let err = maintenance::vacuum::vacuum(&lake, &short).await.unwrap_err().to_string();
    assert!(err.contains("--force") && err.contains("time travel"), "{err}");
    let forced = VacuumOptions { force: true, ..short };
    let dry =
        maintenance::vacuum::vacuum(&lake, &VacuumOptions { dry_run: true, ..forced.clone() })
            .await
            .unwrap();
    let real = maintenance::vacuum::vacuum(&lake, &forced).await.unwrap();
    assert_eq!(dry.files, real.files, "the dry run lists exactly what is removed");
    assert!(real.files.iter().any(|(t, f)| t == "metrics" && !f.is_empty()), "{real:?}");
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
    assert!(count_then(&lake).await.is_err(), "versions before the compaction lost their files");
}

#[tokio::test]
async fn checkpoints_and_table_history() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let reports = maintenance::checkpoint(&lake, Some("metrics")).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert!(lake.root().join("artifacts/metrics/_delta_log/_last_checkpoint").exists());
    let history = maintenance::history::table_history(&lake, "metrics", Some(3)).await.unwrap();
    assert_eq!(history.len(), 3);
    assert!(history[0].version > history[2].version);
    assert_eq!(
        history[0].sequence,
        Some(8),
        "the last write of metrics was sequence 8: {history:?}"
    );
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
}
