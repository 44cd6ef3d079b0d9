//! The commit journal (`orchestration/commits`): the lake's clock.
//!
//! Delta makes each table commit atomic, not a group of them. A commit
//! *sequence* (one batch of staged runs, committed table by table) therefore
//! records itself in the journal:
//!
//! - `started(seq, token, owner, versions)`: before its first table commit,
//!   with every table's version before it (read in reverse commit order, see
//!   [`versions`]);
//! - `completed(seq, token, versions, table_commits, rows_added)`: after its
//!   last table commit, with every table's version after it and the version
//!   of each of its own table commits;
//! - `abandoned(seq, token, reason)`: written by `recover` for a started
//!   sequence whose committer is gone and whose staging manifest is gone too,
//!   so nothing can finish it; readers stop waiting for it.
//!
//! Every journal row is appended as exactly the journal's next Delta version
//! (put-if-absent, no retry), so `position` is the row's own version, and the
//! sequence number a `started` row claims is unique: it is computed from the
//! very journal version it is committed on top of. Each table commit of a
//! sequence also carries the sequence number as a Delta application
//! transaction (`sluice-commit`) and its token in the commit metadata, so the
//! journal can be checked against, and rebuilt from, the tables themselves.

pub mod restore;
pub mod snapshot;
pub mod tip;

use std::collections::{BTreeMap, HashMap, HashSet};

use deltalake::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::artifact::arrow_convert::{build_array, read_value};
use crate::artifact::value::FieldValue;
use crate::error::{Error, Result};
use crate::lake::append::{self, TOKEN_KEY};
use crate::lake::delta::handles::Handles;
use crate::lake::delta::scan::{self, Select};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::{self, TableKind, TableSpec};

pub use crate::lake::layout::{SEQ_KEY, TXN_APP_ID};

/// How many times a journal append re-reads the journal after losing its
/// version to another writer.
pub(in crate::lake) const MAX_ATTEMPTS: usize = 100;

/// Phase of a journal row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The sequence is about to commit tables.
    Started,
    /// Every table of the sequence committed.
    Completed,
    /// The sequence can never finish; readers stop waiting for it.
    Abandoned,
}

impl Phase {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Started => "started",
            Phase::Completed => "completed",
            Phase::Abandoned => "abandoned",
        }
    }

    fn parse(text: &str) -> Option<Phase> {
        [Phase::Started, Phase::Completed, Phase::Abandoned]
            .into_iter()
            .find(|p| p.as_str() == text)
    }
}

/// One journal row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalEntry {
    /// Sequence number.
    pub seq: i64,
    /// Phase.
    pub phase: Option<Phase>,
    /// Run directories in the sequence.
    pub run_count: i64,
    /// Every table's version before (started) or after (completed) the sequence.
    pub table_versions: BTreeMap<String, u64>,
    /// Completed rows: the version of each table commit the sequence made.
    pub table_commits: BTreeMap<String, u64>,
    /// Completed rows: rows added per table.
    pub rows_added: BTreeMap<String, u64>,
    /// The unique token of this sequence (in every table commit it made).
    pub token: String,
    /// Who committed: `host:pid:start`.
    pub owner: String,
    /// The journal version holding this row.
    pub position: u64,
    /// When the row was written, µs since the epoch.
    pub timestamp: i64,
    /// Abandoned rows: why. Restore rows: what they restore to.
    pub reason: Option<String>,
    /// Restore rows only: the version every restored table goes back to.
    /// A sequence with this map is a restore (see
    /// [`restore`](crate::lake::journal::restore)); its plan lives here, in the journal, so
    /// `recover` can finish it from the journal alone.
    pub restore_to: BTreeMap<String, u64>,
}

impl JournalEntry {
    /// The row's phase (rows are only built with one).
    pub fn phase(&self) -> Phase {
        self.phase.unwrap_or(Phase::Started)
    }

    /// Whether the row belongs to a restore rather than a commit of staging.
    pub fn is_restore(&self) -> bool {
        !self.restore_to.is_empty()
    }
}

