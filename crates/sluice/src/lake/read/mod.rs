//! Reading rows by key: what a look-up by id plans with, kept per table
//! version ([`id_files`]), point look-ups by id straight from the Parquet
//! files it names ([`lookup`]), and which specs a version of the
//! executions table ran successfully ([`result_set`]).

pub(crate) mod id_files;
pub mod lookup;
pub mod result_set;
