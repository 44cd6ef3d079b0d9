//! One Delta table at a time: creating, checking and opening it
//! ([`table`]), a writer's view of it between commits that commits exactly
//! its next version ([`tip`]), the handles a lake keeps between calls
//! ([`handles`]), filtered scans ([`scan`]), which ingestion tables a
//! lake holds ([`held`]), and the mark of the schemas its tables were
//! brought to ([`reconciled`]).
//!
//! Nothing here knows of artifacts, sequences or the journal: this layer
//! speaks tables and versions, on top of the I/O seam ([`super::io`]).

pub(crate) mod handles;
pub mod held;
pub(crate) mod reconciled;
pub mod scan;
pub mod table;
pub mod tip;
