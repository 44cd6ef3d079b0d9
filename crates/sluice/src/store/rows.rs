//! Artifacts as rows of content and index tables.

use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;

use super::arrow_convert::{build_array, read_value};
use crate::artifact::value::FieldValue;
use crate::artifact::{Artifact, ArtifactId, Metadata};
use crate::error::{Error, Result};

fn metadata_text(metadata: &Metadata) -> Result<String> {
    crate::artifact::canonical_json::to_string(&serde_json::Value::Object(metadata.clone()))
}

/// The value of a content-table column for an artifact.
fn content_value(artifact: &Artifact, column: &str, metadata: &str) -> FieldValue {
    match column {
        "artifact_id" => FieldValue::String(artifact.id.to_hex()),
        "origin_step_number" => FieldValue::Int(i64::from(artifact.origin_step_number)),
        "metadata" => FieldValue::String(metadata.to_owned()),
        "external_path" => {
            artifact.external_path.clone().map_or(FieldValue::Null, FieldValue::String)
        }
        other => artifact.fields.get(other).cloned().unwrap_or(FieldValue::Null),
    }
}

/// Rows of a content table, in the table's schema.
pub fn content_batch(
    table: &str,
    schema: &SchemaRef,
    artifacts: &[&Artifact],
) -> Result<RecordBatch> {
    let metadata: Vec<String> =
        artifacts.iter().map(|a| metadata_text(&a.metadata)).collect::<Result<_>>()?;
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values: Vec<FieldValue> = artifacts
            .iter()
            .zip(&metadata)
            .map(|(a, m)| content_value(a, field.name(), m))
            .collect();
        columns.push(build_array(table, field, values.iter())?);
    }
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::arrow(format!("building `{table}` rows"), e))
}

/// Rows of the index, in the index's schema.
pub fn index_batch(schema: &SchemaRef, artifacts: &[&Artifact]) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values: Vec<FieldValue> = artifacts
            .iter()
            .map(|a| {
                Ok(match field.name().as_str() {
                    "artifact_id" => FieldValue::String(a.id.to_hex()),
                    "artifact_type" => FieldValue::String(a.type_key.clone()),
                    "origin_step_number" => FieldValue::Int(i64::from(a.origin_step_number)),
                    "metadata" => FieldValue::String(metadata_text(&a.metadata)?),
                    _ => FieldValue::Null,
                })
            })
            .collect::<Result<_>>()?;
        columns.push(build_array("index", field, values.iter())?);
    }
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::arrow("building index rows", e))
}

/// Decode content-table rows into artifacts of `type_key`. Columns the type
/// does not know are ignored; type columns the table lacks read as null.
pub fn artifacts_from_batch(
    table: &str,
    type_key: &str,
    type_columns: &[String],
    batch: &RecordBatch,
) -> Result<Vec<Artifact>> {
    let column = |name: &str| batch.column_by_name(name);
    let ids = column("artifact_id").ok_or_else(|| Error::SchemaConflict {
        table: table.into(),
        column: "artifact_id".into(),
        message: "the column is missing".into(),
    })?;
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let id_text = read_value(ids.as_ref(), row);
        let id: ArtifactId = id_text.as_str().unwrap_or_default().parse()?;
        let step = column("origin_step_number")
            .map(|a| read_value(a.as_ref(), row))
            .and_then(|v| v.as_int());
        let metadata = match column("metadata").map(|a| read_value(a.as_ref(), row)) {
            Some(FieldValue::String(text)) => match serde_json::from_str(&text) {
                Ok(serde_json::Value::Object(map)) => map,
                _ => Metadata::new(),
            },
            _ => Metadata::new(),
        };
        let external_path = column("external_path")
            .map(|a| read_value(a.as_ref(), row))
            .and_then(|v| v.as_str().map(str::to_owned));
        let fields = type_columns
            .iter()
            .map(|name| {
                let value = column(name).map_or(FieldValue::Null, |a| read_value(a.as_ref(), row));
                (name.clone(), value)
            })
            .collect();
        out.push(Artifact {
            id,
            type_key: type_key.to_owned(),
            origin_step_number: step.and_then(|s| i32::try_from(s).ok()).unwrap_or_default(),
            metadata,
            external_path,
            fields,
        });
    }
    Ok(out)
}
