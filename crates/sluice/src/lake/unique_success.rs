//! A spec succeeds once: decided at the executions table's commit.
//!
//! The committer drops a staged successful run whose spec already succeeded
//! when it loads staging, but that is a read: two committers that share no
//! lock (two orchestrators of one pipeline on two hosts) both read "not
//! yet", and both commit a success. So the executions append repeats the
//! question for the versions committed since that read, on the very
//! version it commits on top of (and again after every version it loses):
//! a successful row whose spec another run made succeed meanwhile is
//! committed as what it now is — a run that did the same work second — with
//! `success = false` and the winner named in `error`. Its content and edges
//! were committed before it (content is de-duplicated by id; the edges name
//! a run the executions table holds), so nothing dangles and nothing is
//! lost; the execution cache reads only successes, so the spec has exactly
//! one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deltalake::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use object_store::ObjectStoreExt;

use super::delta::table;
use super::delta::tip::Tip;
use super::layout::TableSpec;
use crate::error::{Error, Result};

/// The words of `error` on a row superseded this way (also how a reader
/// tells such a row from a failure).
pub const SUPERSEDED: &str = "superseded: its spec succeeded first in run";

/// Spec → run of the successful executions, among `wanted` specs, that the
/// table's versions `from+1 ..= to` added.
pub(crate) async fn successes_since(
    tip: &Tip,
    spec: &TableSpec,
    from: u64,
    to: u64,
    wanted: &HashSet<&str>,
) -> Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    let store = tip.table().object_store();
    for version in from + 1..=to {
        let actions = table::commit_actions(tip.table(), &spec.name, version).await?;
        // Rows first appear in data-changing adds (appends, a restore's
        // re-adds); a rewrite (compaction) brings no success not already
        // read from the version that first added it.
        let added = actions.iter().filter_map(|a| match a {
            deltalake::kernel::Action::Add(add) if add.data_change => Some(add.path.clone()),
            _ => None,
        });
        for path in added {
            let location = object_store::path::Path::from_url_path(&path)
                .map_err(|e| Error::Internal(format!("table `{}`: {path}: {e}", spec.name)))?;
            let bytes = store
                .get(&location)
                .await
                .map_err(|e| Error::delta(&spec.name, e.into()))?
                .bytes()
                .await
                .map_err(|e| Error::delta(&spec.name, e.into()))?;
            for (spec_id, run_id) in successes_in_file(bytes, &spec.name, &path)? {
                if wanted.contains(spec_id.as_str()) {
                    out.entry(spec_id).or_insert(run_id);
                }
            }
        }
    }
    Ok(out)
}

/// (spec, run) of the successful executions in one data file.
fn successes_in_file(
    bytes: bytes::Bytes,
    table: &str,
    path: &str,
) -> Result<Vec<(String, String)>> {
    let bad = |e: &dyn std::fmt::Display| Error::Corrupt {
        table: table.to_owned(),
        location: path.to_owned(),
        message: e.to_string(),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| bad(&e))?;
    let schema = builder.schema().clone();
    let index = |name: &str| schema.index_of(name).map_err(|e| bad(&e));
    let columns = [index("execution_spec_id")?, index("execution_run_id")?, index("success")?];
    let mask = ProjectionMask::roots(builder.parquet_schema(), columns);
    let mut out = Vec::new();
    for batch in builder.with_projection(mask).build().map_err(|e| bad(&e))? {
        let batch = batch.map_err(|e| bad(&e))?;
        let (specs, runs, success) = columns_of(&batch, table)?;
        for row in 0..batch.num_rows() {
            if success.is_valid(row) && success.value(row) {
                out.push((specs.value(row).to_owned(), runs.value(row).to_owned()));
            }
        }
    }
    Ok(out)
}

/// The spec, run and success columns of an executions batch (text columns
/// cast to plain UTF-8 whatever their layout).
fn columns_of(
    batch: &RecordBatch,
    table: &str,
) -> Result<(StringArray, StringArray, BooleanArray)> {
    let index = |name: &str| {
        batch.schema().index_of(name).map_err(|_| Error::Corrupt {
            table: table.to_owned(),
            location: format!("column `{name}`"),
            message: "missing".into(),
        })
    };
    let text = |name: &str| super::delta::scan::text_column(batch, index(name)?, table);
    let success = batch
        .column(index("success")?)
        .as_any()
        .downcast_ref::<BooleanArray>()
        .cloned()
        .ok_or_else(|| Error::Corrupt {
            table: table.to_owned(),
            location: "column `success`".into(),
            message: "not a boolean column".into(),
        })?;
    Ok((text("execution_spec_id")?, text("execution_run_id")?, success))
}

