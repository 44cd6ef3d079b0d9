//! Table handles a [`Lake`](crate::lake::Lake) keeps between calls.
//!
//! Opening a Delta table replays its log from the last checkpoint (up to
//! 100 JSON commits by default), and a `put` or a read by id used to open
//! each table it touches, several times. A kept handle is instead brought up
//! to date: one listing of the log for versions after its own, and only
//! those are read. A handle is only a starting point — every write still
//! commits as exactly the version after the one its checks read, so a stale
//! handle costs a retry, never a duplicate.
//!
//! Most calls find the table where they left it: before listing the log, a
//! kept handle at version `v` checks whether `v + 1` exists. Delta versions
//! are consecutive and a commit file appears whole (put if absent), so when
//! `v + 1` is absent the handle is the table's head at that instant: one
//! `stat` instead of a listing that stats every file of the log.
//!
//! delta-rs handles get slower with every commit applied to them (their log
//! segment grows from the version they were opened at; see
//! `../shared/notes/deltalake-1x.md`), so a handle is reopened from scratch
//! once it has moved [`REOPEN_AFTER`] versions past where it was opened.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

use deltalake::DeltaTable;

use crate::error::{Error, Result};
use crate::lake::delta::table;
use crate::lake::delta::tip::Tip;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::{TableKind, TableSpec};

/// Versions a handle may move past its opening before it is reopened.
pub const REOPEN_AFTER: u64 = 100;

/// A handle lent out by [`Handles`], to be given back with
/// [`Handles::keep`].
#[derive(Debug, Clone)]
pub struct Leased {
    /// The table.
    pub table: DeltaTable,
    opened_at: u64,
}

impl Leased {
    /// `kept` brought up to date, or — when there is none, or it has moved
    /// [`REOPEN_AFTER`] versions past its opening — the table `open` opens.
    /// `dir` is the table's directory, in a lake on a filesystem (where a
    /// `stat` says whether it moved; on a store, delta-rs asks the store).
    pub async fn latest(
        kept: Option<Leased>,
        dir: Option<&Path>,
        name: &str,
        open: impl std::future::Future<Output = Result<DeltaTable>>,
    ) -> Result<Leased> {
        // A handle moved by this process's own commits ages like one
        // brought up to date by others': both are reopened in time.
        if let Some(mut leased) = kept
            && leased.young()
        {
            if dir.is_none_or(|dir| table::may_have_moved(dir, version(&leased.table))) {
                leased.table.update_incremental(None).await.map_err(|e| Error::delta(name, e))?;
            }
            if leased.young() {
                return Ok(leased);
            }
        }
        Ok(Leased::opened(open.await?))
    }

    /// A lease of a table just opened.
    pub fn opened(table: DeltaTable) -> Leased {
        Leased { opened_at: version(&table), table }
    }

    /// The same lease, moved on to `table` (the same table after a commit).
    pub fn moved(&self, table: DeltaTable) -> Leased {
        Leased { table, opened_at: self.opened_at }
    }

    /// Whether the handle is at most [`REOPEN_AFTER`] versions past its opening.
    fn young(&self) -> bool {
        version(&self.table) <= self.opened_at + REOPEN_AFTER
    }
}

/// The handles of one lake, by table name.
#[derive(Debug, Default)]
pub struct Handles {
    kept: Mutex<HashMap<String, Leased>>,
    /// Writers' tips (see [`Tip`]), lent out whole: a tip is moved by
    /// its writer's commits, not shared.
    tips: Mutex<HashMap<String, Tip>>,
    /// The last head learnt of each table this lake keeps no handle of: a
    /// lake point reads every table's head, and a reader of two tables
    /// would otherwise list the logs of all the others on every read.
    heads: Mutex<HashMap<String, u64>>,
}

impl Handles {
    /// Whether a handle of the table is kept (without cloning it).
    fn has_handle(&self, name: &str) -> bool {
        self.kept.lock().is_ok_and(|kept| kept.contains_key(name))
    }

