//! Reading and validating one sealed unit.
//!
//! Staged files come from workers: processes that may be buggy, killed
//! halfway or hostile. A run directory is committed only if every check
//! passes; otherwise it is quarantined with the reason, and the rest of the
//! commit goes on. Validation re-derives, it never trusts:
//!
//! 1. the directory and every entry in it are real (no symbolic links); it
//!    holds its unit object alone (or, staged by an older sluice, loose
//!    Parquet files), and every file in it is a known table's file and
//!    readable: an Arrow IPC stream (`{table}.arrow`) or a Parquet file
//!    (`{table}.parquet`), each table once;
//! 2. every file's columns are the table's columns, with the table's types,
//!    and no nulls in required columns;
//! 3. the sentinel (the `executions` table's file) holds exactly one row, whose run id, step and
//!    operation are those of the directory it sits in; every edge row names
//!    the same run. A batch directory's sentinel holds one row per execution,
//!    each with a distinct valid run id and the directory's step and
//!    operation; every edge names one of them, and every artifact is the
//!    output of one of them (so a batch can be committed in part when some
//!    of its runs are already in the lake); every artifact an edge or the
//!    index names is an id (32 lowercase hex digits, the text the lake's
//!    joins compare);
//! 4. every staged artifact is rebuilt as a draft from its staged columns and
//!    finalized with the same rules as [`Draft::finalize`]: the rebuilt
//!    columns (canonical JSON, derived shape, validated names) and id must
//!    equal the staged ones exactly;
//! 5. the index lists exactly the run's artifacts, with the same type and
//!    step as their content rows;
//! 6. no binary value is larger than a Delta binary column can hold (2 GiB);
//! 7. the run fits in this process: what its files decode to (read from
//!    their footers, before any is decoded) times what a commit costs per
//!    decoded byte stays within [`memory_ceiling`](crate::host::memory_ceiling).
//!    A run that does not is quarantined with its size and how to commit it
//!    elsewhere (`sluice recover --requeue`), never loaded to be killed on
//!    every `recover`.
//!
//! Whether edges point at known artifacts needs the whole commit and the
//! lake, so it is checked by the caller. Batches are kept as read (never
//! concatenated), and binary columns are read as 64-bit-offset arrays, so no
//! size of staged data can overflow a 32-bit offset here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use deltalake::arrow::array::{Array, LargeBinaryArray};
use deltalake::arrow::datatypes::{DataType, Field, Schema};
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use deltalake::parquet::errors::ParquetError;
use deltalake::parquet::file::metadata::ParquetMetaData;
use deltalake::parquet::file::reader::ChunkReader;

use crate::artifact::arrow_convert::read_value;
use crate::artifact::{Artifact, ArtifactId, Draft};
use crate::host::Ceiling;
use crate::lake::layout::{self, STEP_COLUMN, TableKind, TableSpec};
use crate::registry::TypeRegistry;
use crate::staging::RunDir;
use crate::staging::Shape;
use crate::staging::bundle::{FileFormat, UNIT_OBJECT, table_of};
use crate::store::rows::artifacts_from_batch;

/// The largest binary value a Delta (Arrow `Binary`) column holds.
pub const MAX_BINARY_VALUE: usize = i32::MAX as usize;

/// A validated staging directory (one execution, or a batch), its rows by
/// table.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// Where it came from.
    pub dir: RunDir,
    /// Staged rows, by table short name, as read (binary columns as
    /// `LargeBinary`; the committer conforms them to the table).
    pub tables: BTreeMap<String, Vec<RecordBatch>>,
    /// Artifacts the directory's executions produced, with their type keys.
    pub artifacts: BTreeMap<ArtifactId, String>,
    /// Artifact ids its edges refer to.
    pub referenced: BTreeSet<ArtifactId>,
    /// Its executions, in the sentinel's order.
    pub executions: Vec<StagedRun>,
    /// The staged file each table's rows came from, by table (what
    /// rejections name: `metrics.arrow`, `data.parquet`).
    pub files: BTreeMap<String, String>,
}

impl LoadedRun {
    /// The staged file of `table`, as rejections name it.
    fn file(&self, table: &str) -> String {
        file_of(&self.files, table)
    }

    /// What its staged rows hold in memory, decoded.
    pub fn decoded_bytes(&self) -> u64 {
        self.tables.values().flatten().map(|b| b.get_array_memory_size() as u64).sum()
    }
}

/// One execution of a loaded directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedRun {
    /// Its run id.
    pub run_id: String,
    /// The unit spec it ran.
    pub spec_id: String,
    /// Whether it succeeded.
    pub success: bool,
    /// The artifacts its output edges name.
    pub outputs: BTreeSet<ArtifactId>,
}

