//! What keys a table holds, answered without reading it: key filters per
//! commit ([`key_filter`]), exact key sets ([`key_set`]), the sidecar
//! files both are kept in ([`sidecar`]), and which live files the filters of a
//! column cover ([`coverage`]).
//!
//! De-duplication against a large table and reads by id both rest on this
//! layer; a filter may say "maybe" but never "no" for a key the table
//! holds.

pub(in crate::lake) mod coverage;
pub mod key_filter;
pub mod key_set;
pub mod sidecar;
