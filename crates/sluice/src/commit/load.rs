//! Reading and validating one sealed run directory.
//!
//! A run directory is committed only if every check passes; otherwise it is
//! quarantined with the reason, and the rest of the commit goes on:
//!
//! 1. every file is a known table file and a readable Parquet file;
//! 2. every file's columns are the table's columns, with the table's types,
//!    and no nulls in required columns;
//! 3. `executions.parquet` holds exactly one row, whose run id, step and
//!    operation are those of the directory it sits in; every edge row names
//!    the same run;
//! 4. every content row's `artifact_id` equals the id recomputed from its
//!    content (integrity), and content rows and index rows list the same
//!    artifacts with the same types.
//!
//! Whether edges point at known artifacts needs the whole commit and the
//! lake, so it is checked by the caller.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;

use deltalake::arrow::array::Array;
use deltalake::arrow::compute::concat_batches;
use deltalake::arrow::record_batch::{RecordBatch, RecordBatchReader};
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::artifact::ArtifactId;
use crate::lake::layout::{self, TableKind, TableSpec};
use crate::registry::TypeRegistry;
use crate::staging::{RunDir, SENTINEL};
use crate::store::arrow_convert::read_value;
use crate::store::rows::artifacts_from_batch;

/// A validated run directory, its rows by table.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// Where it came from.
    pub dir: RunDir,
    /// Staged rows, by table short name.
    pub tables: BTreeMap<String, RecordBatch>,
    /// Artifacts this run produced, with their type keys.
    pub artifacts: BTreeMap<String, String>,
    /// Artifact ids its edges refer to.
    pub referenced: BTreeSet<String>,
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

