//! Reading one landed file into rows of its table: CSV, Parquet or JSON
//! lines, streamed batch by batch and cast to the declared schema.
//!
//! Every value is read as text (CSV, JSON) or in the file's own type
//! (Parquet), then cast with arrow's *safe* cast, which yields null where a
//! value does not convert. A value that was present before the cast and is
//! null after it is a violation, as is a null in a non-null column, a
//! string over its `max_length`, a decimal with more places than its scale,
//! and a Parquet value that changes when cast (a float into an integer).
//! Nothing is truncated or dropped silently: a violation fails the file, or
//! — with `on_row_error: reject` — sends the row to the rejects table with
//! its line and reason.

use std::fs::File;
use std::io::{BufReader, Seek};
use std::path::Path;
use std::sync::Arc;

use deltalake::arrow::array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, RecordBatch, StringArray,
};
use deltalake::arrow::compute::kernels::cast_utils::parse_decimal;
use deltalake::arrow::compute::kernels::cmp::neq;
use deltalake::arrow::compute::{CastOptions, cast, cast_with_options, filter_record_batch};
use deltalake::arrow::datatypes::{DataType, Decimal128Type, Field, Schema, SchemaRef};
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::schema::{ExtraColumns, OnRowError, TableSchema};

/// Rows read per batch.
const BATCH_ROWS: usize = 64 * 1024;
/// Reasons kept in a file's error message.
const REASONS_SHOWN: usize = 5;

/// A row that broke the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowViolation {
    /// 1-based line (CSV, JSON lines) or row (Parquet) number in the file.
    pub line: u64,
    /// What was wrong.
    pub reason: String,
}

/// Why a file cannot be ingested (it is retried, then dead-lettered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError(pub String);

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The formats a file can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma (or other) separated values.
    Csv,
    /// Parquet.
    Parquet,
    /// One JSON object per line.
    JsonLines,
}

impl Format {
    /// The format of a file name, by extension.
    pub fn of(name: &str) -> Option<Format> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".csv") || lower.ends_with(".tsv") {
            Some(Format::Csv)
        } else if lower.ends_with(".parquet") {
            Some(Format::Parquet)
        } else if lower.ends_with(".jsonl")
            || lower.ends_with(".ndjson")
            || lower.ends_with(".json")
        {
            Some(Format::JsonLines)
        } else {
            None
        }
    }
}

/// Stream a file's rows, cast to `schema`, into `sink` (batch by batch;
/// memory stays bounded whatever the file's size). Returns the rejected rows
/// (only with `on_row_error: reject`).
pub fn read_file(
    path: &Path,
    name: &str,
    schema: &TableSchema,
    sink: &mut dyn FnMut(RecordBatch) -> Result<(), FileError>,
) -> Result<Vec<RowViolation>, FileError> {
    let format = Format::of(name).ok_or_else(|| {
        FileError(format!("`{name}`: unknown file type (expected .csv, .parquet or .jsonl)"))
    })?;
    let accepted = match format {
        Format::Csv => schema.formats.csv.is_some(),
        Format::Parquet => schema.formats.parquet.is_some(),
        Format::JsonLines => schema.formats.jsonl.is_some(),
    };
    if !accepted {
        return Err(FileError(format!("table `{}` does not accept {format:?} files", schema.name)));
    }
    let file = File::open(path).map_err(|e| FileError(format!("cannot open: {e}")))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size == 0 {
        return Err(FileError("the file is empty".into()));
    }
    let mut caster = Caster::new(schema);
    match format {
        Format::Csv => read_csv(file, schema, &mut caster, sink)?,
        Format::Parquet => read_parquet(file, schema, &mut caster, sink)?,
        Format::JsonLines => read_jsonl(file, schema, &mut caster, sink)?,
    }
    caster.finish()
}

fn text_schema(names: &[String]) -> SchemaRef {
    Arc::new(Schema::new(
        names.iter().map(|n| Field::new(n, DataType::Utf8, true)).collect::<Vec<_>>(),
    ))
}

