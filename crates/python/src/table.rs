//! `datafusion_prefetch.ParquetTable`: a prefetching Parquet table that
//! datafusion-python registers with `ctx.register_table(name, table)`.

use std::collections::HashMap;
use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::prelude::SessionConfig;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use datafusion_prefetch::{PrefetchOptions, PrefetchingParquetTable};
use datafusion_prefetch_simstore::LatencyModel;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList, PyString};
use url::Url;

use crate::environment::environment;
use crate::errors::to_py;
use crate::provider::{HostedTable, session_state};
use crate::settings::{settings, with_settings};
use crate::stores::{StorageOptions, store_for};

const TABLE_PROVIDER: &CStr = c"datafusion_table_provider";
const LOGICAL_CODEC: &CStr = c"datafusion_logical_extension_codec";

/// A Parquet table (a file, a folder or a prefix) whose scans prefetch.
#[pyclass(frozen, module = "datafusion_prefetch")]
pub struct ParquetTable {
    url: String,
    hosted: Arc<HostedTable>,
}

#[pymethods]
impl ParquetTable {
    #[new]
    #[pyo3(signature = (
        url,
        *,
        storage_options = None,
        policy = None,
        read_ahead_window = None,
        memory_budget = None,
        file_open_depth = None,
        eager_first_read_cap = None,
        hedge_after = None,
        hedge_share = None,
        price_per_1000_requests = None,
        request_timeout = None,
        file_extension = ".parquet",
        simulate_latency = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: String,
        storage_options: Option<HashMap<String, String>>,
        policy: Option<String>,
        read_ahead_window: Option<String>,
        memory_budget: Option<String>,
        file_open_depth: Option<String>,
        eager_first_read_cap: Option<String>,
        hedge_after: Option<String>,
        hedge_share: Option<String>,
        price_per_1000_requests: Option<String>,
        request_timeout: Option<String>,
        file_extension: &str,
        simulate_latency: Option<String>,
    ) -> PyResult<Self> {
        let simulation = simulate_latency
            .map(|latency| latency.parse::<LatencyModel>())
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("simulate_latency: {e}")))?;
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

        let storage_options: StorageOptions =
            storage_options.unwrap_or_default().into_iter().collect();
        let table_url = ListingTableUrl::parse(&url).map_err(to_py)?;
        let store_url = Url::parse(table_url.object_store().as_str())
            .map_err(|e| PyRuntimeError::new_err(format!("{url}: {e}")))?;
        let environment = environment();
        // The table's own runtime on the shared pool; local files need no store.
        let store = store_for(&store_url, &storage_options, simulation)?;
        let runtime = environment
            .runtime_for(store.map(|store| (&store_url, store)))
            .map_err(to_py)?;
        let state = session_state(SessionConfig::new(), options, &runtime);
        let builder =
            PrefetchingParquetTable::builder(url.clone()).with_file_extension(file_extension);
        // Listing and schema inference read the store: on our runtime, with
        // the GIL released so other Python threads run meanwhile.
        let table = py
            .detach(|| environment.tokio().block_on(builder.build(&state)))
            .map_err(to_py)?;
        Ok(Self {
            url,
            hosted: Arc::new(HostedTable::new(table, settings, runtime)),
        })
    }

    /// The FFI table provider datafusion-python 55 registers.
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        check_datafusion_major(py)?;
        let codec = host_codec(&session)?;
        let provider = FFI_TableProvider::new_with_ffi_codec(
            Arc::clone(&self.hosted) as _,
            true,
            Some(environment().tokio().handle().clone()),
            codec,
        );
        PyCapsule::new_with_value(py, provider, TABLE_PROVIDER)
    }

    /// What each of the last 256 scans of this table did, oldest first: one
    /// dict per scan with requests, bytes fetched, fetched ahead, served from
    /// read-ahead, wasted, peak staged, hedged requests and hedges that won,
    /// reads ahead withdrawn by a throttling store's window and sent again,
    /// attempts the store's client sent (retries and hedges included), the
    /// `503`s among them and what the attempts cost in dollars, requests and bytes shared with other scans,
    /// and tasks still live.
    fn scan_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for scan in self.hosted.scans() {
            let stats = PyDict::new(py);
            stats.set_item("requests", scan.requests())?;
            stats.set_item("requests_hedged", scan.requests_hedged())?;
            stats.set_item("hedges_won", scan.hedges_won())?;
            stats.set_item("requests_withdrawn", scan.requests_withdrawn())?;
            stats.set_item("attempts", scan.attempts())?;
            stats.set_item("attempts_throttled", scan.attempts_throttled())?;
            stats.set_item("request_cost", scan.request_cost())?;
            stats.set_item("bytes_fetched", scan.bytes_fetched())?;
            stats.set_item("requests_shared", scan.requests_shared())?;
            stats.set_item("bytes_shared", scan.bytes_shared())?;
            stats.set_item("requests_kept", scan.requests_kept())?;
            stats.set_item("bytes_kept", scan.bytes_kept())?;
            stats.set_item("bytes_fetched_ahead", scan.bytes_fetched_ahead())?;
            stats.set_item(
                "bytes_served_from_prefetch",
                scan.bytes_served_from_prefetch(),
            )?;
            stats.set_item("bytes_used", scan.bytes_used())?;
            stats.set_item("bytes_wasted", scan.bytes_wasted())?;
            stats.set_item("bytes_copied", scan.bytes_copied())?;
            stats.set_item("staged_bytes", scan.staged_bytes())?;
            stats.set_item("peak_staged_bytes", scan.peak_staged_bytes())?;
            stats.set_item(
                "staged_over_held_violations",
                scan.staged_over_held_violations(),
            )?;
            stats.set_item("live_tasks", scan.live_tasks())?;
            list.append(stats)?;
        }
        Ok(list)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "ParquetTable({})",
            PyString::new(py, &self.url).repr()?
        ))
    }
}

/// The host's logical codec, from the session datafusion-python passes (a
/// session exporting it, or the codec capsule itself).
fn host_codec(session: &Bound<'_, PyAny>) -> PyResult<FFI_LogicalExtensionCodec> {
    let capsule = if session.hasattr("__datafusion_logical_extension_codec__")? {
        session
            .getattr("__datafusion_logical_extension_codec__")?
            .call0()?
    } else {
        session.clone()
    };
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err("expected a datafusion-python SessionContext or logical codec capsule")
    })?;
    let codec: NonNull<FFI_LogicalExtensionCodec> =
        capsule.pointer_checked(Some(LOGICAL_CODEC))?.cast();
    // SAFETY: the capsule's name says it holds an FFI_LogicalExtensionCodec,
    // which lives as long as the capsule; we clone it before returning.
    Ok(unsafe { codec.as_ref() }.clone())
}

/// Refuse a datafusion-python of another major: the FFI structs differ and a
/// mismatch crashes instead of failing. The package's own check, which also
/// runs at import, so that there is one.
fn check_datafusion_major(py: Python<'_>) -> PyResult<()> {
    py.import("datafusion_prefetch")?
        .call_method0("_check_datafusion")?;
    Ok(())
}
