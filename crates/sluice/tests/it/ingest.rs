//! Ingestion on real landing folders and Delta tables: exactly once under
//! redelivery, duplicates and a second ingest process; bad inputs
//! dead-lettered with their reasons, good ones kept.

use std::path::{Path, PathBuf};

use sluice::ingest::{IngestConfig, Ingestor, Mode, ledger};

pub(crate) const TRIPS: &str = "columns:\n  - { name: trip_id, type: int64, nullable: false }\n  - { name: pickup_at, type: timestamp }\n  - { name: zone, type: string, max_length: 16 }\n  - { name: fare, type: \"decimal(8,2)\" }\nprimary_key: [trip_id]\n";

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Setup {
    fn new(schema_extra: &str, max_attempts: u32) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("schemas")).unwrap();
        std::fs::write(root.join("schemas/trips.yaml"), format!("{TRIPS}{schema_extra}")).unwrap();
        std::fs::create_dir_all(root.join("landing/trips")).unwrap();
        std::fs::write(
            root.join("lakehouse.toml"),
            format!(
                "lake = \"lake\"\n[queue]\nsettle_ms = 0\npoll_ms = 20\nretry_delay_ms = 0\nmax_attempts = {max_attempts}\n[ingest]\nworkers = 2\nflush_interval_ms = 50\n"
            ),
        )
        .unwrap();
        Setup { _dir: dir, root }
    }

    fn config(&self) -> IngestConfig {
        IngestConfig::load(&self.root.join("lakehouse.toml")).unwrap()
    }

    fn land(&self, name: &str, content: &[u8]) {
        let tmp = self.root.join("landing/trips").join(format!(".{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(tmp, self.root.join("landing/trips").join(name)).unwrap();
    }

    async fn once(&self) -> sluice::ingest::IngestReport {
        Ingestor::open(self.config()).await.unwrap().run(Mode::Once, None).await.unwrap()
    }

    async fn sql(&self, sql: &str) -> String {
        sql_over(&self.root.join("lake/raw"), &["trips", "trips_rejects"], sql).await
    }
}

/// `sql` over the raw tables `names` of a lake's `raw` folder (those that
/// exist), as CSV lines without the header.
pub(crate) async fn sql_over(raw: &Path, names: &[&str], sql: &str) -> String {
    let ctx = deltalake::datafusion::prelude::SessionContext::new();
    for t in names {
        let dir = raw.join(t);
        if dir.join("_delta_log").is_dir() {
            let url = url::Url::from_directory_path(&dir).unwrap();
            let table = deltalake::open_table(url).await.unwrap();
            ctx.register_table(*t, table.table_provider().await.unwrap()).unwrap();
        }
    }
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    sluice::query::format::render(&batches, sluice::query::OutputFormat::Csv)
        .unwrap()
        .lines()
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n")
}

fn csv(first_id: u64, rows: u64) -> Vec<u8> {
    let mut out = String::from("trip_id,pickup_at,zone,fare\n");
    for i in first_id..first_id + rows {
        out.push_str(&format!(
            "{i},2024-01-0{}T08:{:02}:00Z,Zone{},{}.{:02}\n",
            1 + i % 7,
            i % 60,
            i % 5,
            5 + i % 40,
            i % 100
        ));
    }
    out.into_bytes()
}

fn ledger_rows(root: &Path) -> Vec<ledger::LedgerRow> {
    let rt = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| rt.block_on(ledger::read(&root.join("lake")))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_file_lands_once_and_redeliveries_and_copies_are_skipped() {
    let s = Setup::new("", 3);
    for f in 0..6 {
        s.land(&format!("f{f}.csv"), &csv(f * 100, 100));
    }
    let report = s.once().await;
    assert_eq!((report.files, report.rows, report.duplicates), (6, 600, 0), "{report:?}");
    assert_eq!(s.sql("SELECT count(*), count(DISTINCT trip_id) FROM trips").await, "600,600");
    assert_eq!(s.sql("SELECT sum(fare) FROM trips WHERE trip_id < 2").await, "11.01");
    // The same name again, and the same bytes under a new name: nothing lands.
    s.land("f0.csv", &csv(0, 100));
    s.land("copy-of-f1.csv", &csv(100, 100));
    let again = s.once().await;
    assert_eq!((again.files, again.rows, again.duplicates), (0, 0, 2), "{again:?}");
    assert_eq!(s.sql("SELECT count(*) FROM trips").await, "600");
    let rows = ledger_rows(&s.root);
    let ok: Vec<_> = rows.iter().filter(|r| r.status == "ok").collect();
    assert_eq!(ok.len(), 6, "one ok row per file: {rows:?}");
    let dup: Vec<_> = rows.iter().filter(|r| r.status == "duplicate").collect();
    assert_eq!(dup.len(), 1);
    assert!(dup[0].error.as_deref().unwrap_or_default().contains("trips/f1.csv"), "{dup:?}");
    assert!(
        s.root.join("landing/.sluice/done/trips/f0.csv").exists(),
        "ingested files are archived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ingest_processes_on_one_landing_zone_duplicate_nothing() {
    let s = Setup::new("", 3);
    for f in 0..40 {
        s.land(&format!("f{f}.csv"), &csv(f * 50, 50));
    }
    let a = Ingestor::open(s.config()).await.unwrap();
    let b = Ingestor::open(s.config()).await.unwrap();
    let (ra, rb) = tokio::join!(a.run(Mode::Once, None), b.run(Mode::Once, None));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.files + rb.files, 40, "{ra:?} {rb:?}");
    assert_eq!(s.sql("SELECT count(*), count(DISTINCT trip_id) FROM trips").await, "2000,2000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_dead_lettered_with_reasons_and_good_ones_land() {
    let s = Setup::new("", 2);
    s.land("good.csv", &csv(0, 10));
    let bad: Vec<(&str, Vec<u8>)> = vec![
        (
            "types.csv",
            b"trip_id,pickup_at,zone,fare\nnot-a-number,2024-01-01T00:00:00Z,A,1\n".to_vec(),
        ),
        (
            "long.csv",
            b"trip_id,pickup_at,zone,fare\n1,2024-01-01T00:00:00Z,AAAAAAAAAAAAAAAAAAAAAAAA,1\n"
                .to_vec(),
        ),
        ("nulls.csv", b"trip_id,pickup_at,zone,fare\n,2024-01-01T00:00:00Z,A,1\n".to_vec()),
        ("empty.csv", Vec::new()),
        ("garbage.csv", (0u8..=255).cycle().take(4096).collect()),
        ("utf8.csv", b"trip_id,pickup_at,zone,fare\n1,2024-01-01T00:00:00Z,\xc3\x28,1\n".to_vec()),
        ("header.csv", b"trip,when\n1,2\n".to_vec()),
        ("extra.csv", b"trip_id,pickup_at,zone,fare,tip\n1,2024-01-01T00:00:00Z,A,1,2\n".to_vec()),
        ("ragged.csv", b"trip_id,pickup_at,zone,fare\n1,2024-01-01T00:00:00Z\n".to_vec()),
        ("notes.txt", b"hello".to_vec()),
    ];
    for (name, content) in &bad {
        s.land(name, content);
    }
    // Each bad file fails, is delivered once more, fails again, and is
    // dead-lettered; the stream goes on.
    let first = s.once().await;
    assert_eq!((first.files, first.rows), (1, 10), "{first:?}");
    assert_eq!((first.retried, first.dead), (bad.len() as u64, bad.len() as u64), "{first:?}");
    let ingestor = Ingestor::open(s.config()).await.unwrap();
    let dead = ingestor.queue().dead_letters().await.unwrap();
    let reason = |name: &str| {
        dead.iter().find(|d| d.name == name).map(|d| d.reason.clone()).unwrap_or_default()
    };
    for (name, why) in [
        ("types.csv", "`not-a-number` is not a valid int64"),
        ("long.csv", "more than max_length 16"),
        ("nulls.csv", "declared not nullable"),
        ("empty.csv", "empty"),
        ("header.csv", "lacks required columns"),
        ("extra.csv", "not in the schema"),
        ("ragged.csv", "unreadable CSV"),
        ("notes.txt", "unknown file type"),
    ] {
        assert!(reason(name).contains(why), "{name}: {}", reason(name));
    }
    assert!(!reason("garbage.csv").is_empty() && !reason("utf8.csv").is_empty());
    let rows = ledger_rows(&s.root);
    assert_eq!(rows.iter().filter(|r| r.status == "dead").count(), bad.len());
    assert_eq!(s.sql("SELECT count(*) FROM trips").await, "10", "nothing of a bad file landed");
    // Put them back: they fail again (same content), nothing else changes.
    assert_eq!(ingestor.queue().retry_dead(&["trips/types.csv".into()]).await.unwrap().len(), 1);
    let status = ingestor.status().await.unwrap();
    assert_eq!(status.queue.waiting, 1);
    assert_eq!(status.tables["trips"].files, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reject_bad_rows_go_to_the_rejects_table_with_line_and_reason() {
    let s = Setup::new("on_row_error: reject\n", 3);
    s.land(
        "mixed.csv",
        b"trip_id,pickup_at,zone,fare\n1,2024-01-01T00:00:00Z,A,1.5\nx,2024-01-01T00:00:00Z,A,1\n3,2024-01-01T00:00:00Z,A,1.999\n4,2024-01-01T00:00:00Z,B,2\n",
    );
    let report = s.once().await;
    assert_eq!((report.rows, report.rejected), (2, 2), "{report:?}");
    assert_eq!(s.sql("SELECT trip_id FROM trips ORDER BY trip_id").await, "1\n4");
    let rejects = s.sql("SELECT line, reason FROM trips_rejects ORDER BY line").await;
    assert!(
        rejects.starts_with("3,") && rejects.contains("\n4,") && rejects.contains("decimal places"),
        "{rejects}"
    );
    // Delivered again: neither table gains a row.
    s.land("mixed.csv", b"trip_id,pickup_at,zone,fare\n1,2024-01-01T00:00:00Z,A,1.5\nx,2024-01-01T00:00:00Z,A,1\n3,2024-01-01T00:00:00Z,A,1.999\n4,2024-01-01T00:00:00Z,B,2\n");
    s.once().await;
    assert_eq!(s.sql("SELECT count(*) FROM trips_rejects").await, "2");
    assert_eq!(s.sql("SELECT count(*) FROM trips").await, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_names_that_sql_could_confuse_are_refused() {
    let s = Setup::new("", 3);
    // A raw table named like an artifact table.
    std::fs::write(s.root.join("schemas/metrics.yaml"), TRIPS).unwrap();
    let err = Ingestor::open(s.config()).await.err().unwrap().to_string();
    assert!(err.contains("metrics.yaml") && err.contains("artifact lake"), "{err}");
    std::fs::remove_file(s.root.join("schemas/metrics.yaml")).unwrap();
    // A transform named like a raw table.
    let config = s.root.join("lakehouse.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}[[transform]]\nname = \"trips\"\nlayer = \"aggregate\"\nfrom = \"raw/trips\"\nsql = \"SELECT zone FROM trips\"\n"),
    )
    .unwrap();
    let err = Ingestor::open(s.config()).await.err().unwrap().to_string();
    assert!(err.contains("transform `trips`") && err.contains("raw table of"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_removes_exact_duplicates_written_outside_sluice_and_keeps_the_rest() {
    use deltalake::arrow::array::{Int64Array, StringArray};
    use deltalake::arrow::datatypes::{DataType, Field, Schema};
    use deltalake::arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("raw/events");
    std::fs::create_dir_all(&table_dir).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("day", DataType::Utf8, false),
        Field::new("v", DataType::Utf8, true),
    ]));
    let batch = |ids: Vec<i64>, days: Vec<&str>, vs: Vec<Option<&str>>| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(days)),
                Arc::new(StringArray::from(vs)),
            ],
        )
        .unwrap()
    };
    // Written by another tool: three appends, the second and third repeat
    // rows (a null included); a row that differs in one column is no duplicate.
    let url = url::Url::from_directory_path(&table_dir).unwrap();
    let mut table = deltalake::DeltaTable::try_from_url(url).await.unwrap();
    for b in [
        batch(vec![1, 2, 3], vec!["d1", "d1", "d2"], vec![Some("a"), None, Some("c")]),
        batch(vec![2, 3, 4], vec!["d1", "d2", "d2"], vec![None, Some("c"), Some("d")]),
        batch(vec![1, 3], vec!["d1", "d2"], vec![Some("a"), Some("other")]),
    ] {
        table = table
            .write(vec![b])
            .with_partition_columns(["day"])
            .with_save_mode(deltalake::protocol::SaveMode::Append)
            .await
            .unwrap();
    }
    let root = sluice::lake::io::location::LakeRoot::from(dir.path());
    let events = sluice::lake::delta::held::ingestion_table(&root, "events").await.unwrap();
    let events = events.expect("found in raw/");
    let dry = sluice::ingest::dedup::dedup(&root, &events, true).await.unwrap();
    assert_eq!((dry.rows_before, dry.duplicates, dry.version), (8, 3, None), "{dry:?}");
    let done = sluice::ingest::dedup::dedup(&root, &events, false).await.unwrap();
    assert_eq!((done.rows_before, done.rows_after, done.duplicates), (8, 5, 3), "{done:?}");
    assert!(done.version.is_some() && done.files_rewritten >= 2, "{done:?}");
    let lake = sluice::Lake::open(dir.path()).await.unwrap();
    let out = lake
        .sql("SELECT id, day, coalesce(v, 'null') FROM events ORDER BY id, v")
        .execute()
        .await
        .unwrap();
    let text =
        sluice::query::format::render(&out.batches, sluice::query::OutputFormat::Csv).unwrap();
    assert_eq!(
        text.lines().skip(1).collect::<Vec<_>>(),
        ["1,d1,a", "2,d1,null", "3,d2,c", "3,d2,other", "4,d2,d"]
    );
    let again = sluice::ingest::dedup::dedup(&root, &events, false).await.unwrap();
    assert_eq!((again.duplicates, again.version), (0, None), "idempotent: {again:?}");
}

fn trips(rows: &[(u64, &str, &str, &str)]) -> Vec<u8> {
    let mut out = String::from("trip_id,pickup_at,zone,fare\n");
    for (id, at, zone, fare) in rows {
        out.push_str(&format!("{id},{at},{zone},{fare}\n"));
    }
    out.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_table_upserts_each_file_by_key_exactly_once() {
    let s = Setup::new("write_mode: merge\n", 3);
    s.land("a.csv", &csv(0, 100));
    let first = s.once().await;
    assert_eq!((first.files, first.rows), (1, 100), "{first:?}");
    // b updates 50..149 and inserts 100..149; it names 149 twice: its last row wins.
    let mut rows: Vec<(u64, &str, &str, &str)> =
        (50..150).map(|i| (i, "2024-02-01T00:00:00Z", "New", "9.99")).collect();
    rows.push((149, "2024-02-02T00:00:00Z", "Last", "1.00"));
    s.land("b.csv", &trips(&rows));
    let second = s.once().await;
    assert_eq!((second.files, second.rows), (1, 101), "{second:?}");
    assert_eq!(s.sql("SELECT count(*), count(DISTINCT trip_id) FROM trips").await, "150,150");
    assert_eq!(
        s.sql("SELECT zone, count(*), min(_source_file) FROM trips GROUP BY zone HAVING zone IN ('New', 'Last') ORDER BY zone").await,
        "Last,1,trips/b.csv\nNew,99,trips/b.csv"
    );
    assert_eq!(s.sql("SELECT count(*) FROM trips WHERE _source_file = 'trips/a.csv'").await, "50");
    // a.csv delivered again: its key is held, so nothing reverts.
    s.land("a.csv", &csv(0, 100));
    let again = s.once().await;
    assert_eq!((again.files, again.duplicates), (0, 1), "{again:?}");
    assert_eq!(s.sql("SELECT zone FROM trips WHERE trip_id = 60").await, "New");
    let ok = ledger_rows(&s.root).iter().filter(|r| r.status == "ok").count();
    assert_eq!(ok, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sequence_by_the_newest_version_of_a_key_wins_whatever_the_arrival_order() {
    let s = Setup::new("write_mode: merge\nsequence_by: pickup_at\n", 3);
    std::fs::write(
        s.root.join("schemas/trips.yaml"),
        super::ingest::TRIPS.replace(
            "{ name: pickup_at, type: timestamp }",
            "{ name: pickup_at, type: timestamp, nullable: false }",
        ) + "write_mode: merge\nsequence_by: pickup_at\n",
    )
    .unwrap();
    // The newest version of key 1 arrives first, an older one later; in a
    // later file of the same flush, key 2's older version comes after its newer.
    s.land("newer.csv", &trips(&[(1, "2024-03-01T00:00:00Z", "March", "3.00")]));
    s.once().await;
    s.land(
        "older.csv",
        &trips(&[
            (1, "2024-01-01T00:00:00Z", "January", "1.00"),
            (2, "2024-03-01T00:00:00Z", "March", "3.00"),
            (2, "2024-02-01T00:00:00Z", "February", "2.00"),
        ]),
    );
    let report = s.once().await;
    assert_eq!((report.files, report.rows), (1, 3), "{report:?}");
    assert_eq!(
        s.sql("SELECT trip_id, zone FROM trips ORDER BY trip_id").await,
        "1,March\n2,March",
        "older versions never replace newer ones"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_sees_a_new_file_by_its_notification_not_the_next_poll() {
    let s = Setup::new("", 3);
    // A poll a minute: only the file-system notification can be this quick.
    std::fs::write(
        s.root.join("lakehouse.toml"),
        "lake = \"lake\"\n[queue]\nsettle_ms = 100\npoll_ms = 60000\n[ingest]\nflush_interval_ms = 50\n",
    )
    .unwrap();
    let ingestor = Ingestor::open(s.config()).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = tokio::spawn(async move { ingestor.run(Mode::Watch(stop), None).await });
    // Let the dispatcher find the landing zone empty and start waiting.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let clock = std::time::Instant::now();
    s.land("late.csv", &csv(0, 10));
    let lake = s.root.join("lake");
    loop {
        let rows = ledger::read(&lake).await.unwrap();
        if rows.iter().any(|r| r.file_key == "trips/late.csv" && r.status == "ok") {
            break;
        }
        assert!(
            clock.elapsed() < std::time::Duration::from_secs(20),
            "not ingested 20 s after it landed, with a 60 s poll"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eprintln!("landed → committed in {:?} (poll_ms 60000)", clock.elapsed());
    watching.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_vacuum_and_checkpoints_keep_ingestion_tables_too() {
    use sluice::maintenance::{self, CompactOptions, VacuumOptions};
    let s = Setup::new("", 3);
    for f in 0..4 {
        s.land(&format!("f{f}.csv"), &csv(f * 10, 10));
        assert_eq!(s.once().await.files, 1);
    }
    // An ingestion-only lake: no `sluice init`, no artifact tables.
    let lake = sluice::Lake::open(s.root.join("lake")).await.unwrap();
    let one = CompactOptions { table: Some("trips".into()), ..CompactOptions::default() };
    let reports = maintenance::compact::compact(&lake, &one).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].files_before, reports[0].files_after), (4, 1), "{reports:?}");
    assert_eq!(s.sql("SELECT count(*), sum(trip_id) FROM trips").await, "40,780");
    // Every table: the ledger is one of them.
    let all = maintenance::compact::compact(&lake, &CompactOptions::default()).await.unwrap();
    let names: Vec<&str> = all.iter().map(|r| r.table.as_str()).collect();
    assert_eq!(names, ["trips", "ingest_ledger"], "{all:?}");
    let checkpoints = maintenance::checkpoint(&lake, Some("trips"), &Default::default()).await;
    assert_eq!(checkpoints.unwrap().len(), 1);
    assert!(s.root.join("lake/raw/trips/_delta_log/_last_checkpoint").exists());
    let forced = VacuumOptions {
        table: Some("trips".into()),
        retention: std::time::Duration::ZERO,
        force: true,
        ..VacuumOptions::default()
    };
    let vacuumed = maintenance::vacuum::vacuum(&lake, &forced).await.unwrap();
    let removed: usize = vacuumed.files.iter().map(|(_, f)| f.len()).sum();
    assert_eq!(removed, 4, "the four replaced files: {vacuumed:?}");
    assert_eq!(s.sql("SELECT count(*), sum(trip_id) FROM trips").await, "40,780");
    // Ingestion goes on after maintenance, exactly once.
    s.land("f0.csv", &csv(0, 10));
    s.land("f9.csv", &csv(90, 10));
    let after = s.once().await;
    assert_eq!((after.files, after.duplicates), (1, 1), "{after:?}");
}

/// A log entry that cannot be read (not one log clean-up removed) is an
/// error for the ledger's catch-up, never taken for an expired entry: that
/// would make the files it committed look new, to be ingested again.
#[tokio::test]
async fn an_unreadable_log_entry_is_an_error_not_an_expired_one() {
    let setup = Setup::new("", 3);
    setup.land("a.csv", b"trip_id,pickup_at,zone,fare\n1,2024-01-01T00:00:00Z,Z1,3.50\n");
    assert_eq!(setup.once().await.files, 1);
    let dir = setup.root.join("lake/raw/trips");
    let url = url::Url::from_directory_path(&dir).unwrap();
    let handle = deltalake::open_table(url).await.unwrap();
    let head = handle.version().unwrap();
    let mut committed = ledger::Committed::default();
    committed.catch_up(&handle, "trips", 0).await.unwrap();
    assert!(committed.keys.contains("trips/a.csv"));
    // The entry that committed the file becomes unreadable (a link to
    // itself in its place: every open fails, as on a flaky mount).
    let entry = dir.join(format!("_delta_log/{head:020}.json"));
    std::fs::remove_file(&entry).unwrap();
    std::os::unix::fs::symlink(&entry, &entry).unwrap();
    let mut again = ledger::Committed::default();
    let err = again.catch_up(&handle, "trips", 0).await;
    assert!(err.is_err(), "an unreadable entry was skipped as expired: {:?}", again.keys);
    // Gone (expired), it is skipped: the ledger covers it.
    std::fs::remove_file(&entry).unwrap();
    let mut expired = ledger::Committed::default();
    expired.catch_up(&handle, "trips", 0).await.unwrap();
    assert!(!expired.keys.contains("trips/a.csv"));
}

fn ok_row(key: &str, hash: &str) -> ledger::LedgerRow {
    ledger::LedgerRow {
        table: "trips".into(),
        file_key: format!("trips/{key}"),
        content_hash: hash.into(),
        rows: 1,
        rejected: 0,
        status: "ok".into(),
        attempts: 1,
        error: None,
        table_version: Some(1),
        at: 0,
    }
}

/// Two writers mean to record one file `ok` — the ingest process that
/// committed it, and another that found the commit without a ledger row on
/// startup — at any interleaving: the ledger records it once.
#[tokio::test]
async fn the_ledger_records_a_committed_file_once_whoever_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let mut first = ledger::Ledger::new(&lake);
    let mut second = ledger::Ledger::new(&lake);
    // Both have read the ledger before either records the file.
    first.append(&[ok_row("warm-a.csv", "h0")]).await.unwrap();
    second.append(&[ok_row("warm-b.csv", "h0")]).await.unwrap();
    first.append(&[ok_row("a.csv", "h1")]).await.unwrap();
    // The second's view is one version behind: its append learns the
    // first's row from the version it must commit on top of.
    second.append(&[ok_row("a.csv", "h1"), ok_row("b.csv", "h2")]).await.unwrap();
    // A fresh writer knows from the rows; new content under a name is a new row.
    let mut third = ledger::Ledger::new(&lake);
    third.append(&[ok_row("b.csv", "h2"), ok_row("a.csv", "h3")]).await.unwrap();
    // Rows that are not `ok` are never dropped.
    let mut dead = ok_row("a.csv", "h1");
    dead.status = "duplicate".into();
    third.append(&[dead.clone(), dead]).await.unwrap();
    let rows = ledger::read(&lake).await.unwrap();
    let ok: Vec<(String, String)> = rows
        .iter()
        .filter(|r| r.status == "ok")
        .map(|r| (r.file_key.clone(), r.content_hash.clone()))
        .collect();
    let distinct: std::collections::BTreeSet<_> = ok.iter().cloned().collect();
    assert_eq!(ok.len(), distinct.len(), "a file recorded ok twice: {ok:?}");
    assert_eq!(ok.len(), 5, "{ok:?}");
    assert_eq!(rows.iter().filter(|r| r.status == "duplicate").count(), 2);
}
