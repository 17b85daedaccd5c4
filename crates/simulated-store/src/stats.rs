//! Request counters and the per-GET request log.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use object_store::GetRange;
use parking_lot::Mutex;
use tokio::time::Instant;

/// Where a logged GET is in its life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestState {
    /// Issued; waiting for a connection or for the first byte.
    Pending,
    /// The response arrived and its body is being consumed.
    Streaming,
    /// Every byte of the response body was handed to the caller.
    Completed,
    /// The caller dropped the request (or its body) before the last byte.
    Cancelled,
    /// The inner store returned an error, for the request or mid-body.
    Failed,
}

impl RequestState {
    /// Returns `true` once the request can no longer change state.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled | Self::Failed)
    }
}

/// One GET as seen by the [`SimulatedStore`](crate::SimulatedStore).
///
/// Timestamps are [`tokio::time::Instant`]s so that they follow tokio's
/// clock, which tests can pause and advance deterministically
/// (`#[tokio::test(start_paused = true)]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Issue order, starting at 0 for the store's first GET. Sequence numbers
    /// keep increasing across [`StoreStats::reset`].
    pub seq: u64,
    /// The object's path, as [`object_store::path::Path`] displays it.
    pub path: String,
    /// The range exactly as the caller asked for it (`None` = whole object).
    pub requested: Option<GetRange>,
    /// The absolute byte range of the request: the requested range when it
    /// was [`GetRange::Bounded`], otherwise the range the inner store
    /// resolved it to (`None` until the response arrives, and forever if the
    /// request fails).
    pub range: Option<Range<u64>>,
    /// When the GET was issued, before waiting for a connection.
    pub started_at: Instant,
    /// When the GET's first attempt obtained a connection (it then waits
    /// for its first byte, or for a `503` and a retry).
    pub connected_at: Option<Instant>,
    /// When the response (first byte) arrived, i.e. after the simulated
    /// first-byte delay and the inner store's answer.
    pub first_byte_at: Option<Instant>,
    /// When the request reached a finished [`state`](Self::state).
    pub finished_at: Option<Instant>,
    /// The first-byte delay drawn for this request.
    pub first_byte_latency: Duration,
    /// Body bytes handed to the caller so far.
    pub bytes_transferred: u64,
    /// Attempts answered `503 SlowDown` before this GET was admitted (or
    /// its client gave up): it was sent `throttled + 1` times if admitted,
    /// `throttled` times if not.
    pub throttled: u32,
    /// Life-cycle state.
    pub state: RequestState,
}

impl RequestRecord {
    /// Length of [`range`](Self::range), if known.
    pub fn range_len(&self) -> Option<u64> {
        self.range.as_ref().map(|r| r.end.saturating_sub(r.start))
    }

    /// Returns `true` if the whole body was delivered.
    pub fn is_completed(&self) -> bool {
        self.state == RequestState::Completed
    }

    /// Time spent waiting for a free connection, if one was obtained.
    pub fn queue_time(&self) -> Option<Duration> {
        self.connected_at
            .map(|c| c.saturating_duration_since(self.started_at))
    }
}

/// A point-in-time copy of the counters in [`StoreStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    /// See [`StoreStats::get_requests`].
    pub get_requests: u64,
    /// See [`StoreStats::bytes_requested`].
    pub bytes_requested: u64,
    /// See [`StoreStats::bytes_transferred`].
    pub bytes_transferred: u64,
    /// See [`StoreStats::head_requests`].
    pub head_requests: u64,
    /// See [`StoreStats::list_requests`].
    pub list_requests: u64,
    /// See [`StoreStats::in_flight_gets`].
    pub in_flight_gets: u64,
    /// See [`StoreStats::max_in_flight_gets`].
    pub max_in_flight_gets: u64,
    /// See [`StoreStats::throttled`].
    pub throttled: u64,
    /// See [`StoreStats::retries`].
    pub retries: u64,
}

