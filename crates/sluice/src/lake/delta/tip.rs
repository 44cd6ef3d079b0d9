//! A writer's own view of a table between its commits: the *tip*.
//!
//! A delta-rs handle brought to a new version re-materializes the table's
//! whole file list (its log replay re-reads every live file's add action and
//! statistics), and its commit path lists the log to learn the latest
//! version. Both grow with the table, so a long run of small commits (a
//! `put` per result) got slower with every commit. A tip keeps what a
//! de-duplicating append needs, and updates it from the versions themselves:
//!
//! - the **head**: the table's version as far as this writer knows. A tip
//!   moves on by reading `head + 1`, `head + 2`, … until one is absent — one
//!   failed open when nothing moved, never a listing;
//! - the **live files** at the head, from each new version's adds and
//!   removes, each with the key filter (see [`key_filter`]) that covers it;
//! - the **key filters** of the live files, read once per version.
//!
//! "Is any of these keys in the table?" is then answered from memory when
//! every live file is covered and no filter may hold a key; otherwise the
//! question goes to a table opened at the head, as before. A commit writes
//! the log entry `head + 1` itself, put-if-absent, through the table's log
//! store, after delta-rs's own protocol check: losing the version to another
//! writer is reported, never retried on top of it (see [`crate::lake::append`]).
//!
//! What a tip cannot follow makes it reopen from the log: a version that
//! changes the table's protocol or metadata (schema, properties), a head
//! whose own log entry is gone (the table was made again at its path), and
//! age —
//! a tip that has not listed the log for [`RELIST_AFTER`] (or half the log
//! retention, when shorter) reopens, so a version that log clean-up removed
//! after the tip last looked can never be mistaken for a free one.
//! Checkpoints are written as Delta would, after every
//! `delta.checkpointInterval`-th commit.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::{CommitData, PROTOCOL};
use deltalake::protocol::DeltaOperation;
use deltalake::table::config::TablePropertiesExt;
use deltalake::writer::RecordBatchWriter;

use crate::error::{Error, Result};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::io::log_entry;
use crate::lake::keys::coverage::Coverage;
use crate::lake::keys::in_store::StoreKeys;
use crate::lake::keys::key_filter::{self, Key, KeyFilter};
use crate::lake::layout::{TXN_APP_ID, TableSpec};

/// How long a tip trusts its head without listing the log.
pub const RELIST_AFTER: Duration = Duration::from_secs(600);

/// How a tip reached the table's latest version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advanced {
    /// Version by version from its head (none, when nothing moved).
    Moved,
    /// Opened again from the log (see the module docs for when).
    Reopened,
}

/// Where a tip's table is, and so which fast paths it has.
#[derive(Debug)]
enum Place {
    /// The table's folder on a filesystem: a `stat` says whether the head
    /// moved, log entries are hard-linked, key filters are sidecar files.
    Dir(PathBuf),
    /// A table in a store, which does without those (a tip reads the next
    /// entry, puts entries if absent), with its key filters there.
    Store(StoreKeys),
}

/// A writer's view of one table (see the module docs).
#[derive(Debug)]
pub struct Tip {
    name: String,
    /// Where the table is: its folder, or its key filters in a store.
    place: Place,
    /// Opened once: its protocol, metadata and log store hold for every
    /// version up to the head (a version that changes them reopens the tip).
    table: DeltaTable,
    head: u64,
    listed: Instant,
    /// The key filters of the key column over the live files at the head
    /// (`None` for a table without an id column: steps, the journal).
    key: Option<Coverage>,
    /// The same for the lookup columns asked about (see [`Tip::follow`]):
    /// read on first use, as most writers never ask (a table's lookup
    /// columns are for readers) and their filters grow with the table.
    columns: BTreeMap<&'static str, Coverage>,
    /// The table's lookup columns.
    lookup: &'static [&'static str],
    /// The highest commit sequence (application transaction
    /// [`TXN_APP_ID`]) the table records at the head.
    seq: Option<i64>,
    /// The checkpoint being written, off the commit path.
    checkpointing: Option<std::thread::JoinHandle<()>>,
    /// The entries a checkpoint of the head holds (spaces the
    /// checkpoints): live files and the tombstones of removed ones. An
    /// add is one more; a remove turns a file's entry into a tombstone,
    /// kept for the table's deleted-file retention (a week by default).
    /// Tombstones that expire are still counted: an over-estimate, which
    /// spaces checkpoints a little wider.
    entries: u64,
    /// The first version a reader replays from JSON: the one after the
    /// last checkpoint (0: none known).
    replayed_from: u64,
    /// A Parquet writer of the table, kept between commits (in a mutex
    /// only so that a tip stays `Sync`; reached through `&mut self`).
    writer: std::sync::Mutex<Option<Box<RecordBatchWriter>>>,
    /// Why this table's appends need more than add actions (a writer
    /// feature a direct commit does not write), if they do.
    needs_delta_rs: Option<String>,
}

