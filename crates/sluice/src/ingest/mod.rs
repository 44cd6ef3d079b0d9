//! Event-driven ingestion: files landing at irregular times become rows of
//! declared tables, each file exactly once.
//!
//! ```text
//!  landing/<table>/*.csv|parquet|jsonl
//!      │ claim (atomic rename; visibility timeout; dequeue count)      queue
//!      ▼
//!  N workers: hash, parse, cast to the YAML schema, write Parquet      parse
//!      │ bounded channel (backpressure)
//!      ▼
//!  one writer: per table, one Delta commit per flush, the files' keys   writer
//!  and hashes in the same commit; then ledger rows, then ack           ledger
//!      ▼
//!  <lake>/raw/<table>   (+ <table>_rejects, ingest/ledger)
//! ```
//!
//! Exactly once does not rest on the queue (delivery is at least once) nor
//! on the ledger (written after the commit), but on the table: a file's
//! rows and its key become visible in one commit, and a commit is made only
//! on top of the version whose keys were checked (see [`writer`]). A file
//! that keeps failing is dead-lettered after `max_attempts` with its reason
//! and a ledger row, and the stream goes on.

pub mod config;
pub mod dedup;
pub mod forget;
pub mod ledger;
pub mod parse;
pub mod queue;
pub mod schema;
pub mod transform;
pub mod upsert;
pub mod writer;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use deltalake::DeltaTable;
use deltalake::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use deltalake::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use deltalake::kernel::Add;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use futures::TryStreamExt;
use serde::Serialize;
use tokio::sync::mpsc;

pub use config::IngestConfig;
pub use queue::{DeadLetter, LocalQueue, Message, Queue, QueueDepth};
pub use schema::TableSchema;

use self::ledger::LedgerRow;
use self::parse::{FileError, RowViolation};
use self::writer::{ReadyFile, Target};
use crate::error::{Error, Result};
use crate::lake::layout::TableSpec;
use crate::lake::{append, delta::table};

/// Rows a worker writes before it closes a data file (bounds its memory).
const ROWS_PER_DATA_FILE: usize = 1 << 20;

/// An ingestion table of the raw layer (`<lake>/raw/<table>`).
pub fn raw_table(table: &str) -> TableSpec {
    TableSpec::ingestion(table, &format!("{}/{table}", crate::lake::layout::RAW_DIR))
}

fn rejects_name(table: &str) -> String {
    format!("{table}_rejects")
}

/// How long to run.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Ingest what is in the landing zone, then stop.
    Once,
    /// Keep polling until the flag is set.
    Watch(Arc<AtomicBool>),
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IngestReport {
    /// Files whose rows landed.
    pub files: u64,
    /// Rows that landed.
    pub rows: u64,
    /// Files found already ingested (redeliveries, same content).
    pub duplicates: u64,
    /// Files ingested under a name already ingested with other content
    /// (counted in `files` too).
    pub changed: u64,
    /// Failed attempts (delivered again later).
    pub retried: u64,
    /// Files dead-lettered.
    pub dead: u64,
    /// Rows sent to rejects tables.
    pub rejected: u64,
    /// Commits made.
    pub commits: u64,
    /// Ledger rows written on startup for commits the ledger lacked.
    pub ledger_repaired: u64,
    /// Transform commits made (aggregate appends and curated merges).
    pub transform_commits: u64,
    /// Transform failures (each message once); their upstream rows are
    /// transformed by a later run.
    pub transform_errors: Vec<String>,
    /// Wall time.
    pub seconds: f64,
    /// Commit latency of each flush, seconds.
    #[serde(skip)]
    pub flush_seconds: Vec<f64>,
}

/// What a worker hands the writer.
enum Outcome {
    Ready(ReadyFile),
    Failed(Message, String),
}

/// One table's parts for the workers.
#[derive(Clone)]
struct TableParts {
    schema: Arc<TableSchema>,
    handle: DeltaTable,
    rejects: Option<DeltaTable>,
}

/// An ingestion process: the config, the schemas, the tables.
pub struct Ingestor {
    config: IngestConfig,
    queue: Queue,
    tables: BTreeMap<String, TableParts>,
}

