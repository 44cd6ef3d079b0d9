//! Pipeline files: a TOML document of ordered steps.
//!
//! ```toml
//! name = "example"
//! failure = "continue"                   # or "fail_fast" (per step too)
//! max_failed_units = "5%"                # or a count: past it a step stops early (per step too)
//! retries = 2                            # failed units run again (per step too; see `retry`)
//! retry_delay = "30s"                    # backoff = "exponential", retry_on = [3, "timeout"], no_retry_on = [2]
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

pub use crate::error::StepError;

use super::retry::RetryPolicy;

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

/// How many failed units a step tolerates (`max_failed_units`): past it,
/// the step is clearly broken, so it stops dispatching and ends failed
/// instead of running the rest of its units on the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "LimitText", into = "LimitText")]
pub enum FailedUnitsLimit {
    /// At most this many.
    Count(u64),
    /// At most this share (0 to 100) of the units the run dispatches.
    Percent(f64),
}

/// `max_failed_units` as written: a count or `"N%"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum LimitText {
    Count(i64),
    Text(String),
}

impl TryFrom<LimitText> for FailedUnitsLimit {
    type Error = String;

    fn try_from(text: LimitText) -> std::result::Result<Self, String> {
        let written = match text {
            LimitText::Count(n) => match u64::try_from(n) {
                Ok(n) => return Ok(FailedUnitsLimit::Count(n)),
                Err(_) => n.to_string(),
            },
            LimitText::Text(t) => t,
        };
        let bad =
            || format!("max_failed_units = {written:?}: a count of units or a share like \"5%\"");
        let trimmed = written.trim();
        if let Some(share) = trimmed.strip_suffix('%') {
            let share: f64 = share.trim().parse().map_err(|_| bad())?;
            return match (0.0..=100.0).contains(&share) {
                true => Ok(FailedUnitsLimit::Percent(share)),
                false => Err(bad()),
            };
        }
        trimmed.parse().map(FailedUnitsLimit::Count).map_err(|_| bad())
    }
}

impl From<FailedUnitsLimit> for LimitText {
    fn from(limit: FailedUnitsLimit) -> Self {
        match limit {
            FailedUnitsLimit::Count(n) => LimitText::Count(i64::try_from(n).unwrap_or(i64::MAX)),
            FailedUnitsLimit::Percent(p) => LimitText::Text(format!("{p}%")),
        }
    }
}

impl FailedUnitsLimit {
    /// The failures tolerated among `units` units dispatched.
    pub fn allowed(self, units: usize) -> usize {
        match self {
            FailedUnitsLimit::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            FailedUnitsLimit::Percent(share) => (units as f64 * share / 100.0).floor() as usize,
        }
    }
}

impl std::fmt::Display for FailedUnitsLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailedUnitsLimit::Count(n) => write!(f, "{n}"),
            FailedUnitsLimit::Percent(p) => write!(f, "{p}%"),
        }
    }
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
    /// Units per SLURM array task (default 1, or `"auto"`).
    pub units_per_worker: UnitsPerTask,
}

impl Default for Batch {
    fn default() -> Self {
        Batch { artifacts_per_unit: 1, units_per_worker: UnitsPerTask::Fixed(1) }
    }
}

/// How many units one SLURM array task runs: a number, or `"auto"`.
///
/// One unit per task (the default) isolates units the way a cluster's
/// users expect: a task that dies takes one unit with it. A step of many
/// small units pays a job start per unit that way, so `"auto"` runs as
/// many tasks as the partition has CPU slots (or the step's `throttle`),
/// each running its share of the units one after the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitsPerTask {
    /// Exactly this many units per task.
    Fixed(usize),
    /// Sized to the cluster at submission.
    Auto,
}

