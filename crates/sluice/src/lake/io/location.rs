//! Where a lake lives, as a user spells it: `--lake`, `SLUICE_LAKE`, or
//! `lake = "…"` in a config.
//!
//! A lake is a folder on a local or shared filesystem, given as a path or a
//! `file://` URL, or a prefix in an object store ([`LakeRoot::Store`]:
//! `s3://`, `az://`, `abfss://` and their spellings, see
//! [`storage`](super::storage)). Any other URL (`gs://`, `https://`) is
//! refused with a message: taken for a path, `s3://bucket/x` once silently
//! became a local folder named `s3:` and the user's results went there
//! instead of to their bucket.
//!
//! Google Cloud Storage is refused rather than compiled in untested: no
//! emulator honours its conditional writes reliably enough to prove the
//! commit protocol against, and a lake whose guarantees were never tested
//! on its store is not one sluice offers.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;
use url::Url;

use crate::error::{Error, Result};

/// Where a lake lives.
#[derive(Clone)]
pub enum LakeRoot {
    /// A folder on a local or shared filesystem (absolute).
    Local(PathBuf),
    /// A prefix in an object store.
    Store(Arc<StoreRoot>),
}

/// A lake's prefix in an object store, and the store.
pub struct StoreRoot {
    /// The lake's URL, ending in `/`.
    url: Url,
    /// Options for the store, as object_store and delta-rs spell them (on
    /// top of what the environment gives).
    options: HashMap<String, String>,
    /// The bucket or container.
    store: Arc<dyn ObjectStore>,
    /// The lake's prefix in it.
    prefix: object_store::path::Path,
}

impl LakeRoot {
    /// The lake `text` names; a relative path is made absolute.
    /// A store lake's options come from the environment.
    pub fn parse(text: &str) -> Result<LakeRoot> {
        Self::parse_with(text, HashMap::new())
    }

    /// [`LakeRoot::parse`], a store lake taking `options` on top of the
    /// environment's (a folder has none to take: the caller says whether
    /// options given for one are a mistake).
    pub fn parse_with(text: &str, options: HashMap<String, String>) -> Result<LakeRoot> {
        match scheme_of(text) {
            Some(scheme) if super::storage::is_store_scheme(&scheme) => {
                let url = Url::parse(text)
                    .map_err(|e| Error::InvalidInput(format!("{scheme}:// lake URL: {e}")))?;
                Self::store(url, options)
            }
            _ => {
                let path = local_root(text)?;
                let absolute = std::path::absolute(&path).map_err(|e| Error::io(&path, e))?;
                Ok(LakeRoot::Local(absolute))
            }
        }
    }

    /// A lake at `url` in an object store.
    pub fn store(mut url: Url, options: HashMap<String, String>) -> Result<LakeRoot> {
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        let store = super::storage::store_for(&url, &options)?;
        let prefix = object_store::path::Path::from_url_path(url.path()).map_err(|e| {
            Error::InvalidInput(format!("{}: {e}", super::storage::without_secrets(&url)))
        })?;
        Ok(LakeRoot::Store(Arc::new(StoreRoot { url, options, store, prefix })))
    }

    /// The folder, for a lake on a filesystem.
    pub fn local(&self) -> Option<&Path> {
        match self {
            LakeRoot::Local(path) => Some(path),
            LakeRoot::Store(_) => None,
        }
    }

    /// The folder, or an error saying that `what` needs one.
    pub fn filesystem(&self, what: &str) -> Result<&Path> {
        self.local()
            .ok_or_else(|| Error::NeedsFilesystem { what: what.to_owned(), lake: self.to_string() })
    }

    /// The store, for a lake in one.
    pub fn store_root(&self) -> Option<&StoreRoot> {
        match self {
            LakeRoot::Local(_) => None,
            LakeRoot::Store(store) => Some(store),
        }
    }

    /// The URL of the folder at `relative` (`/`-separated) in the lake.
    pub fn url_of(&self, relative: &str) -> Result<Url> {
        match self {
            LakeRoot::Local(root) => {
                let dir = root.join(relative);
                let dir = std::path::absolute(&dir).map_err(|e| Error::io(&dir, e))?;
                Url::from_directory_path(&dir).map_err(|()| {
                    Error::InvalidInput(format!(
                        "{}: cannot be used as a table location",
                        dir.display()
                    ))
                })
            }
            LakeRoot::Store(store) => store
                .url
                .join(&format!("{}/", relative.trim_matches('/')))
                .map_err(|e| Error::InvalidInput(format!("{store}{relative}: {e}"))),
        }
    }

