//! Filtered reads of a single table through DataFusion.
//!
//! Filters on partition columns prune whole partitions and filters on columns
//! with file statistics skip files, so looking up a few ids reads only the
//! files whose `artifact_id` range can hold them.

use deltalake::DeltaTable;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::prelude::SessionContext;

use crate::error::{Error, Result};

/// Ids per `IN (...)` list: large enough to amortize planning, small enough to
/// keep plans cheap.
pub const IN_LIST_CHUNK: usize = 2048;

/// `column IN ('a', 'b', …)` for values that are known not to need escaping
/// beyond quotes (ids, type keys).
pub fn in_list(column: &str, values: impl Iterator<Item = String>) -> String {
    let quoted: Vec<String> = values.map(|v| format!("'{}'", v.replace('\'', "''"))).collect();
    format!("{column} IN ({})", quoted.join(", "))
}

/// `column IN (1, 2, …)`.
pub fn in_list_int(column: &str, values: impl Iterator<Item = i32>) -> String {
    let items: Vec<String> = values.map(|v| v.to_string()).collect();
    format!("{column} IN ({})", items.join(", "))
}

/// `SELECT columns FROM table [WHERE filter]` over one open table; an empty
/// `columns` selects all.
pub async fn select(
    table: &DeltaTable,
    name: &str,
    columns: &[&str],
    filter: Option<&str>,
) -> Result<Vec<RecordBatch>> {
    select_in_files(table, name, columns, filter, None).await
}

/// The DataFrame of `SELECT columns FROM table [WHERE filter]`, optionally
/// over only the given data files.
async fn dataframe(
    table: &DeltaTable,
    name: &str,
    columns: &[&str],
    filter: Option<&str>,
    files: Option<&[String]>,
) -> Result<deltalake::datafusion::dataframe::DataFrame> {
    let ctx = SessionContext::new();
    let provider = match files {
        Some(files) => table.table_provider().with_file_paths(files.to_vec()).await?,
        None => table.table_provider().await?,
    };
    ctx.register_table("t", provider)?;
    let projection = if columns.is_empty() { "*".to_owned() } else { columns.join(", ") };
    let sql = match filter {
        Some(f) => format!("SELECT {projection} FROM t WHERE {f}"),
        None => format!("SELECT {projection} FROM t"),
    };
    ctx.sql(&sql).await.map_err(|e| Error::InvalidInput(format!("table `{name}`: {e}")))
}

/// Like [`select`], reading only the given data files (relative paths).
pub async fn select_in_files(
    table: &DeltaTable,
    name: &str,
    columns: &[&str],
    filter: Option<&str>,
    files: Option<&[String]>,
) -> Result<Vec<RecordBatch>> {
    Ok(dataframe(table, name, columns, filter, files).await?.collect().await?)
}

/// Stream `SELECT columns FROM table [WHERE filter]` batch by batch, so a
/// scan of a large table holds one batch at a time.
pub async fn for_each_batch(
    table: &DeltaTable,
    name: &str,
    columns: &[&str],
    filter: Option<&str>,
    mut visit: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<()> {
    use futures::StreamExt;
    let mut stream = dataframe(table, name, columns, filter, None).await?.execute_stream().await?;
    while let Some(batch) = stream.next().await {
        visit(&batch?)?;
    }
    Ok(())
}

/// The non-null text values of one column, `SELECT column FROM table [WHERE
/// filter]`, optionally reading only the given files.
pub async fn select_strings(
    table: &DeltaTable,
    name: &str,
    column: &str,
    filter: Option<&str>,
    files: Option<&[String]>,
) -> Result<Vec<String>> {
    let batches = select_in_files(table, name, &[column], filter, files).await?;
    let mut out = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            if let crate::artifact::FieldValue::String(text) =
                crate::store::arrow_convert::read_value(batch.column(0).as_ref(), row)
            {
                out.push(text);
            }
        }
    }
    Ok(out)
}