/// The journal as of one of its versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    /// Rows in journal order.
    entries: Vec<JournalEntry>,
    /// The journal's version, `None` when the table does not exist.
    pub version: Option<u64>,
    /// The phases each sequence attempt (token) has rows in, and the highest
    /// sequence number: kept as rows are added, so what every commit asks
    /// (the next number; is my sequence completed?) costs the same at 20
    /// rows as at 20,000, where a scan of the rows had made a long run of
    /// step commits 1.5× slower by its end.
    phases: HashMap<String, u8>,
    max_seq: i64,
    /// Tokens with a `started` row and neither a `completed` nor an
    /// `abandoned` one: every commit asks whether any is unfinished.
    open: HashSet<String>,
}

/// The order of a journal's rows.
fn journal_order(entry: &JournalEntry) -> (u64, i64, Phase) {
    (entry.position, entry.seq, entry.phase())
}

fn phase_bit(phase: Phase) -> u8 {
    match phase {
        Phase::Started => 1,
        Phase::Completed => 2,
        Phase::Abandoned => 4,
    }
}

/// The phases that end a sequence attempt.
const ENDED: u8 = 2 | 4;

impl Journal {
    /// A journal of `entries` (in any order) at `version`.
    pub fn new(entries: Vec<JournalEntry>, version: Option<u64>) -> Journal {
        let mut journal = Journal { version, ..Journal::default() };
        journal.extend(entries);
        journal
    }

    /// Rows in journal order.
    pub fn entries(&self) -> &[JournalEntry] {
        &self.entries
    }

    /// The rows, in journal order, taken out.
    pub fn into_entries(self) -> Vec<JournalEntry> {
        self.entries
    }

    /// Add rows (in any order); the journal's order is kept, by a sort only
    /// when some row belongs before the last one held.
    pub(crate) fn extend(&mut self, mut rows: Vec<JournalEntry>) {
        rows.sort_by_key(journal_order);
        for row in &rows {
            let bits = self.phases.entry(row.token.clone()).or_default();
            *bits |= phase_bit(row.phase());
            if *bits & ENDED == 0 {
                self.open.insert(row.token.clone());
            } else {
                self.open.remove(&row.token);
            }
            self.max_seq = self.max_seq.max(row.seq);
        }
        let in_order = match (self.entries.last(), rows.first()) {
            (Some(last), Some(first)) => journal_order(last) <= journal_order(first),
            _ => true,
        };
        self.entries.extend(rows);
        if !in_order {
            self.entries.sort_by_key(journal_order);
        }
    }

    /// The highest sequence number recorded (0 when none is).
    pub fn max_seq(&self) -> i64 {
        self.max_seq
    }

    /// The rows of one sequence attempt.
    pub fn of_token<'a>(&'a self, token: &'a str) -> impl Iterator<Item = &'a JournalEntry> + 'a {
        self.entries.iter().filter(move |e| e.token == token)
    }

    /// Whether some sequence attempt is started and not ended
    /// ([`Journal::unfinished`] is not empty).
    pub fn has_unfinished(&self) -> bool {
        !self.open.is_empty()
    }

    /// Whether a sequence attempt has a row in `phase`.
    pub fn has(&self, token: &str, phase: Phase) -> bool {
        self.phases.get(token).is_some_and(|bits| bits & phase_bit(phase) != 0)
    }

    /// `started` rows with neither a `completed` nor an `abandoned` row.
    /// (One pass over the rows: a journal of many sequences is asked this
    /// by every commit.)
    pub fn unfinished(&self) -> Vec<&JournalEntry> {
        let ended: std::collections::HashSet<&str> = self
            .entries
            .iter()
            .filter(|e| matches!(e.phase(), Phase::Completed | Phase::Abandoned))
            .map(|e| e.token.as_str())
            .collect();
        self.entries
            .iter()
            .filter(|e| e.phase() == Phase::Started && !ended.contains(e.token.as_str()))
            .collect()
    }

    /// The completed row of a sequence number, if any.
    pub fn completed(&self, seq: i64) -> Option<&JournalEntry> {
        self.entries.iter().find(|e| e.seq == seq && e.phase() == Phase::Completed)
    }
}

