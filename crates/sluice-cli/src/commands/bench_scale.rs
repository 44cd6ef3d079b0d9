//! `sluice bench lineage` and `sluice bench maintenance`: costs that must
//! stay flat as a lake grows.
//!
//! - lineage: a layered derivation graph (every artifact of layer l > 0 made
//!   from two of layer l-1 by one execution: 2 artifact edges + 3 execution
//!   edges) written straight into the provenance tables in large commits;
//!   then the lineage of artifacts of the last layer, depth 5, each walked
//!   by a fresh `sluice lineage` process (time and peak RSS), against the
//!   baseline of one SQL lookup that scans the whole edge table.
//! - maintenance: a lake filled by many small commits; a staged workload
//!   committed into it, a partition-pruned query; then `compact`; then the
//!   same measurements again, with the ratios after / before.

use std::path::Path;
use std::time::Instant;

use anyhow::bail;
use deltalake::arrow::record_batch::RecordBatch;
use sluice::Lake;
use sluice::artifact::arrow_convert::build_array;
use sluice::artifact::value::FieldValue;
use sluice::lake::LakeRoot;
use sluice::lake::append::Append;
use sluice::lake::delta::table;
use sluice::lake::layout::{self, TableSpec};

use super::bench_load::{peak_of, sluice_process};
use super::bench_results::Figure;
use crate::args::Workload;
use crate::output::print;

/// Artifacts per generated commit.
const CHUNK: u64 = 50_000;

fn id(layer: u64, i: u64) -> String {
    blake3::hash(format!("lineage-bench:{layer}:{i}").as_bytes()).to_hex()[..32].to_owned()
}

fn run_id(layer: u64, i: u64) -> String {
    blake3::hash(format!("lineage-bench-run:{layer}:{i}").as_bytes()).to_hex()[..32].to_owned()
}

fn parents(i: u64, width: u64) -> [u64; 2] {
    [(i.wrapping_mul(7919) + 1) % width, (i.wrapping_mul(104_729) + 3) % width]
}

