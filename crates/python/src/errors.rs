//! DataFusion and object-store errors as Python exceptions.

use datafusion::error::DataFusionError;
use pyo3::PyErr;
use pyo3::exceptions::{PyIOError, PyRuntimeError, PyValueError};

/// A bad setting, URL or option is a `ValueError`; a store that cannot be
/// reached or read is an `OSError`; anything else a `RuntimeError`.
pub fn to_py(error: DataFusionError) -> PyErr {
    match error.find_root() {
        DataFusionError::Configuration(_) | DataFusionError::Plan(_) => {
            PyValueError::new_err(error.to_string())
        }
        DataFusionError::ObjectStore(_) | DataFusionError::IoError(_) => {
            PyIOError::new_err(error.to_string())
        }
        _ => PyRuntimeError::new_err(error.to_string()),
    }
}