fn rejects_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(schema::SOURCE_FILE_COLUMN, DataType::Utf8, false),
        Field::new("line", DataType::Int64, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new(
            schema::INGESTED_AT_COLUMN,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]))
}

impl Ingestor {
    /// Load the config's schemas and open (or create) their tables.
    pub async fn open(config: IngestConfig) -> Result<Ingestor> {
        let schemas = schema::load_dir(&config.schemas)?;
        if schemas.is_empty() {
            return Err(Error::Config {
                path: config.schemas.clone(),
                message: "no table schemas (<table>.yaml) in this folder".into(),
            });
        }
        check_names(&config, &schemas).await?;
        let mut tables = BTreeMap::new();
        for s in schemas {
            let handle = table::open_or_create(
                &config.lake,
                &raw_table(&s.name),
                &s.table_schema(),
                s.partition_by.clone(),
            )
            .await?;
            let rejects = match s.on_row_error {
                schema::OnRowError::Reject => {
                    let name = rejects_name(&s.name);
                    Some(
                        table::open_or_create(
                            &config.lake,
                            &raw_table(&name),
                            &rejects_schema(),
                            vec![],
                        )
                        .await?,
                    )
                }
                schema::OnRowError::FailFile => None,
            };
            tables.insert(s.name.clone(), TableParts { schema: Arc::new(s), handle, rejects });
        }
        for t in &config.transforms {
            let clash = |message: String| Error::Config { path: config.path.clone(), message };
            let (layer, upstream) = t.upstream();
            if layer == crate::lake::layout::RAW_DIR && !tables.contains_key(upstream) {
                return Err(clash(format!(
                    "transform `{}` reads `{}`, but no schema declares the raw table `{upstream}`",
                    t.name, t.from
                )));
            }
        }
        let queue = Queue::open(&config.queue).await?;
        Ok(Ingestor { config, queue, tables })
    }

    /// Run the medallion transforms once, in order (see [`transform`]).
    pub async fn transform(&self) -> Result<Vec<transform::TransformReport>> {
        let _writer = crate::lake::writer::ingestion(&self.config.lake).await?;
        transform::run_all(&self.config.lake, &self.config.transforms).await
    }

    /// Run the transforms after a commit. A failing transform is reported
    /// (and tried again after the next commit) but stops neither the others
    /// nor ingestion: raw rows keep landing while its SQL is fixed.
    async fn transform_into(&self, report: &mut IngestReport) {
        for t in &self.config.transforms {
            match transform::run(&self.config.lake, t).await {
                Ok(done) => report.transform_commits += u64::from(done.version.is_some()),
                Err(e) => {
                    tracing::error!(transform = %t.name, error = %e, "a transform failed");
                    let message = e.to_string();
                    if !report.transform_errors.contains(&message) {
                        report.transform_errors.push(message);
                    }
                }
            }
        }
    }

    /// The queue.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The declared tables.
    pub fn schemas(&self) -> Vec<&TableSchema> {
        self.tables.values().map(|t| t.schema.as_ref()).collect()
    }

    async fn targets(&self) -> Result<(BTreeMap<String, Target>, BTreeMap<String, Target>)> {
        let lake = &self.config.lake;
        let ledger = ledger::read(lake).await?;
        let mut targets = BTreeMap::new();
        let mut rejects = BTreeMap::new();
        for (name, parts) in &self.tables {
            let mut target =
                Target::open(&ledger, lake, raw_table(name), parts.schema.partition_by.clone())
                    .await?;
            if parts.schema.write_mode == schema::WriteMode::Merge {
                target = target
                    .merging(parts.schema.primary_key.clone(), parts.schema.sequence_by.clone());
            }
            targets.insert(name.clone(), target);
            if parts.rejects.is_some() {
                let r = rejects_name(name);
                rejects.insert(
                    name.clone(),
                    Target::open(&ledger, lake, raw_table(&r), vec![]).await?,
                );
            }
        }
        Ok((targets, rejects))
    }

