//! The worker side: write one execution's results into its staging directory.
//!
//! A worker never touches a Delta table. A unit's rows are one file per
//! table it touches — one per content table it produced rows for,
//! `index`, `artifact_edges`, `execution_edges`, and `executions`, the
//! sentinel — each an Arrow IPC stream, or Parquet when its rows are large
//! (`encoded`), and those files travel together in **one** file, the
//! unit object of [`bundle`](super::bundle), `{id}.sluice` in its step's
//! shard folder (the same object a store holds). A commit of many small
//! units then opens one file per unit instead of five, and removes one.
//!
//! A worker that runs many small units stages them as a *batch*
//! ([`StagingWriter::write_batch`]): the same object, each file holding the
//! rows of all its executions, in one file named by a batch id.
//!
//! In a folder the unit is written under a hidden temporary name beside
//! its place and renamed into it: the rename seals the unit, and no reader
//! ever sees half of it. On a shared filesystem the file is fsynced before
//! its rename and the shard folder after it — one file and one folder per
//! unit, where five files were synced before. In an object store the unit
//! object is put if absent: one request writes and seals it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::parquet::arrow::ArrowWriter;

use super::area::{self, StagingArea, StoreArea};
use super::fs_kind::SyncPolicy;
use super::paths;
use crate::artifact::Artifact;
use crate::error::{Error, Result};
use crate::lake::delta::table::{compress_where_it_pays, writer_properties};
use crate::lake::layout::{self, TableSpec};
use crate::records::{ArtifactEdge, ExecutionEdge, ExecutionRecord, records_batch};
use crate::registry::TypeRegistry;
use crate::store::rows;

/// Everything one execution stages.
#[derive(Debug, Clone)]
pub struct StagedExecution {
    /// The execution row (written last, as the sentinel).
    pub execution: ExecutionRecord,
    /// Output artifacts (finalized).
    pub artifacts: Vec<Artifact>,
    /// Input and output edges.
    pub execution_edges: Vec<ExecutionEdge>,
    /// Derivation edges.
    pub artifact_edges: Vec<ArtifactEdge>,
}

/// Writes staged executions into a staging area.
#[derive(Debug, Clone)]
pub struct StagingWriter {
    area: StagingArea,
    registry: TypeRegistry,
    sync: bool,
}

impl StagingWriter {
    /// A writer for the folder `root` that decides fsync by `policy`.
    pub fn new(root: impl Into<PathBuf>, registry: TypeRegistry, policy: SyncPolicy) -> Self {
        let root = root.into();
        let sync = policy.should_sync(&root);
        StagingWriter { area: StagingArea::Dir(root), registry, sync }
    }

    /// A writer for `area`: a folder (fsync decided by `policy`) or a store.
    pub fn in_area(area: StagingArea, registry: TypeRegistry, policy: SyncPolicy) -> Self {
        match area {
            StagingArea::Dir(root) => Self::new(root, registry, policy),
            area => StagingWriter { area, registry, sync: false },
        }
    }

    /// The staging area it writes into.
    pub fn area(&self) -> &StagingArea {
        &self.area
    }

    /// Whether this writer fsyncs (the root is on a shared filesystem, or forced).
    pub fn syncs(&self) -> bool {
        self.sync
    }

    /// Stage one execution. Returns its unit file (as reports show it). A
    /// failed execution (`success == false`) may carry input edges and no
    /// artifacts. In a store this blocks on the lake's runtime: call it
    /// from a blocking thread.
    pub fn write(&self, staged: &StagedExecution) -> Result<PathBuf> {
        self.write_inner(std::slice::from_ref(staged), None, true)
    }

    /// Write the unit object under its temporary name and stop before the
    /// rename that seals it: what a worker that dies just before sealing
    /// leaves behind (returned; a store is left nothing). For crash tests
    /// and load generators.
    #[doc(hidden)]
    pub fn write_unsealed(&self, staged: &StagedExecution) -> Result<PathBuf> {
        self.write_inner(std::slice::from_ref(staged), None, false)
    }

    /// Stage a batch of one step's executions as one unit: one table file
    /// inside for all of them, and one sentinel listing every execution.
    /// The committer takes a batch whole or quarantines it whole; it costs
    /// one file instead of one per execution, and five decoded tables
    /// instead of five per execution, which is most of what a commit of
    /// small executions spends. Returns the batch's unit file.
    pub fn write_batch(&self, staged: &[StagedExecution]) -> Result<PathBuf> {
        self.write_inner(staged, Some(paths::new_batch_id()), true)
    }

