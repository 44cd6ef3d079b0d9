//! The writer protocol: the one entry every operation that changes the
//! lake passes through.
//!
//! A put, a pipeline commit, a step's row in the steps table, `restore`,
//! `compact`, `vacuum`, `checkpoint` and `doctor --repair` all begin with
//! [`Lake::writer`]`(kind).begin()`, which
//!
//! 1. takes the writer lock — a courtesy that keeps two writers from doing
//!    the same work twice, never what correctness rests on (a lake on
//!    hosts that share no lock, or on an object store, has none);
//! 2. **settles** every unfinished restore in the journal before anything
//!    is written: a restore undoes, table by table, what came after its
//!    target, so a write landing between two of its table commits would be
//!    kept in one table and undone in the next (a put's content kept, its
//!    index row removed). Settling finishes the restore, or rolls it back
//!    when it cannot be finished ([`restore::settle`]); a restore whose
//!    restorer may still be running is refused with who runs it.
//!    Unfinished commit sequences need no settling here: they only add
//!    rows, and the committer finishes them from their manifests.
//!
//! Without a lock, a restore can still be claimed after a writer settled.
//! Journaled writers (commit sequences, restores) are ordered by the
//! journal itself: each claim is exactly the journal's next version and is
//! refused while a restore is unfinished, so a sequence and a restore
//! never overlap. Writers that do not journal (a put, a step's row) ask
//! [`Writer::wrote_whole`] after their last commit: if a restore was
//! claimed since they settled, it may have undone part of what they wrote,
//! so they settle it and write again — their writes are idempotent, and a
//! write acknowledged is then wholly before or wholly after every restore. docs/ARCHITECTURE.md, "The writer protocol", states
//! the whole rule.
//!
//! Ingestion's writers (an ingest run's flushes, a transform, `ingest
//! dedup`) begin here too, through [`ingestion`], as [`WriteKind::Ingest`],
//! with two differences that follow from what they write — only ingestion
//! tables, which no restore touches: they take no lock (a landing zone must
//! not wait behind a long commit; the queue's claims keep two ingesters
//! from the same work), and a restore whose restorer may still be running
//! is left to it rather than refused. A restore whose restorer is gone is
//! settled by them like by any writer, so an ingest-only process never
//! leaves a mixed lake pinned.

use std::time::Duration;

use super::journal::restore::{self, Settled};
use super::journal::{JournalEntry, Phase};
use super::{Lake, WriterLock, delta::table, layout};
use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;
use crate::progress::Progress;

/// Default age after which a started sequence of another host is taken for
/// abandoned by its writer.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(3600);

/// The operations that change the lake (for messages and traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A direct put of artifacts.
    Put,
    /// A commit of staging (or `recover`).
    Commit,
    /// A restore of every table to one point.
    Restore,
    /// Compaction.
    Compact,
    /// Vacuum.
    Vacuum,
    /// Checkpoints and log clean-up.
    Checkpoint,
    /// `doctor --repair`.
    Repair,
    /// An ingest run's flushes, a transform, `ingest dedup`: ingestion
    /// tables only (no lock; see [the module](self)).
    Ingest,
    /// A step's state row (`running`, `completed`, `abandoned`…) in the
    /// steps table, which restores cover.
    Step,
}

/// How a writer begins; see [`Lake::writer`].
#[must_use = "a writer begins only when `begin` is awaited"]
#[derive(Debug)]
pub struct WriteBuilder<'a> {
    lake: &'a Lake,
    kind: WriteKind,
    lock_wait: Option<Duration>,
    stale_after: Duration,
}

/// A writer that has settled the journal; holds the writer lock until
/// dropped.
#[derive(Debug)]
pub struct Writer {
    /// The courtesy lock (`None` for ingestion, which takes none).
    _lock: Option<WriterLock>,
    kind: WriteKind,
    stale_after: Duration,
    /// The journal's version once settled (`None`: no journal yet).
    settled_at: Option<u64>,
    /// Restores this writer settled.
    settled: Vec<Settled>,
    /// Restores claimed while this writer wrote (see [`Writer::wrote_whole`]).
    restores_met: u32,
}

impl Lake {
    /// Begin an operation that changes the lake: the writer protocol's one
    /// entry (see [the module](self)).
    pub fn writer(&self, kind: WriteKind) -> WriteBuilder<'_> {
        WriteBuilder { lake: self, kind, lock_wait: None, stale_after: DEFAULT_STALE_AFTER }
    }
}

impl WriteBuilder<'_> {
    /// Wait at most this long for the writer lock (default: as long as it
    /// takes), then fail naming its holder.
    pub fn lock_wait(mut self, wait: Option<Duration>) -> Self {
        self.lock_wait = wait;
        self
    }

    /// How old an unfinished restore of another host must be before this
    /// writer settles it rather than refusing (default 1 hour). One of this
    /// host is settled as soon as its process is gone.
    pub fn stale_after(mut self, age: Duration) -> Self {
        self.stale_after = age;
        self
    }

    /// Take the lock, then settle every unfinished restore. A lake in a
    /// store has no lock (the protocol does not rest on one).
    pub async fn begin(self) -> Result<Writer> {
        let lock = match (self.kind, self.lake.root().local()) {
            (WriteKind::Ingest, _) | (_, None) => None,
            (_, Some(root)) => Some(WriterLock::wait_at_most(root, self.lock_wait).await?),
        };
        let mut writer = Writer::unsettled(lock, self.kind, self.stale_after);
        writer.settle(self.lake).await?;
        Ok(writer)
    }
}

/// Restores a writer that does not journal meets while it writes before it
/// gives up.
const MAX_RESTORES_MET: u32 = 8;

