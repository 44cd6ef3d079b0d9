//! Which files each table holds: the authority is the table itself, the
//! ledger is its readable copy.
//!
//! Every commit of ingested rows carries, in its Delta commit metadata
//! (`sluice_ingest`), the key, content hash and row count of each file whose
//! rows it adds. So "the file's rows are in the table" and "the file is
//! recorded as ingested" are one atomic fact. [`Committed`] is built from
//! those commits, and is what de-duplication checks against — at the very
//! version the next commit is made on top of.
//!
//! The ledger table (`ingest/ledger`) lists every file once with its status
//! (`ok`, `duplicate`, `dead`), attempts, error and table version, for
//! people and for `sluice ingest status`. It is written after the table
//! commit; if a crash comes between, [`Committed::load`] finds table
//! commits the ledger lacks and the ingestor writes their rows on startup.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::arrow::array::{Array, Int64Array, RecordBatch, StringArray};
use deltalake::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use deltalake::kernel::Action;
use serde::{Deserialize, Serialize};

use crate::artifact::arrow_convert::build_array;
use crate::artifact::value::FieldValue;
use crate::error::{Error, Result};
use crate::lake::append::{self, CommitSpec};
use crate::lake::handles::Leased;
use crate::lake::scan::Select;
use crate::lake::table;

/// The commit-metadata key listing a commit's files.
pub const INGEST_KEY: &str = "sluice_ingest";

/// One file in a commit's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedFile {
    /// `<table>/<name>`.
    pub key: String,
    /// BLAKE3 of the file's bytes.
    pub hash: String,
    /// Rows it added.
    pub rows: u64,
}

/// Files a table holds, as of one of its versions.
#[derive(Debug, Clone, Default)]
pub struct Committed {
    /// Keys.
    pub keys: BTreeSet<String>,
    /// Content hashes, with the key of the file that brought each.
    pub hashes: BTreeMap<String, String>,
    /// The table version this is as of.
    pub version: u64,
    /// Files found in table commits that the ledger lacks: `(file, version)`.
    pub unrecorded: Vec<(CommittedFile, u64)>,
}

impl Committed {
    /// From the ledger's `ok` rows of `table`, then every commit the table's
    /// log still holds (ledger rows are written after their commit and, with
    /// several ingest processes, not in version order, so no version can be
    /// assumed covered). Log entries removed after a checkpoint are covered
    /// by the ledger, written long before.
    /// `ledger` is every ledger row ([`read`], once for all tables).
    pub async fn load(ledger: &[LedgerRow], handle: &DeltaTable, table: &str) -> Result<Committed> {
        let mut out = Committed::default();
        for row in ledger.iter().filter(|r| r.table == table && r.status == "ok") {
            out.keys.insert(row.file_key.clone());
            out.hashes.insert(row.content_hash.clone(), row.file_key.clone());
        }
        out.catch_up(handle, table, 0).await?;
        Ok(out)
    }

    /// Add the files of the table's commits from `from` to its head.
    pub async fn catch_up(&mut self, handle: &DeltaTable, table: &str, from: u64) -> Result<()> {
        let head = handle.version().unwrap_or_default();
        for version in from..=head {
            let Ok(actions) = table::commit_actions(handle, table, version).await else {
                continue; // expired log entries: the ledger covers them
            };
            for action in actions {
                let Action::CommitInfo(info) = action else { continue };
                let Some(files) = info.info.get(INGEST_KEY) else { continue };
                let files: Vec<CommittedFile> =
                    serde_json::from_value(files.clone()).map_err(|e| {
                        Error::corrupt(
                            table,
                            format!("version {version}"),
                            format!("bad `{INGEST_KEY}` metadata: {e}"),
                        )
                    })?;
                for file in files {
                    if self.keys.insert(file.key.clone()) {
                        self.hashes.entry(file.hash.clone()).or_insert_with(|| file.key.clone());
                        self.unrecorded.push((file, version));
                    }
                }
            }
        }
        self.version = self.version.max(head);
        Ok(())
    }
}

/// One ledger row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerRow {
    /// The table.
    pub table: String,
    /// `<table>/<name>`.
    pub file_key: String,
    /// BLAKE3 of the file.
    pub content_hash: String,
    /// Rows added.
    pub rows: i64,
    /// Rows rejected (to `<table>_rejects`).
    pub rejected: i64,
    /// `ok`, `duplicate` or `dead`.
    pub status: String,
    /// Deliveries it took.
    pub attempts: i64,
    /// The last error (dead) or what it duplicates (duplicate).
    pub error: Option<String>,
    /// The table version holding its rows (`ok`).
    pub table_version: Option<u64>,
    /// When, µs since the epoch.
    pub at: i64,
}

fn ledger_dir(lake: &Path) -> PathBuf {
    lake.join(crate::lake::layout::INGEST_LEDGER_DIR)
}

fn schema() -> SchemaRef {
    let s = |n: &str| Field::new(n, DataType::Utf8, false);
    let i = |n: &str| Field::new(n, DataType::Int64, true);
    Arc::new(Schema::new(vec![
        s("table"),
        s("file_key"),
        s("content_hash"),
        i("rows"),
        i("rejected"),
        s("status"),
        i("attempts"),
        Field::new("error", DataType::Utf8, true),
        i("table_version"),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
    ]))
}

