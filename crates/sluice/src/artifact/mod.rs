//! Artifacts: drafts, finalized artifacts and their content identity.
//!
//! An artifact begins as a [`Draft`]: a type key, the type's column values,
//! metadata and the step that produced it. [`Draft::finalize`] lets the type
//! validate and derive its columns, then computes the content-addressed
//! [`ArtifactId`]. Only finalized [`Artifact`]s are written to the lake.
//!
//! ```text
//!   Draft ──prepare──▶ fields checked ──identity_bytes──▶ BLAKE3 ──▶ Artifact{id}
//! ```

pub mod arrow_convert;
mod artifact_type;
pub mod canonical_json;
pub mod data_format;
pub mod id;
pub mod value;

use std::collections::BTreeMap;
use std::path::Path;

pub use artifact_type::{ArtifactType, ArtifactTypes};
pub use data_format::DataFormat;
pub use id::ArtifactId;
pub use value::{ColumnSpec, ColumnType, FieldValue};

use crate::error::{Error, Result};

/// Key of the built-in metric type.
pub const METRIC: &str = "metric";
/// Key of the built-in config type.
pub const CONFIG: &str = "config";
/// Key of the built-in data type.
pub const DATA: &str = "data";
/// Key of the built-in file reference type.
pub const FILE_REF: &str = "file_ref";

/// The values of a type's own columns, by column name.
pub type Fields = BTreeMap<String, FieldValue>;

/// JSON metadata attached to an artifact (not part of its identity).
pub type Metadata = serde_json::Map<String, serde_json::Value>;

/// An artifact that has not been given its id yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    type_key: String,
    fields: Fields,
    metadata: Metadata,
    origin_step_number: i32,
    external_path: Option<String>,
}

impl Draft {
    /// A draft of any registered type from its column values.
    pub fn new(type_key: impl Into<String>, fields: Fields) -> Self {
        Draft {
            type_key: type_key.into(),
            fields,
            metadata: Metadata::new(),
            origin_step_number: 0,
            external_path: None,
        }
    }

    /// A metric: a JSON object of named values.
    pub fn metric(values: serde_json::Value) -> Result<Self> {
        if !values.is_object() {
            return Err(Error::invalid_artifact(
                METRIC,
                "a metric must be a JSON object of named values",
            ));
        }
        Self::json_content(METRIC, &values)
    }

    /// A config: any JSON document.
    pub fn config(document: serde_json::Value) -> Result<Self> {
        Self::json_content(CONFIG, &document)
    }

    fn json_content(type_key: &str, value: &serde_json::Value) -> Result<Self> {
        let content = canonical_json::to_string(value)?;
        Ok(Draft::new(
            type_key,
            Fields::from([("content".to_owned(), FieldValue::String(content))]),
        ))
    }

    /// Tabular data from bytes in a known format. Columns and row count are
    /// derived when the draft is finalized.
    pub fn data(bytes: Vec<u8>, format: DataFormat) -> Self {
        Draft::new(
            DATA,
            Fields::from([
                ("content".to_owned(), FieldValue::Binary(bytes)),
                ("format".to_owned(), FieldValue::String(format.name().to_owned())),
            ]),
        )
    }

