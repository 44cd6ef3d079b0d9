//! What is pending or wrong in a lake's staging and journal, and repairing
//! the journal.
//!
//! [`diagnose`] reads, never writes: sealed runs waiting for a commit,
//! unsealed runs (crashed or still-running workers), quarantined runs with
//! their reasons, commit sequences left unfinished (which the next `commit`
//! or `recover` finishes or closes), and whether the journal knows every
//! sequence the tables record.
//!
//! [`repair_journal`] rebuilds the journal from the tables when it is
//! missing or behind them: every table commit of a sequence carries the
//! sequence number and token in its metadata, so the journal's rows can be
//! derived from the tables. A sequence with a manifest on disk gets a
//! `started` row (so `recover` finishes it); any other gets a `completed`
//! row marked as rebuilt.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::manifest;
use super::quarantine::{QUARANTINE_DIR, REASON_FILE};
use crate::error::Result;
use crate::lake::journal::{self, JournalEntry, Phase, TableSequenceCommit};
use crate::lake::{Lake, delta::table};
use crate::staging::{self, StagingArea};

/// The state of a lake's staging and journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    /// Sealed run directories waiting for a commit.
    pub sealed: usize,
    /// Run directories without a sentinel.
    pub unsealed: Vec<PathBuf>,
    /// Quarantined run directories and their reasons.
    pub quarantined: Vec<(PathBuf, String)>,
    /// Sequences with a manifest on disk (interrupted commits).
    pub pending_manifests: Vec<i64>,
    /// Sequences the journal shows started but neither completed nor
    /// abandoned.
    pub unfinished_sequences: Vec<i64>,
    /// Sequences recorded as abandoned, with the reason.
    pub abandoned_sequences: Vec<(i64, String)>,
    /// `(journal, tables)`: the highest sequence each records, when the
    /// tables know more than the journal (`sluice doctor --repair` fixes it).
    pub journal_behind: Option<(i64, i64)>,
    /// Entries in the staging root that are not part of the layout.
    pub foreign: Vec<PathBuf>,
}

impl Diagnosis {
    /// Whether anything needs attention (a commit, a recover, or a person).
    pub fn is_clean(&self) -> bool {
        self.sealed == 0
            && self.unsealed.is_empty()
            && self.quarantined.is_empty()
            && self.pending_manifests.is_empty()
            && self.unfinished_sequences.is_empty()
            && self.journal_behind.is_none()
    }
}

/// Diagnose the lake's default staging root and journal.
pub async fn diagnose(lake: &Lake) -> Result<Diagnosis> {
    let mut out = Diagnosis::default();
    diagnose_staging(&StagingArea::of_lake(lake.root()), &mut out).await?;
    let journal = journal::read(lake.root(), None).await?;
    out.unfinished_sequences = journal.unfinished().iter().map(|e| e.seq).collect();
    out.abandoned_sequences = journal
        .entries()
        .iter()
        .filter(|e| e.phase() == Phase::Abandoned)
        .map(|e| (e.seq, e.reason.clone().unwrap_or_default()))
        .collect();
    let tables = journal::highest_table_seq(lake.root(), &lake.table_specs()).await?;
    if let Some((seq, _)) = tables
        && seq > journal.max_seq()
    {
        out.journal_behind = Some((journal.max_seq(), seq));
    }
    Ok(out)
}

/// What the staging root holds: sealed, unsealed, foreign and quarantined
/// runs, and pending manifests.
async fn diagnose_staging(area: &StagingArea, out: &mut Diagnosis) -> Result<()> {
    let scan = staging::scan::scan_area(area, None).await?;
    out.sealed = scan.sealed.len();
    out.unsealed = scan.unsealed.into_iter().map(|r| r.path).collect();
    out.foreign = scan.foreign;
    out.pending_manifests = manifest::read_all_in(area).await?.into_iter().map(|m| m.seq).collect();
    let root = match area {
        StagingArea::Dir(root) => root,
        StagingArea::Store(store) => {
            for object in store.list(&format!("{QUARANTINE_DIR}/")).await? {
                let Some(folder) = object.strip_suffix(&format!("/{REASON_FILE}")) else {
                    continue;
                };
                let reason = store.get(&object).await?.unwrap_or_default();
                let reason = String::from_utf8_lossy(&reason).trim().to_owned();
                out.quarantined.push((area.shown(folder), reason));
            }
            out.quarantined.sort();
            return Ok(());
        }
    };
    let quarantine = root.join(QUARANTINE_DIR);
    if let Ok(steps) = std::fs::read_dir(&quarantine) {
        for step in steps.flatten() {
            for run in std::fs::read_dir(step.path()).into_iter().flatten().flatten() {
                let reason = std::fs::read_to_string(run.path().join(REASON_FILE))
                    .map(|r| r.trim().to_owned())
                    .unwrap_or_else(|_| "(no reason file)".into());
                out.quarantined.push((run.path(), reason));
            }
        }
    }
    out.quarantined.sort();
    Ok(())
}

