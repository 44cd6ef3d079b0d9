//! What is pending or wrong in a lake's staging and journal.
//!
//! `sluice doctor` reads, never writes: it lists sealed runs waiting for a
//! commit, unsealed runs (crashed or still-running workers), quarantined runs
//! with their reasons, and commit sequences left unfinished (which the next
//! `commit` or `recover` finishes).

use std::path::PathBuf;

use super::journal::{self, Phase};
use super::quarantine::{QUARANTINE_DIR, REASON_FILE};
use crate::error::Result;
use crate::lake::Lake;
use crate::staging;

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
    /// Sequences the journal shows started but not completed.
    pub unfinished_sequences: Vec<i64>,
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
    }
}

/// Diagnose the lake's default staging root.
pub async fn diagnose(lake: &Lake) -> Result<Diagnosis> {
    let root = staging::default_root(lake.root());
    let scan = staging::scan(&root, None)?;
    let mut out = Diagnosis {
        sealed: scan.sealed.len(),
        unsealed: scan.unsealed.into_iter().map(|r| r.path).collect(),
        foreign: scan.foreign,
        pending_manifests: journal::read_manifests(&root)?.into_iter().map(|m| m.seq).collect(),
        ..Diagnosis::default()
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
    let entries = journal::read(lake).await?;
    out.unfinished_sequences = entries
        .iter()
        .filter(|e| e.phase == Phase::Started)
        .map(|e| e.seq)
        .filter(|seq| !entries.iter().any(|e| e.seq == *seq && e.phase == Phase::Completed))
        .collect();
    Ok(out)
}
