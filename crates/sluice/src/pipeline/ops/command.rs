//! `command`: run any program on a unit's inputs.
//!
//! The protocol, in the unit's sandbox directory (the program's working
//! directory):
//!
//! ```text
//! <sandbox>/
//! ├── params.json            the step's params (also in $SLUICE_PARAMS)
//! ├── inputs/<role>/<name>   one file per input artifact:
//! │                            metric/config → <stem>.json
//! │                            data          → <stem>.<csv|parquet|arrow>
//! │                            file_ref      → symlink to the referenced file
//! │                            custom types  → <stem>.json of its columns
//! └── outputs/<role>/        every file the program writes here becomes an
//!                            artifact of the role's declared type
//! ```
//!
//! `<stem>` is the input's original file stem when it has one, else its id.
//! An output derives from the input whose stem it shares, else from every
//! input of the unit. The environment has `SLUICE_INPUTS`, `SLUICE_OUTPUTS`,
//! `SLUICE_PARAMS` (JSON text), `SLUICE_RUN_ID` and `SLUICE_STEP`. The tail
//! of stdout and stderr is kept in `executions.tool_output`; a non-zero exit
//! is a failed execution whose error names the status.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::artifact::{Artifact, ArtifactId, DataFormat, Draft, FieldValue};
use crate::error::{Error, Result};
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};

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

    fn outputs(&self, s: &Signature<'_>) -> std::result::Result<BTreeMap<String, String>, String> {
        match &s.step.command {
            Some(argv) if !argv.is_empty() && !argv[0].is_empty() => {}
            _ => return Err("a `command` step needs `command = [\"program\", \"arg\", …]`".into()),
        }
        if s.step.outputs.is_empty() {
            return Err("a `command` step needs `outputs = { <role> = \"<type>\" }`".into());
        }
        for role in s.step.outputs.keys().chain(s.input_types.keys()) {
            crate::staging::paths::validate_operation(role)
                .map_err(|_| format!("role `{role}` is not a valid directory name"))?;
        }
        Ok(s.step.outputs.clone())
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let op = |m: String| Error::operation("command", m);
        let argv = ctx.step.command.clone().unwrap_or_default();
        let (program, args) = argv.split_first().ok_or_else(|| op("empty command".into()))?;
        let sandbox = ctx.work_dir();
        let inputs_dir = sandbox.join("inputs");
        let outputs_dir = sandbox.join("outputs");
        let mut stems: BTreeMap<String, ArtifactId> = BTreeMap::new();
        for (role, artifacts) in &ctx.inputs {
            let dir = inputs_dir.join(role);
            mkdir(&dir)?;
            for artifact in artifacts {
                let stem = materialize(artifact, &dir, &stems)?;
                stems.insert(stem, artifact.id);
            }
        }
        for role in ctx.step.outputs.keys() {
            mkdir(&outputs_dir.join(role))?;
        }
        let params = serde_json::Value::Object(ctx.params().clone()).to_string();
        let params_file = sandbox.join("params.json");
        std::fs::write(&params_file, &params).map_err(|e| Error::io(&params_file, e))?;

        let output = std::process::Command::new(program)
            .args(args)
            .current_dir(sandbox)
            .env("SLUICE_INPUTS", &inputs_dir)
            .env("SLUICE_OUTPUTS", &outputs_dir)
            .env("SLUICE_PARAMS", &params)
            .env("SLUICE_RUN_ID", &ctx.run_id)
            .env("SLUICE_STEP", &ctx.step.name)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| op(format!("cannot start `{program}`: {e}")))?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !stderr.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&stderr);
        }
        ctx.set_tool_output(tail(&text, TOOL_OUTPUT_TAIL));
        if !output.status.success() {
            return Err(op(format!(
                "`{program}` exited with {}",
                crate::pipeline::describe_exit(output.status)
            )));
        }

        let mut outputs = Vec::new();
        for (role, type_key) in &ctx.step.outputs {
            let dir = outputs_dir.join(role);
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| Error::io(&dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            files.sort();
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
    artifact: &Artifact,
    dir: &Path,
    taken: &BTreeMap<String, ArtifactId>,
) -> Result<String> {
    let original = artifact
        .field("original_name")
        .as_str()
        .map(|n| Path::new(n).file_stem().and_then(|s| s.to_str()).unwrap_or(n).to_owned());
    let mut stem = original
        .filter(|s| crate::staging::paths::validate_operation(s).is_ok())
        .unwrap_or_else(|| artifact.id.to_hex());
    if taken.contains_key(&stem) {
        stem = format!("{stem}-{}", &artifact.id.to_hex()[..8]);
    }
    let write = |name: String, bytes: &[u8]| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))
    };
    match (artifact.type_key.as_str(), artifact.field("content")) {
        (crate::artifact::METRIC | crate::artifact::CONFIG, FieldValue::String(json)) => {
            write(format!("{stem}.json"), json.as_bytes())?;
        }
        (crate::artifact::DATA, FieldValue::Binary(bytes)) => {
            let format = artifact.field("format").as_str().unwrap_or("csv");
            write(format!("{stem}.{format}"), bytes)?;
        }
        (crate::artifact::FILE_REF, _) => {
            let target = artifact.field("path").as_str().unwrap_or_default();
            let ext =
                artifact.field("extension").as_str().map(|e| format!(".{e}")).unwrap_or_default();
            let link = dir.join(format!("{stem}{ext}"));
            std::os::unix::fs::symlink(target, &link).map_err(|e| Error::io(&link, e))?;
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

/// An output file as a draft of `type_key`.
fn output_draft(ctx: &UnitContext, type_key: &str, file: &Path) -> Result<Draft> {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let read_json = || -> Result<serde_json::Value> {
        let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?;
        serde_json::from_str(&text).map_err(|e| Error::Json {
            context: file.display().to_string(),
            message: e.to_string(),
        })
    };
    Ok(match type_key {
        crate::artifact::METRIC => Draft::metric(read_json()?)?.with_original_name(&name),
        crate::artifact::CONFIG => Draft::config(read_json()?)?.with_original_name(&name),
        crate::artifact::DATA => {
            DataFormat::from_path(file)?;
            Draft::data_from_file(file)?
        }
        crate::artifact::FILE_REF => {
            // The sandbox is removed: keep the file under the lake.
            let dir = ctx.lake.root().join("files").join(&ctx.run_id);
            mkdir(&dir)?;
            let kept = dir.join(&name);
            std::fs::rename(file, &kept)
                .or_else(|_| std::fs::copy(file, &kept).map(drop))
                .map_err(|e| Error::io(&kept, e))?;
            Draft::file_ref(&kept)?
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
