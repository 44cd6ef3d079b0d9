//! Appending rows that must not duplicate what a table holds, without
//! trusting any lock.
//!
//! ```text
//!  open table at head V ─▶ token already committed after `since`? ─ yes ─▶ done
//!        │ no
//!        ▼
//!  drop rows whose key the table holds at V ─▶ write data files
//!        ─▶ commit them as exactly version V+1 (put-if-absent, no retry)
//!             │ another writer took V+1
//!             ▼
//!  read what versions V+1..head added: none of our keys ─▶ commit the same files at head+1
//!                                      some of our keys ─▶ delete our files, start over
//! ```
//!
//! Delta writes each log entry `_delta_log/{version}.json` with put-if-absent,
//! so exactly one writer gets each version. A de-duplicating append checks
//! its keys against the very version it commits on top of, which makes "is
//! this key new?" and "add it" one atomic step: two writers that cannot see
//! each other's lock still never both add a key. Our uncommitted files are
//! removed when we give them up (no commit ever referenced them).
//!
//! Idempotence across crashes comes from the commit's *token* (recorded in
//! the commit's metadata): a retry of the same logical append first looks for
//! its token in the versions committed since the append began, and does
//! nothing if one holds it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::DeltaTableError;
use deltalake::arrow::array::{Array, ArrayRef, BooleanArray, Int32Array, StringArray};
use deltalake::arrow::compute::filter_record_batch;
use deltalake::arrow::datatypes::DataType;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::arrow::row::{RowConverter, SortField};
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake::kernel::{Action, Add, Transaction};
use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::parquet::file::properties::WriterProperties;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};

use super::delta::scan::{self, Select};
use super::delta::table;
use super::delta::tip::Tip;
use super::keys::in_store::StoreKeys;
use super::keys::key_filter::{self, Key, KeyFilter};
use super::keys::key_set;
use super::keys::sidecar::{Bundle, Part};
use super::layout::{STEP_COLUMN, TableKind, TableSpec};
use super::read::lookup::Lookup;
use super::read::result_set;
use super::unique_success;
use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;

/// How many times an append starts over after losing a version to another
/// writer before it reports the contention.
const MAX_ATTEMPTS: usize = 50;

/// The commit-metadata key that carries an append's token.
pub const TOKEN_KEY: &str = "sluice_commit_token";

/// How rows are told apart from what the table already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedup {
    /// One row per artifact id (content tables and the index).
    ArtifactId,
    /// A run's rows are committed together, in one commit: a run whose id the
    /// table holds is skipped whole (executions and edge tables).
    RunId,
    /// Append everything (steps, the journal).
    Nothing,
}

impl Dedup {
    /// The de-duplication of a table of this kind.
    pub fn of(kind: &TableKind) -> Dedup {
        match kind {
            TableKind::Content(_) | TableKind::Index => Dedup::ArtifactId,
            TableKind::Executions | TableKind::ExecutionEdges | TableKind::ArtifactEdges => {
                Dedup::RunId
            }
            TableKind::Steps | TableKind::Checks | TableKind::Commits | TableKind::Ingestion => {
                Dedup::Nothing
            }
        }
    }

    fn column(self) -> Option<&'static str> {
        match self {
            Dedup::ArtifactId => Some("artifact_id"),
            Dedup::RunId => Some("execution_run_id"),
            Dedup::Nothing => None,
        }
    }
}

/// Natural-key columns of a table: no two rows of a table share them.
pub fn natural_key(kind: &TableKind) -> &'static [&'static str] {
    use TableKind::*;
    match kind {
        Content(_) | Index => &["artifact_id"],
        Executions => &["execution_run_id"],
        ExecutionEdges => &["execution_run_id", "direction", "role", "artifact_id"],
        ArtifactEdges => &[
            "execution_run_id",
            "source_artifact_id",
            "target_artifact_id",
            "source_role",
            "target_role",
        ],
        Steps => &["step_run_id", "status", "timestamp"],
        Checks => &["check_run_id"],
        Commits => &["commit_seq", "phase"],
        // Declared per table (its YAML primary key), not known here.
        Ingestion => &[],
    }
}

/// A de-duplicating append to one table. Build it with [`Append::new`].
#[derive(Debug)]
#[must_use = "an append does nothing until executed"]
pub struct Append<'a> {
    root: &'a LakeRoot,
    spec: &'a TableSpec,
    batches: Vec<RecordBatch>,
    commit: CommitSpec,
    /// The table version before the logical append began (token search).
    since: u64,
    /// What the commit waits for (see [`Append::with_gate`]).
    gate: Option<Gate>,
    /// Keys the caller found in the table at a version (see
    /// [`Append::with_present_at`]).
    known_present: Option<(u64, BTreeSet<String>)>,
    /// The executions version up to which the caller made sure no staged
    /// success's spec had succeeded (see [`Append::with_unique_success`]).
    unique_success: Option<u64>,
}

