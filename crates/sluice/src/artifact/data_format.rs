//! Formats of tabular `data` artifacts, and reading their shape.
//!
//! A data artifact's content is the table's bytes exactly as given (CSV text,
//! a Parquet file, an Arrow IPC file); its identity is the hash of those
//! bytes. Columns and row count are derived once, when the draft is finalized,
//! so queries over the `data` table can select by shape without decoding.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use deltalake::arrow::csv::reader::Format;
use deltalake::arrow::ipc::reader::{FileReader, StreamReader};
use deltalake::parquet::file::reader::{FileReader as _, SerializedFileReader};

use crate::error::{Error, Result};

/// The encoding of a data artifact's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFormat {
    /// Comma-separated text with a header row.
    Csv,
    /// An Apache Parquet file.
    Parquet,
    /// An Arrow IPC file (or stream).
    Arrow,
}

/// The shape of a table: column names and number of rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableShape {
    /// Column names in order.
    pub columns: Vec<String>,
    /// Number of data rows.
    pub row_count: i64,
}

impl DataFormat {
    /// The error for content that is not a valid table of this format.
    fn invalid(self, e: &dyn std::fmt::Display) -> Error {
        Error::invalid_artifact(
            crate::artifact::DATA,
            format!("content is not a valid {} table: {e}", self.name()),
        )
    }

    /// The name stored in the `format` column.
    pub fn name(self) -> &'static str {
        match self {
            DataFormat::Csv => "csv",
            DataFormat::Parquet => "parquet",
            DataFormat::Arrow => "arrow",
        }
    }

    /// Parse a stored format name.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "csv" => Ok(DataFormat::Csv),
            "parquet" => Ok(DataFormat::Parquet),
            "arrow" => Ok(DataFormat::Arrow),
            other => Err(Error::invalid_artifact(
                crate::artifact::DATA,
                format!("unknown data format `{other}` (expected csv, parquet or arrow)"),
            )),
        }
    }

    /// The format implied by a file's extension.
    pub fn from_path(path: &Path) -> Result<Self> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv") => Ok(DataFormat::Csv),
            Some("parquet" | "pq") => Ok(DataFormat::Parquet),
            Some("arrow" | "ipc" | "feather") => Ok(DataFormat::Arrow),
            _ => Err(Error::InvalidInput(format!(
                "{}: cannot tell the data format from the extension (use .csv, .parquet or .arrow)",
                path.display()
            ))),
        }
    }

    /// Read the columns and row count of content in this format.
    pub fn shape(self, bytes: &[u8]) -> Result<TableShape> {
        let bad = |e: &dyn std::fmt::Display| self.invalid(e);
        match self {
            DataFormat::Csv => {
                let (schema, rows) = Format::default()
                    .with_header(true)
                    .infer_schema(Cursor::new(bytes), None)
                    .map_err(|e| bad(&e))?;
                if schema.fields().is_empty() {
                    return Err(bad(&"no header row"));
                }
                Ok(TableShape {
                    columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
                    row_count: rows as i64,
                })
            }
            DataFormat::Parquet => {
                let reader = SerializedFileReader::new(bytes::Bytes::copy_from_slice(bytes))
                    .map_err(|e| bad(&e))?;
                let meta = reader.metadata().file_metadata();
                let schema = meta.schema_descr();
                Ok(TableShape {
                    columns: schema
                        .root_schema()
                        .get_fields()
                        .iter()
                        .map(|f| f.name().to_owned())
                        .collect(),
                    row_count: meta.num_rows(),
                })
            }
            DataFormat::Arrow => {
                if let Ok(reader) = FileReader::try_new(Cursor::new(bytes), None) {
                    let columns =
                        reader.schema().fields().iter().map(|f| f.name().clone()).collect();
                    let mut rows = 0i64;
                    for batch in reader {
                        rows += batch.map_err(|e| bad(&e))?.num_rows() as i64;
                    }
                    return Ok(TableShape { columns, row_count: rows });
                }
                let reader =
                    StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| bad(&e))?;
                let columns = reader.schema().fields().iter().map(|f| f.name().clone()).collect();
                let mut rows = 0i64;
                for batch in reader {
                    rows += batch.map_err(|e| bad(&e))?.num_rows() as i64;
                }
                Ok(TableShape { columns, row_count: rows })
            }
        }
    }
}

impl DataFormat {
    /// Decode content in this format into record batches.
    pub fn read_batches(self, bytes: &[u8]) -> Result<Vec<RecordBatch>> {
        let bad = |e: &dyn std::fmt::Display| self.invalid(e);
        match self {
            DataFormat::Csv => {
                let (schema, _) = Format::default()
                    .with_header(true)
                    .infer_schema(Cursor::new(bytes), None)
                    .map_err(|e| bad(&e))?;
                let reader = deltalake::arrow::csv::ReaderBuilder::new(Arc::new(schema))
                    .with_header(true)
                    .build(Cursor::new(bytes))
                    .map_err(|e| bad(&e))?;
                reader.map(|b| b.map_err(|e| bad(&e))).collect()
            }
            DataFormat::Parquet => {
                let reader =
                    ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(bytes))
                        .and_then(|b| b.build())
                        .map_err(|e| bad(&e))?;
                reader.map(|b| b.map_err(|e| bad(&e))).collect()
            }
            DataFormat::Arrow => {
                if let Ok(reader) = FileReader::try_new(Cursor::new(bytes), None) {
                    return reader.map(|b| b.map_err(|e| bad(&e))).collect();
                }
                let reader =
                    StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| bad(&e))?;
                reader.map(|b| b.map_err(|e| bad(&e))).collect()
            }
        }
    }
}

/// `batches` (all of `schema`) as the bytes of one Arrow IPC stream: what a
/// staged table of a few rows is written as, and how a data input crosses
/// to a Python step; [`DataFormat::Arrow`] reads it back.
pub(crate) fn ipc_stream_bytes(
    schema: &deltalake::arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> std::result::Result<Vec<u8>, deltalake::arrow::error::ArrowError> {
    let mut writer = deltalake::arrow::ipc::writer::StreamWriter::try_new(Vec::new(), schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_shape() {
        let shape = DataFormat::Csv.shape(b"a,b\n1,2\n3,4\n5,6\n").unwrap();
        assert_eq!(shape, TableShape { columns: vec!["a".into(), "b".into()], row_count: 3 });
    }

    #[test]
    fn csv_decodes_with_inferred_types() {
        let batches = DataFormat::Csv.read_batches(b"a,b\n1,x\n2,y\n").unwrap();
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 2);
        assert_eq!(
            batches[0].schema().field(0).data_type(),
            &deltalake::arrow::datatypes::DataType::Int64
        );
    }

    #[test]
    fn garbage_parquet_is_rejected() {
        let err = DataFormat::Parquet.shape(b"not parquet").unwrap_err().to_string();
        assert!(err.contains("not a valid parquet table"), "{err}");
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(DataFormat::from_path(Path::new("x/t.CSV")).unwrap(), DataFormat::Csv);
        assert!(DataFormat::from_path(Path::new("x/t.txt")).is_err());
    }
}
