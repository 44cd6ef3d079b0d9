//! The journal a committer keeps between its sequences.
//!
//! Every sequence reads the journal three times (to check it against the
//! tables, to claim a number, to complete) and appends two rows. Read from
//! scratch, each costs a table open and a scan of every row the journal
//! ever got: a long-lived lake's small commits got slower with each one.
//! A [`JournalTip`] keeps the parsed rows at the head of a [`Tip`] of the
//! journal table and moves on version by version, reading only the row
//! files a version added. A version that removes rows with `dataChange`
//! (never written by sluice; the journal's own compaction rewrites rows
//! without a data change), a row file of another schema, or a tip that had
//! to reopen makes it read the whole journal again. Appends commit exactly
//! the journal's next version through the tip (put-if-absent), as
//! [`journal::append`] does through a table handle: losing the version to
//! another committer means reading what it wrote and deciding again.
//!
//! Each append adds a row file, and a journal of many small files is slow
//! to open. Rewriting the whole journal whenever it had many files made
//! every 30th commit pay for every row ever written; instead row files are
//! merged by tier ([`JournalTip::merge_small_files`]): files of under 16
//! rows, of under 256, … — when one tier holds 16 files they become one
//! file of the next. A row is rewritten once per tier (4 times for 65k
//! rows), the journal keeps at most ~16 files per tier, and no merge
//! touches more than 16 files — whose rows come from memory when this tip
//! wrote or read them (a row's `position` is the version that appended it).

use std::collections::{BTreeMap, HashMap};

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::kernel::Action;
use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::protocol::DeltaOperation;

use crate::error::{Error, Result};
use crate::lake::append;
use crate::lake::delta::table;
use crate::lake::delta::tip::{Advanced, Tip};
use crate::lake::io::location::LakeRoot;
use crate::lake::journal::{self, Journal, JournalEntry};
use crate::lake::layout::{self, TableSpec};

/// The journal's rows at the head of a tip of the journal table.
#[derive(Debug)]
pub struct JournalTip {
    tip: Tip,
    journal: Journal,
    /// Live row files, with their rows when known.
    live: BTreeMap<String, Option<u64>>,
    /// The rows' positions of the live files this tip wrote or read: a
    /// row's position is the version that appended it, one file each, so
    /// these files can be merged from the rows in memory.
    positions: HashMap<String, Vec<u64>>,
}

/// Row files of one tier merged into one file of the next.
const FAN_IN: usize = 16;

impl JournalTip {
    /// Open the journal table and read every row.
    pub async fn open(root: &LakeRoot) -> Result<JournalTip> {
        let spec = layout::commits_table();
        let tip = Tip::open(root, &spec).await?;
        let journal = journal::read_table(tip.table(), &spec).await?;
        let live = table::active_file_rows(tip.table(), &spec)?.into_iter().collect();
        Ok(JournalTip { tip, journal, live, positions: HashMap::new() })
    }

    /// Whether a sequence is started and not ended (as of the last advance).
    pub fn has_unfinished(&self) -> bool {
        self.journal.has_unfinished()
    }

    /// The journal as of the last [`JournalTip::advance`] or append.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Live row files of the journal table.
    pub fn files(&self) -> usize {
        self.live.len()
    }

    /// Bring the rows to the journal's latest version.
    pub async fn advance(&mut self, root: &LakeRoot) -> Result<&Journal> {
        let spec = layout::commits_table();
        let (mut added, mut rewritten) = (Vec::new(), false);
        let (live, positions) = (&mut self.live, &mut self.positions);
        let how = self
            .tip
            .advance_with(root, &spec, |_, actions| {
                for action in actions {
                    match action {
                        Action::Add(add) if add.data_change => {
                            live.insert(add.path.clone(), None);
                            added.push(add.path.clone());
                        }
                        Action::Add(add) => {
                            live.insert(add.path.clone(), rows_of(add));
                        }
                        Action::Remove(remove) => {
                            live.remove(&remove.path);
                            positions.remove(&remove.path);
                            rewritten |= remove.data_change;
                        }
                        _ => {}
                    }
                }
            })
            .await?;
        if how == Advanced::Reopened {
            // The tip is at the head, opened from the log: read it whole.
            self.journal = journal::read_table(self.tip.table(), &spec).await?;
            self.live = table::active_file_rows(self.tip.table(), &spec)?.into_iter().collect();
            self.positions.clear();
            return Ok(&self.journal);
        }
        let mut rows = Vec::new();
        for path in &added {
            match read_rows(&self.tip, &spec, path).await? {
                Some(more) if !rewritten => {
                    if let Some(known) = self.live.get_mut(path) {
                        *known = Some(more.len() as u64);
                    }
                    self.positions.insert(path.clone(), more.iter().map(|e| e.position).collect());
                    rows.extend(more);
                }
                _ => {
                    rewritten = true;
                    break;
                }
            }
        }
        if rewritten {
            *self = Self::open(root).await?;
            return Ok(&self.journal);
        }
        self.journal.extend(rows);
        self.journal.version = Some(self.tip.head());
        Ok(&self.journal)
    }

