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
//!
//! A file can be *forgotten*: when `doctor --repair` finds one of its data
//! files lost, it removes all of the file's rows in one commit that names it
//! under [`FORGOTTEN_KEY`], and the ledger records it `forgotten`. From then
//! on neither the table nor the ledger holds it, so the same file dropped
//! again lands whole instead of being skipped as a redelivery.

use std::collections::{BTreeMap, BTreeSet};
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
use crate::lake::delta::handles::Leased;
use crate::lake::delta::scan::Select;
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::TableSpec;

/// The commit-metadata key listing a commit's files.
pub const INGEST_KEY: &str = "sluice_ingest";

/// The commit-metadata key listing the files whose rows a commit removed
/// because one of their data files was lost: the table no longer holds them.
pub const FORGOTTEN_KEY: &str = "sluice_ingest_forgotten";

/// One file in a commit's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedFile {
    /// `<table>/<name>`.
    pub key: String,
    /// BLAKE3 of the file's bytes.
    pub hash: String,
    /// Rows it added.
    pub rows: u64,
    /// The data files that hold its rows, as the commit adds them (absent
    /// in commits of an older sluice: then every file of the commit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// Files a table holds, as of one of its versions.
///
/// A delivered file is known by its key *and* its content: the same name
/// delivered again with the same bytes is a redelivery, but a file dropped
/// again under a known name with other bytes is new data.
#[derive(Debug, Clone, Default)]
pub struct Committed {
    /// Keys of every file committed, whatever its content.
    pub keys: BTreeSet<String>,
    /// `(key, content hash)` of every file committed.
    pub files: BTreeSet<(String, String)>,
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
        let recorded: BTreeSet<(String, String)> = held(ledger.iter().filter(|r| r.table == table))
            .map(|r| (r.file_key.clone(), r.content_hash.clone()))
            .collect();
        for (key, hash) in &recorded {
            out.insert(key, hash);
        }
        out.catch_up(handle, table, 0).await?;
        // A file forgotten and ingested again is found anew in the log, but
        // the ledger may already say so.
        out.unrecorded.retain(|(f, _)| !recorded.contains(&(f.key.clone(), f.hash.clone())));
        Ok(out)
    }

    /// Whether the table holds this file with this content.
    pub fn holds(&self, key: &str, hash: &str) -> bool {
        self.files.contains(&(key.to_owned(), hash.to_owned()))
    }

    /// The content hash of another file committed under `key`, if any.
    pub fn other_content(&self, key: &str, hash: &str) -> Option<&str> {
        self.files
            .range((key.to_owned(), String::new())..)
            .take_while(|(k, _)| k == key)
            .map(|(_, h)| h.as_str())
            .find(|h| *h != hash)
    }

    /// Record a committed file; whether it was new.
    pub fn insert(&mut self, key: &str, hash: &str) -> bool {
        self.keys.insert(key.to_owned());
        self.hashes.entry(hash.to_owned()).or_insert_with(|| key.to_owned());
        self.files.insert((key.to_owned(), hash.to_owned()))
    }

    /// Record that the table no longer holds this file.
    pub fn forget(&mut self, key: &str, hash: &str) {
        self.files.remove(&(key.to_owned(), hash.to_owned()));
        if self.hashes.get(hash).map(String::as_str) == Some(key) {
            self.hashes.remove(hash);
        }
        if !self.files.range((key.to_owned(), String::new())..).any(|(k, _)| k == key) {
            self.keys.remove(key);
        }
        self.unrecorded.retain(|(f, _)| !(f.key == key && f.hash == hash));
    }

    /// Add the files of the table's commits from `from` to its head.
    pub async fn catch_up(&mut self, handle: &DeltaTable, table: &str, from: u64) -> Result<()> {
        let head = handle.version().unwrap_or_default();
        for version in from..=head {
            // An entry log clean-up removed is absent (the ledger, written
            // long before, covers it); taking an unreadable one for absent
            // would make its files look new.
            let Some(actions) = table::retained_actions(handle, table, version).await? else {
                continue;
            };
            for action in actions {
                let Action::CommitInfo(info) = action else { continue };
                for file in listed(&info, INGEST_KEY, table, version)? {
                    if self.insert(&file.key, &file.hash) {
                        self.unrecorded.push((file, version));
                    }
                }
                for file in listed(&info, FORGOTTEN_KEY, table, version)? {
                    self.forget(&file.key, &file.hash);
                }
            }
        }
        self.version = self.version.max(head);
        Ok(())
    }
}

