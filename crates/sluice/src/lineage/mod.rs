//! Lineage: where an artifact came from, and what it fed.
//!
//! ```text
//!   ancestors ◀── artifact_edges (target → source) ── root ── (source → target) ──▶ descendants
//!                                    │
//!              execution_edges (output) + executions ─▶ the execution that made each node
//! ```
//!
//! [`Lake::lineage`] walks `artifact_edges` level by level from one artifact,
//! up (ancestors), down (descendants) or both, to a depth. Each level reads
//! only the edge files that can hold the ids of its frontier: the edge tables
//! keep a key filter per id column (see [`crate::lake::keys::key_filter`]), so the
//! cost of a walk follows the size of the graph it returns, not of the lake.
//! Nodes carry their type and step (from the index), and the execution that
//! produced them (from the output edges and the executions table): its run
//! id, operation and step name. Everything is read at one consistent point
//! of the lake.
//!
//! [`graph`] gives the pipeline as run: steps as nodes, the artifact streams
//! between them as edges. [`render`] turns either into text, JSON, DOT,
//! Mermaid or one self-contained HTML page.

pub mod graph;
pub mod html;
pub mod render;
pub mod reproduce;
pub mod view;
mod walk;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::artifact::ArtifactId;
use crate::error::Result;
use crate::lake::Lake;

/// Which way to walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Ancestors: what the artifact derives from.
    Up,
    /// Descendants: what derives from it.
    Down,
    /// Both.
    #[default]
    Both,
}

/// The execution that produced an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Producer {
    /// Its run id.
    pub execution_run_id: String,
    /// Its operation.
    pub operation: String,
    /// The step's name (from the execution's metadata).
    pub step_name: Option<String>,
    /// The step's number.
    pub step_number: i32,
    /// What produced it, as its execution recorded (build, host, program
    /// and checksum, Python source; see `pipeline::provenance`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<serde_json::Value>,
}

/// One artifact of a lineage graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineageNode {
    /// The artifact.
    pub id: ArtifactId,
    /// Its type.
    pub artifact_type: String,
    /// The step that produced it.
    pub step: i32,
    /// Distance from the root: negative for ancestors, positive for
    /// descendants, 0 for the root.
    pub depth: i32,
    /// The execution that produced it, when one did (a `put` has none).
    pub produced_by: Option<Producer>,
    /// Its original name, when it has one.
    pub name: Option<String>,
}

/// One derivation: `target` was made from `source` by a run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct LineageEdge {
    /// The input artifact.
    pub source: ArtifactId,
    /// The output artifact.
    pub target: ArtifactId,
    /// The execution run that derived it.
    pub execution_run_id: String,
    /// The input's role.
    pub source_role: String,
    /// The output's role.
    pub target_role: String,
}

/// The lineage of one artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineageGraph {
    /// The artifact asked about.
    pub root: ArtifactId,
    /// Every artifact reached, by id.
    pub nodes: BTreeMap<ArtifactId, LineageNode>,
    /// Every derivation between them.
    pub edges: Vec<LineageEdge>,
    /// Whether the walk stopped at the depth limit with more to go.
    pub truncated: bool,
}

/// Walk an artifact's lineage. Build it with [`Lake::lineage`].
#[derive(Debug)]
#[must_use = "a lineage walk does nothing until executed"]
pub struct LineageBuilder<'a> {
    lake: &'a Lake,
    root: ArtifactId,
    direction: Direction,
    depth: usize,
    artifact_type: Option<String>,
    step: Option<i32>,
}

impl Lake {
    /// The lineage of an artifact: both directions, depth 10 by default.
    pub fn lineage(&self, root: ArtifactId) -> LineageBuilder<'_> {
        LineageBuilder {
            lake: self,
            root,
            direction: Direction::Both,
            depth: 10,
            artifact_type: None,
            step: None,
        }
    }
}

impl LineageBuilder<'_> {
    /// Ancestors, descendants or both (default both).
    pub fn with_direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Levels to walk each way (default 10).
    pub fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// Keep only nodes of this type (the root always stays; the walk still
    /// passes through other nodes).
    pub fn with_type(mut self, artifact_type: Option<String>) -> Self {
        self.artifact_type = artifact_type;
        self
    }

    /// Keep only nodes of this step (the root always stays).
    pub fn with_step(mut self, step: Option<i32>) -> Self {
        self.step = step;
        self
    }

    /// Walk.
    pub async fn execute(self) -> Result<LineageGraph> {
        let mut graph = walk::walk(self.lake, self.root, self.direction, self.depth).await?;
        if self.artifact_type.is_some() || self.step.is_some() {
            let root = graph.root;
            graph.nodes.retain(|id, n| {
                *id == root
                    || (self.artifact_type.as_ref().is_none_or(|t| &n.artifact_type == t)
                        && self.step.is_none_or(|s| n.step == s))
            });
            let kept = &graph.nodes;
            graph.edges.retain(|e| kept.contains_key(&e.source) && kept.contains_key(&e.target));
        }
        Ok(graph)
    }
}
