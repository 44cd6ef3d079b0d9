//! Running programs that are not sluice: a unit's tool and a hook.
//!
//! Pipelines run a step's program per unit ([`process`]: its own process
//! group, limits of time and memory, the tail of its output) and tell
//! hooks how a run ended; ingestion tells hooks of dead letters
//! ([`hooks`]). Both live here, below `pipeline` and `ingest`, which use
//! them.

pub mod hooks;
pub mod process;