impl LoadedRun {
    /// Staged rows of one table.
    pub fn rows(&self, table: &str) -> u64 {
        self.tables.get(table).map_or(0, |b| b.iter().map(|b| b.num_rows() as u64).sum())
    }

    /// Keep only the executions whose run ids `keep` names, with their
    /// edges and the artifacts they output (content shared with a kept
    /// execution stays). What a batch commits when some of its runs are
    /// already in the lake: never content without its execution.
    pub fn retain_runs(&mut self, keep: &BTreeSet<String>) -> crate::error::Result<()> {
        self.executions.retain(|e| keep.contains(&e.run_id));
        let outputs: BTreeSet<ArtifactId> =
            self.executions.iter().flat_map(|e| e.outputs.iter().copied()).collect();
        let run_tables = [
            layout::executions_table().name,
            layout::execution_edges_table().name,
            layout::artifact_edges_table().name,
        ];
        let kept_run = |text: &str| keep.contains(text);
        let kept_output =
            |text: &str| text.parse::<ArtifactId>().is_ok_and(|id| outputs.contains(&id));
        for (table, batches) in &mut self.tables {
            let (column, wanted): (_, &dyn Fn(&str) -> bool) = if run_tables.contains(table) {
                ("execution_run_id", &kept_run)
            } else {
                ("artifact_id", &kept_output)
            };
            for batch in batches.iter_mut() {
                *batch = keep_rows(batch, table, column, wanted)?;
            }
        }
        self.artifacts.retain(|id, _| outputs.contains(id));
        // The edges were checked when the directory was loaded.
        self.referenced = referenced_ids(&self.tables, &self.files)
            .map_err(|e| crate::error::Error::Internal(format!("kept edges: {e}")))?;
        Ok(())
    }
}

/// The staged file of `table` in `files`; a table a unit did not stage
/// (a missing sentinel, say) is named as a folder of loose files names it.
fn file_of(files: &BTreeMap<String, String>, table: &str) -> String {
    files.get(table).cloned().unwrap_or_else(|| format!("{table}.parquet"))
}

/// The artifact ids the staged edge rows refer to; an edge naming something
/// that is not an artifact id is rejected.
fn referenced_ids(
    tables: &BTreeMap<String, Vec<RecordBatch>>,
    files: &BTreeMap<String, String>,
) -> Result<BTreeSet<ArtifactId>, Rejection> {
    let mut referenced = BTreeSet::new();
    for edges in [layout::execution_edges_table(), layout::artifact_edges_table()] {
        let Some(batches) = tables.get(&edges.name) else { continue };
        let file = file_of(files, &edges.name);
        for column in ["artifact_id", "source_artifact_id", "target_artifact_id"] {
            referenced.extend(ids(batches, column, &file)?);
        }
    }
    Ok(referenced)
}

