//! `sluice bench scale`: a lake grown by a generator to a size, and at each
//! size asked for, what its users pay there: a step's commit (half its
//! artifacts already in the lake) by a separate committer process and that
//! process's peak RSS, a lookup by id, the execution-cache check, a
//! partition-pruned one-step aggregate and a lineage walk.
//!
//! The generator writes what pipelines write, through the lake's own
//! appends in commits of `--commit-size` artifacts (not timed, no staging):
//! metrics with their content ids (`{"scale": i, "v": x}`), partitioned by
//! step over `--steps` steps in blocks of [`BLOCK`] artifacts, their index
//! rows, one successful execution per [`PER_EXECUTION`] artifacts, an output
//! edge per artifact and, from the second block on, each execution deriving
//! its outputs from one artifact of the block before (an input edge, and an
//! artifact edge per output) — a lineage walk goes back a block per level.
//! The size reached is kept in [`MARKER`] in the lake, so a later run grows
//! the same lake further (1M and 10M in one run, then on to 100M); every
//! write de-duplicates, so a run killed mid-chunk resumes without a
//! duplicate.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use serde_json::json;
use sluice::artifact::value::FieldValue;
use sluice::lake::LakeRoot;
use sluice::lake::append::Append;
use sluice::lake::layout::{self, TableSpec};
use sluice::pipeline::worker_program;
use sluice::records::{Direction, ExecutionEdge, ExecutionRecord};
use sluice::staging::{StagedExecution, StagingWriter, SyncPolicy};
use sluice::{Artifact, ArtifactId, Lake};

use super::bench_load::median_p99;
use super::bench_results::Figure;
use crate::args::ScaleArgs;
use crate::output::print;

/// Artifacts each generated execution outputs.
const PER_EXECUTION: u64 = 5;
/// Consecutive artifacts of one step (100 executions' outputs).
const BLOCK: u64 = 500;
/// Where the generator records the size it reached.
const MARKER: &str = "bench-scale.json";
/// Artifacts per execution of the measured commit.
const COMMITTED_PER_EXECUTION: u64 = 3;

fn step_of(i: u64, steps: u64) -> i32 {
    ((i / BLOCK) % steps.max(1)) as i32
}

fn hex(domain: &str, n: u64) -> String {
    blake3::hash(format!("{domain}:{n}").as_bytes()).to_hex()[..32].to_owned()
}

fn spec_id(execution: u64) -> String {
    hex("scale-spec", execution)
}

/// Generated artifact `i`.
fn artifact(lake: &Lake, i: u64, steps: u64) -> sluice::Result<Artifact> {
    let v = (i.wrapping_mul(7919) % 1000) as f64 / 1000.0;
    sluice::Draft::metric(json!({"scale": i, "v": v}))?
        .with_step(step_of(i, steps))
        .finalize(lake.registry())
}