/// What [`repair_journal`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalRepair {
    /// Sequences given a `completed` row rebuilt from the tables.
    pub rebuilt_completed: Vec<i64>,
    /// Sequences given a `started` row (their manifest is on disk; the next
    /// `recover` finishes them).
    pub rebuilt_started: Vec<i64>,
    /// Where a journal that could not be read was moved (kept, never
    /// deleted), with the reason; the journal was then rebuilt whole from
    /// the tables.
    pub set_aside: Option<(std::path::PathBuf, String)>,
}

/// Rebuild the journal rows of every sequence the tables record and the
/// journal does not (creating the journal if it is missing). A journal
/// that cannot be read (a damaged row file or log entry) is moved aside
/// and rebuilt from the tables' commits alone. Holds the writer lock.
pub async fn repair_journal(lake: &Lake) -> Result<JournalRepair> {
    let _writer = lake.writer(crate::lake::writer::WriteKind::Repair).begin().await?;
    let specs = lake.table_specs();
    let mut out = JournalRepair::default();
    let spec = crate::lake::layout::commits_table();
    table::ensure(lake.root(), &spec).await?;
    let known = match journal::read(lake.root(), None).await {
        Ok(known) => known,
        Err(e) => {
            let dir = table::table_dir(lake.filesystem("rebuilding an unreadable journal")?, &spec);
            let aside = dir.with_file_name(format!(
                "_commits.unreadable-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ")
            ));
            tracing::warn!(error = %e, to = %aside.display(), "the journal cannot be read; moving it aside and rebuilding it from the tables");
            std::fs::rename(&dir, &aside).map_err(|e| crate::error::Error::io(&dir, e))?;
            out.set_aside = Some((aside, e.to_string()));
            lake.forget_journal();
            table::ensure(lake.root(), &spec).await?;
            journal::read(lake.root(), None).await?
        }
    };
    let mut found: BTreeMap<String, Vec<TableSequenceCommit>> = BTreeMap::new();
    for spec in journal::sequence_tables(&specs) {
        if !table::exists(lake.root(), spec).await? {
            continue;
        }
        for commit in journal::table_sequence_commits(lake.root(), spec).await? {
            if known.of_token(&commit.token).next().is_none() {
                found.entry(commit.token.clone()).or_default().push(commit);
            }
        }
    }
    let manifests = manifest::read_all_in(&StagingArea::of_lake(lake.root())).await?;
    let heads = journal::versions(lake.root(), &specs).await?;
    let mut sequences: Vec<(i64, String, Vec<TableSequenceCommit>)> = found
        .into_iter()
        .map(|(token, commits)| (commits.first().map_or(0, |c| c.seq), token, commits))
        .collect();
    sequences.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (seq, token, commits) in sequences {
        let table_commits: BTreeMap<String, u64> =
            commits.iter().map(|c| (c.table.clone(), c.version)).collect();
        let pending =
            manifests.iter().any(|m| m.token == token || (m.token.is_empty() && m.seq == seq));
        let entry = if pending {
            // Before-versions: just below its commits, the head elsewhere,
            // so `recover` skips exactly the tables it reached.
            let mut before = heads.clone();
            for (t, v) in &table_commits {
                before.insert(t.clone(), v.saturating_sub(1));
            }
            out.rebuilt_started.push(seq);
            JournalEntry {
                seq,
                phase: Some(Phase::Started),
                table_versions: before,
                ..Default::default()
            }
        } else {
            out.rebuilt_completed.push(seq);
            JournalEntry {
                seq,
                phase: Some(Phase::Completed),
                table_versions: table_commits.clone(),
                table_commits,
                reason: Some("rebuilt by `sluice doctor --repair` from the tables' commits".into()),
                ..Default::default()
            }
        };
        let entry = JournalEntry { token: token.clone(), owner: crate::host::owner(), ..entry };
        journal::append(lake.root(), |j| {
            Ok(j.of_token(&token).next().is_none().then(|| entry.clone()))
        })
        .await?;
    }
    Ok(out)
}
