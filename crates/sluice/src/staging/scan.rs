//! Finding staged executions: sealed ones to commit, unsealed ones to report.

use std::path::{Path, PathBuf};

use super::SENTINEL;
use super::area::StagingArea;
use super::paths::{is_batch_id, is_real_dir, parse_step_dir, validate_dir_name};
use crate::error::{Error, Result};

/// A staging directory found on disk: one execution's, or a batch of one
/// worker's executions of a step.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunDir {
    /// Step number from the step directory name.
    pub step: i32,
    /// Operation from the step directory name.
    pub operation: String,
    /// The directory name: the run id of its one execution, or a batch id
    /// (see [`RunDir::is_batch`]).
    pub run_id: String,
    /// Full path.
    pub path: PathBuf,
}

impl RunDir {
    /// Where it is below its staging area: `{step}_{op}/{id[0:2]}/{id[2:4]}/{id}`.
    pub fn relative(&self) -> String {
        format!(
            "{}_{}/{}/{}/{}",
            self.step,
            self.operation,
            &self.run_id[0..2],
            &self.run_id[2..4],
            self.run_id
        )
    }

    /// Whether the directory holds a batch of executions (its name is a
    /// batch id), whose run ids only its sentinel knows.
    pub fn is_batch(&self) -> bool {
        is_batch_id(&self.run_id)
    }

    /// The run ids of the executions the directory holds: its name, or for a
    /// batch the run ids its sentinel lists (an error names the unit when
    /// it is missing or unreadable).
    pub fn staged_run_ids(&self) -> Result<Vec<String>> {
        if !self.is_batch() {
            return Ok(vec![self.run_id.clone()]);
        }
        let unit = self.path.join(super::bundle::UNIT_OBJECT);
        match std::fs::read(&unit) {
            Ok(object) => sentinel_in(bytes::Bytes::from(object), &unit),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Loose files, staged by an older sluice.
                let path = self.path.join(SENTINEL);
                let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
                sentinel_run_ids(file, &path)
            }
            Err(e) => Err(Error::io(&unit, e)),
        }
    }

    /// [`RunDir::staged_run_ids`] of a unit in `area`.
    pub async fn staged_run_ids_in(&self, area: &StagingArea) -> Result<Vec<String>> {
        match area {
            StagingArea::Store(store) if self.is_batch() => {
                let path = self.path.join(super::bundle::UNIT_OBJECT);
                let object = store
                    .get(&super::area::unit_object(self))
                    .await?
                    .ok_or_else(|| Error::InvalidInput(format!("{}: gone", path.display())))?;
                sentinel_in(object, &path)
            }
            _ => self.staged_run_ids(),
        }
    }
}

/// The run ids the sentinel of the unit object `object` (at `path`) lists.
fn sentinel_in(object: bytes::Bytes, path: &Path) -> Result<Vec<String>> {
    use super::bundle::{FileFormat, table_of};
    let unreadable =
        |why: &dyn std::fmt::Display| Error::InvalidInput(format!("{}: {why}", path.display()));
    let files = super::bundle::unpack(&object).map_err(|e| unreadable(&e))?;
    let executions = crate::lake::layout::executions_table().name;
    let Some((name, format, sentinel)) = files.into_iter().find_map(|(name, bytes)| {
        let (table, format) = table_of(&name)?;
        (table == executions).then(|| (name.clone(), format, bytes))
    }) else {
        return Err(unreadable(&"it holds no sentinel"));
    };
    let path = path.join(&name);
    match format {
        FileFormat::Parquet => sentinel_run_ids(sentinel, &path),
        FileFormat::Ipc => {
            let (_, batches) =
                super::bundle::decode_ipc(sentinel).map_err(|e| bad_sentinel(&path, &e))?;
            run_ids_of(&batches, &path)
        }
    }
}

