//! Declared table schemas: one YAML file per ingestion table, no code.
//!
//! ```yaml
//! columns:
//!   - { name: trip_id, type: int64, nullable: false }
//!   - { name: pickup_at, type: "timestamp(us, UTC)" }
//!   - { name: zone, type: string, max_length: 32 }
//!   - { name: fare, type: "decimal(10,2)" }
//! primary_key: [trip_id]
//! write_mode: append          # append | merge (upsert by primary_key)
//! sequence_by: updated_at     # merge only: a row replaces a stored one only if not older
//! partition_by: []
//! formats:                    # accepted file formats (default: all three)
//!   csv: { header: true, delimiter: "," }
//!   parquet: {}
//!   jsonl: {}
//! on_row_error: fail_file     # fail_file | reject (rows go to <table>_rejects)
//! extra_columns: error        # error | ignore
//! ```
//!
//! The table's name is the file's stem (`schemas/trips.yaml` → `trips`).
//! Every error names the file, and the line where the YAML says it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use deltalake::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::registry::is_plain_name;

/// Columns sluice adds to every raw row: the file it came from and when it
/// was committed.
pub const SOURCE_FILE_COLUMN: &str = "_source_file";
/// See [`SOURCE_FILE_COLUMN`].
pub const INGESTED_AT_COLUMN: &str = "_ingested_at";

/// A declared column type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredType {
    /// UTF-8 text.
    String,
    /// 32-bit integer.
    Int32,
    /// 64-bit integer.
    Int64,
    /// 32-bit float.
    Float32,
    /// 64-bit float.
    Float64,
    /// Boolean.
    Bool,
    /// Calendar date.
    Date,
    /// Timestamp with a unit and an optional time zone.
    Timestamp(TimeUnit, Option<String>),
    /// Decimal with precision and scale.
    Decimal(u8, i8),
}

impl DeclaredType {
    /// The Arrow type rows are cast to.
    pub fn arrow(&self) -> DataType {
        match self {
            DeclaredType::String => DataType::Utf8,
            DeclaredType::Int32 => DataType::Int32,
            DeclaredType::Int64 => DataType::Int64,
            DeclaredType::Float32 => DataType::Float32,
            DeclaredType::Float64 => DataType::Float64,
            DeclaredType::Bool => DataType::Boolean,
            DeclaredType::Date => DataType::Date32,
            DeclaredType::Timestamp(unit, tz) => {
                DataType::Timestamp(*unit, tz.as_deref().map(Arc::from))
            }
            DeclaredType::Decimal(p, s) => DataType::Decimal128(*p, *s),
        }
    }

    /// The Arrow type stored in the Delta table. Delta keeps timestamps in
    /// microseconds, either as instants (UTC) or without a zone: a declared
    /// zone says how to read a time written without an offset, and the
    /// instant is stored in UTC.
    pub fn storage(&self) -> DataType {
        match self {
            DeclaredType::Timestamp(_, Some(_)) => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            DeclaredType::Timestamp(_, None) => DataType::Timestamp(TimeUnit::Microsecond, None),
            other => other.arrow(),
        }
    }
}

impl FromStr for DeclaredType {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        let simple = match t.as_str() {
            "string" | "str" | "utf8" => Some(DeclaredType::String),
            "int32" | "int" => Some(DeclaredType::Int32),
            "int64" | "long" | "bigint" => Some(DeclaredType::Int64),
            "float32" | "float" => Some(DeclaredType::Float32),
            "float64" | "double" => Some(DeclaredType::Float64),
            "bool" | "boolean" => Some(DeclaredType::Bool),
            "date" => Some(DeclaredType::Date),
            "timestamp" => Some(DeclaredType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))),
            _ => None,
        };
        if let Some(simple) = simple {
            return Ok(simple);
        }
        let args = |prefix: &str| -> Option<Vec<String>> {
            let inner = t.strip_prefix(prefix)?.strip_prefix('(')?.strip_suffix(')')?;
            Some(inner.split(',').map(|a| a.trim().to_owned()).collect())
        };
        if let Some(a) = args("decimal") {
            let (Some(p), Some(s)) = (a.first(), a.get(1)) else {
                return Err(format!(
                    "`{text}`: decimal needs precision and scale, e.g. decimal(10,2)"
                ));
            };
            let p: u8 = p.parse().map_err(|_| format!("`{text}`: bad precision"))?;
            let s: i8 = s.parse().map_err(|_| format!("`{text}`: bad scale"))?;
            if p == 0 || p > 38 || s < 0 || s as u8 > p {
                return Err(format!("`{text}`: precision must be 1..=38 and scale 0..=precision"));
            }
            return Ok(DeclaredType::Decimal(p, s));
        }
        if let Some(a) = args("timestamp") {
            let unit = match a.first().map(String::as_str) {
                Some("s") => TimeUnit::Second,
                Some("ms") => TimeUnit::Millisecond,
                Some("us") => TimeUnit::Microsecond,
                Some("ns") => TimeUnit::Nanosecond,
                other => return Err(format!("`{text}`: unit {other:?} is not s, ms, us or ns")),
            };
            // Keep the zone as written (time zone names are case-sensitive).
            let zone =
                text.split(',').nth(1).map(|z| z.trim().trim_end_matches(')').trim().to_owned());
            return Ok(DeclaredType::Timestamp(unit, zone.filter(|z| !z.is_empty())));
        }
        Err(format!(
            "unknown type `{text}`: expected string, int32, int64, float32, float64, bool, date, timestamp, timestamp(unit[, zone]) or decimal(p,s)"
        ))
    }
}

