//! `sluice._native.Lake`: one open lake, shared by the threads that use it.

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice::artifact::{CONFIG, DATA, DataFormat, FILE_REF, METRIC};
use sluice::lake::LakeRoot;
use sluice::lake::journal::snapshot;
use sluice::lineage::{Direction, render};
use sluice::pipeline::status;
use sluice::query::AsOf;
use sluice::registry::declared::DeclaredTypeSpec;
use sluice::{Draft, Error};

use crate::errors::to_python;
use crate::stream::ArrowStream;
use crate::wait;

/// An open sluice lake (a folder, or an `s3://`, `az://` or `abfss://`
/// URL). Safe to share between threads; every call releases the GIL while
/// it reads or writes.
#[pyclass(frozen, module = "sluice._native")]
pub(crate) struct Lake {
    lake: sluice::Lake,
}

/// `as_of` as the CLI's `--as-of` takes it (a lake version, an RFC 3339
/// time, `table@version,…`), or `None` for the latest.
fn as_of(text: Option<&str>) -> PyResult<Option<AsOf>> {
    text.map(|t| AsOf::parse_for(t, "as_of")).transpose().map_err(to_python)
}

#[pymethods]
impl Lake {
    /// Open the lake at `root`; a lake in a store takes `storage_options`
    /// (object_store's names, as delta-rs and Polars take them) over the
    /// environment's variables.
    #[new]
    #[pyo3(signature = (root, storage_options = None))]
    fn open(
        py: Python<'_>,
        root: &str,
        storage_options: Option<HashMap<String, String>>,
    ) -> PyResult<Self> {
        let given = storage_options.is_some();
        let root =
            LakeRoot::parse_with(root, storage_options.unwrap_or_default()).map_err(to_python)?;
        if let (true, LakeRoot::Local(path)) = (given, &root) {
            return Err(to_python(Error::InvalidInput(format!(
                "storage_options are for a lake in an object store, but `{}` is a folder",
                path.display()
            ))));
        }
        let lake = wait(py, sluice::Lake::open(root))?;
        Ok(Lake { lake })
    }

    /// Declare an artifact type in the lake's `sluice.toml` from its
    /// `[[artifact_type]]` entry given as JSON text (`key`, `table`,
    /// `partition_by_step`, `identity`, `columns`); `added`, `unchanged` or
    /// `replaced`. Open the lake again to use it.
    fn declare_type(&self, py: Python<'_>, spec: &str) -> PyResult<&'static str> {
        let spec: DeclaredTypeSpec = serde_json::from_str(spec)
            .map_err(|e| to_python(Error::json("the artifact type declared", e)))?;
        let done = wait(py, sluice::lake::config::declare_type(self.lake.root(), &spec))?;
        Ok(done.as_str())
    }

    /// Where the lake is, as messages show it.
    #[getter]
    fn root(&self) -> String {
        self.lake.root().shown("").display().to_string()
    }

    /// The names of the lake's tables.
    fn tables(&self) -> Vec<String> {
        self.lake.table_specs().into_iter().map(|spec| spec.name).collect()
    }

    /// Where table `name` is (a folder, or a URL) and the Delta version the
    /// journal records for it at `as_of` (`None` if the table did not exist
    /// then), with that lake version.
    #[pyo3(signature = (name, as_of = None))]
    fn table_location(
        &self,
        py: Python<'_>,
        name: &str,
        as_of: Option<&str>,
    ) -> PyResult<(String, Option<u64>, Option<i64>)> {
        let point = self::as_of(as_of)?;
        let specs = self.lake.table_specs();
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(to_python(Error::InvalidInput(format!(
                "no table `{name}` in the lake (its tables: {})",
                names.join(", ")
            ))));
        };
        let at = wait(py, async {
            match &point {
                None => self.lake.snapshot().await,
                Some(p) => snapshot::resolve(self.lake.root(), &specs, &p.point()).await,
            }
        })?;
        let location = match self.lake.root().local() {
            Some(_) => self.lake.root().shown(&spec.path).display().to_string(),
            None => self.lake.root().url_of(&spec.path).map_err(to_python)?.to_string(),
        };
        Ok((location, at.version_of(name), at.sequence))
    }

    /// Run a SQL statement over every table, read at one consistent point
    /// (`as_of`, or the latest).
    #[pyo3(signature = (query, as_of = None))]
    fn sql(&self, py: Python<'_>, query: &str, as_of: Option<&str>) -> PyResult<ArrowStream> {
        let point = self::as_of(as_of)?;
        let result = wait(py, self.lake.sql(query).with_as_of(point).execute())?;
        let schema = result.batches.first().map(|b| b.schema()).ok_or_else(|| {
            to_python(Error::Internal("a query returned no batch, not even an empty one".into()))
        })?;
        Ok(ArrowStream::new(schema, result.batches, result.table_versions, result.lake_version))
    }

