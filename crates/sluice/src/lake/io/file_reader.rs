//! Reading one Parquet data file of a table through its object store, with
//! the file's footer and bloom filters kept in memory.
//!
//! A data file of a Delta table is never rewritten in place (a new version
//! writes new files), so its parsed footer and its bloom filters stay valid
//! for as long as the file exists: look-ups that come back to the same files
//! (every lookup of a hot table does) skip those reads and their parsing.
//! Both caches are bounded and keyed by the file's full location.
//!
//! A small file (most of a lake of small commits) is read whole with its
//! footer, in one request, and its bloom filters and pages are then cut
//! from those bytes: on an object store, three requests become one. Such
//! files are kept whole too (bounded, like the footers), so a process that
//! reads the same small file again — a worker reading one input after
//! another from the same index and data files — makes no request at all.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use deltalake::ObjectStore;
use deltalake::logstore::object_store::ObjectStoreExt;
use futures::FutureExt;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::bloom_filter::Sbbf;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

/// Footers kept; the cache is emptied when it would grow beyond this.
const CACHED_FOOTERS: usize = 4096;

/// Bytes read from the end of a file for its footer: most footers fit, so
/// one read usually fetches it.
const FOOTER_PREFETCH: usize = 64 << 10;

/// Files up to this size are read whole with their footer (one read
/// instead of footer, bloom filters and pages apart).
const READ_WHOLE_UP_TO: u64 = FOOTER_PREFETCH as u64;

/// Bytes of bloom filters kept; the cache is emptied when it would grow
/// beyond this. A filter of a row group of 8192 ids is 16 KiB: this keeps
/// those of about 65M ids.
const CACHED_BLOOM_BYTES: usize = 128 << 20;

/// Bytes of small files kept whole; the cache is emptied when it would
/// grow beyond this (at least 512 files of the largest size kept).
const CACHED_WHOLE_BYTES: usize = 32 << 20;

type Footers = Mutex<HashMap<String, Arc<ParquetMetaData>>>;

/// Small files read whole, by key, and their bytes.
#[derive(Default)]
struct Wholes {
    bytes: usize,
    files: HashMap<String, Bytes>,
}

fn wholes() -> &'static Mutex<Wholes> {
    static WHOLES: OnceLock<Mutex<Wholes>> = OnceLock::new();
    WHOLES.get_or_init(Mutex::default)
}

fn keep_whole(key: &str, bytes: &Bytes) {
    if let Ok(mut cache) = wholes().lock() {
        if cache.bytes + bytes.len() > CACHED_WHOLE_BYTES {
            *cache = Wholes::default();
        }
        cache.bytes += bytes.len();
        cache.files.insert(key.to_owned(), bytes.clone());
    }
}

fn footers() -> &'static Footers {
    static FOOTERS: OnceLock<Footers> = OnceLock::new();
    FOOTERS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Parsed bloom filters by (file, row group, column leaf), and their bytes.
#[derive(Default)]
struct Blooms {
    bytes: usize,
    filters: HashMap<(String, usize, usize), Arc<Sbbf>>,
}

fn blooms() -> &'static Mutex<Blooms> {
    static BLOOMS: OnceLock<Mutex<Blooms>> = OnceLock::new();
    BLOOMS.get_or_init(Mutex::default)
}

/// One data file: where it is, how large the log says it is.
pub(crate) struct FileReader {
    store: Arc<dyn ObjectStore>,
    path: deltalake::Path,
    size: u64,
    /// The key of the footer cache: table location + relative path.
    key: String,
    /// The whole file, when it was read whole (see [`READ_WHOLE_UP_TO`]).
    whole: Option<Bytes>,
}

impl FileReader {
    /// The file `path` (relative to the table at `table_uri`, as the log
    /// names it) of `size` bytes.
    pub(crate) fn new(store: Arc<dyn ObjectStore>, table_uri: &str, path: &str, size: u64) -> Self {
        let key = format!("{}/{path}", table_uri.trim_end_matches('/'));
        let whole = (size <= READ_WHOLE_UP_TO)
            .then(|| wholes().lock().ok().and_then(|c| c.files.get(&key).cloned()))
            .flatten();
        FileReader { store, path: deltalake::Path::from(path), size, key, whole }
    }
}