/// The rows of `batch` whose text column `column` is `wanted` (a batch
/// without the column keeps every row).
fn keep_rows(
    batch: &RecordBatch,
    table: &str,
    column: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> crate::error::Result<RecordBatch> {
    use deltalake::arrow::array::BooleanArray;
    let Ok(i) = batch.schema().index_of(column) else { return Ok(batch.clone()) };
    let text = crate::lake::delta::scan::text_column(batch, i, table)?;
    let mask: BooleanArray =
        (0..text.len()).map(|r| Some(text.is_valid(r) && wanted(text.value(r)))).collect();
    deltalake::arrow::compute::filter_record_batch(batch, &mask)
        .map_err(|e| crate::error::Error::arrow(format!("staged rows of `{table}`"), e))
}

/// Why a run directory cannot be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The file at fault, if one.
    pub file: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{file}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

fn reject<T>(file: Option<&str>, reason: impl Into<String>) -> Result<T, Rejection> {
    Err(Rejection { file: file.map(str::to_owned), reason: reason.into() })
}

/// Staged files up to this size are read with one `read` and decoded from
/// memory (a staged file is small: its footer, page headers and pages read
/// through a `File` cost a system call each); larger ones are decoded from
/// the file, so a big data artifact is not held twice.
const READ_WHOLE: u64 = 64 << 20;

/// What a run's staged files decode to, added up as their footers are
/// read, against the most this process can use (check 7).
struct Footprint {
    decoded: u64,
    ceiling: Option<Ceiling>,
}

impl Footprint {
    /// Add one Parquet file's decoded size, from its footer.
    fn add(&mut self, metadata: &ParquetMetaData) -> Result<(), Rejection> {
        self.add_bytes(decoded_size(metadata))
    }

    /// Add `bytes` decoded; refuse the run once committing it would need
    /// more than the ceiling.
    fn add_bytes(&mut self, bytes: u64) -> Result<(), Rejection> {
        self.decoded += bytes;
        let Some(ceiling) = self.ceiling else { return Ok(()) };
        let needed = self.decoded.saturating_mul(super::MEMORY_LIMIT_SHARE);
        if needed <= ceiling.bytes {
            return Ok(());
        }
        reject(
            None,
            format!(
                "its staged rows decode to about {:.1} MiB and committing a run takes about {} \
                 times its decoded size ({:.0} MiB): more than {ceiling}. Nothing of it was \
                 committed; commit it where that much memory is available with \
                 `sluice recover --requeue`",
                self.decoded as f64 / MIB,
                super::MEMORY_LIMIT_SHARE,
                needed as f64 / MIB,
            ),
        )
    }
}

const MIB: f64 = (1 << 20) as f64;

/// What a Parquet file's rows take once decoded, from its footer: each
/// column chunk's uncompressed size, or the byte array data it holds when
/// the file says so and that is more (dictionary and run-length encodings
/// make repeated values small before decoding).
fn decoded_size(metadata: &ParquetMetaData) -> u64 {
    metadata
        .row_groups()
        .iter()
        .flat_map(|group| group.columns())
        .map(|column| {
            let encoded = column.uncompressed_size().max(0) as u64;
            let values = column.unencoded_byte_array_data_bytes().unwrap_or(0).max(0) as u64;
            encoded.max(values)
        })
        .sum()
}

/// Read a staged Parquet file. Returns the file's own schema (for checking)
/// and its batches, binary columns read as `LargeBinary`; its footer is
/// added to `footprint` before anything is decoded.
fn read_parquet(
    path: &Path,
    name: &str,
    footprint: &mut Footprint,
) -> Result<(Arc<Schema>, Vec<RecordBatch>), Rejection> {
    let bad = |e: std::io::Error| unreadable(name, &e);
    let mut file = File::open(path).map_err(bad)?;
    let size = file.metadata().map_err(bad)?.len();
    if size <= READ_WHOLE {
        let mut data = Vec::with_capacity(size as usize);
        file.read_to_end(&mut data).map_err(bad)?;
        decode_parquet(bytes::Bytes::from(data), name, footprint)
    } else {
        decode_parquet(file, name, footprint)
    }
}

/// Why a staged file cannot be read.
fn unreadable(name: &str, error: &dyn std::fmt::Display) -> Rejection {
    Rejection { file: Some(name.into()), reason: format!("unreadable Parquet: {error}") }
}

/// Decode Parquet from `input`, its footer read once: binary columns are
/// read as `LargeBinary` by giving the reader a widened schema.
fn decode_parquet<R: ChunkReader + 'static>(
    input: R,
    name: &str,
    footprint: &mut Footprint,
) -> Result<(Arc<Schema>, Vec<RecordBatch>), Rejection> {
    let bad = |e: ParquetError| unreadable(name, &e);
    let plain = ArrowReaderMetadata::load(&input, ArrowReaderOptions::new()).map_err(bad)?;
    footprint.add(plain.metadata())?;
    let declared = plain.schema().clone();
    let options = ArrowReaderOptions::new().with_schema(Arc::new(widened(&declared)));
    let metadata = ArrowReaderMetadata::try_new(plain.metadata().clone(), options).map_err(bad)?;
    let reader =
        ParquetRecordBatchReaderBuilder::new_with_metadata(input, metadata).build().map_err(bad)?;
    let batches =
        reader.collect::<Result<Vec<RecordBatch>, _>>().map_err(|e| bad(ParquetError::from(e)))?;
    Ok((declared, batches))
}

/// `schema` with its binary columns as `LargeBinary`, so that no size of
/// staged data overflows a 32-bit offset.
fn widened(schema: &Schema) -> Schema {
    let wide: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Binary => f.as_ref().clone().with_data_type(DataType::LargeBinary),
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(wide, schema.metadata().clone())
}

