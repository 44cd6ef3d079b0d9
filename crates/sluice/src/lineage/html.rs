//! One self-contained HTML page for a graph: an SVG laid out here, a little
//! inline script for pan, zoom, search and node details. No network, no
//! library: the page opens from a file anywhere.
//!
//! Every string from the lake is escaped for where it lands: HTML text and
//! attributes, and the JSON data island (`<`, `>` and `&` as `\u00XX`, so no
//! value can close the script element). Node details are shown with
//! `textContent`, never parsed as HTML. Above [`COLLAPSE_ABOVE`] nodes, nodes
//! are drawn collapsed by column and step (one box per group, with its count
//! and its members in the details), which keeps a 10 000-node lineage to a
//! page of a few hundred boxes; search still finds every member.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::view::{View, ViewEdge, ViewNode};
use crate::error::{Error, Result};

/// Nodes drawn one by one up to this many; above, collapsed by step.
pub const COLLAPSE_ABOVE: usize = 400;

const COLUMN: i32 = 300;
const ROW: i32 = 44;
const BOX_W: i32 = 240;
const BOX_H: i32 = 30;

/// HTML-escape text or an attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that is safe inside a `<script>` element.
fn script_json(value: &serde_json::Value) -> Result<String> {
    let text = serde_json::to_string(value).map_err(|e| Error::json("graph data", e))?;
    Ok(text.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026"))
}

/// A CSS class from a type or status name.
fn class(kind: &str) -> String {
    kind.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect()
}

/// Collapse a large view: one node per (rank, group), edges aggregated.
fn collapse(v: &View) -> View {
    let mut groups: BTreeMap<(i32, String), Vec<&ViewNode>> = BTreeMap::new();
    for n in &v.nodes {
        groups.entry((n.rank, n.group.clone())).or_default().push(n);
    }
    let mut key_of: BTreeMap<&str, String> = BTreeMap::new();
    let mut nodes = Vec::new();
    for ((rank, group), members) in &groups {
        let key = format!("group:{rank}:{group}");
        for m in members {
            key_of.insert(m.key.as_str(), key.clone());
        }
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for m in members {
            *kinds.entry(m.kind.as_str()).or_default() += 1;
        }
        let kind =
            kinds.iter().max_by_key(|(_, n)| **n).map(|(k, _)| (*k).to_owned()).unwrap_or_default();
        let summary: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        nodes.push(ViewNode {
            key: key.clone(),
            label: format!("{group}: {}", summary.join(", ")),
            rank: *rank,
            group: group.clone(),
            kind,
            details: serde_json::json!({
                "collapsed": members.len(),
                "members": members.iter().map(|m| serde_json::json!({"key": m.key, "label": m.label})).collect::<Vec<_>>(),
            }),
            focus: members.iter().any(|m| m.focus),
        });
    }
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &v.edges {
        if let (Some(a), Some(b)) = (key_of.get(e.from.as_str()), key_of.get(e.to.as_str())) {
            *counts.entry((a.clone(), b.clone())).or_default() += 1;
        }
    }
    let edges = counts
        .into_iter()
        .map(|((from, to), n)| ViewEdge { from, to, label: format!("{n} edges") })
        .collect();
    View { title: v.title.clone(), nodes, edges }
}

/// The page.
pub fn page(full: &View) -> Result<String> {
    let collapsed = full.nodes.len() > COLLAPSE_ABOVE;
    let v = if collapsed { collapse(full) } else { full.clone() };
    let min_rank = v.nodes.iter().map(|n| n.rank).min().unwrap_or(0);
    let mut rows: BTreeMap<i32, i32> = BTreeMap::new();
    let mut at: BTreeMap<&str, (i32, i32)> = BTreeMap::new();
    for n in &v.nodes {
        let row = rows.entry(n.rank).or_default();
        at.insert(n.key.as_str(), ((n.rank - min_rank) * COLUMN + 20, *row * ROW + 20));
        *row += 1;
    }
    let width = at.values().map(|(x, _)| x + BOX_W + 40).max().unwrap_or(400);
    let height = at.values().map(|(_, y)| y + BOX_H + 40).max().unwrap_or(200);
    let mut svg = format!(
        "<svg id=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" data-width=\"{width}\" data-height=\"{height}\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>\n"
    );
    for e in &v.edges {
        let (Some((x1, y1)), Some((x2, y2))) = (at.get(e.from.as_str()), at.get(e.to.as_str()))
        else {
            continue;
        };
        let _ = writeln!(
            svg,
            "<path class=\"edge\" marker-end=\"url(#arrow)\" d=\"M{} {} C{} {} {} {} {} {}\"><title>{}</title></path>",
            x1 + BOX_W,
            y1 + BOX_H / 2,
            x1 + BOX_W + 40,
            y1 + BOX_H / 2,
            x2 - 40,
            y2 + BOX_H / 2,
            x2,
            y2 + BOX_H / 2,
            escape(&e.label)
        );
    }
    let mut data = Vec::with_capacity(full.nodes.len());
    for (i, n) in v.nodes.iter().enumerate() {
        let (x, y) = at[n.key.as_str()];
        let _ = writeln!(
            svg,
            "<g class=\"node kind-{}{}\" data-index=\"{i}\" transform=\"translate({x} {y})\"><rect width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"6\"/><text x=\"8\" y=\"20\">{}</text></g>",
            class(&n.kind),
            if n.focus { " focus" } else { "" },
            escape(&truncate(&n.label, 34))
        );
        data.push(serde_json::json!({"key": n.key, "label": n.label, "details": n.details}));
    }
    svg.push_str("</svg>");
    // Search covers every node of the full graph, collapsed or not.
    let search: Vec<serde_json::Value> = full
        .nodes
        .iter()
        .map(|n| {
            let drawn =
                if collapsed { format!("group:{}:{}", n.rank, n.group) } else { n.key.clone() };
            serde_json::json!({"key": n.key, "label": n.label, "drawn": drawn})
        })
        .collect();
    let graph = serde_json::json!({"nodes": data, "search": search, "collapsed": collapsed});
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>{STYLE}</style></head>\n<body data-nodes=\"{count}\" data-collapsed=\"{collapsed}\">\n<header><strong>{title}</strong> <input id=\"search\" type=\"search\" placeholder=\"search id or name\" autocomplete=\"off\"> <span id=\"found\"></span> <span class=\"hint\">{count} nodes{note} · drag to pan, wheel to zoom, click for details</span></header>\n<main>{svg}<aside id=\"details\"><pre id=\"details-text\">click a node</pre></aside></main>\n<script type=\"application/json\" id=\"data\">{json}</script>\n<script>{SCRIPT}</script>\n</body></html>\n",
        title = escape(&v.title),
        count = full.nodes.len(),
        note = if collapsed { ", collapsed by step" } else { "" },
        json = script_json(&graph)?,
    ))
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

