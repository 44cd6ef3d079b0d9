//! Point look-ups by id, read straight from the Parquet files.
//!
//! A look-up by id (an artifact in the index, the edges of a lineage
//! frontier, the producers of some artifacts) wants a handful of rows from
//! the few files its key filters named. Planning a DataFusion query for it
//! costs more than reading those rows, so a [`Lookup`] reads the files
//! itself: per file, the footer, then the bloom filter of the key column in
//! each row group (see [`crate::lake::delta::table::writer_properties_for`]), and only the
//! row groups that may hold a key are decoded, projected to the columns
//! asked for. Files are read concurrently.
//!
//! The rows come back in the table's schema (as of the handle's version),
//! text and binary as view arrays (large values never overflow 32-bit
//! offsets): partition values are taken from the add actions, columns a file
//! predates are null, and file types are cast to the table's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StringArray, StringViewArray, UInt32Array,
    new_null_array,
};
use deltalake::arrow::compute::{cast, filter_record_batch, take};
use deltalake::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::file::metadata::ParquetMetaData;

use crate::error::{Error, Result};
use crate::lake::delta::table;
use crate::lake::io::file_reader::FileReader;
use crate::lake::keys::key_filter::LookupPlan;
use crate::lake::layout::TableSpec;

/// Files read at once.
const CONCURRENT_FILES: usize = 4;

/// Rows of some files of a table whose key column holds one of some keys.
#[derive(Debug, Clone)]
pub struct Lookup {
    column: String,
    keys: Arc<HashSet<String>>,
    columns: Vec<String>,
    /// Only files whose partition value of this column is one of these.
    partitions: Option<(String, HashSet<i64>)>,
}

/// One file's part of a look-up, owned so that it runs as a task of its own
/// (decoding is CPU work: files are decoded in parallel).
struct FileRead {
    table: String,
    column: String,
    keys: Arc<HashSet<String>>,
    schema: SchemaRef,
    reader: FileReader,
    source: Arc<FileSource>,
}

/// Where a data file's rows come from, and its partition values.
#[derive(Debug)]
struct FileSource {
    path: String,
    size: u64,
    partition: BTreeMap<String, ArrayRef>,
}

/// The size and partition values of every active file of one table
/// version, by path as the log spells it: what a look-up needs to read a
/// file, kept with the version's [`IdFiles`](crate::lake::read::id_files::IdFiles) so
/// that a look-up does not walk the table's file list to find its few.
#[derive(Debug, Default)]
pub(crate) struct FileIndex {
    files: HashMap<String, Arc<FileSource>>,
}

impl FileIndex {
    /// The index of `handle`'s version, from its file list; `None` when
    /// that cannot answer exactly (see [`sources_from_file_list`]). Files
    /// `previous` (an index of the same table) holds are taken from it.
    pub(crate) fn of(
        handle: &DeltaTable,
        spec: &TableSpec,
        previous: Option<&FileIndex>,
    ) -> Result<Option<FileIndex>> {
        let files = sources_from_file_list(handle, spec, |_| true, previous)?;
        Ok(files.map(|files| FileIndex {
            files: files.into_iter().map(|s| (s.path.clone(), s)).collect(),
        }))
    }

    /// The active files.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    /// The sources of `files`, every one of which must be active.
    fn sources(
        &self,
        spec: &TableSpec,
        version: Option<u64>,
        files: &[String],
    ) -> Result<Vec<Arc<FileSource>>> {
        let mut out = Vec::with_capacity(files.len());
        let mut missing = Vec::new();
        for file in files {
            match self.files.get(file) {
                Some(source) => out.push(source.clone()),
                None => missing.push(file.as_str()),
            }
        }
        if missing.is_empty() { Ok(out) } else { Err(not_active(spec, version, &missing)) }
    }
}

/// A look-up of files not active at the version read: their rows would be
/// silently missed, so the look-up is refused.
fn not_active(spec: &TableSpec, version: Option<u64>, missing: &[&str]) -> Error {
    Error::Internal(format!(
        "table `{}`: look-up of files that are not active at version {}: {}",
        spec.name,
        version.unwrap_or_default(),
        missing.join(", ")
    ))
}

