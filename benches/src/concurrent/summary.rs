//! What one run of one policy did, as the JSON and the tables report it.

use serde::Serialize;

use datafusion_prefetch::RequestWindowStats;

/// What one policy did, as `--json` reports it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct PolicySummary {
    pub(super) suite: &'static str,
    pub(super) policy: String,
    pub(super) clients: usize,
    pub(super) latency: String,
    pub(super) queries: usize,
    pub(super) wall_ms: f64,
    pub(super) queries_per_min: f64,
    pub(super) p50_ms: f64,
    pub(super) p95_ms: f64,
    pub(super) max_ms: f64,
    /// The most bytes all scans had staged at once, sampled every 5 ms.
    pub(super) peak_total_staged_bytes: u64,
    /// The same, exactly: the governor's peak, updated on every change.
    pub(super) peak_total_staged_bytes_exact: u64,
    /// The most bytes prefetching held at once (staged, in flight, still
    /// referenced), exactly.
    pub(super) peak_total_held_bytes: u64,
    pub(super) governor_limit_bytes: u64,
    /// Changes after which some scan staged more than it held (the
    /// governor's own count during this policy's run): must be 0.
    pub(super) staged_over_held_violations: u64,
    /// The runtime's memory pool limit, if bounded.
    pub(super) pool_limit_bytes: Option<u64>,
    pub(super) peak_rss_bytes: u64,
    pub(super) failed_queries: usize,
    pub(super) matches_off: bool,
    /// GETs the store received (each request once, retries not counted).
    pub(super) requests: u64,
    /// Every request the store received, each retry after a `503` one more.
    pub(super) attempts: u64,
    /// `503 SlowDown` answers.
    pub(super) throttled: u64,
    /// The process's CPU time (user + system) over the run, per query.
    pub(super) cpu_ms_per_query: f64,
    /// The store's window of requests in flight (`auto` only).
    pub(super) window: Option<WindowSummary>,
}

/// What `auto`'s window of requests in flight to the store did in one run.
#[derive(Debug, Clone, Serialize)]
pub(super) struct WindowSummary {
    pub(super) limit_at_end: u32,
    pub(super) peak_limit: u32,
    pub(super) cuts_on_slow_answers: u64,
    pub(super) cuts_on_refusals: u64,
    pub(super) cuts_on_give_ups: u64,
    pub(super) withdrawn: u64,
    pub(super) hedges: u64,
    pub(super) reads_ahead_queued: u64,
    /// Time reads ahead waited for room, summed.
    pub(super) queued_ms: f64,
    /// The part of it a decoder waited on the read.
    pub(super) queued_while_wanted_ms: f64,
    /// Reads ahead sent at once because a decoder came to wait on them.
    pub(super) hurried: u64,
    /// `(ms since the run started, limit, in flight)` every 100 ms.
    pub(super) timeline: Vec<(u64, u32, u32)>,
}

impl WindowSummary {
    pub(super) fn new(window: &RequestWindowStats, timeline: Vec<(u64, u32, u32)>) -> Self {
        Self {
            limit_at_end: window.limit,
            peak_limit: window.peak_limit,
            cuts_on_slow_answers: window.cuts_on_slow_answers,
            cuts_on_refusals: window.cuts_on_refusals,
            cuts_on_give_ups: window.cuts_on_give_ups,
            withdrawn: window.withdrawn,
            hedges: window.hedges,
            reads_ahead_queued: window.reads_ahead_queued,
            queued_ms: window.queued.as_secs_f64() * 1e3,
            queued_while_wanted_ms: window.queued_while_wanted.as_secs_f64() * 1e3,
            hurried: window.hurried,
            timeline,
        }
    }
}

/// Nearest-rank percentile of sorted `values`.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