/// Read the journal at its latest version (or the given one).
pub async fn read(root: &LakeRoot, at: Option<u64>) -> Result<Journal> {
    let spec = layout::commits_table();
    if !table::exists(root, &spec).await? {
        return Ok(Journal::default());
    }
    let handle = match at {
        None => table::open(root, &spec).await?,
        Some(v) => {
            let mut t = table::open_unloaded(root, &spec).await?;
            t.load_version(v).await.map_err(|e| Error::delta(&spec.name, e))?;
            t
        }
    };
    read_table(&handle, &spec).await
}

/// Read the journal from an open handle.
pub async fn read_table(handle: &deltalake::DeltaTable, spec: &TableSpec) -> Result<Journal> {
    let batches = Select::columns(scan::columns(&COLUMNS)).collect(handle, &spec.name).await?;
    let mut entries = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            entries.push(parse_row(batch, row, &spec.name)?);
        }
    }
    Ok(Journal::new(entries, handle.version()))
}

pub(in crate::lake) const COLUMNS: [&str; 12] = [
    "commit_seq",
    "phase",
    "run_count",
    "table_versions",
    "rows_added",
    "timestamp",
    "token",
    "owner",
    "position",
    "table_commits",
    "reason",
    "restore_to",
];

/// One journal row. A row sluice cannot read (unknown phase, malformed
/// version map) is an error naming it: the journal decides what recovery and
/// readers do, so it is never guessed.
pub(in crate::lake) fn parse_row(
    batch: &RecordBatch,
    row: usize,
    table: &str,
) -> Result<JournalEntry> {
    let values = (0..batch.num_columns())
        .map(|i| read_value(table, batch.column(i).as_ref(), row))
        .collect::<Result<Vec<_>>>()?;
    let seq = values[0]
        .as_int()
        .ok_or_else(|| Error::corrupt(table, format!("row {row}"), "`commit_seq` is null"))?;
    let at = |column: &str| format!("sequence {seq}, column `{column}`");
    let phase = values[1].as_str().and_then(Phase::parse).ok_or_else(|| {
        Error::corrupt(table, at("phase"), format!("unknown phase {:?}", values[1].as_str()))
    })?;
    let map = |i: usize| -> Result<BTreeMap<String, u64>> {
        match values[i].as_str() {
            None => Ok(BTreeMap::new()),
            Some(text) => serde_json::from_str(text).map_err(|e| {
                Error::corrupt(
                    table,
                    at(COLUMNS[i]),
                    format!("not a JSON map of table versions: {e}"),
                )
            }),
        }
    };
    let text = |i: usize| values[i].as_str().map(str::to_owned);
    Ok(JournalEntry {
        seq,
        phase: Some(phase),
        run_count: values[2].as_int().unwrap_or_default(),
        table_versions: map(3)?,
        rows_added: map(4)?,
        timestamp: match values[5] {
            FieldValue::TimestampMicros(t) => t,
            _ => 0,
        },
        // Rows of lakes made before tokens existed: one attempt per sequence.
        token: text(6).unwrap_or_else(|| format!("seq-{seq}")),
        owner: text(7).unwrap_or_default(),
        position: values[8].as_int().map_or(0, |p| p.max(0) as u64),
        table_commits: map(9)?,
        reason: text(10),
        restore_to: map(11)?,
    })
}

/// Active data files above which [`compact_if_fragmented`] rewrites the
/// journal. Every journal row is its own append (one small file); a
/// committer merges them by tier as it goes
/// ([`crate::lake::journal::tip::JournalTip::merge_small_files`], at most ~16 per
/// tier), so this is the backstop for files it cannot size (a journal
/// written otherwise): opening a journal of many files is slow.
pub const MAX_JOURNAL_FILES: usize = 128;

/// Rewrite the journal's rows into one file when it has more than
/// [`MAX_JOURNAL_FILES`]. Rows and their `position` are unchanged, older
/// journal versions stay readable (until vacuum). The rewrite is committed
/// as exactly the version after the one it read (like every journal row),
/// so it can never race an append or another rewrite: if anyone committed
/// first, it gives up and the next commit tries again. (Delta's OPTIMIZE
/// retries on top of concurrent commits, and two of them racing were seen
/// to keep both rewritten copies.)
pub async fn compact_if_fragmented(root: &LakeRoot) -> Result<bool> {
    rewrite_if_more_files_than(root, MAX_JOURNAL_FILES).await.map(|v| v.is_some())
}