    /// Tabular data read from a file; the format is taken from its extension
    /// (`.csv`, `.parquet`, `.arrow`/`.ipc`/`.feather`).
    pub fn data_from_file(path: &Path) -> Result<Self> {
        let format = DataFormat::from_path(path)?;
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let mut draft = Draft::data(bytes, format);
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            draft = draft.with_original_name(name);
        }
        Ok(draft)
    }

    /// A reference to a file outside the lake, identified by its content hash,
    /// path and size. The file is hashed here, streamed in chunks.
    pub fn file_ref(path: &Path) -> Result<Self> {
        let absolute = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        let meta = std::fs::metadata(&absolute).map_err(|e| Error::io(&absolute, e))?;
        if !meta.is_file() {
            return Err(Error::InvalidInput(format!("{}: not a regular file", absolute.display())));
        }
        let (content_hash, size) = hash_file(&absolute)?;
        let path_text = absolute.to_str().ok_or_else(|| {
            Error::InvalidInput(format!("{}: path is not valid UTF-8", absolute.display()))
        })?;
        let name = absolute.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        Ok(Self::kept_file(path_text, &content_hash, size, name))
    }

    /// A reference to a file whose hash and size are known: one the lake
    /// keeps (at an absolute path, or a URL in its store).
    pub(crate) fn kept_file(location: &str, content_hash: &str, size: u64, name: &str) -> Self {
        let mut draft = Draft::new(
            FILE_REF,
            Fields::from([
                ("content_hash".into(), FieldValue::String(content_hash.to_owned())),
                ("path".into(), FieldValue::String(location.to_owned())),
                ("size_bytes".into(), FieldValue::Int(size as i64)),
            ]),
        );
        if !name.is_empty() {
            draft = draft.with_original_name(name);
        }
        draft.with_external_path(location)
    }

    /// A draft of any registered type from a JSON object of its columns
    /// (how custom types are given on the command line and by `command`
    /// operations).
    pub fn from_json_object(
        types: &(impl ArtifactTypes + ?Sized),
        type_key: &str,
        value: &serde_json::Value,
    ) -> Result<Self> {
        let columns = types.artifact_type(type_key)?.columns();
        let serde_json::Value::Object(object) = value else {
            return Err(Error::invalid_artifact(
                type_key,
                "expected a JSON object of the type's columns",
            ));
        };
        let mut fields = Fields::new();
        for (name, v) in object {
            let column = columns.iter().find(|c| &c.name == name).ok_or_else(|| {
                Error::invalid_artifact(
                    type_key,
                    format!(
                        "unknown column `{name}` (the type's columns are: {})",
                        names(&columns)
                    ),
                )
            })?;
            fields.insert(name.clone(), FieldValue::from_json(v, column)?);
        }
        Ok(Draft::new(type_key, fields))
    }

    /// Set the step that produced the artifact (partition column; not hashed).
    #[must_use]
    pub fn with_step(mut self, origin_step_number: i32) -> Self {
        self.origin_step_number = origin_step_number;
        self
    }

    /// Attach JSON metadata (not hashed).
    #[must_use]
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// Record where the content came from outside the lake (not hashed).
    #[must_use]
    pub fn with_external_path(mut self, path: impl Into<String>) -> Self {
        self.external_path = Some(path.into());
        self
    }

    /// Set `original_name` and `extension` (for types that have those columns;
    /// not hashed). An extension that is not a plain file extension (see
    /// [`valid_extension`]) is left out.
    #[must_use]
    pub fn with_original_name(mut self, name: &str) -> Self {
        let extension = Path::new(name)
            .extension()
            .and_then(|e| e.to_str())
            .filter(|e| valid_extension(e))
            .map(str::to_owned);
        self.fields.insert("original_name".into(), FieldValue::String(name.to_owned()));
        self.fields
            .insert("extension".into(), extension.map_or(FieldValue::Null, FieldValue::String));
        self
    }

    /// Set one column value.
    #[must_use]
    pub fn with_field(mut self, column: impl Into<String>, value: FieldValue) -> Self {
        self.fields.insert(column.into(), value);
        self
    }

    /// The draft's type key.
    pub fn type_key(&self) -> &str {
        &self.type_key
    }

    /// Validate the draft against its type and compute its id.
    pub fn finalize(self, types: &(impl ArtifactTypes + ?Sized)) -> Result<Artifact> {
        let imp = types.artifact_type(&self.type_key)?;
        let columns = imp.columns();
        let mut fields = self.fields;
        imp.prepare(&mut fields)?;
        if let Some(unknown) = fields.keys().find(|k| !columns.iter().any(|c| &c.name == *k)) {
            return Err(Error::invalid_artifact(
                &self.type_key,
                format!("unknown column `{unknown}` (the type's columns are: {})", names(&columns)),
            ));
        }
        if let Some(FieldValue::String(ext)) = fields.get("extension")
            && !valid_extension(ext)
        {
            return Err(Error::invalid_artifact(
                &self.type_key,
                format!(
                    "extension {ext:?} is not a file extension (1-16 ASCII letters, digits, `_` or `-`); \
                     it names files when the artifact is materialized"
                ),
            ));
        }
        for column in &columns {
            let value = fields.entry(column.name.clone()).or_insert(FieldValue::Null);
            if let (FieldValue::Int(i), ColumnType::Float64) = (&*value, column.column_type) {
                *value = FieldValue::Float(*i as f64);
            }
            value.check(column).map_err(|source| Error::InvalidValue {
                type_key: self.type_key.clone(),
                source,
            })?;
        }
        let id = ArtifactId::compute(&self.type_key, &imp.identity_bytes(&fields)?);
        Ok(Artifact {
            id,
            type_key: self.type_key,
            origin_step_number: self.origin_step_number,
            metadata: self.metadata,
            external_path: self.external_path,
            fields,
        })
    }
}

