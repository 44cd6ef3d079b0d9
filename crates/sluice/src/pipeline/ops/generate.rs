//! `generate_data`: synthetic CSV tables, reproducible from a seed.
//!
//! Params: `tables` (default 1), `rows` (default 100), `seed` (default 0).
//! One unit per table; each table has columns `id`, `x` (uniform in [0, 1)),
//! `y` (2x plus noise) and `group` (a, b or c).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::artifact::{DataFormat, Draft};
use crate::error::{Error, Result};
use crate::pipeline::config::{StepConfig, StepError};
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};
use crate::staging::synthetic::uniform;

/// The `generate_data` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct GenerateData;

impl Operation for GenerateData {
    fn name(&self) -> &str {
        "generate_data"
    }

    fn known_params(&self) -> Option<&'static [&'static str]> {
        Some(&["tables", "rows", "seed"])
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        if !s.input_types.is_empty() {
            return Err(StepError::Shape("takes no inputs".into()));
        }
        super::uint_param(&s.step.params, "tables", 1)?;
        super::uint_param(&s.step.params, "rows", 100)?;
        super::uint_param(&s.step.params, "seed", 0)?;
        Ok(BTreeMap::from([("data".into(), crate::artifact::DATA.into())]))
    }

    fn source_units(&self, step: &StepConfig) -> Result<Option<Vec<serde_json::Value>>> {
        let tables = super::uint_param(&step.params, "tables", 1)
            .map_err(|source| Error::Step { operation: self.name().into(), source })?;
        Ok(Some((0..tables).map(|t| serde_json::json!({ "table": t })).collect()))
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let params = ctx.params();
        let bad = |source| Error::Step { operation: "generate_data".into(), source };
        let rows = super::uint_param(params, "rows", 100).map_err(bad)?;
        let seed = super::uint_param(params, "seed", 0).map_err(bad)?;
        let mut out = Vec::new();
        for source in &ctx.sources {
            let table =
                source.get("table").and_then(serde_json::Value::as_u64).ok_or_else(|| {
                    Error::operation(
                        "generate_data",
                        format!("unit descriptor {source} has no table number"),
                    )
                })?;
            let mut csv = String::from("id,x,y,group\n");
            for row in 0..rows {
                let x = uniform(seed, &[table, row, 0]);
                let noise = uniform(seed, &[table, row, 1]) - 0.5;
                let group = ["a", "b", "c"][(uniform(seed, &[table, row, 2]) * 3.0) as usize % 3];
                let _ = writeln!(csv, "{row},{x:.6},{:.6},{group}", 2.0 * x + noise);
            }
            let draft = Draft::data(csv.into_bytes(), DataFormat::Csv)
                .with_original_name(&format!("table_{table:04}.csv"));
            out.push(Output::New { role: "data".into(), draft, derived_from: None });
        }
        Ok(out)
    }
}
