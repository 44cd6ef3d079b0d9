//! MERGE by primary key, as exactly a table's next version: the upsert of
//! raw tables declared `write_mode: merge` and of curated transforms.
//!
//! Delta's MERGE (deltalake's `merge` builder, DataFusion underneath)
//! rewrites the files holding matched rows and adds the new ones in one
//! commit. It is made with no commit retries, so if another writer took the
//! version the caller read, the MERGE fails as "lost the version" and the
//! caller checks again on top of the new head: the check that decided what
//! to merge always holds at the version the merge lands on.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

use deltalake::DeltaTable;
use deltalake::arrow::array::{Array, ArrayRef, UInt32Array};
use deltalake::arrow::compute::{concat_batches, take_record_batch};
use deltalake::arrow::record_batch::RecordBatch;
use deltalake::arrow::row::{RowConverter, SortField};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::kernel::transaction::CommitProperties;

use crate::error::{Error, Result};
use crate::lake::{append, delta::table};

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upserted {
    /// The version it committed.
    pub version: u64,
    /// Rows inserted.
    pub inserted: usize,
    /// Rows updated.
    pub updated: usize,
}

/// How a merge treats a key the table already holds.
#[derive(Debug, Clone, Default)]
pub struct OnMatch {
    /// Per column, an expression over `target.` and `source.` (default: the
    /// source's value).
    pub columns: BTreeMap<String, String>,
    /// Update only if the source's value of this column is not lower than
    /// the stored one.
    pub sequence_by: Option<String>,
}

/// MERGE `batches` into `target` by `key`: matched rows are updated as
/// `on_match` says, the others are inserted. `Ok(None)`: another writer
/// took the version. `batches` must hold one row per key (see
/// [`last_per_key`]).
pub async fn merge(
    target: DeltaTable,
    name: &str,
    batches: Vec<RecordBatch>,
    key: &[String],
    on_match: &OnMatch,
    properties: CommitProperties,
) -> Result<Option<Upserted>> {
    let Some(first) = batches.first() else {
        return Err(Error::Internal(format!("table `{name}`: a merge of no rows")));
    };
    let schema = first.schema();
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let source = SessionContext::new().read_batches(batches).map_err(|e| Error::query(name, e))?;
    let predicate = key
        .iter()
        .map(|k| format!("target.\"{k}\" = source.\"{k}\""))
        .collect::<Vec<_>>()
        .join(" AND ");
    let updated: Vec<&str> =
        columns.iter().copied().filter(|c| !key.iter().any(|k| k == c)).collect();
    let mut builder = target
        .merge(source, predicate)
        .with_source_alias("source")
        .with_target_alias("target")
        .with_writer_properties(table::writer_properties())
        .with_commit_properties(properties);
    if !updated.is_empty() {
        builder = builder
            .when_matched_update(|u| {
                let u = match &on_match.sequence_by {
                    Some(s) => u.predicate(format!("source.\"{s}\" >= target.\"{s}\"")),
                    None => u,
                };
                updated.iter().fold(u, |u, c| {
                    let value = on_match
                        .columns
                        .get(*c)
                        .cloned()
                        .unwrap_or_else(|| format!("source.\"{c}\""));
                    u.update(*c, value)
                })
            })
            .map_err(|e| Error::delta(name, e))?;
    }
    builder = builder
        .when_not_matched_insert(|i| {
            columns.iter().fold(i, |i, c| i.set(*c, format!("source.\"{c}\"")))
        })
        .map_err(|e| Error::delta(name, e))?;
    match builder.await {
        Ok((table, metrics)) => Ok(Some(Upserted {
            version: table.version().unwrap_or_default(),
            inserted: metrics.num_target_rows_inserted,
            updated: metrics.num_target_rows_updated,
        })),
        Err(e) if append::lost_the_version(&e) => Ok(None),
        Err(e) => Err(Error::delta(name, e)),
    }
}

