//! An older table gains columns; a conflicting one is a clear error.

use sluice::Lake;

fn declare(dir: &std::path::Path, columns: &str) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!("[[artifact_type]]\nkey = \"sample\"\ntable = \"artifacts/samples\"\ncolumns = [{columns}]\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn older_table_gains_new_columns_additively() {
    let dir = tempfile::tempdir().unwrap();
    declare(dir.path(), r#"{ name = "name", type = "string" }"#);
    let (lake, _) = Lake::init(dir.path()).await.unwrap();
    let old = sluice_put(&lake, r#"{"name": "old"}"#).await;

    // A newer definition of the type adds a column.
    declare(
        dir.path(),
        r#"{ name = "name", type = "string" }, { name = "weight", type = "float64", nullable = true }"#,
    );
    let lake = Lake::open(dir.path()).await.unwrap();
    sluice_put(&lake, r#"{"name": "new", "weight": 2.5}"#).await;
    let rows = lake.sql("SELECT name, weight FROM samples ORDER BY name").execute().await.unwrap();
    let csv =
        sluice::query::format::render(&rows.batches, sluice::query::OutputFormat::Csv).unwrap();
    assert_eq!(csv, "name,weight\nnew,2.5\nold,\n");
    // A look-up by id reads the old file, which predates the column: null.
    let got = lake.get(old).await.unwrap();
    assert_eq!(got.field("name").as_str(), Some("old"));
    assert!(got.field("weight").is_null(), "{got:?}");
    // Reopening again changes nothing.
    let (_, report) = Lake::init(dir.path()).await.unwrap();
    assert!(report.evolved.is_empty(), "{report:?}");
}

/// The columns of the samples table, as Delta has them.
async fn columns(dir: &std::path::Path) -> Vec<String> {
    let table = deltalake::open_table(
        url::Url::from_directory_path(dir.join("artifacts/samples")).unwrap(),
    )
    .await
    .unwrap();
    let schema = table.snapshot().unwrap().schema();
    schema.fields().map(|f| f.name().clone()).collect()
}

#[tokio::test]
async fn a_restore_to_before_a_column_was_added_is_followed_by_adding_it_again() {
    let dir = tempfile::tempdir().unwrap();
    declare(dir.path(), r#"{ name = "name", type = "string" }"#);
    let (lake, _) = Lake::init(dir.path()).await.unwrap();
    sluice_put(&lake, r#"{"name": "old"}"#).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let before = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    declare(
        dir.path(),
        r#"{ name = "name", type = "string" }, { name = "weight", type = "float64", nullable = true }"#,
    );
    let lake = Lake::open(dir.path()).await.unwrap();
    sluice_put(&lake, r#"{"name": "new", "weight": 2.5}"#).await;
    assert!(columns(dir.path()).await.contains(&"weight".to_owned()));

    let options = sluice::maintenance::RestoreOptions {
        to: sluice::lake::journal::snapshot::LakePoint::Time(before),
        ..Default::default()
    };
    sluice::maintenance::restore::restore(&lake, &options).await.unwrap();
    assert!(
        !columns(dir.path()).await.contains(&"weight".to_owned()),
        "a Delta restore takes the table's schema back"
    );
    // The next open checks the schemas again (the restore removed the
    // mark that vouched for them) and puts with the new column work.
    let lake = Lake::open(dir.path()).await.unwrap();
    assert!(columns(dir.path()).await.contains(&"weight".to_owned()));
    sluice_put(&lake, r#"{"name": "newer", "weight": 3.5}"#).await;
}

#[tokio::test]
async fn conflicting_column_type_names_table_and_column() {
    let dir = tempfile::tempdir().unwrap();
    declare(dir.path(), r#"{ name = "name", type = "string" }"#);
    Lake::init(dir.path()).await.unwrap();
    declare(dir.path(), r#"{ name = "name", type = "int64" }"#);
    let err = Lake::open(dir.path()).await.unwrap_err().to_string();
    assert!(err.contains("table `samples` column `name`"), "{err}");
}

async fn sluice_put(lake: &Lake, json: &str) -> sluice::ArtifactId {
    let d = lake.registry().descriptor("sample").unwrap().clone();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut fields = sluice::artifact::Fields::new();
    for (k, v) in value.as_object().unwrap() {
        let column = d.columns.iter().find(|c| &c.name == k).unwrap();
        fields.insert(k.clone(), sluice::artifact::FieldValue::from_json(v, column).unwrap());
    }
    let a = sluice::Draft::new("sample", fields).with_step(1).finalize(lake.registry()).unwrap();
    lake.put(std::slice::from_ref(&a)).await.unwrap();
    a.id
}
