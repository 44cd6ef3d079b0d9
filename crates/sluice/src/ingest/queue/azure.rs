//! The Azure queue: messages on an Azure Storage Queue, each naming a blob
//! `<table>/<file>` of one container; blobs are read through `object_store`.
//!
//! A message may be
//! - a blob path: `trips/2026-11-30.csv`;
//! - JSON with a `blob` field: `{"blob": "trips/2026-11-30.csv"}`;
//! - an Event Grid `Microsoft.Storage.BlobCreated` event (its `subject` is
//!   `/blobServices/default/containers/<container>/blobs/<path>`), as the
//!   storage account's event subscription delivers it to a queue;
//!
//! each as text or base64 (what Azure Functions and some SDKs send).
//!
//! The semantics are the local queue's, with the service keeping the state:
//! a receive hides the message for `visibility_timeout_secs` and counts the
//! delivery (the dequeue count is the attempt number); the ack deletes it
//! after the commit; a nack makes it visible again after attempt ×
//! `retry_delay_ms`; at `max_attempts` — or when a message was received
//! `max_deliveries` times before, without an ack, because its processes
//! died — it moves to the dead-letter queue (`<queue>-poison`) as JSON with table,
//! name, attempts, reason and the original text. The blob is streamed to a
//! spool file (memory stays bounded for any size) and parsed from there.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::path::Path as BlobPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::azure_rest::{
    Credential, EMULATOR_ACCOUNT, EMULATOR_KEY, QueueClient, QueueMessage, create_container,
};
use super::{DeadLetter, Delivery, Message, QueueDepth, UNROUTED};
use crate::error::{Error, Result};
use crate::ingest::config::{AzureQueueConfig, QueueConfig};

/// The environment variable holding the account key.
pub const KEY_ENV: &str = "AZURE_STORAGE_ACCOUNT_KEY";
/// The environment variable holding a SAS token.
pub const SAS_ENV: &str = "AZURE_STORAGE_SAS_TOKEN";

/// An Azure Storage Queue of blob names.
#[derive(Clone)]
pub struct AzureQueue {
    queue: QueueClient,
    dead: QueueClient,
    blobs: Arc<dyn ObjectStore>,
    container: String,
    spool: PathBuf,
    config: QueueConfig,
}

impl std::fmt::Debug for AzureQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureQueue")
            .field("queue", &self.queue.name())
            .field("container", &self.container)
            .field("spool", &self.spool)
            .finish()
    }
}

/// A dead letter as the dead-letter queue holds it.
#[derive(Debug, Serialize, Deserialize)]
struct DeadMessage {
    table: String,
    name: String,
    #[serde(default)]
    blob: String,
    attempts: u32,
    reason: String,
    /// The original message text, put back by `retry`.
    message: String,
    #[serde(default)]
    at: String,
}

/// The Entra ID credential object_store's Azure support resolves from the
/// environment for `account` (it fetches, caches and renews tokens).
fn entra(
    account: &str,
    azure: &AzureQueueConfig,
) -> Result<object_store::azure::AzureCredentialProvider> {
    let mut builder = MicrosoftAzureBuilder::from_env()
        .with_account(account)
        .with_container_name(&azure.container);
    if let Some(url) = &azure.blob_endpoint {
        builder = builder.with_endpoint(url.clone()).with_allow_http(url.starts_with("http:"));
    }
    let store = builder.build().map_err(|e| Error::Azure {
        what: format!("Entra ID credentials for the Azure queue `{}`", azure.queue),
        message: format!(
            "{e}. Help: set {KEY_ENV} (the account key), {SAS_ENV} (a SAS token with queue and \
             blob access), or AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID"
        ),
    })?;
    Ok(store.credentials().clone())
}

