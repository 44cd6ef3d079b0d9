//! Integration tests of the sluice library, on temp-dir lakes.
//!
//! One test binary (each extra one is another multi-GB link of the
//! deltalake + DataFusion tree).

#![allow(clippy::unwrap_used)]

mod azure;
mod batch;
mod commit;
mod commit_props;
mod common;
mod custom_types;
mod hardening;
mod identity;
mod ingest;
mod lake_tree;
mod lineage;
mod maintenance;
mod medallion;
mod object_stores;
mod pipeline;
mod schema_evolution;
mod sql;
mod staging;
mod store;
