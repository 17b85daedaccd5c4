//! Turning the byte ranges of one fetch into store requests — merging
//! neighbours whose gap is cheap to read through, and under `auto` splitting
//! large spans into parallel requests — and mapping each range back onto the
//! requests' bodies.

use std::ops::Range;

/// Where one wanted range lies in the requests' bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSource {
    /// `(request, bytes within that request's body)`, in order; more than one
    /// when a split boundary cuts the range.
    pub pieces: Vec<(usize, Range<u64>)>,
}

/// The requests for a set of ranges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestPlan {
    /// Byte ranges to request, each as one GET.
    pub requests: Vec<Range<u64>>,
    /// For each wanted range (in the order given), where its bytes are.
    pub sources: Vec<RangeSource>,
    /// Ranges that share a request with an earlier one.
    pub merged: u64,
    /// Requests added by splitting.
    pub split: u64,
}

/// How far apart two ranges may be and still share one request when the
/// scheduler plans a fixed policy's fetch: object_store's
/// `OBJECT_STORE_COALESCE_DEFAULT`, the gap its `get_ranges` merges across
/// on S3, GCS, Azure and HTTP (the driver's tests check the two agree).
pub const STORE_MERGE_GAP: u64 = 1024 * 1024;

impl RequestPlan {
    /// Bytes the requests read, gaps included.
    pub fn bytes(&self) -> u64 {
        self.requests.iter().map(|r| r.end - r.start).sum()
    }
}

/// Plan requests for `ranges`: ranges closer than `merge_gap` (or overlapping)
/// share one request; a request longer than `split_bytes` is cut into equal
/// parts of at most that size, fetched in parallel.
///
/// Every byte of every range is in exactly the requests its source names, and
/// no request reads a byte more than `merge_gap` away from a wanted one.
pub fn plan_requests(
    ranges: &[Range<u64>],
    merge_gap: u64,
    split_bytes: impl Fn(u64) -> Option<u64>,
) -> RequestPlan {
    let mut order: Vec<usize> = (0..ranges.len())
        .filter(|&i| ranges[i].end > ranges[i].start)
        .collect();
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    // Spans of merged ranges.
    let mut spans: Vec<Range<u64>> = vec![];
    let mut merged = 0;
    for &i in &order {
        let range = &ranges[i];
        match spans.last_mut() {
            Some(span) if range.start <= span.end.saturating_add(merge_gap) => {
                span.end = span.end.max(range.end);
                merged += 1;
            }
            _ => spans.push(range.clone()),
        }
    }
    let mut requests: Vec<Range<u64>> = vec![];
    let mut split = 0;
    for span in spans {
        let len = span.end - span.start;
        match split_bytes(len) {
            Some(piece) if piece > 0 && len > piece => {
                let parts = len.div_ceil(piece);
                let size = len.div_ceil(parts);
                let mut start = span.start;
                while start < span.end {
                    let end = (start + size).min(span.end);
                    requests.push(start..end);
                    start = end;
                }
                split += parts - 1;
            }
            _ => requests.push(span),
        }
    }
    let sources = ranges
        .iter()
        .map(|range| RangeSource {
            pieces: pieces_of(&requests, range),
        })
        .collect();
    RequestPlan {
        requests,
        sources,
        merged,
        split,
    }
}

/// The parts of `range` in `requests` (sorted, not overlapping).
fn pieces_of(requests: &[Range<u64>], range: &Range<u64>) -> Vec<(usize, Range<u64>)> {
    if range.end <= range.start {
        // An empty range has no bytes; point it at nothing.
        return vec![];
    }
    let first = requests.partition_point(|r| r.end <= range.start);
    requests[first..]
        .iter()
        .enumerate()
        .take_while(|(_, r)| r.start < range.end)
        .map(|(k, r)| {
            let start = range.start.max(r.start);
            let end = range.end.min(r.end);
            (first + k, start - r.start..end - r.start)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn never(_: u64) -> Option<u64> {
        None
    }

    #[test]
    fn neighbours_within_the_gap_share_a_request() {
        let plan = plan_requests(&[0..10, 15..20, 100..110], 5, never);
        assert_eq!(plan.requests, vec![0..20, 100..110]);
        assert_eq!(plan.merged, 1);
        assert_eq!(plan.sources[1].pieces, vec![(0, 15..20)]);
        assert_eq!(plan.sources[2].pieces, vec![(1, 0..10)]);
    }

    #[test]
    fn no_gap_keeps_ranges_apart_but_merges_overlaps() {
        let apart = plan_requests(&[0..10, 11..20], 0, never);
        assert_eq!(apart.requests, vec![0..10, 11..20]);
        assert_eq!(apart.merged, 0);
        let overlapping = plan_requests(&[0..10, 11..20, 5..12], 0, never);
        assert_eq!(overlapping.requests, vec![0..20]);
        assert_eq!(overlapping.merged, 2);
        assert_eq!(overlapping.sources[2].pieces, vec![(0, 5..12)]);
    }

    #[test]
    fn a_long_span_is_split_into_equal_parts() {
        let whole = 0..100;
        let plan = plan_requests(std::slice::from_ref(&whole), 0, |len| {
            (len > 30).then_some(30)
        });
        assert_eq!(plan.requests, vec![0..25, 25..50, 50..75, 75..100]);
        assert_eq!(plan.split, 3);
        assert_eq!(
            plan.sources[0].pieces,
            vec![(0, 0..25), (1, 0..25), (2, 0..25), (3, 0..25)]
        );
    }

    proptest! {
        /// Reassembling each range from its pieces gives exactly its bytes, and
        /// requests never overlap or read beyond the gap.
        #[test]
        fn every_range_is_rebuilt_exactly(
            raw in prop::collection::vec((0u64..2000, 0u64..300), 0..12),
            gap in 0u64..200,
            split in prop::option::of(1u64..400),
        ) {
            let ranges: Vec<Range<u64>> = raw.iter().map(|&(s, l)| s..s + l).collect();
            let plan = plan_requests(&ranges, gap, |len| split.filter(|p| len > *p));
            for pair in plan.requests.windows(2) {
                prop_assert!(pair[0].end <= pair[1].start);
            }
            if let Some(piece) = split {
                for r in &plan.requests {
                    prop_assert!(r.end - r.start <= piece.max(1));
                }
            }
            // Bodies are the byte offsets themselves.
            let bodies: Vec<Vec<u64>> = plan.requests.iter().map(|r| r.clone().collect()).collect();
            for (range, source) in ranges.iter().zip(&plan.sources) {
                let rebuilt: Vec<u64> = source
                    .pieces
                    .iter()
                    .flat_map(|(i, within)| bodies[*i][within.start as usize..within.end as usize].to_vec())
                    .collect();
                prop_assert_eq!(rebuilt, range.clone().collect::<Vec<_>>());
            }
            // Every requested byte is within `gap` of a wanted one.
            for r in &plan.requests {
                for b in [r.start, r.end - 1] {
                    let near = ranges.iter().any(|w| w.start < w.end && b + gap >= w.start && b < w.end + gap);
                    prop_assert!(near, "byte {b} of {r:?} is far from every range");
                }
            }
        }
    }
}
