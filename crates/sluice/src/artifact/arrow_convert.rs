//! Conversion between [`FieldValue`]s and Arrow arrays.
//!
//! Rows are built against a *target* schema (usually the table's own), so a
//! table that has gained nullable columns, or whose columns are nullable where
//! the spec is not, is still written with exactly its schema.

use std::sync::Arc;

use deltalake::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BinaryViewArray, BooleanArray, BooleanBuilder,
    Float64Array, Float64Builder, Int32Array, Int32Builder, Int64Array, Int64Builder,
    LargeBinaryArray, LargeStringArray, StringArray, StringBuilder, StringViewArray,
    TimestampMicrosecondArray, TimestampMicrosecondBuilder,
};
use deltalake::arrow::datatypes::{DataType, Field, TimeUnit};

use crate::artifact::value::FieldValue;
use crate::error::{Error, Result};

/// Build one column from values. `table` and the field name are used in errors.
pub fn build_array<'a>(
    table: &str,
    field: &Field,
    values: impl ExactSizeIterator<Item = &'a FieldValue>,
) -> Result<ArrayRef> {
    let n = values.len();
    let mismatch = |v: &FieldValue| {
        Error::InvalidInput(format!(
            "table `{table}` column `{}` ({}): cannot store {v:?}",
            field.name(),
            field.data_type()
        ))
    };
    let array: ArrayRef = match field.data_type() {
        DataType::Utf8 => {
            let mut b = StringBuilder::with_capacity(n, n * 16);
            for v in values {
                match v {
                    FieldValue::String(s) => b.append_value(s),
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Binary => {
            let mut b = BinaryBuilder::with_capacity(n, n * 64);
            for v in values {
                match v {
                    FieldValue::Binary(bytes) => b.append_value(bytes),
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Boolean => {
            let mut b = BooleanBuilder::with_capacity(n);
            for v in values {
                match v {
                    FieldValue::Bool(x) => b.append_value(*x),
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Int32 => {
            let mut b = Int32Builder::with_capacity(n);
            for v in values {
                match v {
                    FieldValue::Int(x) => {
                        b.append_value(i32::try_from(*x).map_err(|_| mismatch(v))?)
                    }
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Int64 => {
            let mut b = Int64Builder::with_capacity(n);
            for v in values {
                match v {
                    FieldValue::Int(x) => b.append_value(*x),
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Float64 => {
            let mut b = Float64Builder::with_capacity(n);
            for v in values {
                match v {
                    FieldValue::Float(x) => b.append_value(*x),
                    FieldValue::Int(x) => b.append_value(*x as f64),
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let mut b = TimestampMicrosecondBuilder::with_capacity(n);
            for v in values {
                match v {
                    FieldValue::TimestampMicros(x) => b.append_value(*x),
                    FieldValue::Null => b.append_null(),
                    other => return Err(mismatch(other)),
                }
            }
            Arc::new(b.finish().with_timezone_opt(tz.clone()))
        }
        other => {
            return Err(Error::SchemaConflict {
                table: table.to_owned(),
                column: field.name().clone(),
                message: format!("sluice cannot write Arrow type {other}"),
            });
        }
    };
    Ok(array)
}

/// Read one value of a column of `table`. A column of an Arrow type sluice
/// does not store (and that does not cast to text) is an error naming the
/// table and row, never a silent null.
pub fn read_value(table: &str, array: &dyn Array, row: usize) -> Result<FieldValue> {
    if array.is_null(row) {
        return Ok(FieldValue::Null);
    }
    let any = array.as_any();
    if let Some(a) = any.downcast_ref::<StringArray>() {
        Ok(FieldValue::String(a.value(row).to_owned()))
    } else if let Some(a) = any.downcast_ref::<StringViewArray>() {
        Ok(FieldValue::String(a.value(row).to_owned()))
    } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
        Ok(FieldValue::String(a.value(row).to_owned()))
    } else if let Some(a) = any.downcast_ref::<BinaryArray>() {
        Ok(FieldValue::Binary(a.value(row).to_vec()))
    } else if let Some(a) = any.downcast_ref::<BinaryViewArray>() {
        Ok(FieldValue::Binary(a.value(row).to_vec()))
    } else if let Some(a) = any.downcast_ref::<LargeBinaryArray>() {
        Ok(FieldValue::Binary(a.value(row).to_vec()))
    } else if let Some(a) = any.downcast_ref::<BooleanArray>() {
        Ok(FieldValue::Bool(a.value(row)))
    } else if let Some(a) = any.downcast_ref::<Int32Array>() {
        Ok(FieldValue::Int(i64::from(a.value(row))))
    } else if let Some(a) = any.downcast_ref::<Int64Array>() {
        Ok(FieldValue::Int(a.value(row)))
    } else if let Some(a) = any.downcast_ref::<Float64Array>() {
        Ok(FieldValue::Float(a.value(row)))
    } else if let Some(a) = any.downcast_ref::<TimestampMicrosecondArray>() {
        Ok(FieldValue::TimestampMicros(a.value(row)))
    } else if let Ok(cast) = deltalake::arrow::compute::cast(&array.slice(row, 1), &DataType::Utf8)
    {
        // Dictionary-encoded or other physical forms a reader may hand back.
        read_value(table, cast.as_ref(), 0)
    } else {
        Err(Error::corrupt(
            table,
            format!("row {row}"),
            format!("a column of Arrow type {} cannot be read", array.data_type()),
        ))
    }
}
