//! `ingest_files`: files matched by globs become `file_ref` artifacts.
//!
//! Params: `paths`, a glob or a list of globs (relative globs are taken from
//! the directory the pipeline runs in). One unit per file, in sorted path
//! order. A file is identified by its content hash, so a renamed or touched
//! file with the same bytes is the same artifact; the unit's cache key holds
//! the path, size and modification time, so a changed file is re-ingested.

use std::collections::BTreeMap;

use crate::artifact::Draft;
use crate::error::{Error, Result};
use crate::pipeline::config::StepConfig;
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};

/// The `ingest_files` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct IngestFiles;

fn patterns(step: &StepConfig) -> std::result::Result<Vec<String>, String> {
    match step.params.get("paths") {
        Some(serde_json::Value::String(p)) => Ok(vec![p.clone()]),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("`paths` entries must be strings, got {v}"))
            })
            .collect(),
        Some(other) => Err(format!("`paths` must be a glob or a list of globs, got {other}")),
        None => Err("parameter `paths` (a glob or list of globs) is required".into()),
    }
}

impl Operation for IngestFiles {
    fn name(&self) -> &str {
        "ingest_files"
    }

    fn outputs(&self, s: &Signature<'_>) -> std::result::Result<BTreeMap<String, String>, String> {
        if !s.input_types.is_empty() {
            return Err("takes no inputs".into());
        }
        for p in patterns(s.step)? {
            glob::Pattern::new(&p).map_err(|e| format!("`paths`: invalid glob `{p}`: {e}"))?;
        }
        Ok(BTreeMap::from([("files".into(), crate::artifact::FILE_REF.into())]))
    }

    fn source_units(&self, step: &StepConfig) -> Result<Option<Vec<serde_json::Value>>> {
        let bad = |m: String| Error::operation("ingest_files", m);
        let mut files = std::collections::BTreeSet::new();
        for p in patterns(step).map_err(bad)? {
            let matches = glob::glob(&p).map_err(|e| bad(format!("invalid glob `{p}`: {e}")))?;
            for entry in matches {
                let path = entry.map_err(|e| bad(format!("reading a match of `{p}`: {e}")))?;
                if path.is_file() {
                    files.insert(std::path::absolute(&path).map_err(|e| Error::io(&path, e))?);
                }
            }
        }
        let mut units = Vec::with_capacity(files.len());
        for path in files {
            let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            units.push(serde_json::json!({
                "path": path.to_string_lossy(),
                "size": meta.len(),
                "modified_ns": modified,
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
