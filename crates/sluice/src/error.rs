//! The crate's error type.
//!
//! Every variant carries the context a user needs to act on it: the path, the
//! table, the artifact id or the type key. Errors that come from a caller or
//! the environment (bad input, a missing file, a conflicting schema) are kept
//! apart from [`Error::Internal`], which means an invariant of sluice broke.

use std::path::PathBuf;

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
    #[error("SQL error: {source}")]
    Sql {
        /// The underlying error.
        #[source]
        source: Box<deltalake::datafusion::error::DataFusionError>,
    },

    /// A JSON document was malformed or not of the expected shape.
    #[error("invalid JSON ({context}): {message}")]
    Json {
        /// What was being read.
        context: String,
        /// Why it was rejected.
        message: String,
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
    #[error("unknown artifact type `{0}`. Help: run `sluice types` to list registered types")]
    UnknownType(String),

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

    /// An artifact id is malformed.
    #[error("invalid artifact id `{0}`: expected 32 lowercase hex characters")]
    InvalidArtifactId(String),

    /// No artifact with this id exists in the lake.
    #[error("artifact `{0}` not found in the lake")]
    ArtifactNotFound(String),

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
