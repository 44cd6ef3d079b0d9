//! What writers killed between two commits leave, finished by `recover`.
//!
//! Two writers make two commits where one would be whole, and a process
//! killed between them leaves the first without the second:
//!
//! - **A put** commits each content table, then the index (content first,
//!   so an index row never names missing content). Killed between the two,
//!   it leaves content rows no index row names: `show` and `get` do not find
//!   them, yet `SELECT … FROM metrics` does — half visible, although the
//!   put was never acknowledged. Every commit of a put carries the put's
//!   token under [`PUT_TOKEN_KEY`]; a content table holding a token the
//!   index lacks gets the index rows of its unindexed content, derived from
//!   the content (the repair `doctor --repair` makes, for that table only; a
//!   de-duplicated append, so a put still running beside it only finds its
//!   rows present).
//! - **A compaction** that met another rewrite of its files commits its
//!   OPTIMIZE and then undoes it (see [`race_undo`](super::race_undo)). Killed
//!   between the two, both copies of the rows stay. Each compaction commit
//!   records the version it read; one that landed past it is checked and
//!   undone as the compaction would have (an undo names what it undoes, so
//!   none is made twice).
//!
//! `recover` reads each table's commits made since it last looked. Where it
//! last looked is kept per table in `orchestration/_recover_checked.json`:
//! the index head read *before* the tables' heads, then each table's head.
//! A put whose content commit is newer than the recorded content head
//! committed it after the index head was read, so its index commit, if
//! any, is newer than the recorded index head: every scan starts where the
//! last one ended. The file only saves work; without it the retained log
//! is read from its start.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::race_undo::{Compaction, Undo};
use crate::error::{Error, Result};
use crate::lake::layout::{self, TableKind, TableSpec};
use crate::lake::{Lake, append, delta::table};
use crate::store::PUT_TOKEN_KEY;

/// What [`finish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finished {
    /// Index rows added for puts killed between their content and index
    /// commits, per content table.
    pub puts: BTreeMap<String, u64>,
    /// Compactions undone (table, version) that met another rewrite of
    /// their files and were killed before undoing themselves.
    pub compactions_undone: Vec<(String, u64)>,
    /// Such compactions that could not be undone: their output was
    /// rewritten again (table, version).
    pub compactions_stuck: Vec<(String, u64)>,
}

/// Where the scan of a table last ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Checked {
    /// The table's head.
    at: u64,
    /// The index head, read before it.
    index: u64,
}

/// What one table's commits since the last scan hold.
#[derive(Debug, Default)]
struct Scanned {
    put_tokens: BTreeSet<String>,
    compactions: Vec<Compaction>,
}

/// Finish what killed puts and compactions left (see the module docs).
pub(crate) async fn finish(lake: &Lake) -> Result<Finished> {
    finish_tables(lake, None).await
}

/// [`finish`] for one table (`Some(name)`) or every table: a compaction
/// settles the table it is about to rewrite first, so that it never
/// rewrites the output of a compaction killed before undoing its race —
/// which would leave that one impossible to undo.
pub(crate) async fn finish_tables(lake: &Lake, table: Option<&str>) -> Result<Finished> {
    // The record of where the last scan ended saves work on a filesystem;
    // a lake in a store scans its logs from the start.
    let file = lake.root().local().map(checked_file);
    let mut checked = file.as_deref().map(read_checked).unwrap_or_default();
    let index = layout::index_table();
    let mut done = Finished::default();
    let has_index = table::exists(lake.root(), &index).await?;
    // The index head first (see the module docs).
    let index_head = if has_index { table::latest_version(lake.root(), &index).await? } else { 0 };
    let mut index_tokens: Option<(u64, BTreeSet<String>)> = None;
    for spec in super::select_tables(lake, table).await? {
        let head = table::latest_version(lake.root(), &spec).await?;
        let since = checked.get(&spec.name).copied().filter(|c| c.at <= head);
        let handle = table::open_unloaded(lake.root(), &spec).await?;
        let scanned = scan(&handle, &spec, since.map(|c| c.at + 1), head).await?;
        for compaction in scanned.compactions {
            let version = compaction.version;
            match compaction.undo_if_raced(lake, &spec, &handle).await? {
                Undo::NotRaced | Undo::AlreadyUndone => {}
                Undo::Undone => done.compactions_undone.push((spec.name.clone(), version)),
                Undo::Rewritten => {
                    tracing::warn!(table = %spec.name, version, "{}", Undo::REWRITTEN);
                    done.compactions_stuck.push((spec.name.clone(), version));
                }
            }
        }
        if let (TableKind::Content(key), true) = (&spec.kind, has_index)
            && !scanned.put_tokens.is_empty()
        {
            let from = since.map_or(0, |c| c.index + 1);
            // One read of the index serves every table that starts at or
            // after where it started.
            let (at, indexed) = match index_tokens.take() {
                Some((at, indexed)) if at <= from => (at, indexed),
                _ => {
                    let now = table::latest_version(lake.root(), &index).await?;
                    let handle = table::open_unloaded(lake.root(), &index).await?;
                    (from, scan(&handle, &index, Some(from), now).await?.put_tokens)
                }
            };
            let unfinished = scanned.put_tokens.difference(&indexed).count();
            index_tokens = Some((at, indexed));
            if unfinished > 0 {
                tracing::info!(
                    table = %spec.name,
                    puts = unfinished,
                    "finishing puts killed between their content and index commits"
                );
                let rows = super::integrity::index_unindexed_content(lake, &spec, key).await?;
                if rows > 0 {
                    done.puts.insert(spec.name.clone(), rows);
                }
            }
        }
        checked.insert(spec.name.clone(), Checked { at: head, index: index_head });
    }
    if let Some(file) = &file {
        write_checked(file, &checked)?;
    }
    Ok(done)
}