    fn get(&self, name: &str) -> Option<Leased> {
        self.kept.lock().ok().and_then(|kept| kept.get(name).cloned())
    }

    /// Whether the table exists: a handle, tip or head of it is kept, or its
    /// log holds a commit ([`table::is_table`], which reads the log folder).
    pub async fn exists(&self, root: &LakeRoot, spec: &TableSpec) -> Result<bool> {
        Ok(self.has_handle(&spec.name)
            || self.tips.lock().is_ok_and(|tips| tips.contains_key(&spec.name))
            || self.heads.lock().is_ok_and(|heads| heads.contains_key(&spec.name))
            || table::exists(root, spec).await?)
    }

    /// The table at its latest version.
    pub async fn latest(&self, root: &LakeRoot, spec: &TableSpec) -> Result<Leased> {
        let dir = root.local().map(|root| table::table_dir(root, spec));
        Leased::latest(self.get(&spec.name), dir.as_deref(), &spec.name, table::open(root, spec))
            .await
    }

    /// The table's latest version, `None` when there is no such table:
    /// through the kept handle when there is one (see the module docs), else
    /// probed without loading the table (a process that reads one table of
    /// the lake does not load the others to learn their heads): from the
    /// head last learnt, a `stat` per version since ([`table::head_from`]);
    /// the first time, or far behind, from a listing of the log.
    pub async fn head(&self, root: &LakeRoot, spec: &TableSpec) -> Result<Option<u64>> {
        let dir = root.local().map(|root| table::table_dir(root, spec));
        if let Some(kept) = self.get(&spec.name) {
            let leased =
                Leased::latest(Some(kept), dir.as_deref(), &spec.name, table::open(root, spec))
                    .await?;
            let head = version(&leased.table);
            self.keep(spec, leased);
            return Ok(Some(head));
        }
        let learnt = self.heads.lock().ok().and_then(|heads| heads.get(&spec.name).copied());
        if let Some(head) =
            learnt.zip(dir.as_deref()).and_then(|(known, dir)| table::head_from(dir, known))
        {
            self.learn_head(spec, head);
            return Ok(Some(head));
        }
        // In a store the head's search says whether there is a table.
        if let Some(store) = root.store_root() {
            let head = Box::pin(table::head_in_store(store, spec)).await?;
            if let Some(head) = head {
                self.learn_head(spec, head);
            }
            return Ok(head);
        }
        if !self.exists(root, spec).await? {
            return Ok(None);
        }
        let head = table::latest_version(root, spec).await?;
        self.learn_head(spec, head);
        Ok(Some(head))
    }

    fn learn_head(&self, spec: &TableSpec, head: u64) {
        if let Ok(mut heads) = self.heads.lock() {
            heads.insert(spec.name.clone(), head);
        }
    }

    /// The table at `at` (not cached when older than the kept handle).
    pub async fn at(&self, root: &LakeRoot, spec: &TableSpec, at: u64) -> Result<Leased> {
        if let Some(mut leased) = self.get(&spec.name)
            && version(&leased.table) <= at
            && at <= leased.opened_at + REOPEN_AFTER
        {
            if version(&leased.table) < at {
                table::load_version(&mut leased.table, &spec.name, at).await?;
            }
            return Ok(leased);
        }
        let table = table::open_at(root, spec, at).await?;
        Ok(Leased { opened_at: at, table })
    }

    /// The kept tip of the table, or a new one (the table must exist):
    /// over the kept handle brought up to date when there is one (the
    /// handle a lake's opening checked the schema with), so a process that
    /// opens the lake and then writes loads each table's log once.
    pub async fn take_tip(&self, root: &LakeRoot, spec: &TableSpec) -> Result<Tip> {
        let kept = self.tips.lock().ok().and_then(|mut tips| tips.remove(&spec.name));
        if let Some(tip) = kept {
            return Ok(tip);
        }
        if !self.has_handle(&spec.name) {
            return Tip::open(root, spec).await;
        }
        let leased = self.latest(root, spec).await?;
        let tip = Tip::from_table(root, spec, leased.table.clone()).await?;
        self.keep(spec, leased);
        Ok(tip)
    }

