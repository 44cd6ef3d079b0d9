//! Creating, checking, opening and appending to one Delta table.
//!
//! Handles are opened fresh for each operation rather than kept for the
//! lake's lifetime: a long-lived `DeltaTable` handle slows down with every
//! commit made through it (measured in `shared/notes/deltalake-1x.md`).

use std::path::{Path, PathBuf};

use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::kernel::StructField;
use deltalake::parquet::basic::{Compression, ZstdLevel};
use deltalake::parquet::file::properties::{BloomFilterPosition, WriterProperties};
use deltalake::parquet::schema::types::ColumnPath;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, TableProperty};

use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;
use crate::lake::io::log_entry;
use crate::lake::keys::in_store::StoreKeys;
use crate::lake::keys::key_filter;
use crate::lake::keys::key_set;
use crate::lake::keys::sidecar::{Bundle, Part};
use crate::lake::layout::TableSpec;

/// Versions between checkpoints of a table sluice creates in an object
/// store: a process opening the table replays at most this many log
/// entries, one request each, after reading the checkpoint.
pub const STORE_CHECKPOINT_INTERVAL: u64 = 10;

/// The zstd level of every Parquet file sluice writes.
pub const ZSTD_LEVEL: i32 = 3;

/// A column with less data than this in a file is written uncompressed
/// (see [`compress_where_it_pays`]).
pub const ZSTD_MIN_COLUMN_BYTES: usize = 16 * 1024;

/// Rows per row group in the data files of tables looked up by id: the
/// most rows a look-up decodes per id once the row group's bloom filter
/// says "maybe", whatever the size of the file or of the lake.
pub const LOOKUP_ROW_GROUP_ROWS: usize = 8192;

/// False-positive rate of the bloom filters of indexed columns, per key: a
/// look-up of k keys decodes a row group that holds none of them with
/// probability about k × this.
const BLOOM_FPP: f64 = 0.001;

fn zstd() -> Compression {
    // Level 3 is always valid; fall back to the default level rather than panic.
    Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).unwrap_or_default())
}

/// Writer properties for Parquet files that no look-up by id reads
/// (staging, ingestion tables, system tables): zstd.
pub fn writer_properties() -> WriterProperties {
    WriterProperties::builder().set_compression(zstd()).build()
}

/// Writer properties for a table's data files: zstd and, for every column
/// the table is looked up by ([`TableSpec::indexed_columns`]), a bloom
/// filter per row group of [`LOOKUP_ROW_GROUP_ROWS`] rows. A look-up then
/// reads, of each file its key filters name, the footer and those bloom
/// filters, and decodes only the row groups that may hold its ids: its cost
/// no longer grows with the size of the files (compaction makes them large).
pub fn writer_properties_for(spec: &TableSpec) -> WriterProperties {
    let columns = spec.indexed_columns();
    let mut builder = WriterProperties::builder().set_compression(zstd());
    if columns.is_empty() {
        return builder.build();
    }
    // Bloom filters together before the footer: a look-up fetches those of
    // a file in one contiguous read (the default puts each after its row
    // group, and the file's whole span lies between the first and the last).
    builder = builder
        .set_max_row_group_row_count(Some(LOOKUP_ROW_GROUP_ROWS))
        .set_bloom_filter_position(BloomFilterPosition::End);
    for column in columns {
        let path = ColumnPath::from(*column);
        builder = builder
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), BLOOM_FPP)
            .set_column_bloom_filter_max_ndv(path, LOOKUP_ROW_GROUP_ROWS as u64);
    }
    builder.build()
}

/// `properties` for a write of `batches`: a column whose data there is under
/// [`ZSTD_MIN_COLUMN_BYTES`] is written uncompressed, every other column
/// keeps the properties' compression (zstd). Sizes are those of the whole
/// write (a partitioned table splits it into files per partition, each
/// compressed as the whole).
///
/// Why: parquet-rs builds a zstd compressor *and* decompressor (a context of
/// ~100 KiB each, zeroed) for every column chunk it writes or reads. Staged
/// files and small commits hold a handful of rows per column, which zstd
/// cannot shrink (its frame costs about what it saves), yet creating those
/// contexts was 30% of the CPU of a pipeline of small units (`perf`,
/// `sluice bench pipeline`). Large columns — payloads, and every column of
/// a compacted file — are zstd as before; nested columns keep it always.
pub fn compress_where_it_pays(
    properties: WriterProperties,
    batches: &[RecordBatch],
) -> WriterProperties {
    let Some(first) = batches.first() else { return properties };
    let schema = first.schema();
    let small: Vec<&str> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, field)| !field.data_type().is_nested())
        .filter(|(i, _)| {
            let bytes: usize = batches
                .iter()
                .filter_map(|b| b.columns().get(*i))
                .map(|c| c.get_buffer_memory_size())
                .sum();
            bytes < ZSTD_MIN_COLUMN_BYTES
        })
        .map(|(_, field)| field.name().as_str())
        .collect();
    if small.is_empty() {
        return properties;
    }
    let mut builder = properties.into_builder();
    for name in small {
        builder = builder.set_column_compression(ColumnPath::from(name), Compression::UNCOMPRESSED);
    }
    builder.build()
}