impl Tip {
    /// The table's folder, for a table on a filesystem.
    fn dir(&self) -> Option<&std::path::Path> {
        match &self.place {
            Place::Dir(dir) => Some(dir),
            Place::Store(_) => None,
        }
    }

    /// Open the table of `spec` and read its live files and key filters.
    pub async fn open(root: &LakeRoot, spec: &TableSpec) -> Result<Tip> {
        Tip::from_table(root, spec, table::open(root, spec).await?).await
    }

    /// A tip over `table`, a handle of the table of `spec` loaded at its
    /// latest version (as [`table::open`] loads it): its live files, and
    /// their key filters read.
    pub async fn from_table(root: &LakeRoot, spec: &TableSpec, table: DeltaTable) -> Result<Tip> {
        let head = table.version().unwrap_or_default();
        let live = table::active_files(&table, spec)?;
        let place = match root {
            LakeRoot::Local(root) => Place::Dir(table::table_dir(root, spec)),
            LakeRoot::Store(store) => Place::Store(StoreKeys::of(store, spec)),
        };
        let hint = Box::pin(last_checkpoint(&table)).await;
        // A checkpoint holds the live files, and the last one's actions
        // (tombstones among them) when more.
        let checkpointed = hint.as_ref().and_then(|h| h.size).unwrap_or(0);
        let snapshot = table.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
        let seq = snapshot
            .transaction_version(table.log_store().as_ref(), TXN_APP_ID)
            .await
            .map_err(|e| Error::delta(&spec.name, e))?;
        let clock = std::time::Instant::now();
        let filters = if spec.indexed_columns().is_empty() {
            None
        } else {
            let live: HashSet<&str> = live.iter().map(String::as_str).collect();
            Some(match &place {
                Place::Dir(dir) => key_filter::read_live(dir, &live),
                Place::Store(keys) => keys.filters(head, &live, None).await,
            })
        };
        tracing::debug!(
            table = %spec.name, head, files = live.len(),
            filters = filters.as_ref().map_or(0, |f| f.len()),
            filters_ms = clock.elapsed().as_secs_f64() * 1e3,
            "tip opened"
        );
        Ok(Tip {
            name: spec.name.clone(),
            entries: (live.len() as u64).max(checkpointed),
            replayed_from: hint.map_or(0, |h| h.version + 1),
            key: filters.map(|filters| Coverage::new(live, filters)),
            columns: BTreeMap::new(),
            lookup: spec.lookup_columns(),
            seq,
            needs_delta_rs: beyond_plain_appends(&table),
            table,
            head,
            listed: Instant::now(),
            checkpointing: None,
            writer: std::sync::Mutex::new(None),
            place,
        })
    }

    /// The table as opened (protocol, schema, log store; not its head).
    pub fn table(&self) -> &DeltaTable {
        &self.table
    }

    /// The table's version as far as this tip knows.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Whether this tip commits itself: `Err` with the writer feature that
    /// needs delta-rs's commit (whose appends are then made through a
    /// table handle; the tip follows them).
    pub fn commits_directly(&self) -> std::result::Result<(), &str> {
        self.needs_delta_rs.as_deref().map_or(Ok(()), Err)
    }

    /// A Parquet writer of the table (the kept one, or a new one): give
    /// it back flushed with [`Tip::keep_writer`]. Making one parses the
    /// table's schema, which a tip's table keeps until it reopens.
    pub(crate) fn take_writer(&mut self) -> Result<Box<RecordBatchWriter>> {
        let kept = self.writer.get_mut().ok().and_then(Option::take);
        match kept {
            Some(writer) => Ok(writer),
            None => RecordBatchWriter::for_table(&self.table)
                .map(Box::new)
                .map_err(|e| Error::delta(&self.name, e)),
        }
    }

    /// Keep a flushed writer for the next commit.
    pub(crate) fn keep_writer(&mut self, writer: Box<RecordBatchWriter>) {
        if let Ok(kept) = self.writer.get_mut() {
            *kept = Some(writer);
        }
    }

