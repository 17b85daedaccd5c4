//! What a physical plan's prefetching scans report, and order-insensitive
//! result comparison.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::Result;
use datafusion_prefetch::PrefetchStats;

/// Totals over the scans of one plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanTotals {
    /// Data requests the scans issued (zero with policy `off`, which does not count).
    pub requests: u64,
    /// Bytes the scans requested.
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
            bytes_fetched: t.bytes_fetched + s.bytes_fetched(),
            bytes_wasted: t.bytes_wasted + s.bytes_wasted(),
            peak_staged_bytes: t.peak_staged_bytes.max(s.peak_staged_bytes()),
        })
    }
}

/// Every row of `batches` as text, sorted, so two results can be compared
/// regardless of the order the partitions delivered them in.
pub fn sorted_rows(batches: &[RecordBatch]) -> Result<Vec<String>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = vec![];
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            rows.push(cells.join("\t"));
        }
    }
    rows.sort_unstable();
    Ok(rows)
}
