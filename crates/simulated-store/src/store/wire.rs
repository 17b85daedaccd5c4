//! What every request crosses before its answer: a connection from the
//! pool, a round trip, and — with a rate limit — S3's `503 SlowDown` and
//! the client's retries. The decisions are the pure [`PrefixBuckets`] and
//! [`Retries`]; this module only waits.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::retry::{Retries, SlowDown};
use crate::throttle::{PrefixBuckets, prefix_of};
use crate::{LatencyModel, RequestRateLimit, RetryModel, StoreStats, ThrottleAnswer};

/// The connection pool and the store's rate limit, shared by a store and
/// its listings.
pub(super) struct Wire {
    connections: Option<Arc<Semaphore>>,
    limit: Option<(RequestRateLimit, Mutex<PrefixBuckets>)>,
    retry: RetryModel,
    stats: Arc<StoreStats>,
    /// Told of each attempt as it is answered.
    observer: Option<AttemptObserver>,
}

/// Told of every attempt a [`SimulatedStore`](crate::SimulatedStore)
/// makes, in the task that made the request, as an HTTP client's hook
/// would be (e.g. to count the attempts of a prefetching scan's reads with
/// `datafusion_prefetch::attempts`).
pub type AttemptObserver = fn(Attempt);

/// What an [`AttemptObserver`] is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// An attempt was sent: a request, or a client's retry of one. Counted
    /// in [`StoreStats::attempts`](crate::StoreStats::attempts) at the same
    /// moment.
    Sent,
    /// An attempt was answered `503 SlowDown`.
    Throttled,
}

/// Where a request keeps the connection it holds: a GET's guard (which
/// counts it in flight), or a plain permit.
pub(super) trait ConnectionSlot {
    /// An attempt obtained `connection`.
    fn hold(&mut self, connection: Option<OwnedSemaphorePermit>);
    /// An attempt was answered `503`: its connection goes back to the pool.
    fn release(&mut self);
    /// The store's sequence number of the GET this is, if it is one.
    fn get_seq(&self) -> Option<u64> {
        None
    }
}

impl ConnectionSlot for Option<OwnedSemaphorePermit> {
    fn hold(&mut self, connection: Option<OwnedSemaphorePermit>) {
        *self = connection;
    }

    fn release(&mut self) {
        *self = None;
    }
}

/// One request on its way: what it is and its first round trip.
pub(super) struct Request<'a> {
    /// `GET`, `HEAD` or `LIST`, for the error a client that gives up sees.
    pub(super) method: &'static str,
    /// The key, or the listed prefix.
    pub(super) target: &'a str,
    /// The prefix the request counts against.
    pub(super) prefix: &'a str,
    /// The first attempt's round trip, drawn when the request was made.
    pub(super) delay: Duration,
    /// Where a retry's round trip is drawn from.
    pub(super) latency: LatencyModel,
    /// The request's retries, when the store has a rate limit.
    pub(super) retries: Option<Retries>,
}

impl<'a> Request<'a> {
    /// A request to the object `key`, which counts against its folder.
    pub(super) fn to_object(
        method: &'static str,
        key: &'a str,
        delay: Duration,
        latency: LatencyModel,
        retries: Option<Retries>,
    ) -> Self {
        Self {
            method,
            target: key,
            prefix: prefix_of(key),
            delay,
            latency,
            retries,
        }
    }
}

impl Wire {
    pub(super) fn new(
        connections: Option<usize>,
        limit: Option<RequestRateLimit>,
        retry: RetryModel,
        stats: Arc<StoreStats>,
    ) -> Self {
        Self {
            connections: connections.map(|n| Arc::new(Semaphore::new(n))),
            limit: limit.map(|limit| (limit, Mutex::new(PrefixBuckets::new(limit)))),
            retry,
            stats,
            observer: None,
        }
    }

    pub(super) fn observe_attempts(&mut self, observer: AttemptObserver) {
        self.observer = Some(observer);
    }

    /// A request's retries, seeded from `rng` now, so that their jitter
    /// follows call order; `None` without a rate limit (nothing is drawn).
    pub(super) fn retries(&self, rng: &mut StdRng) -> Option<Retries> {
        self.limit.as_ref()?;
        let own = StdRng::seed_from_u64(rng.next_u64());
        Some(Retries::new(self.retry, Instant::now(), own))
    }

    /// Sends `request` until it is admitted: each attempt takes a
    /// connection into `slot` and waits a round trip. A refused attempt's
    /// `503` gives the connection back, and the client waits its backoff
    /// before the next. Returns once the admitted attempt's round trip is
    /// over, its connection still in `slot`; fails as object_store does
    /// once the client gives up.
    pub(super) async fn round_trip(
        &self,
        slot: &mut impl ConnectionSlot,
        mut request: Request<'_>,
    ) -> object_store::Result<()> {
        let mut retry = false;
        loop {
            // A retry counts once it is made: a request dropped during its
            // backoff sends nothing more.
            if retry {
                self.stats.count_retry();
            }
            self.observe(Attempt::Sent);
            slot.hold(self.connection().await);
            let admitted = self.admits(request.prefix);
            sleep(request.delay).await;
            if admitted {
                return Ok(());
            }
            slot.release();
            self.stats.count_throttled(slot.get_seq());
            self.observe(Attempt::Throttled);
            let retries = request
                .retries
                .as_mut()
                .expect("a store that refuses requests has a rate limit, so retries");
            let Some(backoff) = retries.after_throttled(Instant::now()) else {
                return Err(self.gave_up(&request));
            };
            sleep(backoff).await;
            request.delay = request.latency.sample(retries.rng());
            retry = true;
        }
    }

    fn observe(&self, attempt: Attempt) {
        if let Some(observe) = self.observer {
            observe(attempt);
        }
    }

    /// The store's counters.
    pub(super) fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// Waits for a connection; `None` means the store has no cap.
    pub(super) async fn connection(&self) -> Option<OwnedSemaphorePermit> {
        let semaphore = self.connections.as_ref()?;
        let permit = Arc::clone(semaphore)
            .acquire_owned()
            .await
            .expect("the connection semaphore is never closed");
        Some(permit)
    }

    fn admits(&self, prefix: &str) -> bool {
        match &self.limit {
            Some((_, buckets)) => buckets.lock().admit(prefix, Instant::now()),
            None => true,
        }
    }

    fn gave_up(&self, request: &Request<'_>) -> object_store::Error {
        let retries = request
            .retries
            .as_ref()
            .expect("only a throttled request gives up");
        let (per_second, answer) = self
            .limit
            .as_ref()
            .map_or((0, ThrottleAnswer::SlowDown), |(limit, _)| {
                (limit.per_second, limit.answer)
            });
        object_store::Error::Generic {
            store: "SimulatedStore",
            source: Box::new(SlowDown {
                method: request.method,
                target: request.target.to_owned(),
                elapsed: retries.first_attempt().elapsed(),
                retries: retries.retries(),
                model: *retries.model(),
                prefix: request.prefix.to_owned(),
                per_second,
                answer,
            }),
        }
    }
}

pub(super) async fn sleep(duration: Duration) {
    // Skipping zero sleeps keeps the no-latency configuration free of timer
    // registrations (and of an extra yield to the scheduler).
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}