    /// Live data files no key filter of the key column covers.
    pub fn uncovered(&self) -> usize {
        self.key.as_ref().map_or(0, Coverage::uncovered)
    }

    /// The highest commit sequence the table records (its `sluice-commit`
    /// application transaction), as of the head.
    pub fn seq(&self) -> Option<i64> {
        self.seq
    }

    /// Bring the tip to the table's latest version.
    pub async fn advance(&mut self, root: &LakeRoot, spec: &TableSpec) -> Result<()> {
        self.advance_with(root, spec, |_, _| {}).await.map(drop)
    }

    /// [`Tip::advance`], showing `each` every version it moves past.
    /// Returns [`Advanced::Reopened`] when the tip was opened again from
    /// the log instead (versions it skipped were not shown).
    pub async fn advance_with(
        &mut self,
        root: &LakeRoot,
        spec: &TableSpec,
        mut each: impl FnMut(u64, &[Action]),
    ) -> Result<Advanced> {
        if self.listed.elapsed() >= self.relist_after() {
            *self = Tip::open(root, spec).await?;
            return Ok(Advanced::Reopened);
        }
        // The head's own entry must still be there: a table made again at
        // the same path (or a log cleaned past the head) starts over.
        if !Box::pin(self.own_entry_present()).await? {
            *self = Tip::open(root, spec).await?;
            return Ok(Advanced::Reopened);
        }
        let store = self.table.log_store();
        // Most calls find nothing new: on a filesystem one `stat` says so
        // (a commit file appears whole), cheaper than a read through the
        // log store; on a store the read of the next entry says it.
        while self.dir().is_none_or(|dir| table::may_have_moved(dir, self.head)) {
            let read = store.read_commit_entry(self.head + 1).await;
            let Some(bytes) = read.map_err(|e| Error::delta(&self.name, e))? else { break };
            let version = self.head + 1;
            let actions = deltalake::logstore::get_actions(version, &bytes)
                .map_err(|e| Error::delta(&self.name, e))?;
            if changes_the_table(&actions) {
                *self = Tip::open(root, spec).await?;
                return Ok(Advanced::Reopened);
            }
            self.apply(version, &actions);
            each(version, &actions);
            self.head = version;
        }
        if let Place::Store(keys) = &self.place {
            keys.look(self.head).await;
        }
        self.retry_pending();
        Ok(Advanced::Moved)
    }

    /// Whether the head's own log entry is still there (a `stat` on a
    /// filesystem, a `HEAD` on a store).
    async fn own_entry_present(&self) -> Result<bool> {
        if let Some(dir) = self.dir() {
            return Ok(log_entry::entry_path(dir, self.head).exists());
        }
        let store = self.table.log_store().object_store(None);
        let location = log_entry::entry_location(self.head);
        table::is_present(store.as_ref(), &location).await.map_err(|source| Error::Store {
            what: format!("looking for version {} of table `{}`", self.head, self.name),
            source,
        })
    }

    /// Whether the table certainly holds none of `keys` in its key column:
    /// every live file is covered by a key filter and no filter may hold
    /// any of them. `false` means "maybe": ask a table opened at the head.
    pub fn holds_none(&self, keys: &[Key]) -> bool {
        self.key.as_ref().is_some_and(|c| c.holds_none(keys))
    }

    /// The live files at the head and the key filters over them, when
    /// `column` is the table's key column (the one [`Tip::holds_none`]
    /// answers for): what a look-up of keys at the head is planned from,
    /// without opening the table there.
    pub(crate) fn key_coverage(
        &self,
        spec: &TableSpec,
        column: &str,
    ) -> Option<(Vec<String>, &key_filter::ByVersion)> {
        let key = self.key.as_ref()?;
        (spec.indexed_columns().first() == Some(&column))
            .then(|| (key.live_files().cloned().collect(), &key.filters))
    }

    /// Keep the key filters of lookup `column` from now on (read them now,
    /// over the live files at the head), so that [`Tip::holds_none_in`] can
    /// answer for it. A table without a key column keeps no live files and
    /// follows no lookup column.
    pub fn follow(&mut self, column: &str) {
        let Some(&column) = self.lookup.iter().find(|c| **c == column) else { return };
        if self.columns.contains_key(column) {
            return;
        }
        let Some(key) = &self.key else { return };
        // In a store, what the key column's look read holds the lookup
        // columns' filters too (a version's bundle carries them all).
        let filters = match &self.place {
            Place::Dir(dir) => key_filter::read_column(dir, column),
            Place::Store(keys) => keys.held(self.head, None, Some(column)),
        };
        self.columns.insert(column, Coverage::new(key.live_files().cloned(), filters));
    }

