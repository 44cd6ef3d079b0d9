//! Typed column values of artifact tables.
//!
//! Artifact types are open: built-in types and types registered at runtime
//! (from Rust or from `sluice.toml`) describe their own columns with
//! [`ColumnSpec`]. Values travel through sluice as [`FieldValue`]s, which map
//! one-to-one onto the Arrow and Delta types of those columns.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use deltalake::arrow::datatypes::{DataType as ArrowType, Field, TimeUnit};
use deltalake::kernel::{DataType as DeltaType, PrimitiveType, StructField};

use crate::error::{Error, Result};
pub use crate::error::{UnknownColumnType, ValueError};

/// The type of one column of an artifact table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// UTF-8 text.
    String,
    /// Raw bytes.
    Binary,
    /// A boolean.
    Bool,
    /// A 32-bit signed integer.
    Int32,
    /// A 64-bit signed integer.
    Int64,
    /// A 64-bit float.
    Float64,
    /// A UTC instant with microsecond precision.
    Timestamp,
    /// A JSON document, stored as canonical JSON text.
    Json,
}

impl ColumnType {
    /// Every column type, in the order they are documented.
    pub const ALL: [ColumnType; 8] = [
        ColumnType::String,
        ColumnType::Binary,
        ColumnType::Bool,
        ColumnType::Int32,
        ColumnType::Int64,
        ColumnType::Float64,
        ColumnType::Timestamp,
        ColumnType::Json,
    ];

    /// The name used in `sluice.toml` and in `sluice types`.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Binary => "binary",
            ColumnType::Bool => "bool",
            ColumnType::Int32 => "int32",
            ColumnType::Int64 => "int64",
            ColumnType::Float64 => "float64",
            ColumnType::Timestamp => "timestamp",
            ColumnType::Json => "json",
        }
    }

    /// The Arrow type of the column.
    pub fn arrow_type(self) -> ArrowType {
        match self {
            ColumnType::String | ColumnType::Json => ArrowType::Utf8,
            ColumnType::Binary => ArrowType::Binary,
            ColumnType::Bool => ArrowType::Boolean,
            ColumnType::Int32 => ArrowType::Int32,
            ColumnType::Int64 => ArrowType::Int64,
            ColumnType::Float64 => ArrowType::Float64,
            ColumnType::Timestamp => {
                ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
        }
    }

    /// The Delta type of the column.
    pub fn delta_type(self) -> DeltaType {
        DeltaType::Primitive(match self {
            ColumnType::String | ColumnType::Json => PrimitiveType::String,
            ColumnType::Binary => PrimitiveType::Binary,
            ColumnType::Bool => PrimitiveType::Boolean,
            ColumnType::Int32 => PrimitiveType::Integer,
            ColumnType::Int64 => PrimitiveType::Long,
            ColumnType::Float64 => PrimitiveType::Double,
            ColumnType::Timestamp => PrimitiveType::Timestamp,
        })
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ColumnType {
    type Err = UnknownColumnType;

    fn from_str(s: &str) -> std::result::Result<Self, UnknownColumnType> {
        ColumnType::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| UnknownColumnType {
            name: s.to_owned(),
            known: ColumnType::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", "),
        })
    }
}

/// One column of a table: name, type and nullability.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnSpec {
    /// Column name.
    pub name: String,
    /// Column type.
    pub column_type: ColumnType,
    /// Whether the column may hold nulls.
    pub nullable: bool,
}

impl ColumnSpec {
    /// A column that must always hold a value.
    pub fn required(name: impl Into<String>, column_type: ColumnType) -> Self {
        ColumnSpec { name: name.into(), column_type, nullable: false }
    }

    /// A column that may be null.
    pub fn optional(name: impl Into<String>, column_type: ColumnType) -> Self {
        ColumnSpec { name: name.into(), column_type, nullable: true }
    }

    /// The Arrow field of this column.
    pub fn arrow_field(&self) -> Field {
        Field::new(&self.name, self.column_type.arrow_type(), self.nullable)
    }

    /// The Delta field of this column.
    pub fn delta_field(&self) -> StructField {
        StructField::new(&self.name, self.column_type.delta_type(), self.nullable)
    }
}

/// Build an Arrow schema from column specs.
pub fn arrow_schema(columns: &[ColumnSpec]) -> Arc<deltalake::arrow::datatypes::Schema> {
    Arc::new(deltalake::arrow::datatypes::Schema::new(
        columns.iter().map(ColumnSpec::arrow_field).collect::<Vec<_>>(),
    ))
}

/// A value of one column of one artifact.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// No value.
    Null,
    /// Text (also JSON columns, as canonical JSON text).
    String(String),
    /// Bytes.
    Binary(Vec<u8>),
    /// A boolean.
    Bool(bool),
    /// An integer (Int32 columns are range-checked on write).
    Int(i64),
    /// A float.
    Float(f64),
    /// Microseconds since the Unix epoch, UTC.
    TimestampMicros(i64),
}