impl AzureQueue {
    /// Connect to the queue, its dead-letter queue and the container,
    /// creating both queues when missing.
    pub async fn open(config: &QueueConfig, azure: &AzureQueueConfig) -> Result<AzureQueue> {
        let account = if azure.account.is_empty() && azure.use_emulator {
            EMULATOR_ACCOUNT.to_owned()
        } else {
            azure.account.clone()
        };
        let key = std::env::var(KEY_ENV).ok().filter(|k| !k.trim().is_empty());
        let sas = std::env::var(SAS_ENV).ok().filter(|k| !k.trim().is_empty());
        let (credential, key) = match (key, sas) {
            (Some(k), _) => (Credential::key(&k)?, Some(k)),
            (None, Some(s)) => (Credential::Sas(s.trim_start_matches('?').to_owned()), None),
            (None, None) if azure.use_emulator => {
                (Credential::key(EMULATOR_KEY)?, Some(EMULATOR_KEY.to_owned()))
            }
            // Entra ID, as object_store finds it for blobs: a service
            // principal (AZURE_CLIENT_ID, AZURE_CLIENT_SECRET,
            // AZURE_TENANT_ID), workload identity, or a managed identity.
            (None, None) => (Credential::Entra(entra(&account, azure)?), None),
        };
        let queue_endpoint = match (&azure.queue_endpoint, azure.use_emulator) {
            (Some(url), _) => url.clone(),
            (None, true) => {
                format!("{}/{account}", emulator_url("AZURITE_QUEUE_STORAGE_URL", 10001))
            }
            (None, false) => format!("https://{account}.queue.core.windows.net"),
        };
        let blob_endpoint = match (&azure.blob_endpoint, azure.use_emulator) {
            (Some(url), _) => url.clone(),
            (None, true) => {
                format!("{}/{account}", emulator_url("AZURITE_BLOB_STORAGE_URL", 10000))
            }
            (None, false) => format!("https://{account}.blob.core.windows.net"),
        };
        // The container may not exist yet on a fresh account (or Azurite);
        // a credential that may not create it can still read it.
        if let Err(e) =
            create_container(&blob_endpoint, &account, &credential, &azure.container).await
        {
            tracing::debug!(error = %e, "could not create the container (it may exist)");
        }
        let queue = QueueClient::new(&queue_endpoint, &account, &azure.queue, credential.clone())?;
        let dead_name =
            azure.dead_letter_queue.clone().unwrap_or_else(|| format!("{}-poison", azure.queue));
        let dead = queue.sibling(&dead_name)?;
        queue.create().await?;
        dead.create().await?;

        let mut builder = MicrosoftAzureBuilder::new()
            .with_account(&account)
            .with_container_name(&azure.container)
            .with_use_emulator(azure.use_emulator);
        if let Some(url) = azure.blob_endpoint.as_ref().filter(|_| !azure.use_emulator) {
            builder = builder.with_endpoint(url.clone()).with_allow_http(url.starts_with("http:"));
        }
        builder = match (&credential, key) {
            (Credential::Entra(provider), _) => builder.with_credentials(provider.clone()),
            (_, Some(k)) => builder.with_access_key(k),
            (_, None) => builder.with_config(
                AzureConfigKey::SasKey,
                std::env::var(SAS_ENV).unwrap_or_default().trim_start_matches('?'),
            ),
        };
        let blobs = builder.build().map_err(|e| Error::Azure {
            what: format!("open the blob container `{}`", azure.container),
            message: e.to_string(),
        })?;
        Ok(AzureQueue {
            queue,
            dead,
            blobs: Arc::new(blobs),
            container: azure.container.clone(),
            spool: azure.spool.clone(),
            config: config.clone(),
        })
    }

    /// For status lines.
    pub fn describe(&self) -> String {
        format!(
            "Azure queue `{}` (dead letters: `{}`), blobs of container `{}`",
            self.queue.name(),
            self.dead.name(),
            self.container
        )
    }

    /// The queue client (tests and tools put messages with it).
    pub fn client(&self) -> &QueueClient {
        &self.queue
    }

    /// The dead-letter queue client.
    pub fn dead_letter_client(&self) -> &QueueClient {
        &self.dead
    }