    /// [`Tip::holds_none`] for one of the table's lookup columns (`false`
    /// for a column the table is not looked up by, or not followed).
    pub fn holds_none_in(&self, column: &str, keys: &[Key]) -> bool {
        self.columns.get(column).is_some_and(|c| c.holds_none(keys))
    }

    /// Commit `actions` as exactly `head + 1`: `Ok(None)` when another
    /// writer committed that version first. Nothing is retried on top of
    /// another writer's commit.
    pub(crate) async fn commit(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
        mut metadata: HashMap<String, serde_json::Value>,
        txns: Vec<deltalake::kernel::Transaction>,
    ) -> Result<Option<u64>> {
        // A hard link (a file system) or a conditional put (a store) makes
        // an entry put-if-absent; a log store that went through a temporary
        // file or a lock table would need delta-rs's commit.
        let store = self.table.log_store().name();
        if store != "DefaultLogStore" {
            return Err(Error::Internal(format!(
                "table `{}`: direct commits need a put-if-absent log store, not {store}",
                self.name
            )));
        }
        let snapshot = self.table.snapshot().map_err(|e| Error::delta(&self.name, e))?;
        PROTOCOL
            .can_commit(snapshot, &actions, &operation)
            .map_err(|e| Error::delta(&self.name, e.into()))?;
        let version = self.head + 1;
        metadata.insert("readVersion".into(), self.head.into());
        let data = CommitData::new(actions, operation, metadata, txns);
        let bytes = data.get_bytes().map_err(|e| Error::delta(&self.name, e.into()))?;
        // Put-if-absent: where the commit runs on a file system, a
        // conditional put settled by reading on a store (see [`log_entry`]).
        let created = if let Some(dir) = self.dir() {
            log_entry::write_if_absent(dir, version, &bytes)?
        } else {
            let store = self.table.log_store().object_store(None);
            log_entry::put_if_absent(store.as_ref(), &log_entry::entry_location(version), &bytes)
                .await?
        };
        if !created {
            return Ok(None);
        }
        self.apply(version, &data.actions);
        self.head = version;
        self.checkpoint_if_due(version);
        Ok(Some(version))
    }

    /// Take the key filter of a version this tip committed (its sidecar was
    /// just written from it): of the key column, or of a lookup `column`.
    pub fn learn(&mut self, version: u64, column: Option<&str>, filter: Arc<KeyFilter>) {
        match column {
            None => {
                if let Some(coverage) = &mut self.key {
                    coverage.learn(version, filter);
                }
            }
            Some(c) => {
                if let Some(coverage) = self.columns.get_mut(c) {
                    coverage.learn(version, filter);
                }
            }
        }
    }

    /// Apply one version's actions: live files, checkpoint entries, and
    /// the sequence number.
    fn apply(&mut self, version: u64, actions: &[Action]) {
        self.entries += actions.iter().filter(|a| matches!(a, Action::Add(_))).count() as u64;
        for coverage in self.key.iter_mut().chain(self.columns.values_mut()) {
            coverage.apply(version, actions);
        }
        for action in actions {
            if let Action::Txn(txn) = action
                && txn.app_id == TXN_APP_ID
            {
                self.seq = Some(self.seq.map_or(txn.version, |s| s.max(txn.version)));
            }
        }
    }

    /// Read the sidecars that had not appeared yet (in a store, take
    /// those the last look read).
    fn retry_pending(&mut self) {
        let read = |v: u64, column: Option<&str>| match &self.place {
            Place::Dir(dir) => key_filter::read_one(dir, v, column),
            Place::Store(keys) => keys.held_filter(v, column),
        };
        if let Some(coverage) = &mut self.key {
            coverage.retry_pending(|v| read(v, None));
        }
        for (column, coverage) in &mut self.columns {
            coverage.retry_pending(|v| read(v, Some(column)));
        }
    }

    /// The data files live at the head (none for a table without a key
    /// column, which keeps no key filters).
    pub(crate) fn live_files(&self) -> Vec<String> {
        self.key.as_ref().map(|c| c.live_files().cloned().collect()).unwrap_or_default()
    }