impl Lookup {
    /// Rows whose `column` is one of `keys`.
    pub fn new(column: &str, keys: impl IntoIterator<Item = String>) -> Self {
        Lookup {
            column: column.to_owned(),
            keys: Arc::new(keys.into_iter().collect()),
            columns: Vec::new(),
            partitions: None,
        }
    }

    /// Only files whose value of the integer partition column `column` is
    /// one of `values` (when the caller knows where its keys live: the
    /// index names each artifact's step). A table not partitioned by
    /// `column` reads every file.
    #[must_use]
    pub fn in_partitions(mut self, column: &str, values: impl IntoIterator<Item = i64>) -> Self {
        self.partitions = Some((column.to_owned(), values.into_iter().collect()));
        self
    }

    /// Only these columns, in this order (default: every column).
    #[must_use]
    pub fn columns(mut self, columns: &[&str]) -> Self {
        self.columns = columns.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    /// Read the matching rows of `files` (relative paths of active files).
    pub async fn read(
        &self,
        handle: &DeltaTable,
        spec: &TableSpec,
        files: &[String],
    ) -> Result<Vec<RecordBatch>> {
        let all = files.iter().map(|f| (f.clone(), self.keys.clone())).collect();
        self.read_each(handle, spec, all, None).await
    }

    /// Read the matching rows of the files a key-filter [`LookupPlan`]
    /// names: files no filter covers for every key, the others for only the
    /// keys their filter may hold (so a file's row-group bloom filters are
    /// probed with a handful of keys, not all of them).
    pub async fn read_planned(
        &self,
        handle: &DeltaTable,
        spec: &TableSpec,
        plan: &LookupPlan<String>,
    ) -> Result<Vec<RecordBatch>> {
        self.read_planned_in(handle, spec, plan, None).await
    }

    /// [`Lookup::read_planned`], the files' sizes and partition values
    /// taken from `index` (of `handle`'s version) when there is one.
    pub(crate) async fn read_planned_in(
        &self,
        handle: &DeltaTable,
        spec: &TableSpec,
        plan: &LookupPlan<String>,
        index: Option<&FileIndex>,
    ) -> Result<Vec<RecordBatch>> {
        let mut reads: Vec<(String, Arc<HashSet<String>>)> =
            plan.uncovered.iter().map(|f| (f.clone(), self.keys.clone())).collect();
        for candidates in &plan.candidates {
            let hits: Arc<HashSet<String>> = Arc::new(
                candidates.keys.iter().filter(|k| self.keys.contains(*k)).cloned().collect(),
            );
            reads.extend(candidates.files.iter().map(|f| (f.clone(), hits.clone())));
        }
        self.read_each(handle, spec, reads, index).await
    }

    /// Read the rows of each file whose key is one of that file's keys.
    async fn read_each(
        &self,
        handle: &DeltaTable,
        spec: &TableSpec,
        mut reads: Vec<(String, Arc<HashSet<String>>)>,
        index: Option<&FileIndex>,
    ) -> Result<Vec<RecordBatch>> {
        reads.retain(|(_, keys)| !keys.is_empty());
        if reads.is_empty() {
            return Ok(Vec::new());
        }
        let schema = self.output_schema(handle, spec)?;
        let files: Vec<String> = reads.iter().map(|(f, _)| f.clone()).collect();
        let mut sources = match index {
            Some(index) => index.sources(spec, handle.version(), &files)?,
            None => file_sources(handle, spec, &files)?,
        };
        if let Some((column, values)) = &self.partitions {
            sources.retain(|source| in_partition(source, column, values));
        }
        let keys_of: BTreeMap<String, Arc<HashSet<String>>> = reads.into_iter().collect();
        let reads = sources.into_iter().map(|source| FileRead {
            table: spec.name.clone(),
            column: self.column.clone(),
            keys: keys_of.get(&source.path).cloned().unwrap_or_default(),
            schema: schema.clone(),
            reader: FileReader::new(
                handle.object_store(),
                handle.table_url().as_str(),
                &source.path,
                source.size,
            ),
            source,
        });
        let batches: Vec<Option<RecordBatch>> = futures::stream::iter(reads)
            .map(|read| async move {
                tokio::spawn(read.run()).await.map_err(|e| {
                    Error::Internal(format!("table `{}`: a file read failed: {e}", spec.name))
                })?
            })
            .buffer_unordered(CONCURRENT_FILES)
            .try_collect()
            .await?;
        Ok(batches.into_iter().flatten().filter(|b| b.num_rows() > 0).collect())
    }

    /// The table's schema (text and binary as views), projected.
    fn output_schema(&self, handle: &DeltaTable, spec: &TableSpec) -> Result<SchemaRef> {
        let full = viewed(table::arrow_schema(handle, spec)?.as_ref());
        if self.columns.is_empty() {
            return Ok(full);
        }
        let fields = self
            .columns
            .iter()
            .map(|c| {
                full.field_with_name(c).cloned().map_err(|_| {
                    Error::InvalidInput(format!("table `{}` has no column `{c}`", spec.name))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Schema::new(fields)))
    }
}

impl FileRead {
    async fn run(self) -> Result<Option<RecordBatch>> {
        let FileRead { table, column, keys, schema, mut reader, source } = self;
        let what = |e: parquet::errors::ParquetError| {
            Error::parquet(format!("table `{table}` file {}", source.path), e)
        };
        let metadata = reader.get_metadata(None).await.map_err(what)?;
        let descr = metadata.file_metadata().schema_descr_ptr();
        let leaf = |name: &str| (0..descr.num_columns()).find(|&i| descr.column(i).name() == name);
        let Some(key_leaf) = leaf(&column) else {
            // A file without the key column holds no row with a key.
            return Ok(None);
        };
        let row_groups = row_groups(&keys, &mut reader, &metadata, key_leaf).await.map_err(what)?;
        if row_groups.is_empty() {
            return Ok(None);
        }
        // Text and binary are decoded as view arrays: a batch of large
        // values (data artifacts of hundreds of MB) never overflows 32-bit
        // offsets.
        let plain = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new())
            .map_err(what)?;
        let options = ArrowReaderOptions::new().with_schema(viewed(plain.schema()));
        let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(
            reader,
            ArrowReaderMetadata::try_new(metadata, options).map_err(what)?,
        );
        let mut wanted: Vec<usize> = schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .chain(std::iter::once(column.as_str()))
            .filter_map(leaf)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut stream = builder
            .with_row_groups(row_groups)
            .with_projection(ProjectionMask::leaves(&descr, wanted))
            .build()
            .map_err(what)?;
        // Filtered batch by batch: only matching rows are kept.
        let mut out = Vec::new();
        let matcher = Matcher::new(&keys);
        while let Some(batch) = stream.try_next().await.map_err(what)? {
            let kept = matcher.matching(&column, &batch, &table)?;
            if kept.num_rows() > 0 {
                out.push(conform(&kept, &schema, &source, &table)?);
            }
        }
        if out.is_empty() {
            return Ok(None);
        }
        deltalake::arrow::compute::concat_batches(&schema, &out)
            .map(Some)
            .map_err(|e| Error::arrow(format!("table `{table}`"), e))
    }
}

/// The row groups whose bloom filter for the key column may hold one of
/// our keys (all row groups without one).
async fn row_groups(
    keys: &HashSet<String>,
    reader: &mut FileReader,
    metadata: &ParquetMetaData,
    key_leaf: usize,
) -> parquet::errors::Result<Vec<usize>> {
    let filters = reader.bloom_filters(metadata, key_leaf).await?;
    Ok(filters
        .iter()
        .enumerate()
        .filter(|(_, filter)| {
            filter.as_ref().is_none_or(|f| keys.iter().any(|k| f.check(k.as_str())))
        })
        .map(|(rg, _)| rg)
        .collect())
}

/// Which rows hold one of the keys. A look-up is mostly of a handful of
/// keys against a row group of thousands of rows: those are compared
/// directly (a length and a few bytes reject a row). A de-duplication
/// confirms thousands of keys against every row of a file: there a row is
/// first tested by its string view alone (length and 4-byte prefix, hashed
/// into a bitmap of the keys'), so that most rows are rejected without
/// touching their bytes or hashing them, and only the rest are looked up in
/// the set.
enum Matcher<'k> {
    /// At most [`FEW`] keys, compared one by one.
    Few(Vec<&'k str>),
    /// More: the set, and bit `tag(len, prefix)` set for every key longer
    /// than [`INLINE`] bytes (shorter values are inline in their view and
    /// looked up in the set).
    Many { keys: &'k HashSet<String>, tags: Vec<u64> },
}

/// Keys compared one by one rather than through a set.
const FEW: usize = 16;
/// Bytes a string view holds inline (whole values up to this length).
const INLINE: usize = 12;
/// Bits of a view tag: a bitmap of 2¹⁶ bits (8 KiB) stays in cache; with
/// 10k keys about one row in seven passes to the set.
const TAG_BITS: u32 = 16;

/// The bit of a view of `len` bytes starting with `prefix`.
fn tag(len: u32, prefix: u32) -> usize {
    let x = ((u64::from(len) << 32) | u64::from(prefix)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> (64 - TAG_BITS)) as usize
}

impl<'k> Matcher<'k> {
    fn new(keys: &'k HashSet<String>) -> Self {
        if keys.len() <= FEW {
            return Matcher::Few(keys.iter().map(String::as_str).collect());
        }
        let mut tags = vec![0u64; (1usize << TAG_BITS) / 64];
        for key in keys.iter().map(String::as_bytes).filter(|k| k.len() > INLINE) {
            let prefix = u32::from_le_bytes([key[0], key[1], key[2], key[3]]);
            let bit = tag(key.len() as u32, prefix);
            tags[bit / 64] |= 1 << (bit % 64);
        }
        Matcher::Many { keys, tags }
    }

    fn wanted(&self, value: &str) -> bool {
        match self {
            Matcher::Few(few) => few.contains(&value),
            Matcher::Many { keys, .. } => keys.contains(value),
        }
    }

    /// Whether the row of `view` may hold a key (exactly: false only if it
    /// holds none).
    fn may_hold(tags: &[u64], view: u128) -> bool {
        let len = view as u32;
        if len as usize <= INLINE {
            return true;
        }
        let bit = tag(len, (view >> 32) as u32);
        tags[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The rows of `batch` whose `column` holds one of the keys.
    fn matching(&self, column: &str, batch: &RecordBatch, table: &str) -> Result<RecordBatch> {
        let arrow = |e| Error::arrow(format!("table `{table}`"), e);
        let index = batch
            .schema()
            .index_of(column)
            .map_err(|_| Error::Internal(format!("table `{table}`: `{column}` not read")))?;
        let column = batch.column(index);
        let mask: BooleanArray = match (column.as_any().downcast_ref::<StringViewArray>(), self) {
            (Some(text), Matcher::Many { keys, tags }) => (0..text.len())
                .map(|i| {
                    Some(
                        text.is_valid(i)
                            && Self::may_hold(tags, text.views()[i])
                            && keys.contains(text.value(i)),
                    )
                })
                .collect(),
            (Some(text), Matcher::Few(_)) => {
                text.iter().map(|v| Some(v.is_some_and(|v| self.wanted(v)))).collect()
            }
            (None, _) => {
                let text = crate::lake::delta::scan::text_column(batch, index, table)?;
                text.iter().map(|v| Some(v.is_some_and(|v| self.wanted(v)))).collect()
            }
        };
        filter_record_batch(batch, &mask).map_err(arrow)
    }
}

/// `schema` with text and binary columns as their view types.
fn viewed(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let viewed = match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8View,
                DataType::Binary | DataType::LargeBinary => DataType::BinaryView,
                other => other.clone(),
            };
            f.as_ref().clone().with_data_type(viewed)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `batch` (a file's columns) in `schema`: partition columns filled in from
/// the add action, missing columns null, types cast.
fn conform(
    batch: &RecordBatch,
    schema: &SchemaRef,
    source: &FileSource,
    table: &str,
) -> Result<RecordBatch> {
    let arrow = |e| Error::arrow(format!("table `{table}` file {}", source.path), e);
    let rows = batch.num_rows();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = if let Some(value) = source.partition.get(field.name()) {
            let repeat = UInt32Array::from(vec![0u32; rows]);
            take(value.as_ref(), &repeat, None).map_err(arrow)?
        } else if let Some(column) = batch.column_by_name(field.name()) {
            column.clone()
        } else {
            new_null_array(field.data_type(), rows)
        };
        let column = if column.data_type() == field.data_type() {
            column
        } else {
            cast(&column, field.data_type()).map_err(arrow)?
        };
        columns.push(column);
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(arrow)
}

/// Whether `source`'s value of the partition column `column` is one of
/// `values`; true when the table is not partitioned by it.
fn in_partition(source: &FileSource, column: &str, values: &HashSet<i64>) -> bool {
    let Some(value) = source.partition.get(column) else { return true };
    let Ok(value) = cast(value, &DataType::Int64) else { return true };
    let Some(value) = value.as_any().downcast_ref::<deltalake::arrow::array::Int64Array>() else {
        return true;
    };
    value.len() == 1 && value.is_valid(0) && values.contains(&value.value(0))
}

/// The given files with their sizes and partition values (one-row arrays);
/// every file must be active in `handle`.
fn file_sources(
    handle: &DeltaTable,
    spec: &TableSpec,
    files: &[String],
) -> Result<Vec<Arc<FileSource>>> {
    let wanted: HashSet<&str> = files.iter().map(String::as_str).collect();
    let out = match sources_from_file_list(handle, spec, |path| wanted.contains(path), None)? {
        Some(out) => out,
        None => sources_from_add_actions(handle, spec, &wanted)?,
    };
    // A file the handle does not list would be skipped, and its rows
    // silently missed: refuse instead.
    if out.len() < wanted.len() {
        let found: HashSet<&str> = out.iter().map(|s| s.path.as_str()).collect();
        let missing: Vec<&str> = wanted.difference(&found).copied().collect();
        return Err(not_active(spec, handle.version(), &missing));
    }
    Ok(out)
}

/// The sources of the files of the table's [`table::file_list`] that
/// `wanted` picks (those `previous` holds taken from it). `None` when it
/// cannot answer exactly — a path not in the log's spelling, or a partition
/// value it does not hold parsed — and the add-action table must.
fn sources_from_file_list(
    handle: &DeltaTable,
    spec: &TableSpec,
    wanted: impl Fn(&str) -> bool,
    previous: Option<&FileIndex>,
) -> Result<Option<Vec<Arc<FileSource>>>> {
    let mut out = Vec::new();
    for file in table::file_list(handle, spec)?.iter() {
        let Some(path) = table::path_as_logged(&file) else { return Ok(None) };
        if !wanted(path) {
            continue;
        }
        if let Some(known) = previous.and_then(|p| p.files.get(path)) {
            out.push(known.clone());
            continue;
        }
        let mut partition = BTreeMap::new();
        if !spec.partition_columns.is_empty() {
            let Some(values) = file.partition_values() else { return Ok(None) };
            for column in &spec.partition_columns {
                let at = values.fields().iter().position(|f| f.name() == column);
                let Some(value) = at.and_then(|i| values.values().get(i)) else {
                    return Ok(None);
                };
                let Ok(array) = value.to_array(1) else { return Ok(None) };
                partition.insert(column.clone(), array);
            }
        }
        let size = u64::try_from(file.size()).unwrap_or_default();
        out.push(Arc::new(FileSource { path: path.to_owned(), size, partition }));
    }
    Ok(Some(out))
}

/// [`file_sources`] from the table's add actions (statistics flattened for
/// every file: the general path).
fn sources_from_add_actions(
    handle: &DeltaTable,
    spec: &TableSpec,
    wanted: &HashSet<&str>,
) -> Result<Vec<Arc<FileSource>>> {
    let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let adds = state.add_actions_table(true).map_err(|e| Error::delta(&spec.name, e))?;
    let paths = adds
        .column_by_name("path")
        .map(|c| cast(c, &DataType::Utf8))
        .transpose()
        .map_err(|e| Error::arrow(format!("table `{}` add actions", spec.name), e))?;
    let Some(paths) = paths else { return Ok(Vec::new()) };
    let paths = paths
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| Error::Internal(format!("table `{}`: add paths", spec.name)))?;
    let sizes = adds
        .column_by_name("size_bytes")
        .and_then(|c| c.as_any().downcast_ref::<deltalake::arrow::array::Int64Array>())
        .ok_or_else(|| Error::Internal(format!("table `{}`: add sizes", spec.name)))?;
    let mut out = Vec::new();
    for row in 0..paths.len() {
        if !wanted.contains(paths.value(row)) {
            continue;
        }
        let mut partition = BTreeMap::new();
        for column in &spec.partition_columns {
            let values = adds.column_by_name(&format!("partition.{column}")).ok_or_else(|| {
                Error::Internal(format!(
                    "table `{}`: no partition value `{column}` in the add actions",
                    spec.name
                ))
            })?;
            partition.insert(column.clone(), values.slice(row, 1));
        }
        let size = u64::try_from(sizes.value(row)).unwrap_or_default();
        out.push(Arc::new(FileSource { path: paths.value(row).to_owned(), size, partition }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(values: &[&str]) -> RecordBatch {
        let column: ArrayRef =
            Arc::new(StringViewArray::from_iter(values.iter().map(|v| Some(*v))));
        RecordBatch::try_from_iter([("id", column)]).expect("a one-column batch")
    }

    fn matched(keys: &HashSet<String>, values: &[&str]) -> Vec<String> {
        let kept = Matcher::new(keys).matching("id", &batch(values), "t").expect("matched");
        let text = kept.column(0).as_any().downcast_ref::<StringViewArray>().expect("views");
        text.iter().map(|v| v.unwrap_or_default().to_owned()).collect()
    }

    #[test]
    fn many_keys_match_exactly_the_rows_holding_them_whatever_their_length() {
        // More than 16 keys: rows are screened by their views first. Keys
        // of every length around the inline limit, and rows sharing a key's
        // length and prefix but not its bytes.
        let keys: HashSet<String> = (0..40)
            .map(|i| format!("{:0>width$}", i, width = 1 + i % 20))
            .chain((0..200).map(|i| blake3::hash(format!("k{i}").as_bytes()).to_hex().to_string()))
            .collect();
        let mut rows: Vec<String> = keys.iter().cloned().collect();
        for key in keys.iter().filter(|k| k.len() > INLINE) {
            let mut near = key.clone().into_bytes();
            let last = near.len() - 1;
            near[last] = if near[last] == b'x' { b'y' } else { b'x' };
            rows.push(String::from_utf8(near).expect("ascii"));
        }
        rows.extend(
            (0..5000).map(|i| blake3::hash(format!("other{i}").as_bytes()).to_hex().to_string()),
        );
        rows.extend(["", "short", "0"].map(str::to_owned));
        let values: Vec<&str> = rows.iter().map(String::as_str).collect();
        let mut got = matched(&keys, &values);
        got.sort();
        let mut want: Vec<String> = rows.iter().filter(|r| keys.contains(*r)).cloned().collect();
        want.sort();
        assert_eq!(got, want);
        assert!(want.len() >= 240, "every key is among the rows");
    }

    #[test]
    fn few_keys_match_exactly() {
        let keys: HashSet<String> = ["a", "bbbbbbbbbbbbbbbbbbbb"].map(str::to_owned).into();
        let got = matched(&keys, &["a", "b", "bbbbbbbbbbbbbbbbbbbb", "bbbbbbbbbbbbbbbbbbbc"]);
        assert_eq!(got, ["a", "bbbbbbbbbbbbbbbbbbbb"]);
    }

    /// The files' sizes and partition values read from the snapshot's file
    /// list are those of the add-action table, file for file.
    #[tokio::test]
    async fn file_sources_from_the_file_list_match_the_add_actions() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (lake, _) = crate::Lake::init(dir.path()).await.expect("a lake");
        for (step, n) in [(1, 3), (2, 2), (-1, 1), (7, 4)] {
            let artifacts: Vec<_> = (0..n)
                .map(|i| {
                    let draft = crate::Draft::metric(serde_json::json!({"s": step, "i": i}));
                    draft.expect("a metric").with_step(step).finalize(lake.registry()).expect("id")
                })
                .collect();
            lake.put(&artifacts).await.expect("a put");
        }
        let spec = lake.table_spec("metrics").await.expect("the metrics spec");
        let handle = table::open(lake.root(), &spec).await.expect("the metrics table");
        let active = table::active_files(&handle, &spec).expect("its files");
        assert_eq!(active.len(), 4);
        let wanted: HashSet<&str> = active.iter().map(String::as_str).collect();
        let fast = sources_from_file_list(&handle, &spec, |p| wanted.contains(p), None)
            .expect("read")
            .expect("answered from the file list");
        let general = sources_from_add_actions(&handle, &spec, &wanted).expect("read");
        /// A file's path, size and partition values.
        type Described = (String, u64, Vec<(String, i64)>);
        let described = |sources: &[Arc<FileSource>]| -> Vec<Described> {
            let mut out: Vec<_> = sources
                .iter()
                .map(|s| {
                    let values = s
                        .partition
                        .iter()
                        .map(|(c, v)| {
                            let v = cast(v, &DataType::Int64).expect("an integer partition");
                            let v =
                                v.as_any().downcast_ref::<deltalake::arrow::array::Int64Array>();
                            (c.clone(), v.expect("Int64").value(0))
                        })
                        .collect();
                    (s.path.clone(), s.size, values)
                })
                .collect();
            out.sort();
            out
        };
        let steps: Vec<i64> = described(&fast).iter().map(|(_, _, v)| v[0].1).collect();
        assert_eq!(described(&fast), described(&general));
        assert_eq!(steps.iter().copied().collect::<std::collections::BTreeSet<_>>().len(), 4);
        assert!(described(&fast).iter().all(|(_, size, _)| *size > 0));
        // Asking for one file answers one; a file not active is refused.
        let one = file_sources(&handle, &spec, &active[..1]).expect("one file");
        assert_eq!(one.len(), 1);
        let err = file_sources(&handle, &spec, &["step=1/not-there.parquet".to_owned()]);
        assert!(err.is_err());
        // The version's index answers the same, and refuses the same.
        let index = FileIndex::of(&handle, &spec, None).expect("read").expect("an index");
        let mut paths = index.paths();
        paths.sort();
        let mut sorted = active.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        let indexed = index.sources(&spec, handle.version(), &active).expect("every file");
        assert_eq!(described(&indexed), described(&general));
        assert!(index.sources(&spec, handle.version(), &["step=1/x.parquet".into()]).is_err());
        // The next version's index takes the files still active from it.
        let more = crate::Draft::metric(serde_json::json!({"more": 1})).expect("a metric");
        lake.put(&[more.with_step(3).finalize(lake.registry()).expect("id")]).await.expect("put");
        let moved = table::open(lake.root(), &spec).await.expect("the metrics table");
        let next = FileIndex::of(&moved, &spec, Some(&index)).expect("read").expect("an index");
        assert_eq!(next.paths().len(), 5);
        let reused = active.iter().filter(|f| Arc::ptr_eq(&next.files[*f], &index.files[*f]));
        assert_eq!(reused.count(), 4);
    }
}
