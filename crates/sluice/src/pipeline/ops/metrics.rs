//! `compute_metrics`: column statistics of data artifacts.
//!
//! One metric per input table, derived from it, flat so that `filter`
//! predicates can use its keys directly:
//! `rows`, `columns`, `mean` (over every numeric cell), and per numeric column
//! `<col>_mean`, `<col>_min`, `<col>_max`, `<col>_std`, `<col>_nulls`.

use std::collections::BTreeMap;

use deltalake::arrow::array::{Array, Float64Array};
use deltalake::arrow::compute::cast;
use deltalake::arrow::datatypes::DataType;
use serde_json::{Map, Value, json};

use crate::artifact::{Artifact, DataFormat, Draft, FieldValue};
use crate::error::{Error, Result};
use crate::pipeline::config::StepError;
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};

/// The `compute_metrics` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct ComputeMetrics;

#[derive(Default)]
struct Moments {
    n: u64,
    nulls: u64,
    sum: f64,
    sum_sq: f64,
    min: f64,
    max: f64,
}

impl Moments {
    fn add(&mut self, x: f64) {
        if self.n == 0 {
            self.min = x;
            self.max = x;
        }
        self.n += 1;
        self.sum += x;
        self.sum_sq += x * x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }
}

fn is_numeric(t: &DataType) -> bool {
    t.is_integer()
        || t.is_floating()
        || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// Statistics of one table.
pub fn table_metrics(artifact: &Artifact) -> Result<Value> {
    let bytes = match artifact.field("content") {
        FieldValue::Binary(b) => b,
        _ => {
            return Err(Error::operation(
                "compute_metrics",
                format!("artifact {} has no data content", artifact.id),
            ));
        }
    };
    let format = DataFormat::from_name(artifact.field("format").as_str().unwrap_or("csv"))?;
    let batches = format.read_batches(bytes)?;
    let mut columns: Vec<(String, Moments)> = Vec::new();
    let mut rows = 0u64;
    let mut width = 0usize;
    for batch in &batches {
        rows += batch.num_rows() as u64;
        width = batch.num_columns();
        for (i, field) in batch.schema().fields().iter().enumerate() {
            if !is_numeric(field.data_type()) {
                continue;
            }
            let values = cast(batch.column(i), &DataType::Float64).map_err(|e| {
                Error::arrow(format!("column `{}` of {}", field.name(), artifact.id), e)
            })?;
            let Some(values) = values.as_any().downcast_ref::<Float64Array>() else { continue };
            let slot = match columns.iter().position(|(n, _)| n == field.name()) {
                Some(p) => p,
                None => {
                    columns.push((field.name().clone(), Moments::default()));
                    columns.len() - 1
                }
            };
            let m = &mut columns[slot].1;
            for v in values.iter() {
                match v {
                    Some(x) if x.is_finite() => m.add(x),
                    _ => m.nulls += 1,
                }
            }
        }
    }
    let mut out = Map::new();
    out.insert("rows".into(), json!(rows));
    out.insert("columns".into(), json!(width));
    let (mut all_n, mut all_sum) = (0u64, 0.0);
    for (name, m) in &columns {
        all_n += m.n;
        all_sum += m.sum;
        let mean = if m.n > 0 { m.sum / m.n as f64 } else { f64::NAN };
        let var = if m.n > 1 { (m.sum_sq - m.sum * mean).max(0.0) / (m.n - 1) as f64 } else { 0.0 };
        let num = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
        out.insert(format!("{name}_mean"), num(mean));
        out.insert(format!("{name}_min"), if m.n > 0 { num(m.min) } else { Value::Null });
        out.insert(format!("{name}_max"), if m.n > 0 { num(m.max) } else { Value::Null });
        out.insert(format!("{name}_std"), num(var.sqrt()));
        out.insert(format!("{name}_nulls"), json!(m.nulls));
    }
    out.insert("mean".into(), if all_n > 0 { json!(all_sum / all_n as f64) } else { Value::Null });
    Ok(Value::Object(out))
}

impl Operation for ComputeMetrics {
    fn name(&self) -> &str {
        "compute_metrics"
    }

    fn known_params(&self) -> Option<&'static [&'static str]> {
        Some(&[])
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        super::require_inputs_of(s, crate::artifact::DATA)?;
        Ok(BTreeMap::from([("metrics".into(), crate::artifact::METRIC.into())]))
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let mut out = Vec::new();
        for artifact in ctx.all_inputs() {
            let draft = Draft::metric(table_metrics(artifact)?)?;
            out.push(Output::New {
                role: "metrics".into(),
                draft,
                derived_from: Some(vec![artifact.id]),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TypeRegistry;

    #[test]
    fn statistics_of_a_small_table() {
        let a = Draft::data(b"a,b,s\n1,2.0,x\n3,,y\n".to_vec(), DataFormat::Csv)
            .finalize(&TypeRegistry::builtin())
            .unwrap();
        let m = table_metrics(&a).unwrap();
        assert_eq!(m["rows"], json!(2));
        assert_eq!(m["columns"], json!(3));
        assert_eq!(m["a_mean"], json!(2.0));
        assert_eq!(m["a_min"], json!(1.0));
        assert_eq!(m["a_max"], json!(3.0));
        assert_eq!(m["b_nulls"], json!(1));
        assert_eq!(m["mean"], json!(2.0));
        assert!(m.get("s_mean").is_none());
    }
}