    /// Receive up to `max` messages. Messages that name no blob of a table
    /// are dead-lettered here and not returned; one received
    /// `max_deliveries` times before is returned `exhausted`.
    pub async fn receive(&self, max: usize) -> Result<Vec<Message>> {
        let received = self.queue.receive(max, self.config.visibility_timeout_secs).await?;
        let mut out = Vec::with_capacity(received.len());
        for m in received {
            let Some(receipt) = m.pop_receipt.clone() else { continue };
            let (table, name, blob) = match route(&m.text, &self.container) {
                Ok(parts) => parts,
                Err(reason) => {
                    let name = format!("message-{}", m.id);
                    self.bury(&m, &receipt, UNROUTED, &name, "", &reason).await?;
                    continue;
                }
            };
            // One spool file per delivery, not per message: a redelivery
            // (the visibility timeout ran out) may be fetched while the
            // first delivery's worker still reads its file.
            let path = self.spool.join(spool_name(&format!("{}-{}", m.id, m.dequeue_count)));
            out.push(Message {
                table,
                name,
                attempt: m.dequeue_count.max(1),
                path,
                // The service counts nacks as deliveries too; failures are
                // dead-lettered at max_attempts (lower) before this applies.
                exhausted: super::exhausted(
                    m.dequeue_count.saturating_sub(1),
                    self.config.max_deliveries,
                ),
                delivery: Delivery::Azure { id: m.id, pop_receipt: receipt, text: m.text, blob },
            });
        }
        Ok(out)
    }