    /// [`journal::append`] through the tip: `make` decides from the journal
    /// at its latest version; its row is committed as exactly the next
    /// version, or `make` decides again on top of whoever took it.
    pub async fn append(
        &mut self,
        root: &LakeRoot,
        mut make: impl FnMut(&Journal) -> Result<Option<JournalEntry>>,
    ) -> Result<Option<JournalEntry>> {
        let spec = layout::commits_table();
        if self.tip.commits_directly().is_err() {
            let appended = journal::append(root, &mut make).await?;
            self.advance(root).await?;
            return Ok(appended);
        }
        for _ in 0..journal::MAX_ATTEMPTS {
            self.advance(root).await?;
            let Some(mut entry) = make(&self.journal)? else { return Ok(None) };
            entry.position = self.tip.head() + 1;
            entry.timestamp = chrono::Utc::now().timestamp_micros();
            let schema = table::arrow_schema(self.tip.table(), &spec)?;
            let batch = journal::row_batch(&entry, &schema, &spec)?;
            let properties = table::writer_properties();
            let adds =
                append::write_files_on_tip(&mut self.tip, &spec.name, &[batch], properties).await?;
            let actions = adds.iter().cloned().map(Action::Add).collect();
            let operation = append::append_operation(&spec.partition_columns);
            let committed =
                self.tip.commit(actions, operation, Default::default(), Vec::new()).await;
            match committed {
                Ok(Some(version)) => {
                    self.live.extend(adds.iter().map(|a| (a.path.clone(), Some(1))));
                    self.positions.extend(adds.iter().map(|a| (a.path.clone(), vec![version])));
                    self.journal.extend(vec![entry.clone()]);
                    self.journal.version = Some(version);
                    return Ok(Some(entry));
                }
                Ok(None) => append::remove_files(self.tip.table(), &adds).await,
                Err(e) => {
                    append::remove_files(self.tip.table(), &adds).await;
                    return Err(e);
                }
            }
        }
        Err(Error::Contention { table: spec.name.clone(), attempts: journal::MAX_ATTEMPTS })
    }
}

impl JournalTip {
    /// Merge the row files of the lowest tier that holds [`FAN_IN`] of
    /// them into one file (the same rows: a rewrite without data change),
    /// committed through the tip. Best effort: losing the version to
    /// another writer leaves the files as they were. Whether it merged.
    pub async fn merge_small_files(&mut self, root: &LakeRoot) -> Result<bool> {
        let spec = layout::commits_table();
        if self.tip.commits_directly().is_err() {
            return Ok(false);
        }
        self.advance(root).await?;
        let mut tiers: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (path, rows) in &self.live {
            if let Some(rows) = rows {
                tiers.entry(tier(*rows)).or_default().push(path.clone());
            }
        }
        let Some(files) = tiers.into_values().find(|files| files.len() >= FAN_IN) else {
            return Ok(false);
        };
        let Some(entries) = self.rows_of_files(&spec, &files).await? else { return Ok(false) };
        let schema = table::arrow_schema(self.tip.table(), &spec)?;
        let batch = journal::rows_batch(&entries, &schema, &spec)?;
        let properties = table::writer_properties();
        let mut adds =
            append::write_files_on_tip(&mut self.tip, &spec.name, &[batch], properties).await?;
        let actions = journal::rewrite_actions(&mut adds, files.iter().cloned());
        let operation = DeltaOperation::Optimize { predicate: None, target_size: 0 };
        match self.tip.commit(actions, operation, Default::default(), Vec::new()).await {
            Ok(Some(_)) => {
                for path in &files {
                    self.live.remove(path);
                    self.positions.remove(path);
                }
                let merged = Some(entries.len() as u64);
                self.live.extend(adds.iter().map(|a| (a.path.clone(), merged)));
                let rows: Vec<u64> = entries.iter().map(|e| e.position).collect();
                self.positions.extend(adds.iter().map(|a| (a.path.clone(), rows.clone())));
                Ok(true)
            }
            Ok(None) => {
                append::remove_files(self.tip.table(), &adds).await;
                Ok(false)
            }
            Err(e) => {
                append::remove_files(self.tip.table(), &adds).await;
                Err(e)
            }
        }
    }
}

