//! A small client for the Azure Queue Storage REST API: the seven calls the
//! ingestion queue needs (create, put, get, peek, update, delete, count),
//! signed with the account key (Shared Key), authorised by a SAS token, or
//! by an Entra ID token (a service principal, workload identity or managed
//! identity, as object_store resolves them for blobs, from the same
//! `AZURE_*` variables; object_store fetches and renews the token).
//!
//! Why not a crate: the official `azure_storage_queue` (1.x) authenticates
//! with Entra tokens or SAS URLs only, so an account key — what Azurite and
//! most storage accounts hand out — would still need signing code here, plus
//! a second HTTP and XML stack to compile; the community crates that sign
//! with account keys are no longer maintained. This client reuses what
//! `object_store`'s Azure support already compiles into sluice (reqwest,
//! ring's HMAC, quick-xml, base64), and the API it speaks is small, stable
//! and documented ("Queue Service REST API", version below).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use url::Url;

use crate::error::{Error, Result};

/// The REST API version spoken (supported by Azure and Azurite 3.x).
const API_VERSION: &str = "2021-12-02";

/// Azurite's development account (public, documented by Microsoft).
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's development account key (public, documented by Microsoft).
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How requests are authorised.
#[derive(Clone)]
pub enum Credential {
    /// Shared Key: the account key, base64-decoded.
    Key(Vec<u8>),
    /// A SAS token (the query string, without `?`).
    Sas(String),
    /// Entra ID: bearer tokens from object_store's provider (which caches
    /// and renews them).
    Entra(object_store::azure::AzureCredentialProvider),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Key(_) => "Credential::Key(<redacted>)",
            Credential::Sas(_) => "Credential::Sas(<redacted>)",
            Credential::Entra(_) => "Credential::Entra(<redacted>)",
        })
    }
}

impl Credential {
    /// An account key as Azure shows it (base64).
    pub fn key(base64_key: &str) -> Result<Credential> {
        BASE64
            .decode(base64_key.trim())
            .map(Credential::Key)
            .map_err(|e| Error::InvalidInput(format!("the Azure account key is not base64: {e}")))
    }
}

/// One received (or peeked) message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    /// The service's message id.
    pub id: String,
    /// Needed to delete or update the message; absent when peeked.
    pub pop_receipt: Option<String>,
    /// How many times the message was received, this time included.
    pub dequeue_count: u32,
    /// When the message was put, as sent by the service (RFC 1123).
    pub inserted: String,
    /// The message text (XML-unescaped).
    pub text: String,
}

