//! The worker side: write one execution's results into its staging directory.
//!
//! A worker never touches a Delta table. It writes, into its own directory:
//!
//! 1. one `{table}.parquet` per content table it produced rows for;
//! 2. `index.parquet`, `artifact_edges.parquet`, `execution_edges.parquet`;
//! 3. `executions.parquet` **last**: the sentinel. A directory without it is a
//!    crashed or unfinished worker and is never committed.
//!
//! Each file is written to a hidden temporary name and renamed into place, so
//! no reader ever sees half a file. On a shared filesystem each file is
//! fsynced before its rename and the directory after it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::parquet::arrow::ArrowWriter;

use super::SENTINEL;
use super::fs_kind::SyncPolicy;
use super::paths;
use crate::artifact::Artifact;
use crate::error::{Error, Result};
use crate::lake::layout::{self, TableSpec};
use crate::lake::table::writer_properties;
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

/// Writes staged executions under a staging root.
#[derive(Debug, Clone)]
pub struct StagingWriter {
    root: PathBuf,
    registry: TypeRegistry,
    sync: bool,
}

impl StagingWriter {
    /// A writer for `root` that decides fsync by `policy`.
    pub fn new(root: impl Into<PathBuf>, registry: TypeRegistry, policy: SyncPolicy) -> Self {
        let root = root.into();
        let sync = policy.should_sync(&root);
        StagingWriter { root, registry, sync }
    }

    /// The staging root it writes under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this writer fsyncs (the root is on a shared filesystem, or forced).
    pub fn syncs(&self) -> bool {
        self.sync
    }

    /// Stage one execution. Returns its directory. A failed execution
    /// (`success == false`) may carry input edges and no artifacts.
    pub fn write(&self, staged: &StagedExecution) -> Result<PathBuf> {
        self.write_inner(staged, true)
    }

    /// Write everything but the sentinel: what a worker that dies just before
    /// sealing leaves behind. For crash tests and load generators.
    #[doc(hidden)]
    pub fn write_unsealed(&self, staged: &StagedExecution) -> Result<PathBuf> {
        self.write_inner(staged, false)
    }

    fn write_inner(&self, staged: &StagedExecution, seal: bool) -> Result<PathBuf> {
        let e = &staged.execution;
        let dir = paths::run_dir(
            &self.root,
            e.origin_step_number,
            &e.operation_name,
            &e.execution_run_id,
        )?;
        create_run_dir(&dir)?;
        if dir.join(SENTINEL).exists() {
            return Err(Error::InvalidInput(format!(
                "{}: already sealed; a run id is staged once",
                dir.display()
            )));
        }

        let mut by_type: BTreeMap<&str, Vec<&Artifact>> = BTreeMap::new();
        for artifact in &staged.artifacts {
            by_type.entry(artifact.type_key.as_str()).or_default().push(artifact);
        }
        for (type_key, artifacts) in &by_type {
            let spec = TableSpec::content(self.registry.descriptor(type_key)?);
            let schema = staging_schema(&spec);
            let batch = rows::content_batch(&spec.name, &schema, artifacts)?;
            self.write_file(&dir, &format!("{}.parquet", spec.name), &batch)?;
        }
        let all: Vec<&Artifact> = staged.artifacts.iter().collect();
        let index = layout::index_table();
        self.write_file(&dir, "index.parquet", &rows::index_batch(&staging_schema(&index), &all)?)?;
        let spec = layout::artifact_edges_table();
        let batch = records_batch(&spec, &staging_schema(&spec), &staged.artifact_edges)?;
        self.write_file(&dir, "artifact_edges.parquet", &batch)?;
        let spec = layout::execution_edges_table();
        let batch = records_batch(&spec, &staging_schema(&spec), &staged.execution_edges)?;
        self.write_file(&dir, "execution_edges.parquet", &batch)?;
        if !seal {
            return Ok(dir);
        }
        let spec = layout::executions_table();
        let batch = records_batch(&spec, &staging_schema(&spec), std::slice::from_ref(e))?;
        self.write_file(&dir, SENTINEL, &batch)?;
        if self.sync {
            sync_dir(&dir)?;
        }
        Ok(dir)
    }

    fn write_file(&self, dir: &Path, name: &str, batch: &RecordBatch) -> Result<()> {
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(writer_properties()))
            .map_err(|e| Error::parquet(tmp.display().to_string(), e))?;
        writer.write(batch).map_err(|e| Error::parquet(tmp.display().to_string(), e))?;
        let mut file =
            writer.into_inner().map_err(|e| Error::parquet(tmp.display().to_string(), e))?;
        file.flush().map_err(|e| Error::io(&tmp, e))?;
        if self.sync {
            file.sync_all().map_err(|e| Error::io(&tmp, e))?;
        }
        drop(file);
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
        Ok(())
    }
}

/// The schema of a staged file: the table's spec schema (partition columns
/// included, so a staged file is self-describing).
pub fn staging_schema(spec: &TableSpec) -> deltalake::arrow::datatypes::SchemaRef {
    crate::artifact::value::arrow_schema(&spec.columns)
}

/// Create a run directory. A committer removes shard directories it empties,
/// which can race with this creation; retry a few times when a parent
/// vanishes underneath.
fn create_run_dir(dir: &Path) -> Result<()> {
    let mut attempt = 0;
    loop {
        match std::fs::create_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 10 => attempt += 1,
            Err(e) => return Err(Error::io(dir, e)),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}
