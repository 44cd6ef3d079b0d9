//! Reading one Parquet data file of a table through its object store, with
//! the file's footer kept in memory.
//!
//! A data file of a Delta table is never rewritten in place (a new version
//! writes new files), so its parsed footer stays valid for as long as the
//! file exists: look-ups that come back to the same files (every lookup of
//! a hot table does) skip the two reads and the parse. The cache is bounded
//! and keyed by the file's full location.

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
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

/// Footers kept; the cache is emptied when it would grow beyond this.
const CACHED_FOOTERS: usize = 4096;

/// Bytes read from the end of a file for its footer: most footers fit, so
/// one read usually fetches it.
const FOOTER_PREFETCH: usize = 64 << 10;

type Footers = Mutex<HashMap<String, Arc<ParquetMetaData>>>;

fn footers() -> &'static Footers {
    static FOOTERS: OnceLock<Footers> = OnceLock::new();
    FOOTERS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One data file: where it is, how large the log says it is.
pub(crate) struct FileReader {
    store: Arc<dyn ObjectStore>,
    path: deltalake::Path,
    size: u64,
    /// The key of the footer cache: table location + relative path.
    key: String,
}

impl FileReader {
    /// The file `path` (relative to the table at `table_uri`, as the log
    /// names it) of `size` bytes.
    pub(crate) fn new(store: Arc<dyn ObjectStore>, table_uri: &str, path: &str, size: u64) -> Self {
        FileReader {
            store,
            path: deltalake::Path::from(path),
            size,
            key: format!("{}/{path}", table_uri.trim_end_matches('/')),
        }
    }
}

fn external(e: deltalake::ObjectStoreError) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for FileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { self.store.get_range(&self.path, range).await.map_err(external) }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
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
