//! The `prefetch.*` settings as Python keyword arguments, and
//! `PrefetchConfig`, which gives a datafusion-python session `SET prefetch.*`.

use std::ffi::CStr;

use datafusion::common::Result;
use datafusion::config::ExtensionOptions;
use datafusion_ffi::config::extension_options::FFI_ExtensionOptions;
use datafusion_prefetch::PrefetchOptions;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::errors::to_py;

const EXTENSION_OPTIONS: &CStr = c"datafusion_extension_options";

/// Settings given as keyword arguments: (key without `prefetch.`, value).
pub type Settings = Vec<(&'static str, String)>;

/// The keyword arguments that were given, the budget before the window (the
/// window must fit in the budget when it is set).
#[allow(clippy::too_many_arguments)]
pub fn settings(
    policy: Option<String>,
    read_ahead_window: Option<String>,
    memory_budget: Option<String>,
    file_open_depth: Option<String>,
    eager_first_read_cap: Option<String>,
    hedge_after: Option<String>,
    hedge_share: Option<String>,
    price_per_1000_requests: Option<String>,
    request_timeout: Option<String>,
) -> Settings {
    [
        ("policy", policy),
        ("memory_budget", memory_budget),
        ("read_ahead_window", read_ahead_window),
        ("file_open_depth", file_open_depth),
        ("eager_first_read_cap", eager_first_read_cap),
        ("hedge_after", hedge_after),
        ("hedge_share", hedge_share),
        ("price_per_1000_requests", price_per_1000_requests),
        ("request_timeout", request_timeout),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|value| (key, value)))
    .collect()
}

/// `options` with `settings` applied in order, validated.
pub fn with_settings(
    mut options: PrefetchOptions,
    settings: &[(&'static str, String)],
) -> Result<PrefetchOptions> {
    for (key, value) in settings {
        options.set_key(key, value)?;
    }
    options.validate()?;
    Ok(options)
}

/// `prefetch.*` settings for a datafusion-python session:
/// `SessionContext(SessionConfig().with_extension(PrefetchConfig(policy="auto")))`
/// makes `SET prefetch.policy = 'off'` and `SHOW prefetch.policy` work there,
/// and every `ParquetTable` the session scans uses them (a table's own
/// keyword arguments win). datafusion-python keeps them as text: a bad value
/// set with `SET` fails the next query of a `ParquetTable`, naming the key.
#[pyclass(frozen, module = "datafusion_prefetch")]
pub struct PrefetchConfig {
    options: PrefetchOptions,
}

#[pymethods]
impl PrefetchConfig {
    #[new]
    #[pyo3(signature = (
        *,
        policy = None,
        read_ahead_window = None,
        memory_budget = None,
        file_open_depth = None,
        eager_first_read_cap = None,
        hedge_after = None,
        hedge_share = None,
        price_per_1000_requests = None,
        request_timeout = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        policy: Option<String>,
        read_ahead_window: Option<String>,
        memory_budget: Option<String>,
        file_open_depth: Option<String>,
        eager_first_read_cap: Option<String>,
        hedge_after: Option<String>,
        hedge_share: Option<String>,
        price_per_1000_requests: Option<String>,
        request_timeout: Option<String>,
    ) -> PyResult<Self> {
        let settings = settings(
            policy,
            read_ahead_window,
            memory_budget,
            file_open_depth,
            eager_first_read_cap,
            hedge_after,
            hedge_share,
            price_per_1000_requests,
            request_timeout,
        );
        let options = with_settings(PrefetchOptions::default(), &settings).map_err(to_py)?;
        Ok(Self { options })
    }

    /// The settings as datafusion-python 55's `SessionConfig.with_extension`
    /// takes them.
    fn __datafusion_extension_options__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // Our entries carry their `prefetch.` prefix already (add_config
        // would prefix them again).
        let mut extension = FFI_ExtensionOptions::default();
        for entry in self.options.entries() {
            if let Some(value) = entry.value {
                extension.set(&entry.key, &value).map_err(to_py)?;
            }
        }
        PyCapsule::new_with_value(py, extension, EXTENSION_OPTIONS)
    }

    fn __repr__(&self) -> String {
        format!("PrefetchConfig(policy={:?})", self.options.policy().name())
    }
}
