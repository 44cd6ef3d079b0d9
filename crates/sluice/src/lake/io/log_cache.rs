//! Delta log entries kept in memory, for tables in an object store.
//!
//! Opening a Delta table reads every log entry since its last checkpoint,
//! and delta-rs reads each of them twice (once for the protocol and
//! metadata, once for the files); a process also opens a table more than
//! once (a handle for its schema, another at a lake version). On a store
//! each read is a request, so a fresh `get` on a table of 20 versions made
//! 44 requests for its log alone, and a checkpoint is read in a dozen
//! ranges (its footer, then its columns, for each pass). A log entry never
//! changes once created: it is created by a put-if-absent and never
//! rewritten (the protocol every Delta writer follows), and a checkpoint is
//! written once, whole; so a process may keep what it read. Kept are whole
//! reads of `_delta_log/{version:020}.json`, and checkpoints
//! (`_delta_log/{version:020}.checkpoint….parquet`), read whole at their
//! first range read (a table's reader reads nearly all of one anyway).
//! A failed read is never kept, so an entry not there yet is asked for
//! again.
//!
//! Small data files of a table (`part-….parquet` up to a MiB, which a
//! Delta writer names with a fresh UUID and never rewrites) are kept too:
//! read whole at the first read that shows their size (a reader's footer
//! read), so that the footer's metadata and pages are cut from memory. The
//! journal, the edges and the index of a lake of small commits are read
//! again by every step of a pipeline, and each read was three requests or
//! more per file.
//!
//! A table deleted and made again at the same URL reuses its entries'
//! names: a listing or `HEAD` that shows an entry with another tag or
//! modification time than the one kept drops it (delta-rs lists the log
//! before it reads entries). The memory held is bounded; past the bound the
//! entries kept are dropped and read again as needed.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use super::log_entry::{LogFile, log_file};

/// The most bytes of log entries a process keeps (about 30,000 entries of
/// small commits).
const MAX_BYTES: usize = 64 << 20;

/// A log entry as read.
#[derive(Clone)]
struct Kept {
    bytes: Bytes,
    meta: ObjectMeta,
    attributes: Attributes,
}

#[derive(Default)]
struct Cache {
    /// By bucket or container, then path.
    entries: HashMap<(String, Path), Kept>,
    bytes: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A checkpoint larger than this is served from its whole read but not
/// kept.
const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;

/// Data files up to this size are kept when read whole.
const MAX_DATA_FILE_BYTES: u64 = 1 << 20;

/// Whether `location` is a data file of a Delta table: a `part-….parquet`
/// outside the log and the staging area.
fn data_file(location: &Path) -> bool {
    let parts: Vec<_> = location.parts().collect();
    let Some((name, folders)) = parts.split_last() else { return false };
    name.as_ref().starts_with("part-")
        && name.as_ref().ends_with(".parquet")
        && !folders.iter().any(|f| f.as_ref() == "_delta_log" || f.as_ref() == "_staging")
}

/// What of a Delta log `location` is, if it is an immutable part of one
/// (a commit entry or a checkpoint in a `_delta_log` folder).
fn logged(location: &Path) -> Option<LogFile> {
    let mut parts = location.parts().collect::<Vec<_>>().into_iter().rev();
    let (name, parent) = (parts.next()?, parts.next()?);
    (parent.as_ref() == "_delta_log").then(|| log_file(name.as_ref())).flatten()
}

/// Whether a read asks for the current object (or a range of it),
/// unconditionally.
fn plain(options: &GetOptions) -> bool {
    !options.head
        && options.version.is_none()
        && options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
}

/// A store whose log entries are kept once read.
#[derive(Debug)]
pub(crate) struct LogCached {
    inner: Arc<dyn ObjectStore>,
    /// The bucket or container, as entries are kept.
    bucket: String,
}

impl LogCached {
    /// `inner`, the store of the bucket or container `bucket`, with its
    /// log entries kept.
    pub(crate) fn new(bucket: String, inner: Arc<dyn ObjectStore>) -> LogCached {
        LogCached { inner, bucket }
    }

    fn kept(&self, location: &Path) -> Option<Kept> {
        let cache = cache().lock().ok()?;
        cache.entries.get(&(self.bucket.clone(), location.clone())).cloned()
    }

    fn keep(&self, kept: Kept) {
        if kept.bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
            return;
        }
        let Ok(mut cache) = cache().lock() else { return };
        if cache.bytes + kept.bytes.len() > MAX_BYTES {
            cache.entries.clear();
            cache.bytes = 0;
        }
        cache.bytes += kept.bytes.len();
        let key = (self.bucket.clone(), kept.meta.location.clone());
        if let Some(old) = cache.entries.insert(key, kept) {
            cache.bytes -= old.bytes.len();
        }
    }