    /// Run: claim, parse in parallel, commit through one writer.
    pub async fn run(
        &self,
        mode: Mode,
        progress: Option<&(dyn Fn(&IngestReport) + Sync)>,
    ) -> Result<IngestReport> {
        let clock = Instant::now();
        // The writer protocol's entry (lake/writer.rs): for the whole run.
        let _writer = crate::lake::writer::ingestion(&self.config.lake).await?;
        let (mut targets, mut rejects) = self.targets().await?;
        let mut report = IngestReport::default();
        let mut ledger = ledger::Ledger::new(&self.config.lake);
        for target in targets.values_mut() {
            report.ledger_repaired += writer::repair_ledger(&mut ledger, target).await? as u64;
        }
        let workers = self.config.ingest.workers.max(1);
        let (tx, mut rx) = mpsc::channel::<Outcome>(workers * 2);
        let permits = Arc::new(tokio::sync::Semaphore::new(workers));
        // Files claimed and not yet acknowledged or sent back: a `--once`
        // run ends only when none are left (a failed file may come back).
        let outstanding = Arc::new(AtomicUsize::new(0));
        // Set by a `--once` dispatcher with nothing left to claim and no
        // worker running: what is buffered is all there is, flush it now.
        let drained = Arc::new(AtomicBool::new(false));
        let once = matches!(mode, Mode::Once);
        let dispatcher = self.dispatch(mode, tx, permits, outstanding.clone(), drained.clone());
        let writer = async {
            let mut buffers: BTreeMap<String, (Vec<ReadyFile>, usize, u64, Instant)> =
                BTreeMap::new();
            let interval = Duration::from_millis(self.config.ingest.flush_interval_ms);
            let poll = Duration::from_millis(self.config.queue.poll_ms.max(1));
            let wait = if once { interval.min(poll) } else { interval };
            // Upstream rows a killed run committed but did not transform.
            self.transform_into(&mut report).await;
            loop {
                let next = tokio::time::timeout(wait, rx.recv()).await;
                let closed = matches!(next, Ok(None));
                match next {
                    Ok(Some(Outcome::Ready(file))) => {
                        report.rejected += file.rejected;
                        let entry = buffers
                            .entry(file.message.table.clone())
                            .or_insert_with(|| (Vec::new(), 0, 0, Instant::now()));
                        entry.1 += file.rows as usize;
                        entry.2 += file.bytes;
                        entry.0.push(file);
                    }
                    Ok(Some(Outcome::Failed(message, reason))) => {
                        // A redelivery of a file the table already holds
                        // may fail (its blob was deleted after the first
                        // ingest): it is a duplicate, not a dead letter.
                        let held = match targets.get_mut(&message.table) {
                            Some(t) => t.holds(&message.key()).await?,
                            None => false,
                        };
                        if held {
                            self.queue.ack(&message).await?;
                            report.duplicates += 1;
                        } else {
                            self.failed(&mut ledger, &message, &reason, &mut report).await?;
                        }
                        outstanding.fetch_sub(1, Ordering::SeqCst);
                    }
                    Ok(None) | Err(_) => {}
                }
                let due: Vec<String> = buffers
                    .iter()
                    .filter(|(_, (files, rows, bytes, since))| {
                        !files.is_empty()
                            && (closed
                                || drained.load(Ordering::SeqCst)
                                || *rows >= self.config.ingest.flush_rows
                                || *bytes as usize >= self.config.ingest.flush_bytes
                                || since.elapsed() >= interval)
                    })
                    .map(|(t, _)| t.clone())
                    .collect();
                let committed = report.commits;
                for table in due {
                    let Some((files, ..)) = buffers.remove(&table) else { continue };
                    let Some(target) = targets.get_mut(&table) else { continue };
                    let count = files.len();
                    let flushed = writer::flush(
                        &mut ledger,
                        &self.queue,
                        target,
                        rejects.get_mut(&table),
                        files,
                        self.config.ingest.dedup_content,
                    )
                    .await?;
                    report.files += flushed.files;
                    report.rows += flushed.rows;
                    report.duplicates += flushed.duplicates;
                    report.changed += flushed.changed;
                    report.commits += u64::from(flushed.files > 0);
                    report.flush_seconds.push(flushed.seconds);
                    outstanding.fetch_sub(count, Ordering::SeqCst);
                    if let Some(p) = progress {
                        p(&report);
                    }
                }
                if report.commits > committed {
                    self.transform_into(&mut report).await;
                    if let Some(p) = progress {
                        p(&report);
                    }
                }
                if closed {
                    return Ok::<_, Error>(());
                }
            }
        };
        // An error on either side ends the run (and drops the other side).
        tokio::try_join!(dispatcher, writer)?;
        report.seconds = clock.elapsed().as_secs_f64();
        Ok(report)
    }

