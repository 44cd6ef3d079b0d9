//! The table tree, partitioning and compression, read from `_delta_log`.

use crate::common::{lake, log_actions, metrics};
use sluice::Lake;

const TREE: [(&str, bool); 11] = [
    ("artifacts/index", false),
    ("artifacts/metrics", true),
    ("artifacts/configs", true),
    ("artifacts/data", true),
    ("artifacts/file_refs", true),
    ("provenance/artifact_edges", false),
    ("provenance/execution_edges", false),
    ("orchestration/executions", true),
    ("orchestration/steps", false),
    ("orchestration/checks", false),
    ("orchestration/commits", false),
];

#[tokio::test]
async fn init_creates_every_table_with_its_partitioning() {
    let (dir, _lake) = lake().await;
    for (path, partitioned) in TREE {
        let actions = log_actions(&dir.path().join(path));
        let meta = actions
            .iter()
            .find_map(|a| a.get("metaData"))
            .unwrap_or_else(|| panic!("{path}: no metaData"));
        let partitions = meta["partitionColumns"].as_array().unwrap();
        if partitioned {
            assert_eq!(partitions, &[serde_json::json!("origin_step_number")], "{path}");
        } else {
            assert!(partitions.is_empty(), "{path}: {partitions:?}");
        }
        let schema: serde_json::Value =
            serde_json::from_str(meta["schemaString"].as_str().unwrap()).unwrap();
        let names: Vec<&str> = schema["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        if path.starts_with("artifacts/") && path != "artifacts/index" {
            assert_eq!(
                &names[..4],
                ["artifact_id", "origin_step_number", "metadata", "external_path"],
                "{path}"
            );
        }
    }
}

#[tokio::test]
async fn init_is_idempotent_and_leaves_existing_tables_alone() {
    let (dir, lake) = lake().await;
    lake.put(&metrics(&lake, 1, 3)).await.unwrap();
    let before = log_actions(&dir.path().join("artifacts/metrics")).len();
    let (_, report) = Lake::init(dir.path()).await.unwrap();
    assert!(report.created.is_empty(), "{report:?}");
    assert!(report.evolved.is_empty(), "{report:?}");
    // Every table, including types linked into this test binary.
    assert_eq!(report.unchanged.len(), lake.table_specs().len());
    assert_eq!(log_actions(&dir.path().join("artifacts/metrics")).len(), before);
    let rows = lake.sql("SELECT count(*) AS n FROM metrics").execute().await.unwrap();
    assert_eq!(
        sluice::query::format::render(&rows.batches, sluice::query::OutputFormat::Csv).unwrap(),
        "n\n3\n"
    );
}

#[tokio::test]
async fn writes_are_zstd_where_it_pays_and_partitioned_by_step() {
    let (dir, lake) = lake().await;
    let mut artifacts = metrics(&lake, 1, 4);
    artifacts.extend(metrics(&lake, 2, 2));
    // One metric whose content is large enough for zstd to pay.
    let big = serde_json::json!({"text": "abc".repeat(10_000)});
    artifacts
        .push(sluice::Draft::metric(big).unwrap().with_step(2).finalize(lake.registry()).unwrap());
    lake.put(&artifacts).await.unwrap();
    let adds: Vec<_> = log_actions(&dir.path().join("artifacts/metrics"))
        .into_iter()
        .filter_map(|a| a.get("add").cloned())
        .collect();
    assert_eq!(adds.len(), 2, "one file per step partition");
    for add in &adds {
        let path = add["path"].as_str().unwrap();
        assert!(path.starts_with("origin_step_number="), "{path}");
        let file = std::fs::File::open(dir.path().join("artifacts/metrics").join(path)).unwrap();
        let reader = deltalake::parquet::file::reader::SerializedFileReader::new(file).unwrap();
        use deltalake::parquet::file::reader::FileReader;
        let meta = reader.metadata();
        // zstd where the column's data is large, plain where zstd cannot
        // pay for its contexts (table::compress_where_it_pays). Sizes are
        // those of the whole write, which the step partitions split.
        for rg in meta.row_groups() {
            for col in rg.columns() {
                let name = col.column_path().string();
                let expected_zstd = name == "content";
                assert_eq!(
                    matches!(col.compression(), deltalake::parquet::basic::Compression::ZSTD(_)),
                    expected_zstd,
                    "{path} {name}: {:?}",
                    col.compression()
                );
                if !expected_zstd {
                    assert_eq!(
                        col.compression(),
                        deltalake::parquet::basic::Compression::UNCOMPRESSED,
                        "{path} {name}"
                    );
                }
            }
        }
        // Statistics are kept on the key columns only (not on content).
        let stats: serde_json::Value =
            serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
        assert!(stats["minValues"].get("artifact_id").is_some(), "{stats}");
        assert!(stats["minValues"].get("content").is_none(), "{stats}");
    }
}
