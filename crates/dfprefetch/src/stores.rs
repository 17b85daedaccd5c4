//! Object stores for table URLs, optionally behind a [`SimulatedStore`].

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use datafusion_prefetch::attempts::{AttemptCountingConnector, record_attempt, record_throttled};
use datafusion_prefetch_simstore::{Attempt, SimulatedStore, SimulatedStoreConfig, StoreStats};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::{ClientOptions, ObjectStore};
use url::Url;

/// The object stores a session has registered, and the request counters of
/// the simulated ones.
pub struct Stores {
    simulation: Option<SimulatedStoreConfig>,
    stats: Vec<Arc<StoreStats>>,
    registered: HashSet<String>,
}

impl Stores {
    /// Stores wrapped in a [`SimulatedStore`] with `simulation`, or used as
    /// they are when it is `None`.
    pub fn new(simulation: Option<SimulatedStoreConfig>) -> Self {
        Self {
            simulation,
            stats: vec![],
            registered: HashSet::new(),
        }
    }

    /// Whether stores are simulated (and so count their requests).
    pub fn is_simulated(&self) -> bool {
        self.simulation.is_some()
    }

    /// When simulating, put local files behind the simulated store too, so
    /// tables given as paths and `CREATE EXTERNAL TABLE … LOCATION '/…'`
    /// see the same latency. Without simulation DataFusion's own `file://`
    /// store is kept.
    pub fn register_local(&mut self, ctx: &SessionContext) {
        if self.is_simulated() {
            let url = Url::parse("file:///").expect("valid url");
            self.register(ctx, &url, Arc::new(LocalFileSystem::new()));
        }
    }

    /// Register the store serving `url` (its scheme and authority) unless one
    /// is registered already.
    pub fn register_for(&mut self, ctx: &SessionContext, url: &Url) -> Result<()> {
        if url.scheme() == "file" || self.registered.contains(&key(url)) {
            return Ok(());
        }
        let store = build_store(url)?;
        self.register(ctx, url, store);
        Ok(())
    }

    fn register(&mut self, ctx: &SessionContext, url: &Url, store: Arc<dyn ObjectStore>) {
        let store: Arc<dyn ObjectStore> = match self.simulation {
            Some(config) => {
                let simulated =
                    SimulatedStore::new(store, config).with_attempt_observer(count_attempt);
                self.stats.push(simulated.stats());
                Arc::new(simulated)
            }
            None => store,
        };
        self.registered.insert(key(url));
        ctx.register_object_store(url, store);
    }

    /// Zero the counters of every simulated store.
    pub fn reset(&self) {
        for stats in &self.stats {
            stats.reset();
        }
    }

    /// What the simulated stores served since the last [`Self::reset`], or
    /// `None` when not simulating.
    pub fn counters(&self) -> Option<StoreCounters> {
        self.is_simulated().then(|| {
            self.stats
                .iter()
                .fold(StoreCounters::default(), |c, s| StoreCounters {
                    requests: c.requests + s.get_requests(),
                    bytes: c.bytes + s.bytes_transferred(),
                    max_in_flight: c.max_in_flight.max(s.max_in_flight_gets()),
                })
        })
    }
}

/// Totals over the simulated stores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// GET requests.
    pub requests: u64,
    /// Body bytes transferred.
    pub bytes: u64,
    /// The most GETs one store had in flight at once.
    pub max_in_flight: u64,
}

/// A simulated store's attempt, counted for the prefetching scan whose read
/// made it (`prefetch_attempts` in `EXPLAIN ANALYZE`), as
/// [`AttemptCountingConnector`] counts a real store's.
fn count_attempt(attempt: Attempt) {
    match attempt {
        Attempt::Sent => record_attempt(),
        Attempt::Throttled => record_throttled(),
    };
}

/// `scheme://authority`, the key DataFusion looks stores up by.
fn key(url: &Url) -> String {
    format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

/// A store for `url`'s scheme, configured from the environment.
fn build_store(url: &Url) -> Result<Arc<dyn ObjectStore>> {
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        // from_env reads AWS_ACCESS_KEY_ID, AWS_REGION, AWS_ENDPOINT,
        // AWS_ALLOW_HTTP and friends; with_url takes the bucket from the host.
        "s3" | "s3a" => Arc::new(
            AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_http_connector(AttemptCountingConnector::default())
                .build()?,
        ),
        "gs" => Arc::new(
            GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_http_connector(AttemptCountingConnector::default())
                .build()?,
        ),
        "az" | "adl" | "azure" | "abfs" | "abfss" => Arc::new(
            MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_http_connector(AttemptCountingConnector::default())
                .build()?,
        ),
        // An http:// table URL is an explicit request for plain HTTP.
        "http" | "https" => Arc::new(
            HttpBuilder::new()
                .with_url(key(url))
                .with_client_options(ClientOptions::new().with_allow_http(url.scheme() == "http"))
                .with_http_connector(AttemptCountingConnector::default())
                .build()?,
        ),
        other => {
            return Err(DataFusionError::Configuration(format!(
                "unsupported URL scheme '{other}': expected a local path, file://, \
                 s3://, gs://, az://, abfss://, http:// or https://"
            )));
        }
    };
    Ok(store)
}
