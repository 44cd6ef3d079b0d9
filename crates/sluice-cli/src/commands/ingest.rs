//! `sluice ingest run | status | retry`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressStyle};
use sluice::ingest::{IngestConfig, IngestReport, Ingestor, Mode};

use crate::args::IngestCommand;
use crate::output::{print, text_table};

pub async fn run(command: IngestCommand) -> anyhow::Result<()> {
    match command {
        IngestCommand::Run { config, once: _, watch, workers, json } => {
            let mut config = IngestConfig::load(&config)?;
            if let Some(w) = workers {
                config.ingest.workers = w.max(1);
            }
            let ingestor = Ingestor::open(config).await?;
            let mode = if watch {
                let stop = Arc::new(AtomicBool::new(false));
                let flag = stop.clone();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        eprintln!(
                            "stopping: finishing the files in flight (Ctrl-C again to abort)"
                        );
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
            let bar = (!json && std::io::IsTerminal::is_terminal(&std::io::stderr())).then(|| {
                let bar = ProgressBar::new_spinner();
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar
            });
            let show = |r: &IngestReport| {
                if let Some(bar) = &bar {
                    bar.set_message(format!(
                        "{} files, {} rows, {} commits, {} duplicates, {} dead",
                        r.files, r.rows, r.commits, r.duplicates, r.dead
                    ));
                    bar.tick();
                }
            };
            let report = ingestor.run(mode, Some(&show)).await?;
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if json {
                return print(&serde_json::to_string_pretty(&report)?);
            }
            let rate = report.rows as f64 / report.seconds.max(1e-9);
            print(&format!(
                "ingested {} files, {} rows in {} commits ({:.2} s, {rate:.0} rows/s); {} duplicates skipped, {} retried, {} dead-lettered, {} rows rejected{}",
                report.files,
                report.rows,
                report.commits,
                report.seconds,
                report.duplicates,
                report.retried,
                report.dead,
                report.rejected,
                if report.ledger_repaired > 0 {
                    format!("; {} ledger rows recovered from table commits", report.ledger_repaired)
                } else {
                    String::new()
                }
            ))
        }
        IngestCommand::Status { config, json } => {
            let ingestor = Ingestor::open(IngestConfig::load(&config)?).await?;
            let status = ingestor.status().await?;
            if json {
                return print(&serde_json::to_string_pretty(&status)?);
            }
            let q = &status.queue;
            let mut out = format!(
                "queue: {} waiting (oldest {:.0} s), {} in flight, {} dead\n",
                q.waiting, q.oldest_waiting_secs, q.in_flight, q.dead
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
            for (table, file, reason) in &status.dead_letters {
                out.push_str(&format!("\ndead: {table}/{file}: {reason}"));
            }
            print(&out)
        }
        IngestCommand::Retry { config, files, all_dead } => {
            let config = IngestConfig::load(&config)?;
            if files.is_empty() && !all_dead {
                anyhow::bail!("name the dead letters to retry (table/file), or pass --all-dead");
            }
            let queue = sluice::ingest::LocalQueue::new(&config.queue)?;
            let moved = queue.retry_dead(&files)?;
            let missing: Vec<&String> = files.iter().filter(|f| !moved.contains(f)).collect();
            if !missing.is_empty() {
                anyhow::bail!(
                    "not dead letters: {}",
                    missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                );
            }
            print(&format!("{} files back in the landing zone", moved.len()))
        }
    }
}