    /// Stream the message's blob to its spool file.
    pub async fn fetch(&self, message: &Message) -> std::result::Result<(), String> {
        let Delivery::Azure { blob, .. } = &message.delivery else {
            return Err("internal: not an Azure delivery".into());
        };
        let where_ = format!("blob `{}/{blob}`", self.container);
        let location = BlobPath::parse(blob).map_err(|e| format!("{where_}: {e}"))?;
        let got = self.blobs.get(&location).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => {
                format!("{where_} does not exist (deleted before it was ingested?)")
            }
            other => format!("{where_}: {other}"),
        })?;
        if let Some(parent) = message.path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| format!("spool {}: {e}", parent.display()))?;
        }
        let mut file = tokio::fs::File::create(&message.path)
            .await
            .map_err(|e| format!("spool {}: {e}", message.path.display()))?;
        let mut stream = got.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("{where_}: reading: {e}"))?;
            file.write_all(&chunk)
                .await
                .map_err(|e| format!("spool {}: {e}", message.path.display()))?;
        }
        file.flush().await.map_err(|e| format!("spool {}: {e}", message.path.display()))?;
        Ok(())
    }

    fn forget_spool(&self, message: &Message) {
        if let Err(e) = std::fs::remove_file(&message.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %message.path.display(), error = %e, "cannot remove a spool file");
        }
    }

    /// The file's rows are committed: delete the message (and the blob when
    /// `after_ingest = "delete"`).
    pub async fn ack(&self, message: &Message) -> Result<()> {
        let Delivery::Azure { id, pop_receipt, blob, .. } = &message.delivery else {
            return Err(Error::Internal("an Azure ack of a local delivery".into()));
        };
        if !self.queue.delete(id, pop_receipt).await? {
            // Its visibility timeout expired and someone received it again:
            // that delivery will find the file already ingested and ack it.
            tracing::info!(
                file = %message.key(),
                "the message was received again before its ack; the redelivery is a duplicate"
            );
        }
        if self.config.after_ingest == "delete"
            && let Ok(location) = BlobPath::parse(blob)
        {
            match self.blobs.delete(&location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(Error::Azure {
                        what: format!("delete blob `{}/{blob}`", self.container),
                        message: e.to_string(),
                    });
                }
            }
        }
        self.forget_spool(message);
        Ok(())
    }

    /// The attempt failed: visible again after attempt × `retry_delay_ms`,
    /// or dead-lettered at `max_attempts`. Returns whether it was dead-lettered.
    pub async fn nack(&self, message: &Message, reason: &str) -> Result<bool> {
        let Delivery::Azure { id, pop_receipt, text, blob } = &message.delivery else {
            return Err(Error::Internal("an Azure nack of a local delivery".into()));
        };
        self.forget_spool(message);
        if message.attempt >= self.config.max_attempts || message.exhausted.is_some() {
            let why = super::dead_reason(message, reason);
            let m = QueueMessage {
                id: id.clone(),
                pop_receipt: Some(pop_receipt.clone()),
                dequeue_count: message.attempt,
                inserted: String::new(),
                text: text.clone(),
            };
            self.bury(&m, pop_receipt, &message.table, &message.name, blob, &why).await?;
            return Ok(true);
        }
        let delay_ms = u64::from(message.attempt).saturating_mul(self.config.retry_delay_ms);
        if self.queue.release(id, pop_receipt, delay_ms.div_ceil(1000)).await?.is_none() {
            tracing::info!(file = %message.key(), "the message was received again before its nack");
        }
        Ok(false)
    }

    /// Move a received message to the dead-letter queue: put first, then
    /// delete (a crash between leaves it in both; the copy in the main queue
    /// is dead-lettered again on its next receive, never lost).
    async fn bury(
        &self,
        m: &QueueMessage,
        receipt: &str,
        table: &str,
        name: &str,
        blob: &str,
        reason: &str,
    ) -> Result<()> {
        let dead = DeadMessage {
            table: table.to_owned(),
            name: name.to_owned(),
            blob: blob.to_owned(),
            attempts: m.dequeue_count,
            reason: reason.to_owned(),
            message: m.text.clone(),
            at: chrono::Utc::now().to_rfc3339(),
        };
        let text = serde_json::to_string(&dead)
            .map_err(|e| Error::Internal(format!("encoding a dead letter: {e}")))?;
        self.dead.put(&text).await?;
        self.queue.delete(&m.id, receipt).await?;
        tracing::warn!(table, file = name, reason, "dead-lettered");
        Ok(())
    }

    /// The dead letters the service shows (at most 32: a peek's limit).
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>> {
        Ok(self.dead.peek(32).await?.iter().map(|m| dead_letter(&m.text)).collect())
    }

    /// Put dead letters back on the queue as new messages. `which`:
    /// `table/file` keys, or all when empty. Returns the keys moved.
    pub async fn retry_dead(&self, which: &[String]) -> Result<Vec<String>> {
        let mut moved = Vec::new();
        let mut kept: Vec<(String, String)> = Vec::new();
        // Each receive hides its batch for a minute, so the loop sees every
        // dead letter once; the ones not asked for are released at the end.
        for _ in 0..10_000 {
            let batch = self.dead.receive(32, 60).await?;
            if batch.is_empty() {
                break;
            }
            for m in batch {
                let Some(receipt) = m.pop_receipt.clone() else { continue };
                let letter = dead_letter(&m.text);
                let key = format!("{}/{}", letter.table, letter.name);
                let original = serde_json::from_str::<DeadMessage>(&m.text).ok();
                match original {
                    Some(d)
                        if (which.is_empty() || which.contains(&key)) && d.table != UNROUTED =>
                    {
                        self.queue.put(&d.message).await?;
                        self.dead.delete(&m.id, &receipt).await?;
                        moved.push(key);
                    }
                    _ => kept.push((m.id, receipt)),
                }
            }
        }
        for (id, receipt) in kept {
            self.dead.release(&id, &receipt, 0).await?;
        }
        Ok(moved)
    }

    /// Messages waiting (the service's approximate count, in flight
    /// included), dead letters, and the age of the oldest visible message.
    pub async fn depth(&self) -> Result<QueueDepth> {
        let waiting = self.queue.approximate_count().await? as usize;
        let dead = self.dead.approximate_count().await? as usize;
        let oldest = self.queue.peek(1).await?;
        let oldest_waiting_secs = oldest
            .first()
            .and_then(|m| chrono::DateTime::parse_from_rfc2822(&m.inserted).ok())
            .map_or(0.0, |t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_milliseconds().max(0)
                    as f64
                    / 1000.0
            });
        Ok(QueueDepth { waiting, in_flight: 0, dead, oldest_waiting_secs })
    }
}

/// Azurite's URL of a service: the variable `object_store` also reads, or
/// the default port on loopback.
fn emulator_url(variable: &str, port: u16) -> String {
    std::env::var(variable)
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or_else(|_| format!("http://127.0.0.1:{port}"))
}

fn dead_letter(text: &str) -> DeadLetter {
    match serde_json::from_str::<DeadMessage>(text) {
        Ok(d) => DeadLetter { table: d.table, name: d.name, reason: d.reason },
        Err(_) => DeadLetter {
            table: UNROUTED.into(),
            name: String::new(),
            reason: format!("not a sluice dead letter: {text}"),
        },
    }
}

