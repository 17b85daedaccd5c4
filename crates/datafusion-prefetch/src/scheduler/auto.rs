//! `auto`: what a scan has measured of its store and its decoders, and the
//! read-ahead it chooses from that.
//!
//! [`AutoTuner`] is fed timings by the driver — how long each request took for
//! how many bytes, how long a decoder spent between two reads — and answers
//! with decisions: whether the store is remote at all, how many bytes one
//! stream keeps fetched ahead, which gaps between ranges are worth reading
//! through and when one large range is better split into parallel requests.
//! Like the rest of the core it never looks at a clock: every duration comes
//! in as an argument, so tests drive it with synthetic timings.
//!
//! The model is the usual one for object stores: a request of `n` bytes takes
//! `rtt + n / bandwidth`, where `bandwidth` is what one connection sustains
//! and requests on separate connections run in parallel.

use std::collections::VecDeque;
use std::time::Duration;

/// How many recent samples each estimate looks at: enough to ride out one
/// slow request, few enough to follow a store whose latency changes.
const SAMPLES: usize = 16;

/// Below this round trip the store is local (a file system, memory, a store
/// on the same host): nothing is worth fetching ahead, so `auto` behaves
/// exactly like `off`. Object stores answer in 10 ms or more.
pub const LOCAL_RTT: Duration = Duration::from_millis(5);

/// Round trip assumed before anything is measured: a typical object store.
pub const DEFAULT_RTT: Duration = Duration::from_millis(30);

/// Per-connection bandwidth assumed before anything is measured (bytes/s):
/// roughly one S3 GET from a machine in the same region.
pub const DEFAULT_BANDWIDTH: f64 = 100.0 * 1024.0 * 1024.0;

/// Requests at least this large tell the bandwidth apart from the round trip.
const BANDWIDTH_SAMPLE_BYTES: u64 = 1 << 20;

/// Requests at most this large are dominated by their round trip.
const LATENCY_SAMPLE_BYTES: u64 = 64 << 10;

/// The largest gap ever read through to merge two ranges (object_store's own
/// coalescing distance).
pub const MAX_MERGE_GAP: u64 = 1 << 20;

/// Split requests aim for pieces in this range: large enough that the round
/// trip stays a small part of each, small enough that one connection's
/// bandwidth is not the limit.
pub const SPLIT_BYTES: std::ops::RangeInclusive<u64> = (8 << 20)..=(16 << 20);

/// The lead is this many times what the decoder consumes while one request is
/// on the wire, so a slow request now and then does not starve it.
const LEAD_SAFETY: f64 = 2.0;

/// The lead covers a round trip this far up the recent ones: a lead sized by
/// the median leaves the decoder waiting on every request slower than it —
/// one in two — and on S3 one in ten takes over three times the median.
const LEAD_RTT_QUANTILE: f64 = 0.9;

/// A GET still unanswered after this many median round trips is sent again
/// beside itself (hedged): on S3 about one in four waits that long, and a
/// second request is likely to take a path that is not slow.
const HEDGE_AFTER_RTTS: f64 = 2.0;

/// The least time a GET waits before it is hedged: on a store of a few
/// milliseconds, a request a few milliseconds late is waiting for this
/// machine (its runtime, its connections), not for a slow path, and a second
/// request would only add to the load.
const MIN_HEDGE_AFTER: Duration = Duration::from_millis(50);

/// One timed request.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RequestSample {
    /// Bytes of the largest single range the request carried.
    bytes: u64,
    seconds: f64,
    /// Seconds to the first byte, when the request was timed that closely.
    first_byte: Option<f64>,
}

/// What `auto` has measured so far and what it decided from it; shown in
/// `EXPLAIN ANALYZE`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AutoSnapshot {
    /// Estimated round trip (time to first byte), once measured.
    pub rtt: Option<Duration>,
    /// Estimated bytes/s of one connection, once measured.
    pub bandwidth: Option<f64>,
    /// Estimated bytes/s a decoder consumes when it is not waiting for I/O.
    pub decode_rate: Option<f64>,
    /// Bytes one stream keeps fetched ahead (within what it may stage).
    pub lead_bytes: u64,
    /// Whether the store is remote enough to read ahead at all.
    pub remote: bool,
}

