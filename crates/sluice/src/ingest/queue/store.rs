//! The store queue: a landing prefix in S3 or Azure Blob Storage
//! (`landing = "s3://bucket/landing"`), with the local queue's semantics
//! and no rename to build them on.
//!
//! ```text
//! <landing>/<table>/<file>                           new files (users upload them here; <file> may hold `/`)
//! <landing>/.sluice/claims/<table>/<file>/<n>         delivery n, created if absent; the store's time is its start
//! <landing>/.sluice/failed/<table>/<file>/<n>-<due>   delivery n failed; the next is due at <due> (ms); the body is the reason
//! <landing>/.sluice/done/<table>/<file>               ingested (after_ingest = archive)
//! <landing>/.sluice/dead/<table>/<file> (+ .reason)   given up
//! ```
//!
//! A claim of delivery n is one put-if-absent of its marker: of two
//! processes claiming the same delivery, exactly one creates it (a put
//! whose answer is lost is settled by reading the marker back: its bytes
//! name the owner). Delivery n + 1 may be claimed once delivery n failed
//! and its retry is due, or once n's marker is older than the visibility
//! timeout by the store's clock as the listing reports it, compared with
//! this host's (clocks are assumed to agree to well within the timeout).
//! The file itself never moves until it is acknowledged — an object store
//! has no rename — so a file is never lost: it stays at its place until
//! its rows are committed and only then is archived or removed.
//!
//! Delivery is at least once (an expired claim is delivered again while
//! its first owner may still finish); exactly once comes from the commit,
//! which never adds a file whose key the table already records (see
//! [`crate::ingest::writer`]). Markers of a file that is gone (acknowledged
//! by a process that died before removing them) are removed once older
//! than the visibility timeout.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{DeadLetter, Delivery, Message, QueueDepth, UNROUTED, exhausted};
use crate::error::Result;
use crate::ingest::config::QueueConfig;
use crate::lake::io::location::StoreRoot;
use crate::lake::io::store_area::StoreArea;

const CLAIMS: &str = ".sluice/claims";
const FAILED: &str = ".sluice/failed";
const DONE: &str = ".sluice/done";
const DEAD: &str = ".sluice/dead";

/// The landing-prefix queue.
#[derive(Debug, Clone)]
pub struct StoreQueue {
    area: StoreArea,
    config: QueueConfig,
    spool: PathBuf,
    owner: String,
    /// When markers of gone files were last looked for.
    reaped: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// The owner of each claim marker read or written (a marker's owner
    /// never changes, so each is read at most once).
    owners: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// What the markers say about one file.
#[derive(Debug, Default)]
struct FileState {
    /// Its landing object's time.
    landed: Option<DateTime<Utc>>,
    /// Deliveries claimed, by number, with their markers' times.
    claims: BTreeMap<u32, DateTime<Utc>>,
    /// Failed deliveries, by number, with the time their retry is due (ms).
    failed: BTreeMap<u32, i64>,
}

impl FileState {
    fn last_claim(&self) -> Option<(u32, DateTime<Utc>)> {
        self.claims.last_key_value().map(|(n, at)| (*n, *at))
    }