/// The put tokens and compactions of a table's retained commits
/// `from..=head` (`None`: from the first retained one).
async fn scan(
    handle: &deltalake::DeltaTable,
    spec: &TableSpec,
    from: Option<u64>,
    head: u64,
) -> Result<Scanned> {
    let mut scanned = Scanned::default();
    for version in from.unwrap_or(0)..=head {
        // An entry log clean-up removed is behind a checkpoint, far older
        // than any writer still running: nothing to finish there.
        if let Some(actions) = table::retained_actions(handle, &spec.name, version).await? {
            scanned.put_tokens.extend(append::commit_text(&actions, PUT_TOKEN_KEY));
            scanned.compactions.extend(Compaction::of_commit(&actions, version));
        }
    }
    Ok(scanned)
}

fn checked_file(root: &Path) -> PathBuf {
    root.join("orchestration").join("_recover_checked.json")
}

/// The recorded scan ends; an unreadable record is read as none (it only
/// saves work).
fn read_checked(file: &Path) -> BTreeMap<String, Checked> {
    std::fs::read(file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn write_checked(file: &Path, checked: &BTreeMap<String, Checked>) -> Result<()> {
    // A lake that only ingests has no orchestration folder: the record
    // only saves work, so none is made for it.
    if !file.parent().is_some_and(Path::is_dir) {
        return Ok(());
    }
    let bytes = serde_json::to_vec_pretty(checked)
        .map_err(|e| Error::Internal(format!("encoding the recover scan record: {e}")))?;
    let temporary = file.with_extension(format!("json.{}.tmp", uuid::Uuid::new_v4().simple()));
    std::fs::write(&temporary, bytes).map_err(|e| Error::io(&temporary, e))?;
    std::fs::rename(&temporary, file).map_err(|e| Error::io(file, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::Artifact;

    fn draft(lake: &Lake, n: i64) -> Artifact {
        let draft = crate::Draft::metric(serde_json::json!({ "n": n })).unwrap();
        draft.finalize(lake.registry()).unwrap()
    }

    async fn metric(lake: &Lake, n: i64) -> Artifact {
        let a = draft(lake, n);
        lake.put(std::slice::from_ref(&a)).await.unwrap();
        a
    }

    #[tokio::test]
    async fn a_put_whose_index_commit_is_missing_is_finished_once() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        metric(&lake, 1).await;
        assert!(finish(&lake).await.unwrap().puts.is_empty(), "a whole put needs nothing");
        // A put killed after its content commit: the content table's commit
        // with a token the index never saw.
        let lost = draft(&lake, 2);
        let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
        let handle = table::open(lake.root(), &spec).await.unwrap();
        let schema = table::arrow_schema(&handle, &spec).unwrap();
        let rows = crate::store::content_rows(&spec.name, &schema, &[&lost]).unwrap();
        append::Append::new(lake.root(), &spec, vec![rows])
            .with_metadata(PUT_TOKEN_KEY, serde_json::json!("killed"))
            .execute()
            .await
            .unwrap();
        assert!(lake.get(lost.id).await.is_err(), "content without an index row is not found");
        let added = finish(&lake).await.unwrap().puts;
        assert_eq!(added.get("metrics"), Some(&1));
        assert!(lake.get(lost.id).await.is_ok(), "the put is whole");
        // Looked at once: nothing more to read, nothing more to add.
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
        metric(&lake, 3).await;
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
    }

    #[tokio::test]
    async fn without_its_record_the_scan_reads_the_log_again_and_adds_nothing_twice() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        metric(&lake, 1).await;
        finish(&lake).await.unwrap();
        std::fs::remove_file(checked_file(lake.root().local().unwrap())).unwrap();
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
        assert!(checked_file(lake.root().local().unwrap()).exists());
    }

    /// The data files a version added.
    async fn adds(
        handle: &deltalake::DeltaTable,
        name: &str,
        version: u64,
    ) -> Vec<deltalake::kernel::Add> {
        table::commit_actions(handle, name, version)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|a| if let deltalake::kernel::Action::Add(a) = a { Some(a) } else { None })
            .collect()
    }

    /// Rewrite `old` into one new file of `rows`, as exactly the next version.
    async fn rewrite(
        lake: &Lake,
        spec: &TableSpec,
        old: &[deltalake::kernel::Add],
        rows: deltalake::arrow::record_batch::RecordBatch,
        metadata: Vec<(String, serde_json::Value)>,
    ) -> u64 {
        let mut handle = table::open(lake.root(), spec).await.unwrap();
        let mut new = append::write_files(&handle, &spec.name, &[rows], table::writer_properties())
            .await
            .unwrap();
        for add in &mut new {
            add.data_change = false;
        }
        let mut actions: Vec<deltalake::kernel::Action> =
            old.iter().map(|a| append::removal(a, false)).collect();
        actions.extend(new.into_iter().map(deltalake::kernel::Action::Add));
        let commit = append::CommitSpec { metadata, ..Default::default() };
        let operation =
            deltalake::protocol::DeltaOperation::Optimize { predicate: None, target_size: 0 };
        append::try_commit_actions_next(&mut handle, &spec.name, actions, operation, &commit, &[])
            .await
            .unwrap()
            .expect("the next version")
    }

    async fn rows(lake: &Lake) -> String {
        let result = lake.sql("SELECT count(*) AS n FROM metrics").execute().await.unwrap();
        crate::query::format::render(&result.batches, crate::query::OutputFormat::Csv).unwrap()
    }

    /// A lake whose metrics table holds a compaction (its version
    /// returned, with the rows of its two files) that landed on another rewrite of its two files and was
    /// killed before undoing itself: both copies of the rows are live.
    async fn killed_race(
        lake: &Lake,
    ) -> (TableSpec, u64, deltalake::arrow::record_batch::RecordBatch) {
        let (a, b) = (metric(lake, 1).await, metric(lake, 2).await);
        let spec = TableSpec::content(lake.registry().descriptor("metric").unwrap());
        let handle = table::open(lake.root(), &spec).await.unwrap();
        let read = handle.version().unwrap();
        let mut files = adds(&handle, &spec.name, read - 1).await;
        files.extend(adds(&handle, &spec.name, read).await);
        assert_eq!(files.len(), 2);
        let schema = table::arrow_schema(&handle, &spec).unwrap();
        let both = crate::store::content_rows(&spec.name, &schema, &[&a, &b]).unwrap();
        // Another rewrite of the same files lands first (a second host's
        // compaction), then ours on top of it.
        rewrite(lake, &spec, &files, both.clone(), Vec::new()).await;
        let ours = vec![
            (append::TOKEN_KEY.to_owned(), serde_json::json!("ours")),
            (super::super::race_undo::READ_KEY.to_owned(), serde_json::json!(read)),
        ];
        let version = rewrite(lake, &spec, &files, both.clone(), ours).await;
        assert_eq!(rows(lake).await, "n\n4\n", "the race left both copies");
        (spec, version, both)
    }

    #[tokio::test]
    async fn a_compaction_killed_before_undoing_its_race_is_undone_once() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        let (_, version, _) = killed_race(&lake).await;
        let done = finish(&lake).await.unwrap();
        assert_eq!(done.compactions_undone, vec![("metrics".to_owned(), version)]);
        assert_eq!(rows(&lake).await, "n\n2\n");
        // Undone once: a second look (with its record gone) finds the undo.
        std::fs::remove_file(checked_file(lake.root().local().unwrap())).unwrap();
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
        assert_eq!(rows(&lake).await, "n\n2\n");
    }

    #[tokio::test]
    async fn a_killed_compaction_whose_output_another_compaction_rewrote_is_still_undone() {
        // Without a lock, a second compaction can settle the table just
        // before the killed one commits, then read and rewrite its output.
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        let (spec, killed, _) = killed_race_compacted_over(&lake).await;
        assert_eq!(rows(&lake).await, "n\n4\n");
        let done = finish(&lake).await.unwrap();
        assert_eq!(done.compactions_stuck, Vec::new());
        assert_eq!(done.compactions_undone, vec![("metrics".to_owned(), killed)]);
        assert_eq!(rows(&lake).await, "n\n2\n");
        // Both undone, each once: a second look finds both undos.
        std::fs::remove_file(checked_file(lake.root().local().unwrap())).unwrap();
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
        let handle = table::open(lake.root(), &spec).await.unwrap();
        let head = handle.version().unwrap();
        let mut undoes = Vec::new();
        for version in killed + 1..=head {
            let actions = table::commit_actions(&handle, &spec.name, version).await.unwrap();
            undoes.extend(append::commit_text(&actions, super::super::race_undo::UNDOES_KEY));
        }
        assert_eq!(undoes, vec!["later".to_owned(), "ours".to_owned()]);
        assert_eq!(rows(&lake).await, "n\n2\n");
    }

    /// [`killed_race`], then a later compaction that rewrote the killed
    /// one's output before anything settled the table: the killed one's
    /// version and output are returned.
    async fn killed_race_compacted_over(
        lake: &Lake,
    ) -> (TableSpec, u64, Vec<deltalake::kernel::Add>) {
        let (spec, killed, rows_of_both) = killed_race(lake).await;
        let handle = table::open(lake.root(), &spec).await.unwrap();
        let output = adds(&handle, &spec.name, killed).await;
        let later = vec![
            (append::TOKEN_KEY.to_owned(), serde_json::json!("later")),
            (super::super::race_undo::READ_KEY.to_owned(), serde_json::json!(killed)),
        ];
        rewrite(lake, &spec, &output, rows_of_both, later).await;
        (spec, killed, output)
    }

    #[tokio::test]
    async fn vacuum_settles_a_table_before_deleting_what_its_undo_brings_back() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        let (spec, _, _) = killed_race_compacted_over(&lake).await;
        let options = super::super::vacuum::VacuumOptions {
            table: Some(spec.name.clone()),
            retention: std::time::Duration::ZERO,
            force: true,
            ..Default::default()
        };
        super::super::vacuum::vacuum(&lake, &options).await.unwrap();
        assert_eq!(rows(&lake).await, "n\n2\n");
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
    }

    #[tokio::test]
    async fn an_undo_whose_files_are_gone_from_storage_is_reported_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        let (spec, _, output) = killed_race_compacted_over(&lake).await;
        // Deleted by a vacuum that did not settle first (another version of
        // sluice): the later compaction's undo cannot bring them back.
        let table_dir = table::table_dir(lake.root().local().unwrap(), &spec);
        for add in &output {
            std::fs::remove_file(table_dir.join(&add.path)).unwrap();
        }
        let head = table::latest_version(lake.root(), &spec).await.unwrap();
        let done = finish(&lake).await.unwrap();
        assert_eq!(done.compactions_stuck.len(), 1, "{done:?}");
        assert!(done.compactions_undone.is_empty());
        assert_eq!(table::latest_version(lake.root(), &spec).await.unwrap(), head);
        assert_eq!(rows(&lake).await, "n\n4\n", "readable, nothing lost");
    }

    #[tokio::test]
    async fn the_next_compaction_undoes_a_killed_one_before_rewriting_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, _) = Lake::init(dir.path()).await.unwrap();
        let (spec, _, _) = killed_race(&lake).await;
        // No `recover` in between: a compaction of the table comes next.
        // Compacting both copies into one file would make the killed one
        // impossible to undo; it settles the table first.
        let options = super::super::compact::CompactOptions {
            table: Some(spec.name.clone()),
            ..Default::default()
        };
        super::super::compact::compact(&lake, &options).await.unwrap();
        assert_eq!(rows(&lake).await, "n\n2\n");
        assert_eq!(finish(&lake).await.unwrap(), Finished::default());
    }
}
