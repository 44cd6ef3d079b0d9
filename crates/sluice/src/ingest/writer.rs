//! The single writer: files parsed (and already written as Parquet data
//! files) by the workers become visible in one Delta commit per flush, with
//! their keys in the same commit.
//!
//! A flush of table T:
//!
//! 1. bring T's [`Committed`] set up to T's head (other ingest processes
//!    may have committed);
//! 2. drop every file whose key and content T already holds (a
//!    redelivery) — or, with `dedup_content`, whose content alone it holds
//!    — or that repeats another file of the flush: its data files are
//!    deleted, its message acknowledged. A known key with new content is
//!    new data, committed and recorded as such;
//! 3. commit the remaining files' data files as exactly T's next version,
//!    with their keys, hashes and row counts in the commit metadata; if
//!    another writer took that version, go back to 1;
//! 4. write the ledger rows, acknowledge the messages.
//!
//! A crash before 3 leaves uncommitted data files (`vacuum --full` removes
//! them) and claimed messages that are delivered again; a crash after 3
//! leaves messages whose keys T holds, acknowledged without a second write
//! when they come back. So every file's rows land exactly once.
//!
//! Rejected rows (`on_row_error: reject`) go to `<table>_rejects` by the
//! same protocol, before the table's own commit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use deltalake::DeltaTable;
use deltalake::kernel::Add;

use super::ledger::{Committed, CommittedFile, INGEST_KEY, Ledger, LedgerRow};
use super::queue::{Message, Queue};
use super::upsert;
use crate::error::Result;
use crate::lake::append::{self, CommitSpec};
use crate::lake::delta::handles::Leased;
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::TableSpec;

/// A file ready to commit: its data files are written, not committed.
#[derive(Debug)]
pub struct ReadyFile {
    /// The delivery.
    pub message: Message,
    /// BLAKE3 of its bytes.
    pub hash: String,
    /// Rows written.
    pub rows: u64,
    /// Uncommitted data files of the table.
    pub adds: Vec<Add>,
    /// Uncommitted data files of the rejects table.
    pub reject_adds: Vec<Add>,
    /// Rows rejected.
    pub rejected: u64,
    /// Bytes of its data files.
    pub bytes: u64,
}

/// One table the writer commits to.
pub struct Target {
    /// The lake it is in.
    pub lake: LakeRoot,
    /// Where in the lake.
    pub spec: TableSpec,
    /// Partition columns.
    pub partitions: Vec<String>,
    /// Files it holds.
    pub committed: Committed,
    /// The primary key of a `write_mode: merge` table (empty: append).
    merge_key: Vec<String>,
    /// Its `sequence_by` column.
    sequence_by: Option<String>,
    /// The table's handle between flushes (brought up to date per flush,
    /// reopened as [`handles`] says).
    ///
    /// [`handles`]: crate::lake::delta::handles
    kept: Option<Leased>,
}

impl Target {
    /// Open the table and what it holds (`ledger`: every ledger row).
    pub async fn open(
        ledger: &[LedgerRow],
        lake: &LakeRoot,
        spec: TableSpec,
        partitions: Vec<String>,
    ) -> Result<Target> {
        let name = spec.name.as_str();
        let handle = table::open(lake, &spec).await?;
        let committed = Committed::load(ledger, &handle, name).await?;
        Ok(Target {
            lake: lake.clone(),
            spec,
            partitions,
            committed,
            merge_key: Vec::new(),
            sequence_by: None,
            kept: None,
        })
    }

    /// Upsert by `key` instead of appending (`write_mode: merge`), newer
    /// `sequence_by` values winning when given.
    pub fn merging(mut self, key: Vec<String>, sequence_by: Option<String>) -> Target {
        self.merge_key = key;
        self.sequence_by = sequence_by;
        self
    }

    /// Commit `adds` (uncommitted data files of this table) as exactly the
    /// version after `lease`'s: appended, or merged by the key — their rows
    /// read back, the last row of each key kept (arrival order), and
    /// upserted; the data files written by the workers are then deleted
    /// (the merge wrote its own). `None`: another writer took the version.
    async fn commit_next(
        &self,
        lease: &mut Leased,
        adds: &[Add],
        spec: &CommitSpec,
    ) -> Result<Option<u64>> {
        if self.merge_key.is_empty() {
            return append::try_commit_next(
                &mut lease.table,
                &self.spec.name,
                &self.partitions,
                adds,
                spec,
            )
            .await;
        }
        let rows = super::transform::source::read(&lease.table, &self.spec.name, adds).await?;
        if rows.rows == 0 {
            return append::try_commit_next(
                &mut lease.table,
                &self.spec.name,
                &self.partitions,
                &[],
                spec,
            )
            .await;
        }
        let sequence = self.sequence_by.as_deref();
        let source =
            upsert::last_per_key(&rows.batches, &self.merge_key, sequence, &self.spec.name)?;
        let on_match =
            upsert::OnMatch { columns: BTreeMap::new(), sequence_by: self.sequence_by.clone() };
        let merged = upsert::merge(
            lease.table.clone(),
            &self.spec.name,
            vec![source],
            &self.merge_key,
            &on_match,
            spec.properties_on(&lease.table, &self.spec.name)?,
        )
        .await?;
        if merged.is_some() {
            append::remove_files(&lease.table, adds).await;
        }
        Ok(merged.map(|m| m.version))
    }

