//! The object-store half of the log-entry seam against a real S3 emulator
//! (the moto server, `bash scripts/moto.sh up`, which `.ci/run` runs):
//! conditional puts create each Delta log entry exactly once among racing
//! writers, and a put that finds its own entry (a retry answered 412) is
//! told it won. Without moto these tests fail in CI (`CI` set) and are
//! skipped with a note elsewhere.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice::lake::log_entry::{entry_location, put_if_absent};

fn endpoint() -> String {
    let port = std::env::var("SLUICE_MOTO_PORT").unwrap_or_else(|_| "5555".into());
    format!("http://127.0.0.1:{port}")
}

fn moto_available() -> bool {
    let address = endpoint().trim_start_matches("http://").to_owned();
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

/// A new bucket on moto (its name unique to this test run), as a store.
async fn bucket(name: &str) -> Arc<dyn ObjectStore> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let bucket = format!("{name}-{}-{nanos}", std::process::id());
    let created =
        reqwest::Client::new().put(format!("{}/{bucket}", endpoint())).send().await.unwrap();
    assert!(created.status().is_success(), "creating bucket {bucket}: {}", created.status());
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(endpoint())
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id("sluice")
            .with_secret_access_key("sluice")
            .build()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_conditional_puts_on_s3_create_each_log_entry_once() {
    if !moto_available() {
        return;
    }
    let store = bucket("race").await;
    let table: Arc<dyn ObjectStore> = Arc::new(PrefixStore::new(store, "lake/artifacts/metrics"));
    for version in 0..30u64 {
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
        assert_eq!(winners.len(), 1, "version {version}: {winners:?}");
        let stored = table.get(&entry_location(version)).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored, winners[0].as_bytes(), "version {version}");
    }
}

#[tokio::test]
async fn a_put_that_finds_its_own_entry_on_s3_is_told_it_won() {
    if !moto_available() {
        return;
    }
    let table = bucket("retry").await;
    let location = entry_location(7);
    assert!(put_if_absent(&*table, &location, b"ours").await.unwrap());
    // What a retried request meets: S3 refuses the second conditional put
    // (412), and reading the entry shows it is ours.
    assert!(put_if_absent(&*table, &location, b"ours").await.unwrap());
    assert!(!put_if_absent(&*table, &location, b"theirs").await.unwrap());
    let stored = table.get(&location).await.unwrap().bytes().await.unwrap();
    assert_eq!(stored, &b"ours"[..]);
}
