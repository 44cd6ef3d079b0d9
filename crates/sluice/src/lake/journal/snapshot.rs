//! One consistent point of the whole lake: a version for every table.
//!
//! Each table is consistent on its own (Delta), but a commit sequence writes
//! several tables one after the other. A reader that opened every table at
//! its latest version could see half a sequence: content and index of a
//! batch of runs but not yet their executions. [`resolve`] picks, for every
//! table, a version at which every commit sequence is either wholly visible
//! or wholly invisible:
//!
//! 1. read every table's latest version in reverse commit order (executions
//!    first, content last), then the journal — so a sequence that touched a
//!    table before its version was read has its `started` row in the journal;
//! 2. a sequence still in flight (a `started` row with no `completed` or
//!    `abandoned` one, whose committer may still be running or whose manifest
//!    is still in the staging area) caps every table at the version it
//!    recorded before its first commit. The manifests are listed after the
//!    heads and before the journal: a manifest is written before its
//!    sequence's first table commit and removed after its `completed` row,
//!    so a sequence whose committer died and whose manifest was not listed
//!    either had committed nothing when the heads were read, or is
//!    completed in the journal read after;
//! 3. a completed sequence that is now visible in some tables and not in
//!    others (it committed while the versions were read, or a cap cut through
//!    it) is hidden everywhere: each table is capped below its commit;
//!    repeated until nothing changes.
//!
//! Direct puts are not sequences; they commit content before index, so the
//! reverse-order read alone keeps an index row from being seen without its
//! content.
//!
//! The same resolution, applied to the journal as it was at a sequence's
//! completion or at an instant, gives time travel for the whole lake.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::journal::{self, Journal, JournalEntry, Phase};
use crate::lake::layout::{self, TableSpec};

/// Which point of the lake to read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LakePoint {
    /// The latest consistent point.
    #[default]
    Latest,
    /// The lake as the sequence with this number left it.
    Sequence(i64),
    /// The lake as it was at an instant.
    Time(DateTime<Utc>),
    /// These tables at these versions (others at their latest).
    Tables(BTreeMap<String, u64>),
}

/// A version for every table, consistent across tables.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LakeSnapshot {
    /// Table short name → version to read.
    pub versions: BTreeMap<String, u64>,
    /// The last commit sequence wholly visible (`None` before the first).
    pub sequence: Option<i64>,
    /// The journal's own version at that point.
    pub journal_version: Option<u64>,
    /// How the point was given, for messages.
    pub point: LakePoint,
}

impl LakeSnapshot {
    /// The version to read a table at; `None` when the table did not exist
    /// at that point.
    pub fn version_of(&self, table: &str) -> Option<u64> {
        self.versions.get(table).copied()
    }
}

/// Resolve a point of the lake at `root` with these tables.
pub async fn resolve(
    root: &LakeRoot,
    specs: &[TableSpec],
    point: &LakePoint,
) -> Result<LakeSnapshot> {
    let (heads, journal, pins) = match point {
        LakePoint::Latest => {
            let heads = journal::versions(root, specs).await?;
            let pins = Pins::listed(root).await?;
            (heads, journal::read(root, None).await?, pins)
        }
        LakePoint::Sequence(seq) => {
            let journal = journal::read(root, None).await?;
            let Some(done) = journal.completed(*seq) else {
                return Err(Error::TimeTravel {
                    table: "the lake".into(),
                    as_of: format!("lake version {seq}"),
                    message: format!(
                        "no commit sequence {seq} completed (the last is {}). Help: `sluice history` lists lake versions",
                        last_completed(&journal).map_or("none".into(), |s| s.to_string())
                    ),
                });
            };
            let position = done.position;
            let heads = done.table_versions.clone();
            let prefix = Journal::new(
                journal.into_entries().into_iter().filter(|e| e.position <= position).collect(),
                Some(position),
            );
            (heads, prefix, Pins::Every)
        }
        LakePoint::Time(at) => {
            let heads = versions_at(root, specs, *at).await?;
            let journal = journal_at(root, *at).await?;
            (heads, journal, Pins::Every)
        }
        LakePoint::Tables(given) => {
            let mut versions = journal::versions(root, specs).await?;
            versions.extend(given.iter().map(|(t, v)| (t.clone(), *v)));
            let journal_version = match given.get(layout::commits_table().name.as_str()) {
                Some(v) => Some(*v),
                None => journal::read(root, None).await?.version,
            };
            return Ok(LakeSnapshot {
                versions,
                sequence: None,
                journal_version,
                point: point.clone(),
            });
        }
    };
    Ok(settle(heads, &journal, &pins, point))
}

/// Which unfinished sequences of a journal hold readers back.
#[derive(Debug, Clone)]
pub enum Pins {
    /// Every one: the journal is a past one, read as it was.
    Every,
    /// Those that may still finish (see [`pins_readers`]), given the
    /// sequences whose manifests were listed after the heads were read and
    /// before the journal was.
    Live(BTreeSet<i64>),
}

