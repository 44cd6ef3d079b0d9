//! Where files come from: a queue with at-least-once delivery, visibility
//! timeouts, acknowledgements, negative acknowledgements and dequeue counts.
//! Three backends with the same semantics:
//!
//! - [`local`]: a landing directory; a claim is an atomic rename.
//! - [`store`]: a landing prefix in S3 or Azure Blob Storage; a claim is
//!   a marker object created if absent, the file is streamed to a local
//!   spool file before parsing.
//! - [`azure`]: an Azure Storage Queue whose messages name blobs of a
//!   container; the blob is streamed to a local spool file before parsing.
//!
//! Neither makes ingestion exactly once on its own — a message can always
//! be delivered again (a crash before the ack, an expired visibility
//! timeout). Exactly once comes from the commit, which records each file's
//! key with its rows (see [`super::writer`]). What the queue owes the rest
//! is that a file is never lost: it stays in the queue until acknowledged
//! after its commit, and one that keeps failing (`max_attempts` failures) —
//! or whose processes keep dying on it (`max_deliveries` deliveries without
//! an outcome) — goes to a dead-letter area with its reason instead of
//! looping forever.

pub mod azure;
mod azure_rest;
pub mod local;
pub mod store;
pub mod watch;

use std::path::PathBuf;

pub use azure::AzureQueue;
pub use azure_rest::{
    Credential, EMULATOR_ACCOUNT, EMULATOR_KEY, QueueClient, QueueMessage, create_container,
};
pub use local::LocalQueue;
pub use store::StoreQueue;

use super::config::QueueConfig;
use crate::error::Result;

/// Dead letters of files outside any table folder.
pub const UNROUTED: &str = "_unrouted";

/// One delivery of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The table (the landing sub-folder, or the blob's first segment).
    pub table: String,
    /// The file's name under its table.
    pub name: String,
    /// This delivery's attempt number (1 for the first).
    pub attempt: u32,
    /// The local file the workers read (for Azure, the spool file the blob
    /// is streamed to by [`Queue::fetch`]).
    pub path: PathBuf,
    /// What the backend needs to acknowledge the delivery.
    pub delivery: Delivery,
    /// Set when the file was delivered `max_deliveries` times without an
    /// outcome: it is not processed again but nacked with this reason,
    /// which dead-letters it (with its ledger row).
    pub exhausted: Option<String>,
}

/// Backend-specific parts of a [`Message`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A claimed file of the landing directory.
    Local,
    /// A claimed delivery of a file in a landing prefix.
    Store {
        /// Failed deliveries before this one.
        failures: u32,
    },
    /// A received Azure queue message.
    Azure {
        /// The service's message id.
        id: String,
        /// The receipt that deletes or releases this delivery.
        pop_receipt: String,
        /// The message text, kept for the dead-letter queue.
        text: String,
        /// The blob it names.
        blob: String,
    },
}

impl Message {
    /// The file's key: `<table>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.table, self.name)
    }
}

/// Counts for `sluice ingest status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct QueueDepth {
    /// Files waiting (new and retries). For Azure: the service's
    /// approximate message count, which includes messages in flight.
    pub waiting: usize,
    /// Files claimed by a worker (local only: Azure does not tell).
    pub in_flight: usize,
    /// Dead letters.
    pub dead: usize,
    /// Age of the oldest waiting file, seconds.
    pub oldest_waiting_secs: f64,
}

/// Why a file delivered `deliveries` times without an outcome is given up,
/// once that reaches `max_deliveries`.
pub(crate) fn exhausted(deliveries: u32, max_deliveries: u32) -> Option<String> {
    (deliveries >= max_deliveries).then(|| {
        format!(
            "delivered {deliveries} times without an outcome (max_deliveries): the ingest \
             process may be crashing on this file"
        )
    })
}

/// The reason recorded with a dead letter.
pub(crate) fn dead_reason(message: &Message, reason: &str) -> String {
    match &message.exhausted {
        Some(why) => why.clone(),
        None => format!("failed {} times; last error: {reason}", message.attempt),
    }
}

/// A dead-lettered file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetter {
    /// Its table.
    pub table: String,
    /// Its name under the table.
    pub name: String,
    /// Why it was given up.
    pub reason: String,
}

