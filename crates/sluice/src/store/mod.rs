//! Reading and writing artifacts in the lake's tables.
//!
//! [`Lake::put`](crate::Lake::put) writes finalized artifacts in the commit
//! order the whole system relies on: each content table first, then the
//! index. An index row therefore never points at content that is missing, even
//! if the writer dies between the two commits. Artifacts already in the lake
//! (same id) are skipped, so putting the same artifacts twice adds nothing.
//!
//! Reads locate artifacts through the index (id → type, step) and then read
//! only the partitions of the content tables that hold them.

mod get;
mod put;
pub(crate) mod rows;

pub use get::{ListFilter, MIN_ID_PREFIX};
pub(crate) use put::PUT_TOKEN_KEY;
pub use put::PutReport;
pub(crate) use put::repoint_to_content;
pub use rows::content_batch as content_rows;
