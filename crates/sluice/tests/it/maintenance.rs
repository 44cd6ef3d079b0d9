//! Compaction, vacuum, checkpoints and history on real lakes.

use std::time::Duration;

use sluice::maintenance::{self, CompactOptions, VacuumOptions};
use sluice::query::AsOf;
use sluice::staging::synthetic::{self, SyntheticSpec};

use crate::commit::{scalar, writer};
use crate::common::{bundles, damage_part, lake, metrics};
use sluice::lake::keys::sidecar::{self, Part};

async fn digest(lake: &sluice::Lake, table: &str, key: &str) -> String {
    scalar(lake, &format!("SELECT count(*) || ':' || sum(length({key})) || ':' || min({key}) || ':' || max({key}) FROM {table}")).await
}

async fn many_small_commits(lake: &sluice::Lake) {
    small_commits(lake, 0..8).await;
}

async fn small_commits(lake: &sluice::Lake, seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let spec = SyntheticSpec {
            seed,
            duplicate_fraction: 0.2,
            step: 1 + (seed % 2) as i32,
            ..SyntheticSpec::default()
        };
        synthetic::stage_range(&writer(lake), &spec, lake.registry(), 0..15).unwrap();
        lake.commit().execute().await.unwrap();
    }
}

/// Every spec id of the executions table.
async fn spec_ids(lake: &sluice::Lake) -> std::collections::HashSet<String> {
    scalar(lake, "SELECT string_agg(execution_spec_id, ',') FROM executions")
        .await
        .trim_matches('"')
        .split(',')
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn compaction_keeps_every_row_and_dedup_stays_exact() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let tables = [
        ("metrics", "artifact_id"),
        ("index", "artifact_id"),
        ("executions", "execution_run_id"),
        ("execution_edges", "artifact_id"),
    ];
    let mut before = Vec::new();
    for (t, k) in tables {
        before.push(digest(&lake, t, k).await);
    }
    let pruned = scalar(&lake, "SELECT count(*) FROM metrics WHERE origin_step_number = 2").await;
    let specs = spec_ids(&lake).await;
    let cached = sluice::pipeline::cache::successful_runs(&lake, &specs).await.unwrap();
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = told.clone();
    let progress = sluice::progress::Progress::new(move |done, total, table| {
        sink.lock().unwrap().push((done, total, table.to_owned()));
    });
    let reports =
        maintenance::compact::compact(&lake, &CompactOptions { progress, ..Default::default() })
            .await
            .unwrap();
    // Progress names each table before it is compacted, then the end.
    let n = reports.len();
    let mut expected: Vec<(usize, usize, String)> =
        reports.iter().enumerate().map(|(i, r)| (i, n, r.table.clone())).collect();
    expected.push((n, n, String::new()));
    assert_eq!(*told.lock().unwrap(), expected);
    let metrics_report = reports.iter().find(|r| r.table == "metrics").unwrap();
    assert!(metrics_report.files_after < metrics_report.files_before, "{metrics_report:?}");
    assert_eq!(metrics_report.zorder, vec!["artifact_id".to_owned()]);
    for (i, (t, k)) in tables.iter().enumerate() {
        assert_eq!(digest(&lake, t, k).await, before[i], "{t} rows changed");
    }
    assert_eq!(
        scalar(&lake, "SELECT count(*) FROM metrics WHERE origin_step_number = 2").await,
        pruned
    );

    // The compacted files have key filters: committing the same content again
    // adds nothing, new content is added once.
    let again =
        SyntheticSpec { seed: 3, duplicate_fraction: 0.2, step: 2, ..SyntheticSpec::default() };
    synthetic::stage_range(&writer(&lake), &again, lake.registry(), 100..120).unwrap();
    let report = lake.commit().execute().await.unwrap();
    assert_eq!(report.runs_committed, 20);
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
    let version = metrics_report.version.unwrap();
    let metrics_dir = lake.root().local().unwrap().join("artifacts/metrics");
    assert!(
        sidecar::locate(&metrics_dir, version, Part::Filter(None)).is_some(),
        "compaction wrote the key filter of its files"
    );
    // The eight commits' sidecars cover nothing live: retired, out of the
    // listing every fresh writer reads; only the compaction's and the new
    // commit's are left.
    assert_eq!(metrics_report.sidecars_retired, 8, "{metrics_report:?}");
    let listed: Vec<u64> = bundles(&metrics_dir).iter().map(|(v, _)| *v).collect();
    assert_eq!(listed, vec![version, version + 1], "{listed:?}");
    let retired =
        metrics_dir.join("_sluice_keys").join(sluice::lake::keys::key_filter::RETIRED_DIR);
    assert_eq!(std::fs::read_dir(retired).unwrap().count(), 8);
    assert!(sidecar::locate(&metrics_dir, version, Part::KeySet).is_some(), "and the key set");
    // The compacted executions have a result set; the cache answers as before.
    let executions = reports.iter().find(|r| r.table == "executions").unwrap();
    let version = executions.version.unwrap();
    let executions_dir = sluice::lake::delta::table::table_dir(
        lake.root().local().unwrap(),
        &sluice::lake::layout::executions_table(),
    );
    assert!(sidecar::locate(&executions_dir, version, Part::Results).is_some(), "{executions:?}");
    assert_eq!(sluice::pipeline::cache::successful_runs(&lake, &specs).await.unwrap(), cached);
    // Lookups by id through the compacted files.
    let any = metrics(&lake, 1, 1);
    lake.put(&any).await.unwrap();
    assert_eq!(lake.get(any[0].id).await.unwrap().id, any[0].id);
}

