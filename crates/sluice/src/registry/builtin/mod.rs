//! The four built-in artifact types.
//!
//! | key        | table                  | content                                    |
//! |------------|------------------------|--------------------------------------------|
//! | `metric`   | `artifacts/metrics`    | canonical JSON object of named values      |
//! | `config`   | `artifacts/configs`    | canonical JSON document                    |
//! | `data`     | `artifacts/data`       | table bytes (csv / parquet / arrow)        |
//! | `file_ref` | `artifacts/file_refs`  | BLAKE3 of an external file, path and size  |

pub mod data;
pub mod file_ref;
pub mod json_doc;

use std::sync::Arc;

use crate::artifact::ArtifactType;

/// The built-in types, in their canonical order.
pub fn all() -> Vec<Arc<dyn ArtifactType>> {
    vec![
        Arc::new(json_doc::JsonDocType::metric()),
        Arc::new(json_doc::JsonDocType::config()),
        Arc::new(data::DataType),
        Arc::new(file_ref::FileRefType),
    ]
}