/// What an append waits for between writing its files and committing them:
/// `true` to commit, `false` to give its files up (the table before it in a
/// fixed order did not commit).
/// (In a mutex only so that an append stays `Sync`; it is awaited once, by
/// value.)
pub struct Gate(std::sync::Mutex<futures::future::BoxFuture<'static, bool>>);

impl Gate {
    /// A gate that opens when `ready` resolves.
    pub fn new(ready: impl std::future::Future<Output = bool> + Send + 'static) -> Self {
        Gate(std::sync::Mutex::new(Box::pin(ready)))
    }

    /// Wait for the gate: whether to go on.
    async fn open(self) -> bool {
        match self.0.into_inner() {
            Ok(ready) => ready.await,
            Err(poisoned) => poisoned.into_inner().await,
        }
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

/// What goes into a commit besides its files.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommitSpec {
    /// A Delta application transaction (`txn` action).
    pub txn: Option<(String, i64)>,
    /// Top-level keys of the commit's `commitInfo`.
    pub metadata: Vec<(String, serde_json::Value)>,
    /// The append's token (also written into the metadata).
    pub token: Option<String>,
}

impl CommitSpec {
    /// Delta commit properties that commit exactly the version after the
    /// one read, or fail (no retry on top of another writer's commit), with
    /// this spec's app transaction, metadata and token. Every commit that
    /// must not race another (appends, rewrites, transform merges) uses them.
    pub(crate) fn properties(&self) -> CommitProperties {
        let (metadata, txns) = self.parts();
        CommitProperties::default()
            .with_max_retries(0)
            .with_application_transactions(txns)
            .with_metadata(metadata)
    }

    /// The commit's metadata (with the token) and app transactions.
    pub(crate) fn parts(
        &self,
    ) -> (std::collections::HashMap<String, serde_json::Value>, Vec<Transaction>) {
        let mut metadata: std::collections::HashMap<String, serde_json::Value> =
            self.metadata.iter().cloned().collect();
        if let Some(token) = &self.token {
            metadata.insert(TOKEN_KEY.into(), serde_json::Value::String(token.clone()));
        }
        let txns = self.txn.iter().map(|(app, v)| Transaction::new(app.clone(), *v)).collect();
        (metadata, txns)
    }

    /// [`CommitSpec::properties`] for a commit of the version after
    /// `table`'s. delta-rs looks for expired log files after every commit
    /// unless told otherwise, and looking lists the whole log: a cost that
    /// grows with every commit. Files only expire behind a checkpoint, so
    /// the look is left to the commits that write one (the table's setting
    /// still decides whether to clean at all).
    pub(crate) fn properties_on(&self, table: &DeltaTable, name: &str) -> Result<CommitProperties> {
        let snapshot = table.snapshot().map_err(|e| Error::delta(name, e))?;
        let next = snapshot.version() + 1;
        let interval = snapshot
            .table_config()
            .checkpoint_interval
            .map_or(DEFAULT_CHECKPOINT_INTERVAL, std::num::NonZero::get);
        let writes_checkpoint = (next + 1).is_multiple_of(interval);
        let cleanup = if writes_checkpoint { None } else { Some(false) };
        Ok(self.properties().with_cleanup_expired_logs(cleanup))
    }
}

/// Delta's checkpoint interval when a table does not set one.
const DEFAULT_CHECKPOINT_INTERVAL: u64 = 100;

/// What an append did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// The table version the append committed, or found its token at.
    pub committed: Option<u64>,
    /// The table's version after the append (its own commit, or the head it
    /// found when there was nothing to add).
    pub version: u64,
    /// Rows written.
    pub rows_added: u64,
    /// Rows dropped: repeated within the append or already in the table.
    pub rows_skipped: u64,
    /// Whether an earlier attempt with the same token had committed already.
    pub already_committed: bool,
    /// Keys of rows not written because the table held them already.
    pub present_keys: BTreeSet<String>,
    /// Runs committed as superseded: their spec succeeded first in another
    /// run (see [`unique_success`](super::unique_success)).
    pub superseded: Vec<String>,
}

impl Appended {
    /// An append that found its token committed at `found`; the table is
    /// at `head`.
    fn found_token(found: u64, head: u64) -> Self {
        Appended {
            committed: Some(found),
            version: head,
            already_committed: true,
            ..Appended::default()
        }
    }

    /// An append that committed `rows` of its `staged` rows as `version`;
    /// `present` are the keys it skipped because the table held them.
    fn new_commit(version: u64, rows: u64, staged: u64, present: BTreeSet<String>) -> Self {
        Appended {
            committed: Some(version),
            version,
            rows_added: rows,
            rows_skipped: staged - rows,
            already_committed: false,
            present_keys: present,
            superseded: Vec::new(),
        }
    }
}

impl<'a> Append<'a> {
    /// Append `batches` (in the table's schema) to the table of `spec`.
    pub fn new(root: &'a LakeRoot, spec: &'a TableSpec, batches: Vec<RecordBatch>) -> Self {
        Append {
            root,
            spec,
            batches,
            commit: CommitSpec::default(),
            since: 0,
            gate: None,
            known_present: None,
            unique_success: None,
        }
    }

    /// For the executions table: the caller made sure, at version
    /// `checked_at`, that no successful row's spec had succeeded already.
    /// Before committing, the versions after it are searched too, and a
    /// success whose spec another run made succeed meanwhile is committed
    /// superseded (see [`unique_success`](super::unique_success)). Only the
    /// tip's append ([`Append::execute_on_tip`]) honours it.
    pub(crate) fn with_unique_success(mut self, checked_at: u64) -> Self {
        self.unique_success = Some(checked_at);
        self
    }

    /// De-duplicate and write the files now, commit them only once `gate`
    /// opens: tables committed in a fixed order can prepare their commits
    /// side by side. A closed gate (`false`) gives the written files up and
    /// fails the append.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Commit metadata (a top-level key of the commit's `commitInfo`).
    pub fn with_metadata(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.commit.metadata.push((key.into(), value));
        self
    }

    /// A Delta application transaction (`txn` action) in the commit.
    pub fn with_app_transaction(mut self, app_id: impl Into<String>, version: i64) -> Self {
        self.commit.txn = Some((app_id.into(), version));
        self
    }

    /// Make the append idempotent: a commit carrying `token` in a version
    /// after `since` means it is done already.
    pub fn with_token(mut self, token: impl Into<String>, since: u64) -> Self {
        self.commit.token = Some(token.into());
        self.since = since;
        self
    }

    /// Keys the caller has just found in the table at `version` (the
    /// index's look-up of the ids whose content was present): when the tip
    /// is still at that version, their rows are dropped as present without
    /// being looked up again, and only the other keys are. At any other
    /// version the set is not used (a restore may have removed rows since).
    pub(crate) fn with_present_at(mut self, version: u64, keys: BTreeSet<String>) -> Self {
        self.known_present = Some((version, keys));
        self
    }

    /// Run the append.
    pub async fn execute(self) -> Result<Appended> {
        self.execute_keeping().await.map(|(appended, _)| appended)
    }

    /// Run the append; also return the table's handle as the append left it
    /// (at its own commit, or at the head it checked).
    pub async fn execute_keeping(mut self) -> Result<(Appended, DeltaTable)> {
        let spec = self.spec;
        let dedup = Dedup::of(&spec.kind);
        let mut table = table::open(self.root, spec).await?;
        let head = table.version().unwrap_or_default();
        if let Some(found) = self.token_commit(&table, head, None).await? {
            let appended = Appended {
                committed: Some(found),
                version: head,
                already_committed: true,
                ..Appended::default()
            };
            return Ok((appended, table));
        }
        let staged: u64 = self.batches.iter().map(|b| b.num_rows() as u64).sum();
        let mut batches = unique_rows(&self.batches, spec)?;
        // Keys dropped because the table holds them, over every attempt.
        let mut skipped = BTreeSet::new();
        let mut checked_at = None;
        for _ in 0..MAX_ATTEMPTS {
            let head = table.version().unwrap_or_default();
            let (left, present) =
                drop_present(self.root, &table, spec, dedup, batches, checked_at).await?;
            batches = left;
            skipped.extend(present);
            let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
            if rows == 0 {
                let appended = Appended {
                    version: head,
                    rows_skipped: staged,
                    present_keys: skipped,
                    ..Appended::default()
                };
                return Ok((appended, table));
            }
            let adds =
                write_files(&table, &spec.name, &batches, table::writer_properties_for(spec))
                    .await?;
            if let Some(gate) = self.gate.take()
                && !gate.open().await
            {
                remove_files(&table, &adds).await;
                return Err(Error::NotCommitted {
                    table: spec.name.clone(),
                    reason: "a table before it in the commit order did not commit".into(),
                });
            }
            match self.commit_new_adds(&mut table, &adds, dedup, &batches).await? {
                Some(version) => {
                    let keys = batch_keys(&batches, dedup, &spec.name)?;
                    let live = || table::active_files(&table, spec);
                    self.record_key_filters(version, &adds, &batches, &keys, live).await?;
                    return Ok((Appended::new_commit(version, rows, staged, skipped), table));
                }
                None => {
                    // Some of our keys were added by another writer, or our
                    // token turned up: give our files up and look again.
                    remove_files(&table, &adds).await;
                    if let Some(found) = self.token_commit(&table, head, None).await? {
                        let appended = Appended {
                            committed: Some(found),
                            version: table.version().unwrap_or_default(),
                            already_committed: true,
                            ..Appended::default()
                        };
                        return Ok((appended, table));
                    }
                    checked_at = Some(head);
                }
            }
        }
        Err(Error::Contention { table: spec.name.clone(), attempts: MAX_ATTEMPTS })
    }

    /// Commit `adds` as exactly the next version; when other writers took
    /// it, keep trying at the new head as long as what they added holds none
    /// of our keys. `None` means: start over (our keys or token turned up).
    async fn commit_new_adds(
        &self,
        table: &mut DeltaTable,
        adds: &[Add],
        dedup: Dedup,
        batches: &[RecordBatch],
    ) -> Result<Option<u64>> {
        loop {
            let base = table.version().unwrap_or_default();
            if let Some(version) = try_commit_next(
                table,
                &self.spec.name,
                &self.spec.partition_columns,
                adds,
                &self.commit,
            )
            .await?
            {
                return Ok(Some(version));
            }
            table.update_incremental(None).await.map_err(|e| Error::delta(&self.spec.name, e))?;
            let head = table.version().unwrap_or_default();
            if self.token_commit(table, head, Some(base)).await?.is_some() {
                return Ok(None);
            }
            if dedup != Dedup::Nothing
                && added_any(table, self.spec, dedup, batches, base, head).await?
            {
                return Ok(None);
            }
        }
    }

    /// The version after `since` (the token's own start, or `after`) whose
    /// commit carries this append's token, up to `head`.
    async fn token_commit(
        &self,
        table: &DeltaTable,
        head: u64,
        after: Option<u64>,
    ) -> Result<Option<u64>> {
        let Some(token) = &self.commit.token else { return Ok(None) };
        let from = after.unwrap_or(self.since).max(self.since) + 1;
        find_token(table, &self.spec.name, token, from, head).await
    }
}

impl Append<'_> {
    /// Run the append on a writer's [`Tip`] of the table: keys are checked
    /// against the tip's key filters (a table is opened at the tip's head
    /// only when they cannot rule every key out) and the files are
    /// committed as exactly the tip's next version, with the same
    /// guarantees as [`Append::execute_keeping`]: the token is looked for
    /// in every version after `since` first, and again in the versions of
    /// whoever took ours; the gate is waited for once, after the files are
    /// written. Files written for a lost version are committed on top of
    /// the new head when it holds none of their keys, else given up.
    pub async fn execute_on_tip(mut self, tip: &mut Tip) -> Result<Appended> {
        let (root, spec) = (self.root, self.spec);
        if let Err(feature) = tip.commits_directly() {
            tracing::debug!(table = %spec.name, feature, "appending through delta-rs's commit");
            let appended = self.execute().await?;
            tip.advance(root, spec).await?;
            return Ok(appended);
        }
        let dedup = Dedup::of(&spec.kind);
        tip.advance(root, spec).await?;
        // The last version searched for the token.
        let mut searched = self.since;
        if let Some(found) = self.token_on_tip(tip, &mut searched).await? {
            return Ok(Appended::found_token(found, tip.head()));
        }
        let staged: u64 = self.batches.iter().map(|b| b.num_rows() as u64).sum();
        let mut batches = unique_rows(&self.batches, spec)?;
        let mut skipped = BTreeSet::new();
        if let Some((at, known)) = self.known_present.take()
            && at == tip.head()
            && dedup != Dedup::Nothing
        {
            let (left, dropped) = without_keys(batches, &known, dedup, &spec.name)?;
            batches = left;
            skipped = dropped;
        }
        // The distinct keys of `batches`, read once (they are probed against
        // the tip and recorded in the version's key filter).
        let mut keys = batch_keys(&batches, dedup, &spec.name)?;
        // Files written for a version another writer took.
        let mut written: Option<Vec<Add>> = None;
        let mut superseded = Vec::new();
        for _ in 0..MAX_ATTEMPTS {
            let (left, present) =
                drop_present_on_tip(root, tip, spec, dedup, batches, &keys).await?;
            batches = left;
            batches = self.supersede_on_tip(tip, batches, &mut written, &mut superseded).await?;
            if !present.is_empty() {
                keys = batch_keys(&batches, dedup, &spec.name)?;
                if let Some(adds) = written.take() {
                    remove_files(tip.table(), &adds).await;
                }
            }
            skipped.extend(present);
            let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
            if rows == 0 {
                let (version, present_keys) = (tip.head(), skipped);
                return Ok(Appended {
                    version,
                    rows_skipped: staged,
                    present_keys,
                    ..Default::default()
                });
            }
            let adds = match written.take() {
                Some(adds) => adds,
                None => {
                    let properties = table::writer_properties_for(spec);
                    write_files_on_tip(tip, &spec.name, &batches, properties).await?
                }
            };
            if let Some(gate) = self.gate.take()
                && !gate.open().await
            {
                remove_files(tip.table(), &adds).await;
                return Err(Error::NotCommitted {
                    table: spec.name.clone(),
                    reason: "a table before it in the commit order did not commit".into(),
                });
            }
            let actions = adds.iter().cloned().map(Action::Add).collect();
            let operation = append_operation(&spec.partition_columns);
            let (metadata, txns) = self.commit.parts();
            match tip.commit(actions, operation, metadata, txns).await {
                Ok(Some(version)) => {
                    let live = || Ok(tip.live_files());
                    let recorded =
                        self.record_key_filters(version, &adds, &batches, &keys, live).await?;
                    for (column, filter) in recorded {
                        tip.learn(version, column, filter);
                    }
                    let mut appended = Appended::new_commit(version, rows, staged, skipped);
                    appended.superseded = superseded;
                    return Ok(appended);
                }
                Ok(None) => {
                    tracing::debug!(table = %spec.name, "lost the version to another writer");
                    // Another writer took the version: follow it, and look
                    // for our token (a retry of ours may have been first).
                    let moved = tip.advance(root, spec).await;
                    let found = match moved {
                        Ok(()) => self.token_on_tip(tip, &mut searched).await,
                        Err(e) => Err(e),
                    };
                    match found {
                        Ok(None) => written = Some(adds),
                        Ok(Some(found)) => {
                            remove_files(tip.table(), &adds).await;
                            return Ok(Appended::found_token(found, tip.head()));
                        }
                        Err(e) => {
                            remove_files(tip.table(), &adds).await;
                            return Err(e);
                        }
                    }
                }
                Err(e) => {
                    remove_files(tip.table(), &adds).await;
                    return Err(e);
                }
            }
        }
        if let Some(adds) = written {
            remove_files(tip.table(), &adds).await;
        }
        Err(Error::Contention { table: spec.name.clone(), attempts: MAX_ATTEMPTS })
    }

    /// With [`Append::with_unique_success`]: `batches` with each success
    /// whose spec another run made succeed after the version last searched
    /// turned superseded (the runs added to `superseded`, files `written`
    /// from the rows before given up); the search moves to the tip's head.
    async fn supersede_on_tip(
        &mut self,
        tip: &Tip,
        batches: Vec<RecordBatch>,
        written: &mut Option<Vec<Add>>,
        superseded: &mut Vec<String>,
    ) -> Result<Vec<RecordBatch>> {
        let Some(checked) = self.unique_success else { return Ok(batches) };
        if tip.head() <= checked {
            return Ok(batches);
        }
        let name = &self.spec.name;
        let specs = unique_success::successful_specs(&batches, name)?;
        let wanted: HashSet<&str> = specs.iter().map(String::as_str).collect();
        let winners =
            unique_success::successes_since(tip, self.spec, checked, tip.head(), &wanted).await?;
        self.unique_success = Some(tip.head());
        if winners.is_empty() {
            return Ok(batches);
        }
        let (batches, turned) = unique_success::supersede(batches, &winners, name)?;
        if !turned.is_empty() {
            tracing::warn!(
                table = %name, runs = ?turned,
                "specs succeeded first in runs another committer committed; these runs are committed superseded"
            );
            if let Some(adds) = written.take() {
                remove_files(tip.table(), &adds).await;
            }
            superseded.extend(turned);
        }
        Ok(batches)
    }

    /// The version in `searched+1 ..= head` of the tip whose commit carries
    /// this append's token; `searched` moves to the head.
    async fn token_on_tip(&self, tip: &Tip, searched: &mut u64) -> Result<Option<u64>> {
        let Some(token) = &self.commit.token else { return Ok(None) };
        let (from, head) = (*searched + 1, tip.head());
        let found = find_token(tip.table(), &self.spec.name, token, from, head).await?;
        *searched = head.max(*searched);
        Ok(found)
    }

    /// Write the sidecar bundle (key filters of the key column and lookup
    /// columns, key set, result set) of the version this append committed,
    /// `keys` being the distinct keys of `batches`; the filters written
    /// come back, by column (`None`: the key column). A bundle that could
    /// not be written is logged and none come back: its files count as
    /// uncovered, which only costs look-up speed.
    /// `live` gives the files live at `version`, for a lake in a store
    /// (whose writers pack filters, see [`StoreKeys::pack_if_due`]).
    async fn record_key_filters(
        &self,
        version: u64,
        adds: &[Add],
        batches: &[RecordBatch],
        keys: &[Key],
        live: impl FnOnce() -> Result<Vec<String>>,
    ) -> Result<Vec<(Option<&'static str>, Arc<KeyFilter>)>> {
        let spec = self.spec;
        let files: Vec<String> = adds.iter().map(|a| a.path.clone()).collect();
        let mut bundle = Bundle::new();
        let mut recorded = Vec::new();
        if !keys.is_empty() {
            let filter = KeyFilter::new(files.clone(), keys);
            bundle.part(Part::KeySet, key_set::encode(&files, keys));
            bundle.part(Part::Filter(None), filter.encode());
            recorded.push((None, Arc::new(filter)));
        }
        for &column in spec.lookup_columns() {
            let keys = column_keys(batches, column, &spec.name)?;
            let filter = KeyFilter::new(files.clone(), &keys);
            bundle.part(Part::Filter(Some(column)), filter.encode());
            recorded.push((Some(column), Arc::new(filter)));
        }
        if spec.kind == TableKind::Executions {
            match result_set::results_of(batches, &spec.name) {
                Ok(results) => {
                    add_results(&mut bundle, &files, &results);
                }
                Err(e) => {
                    tracing::warn!(table = %spec.name, version, error = %e, "could not record a result set");
                }
            }
        }
        let written = match self.root {
            LakeRoot::Local(root) => bundle.write(&table::table_dir(root, spec), version),
            LakeRoot::Store(store) => {
                StoreKeys::of(store, spec).record(version, &bundle, live).await
            }
        };
        match written {
            Ok(()) => Ok(recorded),
            Err(e) => {
                tracing::warn!(table = %spec.name, version, error = %e, "could not record a key filter");
                Ok(Vec::new())
            }
        }
    }
}