#[derive(Deserialize)]
struct MessageList {
    #[serde(rename = "QueueMessage", default)]
    messages: Vec<RawMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawMessage {
    message_id: String,
    #[serde(default)]
    pop_receipt: Option<String>,
    #[serde(default)]
    dequeue_count: u32,
    #[serde(default)]
    insertion_time: String,
    #[serde(default)]
    message_text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UpdatedReceipt {
    #[serde(default)]
    pop_receipt: Option<String>,
}

/// A client for one queue.
#[derive(Debug, Clone)]
pub struct QueueClient {
    http: reqwest::Client,
    account: String,
    credential: Credential,
    /// `<endpoint>/<queue>`.
    url: Url,
    name: String,
}

impl QueueClient {
    /// A client for `queue` at `endpoint` (e.g.
    /// `https://<account>.queue.core.windows.net` or Azurite's
    /// `http://127.0.0.1:10001/devstoreaccount1`).
    pub fn new(
        endpoint: &str,
        account: &str,
        queue: &str,
        credential: Credential,
    ) -> Result<QueueClient> {
        check_queue_name(queue)?;
        let base = endpoint.trim_end_matches('/');
        let url = Url::parse(&format!("{base}/{queue}")).map_err(|e| {
            Error::InvalidInput(format!("invalid Azure queue endpoint `{endpoint}`: {e}"))
        })?;
        Ok(QueueClient {
            http: reqwest::Client::new(),
            account: account.to_owned(),
            credential,
            url,
            name: queue.to_owned(),
        })
    }

    /// The same account and credential, another queue.
    pub fn sibling(&self, queue: &str) -> Result<QueueClient> {
        check_queue_name(queue)?;
        let mut url = self.url.clone();
        url.path_segments_mut()
            .map_err(|()| Error::InvalidInput(format!("invalid Azure queue URL {}", self.url)))?
            .pop()
            .push(queue);
        Ok(QueueClient { url, name: queue.to_owned(), ..self.clone() })
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Create the queue; an existing queue is fine.
    pub async fn create(&self) -> Result<()> {
        let status = self.send(Method::PUT, self.url.clone(), &[], None).await?.0;
        match status {
            StatusCode::CREATED | StatusCode::NO_CONTENT => Ok(()),
            other => Err(self.failed("create the queue", other, "")),
        }
    }

    /// Put a message (visible at once, kept for the service's maximum).
    pub async fn put(&self, text: &str) -> Result<()> {
        let body = format!(
            "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
            quick_xml::escape::escape(text)
        );
        // -1: the message never expires (the default is seven days).
        let (status, reply) = self
            .send(Method::POST, self.messages(None), &[("messagettl", "-1")], Some(body))
            .await?;
        match status {
            StatusCode::CREATED => Ok(()),
            other => Err(self.failed("put a message", other, &reply)),
        }
    }

    /// Receive up to `max` (1–32) messages, each invisible to others for
    /// `visibility_secs`; the service counts the delivery.
    pub async fn receive(&self, max: usize, visibility_secs: u64) -> Result<Vec<QueueMessage>> {
        let n = max.clamp(1, 32).to_string();
        let v = visibility_secs.clamp(1, 7 * 24 * 3600).to_string();
        self.list("receive messages", &[("numofmessages", &n), ("visibilitytimeout", &v)]).await
    }

    /// Look at up to `max` (1–32) visible messages without receiving them.
    pub async fn peek(&self, max: usize) -> Result<Vec<QueueMessage>> {
        let n = max.clamp(1, 32).to_string();
        self.list("peek messages", &[("peekonly", "true"), ("numofmessages", &n)]).await
    }

    async fn list(&self, what: &str, query: &[(&str, &str)]) -> Result<Vec<QueueMessage>> {
        let (status, reply) = self.send(Method::GET, self.messages(None), query, None).await?;
        if status != StatusCode::OK {
            return Err(self.failed(what, status, &reply));
        }
        let list: MessageList = quick_xml::de::from_str(&reply).map_err(|e| Error::Azure {
            what: format!("{what} from queue `{}`", self.name),
            message: format!("unreadable reply ({e}): {}", excerpt(&reply)),
        })?;
        Ok(list
            .messages
            .into_iter()
            .map(|m| QueueMessage {
                id: m.message_id,
                pop_receipt: m.pop_receipt,
                dequeue_count: m.dequeue_count,
                inserted: m.insertion_time,
                text: m.message_text,
            })
            .collect())
    }

    /// Delete a received message. `Ok(false)`: it was gone, or its receipt
    /// is stale (it became visible again and someone else received it).
    pub async fn delete(&self, id: &str, pop_receipt: &str) -> Result<bool> {
        let (status, reply) = self
            .send(Method::DELETE, self.messages(Some(id)), &[("popreceipt", pop_receipt)], None)
            .await?;
        match status {
            StatusCode::NO_CONTENT => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            other => Err(self.failed("delete a message", other, &reply)),
        }
    }

    /// Make a received message visible again after `visibility_secs` (0:
    /// at once). Returns the new pop receipt, or `None` when the receipt was
    /// stale.
    pub async fn release(
        &self,
        id: &str,
        pop_receipt: &str,
        visibility_secs: u64,
    ) -> Result<Option<String>> {
        let v = visibility_secs.min(7 * 24 * 3600).to_string();
        let (status, reply, receipt) = self
            .send_full(
                Method::PUT,
                self.messages(Some(id)),
                &[("popreceipt", pop_receipt), ("visibilitytimeout", &v)],
                None,
            )
            .await?;
        match status {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(receipt.or_else(|| {
                quick_xml::de::from_str::<UpdatedReceipt>(&reply).ok().and_then(|r| r.pop_receipt)
            })),
            StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST => Ok(None),
            other => Err(self.failed("release a message", other, &reply)),
        }
    }

    /// The service's approximate number of messages (visible or not).
    pub async fn approximate_count(&self) -> Result<u64> {
        let (status, reply, count) =
            self.send_full(Method::GET, self.url.clone(), &[("comp", "metadata")], None).await?;
        match (status, count) {
            (StatusCode::OK, Some(n)) => n.parse().map_err(|_| Error::Azure {
                what: format!("count the messages of queue `{}`", self.name),
                message: format!("the service sent the count `{n}`"),
            }),
            (other, _) => Err(self.failed("count the messages", other, &reply)),
        }
    }

    fn messages(&self, id: Option<&str>) -> Url {
        let mut url = self.url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.push("messages");
            if let Some(id) = id {
                path.push(id);
            }
        }
        url
    }

    fn failed(&self, what: &str, status: StatusCode, reply: &str) -> Error {
        Error::Azure {
            what: format!("{what} on queue `{}` ({})", self.name, self.url),
            message: format!("HTTP {status}: {}", excerpt(reply)),
        }
    }

    async fn send(
        &self,
        method: Method,
        url: Url,
        query: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<(StatusCode, String)> {
        self.send_full(method, url, query, body).await.map(|(s, r, _)| (s, r))
    }

    async fn send_full(
        &self,
        method: Method,
        url: Url,
        query: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<(StatusCode, String, Option<String>)> {
        let account =
            Account { http: &self.http, name: &self.account, credential: &self.credential };
        account.send(method, url, query, body).await
    }
}

/// Attempts of one queue request before its failure is reported.
const MAX_ATTEMPTS: u32 = 6;

/// Whether an answer is worth asking again: throttling, a request timeout,
/// or a server error that may pass.
fn retried(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// Exponential backoff from 100 ms, capped at 10 s, with up to 50% jitter.
fn backoff(attempt: u32) -> std::time::Duration {
    let base = 100u64.saturating_mul(1 << attempt.min(7)).min(10_000);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    std::time::Duration::from_millis(base / 2 + nanos % (base / 2 + 1))
}

/// The wait a throttled answer asks for (`Retry-After` in seconds), capped
/// at a minute.
fn retry_after(response: &reqwest::Response) -> Option<std::time::Duration> {
    let seconds: u64 = response.headers().get("retry-after")?.to_str().ok()?.trim().parse().ok()?;
    Some(std::time::Duration::from_secs(seconds.min(60)))
}

/// What signs and sends a request of one storage account.
struct Account<'a> {
    http: &'a reqwest::Client,
    name: &'a str,
    credential: &'a Credential,
}

impl Account<'_> {
    /// One attempt of a request, dated and signed now.
    async fn request(
        &self,
        method: &Method,
        url: &Url,
        body: &str,
    ) -> Result<reqwest::RequestBuilder> {
        let date = chrono::Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        let length = body.len();
        let content_type = if length > 0 { "application/xml" } else { "" };
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .header("x-ms-date", &date)
            .header("x-ms-version", API_VERSION)
            .header("content-length", length);
        if length > 0 {
            request = request.header("content-type", content_type);
        }
        if let Credential::Key(key) = self.credential {
            let headers = [("x-ms-date", date.as_str()), ("x-ms-version", API_VERSION)];
            let to_sign =
                string_to_sign(method.as_str(), length, content_type, &headers, self.name, url);
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
            let tag = ring::hmac::sign(&key, to_sign.as_bytes());
            request = request.header(
                "authorization",
                format!("SharedKey {}:{}", self.name, BASE64.encode(tag.as_ref())),
            );
        }
        if let Credential::Entra(provider) = self.credential {
            use object_store::azure::AzureCredential;
            let token = provider.get_credential().await.map_err(|e| Error::Azure {
                what: format!("an Entra ID token for account `{}`", self.name),
                message: format!(
                    "{e}. Help: set AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or \
                     AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID, or run where a \
                     managed identity is assigned"
                ),
            })?;
            request = match token.as_ref() {
                AzureCredential::BearerToken(token) => {
                    request.header("authorization", format!("Bearer {token}"))
                }
                other => {
                    return Err(Error::Azure {
                        what: format!("authorising a queue request of account `{}`", self.name),
                        message: format!(
                            "the credential chain gave {} where a token was expected",
                            match other {
                                AzureCredential::AccessKey(_) => "an account key",
                                _ => "a SAS token",
                            }
                        ),
                    });
                }
            };
        }
        Ok(request.body(body.to_owned()))
    }

    /// Send a request; returns status, body and the one response header the
    /// caller may need (a new pop receipt, or the message count). Throttling
    /// (429), server errors (500, 502, 503, 504), request timeouts (408) and
    /// a service that does not answer are retried with exponential backoff
    /// and jitter, honouring `Retry-After` — as object_store retries blob
    /// requests. A retried call is still safe: the queue is at-least-once
    /// (ingestion de-duplicates by content), and a delete or update whose
    /// first attempt landed reads as a stale receipt, which callers treat
    /// as done.
    async fn send(
        &self,
        method: Method,
        mut url: Url,
        query: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<(StatusCode, String, Option<String>)> {
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        if let Credential::Sas(token) = self.credential {
            let token = token.trim_start_matches('?');
            let with_sas = match url.query() {
                Some(q) if !q.is_empty() => format!("{q}&{token}"),
                _ => token.to_owned(),
            };
            url.set_query(Some(&with_sas));
        }
        let body = body.unwrap_or_default();
        let mut attempt = 0;
        let response = loop {
            attempt += 1;
            let sent = self.request(&method, &url, &body).await?.send().await;
            let wait = match &sent {
                Ok(response) if !retried(response.status()) => None,
                Ok(response) => Some(retry_after(response).unwrap_or_else(|| backoff(attempt))),
                Err(e) if e.is_builder() => None,
                Err(_) => Some(backoff(attempt)),
            };
            match wait {
                Some(wait) if attempt < MAX_ATTEMPTS => {
                    tracing::debug!(%method, url = %redact(&url), attempt, ?wait, "retrying a queue request");
                    tokio::time::sleep(wait).await;
                }
                _ => {
                    break sent.map_err(|e| Error::Azure {
                        what: format!("{method} {}", redact(&url)),
                        message: format!(
                            "the queue service did not answer ({attempt} attempts): {e}"
                        ),
                    })?;
                }
            }
        };
        let status = response.status();
        let header = response
            .headers()
            .get("x-ms-popreceipt")
            .or_else(|| response.headers().get("x-ms-approximate-messages-count"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.unwrap_or_default();
        Ok((status, text, header))
    }
}

/// Create a blob container at `endpoint` (e.g.
/// `https://<account>.blob.core.windows.net`); an existing one is fine.
pub async fn create_container(
    endpoint: &str,
    account: &str,
    credential: &Credential,
    container: &str,
) -> Result<()> {
    let url =
        Url::parse(&format!("{}/{container}", endpoint.trim_end_matches('/'))).map_err(|e| {
            Error::InvalidInput(format!("invalid Azure blob endpoint `{endpoint}`: {e}"))
        })?;
    let http = reqwest::Client::new();
    let account = Account { http: &http, name: account, credential };
    let (status, reply, _) =
        account.send(Method::PUT, url.clone(), &[("restype", "container")], None).await?;
    match status {
        StatusCode::CREATED | StatusCode::CONFLICT => Ok(()),
        other => Err(Error::Azure {
            what: format!("create container `{container}` ({})", redact(&url)),
            message: format!("HTTP {other}: {}", excerpt(&reply)),
        }),
    }
}

/// Queue names: 3–63 lowercase letters, digits and single hyphens.
fn check_queue_name(name: &str) -> Result<()> {
    let ok = (3..=63).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "`{name}` is not a valid Azure queue name: 3-63 lowercase letters, digits and single \
             hyphens, starting and ending with a letter or digit"
        )))
    }
}

/// The Shared Key string to sign for a request with only `x-ms-*` headers
/// besides content length and type.
fn string_to_sign(
    verb: &str,
    content_length: usize,
    content_type: &str,
    ms_headers: &[(&str, &str)],
    account: &str,
    url: &Url,
) -> String {
    let length = if content_length == 0 { String::new() } else { content_length.to_string() };
    let mut headers: Vec<(String, &str)> =
        ms_headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim())).collect();
    headers.sort();
    let mut out = format!("{verb}\n\n\n{length}\n\n{content_type}\n\n\n\n\n\n\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}:{v}\n"));
    }
    // The resource: /<account><path>, then each query parameter (lowercase
    // name, sorted) as `\nname:value1,value2`, values decoded.
    out.push('/');
    out.push_str(account);
    out.push_str(url.path());
    let mut params: Vec<(String, String)> =
        url.query_pairs().map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned())).collect();
    params.sort();
    let mut i = 0;
    while i < params.len() {
        let name = params[i].0.clone();
        let mut values = Vec::new();
        while i < params.len() && params[i].0 == name {
            values.push(params[i].1.clone());
            i += 1;
        }
        out.push_str(&format!("\n{name}:{}", values.join(",")));
    }
    out
}

