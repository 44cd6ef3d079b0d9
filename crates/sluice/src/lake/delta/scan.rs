//! Filtered reads of a single table through DataFusion.
//!
//! Filters are DataFusion expressions ([`Expr`]), never SQL text, so values
//! need no quoting. Filters on partition columns prune whole partitions and
//! filters on columns with file statistics skip files; a read can also be
//! restricted to given data files (what the key filters chose).
//!
//! Inside each file, a filter on an indexed id column (see
//! [`TableSpec::indexed_columns`](crate::lake::layout::TableSpec::indexed_columns))
//! skips the row groups whose bloom filter rules its values out: a look-up
//! decodes a few row groups, however large the files are.

use deltalake::DeltaTable;
use deltalake::arrow::array::{Array, StringArray};
use deltalake::arrow::datatypes::DataType;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::datafusion::dataframe::DataFrame;
use deltalake::datafusion::prelude::{Expr, SessionContext, ident, lit};

use crate::error::{Error, Result};

/// Values per `IN (...)` list: large enough to amortize planning, small
/// enough to keep plans cheap.
pub const IN_LIST_CHUNK: usize = 2048;

/// A column by name (never parsed as a qualified or quoted name).
pub fn column(name: &str) -> Expr {
    ident(name)
}

/// Columns by name.
pub fn columns(names: &[&str]) -> Vec<Expr> {
    names.iter().map(|n| ident(*n)).collect()
}

/// `column IN (values…)`.
pub fn in_list<T: Into<deltalake::datafusion::scalar::ScalarValue>>(
    name: &str,
    values: impl IntoIterator<Item = T>,
) -> Expr {
    ident(name).in_list(values.into_iter().map(|v| lit(v.into())).collect(), false)
}

/// `column = value`.
pub fn equals<T: Into<deltalake::datafusion::scalar::ScalarValue>>(name: &str, value: T) -> Expr {
    ident(name).eq(lit(value.into()))
}

/// `column LIKE 'prefix%'` (the prefix holds no `%` or `_`).
pub fn starts_with(name: &str, prefix: &str) -> Expr {
    ident(name).like(lit(format!("{prefix}%")))
}

/// What to read from one table.
#[derive(Debug, Clone, Default)]
pub struct Select {
    /// Projected columns (or expressions); empty means all.
    pub columns: Vec<Expr>,
    /// Row filter.
    pub filter: Option<Expr>,
    /// Only these data files (relative paths); `None` means all active files.
    pub files: Option<Vec<String>>,
}

impl Select {
    /// Read these columns (empty: all).
    pub fn columns(columns: Vec<Expr>) -> Self {
        Select { columns, ..Select::default() }
    }

    /// Keep the rows matching `filter`.
    #[must_use]
    pub fn filter(mut self, filter: Expr) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Keep the rows matching `filter`, if given.
    #[must_use]
    pub fn filter_opt(mut self, filter: Option<Expr>) -> Self {
        self.filter = filter;
        self
    }

    /// Read only these data files.
    #[must_use]
    pub fn files(mut self, files: Vec<String>) -> Self {
        self.files = Some(files);
        self
    }

    async fn dataframe(self, table: &DeltaTable, name: &str) -> Result<DataFrame> {
        let ctx = SessionContext::new();
        let query = |e| Error::query(name, e);
        let provider = match self.files {
            Some(files) => table.table_provider().with_file_paths(files).await,
            None => table.table_provider().await,
        }
        .map_err(query)?;
        let mut df = ctx.read_table(provider).map_err(query)?;
        if let Some(filter) = self.filter {
            df = df.filter(filter).map_err(query)?;
        }
        if !self.columns.is_empty() {
            df = df.select(self.columns).map_err(query)?;
        }
        Ok(df)
    }

    /// Run the read and collect its rows.
    pub async fn collect(self, table: &DeltaTable, name: &str) -> Result<Vec<RecordBatch>> {
        self.dataframe(table, name).await?.collect().await.map_err(|e| Error::query(name, e))
    }

    /// Stream the read batch by batch, so a scan of a large table holds one
    /// batch at a time.
    pub async fn for_each_batch(
        self,
        table: &DeltaTable,
        name: &str,
        mut visit: impl FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<()> {
        use futures::StreamExt;
        let mut stream = self
            .dataframe(table, name)
            .await?
            .execute_stream()
            .await
            .map_err(|e| Error::query(name, e))?;
        while let Some(batch) = stream.next().await {
            visit(&batch.map_err(|e| Error::query(name, e))?)?;
        }
        Ok(())
    }

    /// The non-null text values of the first selected column.
    pub async fn strings(self, table: &DeltaTable, name: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.for_each_batch(table, name, |batch| {
            let text = text_column(batch, 0, name)?;
            out.extend((0..text.len()).filter(|&i| text.is_valid(i)).map(|i| text.value(i).into()));
            Ok(())
        })
        .await?;
        Ok(out)
    }
}

/// A text column as a plain `StringArray`, whatever physical form the scan
/// produced (`Utf8`, `Utf8View`, dictionary).
pub fn text_column(batch: &RecordBatch, i: usize, table: &str) -> Result<StringArray> {
    let column = deltalake::arrow::compute::cast(batch.column(i), &DataType::Utf8)
        .map_err(|e| Error::arrow(format!("`{table}` column {i}"), e))?;
    column
        .as_any()
        .downcast_ref::<StringArray>()
        .cloned()
        .ok_or_else(|| Error::Internal(format!("`{table}` column {i} did not cast to text")))
}