/// The files a commit's metadata lists under `key`.
pub(crate) fn listed(
    info: &deltalake::kernel::CommitInfo,
    key: &str,
    table: &str,
    version: u64,
) -> Result<Vec<CommittedFile>> {
    let Some(files) = info.info.get(key) else { return Ok(Vec::new()) };
    serde_json::from_value(files.clone()).map_err(|e| {
        Error::corrupt(table, format!("version {version}"), format!("bad `{key}` metadata: {e}"))
    })
}

/// The ledger rows of files the table holds: each file's latest `ok` or
/// `forgotten` row decides (a forgotten file dropped again is `ok` anew).
/// Latest by `at`, which follows commit order whatever the writers'
/// clocks: [`Ledger::append`] stamps its rows after every row of the
/// version it commits on top of.
fn held<'a>(rows: impl Iterator<Item = &'a LedgerRow>) -> impl Iterator<Item = &'a LedgerRow> {
    let mut latest: BTreeMap<String, &LedgerRow> = BTreeMap::new();
    for row in rows.filter(|r| r.status == "ok" || r.status == FORGOTTEN) {
        let slot = latest.entry(ok_key(row)).or_insert(row);
        if row.at >= slot.at {
            *slot = row;
        }
    }
    latest.into_values().filter(|r| r.status == "ok")
}

/// The status of a file whose rows were removed because a data file of it
/// was lost (see the module doc).
pub const FORGOTTEN: &str = "forgotten";

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
    /// `ok`, `duplicate`, `dead` or `forgotten`.
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