    /// [`StagingWriter::write_batch`] under a batch id the caller chose
    /// ([`paths::new_batch_id`]), so that it can say which unit it is
    /// sealing before it does.
    pub fn write_batch_as(&self, batch_id: &str, staged: &[StagedExecution]) -> Result<PathBuf> {
        self.write_inner(staged, Some(batch_id.to_owned()), true)
    }

    /// A batch left unsealed: a worker that died before sealing it.
    #[doc(hidden)]
    pub fn write_batch_unsealed(&self, staged: &[StagedExecution]) -> Result<PathBuf> {
        self.write_inner(staged, Some(paths::new_batch_id()), false)
    }

    fn write_inner(
        &self,
        staged: &[StagedExecution],
        batch: Option<String>,
        seal: bool,
    ) -> Result<PathBuf> {
        let Some(first) = staged.first().map(|s| &s.execution) else {
            return Err(Error::InvalidInput("a staged batch holds no execution".into()));
        };
        let mut run_ids = std::collections::BTreeSet::new();
        for s in staged {
            let e = &s.execution;
            paths::validate_run_id(&e.execution_run_id)?;
            if e.origin_step_number != first.origin_step_number
                || e.operation_name != first.operation_name
            {
                return Err(Error::InvalidInput(format!(
                    "run {}: a batch holds executions of one step; step {} `{}` differs from step {} `{}`",
                    e.execution_run_id,
                    e.origin_step_number,
                    e.operation_name,
                    first.origin_step_number,
                    first.operation_name
                )));
            }
            if !run_ids.insert(e.execution_run_id.as_str()) {
                return Err(Error::InvalidInput(format!(
                    "run {}: staged twice in one batch",
                    e.execution_run_id
                )));
            }
        }
        let (step, operation) = (first.origin_step_number, &first.operation_name);
        let name = batch.as_deref().unwrap_or(&first.execution_run_id);
        if batch.is_some() && !paths::is_batch_id(name) {
            return Err(Error::InvalidInput(format!(
                "batch id {name:?} is rejected: it does not end in `{}`",
                paths::BATCH_SUFFIX
            )));
        }
        let files = self.encode(staged)?;
        match &self.area {
            StagingArea::Dir(root) => {
                let file = paths::unit_file(root, step, operation, name)?;
                self.write_file(&file, name, files, seal)
            }
            StagingArea::Store(store) => {
                let unit = paths::unit_relative(step, operation, name)?;
                area::block_on(write_object(store, &unit, files, seal))??;
                Ok(store.shown(&unit))
            }
        }
    }

    /// Every file of a unit as Parquet bytes, by name; the sentinel last.
    fn encode(&self, staged: &[StagedExecution]) -> Result<Vec<(String, Vec<u8>)>> {
        let mut files = Vec::new();
        // Content an execution of the batch shares with another is written once.
        let mut seen = std::collections::HashSet::new();
        let all: Vec<&Artifact> =
            staged.iter().flat_map(|s| &s.artifacts).filter(|a| seen.insert(a.id)).collect();
        let mut by_type: BTreeMap<&str, Vec<&Artifact>> = BTreeMap::new();
        for artifact in &all {
            by_type.entry(artifact.type_key.as_str()).or_default().push(artifact);
        }
        for (type_key, artifacts) in &by_type {
            let spec = TableSpec::content(self.registry.descriptor(type_key)?);
            let schema = staging_schema(&spec);
            let batch = rows::content_batch(&spec.name, &schema, artifacts)?;
            files.push(encoded(&spec.name, &batch)?);
        }
        let index = layout::index_table();
        files.push(encoded(&index.name, &rows::index_batch(&staging_schema(&index), &all)?)?);
        let edges: Vec<ArtifactEdge> =
            staged.iter().flat_map(|s| s.artifact_edges.iter().cloned()).collect();
        let spec = layout::artifact_edges_table();
        let batch = records_batch(&spec, &staging_schema(&spec), &edges)?;
        files.push(encoded(&spec.name, &batch)?);
        let edges: Vec<ExecutionEdge> =
            staged.iter().flat_map(|s| s.execution_edges.iter().cloned()).collect();
        let spec = layout::execution_edges_table();
        let batch = records_batch(&spec, &staging_schema(&spec), &edges)?;
        files.push(encoded(&spec.name, &batch)?);
        let executions: Vec<ExecutionRecord> = staged.iter().map(|s| s.execution.clone()).collect();
        let spec = layout::executions_table();
        let batch = records_batch(&spec, &staging_schema(&spec), &executions)?;
        files.push(encoded(&spec.name, &batch)?);
        Ok(files)
    }

