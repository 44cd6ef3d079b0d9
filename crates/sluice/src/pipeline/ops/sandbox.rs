//! A unit's sandbox: its inputs written out one file per artifact, its
//! outputs read back as drafts. `command` steps hand the sandbox to a
//! program, `python` steps to a function run by the worker's interpreter;
//! [`super::command`] describes the layout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::artifact::{Artifact, ArtifactId, DataFormat, Draft, FieldValue};
use crate::error::{Error, Result};
use crate::pipeline::config::StepConfig;
use crate::pipeline::operation::UnitContext;

/// Add the files a step's `depends` globs match to `paths` (absolute); a
/// glob that matches no file is an error.
pub(super) fn add_depends(step: &StepConfig, paths: &mut BTreeSet<PathBuf>) -> Result<()> {
    for pattern in &step.depends {
        let bad =
            |m: String| Error::operation(&step.operation, format!("depends `{pattern}`: {m}"));
        let matches = glob::glob(pattern).map_err(|e| bad(e.to_string()))?;
        let before = paths.len();
        for entry in matches {
            let path = entry.map_err(|e| bad(e.to_string()))?;
            if path.is_file() {
                paths.insert(std::path::absolute(&path).map_err(|e| Error::io(&path, e))?);
            }
        }
        if paths.len() == before {
            return Err(bad("matches no file".into()));
        }
    }
    Ok(())
}

/// Path → BLAKE3 of its content, for a cache key.
pub(super) fn hash_files(paths: BTreeSet<PathBuf>) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for path in paths {
        out.insert(path.display().to_string(), crate::artifact::hash_file(&path)?.0);
    }
    Ok(out)
}

/// The regular files a tool wrote into an output directory, sorted. A
/// symbolic link is an error: following it could pull any readable file
/// into the lake.
pub(super) fn output_files(dir: &Path, sandbox: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        if kind.is_symlink() {
            let shown = entry.path();
            return Err(Error::operation(
                "command",
                format!(
                    "output {} is a symbolic link; outputs must be regular files the tool wrote",
                    shown.strip_prefix(sandbox).unwrap_or(&shown).display()
                ),
            ));
        }
        if kind.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

pub(super) fn mkdir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// Write one input into `dir`: the stem it was given and its file.
pub(super) fn materialize(
    ctx: &UnitContext,
    artifact: &Artifact,
    dir: &Path,
    taken: &BTreeMap<String, ArtifactId>,
) -> Result<(String, PathBuf)> {
    let original = artifact
        .field("original_name")
        .as_str()
        .map(|n| Path::new(n).file_stem().and_then(|s| s.to_str()).unwrap_or(n).to_owned());
    let mut stem = original
        .filter(|s| crate::staging::paths::validate_component("file stem", s).is_ok())
        .unwrap_or_else(|| artifact.id.to_hex());
    if taken.contains_key(&stem) {
        stem = format!("{stem}-{}", &artifact.id.to_hex()[..8]);
    }
    let write = |name: String, bytes: &[u8]| -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
        read_only(&path)?;
        Ok(path)
    };
    let path = match (artifact.type_key.as_str(), artifact.field("content")) {
        (crate::artifact::METRIC | crate::artifact::CONFIG, FieldValue::String(json)) => {
            write(format!("{stem}.json"), json.as_bytes())?
        }
        (crate::artifact::DATA, FieldValue::Binary(bytes)) => {
            let format = DataFormat::from_name(artifact.field("format").as_str().unwrap_or("csv"))?;
            write(format!("{stem}.{}", format.name()), bytes)?
        }
        (crate::artifact::FILE_REF, _) => {
            let ext = artifact
                .field("extension")
                .as_str()
                .filter(|e| crate::artifact::valid_extension(e))
                .map(|e| format!(".{e}"))
                .unwrap_or_default();
            let copy = dir.join(format!("{stem}{ext}"));
            ctx.block_on(ctx.lake.copy_referenced_file(artifact, &copy))?;
            read_only(&copy)?;
            copy
        }
        _ => {
            let object: serde_json::Map<String, serde_json::Value> =
                artifact.fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
            write(format!("{stem}.json"), serde_json::Value::Object(object).to_string().as_bytes())?
        }
    };
    Ok((stem, path))
}

/// Mark an input file read-only: the tool reads it, never changes it.
fn read_only(path: &Path) -> Result<()> {
    let mut permissions = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(path, permissions).map_err(|e| Error::io(path, e))
}

/// An output file as a draft of `type_key`.
pub(super) fn output_draft(ctx: &UnitContext, type_key: &str, file: &Path) -> Result<Draft> {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let read_json = || -> Result<serde_json::Value> {
        let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?;
        serde_json::from_str(&text).map_err(|e| Error::json(file.display().to_string(), e))
    };
    Ok(match type_key {
        crate::artifact::METRIC => Draft::metric(read_json()?)?.with_original_name(&name),
        crate::artifact::CONFIG => Draft::config(read_json()?)?.with_original_name(&name),
        crate::artifact::DATA => {
            DataFormat::from_path(file)?;
            Draft::data_from_file(file)?
        }
        crate::artifact::FILE_REF => {
            // The sandbox is removed: the lake keeps the file.
            let kept = ctx.block_on(crate::lake::kept_files::keep(ctx.lake.root(), file, &name))?;
            Draft::kept_file(&kept.location, &kept.content_hash, kept.size, &name)
        }
        custom => Draft::from_json_object(ctx.lake.registry(), custom, &read_json()?)?,
    })
}