impl FieldValue {
    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes of a binary value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            FieldValue::Binary(b) => Some(b),
            _ => None,
        }
    }

    /// The integer of an integer value.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            FieldValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The value of a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            FieldValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether this value is null.
    pub fn is_null(&self) -> bool {
        matches!(self, FieldValue::Null)
    }

    /// Check that the value fits a column, naming the column on error.
    pub fn check(&self, column: &ColumnSpec) -> std::result::Result<(), ValueError> {
        let ok = match (self, column.column_type) {
            (FieldValue::Null, _) => column.nullable,
            (FieldValue::String(_), ColumnType::String) => true,
            (FieldValue::String(s), ColumnType::Json) => {
                serde_json::from_str::<serde_json::Value>(s).is_ok()
            }
            (FieldValue::Binary(_), ColumnType::Binary) => true,
            (FieldValue::Bool(_), ColumnType::Bool) => true,
            (FieldValue::Int(i), ColumnType::Int32) => i32::try_from(*i).is_ok(),
            (FieldValue::Int(_), ColumnType::Int64) => true,
            (FieldValue::Float(_), ColumnType::Float64) => true,
            (FieldValue::Int(_), ColumnType::Float64) => true,
            (FieldValue::TimestampMicros(_), ColumnType::Timestamp) => true,
            _ => false,
        };
        if ok {
            Ok(())
        } else if self.is_null() {
            Err(ValueError::Required { column: column.name.clone() })
        } else {
            Err(ValueError::Mismatch {
                column: column.name.clone(),
                expected: column.column_type.name(),
                found: self.describe(),
            })
        }
    }

    fn describe(&self) -> String {
        match self {
            FieldValue::Null => "null".into(),
            FieldValue::String(s) => format!("the text {:?}", truncate(s, 40)),
            FieldValue::Binary(b) => format!("{} bytes", b.len()),
            FieldValue::Bool(b) => format!("the boolean {b}"),
            FieldValue::Int(i) => format!("the integer {i}"),
            FieldValue::Float(f) => format!("the float {f}"),
            FieldValue::TimestampMicros(t) => format!("the timestamp {t}µs"),
        }
    }

    /// Convert a JSON value into a field value of the given column type.
    ///
    /// Used by types declared in `sluice.toml`, whose drafts are given as JSON.
    pub fn from_json(value: &serde_json::Value, column: &ColumnSpec) -> Result<FieldValue> {
        use serde_json::Value;
        let bad = |why: &str| {
            Error::InvalidInput(format!("column `{}` ({}): {why}", column.name, column.column_type))
        };
        Ok(match (value, column.column_type) {
            (Value::Null, _) => FieldValue::Null,
            (v, ColumnType::Json) => {
                FieldValue::String(crate::artifact::canonical_json::to_string(v)?)
            }
            (Value::String(s), ColumnType::String) => FieldValue::String(s.clone()),
            (Value::String(s), ColumnType::Binary) => FieldValue::Binary(s.as_bytes().to_vec()),
            (Value::Bool(b), ColumnType::Bool) => FieldValue::Bool(*b),
            (Value::Number(n), ColumnType::Int32 | ColumnType::Int64) => {
                FieldValue::Int(n.as_i64().ok_or_else(|| bad("expected an integer"))?)
            }
            (Value::Number(n), ColumnType::Float64) => {
                FieldValue::Float(n.as_f64().ok_or_else(|| bad("expected a number"))?)
            }
            (Value::Number(n), ColumnType::Timestamp) => FieldValue::TimestampMicros(
                n.as_i64().ok_or_else(|| bad("expected µs since epoch"))?,
            ),
            (Value::String(s), ColumnType::Timestamp) => {
                let t = chrono::DateTime::parse_from_rfc3339(s)
                    .map_err(|e| bad(&format!("expected an RFC 3339 time: {e}")))?;
                FieldValue::TimestampMicros(t.timestamp_micros())
            }
            (other, _) => return Err(bad(&format!("cannot store {other}"))),
        })
    }

    /// A JSON rendering of the value, for display and for identity hashing.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            FieldValue::Null => Value::Null,
            FieldValue::String(s) => Value::String(s.clone()),
            FieldValue::Binary(b) => Value::String(crate::artifact::id::hex(b)),
            FieldValue::Bool(b) => Value::Bool(*b),
            FieldValue::Int(i) => Value::from(*i),
            FieldValue::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            FieldValue::TimestampMicros(t) => Value::from(*t),
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_type_names_round_trip() {
        for t in ColumnType::ALL {
            assert_eq!(t.name().parse::<ColumnType>(), Ok(t));
        }
        let err = "decimal".parse::<ColumnType>().unwrap_err().to_string();
        assert!(err.contains("unknown column type `decimal`"), "{err}");
    }

    #[test]
    fn check_names_the_column() {
        let col = ColumnSpec::required("n", ColumnType::Int32);
        assert!(FieldValue::Int(5).check(&col).is_ok());
        let err = FieldValue::Int(i64::MAX).check(&col).unwrap_err().to_string();
        assert!(err.contains("`n`"), "{err}");
        let err = FieldValue::Null.check(&col).unwrap_err().to_string();
        assert!(err.contains("required"), "{err}");
        assert!(FieldValue::Null.check(&ColumnSpec::optional("n", ColumnType::Int32)).is_ok());
    }
}
