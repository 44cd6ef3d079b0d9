//! The rows an upstream table gained between two versions, read from the
//! data files those versions added — never a scan of the whole table.
//!
//! Only appends can be followed this way. Compaction (OPTIMIZE) moves rows
//! between files without changing them (`dataChange: false`) and is skipped;
//! a commit that removes rows (a restore, a delete, a merge) cannot be
//! replayed into an append or an accumulating merge, and is reported.

use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::arrow::array::{ArrayRef, StringArray, new_null_array};
use deltalake::arrow::compute::cast;
use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::kernel::{Action, Add};
use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::{Error, Result};
use crate::lake::delta::table;

/// Rows added upstream in versions `after+1 ..= to`.
#[derive(Debug)]
pub struct NewRows {
    /// The rows, in the upstream table's schema (partition columns included).
    pub batches: Vec<RecordBatch>,
    /// Their schema.
    pub schema: SchemaRef,
    /// Data files read.
    pub files: usize,
    /// Rows read.
    pub rows: usize,
}

/// The data files upstream versions `after+1 ..= to` added with new rows.
pub async fn added_files(
    upstream: &DeltaTable,
    name: &str,
    after: Option<u64>,
    to: u64,
) -> Result<Vec<Add>> {
    let first = after.map_or(0, |v| v + 1);
    let mut adds = Vec::new();
    for version in first..=to {
        for action in table::commit_actions(upstream, name, version).await? {
            match action {
                Action::Add(add) if add.data_change => adds.push(add),
                Action::Remove(remove) if remove.data_change => {
                    return Err(Error::Transform {
                        name: name.to_owned(),
                        message: format!(
                            "version {version} removed rows (data file {}); a transform follows \
                             only appends to its upstream. Help: rebuild the downstream table \
                             (delete its folder) to start over from the upstream's current rows",
                            remove.path
                        ),
                    });
                }
                _ => {}
            }
        }
    }
    Ok(adds)
}

/// Read `adds` of `upstream` (whose snapshot gives the schema), with their
/// partition values put back as columns.
pub async fn read(upstream: &DeltaTable, name: &str, adds: &[Add]) -> Result<NewRows> {
    let schema = upstream.snapshot().map_err(|e| Error::delta(name, e))?.snapshot().arrow_schema();
    let partitions = upstream
        .snapshot()
        .map_err(|e| Error::delta(name, e))?
        .metadata()
        .partition_columns()
        .to_vec();
    let store = upstream.object_store();
    let mut batches = Vec::new();
    let mut rows = 0;
    for add in adds {
        let path = deltalake::Path::from(add.path.as_str());
        let bytes = store
            .get(&path)
            .await
            .map_err(|e| Error::Transform {
                name: name.to_owned(),
                message: format!(
                    "data file {} of table `{name}` is not readable ({e}); was it vacuumed \
                     before its rows were read (by a transform, or a merge into a raw table)?",
                    add.path
                ),
            })?
            .bytes()
            .await
            .map_err(|e| Error::Transform {
                name: name.to_owned(),
                message: format!("reading data file {}: {e}", add.path),
            })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(|e| Error::parquet(format!("table `{name}`, file {}", add.path), e))?;
        for batch in reader {
            let batch =
                batch.map_err(|e| Error::arrow(format!("table `{name}`, file {}", add.path), e))?;
            let batch = with_partitions(&batch, &schema, &partitions, add, name)?;
            rows += batch.num_rows();
            batches.push(batch);
        }
    }
    Ok(NewRows { batches, schema, files: adds.len(), rows })
}

/// `batch` (a data file's columns) in the table's schema: partition columns
/// from the file's partition values, columns the file lacks as nulls.
fn with_partitions(
    batch: &RecordBatch,
    schema: &SchemaRef,
    partitions: &[String],
    add: &Add,
    name: &str,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let context = || format!("table `{name}`, file {}", add.path);
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let column: ArrayRef = if partitions.contains(field.name()) {
                match add.partition_values.get(field.name()).cloned().flatten() {
                    Some(value) => Arc::new(StringArray::from(vec![value; n])),
                    None => new_null_array(field.data_type(), n),
                }
            } else {
                match batch.column_by_name(field.name()) {
                    Some(c) => c.clone(),
                    None => new_null_array(field.data_type(), n),
                }
            };
            if column.data_type() == field.data_type() {
                Ok(column)
            } else {
                cast(&column, field.data_type()).map_err(|e| Error::arrow(context(), e))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| Error::arrow(context(), e))
}
