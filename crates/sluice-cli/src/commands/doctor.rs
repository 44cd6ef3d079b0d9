//! `sluice doctor [--repair]`: staging, the commit journal, whole-lake
//! integrity and steps left running — what is wrong, and what `--repair`
//! fixed.

use serde_json::json;
use sluice::Lake;
use sluice::commit::doctor::{Diagnosis, JournalRepair};
use sluice::lake::LakeRoot;
use sluice::maintenance::integrity::{self, IntegrityRepair, IntegrityReport};

use crate::output::print;

struct Repairs {
    journal: JournalRepair,
    integrity: IntegrityRepair,
    steps_closed: Vec<String>,
}

pub async fn doctor(root: &LakeRoot, repair: bool, as_json: bool) -> anyhow::Result<()> {
    let lake = Lake::open(root).await?;
    let repaired = match repair {
        true => Some(Repairs {
            journal: sluice::commit::doctor::repair_journal(&lake).await?,
            integrity: integrity::repair(&lake).await?,
            steps_closed: sluice::pipeline::steps_log::close_abandoned(&lake, None)
                .await?
                .into_iter()
                .map(|r| r.step_run_id)
                .collect(),
        }),
        false => None,
    };
    let d = sluice::commit::doctor::diagnose(&lake).await?;
    let checks = integrity::check(&lake).await?;
    let orphaned: Vec<String> = sluice::pipeline::steps_log::orphaned_running(&lake)
        .await?
        .into_iter()
        .map(|r| r.step_run_id)
        .collect();
    let clean = d.is_clean() && checks.is_clean() && orphaned.is_empty();
    // Where the lake lives, and whether its filesystem keeps locks per host
    // (a note, not a fault: correctness never rests on the lock).
    let mount = lake.root().local().and_then(sluice::host::mounts::mount_of);
    let host_local = mount.as_ref().and_then(|m| m.host_local_locks());
    // Exit 1 when anything is found (after a repair: when anything
    // remains), so doctor can gate cron jobs and CI.
    let verdict = || -> anyhow::Result<()> {
        match (clean, repair) {
            (true, _) => Ok(()),
            (false, false) => anyhow::bail!(
                "the lake is not clean (listed above); `sluice doctor --repair` repairs what it can"
            ),
            (false, true) => {
                anyhow::bail!(
                    "the lake is not clean after the repair (what remains is listed above)"
                )
            }
        }
    };
    if as_json {
        print(&serde_json::to_string_pretty(&json!({
            "clean": clean,
            "repaired": repaired.as_ref().map(|r| json!({
                "rebuilt_completed": r.journal.rebuilt_completed,
                "rebuilt_started": r.journal.rebuilt_started,
                "journal_set_aside": r.journal.set_aside.as_ref().map(|(p, why)| json!({"path": p, "reason": why})),
                "integrity": r.integrity,
                "steps_closed": r.steps_closed,
            })),
            "journal_behind": d.journal_behind.map(|(j, t)| json!({"journal": j, "tables": t})),
            "abandoned_sequences": d.abandoned_sequences.iter().map(|(s, why)| json!({"seq": s, "reason": why})).collect::<Vec<_>>(),
            "sealed_waiting": d.sealed,
            "unsealed": d.unsealed,
            "quarantined": d.quarantined.iter().map(|(p, why)| json!({"path": p, "reason": why})).collect::<Vec<_>>(),
            "pending_manifests": d.pending_manifests,
            "unfinished_sequences": d.unfinished_sequences,
            "foreign": d.foreign,
            "integrity": checks,
            "orphaned_running_steps": orphaned,
            "location": json!({
                "path": lake.root().to_string(),
                "filesystem": mount.as_ref().map(|m| m.fstype.clone()),
                "mount_point": mount.as_ref().map(|m| m.point.clone()),
                "source": mount.as_ref().map(|m| m.source.clone()),
                "host_local_locks": host_local,
            }),
        }))?)?;
        return verdict();
    }
    let mut out = String::new();
    if let Some(r) = &repaired {
        out.push_str(&repairs_text(r));
    }
    if clean {
        out.push_str("clean: nothing staged, nothing quarantined, no unfinished commit, every integrity check passed\n");
    }
    out.push_str(&staging_text(&d));
    out.push_str(&integrity_text(&checks));
    if !orphaned.is_empty() {
        out.push_str(&format!(
            "{} steps are `running` but their orchestrator is gone ({}): `sluice doctor --repair` records them abandoned\n",
            orphaned.len(),
            orphaned.join(", ")
        ));
    }
    out.push_str(&location_text(lake.root(), mount.as_ref(), host_local.as_deref()));
    print(out.trim_end())?;
    verdict()
}

/// Where the lake lives, and a note when its locks are host-local.
fn location_text(
    root: &LakeRoot,
    mount: Option<&sluice::host::mounts::Mount>,
    host_local: Option<&str>,
) -> String {
    let mut out = match mount {
        Some(m) => format!(
            "lake: {} ({} filesystem, {} mounted at {})\n",
            root,
            m.fstype,
            m.source,
            m.point.display()
        ),
        None if root.local().is_none() => format!("lake: {root} (object store; no lock)\n"),
        None => format!("lake: {root}\n"),
    };
    if let Some(why) = host_local {
        out.push_str(&format!(
            "note: {why}; the writer lock then keeps only this host's writers apart. \
             Correctness does not depend on it (every commit is exactly the next Delta version); \
             two hosts may at worst do the same work twice\n"
        ));
    }
    out
}

