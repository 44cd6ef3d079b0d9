//! # sluice
//!
//! A service-free, transactional artifact lake on Delta Lake. Every result of
//! a pipeline is an *artifact*: content-addressed (its id is a hash of its
//! type and content), stored as a row of a per-type Delta table partitioned by
//! the step that produced it, and listed in an artifact index. No database or
//! server is involved: a lake is a folder of Delta tables that Polars, DuckDB,
//! pandas and Spark read directly.
//!
//! ```
//! # async fn demo() -> sluice::Result<()> {
//! use sluice::{Draft, Lake};
//! use serde_json::json;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let (lake, _report) = Lake::init(dir.path()).await?;
//!
//! // Drafts become artifacts when finalized: validated, and given their id.
//! let loss = Draft::metric(json!({"loss": 0.25, "epoch": 3}))?.with_step(1).finalize(lake.registry())?;
//! let cfg = Draft::config(json!({"lr": 0.01}))?.with_step(1).finalize(lake.registry())?;
//! lake.put(&[loss.clone(), cfg]).await?;
//!
//! // Same content, same id: putting it again adds nothing.
//! let again = lake.put(&[loss.clone()]).await?;
//! assert_eq!(again.already_present, 1);
//!
//! // Read back by id, or with SQL over every table.
//! assert_eq!(lake.get(loss.id).await?.json_content()?, json!({"epoch": 3, "loss": 0.25}));
//! let rows = lake.sql("SELECT artifact_type, count(*) FROM index GROUP BY artifact_type").execute().await?;
//! assert_eq!(rows.num_rows(), 2);
//! # Ok(())
//! # }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! ## Map of the crate
//!
//! - [`artifact`]: drafts, artifacts, content ids, canonical JSON, built-in types.
//! - [`registry`]: the artifact type registry (built-in, Rust-linked, `sluice.toml`).
//! - [`lake`]: the table tree, schemas, table creation and schema evolution.
//! - [`store`]: writing and reading artifacts in bulk.
//! - [`query`]: SQL over every table, time travel, output formats.
//! - [`staging`] and [`commit`]: how workers' results reach the lake exactly once.
//! - [`pipeline`]: steps of operations, cached by content, run locally or on SLURM.
//! - [`lineage`]: where an artifact came from and what it fed; pipeline runs as graphs.
//! - [`maintenance`]: history, checkpoints, compaction and vacuum.
//! - [`progress`]: how long operations report how far they have come.

pub mod artifact;
pub mod commit;
pub mod error;
pub mod host;
pub mod ingest;
pub mod lake;
pub mod lineage;
pub mod maintenance;
pub mod pipeline;
pub mod progress;
pub mod query;
pub mod records;
pub mod registry;
pub mod staging;
pub mod store;
pub mod times;
pub mod tool;

pub use artifact::{Artifact, ArtifactId, Draft};
pub use error::{Error, Result};
pub use lake::Lake;

#[doc(hidden)]
pub use inventory;