/// Compare a file's columns with the declared ones.
fn check_columns(schema: &TableSchema, present: &[String]) -> Result<(), FileError> {
    let mut seen = std::collections::BTreeSet::new();
    for name in present {
        if !seen.insert(name) {
            return Err(FileError(format!("column `{name}` appears twice in the file")));
        }
    }
    let declared: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
    let extra: Vec<&str> =
        present.iter().map(String::as_str).filter(|n| !declared.contains(n)).collect();
    let missing: Vec<&str> = schema
        .columns
        .iter()
        .filter(|c| !c.nullable && !present.contains(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!("the file lacks required columns: {}", missing.join(", ")));
    }
    if !extra.is_empty() && schema.extra_columns == ExtraColumns::Error {
        problems.push(format!(
            "columns not in the schema of `{}`: {} (set `extra_columns: ignore` to drop them)",
            schema.name,
            extra.join(", ")
        ));
    }
    if problems.is_empty() { Ok(()) } else { Err(FileError(problems.join("; "))) }
}

fn read_csv(
    mut file: File,
    schema: &TableSchema,
    caster: &mut Caster,
    sink: &mut dyn FnMut(RecordBatch) -> Result<(), FileError>,
) -> Result<(), FileError> {
    use deltalake::arrow::csv::ReaderBuilder;
    use deltalake::arrow::csv::reader::Format as CsvFormat;
    let options = schema.formats.csv.clone().unwrap_or_default();
    let delimiter = options.delimiter as u8;
    let names: Vec<String> = if options.header {
        let format = CsvFormat::default().with_header(true).with_delimiter(delimiter);
        let (found, _) = format
            .infer_schema(&mut file, Some(0))
            .map_err(|e| FileError(format!("unreadable CSV header: {e}")))?;
        file.rewind().map_err(|e| FileError(e.to_string()))?;
        found.fields().iter().map(|f| f.name().clone()).collect()
    } else {
        schema.columns.iter().map(|c| c.name.clone()).collect()
    };
    check_columns(schema, &names)?;
    caster.first_line = if options.header { 2 } else { 1 };
    let reader = ReaderBuilder::new(text_schema(&names))
        .with_header(options.header)
        .with_delimiter(delimiter)
        .with_batch_size(BATCH_ROWS)
        .build(BufReader::new(file))
        .map_err(|e| FileError(format!("unreadable CSV: {e}")))?;
    drain(reader, "CSV", caster, sink)
}

fn read_jsonl(
    file: File,
    schema: &TableSchema,
    caster: &mut Caster,
    sink: &mut dyn FnMut(RecordBatch) -> Result<(), FileError>,
) -> Result<(), FileError> {
    let names: Vec<String> = schema.columns.iter().map(|c| c.name.clone()).collect();
    caster.first_line = 1;
    let reader = deltalake::arrow::json::ReaderBuilder::new(text_schema(&names))
        .with_coerce_primitive(true)
        .with_strict_mode(schema.extra_columns == ExtraColumns::Error)
        .with_batch_size(BATCH_ROWS)
        .build(BufReader::new(file))
        .map_err(|e| FileError(format!("unreadable JSON lines: {e}")))?;
    drain(reader, "JSON lines", caster, sink)
}

fn read_parquet(
    file: File,
    schema: &TableSchema,
    caster: &mut Caster,
    sink: &mut dyn FnMut(RecordBatch) -> Result<(), FileError>,
) -> Result<(), FileError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| FileError(format!("unreadable Parquet: {e}")))?;
    let names: Vec<String> = builder.schema().fields().iter().map(|f| f.name().clone()).collect();
    check_columns(schema, &names)?;
    caster.first_line = 1;
    let reader = builder
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| FileError(format!("unreadable Parquet: {e}")))?;
    drain(reader, "Parquet", caster, sink)
}