#[tokio::test]
async fn vacuum_dry_run_lists_what_it_removes_and_keeps_time_travel_in_retention() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let v1 = maintenance::history::lake_history(&lake, None).await.unwrap();
    assert_eq!(v1.len(), 8);
    let first = v1.last().unwrap().version;
    let count_then = |lake: &sluice::Lake| {
        let lake = lake.clone();
        async move {
            let r = lake
                // count(DISTINCT ..) must read the files; count(*) is answered from statistics.
                .sql("SELECT count(DISTINCT artifact_id) AS n FROM metrics")
                .with_as_of(Some(AsOf::Lake(first)))
                .execute()
                .await;
            r.map(|r| r.num_rows())
        }
    };
    maintenance::compact::compact(
        &lake,
        &CompactOptions { table: Some("metrics".into()), ..CompactOptions::default() },
    )
    .await
    .unwrap();
    // Within the retention nothing goes and old versions still read.
    let kept = maintenance::vacuum::vacuum(&lake, &VacuumOptions::default()).await.unwrap();
    assert!(kept.files.iter().all(|(_, f)| f.is_empty()), "{kept:?}");
    assert!(count_then(&lake).await.is_ok());
    // A short retention needs --force, and says why.
    let short = VacuumOptions { retention: Duration::ZERO, ..VacuumOptions::default() };
    let err = maintenance::vacuum::vacuum(&lake, &short).await.unwrap_err().to_string();
    assert!(err.contains("--force") && err.contains("time travel"), "{err}");
    let forced = VacuumOptions { force: true, ..short };
    let dry =
        maintenance::vacuum::vacuum(&lake, &VacuumOptions { dry_run: true, ..forced.clone() })
            .await
            .unwrap();
    let real = maintenance::vacuum::vacuum(&lake, &forced).await.unwrap();
    assert_eq!(dry.files, real.files, "the dry run lists exactly what is removed");
    assert!(real.bytes > 0 && dry.bytes == real.bytes, "{dry:?} {real:?}");
    assert!(real.files.iter().any(|(t, f)| t == "metrics" && !f.is_empty()), "{real:?}");
    // Sidecars go with the files their filters name: those of
    // compacted-away files are removed, the compaction's stays.
    let metrics_dir = lake.root().local().unwrap().join("artifacts/metrics");
    let left = bundles(&metrics_dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(sidecar::locate(&metrics_dir, left[0].0, Part::KeySet).is_some());
    assert!(
        real.leftovers.iter().any(|l| l.starts_with("artifacts/metrics/") && l.ends_with(".side")),
        "{real:?}"
    );
    // The executions were not compacted: their sidecars (and result sets),
    // whose files are live, all stay.
    let executions = sluice::lake::delta::table::table_dir(
        lake.root().local().unwrap(),
        &sluice::lake::layout::executions_table(),
    );
    let results = bundles(&executions)
        .iter()
        .filter(|(v, _)| sidecar::locate(&executions, *v, Part::Results).is_some())
        .count();
    assert_eq!(results, 8, "{real:?}");
    assert!(!real.leftovers.iter().any(|l| l.starts_with("orchestration/executions/")), "{real:?}");
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
    assert!(count_then(&lake).await.is_err(), "versions before the compaction lost their files");
}