/// Decode a staged Arrow IPC stream: its own schema (for checking) and
/// its batches, binary columns widened to `LargeBinary` as
/// [`decode_parquet`] reads them. An IPC stream's bodies are its decoded
/// buffers, so its length is what it adds to `footprint`.
fn decode_ipc(
    bytes: bytes::Bytes,
    name: &str,
    footprint: &mut Footprint,
) -> Result<(Arc<Schema>, Vec<RecordBatch>), Rejection> {
    let bad = |e: &dyn std::fmt::Display| Rejection {
        file: Some(name.into()),
        reason: format!("unreadable Arrow IPC: {e}"),
    };
    footprint.add_bytes(bytes.len() as u64)?;
    let (declared, batches) = crate::staging::bundle::decode_ipc(bytes).map_err(|e| bad(&e))?;
    if !declared.fields().iter().any(|f| f.data_type() == &DataType::Binary) {
        return Ok((declared, batches));
    }
    let wide = Arc::new(widened(&declared));
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let columns = batch
            .columns()
            .iter()
            .zip(wide.fields())
            .map(|(column, field)| {
                deltalake::arrow::compute::cast(column, field.data_type()).map_err(|e| bad(&e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push(RecordBatch::try_new(wide.clone(), columns).map_err(|e| bad(&e))?);
    }
    Ok((declared, out))
}

fn check_schema(spec: &TableSpec, schema: &Schema, file: &str) -> Result<(), Rejection> {
    for field in schema.fields() {
        let Some(column) = spec.columns.iter().find(|c| &c.name == field.name()) else {
            return reject(
                Some(file),
                format!("unexpected column `{}` for table `{}`", field.name(), spec.name),
            );
        };
        let expected = column.column_type.arrow_type();
        if field.data_type() != &expected {
            // In the words of sluice's column types where one matches; an
            // Arrow type none matches (`LargeUtf8`) keeps its exact name, so
            // the message never reads "string but … stores string".
            let found = crate::artifact::value::ColumnType::ALL
                .into_iter()
                .find(|t| &t.arrow_type() == field.data_type())
                .map_or_else(|| field.data_type().to_string(), |t| t.to_string());
            return reject(
                Some(file),
                format!(
                    "column `{}` has type {found} but table `{}` stores {}",
                    field.name(),
                    spec.name,
                    column.column_type
                ),
            );
        }
    }
    for column in spec.columns.iter().filter(|c| !c.nullable) {
        if schema.field_with_name(&column.name).is_err() {
            return reject(Some(file), format!("required column `{}` is missing", column.name));
        }
    }
    Ok(())
}

fn check_values(spec: &TableSpec, batches: &[RecordBatch], file: &str) -> Result<(), Rejection> {
    for batch in batches {
        for column in spec.columns.iter().filter(|c| !c.nullable) {
            if batch.column_by_name(&column.name).is_some_and(|a| a.null_count() > 0) {
                return reject(
                    Some(file),
                    format!("required column `{}` holds nulls", column.name),
                );
            }
        }
        for (i, field) in batch.schema().fields().iter().enumerate() {
            let Some(values) = batch.column(i).as_any().downcast_ref::<LargeBinaryArray>() else {
                continue;
            };
            if let Some(row) =
                (0..values.len()).find(|&r| values.value_length(r) as usize > MAX_BINARY_VALUE)
            {
                return reject(
                    Some(file),
                    format!(
                        "column `{}` row {row} holds {} bytes; a Delta binary value holds at most 2 GiB",
                        field.name(),
                        values.value_length(row)
                    ),
                );
            }
        }
    }
    Ok(())
}

/// The text values of a column over all batches (empty text for nulls;
/// required columns were checked for nulls already).
fn values(batches: &[RecordBatch], column: &str) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        let Ok(i) = batch.schema().index_of(column) else { continue };
        let Ok(text) = crate::lake::delta::scan::text_column(batch, i, column) else { continue };
        out.extend(
            (0..text.len())
                .map(|r| if text.is_valid(r) { text.value(r).to_owned() } else { String::new() }),
        );
    }
    out
}

/// The artifact ids of a text column over all batches (a batch without the
/// column adds none); a null or anything but an id's 32 lowercase hex
/// digits is rejected, naming the file, column and row.
fn ids(batches: &[RecordBatch], column: &str, file: &str) -> Result<Vec<ArtifactId>, Rejection> {
    let (mut out, mut offset) = (Vec::new(), 0);
    for batch in batches {
        let Ok(i) = batch.schema().index_of(column) else { continue };
        let text = crate::lake::delta::scan::text_column(batch, i, column)
            .map_err(|e| Rejection { file: Some(file.into()), reason: e.to_string() })?;
        for r in 0..text.len() {
            // A null reads as `null`, which is not an id either.
            let value = if text.is_valid(r) { text.value(r) } else { "null" };
            let Ok(id) = value.parse::<ArtifactId>() else {
                let row = offset + r;
                return reject(
                    Some(file),
                    format!("column `{column}` row {row}: `{value:.80}` is not an artifact id"),
                );
            };
            out.push(id);
        }
        offset += text.len();
    }
    Ok(out)
}

/// Read and validate one sealed unit.
pub fn load_run(
    registry: &TypeRegistry,
    tables: &[TableSpec],
    dir: &RunDir,
) -> Result<LoadedRun, Rejection> {
    load_run_within(registry, tables, dir, crate::host::memory_ceiling())
}

/// [`load_run`] in a process that can use at most `ceiling` (check 7).
fn load_run_within(
    registry: &TypeRegistry,
    tables: &[TableSpec],
    dir: &RunDir,
    ceiling: Option<Ceiling>,
) -> Result<LoadedRun, Rejection> {
    let read = read_files(tables, dir, &mut Footprint { decoded: 0, ceiling })?;
    validated(registry, dir, read)
}

/// [`load_run`] of a unit fetched from an object store: its one object
/// ([`bundle`](crate::staging::bundle)), `None` when it was gone.
pub(crate) fn load_fetched(
    registry: &TypeRegistry,
    tables: &[TableSpec],
    dir: &RunDir,
    object: Option<&bytes::Bytes>,
) -> Result<LoadedRun, Rejection> {
    let Some(object) = object else { return reject(None, "gone") };
    let mut footprint = Footprint { decoded: 0, ceiling: crate::host::memory_ceiling() };
    let read = read_object(tables, object, &mut footprint)?;
    validated(registry, dir, read)
}

/// Checks 1, 2, 6 and 7 of a unit object: every file in it a known
/// table's, once, and a readable Arrow IPC stream or Parquet file with the
/// table's columns and types.
fn read_object(
    tables: &[TableSpec],
    object: &bytes::Bytes,
    footprint: &mut Footprint,
) -> Result<Staged, Rejection> {
    let files = crate::staging::bundle::unpack(object)
        .map_err(|why| Rejection { file: None, reason: why })?;
    let by_table = staged_tables(tables);
    let (mut read, mut names) = (BTreeMap::new(), BTreeMap::new());
    for (name, bytes) in &files {
        let Some((spec, format)) =
            table_of(name).and_then(|(table, format)| Some((by_table.get(table)?, format)))
        else {
            return reject(Some(name), "unexpected file in the unit");
        };
        let (schema, batches) = match format {
            FileFormat::Parquet => decode_parquet(bytes.clone(), name, footprint)?,
            FileFormat::Ipc => decode_ipc(bytes.clone(), name, footprint)?,
        };
        check_schema(spec, &schema, name)?;
        check_values(spec, &batches, name)?;
        if read.insert(spec.name.clone(), batches).is_some() {
            return reject(Some(name), "twice in the unit");
        }
        names.insert(spec.name.clone(), name.clone());
    }
    Ok((read, names))
}

/// A unit's rows by table, and the file each table's rows came from.
type Staged = (BTreeMap<String, Vec<RecordBatch>>, BTreeMap<String, String>);

/// Checks 3 to 5 of a unit whose files were read (checks 1, 2, 6, 7).
fn validated(
    registry: &TypeRegistry,
    dir: &RunDir,
    (tables, files): Staged,
) -> Result<LoadedRun, Rejection> {
    let mut loaded = LoadedRun {
        dir: dir.clone(),
        tables,
        files,
        artifacts: BTreeMap::new(),
        referenced: BTreeSet::new(),
        executions: Vec::new(),
    };
    loaded.executions = check_executions(&loaded)?;
    loaded.referenced = check_edges(&mut loaded)?;
    let (artifacts, steps) = check_content(registry, &loaded)?;
    loaded.artifacts = artifacts;
    check_index(&loaded, &steps)?;
    check_outputs(&loaded)?;
    Ok(loaded)
}

/// The tables a unit may stage, by name.
fn staged_tables(tables: &[TableSpec]) -> BTreeMap<&str, &TableSpec> {
    tables
        .iter()
        .filter(|spec| {
            !matches!(spec.kind, TableKind::Steps | TableKind::Checks | TableKind::Commits)
        })
        .map(|spec| (spec.name.as_str(), spec))
        .collect()
}

/// Checks 1, 2, 6 and 7: real files only, each a known table file and a
/// readable Parquet file with the table's columns and types, all of them
/// together small enough to commit here.
fn read_files(
    tables: &[TableSpec],
    dir: &RunDir,
    footprint: &mut Footprint,
) -> Result<Staged, Rejection> {
    let by_table = staged_tables(tables);
    match dir.shape {
        Shape::File => {
            let unreadable =
                |e: std::io::Error| Rejection { file: None, reason: format!("cannot read: {e}") };
            let meta = std::fs::symlink_metadata(&dir.path).map_err(unreadable)?;
            if !meta.is_file() {
                return reject(None, "the unit is a symbolic link or not a file");
            }
            let object = std::fs::read(&dir.path).map_err(unreadable)?;
            return read_object(tables, &bytes::Bytes::from(object), footprint);
        }
        Shape::Partial => return reject(None, "not sealed (its worker stopped before the rename)"),
        Shape::Folder => {}
    }
    let failed = |e: std::io::Error| Rejection { file: None, reason: format!("cannot list: {e}") };
    let meta = std::fs::symlink_metadata(&dir.path).map_err(failed)?;
    if !meta.is_dir() {
        return reject(None, "the run directory is a symbolic link or not a directory");
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(&dir.path).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue; // a temporary file of an interrupted write; never part of the result
        }
        let kind = entry.file_type().map_err(failed)?;
        if !kind.is_file() {
            return reject(Some(&name), "not a regular file (staging holds no links or folders)");
        }
        entries.push((name, entry.path()));
    }
    if entries.iter().any(|(name, _)| name == UNIT_OBJECT) {
        if let Some((name, _)) = entries.iter().find(|(name, _)| name != UNIT_OBJECT) {
            return reject(Some(name), format!("unexpected file beside {UNIT_OBJECT}"));
        }
        let path = dir.path.join(UNIT_OBJECT);
        let object = std::fs::read(&path).map_err(|e| Rejection {
            file: Some(UNIT_OBJECT.into()),
            reason: format!("cannot read: {e}"),
        })?;
        return read_object(tables, &bytes::Bytes::from(object), footprint);
    }
    // Loose files: a unit staged by an older sluice.
    let (mut out, mut names) = (BTreeMap::new(), BTreeMap::new());
    for (name, path) in entries {
        let table = table_of(&name).filter(|(_, format)| *format == FileFormat::Parquet);
        let Some(spec) = table.and_then(|(table, _)| by_table.get(table)) else {
            return reject(Some(&name), "unexpected file in a run directory");
        };
        let (schema, batches) = read_parquet(&path, &name, footprint)?;
        check_schema(spec, &schema, &name)?;
        check_values(spec, &batches, &name)?;
        out.insert(spec.name.clone(), batches);
        names.insert(spec.name.clone(), name);
    }
    Ok((out, names))
}

