//! `data`: a table's bytes, with its shape derived on draft.

use std::io::Cursor;

use deltalake::arrow::csv::ReaderBuilder;
use deltalake::arrow::csv::reader::Format;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::arrow::util::pretty::pretty_format_batches;

use crate::artifact::ArtifactType;
use crate::artifact::value::{ColumnSpec, ColumnType, FieldValue};
use crate::artifact::{Artifact, DataFormat, Fields};
use crate::error::{Error, Result};

/// Rows shown by `sluice show` for a data artifact.
const HEAD_ROWS: usize = 10;

/// The built-in `data` type.
#[derive(Debug, Clone, Copy)]
pub struct DataType;

impl ArtifactType for DataType {
    fn key(&self) -> &str {
        crate::artifact::DATA
    }

    fn table_path(&self) -> String {
        "artifacts/data".into()
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        vec![
            ColumnSpec::required("content", ColumnType::Binary),
            ColumnSpec::required("format", ColumnType::String),
            ColumnSpec::optional("original_name", ColumnType::String),
            ColumnSpec::optional("extension", ColumnType::String),
            ColumnSpec::required("size_bytes", ColumnType::Int64),
            ColumnSpec::required("columns", ColumnType::Json),
            ColumnSpec::required("row_count", ColumnType::Int64),
        ]
    }

    fn prepare(&self, fields: &mut Fields) -> Result<()> {
        let format = match fields.get("format") {
            Some(FieldValue::String(name)) => DataFormat::from_name(name)?,
            _ => {
                return Err(Error::invalid_artifact(crate::artifact::DATA, "`format` is required"));
            }
        };
        let Some(FieldValue::Binary(bytes)) = fields.get("content") else {
            return Err(Error::invalid_artifact(
                crate::artifact::DATA,
                "`content` must be the table's bytes",
            ));
        };
        let shape = format.shape(bytes)?;
        let size = bytes.len() as i64;
        let columns =
            serde_json::to_string(&shape.columns).map_err(|e| Error::json("data columns", e))?;
        fields.insert("size_bytes".into(), FieldValue::Int(size));
        fields.insert("columns".into(), FieldValue::String(columns));
        fields.insert("row_count".into(), FieldValue::Int(shape.row_count));
        Ok(())
    }

    fn identity_bytes(&self, fields: &Fields) -> Result<Vec<u8>> {
        match fields.get("content") {
            Some(FieldValue::Binary(bytes)) => Ok(bytes.clone()),
            _ => Err(Error::invalid_artifact(crate::artifact::DATA, "content is missing")),
        }
    }

    fn render(&self, artifact: &Artifact) -> Result<String> {
        let format = DataFormat::from_name(artifact.field("format").as_str().unwrap_or_default())?;
        let bytes = artifact.field("content").as_bytes().unwrap_or_default();
        let batch = head(format, bytes, HEAD_ROWS)?;
        let table =
            pretty_format_batches(&[batch]).map_err(|e| Error::arrow("rendering data", e))?;
        Ok(format!(
            "format: {}  rows: {}  bytes: {}\n{table}",
            format.name(),
            artifact.field("row_count").as_int().unwrap_or_default(),
            artifact.field("size_bytes").as_int().unwrap_or_default(),
        ))
    }

    /// The bytes as put (CSV, Parquet or Arrow IPC): the id's own bytes.
    fn export(&self, artifact: &Artifact, out: &mut dyn std::io::Write) -> Result<()> {
        let bytes = artifact.field("content").as_bytes().unwrap_or_default();
        out.write_all(bytes).map_err(|e| Error::io("<output>", e))
    }
}

/// The first `rows` rows of a data artifact's content.
pub fn head(format: DataFormat, bytes: &[u8], rows: usize) -> Result<RecordBatch> {
    let ctx = || format!("reading {} content", format.name());
    let batch = match format {
        DataFormat::Csv => {
            let (schema, _) = Format::default()
                .with_header(true)
                .infer_schema(Cursor::new(bytes), Some(1000))
                .map_err(|e| Error::arrow(ctx(), e))?;
            let mut reader = ReaderBuilder::new(std::sync::Arc::new(schema))
                .with_header(true)
                .with_batch_size(rows)
                .build(Cursor::new(bytes))
                .map_err(|e| Error::arrow(ctx(), e))?;
            reader.next().transpose().map_err(|e| Error::arrow(ctx(), e))?
        }
        DataFormat::Parquet => {
            let builder =
                deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                    bytes::Bytes::copy_from_slice(bytes),
                )
                .map_err(|e| Error::parquet(ctx(), e))?;
            let mut reader =
                builder.with_batch_size(rows).build().map_err(|e| Error::parquet(ctx(), e))?;
            reader.next().transpose().map_err(|e| Error::arrow(ctx(), e))?
        }
        DataFormat::Arrow => {
            match deltalake::arrow::ipc::reader::FileReader::try_new(Cursor::new(bytes), None) {
                Ok(mut reader) => reader.next().transpose().map_err(|e| Error::arrow(ctx(), e))?,
                Err(_) => {
                    deltalake::arrow::ipc::reader::StreamReader::try_new(Cursor::new(bytes), None)
                        .map_err(|e| Error::arrow(ctx(), e))?
                        .next()
                        .transpose()
                        .map_err(|e| Error::arrow(ctx(), e))?
                }
            }
        }
    };
    let batch = batch.unwrap_or_else(|| {
        RecordBatch::new_empty(std::sync::Arc::new(deltalake::arrow::datatypes::Schema::empty()))
    });
    Ok(batch.slice(0, rows.min(batch.num_rows())))
}