/// Absolute directory of a table, in a lake on a filesystem.
pub fn table_dir(root: &Path, spec: &TableSpec) -> PathBuf {
    root.join(&spec.path)
}

/// Where a table is, as messages show it.
pub(crate) fn shown(root: &LakeRoot, spec: &TableSpec) -> PathBuf {
    root.shown(&spec.path)
}

/// Whether the lake holds the table (see [`is_table`]; on a store, the
/// same objects are looked for with a request each, the log listed last).
pub async fn exists(root: &LakeRoot, spec: &TableSpec) -> Result<bool> {
    match root {
        LakeRoot::Local(path) => Ok(is_table(&table_dir(path, spec))),
        // Boxed: every caller's future would otherwise carry the requests'.
        LakeRoot::Store(store) => Box::pin(exists_in_store(store, &spec.path)).await,
    }
}

/// Tables of a store this process has seen exist, by URL: a table is
/// never removed from a lake, so each is looked for once per process
/// (every open and every lake point asks, one request each).
fn known_tables() -> &'static std::sync::Mutex<std::collections::HashSet<String>> {
    static KNOWN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    KNOWN.get_or_init(Default::default)
}

async fn exists_in_store(
    store: &crate::lake::io::location::StoreRoot,
    relative: &str,
) -> Result<bool> {
    let known = format!("{store}{relative}");
    if known_tables().lock().is_ok_and(|k| k.contains(&known)) {
        return Ok(true);
    }
    let found = look_for_table(store, relative).await?;
    if found && let Ok(mut k) = known_tables().lock() {
        k.insert(known);
    }
    Ok(found)
}

async fn look_for_table(
    store: &crate::lake::io::location::StoreRoot,
    relative: &str,
) -> Result<bool> {
    use futures::TryStreamExt;
    let log = store.object(&format!("{relative}/_delta_log"));
    let failed = |what: &str, source| Error::Store {
        what: format!("{what} {store}{relative}/_delta_log"),
        source,
    };
    for first in [format!("{:020}.json", 0), "_last_checkpoint".to_owned()] {
        let location = log.clone().join(first.as_str());
        if is_present(store.store().as_ref(), &location)
            .await
            .map_err(|e| failed("looking for a table at", e))?
        {
            return Ok(true);
        }
    }
    let listed: Vec<object_store::ObjectMeta> =
        store.store().list(Some(&log)).try_collect().await.map_err(|e| failed("listing", e))?;
    Ok(listed
        .iter()
        .any(|meta| meta.location.extension().is_some_and(|ext| ext == "json" || ext == "parquet")))
}

/// Whether a directory holds a Delta table: its log holds a commit or a
/// checkpoint. A log folder without either is a creation that was killed
/// before its first commit landed (the folder is made before the commit
/// file is renamed into place): no table, so [`ensure`] creates it.
/// (The first commit or the checkpoint hint answers with one `stat`; a
/// long log is listed only when both are gone.)
pub fn is_table(dir: &Path) -> bool {
    let log = dir.join("_delta_log");
    if crate::lake::io::log_entry::entry_path(dir, 0).is_file()
        || log.join("_last_checkpoint").is_file()
    {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(log) else { return false };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.ends_with(".json") || name.ends_with(".parquet")
    })
}

/// The builder of the table at `relative` in the lake, with the lake's
/// store options.
fn builder(root: &LakeRoot, relative: &str, name: &str) -> Result<deltalake::DeltaTableBuilder> {
    let url = root.url_of(relative)?;
    let builder = deltalake::DeltaTableBuilder::from_url(url).map_err(|e| Error::delta(name, e))?;
    Ok(match root.store_root() {
        Some(store) => builder.with_storage_options(store.options().clone()),
        None => builder,
    })
}

/// The table at `relative`, not loaded (delta-rs's handle, no I/O yet).
fn unloaded(root: &LakeRoot, relative: &str, name: &str) -> Result<DeltaTable> {
    crate::lake::io::storage::register();
    builder(root, relative, name)?.build().map_err(|e| Error::delta(name, e))
}

/// What [`ensure`] did to a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnsureOutcome {
    /// The table was created.
    Created,
    /// The table existed with the expected schema.
    Unchanged,
    /// The table existed; these columns were added.
    Evolved(Vec<String>),
}

/// Create the table if it does not exist; otherwise check its schema and add
/// any missing columns (as nullable). A column whose type conflicts, or a
/// partitioning that differs, is an error naming the table and column.
pub async fn ensure(root: &LakeRoot, spec: &TableSpec) -> Result<EnsureOutcome> {
    ensure_opened(root, spec).await.map(|(outcome, _)| outcome)
}

