//! A folder in an object store, read and written whole object by object:
//! what the staging area (the lake's `_staging/`) and a landing prefix of
//! ingestion share. Puts are atomic (whole or absent), a put if absent is
//! settled by reading back when its answer is lost ([`log_entry`]), and
//! removals go in batches.
//!
//! Listing is trusted to show every object whose put returned before the
//! listing started: S3 (since December 2020) and Azure Blob Storage list
//! with read-after-write consistency. A listing that races a put may miss
//! it; each user of an area says why that loses nothing.
//!
//! [`log_entry`]: super::log_entry

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;

use super::location::StoreRoot;
use crate::error::{Error, Result};

/// A folder in an object store.
#[derive(Clone)]
pub struct StoreArea {
    lake: Arc<StoreRoot>,
    folder: String,
}

impl std::fmt::Display for StoreArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.folder.as_str() {
            "" => write!(f, "{}", self.lake),
            folder => write!(f, "{}{folder}/", self.lake),
        }
    }
}

impl std::fmt::Debug for StoreArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreArea").field(&self.to_string()).finish()
    }
}

impl StoreArea {
    /// The folder `folder` (`/`-separated, `""` for the root itself) of
    /// the prefix `root`.
    pub(crate) fn new(root: Arc<StoreRoot>, folder: &str) -> StoreArea {
        StoreArea { lake: root, folder: folder.trim_matches('/').to_owned() }
    }

    /// `relative` below the area, relative to the root.
    fn relative(&self, relative: &str) -> String {
        match self.folder.as_str() {
            "" => relative.to_owned(),
            folder => format!("{folder}/{relative}"),
        }
    }

    /// The store object at `relative` below the area. A name as a listing
    /// gave it (a key a user uploaded, with characters object_store would
    /// escape in a part it builds, like `~` or `#`) names that very key;
    /// only a name that is not a valid key is built part by part.
    fn object(&self, relative: &str) -> ObjectPath {
        let base = self.lake.object(&self.folder);
        let relative = relative.trim_matches('/');
        if relative.is_empty() {
            return base;
        }
        ObjectPath::parse(format!("{base}/{relative}"))
            .unwrap_or_else(|_| self.lake.object(&self.relative(relative)))
    }

    /// Where `relative` is, as messages show it.
    pub(crate) fn shown(&self, relative: &str) -> PathBuf {
        PathBuf::from(format!("{self}{relative}"))
    }

    fn failed(&self, doing: &str, relative: &str, source: object_store::Error) -> Error {
        Error::Store { what: format!("{doing} {}", self.shown(relative).display()), source }
    }

    /// Put `bytes` at `relative` (a PUT is atomic: whole or absent).
    pub(crate) async fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<()> {
        self.lake.write_object(&self.object(relative), bytes, &self.shown(relative)).await
    }

    /// Put `bytes` at `relative` unless an object is there: `Ok(true)` when
    /// it holds ours (this call's, or an earlier attempt's whose answer was
    /// lost), `Ok(false)` when another writer's.
    pub(crate) async fn put_if_absent(&self, relative: &str, bytes: &[u8]) -> Result<bool> {
        crate::lake::io::log_entry::put_if_absent(
            self.lake.store().as_ref(),
            &self.object(relative),
            bytes,
        )
        .await
    }

    /// The bytes at `relative`, `None` when absent.
    pub(crate) async fn get(&self, relative: &str) -> Result<Option<Bytes>> {
        self.lake.read_object(&self.object(relative), &self.shown(relative)).await
    }

    /// Whether an object is at `relative`.
    pub(crate) async fn exists(&self, relative: &str) -> Result<bool> {
        self.lake.object_exists(&self.object(relative), &self.shown(relative)).await
    }

    /// What the store says of the object at `relative`, `None` when absent.
    pub(crate) async fn meta(&self, relative: &str) -> Result<Option<object_store::ObjectMeta>> {
        self.lake.object_meta(&self.object(relative), &self.shown(relative)).await
    }