impl JournalTip {
    /// The rows of these live files: from memory when this tip knows the
    /// positions of all their rows, else read (concurrently). `None` when
    /// a file has another schema.
    async fn rows_of_files(
        &self,
        spec: &TableSpec,
        files: &[String],
    ) -> Result<Option<Vec<JournalEntry>>> {
        let known: Option<Vec<&Vec<u64>>> = files.iter().map(|f| self.positions.get(f)).collect();
        if let Some(known) = known {
            let entries = self.journal.entries();
            let mut rows = Vec::new();
            let mut wanted: Vec<u64> = known.into_iter().flatten().copied().collect();
            wanted.sort_unstable();
            wanted.dedup();
            for position in wanted {
                let from = entries.partition_point(|e| e.position < position);
                let at = entries[from..].iter().take_while(|e| e.position == position);
                rows.extend(at.cloned());
            }
            // Exactly the files' rows, or read them (rows of one position
            // in two files: written otherwise than one row file a version).
            let expected: u64 =
                files.iter().filter_map(|f| self.live.get(f).copied().flatten()).sum();
            if rows.len() as u64 == expected {
                return Ok(Some(rows));
            }
        }
        let reads = files.iter().map(|path| read_rows(&self.tip, spec, path));
        let mut rows = Vec::new();
        for read in futures::future::try_join_all(reads).await? {
            let Some(read) = read else { return Ok(None) };
            rows.extend(read);
        }
        Ok(Some(rows))
    }
}

/// The tier of a row file: 0 under [`FAN_IN`] rows, 1 under its square, …
fn tier(rows: u64) -> u32 {
    let (mut tier, mut bound) = (0, FAN_IN as u64);
    while rows >= bound {
        tier += 1;
        bound = bound.saturating_mul(FAN_IN as u64);
    }
    tier
}

/// The rows of a file its add action's statistics state.
fn rows_of(add: &deltalake::kernel::Add) -> Option<u64> {
    let stats: serde_json::Value = serde_json::from_str(add.stats.as_deref()?).ok()?;
    stats.get("numRecords")?.as_u64()
}

/// The rows of one journal row file; `None` when the file lacks one of
/// the journal's columns (written under another schema: read the journal
/// whole instead).
async fn read_rows(tip: &Tip, spec: &TableSpec, path: &str) -> Result<Option<Vec<JournalEntry>>> {
    let location = deltalake::Path::from(path);
    let store = tip.table().object_store();
    let fetched = store.get(&location).await.map_err(|e| Error::delta(&spec.name, e.into()))?;
    let bytes = fetched.bytes().await.map_err(|e| Error::delta(&spec.name, e.into()))?;
    let context = || format!("reading journal rows from {path}");
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| Error::parquet(context(), e))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| Error::arrow(context(), e))?;
        let Some(projected) = project(&batch) else { return Ok(None) };
        for row in 0..projected.num_rows() {
            rows.push(journal::parse_row(&projected, row, &spec.name)?);
        }
    }
    Ok(Some(rows))
}