    async fn failed(
        &self,
        ledger: &mut ledger::Ledger,
        message: &Message,
        reason: &str,
        report: &mut IngestReport,
    ) -> Result<()> {
        tracing::warn!(file = %message.key(), attempt = message.attempt, reason, "a file failed");
        if self.queue.nack(message, reason).await? {
            report.dead += 1;
            ledger
                .append(&[LedgerRow {
                    table: message.table.clone(),
                    file_key: message.key(),
                    content_hash: String::new(),
                    rows: 0,
                    rejected: 0,
                    status: "dead".into(),
                    attempts: i64::from(message.attempt),
                    error: Some(reason.to_owned()),
                    table_version: None,
                    at: chrono::Utc::now().timestamp_micros(),
                }])
                .await?;
            if let Some(hook) = &self.config.hooks.on_dead_letter {
                let summary = serde_json::json!({
                    "table": message.table,
                    "file": message.key(),
                    "attempts": message.attempt,
                    "reason": reason,
                });
                let folder = self.config.path.parent().filter(|p| !p.as_os_str().is_empty());
                hook.tell("dead_letter", summary, folder.unwrap_or(Path::new("."))).await;
            }
        } else {
            report.retried += 1;
        }
        Ok(())
    }

    /// Claim messages and hand them to workers until the mode says stop.
    async fn dispatch(
        &self,
        mode: Mode,
        tx: mpsc::Sender<Outcome>,
        permits: Arc<tokio::sync::Semaphore>,
        outstanding: Arc<AtomicUsize>,
        drained: Arc<AtomicBool>,
    ) -> Result<()> {
        let poll = Duration::from_millis(self.config.queue.poll_ms.max(1));
        let workers = self.config.ingest.workers.max(1);
        let mut tasks = tokio::task::JoinSet::new();
        // Arrivals end an idle wait at once; polling stays as the fallback.
        let watch = match mode {
            Mode::Watch(_) => self.queue.watch(),
            Mode::Once => None,
        };
        loop {
            if let Mode::Watch(stop) = &mode
                && stop.load(Ordering::SeqCst)
            {
                break;
            }
            self.queue.reap().await?;
            let free = permits.available_permits().max(1);
            let messages = self.queue.receive(free.min(workers)).await?;
            let idle = messages.is_empty();
            outstanding.fetch_add(messages.len(), Ordering::SeqCst);
            for message in messages {
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| Error::Internal(e.to_string()))?;
                let parts = self.tables.get(&message.table).cloned();
                let tx = tx.clone();
                let queue = self.queue.clone();
                tasks.spawn(async move {
                    let fetched = match (&parts, &message.exhausted) {
                        (_, Some(why)) => Err(why.clone()),
                        (Some(_), None) => queue.fetch(&message).await,
                        (None, None) => Ok(()),
                    };
                    let outcome = match (parts, fetched) {
                        (_, Err(reason)) => Outcome::Failed(message.clone(), reason),
                        (None, _) => Outcome::Failed(
                            message.clone(),
                            format!("no schema declares table `{}`", message.table),
                        ),
                        (Some(parts), Ok(())) => {
                            let handle = tokio::runtime::Handle::current();
                            let m = message.clone();
                            match tokio::task::spawn_blocking(move || process(&handle, &parts, m))
                                .await
                            {
                                Ok(Ok(ready)) => Outcome::Ready(ready),
                                Ok(Err(e)) => Outcome::Failed(message, e.0),
                                Err(e) => {
                                    Outcome::Failed(message, format!("the worker crashed: {e}"))
                                }
                            }
                        }
                    };
                    drop(permit);
                    let _ = tx.send(outcome).await;
                });
            }
            while let Some(done) = tasks.try_join_next() {
                done.map_err(|e| Error::task("an ingest worker", e))?;
            }
            let once = matches!(mode, Mode::Once);
            drained.store(once && idle && tasks.is_empty(), Ordering::SeqCst);
            if idle {
                if once && tasks.is_empty() && outstanding.load(Ordering::SeqCst) == 0 {
                    break;
                }
                match &watch {
                    Some(w) => {
                        w.wait(poll).await;
                    }
                    None => tokio::time::sleep(poll).await,
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| Error::task("an ingest worker", e))?;
        }
        Ok(())
    }
}