/// Cast every batch a reader yields and hand it to `sink`.
fn drain(
    reader: impl Iterator<Item = Result<RecordBatch, deltalake::arrow::error::ArrowError>>,
    format: &str,
    caster: &mut Caster,
    sink: &mut dyn FnMut(RecordBatch) -> Result<(), FileError>,
) -> Result<(), FileError> {
    for batch in reader {
        let batch = batch.map_err(|e| FileError(format!("unreadable {format}: {e}")))?;
        sink(caster.cast(&batch)?)?;
    }
    Ok(())
}

/// Casts batches to the declared schema and collects violations.
struct Caster {
    schema: TableSchema,
    target: SchemaRef,
    /// Line number of the first row.
    first_line: u64,
    rows_seen: u64,
    violations: Vec<RowViolation>,
}

impl Caster {
    fn new(schema: &TableSchema) -> Caster {
        Caster {
            schema: schema.clone(),
            target: schema.declared_schema(),
            first_line: 1,
            rows_seen: 0,
            violations: Vec::new(),
        }
    }

    /// One input batch → the declared columns, violations noted; with
    /// `reject`, bad rows are filtered out.
    fn cast(&mut self, batch: &RecordBatch) -> Result<RecordBatch, FileError> {
        let rows = batch.num_rows();
        // Rows that break the schema, with the first reason found.
        let mut bad: std::collections::BTreeMap<usize, String> = Default::default();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.columns.len());
        let safe = CastOptions { safe: true, ..CastOptions::default() };
        for (decl, field) in self.schema.columns.iter().zip(self.target.fields()) {
            let target = field.data_type();
            let Some(input) = batch.column_by_name(&decl.name) else {
                columns.push(deltalake::arrow::array::new_null_array(target, rows));
                continue;
            };
            let cast_error = |e: deltalake::arrow::error::ArrowError| {
                FileError(format!(
                    "column `{}` ({}) cannot become {target}: {e}",
                    decl.name,
                    input.data_type()
                ))
            };
            let declared = decl.column_type.arrow();
            let text = input.as_any().downcast_ref::<StringArray>();
            let mut out = match (text, &declared) {
                (Some(t), DataType::Decimal128(p, s)) => text_to_decimal(t, *p, *s),
                _ => cast_with_options(input, &declared, &safe),
            }
            .map_err(cast_error)?;
            if &declared != target {
                out = cast_with_options(&out, target, &safe).map_err(cast_error)?;
            }
            let changed = if text.is_none() && input.data_type() != target {
                // A typed value must survive the cast unchanged.
                let back = cast(&out, input.data_type()).map_err(cast_error)?;
                Some(neq(&back, input).map_err(cast_error)?)
            } else {
                None
            };
            let column = Column {
                decl,
                declared: &declared,
                input: input.as_ref(),
                text,
                out: out.as_ref(),
                changed: changed.as_ref(),
            };
            for row in column.suspects() {
                if let std::collections::btree_map::Entry::Vacant(slot) = bad.entry(row)
                    && let Some(reason) = column.check(row)
                {
                    slot.insert(reason);
                }
            }
            columns.push(out);
        }
        let cast = RecordBatch::try_new(self.target.clone(), columns.clone()).or_else(|_| {
            // A non-null column holds nulls (noted as violations): build
            // with nullable fields, the bad rows are removed or fail below.
            let relaxed = Arc::new(Schema::new(
                self.target
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect::<Vec<_>>(),
            ));
            RecordBatch::try_new(relaxed, columns)
        });
        let cast = cast.map_err(|e| FileError(format!("building rows: {e}")))?;
        let base = self.first_line + self.rows_seen;
        self.rows_seen += rows as u64;
        if bad.is_empty() {
            return restore_nullability(cast, &self.target);
        }
        let mut keep = vec![true; rows];
        for (row, reason) in bad {
            keep[row] = false;
            self.violations.push(RowViolation { line: base + row as u64, reason });
            if self.schema.on_row_error == OnRowError::FailFile
                && self.violations.len() >= REASONS_SHOWN
            {
                return Err(self.failure());
            }
        }
        if self.schema.on_row_error == OnRowError::FailFile {
            return Err(self.failure());
        }
        let kept = filter_record_batch(&cast, &BooleanArray::from(keep))
            .map_err(|e| FileError(format!("filtering rejected rows: {e}")))?;
        restore_nullability(kept, &self.target)
    }

    fn failure(&self) -> FileError {
        let shown: Vec<String> = self
            .violations
            .iter()
            .take(REASONS_SHOWN)
            .map(|v| format!("line {}: {}", v.line, v.reason))
            .collect();
        FileError(format!(
            "rows break the schema of `{}` ({}{}); set `on_row_error: reject` to keep the good rows",
            self.schema.name,
            shown.join("; "),
            if self.violations.len() > REASONS_SHOWN { "; …" } else { "" }
        ))
    }

    fn finish(self) -> Result<Vec<RowViolation>, FileError> {
        if !self.violations.is_empty() && self.schema.on_row_error == OnRowError::FailFile {
            return Err(self.failure());
        }
        Ok(self.violations)
    }
}