impl Writer {
    /// A writer that has settled nothing yet.
    fn unsettled(lock: Option<WriterLock>, kind: WriteKind, stale_after: Duration) -> Self {
        Writer {
            _lock: lock,
            kind,
            stale_after,
            settled_at: None,
            settled: Vec::new(),
            restores_met: 0,
        }
    }

    /// Whether what this writer wrote since it last settled stands whole:
    /// `false` when a restore was claimed meanwhile (it may have undone part
    /// of it), which this call settles — the writer then writes again
    /// (its writes are idempotent). The protocol for writers that do not
    /// journal (a put, a step row): what they wrote is then wholly before
    /// every restore or wholly after it. After a writer met
    /// `MAX_RESTORES_MET` restores, an error naming `table`.
    pub async fn wrote_whole(&mut self, lake: &Lake, table: &str) -> Result<bool> {
        if !self.restore_claimed_since(lake).await? {
            return Ok(true);
        }
        self.restores_met += 1;
        if self.restores_met > MAX_RESTORES_MET {
            return Err(Error::Contention {
                table: table.to_owned(),
                attempts: MAX_RESTORES_MET as usize,
            });
        }
        tracing::info!(
            writer = ?self.kind,
            "a restore was claimed while this writer wrote; settling it and writing again"
        );
        self.settle(lake).await?;
        Ok(false)
    }

    /// Restores this writer found unfinished and settled.
    pub fn settled(&self) -> &[Settled] {
        &self.settled
    }

    /// Whether a restore was claimed after this writer last settled: what
    /// it wrote since may have been undone in part.
    async fn restore_claimed_since(&self, lake: &Lake) -> Result<bool> {
        if !table::exists(lake.root(), &layout::commits_table()).await? {
            return Ok(false);
        }
        let mut tip = lake.take_journal_tip().await?;
        let advanced = tip.advance(lake.root()).await.map(|journal| {
            journal.entries().iter().any(|e| {
                e.is_restore()
                    && e.phase() == Phase::Started
                    && self.settled_at.is_none_or(|at| e.position > at)
            })
        });
        lake.keep_journal_tip(tip);
        advanced
    }

    /// Settle every unfinished restore (see [the module](self)). A repair
    /// goes on when the journal cannot be read: rebuilding it is what a
    /// repair is for.
    pub async fn settle(&mut self, lake: &Lake) -> Result<()> {
        if !table::exists(lake.root(), &layout::commits_table()).await? {
            return Ok(());
        }
        let open = match unfinished_restores(lake).await {
            Err(e) if self.kind == WriteKind::Repair => {
                tracing::warn!(error = %e, "the journal cannot be read; repairing without settling it");
                return Ok(());
            }
            open => open?,
        };
        for restore in open {
            match settle_restore(lake, &restore, self.stale_after, self.kind).await {
                Ok(settled) => self.settled.push(settled),
                // A live restore touches no ingestion table: ingestion goes on.
                Err(Error::RestoreInProgress { .. }) if self.kind == WriteKind::Ingest => {}
                Err(e) => return Err(e),
            }
        }
        let mut tip = lake.take_journal_tip().await?;
        let version = tip.advance(lake.root()).await.map(|journal| journal.version);
        lake.keep_journal_tip(tip);
        self.settled_at = version?;
        Ok(())
    }
}

/// The journal's unfinished restores, read through the lake's kept tip.
async fn unfinished_restores(lake: &Lake) -> Result<Vec<JournalEntry>> {
    let mut tip = lake.take_journal_tip().await?;
    let open = tip.advance(lake.root()).await.map(|journal| {
        journal.unfinished().into_iter().filter(|e| e.is_restore()).cloned().collect()
    });
    lake.keep_journal_tip(tip);
    open
}

/// Settle one unfinished restore, unless its restorer may still be running.
pub(crate) async fn settle_restore(
    lake: &Lake,
    open: &JournalEntry,
    stale_after: Duration,
    kind: WriteKind,
) -> Result<Settled> {
    if orphan_reason(open, stale_after).is_none() {
        return Err(Error::RestoreInProgress {
            seq: open.seq,
            what: open.reason.clone().unwrap_or_else(|| "restore".into()),
            owner: open.owner.clone(),
        });
    }
    tracing::info!(seq = open.seq, writer = ?kind, "settling an interrupted restore");
    restore::settle(lake.root(), &lake.table_specs(), open, &Progress::default()).await
}

/// Begin an ingestion writer on the lake at `root` (the writer protocol's
/// entry for a process that holds no [`Lake`]): on a lake that also holds
/// artifact tables, settle the restores their dead restorers left; on an
/// ingest-only lake there is no journal and nothing to settle.
pub async fn ingestion(root: &LakeRoot) -> Result<Writer> {
    if !table::exists(root, &layout::commits_table()).await? {
        return Ok(Writer::unsettled(None, WriteKind::Ingest, DEFAULT_STALE_AFTER));
    }
    let lake = Lake::open(root).await?;
    lake.writer(WriteKind::Ingest).begin().await
}

/// Why an unfinished sequence's writer can be taken for gone, if it can:
/// it ran on this host and its process is gone, or it is older than
/// `stale_after`, or it names no writer.
pub(crate) fn orphan_reason(open: &JournalEntry, stale_after: Duration) -> Option<String> {
    if crate::host::owner_is_dead(&open.owner) {
        return Some(format!("its writer ({}) is gone", open.owner));
    }
    let age_us = chrono::Utc::now().timestamp_micros() - open.timestamp;
    let stale = u128::try_from(age_us).is_ok_and(|age| age > stale_after.as_micros());
    (stale || open.owner.is_empty()).then(|| {
        format!(
            "it was started {} s ago by {}",
            age_us / 1_000_000,
            if open.owner.is_empty() { "an unknown writer" } else { open.owner.as_str() }
        )
    })
}
