//! Finding staged units: sealed ones to commit, unsealed ones to report.

use std::path::{Path, PathBuf};

use super::SENTINEL;
use super::area::StagingArea;
use super::paths::{is_batch_id, parse_step_dir, partial_unit_of, unit_name_of, validate_dir_name};
use crate::error::{Error, Result};

/// A unit found in staging: one execution's, or a batch of one worker's
/// executions of a step. (Named for the folder a unit used to be.)
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunDir {
    /// Step number from the step directory name.
    pub step: i32,
    /// Operation from the step directory name.
    pub operation: String,
    /// The unit's name: the run id of its one execution, or a batch id
    /// (see [`RunDir::is_batch`]).
    pub run_id: String,
    /// Full path: the unit's file, or the folder of an older sluice's unit.
    pub path: PathBuf,
    /// How it is staged.
    pub shape: Shape,
    /// Its size as a store's listing gave it (a unit in a store, whose
    /// `path` is only how it is shown); `None` on a filesystem, where
    /// [`RunDir::staged_bytes`] asks the file.
    pub listed_bytes: Option<u64>,
}

/// How a unit is staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// One sealed file, `{id}.sluice` ([`bundle`](super::bundle)).
    File,
    /// The hidden file a worker that died before its rename left
    /// ([`paths::partial_name`](super::paths::partial_name)): never sealed.
    Partial,
    /// A folder an older sluice staged (its unit object inside, or loose
    /// files and their sentinel).
    Folder,
}

impl RunDir {
    /// A unit staged as one file (the shape this sluice writes).
    pub fn file(step: i32, operation: &str, run_id: &str, path: PathBuf) -> RunDir {
        RunDir {
            step,
            operation: operation.to_owned(),
            run_id: run_id.to_owned(),
            path,
            shape: Shape::File,
            listed_bytes: None,
        }
    }

