//! `command`: run any program on a unit's inputs.
//!
//! The protocol, in the unit's sandbox directory (the program's working
//! directory):
//!
//! ```text
//! <sandbox>/
//! ├── params.json            the step's params (also in $SLUICE_PARAMS)
//! ├── inputs/<role>/<name>   one read-only file per input artifact:
//! │                            metric/config → <stem>.json
//! │                            data          → <stem>.<csv|parquet|arrow>
//! │                            file_ref      → a copy of the referenced file
//! │                            custom types  → <stem>.json of its columns
//! └── outputs/<role>/        every regular file the program writes here
//!                            becomes an artifact of the role's declared type
//! ```
//!
//! The sandbox is outside the lake (`$SLUICE_WORK_DIR`, default the system
//! temporary folder) and removed after the unit. Inputs are copies marked
//! read-only, so a tool cannot change what the lake references; an output
//! that is a symbolic link is an error (it could pull in any file the tool
//! can read). The program runs in its own process group, at most the step's
//! time limit (`timeout` or `resources.time`); when its main process exits
//! (or the limit passes) the whole group is killed, so nothing it started in
//! the background outlives the unit.
//!
//! `<stem>` is the input's original file stem when it has one, else its id.
//! An output derives from the input whose stem it shares, else from every
//! input of the unit. The environment has `SLUICE_INPUTS`, `SLUICE_OUTPUTS`,
//! `SLUICE_PARAMS` (JSON text), `SLUICE_RUN_ID` and `SLUICE_STEP`. The tail
//! of stdout and stderr is kept in `executions.tool_output`; a non-zero exit
//! is a failed execution whose error names the status.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::artifact::{Artifact, ArtifactId, DataFormat, Draft, FieldValue};
use crate::error::{Error, Result};
use crate::pipeline::config::{StepConfig, StepError};
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};
use crate::pipeline::process::run_tool;

/// Bytes of stdout/stderr kept per execution.
pub const TOOL_OUTPUT_TAIL: usize = 4096;

/// The `command` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct CommandOp;

impl Operation for CommandOp {
    fn name(&self) -> &str {
        "command"
    }

    fn version(&self) -> String {
        "1".into()
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        match &s.step.command {
            Some(argv) if !argv.is_empty() && !argv[0].is_empty() => {}
            _ => {
                return Err(StepError::Shape(
                    "a `command` step needs `command = [\"program\", \"arg\", …]`".into(),
                ));
            }
        }
        if s.step.outputs.is_empty() {
            return Err(StepError::Shape(
                "a `command` step needs `outputs = { <role> = \"<type>\" }`".into(),
            ));
        }
        for role in s.step.outputs.keys().chain(s.input_types.keys()) {
            crate::staging::paths::validate_component("role", role).map_err(|_| {
                StepError::Shape(format!("role `{role}` is not a valid directory name"))
            })?;
        }
        Ok(s.step.outputs.clone())
    }

