//! What a prefetching scan reports: `EXPLAIN ANALYZE` metrics on the
//! `DataSourceExec`, and [`PrefetchStats`], a live view for tests and tools.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder, MetricValue, Time,
};

use crate::RequestPrice;
use crate::attempts::ScanAttempts;
use crate::config::dollars;
use crate::pacing::WindowState;
use crate::scheduler::{AutoSnapshot, CoreStats};

/// Live counters of one [`PrefetchingParquetSource`](crate::PrefetchingParquetSource),
/// summed over every execution of it.
///
/// `staged_bytes` and `live_tasks` are current values: after a query ends, is
/// cancelled or fails, both must be zero.
#[derive(Debug, Default)]
pub struct PrefetchStats {
    staged_bytes: AtomicU64,
    peak_staged_bytes: AtomicU64,
    bytes_fetched_ahead: AtomicU64,
    bytes_served_from_prefetch: AtomicU64,
    bytes_used: AtomicU64,
    bytes_wasted: AtomicU64,
    requests: AtomicU64,
    requests_hedged: AtomicU64,
    hedges_won: AtomicU64,
    requests_withdrawn: AtomicU64,
    attempts: AtomicU64,
    attempts_throttled: AtomicU64,
    request_cost_picodollars: AtomicU64,
    bytes_fetched: AtomicU64,
    requests_shared: AtomicU64,
    bytes_shared: AtomicU64,
    requests_kept: AtomicU64,
    bytes_kept: AtomicU64,
    live_tasks: AtomicU64,
    staged_over_held_violations: AtomicU64,
    bytes_copied: AtomicU64,
}

impl PrefetchStats {
    /// Bytes staged right now by running scans.
    pub fn staged_bytes(&self) -> u64 {
        self.staged_bytes.load(Ordering::SeqCst)
    }

    /// The most bytes any one scan had staged at once.
    pub fn peak_staged_bytes(&self) -> u64 {
        self.peak_staged_bytes.load(Ordering::SeqCst)
    }

    /// Bytes fetched ahead of the decoder.
    pub fn bytes_fetched_ahead(&self) -> u64 {
        self.bytes_fetched_ahead.load(Ordering::SeqCst)
    }

    /// Bytes the decoder took from staged buffers.
    pub fn bytes_served_from_prefetch(&self) -> u64 {
        self.bytes_served_from_prefetch.load(Ordering::SeqCst)
    }

    /// Bytes fetched that were handed to a decoder, each byte of each
    /// request once (a page several slices read counts once). Once the scan
    /// is over, `bytes_fetched() - bytes_wasted() == bytes_used()`.
    pub fn bytes_used(&self) -> u64 {
        self.bytes_used.load(Ordering::SeqCst)
    }

    /// Bytes fetched that no decoder was handed: read-ahead released
    /// untaken (pruned row groups and files, untaken slices, read-ahead
    /// given back to the governor, failed fetches) and the bytes between two
    /// ranges that one request reads, ahead or on demand.
    pub fn bytes_wasted(&self) -> u64 {
        self.bytes_wasted.load(Ordering::SeqCst)
    }

    /// Data requests issued, on demand and ahead, hedges included (reads
    /// served by another scan's request, [`Self::requests_shared`], or from
    /// an object kept at planning, [`Self::requests_kept`], are not).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// `auto`: data requests sent again beside one that had not answered
    /// after two median round trips (of each pair, only the first body to
    /// answer is read).
    pub fn requests_hedged(&self) -> u64 {
        self.requests_hedged.load(Ordering::SeqCst)
    }

    /// Hedges ([`Self::requests_hedged`]) whose answer was read: they
    /// answered first, or the request beside them failed. The other of
    /// each pair was dropped.
    pub fn hedges_won(&self) -> u64 {
        self.hedges_won.load(Ordering::SeqCst)
    }

