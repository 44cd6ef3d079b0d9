//! `metric` and `config`: JSON content, identified by its canonical form.

use crate::artifact::ArtifactType;
use crate::artifact::value::{ColumnSpec, ColumnType, FieldValue};
use crate::artifact::{Artifact, Fields, canonical_json};
use crate::error::{Error, Result};

/// A type whose content is one JSON document (metric: an object of named
/// values; config: any document).
#[derive(Debug, Clone, Copy)]
pub struct JsonDocType {
    key: &'static str,
    table: &'static str,
    object_only: bool,
}

impl JsonDocType {
    /// The built-in `metric` type.
    pub const fn metric() -> Self {
        JsonDocType { key: crate::artifact::METRIC, table: "artifacts/metrics", object_only: true }
    }

    /// The built-in `config` type.
    pub const fn config() -> Self {
        JsonDocType { key: crate::artifact::CONFIG, table: "artifacts/configs", object_only: false }
    }
}

impl ArtifactType for JsonDocType {
    fn key(&self) -> &str {
        self.key
    }

    fn table_path(&self) -> String {
        self.table.into()
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        vec![
            ColumnSpec::required("content", ColumnType::String),
            ColumnSpec::optional("original_name", ColumnType::String),
            ColumnSpec::optional("extension", ColumnType::String),
        ]
    }

    /// Re-canonicalizes the content, so a draft built from raw JSON text gets
    /// the same id as one built from a value.
    fn prepare(&self, fields: &mut Fields) -> Result<()> {
        let Some(FieldValue::String(text)) = fields.get("content") else {
            return Ok(()); // the column check reports the missing content
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid_artifact(self.key, format!("content is not valid JSON: {e}"))
        })?;
        if self.object_only && !value.is_object() {
            return Err(Error::invalid_artifact(
                self.key,
                "a metric must be a JSON object of named values",
            ));
        }
        let canonical = canonical_json::to_string(&value)?;
        fields.insert("content".into(), FieldValue::String(canonical));
        Ok(())
    }

    fn identity_bytes(&self, fields: &Fields) -> Result<Vec<u8>> {
        match fields.get("content") {
            Some(FieldValue::String(text)) => Ok(text.as_bytes().to_vec()),
            _ => Err(Error::invalid_artifact(self.key, "content is missing")),
        }
    }

    fn render(&self, artifact: &Artifact) -> Result<String> {
        let value = artifact.json_content()?;
        serde_json::to_string_pretty(&value).map_err(|e| Error::json("rendering content", e))
    }

    /// The canonical JSON the id was computed from, and a newline.
    fn export(&self, artifact: &Artifact, out: &mut dyn std::io::Write) -> Result<()> {
        let text = artifact.field("content").as_str().unwrap_or_default();
        writeln!(out, "{text}").map_err(|e| Error::io("<output>", e))
    }
}
