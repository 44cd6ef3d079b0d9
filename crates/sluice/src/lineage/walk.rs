//! The level-by-level walk over the edge tables, reading only the files
//! that can hold each frontier.

use std::collections::{BTreeMap, BTreeSet};

use deltalake::DeltaTable;

use super::{Direction, LineageEdge, LineageGraph, LineageNode, Producer};
use crate::artifact::ArtifactId;
use crate::artifact::arrow_convert::read_value;
use crate::error::{Error, Result};
use crate::lake::delta::scan;
use crate::lake::delta::table;
use crate::lake::keys::key_filter::{self, Key};
use crate::lake::layout::{self, TableSpec};
use crate::lake::read::lookup::Lookup;
use crate::lake::{Lake, journal::snapshot::LakeSnapshot};

/// Walk from `root`.
pub(super) async fn walk(
    lake: &Lake,
    root: ArtifactId,
    direction: Direction,
    depth: usize,
) -> Result<LineageGraph> {
    let point = lake.read_point().await?;
    let edges_spec = layout::artifact_edges_table();
    let edges_table = lake.read_table(&edges_spec, &point).await?;
    let mut depths: BTreeMap<ArtifactId, i32> = BTreeMap::from([(root, 0)]);
    let mut edges: BTreeSet<LineageEdge> = BTreeSet::new();
    let mut truncated = false;
    for (up, sign) in [(true, -1), (false, 1)] {
        let wanted = match direction {
            Direction::Both => true,
            Direction::Up => up,
            Direction::Down => !up,
        };
        let Some(handle) = edges_table.as_ref().filter(|_| wanted) else { continue };
        let mut frontier = BTreeSet::from([root]);
        for level in 1..=depth + 1 {
            if frontier.is_empty() {
                break;
            }
            let found = edges_touching(lake, handle, &edges_spec, &frontier, up).await?;
            let mut next = BTreeSet::new();
            for edge in found {
                let other = if up { edge.source } else { edge.target };
                if level > depth {
                    truncated |= !depths.contains_key(&other);
                    continue;
                }
                if let std::collections::btree_map::Entry::Vacant(slot) = depths.entry(other) {
                    slot.insert(sign * level as i32);
                    next.insert(other);
                }
                edges.insert(edge);
            }
            frontier = next;
        }
    }
    let nodes = describe(lake, &point, &depths).await?;
    if !nodes.contains_key(&root) {
        return Err(Error::ArtifactNotFound(root.to_hex()));
    }
    let edges = edges
        .into_iter()
        .filter(|e| nodes.contains_key(&e.source) && nodes.contains_key(&e.target))
        .collect();
    Ok(LineageGraph { root, nodes, edges, truncated })
}

/// Artifact edges whose target (`up`) or source is in `ids`.
async fn edges_touching(
    lake: &Lake,
    handle: &DeltaTable,
    spec: &TableSpec,
    ids: &BTreeSet<ArtifactId>,
    up: bool,
) -> Result<Vec<LineageEdge>> {
    let column = if up { "target_artifact_id" } else { "source_artifact_id" };
    let ids: Vec<ArtifactId> = ids.iter().copied().collect();
    let planner = lake.id_files(handle, spec, Some(column)).await?;
    let mut out = Vec::new();
    for chunk in ids.chunks(scan::IN_LIST_CHUNK) {
        let Some(plan) = planner.plan(chunk) else { continue };
        let batches = Lookup::new(column, chunk.iter().map(ArtifactId::to_hex))
            .columns(&[
                "source_artifact_id",
                "target_artifact_id",
                "execution_run_id",
                "source_role",
                "target_role",
            ])
            .read_planned_in(handle, spec, &plan, planner.index())
            .await?;
        for batch in &batches {
            let text = |i| scan::text_column(batch, i, &spec.name);
            let (s, t, r, sr, tr) = (text(0)?, text(1)?, text(2)?, text(3)?, text(4)?);
            for row in 0..batch.num_rows() {
                out.push(LineageEdge {
                    source: s.value(row).parse()?,
                    target: t.value(row).parse()?,
                    execution_run_id: r.value(row).to_owned(),
                    source_role: sr.value(row).to_owned(),
                    target_role: tr.value(row).to_owned(),
                });
            }
        }
    }
    Ok(out)
}

/// Type, step, name and producer of every node (nodes the index does not
/// list are left out), all read at `point`: the index and content on one
/// side and the producers on the other, concurrently.
async fn describe(
    lake: &Lake,
    point: &LakeSnapshot,
    depths: &BTreeMap<ArtifactId, i32>,
) -> Result<BTreeMap<ArtifactId, LineageNode>> {
    let ids: Vec<ArtifactId> = depths.keys().copied().collect();
    let content = async {
        let located = lake.locate_at(point, &ids).await?;
        let artifacts = lake.get_located(point, &located).await?;
        Ok::<_, Error>((located, artifacts))
    };
    let ((located, artifacts), producers) =
        tokio::try_join!(content, producers(lake, point, &ids))?;
    Ok(depths
        .iter()
        .filter_map(|(id, depth)| {
            let entry = located.get(id)?;
            Some((
                *id,
                LineageNode {
                    id: *id,
                    artifact_type: entry.artifact_type.clone(),
                    step: entry.origin_step_number,
                    depth: *depth,
                    produced_by: producers.get(id).cloned(),
                    name: artifacts
                        .get(id)
                        .and_then(|a| a.field("original_name").as_str().map(str::to_owned)),
                },
            ))
        })
        .collect())
}

