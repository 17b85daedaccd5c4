//! Page granularity: slices fetched in decode order, shared pages, the
//! window for files not opened yet.

use std::ops::Range;
use std::sync::Arc;

use super::*;

#[test]
fn streaming_fetches_slices_in_decode_order_and_releases_them_as_the_decoder_passes() {
    let layout = paged_layout(0);
    let mut core = streaming_core(1, 2 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    let actions = core.metadata_known(0, Arc::clone(&layout));
    let plan = core.slice_plan(0).expect("sliced");
    let spans: Vec<_> = plan.slices.iter().map(|s| s.rows.clone()).collect();
    // The first slice is one page of each column (400 KiB), then two pages
    // (800 KiB) each.
    assert_eq!(spans, vec![0..100, 100..300, 300..500, 500..700, 700..800]);
    let pieces = |slice: usize| -> Vec<Range<u64>> {
        plan.pieces[slice].iter().map(|p| p.bytes.clone()).collect()
    };
    // Until a decoder confirms the plan, only the first slice is fetched.
    let fetches = fetched(&actions);
    assert_eq!(fetches.len(), 1);
    assert_eq!(fetches[0].1, pieces(0));
    // Each slice is one request (as object_store's `get_ranges` merges its
    // pages): the `id` pages of other slices between its `id` and its
    // `payload` pages are read too, never decoded.
    let mut gaps = gap_bytes(&actions);
    assert_eq!(gaps, 7 * 100 * 1024);

    core.slice_started(0, 0);
    let read = core.plan_read(0, &pieces(0));
    assert!(read.demand.is_empty(), "slice 0 was staged");
    assert_eq!(released(&read.actions), 1, "taken whole: released");
    // Confirmed: the 2 MiB window now holds slices 1 and 2, one request per
    // slice, in decode order.
    let next: Vec<_> = fetched(&read.actions).into_iter().map(|(_, r)| r).collect();
    assert_eq!(next, vec![pieces(1), pieces(2)]);
    gaps += gap_bytes(&read.actions);
    assert_eq!(core.stats().staged_bytes, 1600 * 1024);
    assert_eq!(core.stats().files_page_granular, 1);
    assert_eq!(core.stats().bytes_page_granular, 400 * 1024);

    core.slice_started(0, 1);
    let read = core.plan_read(0, &pieces(1));
    assert!(read.demand.is_empty());
    // Slices 3 and 4 take the room slice 1 left.
    let next: Vec<_> = fetched(&read.actions).into_iter().map(|(_, r)| r).collect();
    assert_eq!(next, vec![pieces(3), pieces(4)]);
    gaps += gap_bytes(&read.actions);

    // Slice 2 is skipped by the decoder (pruned): moving to slice 3 releases
    // it, and the file is read ahead no further (the plan over-predicts).
    let actions = core.slice_started(0, 3);
    assert_eq!(released(&actions), 1);
    assert_eq!(core.stats().bytes_wasted, 800 * 1024 + gaps);
    let read = core.plan_read(0, &pieces(3));
    assert!(read.demand.is_empty(), "already staged");
    let actions = core.slice_started(0, 4);
    assert!(fetched(&actions).is_empty());
    core.reader_closed(0);
    assert_eq!(core.stats().staged_bytes, 0);
}

#[test]
fn a_filtered_scan_fetches_nothing_before_a_decoder_confirms_the_plan() {
    let layout = paged_layout(0);
    let mut core = streaming_core(2, 16 * MIB, 100 * MIB).with_predicate(true);
    core.reader_opened(0, 0);
    core.metadata_known(1, Arc::clone(&layout));
    assert!(fetched(&core.metadata_known(0, Arc::clone(&layout))).is_empty());
    let plan = core.slice_plan(0).unwrap();
    core.slice_started(0, 0);
    // The decoder reads one page of slice 0 (a page index pruned the rest).
    let read = core.plan_read(0, &[plan.pieces[0][0].bytes.clone()]);
    assert!(fetched(&read.actions).is_empty());
    // All of slice 1: the plan is confirmed, read-ahead starts, file 1 too.
    core.slice_started(0, 1);
    let ranges: Vec<_> = plan.pieces[1].iter().map(|p| p.bytes.clone()).collect();
    let read = core.plan_read(0, &ranges);
    let files: Vec<FileId> = fetched(&read.actions).iter().map(|(f, _)| *f).collect();
    assert!(files.contains(&0) && files.contains(&1), "{files:?}");
}

#[test]
fn a_dictionary_page_stays_staged_until_the_last_slice_of_its_row_group() {
    let layout = paged_layout(50 * 1024);
    let mut core = streaming_core(1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    let mut gaps = gap_bytes(&core.metadata_known(0, Arc::clone(&layout)));
    let plan = core.slice_plan(0).unwrap();
    let dictionary = layout.pages.as_ref().unwrap()[0][1]
        .dictionary
        .clone()
        .unwrap();
    for slice in 0..plan.slices.len() {
        core.slice_started(0, slice);
        let ranges: Vec<_> = plan.pieces[slice].iter().map(|p| p.bytes.clone()).collect();
        assert!(ranges.contains(&dictionary));
        let read = core.plan_read(0, &ranges);
        assert!(
            read.demand.is_empty(),
            "slice {slice} demanded {:?}",
            read.demand
        );
        gaps += gap_bytes(&read.actions);
    }
    // Fetched once, served to every slice; the requests' gaps (pages of
    // other slices) are the only waste.
    assert!(gaps > 0);
    assert_eq!(
        core.stats().bytes_fetched_ahead,
        800 * 4 * 1024 + 50 * 1024 + gaps
    );
    assert_eq!(core.stats().bytes_wasted, gaps);
    assert_eq!(core.stats().staged_bytes, 0);
}

#[test]
fn a_demanded_dictionary_page_is_kept_for_the_later_slices() {
    let layout = paged_layout(50 * 1024);
    let mut core = streaming_core(1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    let actions = core.metadata_known(0, Arc::clone(&layout));
    let Some(Action::Fetch { id, .. }) = actions.first() else {
        panic!("slice 0 fetched ahead: {actions:?}");
    };
    // The read-ahead of slice 0 fails: its decoder demands every page.
    core.fetch_failed(*id);
    let plan = core.slice_plan(0).unwrap();
    let pieces = |slice: usize| -> Vec<Range<u64>> {
        plan.pieces[slice].iter().map(|p| p.bytes.clone()).collect()
    };
    let dictionary = layout.pages.as_ref().unwrap()[0][1]
        .dictionary
        .clone()
        .unwrap();
    core.slice_started(0, 0);
    let read = core.plan_read(0, &pieces(0));
    assert_eq!(read.demand, pieces(0));
    let position = read.demand.iter().position(|r| *r == dictionary).unwrap();
    let (_, kept) = read.retained.clone().expect("the dictionary page is kept");
    assert_eq!(kept, vec![position]);
    // The next slice takes it from staging.
    core.slice_started(0, 1);
    let read = core.plan_read(0, &pieces(1));
    assert!(!read.demand.contains(&dictionary));
    core.reader_closed(0);
    assert_eq!(core.stats().staged_bytes, 0);
}

#[test]
fn a_page_larger_than_the_window_is_read_alone_and_counted() {
    // 300 KiB payload pages against a 256 KiB window: none fits.
    let layout = paged_layout(0);
    let mut core = streaming_core(1, 256 * 1024, 100 * MIB);
    core.reader_opened(0, 0);
    let actions = core.metadata_known(0, Arc::clone(&layout));
    // The id page of slice 0 fits, then its payload page stops it all.
    assert_eq!(fetched(&actions).len(), 1);
    assert_eq!(fetched(&actions)[0].1.len(), 1, "the id page of slice 0");
    assert_eq!(core.stats().oversized_pages, 1);
    assert!(core.stats().peak_staged_bytes <= 256 * 1024);
}

#[test]
fn upcoming_files_get_their_first_slice_within_half_the_window() {
    let layout = paged_layout(0);
    let mut core = streaming_core(3, 4 * MIB, 100 * MIB);
    let opened = core.reader_opened(0, 0);
    assert_eq!(opened_ahead(&opened), vec![1, 2]);
    // Upcoming footers land before the current file's: nothing is fetched for
    // them until the current file's slices are planned.
    assert!(fetched(&core.metadata_known(1, Arc::clone(&layout))).is_empty());
    assert!(fetched(&core.metadata_known(2, Arc::clone(&layout))).is_empty());
    let actions = core.metadata_known(0, Arc::clone(&layout));
    // Then file 0's first slice, and the upcoming files' first slices.
    let plan = core.slice_plan(0).unwrap();
    let first_slice: Vec<_> = plan.pieces[0].iter().map(|p| p.bytes.clone()).collect();
    assert_eq!(
        fetched(&actions),
        vec![
            (0, first_slice.clone()),
            (1, first_slice.clone()),
            (2, first_slice.clone())
        ]
    );

    // With a 1 MiB window, upcoming files get at most half of it: file 0's
    // first slice (400 KiB) leaves no room for another.
    let mut core = streaming_core(3, MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(1, Arc::clone(&layout));
    let actions = core.metadata_known(0, Arc::clone(&layout));
    assert_eq!(fetched(&actions), vec![(0, first_slice)]);
    for (_, staged) in core.partition_staged() {
        assert!(staged <= MIB / 2);
    }
}
