//! Rendering query results as a table, CSV or JSON.

use std::str::FromStr;

use deltalake::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, LargeBinaryArray, StringArray,
};
use deltalake::arrow::datatypes::{DataType, Field, Schema};
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::arrow::util::pretty::pretty_format_batches;
use std::sync::Arc;

use crate::error::{Error, Result};

/// How `sluice sql` prints results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// An aligned text table.
    #[default]
    Table,
    /// CSV with a header row.
    Csv,
    /// Newline-delimited JSON objects.
    Json,
}

impl FromStr for OutputFormat {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "table" => Ok(OutputFormat::Table),
            "csv" => Ok(OutputFormat::Csv),
            "json" => Ok(OutputFormat::Json),
            other => {
                Err(Error::InvalidInput(format!("unknown format `{other}` (table, csv or json)")))
            }
        }
    }
}

/// Binary columns are shown as lowercase hex in CSV and JSON, which have no
/// byte-string type.
fn hex_binary(batch: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let bytes_at = |i: usize| -> Option<Vec<u8>> {
            if column.is_null(i) {
                return None;
            }
            let any = column.as_any();
            any.downcast_ref::<BinaryArray>()
                .map(|a| a.value(i).to_vec())
                .or_else(|| any.downcast_ref::<LargeBinaryArray>().map(|a| a.value(i).to_vec()))
                .or_else(|| any.downcast_ref::<BinaryViewArray>().map(|a| a.value(i).to_vec()))
        };
        if matches!(
            field.data_type(),
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        ) {
            let hex: StringArray = (0..column.len())
                .map(|i| bytes_at(i).map(|b| crate::artifact::id::hex(&b)))
                .collect();
            fields.push(Field::new(field.name(), DataType::Utf8, true));
            columns.push(Arc::new(hex));
        } else {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::arrow("formatting", e))
}

/// Render batches in a format.
pub fn render(batches: &[RecordBatch], format: OutputFormat) -> Result<String> {
    match format {
        OutputFormat::Table => {
            let table = pretty_format_batches(batches)
                .map_err(|e| Error::arrow("formatting table", e))?
                .to_string();
            // A header alone would read as a formatting glitch.
            match batches.iter().map(RecordBatch::num_rows).sum::<usize>() {
                0 => Ok(format!("{table}\n(0 rows)")),
                _ => Ok(table),
            }
        }
        OutputFormat::Csv => {
            let mut out = Vec::new();
            {
                let mut writer =
                    deltalake::arrow::csv::WriterBuilder::new().with_header(true).build(&mut out);
                for batch in batches {
                    writer
                        .write(&hex_binary(batch)?)
                        .map_err(|e| Error::arrow("writing CSV", e))?;
                }
            }
            String::from_utf8(out)
                .map_err(|e| Error::Internal(format!("rendered output is not UTF-8: {e}")))
        }
        OutputFormat::Json => {
            let mut out = Vec::new();
            {
                // Explicit nulls: every object has every column, as in the table.
                let mut writer = deltalake::arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, deltalake::arrow::json::writer::LineDelimited>(&mut out);
                for batch in batches {
                    writer
                        .write(&hex_binary(batch)?)
                        .map_err(|e| Error::arrow("writing JSON", e))?;
                }
                writer.finish().map_err(|e| Error::arrow("writing JSON", e))?;
            }
            String::from_utf8(out)
                .map_err(|e| Error::Internal(format!("rendered output is not UTF-8: {e}")))
        }
    }
}