/// Check 3a: one execution row naming this directory's run, step and
/// operation — or, in a batch, one row per execution, each with a distinct
/// valid run id and the directory's step and operation.
fn check_executions(loaded: &LoadedRun) -> Result<Vec<StagedRun>, Rejection> {
    let dir = &loaded.dir;
    let executions = layout::executions_table();
    let sentinel = loaded.file(&executions.name);
    let Some(exec) = loaded.tables.get(&executions.name) else {
        return reject(Some(&sentinel), "missing");
    };
    let rows = loaded.rows(&executions.name);
    if !dir.is_batch() && rows != 1 {
        return reject(
            Some(&sentinel),
            format!("holds {rows} rows; a unit that is not a batch holds one execution"),
        );
    }
    if rows == 0 {
        return reject(Some(&sentinel), "holds no execution");
    }
    let run_ids = values(exec, "execution_run_id");
    let operations = values(exec, "operation_name");
    let spec_ids = values(exec, "execution_spec_id");
    let mut steps = Vec::new();
    let mut successes = Vec::new();
    for batch in exec {
        let step = batch.column_by_name(STEP_COLUMN);
        let success = batch.column_by_name("success");
        for r in 0..batch.num_rows() {
            steps.push(step.and_then(|a| read_value(&sentinel, a.as_ref(), r).ok()?.as_int()));
            successes.push(
                success.and_then(|a| read_value(&sentinel, a.as_ref(), r).ok()?.as_bool())
                    == Some(true),
            );
        }
    }
    let mut out: Vec<StagedRun> = Vec::with_capacity(run_ids.len());
    let mut seen = BTreeSet::new();
    for (i, run_id) in run_ids.into_iter().enumerate() {
        if !dir.is_batch() && run_id != dir.run_id {
            return reject(
                Some(&sentinel),
                format!(
                    "execution_run_id `{run_id}` does not match the directory `{}`",
                    dir.run_id
                ),
            );
        }
        if let Err(e) = crate::staging::paths::validate_run_id(&run_id) {
            return reject(Some(&sentinel), e.to_string());
        }
        if !seen.insert(run_id.clone()) {
            return reject(Some(&sentinel), format!("run `{run_id}` is listed twice"));
        }
        let (step, operation) = (steps.get(i).copied().flatten(), operations.get(i));
        if step != Some(i64::from(dir.step)) || operation != Some(&dir.operation) {
            return reject(
                Some(&sentinel),
                format!(
                    "run `{run_id}`: step {step:?} / operation `{}` do not match the directory `{}_{}`",
                    operation.map_or("", String::as_str),
                    dir.step,
                    dir.operation
                ),
            );
        }
        out.push(StagedRun {
            run_id,
            spec_id: spec_ids.get(i).cloned().unwrap_or_default(),
            success: successes.get(i).copied().unwrap_or(false),
            outputs: BTreeSet::new(),
        });
    }
    Ok(out)
}