impl FileReader {
    /// The bloom filter of column `leaf` in every row group (`None` where a
    /// row group has none). Those not cached are fetched in one call, each
    /// its own range: a writer may place them after each row group or
    /// together before the footer.
    pub(crate) async fn bloom_filters(
        &mut self,
        metadata: &ParquetMetaData,
        leaf: usize,
    ) -> parquet::errors::Result<Vec<Option<Arc<Sbbf>>>> {
        let mut out: Vec<Option<Arc<Sbbf>>> = vec![None; metadata.num_row_groups()];
        let mut missing: Vec<(usize, Range<u64>)> = Vec::new();
        {
            let cache = blooms().lock().ok();
            for (rg, slot) in out.iter_mut().enumerate() {
                let column = metadata.row_group(rg).column(leaf);
                let (Some(offset), Some(length)) =
                    (column.bloom_filter_offset(), column.bloom_filter_length())
                else {
                    continue;
                };
                let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(length))
                else {
                    continue;
                };
                if length == 0 {
                    continue;
                }
                match cache.as_ref().and_then(|c| c.filters.get(&(self.key.clone(), rg, leaf))) {
                    Some(filter) => *slot = Some(filter.clone()),
                    None => missing.push((rg, offset..offset + length)),
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let ranges: Vec<Range<u64>> = missing.iter().map(|(_, r)| r.clone()).collect();
        let fetched = self.get_byte_ranges(ranges).await?;
        let mut parsed = Vec::with_capacity(missing.len());
        for ((rg, range), bytes) in missing.into_iter().zip(fetched) {
            let filter = Arc::new(Sbbf::from_bytes(&bytes)?);
            out[rg] = Some(filter.clone());
            parsed.push((rg, (range.end - range.start) as usize, filter));
        }
        if let Ok(mut cache) = blooms().lock() {
            for (rg, bytes, filter) in parsed {
                if cache.bytes + bytes > CACHED_BLOOM_BYTES {
                    *cache = Blooms::default();
                }
                cache.bytes += bytes;
                cache.filters.insert((self.key.clone(), rg, leaf), filter);
            }
        }
        Ok(out)
    }
}

/// `range` of the file read whole, if it was.
fn cut(whole: Option<&Bytes>, range: &Range<u64>) -> Option<Bytes> {
    let whole = whole?;
    let (start, end) = (usize::try_from(range.start).ok()?, usize::try_from(range.end).ok()?);
    (start <= end && end <= whole.len()).then(|| whole.slice(start..end))
}

fn external(e: deltalake::ObjectStoreError) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for FileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        if let Some(bytes) = cut(self.whole.as_ref(), &range) {
            return async move { Ok(bytes) }.boxed();
        }
        async move { self.store.get_range(&self.path, range).await.map_err(external) }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        let cut: Option<Vec<Bytes>> = ranges.iter().map(|r| cut(self.whole.as_ref(), r)).collect();
        if let Some(cut) = cut {
            return async move { Ok(cut) }.boxed();
        }
        async move { self.store.get_ranges(&self.path, &ranges).await.map_err(external) }.boxed()
    }

    /// The footer, without page indexes (ids are random: page statistics
    /// cannot prune them; the bloom filters do).
    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let cached = footers().lock().ok().and_then(|m| m.get(&self.key).cloned());
            if let Some(metadata) = cached {
                return Ok(metadata);
            }
            let size = self.size;
            if size <= READ_WHOLE_UP_TO && self.whole.is_none() {
                let got = self.store.get(&self.path).await.map_err(external)?;
                let bytes = got.bytes().await.map_err(external)?;
                keep_whole(&self.key, &bytes);
                self.whole = Some(bytes);
            }
            let metadata = Arc::new(
                ParquetMetaDataReader::new()
                    .with_page_index_policy(PageIndexPolicy::Skip)
                    .with_prefetch_hint(Some(FOOTER_PREFETCH))
                    .load_and_finish(&mut *self, size)
                    .await?,
            );
            if let Ok(mut cache) = footers().lock() {
                if cache.len() >= CACHED_FOOTERS {
                    cache.clear();
                }
                cache.insert(self.key.clone(), metadata.clone());
            }
            Ok(metadata)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::array::{RecordBatch, StringArray};
    use deltalake::arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{BloomFilterPosition, WriterProperties};

