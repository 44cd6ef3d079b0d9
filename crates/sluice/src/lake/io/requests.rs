//! Requests to object stores, counted: on a store, requests are the cost
//! (each is tens of milliseconds away in a cloud region), so the lake's
//! operations are held to request budgets — a `get` by id that stays flat
//! as the lake grows, a `put` whose requests grow with the tables it
//! touches — and those budgets are measured here, in the seam every store
//! request passes through ([`storage`](super::storage) wraps each store it
//! builds). A listing counts once per call (a long one is several pages).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Requests this process made to a bucket or container, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Requests {
    /// Reads of an object or of ranges of it.
    pub get: u64,
    /// Reads of an object's metadata only.
    pub head: u64,
    /// Writes (a multipart upload counts once).
    pub put: u64,
    /// Listings (calls; a long listing is several pages).
    pub list: u64,
    /// Deletes, copies and renames.
    pub other: u64,
}

impl Requests {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.list + self.other
    }

    /// The requests made since `earlier` (a count taken before).
    pub fn since(&self, earlier: &Requests) -> Requests {
        Requests {
            get: self.get - earlier.get,
            head: self.head - earlier.head,
            put: self.put - earlier.put,
            list: self.list - earlier.list,
            other: self.other - earlier.other,
        }
    }
}

impl fmt::Display for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests ({} GET, {} HEAD, {} PUT, {} LIST, {} other)",
            self.total(),
            self.get,
            self.head,
            self.put,
            self.list,
            self.other
        )
    }
}

/// The counts of one bucket or container, created on its first store.
#[derive(Debug, Default)]
struct Counts {
    get: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    other: AtomicU64,
}

impl Counts {
    fn read(&self) -> Requests {
        Requests {
            get: self.get.load(Ordering::Relaxed),
            head: self.head.load(Ordering::Relaxed),
            put: self.put.load(Ordering::Relaxed),
            list: self.list.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

type ByStore = std::sync::Mutex<std::collections::BTreeMap<String, Arc<Counts>>>;

fn by_store() -> &'static ByStore {
    static BY_STORE: std::sync::OnceLock<ByStore> = std::sync::OnceLock::new();
    BY_STORE.get_or_init(Default::default)
}

/// The bucket or container of `url`, as counts are kept: `s3://bucket`.
pub(super) fn store_key(url: &url::Url) -> String {
    format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
}

/// The requests this process has made so far to the bucket or container
/// of `url` (every lake and table in it).
pub fn counted_at(url: &url::Url) -> Requests {
    let counts = by_store().lock().ok().and_then(|m| m.get(&store_key(url)).cloned());
    counts.map_or_else(Requests::default, |c| c.read())
}

/// Count one request of `kind` to `location` (traced at `trace` level
/// under `sluice::requests`, to see where a budget goes).
fn count(kind: &AtomicU64, name: &str, location: Option<&Path>) {
    kind.fetch_add(1, Ordering::Relaxed);
    tracing::trace!(target: "sluice::requests", request = name, location = location.map_or("", Path::as_ref));
}

/// A store whose requests are counted, with the others of its bucket or
/// container.
#[derive(Debug)]
pub(crate) struct Counted {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<Counts>,
}

impl Counted {
    /// `inner`, the store of `url`'s bucket or container, counted.
    pub(crate) fn new(url: &url::Url, inner: Arc<dyn ObjectStore>) -> Counted {
        let counts = match by_store().lock() {
            Ok(mut map) => map.entry(store_key(url)).or_default().clone(),
            Err(_) => Arc::default(),
        };
        Counted { inner, counts }
    }
}

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        count(&self.counts.put, "PUT", Some(location));
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        count(&self.counts.put, "PUT", Some(location));
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let (kind, name) =
            if options.head { (&self.counts.head, "HEAD") } else { (&self.counts.get, "GET") };
        count(kind, name, Some(location));
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        count(&self.counts.other, "DELETE", None);
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        count(&self.counts.list, "LIST", prefix);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        count(&self.counts.list, "LIST", prefix);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        count(&self.counts.list, "LIST", prefix);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        count(&self.counts.other, "COPY", Some(from));
        self.inner.copy_opts(from, to, options).await
    }
}