async fn open(lake: &Path) -> Result<DeltaTable> {
    table::open_or_create_dir(&ledger_dir(lake), "ledger", &schema(), vec![]).await
}

/// The ledger of one ingest process, kept open between appends: an append
/// then only reads the log entries written since the last one, instead of
/// replaying the ledger's log from its last checkpoint per flush.
#[derive(Debug)]
pub struct Ledger {
    lake: PathBuf,
    kept: Option<Leased>,
}

impl Ledger {
    /// The ledger of `lake` (opened on the first append).
    pub fn new(lake: &Path) -> Ledger {
        Ledger { lake: lake.to_path_buf(), kept: None }
    }

    /// Append rows (one commit, on top of whatever other processes wrote).
    pub async fn append(&mut self, rows: &[LedgerRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let batch = batch(rows)?;
        let mut lease =
            Leased::latest(self.kept.take(), &ledger_dir(&self.lake), "ledger", open(&self.lake))
                .await?;
        let adds =
            append::write_files(&lease.table, "ledger", &[batch], table::writer_properties())
                .await?;
        for _ in 0..100 {
            if append::try_commit_next(
                &mut lease.table,
                "ledger",
                &[],
                &adds,
                &CommitSpec::default(),
            )
            .await?
            .is_some()
            {
                self.kept = Some(lease);
                return Ok(());
            }
            lease.table.update_incremental(None).await.map_err(|e| Error::delta("ledger", e))?;
        }
        append::remove_files(&lease.table, &adds).await;
        Err(Error::Contention { table: "ledger".into(), attempts: 100 })
    }
}

/// Ledger rows as one batch of the ledger's schema.
fn batch(rows: &[LedgerRow]) -> Result<RecordBatch> {
    let schema = schema();
    let mut columns = Vec::new();
    for field in schema.fields() {
        let values: Vec<FieldValue> = rows
            .iter()
            .map(|r| match field.name().as_str() {
                "table" => FieldValue::String(r.table.clone()),
                "file_key" => FieldValue::String(r.file_key.clone()),
                "content_hash" => FieldValue::String(r.content_hash.clone()),
                "rows" => FieldValue::Int(r.rows),
                "rejected" => FieldValue::Int(r.rejected),
                "status" => FieldValue::String(r.status.clone()),
                "attempts" => FieldValue::Int(r.attempts),
                "error" => r.error.clone().map_or(FieldValue::Null, FieldValue::String),
                "table_version" => {
                    r.table_version.map_or(FieldValue::Null, |v| FieldValue::Int(v as i64))
                }
                _ => FieldValue::TimestampMicros(r.at),
            })
            .collect();
        columns.push(build_array("ledger", field, values.iter())?);
    }
    RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow("ledger rows", e))
}

/// Every ledger row.
pub async fn read(lake: &Path) -> Result<Vec<LedgerRow>> {
    if !table::is_table(&ledger_dir(lake)) {
        return Ok(Vec::new());
    }
    let handle = open(lake).await?;
    let ledger_schema = schema();
    let names: Vec<&str> = ledger_schema.fields().iter().map(|f| f.name().as_str()).collect();
    let batches =
        Select::columns(crate::lake::scan::columns(&names)).collect(&handle, "ledger").await?;
    let mut out = Vec::new();
    for batch in &batches {
        let column =
            |name: &str| batch.schema().index_of(name).map_err(|e| Error::arrow("ledger", e));
        let text = |name: &str| -> Result<StringArray> {
            crate::lake::scan::text_column(batch, column(name)?, "ledger")
        };
        let int = |name: &str| -> Result<Int64Array> {
            let cast =
                deltalake::arrow::compute::cast(batch.column(column(name)?), &DataType::Int64)
                    .map_err(|e| Error::arrow("ledger", e))?;
            cast.as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .ok_or_else(|| Error::corrupt("ledger", name, "not an integer column"))
        };
        let (t, k, h, s) =
            (text("table")?, text("file_key")?, text("content_hash")?, text("status")?);
        let (rows, rejected, attempts, version) =
            (int("rows")?, int("rejected")?, int("attempts")?, int("table_version")?);
        let error = text("error")?;
        let opt = |a: &Int64Array, i: usize| a.is_valid(i).then(|| a.value(i));
        for i in 0..batch.num_rows() {
            out.push(LedgerRow {
                table: t.value(i).to_owned(),
                file_key: k.value(i).to_owned(),
                content_hash: h.value(i).to_owned(),
                rows: opt(&rows, i).unwrap_or(0),
                rejected: opt(&rejected, i).unwrap_or(0),
                status: s.value(i).to_owned(),
                attempts: opt(&attempts, i).unwrap_or(0),
                error: error.is_valid(i).then(|| error.value(i).to_owned()),
                table_version: opt(&version, i).map(|v| v.max(0) as u64),
                at: 0,
            });
        }
    }
    Ok(out)
}

/// Per-table totals for status: `(files ok, rows, duplicates, dead)`.
pub fn totals(rows: &[LedgerRow]) -> BTreeMap<String, (u64, u64, u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
    for r in rows {
        let e = out.entry(r.table.clone()).or_default();
        match r.status.as_str() {
            "ok" => {
                e.0 += 1;
                e.1 += r.rows.max(0) as u64;
            }
            "duplicate" => e.2 += 1,
            _ => e.3 += 1,
        }
    }
    out
}
