//! Putting and getting artifacts of the built-in types.

use crate::common::{bundles, damage_part, distinct_and_rows, lake, metrics};
use serde_json::json;
use sluice::lake::keys::sidecar::Part;
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
    assert_eq!(distinct_and_rows(&lake).await, "d,n\n10,10\n");
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
    let sidecars: Vec<_> =
        bundles(&dir.path().join("artifacts/metrics")).into_iter().map(|(_, p)| p).collect();
    assert_eq!(sidecars.len(), 2, "one sidecar file per write: {sidecars:?}");

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

/// Sidecars are written after the commit and only speed look-ups up: when
/// they cannot be written at all, puts still succeed and report no error,
/// and both the writing handle and a fresh one find every present id (by
/// reading the files no sidecar covers).
#[tokio::test]
async fn sidecars_that_cannot_be_written_cost_speed_never_a_result() {
    let (dir, lake) = lake().await;
    let keys = dir.path().join("artifacts/metrics").join(sluice::lake::keys::key_filter::KEYS_DIR);
    let _ = std::fs::remove_dir_all(&keys);
    std::fs::write(&keys, b"a file where the sidecar folder goes").unwrap();
    let (a, b) = (metrics(&lake, 1, 10), metrics(&lake, 2, 10));
    assert_eq!(lake.put(&a).await.unwrap().rows_added["metrics"], 10);
    assert_eq!(lake.put(&b).await.unwrap().rows_added["metrics"], 10);
    assert!(keys.is_file(), "no sidecar could be written");

    let mut both = a.clone();
    both.extend(b.iter().cloned());
    assert_eq!(lake.put(&both).await.unwrap().already_present, 20, "the writer's handle");
    let fresh = sluice::Lake::open(dir.path()).await.unwrap();
    let again = fresh.put(&both).await.unwrap();
    assert_eq!((again.already_present, again.rows_added["metrics"]), (20, 0), "files read");
    assert_eq!(distinct_and_rows(&fresh).await, "d,n\n20,20\n");

    // Once the folder can be made again, the next commit's sidecars land.
    std::fs::remove_file(&keys).unwrap();
    fresh.put(&metrics(&lake, 3, 10)).await.unwrap();
    let written: Vec<_> = std::fs::read_dir(&keys).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(written.len(), 1, "the third put's sidecar: {written:?}");
    let version = bundles(&dir.path().join("artifacts/metrics"))[0].0;
    let metrics = dir.path().join("artifacts/metrics");
    for part in [Part::Filter(None), Part::KeySet] {
        assert!(sluice::lake::keys::sidecar::locate(&metrics, version, part).is_some(), "{part:?}");
    }
}

/// De-duplication of thousands of ids (more than one `IN` list of the old
/// scans) against several files, some no key filter covers: exactly the
/// present ones are skipped.
#[tokio::test]
async fn dedup_of_thousands_of_ids_across_files_skips_exactly_the_present_ones() {
    let (dir, lake) = lake().await;
    let batches: Vec<_> = (1..=3).map(|step| metrics(&lake, step, 3000)).collect();
    for batch in &batches {
        lake.put(batch).await.unwrap();
    }
    let mut mixed: Vec<_> = batches.iter().flat_map(|b| b[..2500].iter().cloned()).collect();
    mixed.extend(metrics(&lake, 4, 3000));
    let put = lake.put(&mixed).await.unwrap();
    assert_eq!((put.already_present, put.rows_added["metrics"]), (7500, 3000));

    // Without the first commit's key filter its file is read for every id.
    let keys = dir.path().join("artifacts/metrics").join(sluice::lake::keys::key_filter::KEYS_DIR);
    let mut sidecars: Vec<_> =
        std::fs::read_dir(&keys).unwrap().map(|e| e.unwrap().path()).collect();
    sidecars.sort();
    std::fs::remove_file(&sidecars[0]).unwrap();
    let mut again: Vec<_> = batches.iter().flat_map(|b| b[2000..].iter().cloned()).collect();
    again.extend(metrics(&lake, 5, 2100));
    let put = lake.put(&again).await.unwrap();
    assert_eq!((put.already_present, put.rows_added["metrics"]), (3000, 2100));
    assert_eq!(distinct_and_rows(&lake).await, "d,n\n14100,14100\n");
}

