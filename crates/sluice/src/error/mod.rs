//! The crate's error type.
//!
//! Every variant carries the context a user needs to act on it: the path, the
//! table, the artifact id or the type key. Errors that come from a caller or
//! the environment (bad input, a missing file, a conflicting schema) are kept
//! apart from [`Error::Internal`], which means an invariant of sluice broke.

use std::path::PathBuf;

pub(crate) mod words;

/// Result alias used throughout sluice.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in sluice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filesystem operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The Delta library reported an error for a table.
    #[error("Delta table `{table}`: {source}")]
    Delta {
        /// Short name of the table.
        table: String,
        /// The underlying error.
        #[source]
        source: Box<deltalake::DeltaTableError>,
    },

    /// An Arrow operation failed.
    #[error("Arrow error ({context}): {source}")]
    Arrow {
        /// What sluice was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<deltalake::arrow::error::ArrowError>,
    },

    /// A Parquet operation failed.
    #[error("Parquet error ({context}): {source}")]
    Parquet {
        /// What sluice was doing, usually naming the file.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<deltalake::parquet::errors::ParquetError>,
    },

    /// A SQL query failed to plan or run.
    #[error("{}", words::sql(source))]
    Sql {
        /// The underlying error.
        #[source]
        source: Box<deltalake::datafusion::error::DataFusionError>,
    },

    /// A JSON document could not be read or written.
    #[error("invalid JSON ({context}): {source}")]
    Json {
        /// What was being read or written.
        context: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },

    /// A number that JSON cannot hold (NaN or an infinity).
    #[error("{context}: the number {value} is not finite; JSON has no NaN or infinity")]
    NonFiniteNumber {
        /// Where it was found.
        context: String,
        /// The value.
        value: f64,
    },

    /// A medallion transform cannot run as declared.
    #[error("transform `{name}`: {message}")]
    Transform {
        /// The transform (or its upstream table).
        name: String,
        /// What is wrong.
        message: String,
    },

    /// A query over one table failed to plan or run.
    #[error("table `{table}`: {source}")]
    Query {
        /// Short name of the table.
        table: String,
        /// The underlying error.
        #[source]
        source: Box<deltalake::datafusion::error::DataFusionError>,
    },

    /// A table holds a value sluice cannot interpret: written by another
    /// tool, a newer sluice, or damaged.
    #[error(
        "table `{table}` ({location}): {message}. Help: the row was not written by this version \
         of sluice or was altered; `sluice doctor` lists what it can repair"
    )]
    Corrupt {
        /// Short name of the table.
        table: String,
        /// Which row or column.
        location: String,
        /// What is wrong.
        message: String,
    },

    /// The commit journal does not know sequences the tables record: it was
    /// removed, replaced or restored from an old copy.
    #[error(
        "the commit journal (orchestration/commits) is behind the tables: they record commit \
         sequence {tables} but the journal's last is {journal}. Committing now could reuse a \
         sequence number. Help: run `sluice doctor --repair` to rebuild the journal from what the \
         tables record"
    )]
    JournalBehind {
        /// The journal's highest sequence.
        journal: i64,
        /// The tables' highest sequence.
        tables: i64,
    },

    /// The writer lock stayed taken longer than the caller would wait.
    #[error(
        "gave up waiting for the lake's writer lock {} after {waited:?}: it is held by {holder}. \
         Help: wait for that process, or stop it if it is stuck",
        path.display()
    )]
    LockTimeout {
        /// The lock file.
        path: std::path::PathBuf,
        /// Who holds it.
        holder: String,
        /// How long the caller waited.
        waited: std::time::Duration,
    },

    /// A restore's target can no longer be read back; refused before it was
    /// journaled, so nothing changed.
    #[error(
        "cannot restore to {point}: table `{table}` at version {version}: {reason}. Nothing was \
         changed. Help: `sluice history` lists lake versions; restore to one newer than the vacuum \
         and log retentions"
    )]
    RestoreUnavailable {
        /// The point asked for, in words.
        point: String,
        /// The table whose target version is gone.
        table: String,
        /// That version.
        version: u64,
        /// What is missing.
        reason: String,
    },

    /// A restore failed part way and was rolled back.
    #[error(
        "the restore (lake version {seq}) failed and was rolled back: every table it had \
         restored is back at its version before it; nothing else changed. Cause: {reason}"
    )]
    RestoreRolledBack {
        /// The restore's lake version, recorded `abandoned`.
        seq: i64,
        /// Why it could not finish.
        reason: String,
    },

    /// Another process is restoring the lake; writing now would be undone
    /// in part.
    #[error(
        "a restore of the lake ({what}, lake version {seq}) is in progress by {owner}. Help: wait \
         for it to finish, or once that process is gone run `sluice recover`"
    )]
    RestoreInProgress {
        /// The restore's lake version.
        seq: i64,
        /// What it restores to.
        what: String,
        /// Its restorer (`host pid`).
        owner: String,
    },

    /// Other writers kept taking the next version of a table.
    #[error(
        "table `{table}`: {attempts} commit attempts lost to concurrent writers. Help: another \
         process is committing to the lake in a loop; retry when it is done"
    )]
    Contention {
        /// Short name of the table.
        table: String,
        /// Attempts made.
        attempts: usize,
    },

    /// A SLURM command failed.
    #[error("SLURM: `{command}` {message}")]
    Slurm {
        /// The command line.
        command: String,
        /// What went wrong.
        message: String,
    },

    /// An object-store request failed (after object_store's own retries).
    #[error("object store: {what}: {source}")]
    Store {
        /// The request and the object it was for.
        what: String,
        /// The underlying error.
        #[source]
        source: object_store::Error,
    },

    /// An Azure Storage request failed.
    #[error("Azure: {what}: {message}")]
    Azure {
        /// The request (operation, queue or blob).
        what: String,
        /// What went wrong.
        message: String,
    },

    /// A background task of sluice panicked or was cancelled.
    #[error("{what}: a background task failed: {source}")]
    Task {
        /// What the task was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: tokio::task::JoinError,
    },

    /// An append gave its files up because what had to commit before it
    /// did not.
    #[error("table `{table}`: not committed: {reason}")]
    NotCommitted {
        /// The table.
        table: String,
        /// Why.
        reason: String,
    },

    /// A failure injected for testing (`SLUICE_FAILPOINT`).
    #[error("injected failure {point} (SLUICE_FAILPOINT is set)")]
    Injected {
        /// Where it was injected.
        point: String,
    },

    /// The lake configuration file (`sluice.toml`) is invalid.
    #[error("invalid lake config {path}: {message}")]
    Config {
        /// Path of the config file.
        path: PathBuf,
        /// Why it was rejected.
        message: String,
    },

    /// An artifact type could not be registered.
    #[error("cannot register artifact type `{type_key}`: {message}")]
    Registry {
        /// Key of the offending type.
        type_key: String,
        /// Why registration failed.
        message: String,
    },

    /// An artifact type key is not registered.
    #[error(
        "unknown artifact type `{key}`{}. Help: run `sluice types` to list registered types",
        words::did_you_mean(&words::nearest(key, known.iter().map(String::as_str)))
    )]
    UnknownType {
        /// The key asked for.
        key: String,
        /// The registered keys.
        known: Vec<String>,
    },

    /// An existing table has a schema that conflicts with what sluice expects.
    #[error(
        "table `{table}` column `{column}`: {message}. Help: the lake was written by an incompatible \
         version or type definition; restore the type definition or migrate the table"
    )]
    SchemaConflict {
        /// Short name of the table.
        table: String,
        /// The conflicting column.
        column: String,
        /// What conflicts.
        message: String,
    },

    /// A draft artifact is invalid and cannot be finalized.
    #[error("invalid {type_key} artifact: {message}")]
    InvalidArtifact {
        /// Type of the artifact.
        type_key: String,
        /// Why it is invalid.
        message: String,
    },

    /// A value of a draft does not fit its type's column.
    #[error("invalid {type_key} artifact: {source}")]
    InvalidValue {
        /// Type of the artifact.
        type_key: String,
        /// Which column and why.
        #[source]
        source: ValueError,
    },

    /// An artifact id is malformed.
    #[error(
        "invalid artifact id `{0}`: expected 32 lowercase hex characters, or a unique prefix of at least 4"
    )]
    InvalidArtifactId(String),

    /// No artifact with this id exists in the lake.
    #[error("artifact `{0}` not found in the lake")]
    ArtifactNotFound(String),

    /// An id prefix names more than one artifact.
    #[error(
        "artifact id prefix `{prefix}` matches {count} artifacts ({}{}); give more of the id",
        matches.join(", "),
        if *count > matches.len() { ", …" } else { "" }
    )]
    AmbiguousArtifactId {
        /// The prefix given.
        prefix: String,
        /// How many artifacts it matches.
        count: usize,
        /// The first few of them.
        matches: Vec<String>,
    },

    /// An operation needs the lake on a filesystem, and it is on a store.
    #[error(
        "{what} needs a lake on a filesystem; {lake} is in an object store, where sluice does not do it yet"
    )]
    NeedsFilesystem {
        /// What needs it.
        what: String,
        /// The lake, as shown.
        lake: String,
    },

    /// The lake or one of its tables does not exist.
    #[error("{what} not found at {path}. Help: run `sluice init` first")]
    NotInitialized {
        /// What is missing.
        what: String,
        /// Where it was expected.
        path: PathBuf,
    },

    /// A time-travel request cannot be satisfied.
    #[error("cannot read table `{table}` as of {as_of}: {message}")]
    TimeTravel {
        /// Short name of the table.
        table: String,
        /// The requested version or time.
        as_of: String,
        /// Why not.
        message: String,
    },

    /// A request from the caller is invalid.
    #[error("{0}")]
    InvalidInput(String),

    /// A pipeline file is invalid; `line` is 1-based, 0 when unknown.
    #[error("{}: {message}", location(path, *line))]
    Pipeline {
        /// The pipeline file.
        path: PathBuf,
        /// Line of the offending entry.
        line: usize,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// An operation could not run a unit of work.
    #[error("operation `{operation}`: {message}")]
    Operation {
        /// The operation.
        operation: String,
        /// What went wrong.
        message: String,
    },

    /// A step's definition does not fit its operation (found while running).
    #[error("operation `{operation}`: {source}")]
    Step {
        /// The operation.
        operation: String,
        /// What is wrong.
        #[source]
        source: StepError,
    },

    /// An invariant of sluice broke: this is a bug.
    #[error("internal error (a bug in sluice, please report it): {0}")]
    Internal(String),
}

