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
//! writer is reported, never retried on top of it (see [`super::append`]).
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deltalake::DeltaTable;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::{CommitData, PROTOCOL, TransactionError};
use deltalake::logstore::CommitOrBytes;
use deltalake::protocol::DeltaOperation;
use deltalake::table::config::TablePropertiesExt;

use super::key_filter::{self, Key, KeyFilter};
use super::layout::TableSpec;
use super::table;
use crate::error::{Error, Result};

/// How long a tip trusts its head without listing the log.
pub const RELIST_AFTER: Duration = Duration::from_secs(600);

/// Versions whose sidecar a tip waits for before it stops looking (their
/// files stay uncovered: slower, never wrong).
const PENDING_SIDECARS: usize = 64;

/// A writer's view of one table (see the module docs).
#[derive(Debug)]
pub struct Tip {
    name: String,
    dir: PathBuf,
    /// Opened once: its protocol, metadata and log store hold for every
    /// version up to the head (a version that changes them reopens the tip).
    table: DeltaTable,
    head: u64,
    listed: Instant,
    /// Live data files at the head, with the version of the key filter
    /// covering each (`None`: no filter covers it).
    live: HashMap<String, Option<u64>>,
    uncovered: usize,
    filters: BTreeMap<u64, Arc<KeyFilter>>,
    /// The one-word filters among them (commits of one or two keys, what a
    /// run of puts leaves), by version: a key is tested against all of them
    /// with one mask over contiguous words.
    one_word: HashMap<u64, u64>,
    /// The others, probed one by one.
    larger: BTreeMap<u64, Arc<KeyFilter>>,
    /// Versions that added files before their sidecar could be read.
    pending: BTreeSet<u64>,
    /// The checkpoint being written, off the commit path.
    checkpointing: Option<tokio::task::JoinHandle<()>>,
    /// Why this table's appends need more than add actions (a writer
    /// feature a direct commit does not write), if they do.
    needs_delta_rs: Option<String>,
}