/// `auto`'s measurements and decisions for one scan.
#[derive(Debug, Clone, Default)]
pub struct AutoTuner {
    requests: VecDeque<RequestSample>,
    /// Bytes/s of each recent decoder busy period.
    decode_rates: VecDeque<f64>,
}

fn push<T>(samples: &mut VecDeque<T>, sample: T) {
    if samples.len() == SAMPLES {
        samples.pop_front();
    }
    samples.push_back(sample);
}

/// The value `fraction` of the way up the sorted `values`.
fn quantile(mut values: Vec<f64>, fraction: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let index = ((values.len() - 1) as f64 * fraction).round() as usize;
    Some(values[index])
}

fn median(values: Vec<f64>) -> Option<f64> {
    quantile(values, 0.5)
}

impl AutoTuner {
    /// A request whose largest range was `bytes` long took `took` from being
    /// issued to its last byte. Footer reads and demand reads count too: they
    /// are all round trips to the same store.
    pub fn observe_request(&mut self, bytes: u64, took: Duration) {
        push(
            &mut self.requests,
            RequestSample {
                bytes,
                seconds: took.as_secs_f64(),
                first_byte: None,
            },
        );
    }

    /// A GET of `bytes` answered its first byte after `first_byte` and its
    /// last after `took`: a round trip and a transfer, told apart.
    pub fn observe_transfer(&mut self, bytes: u64, first_byte: Duration, took: Duration) {
        push(
            &mut self.requests,
            RequestSample {
                bytes,
                seconds: took.as_secs_f64(),
                first_byte: Some(first_byte.as_secs_f64().min(took.as_secs_f64())),
            },
        );
    }

    /// A request answered its first byte after `first_byte`, its transfer not
    /// timed (a caller handed the body on unread): a round trip, and nothing
    /// about the bandwidth.
    pub fn observe_first_byte(&mut self, first_byte: Duration) {
        let seconds = first_byte.as_secs_f64();
        push(
            &mut self.requests,
            RequestSample {
                bytes: 0,
                seconds,
                first_byte: Some(seconds),
            },
        );
    }

    /// A decoder spent `busy` — decoding, and waiting for its consumer to pull
    /// — on `bytes` it had been handed, before asking for more.
    pub fn observe_decode(&mut self, bytes: u64, busy: Duration) {
        if bytes == 0 {
            return;
        }
        // A microsecond floor keeps an instant hand-back finite.
        let seconds = busy.as_secs_f64().max(1e-6);
        push(&mut self.decode_rates, bytes as f64 / seconds);
    }

    /// Whether any request has been timed yet.
    pub fn has_measured(&self) -> bool {
        !self.requests.is_empty()
    }

    /// The least time any recent request took that was dominated by its round
    /// trip (at most [`LATENCY_SAMPLE_BYTES`]): a floor for the round trip
    /// that needs no bandwidth estimate.
    fn latency_floor(&self) -> Option<f64> {
        self.requests
            .iter()
            .filter(|s| s.bytes <= LATENCY_SAMPLE_BYTES)
            .map(|s| s.seconds)
            .min_by(f64::total_cmp)
    }

    /// Estimated per-connection bandwidth (bytes/s), from requests large
    /// enough for their transfer time to show: bytes over the time after the
    /// first byte where that was timed, else over the time beyond the
    /// quickest small request. `None` without such a measurement.
    pub fn bandwidth(&self) -> Option<f64> {
        let floor = self.latency_floor();
        median(
            self.requests
                .iter()
                .filter(|s| s.bytes >= BANDWIDTH_SAMPLE_BYTES)
                .filter_map(|s| {
                    let transfer = s.seconds - s.first_byte.or(floor)?;
                    Some(s.bytes as f64 / transfer.max(1e-6))
                })
                .collect(),
        )
    }

    /// Estimated round trip: the median over recent requests of their time to
    /// the first byte (where timed; otherwise their time less their transfer
    /// at the estimated bandwidth), so one slow request moves it little and a
    /// store that slows down for good moves it within a few.
    pub fn rtt(&self) -> Option<Duration> {
        let rtt = median(self.latencies())?;
        Some(Duration::from_secs_f64(rtt))
    }

