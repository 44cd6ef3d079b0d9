//! The pipeline as run: steps as nodes, the artifact streams between them as
//! edges, from the steps table alone.
//!
//! Every step run records, in its `running` row, where its inputs come from
//! (role → `"<step>.<role>"`), and in its final row the streams it output
//! (role → artifact ids). An edge from step M's role to step N carries the
//! number of artifacts in that stream.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Result;
use crate::lake::Lake;
use crate::pipeline::status::{self, StepState};
use crate::pipeline::steps_log::{self, StepStatus};

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphStep {
    /// Number (1-based).
    pub number: i32,
    /// Name.
    pub name: String,
    /// Operation.
    pub operation: String,
    /// Final status.
    pub status: StepStatus,
    /// Units, succeeded, failed, cached.
    pub total: Option<i64>,
    /// Units that succeeded.
    pub succeeded: Option<i64>,
    /// Units that failed.
    pub failed: Option<i64>,
    /// Units answered by the cache.
    pub cached: Option<i64>,
    /// Wall time.
    pub seconds: Option<f64>,
    /// Per-phase timings.
    pub timings: BTreeMap<String, f64>,
    /// Artifacts per output role.
    pub outputs: BTreeMap<String, usize>,
}

/// An artifact stream from one step's output role into another step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stream {
    /// Producing step (name).
    pub from: String,
    /// Its output role.
    pub role: String,
    /// Consuming step (name).
    pub to: String,
    /// The role it feeds.
    pub input_role: String,
    /// Artifacts in the stream.
    pub artifacts: usize,
}

/// A pipeline run as a graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunGraph {
    /// The run.
    pub pipeline_run_id: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Overall status.
    pub status: StepStatus,
    /// Steps, in order.
    pub steps: Vec<GraphStep>,
    /// Streams between them.
    pub streams: Vec<Stream>,
}

/// The graph of a run (by id or prefix), or of the latest run.
pub async fn run_graph(lake: &Lake, run: Option<&str>) -> Result<RunGraph> {
    let state = status::status(lake, run).await?;
    let rows = steps_log::read(lake, None).await?;
    let mut outputs: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut inputs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.pipeline_run_id == state.pipeline_run_id) {
        let streams = row.outputs();
        if !streams.is_empty() {
            outputs.insert(
                row.step_name.clone(),
                streams.iter().map(|(r, ids)| (r.clone(), ids.len())).collect(),
            );
        }
        if let Some(map) = row
            .metadata
            .get("inputs")
            .and_then(|v| serde_json::from_value::<BTreeMap<String, String>>(v.clone()).ok())
        {
            inputs.insert(row.step_name.clone(), map);
        }
    }
    let steps: Vec<GraphStep> = state.steps.iter().map(|s| graph_step(s, &outputs)).collect();
    let mut streams = Vec::new();
    for (to, roles) in &inputs {
        for (input_role, reference) in roles {
            let Some((from, role)) = reference.split_once('.') else { continue };
            let artifacts = outputs.get(from).and_then(|o| o.get(role)).copied().unwrap_or(0);
            streams.push(Stream {
                from: from.to_owned(),
                role: role.to_owned(),
                to: to.clone(),
                input_role: input_role.clone(),
                artifacts,
            });
        }
    }
    Ok(RunGraph {
        pipeline_run_id: state.pipeline_run_id,
        pipeline: state.pipeline,
        status: state.status,
        steps,
        streams,
    })
}

fn graph_step(s: &StepState, outputs: &BTreeMap<String, BTreeMap<String, usize>>) -> GraphStep {
    GraphStep {
        number: s.number,
        name: s.name.clone(),
        operation: s.operation.clone(),
        status: s.status,
        total: s.total,
        succeeded: s.succeeded,
        failed: s.failed,
        cached: s.cached,
        seconds: s.seconds,
        timings: s.timings.clone(),
        outputs: outputs.get(&s.name).cloned().unwrap_or_default(),
    }
}
