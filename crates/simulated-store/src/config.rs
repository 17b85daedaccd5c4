//! Configuration of a [`SimulatedStore`](crate::SimulatedStore).

use std::fmt;
use std::time::Duration;

use crate::{LatencyModel, RequestRateLimit, RetryModel, ThrottleAnswer};

/// Per-connection bandwidth of the [`s3`](SimulatedStoreConfig::s3) profile:
/// 100 MiB/s, roughly what a single S3 GET sustains from an EC2 instance in
/// the same region.
pub const S3_BANDWIDTH_BYTES_PER_SEC: u64 = 100 * 1024 * 1024;

/// Connection cap of the [`s3`](SimulatedStoreConfig::s3) profile. Large
/// enough not to throttle typical scans, small enough that an over-eager
/// prefetcher queues the way it would against a real client pool.
pub const S3_MAX_CONNECTIONS: usize = 128;

/// Keys per LIST page of the [`s3`](SimulatedStoreConfig::s3) profile: S3's
/// `ListObjectsV2` returns at most 1,000 keys per response.
pub const S3_LIST_PAGE_KEYS: usize = 1000;

/// Seed used by [`SimulatedStoreConfig::default`] and the named profiles.
pub const DEFAULT_SEED: u64 = 0x5EED_5EED;

/// How a [`SimulatedStore`](crate::SimulatedStore) behaves.
///
/// The fields are public so a test can tweak one knob; the `with_*` methods
/// allow the same in a chained expression:
///
/// ```
/// use std::time::Duration;
/// use datafusion_prefetch_simstore::{LatencyModel, SimulatedStoreConfig};
///
/// let config = SimulatedStoreConfig::fixed(Duration::from_millis(20))
///     .with_bandwidth(Some(10 * 1024 * 1024))
///     .with_max_connections(Some(4))
///     .with_seed(7);
/// assert_eq!(config.latency, LatencyModel::Fixed(Duration::from_millis(20)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedStoreConfig {
    /// First-byte delay of every GET (and of HEAD requests).
    pub latency: LatencyModel,
    /// Delay of every LIST request (`list`, `list_with_offset`,
    /// `list_with_delimiter`).
    pub list_latency: LatencyModel,
    /// Bandwidth of a single connection in bytes per second, charged as a
    /// GET body is consumed. `None` = unlimited. Must not be `Some(0)`.
    pub bandwidth_bytes_per_sec: Option<u64>,
    /// Maximum number of requests on the wire at once; further requests wait
    /// for a free connection. `None` = unlimited. Must not be `Some(0)`.
    pub max_connections: Option<usize>,
    /// Entries (keys, and common prefixes under a delimiter) per LIST page:
    /// each page is a LIST request of its own, sent once the page before has
    /// answered, as S3 pages a listing. `None` = a listing of any length is
    /// one request. Must not be `Some(0)`.
    pub list_page_keys: Option<usize>,
    /// Requests (GET, HEAD and each LIST page) admitted per second per
    /// prefix; one over it is answered `503 SlowDown` after a round trip
    /// and retried as [`retry`](Self::retry) says. `None` = no limit.
    pub rate_limit: Option<RequestRateLimit>,
    /// How the client retries a request answered `503 SlowDown`
    /// (object_store's defaults unless set).
    pub retry: RetryModel,
    /// Seed of the latency RNG. The same seed and the same request order
    /// give the same delays.
    pub seed: u64,
}

impl Default for SimulatedStoreConfig {
    /// No latency, no bandwidth limit, no connection cap: a pass-through
    /// that only counts requests.
    fn default() -> Self {
        Self::none()
    }
}

impl SimulatedStoreConfig {
    /// No simulated delays or limits; the store only counts and logs
    /// requests.
    pub fn none() -> Self {
        Self {
            latency: LatencyModel::None,
            list_latency: LatencyModel::None,
            bandwidth_bytes_per_sec: None,
            max_connections: None,
            list_page_keys: None,
            rate_limit: None,
            retry: RetryModel::default(),
            seed: DEFAULT_SEED,
        }
    }

    /// The same `latency` before every GET's first byte and every LIST
    /// response; unlimited bandwidth and connections. Handy for tests that
    /// reason about exact timings.
    pub fn fixed(latency: Duration) -> Self {
        Self {
            latency: LatencyModel::Fixed(latency),
            list_latency: LatencyModel::Fixed(latency),
            ..Self::none()
        }
    }

    /// An in-region S3 profile: [`LatencyModel::S3`] for GETs,
    /// [`LatencyModel::S3List`] for LISTs,
    /// [`S3_BANDWIDTH_BYTES_PER_SEC`] per connection,
    /// [`S3_MAX_CONNECTIONS`] connections, listings paged by
    /// [`S3_LIST_PAGE_KEYS`], and S3's request rate per prefix
    /// ([`RequestRateLimit::s3`]) retried as object_store does.
    pub fn s3() -> Self {
        Self {
            latency: LatencyModel::S3,
            list_latency: LatencyModel::S3List,
            bandwidth_bytes_per_sec: Some(S3_BANDWIDTH_BYTES_PER_SEC),
            max_connections: Some(S3_MAX_CONNECTIONS),
            list_page_keys: Some(S3_LIST_PAGE_KEYS),
            rate_limit: Some(RequestRateLimit::s3()),
            retry: RetryModel::default(),
            seed: DEFAULT_SEED,
        }
    }

