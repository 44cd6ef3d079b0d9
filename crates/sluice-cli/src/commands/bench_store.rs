//! `sluice bench lookup` and `sluice bench put`: the library calls every
//! worker and every small writer makes, in a lake of a given size.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use sluice::Lake;
use sluice::lake::LakeRoot;

use super::bench_load::{fill, median_p99};
use super::bench_results::Figure;
use crate::output::print;

/// The seed `lookup` fills with (its ids can be recomputed).
const FILL_SEED: u64 = 42;

/// `sluice bench lookup`.
pub async fn lookup(root: &Path, artifacts: u64, samples: u64) -> anyhow::Result<Vec<Figure>> {
    let lake = Lake::open(root).await?;
    let present: u64 = super::scalar(&lake, "SELECT count(*) FROM index").await?.parse()?;
    let mut lines = Vec::new();
    if present == 0 {
        let clock = Instant::now();
        fill(&lake, artifacts, 100_000, FILL_SEED).await?;
        lines.push(format!("filled in {:.1} s", clock.elapsed().as_secs_f64()));
    } else if present != artifacts {
        bail!(
            "`sluice bench lookup` needs an empty lake or one it filled with --artifacts {present} (use --lake with a new directory)"
        );
    }
    let what = format!(
        "one metric by id in a lake of {artifacts} metrics (10 steps, commits of 100000), {samples} lookups"
    );
    lines.insert(0, format!("workload: {what}"));
    let ids = (0..samples.max(1))
        .map(|k| {
            let i = (k.wrapping_mul(7919) + 13) % artifacts.max(1);
            Ok(sluice::Draft::metric(serde_json::json!({"fill": i, "seed": FILL_SEED}))?
                .with_step((i % 10) as i32)
                .finalize(lake.registry())?
                .id)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (mut fresh, mut warm, mut opened) = (Vec::new(), Vec::new(), Vec::new());
    let warm_lake = Lake::open(root).await?;
    for id in &ids {
        let clock = Instant::now();
        let lake = Lake::open(root).await?;
        let open = clock.elapsed();
        lake.get(*id).await?;
        opened.push(clock.elapsed().as_secs_f64() * 1e3);
        fresh.push((clock.elapsed() - open).as_secs_f64() * 1e3);
        let clock = Instant::now();
        warm_lake.get(*id).await?;
        warm.push(clock.elapsed().as_secs_f64() * 1e3);
    }
    let (fresh_median, fresh_p99) = median_p99(fresh);
    let (warm_median, warm_p99) = median_p99(warm);
    let (open_median, _) = median_p99(opened);
    lines.push(format!(
        "get on a lake opened for it: median {fresh_median:.1} ms, p99 {fresh_p99:.1} ms (open + get: {open_median:.1} ms)"
    ));
    lines.push(format!(
        "get on one long-lived lake: median {warm_median:.1} ms, p99 {warm_p99:.1} ms"
    ));
    lines.push(format!(
        "goal (issue 11, goal 3): ≤ 5 ms at 1M artifacts; ratio {:.2}",
        warm_median / 5.0
    ));
    print(&lines.join("\n"))?;
    Ok(vec![
        Figure::new("lookup", &what, "get by id, long-lived lake, median", warm_median, "ms")
            .against("goal: 5 ms", warm_median / 5.0)
            .goal("3"),
        Figure::new("lookup", &what, "get by id, freshly opened lake, median", fresh_median, "ms"),
        Figure::new("lookup", &what, "open lake + get by id, median", open_median, "ms"),
    ])
}

/// `sluice bench put`.
pub async fn put(root: &Path, count: u64, latencies: Option<&Path>) -> anyhow::Result<Vec<Figure>> {
    let lake = Lake::open(root).await?;
    let (ms, _) = puts(&lake, count).await?;
    let what = format!("{count} consecutive puts of one metric, library API, one process");
    write_latencies(latencies, &ms)?;
    small_commit_figures("put", "put of one metric", &what, ms)
}

/// `count` puts of one new metric each, one after the other: each one's
/// milliseconds, and the ids put. Checkpoints they started are finished.
async fn puts(lake: &Lake, count: u64) -> anyhow::Result<(Vec<f64>, Vec<sluice::ArtifactId>)> {
    let nonce = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    let (mut ms, mut ids) = (Vec::with_capacity(count as usize), Vec::new());
    for i in 0..count.max(1) {
        let artifact = sluice::Draft::metric(serde_json::json!({"put": i, "nonce": nonce}))?
            .with_step(1)
            .finalize(lake.registry())?;
        ids.push(artifact.id);
        let clock = Instant::now();
        lake.put(&[artifact]).await?;
        ms.push(clock.elapsed().as_secs_f64() * 1e3);
    }
    lake.settle().await;
    Ok((ms, ids))
}

/// `sluice bench put --lake s3://…` (or `az://…`): the puts to the store,
/// their requests counted in the seam, against the same puts to a lake on
/// local disk made for the run; then a read by id through a lake object
/// opened for it (in the same process: log entries it already read are
/// kept, so a new process makes more requests — `tests/cli/stores.rs`
/// counts those).
pub async fn put_in_store(root: &LakeRoot, count: u64) -> anyhow::Result<Vec<Figure>> {
    use sluice::lake::io::requests::counted_at;
    let LakeRoot::Store(store) = root else { bail!("`put_in_store` needs a lake in a store") };
    let url = store.url();
    let local_dir = std::env::temp_dir().join(format!(
        "sluice-bench-put-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    let (local, _) = Lake::init(local_dir.as_path()).await?;
    let (local_ms, _) = puts(&local, count).await?;
    drop(local);
    std::fs::remove_dir_all(&local_dir).ok();
    let lake = Lake::open(root).await?;
    let before = counted_at(url);
    let (ms, ids) = puts(&lake, count).await?;
    let put_requests = counted_at(url).since(&before);
    let before = counted_at(url);
    let opened = Lake::open(root).await?;
    opened.get(ids[ids.len() / 2]).await?;
    let get_requests = counted_at(url).since(&before);
    let per_put = put_requests.total() as f64 / count.max(1) as f64;
    let (median, p99) = median_p99(ms);
    let (local_median, _) = median_p99(local_ms);
    let what =
        format!("{count} consecutive puts of one metric to {store}, library API, one process");
    print(&format!(
        "workload: {what}\n\
         put: median {median:.1} ms, p99 {p99:.1} ms; the same puts to local disk: median {local_median:.1} ms (ratio {:.1})\n\
         requests: {per_put:.1} per put ({put_requests} for {count})\n\
         get by id through a lake object opened for it: {get_requests}",
        median / local_median.max(1e-9)
    ))?;
    Ok(vec![
        Figure::new("put", &what, "put of one metric to the store, median", median, "ms")
            .against("the same puts to local disk, this run", median / local_median.max(1e-9)),
        Figure::new("put", &what, "requests per put", per_put, "requests"),
        Figure::new(
            "put",
            &what,
            "requests of open + get by id (same process)",
            get_requests.total() as f64,
            "requests",
        ),
    ])
}

/// `sluice bench commit --lake s3://…` (or `az://…`): a workload staged
/// into the store by worker processes and committed from there, its
/// requests counted in the seam, against the same workload staged and
/// committed on local disk in the same run.
pub async fn commit_in_store(
    root: &LakeRoot,
    workload: &crate::args::Workload,
    workers: u64,
    chunk: usize,
) -> anyhow::Result<Vec<Figure>> {
    use sluice::lake::io::requests::counted_at;
    let LakeRoot::Store(store) = root else { bail!("`commit_in_store` needs a lake in a store") };
    let url = store.url();
    let local_dir = std::env::temp_dir().join(format!(
        "sluice-bench-commit-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    let local_root = LakeRoot::from(local_dir.as_path());
    let (local, _) = Lake::init(&local_root).await?;
    super::bench_load::stage(&local_root, workload, workers).await?;
    let local_report = local.commit().with_chunk_size(chunk).execute().await?;
    drop(local);
    std::fs::remove_dir_all(&local_dir).ok();

    let lake = Lake::open(root).await?;
    let stage_secs = super::bench_load::stage(root, workload, workers).await?;
    let before = counted_at(url);
    let report = lake.commit().with_chunk_size(chunk).execute().await?;
    let requests = counted_at(url).since(&before);
    if report.runs_committed != local_report.runs_committed {
        bail!(
            "the store's commit took {} executions, local disk's {}",
            report.runs_committed,
            local_report.runs_committed
        );
    }
    let (secs, local_secs) = (report.duration.as_secs_f64(), local_report.duration.as_secs_f64());
    let what = format!(
        "{}; staged by {workers} worker processes into {store}, committed by one process",
        super::bench_load::describe(workload, workers)
    );
    let ratio = secs / local_secs.max(1e-9);
    let per_execution = requests.total() as f64 / report.runs_committed.max(1) as f64;
    print(&format!(
        "workload: {what}
         stage into the store: {stage_secs:.3} s
         commit: {secs:.3} s; the same commit on local disk: {local_secs:.3} s (ratio {ratio:.2}, goal ≤ 3)
         requests: {requests} ({per_execution:.2} per execution, {} sequences)",
        report.sequences.len()
    ))?;
    Ok(vec![
        Figure::new("commit", &what, "commit from staging in the store", secs, "s")
            .against("the same commit on local disk, this run", ratio)
            .goal("3"),
        Figure::new("commit", &what, "requests per committed execution", per_execution, "requests"),
    ])
}

/// `sluice bench pipeline --lake s3://…` (or `az://…`): the bench
/// pipeline run cold on the store lake by local worker processes that stage
/// into the store, its requests counted, against the same run on a lake on
/// local disk in the same process.
pub async fn pipeline_in_store(
    root: &LakeRoot,
    executions: u64,
    workers: usize,
) -> anyhow::Result<Vec<Figure>> {
    use sluice::lake::io::requests::counted_at;
    let LakeRoot::Store(store) = root else { bail!("`pipeline_in_store` needs a lake in a store") };
    let url = store.url();
    let half = (executions / 2).max(1);
    let scratch = std::env::temp_dir().join(format!(
        "sluice-bench-pipeline-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&scratch)?;
    let file = scratch.join("bench-pipeline.toml");
    std::fs::write(&file, super::bench_load::pipeline_text(half))?;
    let operations = sluice::pipeline::Operations::linked()?;
    let run = |lake: Lake| {
        let (file, operations) = (file.clone(), operations.clone());
        async move { super::bench_load::run_pipeline_file(&lake, &file, &operations, workers).await }
    };
    let local_root = LakeRoot::from(scratch.join("lake"));
    let (local, _) = Lake::init(&local_root).await?;
    let (local_secs, local_ran) = Box::pin(run(local)).await?;
    let lake = Lake::open(root).await?;
    if super::scalar(&lake, "SELECT count(*) FROM executions").await? != "0" {
        bail!("`sluice bench pipeline` needs an empty lake (use --lake with a new prefix)");
    }
    let before = counted_at(url);
    let (secs, ran) = Box::pin(run(lake)).await?;
    let requests = counted_at(url).since(&before);
    std::fs::remove_dir_all(&scratch).ok();
    if ran != local_ran {
        bail!("the store's run dispatched {ran} executions, local disk's {local_ran}");
    }
    let ratio = secs / local_secs.max(1e-9);
    let what = format!(
        "3 steps, {} executions ({half} generate_data units of a 10-row table, {half} \
         compute_metrics units, 1 filter unit), {workers} local worker processes staging into \
         {store}; orchestrator requests counted",
        2 * half + 1
    );
    print(&format!(
        "workload: {what}\n\
         cold run: {secs:.2} s; the same run on local disk: {local_secs:.2} s (ratio {ratio:.2}, goal ≤ 3)\n\
         requests of the orchestrator (its workers' are their own): {requests}"
    ))?;
    Ok(vec![
        Figure::new("pipeline", &what, "cold run on the store", secs, "s")
            .against("the same run on local disk, this run", ratio)
            .goal("3"),
    ])
}

/// `sluice bench step-commit`: what a pipeline step of one unit commits,
/// staged as its worker stages it, committed by the library's committer.
pub async fn step_commit(
    root: &Path,
    count: u64,
    artifacts: usize,
    latencies: Option<&Path>,
) -> anyhow::Result<Vec<Figure>> {
    use sluice::staging::synthetic::{self, SyntheticSpec};
    use sluice::staging::{StagingWriter, SyncPolicy};
    let lake = Lake::open(root).await?;
    let writer = StagingWriter::new(
        sluice::staging::default_root(lake.filesystem("the store bench")?),
        lake.registry().clone(),
        SyncPolicy::Detect,
    );
    let seed = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
    let spec = SyntheticSpec {
        seed,
        operation: "bench_step".into(),
        artifacts_per_execution: artifacts,
        ..SyntheticSpec::default()
    };
    let mut ms = Vec::with_capacity(count as usize);
    for i in 0..count.max(1) {
        let (staged, _) = synthetic::execution(&spec, lake.registry(), i)?;
        writer.write(&staged)?;
        let runs = std::collections::HashSet::from([staged.execution.execution_run_id.clone()]);
        let clock = Instant::now();
        let report =
            lake.commit().with_step(Some(spec.step)).with_runs(Some(runs)).execute().await?;
        ms.push(clock.elapsed().as_secs_f64() * 1e3);
        if report.runs_committed != 1 {
            bail!("commit {i} committed {} executions, not 1", report.runs_committed);
        }
    }
    lake.settle().await;
    let what = format!(
        "{count} consecutive commits of one staged execution of {artifacts} metric(s), \
         library API, one process"
    );
    write_latencies(latencies, &ms)?;
    small_commit_figures("step-commit", "step commit of one execution", &what, ms)
}

/// Each commit's latency in milliseconds, one per line, in order.
fn write_latencies(path: Option<&Path>, ms: &[f64]) -> anyhow::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let text: String = ms.iter().map(|m| format!("{m:.3}\n")).collect();
    std::fs::write(path, text).with_context(|| format!("writing latencies to {}", path.display()))
}

/// Median, p99 and flatness of a run of small commits (goal 6).
fn small_commit_figures(
    bench: &'static str,
    figure: &str,
    what: &str,
    ms: Vec<f64>,
) -> anyhow::Result<Vec<Figure>> {
    let tenth = (ms.len() / 10).max(1);
    let (first, _) = median_p99(ms[..tenth].to_vec());
    let (last, _) = median_p99(ms[ms.len() - tenth..].to_vec());
    let (median, p99) = median_p99(ms);
    print(&format!(
        "workload: {what}\n{bench}: median {median:.1} ms, p99 {p99:.1} ms (p99/median {:.1})\n\
         flatness: median of the last tenth / the first tenth = {:.2}\n\
         goal (issue 11, goal 6): median ≤ 6 ms, p99 ≤ 3× median",
        p99 / median.max(1e-9),
        last / first.max(1e-9)
    ))?;
    Ok(vec![
        Figure::new(bench, what, &format!("{figure}, median"), median, "ms")
            .against("goal: 6 ms", median / 6.0)
            .goal("6"),
        Figure::new(bench, what, &format!("{figure}, p99"), p99, "ms")
            .against("the median (goal ≤ 3)", p99 / median.max(1e-9))
            .goal("6"),
        Figure::new(bench, what, &format!("{bench}, last tenth median"), last, "ms")
            .against("the first tenth's median", last / first.max(1e-9)),
    ])
}

fn spec_id(i: u64) -> String {
    blake3::hash(format!("cache-bench-spec:{i}").as_bytes()).to_hex()[..32].to_owned()
}

/// `sluice bench cache`: the execution-cache check of a step of `specs`
/// units (half of them cached) against a lake of `executions` executions.
pub async fn cache(root: &Path, executions: u64, specs: u64) -> anyhow::Result<Vec<Figure>> {
    use sluice::artifact::value::FieldValue;
    use sluice::lake::layout;
    let lake = Lake::open(root).await?;
    let present: u64 = super::scalar(&lake, "SELECT count(*) FROM executions").await?.parse()?;
    let spec = layout::executions_table();
    let mut lines = Vec::new();
    if present == 0 {
        let clock = Instant::now();
        let mut from = 0;
        while from < executions {
            let n = (executions - from).min(100_000);
            let s = |t: String| FieldValue::String(t);
            let rows = super::bench_scale::batch(&root.into(), &spec, n as usize, |column, r| {
                let i = from + r as u64;
                match column {
                    "execution_run_id" => s(format!("run-{i}")),
                    "execution_spec_id" => s(spec_id(i)),
                    "step_run_id" => s(format!("step-{}", i % 50)),
                    layout::STEP_COLUMN => FieldValue::Int((i % 50) as i64),
                    "operation_name" => s("bench".into()),
                    "params" | "metadata" => s("{}".into()),
                    "timestamp_start" | "timestamp_end" => FieldValue::TimestampMicros(i as i64),
                    "success" => FieldValue::Bool(!i.is_multiple_of(10)),
                    _ => FieldValue::Null,
                }
            })
            .await?;
            sluice::lake::append::Append::new(&root.into(), &spec, vec![rows]).execute().await?;
            from += n;
        }
        lines.push(format!("filled in {:.1} s", clock.elapsed().as_secs_f64()));
    } else if present != executions {
        bail!(
            "`sluice bench cache` needs an empty lake or one it filled with --executions {present} (use --lake with a new directory)"
        );
    }
    let what = format!(
        "{specs} unit specs, half of them with an execution in the lake, checked against {executions} executions (1 in 10 failed)"
    );
    lines.insert(0, format!("workload: {what}"));
    // Half the wanted specs exist in the lake, half are new.
    let wanted: std::collections::HashSet<String> =
        (0..specs)
            .map(|k| {
                if k % 2 == 0 {
                    spec_id(k * 7 % executions.max(1))
                } else {
                    spec_id(executions + k)
                }
            })
            .collect();
    let lake = Lake::open(root).await?;
    let clock = Instant::now();
    let hits = sluice::pipeline::cache::successful_runs(&lake, &wanted).await?;
    let secs = clock.elapsed().as_secs_f64();
    let expected = (0..specs)
        .filter(|k| k.is_multiple_of(2) && !(k * 7 % executions.max(1)).is_multiple_of(10))
        .map(|k| spec_id(k * 7 % executions.max(1)))
        .collect::<std::collections::HashSet<_>>()
        .len();
    anyhow::ensure!(
        hits.len() == expected,
        "the cache found {} of {expected} cached specs",
        hits.len()
    );
    lines.push(format!(
        "cache check: {secs:.3} s, {} of {} specs cached; goal (issue 11, goal 5): ≤ 0.5 s at 1M executions; ratio {:.2}",
        hits.len(),
        wanted.len(),
        secs / 0.5
    ));
    print(&lines.join("\n"))?;
    Ok(vec![
        Figure::new("cache", &what, "execution-cache check", secs, "s")
            .against("goal: 0.5 s", secs / 0.5)
            .goal("5"),
    ])
}
