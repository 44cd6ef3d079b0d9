//! Tables on object stores, against real emulators: the moto S3 server
//! (`bash scripts/moto.sh up`) and Azurite (`bash scripts/azurite.sh up`),
//! both started by `.ci/run`. Conditional puts create each Delta log entry
//! exactly once among racing writers, a put that finds its own entry (a
//! retry answered 412) is told it won, and delta-rs creates, appends to and
//! reads back tables through sluice's stores with the options users spell
//! for their Python readers — and those readers (deltalake, polars, from
//! `SLUICE_PYTHON`) read the same tables with the same options. Without an emulator these tests fail in CI
//! (`CI` set) and are skipped with a note elsewhere.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deltalake::arrow::array::{Int64Array, RecordBatch};
use deltalake::arrow::datatypes::{DataType as ArrowType, Field, Schema};
use deltalake::kernel::{DataType, StructField};
use deltalake::{DeltaTable, DeltaTableBuilder};
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice::lake::io::log_entry::{entry_location, put_if_absent};
use sluice::lake::io::storage;

use crate::azure::{azurite_available, unique};
use url::Url;

/// An emulated store: its URL scheme and bucket or container, and the
/// options a user would give for it.
struct Emulator {
    root: String,
    options: HashMap<String, String>,
}

fn moto_endpoint() -> String {
    let port = std::env::var("SLUICE_MOTO_PORT").unwrap_or_else(|_| "5555".into());
    format!("http://127.0.0.1:{port}")
}

fn moto_available() -> bool {
    let address = moto_endpoint().trim_start_matches("http://").to_owned();
    let up = address.parse().is_ok_and(|addr| {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
    });
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the S3 tests: start moto with `bash scripts/moto.sh up`"
        );
        eprintln!("moto is not running here; skipping (bash scripts/moto.sh up starts it)");
    }
    up
}

/// A new bucket on moto.
async fn moto(name: &str) -> Emulator {
    let bucket = unique(name);
    let created =
        reqwest::Client::new().put(format!("{}/{bucket}", moto_endpoint())).send().await.unwrap();
    assert!(created.status().is_success(), "creating bucket {bucket}: {}", created.status());
    let options = [
        ("AWS_ENDPOINT_URL", moto_endpoint()),
        ("aws_allow_http", "true".into()),
        ("aws_access_key_id", "sluice".into()),
        ("aws_secret_access_key", "sluice".into()),
        ("aws_region", "us-east-1".into()),
    ];
    Emulator {
        root: format!("s3://{bucket}"),
        options: options.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    }
}

/// A new container on Azurite.
async fn azurite(name: &str) -> Emulator {
    let container = unique(name);
    let options: HashMap<String, String> =
        [("use_emulator".to_owned(), "true".to_owned())].into_iter().collect();
    use sluice::ingest::queue::{Credential, EMULATOR_ACCOUNT, EMULATOR_KEY, create_container};
    let key = Credential::key(EMULATOR_KEY).unwrap();
    let endpoint = format!("http://127.0.0.1:10000/{EMULATOR_ACCOUNT}");
    create_container(&endpoint, EMULATOR_ACCOUNT, &key, &container).await.unwrap();
    Emulator { root: format!("az://{container}"), options }
}

