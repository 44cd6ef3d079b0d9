//! `file_ref`: a reference to a file outside the lake.
//!
//! The file is hashed with BLAKE3 in a streaming pass (never read whole into
//! memory); the id covers the content hash, the absolute path and the size, so
//! the same bytes at two paths are two references.

use std::path::Path;

use crate::artifact::value::{ColumnSpec, ColumnType, FieldValue};
use crate::artifact::{Artifact, Draft, Fields};
use crate::error::{Error, Result};
use crate::registry::ArtifactType;

/// The built-in `file_ref` type.
#[derive(Debug, Clone, Copy)]
pub struct FileRefType;

impl ArtifactType for FileRefType {
    fn key(&self) -> &str {
        super::FILE_REF
    }

    fn table_path(&self) -> String {
        "artifacts/file_refs".into()
    }

    fn columns(&self) -> Vec<ColumnSpec> {
        vec![
            ColumnSpec::required("content_hash", ColumnType::String),
            ColumnSpec::required("path", ColumnType::String),
            ColumnSpec::required("size_bytes", ColumnType::Int64),
            ColumnSpec::optional("original_name", ColumnType::String),
            ColumnSpec::optional("extension", ColumnType::String),
        ]
    }

    fn identity_bytes(&self, fields: &Fields) -> Result<Vec<u8>> {
        let get = |name: &str| fields.get(name).map(|v| v.to_json().to_string());
        match (get("content_hash"), get("path"), get("size_bytes")) {
            (Some(hash), Some(path), Some(size)) => {
                Ok(format!("{hash}\0{path}\0{size}").into_bytes())
            }
            _ => Err(Error::invalid_artifact(
                super::FILE_REF,
                "content_hash, path and size_bytes are required",
            )),
        }
    }

    fn render(&self, artifact: &Artifact) -> Result<String> {
        Ok(format!(
            "path:         {}\ncontent_hash: {}\nsize_bytes:   {}",
            artifact.field("path").as_str().unwrap_or_default(),
            artifact.field("content_hash").as_str().unwrap_or_default(),
            artifact.field("size_bytes").as_int().unwrap_or_default(),
        ))
    }
}

/// Hash a file and make a `file_ref` draft of it.
pub fn draft(path: &Path) -> Result<Draft> {
    let absolute = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    let file = std::fs::File::open(&absolute).map_err(|e| Error::io(&absolute, e))?;
    let meta = file.metadata().map_err(|e| Error::io(&absolute, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidInput(format!("{}: not a regular file", absolute.display())));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file).map_err(|e| Error::io(&absolute, e))?;
    let path_text = absolute.to_str().ok_or_else(|| {
        Error::InvalidInput(format!("{}: path is not valid UTF-8", absolute.display()))
    })?;
    let mut draft = Draft::new(
        super::FILE_REF,
        Fields::from([
            ("content_hash".into(), FieldValue::String(hasher.finalize().to_hex().to_string())),
            ("path".into(), FieldValue::String(path_text.to_owned())),
            ("size_bytes".into(), FieldValue::Int(meta.len() as i64)),
        ]),
    );
    if let Some(name) = absolute.file_name().and_then(|n| n.to_str()) {
        draft = draft.with_original_name(name);
    }
    Ok(draft.with_external_path(path_text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TypeRegistry;

    #[test]
    fn hashes_content_and_reports_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello").unwrap();
        let r = TypeRegistry::builtin();
        let a = draft(&path).unwrap().finalize(&r).unwrap();
        assert_eq!(
            a.field("content_hash").as_str(),
            Some(blake3::hash(b"hello").to_hex().as_str())
        );
        assert_eq!(a.field("size_bytes").as_int(), Some(5));
        assert_eq!(a.field("extension").as_str(), Some("txt"));
        std::fs::write(&path, b"hellO").unwrap();
        let b = draft(&path).unwrap().finalize(&r).unwrap();
        assert_ne!(a.id, b.id);
        let err = draft(&dir.path().join("missing.txt")).unwrap_err().to_string();
        assert!(err.contains("missing.txt"), "{err}");
    }
}