/// The specs of the successful rows of `batches`.
pub(crate) fn successful_specs(batches: &[RecordBatch], table: &str) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    for batch in batches {
        let (specs, _, success) = columns_of(batch, table)?;
        for row in 0..batch.num_rows() {
            if success.is_valid(row) && success.value(row) {
                out.insert(specs.value(row).to_owned());
            }
        }
    }
    Ok(out)
}

/// `batches` with every successful row whose spec `winners` names (by
/// another run) turned into a superseded one; the runs turned.
pub(crate) fn supersede(
    batches: Vec<RecordBatch>,
    winners: &HashMap<String, String>,
    table: &str,
) -> Result<(Vec<RecordBatch>, Vec<String>)> {
    let mut turned = Vec::new();
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let (specs, runs, success) = columns_of(&batch, table)?;
        let loser = |row: usize| {
            success.is_valid(row)
                && success.value(row)
                && winners.get(specs.value(row)).is_some_and(|w| w != runs.value(row))
        };
        if !(0..batch.num_rows()).any(loser) {
            out.push(batch);
            continue;
        }
        let schema = batch.schema();
        let error_index = schema.index_of("error").map_err(|e| Error::arrow(table, e))?;
        let errors = super::delta::scan::text_column(&batch, error_index, table)?;
        let mut new_success = Vec::with_capacity(batch.num_rows());
        let mut new_error = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            if loser(row) {
                turned.push(runs.value(row).to_owned());
                new_success.push(Some(false));
                new_error.push(Some(format!("{SUPERSEDED} {}", winners[specs.value(row)])));
            } else {
                new_success.push(success.is_valid(row).then(|| success.value(row)));
                new_error.push(errors.is_valid(row).then(|| errors.value(row).to_owned()));
            }
        }
        let success_index = schema.index_of("success").map_err(|e| Error::arrow(table, e))?;
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[success_index] = Arc::new(BooleanArray::from(new_success));
        // The error column keeps the batch's own string layout.
        let error_type = schema.field(error_index).data_type().clone();
        columns[error_index] =
            deltalake::arrow::compute::cast(&StringArray::from(new_error), &error_type)
                .map_err(|e| Error::arrow(table, e))?;
        out.push(RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow(table, e))?);
    }
    Ok((out, turned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::datatypes::{DataType, Field, Schema};

    fn batch(rows: &[(&str, &str, bool)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("execution_run_id", DataType::Utf8, false),
            Field::new("execution_spec_id", DataType::Utf8, false),
            Field::new("success", DataType::Boolean, false),
            Field::new("error", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(BooleanArray::from(rows.iter().map(|r| r.2).collect::<Vec<_>>())),
                Arc::new(StringArray::from(vec![None::<&str>; rows.len()])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn only_successes_of_specs_another_run_won_are_turned() {
        let staged = batch(&[("r1", "s1", true), ("r2", "s2", true), ("r3", "s3", false)]);
        let winners: HashMap<String, String> =
            [("s1", "other"), ("s2", "r2"), ("s3", "x")].map(|(s, r)| (s.into(), r.into())).into();
        let (out, turned) = supersede(vec![staged], &winners, "executions").unwrap();
        assert_eq!(turned, vec!["r1".to_owned()]);
        let (specs, _, success) = columns_of(&out[0], "executions").unwrap();
        assert_eq!(specs.value(0), "s1");
        assert_eq!((success.value(0), success.value(1), success.value(2)), (false, true, false));
        let errors = out[0].column(3).as_any().downcast_ref::<StringArray>().unwrap();
        assert!(errors.value(0).starts_with(SUPERSEDED) && errors.value(0).ends_with("other"));
        assert!(errors.is_null(1) && errors.is_null(2));
        assert_eq!(successful_specs(&out, "executions").unwrap(), HashSet::from(["s2".to_owned()]));
    }
}
