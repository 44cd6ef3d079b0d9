//! Command-line arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// sluice: a service-free, transactional artifact lake on Delta Lake.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None)]
pub struct Cli {
    /// The lake's root folder.
    #[arg(long, global = true, env = "SLUICE_LAKE", default_value = "./lake")]
    pub lake: PathBuf,

    /// More log output on stderr (-v, -vv). `SLUICE_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Output formats of `sluice sql`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Aligned text table.
    Table,
    /// CSV with a header.
    Csv,
    /// Newline-delimited JSON.
    Json,
}

/// sluice's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lake and every table of every registered type (idempotent).
    Init,

    /// Run a SQL statement over every table of the lake.
    ///
    /// Tables: index, metrics, configs, data, file_refs, custom types,
    /// artifact_edges, execution_edges, executions, steps.
    Sql {
        /// The statement.
        sql: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Read the lake as of a table version (e.g. 3) or an RFC 3339 time.
        #[arg(long)]
        as_of: Option<String>,
    },

    /// List tables with version, rows, files, bytes and partition columns.
    Tables {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// List registered artifact types with their tables and columns.
    Types {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Show one artifact: type, step, metadata and content.
    Show {
        /// The artifact id (32 hex characters).
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Add artifacts to the lake and print their ids.
    ///
    /// metric/config: each VALUE is JSON text, or @FILE to read it from a file.
    /// data: each VALUE is a .csv, .parquet or .arrow file.
    /// file_ref: each VALUE is a path to reference.
    /// custom types: each VALUE is a JSON object of the type's columns.
    Put {
        /// The artifact type key.
        #[arg(long = "type", short = 't')]
        type_key: String,
        /// The producing step number.
        #[arg(long, default_value_t = 0)]
        step: i32,
        /// JSON object of metadata for every artifact.
        #[arg(long)]
        metadata: Option<String>,
        /// The values (see above).
        #[arg(required = true)]
        values: Vec<String>,
    },
}