    /// Where it is below its staging area, `/`-separated:
    /// `{step}_{op}/{id[0:2]}/{id}.sluice` (a partial unit: its hidden
    /// name there), or an older sluice's `{step}_{op}/{id[0:2]}/{id[2:4]}/{id}`.
    pub fn relative(&self) -> String {
        let step = format!("{}_{}", self.step, self.operation);
        let id = &self.run_id;
        match self.shape {
            Shape::File => format!("{step}/{}/{id}{}", &id[0..2], super::paths::UNIT_SUFFIX),
            Shape::Partial => {
                let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned());
                format!("{step}/{}/{}", &id[0..2], name.unwrap_or_default())
            }
            Shape::Folder => format!("{step}/{}/{}/{id}", &id[0..2], &id[2..4]),
        }
    }

    /// The file holding the unit object: the unit's file, or the object in
    /// an older sluice's folder.
    pub fn object_path(&self) -> PathBuf {
        match self.shape {
            Shape::File | Shape::Partial => self.path.clone(),
            Shape::Folder => self.path.join(super::bundle::UNIT_OBJECT),
        }
    }

    /// Whether it is sealed (a unit file always is, once scanned; a
    /// partial one never).
    pub fn is_sealed(&self) -> bool {
        match self.shape {
            Shape::File => std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_file()),
            Shape::Partial => false,
            Shape::Folder => super::is_sealed(&self.path),
        }
    }

    /// Bytes staged: the file's, or the files' directly in the folder (in
    /// a store: the unit object's, as listed).
    pub fn staged_bytes(&self) -> u64 {
        if let Some(bytes) = self.listed_bytes {
            return bytes;
        }
        match self.shape {
            Shape::File | Shape::Partial => {
                std::fs::symlink_metadata(&self.path).map_or(0, |m| m.len())
            }
            Shape::Folder => std::fs::read_dir(&self.path)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter_map(|e| e.metadata().ok())
                        .filter(|m| m.is_file())
                        .map(|m| m.len())
                        .sum()
                })
                .unwrap_or(0),
        }
    }

    /// Whether the unit holds a batch of executions (its name is a batch
    /// id), whose run ids only its sentinel knows.
    pub fn is_batch(&self) -> bool {
        is_batch_id(&self.run_id)
    }

    /// The run ids of the executions the unit holds: its name, or for a
    /// batch the run ids its sentinel lists (an error names the unit when
    /// it is missing or unreadable).
    pub fn staged_run_ids(&self) -> Result<Vec<String>> {
        if !self.is_batch() {
            return Ok(vec![self.run_id.clone()]);
        }
        let unit = self.object_path();
        match std::fs::read(&unit) {
            Ok(object) => sentinel_in(bytes::Bytes::from(object), &unit),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.shape == Shape::Folder => {
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
                let path = self.object_path();
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
    /// Sealed units: complete, ready to commit.
    pub sealed: Vec<RunDir>,
    /// Units not sealed: crashed or still-running workers.
    pub unsealed: Vec<RunDir>,
    /// Entries that do not fit the layout (reported, never committed).
    pub foreign: Vec<PathBuf>,
}

/// A folder's entries, sorted, each with its type as the listing gave it
/// (no `stat` per entry; a symbolic link is a link, never followed).
fn entries(dir: &Path) -> Result<Vec<(PathBuf, std::fs::FileType)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        out.push((entry.path(), kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
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
    for (step_dir, kind) in entries(root)? {
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
        if !kind.is_dir() {
            out.foreign.push(step_dir);
            continue;
        }
        let unit = |run_id: &str, path: PathBuf, shape: Shape| RunDir {
            step: step_number,
            operation: operation.to_owned(),
            run_id: run_id.to_owned(),
            path,
            shape,
            listed_bytes: None,
        };
        for (shard, kind) in entries(&step_dir)? {
            if !kind.is_dir() {
                out.foreign.push(shard);
                continue;
            }
            for (entry, kind) in entries(&shard)? {
                let file_name = name(&entry);
                let in_shard = |id: &str| id.get(0..2) == Some(name(&shard));
                if kind.is_file() {
                    match (unit_name_of(file_name), partial_unit_of(file_name)) {
                        (Some(id), _) if in_shard(id) => {
                            let id = id.to_owned();
                            out.sealed.push(unit(&id, entry, Shape::File));
                        }
                        (_, Some(id)) if in_shard(id) => {
                            let id = id.to_owned();
                            out.unsealed.push(unit(&id, entry, Shape::Partial));
                        }
                        _ => out.foreign.push(entry),
                    }
                } else if kind.is_dir() && file_name.len() == 2 {
                    // An older sluice's second shard level, holding unit folders.
                    scan_legacy_shard(&entry, name(&shard), &unit, &mut out)?;
                } else {
                    out.foreign.push(entry);
                }
            }
        }
    }
    Ok(out)
}

/// The unit folders an older sluice staged in the second shard level
/// `shard2` below the first, `shard1`.
fn scan_legacy_shard(
    shard2: &Path,
    shard1: &str,
    unit: &dyn Fn(&str, PathBuf, Shape) -> RunDir,
    out: &mut StagingScan,
) -> Result<()> {
    for (run, kind) in entries(shard2)? {
        let run_id = name(&run).to_owned();
        let fits = validate_dir_name(&run_id).is_ok()
            && run_id[0..2] == *shard1
            && run_id[2..4] == *name(shard2);
        if !fits || !kind.is_dir() {
            out.foreign.push(run);
            continue;
        }
        let dir = unit(&run_id, run, Shape::Folder);
        if dir.is_sealed() {
            out.sealed.push(dir);
        } else {
            out.unsealed.push(dir);
        }
    }
    Ok(())
}

/// Scan a staging area, optionally one step only: [`scan`] for a folder;
/// for a store, one listing of its `_staging/` prefix, where a unit is its
/// one object and so always sealed (an older sluice's
/// `…/{id}/unit.sluice` as well); any other object is reported as foreign.
pub async fn scan_area(area: &StagingArea, step: Option<i32>) -> Result<StagingScan> {
    let store = match area {
        StagingArea::Dir(root) => return scan(root, step),
        StagingArea::Store(store) => store,
    };
    let mut out = StagingScan::default();
    for (object, size) in store.list_sized("").await? {
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
        let found = match parts.as_slice() {
            [_, shard, file] => unit_name_of(file)
                .filter(|id| id.get(0..2) == Some(*shard))
                .map(|id| (id, Shape::File, object.clone())),
            [_, shard1, shard2, id, file] => (*file == super::bundle::UNIT_OBJECT
                && validate_dir_name(id).is_ok()
                && id[0..2] == **shard1
                && id[2..4] == **shard2)
                .then(|| (*id, Shape::Folder, parts[..4].join("/"))),
            _ => None,
        };
        let Some((run_id, shape, shown)) = found else {
            out.foreign.push(area.shown(&object));
            continue;
        };
        out.sealed.push(RunDir {
            step: step_number,
            operation: operation.to_owned(),
            run_id: run_id.to_owned(),
            path: area.shown(&shown),
            shape,
            listed_bytes: Some(size),
        });
    }
    Ok(out)
}