/// [`drop_present`] through a tip: from its key filters when they rule
/// every key out, else from the table opened at the tip's head.
async fn drop_present_on_tip(
    root: &LakeRoot,
    tip: &Tip,
    spec: &TableSpec,
    dedup: Dedup,
    batches: Vec<RecordBatch>,
    keys: &[Key],
) -> Result<(Vec<RecordBatch>, BTreeSet<String>)> {
    if dedup == Dedup::Nothing {
        return Ok((batches, BTreeSet::new()));
    }
    let clock = std::time::Instant::now();
    if tip.holds_none(keys) {
        return Ok((batches, BTreeSet::new()));
    }
    let probed = clock.elapsed();
    let wanted = distinct_key_texts(&batches, dedup, &spec.name)?;
    let present = present_keys_on_tip(root, tip, spec, dedup, &wanted).await?;
    tracing::debug!(
        table = %spec.name, keys = keys.len(),
        probe_ms = probed.as_secs_f64() * 1e3,
        confirm_ms = (clock.elapsed() - probed).as_secs_f64() * 1e3,
        "keys the filters may hold confirmed"
    );
    without_keys(batches, &present, dedup, &spec.name)
}

/// [`present_keys`] at a tip's head, planned from the tip's live files and
/// key filters: the table is opened at the head only when files must be
/// read (keys that no key set settles, or files no filter covers). Opening
/// it replays the log from the last checkpoint, tens of milliseconds for a
/// content table, which a look-up settled by filters and key sets (every
/// commit whose present ids the sidecars know) does not need.
pub(crate) async fn present_keys_on_tip(
    root: &LakeRoot,
    tip: &Tip,
    spec: &TableSpec,
    dedup: Dedup,
    wanted: &BTreeSet<String>,
) -> Result<BTreeSet<String>> {
    let Some(column) = dedup.column() else { return Ok(BTreeSet::new()) };
    match tip.key_coverage(spec, column) {
        Some((active, filters)) => {
            present_in(root, spec, dedup, wanted, &active, filters, At::Head(tip)).await
        }
        None => {
            let at_head = table::open_at(root, spec, tip.head()).await?;
            present_keys(root, &at_head, spec, dedup, wanted).await
        }
    }
}

