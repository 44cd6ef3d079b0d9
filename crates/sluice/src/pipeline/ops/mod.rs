//! The built-in operations.
//!
//! | operation        | inputs                    | outputs                 | runs in  |
//! |------------------|---------------------------|-------------------------|----------|
//! | `generate_data`  | none (params)             | `data`: data            | worker   |
//! | `ingest_files`   | none (`paths` globs)      | `files`: file_ref       | worker   |
//! | `compute_metrics`| any roles of data         | `metrics`: metric       | worker   |
//! | `command`        | any                       | declared in `outputs`   | worker   |
//! | `python`         | any                       | declared (or @sluice.op)| worker   |
//! | `filter`         | `candidates` + `metric`   | `kept`: candidates' type| inline   |
//! | `merge`          | any roles of one type     | `merged`: that type     | inline   |

mod command;
mod filter;
mod generate;
mod ingest;
mod merge;
mod metrics;
mod python;
mod sandbox;

pub use command::CommandOp;
pub use filter::FilterOp;
pub use generate::GenerateData;
pub use ingest::IngestFiles;
pub use merge::MergeOp;
pub use metrics::ComputeMetrics;
pub use python::PythonOp;
pub(crate) use python::source_of as python_source_of;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::config::StepError;
use super::operation::Operation;
use crate::error::{Error, Result};

/// Every built-in operation.
pub fn builtins() -> Vec<Box<dyn Operation>> {
    vec![
        Box::new(GenerateData),
        Box::new(IngestFiles),
        Box::new(ComputeMetrics),
        Box::new(CommandOp),
        Box::new(PythonOp),
        Box::new(FilterOp),
        Box::new(MergeOp),
    ]
}

/// A non-negative integer parameter with a default.
fn uint_param(
    params: &serde_json::Map<String, serde_json::Value>,
    name: &str,
    default: u64,
) -> std::result::Result<u64, StepError> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => v.as_u64().ok_or_else(|| StepError::BadParam {
            name: name.to_owned(),
            problem: format!("must be a non-negative integer, got {v}"),
        }),
    }
}

/// Every input role must hold `type_key`.
fn require_inputs_of(
    signature: &super::operation::Signature<'_>,
    type_key: &str,
) -> std::result::Result<(), StepError> {
    if signature.input_types.is_empty() {
        return Err(StepError::Shape("needs at least one input".into()));
    }
    for (role, t) in signature.input_types {
        if t != type_key {
            return Err(StepError::InputType {
                role: role.clone(),
                found: t.clone(),
                expected: type_key.to_owned(),
            });
        }
    }
    Ok(())
}

/// A registered operation (see [`register_operation!`](crate::register_operation)).
pub struct OperationRegistration {
    /// Builds the operation.
    pub make: fn() -> Box<dyn Operation>,
}

inventory::collect!(OperationRegistration);

/// Register an operation type (which must implement [`Operation`] and
/// `Default`) for every binary that links the crate.
#[macro_export]
macro_rules! register_operation {
    ($ty:ty) => {
        $crate::inventory::submit! {
            $crate::pipeline::ops::OperationRegistration {
                make: || ::std::boxed::Box::new(<$ty as ::std::default::Default>::default()),
            }
        }
    };
}

/// The operations known to this binary: built-ins and linked ones.
#[derive(Clone)]
pub struct Operations {
    ops: Arc<BTreeMap<String, Arc<dyn Operation>>>,
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ops.keys()).finish()
    }
}

impl Operations {
    /// Built-ins plus every operation registered with `register_operation!`.
    /// A linked operation may not reuse a built-in's name.
    pub fn linked() -> Result<Self> {
        let mut ops: BTreeMap<String, Arc<dyn Operation>> = BTreeMap::new();
        for op in builtins() {
            ops.insert(op.name().to_owned(), Arc::from(op));
        }
        let builtin: Vec<String> = ops.keys().cloned().collect();
        for registration in inventory::iter::<OperationRegistration> {
            let op: Arc<dyn Operation> = Arc::from((registration.make)());
            let name = op.name().to_owned();
            if builtin.contains(&name) || ops.contains_key(&name) {
                return Err(Error::operation(name, "registered twice (or shadows a built-in)"));
            }
            ops.insert(name, op);
        }
        Ok(Operations { ops: Arc::new(ops) })
    }

    /// An operation by name.
    pub fn get(&self, name: &str) -> Result<Arc<dyn Operation>> {
        self.ops.get(name).cloned().ok_or_else(|| {
            Error::operation(
                name,
                format!("unknown operation (known: {})", self.names().join(", ")),
            )
        })
    }

    /// Every operation's name.
    pub fn names(&self) -> Vec<String> {
        self.ops.keys().cloned().collect()
    }
}
