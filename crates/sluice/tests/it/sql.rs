//! SQL over the lake: table names, partition pruning, time travel.

use crate::common::{lake, metrics};
use sluice::query::format::render;
use sluice::query::{AsOf, OutputFormat};

async fn csv(lake: &sluice::Lake, sql: &str, as_of: Option<AsOf>) -> String {
    let result =
        lake.sql(sql).with_as_of(as_of).execute().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    render(&result.batches, OutputFormat::Csv).unwrap()
}

#[tokio::test]
async fn every_table_is_queryable_by_its_short_name() {
    let (_dir, lake) = lake().await;
    for name in [
        "index",
        "metrics",
        "configs",
        "data",
        "file_refs",
        "artifact_edges",
        "execution_edges",
        "executions",
        "steps",
        "checks",
    ] {
        assert_eq!(
            csv(&lake, &format!("SELECT count(*) AS n FROM {name}"), None).await,
            "n\n0\n",
            "{name}"
        );
    }
}

#[tokio::test]
async fn step_filter_prunes_partitions() {
    let (_dir, lake) = lake().await;
    let mut artifacts = metrics(&lake, 1, 5);
    artifacts.extend(metrics(&lake, 2, 5));
    artifacts.extend(metrics(&lake, 3, 5));
    lake.put(&artifacts).await.unwrap();

    let plan =
        csv(&lake, "EXPLAIN SELECT artifact_id FROM metrics WHERE origin_step_number = 2", None)
            .await;
    let physical = plan.split("physical_plan").nth(1).expect("a physical plan");
    assert!(physical.contains("origin_step_number=2/"), "the step-2 file is scanned:\n{plan}");
    assert!(!physical.contains("origin_step_number=1/"), "step 1 is pruned:\n{plan}");
    assert!(!physical.contains("origin_step_number=3/"), "step 3 is pruned:\n{plan}");

    let all = csv(&lake, "EXPLAIN SELECT artifact_id FROM metrics", None).await;
    assert!(
        all.contains("origin_step_number=1/") && all.contains("origin_step_number=3/"),
        "{all}"
    );
    assert_eq!(
        csv(&lake, "SELECT count(*) AS n FROM metrics WHERE origin_step_number = 2", None).await,
        "n\n5\n"
    );
}

#[tokio::test]
async fn as_of_version_and_time() {
    let (_dir, lake) = lake().await;
    lake.put(&metrics(&lake, 1, 2)).await.unwrap(); // metrics v1
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let between = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    lake.put(&metrics(&lake, 2, 3)).await.unwrap(); // metrics v2

    let count = "SELECT count(*) AS n FROM metrics";
    assert_eq!(csv(&lake, count, None).await, "n\n5\n");
    assert_eq!(csv(&lake, count, Some(AsOf::table("metrics", 0))).await, "n\n0\n");
    assert_eq!(csv(&lake, count, Some(AsOf::table("metrics", 1))).await, "n\n2\n");
    assert_eq!(csv(&lake, count, Some(AsOf::Time(between))).await, "n\n2\n");

    let err = lake
        .sql(count)
        .with_as_of(Some(AsOf::table("metrics", 9)))
        .execute()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("table `metrics`") && err.contains("version 9"), "{err}");
    let long_ago = "2001-01-01T00:00:00Z".parse().unwrap();
    let err = lake.sql(count).with_as_of(Some(long_ago)).execute().await.unwrap_err().to_string();
    assert!(err.contains("table `metrics`"), "{err}");
}

#[tokio::test]
async fn bad_sql_is_an_error_not_a_panic() {
    let (_dir, lake) = lake().await;
    let err = lake.sql("SELEC 1").execute().await.unwrap_err().to_string();
    assert_eq!(err, "SQL syntax: Expected: an SQL statement, found: SELEC at Line: 1, Column: 1");
    let err = lake.sql("SELECT * FROM nope").execute().await.unwrap_err().to_string();
    assert_eq!(err, "no table named `nope`. Help: `sluice tables` lists them");
    let err = lake.sql("SELECT * FROM metric").execute().await.unwrap_err().to_string();
    assert!(err.contains("(did you mean `metrics`?)"), "{err}");
}

/// The sum of every `spill_count` an `EXPLAIN ANALYZE` reports.
fn spills(analyzed: &str) -> u64 {
    analyzed
        .split("spill_count=")
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_memory_limit_spills_joins_instead_of_growing() {
    let (_dir, lake) = lake().await;
    let mut artifacts = metrics(&lake, 1, 20_000);
    artifacts.extend(metrics(&lake, 2, 5_000));
    lake.put(&artifacts).await.unwrap();
    let anti = "SELECT count(*) AS n FROM \"index\" i WHERE NOT EXISTS \
                (SELECT 1 FROM metrics m WHERE m.artifact_id = i.artifact_id \
                AND m.origin_step_number = 1)";
    let unbounded = csv(&lake, anti, None).await;
    assert_eq!(unbounded, "n\n5000\n");

    let limit = 16 << 20;
    let bounded = lake.sql(anti).with_memory_limit(Some(limit)).execute().await.unwrap();
    assert_eq!(render(&bounded.batches, OutputFormat::Csv).unwrap(), unbounded);

    let analyzed =
        lake.sql(format!("EXPLAIN ANALYZE {anti}")).with_memory_limit(Some(limit)).execute().await;
    let text = render(&analyzed.unwrap().batches, OutputFormat::Csv).unwrap();
    assert!(text.contains("SortMergeJoin"), "a bounded join is a sort-merge join:\n{text}");
    assert!(!text.contains("HashJoinExec"), "no hash join holds a whole side:\n{text}");
    assert!(spills(&text) > 0, "25k ids do not fit in {limit} bytes, so they spill:\n{text}");

    let free = csv(&lake, &format!("EXPLAIN ANALYZE {anti}"), None).await;
    assert_eq!(spills(&free), 0, "without a limit nothing spills:\n{free}");
}

/// `--as-of TIME` goes by the commit times the log records, not by the log
/// files' modification times: a lake copied (`cp -r`, a sync) keeps its
/// history, instead of every table falling back to one version.
#[tokio::test]
async fn as_of_a_time_survives_a_copy_that_resets_file_times() {
    let (dir, lake) = lake().await;
    lake.put(&metrics(&lake, 1, 2)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let between = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    lake.put(&metrics(&lake, 2, 3)).await.unwrap();
    // What a copy does: every file is as new as the copy.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(later)
                    .unwrap();
            }
        }
    }
    let copied = sluice::Lake::open(lake.root()).await.unwrap();
    let count = "SELECT count(*) AS n FROM metrics";
    assert_eq!(csv(&copied, count, Some(AsOf::Time(between))).await, "n\n2\n");
    assert_eq!(csv(&copied, count, None).await, "n\n5\n");
}