    /// `auto`: data requests read ahead that were sent again because a cut
    /// of the store's window of requests in flight withdrew them before
    /// they answered (the store throttled). Each withdrawal is one more GET
    /// on the wire than [`Self::requests`] counts.
    pub fn requests_withdrawn(&self) -> u64 {
        self.requests_withdrawn.load(Ordering::SeqCst)
    }

    /// Attempts sent to the store for this source's reads, footers
    /// included: each request, each of its client's retries, and each
    /// hedge, answered or not. Counted only where the store reports its attempts —
    /// through [`AttemptCountingConnector`](crate::attempts) for
    /// object_store's HTTP stores, or a store that calls
    /// [`record_attempt`](crate::attempts::record_attempt) — and zero
    /// elsewhere. What a store that bills per request bills.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Of [`Self::attempts`], those the store throttled (`503 SlowDown`,
    /// `429`).
    pub fn attempts_throttled(&self) -> u64 {
        self.attempts_throttled.load(Ordering::SeqCst)
    }

    /// What [`Self::attempts`] cost, in dollars, at the
    /// `prefetch.price_per_1000_requests` of the sessions that ran the
    /// scans ([`RequestPrice`](crate::RequestPrice), S3 Standard's GETs by
    /// default): an estimate only in that the store's price is what it is
    /// told.
    pub fn request_cost(&self) -> f64 {
        dollars(self.request_cost_picodollars.load(Ordering::SeqCst))
    }

    /// One attempt sent, at `picodollars`.
    pub(crate) fn attempt_sent(&self, picodollars: u64) {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.request_cost_picodollars
            .fetch_add(picodollars, Ordering::SeqCst);
    }

    /// One attempt answered `503`.
    pub(crate) fn attempt_throttled(&self) {
        self.attempts_throttled.fetch_add(1, Ordering::SeqCst);
    }

    /// Bytes of the data requests issued, on demand and ahead, gaps between
    /// merged ranges included (footers excluded), and of the reads served
    /// by another scan's request ([`Self::bytes_shared`]) or cut from an
    /// object kept whole at planning ([`Self::bytes_kept`]). With DataFusion's
    /// own reader factory every request issued is one store GET; with a
    /// custom factory its demand reads count the bytes asked of it.
    pub fn bytes_fetched(&self) -> u64 {
        self.bytes_fetched.load(Ordering::SeqCst)
    }

    /// Requests of other scans of the same runtime this scan waited for
    /// instead of sending its own: they were reading the same bytes of the
    /// same object at the time (see [`Self::bytes_shared`]).
    pub fn requests_shared(&self) -> u64 {
        self.requests_shared.load(Ordering::SeqCst)
    }

    /// Bytes other scans' requests brought this scan
    /// ([`Self::requests_shared`]): a part of [`Self::bytes_fetched`] that
    /// its own requests did not fetch.
    pub fn bytes_shared(&self) -> u64 {
        self.bytes_shared.load(Ordering::SeqCst)
    }

    /// Data requests not sent because `auto`'s planning had read their
    /// object whole (a file no larger than `metadata_size_hint`, whose
    /// footer read is the whole file) and kept it for the scan: their
    /// ranges were cut from the kept body (see [`Self::bytes_kept`]).
    pub fn requests_kept(&self) -> u64 {
        self.requests_kept.load(Ordering::SeqCst)
    }

    /// Bytes of the requests [`Self::requests_kept`] counts: a part of
    /// [`Self::bytes_fetched`] that no request of the scan fetched.
    pub fn bytes_kept(&self) -> u64 {
        self.bytes_kept.load(Ordering::SeqCst)
    }

    /// Changes after which one of this source's scans had more bytes staged
    /// than it held under the governor (see
    /// [`PrefetchGovernor::staged_over_held_violations`](crate::PrefetchGovernor::staged_over_held_violations)):
    /// zero unless the bookkeeping is wrong.
    pub fn staged_over_held_violations(&self) -> u64 {
        self.staged_over_held_violations.load(Ordering::SeqCst)
    }