impl Tip {
    /// Open the table of `spec` and read its live files and key filters.
    pub async fn open(root: &Path, spec: &TableSpec) -> Result<Tip> {
        let table = table::open(root, spec).await?;
        let head = table.version().unwrap_or_default();
        let live = table::active_files(&table, spec)?.into_iter().map(|f| (f, None)).collect();
        let dir = table::table_dir(root, spec);
        let mut tip = Tip {
            name: spec.name.clone(),
            uncovered: 0,
            table,
            head,
            listed: Instant::now(),
            live,
            filters: BTreeMap::new(),
            one_word: HashMap::new(),
            larger: BTreeMap::new(),
            pending: BTreeSet::new(),
            checkpointing: None,
            needs_delta_rs: None,
            dir,
        };
        tip.needs_delta_rs = beyond_plain_appends(&tip.table);
        tip.uncovered = tip.live.len();
        for (version, filter) in key_filter::read_all(&tip.dir) {
            tip.cover(version, filter);
        }
        Ok(tip)
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

    /// Live data files no key filter covers.
    pub fn uncovered(&self) -> usize {
        self.uncovered
    }

    /// Bring the tip to the table's latest version.
    pub async fn advance(&mut self, root: &Path, spec: &TableSpec) -> Result<()> {
        if self.listed.elapsed() >= self.relist_after() {
            *self = Tip::open(root, spec).await?;
            return Ok(());
        }
        // The head's own entry must still be there: a table made again at
        // the same path (or a log cleaned past the head) starts over.
        let own = self.dir.join("_delta_log").join(format!("{:020}.json", self.head));
        if !own.exists() {
            *self = Tip::open(root, spec).await?;
            return Ok(());
        }
        let store = self.table.log_store();
        while let Some(bytes) =
            store.read_commit_entry(self.head + 1).await.map_err(|e| Error::delta(&self.name, e))?
        {
            let version = self.head + 1;
            let actions = deltalake::logstore::get_actions(version, &bytes)
                .map_err(|e| Error::delta(&self.name, e))?;
            if changes_the_table(&actions) {
                *self = Tip::open(root, spec).await?;
                return Ok(());
            }
            self.apply(version, &actions);
            self.head = version;
        }
        self.retry_pending();
        Ok(())
    }

    /// Whether the table certainly holds none of `keys`: every live file is
    /// covered by a key filter and no filter may hold any of them. `false`
    /// means "maybe": ask a table opened at the head.
    pub fn holds_none(&self, keys: &[Key]) -> bool {
        if self.uncovered > 0 {
            return false;
        }
        let masks: Vec<u64> = keys.iter().map(KeyFilter::one_word_mask).collect();
        if self.one_word.values().any(|word| masks.iter().any(|mask| word & mask == *mask)) {
            return false;
        }
        let hashes: Vec<(u64, u64)> = keys.iter().map(Key::hashes).collect();
        let mut alive = Vec::with_capacity(keys.len());
        self.larger.values().all(|filter| {
            alive.clear();
            alive.extend(0..keys.len() as u32);
            filter.retain_candidates(&hashes, &mut alive);
            alive.is_empty()
        })
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
        // Lakes are folders of a file system, whose log store writes each
        // entry put-if-absent; one that went through a temporary file
        // would need delta-rs's commit.
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
        let written = self
            .table
            .log_store()
            .write_commit_entry(version, CommitOrBytes::LogBytes(bytes), uuid::Uuid::new_v4())
            .await;
        match written {
            Ok(()) => {}
            Err(TransactionError::VersionAlreadyExists(_)) => return Ok(None),
            Err(e) => return Err(Error::delta(&self.name, e.into())),
        }
        self.apply(version, &data.actions);
        self.head = version;
        self.checkpoint_if_due(version).await;
        Ok(Some(version))
    }

    /// Take the key filter of a version this tip committed (its sidecar was
    /// just written from it).
    pub fn learn(&mut self, version: u64, filter: Arc<KeyFilter>) {
        self.pending.remove(&version);
        self.cover(version, filter);
    }

    /// Apply one version's adds and removes to the live files.
    fn apply(&mut self, version: u64, actions: &[Action]) {
        let mut added = false;
        for action in actions {
            match action {
                Action::Add(add) => {
                    added = true;
                    match self.live.insert(add.path.clone(), None) {
                        None => self.uncovered += 1,
                        // Added again while covered: now uncovered, and so
                        // are the other files of its filter.
                        Some(Some(by)) => {
                            self.uncovered += 1;
                            self.uncover(by);
                        }
                        Some(None) => {}
                    }
                }
                Action::Remove(remove) => match self.live.remove(&remove.path) {
                    Some(None) => self.uncovered -= 1,
                    Some(Some(by)) => self.uncover(by),
                    None => {}
                },
                _ => {}
            }
        }
        if added {
            self.pending.insert(version);
            while self.pending.len() > PENDING_SIDECARS {
                self.pending.pop_first();
            }
        }
    }

    /// Let `filter` (of `version`) cover its files, if all of them are live
    /// and uncovered.
    fn cover(&mut self, version: u64, filter: Arc<KeyFilter>) -> bool {
        let usable = !filter.files.is_empty()
            && filter.files.iter().all(|f| matches!(self.live.get(f), Some(None)));
        if !usable {
            return false;
        }
        // (A file named twice in a sidecar is covered once.)
        for file in &filter.files {
            if let Some(by @ None) = self.live.get_mut(file) {
                *by = Some(version);
                self.uncovered -= 1;
            }
        }
        match filter.one_word() {
            Some(word) => self.one_word.insert(version, word).map(drop),
            None => self.larger.insert(version, filter.clone()).map(drop),
        };
        self.filters.insert(version, filter);
        true
    }

    /// Drop the filter of `version` (one of its files went): its other live
    /// files are uncovered again.
    fn uncover(&mut self, version: u64) {
        let Some(filter) = self.filters.remove(&version) else { return };
        self.one_word.remove(&version);
        self.larger.remove(&version);
        for file in &filter.files {
            if let Some(by) = self.live.get_mut(file)
                && *by == Some(version)
            {
                *by = None;
                self.uncovered += 1;
            }
        }
    }

    /// Read the sidecars that had not appeared yet.
    fn retry_pending(&mut self) {
        let pending: Vec<u64> = self.pending.iter().copied().collect();
        for version in pending {
            if let Some(filter) = key_filter::read_one(&self.dir, version) {
                self.pending.remove(&version);
                self.cover(version, filter);
            }
        }
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
    async fn checkpoint_if_due(&mut self, version: u64) {
        let Ok(snapshot) = self.table.snapshot() else { return };
        let config = snapshot.table_config();
        let interval = config.checkpoint_interval().get();
        if !(version + 1).is_multiple_of(interval) {
            return;
        }
        if self.checkpointing.as_ref().is_some_and(|c| !c.is_finished()) {
            tracing::debug!(table = %self.name, version, "a checkpoint is still being written");
            return;
        }
        let cleanup = config.enable_expired_log_cleanup()
            && ((version + 1) / interval).is_multiple_of(CLEANUP_EVERY);
        let retention = config.log_retention_duration();
        let log_store = self.table.log_store();
        let name = self.name.clone();
        self.checkpointing = Some(tokio::spawn(async move {
            if let Err(e) =
                write_checkpoint(&log_store, version, cleanup.then_some(retention)).await
            {
                tracing::warn!(table = %name, version, error = %e, "could not write a checkpoint");
            }
        }));
    }

    /// Wait for the checkpoint being written, if any.
    pub async fn settle(&mut self) {
        if let Some(writing) = self.checkpointing.take()
            && let Err(e) = writing.await
        {
            tracing::warn!(table = %self.name, error = %e, "a checkpoint task failed");
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

/// Checkpoints between two looks for expired log files.
const CLEANUP_EVERY: u64 = 10;

/// Write the checkpoint of `version` from the kernel's snapshot; with a
/// retention, then drop log files older than it behind a checkpoint.
async fn write_checkpoint(
    log_store: &deltalake::logstore::LogStoreRef,
    version: u64,
    retention: Option<Duration>,
) -> std::result::Result<(), String> {
    let root = log_store.root_url().clone();
    let engine = log_store.engine(None);
    tokio::task::spawn_blocking(move || {
        let snapshot = delta_kernel::Snapshot::builder_for(root.as_str())
            .at_version(version)
            .build(engine.as_ref())
            .map_err(|e| e.to_string())?;
        snapshot.checkpoint(engine.as_ref(), None).map(drop).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())??;
    if let Some(retention) = retention {
        let cutoff = chrono::Utc::now().timestamp_millis()
            - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        deltalake::checkpoints::cleanup_expired_logs_for(version, log_store.as_ref(), cutoff, None)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether a version changes what a tip took from the table's opening.
fn changes_the_table(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Metadata(_) | Action::Protocol(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(files: &[&str]) -> Arc<KeyFilter> {
        let keys = [Key::of_text("x")];
        Arc::new(KeyFilter::new(files.iter().map(|f| f.to_string()).collect(), &keys))
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
            ..Default::default()
        })
    }

    async fn tip_of_a_new_table() -> (tempfile::TempDir, Tip) {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let tip = Tip::open(lake.root(), &super::super::layout::index_table()).await.unwrap();
        (dir, tip)
    }

    #[tokio::test]
    async fn coverage_follows_adds_removes_and_filters() {
        let (_dir, mut tip) = tip_of_a_new_table().await;
        assert_eq!(tip.uncovered(), 0);
        tip.apply(5, &[add("a"), add("b")]);
        assert_eq!(tip.uncovered(), 2, "no sidecar yet");
        assert!(!tip.holds_none(&[Key::of_text("y")]), "uncovered files: maybe");
        tip.learn(5, filter(&["a", "b"]));
        assert_eq!(tip.uncovered(), 0);
        assert!(tip.holds_none(&[Key::of_text("y")]));
        assert!(!tip.holds_none(&[Key::of_text("x")]), "the filter may hold x");
        // Compaction: a removed, c added; b is left without a usable filter.
        tip.apply(6, &[remove("a"), add("c")]);
        assert_eq!(tip.uncovered(), 2, "b and c");
        assert!(!tip.cover(6, filter(&["a", "c"])), "a filter naming a dead file is unusable");
        assert!(tip.cover(7, filter(&["b", "c"])));
        assert_eq!(tip.uncovered(), 0);
        tip.apply(8, &[remove("b"), remove("c")]);
        assert_eq!(tip.uncovered(), 0);
        assert!(tip.live.is_empty() && tip.filters.is_empty());
        assert!(tip.one_word.is_empty() && tip.larger.is_empty());
    }

    #[tokio::test]
    async fn one_word_and_larger_filters_both_answer() {
        let (_dir, mut tip) = tip_of_a_new_table().await;
        let many: Vec<Key> = (0..10).map(|i| Key::of_text(&format!("k{i}"))).collect();
        tip.apply(1, &[add("small")]);
        tip.learn(1, filter(&["small"]));
        tip.apply(2, &[add("large")]);
        tip.learn(2, Arc::new(KeyFilter::new(vec!["large".into()], &many)));
        assert_eq!((tip.one_word.len(), tip.larger.len()), (1, 1));
        assert!(!tip.holds_none(&[Key::of_text("x")]), "in the one-word filter");
        assert!(!tip.holds_none(&[Key::of_text("nope"), many[3]]), "in the larger one");
        assert!(tip.holds_none(&[Key::of_text("nope"), Key::of_text("neither")]));
    }

    /// What the bookkeeping must always say, recomputed from scratch.
    fn assert_consistent(tip: &Tip) {
        let uncovered = tip.live.values().filter(|by| by.is_none()).count();
        assert_eq!(tip.uncovered, uncovered, "uncovered count");
        for (version, filter) in &tip.filters {
            for file in &filter.files {
                assert_eq!(tip.live.get(file), Some(&Some(*version)), "{file} of {version}");
            }
        }
        for by in tip.live.values().flatten() {
            assert!(tip.filters.contains_key(by), "a file covered by a dropped filter {by}");
        }
        assert_eq!(tip.one_word.len() + tip.larger.len(), tip.filters.len());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        #[test]
        fn coverage_stays_consistent_under_any_adds_removes_and_filters(
            ops in proptest::collection::vec((0u8..3, 0usize..6, 0usize..6), 1..60)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (_dir, mut tip) = rt.block_on(tip_of_a_new_table());
            let name = |i: usize| format!("f{i}");
            for (step, (op, a, b)) in ops.into_iter().enumerate() {
                let version = 100 + step as u64;
                match op {
                    0 => tip.apply(version, &[add(&name(a)), add(&name(b))]),
                    1 => tip.apply(version, &[remove(&name(a))]),
                    _ => {
                        let files: Vec<String> = vec![name(a), name(b)];
                        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
                        tip.cover(version, filter(&refs));
                    }
                }
                assert_consistent(&tip);
            }
        }
    }

    #[tokio::test]
    async fn a_file_added_again_while_covered_is_uncovered() {
        let (_dir, mut tip) = tip_of_a_new_table().await;
        tip.apply(1, &[add("a"), add("b")]);
        tip.learn(1, filter(&["a", "b"]));
        tip.apply(2, &[add("a")]);
        assert_eq!(tip.uncovered(), 2);
        assert_consistent(&tip);
    }

    #[tokio::test]
    async fn a_sidecar_that_appears_late_is_picked_up() {
        let (_dir, mut tip) = tip_of_a_new_table().await;
        tip.apply(3, &[add("late.parquet")]);
        tip.retry_pending();
        assert_eq!(tip.uncovered(), 1);
        key_filter::write_for(&tip.dir, 3, None, &filter(&["late.parquet"])).unwrap();
        tip.retry_pending();
        assert_eq!(tip.uncovered(), 0);
        assert!(tip.pending.is_empty());
    }

    #[tokio::test]
    async fn a_checkpoint_with_no_retention_drops_the_log_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        for i in 0..30 {
            lake.put(&[metric(&lake, i)]).await.unwrap();
        }
        let spec = super::super::layout::index_table();
        let tip = Tip::open(lake.root(), &spec).await.unwrap();
        let log = tip.dir.join("_delta_log");
        assert!(log.join(format!("{:020}.json", 0)).exists());
        write_checkpoint(&tip.table.log_store(), tip.head(), Some(Duration::ZERO)).await.unwrap();
        let hint = std::fs::read_to_string(log.join("_last_checkpoint")).unwrap();
        assert!(hint.contains(&format!("\"version\":{}", tip.head())), "{hint}");
        assert!(!log.join(format!("{:020}.json", 0)).exists(), "expired and behind a checkpoint");
        // The table reads whole from the checkpoint.
        let reopened = Tip::open(lake.root(), &spec).await.unwrap();
        assert_eq!(reopened.head(), tip.head());
        assert_eq!(reopened.live.len(), tip.live.len());
        assert_eq!(reopened.uncovered(), 0);
    }

    #[tokio::test]
    async fn a_table_made_again_at_the_same_path_reopens_the_tip() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        for i in 0..3 {
            lake.put(&[metric(&lake, i)]).await.unwrap();
        }
        let spec = super::super::layout::index_table();
        let mut tip = Tip::open(lake.root(), &spec).await.unwrap();
        let old_head = tip.head();
        std::fs::remove_dir_all(dir.path()).unwrap();
        let (again, _) = crate::Lake::init(dir.path()).await.unwrap();
        again.put(&[metric(&again, 9)]).await.unwrap();
        tip.advance(again.root(), &spec).await.unwrap();
        assert!(tip.head() < old_head, "{} is the new table's head", tip.head());
        assert_eq!(tip.live.len(), 1);
    }

    #[tokio::test]
    async fn writer_features_beyond_plain_appends_leave_commits_to_delta_rs() {
        let (dir, tip) = tip_of_a_new_table().await;
        assert_eq!(tip.commits_directly(), Ok(()), "sluice's tables: writer version 4");
        let spec = super::super::layout::index_table();
        let log = tip.dir.join("_delta_log");
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
        assert_eq!(Tip::open(root, &spec).await.unwrap().commits_directly(), Ok(()));
        let more = [&plain[..], &["domainMetadata"]].concat();
        upgrade(tip.head() + 2, &more);
        let reopened = Tip::open(root, &spec).await.unwrap();
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
