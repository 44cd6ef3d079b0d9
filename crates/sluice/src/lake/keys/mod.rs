//! What keys a table holds, answered without reading it: key filters per
//! commit ([`key_filter`]), exact key sets ([`key_set`]), the sidecar
//! files both are kept in ([`sidecar`]) — on an object store, written and
//! read through the store, with [`pack`]s to bound a reader's requests
//! ([`in_store`]) — and which live files the filters of a column cover
//! ([`coverage`]).
//!
//! De-duplication against a large table and reads by id both rest on this
//! layer; a filter may say "maybe" but never "no" for a key the table
//! holds.

pub(in crate::lake) mod coverage;
pub(in crate::lake) mod in_store;
pub mod key_filter;
pub mod key_set;
pub(in crate::lake) mod pack;
pub mod sidecar;