fn ledger_spec() -> TableSpec {
    TableSpec::ingestion("ledger", crate::lake::layout::INGEST_LEDGER_DIR)
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

async fn open(lake: &LakeRoot) -> Result<DeltaTable> {
    table::open_or_create(lake, &ledger_spec(), &schema(), vec![]).await
}

/// The commit metadata key listing the `ok` rows a ledger commit added
/// (`table`, `file_key`, `content_hash` joined by [`OK_SEP`]).
pub const LEDGER_OK_KEY: &str = "sluice_ledger_ok";
const OK_SEP: char = '\u{1f}';

/// The commit metadata key listing the `forgotten` rows a ledger commit
/// added, spelt as [`LEDGER_OK_KEY`] spells them.
pub const LEDGER_FORGOTTEN_KEY: &str = "sluice_ledger_forgotten";

/// The commit metadata key holding the largest `at` of a ledger commit's
/// rows, so the next append stamps its rows after it without reading them.
pub const LEDGER_MAX_AT_KEY: &str = "sluice_ledger_max_at";

fn ok_key(row: &LedgerRow) -> String {
    format!("{}{OK_SEP}{}{OK_SEP}{}", row.table, row.file_key, row.content_hash)
}

/// The ledger of one ingest process, kept open between appends: an append
/// then only reads the log entries written since the last one, instead of
/// replaying the ledger's log from its last checkpoint per flush.
///
/// A file is recorded `ok` once. Two writers can both mean to record it —
/// one that committed it and is about to write its row, another starting
/// up that found the commit without a row ([`super::writer::repair_ledger`])
/// — so an append drops the `ok` rows the ledger holds at the very version
/// it commits on top of: the rows it knows, plus those the versions since
/// name in their metadata ([`LEDGER_OK_KEY`]).
///
/// Which of a file's `ok` and `forgotten` rows is the latest must not
/// depend on clocks: two hosts whose clocks disagree could otherwise order
/// a forget and a re-ingest backwards. So an append stamps each row's `at`
/// past the largest `at` at the version it commits on top of (a Lamport
/// clock, made safe by the exactly-next commit): `at` order is commit
/// order.
#[derive(Debug)]
pub struct Ledger {
    lake: LakeRoot,
    kept: Option<Leased>,
    /// The `ok` rows the ledger holds, as of `known_at`.
    ok: BTreeSet<String>,
    /// The largest `at` of the ledger's rows, as of `known_at`.
    max_at: i64,
    known_at: Option<u64>,
}

impl Ledger {
    /// The ledger of `lake` (opened on the first append).
    pub fn new(lake: impl Into<LakeRoot>) -> Ledger {
        Ledger { lake: lake.into(), kept: None, ok: BTreeSet::new(), max_at: 0, known_at: None }
    }

    /// Append rows (one commit, on top of whatever other processes wrote),
    /// less the `ok` rows the ledger holds already.
    pub async fn append(&mut self, rows: &[LedgerRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut lease = Leased::latest(
            self.kept.take(),
            self.lake.local().map(|root| table::table_dir(root, &ledger_spec())).as_deref(),
            "ledger",
            open(&self.lake),
        )
        .await?;
        // (rows, the `at` floor they were stamped from, their data files)
        let mut written: Option<(usize, i64, Vec<deltalake::kernel::Add>)> = None;
        for _ in 0..100 {
            self.learn(&lease.table).await?;
            let mut in_call = BTreeSet::new();
            let fresh: Vec<&LedgerRow> = rows
                .iter()
                .filter(|r| {
                    r.status != "ok" || (!self.ok.contains(&ok_key(r)) && in_call.insert(ok_key(r)))
                })
                .collect();
            if fresh.is_empty() {
                if let Some((_, _, adds)) = written.take() {
                    append::remove_files(&lease.table, &adds).await;
                }
                self.kept = Some(lease);
                return Ok(());
            }
            let floor = self.max_at + 1;
            let stamped = stamp(&fresh, floor);
            let max_at = stamped.iter().map(|r| r.at).max().unwrap_or(self.max_at);
            let adds = match written.take() {
                Some((count, at, adds)) if count == fresh.len() && at == floor => adds,
                stale => {
                    if let Some((_, _, adds)) = stale {
                        append::remove_files(&lease.table, &adds).await;
                    }
                    let props = table::writer_properties();
                    append::write_files(&lease.table, "ledger", &[batch(&stamped)?], props).await?
                }
            };
            let keyed = |status: &str| -> Vec<String> {
                fresh.iter().filter(|r| r.status == status).map(|r| ok_key(r)).collect()
            };
            let (oks, forgotten) = (keyed("ok"), keyed(FORGOTTEN));
            let spec = CommitSpec {
                metadata: vec![
                    (LEDGER_OK_KEY.to_owned(), serde_json::json!(oks)),
                    (LEDGER_FORGOTTEN_KEY.to_owned(), serde_json::json!(forgotten)),
                    (LEDGER_MAX_AT_KEY.to_owned(), serde_json::json!(max_at)),
                ],
                ..CommitSpec::default()
            };
            if let Some(version) =
                append::try_commit_next(&mut lease.table, "ledger", &[], &adds, &spec).await?
            {
                self.ok.extend(oks);
                for key in &forgotten {
                    self.ok.remove(key);
                }
                self.max_at = max_at;
                self.known_at = Some(version);
                self.kept = Some(lease);
                return Ok(());
            }
            written = Some((fresh.len(), floor, adds));
            lease.table.update_incremental(None).await.map_err(|e| Error::delta("ledger", e))?;
        }
        if let Some((_, _, adds)) = written {
            append::remove_files(&lease.table, &adds).await;
        }
        Err(Error::Contention { table: "ledger".into(), attempts: 100 })
    }

    /// Bring the known `ok` rows to `table`'s version: from the commits'
    /// metadata since the version last known, or — the first time, or past
    /// a commit without that metadata (an older sluice) — from every row.
    async fn learn(&mut self, table: &DeltaTable) -> Result<()> {
        let head = table.version().unwrap_or_default();
        if let Some(known) = self.known_at {
            let mut ok = self.ok.clone();
            let mut max_at = self.max_at;
            let mut whole = false;
            for version in known + 1..=head {
                let actions = table::commit_actions(table, "ledger", version).await?;
                let adds = actions.iter().any(|a| matches!(a, Action::Add(a) if a.data_change));
                let info = actions.iter().find_map(|a| match a {
                    Action::CommitInfo(info) => Some(&info.info),
                    _ => None,
                });
                let keys = |name: &str| {
                    info.and_then(|i| i.get(name))
                        .and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok())
                };
                let newest = info.and_then(|i| i.get(LEDGER_MAX_AT_KEY)).and_then(|v| v.as_i64());
                match (keys(LEDGER_OK_KEY), keys(LEDGER_FORGOTTEN_KEY), newest) {
                    (Some(added), forgotten, Some(newest)) => {
                        max_at = max_at.max(newest);
                        ok.extend(added);
                        forgotten.into_iter().flatten().for_each(|k| {
                            ok.remove(&k);
                        });
                    }
                    _ if adds => whole = true,
                    _ => {}
                }
            }
            if !whole {
                self.ok = ok;
                self.max_at = max_at;
                self.known_at = Some(head);
                return Ok(());
            }
        }
        let rows = read_table(table).await?;
        self.ok = held(rows.iter()).map(ok_key).collect();
        self.max_at = rows.iter().map(|r| r.at).max().unwrap_or(0);
        self.known_at = Some(head);
        Ok(())
    }
}

/// Rows to append, each `at` moved past `floor` where its clock is behind
/// and strictly increasing in the order given.
fn stamp(rows: &[&LedgerRow], floor: i64) -> Vec<LedgerRow> {
    let mut next = floor;
    rows.iter()
        .map(|r| {
            let mut row = (*r).clone();
            row.at = row.at.max(next);
            next = row.at + 1;
            row
        })
        .collect()
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
pub async fn read(lake: impl Into<LakeRoot>) -> Result<Vec<LedgerRow>> {
    let lake = lake.into();
    if !table::exists(&lake, &ledger_spec()).await? {
        return Ok(Vec::new());
    }
    read_table(&open(&lake).await?).await
}

/// Every ledger row of the ledger table at `handle`'s version.
async fn read_table(handle: &DeltaTable) -> Result<Vec<LedgerRow>> {
    let ledger_schema = schema();
    let names: Vec<&str> = ledger_schema.fields().iter().map(|f| f.name().as_str()).collect();
    let batches = Select::columns(crate::lake::delta::scan::columns(&names))
        .collect(handle, "ledger")
        .await?;
    let mut out = Vec::new();
    for batch in &batches {
        let column =
            |name: &str| batch.schema().index_of(name).map_err(|e| Error::arrow("ledger", e));
        let text = |name: &str| -> Result<StringArray> {
            crate::lake::delta::scan::text_column(batch, column(name)?, "ledger")
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
        let (rows, rejected, attempts, version, at) =
            (int("rows")?, int("rejected")?, int("attempts")?, int("table_version")?, int("at")?);
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
                at: opt(&at, i).unwrap_or(0),
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
            FORGOTTEN => {
                e.0 = e.0.saturating_sub(1);
                e.1 = e.1.saturating_sub(r.rows.max(0) as u64);
            }
            "duplicate" => e.2 += 1,
            _ => e.3 += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: &str, at: i64) -> LedgerRow {
        LedgerRow {
            table: "trips".into(),
            file_key: "trips/day.csv".into(),
            content_hash: "h1".into(),
            rows: 10,
            rejected: 0,
            status: status.into(),
            attempts: 1,
            error: None,
            table_version: Some(1),
            at,
        }
    }

    /// Two writers whose clocks disagree (the second is far behind): the
    /// forget written after the `ok` still wins, and the re-ingest written
    /// after the forget wins again — `at` follows commit order.
    #[tokio::test]
    async fn the_latest_commit_decides_whatever_the_writers_clocks() {
        let dir = tempfile::tempdir().unwrap();
        let lake = &LakeRoot::from(dir.path());
        let (mut ahead, mut behind) = (Ledger::new(lake), Ledger::new(lake));
        ahead.append(&[row("ok", 2_000_000)]).await.unwrap();
        behind.append(&[row(FORGOTTEN, 10)]).await.unwrap();
        let rows = read(lake).await.unwrap();
        assert_eq!(held(rows.iter()).count(), 0, "forgotten after its ok: {rows:?}");
        let forget = rows.iter().find(|r| r.status == FORGOTTEN).unwrap();
        assert!(forget.at > 2_000_000, "stamped after the ok it follows: {}", forget.at);

        // Dropped again and ingested, by the writer that is behind.
        behind.append(&[row("ok", 20)]).await.unwrap();
        let rows = read(lake).await.unwrap();
        assert_eq!(held(rows.iter()).count(), 1, "ok again: {rows:?}");
        // A third writer starting cold learns the same.
        let mut cold = Ledger::new(lake);
        cold.append(&[row("ok", 5)]).await.unwrap();
        assert_eq!(read(lake).await.unwrap().len(), 3, "an ok it holds is not written twice");
        // Rows of one append are strictly increasing.
        let stamped = stamp(&[&row("dead", 1), &row("dead", 1)], 100);
        assert_eq!(stamped.iter().map(|r| r.at).collect::<Vec<_>>(), [100, 101]);
    }
}
