//! Putting and getting artifacts of the built-in types.

use crate::common::{lake, metrics};
use serde_json::json;
use sluice::store::ListFilter;
use sluice::{ArtifactId, Draft};

#[tokio::test]
async fn put_is_idempotent_and_dedups_within_a_call() {
    let (_dir, lake) = lake().await;
    let batch = metrics(&lake, 1, 10);
    let mut doubled = batch.clone();
    doubled.extend(batch.iter().take(4).cloned());
    let first = lake.put(&doubled).await.unwrap();
    assert_eq!(first.rows_added["metrics"], 10);
    assert_eq!(first.rows_added["index"], 10);
    assert_eq!(first.duplicates_in_call, 4);
    let second = lake.put(&batch).await.unwrap();
    assert_eq!(second.rows_added["metrics"], 0);
    assert_eq!(second.already_present, 10);
    let n = lake
        .sql("SELECT count(DISTINCT artifact_id) AS d, count(*) AS n FROM metrics")
        .execute()
        .await
        .unwrap();
    let csv = sluice::query::format::render(&n.batches, sluice::query::OutputFormat::Csv).unwrap();
    assert_eq!(csv, "d,n\n10,10\n");
}

#[tokio::test]
async fn get_many_and_list_by_type_and_step() {
    let (dir, lake) = lake().await;
    let csv_path = dir.path().join("t.csv");
    std::fs::write(&csv_path, "x,y\n1,2\n3,4\n5,6\n").unwrap();
    let data =
        Draft::data_from_file(&csv_path).unwrap().with_step(2).finalize(lake.registry()).unwrap();
    let file_ref =
        Draft::file_ref(&csv_path).unwrap().with_step(2).finalize(lake.registry()).unwrap();
    let config = Draft::config(json!(["any", "document", 1]))
        .unwrap()
        .with_step(0)
        .finalize(lake.registry())
        .unwrap();
    let mut all = metrics(&lake, 1, 3);
    all.extend([data.clone(), file_ref.clone(), config.clone()]);
    lake.put(&all).await.unwrap();

    let missing: ArtifactId = "0".repeat(32).parse().unwrap();
    let got = lake.get_many(&[data.id, file_ref.id, config.id, missing]).await.unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[&data.id], data);
    assert_eq!(got[&file_ref.id], file_ref);
    assert_eq!(got[&config.id].json_content().unwrap(), json!(["any", "document", 1]));
    assert_eq!(got[&data.id].field("row_count").as_int(), Some(3));
    let err = lake.get(missing).await.unwrap_err().to_string();
    assert!(err.contains("not found"), "{err}");

    assert_eq!(lake.list("metric", &ListFilter::default()).await.unwrap().len(), 3);
    assert_eq!(
        lake.list("metric", &ListFilter { step: Some(2), limit: None }).await.unwrap().len(),
        0
    );
    assert_eq!(
        lake.list("data", &ListFilter { step: Some(2), limit: None }).await.unwrap(),
        vec![data]
    );

    let infos = lake.table_infos().await.unwrap();
    let index = infos.iter().find(|t| t.name == "index").unwrap();
    assert_eq!(index.rows, 6);
    assert!(index.bytes > 0 && index.files == 1 && index.version == 1, "{index:?}");
}

#[tokio::test]
async fn key_filters_speed_up_dedup_but_never_decide_it() {
    let (dir, lake) = lake().await;
    let a = metrics(&lake, 1, 10);
    let b = metrics(&lake, 2, 10);
    lake.put(&a).await.unwrap();
    lake.put(&b).await.unwrap();
    let keys = dir.path().join("artifacts/metrics").join(sluice::lake::key_filter::KEYS_DIR);
    let mut sidecars: Vec<_> =
        std::fs::read_dir(&keys).unwrap().map(|e| e.unwrap().path()).collect();
    sidecars.sort();
    assert_eq!(sidecars.len(), 2, "one key filter per write: {sidecars:?}");

    let mut both = a.clone();
    both.extend(b.iter().cloned());
    assert_eq!(lake.put(&both).await.unwrap().already_present, 20);
    // A lost sidecar and a corrupted one: slower lookups, same answer.
    std::fs::remove_file(&sidecars[0]).unwrap();
    std::fs::write(&sidecars[1], b"garbage").unwrap();
    let again = lake.put(&both).await.unwrap();
    assert_eq!(again.already_present, 20);
    assert_eq!(again.rows_added["metrics"], 0);
    let n = lake.sql("SELECT count(*) AS n FROM metrics").execute().await.unwrap();
    assert_eq!(
        sluice::query::format::render(&n.batches, sluice::query::OutputFormat::Csv).unwrap(),
        "n\n20\n"
    );
}
