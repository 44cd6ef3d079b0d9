//! `sluice lineage` and `sluice graph`.

use std::path::Path;

use sluice::Lake;
use sluice::lake::LakeRoot;
use sluice::lineage::{Direction, render};

use crate::output::print;

/// What `sluice lineage` was asked.
pub struct LineageRequest {
    pub id: String,
    pub direction: Direction,
    pub depth: usize,
    pub artifact_type: Option<String>,
    pub step: Option<i32>,
}

fn emit(text: &str, output: Option<&Path>) -> anyhow::Result<()> {
    match output {
        Some(path) => {
            std::fs::write(path, text)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!("wrote {} ({} bytes)", path.display(), text.len());
            Ok(())
        }
        None => print(text.trim_end()),
    }
}

pub async fn lineage(
    root: &LakeRoot,
    request: LineageRequest,
    format: &str,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let format: render::Format = format.parse()?;
    let lake = Lake::open(root).await?;
    let graph = lake
        .lineage(lake.resolve(&request.id).await?)
        .with_direction(request.direction)
        .with_depth(request.depth)
        .with_type(request.artifact_type)
        .with_step(request.step)
        .execute()
        .await?;
    emit(&render::lineage(&graph, format)?, output)
}

pub async fn graph(
    root: &LakeRoot,
    run: Option<&str>,
    format: &str,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let format: render::Format = format.parse()?;
    let lake = Lake::open(root).await?;
    let graph = sluice::lineage::graph::run_graph(&lake, run).await?;
    emit(&render::run(&graph, format)?, output)
}