#[tokio::test]
async fn checkpoints_and_table_history() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let reports =
        maintenance::checkpoint(&lake, Some("metrics"), &Default::default()).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert!(
        lake.root().local().unwrap().join("artifacts/metrics/_delta_log/_last_checkpoint").exists()
    );
    let history = maintenance::history::table_history(&lake, "metrics", Some(3)).await.unwrap();
    assert_eq!(history.len(), 3);
    assert!(history[0].version > history[2].version);
    assert_eq!(
        history[0].sequence,
        Some(8),
        "the last write of metrics was sequence 8: {history:?}"
    );
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
}

/// A digest of every row of every table a restore touches, read at a point.
async fn lake_digest(lake: &sluice::Lake, as_of: Option<AsOf>) -> Vec<String> {
    let mut out = Vec::new();
    for (table, key) in [
        ("metrics", "artifact_id"),
        ("index", "artifact_id"),
        ("executions", "execution_run_id"),
        ("execution_edges", "artifact_id"),
        ("artifact_edges", "source_artifact_id"),
    ] {
        let sql = format!(
            "SELECT count(*) || ':' || coalesce(sum(length({key})), 0) || ':' || coalesce(min({key}), '') || ':' || coalesce(max({key}), '') FROM {table}"
        );
        let result = lake.sql(&sql).with_as_of(as_of.clone()).execute().await.unwrap();
        out.push(format!(
            "{table}={}",
            sluice::query::format::render(&result.batches, sluice::query::OutputFormat::Csv)
                .unwrap()
        ));
    }
    out
}

/// A time copied from `sluice history` reads the lake version it was
/// copied from, not the one before: the row's time is taken before the
/// journal commit that holds it, and `history` prints it in milliseconds.
#[tokio::test]
async fn as_of_the_time_history_prints_reads_that_lake_version() {
    let (_dir, lake) = lake().await;
    small_commits(&lake, 0..4).await;
    let history = maintenance::history::lake_history(&lake, None).await.unwrap();
    assert_eq!(history.len(), 4);
    for version in &history {
        let at = chrono::DateTime::parse_from_rfc3339(&version.time).unwrap().to_utc();
        assert_eq!(
            lake_digest(&lake, Some(AsOf::Time(at))).await,
            lake_digest(&lake, Some(AsOf::Lake(version.version))).await,
            "as of {} (lake version {})",
            version.time,
            version.version
        );
    }
}

#[tokio::test]
async fn restore_to_a_lake_version_equals_reading_as_of_it_and_can_be_undone() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let latest = lake_digest(&lake, None).await;
    let history = maintenance::history::lake_history(&lake, None).await.unwrap();
    let head = history[0].version;
    let k = history[4].version;
    let then = lake_digest(&lake, Some(AsOf::Lake(k))).await;
    assert_ne!(then, latest);

    let options = maintenance::RestoreOptions {
        to: sluice::lake::journal::snapshot::LakePoint::Sequence(k),
        ..Default::default()
    };
    let dry = maintenance::restore::restore(
        &lake,
        &maintenance::RestoreOptions { dry_run: true, ..options.clone() },
    )
    .await
    .unwrap();
    assert!(dry.outcome.is_none());
    assert!(dry.plan.tables.iter().any(|t| t.table == "metrics"), "{dry:?}");
    assert_eq!(lake_digest(&lake, None).await, latest, "a dry run changes nothing");

    let done = maintenance::restore::restore(&lake, &options).await.unwrap();
    let outcome = done.outcome.expect("restored");
    assert_eq!(outcome.seq, head + 1, "a restore is a lake version of its own");
    assert_eq!(lake_digest(&lake, None).await, then, "restored = as of {k}");
    let history = maintenance::history::lake_history(&lake, Some(1)).await.unwrap();
    assert_eq!(history[0].note.as_deref(), Some(format!("restore to lake version {k}").as_str()));

    // The restored lake takes new commits, de-duplicated against what it
    // holds now (content dropped by the restore is added again).
    let spec =
        SyntheticSpec { seed: 7, duplicate_fraction: 0.2, step: 2, ..SyntheticSpec::default() };
    synthetic::stage_range(&writer(&lake), &spec, lake.registry(), 0..15).unwrap();
    lake.commit().execute().await.unwrap();
    assert_eq!(
        scalar(&lake, "SELECT count(*) - count(DISTINCT artifact_id) FROM metrics").await,
        "0"
    );
    // Undo: back to the lake version before the restore.
    let undo = maintenance::RestoreOptions {
        to: sluice::lake::journal::snapshot::LakePoint::Sequence(head),
        ..Default::default()
    };
    maintenance::restore::restore(&lake, &undo).await.unwrap();
    assert_eq!(lake_digest(&lake, None).await, latest);
}

