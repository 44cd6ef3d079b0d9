//! sluice errors as Python exceptions.
//!
//! Every exception carries the message the CLI prints for the same error
//! (its causes and its `Help:` line included); its class says what kind of
//! failure it is, so Python code can catch the ones it can act on.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pyo3::create_exception!(
    sluice,
    SluiceError,
    PyException,
    "Any error sluice reports; the others derive from it."
);
pyo3::create_exception!(sluice, LakeNotFound, SluiceError, "The path or URL holds no sluice lake.");
pyo3::create_exception!(
    sluice,
    ArtifactNotFound,
    SluiceError,
    "No artifact has this id (or this prefix names several)."
);
pyo3::create_exception!(
    sluice,
    TimeTravelError,
    SluiceError,
    "The lake cannot be read at the point asked for."
);
pyo3::create_exception!(
    sluice,
    SchemaError,
    SluiceError,
    "A value does not fit its type's columns or the table's schema."
);
pyo3::create_exception!(sluice, InvalidInput, SluiceError, "An argument sluice cannot use.");
pyo3::create_exception!(sluice, QueryError, SluiceError, "A SQL statement failed to plan or run.");

/// The Python exception for a sluice error.
pub(crate) fn to_python(error: sluice::Error) -> PyErr {
    use sluice::Error as E;
    let text = error.to_string();
    match error {
        E::NotInitialized { .. } => LakeNotFound::new_err(text),
        E::ArtifactNotFound(_) | E::AmbiguousArtifactId { .. } => ArtifactNotFound::new_err(text),
        E::TimeTravel { .. } => TimeTravelError::new_err(text),
        E::SchemaConflict { .. }
        | E::InvalidArtifact { .. }
        | E::InvalidValue { .. }
        | E::UnknownType { .. } => SchemaError::new_err(text),
        E::InvalidInput(_) | E::InvalidArtifactId(_) => InvalidInput::new_err(text),
        E::Sql { .. } | E::Query { .. } => QueryError::new_err(text),
        _ => SluiceError::new_err(text),
    }
}

/// Add the exception classes to the module.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("SluiceError", py.get_type::<SluiceError>())?;
    module.add("LakeNotFound", py.get_type::<LakeNotFound>())?;
    module.add("ArtifactNotFound", py.get_type::<ArtifactNotFound>())?;
    module.add("TimeTravelError", py.get_type::<TimeTravelError>())?;
    module.add("SchemaError", py.get_type::<SchemaError>())?;
    module.add("InvalidInput", py.get_type::<InvalidInput>())?;
    module.add("QueryError", py.get_type::<QueryError>())?;
    Ok(())
}
