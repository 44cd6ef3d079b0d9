//! A user's own sluice binary: one operation written in Rust, linked in,
//! and the whole `sluice` command line on top.
//!
//! ```sh
//! cargo build --examples
//! target/debug/examples/custom_operation --lake ./lake run pipeline.toml
//! ```
//!
//! `run` knows `word_count`, and so do its worker processes (they are this
//! same binary), on the local backend and in SLURM array tasks.

use std::collections::BTreeMap;

use serde_json::json;
use sluice::Draft;
use sluice::pipeline::StepError;
use sluice::pipeline::operation::{Operation, Output, Signature, UnitContext};

/// Counts the words of each input `file_ref` into a metric.
#[derive(Default)]
struct WordCount;

impl Operation for WordCount {
    fn name(&self) -> &str {
        "word_count"
    }

    fn outputs(&self, s: &Signature<'_>) -> Result<BTreeMap<String, String>, StepError> {
        if s.input_types.values().any(|t| t != "file_ref") {
            return Err("word_count takes file_ref inputs".into());
        }
        Ok(BTreeMap::from([("counts".into(), "metric".into())]))
    }

    fn run(&self, ctx: &UnitContext) -> sluice::Result<Vec<Output>> {
        let mut out = Vec::new();
        for file in ctx.all_inputs() {
            let path = file.field("path").as_str().unwrap_or_default();
            let text = std::fs::read_to_string(path).map_err(|e| sluice::Error::io(path, e))?;
            let words = text.split_whitespace().count();
            out.push(Output::New {
                role: "counts".into(),
                draft: Draft::metric(json!({ "words": words, "pid": std::process::id() }))?,
                derived_from: Some(vec![file.id]),
            });
        }
        Ok(out)
    }
}

sluice::register_operation!(WordCount);

fn main() -> std::process::ExitCode {
    sluice_cli::main_entry()
}