    /// How long the head may go without a listing: [`RELIST_AFTER`], or
    /// half the table's log retention when that is shorter.
    fn relist_after(&self) -> Duration {
        let retention = self
            .table
            .snapshot()
            .map(|s| s.table_config().log_retention_duration())
            .unwrap_or(RELIST_AFTER);
        RELIST_AFTER.min(retention / 2)
    }

    /// Start writing a checkpoint after every `delta.checkpointInterval`-th
    /// version. It is written in the background: reading the whole table
    /// to write it costs many small commits' time, which would otherwise
    /// fall on one commit. It is written from the Delta kernel's snapshot of
    /// that version (what delta-rs's own post-commit checkpoint does, minus
    /// delta-rs loading the file list first). A checkpoint only speeds up
    /// reading the log, so one still being written when the next is due is
    /// not doubled (the next skips), and a failure is logged, not returned.
    /// Expired log files (as the table's settings say) are looked for with
    /// every [`CLEANUP_EVERY`]-th checkpoint: looking lists the whole log.
    ///
    /// A large table is checkpointed less often: see [`Tip::spacing`].
    fn checkpoint_if_due(&mut self, version: u64) {
        let Ok(snapshot) = self.table.snapshot() else { return };
        let config = snapshot.table_config();
        let interval = config.checkpoint_interval().get();
        let replayed = (version + 1).saturating_sub(self.replayed_from);
        if !(version + 1).is_multiple_of(interval) || replayed < self.spacing(interval) {
            return;
        }
        if self.checkpointing.as_ref().is_some_and(|c| !c.is_finished()) {
            tracing::debug!(table = %self.name, version, "a checkpoint is still being written");
            return;
        }
        let every = interval * CLEANUP_EVERY;
        let cleanup = config.enable_expired_log_cleanup()
            && (version + 1) / every > self.replayed_from / every;
        self.replayed_from = version + 1;
        let retention = config.log_retention_duration();
        let log_store = self.table.log_store();
        let name = self.name.clone();
        let retention = cleanup.then_some(retention);
        let spawned = std::thread::Builder::new().name(format!("checkpoint {}", self.name)).spawn(
            move || {
                if let Err(e) = write_checkpoint(&log_store, version, retention) {
                    tracing::warn!(table = %name, version, error = %e, "could not write a checkpoint");
                }
            },
        );
        match spawned {
            Ok(thread) => self.checkpointing = Some(thread),
            Err(e) => {
                tracing::warn!(table = %self.name, version, error = %e, "could not start a checkpoint")
            }
        }
    }

    /// Versions between two checkpoints: `max(interval, √(entries ×
    /// interval))`. A checkpoint rewrites every entry (live file or
    /// tombstone) while a reader opening the table replays the commits
    /// since the last one, so spacing them by the square root keeps both
    /// costs in step: a 10,000-file table of one-row commits is
    /// checkpointed every 1,000 versions instead of every 100, a tenth of
    /// the background work per commit. Tombstones count as live files do:
    /// the journal, whose row files are merged as they come, holds a few
    /// dozen live files beside thousands of tombstones, and every 100 of
    /// its versions rewrote all of them. Delta readers accept any spacing;
    /// the interval stays the floor.
    ///
    /// In an object store the interval is kept: there every entry a reader
    /// replays is a request (tens of milliseconds), while a checkpoint is
    /// one request however many entries it rewrites.
    fn spacing(&self, interval: u64) -> u64 {
        if self.dir().is_none() {
            return interval;
        }
        interval.max(self.entries.saturating_mul(interval).isqrt())
    }

    /// Wait for the checkpoint being written, if any.
    pub async fn settle(&mut self) {
        if let Some(writing) = self.checkpointing.take() {
            match tokio::task::spawn_blocking(move || writing.join()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => tracing::warn!(table = %self.name, "a checkpoint thread panicked"),
                Err(e) => {
                    tracing::warn!(table = %self.name, error = %e, "a checkpoint task failed")
                }
            }
        }
    }
}

/// Writer features under which an append is add actions and a commit
/// info, what a direct commit writes. Others (in-commit timestamps, row
/// tracking, identity columns, domain metadata, …) need delta-rs's commit.
const PLAIN_APPEND_FEATURES: &[&str] = &[
    "appendOnly",
    "invariants",
    "checkConstraints",
    "changeDataFeed",
    "generatedColumns",
    "columnMapping",
    "timestampNtz",
    "deletionVectors",
    "v2Checkpoint",
    "vacuumProtocolCheck",
];