#[tokio::test]
async fn key_sets_confirm_present_ids_and_damaged_or_foreign_ones_are_read_around() {
    let (dir, lake) = lake().await;
    let batches: Vec<_> = (1..=4).map(|step| metrics(&lake, step, 3000)).collect();
    for batch in &batches {
        lake.put(batch).await.unwrap();
    }
    // Every version that added metrics left its key set beside its filter.
    let table_dir = dir.path().join("artifacts/metrics");
    let sets = bundles(&table_dir);
    assert_eq!(sets.len(), 4, "{sets:?}");
    for (version, _) in &sets {
        for part in [Part::Filter(None), Part::KeySet] {
            assert!(sluice::lake::keys::sidecar::locate(&table_dir, *version, part).is_some());
        }
    }

    // Re-run part of every step: confirmed from the sets alone, so even a
    // data file made unreadable is not opened for it.
    let step1 = dir.path().join("artifacts/metrics/origin_step_number=1");
    let file = std::fs::read_dir(&step1).unwrap().next().unwrap().unwrap().path();
    let original = std::fs::read(&file).unwrap();
    std::fs::write(&file, b"not parquet").unwrap();
    let mut mixed: Vec<_> = batches.iter().flat_map(|b| b[..1000].iter().cloned()).collect();
    mixed.extend(metrics(&lake, 5, 500));
    let put = lake.put(&mixed).await.unwrap();
    assert_eq!((put.already_present, put.rows_added["metrics"]), (4000, 500));
    std::fs::write(&file, original).unwrap();

    // Damage one set's keys (its filter intact), put another version's
    // sidecar in place of a third (its files differ), truncate the fourth:
    // each falls back to its files.
    damage_part(&table_dir, sets[0].0, Part::KeySet, Some(4000));
    std::fs::copy(&sets[2].1, &sets[1].1).unwrap();
    let torn = std::fs::read(&sets[3].1).unwrap();
    std::fs::write(&sets[3].1, &torn[..torn.len() / 2]).unwrap();
    let mut again: Vec<_> = batches.iter().flat_map(|b| b[500..2500].iter().cloned()).collect();
    again.extend(metrics(&lake, 6, 700));
    let put = lake.put(&again).await.unwrap();
    assert_eq!((put.already_present, put.rows_added["metrics"]), (8000, 700));
    assert_eq!(distinct_and_rows(&lake).await, "d,n\n13200,13200\n");
}