/// Check 3b: every edge row names one of the directory's runs. Records each
/// run's outputs; returns the artifact ids the edges refer to.
fn check_edges(loaded: &mut LoadedRun) -> Result<BTreeSet<ArtifactId>, Rejection> {
    let position: BTreeMap<String, usize> =
        loaded.executions.iter().enumerate().map(|(i, e)| (e.run_id.clone(), i)).collect();
    for edges in [layout::execution_edges_table(), layout::artifact_edges_table()] {
        let Some(batches) = loaded.tables.get(&edges.name) else { continue };
        let file = loaded.file(&edges.name);
        let runs = values(batches, "execution_run_id");
        if let Some(other) = runs.iter().find(|r| !position.contains_key(*r)) {
            return reject(Some(&file), format!("edge of another run `{other}`"));
        }
        if edges.name == layout::execution_edges_table().name {
            let directions = values(batches, "direction");
            let artifacts = ids(batches, "artifact_id", &file)?;
            for ((run, direction), artifact) in runs.iter().zip(&directions).zip(artifacts) {
                if direction == crate::records::Direction::Output.as_str() {
                    loaded.executions[position[run]].outputs.insert(artifact);
                }
            }
        }
    }
    referenced_ids(&loaded.tables, &loaded.files)
}

/// Check 3c (batches): every artifact is the output of one of the batch's
/// executions, so that dropping an execution can drop its content.
fn check_outputs(loaded: &LoadedRun) -> Result<(), Rejection> {
    if !loaded.dir.is_batch() {
        return Ok(());
    }
    let outputs: BTreeSet<&ArtifactId> =
        loaded.executions.iter().flat_map(|e| e.outputs.iter()).collect();
    match loaded.artifacts.keys().find(|id| !outputs.contains(id)) {
        Some(id) => reject(
            Some(&loaded.file(&layout::execution_edges_table().name)),
            format!("artifact {id} is the output of no execution of the batch"),
        ),
        None => Ok(()),
    }
}