fn location(path: &std::path::Path, line: usize) -> String {
    if line == 0 { path.display().to_string() } else { format!("{}:{line}", path.display()) }
}

impl Error {
    /// An operation error.
    pub fn operation(operation: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Operation { operation: operation.into(), message: message.into() }
    }

    /// Wrap a JSON error with what was being read or written.
    pub fn json(context: impl Into<String>, source: serde_json::Error) -> Self {
        Error::Json { context: context.into(), source }
    }

    /// Wrap a failed background task.
    pub fn task(what: impl Into<String>, source: tokio::task::JoinError) -> Self {
        Error::Task { what: what.into(), source }
    }

    /// Wrap a DataFusion error with the table it happened on.
    pub fn query(
        table: impl Into<String>,
        source: deltalake::datafusion::error::DataFusionError,
    ) -> Self {
        Error::Query { table: table.into(), source: Box::new(source) }
    }

    /// A value in a table that sluice cannot interpret.
    pub fn corrupt(
        table: impl Into<String>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Corrupt { table: table.into(), location: location.into(), message: message.into() }
    }

    /// Wrap an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// Wrap a Delta error with the table it happened on.
    pub fn delta(table: impl Into<String>, source: deltalake::DeltaTableError) -> Self {
        Error::Delta { table: table.into(), source: Box::new(source) }
    }