    /// A slow round trip of this store: [`LEAD_RTT_QUANTILE`] of the way up
    /// the recent ones, so one outlier among them moves it little.
    pub fn slow_rtt(&self) -> Option<Duration> {
        let rtt = quantile(self.latencies(), LEAD_RTT_QUANTILE)?;
        Some(Duration::from_secs_f64(rtt))
    }

    /// Each recent request's time to the first byte (measured, or its time
    /// less its transfer at the estimated bandwidth).
    fn latencies(&self) -> Vec<f64> {
        let bandwidth = self.bandwidth_or_default();
        self.requests
            .iter()
            .map(|s| {
                s.first_byte
                    .unwrap_or_else(|| (s.seconds - s.bytes as f64 / bandwidth).max(0.0))
            })
            .collect()
    }

    /// Estimated bytes/s one decoder consumes when it is not waiting for I/O:
    /// the upper quartile of recent busy periods, so the pauses of a consumer
    /// that pulls in phases (a join's probe side waiting for its build side)
    /// do not starve the phases it pulls in, while a consumer that stops
    /// pulling for good brings it down within a few reads.
    pub fn decode_rate(&self) -> Option<f64> {
        quantile(self.decode_rates.iter().copied().collect(), 0.75)
    }

    /// Whether the store answers slowly enough for read-ahead to pay: even
    /// its quickest recent answer (to the first byte where timed so, else to
    /// the last) took [`LOCAL_RTT`] or more. A local disk answers some
    /// requests quickly even when others queue behind a busy machine; a
    /// remote store never does. Until a request has been timed the store is
    /// assumed remote.
    pub fn remote(&self) -> bool {
        self.requests
            .iter()
            .map(|s| s.first_byte.unwrap_or(s.seconds))
            .min_by(f64::total_cmp)
            .is_none_or(|quickest| quickest >= LOCAL_RTT.as_secs_f64())
    }

    fn rtt_or_default(&self) -> f64 {
        self.rtt().unwrap_or(DEFAULT_RTT).as_secs_f64()
    }

    fn bandwidth_or_default(&self) -> f64 {
        self.bandwidth().unwrap_or(DEFAULT_BANDWIDTH)
    }

    /// Bytes one stream should keep fetched ahead of its decoder: what the
    /// decoder consumes while a slow request is answered (a slow round trip
    /// for the request, see [`Self::slow_rtt`], a typical one for an
    /// upcoming file's footer, and a split-sized transfer), with a safety
    /// margin. Zero on a local store.
    ///
    /// `None` until a decoder has been timed: a scan's first wave goes as far
    /// as its budget allows (a guess at the decoder's pace would hold back
    /// the files it cannot yet know it needs by a whole round trip), and the
    /// decoder's measured pace then bounds the lead from there on.
    pub fn lead_bytes(&self) -> Option<u64> {
        if !self.remote() {
            return Some(0);
        }
        let rate = self.decode_rate()?;
        let rtt = self.rtt_or_default();
        let slow_rtt = self.slow_rtt().map_or(rtt, |slow| slow.as_secs_f64());
        let transfer = *SPLIT_BYTES.start() as f64 / self.bandwidth_or_default();
        let lead = rate * (slow_rtt + rtt + transfer) * LEAD_SAFETY;
        Some(lead.min(u64::MAX as f64) as u64)
    }

    /// How long a GET may wait for its first byte before an identical one is
    /// sent beside it (the first to answer is read, the other dropped):
    /// [`HEDGE_AFTER_RTTS`] median round trips and at least
    /// [`MIN_HEDGE_AFTER`], once a round trip has been measured on a remote
    /// store; `None` otherwise. A store that answers every request in about
    /// the same time never sees a hedge.
    pub fn hedge_after(&self) -> Option<Duration> {
        if !self.remote() {
            return None;
        }
        let rtt = self.rtt()?;
        Some(rtt.mul_f64(HEDGE_AFTER_RTTS).max(MIN_HEDGE_AFTER))
    }