impl Serialize for UnitsPerTask {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            UnitsPerTask::Fixed(n) => serializer.serialize_u64(*n as u64),
            UnitsPerTask::Auto => serializer.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for UnitsPerTask {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = UnitsPerTask;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of units or \"auto\"")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<Self::Value, E> {
                usize::try_from(n).map(UnitsPerTask::Fixed).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<Self::Value, E> {
                usize::try_from(n)
                    .map(UnitsPerTask::Fixed)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(n), &self))
            }
            fn visit_str<E: serde::de::Error>(
                self,
                text: &str,
            ) -> std::result::Result<Self::Value, E> {
                match text {
                    "auto" => Ok(UnitsPerTask::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(text), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
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
    /// At most this many tasks per array (default: the cluster's
    /// `MaxArraySize`); a step of more tasks is submitted as several arrays.
    pub max_array: Option<u32>,
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
    pub fn parse(text: &str) -> std::result::Result<InputRef, StepError> {
        match text.split_once('.') {
            Some((step, role)) if !step.is_empty() && !role.is_empty() && !role.contains('.') => {
                Ok(InputRef { step: step.to_owned(), role: role.to_owned() })
            }
            _ => Err(StepError::BadReference { text: text.to_owned() }),
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
    /// The function a `python` step runs: `"package.module:function"` (a
    /// module the interpreter imports) or `"path/to/file.py:function"`
    /// (relative to the pipeline file; made absolute when it is read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The interpreter of a `python` step (default: the `python3` beside
    /// the running `sluice`, as in the venv the wheel installed it into,
    /// else `python3` on PATH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
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
    /// Failed units tolerated before the step stops early as failed
    /// (default: the pipeline's; none: every unit runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failed_units: Option<FailedUnitsLimit>,
    /// How failed units are retried (each key defaults to the pipeline's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Delay before the first retry round (`"30s"`, `"2m"`; default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay: Option<String>,
    /// The longest delay exponential backoff reaches (default 10 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_max: Option<String>,
    /// `"fixed"` (default) or `"exponential"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<super::retry::Backoff>,
    /// A random share (0 to 1) of each delay added to it (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_jitter: Option<f64>,
    /// Failures that are retried (default: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<Vec<super::retry::ConditionText>>,
    /// Failures that are never retried (exit codes that mean bad input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_retry_on: Option<Vec<super::retry::ConditionText>>,
    /// The name of a limit in the pipeline's `[concurrency]` table that
    /// bounds how many of its units run at once (an API several steps call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// Files the step's behaviour depends on (globs; `command` steps): their
    /// content is part of the cache key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends: Vec<String>,
    /// A version of the step, part of the cache key: bump it to rerun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Wall-time limit of one unit on any backend ("90s", "10m", "2h"; or
    /// SLURM syntax). Default on the local backend: `resources.time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

impl StepConfig {
    /// The wall-time limit of one unit: `timeout`, else `resources.time`.
    pub fn time_limit(&self) -> std::result::Result<Option<std::time::Duration>, StepError> {
        self.time_limit_on(BackendKind::Local)
    }

    /// The wall-time limit of one unit on a backend: `timeout`; else, on the
    /// local backend, `resources.time` (on SLURM that is the array task's
    /// limit, which SLURM enforces itself).
    pub fn time_limit_on(
        &self,
        backend: BackendKind,
    ) -> std::result::Result<Option<std::time::Duration>, StepError> {
        let (name, text) = match (&self.timeout, &self.resources.time, backend) {
            (Some(t), _, _) => ("timeout", t),
            (None, Some(t), BackendKind::Local) => ("resources.time", t),
            _ => return Ok(None),
        };
        parse_duration(text).map(Some).ok_or_else(|| StepError::BadParam {
            name: name.into(),
            problem: format!(
                "`{text}` is not a duration (e.g. \"90s\", \"10m\", \"2h\", or SLURM's \"01:30:00\", \"1-00:00\")"
            ),
        })
    }

    /// Parsed input references, by role.
    pub fn input_refs(&self) -> std::result::Result<BTreeMap<String, InputRef>, StepError> {
        self.inputs
            .iter()
            .map(|(role, text)| {
                InputRef::parse(text)
                    .map(|r| (role.clone(), r))
                    .map_err(|e| StepError::Input { role: role.clone(), source: Box::new(e) })
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
    max_failed_units: Option<FailedUnitsLimit>,
    #[serde(default)]
    retries: Option<u32>,
    #[serde(default)]
    retry_delay: Option<String>,
    #[serde(default)]
    retry_delay_max: Option<String>,
    #[serde(default)]
    backoff: Option<super::retry::Backoff>,
    #[serde(default)]
    retry_jitter: Option<f64>,
    #[serde(default)]
    retry_on: Option<Vec<super::retry::ConditionText>>,
    #[serde(default)]
    no_retry_on: Option<Vec<super::retry::ConditionText>>,
    #[serde(default)]
    hooks: super::hooks::Hooks,
    #[serde(default, rename = "check")]
    checks: Vec<super::checks::CheckConfig>,
    #[serde(default)]
    concurrency: BTreeMap<String, usize>,
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
    /// Default limit of failed units per step.
    pub max_failed_units: Option<FailedUnitsLimit>,
    /// Default retry settings of every step (a step's own keys win).
    pub retry: RetrySettings,
    /// What to tell when a run ends.
    pub hooks: super::hooks::Hooks,
    /// Checks of steps' outputs (`[[check]]`).
    pub checks: Vec<super::checks::CheckConfig>,
    /// Named limits of units at once (`[concurrency]`), for steps'
    /// `concurrency_key`.
    pub concurrency: BTreeMap<String, usize>,
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
        let mut steps: Vec<StepConfig> =
            raw.steps.into_iter().map(toml::Spanned::into_inner).collect();
        let base = path.parent().unwrap_or(Path::new(""));
        for step in &mut steps {
            step.function = step.function.take().map(|f| function_from(base, f));
        }
        Ok(PipelineConfig {
            name: raw.name,
            failure: raw.failure,
            max_failed_units: raw.max_failed_units,
            retry: RetrySettings {
                retries: raw.retries,
                retry_delay: raw.retry_delay,
                retry_delay_max: raw.retry_delay_max,
                backoff: raw.backoff,
                retry_jitter: raw.retry_jitter,
                retry_on: raw.retry_on,
                no_retry_on: raw.no_retry_on,
            },
            hooks: raw.hooks,
            checks: raw.checks,
            concurrency: raw.concurrency,
            backend: raw.backend,
            steps,
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

    /// The limit of failed units of step `index`.
    pub fn max_failed_units_of(&self, index: usize) -> Option<FailedUnitsLimit> {
        self.steps.get(index).and_then(|s| s.max_failed_units).or(self.max_failed_units)
    }

    /// The retry policy of step `index`: each of its keys, else the
    /// pipeline's; a message when one is not valid.
    pub fn retry_of(&self, index: usize) -> std::result::Result<RetryPolicy, String> {
        let own = self.steps.get(index).map(RetrySettings::of_step).unwrap_or_default();
        own.or(&self.retry).policy()
    }

    /// The limit of units at once of step `index` from its
    /// `concurrency_key` (none without one).
    pub fn concurrency_of(&self, index: usize) -> Option<usize> {
        let key = self.steps.get(index)?.concurrency_key.as_ref()?;
        self.concurrency.get(key).copied()
    }

    /// The backend of step `index`.
    pub fn backend_of(&self, index: usize) -> BackendKind {
        self.steps.get(index).and_then(|s| s.backend).unwrap_or(self.backend)
    }
}

/// The retry keys of a step or of the pipeline, as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetrySettings {
    /// `retries`.
    pub retries: Option<u32>,
    /// `retry_delay`.
    pub retry_delay: Option<String>,
    /// `retry_delay_max`.
    pub retry_delay_max: Option<String>,
    /// `backoff`.
    pub backoff: Option<super::retry::Backoff>,
    /// `retry_jitter`.
    pub retry_jitter: Option<f64>,
    /// `retry_on`.
    pub retry_on: Option<Vec<super::retry::ConditionText>>,
    /// `no_retry_on`.
    pub no_retry_on: Option<Vec<super::retry::ConditionText>>,
}

impl RetrySettings {
    fn of_step(step: &StepConfig) -> Self {
        RetrySettings {
            retries: step.retries,
            retry_delay: step.retry_delay.clone(),
            retry_delay_max: step.retry_delay_max.clone(),
            backoff: step.backoff,
            retry_jitter: step.retry_jitter,
            retry_on: step.retry_on.clone(),
            no_retry_on: step.no_retry_on.clone(),
        }
    }

    /// Each key of these, else of `defaults`.
    fn or(self, defaults: &RetrySettings) -> Self {
        RetrySettings {
            retries: self.retries.or(defaults.retries),
            retry_delay: self.retry_delay.or_else(|| defaults.retry_delay.clone()),
            retry_delay_max: self.retry_delay_max.or_else(|| defaults.retry_delay_max.clone()),
            backoff: self.backoff.or(defaults.backoff),
            retry_jitter: self.retry_jitter.or(defaults.retry_jitter),
            retry_on: self.retry_on.or_else(|| defaults.retry_on.clone()),
            no_retry_on: self.no_retry_on.or_else(|| defaults.no_retry_on.clone()),
        }
    }

    fn policy(self) -> std::result::Result<RetryPolicy, String> {
        let defaults = RetryPolicy::default();
        let delay = |name: &str, text: Option<String>, default| match text {
            None => Ok(default),
            Some(t) if t.trim() == "0" || t.trim() == "0s" => Ok(std::time::Duration::ZERO),
            Some(t) => parse_duration(&t)
                .ok_or_else(|| format!("{name} = {t:?} is not a duration (e.g. \"30s\", \"2m\")")),
        };
        let conditions = |list: Option<Vec<super::retry::ConditionText>>| {
            list.unwrap_or_default()
                .iter()
                .map(|c| c.condition())
                .collect::<std::result::Result<Vec<_>, _>>()
        };
        let jitter = self.retry_jitter.unwrap_or(defaults.jitter);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(format!("retry_jitter = {jitter} must be between 0 and 1"));
        }
        Ok(RetryPolicy {
            retries: self.retries.unwrap_or(defaults.retries),
            delay: delay("retry_delay", self.retry_delay, defaults.delay)?,
            max_delay: delay("retry_delay_max", self.retry_delay_max, defaults.max_delay)?,
            backoff: self.backoff.unwrap_or_default(),
            jitter,
            retry_on: conditions(self.retry_on)?,
            no_retry_on: conditions(self.no_retry_on)?,
        })
    }
}

/// A `python` step's `function` with a file path made absolute against the
/// pipeline file's folder (`base`): workers and SLURM tasks may start
/// elsewhere. A module name is kept as it is.
fn function_from(base: &Path, function: String) -> String {
    match function.rsplit_once(':') {
        Some((module, name)) if module.ends_with(".py") || module.contains('/') => {
            let file = base.join(module);
            let file = std::path::absolute(&file).unwrap_or(file);
            format!("{}:{name}", file.display())
        }
        _ => function,
    }
}

/// A duration: `90s`, `10m`, `2h`, `1d`, a plain number of seconds, or
/// SLURM's `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let secs =
        |n: &str, unit: u64| n.parse::<f64>().ok().filter(|v| *v >= 0.0).map(|v| v * unit as f64);
    let seconds = if let Some(n) = text.strip_suffix('s') {
        secs(n, 1)
    } else if let Some(n) = text.strip_suffix('m') {
        secs(n, 60)
    } else if let Some(n) = text.strip_suffix('h') {
        secs(n, 3600)
    } else if let Some(n) = text.strip_suffix('d') {
        secs(n, 86400)
    } else {
        slurm_time(text).map(|s| s as f64)
    }?;
    (seconds > 0.0 && seconds.is_finite()).then(|| std::time::Duration::from_secs_f64(seconds))
}

/// SLURM `--time` syntax, in seconds (a bare number is minutes).
fn slurm_time(text: &str) -> Option<u64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let with_days = text.contains('-');
    let (h, m, s) = match (with_days, parts.as_slice()) {
        (false, [m]) => (0, *m, 0),
        (false, [m, s]) => (0, *m, *s),
        (false, [h, m, s]) | (true, [h, m, s]) => (*h, *m, *s),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        _ => return None,
    };
    Some(days * 86400 + h * 3600 + m * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_keys_of_a_step_win_over_the_pipeline_s_one_by_one() {
        use crate::pipeline::retry::{Backoff, FailureKind, RetryCondition};
        let text = "name = \"p\"\nretries = 2\nretry_delay = \"10s\"\nno_retry_on = [2]\n\
                    [[step]]\nname = \"a\"\noperation = \"x\"\n\
                    [[step]]\nname = \"b\"\noperation = \"x\"\nretries = 5\nbackoff = \"exponential\"\n\
                    retry_on = [\"timeout\", 3, \"SIGKILL\"]\n\
                    [[step]]\nname = \"c\"\noperation = \"x\"\nretry_on = [\"sometimes\"]\n";
        let p = PipelineConfig::parse(text, Path::new("p.toml")).unwrap();
        let a = p.retry_of(0).unwrap();
        assert_eq!(
            (a.retries, a.delay, a.backoff),
            (2, std::time::Duration::from_secs(10), Backoff::Fixed)
        );
        assert_eq!(a.no_retry_on, vec![RetryCondition::Kind(FailureKind::Exit(2))]);
        let b = p.retry_of(1).unwrap();
        assert_eq!(
            (b.retries, b.delay, b.backoff),
            (5, std::time::Duration::from_secs(10), Backoff::Exponential)
        );
        assert_eq!(b.retry_on.len(), 3);
        assert!(p.retry_of(2).unwrap_err().contains("`sometimes` is not a retry condition"));
    }

    #[test]
    fn max_failed_units_is_a_count_or_a_share_per_step_or_for_the_pipeline() {
        let text = "name = \"p\"\nmax_failed_units = \"5%\"\n[[step]]\nname = \"a\"\noperation = \"x\"\n\
                    [[step]]\nname = \"b\"\noperation = \"x\"\nmax_failed_units = 2\n";
        let p = PipelineConfig::parse(text, Path::new("p.toml")).unwrap();
        assert_eq!(p.max_failed_units_of(0), Some(FailedUnitsLimit::Percent(5.0)));
        assert_eq!(p.max_failed_units_of(1), Some(FailedUnitsLimit::Count(2)));
        assert_eq!(FailedUnitsLimit::Percent(5.0).allowed(99), 4);
        assert_eq!(FailedUnitsLimit::Percent(5.0).allowed(100), 5);
        assert_eq!(FailedUnitsLimit::Count(2).allowed(1), 2);
        for bad in ["\"lots\"", "\"120%\"", "\"-1%\"", "-3"] {
            let text = format!("name = \"p\"\nmax_failed_units = {bad}\n");
            let err = PipelineConfig::parse(&text, Path::new("p.toml")).unwrap_err().to_string();
            assert!(err.contains("max_failed_units"), "{bad}: {err}");
        }
    }

    #[test]
    fn durations_in_both_syntaxes() {
        let s = |n| Some(std::time::Duration::from_secs(n));
        assert_eq!(parse_duration("90s"), s(90));
        assert_eq!(parse_duration("10m"), s(600));
        assert_eq!(parse_duration("2h"), s(7200));
        assert_eq!(parse_duration("5"), s(300), "a bare number is SLURM minutes");
        assert_eq!(parse_duration("01:30"), s(90));
        assert_eq!(parse_duration("01:00:05"), s(3605));
        assert_eq!(parse_duration("1-02"), s(93600));
        assert_eq!(parse_duration("1-00:00:10"), s(86410));
        for bad in ["", "soon", "-5s", "1:2:3:4", "0s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

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
        assert_eq!(stats.batch.units_per_worker, UnitsPerTask::Fixed(1));
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
    fn a_python_function_given_as_a_file_is_found_beside_the_pipeline() {
        let text = "name = \"p\"\n[[step]]\nname = \"a\"\noperation = \"python\"\nfunction = \"steps/f.py:run\"\n\
                    [[step]]\nname = \"b\"\noperation = \"python\"\nfunction = \"pkg.mod:Class.run\"\n";
        let p = PipelineConfig::parse(text, Path::new("/work/pipes/p.toml")).unwrap();
        assert_eq!(p.steps[0].function.as_deref(), Some("/work/pipes/steps/f.py:run"));
        assert_eq!(p.steps[1].function.as_deref(), Some("pkg.mod:Class.run"), "a module is kept");
    }

    #[test]
    fn references_must_name_step_and_role() {
        assert!(InputRef::parse("a.b").is_ok());
        for bad in ["a", ".b", "a.", "a.b.c"] {
            assert!(InputRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn units_per_task_is_a_number_or_auto_and_says_so_otherwise() {
        let batch = |text: &str| toml::from_str::<Batch>(text);
        assert_eq!(batch("units_per_worker = 3").unwrap().units_per_worker, UnitsPerTask::Fixed(3));
        assert_eq!(
            batch("units_per_worker = \"auto\"").unwrap().units_per_worker,
            UnitsPerTask::Auto
        );
        assert_eq!(batch("").unwrap().units_per_worker, UnitsPerTask::Fixed(1));
        for bad in ["units_per_worker = \"fast\"", "units_per_worker = -2"] {
            let e = batch(bad).unwrap_err().to_string();
            assert!(e.contains("a number of units or \"auto\""), "{bad}: {e}");
        }
        let json = serde_json::to_string(&Batch {
            artifacts_per_unit: 1,
            units_per_worker: UnitsPerTask::Auto,
        })
        .unwrap();
        assert!(json.contains("\"units_per_worker\":\"auto\""), "{json}");
        let back: Batch = serde_json::from_str(&json).unwrap();
        assert_eq!(back.units_per_worker, UnitsPerTask::Auto);
    }
}
