//! The Azure queue backend against a real Azurite (`scripts/azurite.sh up`,
//! which `.ci/run` runs): queue semantics (receive, visibility timeout,
//! dequeue count, nack, dead letter, retry) and blobs ingested exactly once
//! with the lake on local disk. Without Azurite these tests fail in CI (`CI`
//! set) and are skipped with a note elsewhere.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path as BlobPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice::ingest::config::QueueConfig;
use sluice::ingest::{IngestConfig, Ingestor, Mode, Queue, ledger};

pub(crate) fn azurite_available() -> bool {
    let up = ["127.0.0.1:10000", "127.0.0.1:10001"].iter().all(|a| {
        a.parse().is_ok_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
        })
    });
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the Azure tests: start Azurite with `bash scripts/azurite.sh up`"
        );
        eprintln!("Azurite is not running here; skipping (bash scripts/azurite.sh up starts it)");
    }
    up
}

/// Queue and container names no other test run uses.
pub(crate) fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn blobs(container: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        MicrosoftAzureBuilder::new()
            .with_use_emulator(true)
            .with_container_name(container)
            .build()
            .unwrap(),
    )
}

fn queue_config(name: &str, container: &str, spool: &Path, toml_extra: &str) -> QueueConfig {
    let text = format!(
        "lake = \"lake\"\n[queue]\nkind = \"azure\"\npoll_ms = 20\nretry_delay_ms = 0\n\
         max_attempts = 2\nmax_deliveries = 2\nvisibility_timeout_secs = 1\n{toml_extra}\n[queue.azure]\n\
         queue = \"{name}\"\ncontainer = \"{container}\"\nuse_emulator = true\nspool = \"{}\"\n",
        spool.display()
    );
    IngestConfig::parse(&text, Path::new("/unused/lakehouse.toml")).unwrap().queue
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_queue_delivers_at_least_once_and_dead_letters_with_reasons() {
    if !azurite_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("sem");
    let q = Queue::open(&queue_config(&name, &name, dir.path(), "")).await.unwrap();
    let Queue::Azure(azure) = &q else { panic!("not the Azure queue: {q:?}") };
    let send = |text: &'static str| async move { azure.client().put(text).await.unwrap() };

    // Receive hides the message; a nack makes it visible again and the
    // service counts the delivery; at max_attempts it is dead-lettered.
    send("trips/a.csv").await;
    let first = q.receive(10).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].key(), first[0].attempt), ("trips/a.csv".to_owned(), 1));
    assert!(q.receive(10).await.unwrap().is_empty(), "a received message is invisible");
    assert!(!q.nack(&first[0], "bad").await.unwrap());
    let second = q.receive(10).await.unwrap();
    assert_eq!(second[0].attempt, 2, "the dequeue count is the attempt");
    assert!(q.nack(&second[0], "bad again").await.unwrap(), "dead at max_attempts");
    let dead = q.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].table.as_str(), dead[0].name.as_str()), ("trips", "a.csv"));
    assert!(dead[0].reason.contains("failed 2 times; last error: bad again"), "{dead:?}");
    let depth = q.depth().await.unwrap();
    assert_eq!((depth.waiting, depth.dead), (0, 1), "{depth:?}");

    // Retry puts it back as a new message: attempts start again.
    assert_eq!(q.retry_dead(&["trips/a.csv".into()]).await.unwrap(), vec!["trips/a.csv"]);
    assert!(q.dead_letters().await.unwrap().is_empty());
    let again = q.receive(10).await.unwrap();
    assert_eq!((again[0].key(), again[0].attempt), ("trips/a.csv".to_owned(), 1));

    // Not acknowledged within the visibility timeout: delivered again.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let redelivered = q.receive(10).await.unwrap();
    assert_eq!((redelivered[0].key(), redelivered[0].attempt), ("trips/a.csv".to_owned(), 2));
    // Both deliveries may be worked on at once: each has its own spool file,
    // so the second fetch never rewrites a file the first is still reading.
    assert_ne!(redelivered[0].path, again[0].path);
    q.ack(&redelivered[0]).await.unwrap();
    // The first delivery's receipt is stale now: its ack deletes nothing and fails nothing.
    q.ack(&again[0]).await.unwrap();
    assert_eq!(q.depth().await.unwrap().waiting, 0);

    // A message whose receivers keep dying (no ack, no nack) is not
    // processed forever: after max_deliveries it comes back exhausted, and
    // its nack (which ingestion sends without processing it) buries it.
    send("trips/kills.csv").await;
    for attempt in 1..=2 {
        let m = q.receive(1).await.unwrap();
        assert_eq!((m[0].attempt, m[0].exhausted.is_some()), (attempt, false));
        tokio::time::sleep(Duration::from_millis(1600)).await;
    }
    let last = q.receive(10).await.unwrap();
    let why = last[0].exhausted.clone().expect("exhausted after max_deliveries");
    assert!(q.nack(&last[0], &why).await.unwrap());
    // Messages naming no table's blob are dead-lettered at once, with why.
    send("loose.csv").await;
    send("trips/../../etc/passwd").await;
    assert!(q.receive(10).await.unwrap().is_empty());
    let dead = q.dead_letters().await.unwrap();
    let reasons: Vec<String> =
        dead.iter().map(|d| format!("{}/{}: {}", d.table, d.name, d.reason)).collect();
    assert_eq!(dead.len(), 3, "{reasons:#?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("trips/kills.csv: delivered 2 times without an outcome")),
        "{reasons:#?}"
    );
    assert!(reasons.iter().any(|r| r.contains("not under a table folder")), "{reasons:#?}");
    assert!(reasons.iter().any(|r| r.contains("not a safe blob path")), "{reasons:#?}");
    // Unrouted letters are never put back by --all-dead.
    assert_eq!(q.retry_dead(&[]).await.unwrap(), vec!["trips/kills.csv"]);
    assert_eq!(q.depth().await.unwrap().dead, 2);
}

