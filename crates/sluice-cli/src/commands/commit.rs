//! `sluice commit` and `sluice recover`.

use indicatif::ProgressStyle;
use serde_json::json;
use sluice::Lake;
use sluice::commit::CommitReport;
use sluice::lake::LakeRoot;

use crate::output::{count, print};

/// What `sluice commit` and `sluice recover` were asked.
#[derive(Debug, Clone)]
pub struct CommitOptions {
    pub step: Option<i32>,
    pub chunk: usize,
    pub chunk_mib: u64,
    pub memory_mib: Option<u64>,
    pub wait: Option<f64>,
    pub recover: bool,
    pub requeue: bool,
}

impl Default for CommitOptions {
    fn default() -> Self {
        CommitOptions {
            step: None,
            chunk: sluice::commit::DEFAULT_CHUNK,
            chunk_mib: sluice::commit::DEFAULT_CHUNK_BYTES >> 20,
            memory_mib: None,
            wait: None,
            recover: false,
            requeue: false,
        }
    }
}

pub async fn commit(root: &LakeRoot, options: CommitOptions, as_json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let bar = crate::output::bar(Some(0));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} committing [{bar:30}] {pos}/{len} run dirs ({per_sec}, eta {eta})",
        )?
        .progress_chars("=> "),
    );
    let progress_bar = bar.clone();
    let builder = if options.recover { lake.recover() } else { lake.commit() };
    let report = builder
        .with_step(options.step)
        .with_chunk_size(options.chunk)
        .with_chunk_bytes(options.chunk_mib.max(1) << 20)
        .with_memory_limit(
            options.memory_mib.map_or_else(sluice::commit::default_memory, |m| m.max(1) << 20),
        )
        .with_requeue(options.requeue)
        .with_lock_wait(options.wait.map(std::time::Duration::from_secs_f64))
        .with_progress(Box::new(move |done, total| {
            progress_bar.set_length(total as u64);
            progress_bar.set_position(done as u64);
        }))
        .execute()
        .await;
    // Checkpoints the commit started in the background are written before
    // the process ends (a process that exits drops them).
    lake.settle().await;
    let report = report?;
    bar.finish_and_clear();
    if as_json {
        return print(&serde_json::to_string_pretty(&report_json(&report))?);
    }
    print(&summary(&report))
}

fn report_json(r: &CommitReport) -> serde_json::Value {
    json!({
        "runs_committed": r.runs_committed,
        "unsealed": r.unsealed,
        "requeued": r.requeued,
        "quarantined": r.quarantined.iter().map(|(p, why)| json!({"path": p, "reason": why})).collect::<Vec<_>>(),
        "rows_added": r.rows_added,
        "rows_deduplicated": r.rows_deduplicated,
        "sequences": r.sequences,
        "recovered_sequences": r.recovered,
        "abandoned_sequences": r.abandoned.iter().map(|(s, why)| json!({"seq": s, "reason": why})).collect::<Vec<_>>(),
        "puts_finished": r.unfinished.puts,
        "compactions_undone": r.unfinished.compactions_undone,
        "compactions_stuck": r.unfinished.compactions_stuck,
        "seconds": r.duration.as_secs_f64(),
    })
}

/// The human summary of a commit.
pub fn summary(r: &CommitReport) -> String {
    let mut out = format!(
        "committed {} in {:.2}s ({}{})\n",
        count(r.runs_committed as u64, "run dir"),
        r.duration.as_secs_f64(),
        count(r.sequences.len() as u64, "sequence"),
        if r.recovered.is_empty() {
            String::new()
        } else {
            format!(", {} recovered", r.recovered.len())
        }
    );
    if !r.requeued.is_empty() {
        out.push_str(&format!("requeued from quarantine: {}\n", r.requeued.len()));
    }
    for (seq, why) in &r.abandoned {
        out.push_str(&format!("abandoned sequence {seq}: {why}\n"));
    }
    for (table, rows) in &r.unfinished.puts {
        out.push_str(&format!(
            "finished killed puts: {rows} index rows added for content in {table}\n"
        ));
    }
    for (table, version) in &r.unfinished.compactions_undone {
        out.push_str(&format!(
            "undid compaction {table}@{version}: it met another rewrite of its files\n"
        ));
    }
    for (table, version) in &r.unfinished.compactions_stuck {
        out.push_str(&format!(
            "warning: compaction {table}@{version} met another rewrite and its output was rewritten again; `sluice ingest dedup` or a restore removes the duplicate rows\n"
        ));
    }
    out.push_str(&format!("skipped unsealed: {}\n", r.unsealed.len()));
    for path in r.unsealed.iter().take(10) {
        out.push_str(&format!("  {}\n", path.display()));
    }
    out.push_str(&format!("quarantined: {}\n", r.quarantined.len()));
    for (path, why) in &r.quarantined {
        out.push_str(&format!("  {}: {why}\n", path.display()));
    }
    out.push_str("table              added  deduplicated\n");
    for (table, added) in &r.rows_added {
        let dedup = r.rows_deduplicated.get(table).copied().unwrap_or(0);
        out.push_str(&format!("{table:<16} {added:>8} {dedup:>13}\n"));
    }
    out
}
