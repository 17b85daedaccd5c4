//! What one run of one policy did, as the JSON and the tables report it.

use serde::Serialize;

use datafusion_prefetch::RequestWindowStats;

use super::scans::{self, ScanCounters};

/// What one policy did, as `--json` reports it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct PolicySummary {
    pub(super) suite: &'static str,
    pub(super) policy: String,
    pub(super) clients: usize,
    pub(super) latency: String,
    pub(super) queries: usize,
    pub(super) wall_ms: f64,
    /// Successful queries per minute of wall time, over every round.
    pub(super) queries_per_min: f64,
    /// The same, round by round (`--rounds`): how far one round strays.
    pub(super) rounds_queries_per_min: Vec<f64>,
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
    /// Every `prefetch_*` counter of the run's scans, summed by name.
    pub(super) scans: ScanCounters,
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

impl PolicySummary {
    /// One summary of `rounds`, each a run of the same policy, count of
    /// clients and latency on a runtime of its own: throughput and CPU time
    /// over their summed wall and query counts, percentiles over every
    /// query's `latencies_ms` (of all rounds), peaks the highest, the
    /// store's and the window's counts summed, the window's limit at the
    /// end and its timeline the last round's.
    pub(super) fn combine(rounds: Vec<PolicySummary>, mut latencies_ms: Vec<f64>) -> Self {
        latencies_ms.sort_by(f64::total_cmp);
        let rounds_queries_per_min: Vec<f64> = rounds.iter().map(|r| r.queries_per_min).collect();
        let mut rounds = rounds.into_iter();
        let mut all = rounds.next().expect("at least one round");
        let mut cpu_ms = all.cpu_ms_per_query * all.queries as f64;
        for round in rounds {
            all.queries += round.queries;
            all.wall_ms += round.wall_ms;
            all.peak_total_staged_bytes = all
                .peak_total_staged_bytes
                .max(round.peak_total_staged_bytes);
            all.peak_total_staged_bytes_exact = all
                .peak_total_staged_bytes_exact
                .max(round.peak_total_staged_bytes_exact);
            all.peak_total_held_bytes = all.peak_total_held_bytes.max(round.peak_total_held_bytes);
            all.staged_over_held_violations += round.staged_over_held_violations;
            all.peak_rss_bytes = all.peak_rss_bytes.max(round.peak_rss_bytes);
            all.failed_queries += round.failed_queries;
            all.requests += round.requests;
            all.attempts += round.attempts;
            all.throttled += round.throttled;
            cpu_ms += round.cpu_ms_per_query * round.queries as f64;
            scans::add(&mut all.scans, &round.scans);
            all.window = match (all.window, round.window) {
                (Some(sum), Some(next)) => Some(sum.then(next)),
                (sum, next) => sum.or(next),
            };
        }
        all.queries_per_min = latencies_ms.len() as f64 / (all.wall_ms / 60_000.0);
        all.rounds_queries_per_min = rounds_queries_per_min;
        all.cpu_ms_per_query = cpu_ms / all.queries.max(1) as f64;
        all.p50_ms = percentile(&latencies_ms, 50.0);
        all.p95_ms = percentile(&latencies_ms, 95.0);
        all.max_ms = latencies_ms.last().copied().unwrap_or(f64::NAN);
        all
    }
}

impl WindowSummary {
    /// This round's counts with `next`'s added: `next`'s limit at the end
    /// and timeline, the higher peak.
    fn then(self, next: WindowSummary) -> WindowSummary {
        WindowSummary {
            limit_at_end: next.limit_at_end,
            peak_limit: self.peak_limit.max(next.peak_limit),
            cuts_on_slow_answers: self.cuts_on_slow_answers + next.cuts_on_slow_answers,
            cuts_on_refusals: self.cuts_on_refusals + next.cuts_on_refusals,
            cuts_on_give_ups: self.cuts_on_give_ups + next.cuts_on_give_ups,
            withdrawn: self.withdrawn + next.withdrawn,
            hedges: self.hedges + next.hedges,
            reads_ahead_queued: self.reads_ahead_queued + next.reads_ahead_queued,
            queued_ms: self.queued_ms + next.queued_ms,
            queued_while_wanted_ms: self.queued_while_wanted_ms + next.queued_while_wanted_ms,
            hurried: self.hurried + next.hurried,
            timeline: next.timeline,
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
