//! The files a lake keeps for the `file_ref` outputs of its pipelines.
//!
//! A `command` step's `file_ref` output is a file in the unit's sandbox,
//! which is removed after the unit, so the lake keeps it, at
//! `files/<blake3 of its bytes>/<name>`. Content addressing is what makes
//! this safe: two units of a run that both write `report.txt` with
//! different bytes never overwrite each other (the first reference would
//! silently name the second's bytes), a rerun writing the same bytes writes
//! nothing, and a kept file never changes once a reference names it. On a
//! file system the file is moved there (or copied beside it, synced and
//! renamed into place); in a store it is uploaded, and a put is whole or
//! absent. The reference's `path` is the kept file's absolute path or URL,
//! which the user's own tools open.
//!
//! A file kept by a unit that then failed is referenced by nothing; it
//! stays (content-addressed, a later success of the same bytes reuses it)
//! until `vacuum` collects it past the retention
//! (`maintenance/unreferenced_files.rs`).

use std::path::Path;

use super::io::location::{LakeRoot, StoreRoot};
use super::io::store_area::StoreArea;
use crate::error::{Error, Result};

/// The folder of kept files, below the lake.
pub(crate) const FILES: &str = "files";

/// A file the lake keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Its absolute path, or its URL in the lake's store.
    pub location: String,
    /// BLAKE3 of its bytes, hex.
    pub content_hash: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Keep the local file `file` in the lake as `name` (one path component);
/// `file` is gone (moved) or left (copied) afterwards.
pub(crate) async fn keep(root: &LakeRoot, file: &Path, name: &str) -> Result<Kept> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
        return Err(Error::InvalidInput(format!("`{name}`: not a file name to keep a file as")));
    }
    let (content_hash, size) = crate::artifact::hash_file(file)?;
    let relative = format!("{FILES}/{content_hash}/{name}");
    let location = match root {
        LakeRoot::Local(lake) => keep_on_disk(file, &lake.join(&relative))?,
        LakeRoot::Store(store) => {
            let area = StoreArea::new(store.clone(), "");
            let present = area.meta(&relative).await?;
            if present.is_none_or(|meta| meta.size != size) {
                area.upload(&relative, file).await?;
            }
            format!("{store}{relative}")
        }
    };
    Ok(Kept { location, content_hash, size })
}

/// Move (or copy, sync and rename) `file` to `kept`, unless a file of its
/// content is there already.
fn keep_on_disk(file: &Path, kept: &Path) -> Result<String> {
    let location = || {
        kept.to_str().map(str::to_owned).ok_or_else(|| {
            Error::InvalidInput(format!("{}: path is not valid UTF-8", kept.display()))
        })
    };
    if kept.is_file() {
        return location();
    }
    let dir = kept.parent().expect("a kept file has a folder");
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    if std::fs::rename(file, kept).is_err() {
        // Another file system (the sandbox is outside the lake): copied
        // beside it, made durable, then renamed in whole.
        let name = kept.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let temp = dir.join(format!(".{name}.{}.partial", std::process::id()));
        let copied = std::fs::copy(file, &temp)
            .and_then(|_| std::fs::File::open(&temp)?.sync_all())
            .and_then(|()| std::fs::rename(&temp, kept));
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::io(kept, e));
        }
    }
    location()
}

/// Copy the file `location` names (a path, or a URL in this lake's store)
/// to `to`, and check that its bytes are still the ones `content_hash`
/// names ([`check_referenced`](crate::artifact::check_referenced)); a copy
/// that fails the check is removed.
pub(crate) async fn fetch(
    root: &LakeRoot,
    location: &str,
    content_hash: &str,
    referrer: &str,
    to: &Path,
) -> Result<()> {
    match in_store(root, location)? {
        Some((store, relative)) => {
            let area = StoreArea::new(store.clone(), "");
            if !area.download(relative, to).await? {
                return Err(Error::InvalidInput(format!(
                    "{location}: the referenced file is gone from the store"
                )));
            }
        }
        None => {
            std::fs::copy(location, to).map_err(|e| Error::io(location, e))?;
        }
    }
    let checked = crate::artifact::check_referenced(to, location, content_hash, referrer);
    if checked.is_err() {
        let _ = std::fs::remove_file(to);
    }
    checked
}