    /// The artifact `id` (or a unique prefix of it, at least four hex
    /// digits): its type and content — JSON text for a metric, a config or
    /// a declared type, `(bytes, format)` for data, the kept path or URL for
    /// a file_ref — and its id in full.
    fn get<'py>(&self, py: Python<'py>, id: &str) -> PyResult<(String, Bound<'py, PyAny>, String)> {
        let artifact = wait(py, async {
            let id = self.lake.resolve(id).await?;
            self.lake.get(id).await
        })?;
        let type_key = artifact.type_key.clone();
        let content = match type_key.as_str() {
            DATA => {
                let bytes = artifact.field("content").as_bytes().unwrap_or_default();
                let format = artifact.field("format").as_str().unwrap_or("csv").to_owned();
                (PyBytes::new(py, bytes), format).into_pyobject(py)?.into_any()
            }
            FILE_REF => {
                let path = artifact.field("path").as_str().unwrap_or_default().to_owned();
                path.into_pyobject(py)?.into_any()
            }
            _ => {
                let value = match type_key.as_str() {
                    METRIC | CONFIG => artifact.json_content().map_err(to_python)?,
                    _ => serde_json::Value::Object(
                        artifact.fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect(),
                    ),
                };
                value.to_string().into_pyobject(py)?.into_any()
            }
        };
        Ok((type_key, content, artifact.id.to_hex()))
    }

    /// The columns of artifact type `type_key` and their types (`string`,
    /// `int64`, `timestamp`, `json`, …), as `sluice.toml` names them.
    fn column_types(&self, type_key: &str) -> PyResult<HashMap<String, String>> {
        let descriptor = self.lake.registry().descriptor(type_key).map_err(to_python)?;
        Ok(descriptor.columns.iter().map(|c| (c.name.clone(), c.column_type.to_string())).collect())
    }

    /// Put one artifact given as JSON text (a metric or config object, or a
    /// declared type's columns) at `step`; its id.
    #[pyo3(signature = (type_key, json, step = 0))]
    fn put_json(&self, py: Python<'_>, type_key: &str, json: &str, step: i32) -> PyResult<String> {
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| to_python(Error::json(format!("the {type_key} given"), e)))?;
        let draft = match type_key {
            METRIC => Draft::metric(value),
            CONFIG => Draft::config(value),
            DATA | FILE_REF => Err(Error::InvalidInput(format!(
                "a {type_key} is not given as JSON (put_data / put_file)"
            ))),
            other => Draft::from_json_object(self.lake.registry(), other, &value),
        }
        .map_err(to_python)?;
        self.put(py, draft, step)
    }

    /// Put a table given as the bytes of a `format` file (`parquet`, `csv`,
    /// `arrow`) at `step`; its id.
    #[pyo3(signature = (content, format, step = 0, name = None))]
    fn put_data(
        &self,
        py: Python<'_>,
        content: Vec<u8>,
        format: &str,
        step: i32,
        name: Option<&str>,
    ) -> PyResult<String> {
        let format = DataFormat::from_name(format).map_err(to_python)?;
        let mut draft = Draft::data(content, format);
        if let Some(name) = name {
            draft = draft.with_original_name(name);
        }
        self.put(py, draft, step)
    }

    /// Put a reference to the file at `path` (hashed here) at `step`; its id.
    #[pyo3(signature = (path, step = 0))]
    fn put_file(&self, py: Python<'_>, path: PathBuf, step: i32) -> PyResult<String> {
        let draft = py.detach(|| Draft::file_ref(&path)).map_err(to_python)?;
        self.put(py, draft, step)
    }

    /// The lake's versions, newest first (at most `limit`), as JSON text.
    #[pyo3(signature = (limit = None))]
    fn history(&self, py: Python<'_>, limit: Option<usize>) -> PyResult<String> {
        let versions = wait(py, sluice::maintenance::history::lake_history(&self.lake, limit))?;
        serde_json::to_string(&versions)
            .map_err(|e| to_python(Error::json("the lake's history", e)))
    }

    /// The lineage of artifact `id` (or a unique prefix) as JSON text (what
    /// `sluice lineage --format json` prints): `direction` `up`, `down` or
    /// `both`, at most `depth` derivations away.
    #[pyo3(signature = (id, direction = "both", depth = 10))]
    fn lineage(&self, py: Python<'_>, id: &str, direction: &str, depth: usize) -> PyResult<String> {
        let direction = match direction {
            "up" => Direction::Up,
            "down" => Direction::Down,
            "both" => Direction::Both,
            other => {
                return Err(to_python(Error::InvalidInput(format!(
                    "direction `{other}`: up, down or both"
                ))));
            }
        };
        let graph = wait(py, async {
            let root = self.lake.resolve(id).await?;
            self.lake.lineage(root).with_direction(direction).with_depth(depth).execute().await
        })?;
        render::lineage(&graph, render::Format::Json).map_err(to_python)
    }

    /// Every pipeline run, newest first, as JSON text (`sluice runs --json`).
    fn runs(&self, py: Python<'_>) -> PyResult<String> {
        let runs = wait(py, status::runs(&self.lake))?;
        serde_json::to_string(&runs).map_err(|e| to_python(Error::json("the runs", e)))
    }

    /// The state of run `run` (an id or a unique prefix; the latest when
    /// `None`) as JSON text (`sluice status --json`).
    #[pyo3(signature = (run = None))]
    fn status(&self, py: Python<'_>, run: Option<&str>) -> PyResult<String> {
        let state = wait(py, status::status(&self.lake, run))?;
        serde_json::to_string(&state).map_err(|e| to_python(Error::json("the run's state", e)))
    }

    fn __repr__(&self) -> String {
        format!("Lake({:?})", self.root())
    }
}

impl Lake {
    /// Finalize `draft` at `step` and put it; its id.
    fn put(&self, py: Python<'_>, draft: Draft, step: i32) -> PyResult<String> {
        let artifact = draft.with_step(step).finalize(self.lake.registry()).map_err(to_python)?;
        let id = artifact.id.to_hex();
        wait(py, async {
            self.lake.put(&[artifact]).await?;
            self.lake.settle().await;
            Ok(())
        })?;
        Ok(id)
    }
}