#[tokio::test]
async fn an_interrupted_restore_pins_readers_and_recover_finishes_it() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let latest = lake_digest(&lake, None).await;
    let history = maintenance::history::lake_history(&lake, None).await.unwrap();
    let k = history[5].version;
    let then = lake_digest(&lake, Some(AsOf::Lake(k))).await;
    let options = maintenance::RestoreOptions {
        to: sluice::lake::journal::snapshot::LakePoint::Sequence(k),
        ..Default::default()
    };
    // Fail after the content tables, before `executions`.
    let failing = maintenance::RestoreOptions {
        hooks: sluice::lake::journal::restore::RestoreHooks {
            failpoint: Some("restore:executions".into()),
            pause: None,
        },
        ..options.clone()
    };
    let err = maintenance::restore::restore(&lake, &failing).await.unwrap_err();
    assert!(err.to_string().contains("executions"), "{err}");
    // Readers still see the lake as it was before the restore began.
    assert_eq!(lake_digest(&lake, None).await, latest);
    // Another restore or a commit must not start on top of half a restore.
    let again = maintenance::restore::restore(&lake, &options).await.unwrap_err().to_string();
    assert!(again.contains("recover"), "{again}");
    // Its restorer is this (live) process: recover refuses to take it over...
    let busy = lake.recover().execute().await.unwrap_err().to_string();
    assert!(busy.contains("in progress"), "{busy}");
    // ...until it is older than the stale age.
    let report = lake.recover().with_stale_after(Duration::ZERO).execute().await.unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    assert_eq!(lake_digest(&lake, None).await, then);
    // Finishing twice restores nothing twice.
    let versions = lake.snapshot().await.unwrap().versions;
    lake.recover().with_stale_after(Duration::ZERO).execute().await.unwrap();
    assert_eq!(lake.snapshot().await.unwrap().versions, versions);
}

#[tokio::test]
async fn the_change_feed_lists_rows_added_since_a_lake_version() {
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let history = maintenance::history::lake_history(&lake, None).await.unwrap();
    let k = history[3].version;
    let added: u64 =
        history[..3].iter().map(|v| v.rows_added.get("metrics").copied().unwrap_or(0)).sum();
    let changes = sluice::query::changes(&lake, "metrics", &AsOf::Lake(k)).await.unwrap();
    assert_eq!(changes.num_rows() as u64, added);
    let kinds =
        sluice::query::format::render(&changes.batches, sluice::query::OutputFormat::Csv).unwrap();
    assert!(kinds.contains("insert") && !kinds.contains("delete"));
    // Compaction changes no data: the feed after it is empty.
    let head = history[0].version;
    maintenance::compact::compact(&lake, &CompactOptions::default()).await.unwrap();
    let none = sluice::query::changes(&lake, "metrics", &AsOf::Lake(head)).await.unwrap();
    assert_eq!(none.num_rows(), 0);
    // A restore shows up as the deletes and inserts of the files it swaps.
    let options = maintenance::RestoreOptions {
        to: sluice::lake::journal::snapshot::LakePoint::Sequence(k),
        ..Default::default()
    };
    maintenance::restore::restore(&lake, &options).await.unwrap();
    let undone = sluice::query::changes(&lake, "metrics", &AsOf::Lake(head)).await.unwrap();
    let text =
        sluice::query::format::render(&undone.batches, sluice::query::OutputFormat::Csv).unwrap();
    let (deletes, inserts) =
        (text.matches(",delete,").count() as u64, text.matches(",insert,").count() as u64);
    // The restore removes the compacted files (every row, as deletes) and
    // brings back the files of lake version k (as inserts): net, the rows
    // added after k are gone.
    assert!(deletes > 0 && inserts > 0, "{text}");
    assert_eq!(deletes - inserts, added, "{text}");
}