    /// The kept tip of the table (or a new one), brought to the table's
    /// latest version. Give it back with [`Handles::keep_tip`].
    pub async fn latest_tip(&self, root: &LakeRoot, spec: &TableSpec) -> Result<Tip> {
        let mut tip = self.take_tip(root, spec).await?;
        tip.advance(root, spec).await?;
        Ok(tip)
    }

    /// The latest version of each existing table of `specs` (the journal
    /// excepted), through the kept tips, read in reverse commit order (see
    /// [`crate::lake::journal::versions`]); with the highest commit sequence any
    /// of them records, and where.
    pub async fn tip_heads(
        &self,
        root: &LakeRoot,
        specs: &[TableSpec],
    ) -> Result<(BTreeMap<String, u64>, Option<(i64, String)>)> {
        self.open_tips(root, specs).await?;
        let mut heads = BTreeMap::new();
        let mut highest: Option<(i64, String)> = None;
        for spec in specs.iter().rev().filter(|s| s.kind != TableKind::Commits) {
            if !self.exists(root, spec).await? {
                continue;
            }
            let tip = self.latest_tip(root, spec).await?;
            heads.insert(spec.name.clone(), tip.head());
            if let Some(seq) = tip.seq()
                && highest.as_ref().is_none_or(|(h, _)| seq > *h)
            {
                highest = Some((seq, spec.name.clone()));
            }
            self.keep_tip(spec, tip);
        }
        Ok((heads, highest))
    }

    /// Open the tips of the existing tables of `specs` (the journal
    /// excepted) that none is kept for, each on a task of its own: a fresh
    /// committer reads every table's live files and key filters (at 10M
    /// keys, 40 MB for each content table and the index), which one after
    /// the other took the sum of the tables' times. Their heads are read
    /// again, in order, by whoever takes them ([`Handles::latest_tip`]).
    async fn open_tips(&self, root: &LakeRoot, specs: &[TableSpec]) -> Result<()> {
        let mut opening = Vec::new();
        for spec in specs.iter().filter(|s| s.kind != TableKind::Commits) {
            let kept = self.tips.lock().map(|tips| tips.contains_key(&spec.name)).unwrap_or(true);
            if kept || !self.exists(root, spec).await? {
                continue;
            }
            let table = match self.has_handle(&spec.name) {
                true => {
                    let leased = self.latest(root, spec).await?;
                    let table = leased.table.clone();
                    self.keep(spec, leased);
                    Some(table)
                }
                false => None,
            };
            let (root, spec) = (root.to_owned(), spec.clone());
            opening.push(tokio::spawn(async move {
                let tip = match table {
                    Some(table) => Tip::from_table(&root, &spec, table).await,
                    None => Tip::open(&root, &spec).await,
                };
                (spec, tip)
            }));
        }
        for task in opening {
            let (spec, tip) = task.await.map_err(|e| Error::task("opening a table's tip", e))?;
            self.keep_tip(&spec, tip?);
        }
        Ok(())
    }

    /// Keep a tip for the table's next writer.
    pub fn keep_tip(&self, spec: &TableSpec, tip: Tip) {
        if let Ok(mut tips) = self.tips.lock() {
            tips.insert(spec.name.clone(), tip);
        }
    }

    /// Wait for the checkpoints the kept tips are writing.
    pub async fn settle(&self) {
        let tips: Vec<(String, Tip)> =
            self.tips.lock().map(|mut tips| tips.drain().collect()).unwrap_or_default();
        for (name, mut tip) in tips {
            tip.settle().await;
            if let Ok(mut kept) = self.tips.lock() {
                kept.entry(name).or_insert(tip);
            }
        }
    }

