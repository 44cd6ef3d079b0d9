//! The built-in operations.
//!
//! | operation        | inputs                    | outputs                 | runs in  |
//! |------------------|---------------------------|-------------------------|----------|
//! | `generate_data`  | none (params)             | `data`: data            | worker   |
//! | `ingest_files`   | none (`paths` globs)      | `files`: file_ref       | worker   |
//! | `compute_metrics`| any roles of data         | `metrics`: metric       | worker   |
//! | `command`        | any                       | declared in `outputs`   | worker   |
//! | `filter`         | `candidates` + `metric`   | `kept`: candidates' type| inline   |
//! | `merge`          | any roles of one type     | `merged`: that type     | inline   |

mod command;
mod filter;
mod generate;
mod ingest;
mod merge;
mod metrics;

pub use command::CommandOp;
pub use filter::FilterOp;
pub use generate::GenerateData;
pub use ingest::IngestFiles;
pub use merge::MergeOp;
pub use metrics::ComputeMetrics;

use super::operation::Operation;

/// Every built-in operation.
pub fn builtins() -> Vec<Box<dyn Operation>> {
    vec![
        Box::new(GenerateData),
        Box::new(IngestFiles),
        Box::new(ComputeMetrics),
        Box::new(CommandOp),
        Box::new(FilterOp),
        Box::new(MergeOp),
    ]
}

/// A non-negative integer parameter with a default.
fn uint_param(
    params: &serde_json::Map<String, serde_json::Value>,
    name: &str,
    default: u64,
) -> std::result::Result<u64, String> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("parameter `{name}` must be a non-negative integer, got {v}")),
    }
}

/// Every input role must hold `type_key`.
fn require_inputs_of(
    signature: &super::operation::Signature<'_>,
    type_key: &str,
) -> std::result::Result<(), String> {
    if signature.input_types.is_empty() {
        return Err("needs at least one input".into());
    }
    for (role, t) in signature.input_types {
        if t != type_key {
            return Err(format!(
                "input `{role}` holds `{t}` artifacts, but this operation takes `{type_key}`"
            ));
        }
    }
    Ok(())
}
