//! [`RequestWindowStats`]: what a store's window of requests in flight has
//! done, as the runtime's [`PrefetchGovernor`](crate::PrefetchGovernor)
//! reports it.

use std::time::Duration;

use super::gate::GateStats;

/// One store's window of requests in flight under `auto` (shared by every
/// `auto` scan of a runtime that reads the store), since the store was
/// first read: where it stands, why it was cut, and how long reads ahead
/// waited for room in it. From
/// [`PrefetchGovernor::request_windows`](crate::PrefetchGovernor::request_windows).
///
/// ```
/// use datafusion::execution::runtime_env::RuntimeEnv;
/// use datafusion_prefetch::PrefetchGovernor;
///
/// let governor = PrefetchGovernor::of(&RuntimeEnv::default());
/// // No `auto` scan has read a store yet.
/// assert!(governor.request_windows().is_empty());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestWindowStats {
    /// Requests allowed in flight now.
    pub limit: u32,
    /// The highest the limit has been.
    pub peak_limit: u32,
    /// Requests in flight now (reads ahead, demand reads and hedges).
    pub in_flight: u32,
    /// Cuts tipped by answers that came late (a retried `503` the client
    /// did not report, or the store's tail).
    pub cuts_on_slow_answers: u64,
    /// Cuts tipped by `503`s the store's client reported.
    pub cuts_on_refusals: u64,
    /// Cuts because a client gave up on `503`s or `429`s.
    pub cuts_on_give_ups: u64,
    /// Reads ahead a cut withdrew (each sent again later).
    pub withdrawn: u64,
    /// Hedges sent.
    pub hedges: u64,
    /// Reads ahead that found the window full when first sent.
    pub reads_ahead_queued: u64,
    /// How long those reads ahead waited for room, summed.
    pub queued: Duration,
    /// The part of that wait after a decoder came to need the read: time a
    /// decoder waited behind the window. A read ahead a decoder comes to
    /// wait on goes out at once, so this is the time it took to hear of it.
    pub queued_while_wanted: Duration,
    /// Reads ahead sent at once, without waiting for room, because a decoder
    /// came to wait on them.
    pub hurried: u64,
}

impl From<GateStats> for RequestWindowStats {
    fn from(stats: GateStats) -> Self {
        Self {
            limit: stats.state.limit,
            peak_limit: stats.counts.peak_limit,
            in_flight: stats.state.in_flight,
            cuts_on_slow_answers: stats.counts.cuts_on_slow_answers,
            cuts_on_refusals: stats.counts.cuts_on_refusals,
            cuts_on_give_ups: stats.counts.cuts_on_give_ups,
            withdrawn: stats.state.withdrawn,
            hedges: stats.counts.hedges,
            reads_ahead_queued: stats.reads_ahead_queued,
            queued: stats.queued,
            queued_while_wanted: stats.queued_while_wanted,
            hurried: stats.hurried,
        }
    }
}
