//! Artifacts as rows of content and index tables.

use deltalake::arrow::array::Array;
use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;

use crate::artifact::arrow_convert::{build_array, read_value};
use crate::artifact::value::FieldValue;
use crate::artifact::{Artifact, ArtifactId, Metadata};
use crate::error::{Error, Result};
use crate::lake::layout::STEP_COLUMN;

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
    // Columns are found once per batch, not once per row and column.
    let column = |name: &str| batch.column_by_name(name).map(|a| a.as_ref());
    let ids = column("artifact_id").ok_or_else(|| Error::SchemaConflict {
        table: table.into(),
        column: "artifact_id".into(),
        message: "the column is missing".into(),
    })?;
    let (steps, metadata, paths) =
        (column(STEP_COLUMN), column("metadata"), column("external_path"));
    let typed: Vec<(&String, Option<&dyn Array>)> =
        type_columns.iter().map(|name| (name, column(name))).collect();
    let value = |array: Option<&dyn Array>, row: usize| -> Result<FieldValue> {
        array.map_or(Ok(FieldValue::Null), |a| read_value(table, a, row))
    };
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let id_text = read_value(table, ids, row)?;
        let id: ArtifactId = id_text.as_str().unwrap_or_default().parse()?;
        let at = |column: &str| format!("artifact {id}, column `{column}`");
        let step = value(steps, row)?
            .as_int()
            .and_then(|s| i32::try_from(s).ok())
            .ok_or_else(|| Error::corrupt(table, at(STEP_COLUMN), "not a step number"))?;
        let metadata = match value(metadata, row)? {
            FieldValue::Null => Metadata::new(),
            // What nearly every artifact holds: no need to parse it.
            FieldValue::String(text) if text == "{}" => Metadata::new(),
            FieldValue::String(text) => match serde_json::from_str(&text) {
                Ok(serde_json::Value::Object(map)) => map,
                _ => return Err(Error::corrupt(table, at("metadata"), "not a JSON object")),
            },
            _ => return Err(Error::corrupt(table, at("metadata"), "not text")),
        };
        let external_path = match value(paths, row)? {
            FieldValue::String(path) => Some(path),
            _ => None,
        };
        let fields = typed
            .iter()
            .map(|(name, array)| Ok(((*name).clone(), value(*array, row)?)))
            .collect::<Result<_>>()?;
        out.push(Artifact {
            id,
            type_key: type_key.to_owned(),
            origin_step_number: step,
            metadata,
            external_path,
            fields,
        });
    }
    Ok(out)
}
