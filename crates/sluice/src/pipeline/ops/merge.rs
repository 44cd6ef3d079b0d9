//! `merge`: the union of several streams of one type.
//!
//! Inputs are taken in role-name order, each in its stream order; an artifact
//! present in several streams appears once. Nothing new is written: the
//! outputs are the existing artifacts, recorded as the execution's outputs.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::Result;
use crate::pipeline::config::StepError;
use crate::pipeline::operation::{Grouping, Operation, Output, Signature, UnitContext};

/// The `merge` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct MergeOp;

impl Operation for MergeOp {
    fn name(&self) -> &str {
        "merge"
    }

    fn known_params(&self) -> Option<&'static [&'static str]> {
        Some(&[])
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        let types: BTreeSet<&String> = s.input_types.values().collect();
        match types.len() {
            0 => Err(StepError::Shape("needs at least one input".into())),
            1 => Ok(BTreeMap::from([(
                "merged".into(),
                (*types.iter().next().unwrap_or(&&String::new())).clone(),
            )])),
            _ => Err(StepError::Shape(format!(
                "inputs must hold one artifact type, got {}",
                s.input_types
                    .iter()
                    .map(|(r, t)| format!("{r}: {t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    fn grouping(&self) -> Grouping {
        Grouping::WholeStream
    }

    fn inline(&self) -> bool {
        true
    }

    fn needs_content(&self) -> bool {
        false
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let mut seen = BTreeSet::new();
        Ok(ctx
            .input_ids
            .values()
            .flatten()
            .filter(|id| seen.insert(**id))
            .map(|id| Output::Existing { role: "merged".into(), id: *id })
            .collect())
    }
}