const STYLE: &str = "body{margin:0;font:13px system-ui,sans-serif}header{padding:6px 10px;border-bottom:1px solid #ccc}\
main{display:flex;height:calc(100vh - 40px)}svg{flex:1;cursor:grab;background:#fafafa}aside{width:30%;overflow:auto;border-left:1px solid #ccc}\
pre{margin:8px;white-space:pre-wrap;word-break:break-all}.node rect{fill:#fff;stroke:#667;stroke-width:1}.node text{font:12px monospace;pointer-events:none}\
.node.focus rect{stroke:#c20;stroke-width:3}.node.hit rect{fill:#ffe58a}.node.selected rect{fill:#cde}.edge{fill:none;stroke:#99a;stroke-width:1.2}\
.kind-metric rect{fill:#eef6ff}.kind-data rect{fill:#effbef}.kind-config rect{fill:#fff5e6}.kind-file_ref rect{fill:#f4eefc}\
.kind-failed rect{fill:#fde2e2}.kind-completed rect{fill:#e8f7e8}.kind-skipped rect{fill:#eee}.hint{color:#777}";

const SCRIPT: &str = r#"(function(){
var data=JSON.parse(document.getElementById('data').textContent);
var svg=document.getElementById('graph');
var w=+svg.dataset.width,h=+svg.dataset.height,vb={x:0,y:0,w:w,h:h};
function apply(){svg.setAttribute('viewBox',vb.x+' '+vb.y+' '+vb.w+' '+vb.h);}
svg.addEventListener('wheel',function(e){e.preventDefault();var k=e.deltaY>0?1.15:1/1.15;
var r=svg.getBoundingClientRect(),px=vb.x+vb.w*(e.clientX-r.left)/r.width,py=vb.y+vb.h*(e.clientY-r.top)/r.height;
vb.w*=k;vb.h*=k;vb.x=px-(px-vb.x)*k;vb.y=py-(py-vb.y)*k;apply();},{passive:false});
var drag=null;svg.addEventListener('mousedown',function(e){drag={x:e.clientX,y:e.clientY,vx:vb.x,vy:vb.y};});
window.addEventListener('mouseup',function(){drag=null;});
window.addEventListener('mousemove',function(e){if(!drag)return;var r=svg.getBoundingClientRect();
vb.x=drag.vx-(e.clientX-drag.x)*vb.w/r.width;vb.y=drag.vy-(e.clientY-drag.y)*vb.h/r.height;apply();});
var nodes=svg.querySelectorAll('g.node'),byKey={};
nodes.forEach(function(g){var n=data.nodes[+g.dataset.index];byKey[n.key]=g;
g.addEventListener('click',function(){nodes.forEach(function(o){o.classList.remove('selected');});g.classList.add('selected');
document.getElementById('details-text').textContent=n.label+'\n\n'+JSON.stringify(n.details,null,2);});});
function center(g){var t=g.transform.baseVal.consolidate().matrix;vb.x=t.e-vb.w/2+120;vb.y=t.f-vb.h/2+15;apply();}
function search(q){q=q.trim().toLowerCase();var hits=0,first=null;nodes.forEach(function(g){g.classList.remove('hit');});
if(q){data.search.forEach(function(s){if(s.key.toLowerCase().indexOf(q)>=0||s.label.toLowerCase().indexOf(q)>=0){
var g=byKey[s.drawn];if(g){g.classList.add('hit');hits++;if(!first)first=g;}}});}
document.getElementById('found').textContent=q?hits+' found':'';document.body.dataset.found=String(hits);if(first)center(first);return hits;}
var box=document.getElementById('search');box.addEventListener('input',function(){search(box.value);});
var m=/[#&]search=([^&]*)/.exec(location.hash);if(m){box.value=decodeURIComponent(m[1]);search(box.value);}
document.body.dataset.ready='1';
})();"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: usize, label: &str) -> ViewNode {
        ViewNode {
            key: format!("k{i}"),
            label: label.into(),
            rank: (i % 3) as i32,
            group: format!("step {}", i % 5),
            kind: "metric".into(),
            details: serde_json::json!({"name": label}),
            focus: i == 0,
        }
    }

    #[test]
    fn everything_from_the_lake_is_escaped() {
        let v = View {
            title: "<b>t</b>".into(),
            nodes: vec![node(0, "<script>alert(1)</script>"), node(1, "</script><img src=x>")],
            edges: vec![ViewEdge { from: "k0".into(), to: "k1".into(), label: "<i>".into() }],
        };
        let page = page(&v).unwrap();
        assert!(!page.contains("<script>alert"), "label escaped in SVG text and data");
        assert!(!page.contains("</script><img"), "no value closes the data island");
        assert!(page.contains("&lt;script&gt;alert(1)"), "shown as text");
        assert!(page.contains("\\u003cscript\\u003ealert(1)"), "kept, escaped, in the data");
        assert!(
            !page.contains("http://") || page.matches("http://").count() == 1,
            "only the SVG namespace"
        );
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    }

    #[test]
    fn ten_thousand_nodes_collapse_by_step_into_a_small_page() {
        let v = View {
            title: "big".into(),
            nodes: (0..10_000).map(|i| node(i, &format!("artifact {i}"))).collect(),
            edges: (1..10_000)
                .map(|i| ViewEdge {
                    from: format!("k{}", i - 1),
                    to: format!("k{i}"),
                    label: "e".into(),
                })
                .collect(),
        };
        let page = page(&v).unwrap();
        assert!(page.len() < 5_000_000, "{} bytes", page.len());
        assert!(page.contains("data-collapsed=\"true\"") && page.contains("data-nodes=\"10000\""));
        assert_eq!(page.matches("<g class=\"node").count(), 15, "3 ranks × 5 steps");
        assert!(page.contains("\"key\":\"k9999\""), "every node stays searchable");
    }
}
