//! Pipeline files: a TOML document of ordered steps.
//!
//! ```toml
//! name = "example"
//! failure = "continue"                   # or "fail_fast" (per step too)
//! [[step]]
//! name = "generate"
//! operation = "generate_data"
//! params = { tables = 20, rows = 1000, seed = 7 }
//! [[step]]
//! name = "stats"
//! operation = "command"
//! command = ["sh", "-c", "..."]
//! inputs = { table = "generate.data" }   # role = "<step>.<output role>"
//! outputs = { stats = "metric" }         # role = artifact type
//! batch = { artifacts_per_unit = 5 }
//! ```
//!
//! Parsing keeps the line of every step so that validation errors point at
//! it (`pipeline.toml:12: step `keep`: …`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What happens to a step when some of its units fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Keep every good result; failed units are recorded and rerun next time.
    #[default]
    Continue,
    /// Stop dispatching at the first failure; the pipeline stops after the step.
    FailFast,
}

/// How the units of a step with several input roles are formed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pairing {
    /// The i-th artifact of every role together (roles must have equal length).
    #[default]
    Zip,
    /// Every combination of one artifact per role.
    Cross,
}

/// Where a step's units run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Worker processes on this machine.
    #[default]
    Local,
    /// SLURM job arrays.
    Slurm,
}

impl BackendKind {
    /// The stored name (`executions.compute_backend`).
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Local => "local",
            BackendKind::Slurm => "slurm",
        }
    }
}

/// How many input sets one unit takes, and (SLURM) how many units one array
/// task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Batch {
    /// Paired input sets per unit (default 1).
    pub artifacts_per_unit: usize,
    /// Units per SLURM array task (default 1).
    pub units_per_worker: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch { artifacts_per_unit: 1, units_per_worker: 1 }
    }
}

/// SLURM resources of a step's array tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Resources {
    /// `--cpus-per-task`.
    pub cpus: Option<u32>,
    /// `--mem`, in GB.
    pub memory_gb: Option<u32>,
    /// `--time` (SLURM syntax, e.g. "00:10:00").
    pub time: Option<String>,
    /// `--partition`.
    pub partition: Option<String>,
    /// `--gres`.
    pub gres: Option<String>,
    /// At most this many array tasks at once (`--array=…%N`).
    pub throttle: Option<u32>,
    /// More `sbatch` arguments, verbatim.
    pub extra: Vec<String>,
}

/// A reference to another step's output: `"<step>.<role>"`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InputRef {
    /// The producing step's name.
    pub step: String,
    /// Its output role.
    pub role: String,
}

impl InputRef {
    /// Parse `"<step>.<role>"`.
    pub fn parse(text: &str) -> std::result::Result<InputRef, String> {
        match text.split_once('.') {
            Some((step, role)) if !step.is_empty() && !role.is_empty() && !role.contains('.') => {
                Ok(InputRef { step: step.to_owned(), role: role.to_owned() })
            }
            _ => Err(format!("`{text}` is not a reference of the form \"<step>.<output role>\"")),
        }
    }
}

impl std::fmt::Display for InputRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.step, self.role)
    }
}

/// One step of a pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    /// Unique name, used in references.
    pub name: String,
    /// Operation name (built-in or linked).
    pub operation: String,
    /// Operation parameters.
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Program and arguments (`command` operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Input role → `"<step>.<output role>"`.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Output role → artifact type (`command` operation).
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Pairing of several input roles.
    #[serde(default)]
    pub pairing: Pairing,
    /// Batching.
    #[serde(default)]
    pub batch: Batch,
    /// Backend of this step (default: the pipeline's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendKind>,
    /// SLURM resources.
    #[serde(default)]
    pub resources: Resources,
    /// Failure policy of this step (default: the pipeline's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailurePolicy>,
}