/// The type as a schema file spells it (`int64`, `decimal(10,2)`,
/// `timestamp(ms, Europe/Paris)`): what messages about a value say, not
/// Arrow's names (`Decimal128(10, 2)`).
impl std::fmt::Display for DeclaredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = |u: &TimeUnit| match u {
            TimeUnit::Second => "s",
            TimeUnit::Millisecond => "ms",
            TimeUnit::Microsecond => "us",
            TimeUnit::Nanosecond => "ns",
        };
        match self {
            DeclaredType::String => f.write_str("string"),
            DeclaredType::Int32 => f.write_str("int32"),
            DeclaredType::Int64 => f.write_str("int64"),
            DeclaredType::Float32 => f.write_str("float32"),
            DeclaredType::Float64 => f.write_str("float64"),
            DeclaredType::Bool => f.write_str("bool"),
            DeclaredType::Date => f.write_str("date"),
            DeclaredType::Timestamp(TimeUnit::Microsecond, Some(zone)) if zone == "UTC" => {
                f.write_str("timestamp")
            }
            DeclaredType::Timestamp(u, Some(zone)) => write!(f, "timestamp({}, {zone})", unit(u)),
            DeclaredType::Timestamp(u, None) => write!(f, "timestamp({})", unit(u)),
            DeclaredType::Decimal(p, s) => write!(f, "decimal({p},{s})"),
        }
    }
}

impl<'de> Deserialize<'de> for DeclaredType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One declared column.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnDecl {
    /// Column name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub column_type: DeclaredType,
    /// Whether nulls are allowed (default true).
    #[serde(default = "yes")]
    pub nullable: bool,
    /// Longest allowed string, in characters.
    #[serde(default)]
    pub max_length: Option<usize>,
}

fn yes() -> bool {
    true
}

/// How rows reach the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Append every row.
    #[default]
    Append,
    /// Upsert by the primary key.
    Merge,
}

/// What happens to a file with a bad row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRowError {
    /// The whole file fails (retried, then dead-lettered); nothing of it lands.
    #[default]
    FailFile,
    /// Bad rows go to `<table>_rejects` with file, line and reason; the
    /// good rows land.
    Reject,
}

/// What happens to columns a file has and the schema does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtraColumns {
    /// The file fails.
    #[default]
    Error,
    /// They are dropped.
    Ignore,
}

/// CSV options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CsvFormat {
    /// The first line names the columns.
    pub header: bool,
    /// Field delimiter (one byte).
    pub delimiter: char,
}

impl Default for CsvFormat {
    fn default() -> Self {
        CsvFormat { header: true, delimiter: ',' }
    }
}

/// An empty options block (`parquet: {}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoOptions {}

/// Accepted file formats.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Formats {
    /// CSV (`.csv`).
    #[serde(default)]
    pub csv: Option<CsvFormat>,
    /// Parquet (`.parquet`).
    #[serde(default)]
    pub parquet: Option<NoOptions>,
    /// JSON lines (`.jsonl`, `.ndjson`).
    #[serde(default)]
    pub jsonl: Option<NoOptions>,
}

