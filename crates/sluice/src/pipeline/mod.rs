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
//! - [`unit`]: units of work, the jobs sent to workers and their reports.
//! - [`operation`]: the [`Operation`](operation::Operation) trait; [`ops`]: the built-ins and
//!   the registry of every operation a binary knows.
//! - [`plan`]: units and cache keys.
//! - [`worker`]: running one unit and describing what it stages;
//!   [`worker_mode`]: the worker modes, running chunks of units with their
//!   inputs read once and their executions sealed in groups;
//!   [`worker_program`]: which program a worker is (the binary, or the
//!   interpreter that hosts sluice).
//! - [`backend`]: local process pool and SLURM arrays.
//! - [`cache`]: bulk look-ups in the executions and edges tables.
//! - [`steps_log`]: the steps table.
//! - [`hooks`]: what a run tells when it ends.
//! - [`run`]: the orchestrator; `step_run`: one step, phase by phase; [`events`]: what
//!   they report.
//! - [`status`]: what `sluice status` and `sluice runs` show.

pub mod backend;
pub mod cache;
pub mod checks;
pub mod config;
pub mod events;
pub use crate::tool::hooks;
pub mod logs;
pub mod operation;
pub mod ops;
pub mod plan;
mod preflight;
pub use crate::tool::process;
pub mod provenance;
pub mod recheck;
pub mod retry;
pub mod run;
pub mod status;
mod step_run;
pub mod steps_log;
pub(crate) mod task_records;
pub mod unit;
pub mod validate;
pub mod worker;
pub mod worker_mode;
pub mod worker_program;

pub(crate) use crate::tool::process::describe_exit;

pub use config::{BackendKind, FailurePolicy, Pairing, PipelineConfig, StepConfig, StepError};
pub use operation::{Operation, Output, UnitContext};
pub use ops::Operations;
pub use run::{RunBuilder, RunEvent, RunReport, StepSummary};
pub use steps_log::StepStatus;
pub use validate::Pipeline;
