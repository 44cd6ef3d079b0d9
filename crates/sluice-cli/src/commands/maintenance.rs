//! `sluice history`, `restore`, `compact`, `vacuum` and `checkpoint`.

use std::path::Path;

use sluice::Lake;
use sluice::maintenance::{self, CompactOptions, RestoreOptions, VacuumOptions};
use sluice::query::AsOf;

use crate::output::{print, text_table};

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

pub async fn history(
    root: &Path,
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

pub async fn compact(root: &Path, options: &CompactOptions, json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let reports = maintenance::compact::compact(&lake, options).await?;
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
    print(&format!(
        "{title}{}",
        text_table(&["table", "files", "MiB", "z-order", "version", "seconds"], &rows)
    ))
}

pub async fn vacuum(root: &Path, options: &VacuumOptions, json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let report = maintenance::vacuum::vacuum(&lake, options).await?;
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
    print(out.trim_end())
}

pub async fn checkpoint(root: &Path, table: Option<&str>, json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let reports = maintenance::checkpoint(&lake, table).await?;
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
    root: &Path,
    to: &str,
    dry_run: bool,
    force: bool,
    json: bool,
) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let to = match to.parse::<AsOf>()? {
        AsOf::Tables(_) => anyhow::bail!(
            "--to `{to}`: restore takes a lake version or a time (one point for every table)"
        ),
        point => point.point(),
    };
    let report = maintenance::restore::restore(
        &lake,
        &RestoreOptions {
            to,
            dry_run,
            force,
            hooks: sluice::lake::restore::RestoreHooks {
                failpoint: std::env::var("SLUICE_FAILPOINT").ok(),
                pause: std::env::var("SLUICE_RESTORE_PAUSE_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .map(std::time::Duration::from_millis),
            },
        },
    )
    .await?;
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
        Some(o) => format!("restored to {}: lake version {}\n", report.plan.point, o.seq),
    };
    let pending = if report.pending_runs > 0 {
        format!("\n{} staged run(s) wait for the next commit", report.pending_runs)
    } else {
        String::new()
    };
    print(&format!(
        "{head}{}{pending}",
        text_table(&["table", "from version", "to version", "restore commit"], &rows)
    ))
}