/// [`ensure`], with the handle it opened to check an unchanged table's
/// schema (loaded at the version checked), for the caller to keep.
pub async fn ensure_opened(
    root: &LakeRoot,
    spec: &TableSpec,
) -> Result<(EnsureOutcome, Option<DeltaTable>)> {
    if exists(root, spec).await? {
        let table = open(root, spec).await?;
        let missing = check_schema(&table, spec)?;
        if missing.is_empty() {
            return Ok((EnsureOutcome::Unchanged, Some(table)));
        }
        let names = missing.iter().map(|f| f.name().clone()).collect();
        table.add_columns().with_fields(missing).await.map_err(|e| Error::delta(&spec.name, e))?;
        return Ok((EnsureOutcome::Evolved(names), None));
    }
    if let Some(root) = root.local() {
        let dir = table_dir(root, spec);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    let mut create = unloaded(root, &spec.path, &spec.name)?
        .create()
        .with_table_name(&spec.name)
        .with_columns(spec.columns.iter().map(|c| c.delta_field()))
        .with_partition_columns(spec.partition_columns.clone())
        .with_configuration_property(TableProperty::EnableChangeDataFeed, Some("true"))
        .with_configuration_property(
            TableProperty::DataSkippingStatsColumns,
            Some(spec.stats_columns.join(",")),
        )
        .with_save_mode(SaveMode::ErrorIfExists);
    // On a store every log entry a reader replays is a request: a table
    // there is checkpointed more often than Delta's default of every 100.
    if root.store_root().is_some() {
        create = create.with_configuration_property(
            TableProperty::CheckpointInterval,
            Some(STORE_CHECKPOINT_INTERVAL.to_string()),
        );
    }
    create.await.map_err(|e| Error::delta(&spec.name, e))?;
    Ok((EnsureOutcome::Created, None))
}

/// Open the table `spec` names, creating it with the columns of `schema`
/// (and the same table properties as sluice's own tables) if the lake
/// holds none. For tables whose schema is declared outside sluice's layout
/// (ingestion: `spec` gives the name and the place).
pub async fn open_or_create(
    root: &LakeRoot,
    spec: &TableSpec,
    schema: &deltalake::arrow::datatypes::Schema,
    partition_columns: Vec<String>,
) -> Result<DeltaTable> {
    use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
    if exists(root, spec).await? {
        return open(root, spec).await;
    }
    let name = &spec.name;
    let delta: deltalake::kernel::StructType =
        schema.try_into_kernel().map_err(|e| Error::arrow(format!("the schema of `{name}`"), e))?;
    let columns: Vec<StructField> = delta.fields().cloned().collect();
    if let Some(root) = root.local() {
        let dir = table_dir(root, spec);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    let mut create = unloaded(root, &spec.path, name)?
        .create()
        .with_table_name(name)
        .with_columns(columns)
        .with_partition_columns(partition_columns)
        .with_configuration_property(TableProperty::EnableChangeDataFeed, Some("true"))
        .with_save_mode(SaveMode::Ignore);
    if root.store_root().is_some() {
        create = create.with_configuration_property(
            TableProperty::CheckpointInterval,
            Some(STORE_CHECKPOINT_INTERVAL.to_string()),
        );
    }
    match create.await {
        Ok(created) => Ok(created),
        // Another process created it between our check and our commit of
        // version 0 (put-if-absent: one of us wins): use theirs.
        Err(e) if exists(root, spec).await? => {
            tracing::debug!(table = %name, error = %e, "lost the race to create the table");
            open(root, spec).await
        }
        Err(e) => Err(Error::delta(name, e)),
    }
}

/// Compare a table's schema with its spec. Returns the fields to add.
fn check_schema(table: &DeltaTable, spec: &TableSpec) -> Result<Vec<StructField>> {
    let snapshot = table.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let schema = snapshot.schema();
    let partitions = snapshot.metadata().partition_columns().to_vec();
    if partitions != spec.partition_columns {
        return Err(Error::SchemaConflict {
            table: spec.name.clone(),
            column: spec
                .partition_columns
                .first()
                .or(partitions.first())
                .cloned()
                .unwrap_or_default(),
            message: format!(
                "the table is partitioned by {:?} but sluice expects {:?}",
                partitions, spec.partition_columns
            ),
        });
    }
    let mut missing = Vec::new();
    for column in &spec.columns {
        match schema.field(&column.name) {
            None => {
                missing.push(StructField::new(&column.name, column.column_type.delta_type(), true))
            }
            Some(existing) => {
                if existing.data_type() != &column.column_type.delta_type() {
                    return Err(Error::SchemaConflict {
                        table: spec.name.clone(),
                        column: column.name.clone(),
                        message: format!(
                            "the table stores {:?} but sluice expects {} ({:?})",
                            existing.data_type(),
                            column.column_type,
                            column.column_type.delta_type()
                        ),
                    });
                }
                if !existing.is_nullable() && column.nullable {
                    return Err(Error::SchemaConflict {
                        table: spec.name.clone(),
                        column: column.name.clone(),
                        message: "the table declares it NOT NULL but sluice writes nulls to it"
                            .into(),
                    });
                }
            }
        }
    }
    Ok(missing)
}

/// Open a table at its latest version.
pub async fn open(root: &LakeRoot, spec: &TableSpec) -> Result<DeltaTable> {
    let mut table = open_unloaded(root, spec).await?;
    table.load().await.map_err(|e| Error::delta(&spec.name, e))?;
    Ok(table)
}

/// Open a table without loading its state (for time travel).
pub async fn open_unloaded(root: &LakeRoot, spec: &TableSpec) -> Result<DeltaTable> {
    if !exists(root, spec).await? {
        return Err(Error::NotInitialized {
            what: format!("table `{}`", spec.name),
            path: shown(root, spec),
        });
    }
    unloaded(root, &spec.path, &spec.name)
}

/// A table's latest version, no state loaded: searched for by `stat`s from
/// its last checkpoint (see [`head_from`]), else from a listing of its log.
/// A log of thousands of entries takes tens of milliseconds to list; the
/// search takes a few `stat`s.
pub async fn latest_version(root: &LakeRoot, spec: &TableSpec) -> Result<u64> {
    if let LakeRoot::Store(store) = root {
        return Box::pin(head_in_store(store, spec)).await?.ok_or_else(|| Error::NotInitialized {
            what: format!("table `{}`", spec.name),
            path: shown(root, spec),
        });
    }
    if let Some(dir) = root.local().map(|root| table_dir(root, spec))
        && let Some(head) = reached_version(&dir).and_then(|known| head_from(&dir, known))
    {
        return Ok(head);
    }
    let table = open_unloaded(root, spec).await?;
    table.get_latest_version().await.map_err(|e| Error::delta(&spec.name, e))
}

/// A table's latest version in a store, `None` when there is no table
/// there: from its last checkpoint's pointer (one GET) and a listing of the
/// log from that checkpoint on (one LIST of the entries since), never a
/// listing of the whole log, which a store pages 1,000 names at a time.
pub(crate) async fn head_in_store(
    store: &crate::lake::io::location::StoreRoot,
    spec: &TableSpec,
) -> Result<Option<u64>> {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    let log = store.object(&format!("{}/_delta_log", spec.path));
    let failed = |what: &str, source| Error::Store {
        what: format!("{what} {store}{}/_delta_log", spec.path),
        source,
    };
    let pointer = log.clone().join("_last_checkpoint");
    let checkpointed = match store.store().get(&pointer).await {
        Ok(got) => {
            let bytes = got.bytes().await.map_err(|e| failed("reading", e))?;
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|hint| hint.get("version")?.as_u64())
        }
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => return Err(failed("reading", e)),
    };
    let listed = match checkpointed {
        Some(from) => {
            let offset = log.clone().join(format!("{from:020}").as_str());
            store.store().list_with_offset(Some(&log), &offset)
        }
        None => store.store().list(Some(&log)),
    };
    let listed: Vec<object_store::ObjectMeta> =
        listed.try_collect().await.map_err(|e| failed("listing", e))?;
    let head = listed.iter().filter_map(|m| logged_version(m.location.filename()?)).max();
    if head.is_none() && checkpointed.is_some() {
        // A pointer to a checkpoint that is gone: the log decides.
        let all: Vec<object_store::ObjectMeta> =
            store.store().list(Some(&log)).try_collect().await.map_err(|e| failed("listing", e))?;
        return Ok(all.iter().filter_map(|m| logged_version(m.location.filename()?)).max());
    }
    Ok(head)
}

/// The version a log file stands for (see [`log_entry::log_file`]).
fn logged_version(name: &str) -> Option<u64> {
    match log_entry::log_file(name)? {
        log_entry::LogFile::Commit(version) | log_entry::LogFile::Checkpoint(version) => {
            Some(version)
        }
    }
}

/// A table's version at an instant: the last version committed at or before
/// it, `None` when the table was created later.
///
/// Decided by the commit times the log entries record (`commitInfo`'s
/// timestamp), found by a binary search over the retained entries — not by
/// the entries' file modification times, which a copy of the lake (`cp -r`,
/// a sync to another machine) resets to the moment of the copy. Falls back
/// to Delta's own search when an entry in the way has expired or records
/// no time.
pub async fn version_at(
    root: &LakeRoot,
    spec: &TableSpec,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<Option<u64>> {
    let handle = open_unloaded(root, spec).await?;
    let head = latest_version(root, spec).await?;
    let at = at.timestamp_millis();
    let committed_at = async |version: u64| -> Result<Option<i64>> {
        let Some(actions) = retained_actions(&handle, &spec.name, version).await? else {
            return Ok(None);
        };
        Ok(actions.iter().find_map(|a| match a {
            deltalake::kernel::Action::CommitInfo(info) => info.timestamp,
            _ => None,
        }))
    };
    // The last version committed at or before `at`, in [lo, hi].
    let Some(first) = committed_at(0).await? else {
        return version_at_by_delta(handle, spec, at).await;
    };
    if first > at {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0, head);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        match committed_at(mid).await? {
            Some(time) if time <= at => lo = mid,
            Some(_) => hi = mid - 1,
            None => return version_at_by_delta(handle, spec, at).await,
        }
    }
    Ok(Some(lo))
}

/// [`version_at`] as Delta decides it (by the log files' times).
async fn version_at_by_delta(
    mut handle: DeltaTable,
    spec: &TableSpec,
    at: i64,
) -> Result<Option<u64>> {
    let at = chrono::DateTime::from_timestamp_millis(at).unwrap_or_default();
    handle.load_with_datetime(at).await.map_err(|e| Error::delta(&spec.name, e))?;
    let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let version = state.version();
    // Before the first commit Delta falls back to version 0.
    if version == 0
        && state.version_timestamp(0).is_some_and(|created| created > at.timestamp_millis())
    {
        return Ok(None);
    }
    Ok(Some(version))
}

/// Open a table at a version.
pub async fn open_at(root: &LakeRoot, spec: &TableSpec, version: u64) -> Result<DeltaTable> {
    let mut handle = open_unloaded(root, spec).await?;
    load_version(&mut handle, &spec.name, version).await?;
    Ok(handle)
}

/// Load `handle` at `version`; a version past the table's head, or one
/// whose log clean-up removed, is said in one sentence.
pub async fn load_version(handle: &mut DeltaTable, name: &str, version: u64) -> Result<()> {
    let Err(e) = handle.load_version(version).await else { return Ok(()) };
    let latest = handle.get_latest_version().await.ok();
    Err(Error::TimeTravel {
        table: name.to_owned(),
        as_of: format!("version {version}"),
        message: match latest {
            Some(head) if version > head => {
                format!("its latest version is {head} (`sluice history --table {name}` lists them)")
            }
            Some(head) => format!("{e} (the table's versions are 0..={head})"),
            None => e.to_string(),
        },
    })
}

/// The Arrow schema of an open table (partition columns included).
pub fn arrow_schema(table: &DeltaTable, spec: &TableSpec) -> Result<SchemaRef> {
    Ok(table.snapshot().map_err(|e| Error::delta(&spec.name, e))?.snapshot().arrow_schema())
}

/// Append batches to a table in one commit, zstd-compressed.
pub async fn append(
    table: DeltaTable,
    spec: &TableSpec,
    batches: Vec<RecordBatch>,
) -> Result<DeltaTable> {
    append_with(table, spec, batches, None).await
}

/// Append batches in one commit with commit properties (app transactions,
/// commit metadata).
pub async fn append_with(
    table: DeltaTable,
    spec: &TableSpec,
    batches: Vec<RecordBatch>,
    properties: Option<deltalake::kernel::transaction::CommitProperties>,
) -> Result<DeltaTable> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(table);
    }
    let mut builder = table
        .write(batches)
        .with_save_mode(SaveMode::Append)
        .with_writer_properties(writer_properties_for(spec));
    if let Some(properties) = properties {
        builder = builder.with_commit_properties(properties);
    }
    builder.await.map_err(|e| Error::delta(&spec.name, e))
}