/// One column of a batch, as read and as cast.
struct Column<'a> {
    decl: &'a super::schema::ColumnDecl,
    declared: &'a DataType,
    input: &'a dyn Array,
    /// The input, when read as text (CSV, JSON lines).
    text: Option<&'a StringArray>,
    out: &'a dyn Array,
    /// Typed input: rows whose value changed in the cast.
    changed: Option<&'a BooleanArray>,
}

impl Column<'_> {
    /// The rows that may break the schema, found with whole-column tests
    /// (null counts, offsets, one pass over the bytes) so that the common
    /// case — a clean batch — costs no per-row work beyond that; each
    /// suspect is then judged, with its reason, by [`Column::check`].
    fn suspects(&self) -> Vec<usize> {
        let (decl, out) = (self.decl, self.out);
        let mut rows = Vec::new();
        // A cast keeps every null, so equal counts mean no value was lost.
        let lost = out.null_count() > self.input.null_count();
        if lost || (!decl.nullable && out.null_count() > 0) {
            rows.extend((0..out.len()).filter(|&r| out.is_null(r)));
        }
        if let Some(changed) = self.changed.filter(|c| c.true_count() > 0) {
            rows.extend((0..changed.len()).filter(|&r| changed.is_valid(r) && changed.value(r)));
        }
        if let Some(t) = self.text {
            if let Some(max) = decl.max_length {
                // A string of at most `max` bytes has at most `max` characters.
                let offsets = t.value_offsets();
                rows.extend((0..t.len()).filter(|&r| (offsets[r + 1] - offsets[r]) as usize > max));
            }
            if let DataType::Decimal128(_, scale) = self.declared {
                let scale = (*scale).max(0) as usize;
                rows.extend(
                    (0..t.len()).filter(|&r| t.is_valid(r) && decimal_places(t.value(r)) > scale),
                );
            }
        }
        rows.sort_unstable();
        rows.dedup();
        rows
    }

    /// Why `row` breaks the schema, if it does.
    fn check(&self, row: usize) -> Option<String> {
        let name = &self.decl.name;
        if self.out.is_null(row) {
            if self.input.is_valid(row) {
                let shown = self.text.map_or_else(
                    || "the value".to_owned(),
                    |t| format!("`{}`", clip(t.value(row))),
                );
                let kind = &self.decl.column_type;
                return Some(format!("column `{name}`: {shown} is not a valid {kind}"));
            }
            if !self.decl.nullable {
                return Some(format!("column `{name}` is empty but declared not nullable"));
            }
            return None;
        }
        if self.changed.is_some_and(|c| c.is_valid(row) && c.value(row)) {
            return Some(format!(
                "column `{name}`: the value changes when cast to {}",
                self.decl.column_type
            ));
        }
        if let (Some(max), Some(t)) = (self.decl.max_length, self.text) {
            let n = t.value(row).chars().count();
            if n > max {
                return Some(format!(
                    "column `{name}`: {n} characters, more than max_length {max}"
                ));
            }
        }
        if let (DataType::Decimal128(_, scale), Some(t)) = (self.declared, self.text)
            && decimal_places(t.value(row)) > (*scale).max(0) as usize
        {
            return Some(format!(
                "column `{name}`: `{}` has more than {scale} decimal places",
                clip(t.value(row))
            ));
        }
        None
    }
}

