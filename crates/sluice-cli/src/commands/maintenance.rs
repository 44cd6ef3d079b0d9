//! `sluice history`, `restore`, `compact`, `vacuum` and `checkpoint`.

use indicatif::{ProgressBar, ProgressStyle};
use sluice::Lake;
use sluice::lake::LakeRoot;
use sluice::maintenance::{self, CompactOptions, RestoreOptions, VacuumOptions};
use sluice::progress::Progress;
use sluice::query::AsOf;

use crate::output::{count, print, text_table};

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// A bar over the tables of an operation, drawn on a terminal only (never
/// with `--json`); clear it before printing the summary.
fn table_bar(verb: &str, json: bool) -> anyhow::Result<(ProgressBar, Progress)> {
    let bar = if json { ProgressBar::hidden() } else { crate::output::bar(Some(0)) };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {verb} [{{bar:30}}] {{pos}}/{{len}} tables ({{elapsed}}) {{msg}}"
        ))?
        .progress_chars("=> "),
    );
    let shown = bar.clone();
    let progress = Progress::new(move |done, total, table| {
        if done == 0 {
            // Drawn from the first table on, not while the operation plans.
            shown.enable_steady_tick(std::time::Duration::from_millis(120));
        }
        shown.set_length(total as u64);
        shown.set_position(done as u64);
        shown.set_message(table.to_owned());
    });
    Ok((bar, progress))
}

pub async fn history(
    root: &LakeRoot,
    table: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    match table {
        None => {
            let versions = maintenance::history::lake_history(&lake, Some(limit)).await?;
            if json {
                return print(&serde_json::to_string_pretty(&versions)?);
            }
            let rows: Vec<Vec<String>> = versions
                .iter()
                .map(|v| {
                    let added: Vec<String> = v
                        .rows_added
                        .iter()
                        .filter(|(_, n)| **n > 0)
                        .map(|(t, n)| format!("{t} +{n}"))
                        .collect();
                    vec![
                        v.version.to_string(),
                        v.time.clone(),
                        v.runs.to_string(),
                        added.join(", "),
                    ]
                })
                .collect();
            print(&text_table(&["lake version", "completed", "runs", "rows added"], &rows))
        }
        Some(name) => {
            let versions = maintenance::history::table_history(&lake, name, Some(limit)).await?;
            if json {
                return print(&serde_json::to_string_pretty(&versions)?);
            }
            let rows: Vec<Vec<String>> = versions
                .iter()
                .map(|v| {
                    vec![
                        v.version.to_string(),
                        v.time.clone().unwrap_or_default(),
                        v.operation.clone().unwrap_or_default(),
                        v.sequence.map(|s| s.to_string()).unwrap_or_default(),
                    ]
                })
                .collect();
            print(&text_table(&["version", "time", "operation", "commit sequence"], &rows))
        }
    }
}

pub async fn compact(
    root: &LakeRoot,
    mut options: CompactOptions,
    json: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let (bar, progress) = table_bar("compacting", json)?;
    options.progress = progress;
    let reports = maintenance::compact::compact(&lake, &options).await;
    bar.finish_and_clear();
    let reports = reports?;
    if json {
        return print(&serde_json::to_string_pretty(&reports)?);
    }
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.table.clone(),
                format!("{} → {}", r.files_before, r.files_after),
                format!("{} → {}", mib(r.bytes_before), mib(r.bytes_after)),
                if r.zorder.is_empty() { "bin-packing".into() } else { r.zorder.join(",") },
                r.version.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
                format!("{:.2}", r.seconds),
            ]
        })
        .collect();
    let title = if options.dry_run { "(dry run: nothing rewritten)\n" } else { "" };
    let sum = |f: fn(&maintenance::CompactReport) -> u64| reports.iter().map(f).sum::<u64>();
    let retired = reports.iter().map(|r| r.sidecars_retired).sum::<usize>();
    let retired = match retired {
        0 => String::new(),
        n => format!("; {n} key sidecars of replaced files retired"),
    };
    print(&format!(
        "{title}{}compacted {}: {} → {} files, {} → {} MiB in {:.2}s{retired}",
        text_table(&["table", "files", "MiB", "z-order", "version", "seconds"], &rows),
        count(reports.len() as u64, "table"),
        sum(|r| r.files_before),
        sum(|r| r.files_after),
        mib(sum(|r| r.bytes_before)),
        mib(sum(|r| r.bytes_after)),
        reports.iter().map(|r| r.seconds).sum::<f64>(),
    ))
}