/// Check 4: every staged artifact, rebuilt as a draft and finalized with the
/// type's own rules, is exactly what was staged. Returns artifact id → type
/// key, and artifact id → step.
#[allow(clippy::type_complexity)]
fn check_content(
    registry: &TypeRegistry,
    loaded: &LoadedRun,
) -> Result<(BTreeMap<ArtifactId, String>, BTreeMap<ArtifactId, i32>), Rejection> {
    let mut artifacts = BTreeMap::new();
    let mut steps = BTreeMap::new();
    for descriptor in registry.descriptors() {
        let spec = TableSpec::content(descriptor);
        let Some(batches) = loaded.tables.get(&spec.name) else { continue };
        let file = loaded.file(&spec.name);
        let bad = |reason: String| Rejection { file: Some(file.clone()), reason };
        let columns: Vec<String> = descriptor.columns.iter().map(|c| c.name.clone()).collect();
        for batch in batches {
            let staged = artifacts_from_batch(&spec.name, &descriptor.key, &columns, batch)
                .map_err(|e| bad(e.to_string()))?;
            for artifact in staged {
                rederive(registry, &artifact).map_err(bad)?;
                steps.insert(artifact.id, artifact.origin_step_number);
                artifacts.insert(artifact.id, descriptor.key.clone());
            }
        }
    }
    Ok((artifacts, steps))
}

/// Finalize a staged artifact again, from its staged columns, and compare.
fn rederive(registry: &TypeRegistry, staged: &Artifact) -> Result<(), String> {
    // Metadata and the external path are neither hashed nor derived by
    // finalizing (metadata was parsed as a JSON object when the row was
    // read); only the type's columns are rebuilt and compared.
    let rebuilt = Draft::new(staged.type_key.clone(), staged.fields.clone())
        .with_step(staged.origin_step_number)
        .finalize(registry)
        .map_err(|e| format!("artifact {} does not validate: {e}", staged.id))?;
    if let Some((column, value)) =
        rebuilt.fields.iter().find(|(name, value)| staged.fields.get(*name) != Some(*value))
    {
        let shown = match value {
            crate::artifact::FieldValue::Binary(b) => format!("{} bytes", b.len()),
            other => format!("{:.80}", other.to_json().to_string()),
        };
        return Err(format!(
            "artifact {}: column `{column}` is not what its type derives (expected {shown}); \
             staged content must be canonical",
            staged.id
        ));
    }
    if rebuilt.id != staged.id {
        return Err(format!(
            "artifact_id {} does not match its content (recomputed {})",
            staged.id, rebuilt.id
        ));
    }
    Ok(())
}

