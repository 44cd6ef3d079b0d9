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

use std::path::Path;

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::kernel::Action;
use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::append;
use super::journal::{self, Journal, JournalEntry};
use super::layout::{self, TableSpec};
use super::table;
use super::tip::{Advanced, Tip};
use crate::error::{Error, Result};

/// The journal's rows at the head of a tip of the journal table.
#[derive(Debug)]
pub struct JournalTip {
    tip: Tip,
    journal: Journal,
    /// Live row files (the journal is compacted when they are many).
    files: usize,
}

impl JournalTip {
    /// Open the journal table and read every row.
    pub async fn open(root: &Path) -> Result<JournalTip> {
        let spec = layout::commits_table();
        let tip = Tip::open(root, &spec).await?;
        let journal = journal::read_table(tip.table(), &spec).await?;
        let files = table::active_files(tip.table(), &spec)?.len();
        Ok(JournalTip { tip, journal, files })
    }

    /// The journal as of the last [`JournalTip::advance`] or append.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Live row files of the journal table.
    pub fn files(&self) -> usize {
        self.files
    }

    /// Bring the rows to the journal's latest version.
    pub async fn advance(&mut self, root: &Path) -> Result<&Journal> {
        let spec = layout::commits_table();
        let (mut added, mut rewritten, mut files) = (Vec::new(), false, self.files as i64);
        let how = self
            .tip
            .advance_with(root, &spec, |_, actions| {
                for action in actions {
                    match action {
                        Action::Add(add) => {
                            files += 1;
                            if add.data_change {
                                added.push(add.path.clone());
                            }
                        }
                        Action::Remove(remove) => {
                            files -= 1;
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
            self.files = table::active_files(self.tip.table(), &spec)?.len();
            return Ok(&self.journal);
        }
        self.files = files.max(0) as usize;
        let mut rows = Vec::new();
        for path in &added {
            match read_rows(&self.tip, &spec, path).await? {
                Some(more) if !rewritten => rows.extend(more),
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
        self.journal.entries.extend(rows);
        self.journal.entries.sort_by_key(|e| (e.position, e.seq, e.phase()));
        self.journal.version = Some(self.tip.head());
        Ok(&self.journal)
    }

    /// [`journal::append`] through the tip: `make` decides from the journal
    /// at its latest version; its row is committed as exactly the next
    /// version, or `make` decides again on top of whoever took it.
    pub async fn append(
        &mut self,
        root: &Path,
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
            let adds = append::write_files(
                self.tip.table(),
                &spec.name,
                &[batch],
                table::writer_properties(),
            )
            .await?;
            let actions = adds.iter().cloned().map(Action::Add).collect();
            let operation = append::append_operation(&spec.partition_columns);
            let committed =
                self.tip.commit(actions, operation, Default::default(), Vec::new()).await;
            match committed {
                Ok(Some(version)) => {
                    self.files += adds.len();
                    self.journal.entries.push(entry.clone());
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
        // A `make` that declines writes nothing.
        assert_eq!(kept.append(root, |_| Ok(None)).await.unwrap(), None);
        assert_eq!(kept.journal().entries.len(), 3);

        // Compaction rewrites the rows without a data change: nothing to
        // read again, the rows stay the same.
        for i in 0..journal::MAX_JOURNAL_FILES {
            let token = format!("t{i}");
            journal::append(root, |j| Ok(Some(started(j.max_seq() + 1, &token)))).await.unwrap();
        }
        assert!(journal::compact_if_fragmented(root).await.unwrap());
        kept.advance(root).await.unwrap();
        assert_eq!(kept.journal(), &journal::read(root, None).await.unwrap());
        assert_eq!(kept.files(), 1);
        assert_eq!(kept.journal().max_seq(), 3 + journal::MAX_JOURNAL_FILES as i64);
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
        assert_eq!(journal.entries.len(), 1);
        assert_eq!(journal.entries[0].token, "new");
    }
}