#[tokio::test]
async fn doctor_checks_find_each_fault_and_repair_only_what_is_safe() {
    use sluice::lake::{delta::table, layout};
    use sluice::maintenance::integrity;
    let (_dir, lake) = lake().await;
    many_small_commits(&lake).await;
    let clean = integrity::check(&lake).await.unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert!(clean.versions_without_key_sets.is_empty(), "{clean:?}");

    // Key sets lost (or a lake written before them): reported, not unclean,
    // and written again from the files by --repair.
    let index_dir = table::table_dir(lake.root().local().unwrap(), &layout::index_table());
    let sets: Vec<_> = bundles(&index_dir)
        .into_iter()
        .map(|(v, _)| {
            damage_part(&index_dir, v, Part::KeySet, None);
            index_dir.join(format!("_sluice_keys/{v:020}.set"))
        })
        .collect();
    assert!(!sets.is_empty());
    let unset = integrity::check(&lake).await.unwrap();
    assert!(unset.is_clean(), "{unset:?}");
    assert_eq!(unset.versions_without_key_sets["index"].len(), sets.len(), "{unset:?}");
    let repaired = integrity::repair(&lake).await.unwrap();
    assert_eq!(repaired.key_sets_written["index"].len(), sets.len(), "{repaired:?}");
    assert!(sets.iter().all(|s| s.exists()));
    assert!(integrity::check(&lake).await.unwrap().versions_without_key_sets.is_empty());
    // The written sets answer: every indexed id is confirmed present.
    let ids: std::collections::BTreeSet<String> =
        scalar(&lake, "SELECT string_agg(artifact_id, ',') FROM \"index\"")
            .await
            .trim_matches('"')
            .split(',')
            .map(str::to_owned)
            .collect();
    let index = table::open(lake.root(), &layout::index_table()).await.unwrap();
    let present = sluice::lake::append::present_keys(
        lake.root(),
        &index,
        &layout::index_table(),
        sluice::lake::append::Dedup::ArtifactId,
        &ids,
    )
    .await
    .unwrap();
    assert_eq!(present, ids);

    // Result sets of the executions table lost: reported with the key sets,
    // written again by --repair, and the execution cache answers the same.
    let specs = spec_ids(&lake).await;
    let cached = sluice::pipeline::cache::successful_runs(&lake, &specs).await.unwrap();
    assert!(!cached.is_empty());
    let executions_dir =
        table::table_dir(lake.root().local().unwrap(), &layout::executions_table());
    let results: Vec<_> = bundles(&executions_dir)
        .into_iter()
        .map(|(v, _)| {
            damage_part(&executions_dir, v, Part::Results, None);
            executions_dir.join(format!("_sluice_keys/{v:020}.results"))
        })
        .collect();
    assert_eq!(results.len(), 8, "one per commit");
    let unset = integrity::check(&lake).await.unwrap();
    assert_eq!(unset.versions_without_key_sets["executions"].len(), 8, "{unset:?}");
    let repaired = integrity::repair(&lake).await.unwrap();
    assert_eq!(repaired.key_sets_written["executions"].len(), 8, "{repaired:?}");
    assert!(results.iter().all(|s| s.exists()));
    assert_eq!(sluice::pipeline::cache::successful_runs(&lake, &specs).await.unwrap(), cached);

    // An index row deleted by hand: its content has no index row, and the
    // edges naming it dangle.
    let victim = scalar(
        &lake,
        "SELECT min(m.artifact_id) FROM metrics m JOIN execution_edges e ON e.artifact_id = m.artifact_id",
    )
    .await;
    let index = table::open(lake.root(), &layout::index_table()).await.unwrap();
    index.delete().with_predicate(format!("artifact_id = '{victim}'")).await.unwrap();
    // A stray file a crashed writer left in a table folder.
    let executions = table::table_dir(lake.root().local().unwrap(), &layout::executions_table());
    let handle = table::open(lake.root(), &layout::executions_table()).await.unwrap();
    let any = table::active_files(&handle, &layout::executions_table()).unwrap()[0].clone();
    let stray = std::path::Path::new(&any).with_file_name("part-stray.parquet");
    let stray = stray.to_string_lossy().into_owned();
    std::fs::copy(executions.join(&any), executions.join(&stray)).unwrap();

    let found = integrity::check(&lake).await.unwrap();
    assert_eq!(found.content_without_index["metrics"], 1, "{found:?}");
    assert!(found.dangling_execution_edges >= 1, "{found:?}");
    assert_eq!(found.unreferenced_files["executions"], vec![stray.clone()]);
    assert!(
        lake.get(victim.parse().unwrap()).await.is_err(),
        "unreadable by id without its index row"
    );

    let repaired = integrity::repair(&lake).await.unwrap();
    assert_eq!(repaired.index_rows_added["metrics"], 1);
    let after = integrity::check(&lake).await.unwrap();
    assert_eq!(after.content_without_index["metrics"], 0);
    assert_eq!(after.dangling_execution_edges, 0);
    assert_eq!(lake.get(victim.parse().unwrap()).await.unwrap().id.to_hex(), victim);
    assert!(executions.join(&stray).exists(), "repair deletes no file");

    // A data file lost from storage: reported, and --repair drops the
    // reference so the rest of the table reads again.
    let metrics_dir =
        table::table_dir(lake.root().local().unwrap(), &lake.table_spec("metrics").await.unwrap());
    let handle =
        table::open(lake.root(), &lake.table_spec("metrics").await.unwrap()).await.unwrap();
    let lost = table::active_files(&handle, &lake.table_spec("metrics").await.unwrap()).unwrap()[0]
        .clone();
    std::fs::remove_file(metrics_dir.join(&lost)).unwrap();
    let found = integrity::check(&lake).await.unwrap();
    assert_eq!(found.missing_files["metrics"], vec![lost.clone()]);
    let repaired = integrity::repair(&lake).await.unwrap();
    assert_eq!(repaired.references_dropped["metrics"], vec![lost]);
    let after = integrity::check(&lake).await.unwrap();
    assert!(after.missing_files.is_empty(), "{after:?}");
    scalar(&lake, "SELECT count(*) FROM metrics").await;
}

