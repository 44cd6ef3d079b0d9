//! A tip's log entries, written put-if-absent on the calling thread.
//!
//! Delta's one guarantee for concurrent writers is that a version's log
//! entry `_delta_log/{version:020}.json` is created by exactly one of them.
//! On a file system, `object_store` gives it by writing a temporary file and
//! hard-linking it to the entry's name (`link(2)` fails when the name
//! exists), each step on a blocking-pool thread: two thread hand-offs per
//! commit, and on this machine's virtual CPUs a wake-up is the costly part
//! of a small commit. This does the same three system calls (write, link,
//! unlink) where the commit runs. A commit entry is a few hundred bytes;
//! blocking the async thread for it costs less than handing it off.
//!
//! The temporary file is named `.{version:020}.json.{uuid}.tmp`: hidden,
//! unique per attempt, and matching no Delta log file pattern, so readers
//! (delta-rs, Spark, DuckDB) skip one left by a crash between the write and
//! the unlink.
//!
//! On an object store the same guarantee is a conditional put
//! ([`put_if_absent`]: `PutMode::Create`, S3's and Azure's
//! `If-None-Match: *`). There a request can fail *after* it succeeded — a
//! retried put is answered 412 or 409 for its own first write, a timeout
//! or a 5xx comes after the object was stored — so a failed put decides
//! nothing: the entry is read, and it is ours exactly when it holds our
//! bytes (every entry carries its own commit time and operation id).

use std::io;
use std::path::{Path, PathBuf};

use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};

use crate::error::{Error, Result};

/// How many times a log entry whose put failed, and which reading shows
/// absent, is put again before the failure is reported.
const PUT_ATTEMPTS: usize = 4;

/// What a file of a Delta log is, by its name: the commit of a version
/// (`{version:020}.json`) or a checkpoint of one
/// (`{version:020}.checkpoint….parquet`, single or in parts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFile {
    /// A version's commit entry.
    Commit(u64),
    /// A checkpoint of a version (or a part of one).
    Checkpoint(u64),
}

/// What the log file named `name` is (`None`: not a commit or checkpoint,
/// e.g. `_last_checkpoint`).
pub(crate) fn log_file(name: &str) -> Option<LogFile> {
    let digits = name.get(..20).filter(|v| v.bytes().all(|b| b.is_ascii_digit()))?;
    let version = digits.parse().ok()?;
    let rest = &name[20..];
    if rest == ".json" {
        Some(LogFile::Commit(version))
    } else if rest.starts_with(".checkpoint.") && rest.ends_with(".parquet") {
        Some(LogFile::Checkpoint(version))
    } else {
        None
    }
}

/// The location of a version's log entry in a store rooted at its table.
pub fn entry_location(version: u64) -> StorePath {
    StorePath::from(format!("_delta_log/{version:020}.json"))
}

/// Create `location` on `store` with `bytes` unless it exists: `Ok(true)`
/// when this call created it, `Ok(false)` when another writer had. A put
/// that fails is settled by reading the entry, never guessed (see [the
/// module](self)): our bytes → ours; other bytes → theirs; absent → put
/// again. Only a refusal that cannot have stored anything (permission,
/// credentials, an unsupported request) is reported without reading.
pub async fn put_if_absent(
    store: &dyn ObjectStore,
    location: &StorePath,
    bytes: &[u8],
) -> Result<bool> {
    let payload = PutPayload::from(bytes.to_vec());
    let mut failure = None;
    for _ in 0..PUT_ATTEMPTS {
        let error = match store.put_opts(location, payload.clone(), PutMode::Create.into()).await {
            Ok(_) => return Ok(true),
            Err(e) if stores_nothing(&e) => {
                return Err(Error::Store { what: format!("creating {location}"), source: e });
            }
            Err(e) => e,
        };
        tracing::debug!(entry = %location, error = %error, "a conditional put failed; reading the entry");
        match read_entry(store, location).await? {
            Some(found) => return Ok(found == bytes),
            None => failure = Some(error),
        }
    }
    let source = failure.expect("every attempt failed");
    Err(Error::Store {
        what: format!("creating {location} ({PUT_ATTEMPTS} attempts, the entry still absent)"),
        source,
    })
}

