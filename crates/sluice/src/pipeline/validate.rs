//! Checks a pipeline before anything runs.
//!
//! Every error names the file and the line of the offending step: unknown
//! operation, step, role or artifact type; a reference to a later step or a
//! cycle; an input whose type the operation does not take; bad batching.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::config::{InputRef, PipelineConfig, StepConfig, UnitsPerTask};
use super::operation::{Operation, Signature};
use super::ops::Operations;
use crate::error::Result;
use crate::registry::TypeRegistry;

/// A pipeline that passed validation, with what each step resolved to.
#[derive(Clone)]
pub struct Pipeline {
    /// The parsed file.
    pub config: PipelineConfig,
    /// Each step's operation.
    pub operations: Vec<Arc<dyn Operation>>,
    /// Each step's inputs (explicit and implicit), by role.
    pub inputs: Vec<BTreeMap<String, InputRef>>,
    /// Each step's outputs: role → artifact type.
    pub outputs: Vec<BTreeMap<String, String>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("name", &self.config.name)
            .field("outputs", &self.outputs)
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `from` reaches `target` through input references.
fn reaches(config: &PipelineConfig, from: usize, target: usize, path: &mut Vec<usize>) -> bool {
    if path.contains(&from) {
        return false;
    }
    path.push(from);
    let refs = config.steps[from].input_refs().unwrap_or_default();
    for r in refs.values() {
        if let Some(j) = config.step_index(&r.step)
            && (j == target || reaches(config, j, target, path))
        {
            return true;
        }
    }
    path.pop();
    false
}

/// What is checked of the file as a whole: its name, that it has steps,
/// its hooks.
fn check_file(config: &PipelineConfig) -> Result<()> {
    if !valid_name(&config.name) {
        return Err(config.file_error(format!(
            "pipeline name `{}` must be 1-100 characters of letters, digits, `_` or `-`",
            config.name
        )));
    }
    if config.steps.is_empty() {
        return Err(config.file_error("the pipeline has no steps (add a [[step]] table)"));
    }
    match config.hooks.problem() {
        Some(problem) => Err(config.file_error(problem)),
        None => Ok(()),
    }
}

impl Pipeline {
    /// Validate a parsed pipeline against the operations and types known here.
    pub fn validate(
        config: PipelineConfig,
        operations: &Operations,
        types: &TypeRegistry,
    ) -> Result<Pipeline> {
        check_file(&config)?;
        let mut seen = BTreeSet::new();
        let mut ops = Vec::new();
        let mut all_inputs = Vec::new();
        let mut all_outputs: Vec<BTreeMap<String, String>> = Vec::new();
        for (i, step) in config.steps.iter().enumerate() {
            let err = |m: String| config.step_error(i, m);
            if !valid_name(&step.name) {
                return Err(err(
                    "a step name must be 1-100 characters of letters, digits, `_` or `-`".into(),
                ));
            }
            if !seen.insert(step.name.clone()) {
                return Err(err("another step has the same name".into()));
            }
            let op = operations.get(&step.operation).map_err(|e| err(e.to_string()))?;
            config.retry_of(i).map_err(err)?;
            if let Some(problem) = concurrency_problem(&config, step) {
                return Err(err(problem));
            }
            if let Some(known) = op.known_params()
                && let Some(unknown) = step.params.keys().find(|k| !known.contains(&k.as_str()))
            {
                let near = crate::error::words::nearest(unknown, known.iter().copied());
                let takes = match known {
                    [] => "it takes none".to_owned(),
                    _ => format!("it takes {}", known.join(", ")),
                };
                return Err(err(format!(
                    "params.{unknown} is not a parameter of `{}`{}; {takes}",
                    step.operation,
                    crate::error::words::did_you_mean(&near)
                )));
            }
            if let Some(wrong) = zero_size(step) {
                return Err(err(wrong.into()));
            }
            step.time_limit().map_err(|e| err(e.to_string()))?;
            let mut refs = step.input_refs().map_err(|e| err(e.to_string()))?;
            for (role, text) in op.implicit_inputs(step) {
                let r = InputRef::parse(&text).map_err(|m| err(format!("params.{role}: {m}")))?;
                if refs.insert(role.clone(), r).is_some() {
                    return Err(err(format!("input `{role}` is given twice (inputs and params)")));
                }
            }
            let mut input_types = BTreeMap::new();
            for (role, r) in &refs {
                if !valid_name(role) {
                    return Err(err(format!(
                        "input role `{role}` must be letters, digits, `_` or `-`"
                    )));
                }
                let Some(j) = config.step_index(&r.step) else {
                    let names: Vec<&str> = config.steps.iter().map(|s| s.name.as_str()).collect();
                    return Err(err(format!(
                        "input `{role}` refers to unknown step `{}` (steps: {})",
                        r.step,
                        names.join(", ")
                    )));
                };
                if j >= i {
                    if j == i || reaches(&config, j, i, &mut Vec::new()) {
                        return Err(err(format!(
                            "input `{role}` = \"{r}\" makes a cycle: `{}` depends on `{}`, which depends on it",
                            step.name, r.step
                        )));
                    }
                    return Err(err(format!(
                        "input `{role}` refers to step `{}`, which comes later; steps run in file order, so move `{}` before `{}`",
                        r.step, r.step, step.name
                    )));
                }
                let Some(t) = all_outputs[j].get(&r.role) else {
                    let have: Vec<&str> = all_outputs[j].keys().map(String::as_str).collect();
                    return Err(err(format!(
                        "input `{role}`: step `{}` has no output `{}` (its outputs: {})",
                        r.step,
                        r.role,
                        have.join(", ")
                    )));
                };
                input_types.insert(role.clone(), t.clone());
            }
            let outputs = op
                .outputs(&Signature { step, input_types: &input_types })
                .map_err(|e| err(format!("{e} ({})", step.operation)))?;
            for (role, t) in &outputs {
                if !valid_name(role) {
                    return Err(err(format!(
                        "output role `{role}` must be letters, digits, `_` or `-`"
                    )));
                }
                if types.get(t).is_err() {
                    return Err(err(format!(
                        "output `{role}` has unknown artifact type `{t}` (known: {})",
                        types.descriptors().map(|d| d.key.as_str()).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            if input_types.is_empty()
                && op.source_units(step).map_err(|e| err(e.to_string()))?.is_none()
            {
                return Err(err(format!("operation `{}` needs inputs", step.operation)));
            }
            ops.push(op);
            all_inputs.push(refs);
            all_outputs.push(outputs);
        }
        check_checks(&config, &all_outputs)?;
        Ok(Pipeline { config, operations: ops, inputs: all_inputs, outputs: all_outputs })
    }

    /// The checks of step `index`.
    pub fn checks_of(&self, index: usize) -> Vec<&super::checks::CheckConfig> {
        let name = self.config.steps.get(index).map(|s| s.name.as_str());
        self.config.checks.iter().filter(|c| Some(c.step.as_str()) == name).collect()
    }

    /// Load, parse and validate a pipeline file.
    pub fn load(
        path: &std::path::Path,
        operations: &Operations,
        types: &TypeRegistry,
    ) -> Result<Pipeline> {
        Self::validate(PipelineConfig::load(path)?, operations, types)
    }
}

/// What is wrong with a step's `concurrency_key`, if anything.
fn concurrency_problem(config: &PipelineConfig, step: &StepConfig) -> Option<String> {
    let key = step.concurrency_key.as_ref()?;
    match config.concurrency.get(key) {
        Some(0) => Some(format!("[concurrency] {key} must be at least 1")),
        Some(_) => None,
        None => Some(format!(
            "concurrency_key = \"{key}\" is not in the pipeline's [concurrency] table (add `[concurrency]\n{key} = 4`)"
        )),
    }
}

/// The `[[check]]`s: unique names, a step and role that exist, SQL.
fn check_checks(config: &PipelineConfig, outputs: &[BTreeMap<String, String>]) -> Result<()> {
    let mut names = BTreeSet::new();
    for check in &config.checks {
        if !valid_name(&check.name) || !names.insert(check.name.as_str()) {
            return Err(config.file_error(format!(
                "check `{}`: a check needs a unique name of letters, digits, `_` or `-`",
                check.name
            )));
        }
        let roles =
            config.step_index(&check.step).map(|i| outputs[i].keys().map(String::as_str).collect());
        if let Some(problem) = super::checks::problem(check, roles) {
            return Err(config.file_error(problem));
        }
    }
    Ok(())
}

/// What a step sets to zero that must be at least 1.
fn zero_size(step: &StepConfig) -> Option<&'static str> {
    if step.batch.artifacts_per_unit == 0 || step.batch.units_per_worker == UnitsPerTask::Fixed(0) {
        return Some("batch sizes must be at least 1");
    }
    (step.resources.throttle == Some(0) || step.resources.max_array == Some(0))
        .then_some("resources.throttle and resources.max_array must be at least 1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn check(text: &str) -> std::result::Result<Pipeline, String> {
        let config = PipelineConfig::parse(text, Path::new("p.toml")).map_err(|e| e.to_string())?;
        Pipeline::validate(config, &Operations::linked().unwrap(), &TypeRegistry::builtin())
            .map_err(|e| e.to_string())
    }

    const HEAD: &str = "name = \"t\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n";

    #[test]
    fn a_valid_pipeline_resolves_types() {
        let p = check(&format!(
            "{HEAD}[[step]]\nname = \"m\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"gen.data\" }}\n\
             [[step]]\nname = \"keep\"\noperation = \"filter\"\ninputs = {{ candidates = \"gen.data\" }}\n\
             params = {{ metric = \"m.metrics\", where = \"mean > 0.5\" }}\n"
        ))
        .unwrap();
        assert_eq!(p.outputs[1]["metrics"], "metric");
        assert_eq!(p.outputs[2]["kept"], "data");
        assert_eq!(p.inputs[2]["metric"].step, "m");
    }

    #[test]
    fn errors_name_file_line_and_cause() {
        let cases = [
            (
                format!("{HEAD}[[step]]\nname = \"x\"\noperation = \"nope\"\n"),
                "p.toml:5: step `x`: operation `nope`: unknown operation",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"x\"\noperation = \"merge\"\ninputs = {{ a = \"zz.data\" }}\n"
                ),
                "refers to unknown step `zz`",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"x\"\noperation = \"merge\"\ninputs = {{ a = \"gen.files\" }}\n"
                ),
                "step `gen` has no output `files`",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"x\"\noperation = \"merge\"\ninputs = {{ a = \"y.merged\" }}\n[[step]]\nname = \"y\"\noperation = \"merge\"\ninputs = {{ a = \"gen.data\" }}\n"
                ),
                "which comes later",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"x\"\noperation = \"merge\"\ninputs = {{ a = \"y.merged\" }}\n[[step]]\nname = \"y\"\noperation = \"merge\"\ninputs = {{ a = \"x.merged\" }}\n"
                ),
                "makes a cycle",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"x\"\noperation = \"merge\"\ninputs = {{ a = \"x.merged\" }}\n"
                ),
                "makes a cycle",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"m\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"gen.data\" }}\n[[step]]\nname = \"x\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"m.metrics\" }}\n"
                ),
                "holds `metric` artifacts, but this operation takes `data`",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"c\"\noperation = \"command\"\ncommand = [\"true\"]\noutputs = {{ o = \"widget\" }}\ninputs = {{ t = \"gen.data\" }}\n"
                ),
                "unknown artifact type `widget`",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"c\"\noperation = \"command\"\noutputs = {{ o = \"metric\" }}\ninputs = {{ t = \"gen.data\" }}\n"
                ),
                "needs `command = ",
            ),
            (
                format!("{HEAD}[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n"),
                "same name",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"k\"\noperation = \"filter\"\ninputs = {{ candidates = \"gen.data\" }}\nparams = {{ metric = \"gen.data\", where = \"x > 1\" }}\n"
                ),
                "filter needs `metric` ones",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"m\"\noperation = \"compute_metrics\"\ninputs = {{ t = \"gen.data\" }}\n[[step]]\nname = \"k\"\noperation = \"filter\"\ninputs = {{ candidates = \"gen.data\" }}\nparams = {{ metric = \"m.metrics\", where = \"mean >\" }}\n"
                ),
                "is not a SQL expression",
            ),
            (
                format!(
                    "{HEAD}[[step]]\nname = \"m\"\noperation = \"merge\"\ninputs = {{ a = \"gen.data\" }}\nparams = {{ mode = \"x\" }}\n"
                ),
                "params.mode is not a parameter of `merge`; it takes none",
            ),
            (
                format!("{HEAD}params = {{ sed = 3 }}\n"),
                "params.sed is not a parameter of `generate_data` (did you mean `seed`?); it takes tables, rows, seed",
            ),
            (format!("{HEAD}batch = {{ artifacts_per_unit = 0 }}\n"), "at least 1"),
            ("name = \"t\"\n".to_owned(), "no steps"),
        ];
        for (text, expected) in cases {
            let err = check(&text).unwrap_err();
            assert!(err.contains(expected), "expected `{expected}` in: {err}\n--- for:\n{text}");
            assert!(err.starts_with("p.toml"), "{err}");
        }
    }
}
