//! `sluice ingest run | status | retry`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::ProgressStyle;
use sluice::ingest::{IngestConfig, IngestReport, Ingestor, Mode};
use sluice::lake::io::location::LakeRoot;

use crate::args::IngestCommand;
use crate::output::{count, print, text_table};

pub async fn run(command: IngestCommand, lake: Option<&LakeRoot>) -> anyhow::Result<()> {
    let load = |config: &Path| load_config(config, lake);
    match command {
        IngestCommand::Run { config, once: _, watch, workers, json } => {
            ingest(load(&config)?, watch, workers, json).await
        }
        IngestCommand::Transform { config, json } => {
            let ingestor = Ingestor::open(load(&config)?).await?;
            let reports = ingestor.transform().await?;
            if json {
                return print(&serde_json::to_string_pretty(&reports)?);
            }
            print(&transform_table(&reports))
        }
        IngestCommand::Dedup { table, config, dry_run, json } => {
            dedup(load(&config)?, &table, dry_run, json).await
        }
        IngestCommand::Status { config, json } => status(load(&config)?, json).await,
        IngestCommand::Demo { dir } => demo(&dir).await,
        IngestCommand::Retry { config, files, all_dead } => {
            retry(load(&config)?, &files, all_dead).await
        }
    }
}

/// `sluice ingest run`: what has landed (`--watch`: until Ctrl-C).
async fn ingest(
    mut config: IngestConfig,
    watch: bool,
    workers: Option<usize>,
    json: bool,
) -> anyhow::Result<()> {
    if let Some(w) = workers {
        config.ingest.workers = w.max(1);
    }
    let ingestor = Ingestor::open(config).await?;
    let mode = if watch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("stopping: finishing the files in flight (Ctrl-C again to abort)");
                flag.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        Mode::Watch(stop)
    } else {
        Mode::Once
    };
    let shown = !json && !crate::output::quiet();
    let bar = (shown && std::io::IsTerminal::is_terminal(&std::io::stderr())).then(|| {
        let bar = crate::output::bar(None);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar
    });
    let show = |r: &IngestReport| {
        if let Some(bar) = &bar {
            bar.set_message(format!(
                "{}, {}, {}, {}, {} dead",
                count(r.files, "file"),
                count(r.rows, "row"),
                count(r.commits, "commit"),
                count(r.duplicates, "duplicate"),
                r.dead
            ));
            bar.tick();
        }
    };
    let report = ingestor.run(mode, Some(&show)).await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let failed = transform_failures(&report.transform_errors);
    if json {
        print(&serde_json::to_string_pretty(&report)?)?;
        return failed;
    }
    let rate = report.rows as f64 / report.seconds.max(1e-9);
    print(&format!(
        "ingested {}, {} in {} ({:.2} s, {rate:.0} rows/s); {} skipped, {} retried, {} dead-lettered, {} rejected{}",
        count(report.files as u64, "file"),
        count(report.rows, "row"),
        count(report.commits as u64, "commit"),
        report.seconds,
        count(report.duplicates as u64, "duplicate"),
        report.retried,
        report.dead,
        count(report.rejected, "row"),
        [
            (report.changed > 0).then(|| {
                format!(
                    "; {} under names already ingested with other content (ingested as new data)",
                    count(report.changed as u64, "file")
                )
            }),
            (report.ledger_repaired > 0).then(|| {
                format!("; {} ledger rows recovered from table commits", report.ledger_repaired)
            }),
        ]
        .into_iter()
        .flatten()
        .collect::<String>()
    ))?;
    if report.transform_commits > 0 {
        print(&format!("{} transform commits", report.transform_commits))?;
    }
    failed
}