#[tokio::test]
async fn lookups_read_bloom_filtered_row_groups_and_fill_partition_values() {
    use deltalake::parquet::file::reader::{FileReader, SerializedFileReader};
    use sluice::lake::read::lookup::Lookup;
    use sluice::lake::{delta::table, layout};

    let (_dir, lake) = lake().await;
    let big = metrics(&lake, 3, 20_000);
    let small = metrics(&lake, 5, 10);
    lake.put(&big).await.unwrap();
    lake.put(&small).await.unwrap();
    let spec = layout::TableSpec::content(lake.registry().descriptor("metric").unwrap());
    let handle = table::open(lake.root(), &spec).await.unwrap();
    let files = table::active_files(&handle, &spec).unwrap();

    // The step-3 file: row groups of LOOKUP_ROW_GROUP_ROWS rows, each with a
    // bloom filter on artifact_id.
    let big_file = files.iter().find(|f| f.starts_with("origin_step_number=3")).unwrap();
    let path = table::table_dir(lake.root().local().unwrap(), &spec).join(big_file);
    let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let meta = reader.metadata();
    assert_eq!(meta.num_row_groups(), 20_000usize.div_ceil(table::LOOKUP_ROW_GROUP_ROWS));
    let id_leaf = (0..meta.file_metadata().schema_descr().num_columns())
        .find(|&i| meta.file_metadata().schema_descr().column(i).name() == "artifact_id")
        .unwrap();
    for rg in meta.row_groups() {
        assert!(rg.column(id_leaf).bloom_filter_offset().is_some(), "no bloom filter");
    }
    // All of them after the last row group's data: one contiguous read.
    let data_end = meta
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .map(|c| {
            let (start, length) = c.byte_range();
            start + length
        })
        .max()
        .unwrap();
    let first_bloom =
        meta.row_groups().iter().filter_map(|rg| rg.column(id_leaf).bloom_filter_offset()).min();
    assert!(first_bloom.unwrap() as u64 >= data_end, "bloom filters between row groups");

    // Ids from the first and last row group, the other partition, and one
    // that is nowhere: exactly the three rows, each with its step.
    let wanted = [big[0].id, big[19_999].id, small[4].id];
    let unknown = ArtifactId::compute("metric", b"not in the lake");
    let keys = wanted.iter().chain([&unknown]).map(ArtifactId::to_hex);
    let batches = Lookup::new("artifact_id", keys)
        .columns(&["origin_step_number", "artifact_id"])
        .read(&handle, &spec, &files)
        .await
        .unwrap();
    let mut rows = Vec::new();
    for batch in &batches {
        assert_eq!(batch.schema().field(0).name(), "origin_step_number");
        let steps = batch.column(0).as_any().downcast_ref::<arrow::array::Int32Array>().unwrap();
        let ids = sluice::lake::delta::scan::text_column(batch, 1, "metrics").unwrap();
        for i in 0..batch.num_rows() {
            rows.push((ids.value(i).to_owned(), steps.value(i)));
        }
    }
    rows.sort();
    let mut expected =
        vec![(big[0].id.to_hex(), 3), (big[19_999].id.to_hex(), 3), (small[4].id.to_hex(), 5)];
    expected.sort();
    assert_eq!(rows, expected);
    // Only the step-5 partition: the step-3 ids are not looked for there.
    let batches = Lookup::new("artifact_id", wanted.iter().map(ArtifactId::to_hex))
        .in_partitions("origin_step_number", [5])
        .read(&handle, &spec, &files)
        .await
        .unwrap();
    let found: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(found, 1, "only small[4] lives in step 5");
    // A column the table is not partitioned by prunes nothing.
    let batches = Lookup::new("artifact_id", wanted.iter().map(ArtifactId::to_hex))
        .in_partitions("value", [5])
        .read(&handle, &spec, &files)
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
    // Many keys at once (matched through a hash set, not one by one).
    let many: Vec<ArtifactId> = big.iter().step_by(500).map(|a| a.id).collect();
    assert!(many.len() > 16);
    let batches = Lookup::new("artifact_id", many.iter().map(ArtifactId::to_hex))
        .read(&handle, &spec, &files)
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), many.len());
    // A file the table does not list is refused, never skipped.
    let err = Lookup::new("artifact_id", [big[0].id.to_hex()])
        .read(&handle, &spec, &["origin_step_number=3/gone.parquet".to_owned()])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not active") && err.contains("gone.parquet"), "{err}");
    // And through the public API, the same artifacts come back whole.
    let got = lake.get_many(&wanted).await.unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[&big[19_999].id], big[19_999]);
}

#[tokio::test]
async fn a_run_of_puts_checkpoints_every_hundred_versions() {
    // Puts commit straight to the log from a kept tip; Delta's checkpoint
    // every 100 versions is written in the background, and `settle` waits
    // for it.
    let (_dir, lake) = lake().await;
    let index = lake.root().local().unwrap().join("artifacts/index/_delta_log");
    let before = std::fs::read_dir(&index).unwrap().count();
    for (i, a) in metrics(&lake, 1, 120).into_iter().enumerate() {
        let report = lake.put(&[a]).await.unwrap();
        assert_eq!(report.rows_added.get("index"), Some(&1), "put {i}");
    }
    lake.settle().await;
    let hint = std::fs::read_to_string(index.join("_last_checkpoint")).unwrap();
    let hint: serde_json::Value = serde_json::from_str(&hint).unwrap();
    assert_eq!(hint["version"].as_u64().map(|v| (v + 1) % 100), Some(0), "{hint}");
    assert!(std::fs::read_dir(&index).unwrap().count() > before + 120);
    // The table reads whole through the checkpoint.
    let fresh = sluice::Lake::open(lake.root()).await.unwrap();
    assert_eq!(crate::commit::scalar(&fresh, "SELECT count(*) FROM index").await, "120");
}
