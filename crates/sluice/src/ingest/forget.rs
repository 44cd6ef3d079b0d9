//! Forgetting files whose rows were lost.
//!
//! A table's commits say which delivered files they hold ([`INGEST_KEY`]),
//! and that is what makes a redelivery a no-op. When a data file is lost (a
//! forced `vacuum --full` beside an ingestion, a disk fault), merely
//! dropping the reference — Delta's own file-system check — would leave the
//! file recorded as held while some or all of its rows are gone: dropping
//! it again would be skipped as a duplicate, and the rows would be gone for
//! good.
//!
//! So a repair *forgets* each file that lost rows: in one commit, exactly
//! the table's next version, it removes every data file holding rows of a
//! forgotten file (not only the lost one, so no file is left half there)
//! and names the files under [`FORGOTTEN_KEY`]; [`Committed`] and the
//! ledger then no longer hold them, and the same files dropped again land
//! whole.
//!
//! Which files' rows a data file holds is its *origin*, found by replaying
//! the commits the log still holds: the files a commit lists whose `paths`
//! name it, else every file the commit lists (a merge writes its own data
//! files), plus the origins of the files the same commit removed (a
//! compaction or merge carries the rows of what it rewrote). Removing a
//! data file for one forgotten file can remove rows of another (compaction
//! mixes them), so forgetting runs to a fixed point. A lost data file whose
//! commit the log no longer holds has no known origin: its reference is
//! dropped as Delta's check drops it, and the repair says so.
//!
//! [`INGEST_KEY`]: super::ledger::INGEST_KEY
//! [`Committed`]: super::ledger::Committed

use std::collections::{BTreeMap, BTreeSet};

use deltalake::DeltaTable;
use deltalake::kernel::{Action, Add};
use deltalake::protocol::DeltaOperation;
use serde::Serialize;

use super::ledger::{self, CommittedFile, FORGOTTEN, FORGOTTEN_KEY, INGEST_KEY, Ledger, LedgerRow};
use crate::error::{Error, Result};
use crate::lake::append::{self, CommitSpec};
use crate::lake::delta::table;
use crate::lake::io::location::LakeRoot;
use crate::lake::layout::TableSpec;

/// How often a repair recomputes and tries again when ingestion commits
/// first (ingestion takes no lock).
const ATTEMPTS: usize = 100;

/// What forgetting did to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Forgotten {
    /// The keys (`<table>/<name>`) of the files whose rows were removed.
    pub files: Vec<String>,
    /// The data files removed (the lost ones and those holding other rows
    /// of the same files).
    pub data_files: Vec<String>,
    /// The table version that removed them.
    pub version: u64,
}

/// Forget the files whose rows `lost` (data files storage lacks, as the
/// log spells them) held: remove all their rows and record them forgotten
/// in the table and in the ledger of `lake`. `None` when no lost file has
/// a known origin.
pub(crate) async fn forget_lost(
    lake: &LakeRoot,
    spec: &TableSpec,
    lost: &BTreeSet<String>,
) -> Result<Option<Forgotten>> {
    for _ in 0..ATTEMPTS {
        let mut handle = table::open(lake, spec).await?;
        let origins = Origins::replay(&handle, &spec.name).await?;
        let Some((files, removes)) = origins.to_forget(lost) else { return Ok(None) };
        let actions: Vec<Action> = removes.iter().map(|a| append::removal(a, true)).collect();
        let listed: Vec<CommittedFile> =
            files.iter().map(|f| CommittedFile { paths: Vec::new(), ..f.clone() }).collect();
        let commit = CommitSpec {
            metadata: vec![(
                FORGOTTEN_KEY.to_owned(),
                serde_json::to_value(&listed).map_err(|e| Error::json("ingest metadata", e))?,
            )],
            token: Some(crate::host::unique_id()),
            txn: None,
        };
        let operation = DeltaOperation::FileSystemCheck {};
        let Some(version) = append::try_commit_actions_next(
            &mut handle,
            &spec.name,
            actions,
            operation,
            &commit,
            &[],
        )
        .await?
        else {
            tracing::debug!(table = %spec.name, "an ingestion committed first; forgetting again");
            continue;
        };
        record(lake, spec, &files, lost, version).await?;
        tracing::warn!(table = %spec.name, files = files.len(), version, "forgot files whose rows were lost");
        return Ok(Some(Forgotten {
            files: files.into_iter().map(|f| f.key).collect(),
            data_files: removes.into_iter().map(|a| a.path).collect(),
            version,
        }));
    }
    Err(Error::Contention { table: spec.name.clone(), attempts: ATTEMPTS })
}