/// The actions of one committed version, read through the table's log
/// store (so it works on every store, not just a local folder).
pub async fn commit_actions(
    table: &DeltaTable,
    name: &str,
    version: u64,
) -> Result<Vec<deltalake::kernel::Action>> {
    retained_actions(table, name, version).await?.ok_or_else(|| Error::NotInitialized {
        what: format!("version {version} of table `{name}`"),
        path: PathBuf::from(table.table_url().to_string()),
    })
}

/// The actions of one committed version, or `None` when its entry is gone
/// (log clean-up removes entries a checkpoint covers). Any other failure to
/// read it is an error: a caller replaying the log must never take an
/// unreadable entry for an expired one.
pub(crate) async fn retained_actions(
    table: &DeltaTable,
    name: &str,
    version: u64,
) -> Result<Option<Vec<deltalake::kernel::Action>>> {
    let Some(bytes) =
        table.log_store().read_commit_entry(version).await.map_err(|e| Error::delta(name, e))?
    else {
        return Ok(None);
    };
    deltalake::logstore::get_actions(version, &bytes).map(Some).map_err(|e| Error::delta(name, e))
}

/// Record the key filter and key set of the ids a version of a table added
/// (see [`sidecar`](crate::lake::keys::sidecar)). Failure only costs lookup speed, so it
/// is logged, not returned.
pub async fn record_keys(
    root: &LakeRoot,
    table: &DeltaTable,
    spec: &TableSpec,
    version: u64,
    ids: &[crate::artifact::ArtifactId],
) {
    if ids.is_empty() {
        return;
    }
    let result = async {
        let files = key_filter::added_files(&commit_actions(table, &spec.name, version).await?);
        let keys: Vec<key_filter::Key> = ids.iter().map(Into::into).collect();
        let filter = key_filter::KeyFilter::new(files.clone(), ids);
        let mut bundle = Bundle::new();
        bundle
            .part(Part::KeySet, key_set::encode(&files, &keys))
            .part(Part::Filter(None), filter.encode());
        match root {
            LakeRoot::Local(root) => bundle.write(&table_dir(root, spec), version),
            LakeRoot::Store(store) => {
                StoreKeys::of(store, spec)
                    .record(version, &bundle, || active_files(table, spec))
                    .await
            }
        }
    };
    if let Err(e) = result.await {
        tracing::warn!(table = %spec.name, version, error = %e, "could not record a key filter");
    }
}

