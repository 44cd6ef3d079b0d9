//! `python`: run a Python function on each unit.
//!
//! ```toml
//! [[step]]
//! name = "features"
//! operation = "python"
//! function = "mypkg.features:compute"     # or "steps/features.py:compute"
//! inputs = { table = "generate.data" }
//! outputs = { metrics = "metric" }        # or declared by @sluice.op
//! params = { scale = 2 }
//! ```
//!
//! The function is called with its inputs by role and its params as
//! keyword arguments: data arrives as a `polars.DataFrame`, metric, config
//! and declared types as a `dict`, a file_ref as a `pathlib.Path`; a role
//! arrives as one value, or as a list when the step batches several input
//! sets per unit (`artifacts_per_unit > 1`). It returns a dict of output
//! role → one value or a list of them (a DataFrame or pyarrow/pandas table
//! for data, a dict for metric, config and declared types, a path for a
//! file_ref).
//!
//! Before anything runs, validation imports the function in the step's
//! interpreter ([`interpreter::describe`]) and checks that it exists, that
//! its signature takes the step's roles and params, and that the roles its
//! `@sluice.op` declares are the step's. The cache key covers what the
//! function's behaviour depends on: the source of the module that defines
//! it (and the step's `depends` files), its name and the interpreter's
//! `major.minor`; editing the module reruns the step's units.
//!
//! Data, metric and config inputs travel in the unit's request (data as an
//! Arrow IPC stream: [`inline`]); others are written to the unit's sandbox
//! as for `command` (see [`super::sandbox`]). The worker's long-lived
//! interpreter reads them,
//! calls the function and writes its outputs there. A function that raises
//! fails its unit with the exception and its traceback in the execution's
//! error (`sluice status`, `sluice logs`).

mod inline;
mod interpreter;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::artifact::{ArtifactId, Draft};
use crate::error::{Error, Result};
use crate::pipeline::config::{StepConfig, StepError};
use crate::pipeline::operation::{Operation, Output, Signature, UnitContext};

use super::command::TOOL_OUTPUT_TAIL;
use super::sandbox::{add_depends, hash_files, materialize, mkdir, output_draft};
use crate::pipeline::process::tail;
use crate::pipeline::retry::FailureKind;
use interpreter::{Described, Lost};

/// The `python` operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct PythonOp;

/// The step's function, or why it has none.
fn function_of(step: &StepConfig) -> std::result::Result<&str, StepError> {
    step.function.as_deref().filter(|f| !f.trim().is_empty()).ok_or_else(|| {
        StepError::Shape(
            "a `python` step needs `function = \"module:function\"` (or \"file.py:function\")"
                .into(),
        )
    })
}

/// The step's function described by its interpreter.
fn described(step: &StepConfig) -> std::result::Result<Described, StepError> {
    let function = function_of(step)?;
    let interpreter = interpreter::interpreter_for(step.python.as_deref());
    interpreter::describe(&interpreter, function)
        .map_err(|why| StepError::Shape(format!("function `{function}`: {why}")))
}

/// The file of a `python` step's module and the interpreter's version
/// (what an execution's provenance records); `None` when it cannot say.
pub(crate) fn source_of(step: &StepConfig) -> Option<(Option<std::path::PathBuf>, String)> {
    described(step).ok().map(|d| (d.origin, d.python))
}

