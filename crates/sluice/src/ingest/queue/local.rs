//! The local queue: a landing directory with at-least-once delivery,
//! visibility timeouts, dequeue counts and a dead-letter area — kept in file
//! names, so several ingest processes on one filesystem share it safely.
//!
//! ```text
//! landing/<table>/<file>                                   new files (users drop them here)
//! landing/.sluice/inflight/<table>/<n>~<ms>~<owner>~<file>  claimed: attempt n, at ms, by owner
//! landing/.sluice/retry/<table>/<n>~<ms>~<file>             failed or timed out after n attempts; due at ms
//! landing/.sluice/dead/<table>/<file> (+ <file>.reason)     gave up after max_attempts
//! landing/.sluice/done/<table>/<file>                       ingested (after_ingest = archive)
//! ```
//!
//! A claim is one `rename` into `inflight/`: of two processes renaming the
//! same file, exactly one succeeds. A claim not acknowledged within the
//! visibility timeout — or whose owner is a process of this host that no
//! longer exists — is moved back to `retry/` by whoever notices. Delivery is
//! therefore at least once; exactly once comes from the commit (see
//! [`crate::ingest::writer`]), which never adds a file whose key the table already
//! records. A file is claimed only after its size and modification time have
//! stayed the same for `settle_ms` (it may still be being written). Names
//! starting with `.` are never claimed (writers' temporary files).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{DeadLetter, Delivery, Message, QueueDepth, exhausted};
use crate::error::{Error, Result};
use crate::ingest::config::QueueConfig;

const STATE_DIR: &str = ".sluice";
pub use super::UNROUTED;

/// The landing-directory queue.
#[derive(Debug, Clone)]
pub struct LocalQueue {
    landing: PathBuf,
    config: QueueConfig,
    owner: String,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

fn files_in(dir: &Path) -> Vec<(String, std::fs::Metadata)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<(String, std::fs::Metadata)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let meta = std::fs::symlink_metadata(e.path()).ok()?;
            Some((name, meta))
        })
        .filter(|(name, _)| !name.starts_with('.'))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn rename(from: &Path, to: &Path) -> Result<bool> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    match std::fs::rename(from, to) {
        Ok(()) => Ok(true),
        // Someone else moved it first.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(from, e)),
    }
}

impl LocalQueue {
    /// The queue of a landing directory.
    pub fn new(config: &QueueConfig) -> Result<LocalQueue> {
        let landing = config.landing.clone();
        std::fs::create_dir_all(&landing).map_err(|e| Error::io(&landing, e))?;
        Ok(LocalQueue { landing, config: config.clone(), owner: crate::host::owner() })
    }

    fn state(&self, area: &str) -> PathBuf {
        self.landing.join(STATE_DIR).join(area)
    }

    /// The landing directory.
    pub fn landing(&self) -> &Path {
        &self.landing
    }

    /// How long a file must stay unchanged before it is claimed.
    pub fn settle(&self) -> Duration {
        Duration::from_millis(self.config.settle_ms)
    }

    /// Move expired claims back to `retry/`. Returns how many.
    pub fn reap(&self) -> Result<usize> {
        let timeout = self.config.visibility_timeout().as_millis();
        let now = now_ms();
        let mut moved = 0;
        for (table, _) in files_in(&self.state("inflight")) {
            let dir = self.state("inflight").join(&table);
            for (entry, _) in files_in(&dir) {
                let mut parts = entry.splitn(4, '~');
                let (Some(n), Some(at), Some(owner), Some(name)) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let expired = at.parse::<u128>().is_ok_and(|at| now.saturating_sub(at) > timeout);
                if expired || (owner != self.owner && crate::host::owner_is_dead(owner)) {
                    let to = self.state("retry").join(&table).join(format!("{n}~0~{name}"));
                    if rename(&dir.join(&entry), &to)? {
                        tracing::info!(
                            table,
                            file = name,
                            "a claim expired; the file will be delivered again"
                        );
                        moved += 1;
                    }
                }
            }
        }
        Ok(moved)
    }