    /// The largest gap between two ranges worth reading through to make them
    /// one request: one whose transfer costs at most a quarter of a round
    /// trip, and never more than [`MAX_MERGE_GAP`]. Zero on a local store.
    pub fn merge_gap(&self) -> u64 {
        if !self.remote() {
            return 0;
        }
        let gap = self.bandwidth_or_default() * self.rtt_or_default() / 4.0;
        (gap as u64).min(MAX_MERGE_GAP)
    }

    /// The piece size a request of `len` bytes is split into, if one
    /// connection's bandwidth is its limit (its transfer takes longer than a
    /// round trip): about two round trips' worth of transfer, within
    /// [`SPLIT_BYTES`]. `None`: send it whole.
    pub fn split_bytes(&self, len: u64) -> Option<u64> {
        let bandwidth = self.bandwidth_or_default();
        let rtt = self.rtt_or_default();
        let piece =
            ((bandwidth * rtt * 2.0) as u64).clamp(*SPLIT_BYTES.start(), *SPLIT_BYTES.end());
        (len as f64 / bandwidth > rtt && len > piece).then_some(piece)
    }

    /// Take `measured`'s store measurements when this tuner has timed no
    /// request yet: another scan of the store (of the same session) measured
    /// it after this one was created.
    pub fn adopt_store_measurements(&mut self, measured: &AutoTuner) {
        if self.requests.is_empty() {
            self.requests = measured.requests.clone();
        }
    }

    /// A tuner that knows what this one measured of the store, but nothing
    /// of the decoders (another query decodes at another pace).
    pub fn store_measurements(&self) -> AutoTuner {
        AutoTuner {
            requests: self.requests.clone(),
            decode_rates: VecDeque::new(),
        }
    }