/// Rewrite the journal's rows into one file when it has more than `limit`
/// files, as exactly the version after the one it read (see
/// [`compact_if_fragmented`]): the only way the journal is compacted —
/// `sluice compact` uses it too, never Delta's OPTIMIZE. The version
/// committed, if any (`None`: too few files, or another writer committed
/// first).
pub async fn rewrite_if_more_files_than(root: &LakeRoot, limit: usize) -> Result<Option<u64>> {
    let spec = layout::commits_table();
    if !table::exists(root, &spec).await? {
        return Ok(None);
    }
    let mut handle = table::open(root, &spec).await?;
    let files = table::active_files(&handle, &spec)?;
    if files.len() <= limit {
        return Ok(None);
    }
    let journal = read_table(&handle, &spec).await?;
    let schema = table::arrow_schema(&handle, &spec)?;
    let batch = rows_batch(journal.entries(), &schema, &spec)?;
    let mut adds =
        append::write_files(&handle, &spec.name, &[batch], table::writer_properties()).await?;
    let actions = rewrite_actions(&mut adds, files);
    let operation =
        deltalake::protocol::DeltaOperation::Optimize { predicate: None, target_size: 0 };
    let spec_commit = append::CommitSpec::default();
    let committed = append::try_commit_actions_next(
        &mut handle,
        &spec.name,
        actions,
        operation,
        &spec_commit,
        &adds,
    )
    .await?;
    if committed.is_none() {
        append::remove_files(&handle, &adds).await;
    }
    Ok(committed)
}

/// Append one row, computed from the journal as of the version it will be
/// committed on top of. `make` returns `None` when there is nothing to add
/// (e.g. another process recorded the same completion). The row lands as
/// exactly that version + 1; if another writer took it, the journal is read
/// The journal rows `entries` as one batch of the journal's `schema`.
pub(in crate::lake) fn rows_batch(
    entries: &[JournalEntry],
    schema: &deltalake::arrow::datatypes::SchemaRef,
    spec: &TableSpec,
) -> Result<RecordBatch> {
    let rows = entries.iter().map(|e| row_batch(e, schema, spec)).collect::<Result<Vec<_>>>()?;
    deltalake::arrow::compute::concat_batches(schema, &rows)
        .map_err(|e| Error::arrow("rewriting journal rows", e))
}

/// The actions of a rewrite of journal rows without a data change: the
/// new files `adds` (marked so) replace the files `removed`.
pub(in crate::lake) fn rewrite_actions(
    adds: &mut [deltalake::kernel::Add],
    removed: impl IntoIterator<Item = String>,
) -> Vec<deltalake::kernel::Action> {
    use deltalake::kernel::{Action, Remove};
    let now = chrono::Utc::now().timestamp_millis();
    for add in adds.iter_mut() {
        add.data_change = false;
    }
    let mut actions: Vec<Action> = adds.iter().cloned().map(Action::Add).collect();
    actions.extend(removed.into_iter().map(|path| {
        Action::Remove(Remove {
            path,
            data_change: false,
            deletion_timestamp: Some(now),
            ..Remove::default()
        })
    }));
    actions
}

/// again and `make` asked again.
pub async fn append(
    root: &LakeRoot,
    mut make: impl FnMut(&Journal) -> Result<Option<JournalEntry>>,
) -> Result<Option<JournalEntry>> {
    let spec = layout::commits_table();
    for _ in 0..MAX_ATTEMPTS {
        let mut handle = table::open(root, &spec).await?;
        let journal = read_table(&handle, &spec).await?;
        let Some(mut entry) = make(&journal)? else { return Ok(None) };
        entry.position = journal.version.unwrap_or_default() + 1;
        entry.timestamp = chrono::Utc::now().timestamp_micros();
        let schema = table::arrow_schema(&handle, &spec)?;
        let batch = row_batch(&entry, &schema, &spec)?;
        let adds =
            append::write_files(&handle, &spec.name, &[batch], table::writer_properties()).await?;
        let txn = append::CommitSpec { txn: None, metadata: Vec::new(), token: None };
        if append::try_commit_next(&mut handle, &spec.name, &[], &adds, &txn).await?.is_some() {
            return Ok(Some(entry));
        }
        append::remove_files(&handle, &adds).await;
    }
    Err(Error::Contention { table: spec.name.clone(), attempts: MAX_ATTEMPTS })
}

