//! An object store that fails on purpose (tests only): it wraps an
//! in-memory store and, for the next puts or gets, stores and then reports
//! a failure, fails without storing, or renames the store's answer — the
//! outcomes a real store gives under retries, timeouts and races (a retried
//! conditional put answered 412 for its own write, S3's 409 on a racing
//! create, object_store 0.13 reporting Azure's 412 as `Precondition`).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, Error, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// What the next put does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutFault {
    /// Store the object, then report a timeout.
    StoreThenTimeOut,
    /// Store the object, then answer as a retried request would: 412
    /// (`Precondition`).
    StoreThenPrecondition,
    /// Store the object, then answer "already exists".
    StoreThenAlreadyExists,
    /// Store nothing and report a timeout.
    TimeOutBeforeStoring,
    /// Store nothing: 409 Conflict, as S3 answers a racing create.
    Conflict,
    /// Report an existing object as `Precondition` instead of
    /// `AlreadyExists` (object_store 0.13 on Azure).
    ExistsAsPrecondition,
    /// Store nothing: permission denied.
    Denied,
}

/// A store whose next puts and gets fail as told; see [the module](self).
#[derive(Debug, Default)]
pub(crate) struct FaultyStore {
    inner: InMemory,
    puts: Mutex<VecDeque<PutFault>>,
    failing_gets: AtomicUsize,
    /// Puts and gets asked of the store, faulty or not.
    pub(crate) put_calls: AtomicUsize,
    pub(crate) get_calls: AtomicUsize,
}

fn generic(message: &str) -> Error {
    Error::Generic { store: "FaultyStore", source: message.to_owned().into() }
}

impl FaultyStore {
    /// Fail the next puts, one fault each, in order.
    pub(crate) fn fail_puts(&self, faults: impl IntoIterator<Item = PutFault>) {
        self.puts.lock().unwrap().extend(faults);
    }

    /// Fail the next `n` gets with a timeout.
    pub(crate) fn fail_gets(&self, n: usize) {
        self.failing_gets.store(n, Ordering::SeqCst);
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore")
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.put_calls.fetch_add(1, Ordering::SeqCst);
        let fault = self.puts.lock().unwrap().pop_front();
        let path = location.to_string();
        let source = || "injected".into();
        match fault {
            None => self.inner.put_opts(location, payload, opts).await,
            Some(PutFault::StoreThenTimeOut) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(generic("request timed out"))
            }
            Some(PutFault::StoreThenPrecondition) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(Error::Precondition { path, source: source() })
            }
            Some(PutFault::StoreThenAlreadyExists) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(Error::AlreadyExists { path, source: source() })
            }
            Some(PutFault::TimeOutBeforeStoring) => Err(generic("request timed out")),
            Some(PutFault::Conflict) => Err(generic("409 Conflict: ConditionalRequestConflict")),
            Some(PutFault::ExistsAsPrecondition) => {
                match self.inner.put_opts(location, payload, opts).await {
                    Err(Error::AlreadyExists { path, source }) => {
                        Err(Error::Precondition { path, source })
                    }
                    other => other,
                }
            }
            Some(PutFault::Denied) => Err(Error::PermissionDenied { path, source: source() }),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.get_calls.fetch_add(1, Ordering::SeqCst);
        let failing = self.failing_gets.load(Ordering::SeqCst);
        if failing > 0 {
            self.failing_gets.store(failing - 1, Ordering::SeqCst);
            return Err(generic("request timed out"));
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
