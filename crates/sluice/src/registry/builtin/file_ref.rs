//! `file_ref`: a reference to a file outside the lake.
//!
//! The file is hashed with BLAKE3 in a streaming pass (never read whole into
//! memory); the id covers the content hash, the absolute path and the size, so
//! the same bytes at two paths are two references.

use crate::artifact::ArtifactType;
use crate::artifact::value::{ColumnSpec, ColumnType};
use crate::artifact::{Artifact, Fields};
use crate::error::{Error, Result};

/// The built-in `file_ref` type.
#[derive(Debug, Clone, Copy)]
pub struct FileRefType;

impl ArtifactType for FileRefType {
    fn key(&self) -> &str {
        crate::artifact::FILE_REF
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
                crate::artifact::FILE_REF,
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

    /// The referenced file's bytes, once they are checked to be the ones
    /// referenced: a file changed or moved since is an error naming it,
    /// never silently other content.
    fn export(&self, artifact: &Artifact, out: &mut dyn std::io::Write) -> Result<()> {
        let path = std::path::PathBuf::from(artifact.field("path").as_str().unwrap_or_default());
        crate::artifact::check_referenced(
            &path,
            &path.display().to_string(),
            artifact.field("content_hash").as_str().unwrap_or_default(),
            &format!("artifact {}", artifact.id),
        )?;
        let mut file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        std::io::copy(&mut file, out).map_err(|e| Error::io(&path, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::artifact::Draft;
    use crate::registry::TypeRegistry;

    #[test]
    fn hashes_content_and_reports_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello").unwrap();
        let r = TypeRegistry::builtin();
        let a = Draft::file_ref(&path).unwrap().finalize(&r).unwrap();
        assert_eq!(
            a.field("content_hash").as_str(),
            Some(blake3::hash(b"hello").to_hex().as_str())
        );
        assert_eq!(a.field("size_bytes").as_int(), Some(5));
        assert_eq!(a.field("extension").as_str(), Some("txt"));
        std::fs::write(&path, b"hellO").unwrap();
        let b = Draft::file_ref(&path).unwrap().finalize(&r).unwrap();
        assert_ne!(a.id, b.id);
        let err = Draft::file_ref(&dir.path().join("missing.txt")).unwrap_err().to_string();
        assert!(err.contains("missing.txt"), "{err}");
    }
}