/// The writer feature of `table`'s protocol that a direct commit does not
/// honour, if any (by the protocol's own JSON: writer version 6 implies
/// identity columns, 7 lists its features).
fn beyond_plain_appends(table: &DeltaTable) -> Option<String> {
    let protocol = table.snapshot().ok()?.protocol().clone();
    let json = serde_json::to_value(&protocol).ok()?;
    let version = json.get("minWriterVersion").and_then(serde_json::Value::as_i64)?;
    if version == 6 {
        return Some("identityColumns (writer version 6)".into());
    }
    let features = json.get("writerFeatures").and_then(serde_json::Value::as_array)?;
    features
        .iter()
        .filter_map(serde_json::Value::as_str)
        .find(|f| !PLAIN_APPEND_FEATURES.contains(f))
        .map(str::to_owned)
}

/// What `_delta_log/_last_checkpoint` says, if it is readable.
struct CheckpointHint {
    version: u64,
    /// Actions in the checkpoint (absent from some writers' hints).
    size: Option<u64>,
}

async fn last_checkpoint(table: &DeltaTable) -> Option<CheckpointHint> {
    let store = table.log_store().object_store(None);
    let location = object_store::path::Path::from("_delta_log/_last_checkpoint");
    let got = object_store::ObjectStoreExt::get(&store, &location).await.ok()?;
    let text = got.bytes().await.ok()?;
    let hint: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let version = hint.get("version")?.as_u64()?;
    Some(CheckpointHint { version, size: hint.get("size").and_then(serde_json::Value::as_u64) })
}

/// Checkpoint intervals between two looks for expired log files.
const CLEANUP_EVERY: u64 = 10;

