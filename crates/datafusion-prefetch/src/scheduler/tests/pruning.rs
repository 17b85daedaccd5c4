//! Row groups the opener prunes by their statistics (`FileLayout::pruned_row_groups`):
//! never fetched ahead, and skipping them is what the scheduler expected.

use std::sync::Arc;

use super::*;

/// `layout(row_groups, payload)` with `pruned` predicted pruned.
fn pruned_layout(row_groups: usize, payload: u64, pruned: Vec<usize>) -> Arc<FileLayout> {
    Arc::new(Arc::unwrap_or_clone(layout(row_groups, payload)).with_pruned(pruned))
}

#[test]
fn row_groups_pruned_by_statistics_are_not_fetched_ahead_and_skipping_them_keeps_the_prediction() {
    let layout = pruned_layout(6, 4 * MIB, vec![1, 2]);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let payload = |rg: usize| layout.chunk(rg, 1).unwrap();

    let read = core.plan_read(0, &[payload(0)]);
    // The window's two chunks are those of row groups 3 and 4, not 1 and 2.
    assert_eq!(
        fetched(&read.actions),
        vec![(0, vec![payload(3)]), (0, vec![payload(4)])]
    );
    // The decoder jumps from row group 0 to 3, as predicted: read-ahead goes on.
    let read = core.plan_read(0, &[payload(3)]);
    assert!(read.demand.is_empty(), "row group 3 was staged");
    assert_eq!(fetched(&read.actions), vec![(0, vec![payload(5)])]);
    assert_eq!(core.stats().bytes_wasted, 0);
}

#[test]
fn a_jump_over_a_row_group_not_predicted_pruned_still_stops_read_ahead() {
    let layout = pruned_layout(6, 4 * MIB, vec![1]);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let payload = |rg: usize| layout.chunk(rg, 1).unwrap();
    core.plan_read(0, &[payload(0)]);
    // Row groups 2 and 3 are staged; the decoder skips 2 (a bloom filter, say).
    let read = core.plan_read(0, &[payload(3)]);
    assert!(read.demand.is_empty());
    assert!(fetched(&read.actions).is_empty(), "the prediction failed");
}

#[test]
fn upcoming_files_whose_row_groups_are_all_pruned_get_no_first_read() {
    let kept = layout(1, 8 * MIB);
    let all_pruned = pruned_layout(1, 8 * MIB, vec![0]);
    let mut core = core(PrefetchPolicy::Pipelined, 3, 32 * MIB, 100 * MIB);
    assert_eq!(opened_ahead(&core.reader_opened(0, 0)), vec![1, 2]);
    core.metadata_known(0, Arc::clone(&kept));
    core.metadata_known(1, Arc::clone(&all_pruned));
    core.metadata_known(2, Arc::clone(&kept));
    let read = core.plan_read(0, &[kept.chunk(0, 1).unwrap()]);
    assert_eq!(
        fetched(&read.actions),
        vec![(2, vec![kept.chunk(0, 1).unwrap()])]
    );
}

/// Two row groups of 400 rows, one `payload` column of 4 pages of 300 KiB
/// each (100 rows a page).
fn paged_two_row_groups(pruned: Vec<usize>) -> Arc<FileLayout> {
    const PAGE: u64 = 300 * 1024;
    let mut offset = 4;
    let mut chunks = vec![];
    let mut pages = vec![];
    for _ in 0..2 {
        let start = offset;
        let spans = (0..4)
            .map(|page| {
                let bytes = offset..offset + PAGE;
                offset += PAGE;
                PageSpan {
                    bytes,
                    first_row: page * 100,
                }
            })
            .collect();
        let chunk = start..offset;
        chunks.push(vec![chunk]);
        pages.push(vec![ChunkPages {
            dictionary: None,
            pages: spans,
        }]);
    }
    Arc::new(
        FileLayout::new(vec!["payload".into()], chunks)
            .with_pages(vec![400, 400], pages)
            .with_pruned(pruned),
    )
}

#[test]
fn slices_of_pruned_row_groups_are_not_fetched_ahead() {
    let mut core = streaming_core(1, 16 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, paged_two_row_groups(vec![0]));
    let plan = core.slice_plan(0).expect("sliced");
    // The plan still covers both row groups: the opener decides what is read.
    let of = |rg: usize| -> Vec<usize> {
        (0..plan.slices.len())
            .filter(|&s| plan.slices[s].row_group == rg)
            .collect()
    };
    assert!(!of(0).is_empty() && !of(1).is_empty());

    // Row group 0's slices are opened and pruned without a read; the first
    // slice of row group 1 confirms the plan, and only row group 1's slices
    // are fetched.
    for slice in of(0) {
        assert!(fetched(&core.slice_started(0, slice)).is_empty());
    }
    let first = of(1)[0];
    let pieces = |slice: usize| -> Vec<std::ops::Range<u64>> {
        plan.pieces[slice].iter().map(|p| p.bytes.clone()).collect()
    };
    core.slice_started(0, first);
    let read = core.plan_read(0, &pieces(first));
    let ahead: Vec<_> = fetched(&read.actions).into_iter().map(|(_, r)| r).collect();
    let rest: Vec<_> = of(1)[1..].iter().map(|&s| pieces(s)).collect();
    assert_eq!(ahead, rest);
    assert_eq!(core.stats().bytes_wasted, 0);
}