    /// Drop what is kept of `meta`'s object if the store now shows another
    /// object there.
    fn check(bucket: &str, meta: &ObjectMeta) {
        if logged(&meta.location).is_none() && !data_file(&meta.location) {
            return;
        }
        let Ok(mut cache) = cache().lock() else { return };
        let key = (bucket.to_owned(), meta.location.clone());
        let changed = cache.entries.get(&key).is_some_and(|kept| {
            kept.meta.e_tag != meta.e_tag
                || kept.meta.last_modified != meta.last_modified
                || kept.meta.size != meta.size
        });
        if changed && let Some(old) = cache.entries.remove(&key) {
            cache.bytes -= old.bytes.len();
        }
    }

    fn checked(
        &self,
        listed: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let bucket = self.bucket.clone();
        listed
            .inspect(move |meta| {
                if let Ok(meta) = meta {
                    Self::check(&bucket, meta);
                }
            })
            .boxed()
    }
}

/// A read of `range` (the whole object for `None`) answered from what was
/// kept.
fn answer(kept: Kept, range: Option<&object_store::GetRange>) -> Result<GetResult> {
    let len = kept.bytes.len() as u64;
    let range = match range {
        None => 0..len,
        Some(range) => range.as_range(len).map_err(|e| object_store::Error::Generic {
            store: "log cache",
            source: Box::new(e),
        })?,
    };
    let bytes = kept.bytes.slice(range.start as usize..range.end as usize);
    Ok(GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed()),
        meta: kept.meta,
        range,
        attributes: kept.attributes,
    })
}