/// The configured queue.
#[derive(Debug, Clone)]
pub enum Queue {
    /// A landing directory.
    Local(Box<LocalQueue>),
    /// A landing prefix in an object store.
    Store(Box<StoreQueue>),
    /// An Azure Storage Queue.
    Azure(Box<AzureQueue>),
}

impl Queue {
    /// Open the queue the config names (creating what is missing).
    pub async fn open(config: &QueueConfig) -> Result<Queue> {
        Ok(match &config.azure {
            Some(azure) if config.kind == "azure" => {
                Queue::Azure(Box::new(AzureQueue::open(config, azure).await?))
            }
            _ => match &config.landing_store {
                Some(crate::lake::LakeRoot::Store(landing)) => {
                    Queue::Store(Box::new(StoreQueue::new(landing.clone(), config)))
                }
                _ => Queue::Local(Box::new(LocalQueue::new(config)?)),
            },
        })
    }

    /// What it is, for status lines.
    pub fn describe(&self) -> String {
        match self {
            Queue::Local(q) => format!("landing directory {}", q.landing().display()),
            Queue::Store(q) => q.describe(),
            Queue::Azure(q) => q.describe(),
        }
    }

    /// Start watching for arrivals (the landing directory's notifications;
    /// `None` for Azure, whose receive is the wait).
    pub fn watch(&self) -> Option<watch::LandingWatch> {
        match self {
            Queue::Local(q) => watch::LandingWatch::start(q.landing(), q.settle()),
            Queue::Store(_) | Queue::Azure(_) => None,
        }
    }

    /// Deliver expired claims again (the Azure service does this itself;
    /// a landing prefix removes the markers of files that are gone).
    pub async fn reap(&self) -> Result<usize> {
        match self {
            Queue::Local(q) => q.reap(),
            Queue::Store(q) => q.reap().await,
            Queue::Azure(_) => Ok(0),
        }
    }

    /// Receive up to `max` deliveries.
    pub async fn receive(&self, max: usize) -> Result<Vec<Message>> {
        match self {
            Queue::Local(q) => q.receive(max),
            Queue::Store(q) => q.receive(max).await,
            Queue::Azure(q) => q.receive(max).await,
        }
    }

    /// Make the delivery's file readable at `message.path` (Azure streams the
    /// blob to the spool). An error is the file's failure, to be nacked.
    pub async fn fetch(&self, message: &Message) -> std::result::Result<(), String> {
        match self {
            Queue::Local(_) => Ok(()),
            Queue::Store(q) => q.fetch(message).await,
            Queue::Azure(q) => q.fetch(message).await,
        }
    }

    /// The file was ingested (or found already ingested).
    pub async fn ack(&self, message: &Message) -> Result<()> {
        match self {
            Queue::Local(q) => q.ack(message),
            Queue::Store(q) => q.ack(message).await,
            Queue::Azure(q) => q.ack(message).await,
        }
    }

    /// The attempt failed: deliver again later, or dead-letter the file once
    /// it has failed `max_attempts` times. Returns whether it was dead-lettered.
    pub async fn nack(&self, message: &Message, reason: &str) -> Result<bool> {
        match self {
            Queue::Local(q) => q.nack(message, reason),
            Queue::Store(q) => q.nack(message, reason).await,
            Queue::Azure(q) => q.nack(message, reason).await,
        }
    }

    /// The dead letters (Azure: the first 32 the service shows).
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>> {
        match self {
            Queue::Local(q) => Ok(q.dead_letters()),
            Queue::Store(q) => q.dead_letters().await,
            Queue::Azure(q) => q.dead_letters().await,
        }
    }

    /// Put dead letters back (attempts start again). `which`: `table/file`
    /// keys, or all when empty. Returns the keys moved.
    pub async fn retry_dead(&self, which: &[String]) -> Result<Vec<String>> {
        match self {
            Queue::Local(q) => q.retry_dead(which),
            Queue::Store(q) => q.retry_dead(which).await,
            Queue::Azure(q) => q.retry_dead(which).await,
        }
    }

    /// Queue depth for status.
    pub async fn depth(&self) -> Result<QueueDepth> {
        match self {
            Queue::Local(q) => Ok(q.depth()),
            Queue::Store(q) => q.depth().await,
            Queue::Azure(q) => q.depth().await,
        }
    }
}