fn key_rows(
    batch: &RecordBatch,
    key: &[String],
    name: &str,
) -> Result<deltalake::arrow::row::Rows> {
    let columns = key
        .iter()
        .map(|k| {
            batch.column_by_name(k).cloned().ok_or_else(|| {
                Error::InvalidInput(format!("table `{name}`: no key column `{k}` in the rows"))
            })
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    if let Some((k, _)) = key.iter().zip(&columns).find(|(_, c)| c.null_count() > 0) {
        return Err(Error::InvalidInput(format!(
            "table `{name}`: a null in the key column `{k}` cannot be merged"
        )));
    }
    let fields = columns.iter().map(|c| SortField::new(c.data_type().clone())).collect();
    let converter = RowConverter::new(fields).map_err(|e| Error::arrow(name, e))?;
    converter.convert_columns(&columns).map_err(|e| Error::arrow(name, e))
}

/// The rows of `batches` with one row per key: the one with the highest
/// `sequence_by` value, or — without one, or on a tie — the last (later
/// batches and later rows win): what a sequence of upserts leaves.
pub fn last_per_key(
    batches: &[RecordBatch],
    key: &[String],
    sequence_by: Option<&str>,
    name: &str,
) -> Result<RecordBatch> {
    let Some(first) = batches.first() else {
        return Err(Error::Internal(format!("table `{name}`: no rows to merge")));
    };
    let all = concat_batches(&first.schema(), batches).map_err(|e| Error::arrow(name, e))?;
    let rows = key_rows(&all, key, name)?;
    // The sequence as comparable bytes (arrow's row format orders as the
    // values do).
    let sequence = match sequence_by {
        Some(s) => Some(key_rows(&all, &[s.to_owned()], name)?),
        None => None,
    };
    let mut best: HashMap<_, usize> = HashMap::with_capacity(all.num_rows());
    for i in 0..all.num_rows() {
        match best.entry(rows.row(i)) {
            Entry::Vacant(v) => {
                v.insert(i);
            }
            Entry::Occupied(mut o) => {
                let newer = sequence.as_ref().is_none_or(|s| s.row(i) >= s.row(*o.get()));
                if newer {
                    o.insert(i);
                }
            }
        }
    }
    let mut keep: Vec<u32> = best.into_values().map(|i| i as u32).collect();
    if keep.len() == all.num_rows() {
        return Ok(all);
    }
    keep.sort_unstable();
    take_record_batch(&all, &UInt32Array::from(keep)).map_err(|e| Error::arrow(name, e))
}

/// The first key `batches` holds twice, if any (as text).
pub fn repeated_key(batches: &[RecordBatch], key: &[String], name: &str) -> Result<Option<String>> {
    let mut seen = HashSet::new();
    for batch in batches {
        let rows = key_rows(batch, key, name)?;
        for (i, row) in rows.iter().enumerate() {
            if !seen.insert(row.owned()) {
                let shown: Vec<String> = key
                    .iter()
                    .filter_map(|k| batch.column_by_name(k))
                    .map(|c| {
                        deltalake::arrow::util::display::array_value_to_string(c, i)
                            .unwrap_or_default()
                    })
                    .collect();
                return Ok(Some(shown.join(", ")));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use deltalake::arrow::array::{Int64Array, StringArray};
    use deltalake::arrow::datatypes::{DataType, Field, Schema};

    fn batch(ids: &[i64], values: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_last_row_of_each_key_wins_in_arrival_order() {
        let key = vec!["id".to_owned()];
        let out = last_per_key(
            &[batch(&[1, 2, 1], &["a", "b", "c"]), batch(&[2, 3], &["d", "e"])],
            &key,
            None,
            "t",
        )
        .unwrap();
        let ids = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let values = out.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        let got: Vec<(i64, &str)> =
            (0..out.num_rows()).map(|i| (ids.value(i), values.value(i))).collect();
        assert_eq!(got, vec![(1, "c"), (2, "d"), (3, "e")]);
        // With a sequence, the highest wins, wherever it came.
        let seq =
            last_per_key(&[batch(&[1, 1, 1], &["b", "c", "a"])], &key, Some("v"), "t").unwrap();
        assert_eq!(seq.num_rows(), 1);
        let v = seq.column(1).as_any().downcast_ref::<StringArray>().unwrap().value(0);
        assert_eq!(v, "c");
        assert_eq!(
            repeated_key(&[batch(&[4, 5, 4], &["x", "y", "z"])], &key, "t").unwrap(),
            Some("4".into())
        );
        assert_eq!(repeated_key(&[out], &key, "t").unwrap(), None);
    }

    #[test]
    fn null_keys_cannot_be_merged() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let b = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![Some(1), None]))])
            .unwrap();
        let err = last_per_key(&[b], &["id".to_owned()], None, "t").unwrap_err().to_string();
        assert!(err.contains("null in the key column `id`"), "{err}");
    }
}