/// The journal's columns of a row batch, in [`journal::COLUMNS`] order.
fn project(batch: &RecordBatch) -> Option<RecordBatch> {
    let schema = batch.schema();
    let indices: Option<Vec<usize>> =
        journal::COLUMNS.iter().map(|c| schema.index_of(c).ok()).collect();
    batch.project(&indices?).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::lake::journal::Phase;

    fn started(seq: i64, token: &str) -> JournalEntry {
        JournalEntry {
            seq,
            phase: Some(Phase::Started),
            token: token.into(),
            owner: "test".into(),
            table_versions: BTreeMap::from([("index".into(), 3)]),
            ..JournalEntry::default()
        }
    }

    #[tokio::test]
    async fn a_kept_journal_reads_as_the_journal_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let root = lake.root();
        let mut kept = JournalTip::open(root).await.unwrap();
        kept.append(root, |j| Ok(Some(started(j.max_seq() + 1, "a")))).await.unwrap();
        // Another committer appends through a table handle …
        journal::append(root, |j| Ok(Some(started(j.max_seq() + 1, "b")))).await.unwrap();
        // … and the kept journal decides on top of its row.
        let ours = kept.append(root, |j| Ok(Some(started(j.max_seq() + 1, "c")))).await.unwrap();
        assert_eq!(ours.map(|e| e.seq), Some(3));
        assert_eq!(kept.journal(), &journal::read(root, None).await.unwrap());
        assert_eq!(kept.files(), 3);
        assert!(kept.live.values().all(|rows| *rows == Some(1)), "{:?}", kept.live);
        // A `make` that declines writes nothing.
        assert_eq!(kept.append(root, |_| Ok(None)).await.unwrap(), None);
        assert_eq!(kept.journal().entries().len(), 3);

        // Another kept journal appends and merges its small files (a
        // rewrite without data change): nothing to read again, the rows
        // stay the same.
        let mut other = JournalTip::open(root).await.unwrap();
        for i in 0..2 * FAN_IN {
            let token = format!("t{i}");
            other.append(root, |j| Ok(Some(started(j.max_seq() + 1, &token)))).await.unwrap();
            other.merge_small_files(root).await.unwrap();
            assert!(other.files() < FAN_IN + 1, "{} files after {i}", other.files());
        }
        kept.advance(root).await.unwrap();
        assert_eq!(kept.journal(), &journal::read(root, None).await.unwrap());
        assert_eq!(kept.live, other.live, "the same files, sized the same");
        assert_eq!(kept.journal().max_seq(), 3 + 2 * FAN_IN as i64);
    }

    #[tokio::test]
    async fn unfinished_sequences_are_followed_row_by_row() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let root = lake.root();
        let mut kept = JournalTip::open(root).await.unwrap();
        let ended =
            |seq, token: &str, phase| JournalEntry { phase: Some(phase), ..started(seq, token) };
        let check = |kept: &JournalTip| {
            assert_eq!(kept.has_unfinished(), !kept.journal().unfinished().is_empty());
            kept.has_unfinished()
        };
        assert!(!check(&kept));
        kept.append(root, |_| Ok(Some(started(1, "a")))).await.unwrap();
        assert!(check(&kept));
        // Completed by another committer.
        journal::append(root, |_| Ok(Some(ended(1, "a", Phase::Completed)))).await.unwrap();
        kept.advance(root).await.unwrap();
        assert!(!check(&kept));
        kept.append(root, |_| Ok(Some(started(2, "b")))).await.unwrap();
        assert!(check(&kept));
        kept.append(root, |_| Ok(Some(ended(2, "b", Phase::Abandoned)))).await.unwrap();
        assert!(!check(&kept));
        assert!(!check(&JournalTip::open(root).await.unwrap()), "read whole");
    }

    #[tokio::test]
    async fn small_row_files_merge_by_tier() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let root = lake.root();
        let mut kept = JournalTip::open(root).await.unwrap();
        let rows = FAN_IN * FAN_IN + 3;
        for i in 0..rows {
            kept.append(root, |j| Ok(Some(started(j.max_seq() + 1, &format!("t{i}")))))
                .await
                .unwrap();
            kept.merge_small_files(root).await.unwrap();
        }
        // FAN_IN² rows became one file of tier 2; three are left alone.
        let sizes: Vec<Option<u64>> = kept.live.values().copied().collect();
        assert_eq!(sizes.len(), 4, "{sizes:?}");
        assert!(sizes.contains(&Some((FAN_IN * FAN_IN) as u64)), "{sizes:?}");
        let fresh = JournalTip::open(root).await.unwrap();
        assert_eq!(fresh.journal(), kept.journal());
        assert_eq!(fresh.live, kept.live, "sizes from the files' statistics");
        // Every merge here was made from the rows in memory (each file's
        // rows known by position), and reads back the same.
        assert_eq!(kept.positions.len(), kept.live.len());
        assert!(fresh.positions.is_empty(), "a journal opened whole knows none");
        assert_eq!((tier(15), tier(16), tier(255), tier(256)), (0, 1, 1, 2));
    }

    #[tokio::test]
    async fn a_journal_made_again_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let mut kept = JournalTip::open(lake.root()).await.unwrap();
        for token in ["a", "b"] {
            kept.append(lake.root(), |j| Ok(Some(started(j.max_seq() + 1, token)))).await.unwrap();
        }
        std::fs::remove_dir_all(dir.path()).unwrap();
        let (again, _) = crate::Lake::init(dir.path()).await.unwrap();
        journal::append(again.root(), |_| Ok(Some(started(1, "new")))).await.unwrap();
        let journal = kept.advance(again.root()).await.unwrap();
        assert_eq!(journal.entries().len(), 1);
        assert_eq!(journal.entries()[0].token, "new");
    }
}
