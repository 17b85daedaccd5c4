//! How object_store's HTTP client retries a `503`: the simulated store
//! answers for S3 *and* for the client's retries, since a wrapper at the
//! `ObjectStore` trait sits above the HTTP layer where those retries
//! happen. Pure: every decision takes the time it is made at.

use std::fmt;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use crate::ThrottleAnswer;

/// The retries a client makes of a request answered `503 SlowDown`:
/// object_store 0.13's `RetryConfig` and `BackoffConfig`, whose defaults
/// [`Default`] copies.
///
/// After a `503` the client gives up once it has retried
/// [`max_retries`](Self::max_retries) times or
/// [`retry_timeout`](Self::retry_timeout) has passed since the first
/// attempt; otherwise it waits and sends the request again. The waits are
/// exponential backoff with decorrelated jitter: the first is
/// [`init_backoff`](Self::init_backoff), each next one is drawn uniformly
/// from `init_backoff` up to [`base`](Self::base) times the one before,
/// and none is longer than [`max_backoff`](Self::max_backoff).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryModel {
    /// Retries after the first attempt (object_store: 10).
    pub max_retries: u32,
    /// No retry starts later than this after the first attempt
    /// (object_store: 3 minutes).
    pub retry_timeout: Duration,
    /// The first wait (object_store: 100 ms).
    pub init_backoff: Duration,
    /// The longest wait (object_store: 15 s).
    pub max_backoff: Duration,
    /// How much longer than the one before a wait can be (object_store: 2).
    pub base: u32,
}

impl Default for RetryModel {
    fn default() -> Self {
        Self {
            max_retries: 10,
            retry_timeout: Duration::from_secs(180),
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            base: 2,
        }
    }
}

/// The retries of one request.
#[derive(Debug)]
pub(crate) struct Retries {
    model: RetryModel,
    first_attempt: Instant,
    retries: u32,
    next_backoff: Duration,
    rng: StdRng,
}

impl Retries {
    /// A request first sent at `first_attempt`, drawing its jitter (and its
    /// retries' round trips) from `rng`.
    pub(crate) fn new(model: RetryModel, first_attempt: Instant, rng: StdRng) -> Self {
        Self {
            model,
            first_attempt,
            retries: 0,
            next_backoff: model.init_backoff,
            rng,
        }
    }

    /// After a `503` answered at `now`: how long to wait before the next
    /// attempt, or `None` if the client gives up.
    pub(crate) fn after_throttled(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.first_attempt);
        if self.retries >= self.model.max_retries || elapsed > self.model.retry_timeout {
            return None;
        }
        self.retries += 1;
        let wait = self.next_backoff;
        let init = self.model.init_backoff;
        let ceiling = wait.saturating_mul(self.model.base);
        let drawn = if ceiling > init {
            self.rng.random_range(init..ceiling)
        } else {
            init
        };
        self.next_backoff = drawn.min(self.model.max_backoff);
        Some(wait)
    }

    /// The retries sent so far.
    pub(crate) fn retries(&self) -> u32 {
        self.retries
    }

    /// The model the request's retries follow.
    pub(crate) fn model(&self) -> &RetryModel {
        &self.model
    }

    /// When the request was first sent.
    pub(crate) fn first_attempt(&self) -> Instant {
        self.first_attempt
    }

    /// The request's own RNG, for its retries' round trips.
    pub(crate) fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }
}

/// The error a request gets once its client gives up on `503 SlowDown`,
/// worded as object_store's HTTP client words it, with what the limit was.
#[derive(Debug)]
pub(crate) struct SlowDown {
    pub(crate) method: &'static str,
    pub(crate) target: String,
    pub(crate) elapsed: Duration,
    pub(crate) retries: u32,
    pub(crate) model: RetryModel,
    pub(crate) prefix: String,
    pub(crate) per_second: u32,
    pub(crate) answer: ThrottleAnswer,
}

impl fmt::Display for SlowDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Error performing {} {} in {:?}, after {} retries, max_retries: {}, \
             retry_timeout: {:?}  - Server returned non-2xx status code: \
             {} (simulated: prefix '{}' is over its {} requests/s)",
            self.method,
            self.target,
            self.elapsed,
            self.retries,
            self.model.max_retries,
            self.model.retry_timeout,
            self.answer.status_and_reason(),
            self.prefix,
            self.per_second
        )
    }
}

impl std::error::Error for SlowDown {}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_grow_with_decorrelated_jitter_up_to_the_cap() {
        let model = RetryModel {
            max_retries: 50,
            max_backoff: ms(1500),
            ..RetryModel::default()
        };
        let t0 = Instant::now();
        let mut retries = Retries::new(model, t0, StdRng::seed_from_u64(7));
        let waits: Vec<Duration> = (0..50)
            .map(|_| retries.after_throttled(t0).unwrap())
            .collect();
        assert_eq!(waits[0], ms(100));
        for pair in waits.windows(2) {
            assert!(pair[1] >= ms(100), "{waits:?}");
            assert!(pair[1] < pair[0] * 2 || pair[1] == ms(1500), "{waits:?}");
        }
        assert!(waits.iter().all(|w| *w <= ms(1500)));
        assert!(waits.contains(&ms(1500)), "the cap is reached: {waits:?}");
        assert_eq!(retries.retries(), 50);
    }

    #[test]
    fn the_client_gives_up_after_max_retries() {
        let model = RetryModel {
            max_retries: 2,
            ..RetryModel::default()
        };
        let t0 = Instant::now();
        let mut retries = Retries::new(model, t0, StdRng::seed_from_u64(1));
        assert!(retries.after_throttled(t0).is_some());
        assert!(retries.after_throttled(t0).is_some());
        assert_eq!(retries.after_throttled(t0), None);
        assert_eq!(retries.retries(), 2);
    }

    #[test]
    fn the_client_gives_up_after_the_retry_timeout() {
        let t0 = Instant::now();
        let mut retries = Retries::new(RetryModel::default(), t0, StdRng::seed_from_u64(1));
        assert!(
            retries
                .after_throttled(t0 + Duration::from_secs(180))
                .is_some()
        );
        assert_eq!(retries.after_throttled(t0 + ms(180_001)), None);
    }

    #[test]
    fn the_same_seed_draws_the_same_waits() {
        let t0 = Instant::now();
        let draw = |seed| {
            let mut retries = Retries::new(RetryModel::default(), t0, StdRng::seed_from_u64(seed));
            (0..10)
                .map(|_| retries.after_throttled(t0).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn gives_up_in_object_stores_words() {
        let error = SlowDown {
            method: "GET",
            target: "data/x.parquet".into(),
            elapsed: ms(1234),
            retries: 10,
            model: RetryModel::default(),
            prefix: "data".into(),
            per_second: 50,
            answer: ThrottleAnswer::SlowDown,
        };
        assert_eq!(
            error.to_string(),
            "Error performing GET data/x.parquet in 1.234s, after 10 retries, max_retries: 10, \
             retry_timeout: 180s  - Server returned non-2xx status code: 503 Service \
             Unavailable: SlowDown (simulated: prefix 'data' is over its 50 requests/s)"
        );
    }
}