pub(in crate::lake) fn row_batch(
    entry: &JournalEntry,
    schema: &deltalake::arrow::datatypes::SchemaRef,
    spec: &TableSpec,
) -> Result<RecordBatch> {
    let text = |m: &BTreeMap<String, u64>| -> Result<FieldValue> {
        Ok(FieldValue::String(
            serde_json::to_string(m).map_err(|e| Error::json("a journal row", e))?,
        ))
    };
    let s = |v: &str| FieldValue::String(v.to_owned());
    let mut columns = Vec::new();
    for field in schema.fields() {
        let value = match field.name().as_str() {
            "commit_seq" => FieldValue::Int(entry.seq),
            "phase" => s(entry.phase().as_str()),
            "run_count" => FieldValue::Int(entry.run_count),
            "table_versions" => text(&entry.table_versions)?,
            "rows_added" => text(&entry.rows_added)?,
            "timestamp" => FieldValue::TimestampMicros(entry.timestamp),
            "token" => s(&entry.token),
            "owner" => s(&entry.owner),
            "position" => FieldValue::Int(entry.position as i64),
            "table_commits" => text(&entry.table_commits)?,
            "reason" => entry.reason.as_deref().map_or(FieldValue::Null, s),
            "restore_to" if entry.restore_to.is_empty() => FieldValue::Null,
            "restore_to" => text(&entry.restore_to)?,
            _ => FieldValue::Null,
        };
        columns.push(build_array(&spec.name, field, std::iter::once(&value))?);
    }
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::arrow("building a journal row", e))
}

/// Whether any of `specs` holds a commit carrying `token` after the version
/// the `started` row recorded for it (a table that does not exist holds
/// none): how a settle tells which tables a sequence, or its roll-back,
/// has reached.
pub async fn any_table_holds(
    root: &LakeRoot,
    specs: &[&TableSpec],
    started: &JournalEntry,
    token: &str,
) -> Result<bool> {
    for &spec in specs {
        if !table::exists(root, spec).await? {
            continue;
        }
        let since = started.table_versions.get(&spec.name).copied().unwrap_or(0);
        let handle = table::open(root, spec).await?;
        let head = handle.version().unwrap_or_default();
        if append::find_token(&handle, &spec.name, token, since + 1, head).await?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The tables a sequence writes, in commit order.
pub fn sequence_tables(specs: &[TableSpec]) -> Vec<&TableSpec> {
    specs
        .iter()
        .filter(|s| !matches!(s.kind, TableKind::Steps | TableKind::Checks | TableKind::Commits))
        .collect()
}

/// Every table's current version (the journal's excluded), read in reverse
/// commit order: executions first, content tables last. Writers commit in
/// the forward order, so a row seen in a later table always has what it
/// depends on in the earlier tables (an index row its content, an execution
/// its edges), whatever commits while the versions are read.
pub async fn versions(root: &LakeRoot, specs: &[TableSpec]) -> Result<BTreeMap<String, u64>> {
    heads(root, specs, &Handles::default()).await
}

/// [`versions`], read through `handles`: a table it keeps is brought up to
/// date from its kept version, any other is probed without being loaded.
pub async fn heads(
    root: &LakeRoot,
    specs: &[TableSpec],
    handles: &Handles,
) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for spec in specs.iter().rev().filter(|s| s.kind != TableKind::Commits) {
        if let Some(head) = handles.head(root, spec).await? {
            out.insert(spec.name.clone(), head);
        }
    }
    Ok(out)
}

/// The highest sequence number any table's commits record (its
/// `sluice-commit` application transaction), and which table.
pub async fn highest_table_seq(
    root: &LakeRoot,
    specs: &[TableSpec],
) -> Result<Option<(i64, String)>> {
    let mut best: Option<(i64, String)> = None;
    for spec in sequence_tables(specs) {
        if !table::exists(root, spec).await? {
            continue;
        }
        let handle = table::open(root, spec).await?;
        let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
        let txn = state
            .transaction_version(handle.log_store().as_ref(), TXN_APP_ID)
            .await
            .map_err(|e| Error::delta(&spec.name, e))?;
        if let Some(seq) = txn
            && best.as_ref().is_none_or(|(b, _)| seq > *b)
        {
            best = Some((seq, spec.name.clone()));
        }
    }
    Ok(best)
}

/// A table commit that belongs to a sequence, as the table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSequenceCommit {
    /// The table.
    pub table: String,
    /// The table version.
    pub version: u64,
    /// The sequence number.
    pub seq: i64,
    /// The sequence's token.
    pub token: String,
    /// When, ms since the epoch.
    pub timestamp: i64,
}