    /// Claim up to `max` files: retries first, then settled new files.
    /// Files outside a table folder and symlinks are dead-lettered at once.
    pub fn receive(&self, max: usize) -> Result<Vec<Message>> {
        let mut out = Vec::new();
        let retry = self.state("retry");
        for (table, _) in files_in(&retry) {
            for (entry, _) in files_in(&retry.join(&table)) {
                if out.len() >= max {
                    return Ok(out);
                }
                let mut parts = entry.splitn(3, '~');
                let (Some(n), Some(due), Some(name)) = (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                if due.parse::<u128>().is_ok_and(|due| due > now_ms()) {
                    continue; // backing off
                }
                let attempts = n.parse::<u32>().unwrap_or(0);
                if let Some(mut m) =
                    self.claim(&retry.join(&table).join(&entry), &table, name, attempts)?
                {
                    m.exhausted = exhausted(attempts, self.config.max_deliveries);
                    out.push(m);
                }
            }
        }
        let settle = Duration::from_millis(self.config.settle_ms);
        for (table, meta) in files_in(&self.landing) {
            let path = self.landing.join(&table);
            if !meta.is_dir() {
                if meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|a| a >= settle)
                {
                    self.dead_letter_path(
                        &path,
                        UNROUTED,
                        &table,
                        "a file directly in the landing zone: put files under landing/<table>/",
                    )?;
                }
                continue;
            }
            for (name, meta) in files_in(&path) {
                if out.len() >= max {
                    return Ok(out);
                }
                let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
                if age.is_none_or(|a| a < settle) {
                    continue; // may still be being written
                }
                let file = path.join(&name);
                if meta.file_type().is_symlink() || !meta.is_file() {
                    self.dead_letter_path(
                        &file,
                        &table,
                        &name,
                        "not a regular file (symlinks and folders are not ingested)",
                    )?;
                    continue;
                }
                if let Some(m) = self.claim(&file, &table, &name, 0)? {
                    out.push(m);
                }
            }
        }
        Ok(out)
    }

    fn claim(
        &self,
        from: &Path,
        table: &str,
        name: &str,
        attempts: u32,
    ) -> Result<Option<Message>> {
        let attempt = attempts + 1;
        let to = self.state("inflight").join(table).join(format!(
            "{attempt}~{}~{}~{name}",
            now_ms(),
            self.owner
        ));
        Ok(rename(from, &to)?.then(|| Message {
            table: table.to_owned(),
            name: name.to_owned(),
            attempt,
            path: to,
            delivery: Delivery::Local,
            exhausted: None,
        }))
    }

