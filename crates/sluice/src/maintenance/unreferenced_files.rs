//! Kept files no `file_ref` references: what vacuum collects below `files/`.
//!
//! A unit keeps the file of its `file_ref` output
//! ([`kept_files`](crate::lake::kept_files)) before its execution is
//! committed, so a unit that then fails, or whose commit a restore later
//! undid, leaves a kept file that nothing references. Such a file is
//! removed when both hold:
//!
//! - no data file of the `file_refs` table still in storage names its
//!   content hash. The table is vacuumed first, so what remains is every
//!   data file some version within the retention may need: time travel or a
//!   restore within the retention finds the files its references name.
//!   Files the table no longer lists count too (they only keep more).
//! - it was written longer ago than the retention, so a unit still running
//!   — its file kept, its commit still to come — never loses it.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::artifact::FILE_REF;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::io::location::LakeRoot;
use crate::lake::io::store_area::StoreArea;
use crate::lake::kept_files::FILES;
use crate::lake::layout::TableSpec;

/// The content column a kept file is addressed by.
const HASH_COLUMN: &str = "content_hash";

/// Kept files (paths relative to the lake, `files/<hash>/<name>`) that no
/// `file_refs` data file in storage references and that are older than
/// `retention`; removed unless `dry_run`.
pub(super) async fn collect(
    lake: &Lake,
    retention: Duration,
    dry_run: bool,
) -> Result<Vec<String>> {
    let referenced = referenced_hashes(lake).await?;
    let old_enough = |modified: SystemTime| {
        SystemTime::now().duration_since(modified).is_ok_and(|age| age >= retention)
    };
    let mut found: Vec<String> = kept(lake.root())
        .await?
        .into_iter()
        .filter(|(hash, _, modified)| !referenced.contains(hash) && old_enough(*modified))
        .map(|(hash, name, _)| format!("{FILES}/{hash}/{name}"))
        .collect();
    found.sort();
    if !dry_run {
        remove(lake.root(), &found).await?;
    }
    Ok(found)
}

/// Every content hash a `file_refs` data file still in storage names.
async fn referenced_hashes(lake: &Lake) -> Result<BTreeSet<String>> {
    let spec = TableSpec::content(lake.registry().descriptor(FILE_REF)?);
    let mut out = BTreeSet::new();
    for (shown, bytes) in data_files(lake.root(), &spec).await? {
        hashes_in(&shown, bytes, &mut out)?;
    }
    Ok(out)
}

/// The Parquet files below a table's folder (its log's excluded), each with
/// how messages name it and its bytes.
async fn data_files(root: &LakeRoot, spec: &TableSpec) -> Result<Vec<(String, Bytes)>> {
    let is_data = |relative: &str| {
        relative.ends_with(".parquet") && !relative.split('/').any(|part| part == "_delta_log")
    };
    let mut out = Vec::new();
    match root {
        LakeRoot::Local(lake) => {
            let mut folders = vec![lake.join(&spec.path)];
            while let Some(folder) = folders.pop() {
                let Ok(entries) = std::fs::read_dir(&folder) else { continue };
                for entry in entries.flatten() {
                    let path = entry.path();
                    let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
                    let name = entry.file_name();
                    if kind.is_dir() && name != "_delta_log" {
                        folders.push(path);
                    } else if kind.is_file() && is_data(&name.to_string_lossy()) {
                        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
                        out.push((path.display().to_string(), Bytes::from(bytes)));
                    }
                }
            }
        }
        LakeRoot::Store(store) => {
            let area = StoreArea::new(store.clone(), &spec.path);
            for relative in area.list("").await?.into_iter().filter(|r| is_data(r)) {
                // A file removed since the listing references nothing.
                if let Some(bytes) = area.get(&relative).await? {
                    out.push((area.shown(&relative).display().to_string(), bytes));
                }
            }
        }
    }
    Ok(out)
}

/// Add the content hashes one Parquet file holds to `out`.
fn hashes_in(shown: &str, bytes: Bytes, out: &mut BTreeSet<String>) -> Result<()> {
    let parquet = |e| Error::parquet(format!("reading {shown}"), e);
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(parquet)?;
    let schema = builder.parquet_schema();
    let Some(column) = schema.columns().iter().position(|c| c.name() == HASH_COLUMN) else {
        return Ok(());
    };
    let mask = ProjectionMask::leaves(schema, [column]);
    for batch in builder.with_projection(mask).build().map_err(parquet)? {
        let batch = batch.map_err(|e| Error::arrow(format!("reading {shown}"), e))?;
        let hashes = crate::lake::delta::scan::text_column(&batch, 0, shown)?;
        out.extend(hashes.iter().flatten().map(str::to_owned));
    }
    Ok(())
}

/// The kept files: content hash, name, when last written.
async fn kept(root: &LakeRoot) -> Result<Vec<(String, String, SystemTime)>> {
    let mut out = Vec::new();
    match root {
        LakeRoot::Local(lake) => {
            let files = lake.join(FILES);
            for folder in std::fs::read_dir(&files).into_iter().flatten().flatten() {
                let hash = folder.file_name().to_string_lossy().into_owned();
                // Only real folders are entered: a link is never followed.
                if !folder.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                for file in std::fs::read_dir(folder.path()).into_iter().flatten().flatten() {
                    let Ok(meta) = file.metadata() else { continue };
                    if meta.is_file() {
                        let modified = meta.modified().map_err(|e| Error::io(file.path(), e))?;
                        let name = file.file_name().to_string_lossy().into_owned();
                        out.push((hash.clone(), name, modified));
                    }
                }
            }
        }
        LakeRoot::Store(store) => {
            let area = StoreArea::new(store.clone(), FILES);
            for (relative, written) in area.list_dated("").await? {
                if let Some((hash, name)) = relative.split_once('/') {
                    out.push((hash.to_owned(), name.to_owned(), SystemTime::from(written)));
                }
            }
        }
    }
    Ok(out)
}

/// Remove kept files (relative to the lake), and on a filesystem the hash
/// folders they leave empty.
async fn remove(root: &LakeRoot, relatives: &[String]) -> Result<()> {
    match root {
        LakeRoot::Local(lake) => {
            for relative in relatives {
                let path = lake.join(relative);
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&path, e)),
                }
                // Left when another file of the same bytes is still there.
                if let Some(folder) = path.parent() {
                    let _ = std::fs::remove_dir(folder);
                }
            }
            Ok(())
        }
        LakeRoot::Store(store) => {
            StoreArea::new(store.clone(), "").delete_many(relatives.to_vec()).await
        }
    }
}