#[tokio::test]
async fn the_journal_is_compacted_as_it_grows_and_still_tells_time() {
    use sluice::lake::{delta::table, layout};
    let (_dir, lake) = lake().await;
    for seed in 0..36 {
        let spec = SyntheticSpec { seed, ..SyntheticSpec::default() };
        synthetic::stage_range(&writer(&lake), &spec, lake.registry(), 0..1).unwrap();
        lake.commit().execute().await.unwrap();
    }
    let journal = table::open(lake.root(), &layout::commits_table()).await.unwrap();
    let files = table::active_files(&journal, &layout::commits_table()).unwrap().len();
    assert!(files <= sluice::lake::journal::MAX_JOURNAL_FILES, "72 journal rows in {files} files");
    let history = maintenance::history::lake_history(&lake, None).await.unwrap();
    assert_eq!(history.len(), 36);
    let third = history[history.len() - 3].version;
    let then = scalar_as_of(&lake, "SELECT count(*) FROM executions", third).await;
    assert_eq!(then, "3", "lake version {third} still reads as it was");
}

async fn scalar_as_of(lake: &sluice::Lake, sql: &str, version: i64) -> String {
    let r = lake.sql(sql).with_as_of(Some(AsOf::Lake(version))).execute().await.unwrap();
    let text = sluice::query::format::render(&r.batches, sluice::query::OutputFormat::Csv).unwrap();
    text.lines().nth(1).unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_journal_rewrites_never_duplicate_a_row() {
    use sluice::lake::journal::{self, JournalEntry, Phase};
    let (_dir, lake) = lake().await;
    let rows = journal::MAX_JOURNAL_FILES + 6;
    for i in 0..rows {
        journal::append(lake.root(), |j| {
            Ok(Some(JournalEntry {
                seq: j.max_seq() + 1,
                phase: Some(Phase::Completed),
                token: format!("t{i}"),
                ..JournalEntry::default()
            }))
        })
        .await
        .unwrap();
    }
    let root = lake.root().clone();
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let root = root.clone();
            tokio::spawn(async move { journal::compact_if_fragmented(&root).await.unwrap() })
        })
        .collect();
    let mut rewrote = 0;
    for r in racers {
        rewrote += usize::from(r.await.unwrap());
    }
    assert!(rewrote >= 1, "one rewrite lands");
    let after = journal::read(lake.root(), None).await.unwrap();
    assert_eq!(after.entries().len(), rows, "every row once");
    let tokens: std::collections::BTreeSet<&str> =
        after.entries().iter().map(|e| e.token.as_str()).collect();
    assert_eq!(tokens.len(), rows);
    assert!(!journal::compact_if_fragmented(lake.root()).await.unwrap(), "now one file");
}