    /// The measurements and decisions, for metrics.
    pub fn snapshot(&self) -> AutoSnapshot {
        AutoSnapshot {
            rtt: self.rtt(),
            bandwidth: self.bandwidth(),
            decode_rate: self.decode_rate(),
            lead_bytes: self.lead_bytes().unwrap_or(0),
            remote: self.remote(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A store answering each request in `rtt + bytes / bandwidth`.
    fn feed_store(tuner: &mut AutoTuner, rtt: Duration, bandwidth: f64, sizes: &[u64]) {
        for &bytes in sizes {
            let took = rtt + Duration::from_secs_f64(bytes as f64 / bandwidth);
            tuner.observe_request(bytes, took);
        }
    }

    /// A decoder consuming `rate` bytes/s, handed `bytes` at a time.
    fn feed_decoder(tuner: &mut AutoTuner, rate: f64, bytes: u64, times: usize) {
        for _ in 0..times {
            tuner.observe_decode(bytes, Duration::from_secs_f64(bytes as f64 / rate));
        }
    }

    const MIXED: [u64; 6] = [4096, 8 * MIB, 512 << 10, 16 * MIB, 2 * MIB, 4096];

    #[test]
    fn before_measuring_the_store_is_assumed_remote_and_typical() {
        let tuner = AutoTuner::default();
        assert!(tuner.remote());
        // No decoder timed: no lead of its own (the scan reads ahead as far
        // as its budget allows).
        assert_eq!(tuner.lead_bytes(), None);
        assert_eq!(tuner.rtt(), None);
        // Defaults: 30 ms x 100 MiB/s / 4.
        assert_eq!(tuner.merge_gap(), 786_432);
    }

    #[test]
    fn fast_store_reads_like_off() {
        let mut tuner = AutoTuner::default();
        feed_store(&mut tuner, Duration::from_micros(200), 2e9, &MIXED);
        feed_decoder(&mut tuner, 500e6, 8 * MIB, 4);
        assert!(!tuner.remote());
        assert_eq!(tuner.lead_bytes(), Some(0));
        assert_eq!(tuner.merge_gap(), 0);
    }

    #[test]
    fn slow_store_is_measured_within_a_few_requests() {
        let mut tuner = AutoTuner::default();
        let bandwidth = 100.0 * MIB as f64;
        feed_store(&mut tuner, ms(50), bandwidth, &MIXED);
        let rtt = tuner.rtt().unwrap().as_secs_f64();
        assert!((rtt - 0.050).abs() < 0.002, "rtt {rtt}");
        let measured = tuner.bandwidth().unwrap();
        assert!(
            (measured / bandwidth - 1.0).abs() < 0.05,
            "bandwidth {measured}"
        );
        assert!(tuner.remote());
        // Gap: 50 ms x 100 MiB/s / 4 = 1.25 MiB, capped at 1 MiB.
        assert_eq!(tuner.merge_gap(), MAX_MERGE_GAP);
        // 64 MiB takes 640 ms on one connection: split into ~10 MiB pieces.
        let piece = tuner.split_bytes(64 * MIB).unwrap();
        assert!(SPLIT_BYTES.contains(&piece), "{piece}");
        // 2 MiB takes 20 ms, under a round trip: sent whole.
        assert_eq!(tuner.split_bytes(2 * MIB), None);
    }

    #[test]
    fn first_byte_timing_tells_a_round_trip_from_a_transfer() {
        // A local disk under load: 8 MiB reads take 6 ms, their first byte
        // 300 us. A remote store: first byte after 40 ms, 100 MiB/s.
        let mut local = AutoTuner::default();
        let mut remote = AutoTuner::default();
        for _ in 0..4 {
            local.observe_transfer(8 * MIB, Duration::from_micros(300), ms(6));
            remote.observe_transfer(8 * MIB, ms(40), ms(120));
        }
        assert!(!local.remote());
        assert!(remote.remote());
        assert_eq!(remote.rtt(), Some(ms(40)));
        assert_eq!(remote.bandwidth().unwrap() as u64, 100 * MIB);
    }

    #[test]
    fn reads_timed_whole_decide_by_their_quickest() {
        // Demand reads through DataFusion's reader are timed whole. A disk
        // reading 8 MiB in 3 ms is local; a store answering after 40 ms and
        // sending 200 MiB/s (faster than the assumed 100 MiB/s, so the
        // transfer estimate swallows the round trip) stays remote.
        let mut disk = AutoTuner::default();
        let mut store = AutoTuner::default();
        for _ in 0..4 {
            disk.observe_request(8 * MIB, ms(3));
            store.observe_request(8 * MIB, ms(80));
        }
        assert!(!disk.remote());
        assert!(store.remote());
    }

    #[test]
    fn a_local_disk_queueing_under_load_stays_local() {
        // Most reads wait 20 ms for a busy machine's blocking threads; some
        // are answered at once. A remote store answers none that fast.
        let mut tuner = AutoTuner::default();
        for i in 0..SAMPLES {
            let took = if i % 4 == 0 {
                Duration::from_micros(400)
            } else {
                ms(20)
            };
            tuner.observe_request(4096, took);
        }
        assert!(!tuner.remote());
    }

    #[test]
    fn unlimited_bandwidth_never_splits() {
        let mut tuner = AutoTuner::default();
        feed_store(&mut tuner, ms(100), 1e15, &MIXED);
        assert_eq!(tuner.split_bytes(256 * MIB), None);
        assert_eq!(tuner.merge_gap(), MAX_MERGE_GAP);
    }

    #[test]
    fn lead_follows_the_decoder() {
        let mut fast = AutoTuner::default();
        feed_store(&mut fast, ms(50), 100.0 * MIB as f64, &MIXED);
        let mut slow = fast.clone();
        feed_decoder(&mut fast, 400.0 * MIB as f64, 8 * MIB, 8);
        feed_decoder(&mut slow, 10.0 * MIB as f64, 8 * MIB, 8);
        let (fast_lead, slow_lead) = (fast.lead_bytes().unwrap(), slow.lead_bytes().unwrap());
        // 400 MiB/s x (2 x 50 ms + 8 MiB / 100 MiB/s) x 2 = 144 MiB.
        assert!((143..=144).contains(&(fast_lead / MIB)), "{fast_lead}");
        // A decoder 40x slower needs 40x less ahead.
        assert_eq!(fast_lead / slow_lead, 40);
    }

    #[test]
    fn lead_covers_the_stores_slow_requests() {
        // Two stores with a 30 ms median round trip; on one, one request in
        // four takes 150 ms (S3's tail: P90 over three times its median).
        let mut steady = AutoTuner::default();
        let mut tailed = AutoTuner::default();
        for i in 0..SAMPLES {
            steady.observe_transfer(4096, ms(30), ms(30));
            let first_byte = if i % 4 == 0 { ms(150) } else { ms(30) };
            tailed.observe_transfer(4096, first_byte, first_byte);
        }
        for tuner in [&mut steady, &mut tailed] {
            feed_decoder(tuner, 100.0 * MIB as f64, 8 * MIB, 4);
        }
        assert_eq!(steady.rtt(), tailed.rtt());
        assert_eq!(tailed.slow_rtt(), Some(ms(150)));
        // Lead time 150 + 30 + 80 ms against 30 + 30 + 80 ms.
        let transfer = 8.0 / 100.0;
        let expected = (0.150 + 0.030 + transfer) / (0.030 + 0.030 + transfer);
        let ratio = tailed.lead_bytes().unwrap() as f64 / steady.lead_bytes().unwrap() as f64;
        assert!((ratio - expected).abs() < 0.01, "{ratio} vs {expected}");
    }

    #[test]
    fn a_request_waits_two_median_round_trips_before_it_is_hedged() {
        let mut tuner = AutoTuner::default();
        assert_eq!(tuner.hedge_after(), None, "nothing measured");
        for _ in 0..10 {
            tuner.observe_transfer(4096, ms(30), ms(31));
        }
        // One slow answer moves the median, and so the hedge, not at all.
        tuner.observe_transfer(4096, ms(900), ms(901));
        assert_eq!(tuner.hedge_after(), Some(ms(60)));
        let mut local = AutoTuner::default();
        feed_store(&mut local, Duration::from_micros(300), 2e9, &[4096; 10]);
        assert_eq!(local.hedge_after(), None, "a local store is never hedged");
        let mut quick = AutoTuner::default();
        for _ in 0..10 {
            quick.observe_transfer(4096, ms(8), ms(9));
        }
        assert_eq!(quick.hedge_after(), Some(MIN_HEDGE_AFTER));
    }

    #[test]
    fn stalled_consumer_shrinks_the_lead() {
        let mut tuner = AutoTuner::default();
        feed_store(&mut tuner, ms(50), 100.0 * MIB as f64, &MIXED);
        feed_decoder(&mut tuner, 200.0 * MIB as f64, 8 * MIB, 8);
        let pulling = tuner.lead_bytes().unwrap();
        // One long pause (a join's probe side waiting for its build side)
        // moves nothing.
        tuner.observe_decode(8 * MIB, Duration::from_secs(10));
        assert_eq!(tuner.lead_bytes(), Some(pulling));
        // The consumer stops pulling: each 8 MiB now takes 10 s to be taken.
        for _ in 0..SAMPLES {
            tuner.observe_decode(8 * MIB, Duration::from_secs(10));
        }
        let stalled = tuner.lead_bytes().unwrap();
        assert!(stalled * 100 < pulling, "{stalled} vs {pulling}");
        assert!(stalled < MIB, "{stalled}");
    }

    #[test]
    fn one_latency_spike_moves_nothing_a_lasting_change_does() {
        let mut tuner = AutoTuner::default();
        let bandwidth = 100.0 * MIB as f64;
        feed_store(&mut tuner, ms(30), bandwidth, &[4096; 10]);
        feed_decoder(&mut tuner, 200.0 * MIB as f64, 8 * MIB, 4);
        let before = (tuner.rtt(), tuner.lead_bytes());
        tuner.observe_request(4096, Duration::from_secs(3));
        assert_eq!((tuner.rtt(), tuner.lead_bytes()), before);
        // The store slows down for good: the estimate follows within a window.
        feed_store(&mut tuner, ms(120), bandwidth, &[4096; SAMPLES / 2 + 1]);
        let rtt = tuner.rtt().unwrap();
        assert!(rtt >= ms(120), "{rtt:?}");
        // Lead time 2 x 120 ms + 80 ms instead of 2 x 30 ms + 80 ms.
        let ratio = tuner.lead_bytes().unwrap() as f64 / before.1.unwrap() as f64;
        assert!((ratio - 0.32 / 0.14).abs() < 0.01, "{ratio}");
    }
}
