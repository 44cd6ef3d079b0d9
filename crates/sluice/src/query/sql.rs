//! `SqlBuilder`: one SQL statement over the lake.

use std::collections::BTreeMap;

use deltalake::DeltaTable;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::prelude::{SessionConfig, SessionContext};

use super::AsOf;
use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::layout::TableSpec;
use crate::lake::table;

/// A SQL statement to run over the lake, built with
/// [`Lake::sql`](crate::Lake::sql).
#[derive(Debug)]
#[must_use = "a query does nothing until it is executed"]
pub struct SqlBuilder<'a> {
    lake: &'a Lake,
    sql: String,
    as_of: Option<AsOf>,
}

/// The result of a query.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// Result rows.
    pub batches: Vec<RecordBatch>,
    /// The version each table the statement read was read at.
    pub table_versions: BTreeMap<String, u64>,
}

impl QueryResult {
    /// Total number of result rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

impl<'a> SqlBuilder<'a> {
    pub(crate) fn new(lake: &'a Lake, sql: impl Into<String>) -> Self {
        SqlBuilder { lake, sql: sql.into(), as_of: None }
    }

    /// Read every table as of a version or time (default: latest).
    pub fn with_as_of(mut self, as_of: Option<AsOf>) -> Self {
        self.as_of = as_of;
        self
    }

    /// A DataFusion context with every table the statement names registered,
    /// and the versions they were loaded at. Use it to run the statement with
    /// your own DataFusion code (streaming, `EXPLAIN`, …).
    pub async fn context(&self) -> Result<(SessionContext, BTreeMap<String, u64>)> {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        let state = ctx.state();
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(&self.sql, &dialect)?;
        let references = state.resolve_table_references(&statement)?;
        let specs: BTreeMap<String, TableSpec> =
            self.lake.table_specs().into_iter().map(|t| (t.name.clone(), t)).collect();
        // While a commit sequence is in flight, read every table as of the
        // last completed one, so a query never sees half a sequence.
        let pinned = match self.as_of {
            None => crate::commit::journal::pinned_versions(self.lake).await?,
            Some(_) => None,
        };
        let mut versions = BTreeMap::new();
        for reference in references {
            let name = reference.table();
            let Some(spec) = specs.get(name) else { continue };
            if versions.contains_key(name) {
                continue;
            }
            let pin = pinned.as_ref().and_then(|p| p.get(name)).copied();
            let handle = self.load(spec, pin).await?;
            handle.update_datafusion_session(&ctx.state()).map_err(|e| Error::delta(name, e))?;
            versions.insert(name.to_owned(), handle.version().unwrap_or_default());
            ctx.register_table(name, handle.table_provider().await?)?;
        }
        Ok((ctx, versions))
    }

    async fn load(&self, spec: &TableSpec, pinned: Option<u64>) -> Result<DeltaTable> {
        let as_of = match (self.as_of, pinned) {
            (Some(as_of), _) => as_of,
            (None, Some(version)) => AsOf::Version(version),
            (None, None) => return table::open(self.lake.root(), spec).await,
        };
        let mut handle = table::open_unloaded(self.lake.root(), spec).await?;
        let loaded = match as_of {
            AsOf::Version(v) => handle.load_version(v).await,
            AsOf::Time(t) => handle.load_with_datetime(t).await,
        };
        if let Err(e) = loaded {
            let latest = handle.get_latest_version().await.ok();
            return Err(Error::TimeTravel {
                table: spec.name.clone(),
                as_of: as_of.to_string(),
                message: match latest {
                    Some(v) => format!("{e} (the table's versions are 0..={v})"),
                    None => e.to_string(),
                },
            });
        }
        if let AsOf::Time(t) = as_of {
            // Before the first commit, Delta falls back to version 0; a query
            // for a time when the table did not exist is an error instead.
            let state = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
            let version = state.version();
            if let Some(committed_ms) = state.version_timestamp(version)
                && version == 0
                && committed_ms > t.timestamp_millis()
            {
                let created = chrono::DateTime::from_timestamp_millis(committed_ms)
                    .map_or_else(|| committed_ms.to_string(), |c| c.to_rfc3339());
                return Err(Error::TimeTravel {
                    table: spec.name.clone(),
                    as_of: as_of.to_string(),
                    message: format!("the table was created later, at {created}"),
                });
            }
        }
        Ok(handle)
    }

    /// Run the statement and collect its rows.
    pub async fn execute(self) -> Result<QueryResult> {
        let (ctx, table_versions) = self.context().await?;
        let df = ctx.sql(&self.sql).await?;
        let batches = df.collect().await?;
        Ok(QueryResult { batches, table_versions })
    }
}
