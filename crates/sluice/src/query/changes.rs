//! `sluice changes`: the rows a table gained (and lost) since a point —
//! Delta's change data feed, the basis of incremental downstream work.
//!
//! Tables are created with `delta.enableChangeDataFeed = true`. Appends are
//! read from their add actions as `insert` rows; a restore's removed files
//! come back as `delete` rows and its re-added files as `insert` rows (after
//! a compaction that is the whole table out and the old files in: the net
//! of the two is what the restore undid).
//! Compaction rewrites files without changing data (`dataChange = false`),
//! so it adds nothing to the feed. Each row carries `_change_type`,
//! `_commit_version` and `_commit_timestamp`.
//!
//! The feed ends at the latest *consistent* point of the lake (see
//! [`crate::lake::journal::snapshot`]), so a half-finished commit sequence never
//! shows.

use std::sync::Arc;

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::delta_datafusion::DeltaCdfTableProvider;

use super::AsOf;
use crate::error::{Error, Result};
use crate::lake::layout::TableKind;
use crate::lake::{Lake, delta::table, journal::snapshot};

/// The change-data-feed property sluice creates tables with.
pub const CDF_PROPERTY: &str = "delta.enableChangeDataFeed";

/// What [`changes`] returns.
#[derive(Debug, Clone)]
pub struct Changes {
    /// The table.
    pub table: String,
    /// First table version included.
    pub from_version: u64,
    /// Last table version included.
    pub to_version: u64,
    /// Changed rows, in commit order.
    pub batches: Vec<RecordBatch>,
}

impl Changes {
    /// Number of changed rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// The changes of `table` after `since`: a lake version (changes committed
/// after it), a time, or the table's own version (`metrics@5`: versions 6
/// and later).
pub async fn changes(lake: &Lake, table_name: &str, since: &AsOf) -> Result<Changes> {
    let spec = lake.table_spec(table_name).await?;
    let handle = table::open(lake.root(), &spec).await?;
    let snapshot = handle.snapshot().map_err(|e| Error::delta(&spec.name, e))?;
    let enabled = snapshot
        .metadata()
        .configuration()
        .get(CDF_PROPERTY)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if !enabled {
        return Err(Error::InvalidInput(format!(
            "table `{}` has no change data feed ({CDF_PROPERTY} is not set; the table was made by an older sluice). Help: query its history with `sluice history --table {}` and `--as-of`",
            spec.name, spec.name
        )));
    }
    // An ingestion table commits outside the lake's commit sequences: it is
    // read at its head, and a start is named by its own version or a time.
    let ingestion = spec.kind == TableKind::Ingestion;
    let to_version = match ingestion {
        true => handle.version().unwrap_or_default(),
        false => lake.snapshot().await?.version_of(&spec.name).unwrap_or_default(),
    };
    let from_version = match since {
        AsOf::Time(_) => None,
        AsOf::Tables(versions) if ingestion => Some(versions.get(&spec.name).map_or(0, |v| v + 1)),
        AsOf::Lake(_) if ingestion => {
            return Err(Error::InvalidInput(format!(
                "`{}` is an ingestion table, outside the lake's versions: give --since {}@VERSION (its own version, see `sluice history --table {}`) or a time",
                spec.name, spec.name, spec.name
            )));
        }
        AsOf::Lake(_) | AsOf::Tables(_) => {
            let point = snapshot::resolve(lake.root(), &lake.table_specs(), &since.point()).await?;
            Some(point.version_of(&spec.name).map_or(0, |v| v + 1))
        }
    };
    if let Some(from) = from_version
        && from > to_version + 1
    {
        return Err(Error::TimeTravel {
            table: spec.name.clone(),
            as_of: format!("version {}", from - 1),
            message: format!(
                "its latest version is {to_version} (`sluice history --table {}` lists them)",
                spec.name
            ),
        });
    }
    // Nothing committed since: still a result with the feed's columns.
    let nothing_new = from_version.is_some_and(|from| from > to_version);
    let mut builder = handle.scan_cdf().with_ending_version(to_version);
    builder = match (since, from_version) {
        _ if nothing_new => builder.with_starting_version(to_version),
        (AsOf::Time(at), _) => builder.with_starting_timestamp(*at),
        (_, from) => builder.with_starting_version(from.unwrap_or_default()),
    };
    let provider =
        DeltaCdfTableProvider::try_new(builder).map_err(|e| Error::delta(&spec.name, e))?;
    let columns = deltalake::datafusion::datasource::TableProvider::schema(&provider);
    let none = || vec![RecordBatch::new_empty(columns.clone())];
    if nothing_new {
        return Ok(Changes {
            table: spec.name.clone(),
            from_version: from_version.unwrap_or_default(),
            to_version,
            batches: none(),
        });
    }
    let ctx = SessionContext::new();
    ctx.register_table("changes", Arc::new(provider)).map_err(|e| Error::query(&spec.name, e))?;
    let frame = ctx.table("changes").await.map_err(|e| Error::query(&spec.name, e))?;
    let batches = match frame.collect().await {
        Ok(batches) => batches,
        // A start past the table's last commit (by time) is no change.
        Err(e) if e.to_string().contains("greater than latest") => Vec::new(),
        Err(e) => return Err(Error::query(&spec.name, e)),
    };
    let batches = in_commit_order(batches, &spec.name)?;
    let batches = if batches.is_empty() { none() } else { batches };
    Ok(Changes {
        table: spec.name.clone(),
        from_version: from_version.unwrap_or_default(),
        to_version,
        batches,
    })
}

/// The feed's rows sorted by `_commit_version` (sorted here: DataFusion
/// rejects a sort over the feed's plan when it has no files at all).
fn in_commit_order(batches: Vec<RecordBatch>, table: &str) -> Result<Vec<RecordBatch>> {
    use deltalake::arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
    let Some(first) = batches.first() else { return Ok(batches) };
    let all = concat_batches(&first.schema(), &batches).map_err(|e| Error::arrow(table, e))?;
    let column = all.column_by_name("_commit_version").ok_or_else(|| {
        Error::Internal(format!("the change feed of `{table}` has no _commit_version"))
    })?;
    let order = sort_to_indices(column, None, None).map_err(|e| Error::arrow(table, e))?;
    Ok(vec![take_record_batch(&all, &order).map_err(|e| Error::arrow(table, e))?])
}