async fn journal_files(root: &sluice::lake::LakeRoot) -> usize {
    let spec = sluice::lake::layout::commits_table();
    let handle = sluice::lake::delta::table::open(root, &spec).await.unwrap();
    sluice::lake::delta::table::active_files(&handle, &spec).unwrap().len()
}

/// The journal is compacted only by its own rewrite, committed as exactly
/// the version after the one it read: two rewrites racing (two `compact`
/// on hosts that share no lock) commit one and the other gives up, and no
/// journal row is ever kept twice. (Delta's OPTIMIZE, which `compact` once
/// ran on the journal too, commits on top of a rewrite it raced, keeping
/// both copies of every row it rewrote.)
#[tokio::test]
async fn journal_rewrites_racing_keep_every_row_once() {
    let (_dir, lake) = lake().await;
    small_commits(&lake, 0..3).await;
    let rows = |journal: &sluice::lake::journal::Journal| {
        let mut rows: Vec<(i64, String)> =
            journal.entries().iter().map(|e| (e.seq, e.phase().as_str().to_owned())).collect();
        rows.sort();
        rows
    };
    let before = rows(&sluice::lake::journal::read(lake.root(), None).await.unwrap());
    assert!(journal_files(lake.root()).await > 1, "the journal needs several files to rewrite");
    let (a, b) = tokio::join!(
        sluice::lake::journal::rewrite_if_more_files_than(lake.root(), 1),
        sluice::lake::journal::rewrite_if_more_files_than(lake.root(), 1),
    );
    let committed = [a.unwrap(), b.unwrap()];
    assert_eq!(committed.iter().flatten().count(), 1, "{committed:?}");
    assert_eq!(journal_files(lake.root()).await, 1);
    let after = sluice::lake::journal::read(lake.root(), None).await.unwrap();
    assert_eq!(rows(&after), before, "the rewrite changed the journal's rows");

    // `compact` takes the same way for the journal, not OPTIMIZE (whose
    // commits record the version they read under `sluice_compaction_read`).
    small_commits(&lake, 3..6).await;
    let reports = maintenance::compact::compact(
        &lake,
        &CompactOptions { table: Some("commits".into()), ..Default::default() },
    )
    .await
    .unwrap();
    let version = reports[0].version.expect("the journal was compacted");
    assert_eq!(reports[0].files_after, 1);
    let entry = lake
        .root()
        .local()
        .unwrap()
        .join(format!("orchestration/commits/_delta_log/{version:020}.json"));
    let info: serde_json::Value = std::fs::read_to_string(entry)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find_map(|a| a.get("commitInfo").cloned())
        .unwrap();
    assert!(info.get("sluice_compaction_read").is_none(), "an OPTIMIZE rewrote the journal");
    let journal = sluice::lake::journal::read(lake.root(), None).await.unwrap();
    let mut completed = std::collections::BTreeMap::new();
    for e in journal.entries() {
        if e.phase() == sluice::lake::journal::Phase::Completed {
            *completed.entry(e.seq).or_insert(0) += 1;
        }
    }
    assert!(completed.values().all(|n| *n == 1), "{completed:?}");
}

/// The kept files below `files/`, relative to the lake.
fn kept_files(lake: &sluice::Lake) -> std::collections::BTreeSet<String> {
    let root = lake.root().local().unwrap();
    let mut out = std::collections::BTreeSet::new();
    for folder in std::fs::read_dir(root.join("files")).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(folder.path()).unwrap().flatten() {
            out.insert(file.path().strip_prefix(root).unwrap().display().to_string());
        }
    }
    out
}