async fn racing_writers_create_each_log_entry_once(emulator: &Emulator) {
    let url = Url::parse(&format!("{}/lake/artifacts/metrics", emulator.root)).unwrap();
    let store = storage::store_for(&url, &emulator.options).unwrap();
    let table: Arc<dyn ObjectStore> = Arc::new(PrefixStore::new(store, "lake/artifacts/metrics"));
    for version in 0..20u64 {
        let racers: Vec<_> = (0..4u8)
            .map(|writer| {
                let table = table.clone();
                tokio::spawn(async move {
                    let bytes = format!("{{\"writer\":{writer},\"version\":{version}}}");
                    let won = put_if_absent(&*table, &entry_location(version), bytes.as_bytes())
                        .await
                        .unwrap();
                    (won, bytes)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for racer in racers {
            let (won, bytes) = racer.await.unwrap();
            if won {
                winners.push(bytes);
            }
        }
        assert_eq!(winners.len(), 1, "{}: version {version}: {winners:?}", emulator.root);
        let stored = table.get(&entry_location(version)).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored, winners[0].as_bytes(), "version {version}");
    }
    // A retried put meets its own entry (412): it won; another's loses.
    let location = entry_location(100);
    assert!(put_if_absent(&*table, &location, b"ours").await.unwrap());
    assert!(put_if_absent(&*table, &location, b"ours").await.unwrap());
    assert!(!put_if_absent(&*table, &location, b"theirs").await.unwrap());
}

fn numbers(from: i64, n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("x", ArrowType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(from..from + n))])
        .unwrap()
}

async fn open(url: &Url, emulator: &Emulator) -> DeltaTable {
    let mut table = DeltaTableBuilder::from_url(url.clone())
        .unwrap()
        .with_storage_options(emulator.options.clone())
        .build()
        .unwrap();
    table.load().await.unwrap();
    table
}

/// delta-rs makes and appends to a table through sluice's stores; two
/// writers then race for its next version with conditional puts, and the
/// table reads back at exactly the winner's version.
async fn a_delta_table_lives_on_the_store(emulator: &Emulator) {
    storage::register();
    let url = Url::parse(&format!("{}/lake/artifacts/data", emulator.root)).unwrap();
    let table =
        DeltaTable::try_from_url_with_storage_options(url.clone(), emulator.options.clone())
            .await
            .unwrap();
    let table =
        table.create().with_columns([StructField::new("x", DataType::LONG, false)]).await.unwrap();
    let table = table.write(vec![numbers(0, 10)]).await.unwrap();
    assert_eq!(table.version(), Some(1));

    let store = table.log_store().object_store(None);
    let commit = |who: &str| {
        format!(
            "{{\"commitInfo\":{{\"timestamp\":1,\"operation\":\"sluice test\",\"writer\":\"{who}\"}}}}\n"
        )
    };
    let (a, b) = (commit("a"), commit("b"));
    let next = entry_location(2);
    let (won_a, won_b) = tokio::join!(
        put_if_absent(store.as_ref(), &next, a.as_bytes()),
        put_if_absent(store.as_ref(), &next, b.as_bytes()),
    );
    assert!(won_a.unwrap() ^ won_b.unwrap(), "exactly one writer takes version 2");

    let reopened = open(&url, emulator).await;
    assert_eq!(reopened.version(), Some(2));
    let rows =
        sluice::lake::delta::scan::Select::columns(sluice::lake::delta::scan::columns(&["x"]))
            .collect(&reopened, "data")
            .await
            .unwrap();
    let mut values: Vec<i64> = rows
        .iter()
        .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
        .collect();
    values.sort_unstable();
    assert_eq!(values, (0..10).collect::<Vec<_>>());
    python_readers_agree(&url, emulator);
}

/// Python's deltalake and polars read the table at the store with the
/// same options: version 2, the ten rows.
fn python_readers_agree(url: &Url, emulator: &Emulator) {
    let Some(python) = std::env::var_os("SLUICE_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "SLUICE_PYTHON is not set in CI: the Python readers cannot be checked (run `make test`)"
        );
        eprintln!("skipping the Python readers: SLUICE_PYTHON not set (use `make test`)");
        return;
    };
    let script = r#"
import json, sys
import polars as pl
from deltalake import DeltaTable
url, options = sys.argv[1], json.loads(sys.argv[2])
table = DeltaTable(url, storage_options=options)
rows = sorted(table.to_pyarrow_table()["x"].to_pylist())
frame = pl.read_delta(url, storage_options=options)
print(json.dumps({"version": table.version(), "rows": rows, "polars": sorted(frame["x"].to_list())}))
"#;
    let options = serde_json::to_string(&emulator.options).unwrap();
    let out = std::process::Command::new(python)
        .args(["-c", script, url.as_str(), &options])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows: Vec<i64> = (0..10).collect();
    assert_eq!(read["version"], 2, "{read}");
    assert_eq!(read["rows"], serde_json::json!(rows), "{read}");
    assert_eq!(read["polars"], serde_json::json!(rows), "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_racing_writers_create_each_log_entry_once() {
    if moto_available() {
        racing_writers_create_each_log_entry_once(&moto("race").await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_azure_racing_writers_create_each_log_entry_once() {
    if azurite_available() {
        racing_writers_create_each_log_entry_once(&azurite("race").await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_a_delta_table_lives_on_the_store() {
    if moto_available() {
        a_delta_table_lives_on_the_store(&moto("table").await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_azure_a_delta_table_lives_on_the_store() {
    if azurite_available() {
        a_delta_table_lives_on_the_store(&azurite("table").await).await;
    }
}

/// A whole lake at the store's prefix, opened by its URL: `init` makes
/// every table there and nothing on the local disk; puts de-duplicate,
/// a fresh process (a new `Lake`) reads them back by id and by SQL;
/// compaction keeps every row once; vacuum (within retention) and the
/// integrity check find the lake whole.
async fn a_lake_lives_on_the_store(emulator: &Emulator) {
    use sluice::lake::LakeRoot;
    let url = Url::parse(&format!("{}/lakes/one", emulator.root)).unwrap();
    let root = LakeRoot::store(url.clone(), emulator.options.clone()).unwrap();
    let (lake, report) = sluice::Lake::init(&root).await.unwrap();
    assert!(report.created.iter().any(|t| t == "commits"), "{report:?}");
    let (_, again) = sluice::Lake::init(&root).await.unwrap();
    assert!(again.created.is_empty(), "init is idempotent: {again:?}");
    let store = storage::store_for(&url, &emulator.options).unwrap();
    let journal = object_store::path::Path::from("lakes/one/orchestration/commits/_delta_log");
    let listed = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(&journal)));
    assert!(!listed.await.unwrap().is_empty(), "the journal is in the store");

    let batch = crate::common::metrics(&lake, 1, 8);
    let first = lake.put(&batch[..5]).await.unwrap();
    assert_eq!(first.rows_added["metrics"], 5);
    let second = lake.put(&batch).await.unwrap();
    assert_eq!((second.rows_added["metrics"], second.already_present), (3, 5));

    let fresh = sluice::Lake::open(&root).await.unwrap();
    for artifact in &batch {
        assert_eq!(&fresh.get(artifact.id).await.unwrap(), artifact);
    }
    assert_eq!(crate::common::distinct_and_rows(&fresh).await, "d,n\n8,8\n");
    let tables = fresh.table_infos().await.unwrap();
    let metrics = tables.iter().find(|t| t.name == "metrics").unwrap();
    assert_eq!((metrics.rows, metrics.files), (8, 2));

    let options =
        sluice::maintenance::CompactOptions { table: Some("metrics".into()), ..Default::default() };
    let compacted = sluice::maintenance::compact::compact(&fresh, &options).await.unwrap();
    assert_eq!(compacted[0].files_after, 1, "{compacted:?}");
    let reopened = sluice::Lake::open(&root).await.unwrap();
    assert_eq!(crate::common::distinct_and_rows(&reopened).await, "d,n\n8,8\n");
    let vacuumed =
        sluice::maintenance::vacuum::vacuum(&reopened, &Default::default()).await.unwrap();
    assert!(vacuumed.files.iter().all(|(_, files)| files.is_empty()), "within retention");
    let integrity = sluice::maintenance::integrity::check(&reopened).await.unwrap();
    assert!(integrity.is_clean(), "{integrity:?}");
    let history =
        sluice::maintenance::history::table_history(&reopened, "metrics", None).await.unwrap();
    assert!(history.len() >= 4, "create, two puts, a compaction: {history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_a_lake_lives_on_the_store() {
    if moto_available() {
        a_lake_lives_on_the_store(&moto("lake").await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_azure_a_lake_lives_on_the_store() {
    if azurite_available() {
        a_lake_lives_on_the_store(&azurite("lake").await).await;
    }
}

/// Requests are the cost of a lake in a store, counted in the seam. A
/// `put` writes its two data files, two log entries and two key-filter
/// bundles (and now and then a pack or a checkpoint), and the typical put
/// makes no more requests of any kind late in the lake's life than early;
/// opening the lake and reading by id write nothing, and a second read by
/// id costs no more than the first. (A fresh process's figures are the CLI
/// suite's, `stores::…a_fresh_process_s_requests_stay_flat…`.)
async fn store_requests_are_counted(emulator: &Emulator) {
    use sluice::lake::LakeRoot;
    use sluice::lake::io::requests::{Requests, counted_at};
    let url = Url::parse(&format!("{}/lakes/budget", emulator.root)).unwrap();
    let root = LakeRoot::store(url.clone(), emulator.options.clone()).unwrap();
    let (lake, _) = sluice::Lake::init(&root).await.unwrap();
    let mut ids = Vec::new();
    let mut puts = Vec::new();
    for step in 0..30 {
        let batch = crate::common::metrics(&lake, step, 3);
        let before = counted_at(&url);
        lake.put(&batch).await.unwrap();
        // A checkpoint the put started is written in the background: its
        // requests are counted with the put that started it.
        lake.settle().await;
        puts.push(counted_at(&url).since(&before));
        ids.push(batch[0].id);
    }
    let before = counted_at(&url);
    let fresh = sluice::Lake::open(&root).await.unwrap();
    let opened = counted_at(&url).since(&before);
    let before = counted_at(&url);
    fresh.get(ids[0]).await.unwrap();
    let first_get = counted_at(&url).since(&before);
    let before = counted_at(&url);
    fresh.get(ids[29]).await.unwrap();
    let next_get = counted_at(&url).since(&before);
    eprintln!(
        "{}: put #5 {}, put #30 {}; open {}; first get {}; next get {}",
        emulator.root, puts[4], puts[29], opened, first_get, next_get
    );
    // Two data files, two log entries, two key-filter bundles; now and then
    // a pack of a table's filters (every 8 versions) or a checkpoint (every
    // 10: the checkpoint and its pointer).
    for put in &puts {
        assert!((6..=12).contains(&put.put), "{put}");
    }
    // The typical put (the median, past those now-and-then writes) costs
    // the same early and late in the lake's life.
    let median = |puts: &[Requests], kind: fn(&Requests) -> u64| {
        let mut counts: Vec<u64> = puts.iter().map(kind).collect();
        counts.sort_unstable();
        counts[counts.len() / 2]
    };
    let (early, late) = (&puts[1..11], &puts[20..30]);
    for (kind, of) in [
        ("GET", (|r: &Requests| r.get) as fn(&Requests) -> u64),
        ("HEAD", |r: &Requests| r.head),
        ("LIST", |r: &Requests| r.list),
        ("all", |r: &Requests| r.total()),
    ] {
        let (early, late) = (median(early, of), median(late, of));
        assert!(late <= early, "a put's {kind} requests grew with the lake: {early} then {late}");
    }
    assert_eq!(opened.put + first_get.put + next_get.put, 0);
    assert!(next_get.total() <= first_get.total(), "{first_get} then {next_get}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_store_requests_are_counted() {
    if moto_available() {
        store_requests_are_counted(&moto("budget").await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_azure_store_requests_are_counted() {
    if azurite_available() {
        store_requests_are_counted(&azurite("budget").await).await;
    }
}

/// Staging in the store: each unit one object, put if absent (written and
/// sealed by one request), committed exactly once (copies and failures
/// included; single units and batches); a worker that dies before its put
/// leaves nothing; a damaged unit is quarantined in the store with its
/// reason and the rest commits; a sequence interrupted after some tables is
/// finished by `recover` from its manifest in the store; a unit is sealed
/// once; staging is empty at the end.
async fn staged_units_commit_through_the_store(emulator: &Emulator) {
    use sluice::lake::LakeRoot;
    use sluice::staging::bundle::{pack, unpack};
    use sluice::staging::synthetic::{self, SyntheticSpec};
    use sluice::staging::{StagingArea, StagingWriter, SyncPolicy};
    let url = Url::parse(&format!("{}/lakes/staged", emulator.root)).unwrap();
    let root = LakeRoot::store(url.clone(), emulator.options.clone()).unwrap();
    let (lake, _) = sluice::Lake::init(&root).await.unwrap();
    let writer = StagingWriter::in_area(
        StagingArea::of_lake(lake.root()),
        lake.registry().clone(),
        SyncPolicy::Never,
    );
    let spec = SyntheticSpec {
        duplicate_fraction: 0.3,
        fail_fraction: 0.1,
        crash_fraction: 0.1,
        seed: 21,
        ..SyntheticSpec::default()
    };
    let staged = synthetic::stage_range(&writer, &spec, lake.registry(), 0..30).unwrap();
    assert!(staged.crashed > 0 && staged.succeeded > 0, "{staged:?}");
    let batched = SyntheticSpec { step: 2, batch: 4, seed: 22, ..spec.clone() };
    let batches = synthetic::stage_range(&writer, &batched, lake.registry(), 0..12).unwrap();

    // A unit is sealed once: the same bytes again are a retried put of the
    // same unit (accepted, nothing changes); other bytes under its run id
    // are another worker's, refused.
    let mut sealed_one = (0..30)
        .map(|i| synthetic::execution(&spec, lake.registry(), i).unwrap())
        .find(|(_, crashed)| !crashed)
        .unwrap()
        .0;
    writer.write(&sealed_one).unwrap();
    sealed_one.execution.worker_id = Some("another-host:1".into());
    let err = writer.write(&sealed_one).unwrap_err().to_string();
    assert!(err.contains("already sealed"), "{err}");

    let area = StagingArea::of_lake(lake.root());
    let scan = sluice::staging::scan::scan_area(&area, None).await.unwrap();
    assert!(scan.unsealed.is_empty() && scan.foreign.is_empty(), "{scan:?}");
    let batch_units = (12 - batches.crashed).div_ceil(4);
    assert_eq!(scan.sealed.len(), staged.succeeded + staged.failed + batch_units, "{scan:?}");

    // Damage one single unit's metrics file inside its object.
    let store = storage::store_for(&url, &emulator.options).unwrap();
    let mut damaged = false;
    for unit in scan.sealed.iter().filter(|d| !d.is_batch()) {
        let object = object_store::path::Path::from(format!(
            "{}/_staging/{}",
            url.path().trim_matches('/'),
            unit.relative()
        ));
        let bytes = store.get(&object).await.unwrap().bytes().await.unwrap();
        let mut files: Vec<(String, Vec<u8>)> =
            unpack(&bytes).unwrap().into_iter().map(|(n, b)| (n, b.to_vec())).collect();
        let Some((_, metrics)) = files.iter_mut().find(|(n, _)| n == "metrics.arrow") else {
            continue;
        };
        metrics.truncate(metrics.len() / 2);
        store.put(&object, pack(&files).into()).await.unwrap();
        damaged = true;
        break;
    }
    assert!(damaged, "a unit with metrics to damage");

    // A sequence stops after its first tables; recover finishes it from
    // the manifest it left in the store.
    let err =
        lake.commit().with_failpoint(Some("commit:index".into())).execute().await.unwrap_err();
    assert!(err.to_string().contains("table `index`"), "{err}");
    let report = lake.recover().execute().await.unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    let report = lake.commit().execute().await.unwrap();
    assert!(report.unsealed.is_empty(), "{report:?}");

    let executions = crate::commit::scalar(&lake, "SELECT count(*) FROM executions").await;
    let distinct =
        crate::commit::scalar(&lake, "SELECT count(DISTINCT execution_run_id) FROM executions")
            .await;
    assert_eq!(executions, distinct, "no execution twice");
    let expected = staged.succeeded + staged.failed - 1 + batches.succeeded + batches.failed;
    assert_eq!(executions, expected.to_string(), "{staged:?}");
    for (table, (rows, distinct)) in crate::commit::table_counts(&lake).await {
        assert_eq!(rows, distinct, "{table}: duplicate keys");
    }

    let doctor = sluice::commit::doctor::diagnose(&lake).await.unwrap();
    assert_eq!((doctor.sealed, doctor.unsealed.len()), (0, 0), "{doctor:?}");
    assert!(doctor.pending_manifests.is_empty(), "{doctor:?}");
    assert_eq!(doctor.quarantined.len(), 1, "{doctor:?}");
    let (at, reason) = &doctor.quarantined[0];
    assert!(reason.contains("metrics.arrow: unreadable Arrow IPC"), "{reason}");
    assert!(at.to_string_lossy().contains(".quarantine"), "{at:?}");
    // Requeued as it is, it is quarantined again, never committed.
    let report = lake.commit().with_requeue(true).execute().await.unwrap();
    assert_eq!((report.requeued.len(), report.quarantined.len()), (1, 1), "{report:?}");
    assert_eq!(crate::commit::scalar(&lake, "SELECT count(*) FROM executions").await, executions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_staged_units_commit_through_the_store() {
    if moto_available() {
        staged_units_commit_through_the_store(&moto("staged").await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_azure_staged_units_commit_through_the_store() {
    if azurite_available() {
        staged_units_commit_through_the_store(&azurite("staged").await).await;
    }
}