    /// The file was ingested (or found already ingested): archive or delete it.
    pub fn ack(&self, message: &Message) -> Result<()> {
        if self.config.after_ingest == "delete" {
            return match std::fs::remove_file(&message.path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io(&message.path, e)),
            };
        }
        let done = self.state("done").join(&message.table);
        let mut to = done.join(&message.name);
        if to.exists() {
            to = done.join(format!("{}.{}", message.name, now_ms()));
        }
        rename(&message.path, &to).map(|_| ())
    }

    /// The attempt failed: deliver again later, or dead-letter the file once
    /// it has failed `max_attempts` times. Returns whether it was dead-lettered.
    pub fn nack(&self, message: &Message, reason: &str) -> Result<bool> {
        if message.attempt >= self.config.max_attempts || message.exhausted.is_some() {
            let why = super::dead_reason(message, reason);
            self.dead_letter_path(&message.path, &message.table, &message.name, &why)?;
            return Ok(true);
        }
        // Back off: attempt n waits n × retry_delay_ms.
        let due = now_ms() + u128::from(message.attempt) * u128::from(self.config.retry_delay_ms);
        let to = self
            .state("retry")
            .join(&message.table)
            .join(format!("{}~{due}~{}", message.attempt, message.name));
        rename(&message.path, &to)?;
        Ok(false)
    }

    fn dead_letter_path(&self, from: &Path, table: &str, name: &str, reason: &str) -> Result<()> {
        let dir = self.state("dead").join(table);
        if rename(from, &dir.join(name))? {
            let reason_file = dir.join(format!("{name}.reason"));
            std::fs::write(&reason_file, format!("{reason}\n"))
                .map_err(|e| Error::io(&reason_file, e))?;
            tracing::warn!(table, file = name, reason, "dead-lettered");
        }
        Ok(())
    }

    /// Dead letters.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        let dead = self.state("dead");
        let mut out = Vec::new();
        for (table, _) in files_in(&dead) {
            for (name, _) in files_in(&dead.join(&table)) {
                if name.ends_with(".reason") {
                    continue;
                }
                let reason =
                    std::fs::read_to_string(dead.join(&table).join(format!("{name}.reason")))
                        .unwrap_or_default();
                out.push(DeadLetter {
                    table: table.clone(),
                    name,
                    reason: reason.trim().to_owned(),
                });
            }
        }
        out
    }

    /// Put dead letters back into the landing zone (attempts start again).
    /// `which`: `table/file` keys, or all when empty. Returns the keys moved.
    pub fn retry_dead(&self, which: &[String]) -> Result<Vec<String>> {
        let mut moved = Vec::new();
        for DeadLetter { table, name, .. } in self.dead_letters() {
            let key = format!("{table}/{name}");
            if (!which.is_empty() && !which.contains(&key)) || table == UNROUTED {
                continue;
            }
            let dir = self.state("dead").join(&table);
            if rename(&dir.join(&name), &self.landing.join(&table).join(&name))? {
                let _ = std::fs::remove_file(dir.join(format!("{name}.reason")));
                moved.push(key);
            }
        }
        Ok(moved)
    }

    /// Queue depth for status.
    pub fn depth(&self) -> QueueDepth {
        let mut d = QueueDepth::default();
        let mut oldest: Option<SystemTime> = None;
        let mut count = |dir: &Path, waiting: bool| -> usize {
            let mut n = 0;
            for (table, meta) in files_in(dir) {
                if !meta.is_dir() {
                    continue;
                }
                for (_, m) in files_in(&dir.join(&table)) {
                    n += 1;
                    if waiting && let Ok(t) = m.modified() {
                        oldest = Some(oldest.map_or(t, |o| o.min(t)));
                    }
                }
            }
            n
        };
        d.waiting = count(&self.landing, true) + count(&self.state("retry"), true);
        d.in_flight = count(&self.state("inflight"), false);
        d.dead = self.dead_letters().len();
        d.oldest_waiting_secs =
            oldest.and_then(|t| t.elapsed().ok()).map_or(0.0, |a| a.as_secs_f64());
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(dir: &Path, max_attempts: u32) -> LocalQueue {
        let config = QueueConfig {
            landing: dir.to_path_buf(),
            settle_ms: 0,
            retry_delay_ms: 0,
            max_attempts,
            ..QueueConfig::default()
        };
        LocalQueue::new(&config).unwrap()
    }

    #[test]
    fn a_file_is_delivered_once_per_claim_and_dead_lettered_after_max_attempts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("trips")).unwrap();
        std::fs::write(dir.path().join("trips/a.csv"), "x\n1\n").unwrap();
        std::fs::write(dir.path().join("trips/.partial"), "x").unwrap();
        let q = queue(dir.path(), 2);
        let first = q.receive(10).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].key(), first[0].attempt), ("trips/a.csv".into(), 1));
        assert!(q.receive(10).unwrap().is_empty(), "claimed files are invisible");
        assert!(!q.nack(&first[0], "bad").unwrap());
        let second = q.receive(10).unwrap();
        assert_eq!(second[0].attempt, 2);
        assert!(q.nack(&second[0], "bad again").unwrap(), "dead after 2 attempts");
        let dead = q.dead_letters();
        assert_eq!(dead.len(), 1);
        assert!(dead[0].reason.contains("bad again"), "{dead:?}");
        assert_eq!(q.retry_dead(&[]).unwrap(), vec!["trips/a.csv".to_owned()]);
        assert_eq!(q.receive(10).unwrap()[0].attempt, 1);
    }

    #[test]
    fn an_expired_claim_is_delivered_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("t")).unwrap();
        std::fs::write(dir.path().join("t/f.csv"), "x\n").unwrap();
        let mut config = QueueConfig {
            landing: dir.path().to_path_buf(),
            settle_ms: 0,
            ..QueueConfig::default()
        };
        config.visibility_timeout_secs = 0;
        let q = LocalQueue::new(&config).unwrap();
        let m = q.receive(1).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(q.reap().unwrap(), 1);
        let again = q.receive(1).unwrap();
        assert_eq!((again[0].key(), again[0].attempt), (m[0].key(), 2));
        q.ack(&again[0]).unwrap();
        assert!(dir.path().join(".sluice/done/t/f.csv").exists());
        assert_eq!(q.depth(), QueueDepth::default());
    }

    #[test]
    fn a_file_whose_claimers_keep_dying_is_dead_lettered_after_max_deliveries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("t")).unwrap();
        std::fs::write(dir.path().join("t/kills.csv"), "x\n").unwrap();
        let config = QueueConfig {
            landing: dir.path().to_path_buf(),
            settle_ms: 0,
            max_deliveries: 2,
            visibility_timeout_secs: 0,
            ..QueueConfig::default()
        };
        let q = LocalQueue::new(&config).unwrap();
        for attempt in 1..=2 {
            let m = q.receive(1).unwrap();
            assert_eq!(m[0].attempt, attempt);
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(q.reap().unwrap(), 1, "never acknowledged: the claimer died");
        }
        let last = q.receive(1).unwrap();
        let why = last[0].exhausted.clone().expect("not processed a third time");
        assert!(why.contains("delivered 2 times without an outcome"), "{why}");
        assert!(q.nack(&last[0], &why).unwrap(), "its nack dead-letters it");
        let dead = q.dead_letters();
        assert_eq!(dead.len(), 1);
        assert!(dead[0].reason.contains("delivered 2 times"), "{dead:?}");
    }

    #[test]
    fn stray_files_and_symlinks_are_dead_lettered_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("t")).unwrap();
        std::fs::write(dir.path().join("loose.csv"), "x\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("t/link.csv")).unwrap();
        let q = queue(dir.path(), 3);
        assert!(q.receive(10).unwrap().is_empty());
        let dead: Vec<String> =
            q.dead_letters().into_iter().map(|d| format!("{}/{}", d.table, d.name)).collect();
        assert_eq!(dead, vec![format!("{UNROUTED}/loose.csv"), "t/link.csv".to_owned()]);
    }
}