/// The step's roles and params fit the function's parameters.
fn check_signature(
    function: &str,
    described: &Described,
    given: &BTreeSet<&str>,
) -> std::result::Result<(), StepError> {
    let Some(parameters) = &described.parameters else { return Ok(()) };
    if let Some(only_positional) =
        parameters.iter().find(|p| p.kind == "POSITIONAL_ONLY" && !p.default)
    {
        return Err(StepError::Shape(format!(
            "function `{function}`: parameter `{}` is positional-only; inputs and params are passed by name",
            only_positional.name
        )));
    }
    let takes_any = parameters.iter().any(|p| p.kind == "VAR_KEYWORD");
    let by_name: Vec<&str> = parameters
        .iter()
        .filter(|p| p.kind == "POSITIONAL_OR_KEYWORD" || p.kind == "KEYWORD_ONLY")
        .map(|p| p.name.as_str())
        .collect();
    let shown = || format!("({})", by_name.join(", "));
    if let Some(extra) = given.iter().find(|g| !takes_any && !by_name.contains(g)) {
        return Err(StepError::Shape(format!(
            "function `{function}` takes {} but the step gives it `{extra}` (its input roles and params are passed by name)",
            shown()
        )));
    }
    let missing: Vec<&str> = parameters
        .iter()
        .filter(|p| !p.default && (p.kind == "POSITIONAL_OR_KEYWORD" || p.kind == "KEYWORD_ONLY"))
        .map(|p| p.name.as_str())
        .filter(|name| !given.contains(name))
        .collect();
    if !missing.is_empty() {
        return Err(StepError::Shape(format!(
            "function `{function}` needs {} that the step does not give (no input role or param of that name)",
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

impl Operation for PythonOp {
    fn name(&self) -> &str {
        "python"
    }

    fn outputs(
        &self,
        s: &Signature<'_>,
    ) -> std::result::Result<BTreeMap<String, String>, StepError> {
        let function = function_of(s.step)?;
        if s.step.command.is_some() {
            return Err(StepError::Shape("a `python` step runs `function`, not `command`".into()));
        }
        let described = described(s.step)?;
        let given: BTreeSet<&str> =
            s.input_types.keys().chain(s.step.params.keys()).map(String::as_str).collect();
        check_signature(function, &described, &given)?;
        let outputs = match (&described.outputs, s.step.outputs.is_empty()) {
            (None, true) => {
                return Err(StepError::Shape(format!(
                    "a `python` step declares its outputs: `outputs = {{ <role> = \"<type>\" }}`, or `@sluice.op(outputs=…)` on `{function}`"
                )));
            }
            (Some(declared), false) if *declared != s.step.outputs => {
                return Err(StepError::Shape(format!(
                    "the step's outputs {:?} differ from what `@sluice.op` declares on `{function}`: {declared:?}",
                    s.step.outputs
                )));
            }
            (Some(declared), _) => declared.clone(),
            (None, false) => s.step.outputs.clone(),
        };
        for role in outputs.keys().chain(s.input_types.keys()) {
            crate::staging::paths::validate_component("role", role).map_err(|_| {
                StepError::Shape(format!("role `{role}` is not a valid directory name"))
            })?;
        }
        Ok(outputs)
    }

    /// The source of the module that defines the function, and the files
    /// the step's `depends` globs match.
    fn depends_on(&self, step: &StepConfig) -> Result<BTreeMap<String, String>> {
        let described = described(step).map_err(|e| Error::operation("python", e.to_string()))?;
        let mut paths = BTreeSet::new();
        if let Some(origin) = described.origin {
            paths.insert(origin);
        }
        add_depends(step, &mut paths)?;
        hash_files(paths)
    }

    /// The function's name and the interpreter's `major.minor`.
    fn identity(&self, step: &StepConfig) -> Result<Option<serde_json::Value>> {
        let described = described(step).map_err(|e| Error::operation("python", e.to_string()))?;
        Ok(Some(json!({ "function": step.function, "python": described.python })))
    }

    fn run(&self, ctx: &UnitContext) -> Result<Vec<Output>> {
        let step = &ctx.step;
        let function = function_of(step).map_err(|e| Error::operation("python", e.to_string()))?;
        let failed = |why: String| {
            Error::operation("python", format!("step `{}`: `{function}` {why}", step.name))
        };
        let sandbox = ctx.work_dir()?;
        let mut inputs: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
        let mut stems: BTreeMap<String, ArtifactId> = BTreeMap::new();
        for (role, artifacts) in &ctx.inputs {
            let dir = sandbox.join("inputs").join(role);
            for artifact in artifacts {
                if let Some(entry) = inline::inline(artifact) {
                    inputs.entry(role).or_default().push(entry);
                    continue;
                }
                mkdir(&dir)?;
                let (stem, path) = materialize(ctx, artifact, &dir, &stems)?;
                stems.insert(stem, artifact.id);
                inputs.entry(role).or_default().push(json!({
                    "type": artifact.type_key,
                    "path": path,
                    "format": artifact.field("format").as_str(),
                }));
            }
        }
        let request = json!({
            "function": function,
            "inputs": inputs,
            "lists": step.batch.artifacts_per_unit > 1,
            "params": step.params,
            "outputs": step.outputs,
            "out_dir": sandbox.join("outputs"),
        });
        let interpreter = interpreter::interpreter_for(step.python.as_deref());
        let reply =
            interpreter::call(&interpreter, &request, ctx.time_limit).map_err(
                |lost| match lost {
                    Lost::TimedOut(_) => {
                        ctx.set_failure(FailureKind::Timeout);
                        failed(lost.to_string())
                    }
                    Lost::Start(why) => {
                        Error::operation("python", format!("step `{}`: {why}", step.name))
                    }
                    other => failed(other.to_string()),
                },
            )?;
        let mut log = reply.log;
        if let Some(traceback) = &reply.traceback {
            log.push_str(traceback);
        }
        if !log.is_empty() {
            ctx.set_tool_output(tail(&log, TOOL_OUTPUT_TAIL));
        }
        if !reply.ok {
            let error = reply.error.unwrap_or_else(|| "failed".into());
            let traceback =
                reply.traceback.map(|t| format!("\n{}", t.trim_end())).unwrap_or_default();
            return Err(failed(format!("{error}{traceback}")));
        }
        let mut outputs = Vec::new();
        for written in reply.outputs {
            let declared = step.outputs.get(&written.role).unwrap_or(&written.type_key);
            if *declared != written.type_key {
                return Err(failed(format!(
                    "returned output `{}` as {}, but the step declares {declared}",
                    written.role, written.type_key
                )));
            }
            let draft = match (written.value, &written.path) {
                (Some(value), _) => json_draft(ctx, declared, value),
                (None, Some(path)) => output_draft(ctx, declared, path),
                (None, None) => Err(Error::Internal("a reply's output has no value".into())),
            }
            .map_err(|e| {
                failed(format!(
                    "returned output `{}` that is not a valid {declared}: {e}",
                    written.role
                ))
            })?;
            outputs.push(Output::New { role: written.role, draft, derived_from: None });
        }
        Ok(outputs)
    }
}

/// A dict returned for a metric, a config or a declared type.
fn json_draft(ctx: &UnitContext, type_key: &str, value: serde_json::Value) -> Result<Draft> {
    match type_key {
        crate::artifact::METRIC => Draft::metric(value),
        crate::artifact::CONFIG => Draft::config(value),
        other => Draft::from_json_object(ctx.lake.registry(), other, &value),
    }
}

#[cfg(test)]
mod tests {
    use super::interpreter::Parameter;
    use super::*;

    fn function(parameters: &[(&str, &str, bool)]) -> Described {
        Described {
            origin: None,
            python: "3.11".into(),
            parameters: Some(
                parameters
                    .iter()
                    .map(|(name, kind, default)| Parameter {
                        name: (*name).into(),
                        kind: (*kind).into(),
                        default: *default,
                    })
                    .collect(),
            ),
            outputs: None,
        }
    }

    fn given<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
        names.iter().copied().collect()
    }

    #[test]
    fn a_signature_takes_the_steps_roles_and_params_by_name() {
        let f =
            function(&[("table", "POSITIONAL_OR_KEYWORD", false), ("scale", "KEYWORD_ONLY", true)]);
        assert!(check_signature("m:f", &f, &given(&["table"])).is_ok());
        assert!(check_signature("m:f", &f, &given(&["table", "scale"])).is_ok());
        let extra = check_signature("m:f", &f, &given(&["table", "seed"])).unwrap_err();
        assert!(
            extra.to_string().contains("takes (table, scale) but the step gives it `seed`"),
            "{extra}"
        );
        let missing = check_signature("m:f", &f, &given(&["scale"])).unwrap_err();
        assert!(missing.to_string().contains("needs `table`"), "{missing}");
        let any =
            function(&[("table", "POSITIONAL_OR_KEYWORD", false), ("rest", "VAR_KEYWORD", false)]);
        assert!(check_signature("m:f", &any, &given(&["table", "seed"])).is_ok());
        let positional = function(&[("table", "POSITIONAL_ONLY", false)]);
        let e = check_signature("m:f", &positional, &given(&["table"])).unwrap_err();
        assert!(e.to_string().contains("positional-only"), "{e}");
    }
}