/// `sluice ingest dedup`: exact duplicate rows out of one table.
async fn dedup(config: IngestConfig, table: &str, dry_run: bool, json: bool) -> anyhow::Result<()> {
    let Some(spec) = sluice::lake::delta::held::ingestion_table(&config.lake, table).await? else {
        anyhow::bail!(
            "no ingestion table `{table}` in {} (looked in raw/, aggregate/, curated/)",
            config.lake
        );
    };
    let report = sluice::ingest::dedup::dedup(&config.lake, &spec, dry_run).await?;
    if json {
        return print(&serde_json::to_string_pretty(&report)?);
    }
    let outcome = match report.version {
        Some(v) => format!("removed; version {v}"),
        None if dry_run && report.duplicates > 0 => "found (dry run: nothing changed)".into(),
        None => "found; nothing to do".into(),
    };
    print(&format!(
        "{}: {} rows before, {} after; {} exact duplicates {outcome}; {} data files rewritten",
        report.table,
        report.rows_before,
        report.rows_after,
        report.duplicates,
        report.files_rewritten
    ))
}

/// `sluice ingest status`: queue, tables, transforms, dead letters.
async fn status(config: IngestConfig, json: bool) -> anyhow::Result<()> {
    let ingestor = Ingestor::open(config).await?;
    let status = ingestor.status().await?;
    if json {
        return print(&serde_json::to_string_pretty(&status)?);
    }
    let q = &status.queue;
    let mut out = format!(
        "queue ({}): {} waiting (oldest {:.0} s), {} in flight, {} dead\n",
        status.source, q.waiting, q.oldest_waiting_secs, q.in_flight, q.dead
    );
    let rows: Vec<Vec<String>> = status
        .tables
        .iter()
        .map(|(name, t)| {
            vec![
                name.clone(),
                t.files.to_string(),
                t.rows.to_string(),
                t.duplicates.to_string(),
                t.dead.to_string(),
                t.version.to_string(),
                t.last_commit.clone().unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&text_table(
        &["table", "files", "rows", "duplicates", "dead", "version", "last commit"],
        &rows,
    ));
    if !status.transforms.is_empty() {
        let rows: Vec<Vec<String>> = status
            .transforms
            .iter()
            .map(|(name, t)| {
                vec![
                    format!("{}/{name}", t.layer),
                    t.from.clone(),
                    or_dash(t.version),
                    or_dash(t.applied),
                    or_dash(t.upstream_version),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&text_table(
            &["transform", "from", "version", "applied upstream", "upstream at"],
            &rows,
        ));
    }
    for d in &status.dead_letters {
        out.push_str(&format!("\ndead: {}/{}: {}", d.table, d.name, d.reason));
    }
    print(&out)
}

/// `sluice ingest retry`: dead letters back on the queue.
async fn retry(config: IngestConfig, files: &[String], all_dead: bool) -> anyhow::Result<()> {
    if files.is_empty() && !all_dead {
        anyhow::bail!("name the dead letters to retry (table/file), or pass --all-dead");
    }
    let queue = sluice::ingest::Queue::open(&config.queue).await?;
    let moved = queue.retry_dead(files).await?;
    let missing: Vec<&String> = files.iter().filter(|f| !moved.contains(f)).collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "not dead letters: {}",
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    print(&format!("{} back on the {}", count(moved.len() as u64, "file"), queue.describe()))
}

/// Transform failures end a `run` with an error after its summary.
fn transform_failures(errors: &[String]) -> anyhow::Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    for e in errors {
        eprintln!("error: {e}");
    }
    anyhow::bail!(
        "{} failed; the raw rows are committed and the transforms catch up on the next run once fixed",
        count(errors.len() as u64, "transform")
    )
}

/// A version, or `-` for none.
fn or_dash(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn transform_table(reports: &[sluice::ingest::transform::TransformReport]) -> String {
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.from.clone(),
                match r.after {
                    Some(a) if r.version.is_some() => format!("{}..={}", a + 1, r.to),
                    None if r.version.is_some() => format!("0..={}", r.to),
                    _ => "up to date".to_owned(),
                },
                r.files_read.to_string(),
                r.rows_read.to_string(),
                r.rows_out.to_string(),
                r.inserted.to_string(),
                r.updated.to_string(),
                or_dash(r.version),
            ]
        })
        .collect();
    text_table(
        &[
            "transform",
            "from",
            "upstream versions",
            "files read",
            "rows read",
            "rows out",
            "inserted",
            "updated",
            "version",
        ],
        &rows,
    )
}

pub(super) const DEMO_SCHEMA: &str = "\
# Taxi-style trips. One YAML file per table; the file name is the table name.
columns:
  - { name: trip_id, type: int64, nullable: false }
  - { name: pickup_at, type: timestamp, nullable: false }
  - { name: zone, type: string, max_length: 24, nullable: false }
  - { name: passengers, type: int32 }
  - { name: fare, type: \"decimal(10,2)\", nullable: false }
  - { name: tip, type: \"decimal(10,2)\" }
primary_key: [trip_id]
";

const DEMO_CONFIG: &str = "\
lake = \"lake\"
schemas = \"schemas\"

[queue]
landing = \"landing\"
settle_ms = 0
max_attempts = 1

[ingest]
workers = 2

# raw/trips -> aggregate/zone_days: per day and zone, each batch of new trips
[[transform]]
name = \"zone_days\"
layer = \"aggregate\"
from = \"raw/trips\"
sql = \"\"\"
SELECT CAST(pickup_at AS DATE) AS day, zone, count(*) AS trips,
       sum(fare) AS revenue, sum(tip) AS tips
FROM trips GROUP BY 1, 2\"\"\"
partition_by = [\"day\"]

# aggregate/zone_days -> curated/trips_daily: running totals, upserted by key
[[transform]]
name = \"trips_daily\"
layer = \"curated\"
from = \"aggregate/zone_days\"
sql = \"\"\"
SELECT day, zone, sum(trips) AS trips, sum(revenue) AS revenue, sum(tips) AS tips
FROM zone_days GROUP BY 1, 2\"\"\"
primary_key = [\"day\", \"zone\"]
on_match = { trips = \"target.trips + source.trips\", revenue = \"target.revenue + source.revenue\", tips = \"target.tips + source.tips\" }
";

const ZONES: [&str; 7] =
    ["Midtown", "Harlem", "SoHo", "Chelsea", "Astoria", "Flushing", "Williamsburg"];

/// `files` CSV files of `rows` trips each, deterministic.
pub(super) fn demo_trips(file: u64, rows: u64) -> String {
    let mut out = String::from("trip_id,pickup_at,zone,passengers,fare,tip\n");
    for r in 0..rows {
        let id = file * rows + r;
        let h = blake3::hash(&id.to_le_bytes());
        let b = h.as_bytes();
        let zone = ZONES[b[0] as usize % ZONES.len()];
        let cents = 500 + u64::from(u16::from_le_bytes([b[1], b[2]])) % 6000;
        let tip = cents * u64::from(b[3] % 25) / 100;
        out.push_str(&format!(
            "{id},2024-01-{:02}T{:02}:{:02}:00Z,{zone},{},{}.{:02},{}.{:02}\n",
            1 + b[4] % 28,
            b[5] % 24,
            b[6] % 60,
            1 + b[7] % 4,
            cents / 100,
            cents % 100,
            tip / 100,
            tip % 100
        ));
    }
    out
}

async fn demo(dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let landing = dir.join("landing/trips");
    std::fs::create_dir_all(&landing).with_context(|| format!("creating {}", landing.display()))?;
    std::fs::create_dir_all(dir.join("schemas"))?;
    std::fs::write(dir.join("schemas/trips.yaml"), DEMO_SCHEMA)?;
    let config_path = dir.join("lakehouse.toml");
    std::fs::write(&config_path, DEMO_CONFIG)?;
    let (files, rows) = (5u64, 1000u64);
    let config = IngestConfig::load(&config_path)?;
    let lake_root = config.lake.clone();
    let ingestor = Ingestor::open(config).await?;
    // Two waves: the second run's transforms read only the second wave.
    let mut report = IngestReport::default();
    for wave in [0..3, 3..files] {
        for f in wave {
            std::fs::write(landing.join(format!("trips-{f}.csv")), demo_trips(f, rows))?;
        }
        if report.files > 0 {
            // One bad file: a fare that is not a number.
            std::fs::write(
                landing.join("trips-bad.csv"),
                "trip_id,pickup_at,zone,passengers,fare,tip\n999999,2024-01-05T10:00:00Z,SoHo,1,twelve,0\n",
            )?;
        }
        let done = ingestor.run(Mode::Once, None).await?;
        transform_failures(&done.transform_errors)?;
        report.files += done.files;
        report.rows += done.rows;
        report.commits += done.commits;
        report.dead += done.dead;
        report.transform_commits += done.transform_commits;
        report.seconds += done.seconds;
    }
    let lake = sluice::Lake::open(&lake_root).await?;
    let query = |sql: &'static str| {
        let lake = &lake;
        async move {
            let out = lake.sql(sql).execute().await?;
            anyhow::Ok(sluice::query::format::render(
                &out.batches,
                sluice::query::OutputFormat::Table,
            )?)
        }
    };
    let counts = query(
        "SELECT (SELECT count(*) FROM trips) AS raw_trips, (SELECT count(*) FROM zone_days) AS aggregate_zone_days, (SELECT count(*) FROM trips_daily) AS curated_trips_daily",
    )
    .await?;
    let top = query(
        "SELECT day, zone, trips, revenue FROM trips_daily ORDER BY revenue DESC, day, zone LIMIT 5",
    )
    .await?;
    let dead = ingestor.queue().dead_letters().await?;
    let mut out = format!(
        "wrote {} (config), {} (schema) and {} files of trips into {}, in two waves\n\
         ingested {}, {} in {}, {:.2} s; {} dead-lettered; {} transform commits\n",
        config_path.display(),
        dir.join("schemas/trips.yaml").display(),
        files + 1,
        landing.display(),
        count(report.files, "file"),
        count(report.rows, "row"),
        count(report.commits, "commit"),
        report.seconds,
        report.dead,
        report.transform_commits
    );
    for d in &dead {
        out.push_str(&format!("  dead letter {}/{}: {}\n", d.table, d.name, d.reason));
    }
    out.push_str(&format!("\nraw -> aggregate -> curated:\n{counts}\n"));
    out.push_str(&format!("\ntop 5 curated rows by revenue:\n{top}\n"));
    out.push_str(&format!(
        "\nnext:\n  sluice ingest status --config {c}\n  sluice --lake {l} sql \"SELECT * FROM trips_daily ORDER BY day, zone\"\n  sluice --lake {l} sql \"SELECT * FROM ingest_ledger\"\n  drop more files into {d} and run: sluice ingest run --config {c} --watch\n",
        c = config_path.display(),
        l = lake_root,
        d = landing.display()
    ));
    print(out.trim_end())
}

/// Load an ingestion config; a lake given by `--lake` or `SLUICE_LAKE` must
/// be the one the config names (never silently ignored).
fn load_config(path: &Path, lake: Option<&LakeRoot>) -> anyhow::Result<IngestConfig> {
    let config = IngestConfig::load(path)?;
    if let Some(given) = lake {
        let same = |root: &LakeRoot| match root {
            LakeRoot::Local(p) => LakeRoot::Local(
                std::path::absolute(p).map(|a| a.canonicalize().unwrap_or(a)).unwrap_or(p.clone()),
            ),
            store => store.clone(),
        };
        if same(given) != same(&config.lake) {
            anyhow::bail!(
                "--lake (or SLUICE_LAKE) names {}, but {} names the lake {}: `sluice ingest` \
                 writes the lake its config names; drop --lake / unset SLUICE_LAKE, or change \
                 `lake` in the config",
                given,
                path.display(),
                config.lake
            );
        }
    }
    Ok(config)
}
