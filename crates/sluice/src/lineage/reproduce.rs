//! `sluice reproduce ARTIFACT --into DIR`: the smallest pipeline that makes
//! an artifact again.
//!
//! The artifact's lineage (walked up to its sources) names the steps whose
//! executions produced it and everything it derives from; the steps table
//! names the pipeline file those steps ran from and its BLAKE3 (see
//! [`provenance`](crate::pipeline::provenance)). The file is read again — refused
//! when its content changed since — and the steps on the lineage, with the
//! steps their inputs come from, are written as a pipeline of their own,
//! their settings and params as they were, paths made absolute against the
//! original file's folder. Running it into a scratch lake must make an
//! artifact of the same id: content addressing says it is the same result.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::Direction;
use crate::artifact::ArtifactId;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::delta::scan;
use crate::pipeline::config::{PipelineConfig, StepConfig};
use crate::pipeline::steps_log::{self, StepStatus};

/// How deep the lineage is walked for the steps an artifact needs.
const DEPTH: usize = 1000;

/// The pipeline that makes an artifact again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reproduction {
    /// The artifact.
    pub artifact: ArtifactId,
    /// The pipeline file its steps ran from.
    pub source: PathBuf,
    /// The steps written, in order.
    pub steps: Vec<String>,
    /// The pipeline, as TOML.
    #[serde(skip)]
    pub text: String,
}

/// The pipeline file a step's rows recorded (path, BLAKE3), from the
/// latest row of `step` that has it.
async fn recorded_file(lake: &Lake, step: &str) -> Result<Option<(PathBuf, String, String)>> {
    let rows = steps_log::read(lake, Some(scan::equals("step_name", step))).await?;
    Ok(rows.iter().rev().filter(|r| r.status != StepStatus::NotReached).find_map(|r| {
        let p = r.metadata.get("provenance")?;
        let file = p.get("pipeline_file")?.as_str()?;
        let hash = p.get("pipeline_blake3")?.as_str()?;
        let pipeline = r.metadata.get("pipeline").and_then(Value::as_str).unwrap_or_default();
        Some((PathBuf::from(file), hash.to_owned(), pipeline.to_owned()))
    }))
}

/// Plan the reproduction of `id`.
pub async fn plan(lake: &Lake, id: ArtifactId) -> Result<Reproduction> {
    let graph = lake.lineage(id).with_direction(Direction::Up).with_depth(DEPTH).execute().await?;
    let producers: BTreeSet<String> =
        graph.nodes.values().filter_map(|n| n.produced_by.as_ref()?.step_name.clone()).collect();
    let root_step = graph
        .nodes
        .get(&id)
        .and_then(|n| n.produced_by.as_ref()?.step_name.clone())
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "artifact {id} was not made by a pipeline step (it was put): there is nothing to reproduce"
            ))
        })?;
    let Some((file, hash, name)) = recorded_file(lake, &root_step).await? else {
        return Err(Error::InvalidInput(format!(
            "step `{root_step}` that made artifact {id} recorded no pipeline file (it ran before \
             sluice recorded provenance): rerun the pipeline, then reproduce"
        )));
    };
    let now = crate::artifact::hash_file(&file).map(|(h, _)| h).map_err(|e| {
        Error::InvalidInput(format!(
            "the pipeline file `{}` that made artifact {id} cannot be read: {e}",
            file.display()
        ))
    })?;
    if now != hash {
        return Err(Error::InvalidInput(format!(
            "the pipeline file `{}` changed since it made artifact {id} (BLAKE3 {hash} then, {now} now): \
             the steps it holds today may not make it",
            file.display()
        )));
    }
    let config = PipelineConfig::load(&file)?;
    let needed = with_upstream(&config, &producers);
    let base = file.parent().unwrap_or(Path::new("."));
    let steps: Vec<StepConfig> = config
        .steps
        .iter()
        .filter(|s| needed.contains(&s.name))
        .map(|s| absolute(s.clone(), base))
        .collect();
    let text = render(&format!("{name}-reproduce"), &config, &steps)?;
    Ok(Reproduction {
        artifact: id,
        source: file,
        steps: steps.iter().map(|s| s.name.clone()).collect(),
        text,
    })
}

/// `names` and every step their inputs come from, transitively.
fn with_upstream(config: &PipelineConfig, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut needed = names.clone();
    let mut queue: Vec<String> = names.iter().cloned().collect();
    while let Some(name) = queue.pop() {
        let Some(step) = config.steps.iter().find(|s| s.name == name) else { continue };
        let mut upstream: Vec<String> = step
            .inputs
            .values()
            .filter_map(|r| r.split_once('.').map(|(s, _)| s.to_owned()))
            .collect();
        if let Some(metric) = step.params.get("metric").and_then(Value::as_str) {
            upstream.extend(metric.split_once('.').map(|(s, _)| s.to_owned()));
        }
        for up in upstream {
            if needed.insert(up.clone()) {
                queue.push(up);
            }
        }
    }
    needed
}

/// A step with its paths absolute against `base` (the original file's
/// folder): `depends` globs, and a command's program or arguments that
/// name files there.
fn absolute(mut step: StepConfig, base: &Path) -> StepConfig {
    let at = |p: &str| std::path::absolute(base.join(p)).unwrap_or_else(|_| base.join(p));
    step.depends = step
        .depends
        .iter()
        .map(|d| if Path::new(d).is_absolute() { d.clone() } else { at(d).display().to_string() })
        .collect();
    if let Some(command) = &mut step.command {
        // A word that names a file beside the pipeline file (`./tool.sh`,
        // `scripts/x.py`) is made absolute; anything else is left as written.
        for word in command.iter_mut() {
            let relative = !Path::new(word.as_str()).is_absolute() && word.contains('/');
            if relative && base.join(word.as_str()).is_file() {
                *word = at(word).display().to_string();
            }
        }
    }
    step
}

/// The pipeline file of `steps`, with the original's defaults.
fn render(name: &str, config: &PipelineConfig, steps: &[StepConfig]) -> Result<String> {
    #[derive(Serialize)]
    struct File<'a> {
        name: &'a str,
        backend: crate::pipeline::config::BackendKind,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        concurrency: &'a BTreeMap<String, usize>,
        step: &'a [StepConfig],
    }
    let file =
        File { name, backend: config.backend, concurrency: &config.concurrency, step: steps };
    toml::to_string(&file).map_err(|e| Error::Internal(format!("writing the pipeline: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_brings_the_steps_its_inputs_come_from() {
        let text = "name = \"p\"\n[[step]]\nname = \"gen\"\noperation = \"generate_data\"\n\
                    [[step]]\nname = \"stats\"\noperation = \"compute_metrics\"\ninputs = { t = \"gen.data\" }\n\
                    [[step]]\nname = \"other\"\noperation = \"generate_data\"\n\
                    [[step]]\nname = \"keep\"\noperation = \"filter\"\ninputs = { candidates = \"gen.data\" }\n\
                    params = { metric = \"stats.metrics\", where = \"mean > 0\" }\n";
        let config = PipelineConfig::parse(text, Path::new("p.toml")).unwrap();
        let needed = with_upstream(&config, &BTreeSet::from(["keep".to_owned()]));
        assert_eq!(needed, BTreeSet::from(["gen", "keep", "stats"].map(str::to_owned)));
        let steps: Vec<StepConfig> =
            config.steps.iter().filter(|s| needed.contains(&s.name)).cloned().collect();
        let written = render("p-reproduce", &config, &steps).unwrap();
        let again = PipelineConfig::parse(&written, Path::new("r.toml")).unwrap();
        assert_eq!(again.steps, steps, "{written}");
    }
}