impl Default for Formats {
    fn default() -> Self {
        Formats {
            csv: Some(CsvFormat::default()),
            parquet: Some(NoOptions {}),
            jsonl: Some(NoOptions {}),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaFile {
    columns: Vec<ColumnDecl>,
    #[serde(default)]
    primary_key: Vec<String>,
    #[serde(default)]
    write_mode: WriteMode,
    #[serde(default)]
    sequence_by: Option<String>,
    #[serde(default)]
    partition_by: Vec<String>,
    #[serde(default)]
    formats: Formats,
    #[serde(default)]
    on_row_error: OnRowError,
    #[serde(default)]
    extra_columns: ExtraColumns,
}

/// A table's declared schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// The table's name (the YAML file's stem).
    pub name: String,
    /// Where it was declared.
    pub path: PathBuf,
    /// Declared columns, in order.
    pub columns: Vec<ColumnDecl>,
    /// Primary key columns.
    pub primary_key: Vec<String>,
    /// Append or merge.
    pub write_mode: WriteMode,
    /// Merge only: the column ordering versions of a key. A row replaces
    /// the stored row of its key only if its value is not lower, and of the
    /// rows one flush brings for a key the highest wins — whatever order
    /// the files arrive or commit in. Without it, the last committed wins.
    pub sequence_by: Option<String>,
    /// Partition columns.
    pub partition_by: Vec<String>,
    /// Accepted formats.
    pub formats: Formats,
    /// Bad rows: fail the file, or reject them.
    pub on_row_error: OnRowError,
    /// Undeclared columns: error, or ignore.
    pub extra_columns: ExtraColumns,
}

impl TableSchema {
    /// Parse a schema file's text; `path` names the file in errors and gives
    /// the table's name.
    pub fn parse(text: &str, path: &Path) -> Result<TableSchema> {
        let bad = |line: Option<u64>, message: String| Error::Config {
            path: path.to_path_buf(),
            message: match line {
                Some(line) => format!("line {line}: {message}"),
                None => message,
            },
        };
        let file: SchemaFile = serde_saphyr::from_str(text)
            .map_err(|e| bad(e.location().map(|l| l.line()), e.to_string()))?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| is_plain_name(s))
            .ok_or_else(|| {
                bad(
                    None,
                    "the file name must be the table name: lowercase letters, digits and `_`"
                        .into(),
                )
            })?
            .to_owned();
        let schema = TableSchema {
            name,
            path: path.to_path_buf(),
            columns: file.columns,
            primary_key: file.primary_key,
            write_mode: file.write_mode,
            sequence_by: file.sequence_by,
            partition_by: file.partition_by,
            formats: file.formats,
            on_row_error: file.on_row_error,
            extra_columns: file.extra_columns,
        };
        schema.check().map_err(|m| bad(None, m))?;
        Ok(schema)
    }

    /// Read and parse a schema file.
    pub fn load(path: &Path) -> Result<TableSchema> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        TableSchema::parse(&text, path)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if self.columns.is_empty() {
            return Err("a table needs at least one column".into());
        }
        let mut seen = BTreeSet::new();
        for c in &self.columns {
            if !is_plain_name(&c.name) || c.name.starts_with('_') {
                return Err(format!(
                    "column `{}`: names are lowercase letters, digits and `_`, not starting with `_` (sluice's own columns do)",
                    c.name
                ));
            }
            if !seen.insert(c.name.as_str()) {
                return Err(format!("column `{}` is declared twice", c.name));
            }
            if c.max_length.is_some() && c.column_type != DeclaredType::String {
                return Err(format!("column `{}`: max_length applies to strings only", c.name));
            }
        }
        for (what, names) in
            [("primary_key", &self.primary_key), ("partition_by", &self.partition_by)]
        {
            if let Some(missing) = names.iter().find(|n| !seen.contains(n.as_str())) {
                return Err(format!("{what} names `{missing}`, which is not a declared column"));
            }
        }
        if self.write_mode == WriteMode::Merge && self.primary_key.is_empty() {
            return Err("write_mode: merge needs a primary_key".into());
        }
        if let Some(seq) = &self.sequence_by {
            if self.write_mode != WriteMode::Merge {
                return Err("sequence_by applies to write_mode: merge only".into());
            }
            match self.columns.iter().find(|c| &c.name == seq) {
                None => {
                    return Err(format!(
                        "sequence_by names `{seq}`, which is not a declared column"
                    ));
                }
                Some(c) if c.nullable => {
                    return Err(format!(
                        "sequence_by column `{seq}` must be declared `nullable: false`"
                    ));
                }
                Some(_) => {}
            }
        }
        if self.write_mode == WriteMode::Merge
            && let Some(c) =
                self.columns.iter().find(|c| c.nullable && self.primary_key.contains(&c.name))
        {
            return Err(format!(
                "write_mode: merge needs its primary_key columns declared `nullable: false`; \
                 `{}` may be null (a null key matches nothing)",
                c.name
            ));
        }
        if let Some(csv) = &self.formats.csv
            && !csv.delimiter.is_ascii()
        {
            return Err(format!("csv delimiter `{}` must be one ASCII character", csv.delimiter));
        }
        Ok(())
    }