/// The `execution_run_id` values of a sentinel Parquet file.
fn sentinel_run_ids<R: deltalake::parquet::file::reader::ChunkReader + 'static>(
    input: R,
    path: &Path,
) -> Result<Vec<String>> {
    use deltalake::parquet::arrow::ProjectionMask;
    use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let bad = |e: &dyn std::fmt::Display| bad_sentinel(path, e);
    let builder = ParquetRecordBatchReaderBuilder::try_new(input).map_err(|e| bad(&e))?;
    let column = builder
        .schema()
        .index_of("execution_run_id")
        .map_err(|_| bad(&"no execution_run_id column"))?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), [column]);
    let batches = builder
        .with_projection(mask)
        .build()
        .map_err(|e| bad(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    run_ids_of(&batches, path)
}

/// The `execution_run_id` values of a sentinel's batches (nulls skipped).
fn run_ids_of(
    batches: &[deltalake::arrow::record_batch::RecordBatch],
    path: &Path,
) -> Result<Vec<String>> {
    use deltalake::arrow::array::Array;
    let mut out = Vec::new();
    for batch in batches {
        let column = batch
            .schema()
            .index_of("execution_run_id")
            .map_err(|_| bad_sentinel(path, &"no execution_run_id column"))?;
        let text = crate::lake::delta::scan::text_column(batch, column, "execution_run_id")?;
        out.extend((0..text.len()).filter(|&r| text.is_valid(r)).map(|r| text.value(r).to_owned()));
    }
    Ok(out)
}

fn bad_sentinel(path: &Path, why: &dyn std::fmt::Display) -> Error {
    Error::InvalidInput(format!("{}: unreadable sentinel: {why}", path.display()))
}

/// What a scan of a staging root found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagingScan {
    /// Directories holding the sentinel: complete, ready to commit.
    pub sealed: Vec<RunDir>,
    /// Directories without it: crashed or still-running workers.
    pub unsealed: Vec<RunDir>,
    /// Entries that do not fit the layout (reported, never committed).
    pub foreign: Vec<PathBuf>,
}

fn entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        out.push(entry.path());
    }
    out.sort();
    Ok(out)
}

fn name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Scan a staging root, optionally one step only. A missing root is empty.
pub fn scan(root: &Path, step: Option<i32>) -> Result<StagingScan> {
    let mut out = StagingScan::default();
    if !root.is_dir() {
        return Ok(out);
    }
    for step_dir in entries(root)? {
        if name(&step_dir).starts_with('.') {
            continue; // quarantine and other bookkeeping
        }
        let Some((step_number, operation)) = parse_step_dir(name(&step_dir)) else {
            out.foreign.push(step_dir);
            continue;
        };
        if step.is_some_and(|s| s != step_number) {
            continue;
        }
        // Every level must be a real directory: a symbolic link (to another
        // lake's staging, say) is reported, never followed.
        if !is_real_dir(&step_dir) {
            out.foreign.push(step_dir);
            continue;
        }
        for shard1 in entries(&step_dir)? {
            if !is_real_dir(&shard1) {
                out.foreign.push(shard1);
                continue;
            }
            for shard2 in entries(&shard1)? {
                if !is_real_dir(&shard2) {
                    out.foreign.push(shard2);
                    continue;
                }
                for run in entries(&shard2)? {
                    let run_id = name(&run).to_owned();
                    let fits = validate_dir_name(&run_id).is_ok()
                        && run_id[0..2] == *name(&shard1)
                        && run_id[2..4] == *name(&shard2);
                    if !fits || !is_real_dir(&run) {
                        out.foreign.push(run);
                        continue;
                    }
                    let dir = RunDir {
                        step: step_number,
                        operation: operation.to_owned(),
                        run_id,
                        path: run,
                    };
                    if super::is_sealed(&dir.path) {
                        out.sealed.push(dir);
                    } else {
                        out.unsealed.push(dir);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Scan a staging area, optionally one step only: [`scan`] for a folder;
/// for a store, one listing of its `_staging/` prefix, where a unit is its
/// one object ([`bundle`](super::bundle)) and so always sealed; any other
/// object is reported as foreign.
pub async fn scan_area(area: &StagingArea, step: Option<i32>) -> Result<StagingScan> {
    let store = match area {
        StagingArea::Dir(root) => return scan(root, step),
        StagingArea::Store(store) => store,
    };
    let mut out = StagingScan::default();
    for object in store.list("").await? {
        let parts: Vec<&str> = object.split('/').collect();
        if parts[0].starts_with('.') {
            continue; // manifests and quarantine
        }
        let Some((step_number, operation)) = parse_step_dir(parts[0]) else {
            out.foreign.push(area.shown(&object));
            continue;
        };
        if step.is_some_and(|s| s != step_number) {
            continue;
        }
        let fits = parts.len() == 5
            && parts[4] == super::bundle::UNIT_OBJECT
            && validate_dir_name(parts[3]).is_ok()
            && parts[3][0..2] == *parts[1]
            && parts[3][2..4] == *parts[2];
        if !fits {
            out.foreign.push(area.shown(&object));
            continue;
        }
        out.sealed.push(RunDir {
            step: step_number,
            operation: operation.to_owned(),
            run_id: parts[3].to_owned(),
            path: area.shown(&parts[..4].join("/")),
        });
    }
    Ok(out)
}