    /// Forget everything kept of a table: it was made again at its path.
    pub fn forget(&self, name: &str) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.remove(name);
        }
        if let Ok(mut tips) = self.tips.lock() {
            tips.remove(name);
        }
        if let Ok(mut heads) = self.heads.lock() {
            heads.remove(name);
        }
    }

    /// Keep `leased` if it is newer than the handle kept for its table.
    pub fn keep(&self, spec: &TableSpec, leased: Leased) {
        let Ok(mut kept) = self.kept.lock() else { return };
        let newer =
            kept.get(&spec.name).is_none_or(|k| version(&k.table) <= version(&leased.table));
        if newer {
            kept.insert(spec.name.clone(), leased);
        }
    }
}

fn version(table: &DeltaTable) -> u64 {
    table.version().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::layout;

    #[test]
    fn a_handle_may_have_moved_only_when_the_next_commit_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("_delta_log");
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(log.join(format!("{:020}.json", 7)), b"{}").unwrap();
        assert!(!table::may_have_moved(dir.path(), 7), "nothing after 7");
        assert!(table::may_have_moved(dir.path(), 6), "7 exists");
        // A temporary commit file is not a version.
        std::fs::write(log.join("_commit_x.json.tmp"), b"{}").unwrap();
        assert!(!table::may_have_moved(dir.path(), 7));
    }

    /// Commits of a commit-info action alone at `versions` (as fast as
    /// files are made).
    fn bare_commits(table_dir: &Path, versions: std::ops::RangeInclusive<u64>) {
        for v in versions {
            let info = r#"{"commitInfo":{"timestamp":1764547200000,"operation":"WRITE"}}"#;
            let file = table_dir.join("_delta_log").join(format!("{v:020}.json"));
            std::fs::write(file, format!("{info}\n")).unwrap();
        }
    }

    #[tokio::test]
    async fn a_head_learnt_is_followed_by_stats_however_far_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let spec = layout::index_table();
        let table_dir = table::table_dir(lake.root().local().unwrap(), &spec);
        let handles = Handles::default();
        let v0 = handles.head(lake.root(), &spec).await.unwrap().unwrap();
        assert_eq!(handles.heads.lock().unwrap().get(&spec.name), Some(&v0), "learnt");
        assert!(handles.get(&spec.name).is_none(), "no handle was opened");
        // A few versions on: followed entry by entry.
        bare_commits(&table_dir, v0 + 1..=v0 + 3);
        assert_eq!(table::head_from(&table_dir, v0), Some(v0 + 3));
        assert_eq!(handles.head(lake.root(), &spec).await.unwrap(), Some(v0 + 3));
        // Far more: found by doubling and halving, every distance.
        let far = v0 + 3 + 300;
        bare_commits(&table_dir, v0 + 4..=far);
        for known in v0..=far {
            assert_eq!(table::head_from(&table_dir, known), Some(far), "from {known}");
        }
        assert_eq!(handles.head(lake.root(), &spec).await.unwrap(), Some(far));
        // Something that is neither an entry nor absent: not taken for one.
        std::fs::create_dir(table_dir.join("_delta_log").join(format!("{:020}.json", far + 1)))
            .unwrap();
        assert_eq!(table::head_from(&table_dir, far), None);
        // No such table: no head, and none learnt.
        let missing = layout::executions_table();
        std::fs::remove_dir_all(table::table_dir(lake.root().local().unwrap(), &missing)).unwrap();
        assert_eq!(handles.head(lake.root(), &missing).await.unwrap(), None);
        assert!(!handles.heads.lock().unwrap().contains_key(&missing.name));
    }

    #[tokio::test]
    async fn a_lake_opened_keeps_the_handles_that_checked_its_schemas_and_follows_them() {
        let dir = tempfile::tempdir().unwrap();
        crate::Lake::init(dir.path()).await.unwrap();
        // The schemas are marked as checked: an open opens no table.
        let marked = crate::Lake::open(dir.path()).await.unwrap();
        for spec in marked.table_specs() {
            assert!(marked.handles().get(&spec.name).is_none(), "{} opened", spec.name);
        }
        // Without the mark, every table is checked, and its handle kept.
        std::fs::remove_file(dir.path().join(super::super::reconciled::MARK)).unwrap();
        let lake = crate::Lake::open(dir.path()).await.unwrap();
        for spec in lake.table_specs() {
            assert!(lake.handles().get(&spec.name).is_some(), "{} kept", spec.name);
        }
        // Another lake object commits after the opening: the kept handles
        // are brought up to date, not trusted as they were.
        let other = crate::Lake::open(dir.path()).await.unwrap();
        let a = crate::Draft::metric(serde_json::json!({"after": 1}))
            .unwrap()
            .finalize(other.registry())
            .unwrap();
        other.put(std::slice::from_ref(&a)).await.unwrap();
        assert_eq!(lake.get(a.id).await.unwrap().id, a.id);
    }

    #[tokio::test]
    async fn an_aged_handle_is_reopened_even_when_nothing_moved() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let spec = layout::index_table();
        let table_dir = table::table_dir(lake.root().local().unwrap(), &spec);
        let opened = table::open(lake.root(), &spec).await.unwrap();
        let must_not_open = async { Err(Error::Internal("reopened".into())) };
        // Young and unmoved: the same handle back, after one `stat`.
        let young = Leased { opened_at: version(&opened), table: opened.clone() };
        let back = Leased::latest(Some(young), Some(&table_dir), &spec.name, must_not_open).await;
        assert_eq!(version(&back.unwrap().table), version(&opened));
        // Moved REOPEN_AFTER + 1 versions past its opening (as by this
        // process's own commits), then nothing moved: reopened all the same.
        // (Commits of a commit-info action alone, as fast as files are made.)
        bare_commits(&table_dir, version(&opened) + 1..=version(&opened) + REOPEN_AFTER + 1);
        let mut moved = opened.clone();
        moved.update_incremental(None).await.unwrap();
        let aged = Leased { opened_at: version(&opened), table: moved };
        assert!(!aged.young());
        let fresh = Leased::latest(
            Some(aged),
            Some(&table_dir),
            &spec.name,
            table::open(lake.root(), &spec),
        )
        .await
        .unwrap();
        assert_eq!(fresh.opened_at, version(&fresh.table), "opened anew");
        assert_eq!(version(&fresh.table), version(&opened) + REOPEN_AFTER + 1);
    }

    #[tokio::test]
    async fn a_kept_handle_follows_other_writers_and_serves_old_versions_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = crate::Lake::init(dir.path()).await.unwrap();
        let spec = layout::index_table();
        let handles = Handles::default();
        let first = handles.latest(lake.root(), &spec).await.unwrap();
        let v0 = version(&first.table);
        handles.keep(&spec, first);
        // Another writer (a separate lake object) commits twice.
        let other = crate::Lake::open(dir.path()).await.unwrap();
        for i in 0..2 {
            let a = crate::Draft::metric(serde_json::json!({"other": i}))
                .unwrap()
                .finalize(other.registry())
                .unwrap();
            other.put(&[a]).await.unwrap();
        }
        let now = handles.latest(lake.root(), &spec).await.unwrap();
        assert_eq!(version(&now.table), v0 + 2, "brought up to date");
        handles.keep(&spec, now);
        let old = handles.at(lake.root(), &spec, v0).await.unwrap();
        assert_eq!(version(&old.table), v0, "an older version is opened fresh");
        handles.keep(&spec, old);
        let kept = handles.get(&spec.name).unwrap();
        assert_eq!(version(&kept.table), v0 + 2, "an older handle never replaces a newer one");
    }
}