impl fmt::Display for LogCached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait]
impl ObjectStore for LogCached {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let keep = match logged(location) {
            Some(LogFile::Commit(_)) => plain(&options) && options.range.is_none(),
            Some(LogFile::Checkpoint(_)) => plain(&options),
            None => false,
        };
        let data = !keep && plain(&options) && data_file(location);
        if (keep || data)
            && let Some(kept) = self.kept(location)
        {
            return answer(kept, options.range.as_ref());
        }
        let head = options.head;
        let range = options.range.clone();
        // What is kept is read whole, whatever range was asked for.
        let options = if keep { GetOptions { range: None, ..options } } else { options };
        let got = self.inner.get_opts(location, options).await?;
        if head {
            Self::check(&self.bucket, &got.meta);
        }
        let small = data && got.meta.size <= MAX_DATA_FILE_BYTES;
        if !keep && !small {
            return Ok(got);
        }
        // A part of a small data file (a reader's footer, then its pages):
        // the whole file, once, instead of every part each time.
        let got = if keep || got.range == (0..got.meta.size) {
            got
        } else {
            self.inner.get_opts(location, GetOptions::default()).await?
        };
        let (meta, attributes) = (got.meta.clone(), got.attributes.clone());
        let bytes = got.bytes().await?;
        let kept = Kept { bytes, meta, attributes };
        self.keep(kept.clone());
        answer(kept, range.as_ref())
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.checked(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.checked(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let listed = self.inner.list_with_delimiter(prefix).await?;
        for meta in &listed.objects {
            Self::check(&self.bucket, meta);
        }
        Ok(listed)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn counted(name: &str) -> (Arc<dyn ObjectStore>, url::Url) {
        let url = url::Url::parse(&format!("memory://log-cache-{name}/")).unwrap();
        let counted = super::super::requests::Counted::new(&url, Arc::new(InMemory::new()));
        let store = LogCached::new(url.to_string(), Arc::new(counted));
        (Arc::new(store), url)
    }

    #[test]
    fn log_entries_and_checkpoints_are_told_from_other_log_files() {
        let at = |p: &str| logged(&Path::from(p));
        assert_eq!(at("lake/t/_delta_log/00000000000000000003.json"), Some(LogFile::Commit(3)));
        for checkpoint in [
            "lake/t/_delta_log/00000000000000000009.checkpoint.parquet",
            "lake/t/_delta_log/00000000000000000009.checkpoint.0000000001.0000000002.parquet",
        ] {
            assert_eq!(at(checkpoint), Some(LogFile::Checkpoint(9)), "{checkpoint}");
        }
        for other in [
            "lake/t/_delta_log/_last_checkpoint",
            "lake/t/_delta_log/00000000000000000003.crc",
            "lake/t/_delta_log/3.json",
            "lake/t/part-0.parquet",
            "lake/t/00000000000000000003.json",
        ] {
            assert_eq!(at(other), None, "{other}");
        }
    }

    #[tokio::test]
    async fn a_small_data_file_is_kept_whole_a_large_or_staged_one_is_not() {
        use super::super::requests::counted_at;
        use object_store::GetRange;
        let (store, url) = counted("data");
        let bytes = Bytes::from(vec![7u8; 1000]);
        let data = Path::from("lake/t/origin_step_number=1/part-00000-0a1b-c000.zstd.parquet");
        let staged = Path::from("lake/_staging/1_op/aa/bb/x/part-00000-0a1b-c000.zstd.parquet");
        for path in [&data, &staged] {
            store.put(path, bytes.clone().into()).await.unwrap();
        }
        // A footer read whose prefetch covers the file (as a reader's does).
        let footer = |path: &Path| {
            let store = store.clone();
            let path = path.clone();
            async move {
                let options =
                    GetOptions { range: Some(GetRange::Suffix(4096)), ..Default::default() };
                store.get_opts(&path, options).await.unwrap().bytes().await.unwrap()
            }
        };
        // The first part read shows a small file: it is read whole then.
        let before = counted_at(&url);
        assert_eq!(store.get_range(&data, 10..20).await.unwrap().as_ref(), &[7u8; 10]);
        assert_eq!(footer(&data).await, bytes);
        assert_eq!(store.get_range(&data, 990..1000).await.unwrap().as_ref(), &[7u8; 10]);
        assert_eq!(counted_at(&url).since(&before).get, 2, "a part, the whole, then memory");
        // A large one is not.
        let large = Path::from("lake/t/part-00001-0a1b-c000.zstd.parquet");
        store.put(&large, Bytes::from(vec![1u8; (2 << 20) + 1]).into()).await.unwrap();
        let before = counted_at(&url);
        for _ in 0..2 {
            assert_eq!(store.get_range(&large, 0..4).await.unwrap().as_ref(), &[1u8; 4]);
        }
        assert_eq!(counted_at(&url).since(&before).get, 2, "a large file is read in parts");
        let before = counted_at(&url);
        footer(&staged).await;
        footer(&staged).await;
        assert_eq!(counted_at(&url).since(&before).get, 2, "a staged file is read each time");
    }

    #[tokio::test]
    async fn an_entry_is_read_once_and_a_missing_one_is_asked_again() {
        use super::super::requests::counted_at;
        let (store, url) = counted("once");
        let entry = Path::from("t/_delta_log/00000000000000000001.json");
        assert!(store.get(&entry).await.is_err(), "not there yet");
        store.put(&entry, Bytes::from_static(b"{\"add\":{}}").into()).await.unwrap();
        let before = counted_at(&url);
        for _ in 0..3 {
            let bytes = store.get(&entry).await.unwrap().bytes().await.unwrap();
            assert_eq!(bytes.as_ref(), b"{\"add\":{}}");
        }
        assert_eq!(counted_at(&url).since(&before).get, 1, "read once, then from memory");
        let other = Path::from("t/_delta_log/_last_checkpoint");
        store.put(&other, Bytes::from_static(b"{}").into()).await.unwrap();
        let before = counted_at(&url);
        store.get(&other).await.unwrap();
        store.get(&other).await.unwrap();
        assert_eq!(counted_at(&url).since(&before).get, 2, "the checkpoint hint is not kept");
    }

    #[tokio::test]
    async fn a_checkpoint_is_read_whole_once_and_its_ranges_cut_from_it() {
        use super::super::requests::counted_at;
        use object_store::GetRange;
        let (store, url) = counted("checkpoint");
        let checkpoint = Path::from("t/_delta_log/00000000000000000009.checkpoint.parquet");
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        store.put(&checkpoint, bytes.clone().into()).await.unwrap();
        let before = counted_at(&url);
        let ranges = [
            GetRange::Suffix(8),
            GetRange::Bounded(100..200),
            GetRange::Offset(9_990),
            GetRange::Bounded(4..4_000),
        ];
        for range in ranges {
            let expected = range.as_range(bytes.len() as u64).unwrap();
            let options = GetOptions { range: Some(range), ..GetOptions::default() };
            let got = store.get_opts(&checkpoint, options).await.unwrap();
            assert_eq!(got.range, expected);
            let read = got.bytes().await.unwrap();
            assert_eq!(read.as_ref(), &bytes[expected.start as usize..expected.end as usize]);
        }
        let whole = store.get(&checkpoint).await.unwrap().bytes().await.unwrap();
        assert_eq!(whole.as_ref(), bytes.as_slice());
        assert_eq!(counted_at(&url).since(&before).get, 1, "one read, whole");
    }

    #[tokio::test]
    async fn an_entry_made_again_at_the_same_name_is_read_again_after_a_listing_shows_it() {
        let (store, _) = counted("again");
        let entry = Path::from("t/_delta_log/00000000000000000000.json");
        store.put(&entry, Bytes::from_static(b"old").into()).await.unwrap();
        assert_eq!(store.get(&entry).await.unwrap().bytes().await.unwrap().as_ref(), b"old");
        // The table is deleted and made again: a new object at that name.
        store.delete(&entry).await.unwrap();
        store.put(&entry, Bytes::from_static(b"new!").into()).await.unwrap();
        let listed: Vec<_> =
            store.list(Some(&Path::from("t/_delta_log"))).collect::<Vec<_>>().await;
        assert_eq!(listed.len(), 1);
        assert_eq!(store.get(&entry).await.unwrap().bytes().await.unwrap().as_ref(), b"new!");
    }
}