/// Whether the log of the table in `dir` may hold a version after
/// `version` (see the module docs). Anything but a clear "not found" counts
/// as "may".
pub(crate) fn may_have_moved(dir: &Path, version: u64) -> bool {
    let next = crate::lake::io::log_entry::entry_path(dir, version + 1);
    !matches!(std::fs::symlink_metadata(next), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether version `v`'s log entry is present: `None` when the `stat`
/// answered neither "a file" nor "not found" (the caller lists the log).
fn entry_present(dir: &Path, v: u64) -> Option<bool> {
    match std::fs::symlink_metadata(crate::lake::io::log_entry::entry_path(dir, v)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(false),
        Ok(meta) if meta.is_file() => Some(true),
        _ => None,
    }
}

/// The table's latest version, found from `known` (a version the table has
/// reached) by `stat`ing entries after it: Delta versions are consecutive
/// and an entry appears whole, so the entries present after `known` are a
/// run, and the head is its end. The run is searched by doubling steps,
/// then halving (about 2 log₂ of the distance `stat`s, where a listing of
/// the log stats every one of its files). Entries only appear above a
/// checkpoint, and log cleanup removes only entries older than the log
/// retention below one, so the run is not cut under the search. `None`
/// when a `stat` answered neither "present" nor "not found": list the log.
pub(crate) fn head_from(dir: &Path, known: u64) -> Option<u64> {
    // known + 1, + 2, + 4, …: a table one version on costs two `stat`s.
    let (mut present, mut offset) = (known, 1u64);
    let mut absent = loop {
        let probe = known.checked_add(offset)?;
        if !entry_present(dir, probe)? {
            break probe;
        }
        present = probe;
        offset = offset.checked_mul(2)?;
    };
    while absent - present > 1 {
        let mid = present + (absent - present) / 2;
        if entry_present(dir, mid)? {
            present = mid;
        } else {
            absent = mid;
        }
    }
    Some(present)
}

/// The version a table's log is known to have reached without listing it:
/// the one `_last_checkpoint` names (when that version's entry or
/// checkpoint file is there to confirm it), or 0 when the log has no
/// checkpoint and its first entry is there. `None`: list the log.
fn reached_version(dir: &Path) -> Option<u64> {
    let log = dir.join("_delta_log");
    let Ok(bytes) = std::fs::read(log.join("_last_checkpoint")) else {
        return entry_present(dir, 0)?.then_some(0);
    };
    let hint: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let version = hint.get("version")?.as_u64()?;
    let checkpoint = log.join(format!("{version:020}.checkpoint.parquet"));
    (entry_present(dir, version)? || checkpoint.is_file()).then_some(version)
}

/// The snapshot's list of active files as it holds it: no statistics
/// evaluated, unlike Delta's add-action table (see [`active_file_rows`]),
/// whose cost grows with the table's files on every look-up, cache check
/// and lineage walk. Read paths through [`path_as_logged`].
pub(crate) fn file_list<'a>(
    table: &'a DeltaTable,
    spec: &TableSpec,
) -> Result<deltalake::kernel::LogDataHandler<'a>> {
    let state = table.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    state.snapshot().try_log_data().map_err(|e| Error::delta(&spec.name, e))
}

