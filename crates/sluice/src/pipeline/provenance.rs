//! What produced an execution: enough for a reviewer to rerun it.
//!
//! Each execution's metadata gets a `provenance` object, made once per
//! step per worker process (hashing a program per unit would cost more than
//! the unit):
//!
//! - `sluice`: the build that ran it (the host program names itself with
//!   [`set_build`]: version and git revision);
//! - `host`: the machine, and `container`: the Apptainer/Singularity image
//!   (or `docker`/`podman` when the process runs in one) when there is one;
//! - for a `command` step, `program`: the resolved path of its first word
//!   and the BLAKE3 of that file;
//! - for a `python` step, `function`, `python` (the interpreter's version)
//!   and `source`: the file of its module and that file's BLAKE3.
//!
//! The pipeline file's BLAKE3 and the orchestrator's build go in the
//! step's row of the steps table ([`pipeline_file`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use super::config::StepConfig;

fn build_slot() -> &'static Mutex<Option<String>> {
    static BUILD: OnceLock<Mutex<Option<String>>> = OnceLock::new();
    BUILD.get_or_init(|| Mutex::new(None))
}

/// Name the program that runs sluice (its version and git revision), as
/// executions record it. Without it: the library's version.
pub fn set_build(text: impl Into<String>) {
    if let Ok(mut slot) = build_slot().lock() {
        *slot = Some(text.into());
    }
}

/// The build executions record.
pub fn build() -> String {
    build_slot()
        .lock()
        .ok()
        .and_then(|slot| slot.clone())
        .unwrap_or_else(|| format!("sluice {}", env!("CARGO_PKG_VERSION")))
}

/// The container this process runs in, when it can tell: an Apptainer or
/// Singularity image (from the variables they set), else the runtime.
fn container() -> Option<Value> {
    for (runtime, image, name) in [
        ("apptainer", "APPTAINER_CONTAINER", "APPTAINER_NAME"),
        ("singularity", "SINGULARITY_CONTAINER", "SINGULARITY_NAME"),
    ] {
        if let Ok(path) = std::env::var(image) {
            return Some(json!({
                "runtime": runtime,
                "image": path,
                "name": std::env::var(name).ok(),
            }));
        }
    }
    if Path::new("/.dockerenv").exists() {
        return Some(json!({ "runtime": "docker" }));
    }
    if Path::new("/run/.containerenv").exists() {
        return Some(json!({ "runtime": "podman" }));
    }
    None
}

/// `program` as the OS would find it: itself when it names a path, else
/// the first match on `PATH`.
fn resolve(program: &str, base: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let path = base.join(program);
        return path.is_file().then_some(path);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| candidate.is_file())
}

/// The BLAKE3 of a file (hex), when it can be read.
fn checksum(path: &Path) -> Option<String> {
    crate::artifact::hash_file(path).ok().map(|(hash, _)| hash)
}

/// What this process records of one step's executions (computed once).
pub(crate) fn of_step(step: &StepConfig) -> Value {
    static SEEN: OnceLock<Mutex<HashMap<String, Value>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    let key = format!("{}\u{0}{:?}\u{0}{:?}", step.name, step.command, step.function);
    if let Some(found) = seen.lock().ok().and_then(|s| s.get(&key).cloned()) {
        return found;
    }
    let made = describe(step);
    if let Ok(mut s) = seen.lock() {
        s.insert(key, made.clone());
    }
    made
}

fn describe(step: &StepConfig) -> Value {
    let here = std::env::current_dir().unwrap_or_default();
    let mut out = json!({
        "sluice": build(),
        "host": crate::host::hostname(),
    });
    if let Some(container) = container() {
        out["container"] = container;
    }
    if let Some(program) = step.command.as_ref().and_then(|c| c.first()) {
        let path = resolve(program, &here);
        out["program"] = json!({
            "name": program,
            "path": path.as_ref().map(|p| p.display().to_string()),
            "blake3": path.as_deref().and_then(checksum),
        });
    }
    if let Some(function) = &step.function {
        out["function"] = function.as_str().into();
        if let Some((origin, python)) = super::ops::python_source_of(step) {
            out["python"] = python.into();
            if let Some(file) = origin {
                out["source"] = json!({
                    "path": file.display().to_string(),
                    "blake3": checksum(&file),
                });
            }
        }
    }
    out
}

/// What a step's row records of the run: the orchestrator's build and the
/// pipeline file (path and BLAKE3).
pub(crate) fn pipeline_file(path: &Path) -> Value {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    json!({
        "sluice": build(),
        "pipeline_file": path.display().to_string(),
        "pipeline_blake3": checksum(&path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_step_records_its_program_s_path_and_checksum() {
        let step: StepConfig = toml::from_str(
            "name = \"s\"\noperation = \"command\"\ncommand = [\"sh\", \"-c\", \"true\"]",
        )
        .unwrap();
        let made = of_step(&step);
        let path = made["program"]["path"].as_str().unwrap();
        assert!(path.ends_with("/sh"), "{made}");
        assert_eq!(made["program"]["blake3"].as_str().unwrap().len(), 64);
        assert_eq!(made["host"], crate::host::hostname());
        assert!(made["sluice"].as_str().unwrap().starts_with("sluice"));
        assert_eq!(of_step(&step), made, "once per step");
    }
}
