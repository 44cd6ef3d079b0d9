//! Committing a transform's result with its watermark: an append, or a
//! MERGE by primary key, each as exactly the table's next version.

use deltalake::DeltaTable;
use deltalake::arrow::array::{Array, ArrayRef};
use deltalake::arrow::compute::cast;
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::protocol::{DeltaOperation, SaveMode};
use serde_json::json;

use super::{Output, Transform};
use crate::error::{Error, Result};
use crate::ingest::upsert;
use crate::lake::append::{self, CommitSpec};
use crate::lake::delta::table;

/// The commit-metadata key describing a transform's commit.
pub const TRANSFORM_KEY: &str = "sluice_transform";

/// What a commit applied.
pub(super) struct Applied {
    pub version: u64,
    pub inserted: usize,
    pub updated: usize,
}

/// The transform's commit: its watermark (`to`) as an app transaction,
/// and what it applied in the metadata.
fn commit_spec(t: &Transform, after: Option<u64>, to: u64, rows: usize) -> CommitSpec {
    CommitSpec {
        txn: Some((t.app_id(), to as i64)),
        metadata: vec![(
            TRANSFORM_KEY.to_owned(),
            json!({ "from": t.from, "after": after, "to": to, "rows": rows }),
        )],
        token: None,
    }
}
/// Append the result (`Ok(None)`: another process took the version).
pub(super) async fn append(
    mut downstream: DeltaTable,
    t: &Transform,
    output: Output,
    after: Option<u64>,
    to: u64,
) -> Result<Option<Applied>> {
    let rows = output.rows();
    let batches = conform(&downstream, t, output)?;
    let adds =
        append::write_files(&downstream, &t.name, &batches, table::writer_properties()).await?;
    let spec = commit_spec(t, after, to, rows);
    let committed =
        append::try_commit_next(&mut downstream, &t.name, &t.partition_by, &adds, &spec).await?;
    match committed {
        Some(version) => Ok(Some(Applied { version, inserted: rows, updated: 0 })),
        None => {
            append::remove_files(&downstream, &adds).await;
            Ok(None)
        }
    }
}

/// MERGE the result by primary key (`Ok(None)`: another process took the
/// version).
pub(super) async fn merge(
    downstream: DeltaTable,
    t: &Transform,
    output: Output,
    after: Option<u64>,
    to: u64,
) -> Result<Option<Applied>> {
    let rows = output.rows();
    let batches = conform(&downstream, t, output)?;
    if rows == 0 {
        return watermark_only(downstream, t, after, to).await;
    }
    unique_keys(t, &batches)?;
    let properties = commit_spec(t, after, to, rows).properties_on(&downstream, &t.name)?;
    let on_match = upsert::OnMatch { columns: t.on_match.clone(), sequence_by: None };
    let merged =
        upsert::merge(downstream, &t.name, batches, &t.primary_key, &on_match, properties).await?;
    Ok(merged.map(|m| Applied { version: m.version, inserted: m.inserted, updated: m.updated }))
}

/// Record the watermark alone: the new upstream versions added no rows (or
/// the SQL kept none).
async fn watermark_only(
    mut downstream: DeltaTable,
    t: &Transform,
    after: Option<u64>,
    to: u64,
) -> Result<Option<Applied>> {
    let spec = commit_spec(t, after, to, 0);
    let operation = DeltaOperation::Write {
        mode: SaveMode::Append,
        partition_by: (!t.partition_by.is_empty()).then(|| t.partition_by.clone()),
        predicate: None,
    };
    let committed = append::try_commit_actions_next(
        &mut downstream,
        &t.name,
        Vec::new(),
        operation,
        &spec,
        &[],
    )
    .await?;
    Ok(committed.map(|version| Applied { version, inserted: 0, updated: 0 }))
}

/// The result's batches in the table's schema: same columns, cast to the
/// table's types. A column added or dropped by an edited SQL is an error
/// naming both lists.
fn conform(downstream: &DeltaTable, t: &Transform, output: Output) -> Result<Vec<RecordBatch>> {
    let schema =
        downstream.snapshot().map_err(|e| Error::delta(&t.name, e))?.snapshot().arrow_schema();
    let mut table_columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut sql_columns: Vec<&str> =
        output.schema.fields().iter().map(|f| f.name().as_str()).collect();
    table_columns.sort_unstable();
    sql_columns.sort_unstable();
    if output.rows() > 0 && table_columns != sql_columns {
        return Err(Error::Transform {
            name: t.name.clone(),
            message: format!(
                "its SQL returns columns {sql_columns:?} but its table has {table_columns:?}. \
                 Help: keep the columns, or rebuild the table (delete its folder)"
            ),
        });
    }
    output
        .batches
        .iter()
        .filter(|b| b.num_rows() > 0)
        .map(|batch| {
            let columns = schema
                .fields()
                .iter()
                .map(|field| {
                    let column =
                        batch.column_by_name(field.name()).ok_or_else(|| Error::Transform {
                            name: t.name.clone(),
                            message: format!("its SQL lost the column `{}`", field.name()),
                        })?;
                    cast(column, field.data_type()).map_err(|e| {
                        Error::arrow(
                            format!("transform `{}`, column `{}`", t.name, field.name()),
                            e,
                        )
                    })
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            RecordBatch::try_new(schema.clone(), columns)
                .map_err(|e| Error::arrow(format!("transform `{}`", t.name), e))
        })
        .collect()
}

/// A merge needs one source row per key, and no null keys.
fn unique_keys(t: &Transform, batches: &[RecordBatch]) -> Result<()> {
    let bad = |message: String| Err(Error::Transform { name: t.name.clone(), message });
    for k in &t.primary_key {
        if batches.first().is_some_and(|b| b.column_by_name(k).is_none()) {
            return bad(format!("its SQL lost the key column `{k}`"));
        }
        if batches.iter().any(|b| b.column_by_name(k).is_some_and(|c| c.null_count() > 0)) {
            return bad(format!("its SQL returned a null in the key column `{k}`"));
        }
    }
    match upsert::repeated_key(batches, &t.primary_key, &t.name)? {
        Some(key) => bad(format!(
            "its SQL returned two rows for the key ({}) = ({key}); a merge takes one row per \
             key. Help: GROUP BY the key columns",
            t.primary_key.join(", ")
        )),
        None => Ok(()),
    }
}