fn trips_csv(first: u64, rows: u64) -> Vec<u8> {
    let mut out = String::from("trip_id,pickup_at,zone,fare\n");
    for i in first..first + rows {
        out.push_str(&format!(
            "{i},2024-01-02T08:{:02}:00Z,Zone{},{}.50\n",
            i % 60,
            i % 5,
            5 + i % 9
        ));
    }
    out.into_bytes()
}

async fn count(lake: &Path, sql: &str) -> String {
    super::ingest::sql_over(&lake.join("raw"), &["trips"], sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_named_on_an_azure_queue_are_ingested_exactly_once() {
    if !azurite_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("schemas")).unwrap();
    std::fs::write(root.join("schemas/trips.yaml"), super::ingest::TRIPS).unwrap();
    let name = unique("ing");
    std::fs::write(
        root.join("lakehouse.toml"),
        format!(
            "lake = \"lake\"\n[queue]\nkind = \"azure\"\npoll_ms = 20\nretry_delay_ms = 0\n\
             max_attempts = 2\nvisibility_timeout_secs = 60\nafter_ingest = \"delete\"\n\
             [queue.azure]\nqueue = \"{name}\"\ncontainer = \"{name}\"\nuse_emulator = true\n\
             [ingest]\nworkers = 2\nflush_interval_ms = 50\n"
        ),
    )
    .unwrap();
    let config = IngestConfig::load(&root.join("lakehouse.toml")).unwrap();
    // Opening creates the queues and the container.
    let ingestor = Ingestor::open(config.clone()).await.unwrap();
    let store = blobs(&name);
    for (blob, body) in [
        ("trips/2026/a.csv", trips_csv(0, 100)),
        ("trips/b.csv", trips_csv(100, 50)),
        ("trips/copy-of-a.csv", trips_csv(0, 100)),
        ("trips/bad.csv", b"trip_id,pickup_at,zone,fare\nx,2024-01-02T08:00:00Z,Z,1.0\n".to_vec()),
    ] {
        store.put(&BlobPath::from(blob), PutPayload::from(body)).await.unwrap();
    }
    let Queue::Azure(azure) = ingestor.queue() else { panic!("not the Azure queue") };
    let event = r#"{"eventType": "Microsoft.Storage.BlobCreated", "subject": "/blobServices/default/containers/CONTAINER/blobs/trips/b.csv"}"#
        .replace("CONTAINER", &name);
    let event_b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, event);
    for text in [
        "trips/2026/a.csv",
        &event_b64,
        r#"{"blob": "trips/copy-of-a.csv"}"#,
        "trips/bad.csv",
        "trips/missing.csv",
        "trips/2026/a.csv", // delivered twice
    ] {
        azure.client().put(text).await.unwrap();
    }

    let report = ingestor.run(Mode::Once, None).await.unwrap();
    assert_eq!((report.files, report.rows), (2, 150), "{report:?}");
    assert_eq!((report.duplicates, report.dead), (2, 2), "{report:?}");
    let lake = root.join("lake");
    assert_eq!(
        count(&lake, "SELECT count(*), count(DISTINCT trip_id) FROM trips").await,
        "150,150"
    );
    assert_eq!(
        count(&lake, "SELECT DISTINCT _source_file FROM trips ORDER BY 1").await,
        "trips/2026/a.csv\ntrips/b.csv"
    );
    let rows = ledger::read(&lake).await.unwrap();
    let status = |s: &str| rows.iter().filter(|r| r.status == s).count();
    assert_eq!((status("ok"), status("dead"), status("duplicate")), (2, 2, 1), "{rows:#?}");

    let status = ingestor.status().await.unwrap();
    assert_eq!((status.queue.waiting, status.queue.dead), (0, 2), "every message settled");
    let reason = |file: &str| {
        status
            .dead_letters
            .iter()
            .find(|d| d.name == file)
            .map(|d| d.reason.clone())
            .unwrap_or_default()
    };
    assert!(reason("bad.csv").contains("not a valid int64"), "{:?}", status.dead_letters);
    assert!(reason("missing.csv").contains("does not exist"), "{:?}", status.dead_letters);
    // after_ingest = delete: ingested blobs are gone, failed ones kept.
    assert!(store.head(&BlobPath::from("trips/2026/a.csv")).await.is_err());
    assert!(store.head(&BlobPath::from("trips/bad.csv")).await.is_ok());
    let spool = config.queue.azure.as_ref().unwrap().spool.clone();
    let left = std::fs::read_dir(&spool).map_or(0, |d| d.count());
    assert_eq!(left, 0, "spool files are removed after ack and nack");

    // Nothing lands twice when the same blobs are announced again later.
    azure.client().put("trips/b.csv").await.unwrap();
    let again = ingestor.run(Mode::Once, None).await.unwrap();
    assert_eq!((again.files, again.duplicates), (0, 1), "{again:?}");
    assert_eq!(count(&lake, "SELECT count(*) FROM trips").await, "150");
}