fn age(path: &std::path::Path, by: Duration) {
    let file = std::fs::File::options().append(true).open(path).unwrap();
    file.set_modified(std::time::SystemTime::now() - by).unwrap();
}

/// A unit keeps its file before its execution is committed, so a unit
/// that failed leaves a kept file nothing references. Vacuum collects it
/// past the retention, and never a file a version within the retention
/// references (a restore that drops the references leaves them kept) nor
/// one just written (its unit's commit may still come).
#[tokio::test]
async fn vacuum_collects_kept_files_no_reference_names_once_past_the_retention() {
    let (_dir, lake) = lake().await;
    let text = r#"name = "files"
[[step]]
name = "gen"
operation = "generate_data"
params = { tables = 2, rows = 3 }
[[step]]
name = "report"
operation = "command"
command = ["sh", "-c", "cat inputs/t/* > outputs/r/report.txt"]
inputs = { t = "gen.data" }
outputs = { r = "file_ref" }
"#;
    let run = |text: &str| {
        let lake = lake.clone();
        let config =
            sluice::pipeline::PipelineConfig::parse(text, std::path::Path::new("p.toml")).unwrap();
        async move {
            let ops = sluice::pipeline::Operations::linked().unwrap();
            let pipeline =
                sluice::pipeline::Pipeline::validate(config, &ops, lake.registry()).unwrap();
            lake.run(pipeline, ops).execute().await.unwrap();
        }
    };
    // The tables first, then the step that keeps a file per table.
    run(&text[..text.find("[[step]]\nname = \"report\"").unwrap()]).await;
    let before = maintenance::history::lake_history(&lake, Some(1)).await.unwrap()[0].version;
    run(text).await;
    let referenced = kept_files(&lake);
    assert_eq!(referenced.len(), 2, "{referenced:?}");
    let root = lake.root().local().unwrap().to_path_buf();
    let week_and_a_day = Duration::from_secs(8 * 24 * 3600);
    // What a failed unit leaves, long ago; what a running one just kept.
    let orphan = format!("files/{}/orphan.txt", "0".repeat(64));
    let running = format!("files/{}/running.txt", "1".repeat(64));
    for file in [&orphan, &running] {
        std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
        std::fs::write(root.join(file), "bytes").unwrap();
    }
    age(&root.join(&orphan), week_and_a_day);
    for file in &referenced {
        age(&root.join(file), week_and_a_day);
    }
    let dry = VacuumOptions { dry_run: true, ..VacuumOptions::default() };
    let listed = maintenance::vacuum::vacuum(&lake, &dry).await.unwrap();
    let files_listed: Vec<&String> =
        listed.leftovers.iter().filter(|l| l.starts_with("files/")).collect();
    assert_eq!(files_listed, [&orphan], "{listed:?}");
    assert!(root.join(&orphan).exists(), "a dry run removes nothing");
    let done = maintenance::vacuum::vacuum(&lake, &VacuumOptions::default()).await.unwrap();
    assert!(done.leftovers.contains(&orphan), "{done:?}");
    assert!(!root.join(&orphan).parent().unwrap().exists(), "its emptied folder goes too");
    let mut left = referenced.clone();
    left.insert(running.clone());
    assert_eq!(kept_files(&lake), left);

    // A restore to before the step drops its references from the head;
    // the versions within the retention still name the files: kept.
    let options = maintenance::RestoreOptions {
        to: sluice::lake::journal::snapshot::LakePoint::Sequence(before),
        ..Default::default()
    };
    maintenance::restore::restore(&lake, &options).await.unwrap();
    assert_eq!(scalar(&lake, "SELECT count(*) FROM file_refs").await, "0");
    maintenance::vacuum::vacuum(&lake, &VacuumOptions::default()).await.unwrap();
    assert_eq!(kept_files(&lake), left, "a reference within the retention keeps its file");
    for file in &referenced {
        let path = root.join(file);
        let hash = blake3::hash(&std::fs::read(&path).unwrap()).to_hex().to_string();
        assert!(file.contains(&hash), "{file} holds the bytes it is named by");
    }
}