    /// The names (below the area) of every object below `relative` (a
    /// folder; `""` for the whole area), sorted.
    pub(crate) async fn list(&self, relative: &str) -> Result<Vec<String>> {
        Ok(self.listed(relative).await?.into_iter().map(|(name, _)| name).collect())
    }

    /// [`list`](Self::list), each name with the time the store says its
    /// object was last written.
    pub(crate) async fn list_dated(&self, relative: &str) -> Result<Vec<(String, DateTime<Utc>)>> {
        let listed = self.listed(relative).await?;
        Ok(listed.into_iter().map(|(name, meta)| (name, meta.last_modified)).collect())
    }

    /// [`list`](Self::list), each name with its object's size in bytes.
    pub(crate) async fn list_sized(&self, relative: &str) -> Result<Vec<(String, u64)>> {
        Ok(self.listed(relative).await?.into_iter().map(|(name, meta)| (name, meta.size)).collect())
    }

    /// The objects below `relative`, by name relative to the area, sorted.
    async fn listed(&self, relative: &str) -> Result<Vec<(String, object_store::ObjectMeta)>> {
        let base = self.object("");
        let prefix = self.object(relative);
        let found: Vec<object_store::ObjectMeta> = self
            .lake
            .store()
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| self.failed("listing", relative, e))?;
        let mut out: Vec<(String, object_store::ObjectMeta)> = found
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.prefix_match(&base)?;
                let name = name.map(|p| p.as_ref().to_owned()).collect::<Vec<_>>().join("/");
                Some((name, meta))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The folders and the objects directly in the folder `relative` (one
    /// listing with a delimiter: nothing deeper is listed), by name.
    pub(crate) async fn children(&self, relative: &str) -> Result<(Vec<String>, Vec<String>)> {
        let folder = self.object(relative);
        let listed = self
            .lake
            .store()
            .list_with_delimiter(Some(&folder))
            .await
            .map_err(|e| self.failed("listing", relative, e))?;
        let name = |p: &ObjectPath| p.filename().map(str::to_owned);
        let mut folders: Vec<String> = listed.common_prefixes.iter().filter_map(name).collect();
        let mut files: Vec<String> =
            listed.objects.iter().filter_map(|m| name(&m.location)).collect();
        folders.sort();
        files.sort();
        Ok((folders, files))
    }

    /// Stream the object at `relative` into the local file `to` (memory
    /// stays bounded whatever its size). `Ok(false)` when there is no such
    /// object.
    pub(crate) async fn download(&self, relative: &str, to: &std::path::Path) -> Result<bool> {
        use tokio::io::AsyncWriteExt;
        let got = match self.lake.store().get(&self.object(relative)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.failed("reading", relative, e)),
        };
        if let Some(parent) = to.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io(parent, e))?;
        }
        let mut file = tokio::fs::File::create(to).await.map_err(|e| Error::io(to, e))?;
        let mut stream = got.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.failed("reading", relative, e))?;
            file.write_all(&chunk).await.map_err(|e| Error::io(to, e))?;
        }
        file.flush().await.map_err(|e| Error::io(to, e))?;
        Ok(true)
    }

    /// Write the local file `from` as the object at `relative`, streamed
    /// (one PUT, or a multipart upload for a large file: either way the
    /// object appears whole or not at all). A failure to read `from` is the
    /// file's ([`Error::Io`]), a failure to write the object the store's
    /// ([`Error::Store`]); either way nothing is left in the store.
    pub(crate) async fn upload(&self, relative: &str, from: &std::path::Path) -> Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut file = tokio::fs::File::open(from).await.map_err(|e| Error::io(from, e))?;
        let mut writer = object_store::buffered::BufWriter::new(
            self.lake.store().clone(),
            self.object(relative),
        );
        let stored = |e: std::io::Error| Error::Store {
            what: format!("writing {} from {}", self.shown(relative).display(), from.display()),
            source: match e.downcast::<object_store::Error>() {
                Ok(store) => store,
                Err(e) => object_store::Error::Generic { store: "sluice", source: Box::new(e) },
            },
        };
        let mut buffer = vec![0u8; UPLOAD_READ_BYTES];
        let copied = async {
            loop {
                let n = file.read(&mut buffer).await.map_err(|e| Error::io(from, e))?;
                if n == 0 {
                    return writer.shutdown().await.map_err(stored);
                }
                writer.write_all(&buffer[..n]).await.map_err(stored)?;
            }
        }
        .await;
        if copied.is_err() {
            let _ = writer.abort().await;
        }
        copied
    }

    /// Remove the object at `relative` (absent is fine).
    pub(crate) async fn delete(&self, relative: &str) -> Result<()> {
        self.delete_many(vec![relative.to_owned()]).await
    }

    /// Remove the objects at `relatives` (absent ones are fine), in as few
    /// requests as the store allows (S3 and Azure delete in batches). A
    /// removal is idempotent, so a batch that fails (Azure's batch POST is
    /// not retried by the client: a connection the emulator closed fails
    /// it) is sent again, up to [`DELETE_ATTEMPTS`] times.
    pub(crate) async fn delete_many(&self, relatives: Vec<String>) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let locations: Vec<object_store::Result<ObjectPath>> =
                relatives.iter().map(|r| Ok(self.object(r))).collect();
            let outcome: object_store::Result<Vec<ObjectPath>> = self
                .lake
                .store()
                .delete_stream(futures::stream::iter(locations).boxed())
                .or_else(|e| async move {
                    match e {
                        object_store::Error::NotFound { path, .. } => Ok(ObjectPath::from(path)),
                        e => Err(e),
                    }
                })
                .try_collect()
                .await;
            match outcome {
                Ok(_) => return Ok(()),
                Err(e) if attempt < DELETE_ATTEMPTS => {
                    tracing::debug!(error = %e, attempt, "removing staged objects failed; again");
                    tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                }
                Err(e) => {
                    let first = relatives.first().map_or("", String::as_str);
                    return Err(self.failed("removing", first, e));
                }
            }
        }
    }

    /// Remove every object below the folder `relative`.
    pub(crate) async fn delete_folder(&self, relative: &str) -> Result<()> {
        let folder = format!("{}/", relative.trim_end_matches('/'));
        let listed: Vec<String> = self.list(&folder).await?;
        if listed.is_empty() { Ok(()) } else { self.delete_many(listed).await }
    }

    /// Copy the object at `from` to `to` (both below the area).
    pub(crate) async fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.lake
            .store()
            .copy(&self.object(from), &self.object(to))
            .await
            .map_err(|e| self.failed("copying", from, e))
    }
}

