//! What a physical plan's prefetching scans report.

use std::sync::Arc;

use datafusion_prefetch::PrefetchStats;

/// Totals over the scans of one plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanTotals {
    /// Data requests the scans issued (zero with policy `off`, which does not count).
    pub requests: u64,
    /// Bytes the scans requested of the store (what one scan's requests
    /// brought another, `bytes_shared`, counts once).
    pub bytes_fetched: u64,
    /// Bytes fetched ahead and never used.
    pub bytes_wasted: u64,
    /// The largest peak of staged bytes of any one scan.
    pub peak_staged_bytes: u64,
}

impl ScanTotals {
    /// Sum (and for the peak, the maximum) over `stats`.
    pub fn of(stats: &[Arc<PrefetchStats>]) -> Self {
        stats.iter().fold(Self::default(), |t, s| Self {
            requests: t.requests + s.requests(),
            bytes_fetched: t.bytes_fetched + (s.bytes_fetched() - s.bytes_shared()),
            bytes_wasted: t.bytes_wasted + s.bytes_wasted(),
            peak_staged_bytes: t.peak_staged_bytes.max(s.peak_staged_bytes()),
        })
    }
}