/// The (first successful) execution that output each of `ids`.
async fn producers(
    lake: &Lake,
    point: &LakeSnapshot,
    ids: &[ArtifactId],
) -> Result<BTreeMap<ArtifactId, Producer>> {
    let spec = layout::execution_edges_table();
    let Some(handle) = lake.read_table(&spec, point).await? else { return Ok(BTreeMap::new()) };
    let mut runs: BTreeMap<ArtifactId, Vec<String>> = BTreeMap::new();
    let planner = lake.id_files(&handle, &spec, Some("artifact_id")).await?;
    for chunk in ids.chunks(scan::IN_LIST_CHUNK) {
        let Some(plan) = planner.plan(chunk) else { continue };
        let batches = Lookup::new("artifact_id", chunk.iter().map(ArtifactId::to_hex))
            .columns(&["artifact_id", "execution_run_id", "direction"])
            .read_planned_in(&handle, &spec, &plan, planner.index())
            .await?;
        let output = crate::records::Direction::Output.as_str();
        for batch in &batches {
            let a = scan::text_column(batch, 0, &spec.name)?;
            let r = scan::text_column(batch, 1, &spec.name)?;
            let d = scan::text_column(batch, 2, &spec.name)?;
            for row in (0..batch.num_rows()).filter(|&row| d.value(row) == output) {
                runs.entry(a.value(row).parse()?).or_default().push(r.value(row).to_owned());
            }
        }
    }
    let all_runs: BTreeSet<String> = runs.values().flatten().cloned().collect();
    let executions = executions(lake, point, &all_runs).await?;
    Ok(runs
        .into_iter()
        .filter_map(|(id, runs)| {
            let mut candidates: Vec<&(Producer, bool, i64)> =
                runs.iter().filter_map(|r| executions.get(r)).collect();
            candidates.sort_by_key(|(_, success, start)| (!*success, *start));
            candidates.first().map(|(p, _, _)| (id, p.clone()))
        })
        .collect())
}

/// Executions by run id: (producer, success, start µs).
async fn executions(
    lake: &Lake,
    point: &LakeSnapshot,
    runs: &BTreeSet<String>,
) -> Result<BTreeMap<String, (Producer, bool, i64)>> {
    let spec = layout::executions_table();
    let mut out = BTreeMap::new();
    let Some(handle) = lake.read_table(&spec, point).await? else { return Ok(out) };
    let runs: Vec<&String> = runs.iter().collect();
    let active = table::active_files(&handle, &spec)?;
    let filters = match lake.root().local() {
        Some(root) => key_filter::read_all(&table::table_dir(root, &spec)),
        None => Default::default(),
    };
    for chunk in runs.chunks(scan::IN_LIST_CHUNK) {
        let plan = key_filter::plan(&active, &filters, chunk, |r| Key::of_text(r));
        let mut files: BTreeSet<String> = plan.uncovered.into_iter().collect();
        files.extend(plan.candidates.into_iter().flat_map(|c| c.files));
        if files.is_empty() {
            continue;
        }
        let files: Vec<String> = files.into_iter().collect();
        let batches = Lookup::new("execution_run_id", chunk.iter().map(|r| (*r).clone()))
            .columns(&[
                "execution_run_id",
                "operation_name",
                layout::STEP_COLUMN,
                "metadata",
                "success",
                "timestamp_start",
            ])
            .read(&handle, &spec, &files)
            .await?;
        for batch in &batches {
            let run = scan::text_column(batch, 0, &spec.name)?;
            let op = scan::text_column(batch, 1, &spec.name)?;
            for row in 0..batch.num_rows() {
                let value = |i: usize| read_value(&spec.name, batch.column(i).as_ref(), row);
                let step = value(2)?.as_int().unwrap_or_default();
                let metadata = value(3)?
                    .as_str()
                    .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok());
                let field = |name: &str| metadata.as_ref().and_then(|m| m.get(name)).cloned();
                let step_name = field("step_name").and_then(|s| s.as_str().map(str::to_owned));
                let success = value(4)?.as_bool().unwrap_or(false);
                let start = match value(5)? {
                    crate::artifact::FieldValue::TimestampMicros(t) => t,
                    _ => 0,
                };
                let producer = Producer {
                    execution_run_id: run.value(row).to_owned(),
                    operation: op.value(row).to_owned(),
                    step_name,
                    step_number: i32::try_from(step).unwrap_or_default(),
                    provenance: field("provenance"),
                };
                out.insert(run.value(row).to_owned(), (producer, success, start));
            }
        }
    }
    Ok(out)
}
