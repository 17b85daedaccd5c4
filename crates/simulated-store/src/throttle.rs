//! S3's request-rate limit per prefix: the token buckets behind its
//! `503 SlowDown`. Pure: every decision takes the time it is made at.

use std::collections::HashMap;

use tokio::time::Instant;

/// S3's published rate of GET/HEAD requests per second per partitioned
/// prefix, the [`s3`](crate::SimulatedStoreConfig::s3) profile's limit.
pub const S3_REQUESTS_PER_SEC_PER_PREFIX: u32 = 5_500;

/// A limit on the requests a store admits per second for each prefix
/// (an object's folder: everything before its last `/`; a listing's own
/// prefix). A request over the limit is answered after a round trip with
/// [`answer`](Self::answer) (S3's `503 SlowDown` unless set), and the client
/// retries it (see [`RetryModel`](crate::RetryModel)).
///
/// Each prefix has a token bucket holding up to [`burst`](Self::burst)
/// tokens and refilled at [`per_second`](Self::per_second); an admitted
/// request takes one token, a refused one takes none. S3 publishes the
/// rate but not a burst, and partitions a prefix further under sustained
/// load; this model keeps one partition per prefix.
///
/// ```
/// use datafusion_prefetch_simstore::{RequestRateLimit, SimulatedStoreConfig};
///
/// // Scaled down so that a test binds it: 50 requests a second, 5 at once.
/// let limit = RequestRateLimit::per_second(50).with_burst(5);
/// let config = SimulatedStoreConfig::none().with_rate_limit(Some(limit));
/// assert_eq!(config.rate_limit.unwrap().burst, 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRateLimit {
    /// Requests admitted per second per prefix, sustained. At least 1.
    pub per_second: u32,
    /// Requests a prefix that has been idle admits at once. At least 1.
    pub burst: u32,
    /// The status a request over the limit is answered with.
    pub answer: ThrottleAnswer,
}

/// The status a store answers a request over its rate limit with; object_store's
/// client retries both alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThrottleAnswer {
    /// `503 Service Unavailable`, reason `SlowDown`: S3's.
    #[default]
    SlowDown,
    /// `429 Too Many Requests`, reason `rateLimitExceeded`: GCS's (Azure
    /// Blob answers `503 ServerBusy`, some Azure and HTTP services `429`).
    TooManyRequests,
}

impl ThrottleAnswer {
    /// The status and reason, as object_store's client words them after the
    /// status code.
    pub(crate) fn status_and_reason(self) -> &'static str {
        match self {
            Self::SlowDown => "503 Service Unavailable: SlowDown",
            Self::TooManyRequests => "429 Too Many Requests: rateLimitExceeded",
        }
    }
}

impl RequestRateLimit {
    /// `per_second` requests a second per prefix, with a burst of one
    /// second's worth.
    ///
    /// # Panics
    ///
    /// If `per_second` is 0: no request would ever be admitted.
    pub fn per_second(per_second: u32) -> Self {
        assert!(
            per_second > 0,
            "a request rate limit must admit at least 1 request a second"
        );
        Self {
            per_second,
            burst: per_second,
            answer: ThrottleAnswer::SlowDown,
        }
    }

    /// S3's published rate, [`S3_REQUESTS_PER_SEC_PER_PREFIX`], with a
    /// burst of one second's worth.
    pub fn s3() -> Self {
        Self::per_second(S3_REQUESTS_PER_SEC_PER_PREFIX)
    }

    /// Sets the status a request over the limit is answered with.
    #[must_use]
    pub fn with_answer(mut self, answer: ThrottleAnswer) -> Self {
        self.answer = answer;
        self
    }

    /// Sets the burst.
    ///
    /// # Panics
    ///
    /// If `burst` is 0: no request would ever be admitted.
    #[must_use]
    pub fn with_burst(mut self, burst: u32) -> Self {
        assert!(burst > 0, "a request rate limit's burst must be at least 1");
        self.burst = burst;
        self
    }
}