impl StatsSnapshot {
    /// See [`StoreStats::attempts`].
    pub fn attempts(&self) -> u64 {
        self.get_requests + self.head_requests + self.list_requests + self.retries
    }
}

impl fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gets={} bytes_requested={} bytes_transferred={} heads={} lists={} \
             in_flight={} max_in_flight={} throttled={} retries={}",
            self.get_requests,
            self.bytes_requested,
            self.bytes_transferred,
            self.head_requests,
            self.list_requests,
            self.in_flight_gets,
            self.max_in_flight_gets,
            self.throttled,
            self.retries
        )
    }
}

/// Counters and request log of a [`SimulatedStore`](crate::SimulatedStore),
/// shared through an `Arc` so a test can keep reading it after handing the
/// store to DataFusion.
///
/// Counters are relaxed atomics: each is exact, but two counters read one
/// after the other are not a consistent snapshot while requests are running.
#[derive(Debug, Default)]
pub struct StoreStats {
    get_requests: AtomicU64,
    bytes_requested: AtomicU64,
    bytes_transferred: AtomicU64,
    head_requests: AtomicU64,
    list_requests: AtomicU64,
    in_flight_gets: AtomicU64,
    max_in_flight_gets: AtomicU64,
    throttled: AtomicU64,
    retries: AtomicU64,
    log: Mutex<RequestLog>,
}

#[derive(Debug, Default)]
struct RequestLog {
    /// Sequence number of `records[0]`; records before it were discarded by
    /// `reset`, and updates for them are ignored.
    first_seq: u64,
    next_seq: u64,
    records: Vec<RequestRecord>,
}

impl RequestLog {
    fn get_mut(&mut self, seq: u64) -> Option<&mut RequestRecord> {
        let index = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        self.records.get_mut(index)
    }
}

impl StoreStats {
    /// Creates empty statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of GETs issued (HEAD requests are not included).
    pub fn get_requests(&self) -> u64 {
        self.get_requests.load(Ordering::Relaxed)
    }

    /// Sum of the lengths of the requested byte ranges. Whole-object,
    /// offset and suffix requests are counted once the inner store has
    /// resolved them to a concrete range.
    pub fn bytes_requested(&self) -> u64 {
        self.bytes_requested.load(Ordering::Relaxed)
    }

    /// Body bytes actually handed to callers. Lower than
    /// [`bytes_requested`](Self::bytes_requested) when bodies are dropped
    /// early or a range extends past the end of the object.
    pub fn bytes_transferred(&self) -> u64 {
        self.bytes_transferred.load(Ordering::Relaxed)
    }

    /// Number of HEAD requests (`get_opts` with `head: true`, which is what
    /// `ObjectStoreExt::head` sends).
    pub fn head_requests(&self) -> u64 {
        self.head_requests.load(Ordering::Relaxed)
    }

    /// Number of LIST requests (`list`, `list_with_offset`,
    /// `list_with_delimiter`).
    pub fn list_requests(&self) -> u64 {
        self.list_requests.load(Ordering::Relaxed)
    }

    /// GETs currently holding a connection: from obtaining one until the
    /// body is fully consumed, dropped, or the request fails.
    pub fn in_flight_gets(&self) -> u64 {
        self.in_flight_gets.load(Ordering::Relaxed)
    }

    /// Highest [`in_flight_gets`](Self::in_flight_gets) observed since
    /// creation or the last [`reset`](Self::reset).
    pub fn max_in_flight_gets(&self) -> u64 {
        self.max_in_flight_gets.load(Ordering::Relaxed)
    }

