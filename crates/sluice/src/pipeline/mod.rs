//! Pipelines: ordered steps of operations, cached by content.
//!
//! ```text
//!  pipeline.toml ──parse──▶ PipelineConfig ──validate──▶ Pipeline
//!                                                          │ Lake::run
//!        ┌─────────────────────────────────────────────────┘
//!        ▼  per step
//!   plan units (pairing, batching, spec ids) ─▶ step cache ─▶ execution cache
//!        ─▶ dispatch (inline │ local worker processes │ SLURM array)
//!        ─▶ workers stage results ─▶ commit ─▶ output streams ─▶ next step
//! ```
//!
//! Everything is recorded in the lake itself: executions (the cache), their
//! edges (the wiring between steps) and the steps table (state transitions,
//! counts, timings). There is no server: a rerun reads what the lake holds.
//!
//! - [`config`]: the TOML format.
//! - [`validate`]: checks before anything runs.
//! - [`operation`]: the [`Operation`](operation::Operation) trait and registry; [`ops`]: built-ins.
//! - [`plan`]: units and cache keys.
//! - [`worker`]: running one unit and staging it; worker modes.
//! - [`backend`]: local process pool and SLURM arrays.
//! - [`cache`]: bulk look-ups in the executions and edges tables.
//! - [`steps_log`]: the steps table.
//! - [`run`]: the orchestrator.
//! - [`status`]: what `sluice status` and `sluice runs` show.

pub mod backend;
pub mod cache;
pub mod config;
pub mod operation;
pub mod ops;
pub mod plan;
pub mod run;
pub mod status;
pub mod steps_log;
pub mod validate;
pub mod worker;

pub use config::{BackendKind, FailurePolicy, Pairing, PipelineConfig, StepConfig};
pub use operation::{Operation, Operations, Output, UnitContext};
pub use run::{RunBuilder, RunEvent, RunReport, StepSummary};
pub use steps_log::StepStatus;
pub use validate::Pipeline;