/// Every sequence commit a table's log still holds (for rebuilding the
/// journal): each version's `sluice_commit_seq` and token metadata.
pub async fn table_sequence_commits(
    root: &LakeRoot,
    spec: &TableSpec,
) -> Result<Vec<TableSequenceCommit>> {
    let handle = table::open(root, spec).await?;
    let head = handle.version().unwrap_or_default();
    let mut out = Vec::new();
    for version in 0..=head {
        let Ok(actions) = table::commit_actions(&handle, &spec.name, version).await else {
            continue; // cleaned up after a checkpoint
        };
        for action in actions {
            if let deltalake::kernel::Action::CommitInfo(info) = action {
                let seq = info.info.get(SEQ_KEY).and_then(serde_json::Value::as_i64);
                let token = info.info.get(TOKEN_KEY).and_then(|v| v.as_str()).map(str::to_owned);
                if let Some(seq) = seq {
                    out.push(TableSequenceCommit {
                        table: spec.name.clone(),
                        version,
                        seq,
                        token: token.unwrap_or_else(|| format!("seq-{seq}")),
                        timestamp: info.timestamp.unwrap_or_default(),
                    });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row(position: u64, seq: i64, token: u8, phase: u8) -> JournalEntry {
        let phase = [Phase::Started, Phase::Completed, Phase::Abandoned][phase as usize % 3];
        JournalEntry {
            seq,
            phase: Some(phase),
            token: format!("t{token}"),
            position,
            ..JournalEntry::default()
        }
    }

    proptest! {
        /// Rows added in batches, in any order, answer exactly what a scan
        /// of all of them would: the order, the highest number, each
        /// token's phases.
        #[test]
        fn a_journal_grown_in_batches_answers_as_a_scan_of_its_rows(
            rows in proptest::collection::vec((0u64..40, 1i64..30, 0u8..6, 0u8..3), 0..60),
            cuts in proptest::collection::vec(0usize..60, 0..6),
        ) {
            let rows: Vec<JournalEntry> =
                rows.into_iter().map(|(p, s, t, ph)| row(p, s, t, ph)).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(rows.len())).collect();
            cuts.sort_unstable();
            let mut journal = Journal::default();
            let mut from = 0;
            for cut in cuts.into_iter().chain([rows.len()]) {
                journal.extend(rows[from..cut].to_vec());
                from = cut;
            }
            let mut sorted = rows.clone();
            sorted.sort_by_key(journal_order);
            let order: Vec<_> = journal.entries().iter().map(journal_order).collect();
            prop_assert_eq!(order, sorted.iter().map(journal_order).collect::<Vec<_>>());
            prop_assert_eq!(journal.max_seq(), rows.iter().map(|e| e.seq).max().unwrap_or(0));
            for token in 0..6u8 {
                let token = format!("t{token}");
                for phase in [Phase::Started, Phase::Completed, Phase::Abandoned] {
                    let scanned = rows.iter().any(|e| e.token == token && e.phase() == phase);
                    prop_assert_eq!(journal.has(&token, phase), scanned);
                }
            }
            prop_assert_eq!(journal.has_unfinished(), !journal.unfinished().is_empty());
            prop_assert_eq!(Journal::new(rows, None), journal.clone());
        }
    }
}
