//! An [`ObjectStore`](object_store::ObjectStore) wrapper that makes a local
//! store behave like a remote one, for testing and benchmarking a Parquet
//! read-ahead engine without a network.
//!
//! [`SimulatedStore`] wraps any store (usually
//! [`InMemory`](object_store::memory::InMemory)) and adds, per GET:
//!
//! * a **connection cap** — requests beyond
//!   [`max_connections`](SimulatedStoreConfig::max_connections) queue;
//! * a **first-byte delay** drawn from a [`LatencyModel`] (fixed, or an S3
//!   fit with P50 ≈ 32 ms / P90 ≈ 110 ms / P99 ≈ 200 ms) using a seeded RNG;
//! * **per-connection bandwidth**, charged as the body is consumed.
//!
//! It also counts requests and keeps a log of every GET in
//! [`StoreStats`], so tests can assert *what* was fetched, *when*, and
//! whether any byte was fetched twice.
//!
//! `get_ranges` is left to object_store's default implementation, so range
//! coalescing behaves as it does against S3 and the log shows the GETs S3
//! would have received.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use datafusion_prefetch_simstore::{SimulatedStore, SimulatedStoreConfig};
//! use object_store::memory::InMemory;
//! use object_store::path::Path;
//! use object_store::{ObjectStore, ObjectStoreExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> object_store::Result<()> {
//! let config = SimulatedStoreConfig::fixed(Duration::from_millis(5))
//!     .with_bandwidth(Some(64 * 1024 * 1024))
//!     .with_max_connections(Some(8));
//! let store = SimulatedStore::new(InMemory::new(), config);
//! let stats = store.stats();
//!
//! // Seed data through the inner store so it is neither delayed nor logged.
//! let path = Path::from("data/file.parquet");
//! store.inner().put(&path, vec![7u8; 4096].into()).await?;
//!
//! // Hand the store to the code under test like any other ObjectStore.
//! let store: Arc<dyn ObjectStore> = Arc::new(store);
//! let started = tokio::time::Instant::now();
//! let parts = store.get_ranges(&path, &[0..100, 200..300]).await?;
//! assert_eq!(parts[1].len(), 100);
//! assert!(started.elapsed() >= Duration::from_millis(5));
//!
//! // The two nearby ranges were coalesced into a single GET.
//! assert_eq!(stats.get_requests(), 1);
//! let log = stats.get_requests_for(&path);
//! assert_eq!(log[0].range, Some(0..300));
//! assert!(log[0].is_completed());
//! assert!(stats.duplicate_ranges_for(&path).is_empty());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod config;
mod fault_stats;
mod faults;
mod faulty_store;
mod latency;
mod stats;
mod store;

pub use config::{
    DEFAULT_SEED, S3_BANDWIDTH_BYTES_PER_SEC, S3_MAX_CONNECTIONS, SimulatedStoreConfig,
};
pub use fault_stats::{FaultRecord, FaultStats, InjectedFault};
pub use faults::{Fault, FaultKind, FaultRule, FaultRules, PathMatcher, TruncateMode};
pub use faulty_store::FaultyStore;
pub use latency::{LatencyModel, ParseLatencyModelError};
pub use stats::{RequestRecord, RequestState, StatsSnapshot, StoreStats};
pub use store::SimulatedStore;