/// Whether a failed put certainly stored nothing.
fn stores_nothing(error: &object_store::Error) -> bool {
    use object_store::Error::*;
    matches!(
        error,
        PermissionDenied { .. }
            | Unauthenticated { .. }
            | NotSupported { .. }
            | NotImplemented { .. }
            | InvalidPath { .. }
            | UnknownConfigurationKey { .. }
    )
}

/// The bytes of a log entry, `None` when it does not exist.
async fn read_entry(store: &dyn ObjectStore, location: &StorePath) -> Result<Option<Vec<u8>>> {
    let what = || format!("reading {location} to settle a failed conditional put");
    let found = match store.get(location).await {
        Ok(found) => found,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(source) => return Err(Error::Store { what: what(), source }),
    };
    let bytes = found.bytes().await.map_err(|source| Error::Store { what: what(), source })?;
    Ok(Some(bytes.to_vec()))
}

/// The path of a version's log entry.
pub(crate) fn entry_path(table_dir: &Path, version: u64) -> PathBuf {
    table_dir.join("_delta_log").join(format!("{version:020}.json"))
}

/// Create the log entry of `version` with `bytes` unless it exists:
/// `Ok(true)` when this call created it, `Ok(false)` when another writer
/// had (the version is theirs; nothing of ours is left behind).
pub fn write_if_absent(table_dir: &Path, version: u64, bytes: &[u8]) -> Result<bool> {
    let entry = entry_path(table_dir, version);
    let tmp =
        entry.with_file_name(format!(".{version:020}.json.{}.tmp", uuid::Uuid::new_v4().simple()));
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    let linked = std::fs::hard_link(&tmp, &entry);
    if let Err(e) = std::fs::remove_file(&tmp) {
        tracing::warn!(file = %tmp.display(), error = %e, "could not remove a temporary log file");
    }
    match linked {
        Ok(()) => Ok(true),
        // "Already exists" can be about our own entry: an NFS client that
        // retransmits a link the server already made is told EEXIST. Who
        // won is decided by reading the entry: ours holds exactly our bytes
        // (every entry carries its own commit time and operation id).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match std::fs::read(&entry) {
            Ok(found) => Ok(found == bytes),
            Err(read) => Err(Error::io(&entry, read)),
        },
        Err(e) => Err(Error::io(&entry, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_writer_creates_an_entry() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("_delta_log")).unwrap();
        assert!(write_if_absent(dir.path(), 3, b"first").unwrap());
        assert!(!write_if_absent(dir.path(), 3, b"second").unwrap());
        assert_eq!(std::fs::read(entry_path(dir.path(), 3)).unwrap(), b"first");
        // Nothing but the entry is left in the log.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("_delta_log"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![format!("{:020}.json", 3)]);
    }

    #[test]
    fn an_entry_already_holding_our_bytes_is_ours() {
        // A retransmitted link (NFS) or retried conditional put reports the
        // entry exists when it is the writer's own: that is a win, and the
        // files it names must not be given up.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("_delta_log")).unwrap();
        assert!(write_if_absent(dir.path(), 4, b"ours").unwrap());
        assert!(write_if_absent(dir.path(), 4, b"ours").unwrap());
        assert!(!write_if_absent(dir.path(), 4, b"theirs").unwrap());
    }

    #[test]
    fn racing_writers_create_one_entry() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("_delta_log")).unwrap();
        let won: usize = std::thread::scope(|s| {
            let racers: Vec<_> = (0..8u8)
                .map(|i| {
                    let root = dir.path();
                    s.spawn(move || usize::from(write_if_absent(root, 7, &[i]).unwrap()))
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).sum()
        });
        assert_eq!(won, 1);
        assert_eq!(std::fs::read(entry_path(dir.path(), 7)).unwrap().len(), 1);
    }

    mod on_a_store {
        use std::sync::atomic::Ordering;

        use object_store::ObjectStoreExt;

        use super::super::*;
        use crate::lake::io::faulty_store::{FaultyStore, PutFault};

        async fn entry(store: &FaultyStore, version: u64) -> Option<Vec<u8>> {
            read_entry(store, &entry_location(version)).await.unwrap()
        }

        #[tokio::test]
        async fn a_put_stored_then_failed_is_ours() {
            for fault in [
                PutFault::StoreThenTimeOut,
                PutFault::StoreThenPrecondition,
                PutFault::StoreThenAlreadyExists,
            ] {
                let store = FaultyStore::default();
                store.fail_puts([fault]);
                let won = put_if_absent(&store, &entry_location(1), b"ours").await.unwrap();
                assert!(won, "{fault:?}: our own entry was taken for another's");
                assert_eq!(entry(&store, 1).await.as_deref(), Some(&b"ours"[..]));
                assert_eq!(store.put_calls.load(Ordering::SeqCst), 1, "{fault:?}: put twice");
            }
        }

        #[tokio::test]
        async fn another_writers_entry_is_theirs_however_the_store_says_so() {
            for fault in [None, Some(PutFault::ExistsAsPrecondition), Some(PutFault::Conflict)] {
                let store = FaultyStore::default();
                store.put(&entry_location(2), b"theirs".to_vec().into()).await.unwrap();
                store.fail_puts(fault);
                let won = put_if_absent(&store, &entry_location(2), b"ours").await.unwrap();
                assert!(!won, "{fault:?}: another writer's entry was taken for ours");
                assert_eq!(entry(&store, 2).await.as_deref(), Some(&b"theirs"[..]));
            }
        }

        #[tokio::test]
        async fn a_put_that_stored_nothing_is_made_again() {
            for fault in [PutFault::TimeOutBeforeStoring, PutFault::Conflict] {
                let store = FaultyStore::default();
                store.fail_puts([fault, fault]);
                let won = put_if_absent(&store, &entry_location(3), b"ours").await.unwrap();
                assert!(won, "{fault:?}");
                assert_eq!(store.put_calls.load(Ordering::SeqCst), 3);
                assert_eq!(entry(&store, 3).await.as_deref(), Some(&b"ours"[..]));
            }
        }

        #[tokio::test]
        async fn a_put_that_keeps_failing_is_an_error_naming_the_entry() {
            let store = FaultyStore::default();
            store.fail_puts([PutFault::TimeOutBeforeStoring; PUT_ATTEMPTS]);
            let err = put_if_absent(&store, &entry_location(4), b"x").await.unwrap_err();
            let text = err.to_string();
            assert!(text.contains("_delta_log/00000000000000000004.json"), "{text}");
            assert!(text.contains("4 attempts") && text.contains("timed out"), "{text}");
            assert_eq!(entry(&store, 4).await, None);
        }

        #[tokio::test]
        async fn an_outcome_that_cannot_be_read_is_not_guessed() {
            let store = FaultyStore::default();
            store.fail_puts([PutFault::StoreThenTimeOut]);
            store.fail_gets(1);
            let err = put_if_absent(&store, &entry_location(5), b"ours").await.unwrap_err();
            assert!(err.to_string().contains("to settle a failed conditional put"), "{err}");
        }

        #[tokio::test]
        async fn a_refused_put_is_reported_without_reading() {
            let store = FaultyStore::default();
            store.fail_puts([PutFault::Denied]);
            let err = put_if_absent(&store, &entry_location(6), b"ours").await.unwrap_err();
            assert!(err.to_string().contains("privileges"), "{err}");
            assert_eq!(store.get_calls.load(Ordering::SeqCst), 0);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn racing_writers_on_a_store_create_one_entry() {
            let store = std::sync::Arc::new(FaultyStore::default());
            for version in 0..20u64 {
                let racers: Vec<_> = (0..6u8)
                    .map(|i| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            let bytes = [i, version as u8];
                            let won = put_if_absent(&*store, &entry_location(version), &bytes)
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
                assert_eq!(winners.len(), 1, "version {version}");
                assert_eq!(entry(&store, version).await.as_deref(), Some(&winners[0][..]));
            }
        }
    }

    #[test]
    fn a_missing_log_folder_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_if_absent(dir.path(), 0, b"x").unwrap_err().to_string();
        assert!(err.contains("_delta_log"), "{err}");
    }
}