impl Pins {
    /// The latest journal's pins: the manifests in the lake's staging area
    /// now (one listing; list them after reading the heads and before
    /// reading the journal).
    pub async fn listed(root: &LakeRoot) -> Result<Pins> {
        let names = root.list_names(&layout::manifest_folder()).await?;
        Ok(Pins::Live(names.iter().filter_map(|n| layout::manifest_seq(n)).collect()))
    }

    fn hold(&self, open: &JournalEntry) -> bool {
        match self {
            Pins::Every => true,
            Pins::Live(manifests) => pins_readers(manifests, open),
        }
    }
}

/// Steps 2 and 3 of [`resolve`]: cap `heads` (read in reverse commit order,
/// before `journal`) so that every commit sequence of the journal is wholly
/// visible or wholly invisible.
pub fn settle(
    heads: BTreeMap<String, u64>,
    journal: &Journal,
    pins: &Pins,
    point: &LakePoint,
) -> LakeSnapshot {
    let mut cut = heads;
    for open in journal.unfinished() {
        if pins.hold(open) {
            for (table, before) in &open.table_versions {
                cap(&mut cut, table, *before);
            }
        }
    }
    hide_partial_sequences(journal, &mut cut);
    let sequence = journal
        .entries()
        .iter()
        .filter(|e| e.phase() == Phase::Completed)
        .filter(|e| wholly_visible(e, &cut))
        .map(|e| e.seq)
        .max();
    LakeSnapshot { versions: cut, sequence, journal_version: journal.version, point: point.clone() }
}

/// Whether an unfinished sequence still holds readers back: it is a restore
/// (`recover` finishes it from its journal row alone), its committer may be
/// alive, or its manifest was listed (a committer or `recover` will finish
/// it). A sequence whose committer is certainly dead and whose manifest is
/// gone can never finish; readers do not wait for it (`recover` records it
/// as abandoned).
fn pins_readers(manifests: &BTreeSet<i64>, open: &JournalEntry) -> bool {
    open.is_restore() || !crate::host::owner_is_dead(&open.owner) || manifests.contains(&open.seq)
}

fn cap(cut: &mut BTreeMap<String, u64>, table: &str, version: u64) {
    if let Some(v) = cut.get_mut(table) {
        *v = (*v).min(version);
    }
}

fn wholly_visible(entry: &JournalEntry, cut: &BTreeMap<String, u64>) -> bool {
    entry.table_commits.iter().all(|(t, v)| cut.get(t).is_some_and(|c| v <= c))
}