/// The ledger rows saying these files are forgotten.
async fn record(
    lake: &LakeRoot,
    spec: &TableSpec,
    files: &[CommittedFile],
    lost: &BTreeSet<String>,
    version: u64,
) -> Result<()> {
    let at = chrono::Utc::now().timestamp_micros();
    let why = format!(
        "data files lost ({}); its rows were removed so that dropping the file again ingests it",
        lost.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let rows: Vec<LedgerRow> = files
        .iter()
        .map(|f| LedgerRow {
            table: spec.name.clone(),
            file_key: f.key.clone(),
            content_hash: f.hash.clone(),
            rows: f.rows as i64,
            rejected: 0,
            status: FORGOTTEN.into(),
            attempts: 0,
            error: Some(why.clone()),
            table_version: Some(version),
            at,
        })
        .collect();
    Ledger::new(lake).append(&rows).await
}

/// The active data files of a table, as the log still holds their adds,
/// each with the delivered files whose rows it holds.
#[derive(Debug, Default)]
struct Origins {
    /// Delivered files, by `(key, hash)`.
    files: BTreeMap<(String, String), CommittedFile>,
    /// Active data file → its add and its origin.
    active: BTreeMap<String, (Add, BTreeSet<(String, String)>)>,
}

impl Origins {
    async fn replay(handle: &DeltaTable, name: &str) -> Result<Origins> {
        let mut out = Origins::default();
        let head = handle.version().unwrap_or_default();
        for version in 0..=head {
            // An entry log clean-up removed is absent: the files it added
            // have no known origin.
            let Some(actions) = table::retained_actions(handle, name, version).await? else {
                continue;
            };
            out.apply(&actions, name, version)?;
        }
        Ok(out)
    }

    /// Apply one commit's actions.
    fn apply(&mut self, actions: &[Action], name: &str, version: u64) -> Result<()> {
        let mut listed = Vec::new();
        for action in actions {
            if let Action::CommitInfo(info) = action {
                listed.extend(ledger::listed(info, INGEST_KEY, name, version)?);
            }
        }
        let mut rewritten = BTreeSet::new();
        for action in actions {
            if let Action::Remove(remove) = action
                && let Some((_, origin)) = self.active.remove(&remove.path)
            {
                rewritten.extend(origin);
            }
        }
        let id = |f: &CommittedFile| (f.key.clone(), f.hash.clone());
        for file in &listed {
            self.files.entry(id(file)).or_insert_with(|| file.clone());
        }
        for action in actions {
            let Action::Add(add) = action else { continue };
            let claimed: BTreeSet<_> =
                listed.iter().filter(|f| f.paths.contains(&add.path)).map(id).collect();
            let mut origin =
                if claimed.is_empty() { listed.iter().map(id).collect() } else { claimed };
            origin.extend(rewritten.iter().cloned());
            self.active.insert(add.path.clone(), (add.clone(), origin));
        }
        Ok(())
    }

    /// The files to forget for the `lost` data files and the adds of every
    /// active data file holding their rows; `None` when no lost file has a
    /// known origin.
    fn to_forget(&self, lost: &BTreeSet<String>) -> Option<(Vec<CommittedFile>, Vec<Add>)> {
        let mut forgotten: BTreeSet<(String, String)> = lost
            .iter()
            .filter_map(|p| self.active.get(p))
            .flat_map(|(_, origin)| origin.iter().cloned())
            .collect();
        if forgotten.is_empty() {
            return None;
        }
        loop {
            let holding = self.active.values().filter(|(_, o)| !o.is_disjoint(&forgotten));
            let more: BTreeSet<_> = holding
                .flat_map(|(_, o)| o.iter().cloned())
                .filter(|f| !forgotten.contains(f))
                .collect();
            if more.is_empty() {
                break;
            }
            forgotten.extend(more);
        }
        let removes = self
            .active
            .values()
            .filter(|(_, o)| !o.is_disjoint(&forgotten))
            .map(|(add, _)| add.clone())
            .collect();
        let files = forgotten.iter().filter_map(|f| self.files.get(f).cloned()).collect();
        Some((files, removes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::kernel::{CommitInfo, Remove};

    fn add(path: &str) -> Action {
        Action::Add(Add { path: path.into(), data_change: true, ..Add::default() })
    }

    fn remove(path: &str) -> Action {
        Action::Remove(Remove { path: path.into(), data_change: false, ..Remove::default() })
    }

    fn ingest(files: &[(&str, &[&str])]) -> Action {
        let listed: Vec<CommittedFile> = files
            .iter()
            .map(|(key, paths)| CommittedFile {
                key: (*key).into(),
                hash: format!("h-{key}"),
                rows: 1,
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            })
            .collect();
        let mut info = CommitInfo::default();
        info.info.insert(INGEST_KEY.into(), serde_json::to_value(listed).unwrap());
        Action::CommitInfo(info)
    }

    fn keys(forgotten: &(Vec<CommittedFile>, Vec<Add>)) -> (Vec<String>, Vec<String>) {
        let mut files: Vec<String> = forgotten.0.iter().map(|f| f.key.clone()).collect();
        let mut paths: Vec<String> = forgotten.1.iter().map(|a| a.path.clone()).collect();
        files.sort();
        paths.sort();
        (files, paths)
    }

    #[test]
    fn a_lost_data_file_forgets_its_file_and_removes_the_file_s_other_data_files() {
        let mut o = Origins::default();
        o.apply(
            &[ingest(&[("t/a", &["a1", "a2"]), ("t/b", &["b1"])]), add("a1"), add("a2"), add("b1")],
            "t",
            0,
        )
        .unwrap();
        let lost = BTreeSet::from(["a2".to_owned()]);
        let got = o.to_forget(&lost).unwrap();
        assert_eq!(keys(&got), (vec!["t/a".into()], vec!["a1".into(), "a2".into()]));
    }

    #[test]
    fn without_paths_every_file_of_the_commit_is_the_origin() {
        let mut o = Origins::default();
        o.apply(&[ingest(&[("t/a", &[]), ("t/b", &[])]), add("x1")], "t", 0).unwrap();
        o.apply(&[ingest(&[("t/c", &["c1"])]), add("c1")], "t", 1).unwrap();
        let got = o.to_forget(&BTreeSet::from(["x1".to_owned()])).unwrap();
        assert_eq!(keys(&got), (vec!["t/a".into(), "t/b".into()], vec!["x1".into()]));
    }

    #[test]
    fn a_compacted_file_carries_the_rows_of_what_it_rewrote_to_a_fixed_point() {
        let mut o = Origins::default();
        o.apply(&[ingest(&[("t/a", &["a1", "a2"])]), add("a1"), add("a2")], "t", 0).unwrap();
        o.apply(&[ingest(&[("t/b", &["b1"])]), add("b1")], "t", 1).unwrap();
        o.apply(&[ingest(&[("t/c", &["c1"])]), add("c1")], "t", 2).unwrap();
        // Compaction rewrote a1 and b1 (one partition) into z.
        o.apply(&[remove("a1"), remove("b1"), add("z")], "t", 3).unwrap();
        // Losing c1 touches c only.
        let got = o.to_forget(&BTreeSet::from(["c1".to_owned()])).unwrap();
        assert_eq!(keys(&got), (vec!["t/c".into()], vec!["c1".into()]));
        // Losing a2 forgets a, so z (holding a's and b's rows) goes, so b.
        let got = o.to_forget(&BTreeSet::from(["a2".to_owned()])).unwrap();
        assert_eq!(keys(&got), (vec!["t/a".into(), "t/b".into()], vec!["a2".into(), "z".into()]));
    }

    #[test]
    fn a_lost_file_of_unknown_origin_forgets_nothing() {
        let mut o = Origins::default();
        o.apply(&[add("old")], "t", 5).unwrap();
        assert!(o.to_forget(&BTreeSet::from(["old".to_owned()])).is_none());
        assert!(o.to_forget(&BTreeSet::from(["never-seen".to_owned()])).is_none());
    }
}
