//! What the wire saw of a scan's requests: every attempt sent for it, the
//! client's retries and every hedge included, and the `503`s among them.
//!
//! A scan counts its requests as it sends them, but not what the store's
//! client makes of them: object_store's HTTP client retries a `503 SlowDown`
//! (or a dropped connection) inside one `get_opts` call, and S3 bills each
//! attempt. Only the layer that makes the attempts can count them, and it
//! cannot tell which scan an attempt is for, since one client serves every
//! scan of a store. So the scan says: each of its reads runs with its
//! counters in a tokio task-local, and the layer that makes attempts reports
//! each one with [`record_attempt`] (and each `503` with
//! [`record_throttled`]), which counts it for the scan whose read is
//! running, if any. `AttemptCountingConnector` (feature `http-attempts`)
//! is that layer for object_store's HTTP stores (S3, GCS, Azure, HTTP); a
//! store of one's own calls [`record_attempt`] itself.
//!
//! Attempts made outside a scan's reads (listing and reading footers while
//! a table is planned or registered) count for no scan.
//!
//! Under `auto`, a `503` reported while a paced request is being sent also
//! tells the store's window of requests in flight at once (planning's
//! footer reads included), rather than when the client's retry answers
//! late: see the configuration reference, *Requests in flight*.

#[cfg(feature = "http-attempts")]
mod connector;

use std::future::Future;
use std::sync::Arc;

use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};
use tokio::task::futures::TaskLocalFuture;

use crate::{PrefetchStats, RequestPrice};

#[cfg(feature = "http-attempts")]
pub use connector::{AttemptCountingConnector, AttemptTotals};

tokio::task_local! {
    /// The attempt counters of the scan whose read the current task runs.
    static SCAN: ScanAttempts;
}

/// Count one attempt sent to the store — a request, a client's retry of
/// one, a hedge — for the scan whose read is running in the current task.
/// Returns `false` when no scan's read is running (planning, or a query
/// that does not prefetch): the attempt counts for no scan.
///
/// Call it from the layer that makes attempts, as each one is sent (an
/// attempt dropped before its answer was sent all the same), and
/// [`record_throttled`] when one is answered `503` or `429`:
///
/// ```
/// use datafusion_prefetch::attempts::record_attempt;
///
/// // Outside a prefetching scan's read, nobody counts it.
/// assert!(!record_attempt());
/// ```
pub fn record_attempt() -> bool {
    // A retry `auto`'s window must not withdraw while it may be admitted.
    crate::pacing::attempt_now();
    SCAN.try_with(|scan| scan.record(false)).is_ok()
}

/// Count one attempt answered as throttling — `503` (S3's `SlowDown`,
/// Azure's `ServerBusy`) or `429` (GCS) — for the scan whose read is
/// running in the current task (see [`record_attempt`]).
pub fn record_throttled() -> bool {
    // `auto`'s window for the store hears of it at once, scan or not.
    crate::pacing::refused_now();
    SCAN.try_with(|scan| scan.record(true)).is_ok()
}

/// One scan's attempt counters: its `EXPLAIN ANALYZE` metrics and the
/// source's [`PrefetchStats`](crate::PrefetchStats).
#[derive(Debug, Clone)]
pub(crate) struct ScanAttempts {
    attempts: Count,
    throttled: Count,
    /// What the attempts cost at `price`, in nanodollars: a count, not a
    /// custom metric, so that Ballista's executors can report it.
    cost_nanodollars: Count,
    price: RequestPrice,
    stats: Arc<PrefetchStats>,
}

impl ScanAttempts {
    pub(crate) fn new(
        metrics: &ExecutionPlanMetricsSet,
        stats: Arc<PrefetchStats>,
        price: RequestPrice,
    ) -> Self {
        let counter = |name: &'static str| MetricBuilder::new(metrics).global_counter(name);
        Self {
            attempts: counter("prefetch_attempts"),
            throttled: counter("prefetch_attempts_throttled"),
            cost_nanodollars: counter("prefetch_request_cost_nanodollars"),
            price,
            stats,
        }
    }

    /// Run `read` (a read, or a task that reads) with its attempts
    /// counted for this scan.
    pub(crate) fn counting<F: Future>(&self, read: F) -> TaskLocalFuture<ScanAttempts, F> {
        SCAN.scope(self.clone(), read)
    }

    /// One attempt sent, or (`throttled`) one answered `503`.
    fn record(&self, throttled: bool) {
        if throttled {
            self.throttled.add(1);
            self.stats.attempt_throttled();
        } else {
            let price = self.price.picodollars_per_request();
            self.attempts.add(1);
            self.cost_nanodollars.add(nanodollars(price));
            self.stats.attempt_sent(price);
        }
    }
}

/// `picos` picodollars in whole nanodollars (a price finer than a
/// nanodollar per request, a millionth of S3's, rounds to the nearest).
fn nanodollars(picos: u64) -> usize {
    usize::try_from(picos.saturating_add(500) / 1_000).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn attempts_count_for_the_scan_whose_read_runs_them() {
        let metrics = ExecutionPlanMetricsSet::new();
        let stats = Arc::new(PrefetchStats::default());
        let price = RequestPrice::default();
        let scan = ScanAttempts::new(&metrics, Arc::clone(&stats), price);
        let other = ScanAttempts::new(&ExecutionPlanMetricsSet::new(), Arc::default(), price);

        assert!(!record_attempt());
        let counted = scan
            .counting(async {
                record_attempt();
                record_throttled();
                record_attempt();
                // A read of another scan inside this one counts for that one.
                other.counting(async { record_attempt() }).await;
                record_attempt()
            })
            .await;
        assert!(counted);
        assert_eq!(stats.attempts(), 3);
        assert_eq!(stats.attempts_throttled(), 1);
        assert_eq!(stats.request_cost(), price.cost_of(3));
        assert_eq!(scan.cost_nanodollars.value(), 1_200);
        assert_eq!(scan.attempts.value(), 3);
        assert_eq!(scan.throttled.value(), 1);
        assert_eq!(other.attempts.value(), 1);
        assert!(!record_throttled());
    }
}
