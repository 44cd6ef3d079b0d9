//! Medallion transforms on real Delta tables: curated totals equal what the
//! source files say; each run reads only the upstream's new data files;
//! racing runs apply every upstream version once; bad SQL is a clear error
//! that stops neither ingestion nor the other transforms.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sluice::ingest::transform::{self, Transform};
use sluice::ingest::{IngestConfig, Ingestor, Mode};

use crate::ingest::TRIPS;

/// raw → aggregate (per day and zone of each batch of new rows) → curated
/// (running totals per day and zone).
const TRANSFORMS: &str = include_str!("../fixtures/medallion.toml");

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn trip(i: u64) -> (u32, String, u64) {
    (1 + (i % 7) as u32, format!("Zone{}", i % 5), 500 + i % 4000)
}

fn csv(first_id: u64, rows: u64) -> Vec<u8> {
    let mut out = String::from("trip_id,pickup_at,zone,fare\n");
    for i in first_id..first_id + rows {
        let (day, zone, cents) = trip(i);
        out.push_str(&format!(
            "{i},2024-01-{day:02}T{:02}:00:00Z,{zone},{}.{:02}\n",
            i % 24,
            cents / 100,
            cents % 100
        ));
    }
    out.into_bytes()
}

/// (day, zone) → (trips, revenue in cents), computed from the generator.
fn expected(ids: std::ops::Range<u64>) -> BTreeMap<(String, String), (i64, i64)> {
    let mut out = BTreeMap::new();
    for i in ids {
        let (day, zone, cents) = trip(i);
        let e = out.entry((format!("2024-01-{day:02}"), zone)).or_insert((0, 0));
        e.0 += 1;
        e.1 += cents as i64;
    }
    out
}

