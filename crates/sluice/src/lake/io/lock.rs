//! The lake's writer lock: a courtesy, not a guarantee.
//!
//! One writer at a time (a commit, a recover or a direct put) keeps two
//! processes from doing the same work twice and keeps readers' snapshots
//! exact. Correctness does not depend on it: every table commit is made on
//! top of exactly the version its de-duplication read (see
//! [`append`](crate::lake::append)), so two writers on hosts that do not share the
//! lock (NFS with `local_lock`, Lustre `localflock`, a removed lock file)
//! still lose and duplicate nothing.
//!
//! The holder writes `host pid since` into the lock file, so a waiting writer
//! can say on stderr who it waits for. `SLUICE_UNSAFE_NO_LOCK=1` disables the
//! lock entirely: a test-only switch, used to prove the claim above.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The environment variable that disables the lock (tests only).
pub const NO_LOCK_ENV: &str = "SLUICE_UNSAFE_NO_LOCK";

/// Held while a writer works; released on drop (or by the OS if the holder
/// dies).
#[derive(Debug)]
pub(crate) struct WriterLock(Option<std::fs::File>);

impl WriterLock {
    fn open(root: &Path) -> Result<(std::fs::File, PathBuf)> {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let path = root.join(".commit.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok((file, path))
    }

    /// Wait until the lock is free, at most `limit` (`None`: no limit),
    /// polling without blocking the runtime. While waiting it warns once
    /// who holds the lock.
    pub(crate) async fn wait_at_most(lake_root: &Path, limit: Option<Duration>) -> Result<Self> {
        if std::env::var_os(NO_LOCK_ENV).is_some_and(|v| v == "1") {
            return Ok(WriterLock(None));
        }
        let (mut file, path) = Self::open(&crate::lake::layout::staging_root(lake_root))?;
        let started = Instant::now();
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    record_holder(&mut file);
                    return Ok(WriterLock(Some(file)));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = read_holder(&path);
                    if limit.is_some_and(|l| started.elapsed() >= l) {
                        return Err(Error::LockTimeout { path, holder, waited: started.elapsed() });
                    }
                    if !told {
                        // A warning, not a print: the CLI shows it above its
                        // progress bars, never inside one.
                        tracing::warn!(
                            "waiting for the lake's writer lock {} (held by {holder}); \
                             Ctrl-C to stop, --wait <seconds> to give up after a while",
                            path.display()
                        );
                        told = true;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
            }
        }
    }
}

/// Write `host pid since` into the (locked) file. Best effort: it only
/// serves messages.
fn record_holder(file: &mut std::fs::File) {
    use std::io::Seek;
    let text = format!(
        "{} {} {}\n",
        crate::host::hostname(),
        std::process::id(),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let _ = file
        .set_len(0)
        .and_then(|()| file.seek(std::io::SeekFrom::Start(0)))
        .and_then(|_| file.write_all(text.as_bytes()))
        .and_then(|()| file.flush());
}

fn read_holder(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(host), Some(pid), Some(since)) => format!("pid {pid} on {host} since {since}"),
        _ => "an unknown process".into(),
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if let Some(file) = &self.0 {
            let _ = file.unlock();
        }
    }
}