impl StepConfig {
    /// Parsed input references, by role.
    pub fn input_refs(&self) -> std::result::Result<BTreeMap<String, InputRef>, String> {
        self.inputs
            .iter()
            .map(|(role, text)| {
                InputRef::parse(text)
                    .map(|r| (role.clone(), r))
                    .map_err(|e| format!("input `{role}`: {e}"))
            })
            .collect()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    name: String,
    #[serde(default)]
    failure: FailurePolicy,
    #[serde(default)]
    backend: BackendKind,
    #[serde(default, rename = "step")]
    steps: Vec<toml::Spanned<StepConfig>>,
}

/// A parsed (not yet validated) pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineConfig {
    /// Pipeline name.
    pub name: String,
    /// Default failure policy.
    pub failure: FailurePolicy,
    /// Default backend.
    pub backend: BackendKind,
    /// Steps in order; step `i` has number `i + 1`.
    pub steps: Vec<StepConfig>,
    /// The file it came from (for messages).
    pub path: PathBuf,
    /// 1-based line of each step's `[[step]]` entry.
    pub lines: Vec<usize>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(0, |t| t.bytes().filter(|b| *b == b'\n').count() + 1)
}

impl PipelineConfig {
    /// Read and parse a pipeline file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parse pipeline text; `path` names it in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let raw: RawPipeline = toml::from_str(text).map_err(|e| Error::Pipeline {
            path: path.to_path_buf(),
            line: e.span().map_or(0, |s| line_of(text, s.start)),
            message: e.message().trim().to_owned(),
        })?;
        let lines = raw.steps.iter().map(|s| line_of(text, s.span().start)).collect();
        Ok(PipelineConfig {
            name: raw.name,
            failure: raw.failure,
            backend: raw.backend,
            steps: raw.steps.into_iter().map(toml::Spanned::into_inner).collect(),
            path: path.to_path_buf(),
            lines,
        })
    }

    /// An error about step `index`, pointing at its line.
    pub fn step_error(&self, index: usize, message: impl std::fmt::Display) -> Error {
        let name = self.steps.get(index).map_or("?", |s| s.name.as_str());
        Error::Pipeline {
            path: self.path.clone(),
            line: self.lines.get(index).copied().unwrap_or(0),
            message: format!("step `{name}`: {message}"),
        }
    }

    /// An error about the whole file.
    pub fn file_error(&self, message: impl Into<String>) -> Error {
        Error::Pipeline { path: self.path.clone(), line: 0, message: message.into() }
    }

    /// The index of a step by name.
    pub fn step_index(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|s| s.name == name)
    }

    /// The failure policy of step `index`.
    pub fn failure_of(&self, index: usize) -> FailurePolicy {
        self.steps.get(index).and_then(|s| s.failure).unwrap_or(self.failure)
    }

    /// The backend of step `index`.
    pub fn backend_of(&self, index: usize) -> BackendKind {
        self.steps.get(index).and_then(|s| s.backend).unwrap_or(self.backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
name = "example"

[[step]]
name = "generate"
operation = "generate_data"
params = { tables = 20, rows = 1000, seed = 7 }

[[step]]
name = "stats"
operation = "command"
command = ["sh", "-c", "true"]
inputs = { table = "generate.data" }
outputs = { stats = "metric" }
batch = { artifacts_per_unit = 5 }
backend = "slurm"
resources = { cpus = 2, memory_gb = 4, time = "00:10:00" }
"#;

    #[test]
    fn parses_steps_with_their_lines() {
        let p = PipelineConfig::parse(EXAMPLE, Path::new("p.toml")).unwrap();
        assert_eq!(p.name, "example");
        assert_eq!(p.steps.len(), 2);
        assert_eq!(p.lines, vec![4, 9]);
        let stats = &p.steps[1];
        assert_eq!(stats.batch.artifacts_per_unit, 5);
        assert_eq!(stats.batch.units_per_worker, 1);
        assert_eq!(stats.resources.cpus, Some(2));
        assert_eq!(p.backend_of(1), BackendKind::Slurm);
        assert_eq!(p.backend_of(0), BackendKind::Local);
        assert_eq!(p.steps[0].params["rows"], serde_json::json!(1000));
        let refs = stats.input_refs().unwrap();
        assert_eq!(refs["table"], InputRef { step: "generate".into(), role: "data".into() });
    }

    #[test]
    fn syntax_and_unknown_keys_report_the_line() {
        let err = PipelineConfig::parse(
            "name = \"x\"\n[[step]]\nname = \"a\"\noperaton = \"merge\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("p.toml:4:"), "{err}");
        assert!(err.contains("operaton"), "{err}");
    }

    #[test]
    fn references_must_name_step_and_role() {
        assert!(InputRef::parse("a.b").is_ok());
        for bad in ["a", ".b", "a.", "a.b.c"] {
            assert!(InputRef::parse(bad).is_err(), "{bad}");
        }
    }
}