    /// Write the unit `name` as one file ([`bundle`](super::bundle)) at
    /// `file`, sealed by the rename that gives it its name; a unit left
    /// unsealed on purpose stops before that rename, as a worker killed
    /// there would.
    /// Returns where the unit is: its file, or the partial one left unsealed.
    fn write_file(
        &self,
        file: &Path,
        name: &str,
        files: Vec<(String, Vec<u8>)>,
        seal: bool,
    ) -> Result<PathBuf> {
        let shard =
            file.parent().ok_or_else(|| Error::Internal("a unit file has a folder".into()))?;
        if file.exists() {
            return Err(already_sealed(&file.display()));
        }
        let tmp = shard.join(paths::partial_name(name));
        let mut out = create_in_shard(&tmp)?;
        out.write_all(&super::bundle::pack(&files)).map_err(|e| Error::io(&tmp, e))?;
        if self.sync {
            out.sync_all().map_err(|e| Error::io(&tmp, e))?;
        }
        drop(out);
        if !seal {
            return Ok(tmp);
        }
        std::fs::rename(&tmp, file).map_err(|e| Error::io(file, e))?;
        if self.sync {
            sync_dir(shard)?;
        }
        Ok(file.to_path_buf())
    }
}

/// Staged files whose rows take at most this much memory are written as
/// Arrow IPC; larger ones as compressed Parquet.
const IPC_MAX_BYTES: usize = 256 << 10;

/// One staged file of a table: its name and its rows. Small rows — the
/// usual unit's few metrics and edges — are an Arrow IPC stream
/// (`{table}.arrow`), which decodes in a fraction of what a Parquet file's
/// footer alone costs to read; a commit of thousands of one-unit
/// directories decodes thousands of them. Larger rows (data artifacts)
/// are Parquet (`{table}.parquet`), compressed where it pays, so staging
/// stays as small on disk as the table it feeds.
fn encoded(table: &str, batch: &RecordBatch) -> Result<(String, Vec<u8>)> {
    if batch.get_array_memory_size() <= IPC_MAX_BYTES {
        let name = format!("{table}.arrow");
        let failed = |e| Error::arrow(name.clone(), e);
        let bytes = crate::artifact::data_format::ipc_stream_bytes(
            &batch.schema(),
            std::slice::from_ref(batch),
        )
        .map_err(failed)?;
        return Ok((name, bytes));
    }
    let name = format!("{table}.parquet");
    let properties = compress_where_it_pays(writer_properties(), std::slice::from_ref(batch));
    let failed = |e| Error::parquet(name.clone(), e);
    let mut writer =
        ArrowWriter::try_new(Vec::new(), batch.schema(), Some(properties)).map_err(failed)?;
    writer.write(batch).map_err(failed)?;
    let bytes = writer.into_inner().map_err(failed)?;
    Ok((name, bytes))
}

fn already_sealed(unit: &dyn std::fmt::Display) -> Error {
    Error::InvalidInput(format!("{unit}: already sealed; a run id is staged once"))
}

/// Put a unit into a store as one object ([`bundle`](super::bundle)) at
/// `unit`, if absent: that one PUT writes and seals it. One already there
/// with other bytes is another worker's unit. A unit left unsealed on
/// purpose (a crash test) is not written at all: a worker that dies before
/// its one PUT leaves nothing.
async fn write_object(
    store: &StoreArea,
    unit: &str,
    files: Vec<(String, Vec<u8>)>,
    seal: bool,
) -> Result<()> {
    if !seal {
        return Ok(());
    }
    let object = super::bundle::pack(&files);
    if !store.put_if_absent(unit, &object).await? {
        return Err(already_sealed(&store.shown(unit).display()));
    }
    Ok(())
}

/// The schema of a staged file: the table's spec schema (partition columns
/// included, so a staged file is self-describing).
pub fn staging_schema(spec: &TableSpec) -> deltalake::arrow::datatypes::SchemaRef {
    crate::artifact::value::arrow_schema(&spec.columns)
}

/// Create a unit's partial file, and its shard folder when missing.
/// `vacuum` removes shard folders long empty, which can race with this
/// creation; retry a few times when the folder vanishes underneath.
fn create_in_shard(tmp: &Path) -> Result<File> {
    let shard = tmp.parent().ok_or_else(|| Error::Internal("a unit file has a folder".into()))?;
    let mut attempt = 0;
    loop {
        match File::create(tmp) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 10 => {
                attempt += 1;
                std::fs::create_dir_all(shard).map_err(|e| Error::io(shard, e))?;
            }
            Err(e) => return Err(Error::io(tmp, e)),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}
