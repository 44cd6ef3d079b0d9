//! The trait that describes an artifact type, and the lookup drafts use.
//!
//! The trait lives with the artifact model because finalizing a
//! [`Draft`](super::Draft) is the trait's main client; the
//! [`TypeRegistry`](crate::registry::TypeRegistry) collects implementations
//! and answers [`ArtifactTypes`] lookups.

use std::sync::Arc;

use super::value::{ColumnSpec, FieldValue};
use super::{Artifact, Fields};
use crate::error::{Error, Result};

/// Describes one artifact type: its table, its columns, and its identity.
///
/// Implement it for a unit struct in your own crate and register it with
/// [`register_artifact_type!`](crate::register_artifact_type); every lake
/// opened by a binary that links your crate then has the type.
pub trait ArtifactType: Send + Sync + 'static {
    /// The unique key of the type (`metric`, `embedding`, …): lowercase ASCII
    /// letters, digits and `_`. It is hashed into every id of the type.
    fn key(&self) -> &str;

    /// The table path, relative to the lake root; must be `artifacts/<name>`.
    /// `<name>` is also the table's name in SQL.
    fn table_path(&self) -> String;

    /// The type's own columns, beyond the common ones every content table has
    /// (`artifact_id`, `origin_step_number`, `metadata`, `external_path`).
    fn columns(&self) -> Vec<ColumnSpec>;

    /// Whether the table is partitioned by `origin_step_number` (default: yes).
    fn partition_by_step(&self) -> bool {
        true
    }

    /// Validate a draft's fields and fill in derived columns (called once, when
    /// a draft is finalized). The default accepts the fields as given.
    fn prepare(&self, _fields: &mut Fields) -> Result<()> {
        Ok(())
    }

    /// The canonical content bytes the id is computed from. The default is the
    /// canonical JSON of all of the type's columns (binary as hex), so two
    /// drafts with equal column values get the same id.
    fn identity_bytes(&self, fields: &Fields) -> Result<Vec<u8>> {
        let object: serde_json::Map<String, serde_json::Value> =
            fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
        super::canonical_json::to_vec(&serde_json::Value::Object(object))
    }

    /// A human-readable rendering of an artifact's content for `sluice show`.
    /// The default pretty-prints the columns as JSON.
    fn render(&self, artifact: &Artifact) -> Result<String> {
        let object: serde_json::Map<String, serde_json::Value> = artifact
            .fields
            .iter()
            .map(|(k, v)| {
                let json = match v {
                    FieldValue::Binary(b) => {
                        serde_json::Value::String(format!("<{} bytes>", b.len()))
                    }
                    other => other.to_json(),
                };
                (k.clone(), json)
            })
            .collect();
        serde_json::to_string_pretty(&object).map_err(|e| Error::json("rendering columns", e))
    }

    /// Write an artifact's content as a file of its own for `sluice get`:
    /// what a user would open (a data artifact's bytes, a metric's JSON).
    /// The default writes the columns as one JSON object (binary as hex),
    /// with a final newline.
    fn export(&self, artifact: &Artifact, out: &mut dyn std::io::Write) -> Result<()> {
        let object: serde_json::Map<String, serde_json::Value> =
            artifact.fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
        let text = super::canonical_json::to_string(&serde_json::Value::Object(object))?;
        writeln!(out, "{text}").map_err(|e| Error::io("<output>", e))
    }
}

/// Resolves a type key to its [`ArtifactType`]: what a draft needs to be
/// finalized. [`TypeRegistry`](crate::registry::TypeRegistry) implements it.
pub trait ArtifactTypes {
    /// The type registered under `key`, or [`Error::UnknownType`].
    fn artifact_type(&self, key: &str) -> Result<&Arc<dyn ArtifactType>>;
}