/// Text to `Decimal128(p, s)`, null where a value is no such number (as
/// arrow's safe cast gives). The cast itself allocates several strings per
/// value; arrow's `parse_decimal`, made for the CSV reader, does not. Extra
/// places are not silently rounded away: `suspects` flags them.
fn text_to_decimal(
    text: &StringArray,
    precision: u8,
    scale: i8,
) -> Result<ArrayRef, deltalake::arrow::error::ArrowError> {
    let parsed: Decimal128Array = text
        .iter()
        .map(|v| v.and_then(|v| parse_decimal::<Decimal128Type>(v.trim(), precision, scale).ok()))
        .collect();
    Ok(Arc::new(parsed.with_precision_and_scale(precision, scale)?))
}

/// Digits after the decimal point of a number written as text (`12.50` →
/// 2, `3` → 0, `1.5e3` → 1).
fn decimal_places(text: &str) -> usize {
    let Some(dot) = text.bytes().position(|b| b == b'.') else { return 0 };
    text.as_bytes()[dot + 1..].iter().take_while(|b| b.is_ascii_digit()).count()
}

/// Give a batch whose bad rows are gone the declared (non-null) schema.
fn restore_nullability(batch: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, FileError> {
    RecordBatch::try_new(target.clone(), batch.columns().to_vec())
        .map_err(|e| FileError(format!("building rows: {e}")))
}

fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(extra: &str) -> TableSchema {
        let text = format!(
            "columns:\n  - {{ name: id, type: int64, nullable: false }}\n  - {{ name: zone, type: string, max_length: 5 }}\n  - {{ name: fare, type: \"decimal(6,2)\" }}\n  - {{ name: at, type: timestamp }}\n{extra}"
        );
        TableSchema::parse(&text, Path::new("/s/trips.yaml")).unwrap()
    }

    fn read(
        schema: &TableSchema,
        name: &str,
        content: &[u8],
    ) -> Result<(usize, Vec<RowViolation>), FileError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let mut rows = 0;
        let rejects = read_file(&path, name, schema, &mut |b| {
            rows += b.num_rows();
            Ok(())
        })?;
        Ok((rows, rejects))
    }

    #[test]
    fn good_csv_and_jsonl_cast_to_the_declared_types() {
        let s = schema("");
        let csv = b"id,zone,fare,at\n1,Mid,12.50,2024-01-07T08:00:00Z\n2,,3,2024-01-07 09:00:00\n";
        assert_eq!(read(&s, "a.csv", csv).unwrap(), (2, vec![]));
        let jsonl = b"{\"id\": 1, \"zone\": \"Mid\", \"fare\": 12.5, \"at\": \"2024-01-07T08:00:00Z\"}\n{\"id\": 2}\n";
        assert_eq!(read(&s, "a.jsonl", jsonl).unwrap(), (2, vec![]));
    }

    #[test]
    fn each_violation_fails_the_file_with_its_line_and_reason() {
        let s = schema("");
        for (content, why) in [
            (&b"id,zone,fare,at\n1,Mid,1.00,2024-01-07T08:00:00Z\nx,Mid,1,2024-01-07T08:00:00Z\n"[..], "line 3: column `id`: `x` is not a valid int64"),
            (b"id,zone,fare,at\n1,Midtown,1,2024-01-07T08:00:00Z\n", "7 characters, more than max_length 5"),
            (b"id,zone,fare,at\n,Mid,1,2024-01-07T08:00:00Z\n", "`id` is empty but declared not nullable"),
            (b"id,zone,fare,at\n1,Mid,1.234,2024-01-07T08:00:00Z\n", "more than 2 decimal places"),
            (b"id,zone\n1,a,b\n", "unreadable CSV"),
            (b"id,zone,fare,at,tip\n1,a,1,2024-01-07T08:00:00Z,3\n", "not in the schema"),
            (b"zone\nMid\n", "lacks required columns: id"),
            (b"", "empty"),
            (b"id,zone\n1,\xff\xfe\n", "unreadable CSV"),
        ] {
            let err = read(&s, "f.csv", content).unwrap_err().0;
            assert!(err.contains(why), "{:?}: {err}", String::from_utf8_lossy(content));
        }
        let err = read(&s, "f.xlsx", b"x").unwrap_err().0;
        assert!(err.contains("unknown file type"), "{err}");
    }

    #[test]
    fn decimals_parse_without_rounding_and_bad_text_becomes_null() {
        let text = StringArray::from(vec![
            Some("12.5"),
            Some(" -3.25 "),
            Some("1e2"),
            Some("7"),
            Some("abc"),
            Some("123456789012"),
            None,
        ]);
        let out = text_to_decimal(&text, 10, 2).unwrap();
        let out = out.as_any().downcast_ref::<Decimal128Array>().unwrap();
        let values: Vec<Option<i128>> = out.iter().collect();
        assert_eq!(values, vec![Some(1250), Some(-325), Some(10000), Some(700), None, None, None]);
        assert_eq!(out.data_type(), &DataType::Decimal128(10, 2));
        assert_eq!(decimal_places("1.234"), 3);
        assert_eq!(decimal_places("12"), 0);
        assert_eq!(decimal_places("-0.50"), 2);
    }

    #[test]
    fn max_length_counts_characters_not_bytes() {
        let s = schema("");
        // Five characters in ten bytes: within max_length 5.
        let ok = "id,zone,fare,at\n1,ééééé,1,2024-01-07T08:00:00Z\n";
        assert_eq!(read(&s, "a.csv", ok.as_bytes()).unwrap(), (1, vec![]));
        let long = "id,zone,fare,at\n1,éééééé,1,2024-01-07T08:00:00Z\n";
        let err = read(&s, "a.csv", long.as_bytes()).unwrap_err().0;
        assert!(err.contains("6 characters, more than max_length 5"), "{err}");
    }

    #[test]
    fn every_bad_row_of_a_batch_is_listed_once_with_its_first_reason() {
        let s = schema("on_row_error: reject\n");
        let csv = b"id,zone,fare,at\n,toolongzone,1.234,x\n2,Mid,1,2024-01-07T08:00:00Z\n3,Mid,x,2024-01-07T08:00:00Z\n";
        let (rows, rejects) = read(&s, "a.csv", csv).unwrap();
        assert_eq!(rows, 1);
        let lines: Vec<u64> = rejects.iter().map(|r| r.line).collect();
        assert_eq!(lines, vec![2, 4]);
        assert!(rejects[0].reason.contains("`id` is empty"), "{}", rejects[0].reason);
        assert!(
            rejects[1].reason.contains("`x` is not a valid decimal(6,2)"),
            "{}",
            rejects[1].reason
        );
    }

    #[test]
    fn with_reject_the_good_rows_stay_and_the_bad_are_listed() {
        let s = schema("on_row_error: reject\n");
        let csv = b"id,zone,fare,at\n1,Mid,1,2024-01-07T08:00:00Z\nx,Mid,1,2024-01-07T08:00:00Z\n3,Mid,1,2024-01-07T08:00:00Z\n";
        let (rows, rejects) = read(&s, "a.csv", csv).unwrap();
        assert_eq!(rows, 2);
        assert_eq!(rejects.len(), 1);
        assert_eq!(rejects[0].line, 3);
    }
}