/// Check 5: the index lists exactly the run's artifacts, with the type and
/// step of their content rows.
fn check_index(loaded: &LoadedRun, steps: &BTreeMap<ArtifactId, i32>) -> Result<(), Rejection> {
    let index = layout::index_table();
    let empty = Vec::new();
    let batches = loaded.tables.get(&index.name).unwrap_or(&empty);
    let file = loaded.file(&index.name);
    let ids = ids(batches, "artifact_id", &file)?;
    let indexed: BTreeMap<ArtifactId, String> =
        ids.iter().copied().zip(values(batches, "artifact_type")).collect();
    if indexed != loaded.artifacts {
        let missing: Vec<_> = loaded
            .artifacts
            .keys()
            .filter(|k| !indexed.contains_key(*k))
            .take(3)
            .map(ArtifactId::to_hex)
            .collect();
        let extra: Vec<_> = indexed
            .iter()
            .filter(|(k, v)| loaded.artifacts.get(*k) != Some(v))
            .take(3)
            .map(|(k, v)| (k.to_hex(), v))
            .collect();
        return reject(
            Some(&file),
            format!(
                "does not list the run's artifacts (not indexed: {missing:?}; unknown or mistyped: {extra:?})"
            ),
        );
    }
    let mut row = 0;
    for batch in batches {
        let Some(column) = batch.column_by_name(STEP_COLUMN) else { continue };
        for r in 0..batch.num_rows() {
            let step = read_value(&index.name, column.as_ref(), r).ok().and_then(|v| v.as_int());
            let id = &ids[row];
            if step != steps.get(id).map(|s| i64::from(*s)) {
                return reject(
                    Some(&file),
                    format!(
                        "artifact {id} is indexed at step {step:?} but its content row is at step {:?}",
                        steps.get(id)
                    ),
                );
            }
            row += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use deltalake::arrow::array::{ArrayRef, BinaryArray, StringArray};
    use deltalake::parquet::arrow::ArrowWriter;

    use super::*;

    fn write(path: &Path) -> RecordBatch {
        let batch = RecordBatch::try_from_iter([
            ("name", Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef),
            ("blob", Arc::new(BinaryArray::from(vec![&b"x"[..], b"yz", b""])) as ArrayRef),
        ])
        .unwrap();
        let mut writer =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        batch
    }

    /// A footprint with no ceiling: any size loads.
    fn any() -> Footprint {
        Footprint { decoded: 0, ceiling: None }
    }

    #[test]
    fn a_run_larger_than_the_process_can_commit_is_refused_from_its_footers() {
        use deltalake::parquet::basic::{Compression, ZstdLevel};
        use deltalake::parquet::file::properties::WriterProperties;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blobs.parquet");
        // 6 MiB of zeros in one value: a few KiB on disk.
        let zeros = "0".repeat(6 << 20);
        let batch = RecordBatch::try_from_iter([(
            "payload",
            Arc::new(StringArray::from(vec![zeros.as_str()])) as ArrayRef,
        )])
        .unwrap();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
                .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() < 64 << 10, "compressible");

        let ceiling = |mib: u64| Footprint {
            decoded: 0,
            ceiling: Some(Ceiling { bytes: mib << 20, cgroup: true }),
        };
        let rejection = read_parquet(&path, "blobs.parquet", &mut ceiling(40)).unwrap_err();
        assert_eq!(rejection.file, None, "the run as a whole is too large");
        assert!(
            rejection.reason.starts_with("its staged rows decode to about 6.0 MiB")
                && rejection
                    .reason
                    .contains("(48 MiB): more than this process's memory limit (40 MiB")
                && rejection.reason.contains("sluice recover --requeue"),
            "{}",
            rejection.reason
        );
        // Room for it: decoded as usual, and what it decoded to is counted.
        let mut roomy = ceiling(64);
        let (_, batches) = read_parquet(&path, "blobs.parquet", &mut roomy).unwrap();
        assert_eq!(batches[0].num_rows(), 1);
        assert!(roomy.decoded >= 6 << 20, "{}", roomy.decoded);
        // Sizes add up over a run's files: a second file tips it over.
        assert!(read_parquet(&path, "blobs.parquet", &mut roomy).is_err());
    }

    #[test]
    fn a_staged_file_decodes_the_same_from_memory_and_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.parquet");
        let written = write(&path);
        let whole =
            decode_parquet(bytes::Bytes::from(std::fs::read(&path).unwrap()), "m", &mut any())
                .unwrap();
        let streamed = decode_parquet(File::open(&path).unwrap(), "m", &mut any()).unwrap();
        assert_eq!(whole, streamed);
        let (declared, batches) = whole;
        assert_eq!(declared.field(1).data_type(), &DataType::Binary);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].schema().field(1).data_type(), &DataType::LargeBinary);
        let blobs = batches[0].column(1).as_any().downcast_ref::<LargeBinaryArray>().unwrap();
        assert_eq!(blobs.iter().flatten().collect::<Vec<_>>(), [&b"x"[..], b"yz", b""]);
        assert_eq!(batches[0].column(0), written.column(0));
        assert_eq!(
            read_parquet(&path, "metrics.parquet", &mut any()).unwrap(),
            (declared, batches)
        );
    }

    #[test]
    fn a_torn_staged_file_is_rejected_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.parquet");
        write(&path);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let rejection = read_parquet(&path, "metrics.parquet", &mut any()).unwrap_err();
        assert_eq!(rejection.file.as_deref(), Some("metrics.parquet"));
        assert!(rejection.reason.starts_with("unreadable Parquet"), "{}", rejection.reason);
    }
}