impl Setup {
    fn new(transforms: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("schemas")).unwrap();
        std::fs::write(root.join("schemas/trips.yaml"), TRIPS).unwrap();
        std::fs::create_dir_all(root.join("landing/trips")).unwrap();
        std::fs::write(
            root.join("lakehouse.toml"),
            format!(
                "lake = \"lake\"\n[queue]\nsettle_ms = 0\npoll_ms = 20\nretry_delay_ms = 0\n[ingest]\nworkers = 2\nflush_interval_ms = 50\n{transforms}"
            ),
        )
        .unwrap();
        Setup { _dir: dir, root }
    }

    fn config(&self) -> IngestConfig {
        IngestConfig::load(&self.root.join("lakehouse.toml")).unwrap()
    }

    fn lake(&self) -> PathBuf {
        self.root.join("lake")
    }

    fn land(&self, name: &str, content: &[u8]) {
        let tmp = self.root.join("landing/trips").join(format!(".{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(tmp, self.root.join("landing/trips").join(name)).unwrap();
    }

    /// Ingest what landed, without running the transforms.
    async fn ingest_raw(&self) {
        let mut config = self.config();
        config.transforms.clear();
        let report = Ingestor::open(config).await.unwrap().run(Mode::Once, None).await.unwrap();
        assert!(report.files > 0, "{report:?}");
    }

    async fn sql(&self, sql: &str) -> String {
        let lake = sluice::Lake::open(&self.lake()).await.unwrap();
        let out = lake.sql(sql).execute().await.unwrap();
        sluice::query::format::render(&out.batches, sluice::query::OutputFormat::Csv)
            .unwrap()
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn curated(&self) -> BTreeMap<(String, String), (i64, i64)> {
        let text = self
            .sql("SELECT CAST(day AS VARCHAR), zone, trips, CAST(revenue * 100 AS BIGINT) FROM daily ORDER BY 1, 2")
            .await;
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let cells: Vec<&str> = line.split(',').collect();
            let previous = out.insert(
                (cells[0].to_owned(), cells[1].to_owned()),
                (cells[2].parse().unwrap(), cells[3].parse().unwrap()),
            );
            assert!(previous.is_none(), "a key twice in curated: {line}");
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curated_totals_match_the_files_and_each_run_reads_only_new_files() {
    let s = Setup::new(TRANSFORMS);
    let transforms = s.config().transforms;
    for f in 0..3 {
        s.land(&format!("a{f}.csv"), &csv(f * 200, 200));
    }
    s.ingest_raw().await;
    let first = transform::run_all(&s.lake().into(), &transforms).await.unwrap();
    assert_eq!((first[0].after, first[0].rows_read), (None, 600), "{first:?}");
    assert!(first[0].version.is_some() && first[1].version.is_some(), "{first:?}");
    assert_eq!(s.curated().await, expected(0..600));

    for f in 3..5 {
        s.land(&format!("a{f}.csv"), &csv(f * 200, 200));
    }
    s.ingest_raw().await;
    let second = transform::run_all(&s.lake().into(), &transforms).await.unwrap();
    // Only the data files the new raw commit added are read.
    assert_eq!(second[0].after, Some(first[0].to), "{second:?}");
    assert_eq!(second[0].rows_read, 400, "only the two new files' rows: {second:?}");
    let raw_files: usize =
        s.sql("SELECT count(DISTINCT _source_file) FROM trips").await.parse().unwrap();
    assert_eq!(raw_files, 5);
    assert!(second[0].files_read < 5, "{second:?}");
    assert_eq!(second[1].rows_read, second[0].rows_out, "curated reads the new aggregate rows");
    assert!(second[1].updated > 0 && second[1].inserted + second[1].updated == second[1].rows_out);
    assert_eq!(s.curated().await, expected(0..1000));

    // Nothing new upstream: nothing read, nothing committed.
    let third = transform::run_all(&s.lake().into(), &transforms).await.unwrap();
    assert!(third.iter().all(|r| r.version.is_none() && r.rows_read == 0), "{third:?}");

    // The aggregate appended one partial row per (day, zone) per run and is
    // partitioned by day.
    let partials: i64 = s.sql("SELECT count(*) FROM zone_days").await.parse().unwrap();
    assert_eq!(partials as usize, first[0].rows_out + second[0].rows_out);
    assert!(s.lake().join("aggregate/zone_days/day=2024-01-03").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_runs_the_transforms_after_its_commits() {
    let s = Setup::new(TRANSFORMS);
    for f in 0..4 {
        s.land(&format!("b{f}.csv"), &csv(f * 100, 100));
    }
    let ingestor = Ingestor::open(s.config()).await.unwrap();
    let report = ingestor.run(Mode::Once, None).await.unwrap();
    assert!(report.transform_commits >= 2 && report.transform_errors.is_empty(), "{report:?}");
    assert_eq!(s.curated().await, expected(0..400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_transform_runs_apply_every_upstream_version_once() {
    let s = Setup::new(TRANSFORMS);
    let transforms = s.config().transforms;
    let mut landed = 0;
    for round in 0..3u64 {
        for f in 0..3 {
            s.land(&format!("r{round}-{f}.csv"), &csv(landed, 150));
            landed += 150;
        }
        s.ingest_raw().await;
        let runs: Vec<_> = (0..4)
            .map(|_| {
                let (lake, transforms) = (s.lake(), transforms.clone());
                tokio::spawn(async move { transform::run_all(&lake.into(), &transforms).await })
            })
            .collect();
        let mut applied = 0;
        for run in runs {
            let reports = run.await.unwrap().unwrap();
            applied += usize::from(reports[0].version.is_some());
        }
        assert!(applied >= 1, "round {round}: someone applied the new rows");
        assert_eq!(s.curated().await, expected(0..landed), "round {round}");
    }
    let aggregate_rows: i64 = s.sql("SELECT sum(trips) FROM zone_days").await.parse().unwrap();
    assert_eq!(aggregate_rows, landed as i64, "no batch aggregated twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_transform_is_a_clear_error_and_stops_nothing_else() {
    // A curated SQL that forgets to group: many rows per key.
    let broken = format!(
        "{}\n[[transform]]\nname = \"by_zone\"\nlayer = \"curated\"\nfrom = \"raw/trips\"\nsql = \"SELECT zone, fare FROM trips\"\nprimary_key = [\"zone\"]\n",
        TRANSFORMS
    );
    let s = Setup::new(&broken);
    s.land("c0.csv", &csv(0, 50));
    s.land("c1.csv", &csv(50, 50));
    let report = Ingestor::open(s.config()).await.unwrap().run(Mode::Once, None).await.unwrap();
    assert_eq!(report.rows, 100, "raw rows land: {report:?}");
    assert_eq!(report.transform_errors.len(), 1, "{report:?}");
    let error = &report.transform_errors[0];
    assert!(error.contains("transform `by_zone`") && error.contains("GROUP BY"), "{error}");
    assert_eq!(s.curated().await, expected(0..100), "the other transforms ran");

    // Unnamed output columns are refused with the fix.
    let unnamed: Vec<Transform> = vec![Transform {
        name: "counts".into(),
        layer: transform::Layer::Aggregate,
        from: "trips".into(),
        sql: "SELECT zone, count(*) FROM trips GROUP BY zone".into(),
        partition_by: vec![],
        primary_key: vec![],
        on_match: Default::default(),
    }];
    let err = transform::run_all(&s.lake().into(), &unnamed).await.unwrap_err().to_string();
    assert!(err.contains("count(*)") && err.contains("AS name"), "{err}");
}
