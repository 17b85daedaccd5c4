//! What every table of the process shares: a tokio runtime to plan and read
//! on, and one memory pool, whose `PrefetchGovernor` limits what all their
//! scans hold together. Each table gets a DataFusion runtime of its own on
//! that pool: its own object store (so two tables of one bucket may use
//! different credentials) and its own listing and metadata caches (which
//! DataFusion keys by path within a store, not by bucket).

use std::sync::{Arc, OnceLock};

use datafusion::common::Result;
use datafusion::execution::memory_pool::{MemoryPool, UnboundedMemoryPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion_prefetch::{ByteSize, PrefetchGovernor};
use object_store::ObjectStore;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::runtime::Runtime;
use url::Url;

/// The shared tokio runtime and memory pool, and the pool's governor.
pub struct Environment {
    tokio: Runtime,
    pool: Arc<dyn MemoryPool>,
    governor: Arc<PrefetchGovernor>,
}

/// The process's environment, made on first use.
pub fn environment() -> &'static Environment {
    static ENVIRONMENT: OnceLock<Environment> = OnceLock::new();
    ENVIRONMENT.get_or_init(|| {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        // The governor belongs to the pool: any runtime on it finds the same.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool))
            .build()
            .expect("a DataFusion runtime");
        Environment {
            tokio: tokio::runtime::Builder::new_multi_thread()
                .thread_name("datafusion-prefetch")
                .enable_all()
                .build()
                .expect("a tokio runtime"),
            governor: PrefetchGovernor::of(&runtime),
            pool,
        }
    })
}

impl Environment {
    /// The tokio runtime every plan and read runs on.
    pub fn tokio(&self) -> &Runtime {
        &self.tokio
    }

    /// A DataFusion runtime on the shared pool (and so the shared governor)
    /// with `store` serving `url`'s bucket, if given (local files need none).
    pub fn runtime_for(
        &self,
        store: Option<(&Url, Arc<dyn ObjectStore>)>,
    ) -> Result<Arc<RuntimeEnv>> {
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&self.pool))
            .build_arc()?;
        if let Some((url, store)) = store {
            runtime.register_object_store(url, store);
        }
        Ok(runtime)
    }
}

/// Set the most that every prefetching scan of the process holds together
/// (staged bytes, requests in flight, buffers in use), e.g. `"2GiB"`.
#[pyfunction]
pub fn set_memory_limit(limit: &str) -> PyResult<()> {
    let limit: ByteSize = limit
        .parse()
        .map_err(|e| PyValueError::new_err(format!("memory limit: {e}")))?;
    if limit.as_u64() == 0 {
        return Err(PyValueError::new_err("memory limit: must be more than 0"));
    }
    environment().governor.set_limit(limit);
    Ok(())
}

/// The process-wide limit, as a size like `"1GiB"`.
#[pyfunction]
pub fn memory_limit() -> String {
    environment().governor.limit().to_string()
}

/// What the process-wide governor measured: held and staged bytes now and at
/// their peaks, refusals, and violations of staged <= held (always 0).
#[pyfunction]
pub fn governor_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let governor = &environment().governor;
    let stats = PyDict::new(py);
    stats.set_item("limit_bytes", governor.limit().as_u64())?;
    stats.set_item("held_bytes", governor.held_bytes())?;
    stats.set_item("staged_bytes", governor.staged_bytes())?;
    stats.set_item("peak_held_bytes", governor.peak_held_bytes())?;
    stats.set_item("peak_staged_bytes", governor.peak_staged_bytes())?;
    stats.set_item("refusals", governor.refusals())?;
    stats.set_item(
        "staged_over_held_violations",
        governor.staged_over_held_violations(),
    )?;
    stats.set_item("live_scans", governor.live_scans())?;
    Ok(stats)
}