    /// The bytes of the small file at `relative` in the lake (`None` when
    /// there is none): a setting or a mark of the lake's own, not a table.
    pub async fn read_file(&self, relative: &str) -> Result<Option<bytes::Bytes>> {
        match self {
            LakeRoot::Local(root) => match std::fs::read(root.join(relative)) {
                Ok(bytes) => Ok(Some(bytes.into())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(Error::io(root.join(relative), e)),
            },
            LakeRoot::Store(store) => {
                store.read_object(&store.object(relative), &self.shown(relative)).await
            }
        }
    }

    /// Write the small file at `relative` whole (a reader never sees part
    /// of it: a rename on a filesystem, one PUT on a store).
    pub async fn write_file(&self, relative: &str, bytes: Vec<u8>) -> Result<()> {
        match self {
            LakeRoot::Local(root) => {
                let path = root.join(relative);
                let tmp = root.join(format!(".{relative}.tmp-{}", std::process::id()));
                std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
                std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))
            }
            LakeRoot::Store(store) => {
                store.write_object(&store.object(relative), bytes, &self.shown(relative)).await
            }
        }
    }

    /// Remove the small file at `relative`, if it is there.
    pub async fn remove_file(&self, relative: &str) -> Result<()> {
        match self {
            LakeRoot::Local(root) => match std::fs::remove_file(root.join(relative)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::io(root.join(relative), e))
                }
                _ => Ok(()),
            },
            LakeRoot::Store(store) => {
                let object = store.object(relative);
                match object_store::ObjectStoreExt::delete(&**store.store(), &object).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(source) => Err(Error::Store {
                        what: format!("removing {}", self.shown(relative).display()),
                        source,
                    }),
                }
            }
        }
    }

    /// Whether a file is at `relative` (a `stat`, or one HEAD).
    pub async fn file_exists(&self, relative: &str) -> Result<bool> {
        match self {
            LakeRoot::Local(root) => Ok(root.join(relative).is_file()),
            LakeRoot::Store(store) => {
                store.object_exists(&store.object(relative), &self.shown(relative)).await
            }
        }
    }

    /// The names of the files directly in the folder at `relative` (none
    /// when there is no such folder), in no order.
    pub async fn list_names(&self, relative: &str) -> Result<Vec<String>> {
        match self {
            LakeRoot::Local(root) => {
                let dir = root.join(relative);
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(Error::io(&dir, e)),
                };
                let mut names = Vec::new();
                for entry in entries {
                    let entry = entry.map_err(|e| Error::io(&dir, e))?;
                    names.extend(entry.file_name().to_str().map(str::to_owned));
                }
                Ok(names)
            }
            LakeRoot::Store(store) => {
                let folder = store.object(relative);
                let listed =
                    store.store().list_with_delimiter(Some(&folder)).await.map_err(|source| {
                        Error::Store {
                            what: format!("listing {}", self.shown(relative).display()),
                            source,
                        }
                    })?;
                Ok(listed
                    .objects
                    .iter()
                    .filter_map(|m| m.location.filename())
                    .map(str::to_owned)
                    .collect())
            }
        }
    }

    /// Where `relative` is, as messages show it.
    pub fn shown(&self, relative: &str) -> PathBuf {
        match self {
            LakeRoot::Local(root) => root.join(relative),
            LakeRoot::Store(store) => PathBuf::from(format!("{store}{relative}")),
        }
    }
}

impl StoreRoot {
    /// The bytes of the small object `object` (`None` when absent);
    /// `shown` names it in errors.
    pub(crate) async fn read_object(
        &self,
        object: &object_store::path::Path,
        shown: &Path,
    ) -> Result<Option<bytes::Bytes>> {
        let failed = |source| Error::Store { what: format!("reading {}", shown.display()), source };
        match object_store::ObjectStoreExt::get(&*self.store, object).await {
            Ok(got) => got.bytes().await.map(Some).map_err(failed),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(failed(e)),
        }
    }

    /// Write the object `object` whole (one PUT).
    pub(crate) async fn write_object(
        &self,
        object: &object_store::path::Path,
        bytes: Vec<u8>,
        shown: &Path,
    ) -> Result<()> {
        object_store::ObjectStoreExt::put(&*self.store, object, bytes.into())
            .await
            .map(drop)
            .map_err(|source| Error::Store { what: format!("writing {}", shown.display()), source })
    }

    /// Whether the object `object` exists (one HEAD).
    pub(crate) async fn object_exists(
        &self,
        object: &object_store::path::Path,
        shown: &Path,
    ) -> Result<bool> {
        Ok(self.object_meta(object, shown).await?.is_some())
    }