    /// The declared columns as stored (see [`DeclaredType::storage`]), with
    /// their declared nullability.
    pub fn declared_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| Field::new(&c.name, c.column_type.storage(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }

    /// The raw table's Arrow schema: the declared columns, then
    /// `_source_file` and `_ingested_at`.
    pub fn table_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> =
            self.declared_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(SOURCE_FILE_COLUMN, DataType::Utf8, false));
        fields.push(Field::new(
            INGESTED_AT_COLUMN,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ));
        Arc::new(Schema::new(fields))
    }
}

/// Every `*.yaml` / `*.yml` schema in a folder, by table name.
pub fn load_dir(dir: &Path) -> Result<Vec<TableSchema>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(TableSchema::load(&path)?);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = out.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::Config {
            path: w[1].path.clone(),
            message: format!(
                "table `{}` is declared twice (also in {})",
                w[1].name,
                w[0].path.display()
            ),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIPS: &str = "columns:\n  - { name: trip_id, type: int64, nullable: false }\n  - { name: at, type: \"timestamp(ms, Europe/Paris)\" }\n  - { name: zone, type: string, max_length: 8 }\n  - { name: fare, type: \"decimal(10,2)\" }\nprimary_key: [trip_id]\n";

    #[test]
    fn a_schema_declares_types_and_the_table_adds_its_columns() {
        let s = TableSchema::parse(TRIPS, Path::new("/s/trips.yaml")).unwrap();
        assert_eq!(s.name, "trips");
        let t = s.table_schema();
        assert_eq!(t.field(0).data_type(), &DataType::Int64);
        assert!(!t.field(0).is_nullable());
        assert_eq!(
            s.columns[1].column_type.arrow(),
            DataType::Timestamp(TimeUnit::Millisecond, Some("Europe/Paris".into()))
        );
        assert_eq!(
            t.field(1).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            "stored as the instant, in UTC"
        );
        assert_eq!(t.field(3).data_type(), &DataType::Decimal128(10, 2));
        assert_eq!(t.field(4).name(), SOURCE_FILE_COLUMN);
        assert_eq!(s.formats, Formats::default());
    }

    #[test]
    fn an_unknown_type_is_an_error_naming_file_and_line() {
        let text = "columns:\n  - { name: a, type: int64 }\n  - { name: b, type: varchar }\n";
        let err = TableSchema::parse(text, Path::new("/s/t.yaml")).unwrap_err().to_string();
        assert!(
            err.contains("/s/t.yaml") && err.contains("line 3") && err.contains("varchar"),
            "{err}"
        );
    }

    #[test]
    fn inconsistent_declarations_are_errors() {
        for (text, why) in [
            ("columns: []\n", "at least one column"),
            ("columns:\n  - { name: a, type: int64 }\n  - { name: a, type: int64 }\n", "twice"),
            ("columns:\n  - { name: a, type: int64 }\nprimary_key: [b]\n", "`b`"),
            ("columns:\n  - { name: a, type: int64 }\nwrite_mode: merge\n", "primary_key"),
            (
                "columns:\n  - { name: a, type: int64 }\nprimary_key: [a]\nwrite_mode: merge\n",
                "nullable: false",
            ),
            (
                "columns:\n  - { name: a, type: int64, nullable: false }\nprimary_key: [a]\nsequence_by: a\n",
                "merge only",
            ),
            (
                "columns:\n  - { name: a, type: int64, nullable: false }\nprimary_key: [a]\nwrite_mode: merge\nsequence_by: b\n",
                "not a declared column",
            ),
            ("columns:\n  - { name: a, type: int64, max_length: 3 }\n", "strings only"),
            ("columns:\n  - { name: _a, type: int64 }\n", "not starting with"),
            ("columns:\n  - { name: a, type: \"decimal(50,2)\" }\n", "1..=38"),
            ("columns:\n  - { name: a, type: int64, nulable: true }\n", "nulable"),
        ] {
            let err = TableSchema::parse(text, Path::new("/s/t.yaml")).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
