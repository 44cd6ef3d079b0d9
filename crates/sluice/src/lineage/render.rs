//! Lineage and run graphs as text, JSON, DOT, Mermaid or one HTML page.
//!
//! Both graph kinds become a [`View`] (labelled nodes with a rank and a
//! group, labelled edges); DOT, Mermaid and HTML render views. Everything
//! taken from the lake is escaped for the format it lands in.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::str::FromStr;

use super::graph::RunGraph;
pub use super::view::{View, ViewEdge, ViewNode};
use super::{LineageGraph, LineageNode};
use crate::error::{Error, Result};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// A readable tree (lineage) or table (run).
    #[default]
    Text,
    /// The graph as JSON.
    Json,
    /// Graphviz.
    Dot,
    /// Mermaid flowchart.
    Mermaid,
    /// One self-contained HTML page (inline SVG, pan/zoom, search, details).
    Html,
}

impl FromStr for Format {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "text" => Format::Text,
            "json" => Format::Json,
            "dot" => Format::Dot,
            "mermaid" => Format::Mermaid,
            "html" => Format::Html,
            other => {
                return Err(Error::InvalidInput(format!(
                    "unknown format `{other}` (text, json, dot, mermaid or html)"
                )));
            }
        })
    }
}

/// Render a lineage graph.
pub fn lineage(graph: &LineageGraph, format: Format) -> Result<String> {
    match format {
        Format::Text => Ok(lineage_text(graph)),
        Format::Json => {
            serde_json::to_string_pretty(graph).map_err(|e| Error::json("a lineage graph", e))
        }
        other => view(&lineage_view(graph), other),
    }
}

/// Render a run graph.
pub fn run(graph: &RunGraph, format: Format) -> Result<String> {
    match format {
        Format::Text => Ok(run_text(graph)),
        Format::Json => {
            serde_json::to_string_pretty(graph).map_err(|e| Error::json("a run graph", e))
        }
        other => view(&run_view(graph), other),
    }
}

/// Draw a view (DOT, Mermaid; HTML for anything else).
fn view(v: &View, format: Format) -> Result<String> {
    match format {
        Format::Dot => Ok(dot(v)),
        Format::Mermaid => Ok(mermaid(v)),
        _ => super::html::page(v),
    }
}

fn node_label(n: &LineageNode) -> String {
    let short = &n.id.to_hex()[..12];
    match &n.name {
        Some(name) => format!("{short} {} {name}", n.artifact_type),
        None => format!("{short} {}", n.artifact_type),
    }
}

fn node_line(n: &LineageNode) -> String {
    let mut line = format!("{} {} step {}", n.id, n.artifact_type, n.step);
    if let Some(name) = &n.name {
        let _ = write!(line, " \"{name}\"");
    }
    if let Some(p) = &n.produced_by {
        let step = p.step_name.as_deref().unwrap_or("?");
        let _ = write!(
            line,
            " ← {} in step {} ({step}), run {}",
            p.operation,
            p.step_number,
            &p.execution_run_id[..p.execution_run_id.len().min(12)]
        );
    }
    line
}

/// The lineage as two indented trees: ancestors above, descendants below.
fn lineage_text(graph: &LineageGraph) -> String {
    let mut out = String::new();
    let Some(root) = graph.nodes.get(&graph.root) else { return out };
    let _ = writeln!(out, "{}", node_line(root));
    for (title, up) in [("derives from", true), ("feeds", false)] {
        let mut children: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for e in &graph.edges {
            let (from, to) = if up { (e.target, e.source) } else { (e.source, e.target) };
            children.entry(from).or_default().push((
                to,
                e.source_role.clone(),
                e.target_role.clone(),
            ));
        }
        if children.get(&graph.root).is_none_or(Vec::is_empty) {
            continue;
        }
        let _ = writeln!(out, "{title}:");
        let mut seen = std::collections::BTreeSet::from([graph.root]);
        tree(&mut out, graph, &children, graph.root, 1, &mut seen);
    }
    if graph.truncated {
        out.push_str("(depth limit reached: more lineage beyond; raise --depth)\n");
    }
    out
}

type Children =
    BTreeMap<crate::artifact::ArtifactId, Vec<(crate::artifact::ArtifactId, String, String)>>;

fn tree(
    out: &mut String,
    graph: &LineageGraph,
    children: &Children,
    at: crate::artifact::ArtifactId,
    indent: usize,
    seen: &mut std::collections::BTreeSet<crate::artifact::ArtifactId>,
) {
    for (child, source_role, target_role) in children.get(&at).into_iter().flatten() {
        let Some(node) = graph.nodes.get(child) else { continue };
        let again = !seen.insert(*child);
        let _ = writeln!(
            out,
            "{}{} [{source_role} → {target_role}]{}",
            "  ".repeat(indent),
            node_line(node),
            if again { " (shown above)" } else { "" }
        );
        if !again {
            tree(out, graph, children, *child, indent + 1, seen);
        }
    }
}