/// Every name `sluice sql` resolves must mean one table: no ingestion table
/// (raw, rejects, transform) may take the name of an artifact or system
/// table of the lake, of `ingest_ledger`, or of another ingestion table.
async fn check_names(config: &IngestConfig, schemas: &[TableSchema]) -> Result<()> {
    let registry = crate::Lake::types_at(&config.lake).await?;
    let mut taken: BTreeMap<String, String> = crate::lake::layout::all_tables(&registry)
        .into_iter()
        .map(|t| (t.name, "a table of the artifact lake".to_owned()))
        .collect();
    taken.insert("ingest_ledger".into(), "the ingestion ledger".into());
    let mut claim = |name: String, by: String, path: &Path| match taken.get(&name) {
        Some(owner) => Err(Error::Config {
            path: path.to_path_buf(),
            message: format!(
                "{by} would be named `{name}`, which is already {owner}; SQL could not tell \
                 them apart. Help: rename it"
            ),
        }),
        None => {
            taken.insert(name, by);
            Ok(())
        }
    };
    for s in schemas {
        claim(s.name.clone(), format!("the raw table of {}", s.path.display()), &s.path)?;
        if s.on_row_error == schema::OnRowError::Reject {
            claim(
                rejects_name(&s.name),
                format!("the rejects table of {}", s.path.display()),
                &s.path,
            )?;
        }
    }
    for t in &config.transforms {
        claim(t.name.clone(), format!("transform `{}`", t.name), &config.path)?;
    }
    Ok(())
}

/// A worker's job: hash, parse, cast, write data files (uncommitted).
fn process(
    rt: &tokio::runtime::Handle,
    parts: &TableParts,
    message: Message,
) -> std::result::Result<ReadyFile, FileError> {
    let hash = hash_file(&message.path)?;
    let key = message.key();
    let now = chrono::Utc::now().timestamp_micros();
    let table_schema = parts.schema.table_schema();
    let mut writer = RecordBatchWriter::for_table(&parts.handle)
        .map_err(|e| FileError(format!("opening the table writer: {e}")))?
        .with_writer_properties(table::writer_properties());
    let mut adds: Vec<Add> = Vec::new();
    let mut rows = 0usize;
    let mut pending = 0usize;
    let result = parse::read_file(&message.path, &message.name, &parts.schema, &mut |batch| {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns.push(Arc::new(StringArray::from(vec![key.as_str(); n])));
        columns.push(Arc::new(TimestampMicrosecondArray::from(vec![now; n]).with_timezone("UTC")));
        let full = RecordBatch::try_new(table_schema.clone(), columns)
            .map_err(|e| FileError(format!("building rows: {e}")))?;
        rt.block_on(writer.write(full))
            .map_err(|e| FileError(format!("writing data files: {e}")))?;
        rows += n;
        pending += n;
        if pending >= ROWS_PER_DATA_FILE {
            adds.extend(
                rt.block_on(writer.flush())
                    .map_err(|e| FileError(format!("writing data files: {e}")))?,
            );
            pending = 0;
        }
        Ok(())
    });
    let flushed = rt.block_on(writer.flush());
    if let Ok(files) = &flushed {
        adds.extend(files.iter().cloned());
    }
    let violations = match (result, flushed) {
        (Ok(v), Ok(_)) => v,
        (failed, flushed) => {
            rt.block_on(append::remove_files(&parts.handle, &adds));
            return Err(match (failed, flushed) {
                (Err(e), _) => e,
                (_, Err(e)) => FileError(format!("writing data files: {e}")),
                _ => FileError("internal: unexpected worker state".into()),
            });
        }
    };
    let reject_adds = match (&parts.rejects, violations.is_empty()) {
        (Some(rejects), false) => write_rejects(rt, rejects, &key, &violations, now)?,
        _ => Vec::new(),
    };
    let bytes = adds.iter().map(|a| a.size.max(0) as u64).sum();
    Ok(ReadyFile {
        message,
        hash,
        rows: rows as u64,
        adds,
        reject_adds,
        rejected: violations.len() as u64,
        bytes,
    })
}