/// Step 3: a completed sequence partly above the cut is hidden everywhere:
/// every table is capped at the versions its `started` row recorded. Those
/// were read in reverse commit order, so they are a consistent point of
/// their own, and the lowest of consistent points is consistent: capping
/// only the tables the sequence touched, each below its own commit, could
/// cut between a direct put's content and its index row (which no journal
/// row records) when two committers that share no lock interleave. A
/// sequence whose `started` row is gone (a journal rebuilt by `doctor
/// --repair` holds completed rows only) is capped below its commits.
fn hide_partial_sequences(journal: &Journal, cut: &mut BTreeMap<String, u64>) {
    loop {
        let mut changed = false;
        for entry in journal.entries().iter().filter(|e| e.phase() == Phase::Completed) {
            let visible: Vec<(&String, &u64)> = entry
                .table_commits
                .iter()
                .filter(|(t, v)| cut.get(*t).is_some_and(|c| *v <= c))
                .collect();
            if visible.is_empty() || visible.len() == entry.table_commits.len() {
                continue;
            }
            let started = journal.of_token(&entry.token).find(|e| e.phase() == Phase::Started);
            match started {
                Some(started) => {
                    for (table, version) in &started.table_versions {
                        changed |= cut.get(table).is_some_and(|c| c > version);
                        cap(cut, table, *version);
                    }
                }
                None => {
                    for (table, version) in visible {
                        cap(cut, table, version.saturating_sub(1));
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            return;
        }
    }
}

fn last_completed(journal: &Journal) -> Option<i64> {
    journal.entries().iter().filter(|e| e.phase() == Phase::Completed).map(|e| e.seq).max()
}

/// Every table's version at an instant (tables created later are absent).
async fn versions_at(
    root: &LakeRoot,
    specs: &[TableSpec],
    at: DateTime<Utc>,
) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for spec in specs.iter().rev().filter(|s| s.kind != layout::TableKind::Commits) {
        if !table::exists(root, spec).await? {
            continue;
        }
        if let Some(version) = table::version_at(root, spec, at).await? {
            out.insert(spec.name.clone(), version);
        }
    }
    Ok(out)
}

/// The journal as it was at an instant: every row committed by then, and
/// every row whose own time is at or before it. A row's time is taken
/// before the journal commit that holds it, and `history` prints it to the
/// millisecond, so a time copied from `history` falls a little before that
/// commit; going by commit times alone would read the lake version before
/// the one the user copied.
async fn journal_at(root: &LakeRoot, at: DateTime<Utc>) -> Result<Journal> {
    let spec = layout::commits_table();
    if !table::exists(root, &spec).await? {
        return Ok(Journal::default());
    }
    let by_commit_time = table::version_at(root, &spec, at).await?;
    let latest = journal::read(root, None).await?;
    let at_ms = at.timestamp_millis();
    let by_row_time = latest
        .entries()
        .iter()
        .filter(|e| e.timestamp.div_euclid(1000) <= at_ms)
        .map(|e| e.position)
        .max();
    let Some(position) = by_commit_time.max(by_row_time) else {
        return Ok(Journal::default());
    };
    let entries = latest.into_entries().into_iter().filter(|e| e.position <= position).collect();
    Ok(Journal::new(entries, Some(position)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(seq: i64, commits: &[(&str, u64)]) -> JournalEntry {
        JournalEntry {
            seq,
            phase: Some(Phase::Completed),
            token: format!("t{seq}"),
            table_commits: commits.iter().map(|(t, v)| ((*t).to_owned(), *v)).collect(),
            ..JournalEntry::default()
        }
    }

    fn started(seq: i64, versions: &[(&str, u64)]) -> JournalEntry {
        JournalEntry {
            seq,
            phase: Some(Phase::Started),
            token: format!("t{seq}"),
            table_versions: versions.iter().map(|(t, v)| ((*t).to_owned(), *v)).collect(),
            ..JournalEntry::default()
        }
    }

    #[test]
    fn hiding_interleaved_sequences_never_cuts_between_a_puts_content_and_index() {
        // Two committers without a shared lock, and a direct put between
        // them (the journal does not record puts):
        //   seq 2 claims (metrics 8, index 18) and commits metrics 9;
        //   the put commits its content at metrics 10;
        //   seq 3 claims (metrics 10, index 18);
        //   the put commits its index row at index 19;
        //   seq 3 commits metrics 11 and index 20; seq 2 commits index 21.
        // A reader read index at 20 and metrics at 11.
        let journal = Journal::new(
            vec![
                started(2, &[("metrics", 8), ("index", 18)]),
                started(3, &[("metrics", 10), ("index", 18)]),
                completed(3, &[("metrics", 11), ("index", 20)]),
                completed(2, &[("metrics", 9), ("index", 21)]),
            ],
            Some(4),
        );
        let mut cut: BTreeMap<String, u64> =
            [("metrics", 11), ("index", 20)].map(|(t, v)| (t.to_owned(), v)).into();
        hide_partial_sequences(&journal, &mut cut);
        // The put's index row (19) may be seen only with its content (10).
        assert!(cut["index"] < 19 || cut["metrics"] >= 10, "{cut:?}");
        assert!(journal.entries().iter().filter(|e| e.phase() == Phase::Completed).all(|e| {
            let seen = e.table_commits.iter().filter(|(t, v)| **v <= cut[t.as_str()]).count();
            seen == 0 || seen == e.table_commits.len()
        }));
    }

    #[test]
    fn a_dead_committers_sequence_holds_readers_back_while_its_manifest_is_listed() {
        // Sequence 2's committer died after committing metrics v5 (its
        // started row recorded metrics 4, executions 2).
        let dead = format!("{}:4194303:5", crate::host::machine());
        assert!(crate::host::owner_is_dead(&dead));
        let journal = Journal::new(
            vec![JournalEntry { owner: dead, ..started(2, &[("metrics", 4), ("executions", 2)]) }],
            Some(1),
        );
        let heads: BTreeMap<String, u64> =
            [("metrics", 5), ("executions", 2)].map(|(t, v)| (t.to_owned(), v)).into();
        let listed = settle(heads.clone(), &journal, &Pins::Live([2].into()), &LakePoint::Latest);
        assert_eq!(listed.versions["metrics"], 4, "its manifest says it will be finished");
        // With no manifest it can never finish (it committed nothing before
        // the heads were read, or its completed row is in the journal).
        let gone =
            settle(heads.clone(), &journal, &Pins::Live(BTreeSet::new()), &LakePoint::Latest);
        assert_eq!(gone.versions["metrics"], 5);
        let past = settle(heads, &journal, &Pins::Every, &LakePoint::Latest);
        assert_eq!(past.versions["metrics"], 4, "a past journal's unfinished sequences all hold");
    }

    #[test]
    fn a_sequence_seen_in_part_is_hidden_everywhere() {
        // Sequence 2 committed metrics v5, index v7, executions v3; the reader
        // read executions before its commit (v2) and the rest after.
        let journal = Journal::new(
            vec![
                completed(1, &[("metrics", 4), ("executions", 2)]),
                completed(2, &[("metrics", 5), ("index", 7), ("executions", 3)]),
            ],
            Some(4),
        );
        let mut cut: BTreeMap<String, u64> = [("metrics", 5), ("index", 7), ("executions", 2)]
            .map(|(t, v)| (t.to_owned(), v))
            .into();
        hide_partial_sequences(&journal, &mut cut);
        assert_eq!(cut["metrics"], 4);
        assert_eq!(cut["index"], 6);
        assert_eq!(cut["executions"], 2);
        assert!(wholly_visible(&journal.entries()[0], &cut));
        assert!(!wholly_visible(&journal.entries()[1], &cut));
    }
}