fn lineage_view(graph: &LineageGraph) -> View {
    let nodes = graph
        .nodes
        .values()
        .map(|n| ViewNode {
            key: n.id.to_hex(),
            label: node_label(n),
            rank: n.depth,
            group: format!("step {}", n.step),
            kind: n.artifact_type.clone(),
            details: serde_json::to_value(n).unwrap_or_default(),
            focus: n.id == graph.root,
        })
        .collect();
    let edges = graph
        .edges
        .iter()
        .map(|e| ViewEdge {
            from: e.source.to_hex(),
            to: e.target.to_hex(),
            label: format!("{} → {}", e.source_role, e.target_role),
        })
        .collect();
    View { title: format!("lineage of {}", graph.root), nodes, edges }
}

fn run_text(graph: &RunGraph) -> String {
    let mut out = format!(
        "pipeline `{}` run {} ({})\n",
        graph.pipeline,
        graph.pipeline_run_id,
        graph.status.as_str()
    );
    for s in &graph.steps {
        let _ = writeln!(
            out,
            "{}. {} ({}) {}: {} unit{}, {} ok, {} failed, {} cached, {:.2}s",
            s.number,
            s.name,
            s.operation,
            s.status.as_str(),
            s.total.unwrap_or(0),
            if s.total == Some(1) { "" } else { "s" },
            s.succeeded.unwrap_or(0),
            s.failed.unwrap_or(0),
            s.cached.unwrap_or(0),
            s.seconds.unwrap_or(0.0)
        );
    }
    for s in &graph.streams {
        let _ =
            writeln!(out, "  {}.{} ─{}─▶ {} ({})", s.from, s.role, s.artifacts, s.to, s.input_role);
    }
    out
}

fn run_view(graph: &RunGraph) -> View {
    let nodes = graph
        .steps
        .iter()
        .map(|s| ViewNode {
            key: s.name.clone(),
            label: format!("{}. {} ({})", s.number, s.name, s.operation),
            rank: s.number,
            group: s.name.clone(),
            kind: s.status.as_str().to_owned(),
            details: serde_json::to_value(s).unwrap_or_default(),
            focus: false,
        })
        .collect();
    let edges = graph
        .streams
        .iter()
        .map(|s| ViewEdge {
            from: s.from.clone(),
            to: s.to.clone(),
            label: format!("{} → {}: {}", s.role, s.input_role, s.artifacts),
        })
        .collect();
    View {
        title: format!("pipeline {} run {}", graph.pipeline, graph.pipeline_run_id),
        nodes,
        edges,
    }
}

/// Graphviz DOT; every string is quoted and escaped.
pub fn dot(v: &View) -> String {
    let q = |s: &str| {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
    };
    let mut out =
        format!("digraph {} {{\n  rankdir=LR;\n  node [shape=box, style=rounded];\n", q(&v.title));
    for n in &v.nodes {
        let _ = writeln!(
            out,
            "  {} [label={}{}];",
            q(&n.key),
            q(&n.label),
            if n.focus { ", penwidth=3" } else { "" }
        );
    }
    for e in &v.edges {
        let _ = writeln!(out, "  {} -> {} [label={}];", q(&e.from), q(&e.to), q(&e.label));
    }
    out.push_str("}\n");
    out
}

/// Mermaid flowchart; labels are quoted with `#quot;` escapes, ids are
/// replaced by safe node names.
pub fn mermaid(v: &View) -> String {
    let q = |s: &str| {
        s.replace('&', "#amp;")
            .replace('"', "#quot;")
            .replace('<', "#lt;")
            .replace('>', "#gt;")
            .replace('\n', " ")
    };
    let ids: BTreeMap<&str, String> =
        v.nodes.iter().enumerate().map(|(i, n)| (n.key.as_str(), format!("n{i}"))).collect();
    let mut out = String::from("flowchart LR\n");
    for n in &v.nodes {
        let _ = writeln!(out, "  {}[\"{}\"]", ids[n.key.as_str()], q(&n.label));
    }
    for e in &v.edges {
        if let (Some(a), Some(b)) = (ids.get(e.from.as_str()), ids.get(e.to.as_str())) {
            let _ = writeln!(out, "  {a} -->|\"{}\"| {b}", q(&e.label));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostile() -> View {
        View {
            title: "t".into(),
            nodes: vec![
                ViewNode {
                    key: "a\"b".into(),
                    label: "<script>alert(1)</script> \"x\"".into(),
                    rank: 0,
                    group: "g".into(),
                    kind: "metric".into(),
                    details: serde_json::json!({"name": "</script><b>"}),
                    focus: true,
                },
                ViewNode {
                    key: "c".into(),
                    label: "c".into(),
                    rank: 1,
                    group: "g".into(),
                    kind: "data".into(),
                    details: serde_json::Value::Null,
                    focus: false,
                },
            ],
            edges: vec![ViewEdge { from: "a\"b".into(), to: "c".into(), label: "x\"y".into() }],
        }
    }

    #[test]
    fn dot_and_mermaid_escape_what_they_quote() {
        let d = dot(&hostile());
        assert!(d.contains("\"a\\\"b\" -> \"c\" [label=\"x\\\"y\"]"), "{d}");
        let m = mermaid(&hostile());
        assert!(m.contains("#lt;script#gt;") && !m.contains("<script>"), "{m}");
        assert!(m.contains("n0 -->|\"x#quot;y\"| n1"), "{m}");
    }
}
