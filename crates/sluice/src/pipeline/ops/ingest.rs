//! `ingest_files`: files matched by globs become `file_ref` artifacts.
//!
//! Params: `paths`, a glob or a list of globs (relative globs are taken from
//! the directory the pipeline runs in); `hash` (default `false`). One unit
//! per file, in sorted path order. A file is identified by its content hash,
//! so a renamed or touched file with the same bytes is the same artifact.
//!
//! The unit's cache key — what makes a rerun read a file again — holds the
//! path and the file's stat: size, modification time, change time (ctime)
//! and inode. Any write to a file changes its ctime, and no tool can set
//! ctime back, so rewritten content is always read again, even with the same
//! size and a restored mtime. With `hash = true` the key holds the content's
//! BLAKE3 instead of the stat (hashed on all cores while planning): a
//! touched, copied or restored file with the same bytes is then not read
//! again.

use std::collections::BTreeMap;

use crate::artifact::Draft;
use crate::error::{Error, Result};
use crate::pipeline::config::{StepConfig, StepError};
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};

/// The `ingest_files` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct IngestFiles;

fn patterns(step: &StepConfig) -> std::result::Result<Vec<String>, StepError> {
    let bad = |problem: String| StepError::BadParam { name: "paths".into(), problem };
    match step.params.get("paths") {
        Some(serde_json::Value::String(p)) => Ok(vec![p.clone()]),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad(format!("entries must be strings, got {v}")))
            })
            .collect(),
        Some(other) => Err(bad(format!("must be a glob or a list of globs, got {other}"))),
        None => Err(StepError::MissingParam {
            name: "paths".into(),
            expected: "a glob or list of globs".into(),
        }),
    }
}

impl Operation for IngestFiles {
    fn name(&self) -> &str {
        "ingest_files"
    }

    fn known_params(&self) -> Option<&'static [&'static str]> {
        Some(&["paths", "hash"])
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        if !s.input_types.is_empty() {
            return Err(StepError::Shape("takes no inputs".into()));
        }
        for p in patterns(s.step)? {
            glob::Pattern::new(&p).map_err(|e| StepError::BadParam {
                name: "paths".into(),
                problem: format!("has an invalid glob `{p}`: {e}"),
            })?;
        }
        Ok(BTreeMap::from([("files".into(), crate::artifact::FILE_REF.into())]))
    }

    fn source_units(&self, step: &StepConfig) -> Result<Option<Vec<serde_json::Value>>> {
        let bad = |m: String| Error::operation("ingest_files", m);
        let mut files = std::collections::BTreeSet::new();
        let patterns = patterns(step)
            .map_err(|source| Error::Step { operation: "ingest_files".into(), source })?;
        for p in patterns {
            let matches = glob::glob(&p).map_err(|e| bad(format!("invalid glob `{p}`: {e}")))?;
            for entry in matches {
                let path = entry.map_err(|e| bad(format!("reading a match of `{p}`: {e}")))?;
                if path.is_file() {
                    files.insert(std::path::absolute(&path).map_err(|e| Error::io(&path, e))?);
                }
            }
        }
        let by_content = step.params.get("hash").and_then(serde_json::Value::as_bool) == Some(true);
        let files: Vec<std::path::PathBuf> = files.into_iter().collect();
        if by_content {
            return Ok(Some(content_keys(&files)?));
        }
        let mut units = Vec::with_capacity(files.len());
        for path in files {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
            units.push(serde_json::json!({
                "path": path.to_string_lossy(),
                "size": meta.len(),
                "modified_ns": meta.mtime() as i128 * 1_000_000_000 + i128::from(meta.mtime_nsec()),
                "changed_ns": meta.ctime() as i128 * 1_000_000_000 + i128::from(meta.ctime_nsec()),
                "inode": meta.ino(),
                "device": meta.dev(),
            }));
        }
        Ok(Some(units))
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let mut out = Vec::new();
        for source in &ctx.sources {
            let path = source.get("path").and_then(serde_json::Value::as_str).ok_or_else(|| {
                Error::operation("ingest_files", format!("unit descriptor {source} has no path"))
            })?;
            let draft = Draft::file_ref(std::path::Path::new(path))?;
            out.push(Output::New { role: "files".into(), draft, derived_from: None });
        }
        Ok(out)
    }
}
/// Unit descriptors keyed by content: path, size and BLAKE3, the files
/// hashed on all cores (streamed, never read whole into memory).
fn content_keys(files: &[std::path::PathBuf]) -> Result<Vec<serde_json::Value>> {
    crate::host::on_cores(files, |path| {
        let (blake3, size) = crate::artifact::hash_file(path)?;
        Ok(serde_json::json!({ "path": path.to_string_lossy(), "size": size, "blake3": blake3 }))
    })
    .into_iter()
    .collect()
}