fn read_parquet(path: &Path, name: &str) -> Result<RecordBatch, Rejection> {
    let bad = |e: &dyn std::fmt::Display| Rejection {
        file: Some(name.into()),
        reason: format!("unreadable Parquet: {e}"),
    };
    let file = File::open(path).map_err(|e| bad(&e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?;
    let schema = reader.schema();
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(|e| bad(&e))?;
    concat_batches(&schema, &batches).map_err(|e| bad(&e))
}

fn check_schema(spec: &TableSpec, batch: &RecordBatch, file: &str) -> Result<(), Rejection> {
    for field in batch.schema().fields() {
        let Some(column) = spec.columns.iter().find(|c| &c.name == field.name()) else {
            return reject(
                Some(file),
                format!("unexpected column `{}` for table `{}`", field.name(), spec.name),
            );
        };
        let expected = column.column_type.arrow_type();
        if field.data_type() != &expected {
            return reject(
                Some(file),
                format!(
                    "column `{}` has type {} but table `{}` stores {expected}",
                    field.name(),
                    field.data_type(),
                    spec.name
                ),
            );
        }
    }
    for column in spec.columns.iter().filter(|c| !c.nullable) {
        match batch.column_by_name(&column.name) {
            None => {
                return reject(Some(file), format!("required column `{}` is missing", column.name));
            }
            Some(a) if a.null_count() > 0 => {
                return reject(
                    Some(file),
                    format!("required column `{}` holds nulls", column.name),
                );
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn strings(batch: &RecordBatch, column: &str) -> Vec<String> {
    batch.column_by_name(column).map_or_else(Vec::new, |a| {
        (0..batch.num_rows())
            .map(|i| read_value(a.as_ref(), i).as_str().unwrap_or_default().to_owned())
            .collect()
    })
}

/// Read and validate one sealed run directory.
pub fn load_run(
    registry: &TypeRegistry,
    tables: &[TableSpec],
    dir: &RunDir,
) -> Result<LoadedRun, Rejection> {
    let mut by_file: BTreeMap<String, &TableSpec> = BTreeMap::new();
    for spec in tables {
        if !matches!(spec.kind, TableKind::Steps | TableKind::Commits) {
            by_file.insert(format!("{}.parquet", spec.name), spec);
        }
    }
    let entries = std::fs::read_dir(&dir.path)
        .map_err(|e| Rejection { file: None, reason: format!("cannot list: {e}") })?;
    let mut loaded = LoadedRun {
        dir: dir.clone(),
        tables: BTreeMap::new(),
        artifacts: BTreeMap::new(),
        referenced: BTreeSet::new(),
    };
    for entry in entries {
        let entry =
            entry.map_err(|e| Rejection { file: None, reason: format!("cannot list: {e}") })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue; // a temporary file of an interrupted write; never part of the result
        }
        let Some(spec) = by_file.get(&name) else {
            return reject(Some(&name), "unexpected file in a run directory");
        };
        let batch = read_parquet(&entry.path(), &name)?;
        check_schema(spec, &batch, &name)?;
        loaded.tables.insert(spec.name.clone(), batch);
    }

    // The execution row names this directory.
    let executions = layout::executions_table();
    let Some(exec) = loaded.tables.get(&executions.name) else {
        return reject(Some(SENTINEL), "missing");
    };
    if exec.num_rows() != 1 {
        return reject(
            Some(SENTINEL),
            format!("holds {} rows; a run directory holds one execution", exec.num_rows()),
        );
    }
    let run_id = strings(exec, "execution_run_id").remove(0);
    let operation = strings(exec, "operation_name").remove(0);
    let step =
        exec.column_by_name("origin_step_number").and_then(|a| read_value(a.as_ref(), 0).as_int());
    if run_id != dir.run_id {
        return reject(
            Some(SENTINEL),
            format!("execution_run_id `{run_id}` does not match the directory `{}`", dir.run_id),
        );
    }
    if step != Some(i64::from(dir.step)) || operation != dir.operation {
        return reject(
            Some(SENTINEL),
            format!(
                "step {step:?} / operation `{operation}` do not match the directory `{}_{}`",
                dir.step, dir.operation
            ),
        );
    }
    for edges in [layout::execution_edges_table(), layout::artifact_edges_table()] {
        if let Some(batch) = loaded.tables.get(&edges.name) {
            if let Some(other) =
                strings(batch, "execution_run_id").into_iter().find(|r| *r != run_id)
            {
                return reject(
                    Some(&format!("{}.parquet", edges.name)),
                    format!("edge of another run `{other}`"),
                );
            }
            for column in ["artifact_id", "source_artifact_id", "target_artifact_id"] {
                loaded.referenced.extend(strings(batch, column));
            }
        }
    }

    // Content integrity: ids recomputed from content; index lists the same.
    for descriptor in registry.descriptors() {
        let spec = TableSpec::content(descriptor);
        let Some(batch) = loaded.tables.get(&spec.name) else { continue };
        let file = format!("{}.parquet", spec.name);
        let columns: Vec<String> = descriptor.columns.iter().map(|c| c.name.clone()).collect();
        let artifacts = artifacts_from_batch(&spec.name, &descriptor.key, &columns, batch)
            .map_err(|e| Rejection { file: Some(file.clone()), reason: e.to_string() })?;
        let imp = registry
            .get(&descriptor.key)
            .map_err(|e| Rejection { file: None, reason: e.to_string() })?;
        for artifact in artifacts {
            let bytes = imp
                .identity_bytes(&artifact.fields)
                .map_err(|e| Rejection { file: Some(file.clone()), reason: e.to_string() })?;
            let computed = ArtifactId::compute(&descriptor.key, &bytes);
            if computed != artifact.id {
                return reject(
                    Some(&file),
                    format!(
                        "artifact_id {} does not match its content (recomputed {computed})",
                        artifact.id
                    ),
                );
            }
            loaded.artifacts.insert(artifact.id.to_hex(), descriptor.key.clone());
        }
    }
    let index = layout::index_table();
    let indexed: BTreeMap<String, String> = loaded
        .tables
        .get(&index.name)
        .map(|b| strings(b, "artifact_id").into_iter().zip(strings(b, "artifact_type")).collect())
        .unwrap_or_default();
    if indexed != loaded.artifacts {
        let missing: Vec<_> =
            loaded.artifacts.keys().filter(|k| !indexed.contains_key(*k)).take(3).collect();
        let extra: Vec<_> =
            indexed.iter().filter(|(k, v)| loaded.artifacts.get(*k) != Some(v)).take(3).collect();
        return reject(
            Some("index.parquet"),
            format!(
                "does not list the run's artifacts (not indexed: {missing:?}; unknown or mistyped: {extra:?})"
            ),
        );
    }
    Ok(loaded)
}
