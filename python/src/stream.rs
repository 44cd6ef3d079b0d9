//! Query results as an Arrow C stream (the PyCapsule interface).

use std::collections::BTreeMap;
use std::ffi::CString;

use deltalake::arrow::datatypes::SchemaRef;
use deltalake::arrow::ffi_stream::FFI_ArrowArrayStream;
use deltalake::arrow::record_batch::{RecordBatch, RecordBatchIterator};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// Rows a query returned, with the lake point it read.
///
/// Any Arrow consumer takes it through `__arrow_c_stream__`
/// (`pyarrow.table(s)`, `polars.DataFrame(s)`, DuckDB); it may be consumed
/// more than once, each time from the first row.
#[pyclass(frozen, module = "sluice._native")]
pub(crate) struct ArrowStream {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    table_versions: BTreeMap<String, u64>,
    lake_version: Option<i64>,
}

impl ArrowStream {
    pub(crate) fn new(
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        table_versions: BTreeMap<String, u64>,
        lake_version: Option<i64>,
    ) -> Self {
        ArrowStream { schema, batches, table_versions, lake_version }
    }
}

#[pymethods]
impl ArrowStream {
    /// The rows as an Arrow C stream capsule (the Arrow PyCapsule
    /// interface). A requested schema other than the stream's own is not
    /// cast to: the consumer casts.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let reader =
            RecordBatchIterator::new(self.batches.clone().into_iter().map(Ok), self.schema.clone());
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        let name = CString::new("arrow_array_stream").expect("no NUL in the capsule's name");
        PyCapsule::new(py, stream, Some(name))
    }

    /// Number of rows.
    #[getter]
    fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// The Delta version each table the query read was read at.
    #[getter]
    fn table_versions(&self) -> BTreeMap<String, u64> {
        self.table_versions.clone()
    }

    /// The last lake version wholly visible to the query.
    #[getter]
    fn lake_version(&self) -> Option<i64> {
        self.lake_version
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrowStream({} rows, {} columns, lake version {})",
            self.num_rows(),
            self.schema.fields().len(),
            self.lake_version.map_or("none".into(), |v| v.to_string())
        )
    }
}