fn excerpt(text: &str) -> String {
    let t = text.trim();
    if t.len() <= 300 {
        return t.to_owned();
    }
    let mut end = 300;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &t[..end])
}

/// A URL without its query (which may hold a SAS token).
fn redact(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}

#[cfg(test)]
mod tests {

    /// A server on 127.0.0.1 that answers each connection with the next of
    /// `answers` (status line and headers), and counts the requests.
    async fn answering(
        answers: Vec<&'static str>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        tokio::spawn(async move {
            for answer in answers {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut request).await;
                counter.fetch_add(1, Ordering::SeqCst);
                let reply = format!("{answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                socket.write_all(reply.as_bytes()).await.unwrap();
            }
        });
        (format!("http://{address}/devstoreaccount1"), seen)
    }

    /// A server on 127.0.0.1 that answers each connection with the next of
    /// `answers` (status line and headers, body), and keeps each request.
    async fn recording(
        answers: Vec<(&'static str, &'static str)>,
    ) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            for (head, body) in answers {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = vec![0u8; 64 * 1024];
                let n = socket.read(&mut request).await.unwrap_or_default();
                kept.lock().unwrap().push(String::from_utf8_lossy(&request[..n]).into_owned());
                let reply = format!(
                    "{head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                socket.write_all(reply.as_bytes()).await.unwrap();
            }
        });
        (format!("http://{address}"), seen)
    }

    /// A service principal's token, fetched once from the authority (here
    /// a local server standing in for Entra ID) and sent as a bearer token
    /// with every queue request.
    #[tokio::test]
    async fn an_entra_id_token_authorises_queue_requests() {
        let token = r#"{"access_token":"tok-123","expires_in":3600,"token_type":"Bearer"}"#;
        let (base, seen) = recording(vec![
            ("HTTP/1.1 200 OK\r\ncontent-type: application/json", token),
            ("HTTP/1.1 201 Created", ""),
            ("HTTP/1.1 204 No Content", ""),
        ])
        .await;
        let store = object_store::azure::MicrosoftAzureBuilder::new()
            .with_account("acct")
            .with_container_name("c")
            .with_client_id("app")
            .with_client_secret("s3cret")
            .with_tenant_id("tenant")
            .with_authority_host(base.clone())
            .with_allow_http(true)
            .build()
            .unwrap();
        let credential = Credential::Entra(store.credentials().clone());
        assert!(!format!("{credential:?}").contains("s3cret"));
        let queue =
            QueueClient::new(&format!("{base}/acct"), "acct", "events", credential).unwrap();
        queue.create().await.unwrap();
        queue.create().await.unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "one token for both requests: {seen:?}");
        assert!(seen[0].starts_with("POST /tenant/oauth2/v2.0/token"), "{}", seen[0]);
        for request in &seen[1..] {
            assert!(request.starts_with("PUT /acct/events"), "{request}");
            assert!(request.to_lowercase().contains("authorization: bearer tok-123"), "{request}");
        }
    }

    #[tokio::test]
    async fn throttling_and_server_errors_are_retried_with_backoff() {
        let (endpoint, seen) = answering(vec![
            "HTTP/1.1 503 Server Busy",
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 0",
            "HTTP/1.1 500 Internal Server Error",
            "HTTP/1.1 201 Created",
        ])
        .await;
        let credential = Credential::key(EMULATOR_KEY).unwrap();
        let queue = QueueClient::new(&endpoint, EMULATOR_ACCOUNT, "events", credential).unwrap();
        queue.create().await.unwrap();
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_refusal_is_not_retried_and_a_lasting_outage_is_reported() {
        let (endpoint, seen) = answering(vec!["HTTP/1.1 403 Forbidden"]).await;
        let credential = Credential::key(EMULATOR_KEY).unwrap();
        let queue = QueueClient::new(&endpoint, EMULATOR_ACCOUNT, "events", credential).unwrap();
        let err = queue.create().await.unwrap_err().to_string();
        assert!(err.contains("403"), "{err}");
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);

        let busy = vec!["HTTP/1.1 503 Server Busy\r\nretry-after: 0"; MAX_ATTEMPTS as usize];
        let (endpoint, seen) = answering(busy).await;
        let credential = Credential::key(EMULATOR_KEY).unwrap();
        let queue = QueueClient::new(&endpoint, EMULATOR_ACCOUNT, "events", credential).unwrap();
        let err = queue.create().await.unwrap_err().to_string();
        assert!(err.contains("503"), "{err}");
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), MAX_ATTEMPTS as usize);
    }

    use super::*;

    #[test]
    fn the_string_to_sign_follows_the_shared_key_rules() {
        let url = Url::parse(
            "http://127.0.0.1:10001/devstoreaccount1/landing/messages?visibilitytimeout=30&numofmessages=5",
        )
        .unwrap();
        let s = string_to_sign(
            "GET",
            0,
            "",
            &[("x-ms-version", "2021-12-02"), ("x-ms-date", "Mon, 30 Nov 2026 22:00:00 GMT")],
            "devstoreaccount1",
            &url,
        );
        assert_eq!(
            s,
            "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:Mon, 30 Nov 2026 22:00:00 GMT\nx-ms-version:2021-12-02\n\
             /devstoreaccount1/devstoreaccount1/landing/messages\nnumofmessages:5\nvisibilitytimeout:30"
        );
        let put = string_to_sign("POST", 12, "application/xml", &[], "acct", &url);
        assert!(put.starts_with("POST\n\n\n12\n\napplication/xml\n"), "{put}");
    }

    #[test]
    fn queue_names_are_checked_before_any_request() {
        for bad in ["ab", "Upper", "a--b", "-ab", "ab-", "a_b", "../x"] {
            assert!(check_queue_name(bad).is_err(), "{bad}");
        }
        for good in ["abc", "landing-poison", "q1"] {
            assert_eq!(check_queue_name(good).is_ok(), good.len() >= 3, "{good}");
        }
    }

    #[test]
    fn credentials_never_print_their_secret() {
        let key = Credential::key(EMULATOR_KEY).unwrap();
        assert!(!format!("{key:?}").contains("Eby8"));
        assert!(Credential::key("not base64!").is_err());
    }
}