/// A listed file's path in the log's own spelling (as the add actions and
/// the key filters name it); `None` when the snapshot would percent-decode
/// it, and the add-action table must answer instead.
pub(crate) fn path_as_logged(file: &deltalake::kernel::LogicalFileView) -> Option<&str> {
    match file.path() {
        std::borrow::Cow::Borrowed(path) => Some(path),
        std::borrow::Cow::Owned(_) => None,
    }
}

/// Whether storage holds the object at `location` (a `HEAD`; "not
/// found" is `false`, any other failure an error).
pub(crate) async fn is_present(
    store: &dyn object_store::ObjectStore,
    location: &object_store::path::Path,
) -> object_store::Result<bool> {
    match object_store::ObjectStoreExt::head(store, location).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What storage says of each of a table's files `paths` (as the log
/// writes them), by a `HEAD` each, 16 at a time: its size, or why not.
pub(crate) async fn file_sizes(
    table: &DeltaTable,
    paths: &[String],
) -> Vec<(String, object_store::Result<u64>)> {
    use futures::StreamExt;
    let store = table.object_store();
    futures::stream::iter(paths.iter().cloned())
        .map(|path: String| {
            let store = store.clone();
            async move {
                let size = match object_store::path::Path::parse(&path) {
                    Ok(location) => object_store::ObjectStoreExt::head(&store, &location)
                        .await
                        .map(|meta| meta.size),
                    Err(e) => Err(e.into()),
                };
                (path, size)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// The first of `paths` (as the log writes them) storage lacks, and how
/// many it lacks: files a restore or an undo would bring back must still
/// be there (vacuum deletes them after the retention).
pub(crate) async fn missing_files(
    table: &DeltaTable,
    name: &str,
    paths: &[String],
) -> Result<Option<(String, usize)>> {
    let mut missing = Vec::new();
    for (path, size) in file_sizes(table, paths).await {
        match size {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => missing.push(path),
            Err(e) => return Err(Error::delta(name, e.into())),
        }
    }
    Ok(missing.iter().min().map(|first| (first.clone(), missing.len())))
}

/// Relative paths of a table's active data files, from its [`file_list`].
/// A path the snapshot would decode, or an empty list (an empty table, or a
/// handle opened without its file list, which must fail rather than look
/// empty), has the add-action table answer instead.
pub fn active_files(table: &DeltaTable, spec: &TableSpec) -> Result<Vec<String>> {
    let as_logged: Option<Vec<String>> = file_list(table, spec)?
        .iter()
        .map(|file| path_as_logged(&file).map(str::to_owned))
        .collect();
    match as_logged {
        Some(paths) if !paths.is_empty() => Ok(paths),
        _ => Ok(active_file_rows(table, spec)?.into_iter().map(|(path, _)| path).collect()),
    }
}

/// Relative paths of a table's active data files, with their row counts
/// when their statistics state them.
pub fn active_file_rows(
    table: &DeltaTable,
    spec: &TableSpec,
) -> Result<Vec<(String, Option<u64>)>> {
    use deltalake::arrow::array::{Array, Int64Array, StringArray, StringViewArray};
    let state = table.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let adds = state.add_actions_table(true).map_err(|e| Error::delta(&spec.name, e))?;
    let Some(column) = adds.column_by_name("path") else { return Ok(Vec::new()) };
    let any = column.as_any();
    let paths: Vec<String> = if let Some(a) = any.downcast_ref::<StringArray>() {
        (0..a.len()).map(|i| a.value(i).to_owned()).collect()
    } else if let Some(a) = any.downcast_ref::<StringViewArray>() {
        (0..a.len()).map(|i| a.value(i).to_owned()).collect()
    } else {
        return Err(Error::Internal(format!(
            "table `{}`: unexpected type of the add-action path column",
            spec.name
        )));
    };
    let rows =
        adds.column_by_name("num_records").and_then(|c| c.as_any().downcast_ref::<Int64Array>());
    Ok(paths
        .into_iter()
        .enumerate()
        .map(|(i, path)| {
            let n = rows.filter(|r| r.is_valid(i)).map(|r| r.value(i).max(0) as u64);
            (path, n)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::array::{ArrayRef, Int64Array, ListArray, StringArray};
    use deltalake::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use std::sync::Arc;

    #[test]
    fn small_columns_are_plain_large_and_nested_ones_zstd() {
        let rows = 3000;
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("text", DataType::Utf8, false),
            Field::new("tag", DataType::Utf8, false),
            Field::new("list", DataType::new_list(DataType::Int64, true), true),
        ]));
        let batch = |rows: usize| {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
                Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("row {i:08}")))),
                Arc::new(StringArray::from_iter_values((0..rows).map(|_| "a"))),
                Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(
                    (0..rows).map(|i| Some(vec![Some(i as i64)])),
                )),
            ];
            RecordBatch::try_new(schema.clone(), columns).expect("batch")
        };
        let zstd_of = |p: &WriterProperties, c: &str| {
            matches!(p.compression(&ColumnPath::from(c)), Compression::ZSTD(_))
        };
        // 3000 rows: 24 KB of i64 and 36 KB of text pay; 3000 one-byte tags
        // (3 KB of values, 12 KB of offsets) do not.
        let large = compress_where_it_pays(writer_properties(), &[batch(rows)]);
        assert!(zstd_of(&large, "n") && zstd_of(&large, "text"));
        assert_eq!(large.compression(&ColumnPath::from("tag")), Compression::UNCOMPRESSED);
        // The same columns summed over several batches of one file.
        let split = compress_where_it_pays(writer_properties(), &[batch(1500), batch(1500)]);
        assert!(zstd_of(&split, "n") && zstd_of(&split, "text"));
        // One row: nothing pays but nested columns keep zstd.
        let tiny = compress_where_it_pays(writer_properties(), &[batch(1)]);
        for c in ["n", "text", "tag"] {
            assert_eq!(tiny.compression(&ColumnPath::from(c)), Compression::UNCOMPRESSED, "{c}");
        }
        assert!(zstd_of(&tiny, "list"));
        // Nothing to write: the properties as given.
        assert!(zstd_of(&compress_where_it_pays(writer_properties(), &[]), "n"));
    }

    #[test]
    fn a_log_folder_without_a_commit_is_no_table() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(!is_table(dir.path()));
        let log = dir.path().join("_delta_log");
        std::fs::create_dir_all(&log).expect("log dir");
        // What a creation killed before its first commit leaves behind.
        std::fs::write(log.join("00000000000000000000.json#1"), b"{").expect("temp file");
        assert!(!is_table(dir.path()));
        std::fs::write(log.join("00000000000000000000.json"), b"{}").expect("commit");
        assert!(is_table(dir.path()));
    }

    /// The file list read as the snapshot holds it is the add-action
    /// table's, path for path — also when partition values had to be
    /// percent-encoded in the log, and after files were removed.
    #[tokio::test]
    async fn active_files_are_the_logs_paths_as_written() {
        use deltalake::protocol::SaveMode;
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new(vec![
            Field::new("p", DataType::Utf8, true),
            Field::new("x", DataType::Int64, true),
        ]);
        let spec = TableSpec::ingestion("t", "t");
        let root = LakeRoot::from(dir.path());
        let mut table = open_or_create(&root, &spec, &schema, vec!["p".into()]).await.unwrap();
        let empty = active_files(&table, &spec).unwrap();
        assert!(empty.is_empty(), "{empty:?}");
        for partitions in [vec!["a", "b"], vec!["c d%e/f", "g"]] {
            let n = partitions.len();
            let batch = RecordBatch::try_new(
                Arc::new(schema.clone()),
                vec![
                    Arc::new(StringArray::from(partitions)) as ArrayRef,
                    Arc::new(Int64Array::from_iter_values(0..n as i64)),
                ],
            )
            .unwrap();
            table = table.write(vec![batch]).with_save_mode(SaveMode::Append).await.unwrap();
            let fast = active_files(&table, &spec).unwrap();
            let rows: Vec<String> =
                active_file_rows(&table, &spec).unwrap().into_iter().map(|(p, _)| p).collect();
            assert_eq!(fast, rows);
        }
        assert_eq!(active_files(&table, &spec).unwrap().len(), 4);
        assert!(
            active_files(&table, &spec).unwrap().iter().any(|p| p.contains('%')),
            "a partition value was percent-encoded in the log"
        );
        // Plain paths again, after an overwrite removed the encoded ones.
        let batch = RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![
                Arc::new(StringArray::from(vec!["h"])) as ArrayRef,
                Arc::new(Int64Array::from_iter_values(0..1)),
            ],
        )
        .unwrap();
        table = table.write(vec![batch]).with_save_mode(SaveMode::Overwrite).await.unwrap();
        let fast = active_files(&table, &spec).unwrap();
        let rows: Vec<String> =
            active_file_rows(&table, &spec).unwrap().into_iter().map(|(p, _)| p).collect();
        assert_eq!((fast.len(), &fast), (1, &rows));
    }

    /// The head is found from the last checkpoint by `stat`s — also when
    /// the entries before it were cleaned up — and a `_last_checkpoint`
    /// that is unreadable or names a version the log does not hold sends
    /// the search back to a listing, which finds the same head.
    #[tokio::test]
    async fn the_latest_version_is_searched_from_the_last_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let spec = TableSpec::ingestion("t", "t");
        let table_dir = dir.path().join("t");
        let root = LakeRoot::from(dir.path());
        open_or_create(&root, &spec, &schema, vec![]).await.unwrap();
        let log = table_dir.join("_delta_log");
        let entry = |v: u64| log.join(format!("{v:020}.json"));
        let bare = |v: u64| {
            let info = r#"{"commitInfo":{"timestamp":1764547200000,"operation":"WRITE"}}"#;
            std::fs::write(entry(v), format!("{info}\n")).unwrap();
        };
        // No checkpoint: searched from version 0.
        for v in 1..=40 {
            bare(v);
        }
        assert_eq!(reached_version(&table_dir), Some(0));
        assert_eq!(latest_version(&dir.path().into(), &spec).await.unwrap(), 40);
        let table = open(&root, &spec).await.unwrap();
        deltalake::checkpoints::create_checkpoint(&table, None).await.unwrap();
        for v in 41..=140 {
            bare(v);
        }
        assert_eq!(reached_version(&table_dir), Some(40));
        assert_eq!(latest_version(&dir.path().into(), &spec).await.unwrap(), 140);
        // A hint naming a version that is not there, or no hint at all.
        let hint = log.join("_last_checkpoint");
        let good = std::fs::read(&hint).unwrap();
        for bad in [r#"{"version":5000,"size":1}"#, "{not json", r#"{"size":1}"#] {
            std::fs::write(&hint, bad).unwrap();
            assert_eq!(reached_version(&table_dir), None, "{bad}");
            assert_eq!(latest_version(&dir.path().into(), &spec).await.unwrap(), 140, "{bad}");
        }
        std::fs::write(&hint, good).unwrap();
        // The entries before the checkpoint cleaned up, its own too.
        for v in 0..=40 {
            std::fs::remove_file(entry(v)).unwrap();
        }
        assert_eq!(reached_version(&table_dir), Some(40), "confirmed by the checkpoint file");
        bare(141);
        assert_eq!(latest_version(&dir.path().into(), &spec).await.unwrap(), 141);
        drop(table);
    }
}