    /// Wrap an Arrow error with what sluice was doing.
    pub fn arrow(context: impl Into<String>, source: deltalake::arrow::error::ArrowError) -> Self {
        Error::Arrow { context: context.into(), source: Box::new(source) }
    }

    /// Wrap a Parquet error with what sluice was doing.
    pub fn parquet(
        context: impl Into<String>,
        source: deltalake::parquet::errors::ParquetError,
    ) -> Self {
        Error::Parquet { context: context.into(), source: Box::new(source) }
    }

    /// An invalid-artifact error.
    pub fn invalid_artifact(type_key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidArtifact { type_key: type_key.into(), message: message.into() }
    }

    /// A registry error.
    pub fn registry(type_key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Registry { type_key: type_key.into(), message: message.into() }
    }
}

impl From<deltalake::datafusion::error::DataFusionError> for Error {
    fn from(source: deltalake::datafusion::error::DataFusionError) -> Self {
        Error::Sql { source: Box::new(source) }
    }
}

/// Why a value does not fit a column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A required column holds null.
    #[error("column `{column}` is required but the value is null")]
    Required {
        /// The column.
        column: String,
    },
    /// The value is of another type than the column's (or out of its range).
    #[error("column `{column}` has type {expected} but the value is {found}")]
    Mismatch {
        /// The column.
        column: String,
        /// The column's type.
        expected: &'static str,
        /// What the value is.
        found: String,
    },
}

/// A column type name that is not a known column type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown column type `{name}` (known: {known})")]
pub struct UnknownColumnType {
    /// The name given.
    pub name: String,
    /// The known names.
    pub known: String,
}

/// Why a step's definition cannot run. Validation reports it with the file
/// and line of the step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// A required parameter is missing.
    #[error("parameter `{name}` ({expected}) is required")]
    MissingParam {
        /// The parameter.
        name: String,
        /// What it should hold.
        expected: String,
    },
    /// A parameter is of the wrong form.
    #[error("parameter `{name}` {problem}")]
    BadParam {
        /// The parameter.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// An input holds artifacts of a type the operation does not take.
    #[error("input `{role}` holds `{found}` artifacts, but this operation takes `{expected}`")]
    InputType {
        /// The input role.
        role: String,
        /// The type it holds.
        found: String,
        /// The type the operation takes.
        expected: String,
    },
    /// A `"<step>.<role>"` reference is malformed.
    #[error("`{text}` is not a reference of the form \"<step>.<output role>\"")]
    BadReference {
        /// The text given.
        text: String,
    },
    /// Something about one input.
    #[error("input `{role}`: {source}")]
    Input {
        /// The input role.
        role: String,
        /// What is wrong.
        #[source]
        source: Box<StepError>,
    },
    /// The step's inputs, outputs or command do not fit the operation.
    #[error("{0}")]
    Shape(String),
}

impl From<String> for StepError {
    fn from(message: String) -> Self {
        StepError::Shape(message)
    }
}

impl From<&str> for StepError {
    fn from(message: &str) -> Self {
        StepError::Shape(message.to_owned())
    }
}