    /// Whether the next delivery may be claimed now, and whether the
    /// latest one is still in flight.
    fn next(&self, now: DateTime<Utc>, visibility_ms: i64) -> Next {
        match self.last_claim() {
            None => Next::Due,
            Some((n, at)) => match self.failed.get(&n) {
                Some(due) if *due <= now.timestamp_millis() => Next::Due,
                Some(_) => Next::BackingOff,
                None if (now - at).num_milliseconds() > visibility_ms => Next::Due,
                None => Next::InFlight,
            },
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Next {
    Due,
    BackingOff,
    InFlight,
}

/// The markers' part of a marker name: `<table>/<file>/<n>[-<due>]`.
fn parse_marker(name: &str) -> Option<(String, u32, Option<i64>)> {
    let (file_key, last) = name.rsplit_once('/')?;
    let (n, due) = match last.split_once('-') {
        Some((n, due)) => (n, Some(due.parse().ok()?)),
        None => (last, None),
    };
    Some((file_key.to_owned(), n.parse().ok()?, due))
}

impl StoreQueue {
    /// The queue of the landing prefix `landing`; files are streamed to
    /// `spool` before they are parsed.
    pub fn new(landing: Arc<StoreRoot>, config: &QueueConfig) -> StoreQueue {
        StoreQueue {
            area: StoreArea::new(landing, ""),
            config: config.clone(),
            spool: config.spool.clone(),
            owner: crate::host::owner(),
            reaped: Arc::default(),
            owners: Arc::default(),
        }
    }

    /// What it is, for status lines.
    pub fn describe(&self) -> String {
        format!("landing prefix {}", self.area)
    }

    fn visibility_ms(&self) -> i64 {
        i64::try_from(self.config.visibility_timeout().as_millis()).unwrap_or(i64::MAX)
    }

    /// Every landed file (`table/file` → state), and the objects directly
    /// in the prefix (outside any table folder): a listing of the prefix's
    /// folders, one of each table's, one of the claims and one of the
    /// failures.
    async fn survey(&self) -> Result<(BTreeMap<String, FileState>, Vec<String>)> {
        let mut files: BTreeMap<String, FileState> = BTreeMap::new();
        // Table by table: `.sluice/` (its archive grows with every file)
        // is never listed whole.
        let (tables, mut loose) = self.area.children("").await?;
        loose.retain(|name| !name.starts_with('.'));
        for table in tables.iter().filter(|t| !t.starts_with('.')) {
            for (name, at) in self.area.list_dated(&format!("{table}/")).await? {
                if name.split('/').any(|part| part.starts_with('.')) {
                    continue; // writers' temporary names
                }
                files.entry(name).or_default().landed = Some(at);
            }
        }
        for (name, at) in self.area.list_dated(&format!("{CLAIMS}/")).await? {
            let Some((key, n, _)) = parse_marker(&name[CLAIMS.len() + 1..]) else { continue };
            files.entry(key).or_default().claims.insert(n, at);
        }
        for (name, _) in self.area.list_dated(&format!("{FAILED}/")).await? {
            let Some((key, n, Some(due))) = parse_marker(&name[FAILED.len() + 1..]) else {
                continue;
            };
            files.entry(key).or_default().failed.insert(n, due);
        }
        Ok((files, loose))
    }

    /// When the file's next delivery may be claimed: [`FileState::next`],
    /// and at once when the latest claim's owner is a process of this host
    /// that no longer exists (a killed ingester's files need not wait out
    /// the visibility timeout).
    async fn next_of(&self, key: &str, state: &FileState, now: DateTime<Utc>) -> Result<Next> {
        let next = state.next(now, self.visibility_ms());
        let Some((n, _)) = state.last_claim().filter(|_| next == Next::InFlight) else {
            return Ok(next);
        };
        let marker = format!("{CLAIMS}/{key}/{n}");
        let known = self.owners.lock().expect("never poisoned").get(&marker).cloned();
        let owner = match known {
            Some(owner) => owner,
            None => {
                let body = self.area.get(&marker).await?.unwrap_or_default();
                let owner = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["owner"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                self.owners.lock().expect("never poisoned").insert(marker, owner.clone());
                owner
            }
        };
        if owner != self.owner && crate::host::owner_is_dead(&owner) {
            tracing::info!(file = key, "its claimer is gone; the file will be delivered again");
            return Ok(Next::Due);
        }
        Ok(Next::InFlight)
    }

    /// Remove the markers of files that are gone (acknowledged by a
    /// process that died before removing them, or removed by a user), once
    /// older than the visibility timeout. A landing prefix has no claims
    /// to move back: an expired claim is simply delivered again by
    /// [`receive`](Self::receive). Looked for at most once a visibility
    /// timeout (and a minute), since markers younger than that stay anyway.
    /// Returns how many files' markers went.
    pub async fn reap(&self) -> Result<usize> {
        {
            let mut reaped = self.reaped.lock().expect("the reap time is never poisoned");
            let every = self.config.visibility_timeout().min(std::time::Duration::from_secs(60));
            if reaped.is_some_and(|at| at.elapsed() < every) {
                return Ok(0);
            }
            *reaped = Some(std::time::Instant::now());
        }
        let (files, _) = self.survey().await?;
        let now = Utc::now();
        let mut gone = 0;
        for (key, state) in files {
            let stale = state
                .last_claim()
                .is_none_or(|(_, at)| (now - at).num_milliseconds() > self.visibility_ms());
            if state.landed.is_none() && stale {
                self.forget_markers(&key).await?;
                gone += 1;
            }
        }
        Ok(gone)
    }

    /// Claim up to `max` files whose next delivery is due, oldest first.
    /// Objects outside a table folder are dead-lettered at once.
    pub async fn receive(&self, max: usize) -> Result<Vec<Message>> {
        let (files, loose) = self.survey().await?;
        for name in loose {
            self.dead_letter(
                &name,
                UNROUTED,
                &name,
                "a file directly in the landing prefix: put files under <landing>/<table>/",
            )
            .await?;
        }
        let now = Utc::now();
        let mut due: Vec<(DateTime<Utc>, String, FileState)> = Vec::new();
        for (key, state) in files {
            let Some(landed) = state.landed else { continue };
            if self.next_of(&key, &state, now).await? == Next::Due {
                due.push((landed, key, state));
            }
        }
        self.forget_owners(&due);
        due.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut out = Vec::new();
        for (_, key, state) in due {
            if out.len() >= max {
                break;
            }
            let delivered = state.last_claim().map_or(0, |(n, _)| n);
            let attempt = delivered + 1;
            let marker = format!("{CLAIMS}/{key}/{attempt}");
            let body = serde_json::json!({ "owner": self.owner, "at": now.to_rfc3339() });
            if !self.area.put_if_absent(&marker, body.to_string().as_bytes()).await? {
                continue; // another process claimed this delivery
            }
            self.owners.lock().expect("never poisoned").insert(marker, self.owner.clone());
            let (table, name) = key.split_once('/').expect("a landed file is below a table");
            out.push(Message {
                table: table.to_owned(),
                name: name.to_owned(),
                attempt,
                path: self.spool.join(table).join(format!("{name}~{attempt}")),
                delivery: Delivery::Store { failures: state.failed.len() as u32 },
                exhausted: exhausted(delivered, self.config.max_deliveries),
            });
        }
        Ok(out)
    }

    /// Forget the owners of claims superseded by a due delivery (the
    /// memory of a long watch stays bounded by the files in flight).
    fn forget_owners(&self, due: &[(DateTime<Utc>, String, FileState)]) {
        let mut owners = self.owners.lock().expect("never poisoned");
        for (_, key, _) in due {
            owners.retain(|marker, _| {
                marker
                    .strip_prefix(CLAIMS)
                    .and_then(|m| parse_marker(&m[1..]))
                    .is_none_or(|(of, _, _)| of != *key)
            });
        }
    }

    /// Stream the file to its spool path. An error is the file's failure.
    pub async fn fetch(&self, message: &Message) -> std::result::Result<(), String> {
        match self.area.download(&message.key(), &message.path).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "{} does not exist (ingested and removed by another process, or deleted)",
                self.area.shown(&message.key()).display()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Remove the delivery's spool file, and those earlier deliveries of
    /// the file left on this host when their processes were killed (a
    /// later delivery supersedes them).
    fn forget_spool(&self, message: &Message) {
        let folder = self.spool.join(&message.table);
        for attempt in 1..=message.attempt {
            let path = folder.join(format!("{}~{attempt}", message.name));
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a spool file");
            }
        }
    }

    /// Remove every marker of the file `key`.
    async fn forget_markers(&self, key: &str) -> Result<()> {
        let mut markers = self.area.list(&format!("{CLAIMS}/{key}/")).await?;
        markers.extend(self.area.list(&format!("{FAILED}/{key}/")).await?);
        if markers.is_empty() { Ok(()) } else { self.area.delete_many(markers).await }
    }

    /// The file's rows are committed: archive it (a server-side copy) or
    /// not, then remove it, then its markers. A crash between the removal
    /// and the markers' leaves markers [`reap`](Self::reap) removes; one
    /// before the removal delivers the file again, and the commit finds it
    /// already ingested (and [`archive`](Self::archive) finds it archived).
    pub async fn ack(&self, message: &Message) -> Result<()> {
        self.forget_spool(message);
        let key = message.key();
        if self.config.after_ingest == "archive" {
            self.archive(&key).await?;
        }
        self.area.delete(&key).await?;
        self.forget_markers(&key).await
    }

    /// Copy the file `key` to the archive, once. A copy already archived
    /// under its name is this very object when it is as large and was
    /// written no earlier (an acknowledgement killed between its copy and
    /// its removal, done again); a file of the same name landed after an
    /// earlier one was archived is newer than that archive, and is kept
    /// beside it under a name suffixed with the time.
    async fn archive(&self, key: &str) -> Result<()> {
        let Some(landed) = self.area.meta(key).await? else {
            // Gone already: another delivery of it was acknowledged.
            return Ok(());
        };
        let mut to = format!("{DONE}/{key}");
        if let Some(archived) = self.area.meta(&to).await? {
            if archived.size == landed.size && archived.last_modified >= landed.last_modified {
                return Ok(());
            }
            to = format!("{to}.{}", Utc::now().timestamp_millis());
        }
        match self.area.copy(key, &to).await {
            Ok(()) => Ok(()),
            Err(_) if !self.area.exists(key).await? => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The attempt failed: deliver again after attempt × `retry_delay_ms`,
    /// or dead-letter the file once it failed `max_attempts` times (or its
    /// deliveries were exhausted). Returns whether it was dead-lettered.
    pub async fn nack(&self, message: &Message, reason: &str) -> Result<bool> {
        self.forget_spool(message);
        let Delivery::Store { failures } = message.delivery else {
            return Err(crate::error::Error::Internal("a store nack of another delivery".into()));
        };
        let key = message.key();
        if !self.area.exists(&key).await? {
            // Acknowledged by another delivery meanwhile: nothing to retry.
            self.forget_markers(&key).await?;
            return Ok(false);
        }
        if failures + 1 >= self.config.max_attempts || message.exhausted.is_some() {
            let why = super::dead_reason(message, reason);
            self.dead_letter(&key, &message.table, &message.name, &why).await?;
            return Ok(true);
        }
        let delay = i64::from(message.attempt)
            .saturating_mul(i64::try_from(self.config.retry_delay_ms).unwrap_or(i64::MAX));
        let due = Utc::now().timestamp_millis().saturating_add(delay);
        let marker = format!("{FAILED}/{key}/{}-{due}", message.attempt);
        self.area.put(&marker, reason.as_bytes().to_vec()).await?;
        Ok(false)
    }

    /// Move the object at `from` to the dead letters as `table/name`, with
    /// its reason: copied first, so that a crash midway leaves it in both
    /// places, never in neither.
    async fn dead_letter(&self, from: &str, table: &str, name: &str, reason: &str) -> Result<()> {
        let to = format!("{DEAD}/{table}/{name}");
        self.area.put(&format!("{to}.reason"), format!("{reason}\n").into_bytes()).await?;
        self.area.copy(from, &to).await?;
        self.area.delete(from).await?;
        if table != UNROUTED {
            self.forget_markers(&format!("{table}/{name}")).await?;
        }
        tracing::warn!(table, file = name, reason, "dead-lettered");
        Ok(())
    }

    /// The dead letters.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>> {
        let mut out = Vec::new();
        for name in self.area.list(&format!("{DEAD}/")).await? {
            let key = &name[DEAD.len() + 1..];
            if key.ends_with(".reason") {
                continue;
            }
            let Some((table, file)) = key.split_once('/') else { continue };
            let reason = self.area.get(&format!("{name}.reason")).await?.unwrap_or_default();
            out.push(DeadLetter {
                table: table.to_owned(),
                name: file.to_owned(),
                reason: String::from_utf8_lossy(&reason).trim().to_owned(),
            });
        }
        Ok(out)
    }

    /// Put dead letters back into the landing prefix (attempts start
    /// again). `which`: `table/file` keys, or all when empty. Returns the
    /// keys moved.
    pub async fn retry_dead(&self, which: &[String]) -> Result<Vec<String>> {
        let mut moved = Vec::new();
        for DeadLetter { table, name, .. } in self.dead_letters().await? {
            let key = format!("{table}/{name}");
            if (!which.is_empty() && !which.contains(&key)) || table == UNROUTED {
                continue;
            }
            self.forget_markers(&key).await?;
            let dead = format!("{DEAD}/{key}");
            self.area.copy(&dead, &key).await?;
            self.area.delete_many(vec![dead.clone(), format!("{dead}.reason")]).await?;
            moved.push(key);
        }
        Ok(moved)
    }

    /// Queue depth for status: waiting (never claimed, or due again),
    /// in flight (claimed within the visibility timeout) and dead.
    pub async fn depth(&self) -> Result<QueueDepth> {
        let (files, _) = self.survey().await?;
        let now = Utc::now();
        let mut depth = QueueDepth::default();
        let mut oldest: Option<DateTime<Utc>> = None;
        for (key, state) in &files {
            let Some(landed) = state.landed else { continue };
            match self.next_of(key, state, now).await? {
                Next::InFlight => depth.in_flight += 1,
                Next::Due | Next::BackingOff => {
                    depth.waiting += 1;
                    oldest = Some(oldest.map_or(landed, |o| o.min(landed)));
                }
            }
        }
        depth.dead = self.dead_letters().await?.len();
        depth.oldest_waiting_secs =
            oldest.map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0);
        Ok(depth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::io::location::StoreRoot;

    fn queue(max_attempts: u32, visibility_secs: u64) -> (StoreQueue, tempfile::TempDir) {
        let spool = tempfile::tempdir().unwrap();
        let config = QueueConfig {
            retry_delay_ms: 0,
            max_attempts,
            max_deliveries: 3,
            visibility_timeout_secs: visibility_secs,
            spool: spool.path().to_path_buf(),
            ..QueueConfig::default()
        };
        let root = StoreRoot::in_memory("s3://bucket/landing/".parse().unwrap());
        (StoreQueue::new(root, &config), spool)
    }

    async fn land(q: &StoreQueue, key: &str, text: &str) {
        q.area.put(key, text.as_bytes().to_vec()).await.unwrap();
    }

    #[tokio::test]
    async fn a_file_is_claimed_once_per_delivery_and_dead_lettered_after_max_attempts() {
        let (q, _spool) = queue(2, 300);
        land(&q, "trips/a.csv", "x\n1\n").await;
        land(&q, "trips/.partial", "x").await;
        let first = q.receive(10).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].key(), first[0].attempt), ("trips/a.csv".into(), 1));
        q.fetch(&first[0]).await.unwrap();
        assert_eq!(std::fs::read_to_string(&first[0].path).unwrap(), "x\n1\n");
        assert!(q.receive(10).await.unwrap().is_empty(), "a claimed file is in flight");
        assert_eq!(q.depth().await.unwrap().in_flight, 1);
        // Another process racing for the same delivery loses it.
        let other = StoreQueue { owner: "other".into(), ..q.clone() };
        assert!(other.receive(10).await.unwrap().is_empty());

        assert!(!q.nack(&first[0], "bad").await.unwrap());
        assert!(!first[0].path.exists(), "the spool file is removed");
        let second = q.receive(10).await.unwrap();
        assert_eq!(second[0].attempt, 2);
        std::fs::write(&first[0].path, "left by a killed delivery").unwrap();
        assert!(q.nack(&second[0], "bad again").await.unwrap(), "dead after 2 failures");
        assert!(!first[0].path.exists(), "an earlier delivery's spool file is removed too");
        let dead = q.dead_letters().await.unwrap();
        assert_eq!(dead.len(), 1);
        assert!(dead[0].reason.contains("bad again"), "{dead:?}");
        assert!(!q.area.exists("trips/a.csv").await.unwrap());
        assert_eq!(q.retry_dead(&[]).await.unwrap(), vec!["trips/a.csv".to_owned()]);
        assert!(q.dead_letters().await.unwrap().is_empty());
        let again = q.receive(10).await.unwrap();
        assert_eq!(again[0].attempt, 1, "attempts start again");
        q.ack(&again[0]).await.unwrap();
        assert!(q.area.exists(".sluice/done/trips/a.csv").await.unwrap());
        assert!(!q.area.exists("trips/a.csv").await.unwrap());
        assert_eq!(q.area.list(".sluice/claims/").await.unwrap(), Vec::<String>::new());
        assert_eq!(q.depth().await.unwrap(), QueueDepth::default());
    }

    #[tokio::test]
    async fn an_expired_claim_is_delivered_again_and_its_deliveries_run_out() {
        let (q, _spool) = queue(3, 0);
        land(&q, "t/2026/11/f~1#.csv", "x\n").await;
        for attempt in 1..=3 {
            let m = q.receive(1).await.unwrap();
            assert_eq!((m[0].key(), m[0].attempt), ("t/2026/11/f~1#.csv".into(), attempt));
            assert_eq!(m[0].exhausted, None);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let last = q.receive(1).await.unwrap();
        let why = last[0].exhausted.clone().expect("delivered max_deliveries times");
        assert!(why.contains("delivered 3 times without an outcome"), "{why}");
        assert!(q.nack(&last[0], &why).await.unwrap());
        assert_eq!(q.dead_letters().await.unwrap()[0].name, "2026/11/f~1#.csv");
        assert_eq!(q.area.list("").await.unwrap().len(), 2, "the file and its reason, no marker");
    }

    #[tokio::test]
    async fn a_file_acknowledged_elsewhere_is_not_retried_and_stale_markers_go() {
        let (q, _spool) = queue(3, 0);
        land(&q, "t/f.csv", "x\n").await;
        let first = q.receive(1).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let second = q.receive(1).await.unwrap();
        assert_eq!(second[0].attempt, 2, "the first claim expired");
        q.ack(&second[0]).await.unwrap();
        assert!(q.fetch(&first[0]).await.unwrap_err().contains("does not exist"));
        assert!(!q.nack(&first[0], "gone").await.unwrap(), "nothing to dead-letter");
        assert!(q.dead_letters().await.unwrap().is_empty());
        // A process that died between removing a file and its markers.
        land(&q, "t/g.csv", "x\n").await;
        let g = q.receive(1).await.unwrap();
        q.area.delete(&g[0].key()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        assert_eq!(q.reap().await.unwrap(), 1);
        assert!(q.area.list(".sluice/").await.unwrap().iter().all(|n| n.starts_with(DONE)));
    }

    #[tokio::test]
    async fn a_claim_of_a_dead_process_of_this_host_is_delivered_again_at_once() {
        let (q, _spool) = queue(3, 300);
        land(&q, "t/f.csv", "x\n").await;
        land(&q, "t/g.csv", "x\n").await;
        // f's first delivery was claimed by a process since gone (this
        // pid, another start time), g's by one alive on another host.
        let dead = format!("{}:{}:1", crate::host::machine(), std::process::id());
        for (file, owner) in [("f.csv", dead.as_str()), ("g.csv", "elsewhere:7:7")] {
            let body = serde_json::json!({ "owner": owner }).to_string().into_bytes();
            q.area.put(&format!("{CLAIMS}/t/{file}/1"), body).await.unwrap();
        }
        let got = q.receive(10).await.unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].key(), got[0].attempt), ("t/f.csv".into(), 2));
        let depth = q.depth().await.unwrap();
        assert_eq!((depth.waiting, depth.in_flight), (0, 2));
    }

    #[tokio::test]
    async fn loose_objects_are_dead_lettered_as_unrouted() {
        let (q, _spool) = queue(3, 300);
        land(&q, "loose.csv", "x\n").await;
        assert!(q.receive(10).await.unwrap().is_empty());
        let dead: Vec<String> = q
            .dead_letters()
            .await
            .unwrap()
            .into_iter()
            .map(|d| format!("{}/{}", d.table, d.name))
            .collect();
        assert_eq!(dead, vec![format!("{UNROUTED}/loose.csv")]);
        assert!(q.retry_dead(&[]).await.unwrap().is_empty(), "unrouted files stay dead");
    }

    #[tokio::test]
    async fn an_acknowledgement_done_again_archives_once_and_a_newer_file_beside_it() {
        let (q, _spool) = queue(3, 300);
        land(&q, "trips/a.csv", "x\n1\n").await;
        let m = q.receive(1).await.unwrap();
        // Killed between the archive's copy and the removal: done again.
        q.area.copy("trips/a.csv", ".sluice/done/trips/a.csv").await.unwrap();
        q.ack(&m[0]).await.unwrap();
        assert_eq!(q.area.list(".sluice/done/").await.unwrap(), vec![".sluice/done/trips/a.csv"]);
        assert!(!q.area.exists("trips/a.csv").await.unwrap());

        // A new file of the same name, landed after that archive.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        land(&q, "trips/a.csv", "x\n2\n3\n").await;
        let m = q.receive(1).await.unwrap();
        q.ack(&m[0]).await.unwrap();
        let done = q.area.list(".sluice/done/").await.unwrap();
        assert_eq!(done.len(), 2, "{done:?}");
        assert!(done[1].starts_with(".sluice/done/trips/a.csv."), "{done:?}");
        let newer = q.area.get(&done[1]).await.unwrap().unwrap();
        assert_eq!(&newer[..], b"x\n2\n3\n");
    }

    #[test]
    fn markers_parse() {
        assert_eq!(parse_marker("t/a/b.csv/3"), Some(("t/a/b.csv".into(), 3, None)));
        assert_eq!(parse_marker("t/b.csv/2-17"), Some(("t/b.csv".into(), 2, Some(17))));
        assert_eq!(parse_marker("t/b.csv/x"), None);
    }
}
