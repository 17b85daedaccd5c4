//! The object stores every process of a cluster registers.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion_prefetch_simstore::{LatencyModel, SimulatedStore, SimulatedStoreConfig};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;

/// Object stores by URL, registered on every runtime a process builds.
///
/// The client lists files and reads footers when it registers a table, the
/// scheduler when it plans, and the executors when they scan, so all three need
/// the stores a query's URLs name. Each process registers its own instances:
/// one store per process, as each machine of a real cluster would have its
/// own client and connections.
#[derive(Clone, Default)]
pub struct ObjectStores {
    stores: Vec<(ObjectStoreUrl, Arc<dyn ObjectStore>)>,
}

impl fmt::Debug for ObjectStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.stores.iter().map(|(url, _)| url.as_str()))
            .finish()
    }
}

impl ObjectStores {
    /// No stores beyond DataFusion's defaults (the local file system).
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve `url` (scheme and host, e.g. `sim://bench`) from `store`.
    pub fn with_store(mut self, url: ObjectStoreUrl, store: Arc<dyn ObjectStore>) -> Self {
        self.stores.push((url, store));
        self
    }

    /// Serve `url` from the local directory `dir` through a [`SimulatedStore`]
    /// with `config`'s latency, bandwidth and connection cap.
    pub fn with_simulated_dir(
        self,
        url: ObjectStoreUrl,
        dir: impl Into<PathBuf>,
        config: SimulatedStoreConfig,
    ) -> Result<Self> {
        let dir = dir.into();
        let local = LocalFileSystem::new_with_prefix(&dir).map_err(|e| {
            DataFusionError::Configuration(format!(
                "cannot serve {url} from {}: {e}",
                dir.display()
            ))
        })?;
        Ok(self.with_store(url, Arc::new(SimulatedStore::new(local, config))))
    }

    /// Parse `--store` arguments of the scheduler and executor binaries:
    /// `URL=DIR`, e.g. `sim://bench=/data/tpch_sf1`, each served through a
    /// simulated store with `latency` (`none`, `fixed:<ms>` or `s3`).
    pub fn from_specs(specs: &[String], latency: &str) -> Result<Self> {
        let model: LatencyModel = latency
            .parse()
            .map_err(|e| DataFusionError::Configuration(format!("--latency: {e}")))?;
        let config = SimulatedStoreConfig::from_latency(model);
        let mut stores = Self::new();
        for spec in specs {
            let (url, dir) = spec.split_once('=').ok_or_else(|| {
                DataFusionError::Configuration(format!(
                    "--store '{spec}': expected URL=DIR, e.g. sim://bench=/data/tpch_sf1"
                ))
            })?;
            let url = ObjectStoreUrl::parse(url).map_err(|e| {
                DataFusionError::Configuration(format!("--store '{spec}': bad URL: {e}"))
            })?;
            stores = stores.with_simulated_dir(url, dir, config)?;
        }
        Ok(stores)
    }

    /// Register every store on `runtime`.
    pub fn register(&self, runtime: &RuntimeEnv) {
        for (url, store) in &self.stores {
            runtime.register_object_store(url.as_ref(), Arc::clone(store));
        }
    }

    /// A default runtime with every store registered.
    pub fn runtime(&self) -> Result<Arc<RuntimeEnv>> {
        let runtime = RuntimeEnvBuilder::new().build()?;
        self.register(&runtime);
        Ok(Arc::new(runtime))
    }
}

/// One runtime over `stores`, built on first use and shared from then on: a
/// process's sessions (scheduler) or tasks (executor) then share its footer
/// and listing caches and memory pool, as the sessions of one DataFusion
/// process share a runtime.
pub(crate) struct SharedRuntime {
    stores: ObjectStores,
    runtime: Mutex<Option<Arc<RuntimeEnv>>>,
}

impl SharedRuntime {
    pub(crate) fn new(stores: ObjectStores) -> Self {
        Self {
            stores,
            runtime: Mutex::new(None),
        }
    }

    pub(crate) fn get(&self) -> Result<Arc<RuntimeEnv>> {
        let mut runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(runtime) = runtime.as_ref() {
            return Ok(Arc::clone(runtime));
        }
        let built = self.stores.runtime()?;
        *runtime = Some(Arc::clone(&built));
        Ok(built)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let good = format!("sim://bench={}", dir.path().display());
        let stores = ObjectStores::from_specs(&[good], "fixed:5").unwrap();
        assert_eq!(format!("{stores:?}"), "[\"sim://bench/\"]");
        let err = ObjectStores::from_specs(&["sim://bench".into()], "none").unwrap_err();
        assert!(err.to_string().contains("expected URL=DIR"), "{err}");
        let err = ObjectStores::from_specs(&[], "sometimes").unwrap_err();
        assert!(err.to_string().contains("--latency"), "{err}");
    }

    #[test]
    fn a_shared_runtime_is_built_once() {
        let shared = SharedRuntime::new(ObjectStores::new());
        let first = shared.get().unwrap();
        assert!(Arc::ptr_eq(&first, &shared.get().unwrap()));
    }
}