pub async fn vacuum(root: &LakeRoot, mut options: VacuumOptions, json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let (bar, progress) = table_bar("vacuuming", json)?;
    options.progress = progress;
    let report = maintenance::vacuum::vacuum(&lake, &options).await;
    bar.finish_and_clear();
    let report = report?;
    if json {
        return print(&serde_json::to_string_pretty(&report)?);
    }
    let verb = if report.dry_run { "would remove" } else { "removed" };
    let mut out = String::new();
    for (table, files) in &report.files {
        out.push_str(&format!("{table}: {verb} {} data files\n", files.len()));
        for f in files.iter().take(20) {
            out.push_str(&format!("  {f}\n"));
        }
    }
    out.push_str(&format!("sluice leftovers: {verb} {}\n", report.leftovers.len()));
    for f in report.leftovers.iter().take(20) {
        out.push_str(&format!("  {f}\n"));
    }
    let files: usize = report.files.iter().map(|(_, f)| f.len()).sum();
    out.push_str(&format!(
        "{verb} {files} data files ({} MiB) in {} tables and {} leftovers in {:.2}s",
        mib(report.bytes),
        report.files.len(),
        report.leftovers.len(),
        report.seconds
    ));
    print(out.trim_end())
}

pub async fn checkpoint(root: &LakeRoot, table: Option<&str>, json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let (bar, progress) = table_bar("checkpointing", json)?;
    let reports = maintenance::checkpoint(&lake, table, &progress).await;
    bar.finish_and_clear();
    let reports = reports?;
    if json {
        return print(&serde_json::to_string_pretty(&reports)?);
    }
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| vec![r.table.clone(), r.version.to_string(), r.logs_removed.to_string()])
        .collect();
    print(&text_table(&["table", "checkpoint at version", "expired logs removed"], &rows))
}

pub async fn restore(
    root: &LakeRoot,
    to: &str,
    dry_run: bool,
    force: bool,
    json: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let to = match AsOf::parse_for(to, "--to")? {
        AsOf::Tables(_) => anyhow::bail!(
            "--to `{to}`: restore takes a lake version or a time (one point for every table)"
        ),
        point => point.point(),
    };
    let (bar, progress) = table_bar("restoring", json)?;
    let report = maintenance::restore::restore(
        &lake,
        &RestoreOptions {
            to,
            dry_run,
            force,
            progress,
            hooks: sluice::lake::journal::restore::RestoreHooks {
                failpoint: std::env::var("SLUICE_FAILPOINT").ok(),
                pause: std::env::var("SLUICE_RESTORE_PAUSE_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .map(std::time::Duration::from_millis),
            },
        },
    )
    .await;
    bar.finish_and_clear();
    let report = report?;
    if json {
        return print(&serde_json::to_string_pretty(&report)?);
    }
    if report.plan.tables.is_empty() {
        return print(&format!(
            "every table is already at {}; nothing to restore",
            report.plan.point
        ));
    }
    let rows: Vec<Vec<String>> = report
        .plan
        .tables
        .iter()
        .map(|t| {
            let commit = report
                .outcome
                .as_ref()
                .and_then(|o| o.table_commits.get(&t.table))
                .map_or("-".into(), |v| v.to_string());
            vec![t.table.clone(), t.from.to_string(), t.to.to_string(), commit]
        })
        .collect();
    let head = match &report.outcome {
        None => format!("(dry run) restoring to {} would change:\n", report.plan.point),
        Some(o) => format!(
            "restored {} tables to {} in {:.2}s: lake version {}\n",
            report.plan.tables.len(),
            report.plan.point,
            report.seconds,
            o.seq
        ),
    };
    let pending = if report.pending_runs > 0 {
        let runs = count(report.pending_runs as u64, "staged run");
        let verb = if report.pending_runs == 1 { "waits" } else { "wait" };
        format!("\n{runs} {verb} for the next commit")
    } else {
        String::new()
    };
    print(&format!(
        "{head}{}{pending}",
        text_table(&["table", "from version", "to version", "restore commit"], &rows)
    ))
}