/// Generated artifacts `from..to`, finalized on every core.
fn artifacts(lake: &Lake, from: u64, to: u64, steps: u64) -> anyhow::Result<Vec<Artifact>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let per = (to - from).div_ceil(cores).max(1);
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cores)
            .map(|c| (from + c * per, (from + (c + 1) * per).min(to)))
            .filter(|(a, b)| a < b)
            .map(|(a, b)| {
                scope.spawn(move || {
                    (a..b).map(|i| artifact(lake, i, steps)).collect::<sluice::Result<Vec<_>>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    let mut out = Vec::with_capacity((to - from) as usize);
    for part in parts {
        out.extend(part.map_err(|_| anyhow::anyhow!("a generator thread panicked"))??);
    }
    Ok(out)
}

/// The artifact execution `e` derives its outputs from (the first output of
/// the execution one block before), if any.
fn parent(e: u64) -> Option<u64> {
    let back = BLOCK / PER_EXECUTION;
    (e >= back).then(|| (e - back) * PER_EXECUTION)
}

/// A batch of `spec`'s schema from rows of (column, value) cells.
async fn rows(
    root: &LakeRoot,
    spec: &TableSpec,
    rows: Vec<Vec<(&'static str, FieldValue)>>,
) -> anyhow::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let batch = super::bench_scale::batch(root, spec, rows.len(), |column, r| {
        rows[r].iter().find(|(c, _)| *c == column).map_or(FieldValue::Null, |(_, v)| v.clone())
    })
    .await?;
    Append::new(root, spec, vec![batch]).execute().await?;
    Ok(())
}

/// Grow the lake by generated artifacts `from..to` (whole executions).
async fn grow(lake: &Lake, from: u64, to: u64, steps: u64) -> anyhow::Result<()> {
    let made = artifacts(lake, from, to, steps)?;
    // De-duplicating writes throughout: a run killed mid-chunk is resumed
    // from the marker without writing any row twice.
    lake.put(&made).await?;
    let s = |t: &str| FieldValue::String(t.to_owned());
    let (mut executions, mut outputs, mut derived) = (Vec::new(), Vec::new(), Vec::new());
    for e in from / PER_EXECUTION..to / PER_EXECUTION {
        let run = hex("scale-run", e);
        let step = step_of(e * PER_EXECUTION, steps);
        executions.push(vec![
            ("execution_run_id", s(&run)),
            ("execution_spec_id", FieldValue::String(spec_id(e))),
            ("step_run_id", FieldValue::String(format!("scale-step-{step}"))),
            (layout::STEP_COLUMN, FieldValue::Int(step as i64)),
            ("operation_name", s("scale")),
            ("params", s("{}")),
            ("metadata", s("{}")),
            ("timestamp_start", FieldValue::TimestampMicros(e as i64)),
            ("timestamp_end", FieldValue::TimestampMicros(e as i64 + 1)),
            ("success", FieldValue::Bool(true)),
        ]);
        let source = parent(e).map(|p| artifact(lake, p, steps)).transpose()?;
        if let Some(source) = &source {
            outputs.push(vec![
                ("execution_run_id", s(&run)),
                ("direction", s(Direction::Input.as_str())),
                ("role", s("in")),
                ("artifact_id", FieldValue::String(source.id.to_hex())),
            ]);
        }
        for output in &made[(e * PER_EXECUTION - from) as usize..][..PER_EXECUTION as usize] {
            let target = output.id.to_hex();
            outputs.push(vec![
                ("execution_run_id", s(&run)),
                ("direction", s(Direction::Output.as_str())),
                ("role", s("out")),
                ("artifact_id", s(&target)),
            ]);
            if let Some(source) = &source {
                derived.push(vec![
                    ("execution_run_id", s(&run)),
                    ("source_artifact_id", FieldValue::String(source.id.to_hex())),
                    ("target_artifact_id", FieldValue::String(target)),
                    ("source_artifact_type", s("metric")),
                    ("target_artifact_type", s("metric")),
                    ("source_role", s("in")),
                    ("target_role", s("out")),
                    ("step_boundary", FieldValue::Bool(true)),
                ]);
            }
        }
    }
    let root = lake.root();
    rows(root, &layout::executions_table(), executions).await?;
    rows(root, &layout::execution_edges_table(), outputs).await?;
    rows(root, &layout::artifact_edges_table(), derived).await
}

/// The generated size recorded in the lake (0 for an empty lake).
async fn generated(lake: &Lake, steps: u64) -> anyhow::Result<u64> {
    let marker = lake.filesystem("the size bench")?.join(MARKER);
    match std::fs::read_to_string(&marker) {
        Ok(text) => {
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("reading {}", marker.display()))?;
            ensure!(
                v["steps"].as_u64() == Some(steps),
                "{} was grown over {} steps, not {steps}",
                marker.display(),
                v["steps"]
            );
            v["artifacts"].as_u64().with_context(|| format!("no size in {}", marker.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if super::scalar(lake, "SELECT count(*) FROM index").await? != "0" {
                bail!(
                    "`sluice bench scale` needs an empty lake or one it grew (use --lake with a new directory)"
                );
            }
            Ok(0)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", marker.display())),
    }
}

/// The sizes to measure at: as asked, else every power of ten from 1M
/// below `artifacts`, and `artifacts`.
fn sizes(options: &ScaleArgs) -> Vec<u64> {
    let mut at: Vec<u64> = if options.at.is_empty() {
        std::iter::successors(Some(1_000_000u64), |n| n.checked_mul(10))
            .take_while(|n| *n < options.artifacts)
            .chain([options.artifacts])
            .collect()
    } else {
        options.at.clone()
    };
    at.iter_mut().for_each(|n| *n = n.next_multiple_of(PER_EXECUTION));
    at.sort_unstable();
    at.dedup();
    at
}

/// `sluice bench scale`.
pub async fn scale(root: &Path, options: &ScaleArgs) -> anyhow::Result<Vec<Figure>> {
    let lake = Lake::open(root).await?;
    let mut size = generated(&lake, options.steps).await?;
    let what = format!(
        "a lake grown to each size by commits of {} generated metrics ({} steps, blocks of {BLOCK}, \
         one execution per {PER_EXECUTION}, provenance edges){}; at each: a commit of {} staged \
         executions x {COMMITTED_PER_EXECUTION} metrics (half already in the lake{}) by a `sluice commit` \
         process{}, {} lookups by id, a cache check of {} specs (half cached), a one-step aggregate, \
         {} lineage walks of depth 5",
        options.commit_size,
        options.steps,
        if options.compact { ", compacted before measuring" } else { "" },
        options.executions,
        if options.recent > 0 {
            format!(", drawn from its newest {}", options.recent)
        } else {
            String::new()
        },
        match options.commits {
            0 | 1 => String::new(),
            k => format!(" (median of {k}, each of its own executions)"),
        },
        options.samples,
        options.specs,
        options.samples,
    );
    let mut lines = vec![format!("workload: {what}")];
    let mut figures = Vec::new();
    let mut first: Option<Measured> = None;
    for target in sizes(options) {
        if target < size {
            lines.push(format!(
                "{target}: the lake already holds {size} generated artifacts; skipped"
            ));
            continue;
        }
        let clock = Instant::now();
        while size < target {
            let to = (size + options.commit_size.max(PER_EXECUTION)).min(target);
            let to = to.next_multiple_of(PER_EXECUTION);
            grow(&lake, size, to, options.steps).await?;
            size = to;
            let marker = root.join(MARKER);
            std::fs::write(&marker, json!({"artifacts": size, "steps": options.steps}).to_string())
                .with_context(|| format!("writing {}", marker.display()))?;
        }
        lines.push(format!(
            "grew to {size} artifacts in {:.1} s; lake on disk {:.2} GiB",
            clock.elapsed().as_secs_f64(),
            disk_bytes(root) as f64 / f64::from(1u32 << 30)
        ));
        let measured = measure(root, size, options, &mut lines).await?;
        figures.extend(measured.figures(&what, size, first.as_ref()));
        first.get_or_insert(measured);
    }
    print(&lines.join("\n"))?;
    Ok(figures)
}

/// Bytes under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => dirs.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// What one size measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    commit_ms_per_execution: f64,
    committer_rss_mib: f64,
    lookup_ms: f64,
    cache_s: f64,
    aggregate_ms: f64,
    lineage_ms: f64,
}

impl Measured {
    fn figures(&self, what: &str, size: u64, first: Option<&Measured>) -> Vec<Figure> {
        let at = |figure: &str| format!("{figure}, lake of {size} artifacts");
        let base = |name: &str, f: fn(&Measured) -> f64, value: f64, figure: Figure| match first {
            Some(m) => figure.against(format!("the same at the first size ({name})"), value / f(m)),
            None => figure,
        };
        vec![
            base(
                "commit",
                |m| m.commit_ms_per_execution,
                self.commit_ms_per_execution,
                Figure::new(
                    "scale",
                    what,
                    &at("commit per staged execution"),
                    self.commit_ms_per_execution,
                    "ms",
                ),
            )
            .goal("4"),
            Figure::new(
                "scale",
                what,
                &at("peak RSS of the committer"),
                self.committer_rss_mib,
                "MiB",
            )
            .against("goal: 2048 MiB", self.committer_rss_mib / 2048.0)
            .goal("7"),
            base(
                "lookup",
                |m| m.lookup_ms,
                self.lookup_ms,
                Figure::new(
                    "scale",
                    what,
                    &at("get by id, long-lived lake, median"),
                    self.lookup_ms,
                    "ms",
                ),
            )
            .goal("3"),
            base(
                "cache",
                |m| m.cache_s,
                self.cache_s,
                Figure::new("scale", what, &at("execution-cache check"), self.cache_s, "s"),
            )
            .goal("5"),
            Figure::new("scale", what, &at("one-step aggregate, median"), self.aggregate_ms, "ms")
                .against("goal: 100 ms", self.aggregate_ms / 100.0)
                .goal("8"),
            base(
                "lineage",
                |m| m.lineage_ms,
                self.lineage_ms,
                Figure::new("scale", what, &at("lineage depth 5, median"), self.lineage_ms, "ms"),
            )
            .goal("8"),
        ]
    }
}

/// Every measurement at `size`.
async fn measure(
    root: &Path,
    size: u64,
    options: &ScaleArgs,
    lines: &mut Vec<String>,
) -> anyhow::Result<Measured> {
    if options.compact {
        let lake = Lake::open(root).await?;
        let clock = Instant::now();
        let reports = sluice::maintenance::compact::compact(
            &lake,
            &sluice::maintenance::CompactOptions::default(),
        )
        .await?;
        let (before, after) =
            reports.iter().fold((0, 0), |(b, a), r| (b + r.files_before, a + r.files_after));
        lines.push(format!(
            "  compact: {before} → {after} files in {:.1} s",
            clock.elapsed().as_secs_f64()
        ));
    }
    // The commit is the figure most exposed to the machine (one process,
    // well under a second): with `--commits K`, K commits, each of its own
    // new executions, and their median (the peak RSS is the highest).
    let mut commits = Vec::new();
    for _ in 0..options.commits.max(1) {
        commits.push(commit(root, size, options, lines).await?);
    }
    let committer_rss_mib = commits.iter().map(|c| c.1).fold(0.0, f64::max);
    let mut times: Vec<f64> = commits.iter().map(|c| c.0).collect();
    times.sort_by(f64::total_cmp);
    let commit_ms_per_execution = times[times.len() / 2];
    if times.len() > 1 {
        let listed: Vec<String> = commits.iter().map(|c| format!("{:.4}", c.0)).collect();
        lines.push(format!(
            "  {} commits at {size}: {} ms per execution; median {commit_ms_per_execution:.4}",
            times.len(),
            listed.join(", ")
        ));
    }
    let lake = Lake::open(root).await?;
    let lookup_ms = lookups(&lake, size, options).await?;
    let cache_s = cache(&lake, size, options.specs).await?;
    let aggregate_ms = aggregate(&lake, size, options.steps).await?;
    let lineage_ms = lineage(&lake, size, options.steps, options.samples).await?;
    lines.push(format!(
        "  at {size}: commit {commit_ms_per_execution:.3} ms per execution (committer peak RSS \
         {committer_rss_mib:.0} MiB); get by id {lookup_ms:.1} ms; cache check {cache_s:.3} s; \
         one-step aggregate {aggregate_ms:.0} ms; lineage depth 5 {lineage_ms:.0} ms"
    ));
    Ok(Measured {
        commit_ms_per_execution,
        committer_rss_mib,
        lookup_ms,
        cache_s,
        aggregate_ms,
        lineage_ms,
    })
}

/// A pick of a generated artifact below `size`, spread over the lake.
fn pick(k: u64, salt: u64, size: u64) -> u64 {
    let h = blake3::hash(format!("scale-pick:{salt}:{k}").as_bytes());
    let mut x = [0u8; 8];
    x.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(x) % size.max(1)
}

/// Stage the measured workload and commit it with a `sluice commit`
/// process: (ms per execution, the process's peak RSS in MiB).
async fn commit(
    root: &Path,
    size: u64,
    options: &ScaleArgs,
    lines: &mut Vec<String>,
) -> anyhow::Result<(f64, f64)> {
    let lake = Lake::open(root).await?;
    let writer = StagingWriter::new(
        sluice::staging::default_root(root),
        lake.registry().clone(),
        SyncPolicy::Detect,
    );
    let step = options.steps as i32;
    // Runs and new content of this measurement only (the bench may measure
    // one size again).
    let nonce = chrono::Utc::now().timestamp_micros() as u64;
    let mut present = HashSet::new();
    let mut fresh = 0u64;
    // Where the metrics already in the lake come from: its newest
    // `--recent` artifacts, or all of it.
    let (oldest, span) = match options.recent {
        0 => (0, size),
        recent => (size.saturating_sub(recent), recent.min(size)),
    };
    let mut batch = Vec::new();
    for w in 0..options.executions {
        let run = hex(&format!("scale-commit-{size}-{nonce}"), w);
        let mut made = Vec::new();
        for j in 0..COMMITTED_PER_EXECUTION {
            let k = w * COMMITTED_PER_EXECUTION + j;
            made.push(if k.is_multiple_of(2) {
                let a = artifact(&lake, oldest + pick(k, size, span), options.steps)?;
                present.insert(a.id);
                a
            } else {
                fresh += 1;
                sluice::Draft::metric(json!({"scale-new": nonce, "w": w, "j": j}))?
                    .with_step(step)
                    .finalize(lake.registry())?
            });
        }
        batch.push(staged(run, step, made));
        if batch.len() == 100 || w + 1 == options.executions {
            writer.write_batch(&std::mem::take(&mut batch))?;
        }
    }
    let program = worker_program::current()?;
    let clock = Instant::now();
    let out = tokio::process::Command::from(program.command())
        .arg("--lake")
        .arg(root)
        .args(["commit", "--json"])
        .env("SLUICE_REPORT_PEAK_RSS", "1")
        .output()
        .await
        .context("running sluice commit")?;
    let wall = clock.elapsed().as_secs_f64();
    if std::env::var_os("SLUICE_LOG").is_some() {
        // The committer's log, when one was asked for.
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    ensure!(out.status.success(), "sluice commit failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let added = report["rows_added"]["index"].as_u64().unwrap_or(0);
    ensure!(
        added == fresh && report["runs_committed"].as_u64() == Some(options.executions),
        "the commit at {size} added {added} index rows for {} runs; expected {fresh} new artifacts \
         ({} already in the lake) for {} runs",
        report["runs_committed"],
        present.len(),
        options.executions
    );
    let secs = report["seconds"].as_f64().unwrap_or(wall);
    let rss = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("peak RSS MiB: ").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0);
    lines.push(format!(
        "  commit at {size}: {secs:.3} s in the committer ({wall:.3} s for the process), \
         {added} artifacts added, {} of the staged ones already in the lake",
        present.len()
    ));
    Ok((1000.0 * secs / options.executions.max(1) as f64, rss))
}

/// A staged execution outputting `made`.
fn staged(run: String, step: i32, made: Vec<Artifact>) -> StagedExecution {
    let execution_edges =
        made.iter().map(|a| ExecutionEdge::new(&run, Direction::Output, "scores", &a.id)).collect();
    StagedExecution {
        execution: ExecutionRecord {
            execution_run_id: run.clone(),
            execution_spec_id: format!("spec-{run}"),
            step_run_id: format!("scale-commit-step-{step}"),
            origin_step_number: step,
            operation_name: "scale_commit".into(),
            params: "{}".into(),
            timestamp_start: 1_764_000_000_000_000,
            timestamp_end: Some(1_764_000_000_000_500),
            worker_id: Some(format!("pid-{}", std::process::id())),
            compute_backend: Some("bench".into()),
            success: true,
            error: None,
            tool_output: None,
            metadata: "{}".into(),
        },
        artifacts: made,
        execution_edges,
        artifact_edges: Vec::new(),
    }
}

/// Median ms of `get` by id on one long-lived lake, each answer checked.
async fn lookups(lake: &Lake, size: u64, options: &ScaleArgs) -> anyhow::Result<f64> {
    // The first read opens the tables; it is not what a worker's reads cost.
    lake.get(artifact(lake, 0, options.steps)?.id).await?;
    let mut ms = Vec::new();
    for k in 0..options.samples.max(1) {
        let want = artifact(lake, pick(k, 1, size), options.steps)?;
        let clock = Instant::now();
        let got = lake.get(want.id).await?;
        ms.push(clock.elapsed().as_secs_f64() * 1e3);
        ensure!(
            got.field("content") == want.field("content"),
            "artifact {} read back changed",
            want.id
        );
    }
    Ok(median_p99(ms).0)
}

/// Seconds to check `specs` unit specs, half of them cached; the answer is
/// checked.
async fn cache(lake: &Lake, size: u64, specs: u64) -> anyhow::Result<f64> {
    let executions = size / PER_EXECUTION;
    let cached: HashSet<String> = (0..specs / 2).map(|k| spec_id(pick(k, 2, executions))).collect();
    let wanted: HashSet<String> = cached
        .iter()
        .cloned()
        .chain((specs / 2..specs).map(|k| hex("scale-spec-new", k)))
        .collect();
    let clock = Instant::now();
    let hits = sluice::pipeline::cache::successful_runs(lake, &wanted).await?;
    let secs = clock.elapsed().as_secs_f64();
    ensure!(
        hits.len() == cached.len() && cached.iter().all(|s| hits.contains_key(s)),
        "the cache found {} of the {} cached specs",
        hits.len(),
        cached.len()
    );
    Ok(secs)
}

/// Median ms of an aggregate over one step's metrics (pruned to its
/// partition); its row count is checked.
async fn aggregate(lake: &Lake, size: u64, steps: u64) -> anyhow::Result<f64> {
    let step = (steps / 3) as i32;
    let expected = (0..size.div_ceil(BLOCK))
        .filter(|b| step_of(b * BLOCK, steps) == step)
        .map(|b| (size - b * BLOCK).min(BLOCK))
        .sum::<u64>();
    let sql = format!(
        "SELECT count(*), avg(CAST(split_part(split_part(content, '\"v\":', 2), '}}', 1) AS DOUBLE)) \
         FROM metrics WHERE origin_step_number = {step}"
    );
    let mut ms = Vec::new();
    for _ in 0..5 {
        let clock = Instant::now();
        let row = super::scalar(lake, &sql).await?;
        ms.push(clock.elapsed().as_secs_f64() * 1e3);
        let count = row.split(',').next().unwrap_or_default();
        ensure!(
            count == expected.to_string(),
            "step {step} has {count} metrics, expected {expected}"
        );
    }
    Ok(median_p99(ms).0)
}

/// Median ms of lineage walks up, depth 5, from artifacts of the newest
/// blocks; each must reach 5 generations back.
async fn lineage(lake: &Lake, size: u64, steps: u64, samples: u64) -> anyhow::Result<f64> {
    let deep = 5 * BLOCK;
    if size < deep + BLOCK {
        return Ok(0.0);
    }
    let mut ms = Vec::new();
    for k in 0..samples.max(1) {
        let i = deep + pick(k, 3, size - deep);
        let id: ArtifactId = artifact(lake, i, steps).map(|a| a.id)?;
        let clock = Instant::now();
        let graph = lake
            .lineage(id)
            .with_direction(sluice::lineage::Direction::Up)
            .with_depth(5)
            .execute()
            .await?;
        ms.push(clock.elapsed().as_secs_f64() * 1e3);
        ensure!(graph.nodes.len() == 6, "lineage of {id} found {} nodes, not 6", graph.nodes.len());
    }
    Ok(median_p99(ms).0)
}