/// How many times a batch of removals is sent before its failure is
/// reported.
const DELETE_ATTEMPTS: u32 = 4;

/// Bytes of a local file read at a time by [`StoreArea::upload`].
const UPLOAD_READ_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn area(name: &str) -> StoreArea {
        let url = url::Url::parse(&format!("memory://area-{name}/lake/")).unwrap();
        StoreArea::new(StoreRoot::in_memory(url), "files")
    }

    #[tokio::test]
    async fn an_upload_larger_than_one_read_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.bin");
        let bytes: Vec<u8> = (0..(UPLOAD_READ_BYTES * 3 + 17)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &bytes).unwrap();
        let area = area("whole");
        area.upload("h/big.bin", &file).await.unwrap();
        assert_eq!(area.get("h/big.bin").await.unwrap().unwrap().as_ref(), bytes.as_slice());
    }

    #[tokio::test]
    async fn a_local_file_that_cannot_be_read_is_named_as_the_files_error_and_nothing_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let area = area("unreadable");
        // A folder opens but does not read; a missing file does not open.
        for from in [dir.path().to_path_buf(), dir.path().join("absent")] {
            let err = area.upload("h/x", &from).await.unwrap_err();
            match &err {
                Error::Io { path, .. } => assert_eq!(path, &from),
                other => panic!("not the file's error: {other:?}"),
            }
            assert!(area.meta("h/x").await.unwrap().is_none());
        }
    }
}
