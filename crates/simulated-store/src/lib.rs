//! [`ObjectStore`](object_store::ObjectStore) wrappers that make a local
//! store behave like a remote one — slow ([`SimulatedStore`]) and
//! unreliable ([`FaultyStore`]) — for testing and benchmarking a Parquet
//! read-ahead engine without a network.
//!
//! [`SimulatedStore`] wraps any store (usually
//! [`InMemory`](object_store::memory::InMemory)) and adds, per GET:
//!
//! * a **connection cap** — requests beyond
//!   [`max_connections`](SimulatedStoreConfig::max_connections) queue;
//! * a **first-byte delay** drawn from a [`LatencyModel`] (fixed, or an S3
//!   fit with P50 ≈ 32 ms / P90 ≈ 110 ms / P99 ≈ 200 ms) using a seeded RNG;
//! * **per-connection bandwidth**, charged as the body is consumed;
//! * optionally a **request-rate limit per prefix** ([`RequestRateLimit`],
//!   on at S3's 5,500 requests/s in the `s3` profile): a GET, HEAD or LIST
//!   page over it is answered `503 SlowDown` (or, set so, `429 Too Many
//!   Requests`) after its round trip and
//!   retried with object_store's backoff ([`RetryModel`]), so the caller
//!   sees what an object_store S3 client shows it — a delay, or the
//!   client's error once it gives up.
//!
//! It also counts requests (and the attempts, `503`s and retries behind
//! them) and keeps a log of every GET in [`StoreStats`], so tests can
//! assert *what* was fetched, *when*, and whether any byte was fetched
//! twice.
//!
//! `get_ranges` coalesces and cuts ranges as object_store's default
//! implementation does, so the log shows the GETs S3 would have received;
//! where the default panics (a range starting past the end of a short body)
//! it fails with an error.
//!
//! # Example: a slow store
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

//!
//! # Fault injection
//!
//! [`FaultyStore`] is a second, independent wrapper that injects faults into
//! GETs: errors (transient or permanent), requests that never answer or
//! answer late, bodies cut short (ending in an error as a real truncated
//! HTTP body does, ending silently, or hanging), and silently corrupted
//! bodies. Each [`Fault`] is triggered by a [`FaultRule`] — by path, request
//! number, byte range or seeded probability, optionally only for the first
//! matches — kept in a [`FaultRules`] list that can be changed while the
//! store is in use. Injected faults are counted and logged in [`FaultStats`].
//!
//! The two wrappers compose in either order (see [`FaultyStore`] for what
//! each order means). Here planning runs clean, then the scan's third read
//! of one file fails once and every read of another file stalls:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use datafusion_prefetch_simstore::{
//!     Fault, FaultKind, FaultRule, FaultyStore, SimulatedStore, SimulatedStoreConfig,
//! };
//! use object_store::memory::InMemory;
//! use object_store::path::Path;
//! use object_store::{ObjectStore, ObjectStoreExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> object_store::Result<()> {
//! let config = SimulatedStoreConfig::fixed(Duration::from_millis(1));
//! let sim = SimulatedStore::new(InMemory::new(), config);
//! let (x, y) = (Path::from("data/x.parquet"), Path::from("data/y.parquet"));
//! sim.inner().put(&x, vec![1u8; 1000].into()).await?;
//! sim.inner().put(&y, vec![2u8; 1000].into()).await?;
//! let store = FaultyStore::new(sim);
//! let (faults, fault_stats) = (store.faults(), store.stats());
//! let store: Arc<dyn ObjectStore> = Arc::new(store);
//!
//! // "Planning": no rules yet, so nothing fails.
//! store.get_range(&x, 992..1000).await?;
//!
//! // "Scan": the 3rd GET of x from now on fails once; y never answers.
//! faults.push(FaultRule::new(Fault::Error).path(&x).skip(2).once());
//! faults.push(FaultRule::new(Fault::Stall).path(&y));
//!
//! store.get_range(&x, 0..100).await?;
//! store.get_range(&x, 100..200).await?;
//! let err = store.get_range(&x, 200..300).await.unwrap_err();
//! assert!(err
//!     .to_string()
//!     .contains("injected error on GET #3 of data/x.parquet (bytes 200..300)"));
//! assert_eq!(store.get_range(&x, 200..300).await?.len(), 100); // the retry succeeds
//!
//! let stalled = store.get_range(&y, 0..100);
//! let outcome = tokio::time::timeout(Duration::from_millis(50), stalled).await;
//! assert!(outcome.is_err()); // timed out; the dropped request holds nothing
//!
//! assert_eq!(fault_stats.injected(FaultKind::Error), 1);
//! assert_eq!(fault_stats.injected(FaultKind::Stall), 1);
//! assert_eq!(fault_stats.records()[0].request, 3);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod config;
mod fault_rules;
mod fault_stats;
mod faults;
mod faulty_store;
mod latency;
mod ranges;
mod retry;
mod stats;
mod store;
mod throttle;

pub use config::{
    DEFAULT_SEED, S3_BANDWIDTH_BYTES_PER_SEC, S3_LIST_PAGE_KEYS, S3_MAX_CONNECTIONS,
    SimulatedStoreConfig,
};
pub use fault_rules::FaultRules;
pub use fault_stats::{FaultRecord, FaultStats, InjectedFault};
pub use faults::{Fault, FaultKind, FaultRule, PathMatcher, TruncateMode};
pub use faulty_store::FaultyStore;
pub use latency::{LatencyModel, ParseLatencyModelError};
pub use retry::RetryModel;
pub use stats::{RequestRecord, RequestState, StatsSnapshot, StoreStats};
pub use store::{Attempt, AttemptObserver, SimulatedStore};
pub use throttle::{RequestRateLimit, S3_REQUESTS_PER_SEC_PER_PREFIX, ThrottleAnswer};
