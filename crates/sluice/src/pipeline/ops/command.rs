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
use std::path::Path;

use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::pipeline::config::{StepConfig, StepError};
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};
use crate::pipeline::process::{ToolLimits, run_tool, tail};
use crate::pipeline::retry::FailureKind;

use super::sandbox::{add_depends, hash_files, materialize, mkdir, output_draft, output_files};

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
        add_depends(step, &mut paths)?;
        hash_files(paths)
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
                let (stem, _) = materialize(ctx, artifact, &dir, &stems)?;
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
        let limits = ToolLimits { time: ctx.time_limit, memory: ctx.memory_limit };
        let run = run_tool(command, limits, TOOL_OUTPUT_TAIL)?;
        ctx.set_tool_output(tail(&run.output, TOOL_OUTPUT_TAIL));
        match run.status {
            None if run.out_of_memory => {
                ctx.set_failure(FailureKind::Oom);
                return Err(op(format!(
                    "`{program}` used more memory than the step's resources.memory_gb ({} GiB) and was killed (oom)",
                    ctx.memory_limit.unwrap_or_default() >> 30
                )));
            }
            None => {
                ctx.set_failure(FailureKind::Timeout);
                return Err(op(format!(
                    "`{program}` timed out after {:.1}s (the step's time limit)",
                    run.elapsed.as_secs_f64()
                )));
            }
            Some(status) if !status.success() => {
                if let Some(kind) = FailureKind::of_exit(status) {
                    ctx.set_failure(kind);
                }
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