    /// Bytes copied out of demand-read bodies to be kept staged (retained
    /// pages, widened ranges), and out of other scans' bodies to make a
    /// read that shared a part of them, so that what is kept holds exactly
    /// its own bytes rather than the whole body it was a slice of.
    pub fn bytes_copied(&self) -> u64 {
        self.bytes_copied.load(Ordering::SeqCst)
    }

    /// Background tasks (footer reads and fetches) still running.
    pub fn live_tasks(&self) -> u64 {
        self.live_tasks.load(Ordering::SeqCst)
    }

    pub(crate) fn task_started(self: &Arc<Self>) -> TaskGuard {
        self.live_tasks.fetch_add(1, Ordering::SeqCst);
        TaskGuard(Arc::clone(self))
    }
}

/// Counts a background task as live until dropped (also when aborted).
pub(crate) struct TaskGuard(Arc<PrefetchStats>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.live_tasks.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The metrics of one scan execution, registered on the source's metrics set.
#[derive(Debug, Clone)]
pub(crate) struct ScanMetrics {
    requests: Count,
    bytes_fetched: Count,
    requests_shared: Count,
    bytes_shared: Count,
    requests_kept: Count,
    bytes_kept: Count,
    bytes_fetched_ahead: Count,
    bytes_served_from_prefetch: Count,
    bytes_used: Count,
    bytes_wasted: Count,
    failed_prefetches: Count,
    files_opened_ahead: Count,
    files_opened_at_start: Count,
    stalled_read_ahead: Count,
    files_page_granular: Count,
    files_row_group_granular: Count,
    bytes_page_granular: Count,
    bytes_row_group_granular: Count,
    slices: Count,
    oversized_pages: Count,
    governor_waits: Count,
    bytes_shed: Count,
    requests_merged: Count,
    peak_staged_bytes: Gauge,
    staged_over_held_violations: Count,
    /// The violations of this scan already counted.
    violations_seen: Arc<AtomicU64>,
    bytes_copied: Count,
    time_to_first_batch: Time,
    io_wait: Time,
    auto: Option<AutoMetrics>,
    attempts: ScanAttempts,
    stats: Arc<PrefetchStats>,
}

/// What `auto` measured and decided, as the latest values.
#[derive(Debug, Clone)]
struct AutoMetrics {
    rtt_micros: Gauge,
    bandwidth: Gauge,
    decode_rate: Gauge,
    lead_bytes: Gauge,
    remote: Gauge,
    requests_split: Count,
    requests_hedged: Count,
    hedges_won: Count,
    requests_withdrawn: Count,
    request_window: Gauge,
    request_window_cuts: Gauge,
}

fn global_time(metrics: &ExecutionPlanMetricsSet, name: &'static str) -> Time {
    let time = Time::new();
    MetricBuilder::new(metrics).build(MetricValue::Time {
        name: name.into(),
        time: time.clone(),
    });
    time
}

impl ScanMetrics {
    /// The metrics of one scan; `auto` adds what the policy measured and chose.
    pub(crate) fn new(
        metrics: &ExecutionPlanMetricsSet,
        stats: Arc<PrefetchStats>,
        auto: bool,
        price: RequestPrice,
    ) -> Self {
        let counter = |name: &'static str| MetricBuilder::new(metrics).global_counter(name);
        let gauge = |name: &'static str| MetricBuilder::new(metrics).global_gauge(name);
        let auto = auto.then(|| AutoMetrics {
            rtt_micros: gauge("prefetch_auto_rtt_us"),
            bandwidth: gauge("prefetch_auto_bandwidth_bytes_per_sec"),
            decode_rate: gauge("prefetch_auto_decode_bytes_per_sec"),
            lead_bytes: gauge("prefetch_auto_lead_bytes"),
            remote: gauge("prefetch_auto_remote"),
            requests_split: counter("prefetch_requests_split"),
            requests_hedged: counter("prefetch_requests_hedged"),
            hedges_won: counter("prefetch_hedges_won"),
            requests_withdrawn: counter("prefetch_requests_withdrawn"),
            request_window: gauge("prefetch_auto_request_window"),
            request_window_cuts: gauge("prefetch_auto_request_window_cuts"),
        });
        Self {
            requests: counter("prefetch_requests"),
            bytes_fetched: counter("prefetch_bytes_fetched"),
            requests_shared: counter("prefetch_requests_shared"),
            bytes_shared: counter("prefetch_bytes_shared"),
            requests_kept: counter("prefetch_requests_kept"),
            bytes_kept: counter("prefetch_bytes_kept"),
            bytes_fetched_ahead: counter("prefetch_bytes_fetched_ahead"),
            bytes_served_from_prefetch: counter("prefetch_bytes_served_from_prefetch"),
            bytes_used: counter("prefetch_bytes_used"),
            bytes_wasted: counter("prefetch_bytes_wasted"),
            failed_prefetches: counter("prefetch_failed_prefetches"),
            files_opened_ahead: counter("prefetch_files_opened_ahead"),
            files_opened_at_start: counter("prefetch_files_opened_at_start"),
            stalled_read_ahead: counter("prefetch_stalled_read_ahead"),
            files_page_granular: counter("prefetch_files_page_granular"),
            files_row_group_granular: counter("prefetch_files_row_group_granular"),
            bytes_page_granular: counter("prefetch_bytes_page_granular"),
            bytes_row_group_granular: counter("prefetch_bytes_row_group_granular"),
            slices: counter("prefetch_slices"),
            oversized_pages: counter("prefetch_oversized_pages"),
            governor_waits: counter("prefetch_governor_waits"),
            bytes_shed: counter("prefetch_bytes_shed"),
            requests_merged: counter("prefetch_requests_merged"),
            peak_staged_bytes: MetricBuilder::new(metrics)
                .global_gauge("prefetch_peak_staged_bytes"),
            staged_over_held_violations: counter("prefetch_staged_over_held_violations"),
            violations_seen: Arc::default(),
            bytes_copied: counter("prefetch_bytes_copied"),
            time_to_first_batch: global_time(metrics, "prefetch_time_to_first_batch"),
            io_wait: global_time(metrics, "prefetch_io_wait"),
            auto,
            attempts: ScanAttempts::new(metrics, Arc::clone(&stats), price),
            stats,
        }
    }

    /// Where the attempts of the scan's reads count: run each read (and
    /// each task that reads) in [`ScanAttempts::counting`].
    pub(crate) fn attempts(&self) -> &ScanAttempts {
        &self.attempts
    }

    pub(crate) fn stats(&self) -> &Arc<PrefetchStats> {
        &self.stats
    }

    /// One data request of `bytes` was issued (a GET, or a read of the
    /// wrapped reader).
    pub(crate) fn request(&self, bytes: u64) {
        self.requests.add(1);
        self.bytes_fetched.add(bytes as usize);
        self.stats.requests.fetch_add(1, Ordering::SeqCst);
        self.stats.bytes_fetched.fetch_add(bytes, Ordering::SeqCst);
    }

    /// A read the scheduler does not see (`auto` reading as stock on a
    /// local store) asked for `bytes`: handed to the decoder, or (it failed)
    /// wasted — so that `bytes_fetched - bytes_wasted == bytes_used` holds
    /// for these reads too.
    pub(crate) fn unplanned_read(&self, bytes: u64, handed: bool) {
        let (count, atomic) = match handed {
            true => (&self.bytes_used, &self.stats.bytes_used),
            false => (&self.bytes_wasted, &self.stats.bytes_wasted),
        };
        count.add(bytes as usize);
        atomic.fetch_add(bytes, Ordering::SeqCst);
    }

    /// A GET unanswered for too long was sent again beside itself (`auto`):
    /// one more request, none of whose bytes count (only the first body to
    /// answer is read).
    pub(crate) fn request_hedged(&self) {
        self.requests.add(1);
        self.stats.requests.fetch_add(1, Ordering::SeqCst);
        self.stats.requests_hedged.fetch_add(1, Ordering::SeqCst);
        if let Some(auto) = &self.auto {
            auto.requests_hedged.add(1);
        }
    }

    /// A hedge answered before the request it was sent beside (`auto`).
    pub(crate) fn hedge_won(&self) {
        self.stats.hedges_won.fetch_add(1, Ordering::SeqCst);
        if let Some(auto) = &self.auto {
            auto.hedges_won.add(1);
        }
    }

    /// A read ahead was withdrawn by cuts of its store's window `times`
    /// times before it answered, and sent again each time (`auto`).
    pub(crate) fn requests_withdrawn(&self, times: u64) {
        self.stats
            .requests_withdrawn
            .fetch_add(times, Ordering::SeqCst);
        if let Some(auto) = &self.auto {
            auto.requests_withdrawn.add(times as usize);
        }
    }

    /// `reads` requests of other scans were waited for instead of sending
    /// requests of our own, and brought `bytes`: fetched, not requested.
    pub(crate) fn reads_shared(&self, reads: u64, bytes: u64) {
        self.requests_shared.add(reads as usize);
        self.bytes_shared.add(bytes as usize);
        self.bytes_fetched.add(bytes as usize);
        self.stats
            .requests_shared
            .fetch_add(reads, Ordering::SeqCst);
        self.stats.bytes_shared.fetch_add(bytes, Ordering::SeqCst);
        self.stats.bytes_fetched.fetch_add(bytes, Ordering::SeqCst);
    }

    /// A request of `bytes` was not sent: its object was kept whole at
    /// planning, and its range cut from that body (fetched, not requested).
    pub(crate) fn read_kept(&self, bytes: u64) {
        self.requests_kept.add(1);
        self.bytes_kept.add(bytes as usize);
        self.bytes_fetched.add(bytes as usize);
        self.stats.requests_kept.fetch_add(1, Ordering::SeqCst);
        self.stats.bytes_kept.fetch_add(bytes, Ordering::SeqCst);
        self.stats.bytes_fetched.fetch_add(bytes, Ordering::SeqCst);
    }

    /// The governor has counted `violations` for this scan so far.
    pub(crate) fn staged_over_held(&self, violations: u64) {
        let before = self.violations_seen.fetch_max(violations, Ordering::SeqCst);
        if violations > before {
            let new = violations - before;
            self.staged_over_held_violations.add(new as usize);
            self.stats
                .staged_over_held_violations
                .fetch_add(new, Ordering::SeqCst);
        }
    }

    /// `bytes` were copied out of a demand read's bodies to be kept.
    pub(crate) fn copied(&self, bytes: u64) {
        self.bytes_copied.add(bytes as usize);
        self.stats.bytes_copied.fetch_add(bytes, Ordering::SeqCst);
    }

    /// A reader gave up waiting for a read-ahead and read the bytes itself.
    pub(crate) fn stalled_read_ahead(&self) {
        self.stalled_read_ahead.add(1);
    }

    pub(crate) fn io_wait(&self, waited: Duration) {
        self.io_wait.add_duration(waited);
    }

    pub(crate) fn first_batch(&self, after: Duration) {
        self.time_to_first_batch.add_duration(after);
    }

    /// Publish `auto`'s latest measurements and decisions. Gauges hold the
    /// last value; with several executions of one plan, the last to publish.
    pub(crate) fn publish_auto(&self, snapshot: &AutoSnapshot) {
        let Some(auto) = &self.auto else {
            return;
        };
        let whole = |v: f64| v.min(usize::MAX as f64) as usize;
        if let Some(rtt) = snapshot.rtt {
            auto.rtt_micros
                .set(usize::try_from(rtt.as_micros()).unwrap_or(usize::MAX));
        }
        if let Some(bandwidth) = snapshot.bandwidth {
            auto.bandwidth.set(whole(bandwidth));
        }
        if let Some(rate) = snapshot.decode_rate {
            auto.decode_rate.set(whole(rate));
        }
        auto.lead_bytes.set(whole(snapshot.lead_bytes as f64));
        auto.remote.set(usize::from(snapshot.remote));
    }

    /// Publish the state of the store's window of requests in flight (shared
    /// by the runtime's `auto` scans of the store), as the scan last saw it.
    pub(crate) fn publish_window(&self, window: &WindowState) {
        let Some(auto) = &self.auto else {
            return;
        };
        auto.request_window.set(window.limit as usize);
        auto.request_window_cuts
            .set(usize::try_from(window.cuts).unwrap_or(usize::MAX));
    }

    /// Publish the scheduler's counters, given what was published before.
    pub(crate) fn publish(&self, before: &CoreStats, now: &CoreStats) {
        let add = |count: &Count, atomic: &AtomicU64, old: u64, new: u64| {
            let delta = new.saturating_sub(old);
            if delta > 0 {
                count.add(delta as usize);
                atomic.fetch_add(delta, Ordering::SeqCst);
            }
        };
        add(
            &self.bytes_fetched_ahead,
            &self.stats.bytes_fetched_ahead,
            before.bytes_fetched_ahead,
            now.bytes_fetched_ahead,
        );
        add(
            &self.bytes_served_from_prefetch,
            &self.stats.bytes_served_from_prefetch,
            before.bytes_served_from_prefetch,
            now.bytes_served_from_prefetch,
        );
        add(
            &self.bytes_used,
            &self.stats.bytes_used,
            before.bytes_used,
            now.bytes_used,
        );
        add(
            &self.bytes_wasted,
            &self.stats.bytes_wasted,
            before.bytes_wasted,
            now.bytes_wasted,
        );
        let failed = now
            .failed_prefetches
            .saturating_sub(before.failed_prefetches);
        self.failed_prefetches.add(failed as usize);
        let counters = [
            (
                &self.files_opened_ahead,
                before.files_opened_ahead,
                now.files_opened_ahead,
            ),
            (
                &self.files_opened_at_start,
                before.files_opened_at_start,
                now.files_opened_at_start,
            ),
            (
                &self.files_page_granular,
                before.files_page_granular,
                now.files_page_granular,
            ),
            (
                &self.files_row_group_granular,
                before.files_row_group_granular,
                now.files_row_group_granular,
            ),
            (
                &self.bytes_page_granular,
                before.bytes_page_granular,
                now.bytes_page_granular,
            ),
            (
                &self.bytes_row_group_granular,
                before.bytes_row_group_granular,
                now.bytes_row_group_granular,
            ),
            (&self.slices, before.slices_planned, now.slices_planned),
            (
                &self.oversized_pages,
                before.oversized_pages,
                now.oversized_pages,
            ),
            (
                &self.governor_waits,
                before.governor_waits,
                now.governor_waits,
            ),
            (&self.bytes_shed, before.bytes_shed, now.bytes_shed),
            (
                &self.requests_merged,
                before.requests_merged,
                now.requests_merged,
            ),
        ];
        if let Some(auto) = &self.auto {
            auto.requests_split
                .add(now.requests_split.saturating_sub(before.requests_split) as usize);
        }
        for (count, old, new) in counters {
            let delta = new.saturating_sub(old);
            if delta > 0 {
                count.add(delta as usize);
            }
        }
        self.peak_staged_bytes
            .set_max(now.peak_staged_bytes as usize);
        self.stats
            .peak_staged_bytes
            .fetch_max(now.peak_staged_bytes, Ordering::SeqCst);
        // Staged bytes are a level, shared by concurrent scans of one source.
        if now.staged_bytes >= before.staged_bytes {
            self.stats
                .staged_bytes
                .fetch_add(now.staged_bytes - before.staged_bytes, Ordering::SeqCst);
        } else {
            self.stats
                .staged_bytes
                .fetch_sub(before.staged_bytes - now.staged_bytes, Ordering::SeqCst);
        }
    }
}