/// One batch in a table's schema; `value(column, row)` gives each cell.
pub(super) async fn batch(
    root: &LakeRoot,
    spec: &TableSpec,
    rows: usize,
    value: impl Fn(&str, usize) -> FieldValue,
) -> anyhow::Result<RecordBatch> {
    let handle = table::open(root, spec).await?;
    let schema = table::arrow_schema(&handle, spec)?;
    let mut columns = Vec::new();
    for field in schema.fields() {
        let values: Vec<FieldValue> = (0..rows).map(|r| value(field.name(), r)).collect();
        columns.push(build_array(&spec.name, field, values.iter())?);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Write layer `layer` (`from..to`) of the graph: index rows, and for
/// layers > 0 the edges from their parents.
async fn write_layer(
    root: &Path,
    layer: u64,
    from: u64,
    to: u64,
    width: u64,
) -> anyhow::Result<()> {
    let n = (to - from) as usize;
    let s = |t: &str| FieldValue::String(t.to_owned());
    let root = &LakeRoot::from(root);
    let index = batch(root, &layout::index_table(), n, |c, r| match c {
        "artifact_id" => FieldValue::String(id(layer, from + r as u64)),
        "artifact_type" => s("metric"),
        "origin_step_number" => FieldValue::Int(layer as i64),
        "metadata" => s("{}"),
        _ => FieldValue::Null,
    })
    .await?;
    Append::new(root, &layout::index_table(), vec![index]).execute().await?;
    if layer == 0 {
        return Ok(());
    }
    let edge = |r: usize| {
        let child = from + (r / 2) as u64;
        (child, parents(child, width)[r % 2])
    };
    let artifact_edges = batch(root, &layout::artifact_edges_table(), 2 * n, |c, r| {
        let (child, parent) = edge(r);
        match c {
            "execution_run_id" => FieldValue::String(run_id(layer, child)),
            "source_artifact_id" => FieldValue::String(id(layer - 1, parent)),
            "target_artifact_id" => FieldValue::String(id(layer, child)),
            "source_artifact_type" | "target_artifact_type" => s("metric"),
            "source_role" => s("in"),
            "target_role" => s("out"),
            "step_boundary" => FieldValue::Bool(true),
            _ => FieldValue::Null,
        }
    })
    .await?;
    Append::new(root, &layout::artifact_edges_table(), vec![artifact_edges]).execute().await?;
    let execution_edges = batch(root, &layout::execution_edges_table(), 3 * n, |c, r| {
        let child = from + (r / 3) as u64;
        let (direction, artifact) = match r % 3 {
            2 => ("output", id(layer, child)),
            k => ("input", id(layer - 1, parents(child, width)[k])),
        };
        match c {
            "execution_run_id" => FieldValue::String(run_id(layer, child)),
            "direction" => s(direction),
            "role" => s(if direction == "output" { "out" } else { "in" }),
            "artifact_id" => FieldValue::String(artifact),
            _ => FieldValue::Null,
        }
    })
    .await?;
    Append::new(root, &layout::execution_edges_table(), vec![execution_edges]).execute().await?;
    Ok(())
}

/// `sluice bench lineage`.
pub async fn lineage(
    root: &Path,
    edges: u64,
    layers: u64,
    samples: u64,
) -> anyhow::Result<Vec<Figure>> {
    let lake = Lake::open(root).await?;
    let layers = layers.max(6);
    let width = (edges / 5 / layers).max(2);
    let present: u64 =
        super::scalar(&lake, "SELECT count(*) FROM artifact_edges").await?.parse()?;
    let started = Instant::now();
    if present == 0 {
        for layer in 0..=layers {
            let mut from = 0;
            while from < width {
                let to = (from + CHUNK).min(width);
                write_layer(root, layer, from, to, width).await?;
                from = to;
            }
        }
    } else if present != 2 * width * layers {
        bail!(
            "`sluice bench lineage` needs an empty lake, or one it built with the same --edges and --layers (use --lake with a new directory)"
        );
    }
    let built = started.elapsed().as_secs_f64();
    let lake = Lake::open(root).await?;
    let total_edges: u64 =
        super::scalar(&lake, "SELECT count(*) FROM artifact_edges").await?.parse()?;
    let execution_edges: u64 =
        super::scalar(&lake, "SELECT count(*) FROM execution_edges").await?.parse()?;
    let mut lines = vec![
        format!(
            "workload: {} layers x {width} artifacts, each derived from 2 of the layer before: {total_edges} artifact edges + {execution_edges} execution edges = {} edges; lineage --up --depth 5 of {samples} artifacts of the last layer, each in a fresh process",
            layers + 1,
            total_edges + execution_edges
        ),
        if present == 0 {
            format!("built in {built:.1} s")
        } else {
            "reused the graph already in the lake".into()
        },
    ];
    let mut times = Vec::new();
    let mut peaks = Vec::new();
    let mut nodes = 0;
    for k in 0..samples.max(1) {
        let target = id(layers, (k * 7_777) % width);
        let clock = Instant::now();
        let args = [&target, "--up", "--depth", "5", "--format", "json"].map(std::ffi::OsStr::new);
        let out = sluice_process(root, "lineage", &args)?;
        let secs = clock.elapsed().as_secs_f64();
        let graph: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        nodes = graph["nodes"].as_object().map_or(0, serde_json::Map::len);
        times.push(secs * 1000.0);
        peaks.push(peak_of(&out.stderr));
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    // The walk alone, in this process (a freshly opened lake each time).
    let mut walks = Vec::new();
    for k in 0..samples.max(1) {
        let target: sluice::ArtifactId = id(layers, (k * 7_777) % width).parse()?;
        let fresh = Lake::open(root).await?;
        let clock = Instant::now();
        fresh
            .lineage(target)
            .with_direction(sluice::lineage::Direction::Up)
            .with_depth(5)
            .execute()
            .await?;
        walks.push(clock.elapsed().as_secs_f64() * 1000.0);
    }
    walks.sort_by(f64::total_cmp);
    let walk = walks[walks.len() / 2];
    let peak = peaks.iter().copied().fold(0.0, f64::max);
    // Baseline: one level of the same walk as a SQL scan of the whole table.
    let target = id(layers, 0);
    let clock = Instant::now();
    super::scalar(
        &lake,
        &format!("SELECT count(*) FROM artifact_edges WHERE target_artifact_id = '{target}'"),
    )
    .await?;
    let scan_ms = clock.elapsed().as_secs_f64() * 1000.0;
    lines.push(format!(
        "lineage, depth 5 ({nodes} nodes): median {walk:.0} ms for the walk in-process; {median:.0} ms per `sluice lineage` process (start, open, walk, print), peak RSS {peak:.0} MiB"
    ));
    lines.push(format!(
        "baseline: one level as a SQL scan of the whole edge table: {scan_ms:.0} ms; ratio walk (5 levels) / one full scan = {:.2}",
        walk / scan_ms
    ));
    print(&lines.join("\n"))?;
    let what = super::bench_load::workload(&lines[0]);
    Ok(vec![
        Figure::new("lineage", what, "lineage depth 5, in-process walk", walk, "ms")
            .against("one full SQL scan of the edge table", walk / scan_ms),
        Figure::new("lineage", what, "lineage depth 5, one process", median, "ms"),
        Figure::new("lineage", what, "peak RSS of a lineage process", peak, "MiB"),
    ])
}

/// `sluice bench maintenance`.
pub async fn maintenance(
    root: &Path,
    workload: &Workload,
    existing: u64,
    commit_size: u64,
    workers: u64,
) -> anyhow::Result<Vec<Figure>> {
    let lake = Lake::open(root).await?;
    let started = Instant::now();
    super::bench_load::fill(&lake, existing, commit_size, 0).await?;
    let mut lines = vec![
        format!(
            "workload: a lake of {existing} metrics written in commits of {commit_size} over 10 steps; then commit {} staged executions x {} artifacts (seeded, new content) and count step 3, before and after `sluice compact`",
            workload.executions, workload.artifacts_per_execution
        ),
        format!("filled in {:.1} s", started.elapsed().as_secs_f64()),
    ];
    let pruned = "SELECT count(DISTINCT artifact_id) FROM metrics WHERE origin_step_number = 3";
    let mut before: Option<(f64, f64)> = None;
    let mut figures = Vec::new();
    for (round, seed) in [("uncompacted", workload.seed), ("compacted", workload.seed + 1_000_003)]
    {
        if round == "compacted" {
            let clock = Instant::now();
            let reports = sluice::maintenance::compact::compact(
                &lake,
                &sluice::maintenance::CompactOptions::default(),
            )
            .await?;
            let (fb, fa): (u64, u64) =
                reports.iter().fold((0, 0), |(b, a), r| (b + r.files_before, a + r.files_after));
            lines.push(format!(
                "compact: {fb} → {fa} files in {:.1} s",
                clock.elapsed().as_secs_f64()
            ));
        }
        let w = Workload { seed, ..workload.clone() };
        super::bench_load::stage(&root.into(), &w, workers).await?;
        let report = lake.commit().execute().await?;
        let commit = report.duration.as_secs_f64();
        let clock = Instant::now();
        super::scalar(&lake, pruned).await?;
        let query = clock.elapsed().as_secs_f64();
        lines.push(format!(
            "{round}: commit {commit:.3} s ({} runs); partition-pruned query {:.0} ms",
            report.runs_committed,
            query * 1000.0
        ));
        match before {
            None => before = Some((commit, query)),
            Some((c, q)) => {
                lines.push(format!(
                    "ratio compacted / uncompacted (baseline): commit {:.2}, query {:.2}",
                    commit / c,
                    query / q
                ));
                let what = super::bench_load::workload(&lines[0]);
                figures.push(
                    Figure::new("maintenance", what, "commit after compaction", commit, "s")
                        .against("the same commit before compaction", commit / c),
                );
                figures.push(
                    Figure::new(
                        "maintenance",
                        what,
                        "pruned query after compaction",
                        query * 1e3,
                        "ms",
                    )
                    .against("the same query before compaction", query / q),
                );
            }
        }
    }
    print(&lines.join("\n"))?;
    Ok(figures)
}