    async fn handle(&self) -> Result<DeltaTable> {
        table::open(&self.lake, &self.spec).await
    }

    /// Commit these files' data files (one per entry of `files`, with their
    /// adds) unless the table holds them. Returns, per file, the version its
    /// rows landed in, or the key of what it duplicates.
    pub async fn commit(
        &mut self,
        files: &[(CommittedFile, &[Add])],
        dedup_content: bool,
    ) -> Result<Vec<std::result::Result<u64, String>>> {
        loop {
            let mut lease = self.at_head().await?;
            let mut outcome: Vec<std::result::Result<u64, String>> =
                Vec::with_capacity(files.len());
            let mut keys: BTreeSet<(&str, &str)> = BTreeSet::new();
            let mut hashes: BTreeMap<&str, &str> = BTreeMap::new();
            let mut adds: Vec<Add> = Vec::new();
            let mut metadata = Vec::new();
            for (file, file_adds) in files {
                let duplicate = if self.committed.holds(&file.key, &file.hash)
                    || keys.contains(&(file.key.as_str(), file.hash.as_str()))
                {
                    Some(file.key.clone())
                } else if dedup_content {
                    self.committed
                        .hashes
                        .get(&file.hash)
                        .cloned()
                        .or_else(|| hashes.get(file.hash.as_str()).map(|k| (*k).to_owned()))
                } else {
                    None
                };
                match duplicate {
                    Some(of) => outcome.push(Err(of)),
                    None => {
                        keys.insert((&file.key, &file.hash));
                        hashes.insert(&file.hash, &file.key);
                        adds.extend(file_adds.iter().cloned());
                        let paths = file_adds.iter().map(|a| a.path.clone()).collect();
                        metadata.push(CommittedFile { paths, ..file.clone() });
                        outcome.push(Ok(0));
                    }
                }
            }
            if metadata.is_empty() {
                self.kept = Some(lease);
                return Ok(outcome);
            }
            let spec = CommitSpec {
                metadata: vec![(
                    INGEST_KEY.to_owned(),
                    serde_json::to_value(&metadata)
                        .map_err(|e| crate::error::Error::json("ingest metadata", e))?,
                )],
                token: Some(crate::host::unique_id()),
                txn: None,
            };
            if let Some(version) = self.commit_next(&mut lease, &adds, &spec).await? {
                for file in &metadata {
                    self.committed.insert(&file.key, &file.hash);
                }
                self.committed.version = version;
                for o in outcome.iter_mut().filter(|o| o.is_ok()) {
                    *o = Ok(version);
                }
                self.kept = Some(lease);
                return Ok(outcome);
            }
            self.kept = Some(lease);
            tracing::debug!(table = %self.spec.name, "another writer took the version; checking again");
        }
    }

    /// Whether the table holds the file `key` (checked at its head).
    pub async fn holds(&mut self, key: &str) -> Result<bool> {
        if self.committed.keys.contains(key) {
            return Ok(true);
        }
        self.kept = Some(self.at_head().await?);
        Ok(self.committed.keys.contains(key))
    }

    /// The kept handle brought to the table's head, and the [`Committed`]
    /// set with it (other ingest processes may have committed).
    async fn at_head(&mut self) -> Result<Leased> {
        let lease = Leased::latest(
            self.kept.take(),
            self.lake.local().map(|root| table::table_dir(root, &self.spec)).as_deref(),
            &self.spec.name,
            table::open(&self.lake, &self.spec),
        )
        .await?;
        let from = self.committed.version + 1;
        self.committed.catch_up(&lease.table, &self.spec.name, from).await?;
        Ok(lease)
    }

    /// Delete data files that will never be committed.
    pub async fn discard(&self, adds: &[Add]) -> Result<()> {
        if adds.is_empty() {
            return Ok(());
        }
        let handle = self.handle().await?;
        append::remove_files(&handle, adds).await;
        Ok(())
    }
}

/// What a flush did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Flushed {
    /// Files whose rows landed.
    pub files: u64,
    /// Rows that landed.
    pub rows: u64,
    /// Files found already ingested.
    pub duplicates: u64,
    /// Files ingested under a name already ingested with other content.
    pub changed: u64,
    /// Commit latency, seconds.
    pub seconds: f64,
}