/// The store and the object below the lake that `location` names, when it
/// is a URL; a URL outside this lake's store is refused (sluice reads with
/// the lake's credentials only what the lake holds).
fn in_store<'a>(
    root: &'a LakeRoot,
    location: &'a str,
) -> Result<Option<(&'a std::sync::Arc<StoreRoot>, &'a str)>> {
    if !location.contains("://") {
        return Ok(None);
    }
    let LakeRoot::Store(store) = root else {
        return Err(Error::InvalidInput(format!(
            "{location}: a file in an object store, referenced from a lake on disk ({root})"
        )));
    };
    let lake = store.to_string();
    match location.strip_prefix(lake.as_str()) {
        Some(relative) => Ok(Some((store, relative))),
        None => Err(Error::InvalidInput(format!(
            "{location}: a file outside the lake ({lake}); sluice reads a store with the lake's \
             credentials only below the lake"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn sandbox_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[tokio::test]
    async fn two_files_of_one_name_are_kept_apart_and_equal_bytes_once() {
        let lake = tempfile::tempdir().unwrap();
        let sandbox = tempfile::tempdir().unwrap();
        let root = LakeRoot::Local(lake.path().to_path_buf());
        let a =
            keep(&root, &sandbox_file(sandbox.path(), "a", b"one"), "report.txt").await.unwrap();
        let b =
            keep(&root, &sandbox_file(sandbox.path(), "b", b"two"), "report.txt").await.unwrap();
        assert_ne!(a.location, b.location);
        assert_eq!(std::fs::read(&a.location).unwrap(), b"one");
        assert_eq!(std::fs::read(&b.location).unwrap(), b"two");
        assert_eq!((a.size, a.content_hash.as_str()), (3, blake3::hash(b"one").to_hex().as_str()));
        let again =
            keep(&root, &sandbox_file(sandbox.path(), "c", b"one"), "report.txt").await.unwrap();
        assert_eq!(again, a);
        let at = lake.path().join("files").join(&a.content_hash).join("report.txt");
        assert_eq!(a.location, at.to_str().unwrap());

        let to = sandbox.path().join("fetched");
        fetch(&root, &a.location, &a.content_hash, "a", &to).await.unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"one");
        std::fs::write(&b.location, b"TWO").unwrap();
        let err =
            fetch(&root, &b.location, &b.content_hash, "b", &to).await.unwrap_err().to_string();
        assert!(err.contains("the file changed since b referenced it"), "{err}");
        assert!(!to.exists(), "no other bytes are left where the copy was asked for");
    }

    #[tokio::test]
    async fn in_a_store_a_file_is_uploaded_once_and_read_back() {
        let store = StoreRoot::in_memory("s3://bucket/lake/".parse().unwrap());
        let root = LakeRoot::Store(store.clone());
        let sandbox = tempfile::tempdir().unwrap();
        let kept =
            keep(&root, &sandbox_file(sandbox.path(), "x", b"bytes"), "plot.png").await.unwrap();
        let hash = blake3::hash(b"bytes").to_hex().to_string();
        assert_eq!(kept.location, format!("s3://bucket/lake/files/{hash}/plot.png"));
        let area = StoreArea::new(store.clone(), "");
        let before = area.list("").await.unwrap();
        keep(&root, &sandbox_file(sandbox.path(), "y", b"bytes"), "plot.png").await.unwrap();
        assert_eq!(area.list("").await.unwrap(), before, "the same bytes are not written again");

        let to = sandbox.path().join("fetched.png");
        fetch(&root, &kept.location, &hash, "k", &to).await.unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"bytes");
        let outside =
            fetch(&root, "s3://other/x.png", &hash, "k", &to).await.unwrap_err().to_string();
        assert!(outside.contains("outside the lake"), "{outside}");
        let gone = format!("s3://bucket/lake/files/{hash}/missing.png");
        let err = fetch(&root, &gone, &hash, "k", &to).await.unwrap_err().to_string();
        assert!(err.contains("gone from the store"), "{err}");
    }
}
