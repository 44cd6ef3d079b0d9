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

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

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

    #[test]
    fn a_missing_log_folder_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_if_absent(dir.path(), 0, b"x").unwrap_err().to_string();
        assert!(err.contains("_delta_log"), "{err}");
    }
}
