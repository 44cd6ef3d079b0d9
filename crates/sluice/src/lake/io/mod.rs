//! The I/O seam: where a lake's bytes live and how they are written
//! safely there — a file system or an object store.
//!
//! Every guarantee above this layer rests on one primitive: create an
//! object unless it exists ([`log_entry`]: a hard link on a file system, a
//! conditional put settled by reading on a store). The stores themselves
//! ([`storage`]), the lake's location ([`location`]), the courtesy lock
//! ([`lock`]), the count of store requests ([`requests`]), the Delta log
//! entries and small data files a process keeps once read from a store
//! ([`log_cache`]), a folder in a store read and written object by object
//! ([`store_area`]: staging and landing prefixes) and the reader of one
//! Parquet file ([`file_reader`]) live here too, so that what sits above
//! them names no file system call.

#[cfg(test)]
pub(in crate::lake) mod faulty_store;
pub(in crate::lake) mod file_reader;
pub mod location;
pub(in crate::lake) mod lock;
pub(in crate::lake) mod log_cache;
pub mod log_entry;
pub mod requests;
pub mod storage;
pub mod store_area;