/// A spool file name from a message id (ids are GUIDs; anything else is
/// hashed, so no message can name a path).
fn spool_name(id: &str) -> String {
    if !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        id.to_owned()
    } else {
        blake3::hash(id.as_bytes()).to_hex().to_string()
    }
}

/// The Event Grid event (the parts read).
#[derive(Deserialize)]
struct Notice {
    blob: Option<String>,
    subject: Option<String>,
    #[serde(rename = "eventType", alias = "type")]
    event_type: Option<String>,
}

/// `(table, name, blob)` of a message, or why it names no table's blob.
fn route(text: &str, container: &str) -> std::result::Result<(String, String, String), String> {
    let text = text.trim();
    let decoded = if text.starts_with('{') {
        None
    } else {
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    let text = decoded.as_deref().map_or(text, str::trim);
    let blob = if text.starts_with('{') {
        let notice: Notice = serde_json::from_str(text)
            .map_err(|e| format!("the message is not valid JSON ({e}): {}", short(text)))?;
        if let Some(kind) = &notice.event_type
            && !kind.ends_with("BlobCreated")
        {
            return Err(format!("an event of type `{kind}`, not a BlobCreated event"));
        }
        match (notice.blob, notice.subject) {
            (Some(blob), _) => blob,
            (None, Some(subject)) => {
                let prefix = format!("/blobServices/default/containers/{container}/blobs/");
                match subject.strip_prefix(&prefix) {
                    Some(blob) => blob.to_owned(),
                    None => {
                        return Err(format!(
                            "the event's subject `{subject}` is not a blob of container \
                             `{container}`"
                        ));
                    }
                }
            }
            (None, None) => {
                return Err(format!(
                    "the message names no blob (expected a `blob` or `subject` field): {}",
                    short(text)
                ));
            }
        }
    } else {
        text.to_owned()
    };
    let parsed = BlobPath::parse(&blob)
        .map_err(|e| format!("`{}` is not a safe blob path: {e}", short(&blob)))?;
    let mut parts = parsed.parts();
    let table = parts.next().map(|p| p.as_ref().to_owned()).unwrap_or_default();
    let name: Vec<String> = parts.map(|p| p.as_ref().to_owned()).collect();
    if table.is_empty() || name.is_empty() {
        return Err(format!("blob `{blob}` is not under a table folder: expected <table>/<file>"));
    }
    Ok((table, name.join("/"), parsed.to_string()))
}

fn short(text: &str) -> String {
    let mut end = text.len().min(120);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() { format!("{}…", &text[..end]) } else { text.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_a_blob_in_any_of_the_accepted_forms() {
        let want = Ok(("trips".to_owned(), "2026/a.csv".to_owned(), "trips/2026/a.csv".to_owned()));
        assert_eq!(route("trips/2026/a.csv", "drop"), want);
        assert_eq!(route(r#"{"blob": "trips/2026/a.csv"}"#, "drop"), want);
        let event = r#"{"eventType": "Microsoft.Storage.BlobCreated",
            "subject": "/blobServices/default/containers/drop/blobs/trips/2026/a.csv",
            "data": {"url": "https://acct.blob.core.windows.net/drop/trips/2026/a.csv"}}"#;
        assert_eq!(route(event, "drop"), want);
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, event);
        assert_eq!(route(&b64, "drop"), want);
    }

    #[test]
    fn messages_naming_no_table_blob_are_refused_with_the_reason() {
        for (text, why) in [
            ("trips/../../etc/passwd", "not a safe blob path"),
            ("loose.csv", "not under a table folder"),
            ("{not json", "not valid JSON"),
            (r#"{"x": 1}"#, "names no blob"),
            (
                r#"{"eventType": "Microsoft.Storage.BlobDeleted", "subject": "/x"}"#,
                "not a BlobCreated",
            ),
            (
                r#"{"subject": "/blobServices/default/containers/other/blobs/t/a.csv"}"#,
                "not a blob of container `drop`",
            ),
        ] {
            let err = route(text, "drop").unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn spool_names_cannot_escape_the_spool() {
        assert_eq!(
            spool_name("5d0c1a2e-0b8f-4a61-9a39-1c8d3f6a0e11"),
            "5d0c1a2e-0b8f-4a61-9a39-1c8d3f6a0e11"
        );
        assert_eq!(spool_name("../../x").len(), 64);
    }
}