    /// What the store says of the object at `object` (size, time, tag),
    /// `None` when absent.
    pub(crate) async fn object_meta(
        &self,
        object: &object_store::path::Path,
        shown: &Path,
    ) -> Result<Option<object_store::ObjectMeta>> {
        match object_store::ObjectStoreExt::head(&*self.store, object).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => {
                Err(Error::Store { what: format!("looking for {}", shown.display()), source })
            }
        }
    }

    /// The lake's URL (it may carry credentials: show it through
    /// [`Display`](fmt::Display), which leaves them out).
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// A lake at `url` in a store held in memory, its requests counted
    /// with `url`'s (for unit tests of what a store changes).
    #[cfg(test)]
    pub(crate) fn in_memory(url: Url) -> Arc<StoreRoot> {
        let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let store: Arc<dyn ObjectStore> = Arc::new(super::requests::Counted::new(&url, inner));
        let prefix = object_store::path::Path::from_url_path(url.path()).expect("a URL's path");
        Arc::new(StoreRoot { url, options: HashMap::new(), store, prefix })
    }

    /// The bucket or container.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The options the store was built with.
    pub fn options(&self) -> &HashMap<String, String> {
        &self.options
    }

    /// The object at `relative` (`/`-separated) in the lake.
    pub fn object(&self, relative: &str) -> object_store::path::Path {
        relative
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.prefix.clone(), |path, part| path.join(part))
    }
}

impl fmt::Display for StoreRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::storage::without_secrets(&self.url))
    }
}

impl fmt::Display for LakeRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LakeRoot::Local(path) => write!(f, "{}", path.display()),
            LakeRoot::Store(store) => store.fmt(f),
        }
    }
}

/// Shown without the store's options, which hold credentials.
impl fmt::Debug for LakeRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LakeRoot::Local(path) => f.debug_tuple("Local").field(path).finish(),
            LakeRoot::Store(store) => f.debug_tuple("Store").field(&store.to_string()).finish(),
        }
    }
}

/// The same lake: the same folder, or the same URL.
impl PartialEq for LakeRoot {
    fn eq(&self, other: &LakeRoot) -> bool {
        match (self, other) {
            (LakeRoot::Local(a), LakeRoot::Local(b)) => a == b,
            (LakeRoot::Store(a), LakeRoot::Store(b)) => a.url == b.url,
            _ => false,
        }
    }
}

impl From<&Path> for LakeRoot {
    fn from(path: &Path) -> LakeRoot {
        LakeRoot::Local(path.to_path_buf())
    }
}

impl From<PathBuf> for LakeRoot {
    fn from(path: PathBuf) -> LakeRoot {
        LakeRoot::Local(path)
    }
}

impl From<&PathBuf> for LakeRoot {
    fn from(path: &PathBuf) -> LakeRoot {
        LakeRoot::Local(path.clone())
    }
}

impl From<&LakeRoot> for LakeRoot {
    fn from(root: &LakeRoot) -> LakeRoot {
        root.clone()
    }
}

/// The URL scheme `text` starts with, lowercase, if it is a URL.
fn scheme_of(text: &str) -> Option<String> {
    let (scheme, _) = text.split_once("://")?;
    let is_scheme = scheme.len() > 1
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    is_scheme.then(|| scheme.to_ascii_lowercase())
}

/// The lake folder `text` names. The error says why, not `text` (the
/// caller names it: clap, or the config that holds it).
pub fn local_root(text: &str) -> Result<PathBuf> {
    let Some(scheme) = scheme_of(text) else { return Ok(PathBuf::from(text)) };
    match scheme.as_str() {
        "file" => {
            url::Url::parse(text).ok().and_then(|url| url.to_file_path().ok()).ok_or_else(|| {
                Error::InvalidInput(
                    "not a file URL of an absolute path (file:///path/to/lake)".into(),
                )
            })
        }
        "s3" | "s3a" | "az" | "azure" | "abfs" | "abfss" | "adl" => {
            Err(Error::InvalidInput(format!(
                "{scheme}:// is an object store: this needs a folder on a local or \
                 shared filesystem (a path or file:///…)"
            )))
        }
        "gs" => Err(Error::InvalidInput(
            "gs:// (Google Cloud Storage) is not supported: its conditional writes cannot be \
             tested here, and sluice offers no store whose guarantees it has not tested; \
             use s3://, az://, abfss:// or a folder"
                .into(),
        )),
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