fn write_rejects(
    rt: &tokio::runtime::Handle,
    rejects: &DeltaTable,
    key: &str,
    violations: &[RowViolation],
    now: i64,
) -> std::result::Result<Vec<Add>, FileError> {
    let n = violations.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![key; n])),
        Arc::new(Int64Array::from(violations.iter().map(|v| v.line as i64).collect::<Vec<_>>())),
        Arc::new(StringArray::from(
            violations.iter().map(|v| v.reason.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(TimestampMicrosecondArray::from(vec![now; n]).with_timezone("UTC")),
    ];
    let batch = RecordBatch::try_new(rejects_schema(), columns)
        .map_err(|e| FileError(format!("building rejects: {e}")))?;
    rt.block_on(append::write_files(rejects, "rejects", &[batch], table::writer_properties()))
        .map_err(|e| FileError(format!("writing rejects: {e}")))
}

fn hash_file(path: &Path) -> std::result::Result<String, FileError> {
    let mut hasher = blake3::Hasher::new();
    hasher
        .update_reader(
            std::fs::File::open(path).map_err(|e| FileError(format!("cannot open: {e}")))?,
        )
        .map_err(|e| FileError(format!("cannot read: {e}")))?;
    Ok(hasher.finalize().to_hex().to_string())
}

/// `sluice ingest status`.
#[derive(Debug, Clone, Serialize)]
pub struct IngestStatus {
    /// Where files come from.
    pub source: String,
    /// Queue depth.
    pub queue: QueueDepth,
    /// Per table: files ingested, rows, duplicates, dead.
    pub tables: BTreeMap<String, TableStatus>,
    /// Dead letters with their reasons.
    pub dead_letters: Vec<DeadLetter>,
    /// Per transform: its table and how far behind its upstream it is.
    pub transforms: BTreeMap<String, transform::TransformStatus>,
}

/// One table in [`IngestStatus`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableStatus {
    /// Files whose rows landed.
    pub files: u64,
    /// Rows that landed (from the ledger).
    pub rows: u64,
    /// Duplicate deliveries recorded.
    pub duplicates: u64,
    /// Dead letters recorded.
    pub dead: u64,
    /// The table's version.
    pub version: u64,
    /// When its last commit was made (RFC 3339).
    pub last_commit: Option<String>,
}

impl Ingestor {
    /// The queue and every table's state.
    pub async fn status(&self) -> Result<IngestStatus> {
        let rows = ledger::read(&self.config.lake).await?;
        let totals = ledger::totals(&rows);
        let mut tables = BTreeMap::new();
        for name in self.tables.keys() {
            let handle = table::open(&self.config.lake, &raw_table(name)).await?;
            let (files, rows, duplicates, dead) = totals.get(name).copied().unwrap_or_default();
            let version = handle.version().unwrap_or_default();
            let infos: Vec<deltalake::kernel::CommitInfo> =
                handle.history(Some(1)).try_collect().await.map_err(|e| Error::delta(name, e))?;
            let last_commit =
                infos.first().and_then(|c| c.timestamp).and_then(crate::times::from_millis);
            tables.insert(
                name.clone(),
                TableStatus { files, rows, duplicates, dead, version, last_commit },
            );
        }
        let mut transforms = BTreeMap::new();
        for t in &self.config.transforms {
            transforms.insert(t.name.clone(), transform::status(&self.config.lake, t).await?);
        }
        Ok(IngestStatus {
            source: self.queue.describe(),
            queue: self.queue.depth().await?,
            tables,
            dead_letters: self.queue.dead_letters().await?,
            transforms,
        })
    }
}
