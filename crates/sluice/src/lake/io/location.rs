//! Where a lake lives, as a user spells it: `--lake`, `SLUICE_LAKE`, or
//! `lake = "…"` in a config.
//!
//! A lake is a folder on a local or shared filesystem, given as a path or a
//! `file://` URL. Any other URL (`s3://`, `az://`, `abfss://`, `gs://`,
//! `https://`) is refused with a message: taken for a path, `s3://bucket/x`
//! silently became a local folder named `s3:` and the user's results went
//! there instead of to their bucket.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lake folder `text` names. The error says why, not `text` (the
/// caller names it: clap, or the config that holds it).
pub fn local_root(text: &str) -> Result<PathBuf> {
    let Some((scheme, _)) = text.split_once("://") else { return Ok(PathBuf::from(text)) };
    let is_scheme = scheme.len() > 1
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    if !is_scheme {
        return Ok(PathBuf::from(text));
    }
    match scheme.to_ascii_lowercase().as_str() {
        "file" => {
            url::Url::parse(text).ok().and_then(|url| url.to_file_path().ok()).ok_or_else(|| {
                Error::InvalidInput(
                    "not a file URL of an absolute path (file:///path/to/lake)".into(),
                )
            })
        }
        "s3" | "s3a" | "az" | "azure" | "abfs" | "abfss" | "adl" | "gs" => {
            Err(Error::InvalidInput(format!(
                "{scheme}:// is an object store: sluice cannot keep a lake there yet; \
                 give a folder on a local or shared filesystem (a path or file:///…)"
            )))
        }
        _ => Err(Error::InvalidInput(format!(
            "{scheme}:// is no place sluice can keep a lake; give a folder \
             on a local or shared filesystem (a path or file:///…)"
        ))),
    }
}

/// [`local_root`] of a path read from a config, which names a URL as a
/// path would.
pub fn local_root_of(path: &Path) -> Result<PathBuf> {
    match path.to_str() {
        Some(text) => local_root(text),
        None => Ok(path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_file_urls_are_folders() {
        assert_eq!(local_root("./lake").unwrap(), PathBuf::from("./lake"));
        assert_eq!(local_root("/data/lake").unwrap(), PathBuf::from("/data/lake"));
        assert_eq!(local_root("file:///data/lake").unwrap(), PathBuf::from("/data/lake"));
        // Not a scheme: a folder whose name holds "://" after a slash.
        assert_eq!(local_root("./a://b").unwrap(), PathBuf::from("./a://b"));
        assert!(local_root("file://relative").is_err());
    }

    #[test]
    fn object_store_and_other_urls_are_refused_never_taken_for_folders() {
        for url in [
            "s3://bucket/lake",
            "az://container/lake",
            "abfss://c@account.dfs.core.windows.net/lake",
            "gs://bucket/lake",
            "https://example.org/lake",
        ] {
            let message = local_root(url).unwrap_err().to_string();
            let scheme = url.split_once("://").unwrap().0;
            assert!(message.starts_with(&format!("{scheme}://")), "{message}");
        }
        assert!(local_root("S3://bucket/lake").unwrap_err().to_string().contains("object store"));
    }
}