/// Where a look-up reads the files its plan leaves unsettled.
enum At<'a> {
    /// A table loaded at the version looked up.
    Table(&'a DeltaTable),
    /// A tip's head (the table is opened there on demand).
    Head(&'a Tip),
}

/// The first version in `from..=head` whose commit carries `token`.
pub async fn find_token(
    table: &DeltaTable,
    name: &str,
    token: &str,
    from: u64,
    head: u64,
) -> Result<Option<u64>> {
    for version in from..=head {
        if commit_token(table, name, version).await?.as_deref() == Some(token) {
            return Ok(Some(version));
        }
    }
    Ok(None)
}

/// The token a committed version carries, if any.
async fn commit_token(table: &DeltaTable, name: &str, version: u64) -> Result<Option<String>> {
    let actions = table::commit_actions(table, name, version).await?;
    Ok(commit_text(&actions, TOKEN_KEY))
}

/// The text a commit's `commitInfo` holds under `key`, if any.
pub(crate) fn commit_text(actions: &[Action], key: &str) -> Option<String> {
    actions.iter().find_map(|a| match a {
        Action::CommitInfo(info) => info.info.get(key).and_then(|v| v.as_str()).map(str::to_owned),
        _ => None,
    })
}

/// Commit `adds` as exactly `table.version() + 1`. `Ok(None)`: another
/// writer committed that version first (the table is then behind; update
/// it). Other failures are errors, and our files are removed.
pub(crate) async fn try_commit_next(
    table: &mut DeltaTable,
    name: &str,
    partition_columns: &[String],
    adds: &[Add],
    commit: &CommitSpec,
) -> Result<Option<u64>> {
    let actions = adds.iter().cloned().map(Action::Add).collect();
    try_commit_actions_next(table, name, actions, append_operation(partition_columns), commit, adds)
        .await
}

/// The Delta operation of an append to a table partitioned by `columns`.
pub(crate) fn append_operation(columns: &[String]) -> DeltaOperation {
    DeltaOperation::Write {
        mode: SaveMode::Append,
        partition_by: (!columns.is_empty()).then(|| columns.to_vec()),
        predicate: None,
    }
}

/// Commit `actions` as exactly `table.version() + 1` (see
/// [`try_commit_next`]); `written` are the data files to remove if the
/// commit fails for another reason than a lost version. Because nothing
/// else can be committed between the version the actions were computed
/// from and theirs, even removes (a rewrite) never race another writer.
pub(crate) async fn try_commit_actions_next(
    table: &mut DeltaTable,
    name: &str,
    actions: Vec<Action>,
    operation: DeltaOperation,
    commit: &CommitSpec,
    written: &[Add],
) -> Result<Option<u64>> {
    let properties = commit.properties_on(table, name)?;
    let snapshot = table.snapshot().map_err(|e| Error::delta(name, e))?;
    let next = snapshot.version() + 1;
    let committed = CommitBuilder::from(properties)
        .with_actions(actions)
        .build(Some(snapshot), table.log_store(), operation)
        .await;
    match committed {
        Ok(done) => {
            let version = done.version();
            table.state = Some(done.snapshot());
            Ok(Some(version))
        }
        // Whether the version is lost is decided by reading its entry: a
        // store that retried a conditional put it had already made (or an
        // NFS retransmission) reports "exists" for our own commit, whose
        // files must then be kept, not given up.
        Err(e) if lost_the_version(&e) => {
            let Some(token) = &commit.token else { return Ok(None) };
            if commit_token(table, name, next).await?.as_deref() != Some(token.as_str()) {
                return Ok(None);
            }
            tracing::info!(table = %name, version = next, "the version reported taken holds our own commit");
            table.update_incremental(Some(next)).await.map_err(|e| Error::delta(name, e))?;
            Ok(Some(next))
        }
        Err(e) => {
            remove_files(table, written).await;
            Err(Error::delta(name, e))
        }
    }
}

/// The action removing the data file `add` added, now.
pub(crate) fn removal(add: &Add, data_change: bool) -> Action {
    Action::Remove(deltalake::kernel::Remove {
        path: add.path.clone(),
        data_change,
        deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
        extended_file_metadata: Some(true),
        partition_values: Some(add.partition_values.clone()),
        size: Some(add.size),
        ..deltalake::kernel::Remove::default()
    })
}

pub(crate) fn lost_the_version(e: &DeltaTableError) -> bool {
    matches!(
        e,
        DeltaTableError::Transaction {
            source: TransactionError::MaxCommitAttempts(_)
                | TransactionError::VersionAlreadyExists(_)
        } | DeltaTableError::VersionAlreadyExists(_)
    )
}

/// Rows of `batches` whose natural key did not appear earlier in them.
fn unique_rows(batches: &[RecordBatch], spec: &TableSpec) -> Result<Vec<RecordBatch>> {
    let columns = natural_key(&spec.kind);
    let Some(first) = batches.first() else { return Ok(Vec::new()) };
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(total);
    let mut out = Vec::with_capacity(batches.len());
    // A key of one text column without nulls (content tables, the index,
    // executions) is compared as its bytes in place; others through the row
    // format.
    let texts = match columns {
        [column]
            if first
                .schema()
                .field_with_name(column)
                .is_ok_and(|f| *f.data_type() == DataType::Utf8) =>
        {
            batches
                .iter()
                .map(|b| text_column_named(b, column, &spec.name))
                .collect::<Result<Vec<_>>>()?
        }
        _ => Vec::new(),
    };
    if !texts.is_empty() && texts.iter().all(|t| t.null_count() == 0) {
        for (batch, text) in batches.iter().zip(&texts) {
            let mask = (0..text.len()).map(|r| seen.insert(text.value(r).as_bytes())).collect();
            out.push(keep(batch, mask, &spec.name)?);
        }
        return Ok(out);
    }
    let fields = columns
        .iter()
        .map(|c| {
            let field =
                first.schema().field_with_name(c).map_err(|e| Error::arrow(&spec.name, e))?.clone();
            Ok(SortField::new(field.data_type().clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    let converter = RowConverter::new(fields).map_err(|e| Error::arrow(&spec.name, e))?;
    let key_column = |batch: &RecordBatch, c: &str| {
        batch.column_by_name(c).cloned().ok_or_else(|| {
            Error::Internal(format!("table `{}`: key column `{c}` is missing", spec.name))
        })
    };
    let rows = batches
        .iter()
        .map(|batch| {
            let arrays: Vec<ArrayRef> =
                columns.iter().map(|c| key_column(batch, c)).collect::<Result<_>>()?;
            converter.convert_columns(&arrays).map_err(|e| Error::arrow(&spec.name, e))
        })
        .collect::<Result<Vec<_>>>()?;
    for (batch, rows) in batches.iter().zip(&rows) {
        let mask = rows.iter().map(|r| seen.insert(r.data())).collect();
        out.push(keep(batch, mask, &spec.name)?);
    }
    Ok(out)
}

/// The text column `column` of `batch`, or an error naming the table.
fn text_column_named(batch: &RecordBatch, column: &str, table: &str) -> Result<StringArray> {
    let i = batch.schema().index_of(column).map_err(|e| Error::arrow(table, e))?;
    scan::text_column(batch, i, table)
}

fn keep(batch: &RecordBatch, mask: Vec<bool>, table: &str) -> Result<RecordBatch> {
    if mask.iter().all(|k| *k) {
        return Ok(batch.clone());
    }
    filter_record_batch(batch, &BooleanArray::from(mask))
        .map_err(|e| Error::arrow(format!("table `{table}`"), e))
}

/// The distinct dedup-key texts of all rows of `batches`.
fn distinct_key_texts(
    batches: &[RecordBatch],
    dedup: Dedup,
    table: &str,
) -> Result<BTreeSet<String>> {
    let mut keys = BTreeSet::new();
    for batch in batches {
        keys.extend(key_texts(batch, dedup, table)?);
    }
    Ok(keys)
}

/// The dedup-key text of every row, in order.
fn key_texts(batch: &RecordBatch, dedup: Dedup, table: &str) -> Result<Vec<String>> {
    let Some(column) = dedup.column() else { return Ok(Vec::new()) };
    let text = text_column_named(batch, column, table)?;
    Ok((0..text.len()).map(|r| text.value(r).to_owned()).collect())
}

fn key_of(dedup: Dedup, text: &str) -> Result<Key> {
    Ok(match dedup {
        Dedup::ArtifactId => Key::from(text.parse::<crate::artifact::ArtifactId>()?),
        _ => Key::of_text(text),
    })
}

/// The distinct artifact ids of a column, as keys (for lookup sidecars).
fn column_keys(batches: &[RecordBatch], column: &str, table: &str) -> Result<Vec<Key>> {
    let mut keys = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let text = text_column_named(batch, column, table)?;
        keys.extend(
            (0..text.len()).filter(|&r| text.is_valid(r)).map(|r| Key::of_value(text.value(r))),
        );
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// The distinct keys of the rows, sorted, for the key filter of the commit
/// (read from the key column in place: a commit of 10k executions has 30k
/// of them per table).
fn batch_keys(batches: &[RecordBatch], dedup: Dedup, table: &str) -> Result<Vec<Key>> {
    let Some(column) = dedup.column() else { return Ok(Vec::new()) };
    let mut keys = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let text = text_column_named(batch, column, table)?;
        for r in 0..text.len() {
            keys.push(key_of(dedup, text.value(r))?);
        }
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// Drop the rows whose key the table holds at its current version; also
/// return those keys. With `since`, only versions after it are searched
/// (the rest were checked).
async fn drop_present(
    root: &LakeRoot,
    table: &DeltaTable,
    spec: &TableSpec,
    dedup: Dedup,
    batches: Vec<RecordBatch>,
    since: Option<u64>,
) -> Result<(Vec<RecordBatch>, BTreeSet<String>)> {
    if dedup == Dedup::Nothing {
        return Ok((batches, BTreeSet::new()));
    }
    let wanted = distinct_key_texts(&batches, dedup, &spec.name)?;
    let present = match since {
        None => present_keys(root, table, spec, dedup, &wanted).await?,
        Some(after) => {
            let head = table.version().unwrap_or_default();
            keys_added_between(table, spec, dedup, &wanted, after, head).await?
        }
    };
    without_keys(batches, &present, dedup, &spec.name)
}

/// `batches` without the rows whose key is in `present`, and those of
/// `present` that were there.
fn without_keys(
    batches: Vec<RecordBatch>,
    present: &BTreeSet<String>,
    dedup: Dedup,
    table: &str,
) -> Result<(Vec<RecordBatch>, BTreeSet<String>)> {
    if present.is_empty() {
        return Ok((batches, BTreeSet::new()));
    }
    let mut out = Vec::with_capacity(batches.len());
    let mut dropped = BTreeSet::new();
    for batch in &batches {
        let keys = key_texts(batch, dedup, table)?;
        let mask = keys.iter().map(|k| !present.contains(k)).collect();
        dropped.extend(keys.into_iter().filter(|k| present.contains(k)));
        out.push(keep(batch, mask, table)?);
    }
    Ok((out, dropped))
}

/// Which of `wanted` the table holds, reading only the files its key
/// filters cannot rule out (see [`key_filter`]), each for the keys that
/// may be in it.
pub async fn present_keys(
    root: &LakeRoot,
    table: &DeltaTable,
    spec: &TableSpec,
    dedup: Dedup,
    wanted: &BTreeSet<String>,
) -> Result<BTreeSet<String>> {
    if dedup.column().is_none() {
        return Ok(BTreeSet::new());
    }
    let active = table::active_files(table, spec)?;
    if active.is_empty() || wanted.is_empty() {
        return Ok(BTreeSet::new());
    }
    let live: HashSet<&str> = active.iter().map(String::as_str).collect();
    let filters = match root {
        LakeRoot::Local(root) => key_filter::read_live(&table::table_dir(root, spec), &live),
        LakeRoot::Store(store) => {
            let head = table.version().unwrap_or_default();
            StoreKeys::of(store, spec).filters(head, &live, None).await
        }
    };
    present_in(root, spec, dedup, wanted, &active, &filters, At::Table(table)).await
}

/// Which of `wanted` a table version with `active` files and key
/// `filters` holds (see [`present_keys`]).
async fn present_in(
    root: &LakeRoot,
    spec: &TableSpec,
    dedup: Dedup,
    wanted: &BTreeSet<String>,
    active: &[String],
    filters: &BTreeMap<u64, Arc<KeyFilter>>,
    at: At<'_>,
) -> Result<BTreeSet<String>> {
    let Some(column) = dedup.column() else { return Ok(BTreeSet::new()) };
    if active.is_empty() || wanted.is_empty() {
        return Ok(BTreeSet::new());
    }
    let clock = std::time::Instant::now();
    let (keys, wanted): (usize, Vec<String>) = (wanted.len(), wanted.iter().cloned().collect());
    let key = |k: &String| key_of(dedup, k).unwrap_or_else(|_| Key::of_text(k));
    let mut plan = key_filter::plan(active, filters, &wanted, key);
    let planned_at = clock.elapsed();
    let candidates: usize = plan.candidates.iter().map(|c| c.keys.len()).sum();
    let versions = plan.candidates.len();
    // Key sets settle candidates on a filesystem; on a store the candidate
    // files are read.
    let mut present: BTreeSet<String> = match root.local() {
        Some(root) => key_set::settle(&table::table_dir(root, spec), &mut plan, key),
        None => Vec::new(),
    }
    .into_iter()
    .collect();
    let settled_at = clock.elapsed();
    let unsettled = !(plan.uncovered.is_empty() && plan.candidates.is_empty());
    if unsettled {
        let opened;
        let table = match at {
            At::Table(table) => table,
            At::Head(tip) => {
                opened = table::open_at(root, spec, tip.head()).await?;
                &opened
            }
        };
        let batches =
            Lookup::new(column, wanted).columns(&[column]).read_planned(table, spec, &plan).await?;
        present.extend(texts(&batches, &spec.name)?);
    }
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    tracing::debug!(
        table = %spec.name, keys, versions, candidates,
        uncovered = plan.uncovered.len(), unsettled = plan.candidates.len(),
        filters = filters.len(), plan_ms = ms(planned_at),
        settle_ms = ms(settled_at - planned_at), read_ms = ms(clock.elapsed() - settled_at),
        "present keys found"
    );
    Ok(present)
}

/// Which of `keys` the given files of the table hold in `column`: each
/// file's key column read once (its row groups whose bloom filter rules
/// every key out skipped) and probed with the keys, whatever their number.
async fn keys_in_files(
    table: &DeltaTable,
    spec: &TableSpec,
    column: &str,
    files: Vec<String>,
    keys: &[String],
) -> Result<BTreeSet<String>> {
    if files.is_empty() || keys.is_empty() {
        return Ok(BTreeSet::new());
    }
    let batches = Lookup::new(column, keys.iter().cloned())
        .columns(&[column])
        .read(table, spec, &files)
        .await?;
    texts(&batches, &spec.name)
}

/// The values of the first column of `batches`.
fn texts(batches: &[RecordBatch], table: &str) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for batch in batches {
        let text = scan::text_column(batch, 0, table)?;
        out.extend((0..text.len()).filter(|&i| text.is_valid(i)).map(|i| text.value(i).to_owned()));
    }
    Ok(out)
}

/// Which of `wanted` the commits `after+1 ..= head` added.
async fn keys_added_between(
    table: &DeltaTable,
    spec: &TableSpec,
    dedup: Dedup,
    wanted: &BTreeSet<String>,
    after: u64,
    head: u64,
) -> Result<BTreeSet<String>> {
    let Some(column) = dedup.column() else { return Ok(BTreeSet::new()) };
    let mut files = Vec::new();
    for version in after + 1..=head {
        files.extend(key_filter::added_files(
            &table::commit_actions(table, &spec.name, version).await?,
        ));
    }
    let keys: Vec<String> = wanted.iter().cloned().collect();
    keys_in_files(table, spec, column, files, &keys).await
}

/// Whether the commits `after+1 ..= head` added any key of `batches`.
async fn added_any(
    table: &DeltaTable,
    spec: &TableSpec,
    dedup: Dedup,
    batches: &[RecordBatch],
    after: u64,
    head: u64,
) -> Result<bool> {
    let wanted = distinct_key_texts(batches, dedup, &spec.name)?;
    Ok(!keys_added_between(table, spec, dedup, &wanted, after, head).await?.is_empty())
}

/// Write the batches as Parquet data files of the table (uncommitted), with
/// `properties` ([`table::writer_properties_for`] for lake tables), small
/// columns uncompressed ([`table::compress_where_it_pays`]).
pub(crate) async fn write_files(
    table: &DeltaTable,
    name: &str,
    batches: &[RecordBatch],
    properties: WriterProperties,
) -> Result<Vec<Add>> {
    let writer = RecordBatchWriter::for_table(table).map_err(|e| Error::delta(name, e))?;
    write_with(Box::new(writer), name, batches, properties).await.map(|(adds, _)| adds)
}

/// [`write_files`] with a writer of the tip's table, kept in the tip
/// between commits (making one parses the table's schema).
pub(crate) async fn write_files_on_tip(
    tip: &mut Tip,
    name: &str,
    batches: &[RecordBatch],
    properties: WriterProperties,
) -> Result<Vec<Add>> {
    let writer = tip.take_writer()?;
    // (Boxed: a writer's futures are large, and every commit path holds one.)
    let (adds, writer) = Box::pin(write_with(writer, name, batches, properties)).await?;
    tip.keep_writer(writer);
    Ok(adds)
}

/// Write the batches with `writer`; give it back, flushed, with the files.
async fn write_with(
    writer: Box<RecordBatchWriter>,
    name: &str,
    batches: &[RecordBatch],
    properties: WriterProperties,
) -> Result<(Vec<Add>, Box<RecordBatchWriter>)> {
    let properties = table::compress_where_it_pays(properties, batches);
    let mut writer = Box::new(writer.with_writer_properties(properties));
    for batch in batches.iter().filter(|b| b.num_rows() > 0) {
        writer.write(batch.clone()).await.map_err(|e| Error::delta(name, e))?;
    }
    let adds = writer.flush().await.map_err(|e| Error::delta(name, e))?;
    Ok((adds, writer))
}

/// Delete data files no commit references (ours, given up). Best effort: a
/// file left behind is an orphan that `vacuum --full` removes.
pub(crate) async fn remove_files(table: &DeltaTable, adds: &[Add]) {
    let store = table.object_store();
    for add in adds {
        let path = deltalake::Path::from(add.path.as_str());
        if let Err(e) = store.delete(&path).await {
            tracing::warn!(file = %add.path, error = %e, "could not remove an uncommitted data file");
        }
    }
}

/// For index rows whose artifact's content is already in the lake at
/// another step, the step where the content is: the index must point at
/// the content that exists (a half-finished put left content without its
/// index row).
pub fn repoint_steps(
    batches: Vec<RecordBatch>,
    content_steps: &BTreeMap<String, i32>,
    table: &str,
) -> Result<Vec<RecordBatch>> {
    if content_steps.is_empty() {
        return Ok(batches);
    }
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let ids = key_texts(&batch, Dedup::ArtifactId, table)?;
        let i = batch.schema().index_of(STEP_COLUMN).map_err(|e| Error::arrow(table, e))?;
        let steps = batch
            .column(i)
            .as_any()
            .downcast_ref::<Int32Array>()
            .ok_or_else(|| Error::Internal(format!("`{table}.{STEP_COLUMN}` is not int32")))?;
        let fixed: Int32Array = ids
            .iter()
            .enumerate()
            .map(|(row, id)| content_steps.get(id).copied().or(Some(steps.value(row))))
            .collect();
        let mut columns = batch.columns().to_vec();
        columns[i] = Arc::new(fixed);
        out.push(
            RecordBatch::try_new(batch.schema(), columns).map_err(|e| Error::arrow(table, e))?,
        );
    }
    Ok(out)
}

/// Where the table holds each of `ids` (artifact id → step), for content
/// tables.
pub async fn content_steps(
    root: &LakeRoot,
    spec: &TableSpec,
    ids: &BTreeSet<String>,
) -> Result<BTreeMap<String, i32>> {
    let mut out = BTreeMap::new();
    if ids.is_empty() || !table::exists(root, spec).await? {
        return Ok(out);
    }
    let handle = table::open(root, spec).await?;
    let present = present_keys(root, &handle, spec, Dedup::ArtifactId, ids).await?;
    for chunk in present.iter().cloned().collect::<Vec<_>>().chunks(scan::IN_LIST_CHUNK) {
        let select = Select::columns(scan::columns(&["artifact_id", STEP_COLUMN]))
            .filter(scan::in_list("artifact_id", chunk.iter().map(String::as_str)));
        select
            .for_each_batch(&handle, &spec.name, |batch| {
                let ids = scan::text_column(batch, 0, &spec.name)?;
                let steps = deltalake::arrow::compute::cast(batch.column(1), &DataType::Int32)
                    .map_err(|e| Error::arrow(&spec.name, e))?;
                let steps = steps.as_any().downcast_ref::<Int32Array>().ok_or_else(|| {
                    Error::Internal(format!("`{}.{STEP_COLUMN}` did not cast", spec.name))
                })?;
                for row in 0..batch.num_rows() {
                    out.insert(ids.value(row).to_owned(), steps.value(row));
                }
                Ok(())
            })
            .await?;
    }
    Ok(out)
}

/// Write the key filters (key column and lookup columns) and the key set of a
/// version added by other means than [`Append`] (compaction, restore).
pub async fn write_key_filters(
    root: &LakeRoot,
    handle: &DeltaTable,
    spec: &TableSpec,
    version: u64,
) -> Result<()> {
    let dedup = Dedup::of(&spec.kind);
    let added = key_filter::added_files(&table::commit_actions(handle, &spec.name, version).await?);
    if added.is_empty() {
        return Ok(());
    }
    let columns: Vec<(Option<&str>, &str)> = dedup
        .column()
        .map(|c| (None, c))
        .into_iter()
        .chain(spec.lookup_columns().iter().map(|c| (Some(*c), *c)))
        .collect();
    let mut bundle = Bundle::new();
    for (sidecar, column) in columns {
        let keys = keys_of_files(handle, spec, column, sidecar.is_none(), &added).await?;
        if sidecar.is_none() {
            bundle.part(Part::KeySet, key_set::encode(&added, &keys));
        }
        bundle.part(Part::Filter(sidecar), KeyFilter::new(added.clone(), &keys).encode());
    }
    if spec.kind == TableKind::Executions {
        add_results(&mut bundle, &added, &results_of_files(handle, spec, &added).await?);
    }
    match root {
        LakeRoot::Local(root) => bundle.write(&table::table_dir(root, spec), version),
        LakeRoot::Store(store) => StoreKeys::of(store, spec).put(version, &bundle).await,
    }
}

/// Write the key set of a version whose key filter names `files` (a lake
/// written before key sets, or a set lost): its keys read from the files.
/// `false` when the table has no key column, or the lake is in a store
/// (which keeps no key sets).
pub async fn write_key_set(
    root: &LakeRoot,
    handle: &DeltaTable,
    spec: &TableSpec,
    version: u64,
    files: &[String],
) -> Result<bool> {
    let Some(column) = Dedup::of(&spec.kind).column() else { return Ok(false) };
    let Some(root) = root.local() else { return Ok(false) };
    let keys = keys_of_files(handle, spec, column, true, files).await?;
    let dir = table::table_dir(root, spec);
    key_set::write(&dir, version, files, &keys)?;
    write_result_set(handle, spec, &dir, version, files).await?;
    Ok(true)
}

/// Write the result set of a version of the executions table (see
/// [`result_set`]) from its data files `files`; other tables have none.
async fn write_result_set(
    handle: &DeltaTable,
    spec: &TableSpec,
    dir: &Path,
    version: u64,
    files: &[String],
) -> Result<()> {
    if spec.kind != TableKind::Executions {
        return Ok(());
    }
    result_set::write(dir, version, files, &results_of_files(handle, spec, files).await?)
}

/// Add the result set of an executions version held by `files` to its
/// bundle; none when a run id is too long for a record (the version is then
/// read from its files).
fn add_results(
    bundle: &mut Bundle,
    files: &[String],
    results: &BTreeMap<Key, result_set::SpecResult>,
) {
    match result_set::encode(files, results) {
        Some(bytes) => {
            bundle.part(Part::Results, bytes);
        }
        None => tracing::debug!("a run id is too long for a result set; none written"),
    }
}

/// The latest successful result of each spec in `files` of the executions
/// table.
async fn results_of_files(
    handle: &DeltaTable,
    spec: &TableSpec,
    files: &[String],
) -> Result<BTreeMap<Key, result_set::SpecResult>> {
    let mut latest = BTreeMap::new();
    Select::columns(scan::columns(&result_set::COLUMNS))
        .files(files.to_vec())
        .for_each_batch(handle, &spec.name, |batch| {
            result_set::add_batch(&mut latest, batch, &spec.name)
        })
        .await?;
    Ok(latest)
}

/// The distinct keys of `column` in `files`, as the table's key filters
/// hash them (`key_column`: the de-duplication key, else a lookup column).
async fn keys_of_files(
    handle: &DeltaTable,
    spec: &TableSpec,
    column: &str,
    key_column: bool,
    files: &[String],
) -> Result<Vec<Key>> {
    let values = Select::columns(vec![scan::column(column)])
        .files(files.to_vec())
        .strings(handle, &spec.name)
        .await?;
    let run_ids = key_column && Dedup::of(&spec.kind) == Dedup::RunId;
    let keys: BTreeSet<Key> =
        values.iter().map(|v| if run_ids { Key::of_text(v) } else { Key::of_value(v) }).collect();
    Ok(keys.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::datatypes::{Field, Schema};

    use crate::artifact::ArtifactId;
    use crate::lake::layout;

    /// A new lake in `dir` and three metrics (not put) labelled `label`.
    async fn lake_and_metrics(dir: &Path, label: &str) -> (crate::Lake, [crate::Artifact; 3]) {
        let (lake, _) = crate::Lake::init(dir).await.unwrap();
        let metric = |i: i32| {
            let draft = crate::Draft::metric(serde_json::json!({label: i})).unwrap();
            draft.finalize(lake.registry()).unwrap()
        };
        let metrics = [metric(1), metric(2), metric(3)];
        (lake, metrics)
    }

    /// Keys known present at the tip's version drop their rows unread; at
    /// another version the set is ignored and every key is looked up, so a
    /// stale set never drops a row the table lacks.
    #[tokio::test]
    async fn keys_known_present_at_the_head_are_not_looked_up_again() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, [a, b, c]) = lake_and_metrics(dir.path(), "known").await;
        lake.put(std::slice::from_ref(&a)).await.unwrap();
        let index = layout::index_table();
        let rows = |artifacts: &[&crate::Artifact], tip: &Tip| {
            let schema = table::arrow_schema(tip.table(), &index).unwrap();
            crate::store::rows::index_batch(&schema, artifacts).unwrap()
        };
        let ids = |set: &[&crate::Artifact]| -> BTreeSet<String> {
            set.iter().map(|x| x.id.to_string()).collect()
        };
        let mut tip = lake.handles().latest_tip(lake.root(), &index).await.unwrap();
        let head = tip.head();
        // At the head: a's row is dropped as known, b's is added.
        let appended = Append::new(lake.root(), &index, vec![rows(&[&a, &b], &tip)])
            .with_present_at(head, ids(&[&a]))
            .execute_on_tip(&mut tip)
            .await
            .unwrap();
        assert_eq!((appended.rows_added, appended.rows_skipped), (1, 1));
        assert_eq!(appended.present_keys, ids(&[&a]));
        // A set for an older version, naming c, which the table lacks: not
        // used; a and b are found by the look-up, c is added.
        let appended = Append::new(lake.root(), &index, vec![rows(&[&a, &b, &c], &tip)])
            .with_present_at(head, ids(&[&a, &b, &c]))
            .execute_on_tip(&mut tip)
            .await
            .unwrap();
        assert_eq!(appended.rows_added, 1);
        assert_eq!(appended.present_keys, ids(&[&a, &b]));
        lake.handles().keep_tip(&index, tip);
        let count = lake.sql("SELECT count(*) AS n FROM \"index\"").execute().await.unwrap();
        let n = count.batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<deltalake::arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, 3, "one row per artifact");
    }

    /// A look-up on a tip answers from its live files and key filters, and
    /// reads the files they leave (here: every file, once the sidecars are
    /// gone) from the table opened at the tip's head: the same answer.
    #[tokio::test]
    async fn present_keys_on_a_tip_match_the_table_with_or_without_sidecars() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, [a, b, c]) = lake_and_metrics(dir.path(), "on tip").await;
        lake.put(std::slice::from_ref(&a)).await.unwrap();
        lake.put(std::slice::from_ref(&b)).await.unwrap();
        let index = layout::index_table();
        let wanted: BTreeSet<String> = [&a, &b, &c].iter().map(|x| x.id.to_string()).collect();
        let held: BTreeSet<String> = [&a, &b].iter().map(|x| x.id.to_string()).collect();
        let root = lake.root();
        let tip = Tip::open(root, &index).await.unwrap();
        assert_eq!(tip.uncovered(), 0, "both versions have their filters");
        let found = present_keys_on_tip(root, &tip, &index, Dedup::ArtifactId, &wanted).await;
        assert_eq!(found.unwrap(), held);
        let at_head = table::open_at(root, &index, tip.head()).await.unwrap();
        let direct = present_keys(root, &at_head, &index, Dedup::ArtifactId, &wanted).await;
        assert_eq!(direct.unwrap(), held);

        let dir = table::table_dir(root.local().unwrap(), &index);
        std::fs::remove_dir_all(dir.join(key_filter::KEYS_DIR)).unwrap();
        let tip = Tip::open(root, &index).await.unwrap();
        assert_eq!(tip.uncovered(), 2, "no file is covered");
        let found = present_keys_on_tip(root, &tip, &index, Dedup::ArtifactId, &wanted).await;
        assert_eq!(found.unwrap(), held);
    }

    fn texts(columns: &[(&str, Vec<Option<&str>>)]) -> RecordBatch {
        let fields: Vec<Field> =
            columns.iter().map(|(name, _)| Field::new(*name, DataType::Utf8, true)).collect();
        let arrays: Vec<ArrayRef> = columns
            .iter()
            .map(|(_, values)| Arc::new(StringArray::from(values.clone())) as ArrayRef)
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
    }

    fn column(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
        let text = scan::text_column(batch, batch.schema().index_of(name).unwrap(), "t").unwrap();
        text.iter().map(|v| v.map(str::to_owned)).collect()
    }

    fn id(n: u8) -> String {
        ArtifactId::compute("metric", &[n]).to_hex()
    }

    #[test]
    fn unique_rows_keeps_the_first_of_each_key_across_batches() {
        let (a, b, c) = (id(1), id(2), id(3));
        let one = texts(&[("artifact_id", vec![Some(&a), Some(&b), Some(&a)])]);
        let two = texts(&[("artifact_id", vec![Some(&c), Some(&b)])]);
        let kept = unique_rows(&[one, two], &layout::index_table()).unwrap();
        assert_eq!(column(&kept[0], "artifact_id"), vec![Some(a), Some(b)]);
        assert_eq!(column(&kept[1], "artifact_id"), vec![Some(c)]);
    }

    #[test]
    fn unique_rows_of_a_wide_key_compares_every_key_column() {
        let spec = layout::execution_edges_table();
        let rows = |run: &str, direction: &str, role: &str, artifact: &str| {
            (run.to_owned(), direction.to_owned(), role.to_owned(), artifact.to_owned())
        };
        let all = [
            rows("r1", "output", "out", "x"),
            rows("r1", "input", "out", "x"),
            rows("r1", "output", "out", "x"),
            rows("r2", "output", "out", "x"),
            rows("r1", "output", "other", "x"),
        ];
        let pick = |f: fn(&(String, String, String, String)) -> &str| {
            all.iter().map(|r| Some(f(r))).collect::<Vec<_>>()
        };
        let batch = texts(&[
            ("execution_run_id", pick(|r| &r.0)),
            ("direction", pick(|r| &r.1)),
            ("role", pick(|r| &r.2)),
            ("artifact_id", pick(|r| &r.3)),
        ]);
        let kept = unique_rows(&[batch], &spec).unwrap();
        assert_eq!(kept[0].num_rows(), 4, "only the exact repeat (row 3) is dropped");
        assert_eq!(column(&kept[0], "direction")[1], Some("input".to_owned()));
        assert_eq!(column(&kept[0], "execution_run_id")[2], Some("r2".to_owned()));
    }

    #[test]
    fn unique_rows_with_null_keys_treats_nulls_as_one_key_apart_from_empty_text() {
        let batch = texts(&[("artifact_id", vec![None, Some(""), None, Some("")])]);
        let kept = unique_rows(&[batch], &layout::index_table()).unwrap();
        assert_eq!(column(&kept[0], "artifact_id"), vec![None, Some(String::new())]);
    }

    #[test]
    fn batch_keys_are_sorted_distinct_and_reject_what_is_not_an_id() {
        let (a, b) = (id(1), id(2));
        let batch = texts(&[("artifact_id", vec![Some(&b), Some(&a), Some(&b)])]);
        let keys = batch_keys(&[batch], Dedup::ArtifactId, "index").unwrap();
        let mut expected: Vec<Key> =
            [&a, &b].iter().map(|t| Key::from(t.parse::<ArtifactId>().unwrap())).collect();
        expected.sort();
        assert_eq!(keys, expected);

        let runs = texts(&[("execution_run_id", vec![Some("r2"), Some("r1"), Some("r2")])]);
        let keys = batch_keys(&[runs], Dedup::RunId, "executions").unwrap();
        assert_eq!(keys.len(), 2);
        assert!(keys.contains(&Key::of_text("r1")) && keys.contains(&Key::of_text("r2")));

        let bad = texts(&[("artifact_id", vec![Some("not-an-id")])]);
        assert!(batch_keys(&[bad], Dedup::ArtifactId, "index").is_err());
        assert!(batch_keys(&[], Dedup::Nothing, "steps").unwrap().is_empty());
    }
}