    /// The command's scripts (every argument that names an existing file,
    /// and the program itself when given as a path) and the files its
    /// `depends` globs match, by content.
    fn depends_on(&self, step: &StepConfig) -> Result<BTreeMap<String, String>> {
        let mut paths = std::collections::BTreeSet::new();
        for (i, arg) in step.command.iter().flatten().enumerate() {
            let path = Path::new(arg);
            if (i > 0 || arg.contains('/')) && path.is_file() {
                paths.insert(std::path::absolute(path).map_err(|e| Error::io(path, e))?);
            }
        }
        for pattern in &step.depends {
            let bad = |m: String| Error::operation("command", format!("depends `{pattern}`: {m}"));
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
        let mut out = BTreeMap::new();
        for path in paths {
            out.insert(path.display().to_string(), crate::artifact::hash_file(&path)?.0);
        }
        Ok(out)
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let op = |m: String| Error::operation("command", m);
        let argv = ctx.step.command.clone().unwrap_or_default();
        let (program, args) = argv.split_first().ok_or_else(|| op("empty command".into()))?;
        let sandbox = ctx.work_dir()?;
        let inputs_dir = sandbox.join("inputs");
        let outputs_dir = sandbox.join("outputs");
        let mut stems: BTreeMap<String, ArtifactId> = BTreeMap::new();
        for (role, artifacts) in &ctx.inputs {
            let dir = inputs_dir.join(role);
            mkdir(&dir)?;
            for artifact in artifacts {
                let stem = materialize(ctx, artifact, &dir, &stems)?;
                stems.insert(stem, artifact.id);
            }
        }
        for role in ctx.step.outputs.keys() {
            mkdir(&outputs_dir.join(role))?;
        }
        let params = serde_json::Value::Object(ctx.params().clone()).to_string();
        let params_file = sandbox.join("params.json");
        std::fs::write(&params_file, &params).map_err(|e| Error::io(&params_file, e))?;

        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .current_dir(sandbox)
            .env("SLUICE_INPUTS", &inputs_dir)
            .env("SLUICE_OUTPUTS", &outputs_dir)
            .env("SLUICE_PARAMS", &params)
            .env("SLUICE_RUN_ID", &ctx.run_id)
            .env("SLUICE_STEP", &ctx.step.name);
        let run = run_tool(command, ctx.time_limit, TOOL_OUTPUT_TAIL)?;
        ctx.set_tool_output(tail(&run.output, TOOL_OUTPUT_TAIL));
        match run.status {
            None => {
                return Err(op(format!(
                    "`{program}` timed out after {:.1}s (the step's time limit)",
                    run.elapsed.as_secs_f64()
                )));
            }
            Some(status) if !status.success() => {
                return Err(op(format!(
                    "`{program}` exited with {}",
                    crate::pipeline::describe_exit(status)
                )));
            }
            Some(_) => {}
        }

        let mut outputs = Vec::new();
        for (role, type_key) in &ctx.step.outputs {
            let dir = outputs_dir.join(role);
            let files = output_files(&dir, sandbox)?;
            for file in files {
                let draft = output_draft(ctx, type_key, &file).map_err(|e| {
                    op(format!(
                        "output {}: {e}",
                        file.strip_prefix(sandbox).unwrap_or(&file).display()
                    ))
                })?;
                let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
                let derived_from = stems.get(stem).map(|id| vec![*id]);
                outputs.push(Output::New { role: role.clone(), draft, derived_from });
            }
        }
        Ok(outputs)
    }
}

/// The regular files a tool wrote into an output directory, sorted. A
/// symbolic link is an error: following it could pull any readable file
/// into the lake.
fn output_files(dir: &Path, sandbox: &Path) -> Result<Vec<PathBuf>> {
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

fn mkdir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// Write one input into `dir`; returns the stem it was given.
fn materialize(
    ctx: &UnitContext,
    artifact: &Artifact,
    dir: &Path,
    taken: &BTreeMap<String, ArtifactId>,
) -> Result<String> {
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
    let write = |name: String, bytes: &[u8]| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
        read_only(&path)
    };
    match (artifact.type_key.as_str(), artifact.field("content")) {
        (crate::artifact::METRIC | crate::artifact::CONFIG, FieldValue::String(json)) => {
            write(format!("{stem}.json"), json.as_bytes())?;
        }
        (crate::artifact::DATA, FieldValue::Binary(bytes)) => {
            let format = DataFormat::from_name(artifact.field("format").as_str().unwrap_or("csv"))?;
            write(format!("{stem}.{}", format.name()), bytes)?;
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
        }
        _ => {
            let object: serde_json::Map<String, serde_json::Value> =
                artifact.fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
            write(
                format!("{stem}.json"),
                serde_json::Value::Object(object).to_string().as_bytes(),
            )?;
        }
    }
    Ok(stem)
}

/// Mark an input file read-only: the tool reads it, never changes it.
fn read_only(path: &Path) -> Result<()> {
    let mut permissions = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(path, permissions).map_err(|e| Error::io(path, e))
}

/// An output file as a draft of `type_key`.
fn output_draft(ctx: &UnitContext, type_key: &str, file: &Path) -> Result<Draft> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_at_a_char_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 3), "…def");
        let t = tail("ééé", 3);
        assert!(t.ends_with('é'), "{t}");
    }
}