    /// Requests (GET, HEAD or LIST page) answered `503 SlowDown` because
    /// their prefix was over the
    /// [`rate_limit`](crate::SimulatedStoreConfig::rate_limit).
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Requests sent again by the client after a `503`
    /// ([`RetryModel`](crate::RetryModel)), counted when sent. A throttled
    /// request whose client gave up, or that was dropped during its
    /// backoff, is in [`throttled`](Self::throttled) but not here.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Every request the store received, as S3 counts them: GETs, HEADs
    /// and LIST pages, each retry a request of its own. The counters above
    /// count a request once however often it was sent.
    pub fn attempts(&self) -> u64 {
        self.snapshot().attempts()
    }

    /// Copies all counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            get_requests: self.get_requests(),
            bytes_requested: self.bytes_requested(),
            bytes_transferred: self.bytes_transferred(),
            head_requests: self.head_requests(),
            list_requests: self.list_requests(),
            in_flight_gets: self.in_flight_gets(),
            max_in_flight_gets: self.max_in_flight_gets(),
            throttled: self.throttled(),
            retries: self.retries(),
        }
    }

    /// A copy of the GET log in issue order (ascending [`RequestRecord::seq`]).
    pub fn records(&self) -> Vec<RequestRecord> {
        self.log.lock().records.clone()
    }

    /// The logged GETs of one object, in issue order.
    ///
    /// `path` is compared with [`RequestRecord::path`]; both `&str` and
    /// `&object_store::path::Path` work.
    pub fn get_requests_for(&self, path: impl AsRef<str>) -> Vec<RequestRecord> {
        let path = path.as_ref();
        self.log
            .lock()
            .records
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Byte ranges of `path` that were covered by more than one logged GET,
    /// merged and sorted. Empty means every byte was fetched at most once.
    pub fn duplicate_ranges_for(&self, path: impl AsRef<str>) -> Vec<Range<u64>> {
        let mut ranges: Vec<Range<u64>> = self
            .get_requests_for(path)
            .into_iter()
            .filter_map(|r| r.range)
            .filter(|r| r.start < r.end)
            .collect();
        ranges.sort_by_key(|r| r.start);

        // Sweep in start order, tracking the furthest end seen so far: the
        // part of a range below that end has been fetched before.
        let mut duplicates: Vec<Range<u64>> = Vec::new();
        let mut covered_to = 0;
        for (i, r) in ranges.iter().enumerate() {
            if i > 0 && r.start < covered_to {
                let dup = r.start..r.end.min(covered_to);
                match duplicates.last_mut() {
                    Some(last) if last.end >= dup.start => last.end = last.end.max(dup.end),
                    _ => duplicates.push(dup),
                }
            }
            covered_to = covered_to.max(r.end);
        }
        duplicates
    }

    /// Clears the log and zeroes the counters, e.g. between benchmark
    /// iterations (the log otherwise grows by one record per GET).
    ///
    /// Requests still running keep their connection: the in-flight count is
    /// not zeroed (it will drain to zero as they finish) and the maximum
    /// restarts from it. Their records are gone and further updates to them
    /// are ignored; sequence numbers continue where they left off.
    pub fn reset(&self) {
        // Hold the log lock so a concurrently issued GET lands either wholly
        // before or wholly after the reset.
        let mut log = self.log.lock();
        log.first_seq = log.next_seq;
        log.records.clear();
        for counter in [
            &self.get_requests,
            &self.bytes_requested,
            &self.bytes_transferred,
            &self.head_requests,
            &self.list_requests,
            &self.throttled,
            &self.retries,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        self.max_in_flight_gets
            .store(self.in_flight_gets(), Ordering::Relaxed);
    }

    // ---- recording, used by the store -------------------------------------

    /// Logs a new GET and returns its sequence number.
    pub(crate) fn start_get(
        &self,
        path: String,
        requested: Option<GetRange>,
        first_byte_latency: Duration,
    ) -> u64 {
        let range = match &requested {
            Some(GetRange::Bounded(r)) => Some(r.clone()),
            _ => None,
        };
        let mut log = self.log.lock();
        self.get_requests.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = &range {
            self.bytes_requested
                .fetch_add(r.end.saturating_sub(r.start), Ordering::Relaxed);
        }
        let seq = log.next_seq;
        log.next_seq += 1;
        log.records.push(RequestRecord {
            seq,
            path,
            requested,
            range,
            started_at: Instant::now(),
            connected_at: None,
            first_byte_at: None,
            finished_at: None,
            first_byte_latency,
            bytes_transferred: 0,
            throttled: 0,
            state: RequestState::Pending,
        });
        seq
    }

    /// A GET's attempt obtained a connection; the record keeps the first.
    pub(crate) fn connected(&self, seq: u64) {
        let now = self.in_flight_gets.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight_gets.fetch_max(now, Ordering::Relaxed);
        if let Some(r) = self.log.lock().get_mut(seq) {
            r.connected_at.get_or_insert_with(Instant::now);
        }
    }

    /// A request was answered `503 SlowDown`; `get` names the GET's record.
    pub(crate) fn count_throttled(&self, get: Option<u64>) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
        if let Some(seq) = get
            && let Some(r) = self.log.lock().get_mut(seq)
        {
            r.throttled += 1;
        }
    }

    pub(crate) fn count_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn disconnected(&self) {
        self.in_flight_gets.fetch_sub(1, Ordering::Relaxed);
    }

    /// Records the response's arrival and the range it resolved to.
    pub(crate) fn first_byte(&self, seq: u64, resolved: Range<u64>) {
        let mut log = self.log.lock();
        let Some(r) = log.get_mut(seq) else { return };
        r.first_byte_at = Some(Instant::now());
        r.state = RequestState::Streaming;
        if r.range.is_none() {
            self.bytes_requested.fetch_add(
                resolved.end.saturating_sub(resolved.start),
                Ordering::Relaxed,
            );
            r.range = Some(resolved);
        }
    }

    pub(crate) fn add_transferred(&self, bytes: u64) {
        self.bytes_transferred.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn finish(&self, seq: u64, state: RequestState, bytes_transferred: u64) {
        if let Some(r) = self.log.lock().get_mut(seq) {
            r.state = state;
            r.finished_at = Some(Instant::now());
            r.bytes_transferred = bytes_transferred;
        }
    }

    pub(crate) fn count_head(&self) {
        self.head_requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_list(&self) {
        self.list_requests.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_range(stats: &StoreStats, path: &str, r: Range<u64>) {
        stats.start_get(path.to_string(), Some(r.into()), Duration::ZERO);
    }

    #[test]
    fn duplicate_ranges() {
        let stats = StoreStats::new();
        log_range(&stats, "a", 0..10);
        log_range(&stats, "a", 10..20);
        log_range(&stats, "b", 0..20);
        assert!(stats.duplicate_ranges_for("a").is_empty());

        log_range(&stats, "a", 5..12);
        log_range(&stats, "a", 30..40);
        log_range(&stats, "a", 35..50);
        log_range(&stats, "a", 36..38);
        assert_eq!(stats.duplicate_ranges_for("a"), vec![5..12, 35..40]);
    }

    #[test]
    fn reset_keeps_sequence_and_ignores_stale_updates() {
        let stats = StoreStats::new();
        log_range(&stats, "a", 0..10);
        stats.connected(0);
        stats.reset();
        assert_eq!(stats.get_requests(), 0);
        assert_eq!(stats.bytes_requested(), 0);
        assert_eq!(stats.in_flight_gets(), 1);
        assert_eq!(stats.max_in_flight_gets(), 1);
        assert!(stats.records().is_empty());

        // The request issued before the reset finishes afterwards.
        stats.finish(0, RequestState::Completed, 10);
        stats.disconnected();
        assert!(stats.records().is_empty());
        assert_eq!(stats.in_flight_gets(), 0);

        log_range(&stats, "a", 0..10);
        assert_eq!(stats.records()[0].seq, 1);
    }
}