/// Whether `ext` can be a file extension sluice writes: 1-16 ASCII letters,
/// digits, `_` or `-` (no dots, separators or anything a shell or a path
/// would read).
pub fn valid_extension(ext: &str) -> bool {
    (1..=16).contains(&ext.len())
        && ext.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn names(columns: &[ColumnSpec]) -> String {
    columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// A finalized, content-addressed artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    /// Content-derived id.
    pub id: ArtifactId,
    /// Type key.
    pub type_key: String,
    /// The pipeline step that produced it.
    pub origin_step_number: i32,
    /// JSON metadata.
    pub metadata: Metadata,
    /// Where the content came from outside the lake, if anywhere.
    pub external_path: Option<String>,
    /// The type's own column values.
    pub fields: Fields,
}

impl Artifact {
    /// A column value (`Null` if the column does not exist).
    pub fn field(&self, name: &str) -> &FieldValue {
        self.fields.get(name).unwrap_or(&FieldValue::Null)
    }

    /// The parsed JSON content of a metric or config artifact.
    pub fn json_content(&self) -> Result<serde_json::Value> {
        let text = self.field("content").as_str().ok_or_else(|| {
            Error::invalid_artifact(
                &self.type_key,
                format!("artifact {} has no JSON content", self.id),
            )
        })?;
        serde_json::from_str(text)
            .map_err(|e| Error::json(format!("content of artifact {}", self.id), e))
    }
}

/// BLAKE3 (hex) and size of the file at `path`, streamed in chunks (never
/// read whole into memory).
pub(crate) fn hash_file(path: &Path) -> Result<(String, u64)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file).map_err(|e| Error::io(path, e))?;
    Ok((hasher.finalize().to_hex().to_string(), hasher.count()))
}

/// Check that the file at `path` (shown as `shown`) still holds the bytes
/// `content_hash` names: a file changed or moved since `referrer`
/// referenced it is an error naming it, never silently other content.
pub(crate) fn check_referenced(
    path: &Path,
    shown: &str,
    content_hash: &str,
    referrer: &str,
) -> Result<()> {
    if hash_file(path)?.0 == content_hash {
        return Ok(());
    }
    Err(Error::InvalidInput(format!(
        "{shown}: the file changed since {referrer} referenced it (its BLAKE3 is no longer \
         {content_hash})"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TypeRegistry;
    use serde_json::json;

    #[test]
    fn metric_and_config_ids_are_domain_separated() {
        let r = TypeRegistry::builtin();
        let m = Draft::metric(json!({"a": 1})).unwrap().finalize(&r).unwrap();
        let c = Draft::config(json!({"a": 1})).unwrap().finalize(&r).unwrap();
        assert_ne!(m.id, c.id);
    }

    #[test]
    fn metadata_names_and_steps_do_not_change_the_id() {
        let r = TypeRegistry::builtin();
        let a = Draft::metric(json!({"a": 1, "b": 2.5})).unwrap().finalize(&r).unwrap();
        let mut meta = Metadata::new();
        meta.insert("run".into(), json!("x"));
        let b = Draft::metric(json!({"b": 2.5, "a": 1.0}))
            .unwrap()
            .with_step(7)
            .with_metadata(meta)
            .with_original_name("m.json")
            .finalize(&r)
            .unwrap();
        assert_eq!(a.id, b.id);
        assert_eq!(b.field("extension"), &FieldValue::String("json".into()));
    }

    #[test]
    fn metric_must_be_an_object() {
        let err = Draft::metric(json!([1, 2])).unwrap_err().to_string();
        assert!(err.contains("JSON object"), "{err}");
    }

    #[test]
    fn unknown_and_mistyped_columns_are_rejected() {
        let r = TypeRegistry::builtin();
        let err = Draft::metric(json!({}))
            .unwrap()
            .with_field("colour", FieldValue::Int(1))
            .finalize(&r)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown column `colour`"), "{err}");
        let err = Draft::new("metric", Fields::new()).finalize(&r).unwrap_err().to_string();
        assert!(err.contains("`content` is required"), "{err}");
        let err = Draft::new("nope", Fields::new()).finalize(&r).unwrap_err().to_string();
        assert!(err.contains("unknown artifact type `nope`"), "{err}");
    }
}
