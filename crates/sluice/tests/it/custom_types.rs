//! Custom artifact types, from Rust and from `sluice.toml`.

use serde_json::json;
use sluice::artifact::value::{ColumnSpec, ColumnType, FieldValue};
use sluice::artifact::{Artifact, Fields};
use sluice::registry::ArtifactType;
use sluice::store::ListFilter;
use sluice::{Draft, Lake};

/// A type defined in "another crate" (this test crate), registered by linking.
struct Spectrum;

impl ArtifactType for Spectrum {
    fn key(&self) -> &str {
        "spectrum"
    }
    fn table_path(&self) -> String {
        "artifacts/spectra".into()
    }
    fn columns(&self) -> Vec<ColumnSpec> {
        vec![
            ColumnSpec::required("instrument", ColumnType::String),
            ColumnSpec::required("peaks", ColumnType::Int32),
            ColumnSpec::required("intensities", ColumnType::Binary),
            ColumnSpec::optional("quality", ColumnType::Float64),
        ]
    }
    fn render(&self, a: &Artifact) -> sluice::Result<String> {
        Ok(format!(
            "{} peaks from {}",
            a.field("peaks").as_int().unwrap_or(0),
            a.field("instrument").as_str().unwrap_or("")
        ))
    }
}

sluice::register_artifact_type!(Spectrum);

fn spectrum(instrument: &str, peaks: i64, quality: Option<f64>) -> Draft {
    Draft::new(
        "spectrum",
        Fields::from([
            ("instrument".into(), FieldValue::String(instrument.into())),
            ("peaks".into(), FieldValue::Int(peaks)),
            ("intensities".into(), FieldValue::Binary(vec![1, 2, 3])),
            ("quality".into(), quality.map_or(FieldValue::Null, FieldValue::Float)),
        ]),
    )
}

#[tokio::test]
async fn rust_type_registers_itself_and_gets_a_partitioned_table() {
    let dir = tempfile::tempdir().unwrap();
    let (lake, report) = Lake::init(dir.path()).await.unwrap();
    assert!(report.created.contains(&"spectra".to_owned()), "{report:?}");
    assert!(sluice::lake::delta::table::is_table(&dir.path().join("artifacts/spectra")));
    let a = spectrum("orbitrap", 12, Some(0.9)).with_step(3).finalize(lake.registry()).unwrap();
    let b = spectrum("orbitrap", 12, Some(0.9)).with_step(4).finalize(lake.registry()).unwrap();
    assert_eq!(a.id, b.id, "steps are not part of identity");
    let c = spectrum("qtof", 7, None).with_step(3).finalize(lake.registry()).unwrap();
    let report = lake.put(&[a.clone(), b, c.clone()]).await.unwrap();
    assert_eq!(report.rows_added["spectra"], 2);
    assert_eq!(report.rows_added["index"], 2);
    assert_eq!(lake.get(c.id).await.unwrap(), c);
    let listed = lake.list("spectrum", &ListFilter { step: Some(3), limit: None }).await.unwrap();
    assert_eq!(listed.len(), 2);
    let sql = lake
        .sql(
            "SELECT artifact_type FROM index WHERE artifact_id = '".to_owned()
                + &a.id.to_hex()
                + "'",
        )
        .execute()
        .await
        .unwrap();
    assert_eq!(sql.num_rows(), 1);
}

#[tokio::test]
async fn declared_type_from_sluice_toml() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sluice.toml"),
        r#"
[[artifact_type]]
key = "embedding"
table = "artifacts/embeddings"
identity = ["model", "vector"]
columns = [
  { name = "model", type = "string" },
  { name = "dims", type = "int32" },
  { name = "vector", type = "json" },
  { name = "note", type = "string", nullable = true },
]
"#,
    )
    .unwrap();
    let (lake, report) = Lake::init(dir.path()).await.unwrap();
    assert!(report.created.contains(&"embeddings".to_owned()), "{report:?}");
    let d = lake.registry().descriptor("embedding").unwrap();
    let make = |note: Option<&str>| {
        let mut fields = Fields::new();
        for (name, value) in [
            ("model", json!("m1")),
            ("dims", json!(3)),
            ("vector", json!([0.5, 1, 2])),
            ("note", json!(note)),
        ] {
            let column = d.columns.iter().find(|c| c.name == name).unwrap();
            fields.insert(name.into(), FieldValue::from_json(&value, column).unwrap());
        }
        Draft::new("embedding", fields).with_step(2).finalize(lake.registry()).unwrap()
    };
    let a = make(None);
    let b = make(Some("a note is not part of the identity"));
    assert_eq!(a.id, b.id);
    lake.put(std::slice::from_ref(&a)).await.unwrap();
    let back = lake.get(a.id).await.unwrap();
    assert_eq!(back.field("vector").as_str(), Some("[0.5,1,2]"));
    let rows = lake
        .sql("SELECT model, dims FROM embeddings WHERE origin_step_number = 2")
        .execute()
        .await
        .unwrap();
    assert_eq!(rows.num_rows(), 1);
}

#[tokio::test]
async fn registry_errors_in_sluice_toml_name_the_type() {
    let cases = [
        (
            r#"key = "metric"
table = "artifacts/other_metrics""#,
            "different definition",
        ),
        (
            r#"key = "x"
table = "provenance/x""#,
            "outside `artifacts/`",
        ),
        (
            r#"key = "x"
table = "artifacts/x"
columns = [{ name = "metadata", type = "string" }]"#,
            "clashes with a common column",
        ),
        (
            r#"key = "x"
table = "artifacts/x"
columns = [{ name = "a", type = "uuid" }]"#,
            "unknown column type `uuid`",
        ),
    ];
    for (body, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sluice.toml"), format!("[[artifact_type]]\n{body}\n"))
            .unwrap();
        let err = Lake::init(dir.path()).await.unwrap_err().to_string();
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
        assert!(err.contains("cannot register artifact type"), "{err}");
    }
}