/// Flush one table's buffered files (see the module doc).
pub async fn flush(
    ledger: &mut Ledger,
    queue: &Queue,
    target: &mut Target,
    rejects: Option<&mut Target>,
    files: Vec<ReadyFile>,
    dedup_content: bool,
) -> Result<Flushed> {
    let clock = Instant::now();
    let files = with_data_files(queue, target, files).await?;
    let entries: Vec<CommittedFile> = files
        .iter()
        .map(|f| CommittedFile {
            key: f.message.key(),
            hash: f.hash.clone(),
            rows: f.rows,
            paths: Vec::new(),
        })
        .collect();
    if let Some(rejects) = rejects {
        let with_rejects: Vec<(CommittedFile, &[Add])> = files
            .iter()
            .zip(&entries)
            .filter(|(f, _)| !f.reject_adds.is_empty())
            .map(|(f, e)| {
                (CommittedFile { rows: f.rejected, ..e.clone() }, f.reject_adds.as_slice())
            })
            .collect();
        if !with_rejects.is_empty() {
            let outcome = rejects.commit(&with_rejects, false).await?;
            for ((_, adds), o) in with_rejects.iter().zip(outcome) {
                if o.is_err() {
                    rejects.discard(adds).await?;
                }
            }
        }
    }
    let batch: Vec<(CommittedFile, &[Add])> =
        files.iter().zip(&entries).map(|(f, e)| (e.clone(), f.adds.as_slice())).collect();
    let outcome = target.commit(&batch, dedup_content).await?;
    let mut out = Flushed::default();
    let mut ledger_rows = Vec::new();
    let now = chrono::Utc::now().timestamp_micros();
    for (file, result) in files.iter().zip(outcome) {
        let (status, version, error) = match result {
            Ok(version) => {
                out.files += 1;
                out.rows += file.rows;
                let key = file.message.key();
                let replaced = target.committed.other_content(&key, &file.hash).map(|earlier| {
                    format!("new content under a name already ingested (earlier content {earlier})")
                });
                if replaced.is_some() {
                    out.changed += 1;
                }
                ("ok", Some(version), replaced)
            }
            Err(of) => {
                out.duplicates += 1;
                target.discard(&file.adds).await?;
                if of == file.message.key() {
                    continue; // a redelivery: the file already has its ledger row
                }
                ("duplicate", None, Some(format!("same content as {of}")))
            }
        };
        ledger_rows.push(LedgerRow {
            table: target.spec.name.clone(),
            file_key: file.message.key(),
            content_hash: file.hash.clone(),
            rows: if status == "ok" { file.rows as i64 } else { 0 },
            rejected: file.rejected as i64,
            status: status.into(),
            attempts: i64::from(file.message.attempt),
            error,
            table_version: version,
            at: now,
        });
    }
    ledger.append(&ledger_rows).await?;
    for file in &files {
        queue.ack(&file.message).await?;
    }
    out.seconds = clock.elapsed().as_secs_f64();
    Ok(out)
}

/// The files whose uncommitted data files are all still in storage. One
/// that lost any (a `vacuum --full` with a forced short retention ran
/// beside the ingestion, which takes no lock) is not committed — a commit
/// naming missing files would acknowledge rows nobody can read — but
/// delivered again, its remaining data files given up.
async fn with_data_files(
    queue: &Queue,
    target: &Target,
    files: Vec<ReadyFile>,
) -> Result<Vec<ReadyFile>> {
    let mut kept = Vec::with_capacity(files.len());
    for file in files {
        let mut missing = None;
        for add in &file.adds {
            let path = object_store::path::Path::from_url_path(&add.path)
                .map_or_else(|_| add.path.clone(), |p| p.to_string());
            if !target.lake.file_exists(&format!("{}/{path}", target.spec.path)).await? {
                missing = Some(add);
                break;
            }
        }
        match missing {
            None => kept.push(file),
            Some(gone) => {
                let reason = format!(
                    "its data file {} vanished before the commit (a `vacuum --full` with a short retention?); delivered again",
                    gone.path
                );
                tracing::warn!(file = %file.message.key(), %reason, "not committed");
                target.discard(&file.adds).await?;
                queue.nack(&file.message, &reason).await?;
            }
        }
    }
    Ok(kept)
}

/// Ledger rows for table commits the ledger lacks (a crash came between a
/// commit and its ledger rows).
pub async fn repair_ledger(ledger: &mut Ledger, target: &mut Target) -> Result<usize> {
    let missing = std::mem::take(&mut target.committed.unrecorded);
    let now = chrono::Utc::now().timestamp_micros();
    let rows: Vec<LedgerRow> = missing
        .iter()
        .map(|(f, version)| LedgerRow {
            table: target.spec.name.clone(),
            file_key: f.key.clone(),
            content_hash: f.hash.clone(),
            rows: f.rows as i64,
            rejected: 0,
            status: "ok".into(),
            attempts: 0,
            error: Some("recorded on startup from the table's commit".into()),
            table_version: Some(*version),
            at: now,
        })
        .collect();
    ledger.append(&rows).await?;
    Ok(rows.len())
}