    /// The profile a command-line `--latency <model>` flag most likely
    /// means: `None` → [`none`](Self::none), `Fixed(d)` →
    /// [`fixed(d)`](Self::fixed), `S3` or `S3List` → [`s3`](Self::s3).
    pub fn from_latency(model: LatencyModel) -> Self {
        match model {
            LatencyModel::None => Self::none(),
            LatencyModel::Fixed(d) => Self::fixed(d),
            LatencyModel::S3 | LatencyModel::S3List => Self::s3(),
        }
    }

    /// Replaces the GET/HEAD first-byte latency model.
    #[must_use]
    pub fn with_latency(mut self, latency: LatencyModel) -> Self {
        self.latency = latency;
        self
    }

    /// Replaces the LIST latency model.
    #[must_use]
    pub fn with_list_latency(mut self, list_latency: LatencyModel) -> Self {
        self.list_latency = list_latency;
        self
    }

    /// Sets the per-connection bandwidth in bytes per second (`None` =
    /// unlimited).
    #[must_use]
    pub fn with_bandwidth(mut self, bytes_per_sec: Option<u64>) -> Self {
        self.bandwidth_bytes_per_sec = bytes_per_sec;
        self
    }

    /// Sets the connection cap (`None` = unlimited).
    #[must_use]
    pub fn with_max_connections(mut self, max_connections: Option<usize>) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// Sets the entries per LIST page (`None` = one request per listing).
    #[must_use]
    pub fn with_list_page_keys(mut self, keys: Option<usize>) -> Self {
        self.list_page_keys = keys;
        self
    }

    /// Sets the request rate limit per prefix (`None` = no limit).
    #[must_use]
    pub fn with_rate_limit(mut self, limit: Option<RequestRateLimit>) -> Self {
        self.rate_limit = limit;
        self
    }

    /// Sets how the client retries a throttled request.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryModel) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the latency RNG seed.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

impl fmt::Display for SimulatedStoreConfig {
    /// One line suitable for benchmark output, e.g.
    /// `latency=s3 list_latency=s3-list bandwidth=104857600B/s connections=128 list_pages=1000 rate_limit=5500/s burst=5500 seed=…`
    /// (the retry model is shown only when it is not object_store's).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "latency={} list_latency={} ",
            self.latency, self.list_latency
        )?;
        match self.bandwidth_bytes_per_sec {
            Some(b) => write!(f, "bandwidth={b}B/s ")?,
            None => f.write_str("bandwidth=unlimited ")?,
        }
        match self.max_connections {
            Some(c) => write!(f, "connections={c} ")?,
            None => f.write_str("connections=unlimited ")?,
        }
        if let Some(keys) = self.list_page_keys {
            write!(f, "list_pages={keys} ")?;
        }
        if let Some(limit) = self.rate_limit {
            write!(
                f,
                "rate_limit={}/s burst={} ",
                limit.per_second, limit.burst
            )?;
            if limit.answer != ThrottleAnswer::default() {
                write!(f, "throttle_answer={:?} ", limit.answer)?;
            }
        }
        if self.retry != RetryModel::default() {
            write!(f, "retry={:?} ", self.retry)?;
        }
        write!(f, "seed={}", self.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles() {
        assert_eq!(
            SimulatedStoreConfig::default(),
            SimulatedStoreConfig::none()
        );
        let s3 = SimulatedStoreConfig::s3();
        assert_eq!(s3.latency, LatencyModel::S3);
        assert_eq!(s3.list_latency, LatencyModel::S3List);
        assert_eq!(s3.bandwidth_bytes_per_sec, Some(100 * 1024 * 1024));
        assert_eq!(s3.max_connections, Some(128));
        assert_eq!(s3.list_page_keys, Some(1000));
        assert_eq!(s3.rate_limit, Some(RequestRateLimit::s3()));
        assert_eq!(s3.retry, RetryModel::default());
        let d = Duration::from_millis(9);
        let fixed = SimulatedStoreConfig::fixed(d);
        assert_eq!(fixed.list_latency, LatencyModel::Fixed(d));
        assert_eq!(fixed.max_connections, None);
        assert_eq!(fixed.list_page_keys, None);
        assert_eq!(fixed.rate_limit, None);
        assert_eq!(
            SimulatedStoreConfig::from_latency("s3".parse().unwrap()),
            SimulatedStoreConfig::s3()
        );
        assert_eq!(
            SimulatedStoreConfig::from_latency(LatencyModel::Fixed(d)),
            fixed
        );
    }

    #[test]
    fn display_is_one_line() {
        let s = SimulatedStoreConfig::s3().with_seed(1).to_string();
        assert_eq!(
            s,
            "latency=s3 list_latency=s3-list bandwidth=104857600B/s connections=128 list_pages=1000 \
             rate_limit=5500/s burst=5500 seed=1"
        );
    }
}
