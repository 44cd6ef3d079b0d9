//! SQL over every table of the lake, time travel, and output formats.
//!
//! Every table is registered under its short name (`index`, `metrics`, …,
//! custom content tables, `artifact_edges`, `execution_edges`, `executions`,
//! `steps`). Tables are opened lazily: only the tables a statement names are
//! loaded, each at the version the query asks for (`--as-of`).

mod as_of;
pub mod changes;
pub mod format;
mod sql;

pub use as_of::AsOf;
pub use changes::{Changes, changes};
pub use format::OutputFormat;
pub use sql::{QueryResult, SqlBuilder};
