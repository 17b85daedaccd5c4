//! The Rust side of the `datafusion_prefetch` Python package: prefetching
//! Parquet tables for datafusion-python 55.
//!
//! datafusion-python loads a table from another library through
//! `__datafusion_table_provider__`, a PyCapsule holding an
//! `FFI_TableProvider`. Across that boundary the host's object stores, memory
//! pool and tokio runtime are invisible, so this module owns them: one tokio
//! runtime and one memory pool (and so one `PrefetchGovernor`) for the
//! process, and a DataFusion runtime per table on that pool
//! ([`environment`]), with the store built from the table's URL and
//! `storage_options` ([`stores`]), and a table provider that plans and
//! executes on them whatever session asks ([`provider`]). [`table`] is the
//! Python class, and [`settings`] the `prefetch.*` settings as keyword
//! arguments and as a session extension (`SET prefetch.*`).

mod environment;
mod errors;
mod provider;
mod settings;
mod stores;
mod table;

use pyo3::prelude::*;

/// The DataFusion major version this build's FFI speaks; the Python package
/// refuses a datafusion-python of another major before any capsule crosses.
const DATAFUSION_MAJOR: u64 = 55;

/// `datafusion_prefetch._internal`.
#[pymodule]
fn _internal(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<table::ParquetTable>()?;
    module.add_class::<settings::PrefetchConfig>()?;
    module.add_function(wrap_pyfunction!(environment::set_memory_limit, module)?)?;
    module.add_function(wrap_pyfunction!(environment::memory_limit, module)?)?;
    module.add_function(wrap_pyfunction!(environment::governor_stats, module)?)?;
    module.add("DATAFUSION_MAJOR", DATAFUSION_MAJOR)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Benchmarks report it: a debug wheel is several times slower.
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    module.add("BUILD_PROFILE", profile)?;
    Ok(())
}
