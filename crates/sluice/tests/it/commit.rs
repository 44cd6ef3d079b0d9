//! The committer: ordered, de-duplicated, idempotent, quarantining bad input.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{edit_unit, file_mut, lake};
use sluice::Lake;
use sluice::artifact::FieldValue;
use sluice::commit::REASON_FILE;
use sluice::lake::keys::sidecar::{self, Part};
use sluice::query::OutputFormat;
use sluice::query::format::render;
use sluice::staging::synthetic::{self, SyntheticSpec};
use sluice::staging::{self, StagingWriter, SyncPolicy};

pub fn writer(lake: &Lake) -> StagingWriter {
    StagingWriter::new(
        staging::default_root(lake.root().local().unwrap()),
        lake.registry().clone(),
        SyncPolicy::Never,
    )
}

pub async fn scalar(lake: &Lake, sql: &str) -> String {
    let result = lake.sql(sql).execute().await.unwrap();
    render(&result.batches, OutputFormat::Csv)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

/// Row count and distinct natural-key count of every committed table.
pub async fn table_counts(lake: &Lake) -> BTreeMap<String, (String, String)> {
    let keys = [
        ("metrics", "artifact_id"),
        ("index", "artifact_id"),
        ("executions", "execution_run_id"),
        ("execution_edges", "concat(execution_run_id, direction, role, artifact_id)"),
        (
            "artifact_edges",
            "concat(execution_run_id, source_artifact_id, target_artifact_id, source_role, target_role)",
        ),
    ];
    let mut out = BTreeMap::new();
    for (table, key) in keys {
        let rows = scalar(lake, &format!("SELECT count(*) FROM {table}")).await;
        let distinct = scalar(lake, &format!("SELECT count(DISTINCT {key}) FROM {table}")).await;
        out.insert(table.to_owned(), (rows, distinct));
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[tokio::test]
async fn commits_every_table_once_and_removes_staging() {
    let (_dir, lake) = lake().await;
    let spec =
        SyntheticSpec { duplicate_fraction: 0.3, fail_fraction: 0.1, ..SyntheticSpec::default() };
    let staged = synthetic::stage_range(&writer(&lake), &spec, lake.registry(), 0..40).unwrap();
    let backup = tempfile::tempdir().unwrap();
    copy_dir(&staging::default_root(lake.root().local().unwrap()), backup.path());

    let report = lake.commit().with_chunk_size(15).execute().await.unwrap();
    assert_eq!(report.runs_committed, 40, "{report:?}");
    assert_eq!(report.sequences.len(), 3, "{report:?}");
    assert!(report.quarantined.is_empty() && report.unsealed.is_empty(), "{report:?}");
    let counts = table_counts(&lake).await;
    for (table, (rows, distinct)) in &counts {
        assert_eq!(rows, distinct, "{table}: duplicate keys");
    }
    assert_eq!(counts["executions"].0, "40");
    assert_eq!(
        scalar(&lake, "SELECT count(*) FROM executions WHERE NOT success").await,
        staged.failed.to_string()
    );
    // Every staged edge is either added or a duplicate of one added (a run
    // may output the same pooled content twice).
    assert_eq!(
        (report.rows_added["execution_edges"] + report.rows_deduplicated["execution_edges"])
            as usize,
        staged.succeeded * spec.artifacts_per_execution
    );
    assert!(
        report.rows_deduplicated["metrics"] > 0,
        "pooled content was de-duplicated: {report:?}"
    );
    assert!(
        staging::scan(&staging::default_root(lake.root().local().unwrap()), None)
            .unwrap()
            .sealed
            .is_empty()
    );
    assert_eq!(scalar(&lake, "SELECT count(*) FROM commits WHERE phase = 'completed'").await, "3");

    // The same staging committed again adds zero rows to every table.
    copy_dir(backup.path(), &staging::default_root(lake.root().local().unwrap()));
    let again = lake.commit().execute().await.unwrap();
    assert_eq!(again.runs_committed, 40);
    assert!(again.rows_added.values().all(|n| *n == 0), "{again:?}");
    assert_eq!(table_counts(&lake).await, counts);
}

#[tokio::test]
async fn unsealed_dirs_are_reported_and_never_committed() {
    let (_dir, lake) = lake().await;
    let spec = SyntheticSpec { crash_fraction: 0.5, seed: 11, ..SyntheticSpec::default() };
    let staged = synthetic::stage_range(&writer(&lake), &spec, lake.registry(), 0..20).unwrap();
    assert!(staged.crashed > 0);
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.unsealed.len(), staged.crashed);
    assert_eq!(report.runs_committed, staged.succeeded);
    assert_eq!(
        scalar(&lake, "SELECT count(*) FROM executions").await,
        staged.succeeded.to_string()
    );
    for dir in &report.unsealed {
        let hidden = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        assert!(dir.is_file() && hidden, "a partial unit, left in place: {dir:?}");
    }
    // Committing again commits nothing more.
    let again = lake.commit().execute().await.unwrap();
    assert_eq!(again.runs_committed, 0);
    assert_eq!(again.unsealed.len(), staged.crashed);
}

#[tokio::test]
async fn bad_input_is_quarantined_with_a_reason_and_the_rest_commits() {
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec = SyntheticSpec { seed: 5, ..SyntheticSpec::default() };
    synthetic::stage_range(&w, &spec, lake.registry(), 0..8).unwrap();
    let root = staging::default_root(lake.root().local().unwrap());
    let runs = staging::scan(&root, None).unwrap().sealed;
    assert_eq!(runs.len(), 8);

    // 0: a truncated table file.
    edit_unit(&runs[0].path, |files| {
        let metrics = file_mut(files, "metrics.arrow");
        metrics.truncate(metrics.len() / 2);
    });
    // 1: wrong schema (an index file where the metrics file should be).
    edit_unit(&runs[1].path, |files| {
        let index = file_mut(files, "index.arrow").clone();
        *file_mut(files, "metrics.arrow") = index;
    });
    // 2: an artifact whose content was changed after its id was computed.
    let (mut tampered, _) =
        synthetic::execution(&SyntheticSpec { seed: 77, ..spec.clone() }, lake.registry(), 0)
            .unwrap();
    tampered.artifacts[0]
        .fields
        .insert("content".into(), FieldValue::String(r#"{"forged":1}"#.into()));
    let tampered_dir = w.write(&tampered).unwrap();
    std::fs::remove_file(&runs[2].path).unwrap();
    // 4: an unexpected file in the unit.
    edit_unit(&runs[4].path, |files| files.push(("notes.txt".into(), b"hi".to_vec())));
    // 5: an edge to an artifact nobody has.
    let (mut staged, _) =
        synthetic::execution(&SyntheticSpec { seed: 99, ..spec.clone() }, lake.registry(), 0)
            .unwrap();
    staged.execution_edges[0].artifact_id = "f".repeat(32);
    staged.artifacts.remove(0);
    staged.artifact_edges.clear();
    staged.execution_edges.truncate(1);
    let orphan = w.write(&staged).unwrap();
    // 6: an edge naming something that is not an artifact id (upper-case
    // hex: ids are lower-case, and the lake's joins compare their text).
    let (mut staged, _) =
        synthetic::execution(&SyntheticSpec { seed: 111, ..spec.clone() }, lake.registry(), 0)
            .unwrap();
    staged.execution_edges[0].artifact_id = "F".repeat(32);
    let not_an_id = w.write(&staged).unwrap();

    let report = lake.commit().execute().await.unwrap();
    let reasons: Vec<&str> = report.quarantined.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(report.quarantined.len(), 6, "{reasons:#?}");
    let has = |needle: &str| reasons.iter().any(|r| r.contains(needle));
    assert!(has("metrics.arrow: unreadable Arrow IPC"), "{reasons:#?}");
    assert!(has("unexpected column") || has("required column"), "{reasons:#?}");
    assert!(has("metrics.arrow: artifact_id") && has("does not match its content"), "{reasons:#?}");
    assert!(has("notes.txt: unexpected file"), "{reasons:#?}");
    assert!(has(&format!("edge to unknown artifact `{}`", "f".repeat(32))), "{reasons:#?}");
    let not_id = format!(
        "execution_edges.arrow: column `artifact_id` row 0: `{}` is not an artifact id",
        "F".repeat(32)
    );
    assert!(has(&not_id), "{reasons:#?}");
    for (path, reason) in &report.quarantined {
        let note = std::fs::read_to_string(path.join(REASON_FILE)).unwrap();
        assert_eq!(note.trim(), reason);
    }
    assert!(!orphan.exists() && !tampered_dir.exists() && !not_an_id.exists());
    assert_eq!(report.runs_committed, 4);
    assert_eq!(scalar(&lake, "SELECT count(*) FROM executions").await, "4");
}

/// The execution cache reads the executions table through its key filters
/// of `execution_spec_id` and result sets: it finds each spec's latest
/// successful run whether the version holding it has a filter and a sound
/// result set or not, and never a failed run.
#[tokio::test]
async fn the_execution_cache_finds_specs_through_key_filters_and_without_them() {
    use std::collections::{HashMap, HashSet};
    let (_dir, lake) = lake().await;
    let w = writer(&lake);
    let spec = SyntheticSpec { seed: 5, artifacts_per_execution: 1, ..SyntheticSpec::default() };
    // Three commits; spec `s-1` fails in the first and succeeds in the
    // third; `s-2` only fails; `s-3` succeeds once.
    let plan = [
        vec![("s-1", false, 10), ("s-2", false, 11)],
        vec![("s-3", true, 20), ("s-2", false, 21)],
        vec![("s-1", true, 30), ("s-4", false, 31)],
    ];
    let mut expected: HashMap<String, String> = HashMap::new();
    let mut index = 0;
    for commit in &plan {
        for (spec_id, success, end) in commit {
            let (mut staged, _) = synthetic::execution(&spec, lake.registry(), index).unwrap();
            index += 1;
            staged.execution.execution_spec_id = (*spec_id).to_owned();
            staged.execution.success = *success;
            staged.execution.timestamp_end = Some(*end);
            if *success {
                expected.insert((*spec_id).to_owned(), staged.execution.execution_run_id.clone());
            }
            w.write(&staged).unwrap();
        }
        lake.commit().execute().await.unwrap();
    }
    let table_dir = sluice::lake::delta::table::table_dir(
        lake.root().local().unwrap(),
        &sluice::lake::layout::executions_table(),
    );
    let keys = table_dir.join(sluice::lake::keys::key_filter::KEYS_DIR);
    let results = crate::common::bundles(&table_dir);
    for (version, _) in &results {
        for part in [Part::Filter(Some("execution_spec_id")), Part::Results] {
            assert!(sidecar::locate(&table_dir, *version, part).is_some(), "{part:?}");
        }
    }
    assert_eq!(results.len(), 3, "one spec-id key filter and result set per commit");
    let wanted: HashSet<String> =
        ["s-1", "s-2", "s-3", "s-4", "s-5"].iter().map(|s| (*s).to_owned()).collect();
    let found = sluice::pipeline::cache::successful_runs(&lake, &wanted).await.unwrap();
    assert_eq!(found, expected);
    // Each commit left a result set, which answered the check above; with
    // one damaged and one gone, their versions' files are read instead.
    // A sound set is believed without its files being read: one rewritten
    // for the second commit's files, naming another run for `s-3`, is what
    // the check answers.
    let version = results[1].0;
    let filter =
        |column| sluice::lake::keys::key_filter::read_one(&table_dir, version, column).unwrap();
    let (by_id, by_spec) = (filter(None), filter(Some("execution_spec_id")));
    let forged =
        sluice::lake::read::result_set::SpecResult { end: 20, run_id: "forged-run".into() };
    let key = sluice::lake::keys::key_filter::Key::of_value("s-3");
    let sets = std::collections::BTreeMap::from([(key, forged)]);
    sidecar::Bundle::new()
        .part(Part::Filter(None), by_id.encode())
        .part(Part::Filter(Some("execution_spec_id")), by_spec.encode())
        .part(Part::Results, sluice::lake::read::result_set::encode(&by_spec.files, &sets).unwrap())
        .write(&table_dir, version)
        .unwrap();
    let found = sluice::pipeline::cache::successful_runs(&lake, &wanted).await.unwrap();
    assert_eq!(found["s-3"], "forged-run");
    std::fs::remove_file(&results[1].1).unwrap();
    let found = sluice::pipeline::cache::successful_runs(&lake, &wanted).await.unwrap();
    assert_eq!(found, expected, "without the sidecar, its files are read");
    crate::common::damage_part(&table_dir, results[2].0, Part::Results, Some(3));
    std::fs::remove_file(&results[0].1).unwrap();
    let found = sluice::pipeline::cache::successful_runs(&lake, &wanted).await.unwrap();
    assert_eq!(found, expected);
    // Without any key filter every file is read, with the same answer.
    std::fs::remove_dir_all(&keys).unwrap();
    let lake = Lake::open(lake.root()).await.unwrap();
    let found = sluice::pipeline::cache::successful_runs(&lake, &wanted).await.unwrap();
    assert_eq!(found, expected);
}

/// A lake kept open keeps its parsed journal and table handles between
/// reads; a sequence committed through another handle is seen by its next
/// read, and an unchanged lake resolves to the same point.
#[tokio::test]
async fn a_long_lived_lake_sees_every_sequence_another_handle_commits() {
    let (_dir, reader) = lake().await;
    let committer = Lake::open(reader.root()).await.unwrap();
    let w = writer(&committer);
    let spec = SyntheticSpec { seed: 11, artifacts_per_execution: 1, ..SyntheticSpec::default() };
    let mut last = None;
    for round in 0..3u64 {
        let (staged, _) = synthetic::execution(&spec, committer.registry(), round).unwrap();
        let id = staged.artifacts[0].id;
        w.write(&staged).unwrap();
        committer.commit().execute().await.unwrap();
        let point = reader.snapshot().await.unwrap();
        assert!(point.sequence > last, "round {round}: {point:?} after {last:?}");
        assert_eq!(reader.snapshot().await.unwrap(), point, "nothing changed in between");
        last = point.sequence;
        assert!(reader.get(id).await.is_ok(), "round {round}: the new artifact is readable");
    }
}
