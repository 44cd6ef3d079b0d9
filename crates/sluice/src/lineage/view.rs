//! A graph ready to draw: what every drawing format (DOT, Mermaid, HTML)
//! takes, built from a lineage or a run graph by [`super::render`].

/// A graph ready to draw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    /// Page title.
    pub title: String,
    /// Nodes, each with a unique key.
    pub nodes: Vec<ViewNode>,
    /// Edges between node keys.
    pub edges: Vec<ViewEdge>,
}

/// One node to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewNode {
    /// Unique key (an artifact id, a step name).
    pub key: String,
    /// Short label.
    pub label: String,
    /// Its column in a layered drawing (depth, step number).
    pub rank: i32,
    /// What nodes are collapsed by when there are many (the step).
    pub group: String,
    /// Colour class (type or status).
    pub kind: String,
    /// Everything known about it, shown when clicked.
    pub details: serde_json::Value,
    /// Whether it is the node asked about.
    pub focus: bool,
}

/// One edge to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewEdge {
    /// From node key.
    pub from: String,
    /// To node key.
    pub to: String,
    /// Label (roles, counts).
    pub label: String,
}