/// Write the checkpoint of `version` from the kernel's snapshot; with a
/// retention, then drop log files older than it behind a checkpoint.
///
/// Runs on a thread of its own with a runtime of its own: the kernel's
/// engine runs its reads on the runtime it is made in, and on the lake's
/// runtime a checkpoint of a large table (seconds of log and Parquet
/// decoding) kept its worker threads from the commits it was meant to stay
/// out of the way of.
fn write_checkpoint(
    log_store: &deltalake::logstore::LogStoreRef,
    version: u64,
    retention: Option<Duration>,
) -> std::result::Result<(), String> {
    // One checkpoint at a time in a process: two tables written together
    // (a put's metrics and index) reach their checkpoints together, and two
    // at once took both cores from the commits.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    yield_to_commits();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the checkpoint: {e}"))?;
    // A table in a store gets a store of its own here: a store's HTTP
    // client keeps connections whose tasks live on the runtime that opened
    // them, and this runtime ends with the checkpoint, so connections it
    // left in a shared client's pool fail the next request made through
    // that client ("runtime dropped the dispatch task").
    let own;
    let log_store = if log_store.root_url().scheme() == "file" {
        log_store
    } else {
        let config = log_store.config();
        own = deltalake::logstore::logstore_for(config.location(), config.options().clone())
            .map_err(|e| format!("a store for the checkpoint: {e}"))?;
        &own
    };
    // Made inside the runtime (the engine asks for the current one), used
    // outside it: its blocking calls must not run on a runtime's thread.
    let engine = {
        let _inside = runtime.enter();
        log_store.engine(None)
    };
    let root = log_store.root_url().clone();
    let snapshot = delta_kernel::Snapshot::builder_for(root.as_str())
        .at_version(version)
        .build(engine.as_ref())
        .map_err(|e| e.to_string())?;
    snapshot.checkpoint(engine.as_ref(), None).map_err(|e| e.to_string())?;
    if let Some(retention) = retention {
        let cutoff = chrono::Utc::now().timestamp_millis()
            - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        runtime
            .block_on(deltalake::checkpoints::cleanup_expired_logs_for(
                version,
                log_store.as_ref(),
                cutoff,
                None,
            ))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Run the calling thread (and the threads it starts: the kernel engine's
/// executor and its blocking reads) only when a core is otherwise idle
/// (`SCHED_IDLE`). A checkpoint rewrites every entry of the table; at
/// normal priority it took a core from the commits it runs beside, and on
/// two cores their slowest hundredth came from it: 20,000 puts of one
/// metric, p99 3.5× the median with checkpoints, 1.4× without. A thread
/// that cannot change its policy (another platform) keeps it: slower
/// tails, nothing else.
fn yield_to_commits() {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if let Err(e) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
        tracing::debug!(error = ?e, "a checkpoint thread keeps its priority");
    }
}

/// Whether a version changes what a tip took from the table's opening.
fn changes_the_table(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Metadata(_) | Action::Protocol(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint thread runs under `SCHED_IDLE`, and so do the threads
    /// it starts (they inherit it); the thread that spawned it keeps its
    /// policy. The policy is field 41 of `/proc/thread-self/stat`.
    #[cfg(target_os = "linux")]
    #[test]
    fn checkpoint_threads_run_when_a_core_is_idle() {
        fn policy() -> u32 {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            // Fields after the command name (which may hold spaces) start
            // at field 3.
            let after = stat.rsplit_once(')').unwrap().1;
            after.split_whitespace().nth(41 - 3).unwrap().parse().unwrap()
        }
        const SCHED_IDLE: u32 = 5;
        let before = policy();
        let (own, child) = std::thread::spawn(|| {
            yield_to_commits();
            (policy(), std::thread::spawn(policy).join().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!((own, child), (SCHED_IDLE, SCHED_IDLE));
        assert_eq!(policy(), before, "the caller's thread is left as it was");
        assert_ne!(before, SCHED_IDLE);
    }

    fn metric(lake: &crate::Lake, i: i32) -> crate::Artifact {
        let draft = crate::Draft::metric(serde_json::json!({"i": i})).unwrap();
        draft.finalize(lake.registry()).unwrap()
    }

    fn add(path: &str) -> Action {
        Action::Add(deltalake::kernel::Add { path: path.into(), ..Default::default() })
    }

    fn remove(path: &str) -> Action {
        Action::Remove(deltalake::kernel::Remove {
            path: path.into(),
            data_change: true,
            // (Now: a checkpoint drops tombstones past the retention.)
            deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
            ..Default::default()
        })
    }

    /// A new lake with `count` puts of one metric.
    async fn lake_of_puts(count: i32) -> (tempfile::TempDir, crate::Lake) {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        for i in 0..count {
            lake.put(&[metric(&lake, i)]).await.unwrap();
        }
        (dir, lake)
    }

    async fn tip_of_a_new_table() -> (tempfile::TempDir, Tip) {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let tip = Tip::open(lake.root(), &crate::lake::layout::index_table()).await.unwrap();
        (dir, tip)
    }

    #[tokio::test]
    async fn large_tables_are_checkpointed_less_often() {
        let (_dir, mut tip) = tip_of_a_new_table().await;
        tip.checkpoint_if_due(99);
        assert!(tip.checkpointing.is_some(), "a small table: every 100 versions");
        tip.settle().await;
        assert_eq!(tip.replayed_from, 100);
        tip.entries = 10_000;
        for version in [199, 499, 999] {
            tip.checkpoint_if_due(version);
            assert!(tip.checkpointing.is_none(), "10,000 files: not at {version}");
        }
        tip.checkpoint_if_due(1099);
        assert!(tip.checkpointing.is_some(), "1,000 versions after the last");
        assert_eq!(tip.replayed_from, 1100);
        // (Those versions do not exist: the background write fails, logged.)
        tip.settle().await;
    }

    #[tokio::test]
    async fn a_checkpoint_with_no_retention_drops_the_log_behind_it() {
        let (_dir, lake) = lake_of_puts(30).await;
        let spec = crate::lake::layout::index_table();
        let tip = Tip::open(lake.root(), &spec).await.unwrap();
        let log = tip.dir().unwrap().join("_delta_log");
        assert!(log.join(format!("{:020}.json", 0)).exists());
        // On a thread of its own, as a tip runs it (it makes a runtime).
        let (log_store, head) = (tip.table.log_store(), tip.head());
        std::thread::spawn(move || write_checkpoint(&log_store, head, Some(Duration::ZERO)))
            .join()
            .unwrap()
            .unwrap();
        let hint = std::fs::read_to_string(log.join("_last_checkpoint")).unwrap();
        assert!(hint.contains(&format!("\"version\":{}", tip.head())), "{hint}");
        assert!(!log.join(format!("{:020}.json", 0)).exists(), "expired and behind a checkpoint");
        // The table reads whole from the checkpoint.
        let reopened = Tip::open(lake.root(), &spec).await.unwrap();
        assert_eq!(reopened.head(), tip.head());
        assert_eq!(reopened.key.as_ref().unwrap().live.len(), tip.key.as_ref().unwrap().live.len());
        assert_eq!(reopened.uncovered(), 0);
    }

    #[tokio::test]
    async fn tombstones_count_toward_the_checkpoint_spacing() {
        let (_dir, lake) = lake_of_puts(6).await;
        let spec = crate::lake::layout::index_table();
        let mut tip = Tip::open(lake.root(), &spec).await.unwrap();
        assert_eq!(tip.entries, 6, "no checkpoint yet: the live files");
        // Four files removed (as a rewrite does): their entries become
        // tombstones, which a checkpoint still holds.
        let live: Vec<String> = tip.key.as_ref().unwrap().live_files().cloned().collect();
        let removes = live[..4].iter().map(|path| remove(path)).collect();
        let operation = DeltaOperation::Delete { predicate: None };
        tip.commit(removes, operation, HashMap::new(), Vec::new()).await.unwrap().unwrap();
        assert_eq!(tip.entries, 6);
        tip.apply(tip.head() + 1, &[add("a"), add("b")]);
        assert_eq!(tip.entries, 8);
        assert_eq!(tip.spacing(100), 100, "the interval is the floor");
        tip.entries = 2_500;
        assert_eq!(tip.spacing(100), 500);
        // A tip opened behind a checkpoint of the removes counts the
        // tombstones in it.
        let (log_store, head) = (tip.table.log_store(), tip.head());
        std::thread::spawn(move || write_checkpoint(&log_store, head, None))
            .join()
            .unwrap()
            .unwrap();
        let reopened = Tip::open(lake.root(), &spec).await.unwrap();
        assert_eq!(reopened.key.as_ref().unwrap().live.len(), 2);
        assert!(reopened.entries >= 6, "{} entries: the checkpoint's tombstones", reopened.entries);
    }

    #[tokio::test]
    async fn a_table_made_again_at_the_same_path_reopens_the_tip() {
        let (dir, lake) = lake_of_puts(3).await;
        let spec = crate::lake::layout::index_table();
        let mut tip = Tip::open(lake.root(), &spec).await.unwrap();
        let old_head = tip.head();
        std::fs::remove_dir_all(dir.path()).unwrap();
        let (again, _) = crate::Lake::init(dir.path()).await.unwrap();
        again.put(&[metric(&again, 9)]).await.unwrap();
        tip.advance(again.root(), &spec).await.unwrap();
        assert!(tip.head() < old_head, "{} is the new table's head", tip.head());
        assert_eq!(tip.key.unwrap().live.len(), 1);
    }

    #[tokio::test]
    async fn writer_features_beyond_plain_appends_leave_commits_to_delta_rs() {
        let (dir, tip) = tip_of_a_new_table().await;
        assert_eq!(tip.commits_directly(), Ok(()), "sluice's tables: writer version 4");
        let spec = crate::lake::layout::index_table();
        let log = tip.dir().unwrap().join("_delta_log");
        let upgrade = |version: u64, features: &[&str]| {
            let protocol = serde_json::json!({"protocol": {
                "minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": features}});
            let info = r#"{"commitInfo":{"timestamp":1764547200000,"operation":"UPGRADE"}}"#;
            std::fs::write(
                log.join(format!("{version:020}.json")),
                format!("{info}\n{protocol}\n"),
            )
            .unwrap();
        };
        let plain = ["appendOnly", "invariants", "checkConstraints", "changeDataFeed"];
        upgrade(tip.head() + 1, &plain);
        let root = dir.path();
        assert_eq!(Tip::open(&root.into(), &spec).await.unwrap().commits_directly(), Ok(()));
        let more = [&plain[..], &["domainMetadata"]].concat();
        upgrade(tip.head() + 2, &more);
        let reopened = Tip::open(&root.into(), &spec).await.unwrap();
        assert_eq!(reopened.commits_directly(), Err("domainMetadata"));
    }

    #[test]
    fn metadata_and_protocol_changes_reopen_a_tip() {
        assert!(!changes_the_table(&[add("a")]));
        let metadata: deltalake::kernel::Metadata = serde_json::from_value(serde_json::json!({
            "id": "x", "format": {"provider": "parquet", "options": {}},
            "schemaString": "{\"type\":\"struct\",\"fields\":[]}",
            "partitionColumns": [], "configuration": {}
        }))
        .unwrap();
        assert!(changes_the_table(&[add("a"), Action::Metadata(metadata)]));
    }
}