/// The prefix a request to `key` counts against: the key's folder.
pub(crate) fn prefix_of(key: &str) -> &str {
    key.rsplit_once('/').map_or("", |(folder, _)| folder)
}

/// One token bucket per prefix.
#[derive(Debug)]
pub(crate) struct PrefixBuckets {
    limit: RequestRateLimit,
    buckets: HashMap<String, Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl PrefixBuckets {
    pub(crate) fn new(limit: RequestRateLimit) -> Self {
        Self {
            limit,
            buckets: HashMap::new(),
        }
    }

    /// Whether a request to `prefix` sent at `now` is admitted; if so it
    /// takes a token. A prefix not seen before starts with a full bucket.
    pub(crate) fn admit(&mut self, prefix: &str, now: Instant) -> bool {
        let burst = f64::from(self.limit.burst);
        let bucket = match self.buckets.get_mut(prefix) {
            Some(bucket) => bucket,
            None => self.buckets.entry(prefix.to_owned()).or_insert(Bucket {
                tokens: burst,
                updated: now,
            }),
        };
        let refilled = now.saturating_duration_since(bucket.updated).as_secs_f64()
            * f64::from(self.limit.per_second);
        bucket.tokens = (bucket.tokens + refilled).min(burst);
        bucket.updated = bucket.updated.max(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn admitted(buckets: &mut PrefixBuckets, prefix: &str, now: Instant, n: usize) -> usize {
        (0..n).filter(|_| buckets.admit(prefix, now)).count()
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut buckets = PrefixBuckets::new(RequestRateLimit::per_second(10).with_burst(3));
        let t0 = Instant::now();
        assert_eq!(admitted(&mut buckets, "data", t0, 5), 3);
        // One token every 100 ms.
        assert!(!buckets.admit("data", t0 + Duration::from_millis(99)));
        assert!(buckets.admit("data", t0 + Duration::from_millis(100)));
        assert!(!buckets.admit("data", t0 + Duration::from_millis(150)));
        // Refused requests take no token: the next one is due at 200 ms.
        assert!(buckets.admit("data", t0 + Duration::from_millis(200)));
        // Idle for long, the bucket holds no more than the burst.
        assert_eq!(
            admitted(&mut buckets, "data", t0 + Duration::from_secs(60), 10),
            3
        );
    }

    #[test]
    fn prefixes_have_buckets_of_their_own() {
        let mut buckets = PrefixBuckets::new(RequestRateLimit::per_second(1));
        let t0 = Instant::now();
        assert!(buckets.admit("a", t0));
        assert!(!buckets.admit("a", t0));
        assert!(buckets.admit("b", t0));
        assert!(buckets.admit("", t0));
    }

    #[test]
    fn a_late_decision_does_not_wind_the_clock_back() {
        let mut buckets = PrefixBuckets::new(RequestRateLimit::per_second(10).with_burst(1));
        let t0 = Instant::now();
        assert!(buckets.admit("a", t0 + Duration::from_millis(100)));
        // A request decided at an earlier instant neither refills nor
        // moves the bucket's clock back.
        assert!(!buckets.admit("a", t0));
        assert!(buckets.admit("a", t0 + Duration::from_millis(200)));
    }

    #[test]
    fn an_objects_prefix_is_its_folder() {
        assert_eq!(
            prefix_of("data/tpch/lineitem/part-0.parquet"),
            "data/tpch/lineitem"
        );
        assert_eq!(prefix_of("top.parquet"), "");
        assert_eq!(
            RequestRateLimit::s3(),
            RequestRateLimit {
                per_second: 5_500,
                burst: 5_500,
                answer: ThrottleAnswer::SlowDown,
            }
        );
    }

    #[test]
    #[should_panic(expected = "at least 1 request a second")]
    fn a_limit_admits_something() {
        let _ = RequestRateLimit::per_second(0);
    }
}