fn repairs_text(r: &Repairs) -> String {
    let mut out = String::new();
    if let Some((aside, why)) = &r.journal.set_aside {
        out.push_str(&format!(
            "the commit journal could not be read ({why}); moved it to {} and rebuilt it from the tables\n",
            aside.display()
        ));
    }
    if !r.journal.rebuilt_completed.is_empty() || !r.journal.rebuilt_started.is_empty() {
        out.push_str(&format!(
            "repaired the commit journal: {} completed sequences rebuilt from the tables, {} started (run `sluice recover` to finish them)\n",
            r.journal.rebuilt_completed.len(),
            r.journal.rebuilt_started.len()
        ));
    }
    for (table, f) in &r.integrity.files_forgotten {
        out.push_str(&format!(
            "repaired `{table}`: data files of {} delivered files were lost; removed all their rows ({} data files, version {}) and forgot them, so dropping them again ingests them whole:\n",
            f.files.len(),
            f.data_files.len(),
            f.version
        ));
        for key in &f.files {
            out.push_str(&format!("  {key}\n"));
        }
    }
    for (table, files) in &r.integrity.references_dropped {
        out.push_str(&format!(
            "repaired `{table}`: dropped {} references to data files storage lacks (their rows were already unreadable):\n",
            files.len()
        ));
        for f in files {
            out.push_str(&format!("  {f}\n"));
        }
    }
    for (table, n) in &r.integrity.index_rows_added {
        out.push_str(&format!(
            "repaired `{table}`: added {n} index rows derived from its content\n"
        ));
    }
    for (table, versions) in &r.integrity.key_sets_written {
        out.push_str(&format!(
            "wrote the key sets of {} versions of `{table}` from their files\n",
            versions.len()
        ));
    }
    if !r.steps_closed.is_empty() {
        out.push_str(&format!(
            "recorded {} steps abandoned (their orchestrator died): {}\n",
            r.steps_closed.len(),
            r.steps_closed.join(", ")
        ));
    }
    out
}

fn staging_text(d: &Diagnosis) -> String {
    let mut out = String::new();
    if let Some((journal, tables)) = d.journal_behind {
        out.push_str(&format!(
            "the commit journal is behind the tables (journal: sequence {journal}, tables: {tables}); commits refuse until `sluice doctor --repair`\n"
        ));
    }
    if d.sealed > 0 {
        out.push_str(&format!("{} sealed run dirs wait for `sluice commit`\n", d.sealed));
    }
    if !d.pending_manifests.is_empty() || !d.unfinished_sequences.is_empty() {
        out.push_str(&format!(
            "unfinished commit sequences {:?} (manifests {:?}): run `sluice recover`\n",
            d.unfinished_sequences, d.pending_manifests
        ));
    }
    let listed = [
        ("unsealed run dirs (crashed or still running workers)", &d.unsealed),
        ("entries in the staging root that do not fit its layout", &d.foreign),
    ];
    for (what, paths) in listed {
        if !paths.is_empty() {
            out.push_str(&format!("{} {what}:\n", paths.len()));
            for p in paths {
                out.push_str(&format!("  {}\n", p.display()));
            }
        }
    }
    if !d.quarantined.is_empty() {
        out.push_str(&format!("{} quarantined run dirs:\n", d.quarantined.len()));
        for (p, why) in &d.quarantined {
            out.push_str(&format!("  {}: {why}\n", p.display()));
        }
        out.push_str("  (`sluice recover --requeue` tries them again once their cause is fixed)\n");
    }
    out
}

fn integrity_text(c: &IntegrityReport) -> String {
    let mut out = String::new();
    for (table, files) in &c.missing_files {
        out.push_str(&format!(
            "`{table}` references {} data files storage lacks (`--repair` drops the references):\n",
            files.len()
        ));
        for f in files.iter().take(20) {
            out.push_str(&format!("  {f}\n"));
        }
    }
    for (table, files) in &c.unreferenced_files {
        out.push_str(&format!(
            "`{table}` holds {} data files no log entry references (crashed writers); `sluice vacuum --full` removes them past the retention\n",
            files.len()
        ));
    }
    if c.dangling_execution_edges > 0 || c.dangling_artifact_edges > 0 {
        out.push_str(&format!(
            "edges naming artifacts the index lacks: {} execution edges, {} artifact edges\n",
            c.dangling_execution_edges, c.dangling_artifact_edges
        ));
    }
    for (table, n) in c.index_without_content.iter().filter(|(_, n)| **n > 0) {
        out.push_str(&format!("{n} index rows of `{table}` have no content row\n"));
    }
    for (table, n) in c.content_without_index.iter().filter(|(_, n)| **n > 0) {
        out.push_str(&format!("{n} `{table}` rows have no index row (`--repair` adds them)\n"));
    }
    for (table, versions) in &c.versions_without_key_sets {
        let (sets, read) = if table == "executions" {
            ("key or result set", "ids already present and cached specs are read from their files")
        } else {
            ("key set", "ids already present are confirmed in their files")
        };
        out.push_str(&format!(
            "{} versions of `{table}` have no {sets}: {read}, slower (`--repair` writes the sets)\n",
            versions.len()
        ));
    }
    out
}
