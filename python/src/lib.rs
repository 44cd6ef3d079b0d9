//! `sluice._native`: the sluice library in a Python process.
//!
//! The Python package (`python/sluice/`) is a thin layer over this module:
//! it turns what the module returns into the values Python users work with
//! (dicts, Polars frames, paths). Everything that touches the lake happens
//! here, in the same library crate the `sluice` binary links, with the
//! interpreter's lock released while it waits on I/O, so other Python
//! threads run meanwhile and a `Lake` can be shared between them.
//!
//! Query results cross to Python through the Arrow C stream interface (a
//! PyCapsule named `arrow_array_stream`): pyarrow, Polars and DuckDB take
//! the batches as they are, without a copy or a serialization.
//!
//! The module also carries the whole command line ([`main`]): the `sluice`
//! command a `pip install` puts on PATH is a console script that runs it in
//! its interpreter, so the package ships one build of sluice, not a module
//! and a binary beside it.

mod errors;
mod lake;
mod stream;

use std::sync::OnceLock;

use pyo3::prelude::*;

/// The stack of each runtime thread: the CLI's (delta-rs walks a long
/// `IN (…)` filter recursively).
const RUNTIME_STACK: usize = 16 << 20;

/// The one async runtime of the process, started on first use.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_stack_size(RUNTIME_STACK)
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))
        })
        .as_ref()
        .map_err(|e| errors::SluiceError::new_err(e.clone()))
}

/// Run `future` to its end on the runtime, the interpreter's lock released
/// meanwhile; a sluice error becomes its Python exception.
fn wait<T: Send>(
    py: Python<'_>,
    future: impl std::future::Future<Output = sluice::Result<T>> + Send,
) -> PyResult<T> {
    let runtime = runtime()?;
    py.detach(|| runtime.block_on(future)).map_err(errors::to_python)
}

/// Run the `sluice` command line with `argv` (the program's name first) in
/// this process and return its exit status. `python` is the interpreter
/// running it: workers start as `python -m sluice`, and Python steps run
/// in it unless their step names another. The interpreter's lock is
/// released while the command runs.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<std::ffi::OsString>, python: std::path::PathBuf) -> u8 {
    use sluice::pipeline::worker_program::{self, WorkerProgram};
    worker_program::set_host(WorkerProgram::hosted(python, ["-m", "sluice"]));
    py.detach(|| sluice_cli::run_with_args(argv))
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_function(wrap_pyfunction!(main, module)?)?;
    module.add_class::<lake::Lake>()?;
    module.add_class::<stream::ArrowStream>()?;
    errors::register(module)
}
