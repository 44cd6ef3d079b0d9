//! Artifact types declared in a lake's `sluice.toml`, without writing Rust.
//!
//! ```toml
//! [[artifact_type]]
//! key = "embedding"                       # the type key, hashed into ids
//! table = "artifacts/embeddings"          # `embeddings` in SQL
//! partition_by_step = true                # default
//! identity = ["model", "vector"]          # columns hashed into the id; default: all
//! columns = [
//!   { name = "model",  type = "string" },
//!   { name = "dims",   type = "int32" },
//!   { name = "vector", type = "binary" },
//!   { name = "note",   type = "string", nullable = true },
//! ]
//! ```
//!
//! Column types: `string`, `binary`, `bool`, `int32`, `int64`, `float64`,
//! `timestamp` (UTC, µs) and `json` (stored as canonical JSON text).

use serde::Deserialize;

use super::ArtifactType;
use crate::artifact::Fields;
use crate::artifact::value::{ColumnSpec, ColumnType};
use crate::error::{Error, Result};

/// One `[[artifact_type]]` entry of `sluice.toml`, as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredTypeSpec {
    /// Type key.
    pub key: String,
    /// Table path, `artifacts/<name>`.
    pub table: String,
    /// Partition by `origin_step_number` (default true).
    #[serde(default = "default_true")]
    pub partition_by_step: bool,
    /// Columns hashed into the id (default: all columns).
    #[serde(default)]
    pub identity: Option<Vec<String>>,
    /// The type's own columns.
    #[serde(default)]
    pub columns: Vec<DeclaredColumn>,
}

/// One column of a declared type, as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredColumn {
    /// Column name.
    pub name: String,
    /// Column type name.
    #[serde(rename = "type")]
    pub column_type: String,
    /// Whether the column may be null (default false).
    #[serde(default)]
    pub nullable: bool,
}

fn default_true() -> bool {
    true
}

/// A validated type declared in `sluice.toml`.
#[derive(Debug, Clone)]
pub struct DeclaredType {
    key: String,
    table: String,
    partition_by_step: bool,
    identity: Vec<String>,
    columns: Vec<ColumnSpec>,
}

impl DeclaredType {
    /// Validate a declaration: known column types, identity columns that exist.
    pub fn try_new(spec: &DeclaredTypeSpec) -> Result<Self> {
        let mut columns = Vec::with_capacity(spec.columns.len());
        for c in &spec.columns {
            let column_type: ColumnType =
                c.column_type.parse().map_err(|e: crate::artifact::value::UnknownColumnType| {
                    Error::registry(&spec.key, format!("column `{}`: {e}", c.name))
                })?;
            columns.push(ColumnSpec { name: c.name.clone(), column_type, nullable: c.nullable });
        }
        let identity = match &spec.identity {
            Some(names) => {
                if names.is_empty() {
                    return Err(Error::registry(
                        &spec.key,
                        "`identity` must name at least one column",
                    ));
                }
                for name in names {
                    if !columns.iter().any(|c| &c.name == name) {
                        return Err(Error::registry(
                            &spec.key,
                            format!("identity column `{name}` is not one of the type's columns"),
                        ));
                    }
                }
                names.clone()
            }
            None => columns.iter().map(|c| c.name.clone()).collect(),
        };
        Ok(DeclaredType {
            key: spec.key.clone(),
            table: spec.table.clone(),
            partition_by_step: spec.partition_by_step,
            identity,
            columns,
        })
    }
}

impl ArtifactType for DeclaredType {
    fn key(&self) -> &str {
        &self.key
    }

    fn table_path(&self) -> String {
        self.table.clone()
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        self.columns.clone()
    }

    fn partition_by_step(&self) -> bool {
        self.partition_by_step
    }

    fn identity_bytes(&self, fields: &Fields) -> Result<Vec<u8>> {
        let object: serde_json::Map<String, serde_json::Value> = self
            .identity
            .iter()
            .map(|name| {
                let value = fields.get(name).map_or(serde_json::Value::Null, |v| v.to_json());
                (name.clone(), value)
            })
            .collect();
        crate::artifact::canonical_json::to_vec(&serde_json::Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> DeclaredTypeSpec {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn unknown_column_type_is_a_registration_error() {
        let s = spec(
            r#"key = "x"
               table = "artifacts/xs"
               columns = [{ name = "a", type = "decimal" }]"#,
        );
        let err = DeclaredType::try_new(&s).unwrap_err().to_string();
        assert!(
            err.contains("`x`") && err.contains("column `a`") && err.contains("decimal"),
            "{err}"
        );
    }

    #[test]
    fn identity_must_name_existing_columns() {
        let s = spec(
            r#"key = "x"
               table = "artifacts/xs"
               identity = ["b"]
               columns = [{ name = "a", type = "string" }]"#,
        );
        let err = DeclaredType::try_new(&s).unwrap_err().to_string();
        assert!(err.contains("identity column `b`"), "{err}");
    }
}