    fn key(i: usize) -> String {
        format!("{:064x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// A file of 20,000 keys in row groups of 8192 with a bloom filter per
    /// row group, placed at `position`.
    fn write(dir: &std::path::Path, name: &str, position: BloomFilterPosition) -> u64 {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, false)]));
        let keys = StringArray::from((0..20_000).map(key).collect::<Vec<_>>());
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(8192))
            .set_bloom_filter_enabled(true)
            .set_bloom_filter_fpp(0.001)
            .set_bloom_filter_max_ndv(8192)
            .set_bloom_filter_position(position)
            .build();
        let path = dir.join(name);
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, Some(props))
                .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        std::fs::metadata(&path).unwrap().len()
    }

    #[tokio::test]
    async fn bloom_filters_are_read_wherever_the_writer_put_them_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(
            deltalake::logstore::object_store::local::LocalFileSystem::new_with_prefix(dir.path())
                .unwrap(),
        );
        let uri = format!("file://{}", dir.path().display());
        for (name, position) in [
            ("after.parquet", BloomFilterPosition::AfterRowGroup),
            ("end.parquet", BloomFilterPosition::End),
        ] {
            let size = write(dir.path(), name, position);
            let mut reader = FileReader::new(store.clone(), &uri, name, size);
            let metadata = reader.get_metadata(None).await.unwrap();
            let filters = reader.bloom_filters(&metadata, 0).await.unwrap();
            assert_eq!(filters.len(), 3, "{name}");
            for (rg, filter) in filters.iter().enumerate() {
                let filter = filter.as_ref().expect("a bloom filter per row group");
                let rows = (rg * 8192)..((rg + 1) * 8192).min(20_000);
                assert!(rows.clone().all(|i| filter.check(key(i).as_str())), "{name} rg {rg}");
                let strangers = (100_000..110_000).filter(|i| filter.check(key(*i).as_str()));
                assert!(strangers.count() < 100, "{name} rg {rg}: too many false positives");
            }
            // Served from the cache the second time, even with the file gone.
            std::fs::remove_file(dir.path().join(name)).unwrap();
            let again = reader.bloom_filters(&metadata, 0).await.unwrap();
            assert!(again.iter().zip(&filters).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }));
        }
    }

    #[tokio::test]
    async fn a_small_file_is_read_in_one_request_a_large_one_in_ranges() {
        use crate::lake::io::requests::{Counted, counted_at};
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::parse("memory://file-reader-whole/").unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(Counted::new(
            &url,
            Arc::new(deltalake::logstore::object_store::memory::InMemory::new()),
        ));
        let size = write(dir.path(), "large.parquet", BloomFilterPosition::End);
        assert!(size > READ_WHOLE_UP_TO, "{size}");
        let small = {
            let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, false)]));
            let keys = StringArray::from((0..10).map(key).collect::<Vec<_>>());
            let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap();
            let props = WriterProperties::builder().set_bloom_filter_enabled(true).build();
            let mut bytes = Vec::new();
            let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(props)).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            bytes
        };
        let large = std::fs::read(dir.path().join("large.parquet")).unwrap();
        let small_size = small.len() as u64;
        for (name, bytes) in [("small.parquet", small), ("large.parquet", large)] {
            store.put(&deltalake::Path::from(name), bytes.into()).await.unwrap();
        }
        let uri = url.to_string();
        for (name, size, expected) in [("small.parquet", small_size, 1), ("large.parquet", size, 3)]
        {
            let before = counted_at(&url);
            let mut reader = FileReader::new(store.clone(), &uri, name, size);
            let metadata = reader.get_metadata(None).await.unwrap();
            let filters = reader.bloom_filters(&metadata, 0).await.unwrap();
            assert!(filters.iter().all(Option::is_some), "{name}");
            let column = metadata.row_group(0).column(0);
            let (start, len) = column.byte_range();
            let page = reader.get_bytes(start..start + len).await.unwrap();
            assert_eq!(page.len() as u64, len);
            assert_eq!(counted_at(&url).since(&before).get, expected, "{name}");
        }
        // Read again by a new reader (the next lookup): the small file from
        // memory, the large one's pages from the store.
        for (name, size, expected) in [("small.parquet", small_size, 0), ("large.parquet", size, 1)]
        {
            let before = counted_at(&url);
            let mut reader = FileReader::new(store.clone(), &uri, name, size);
            let metadata = reader.get_metadata(None).await.unwrap();
            let (start, len) = metadata.row_group(0).column(0).byte_range();
            assert_eq!(reader.get_bytes(start..start + len).await.unwrap().len() as u64, len);
            assert_eq!(counted_at(&url).since(&before).get, expected, "{name} again");
        }
    }
}
