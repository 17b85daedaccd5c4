//! Row-group granularity: following the decoder through a file, the window,
//! release, failure and the memory pool.

use std::sync::Arc;

use super::*;

#[test]
fn pipelined_fetches_next_row_groups_of_read_columns_within_the_window() {
    let layout = layout(4, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 20 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));

    let payload0 = layout.chunk(0, 1).unwrap();
    let plan = core.plan_read(0, std::slice::from_ref(&payload0));
    assert_eq!(plan.demand, vec![payload0]);
    // Only the payload column was read, so only payload chunks are fetched ahead:
    // row groups 1 and 2 fit in a 20 MiB window, row group 3 does not.
    let ahead = fetched(&plan.actions);
    assert_eq!(
        ahead,
        vec![
            (0, vec![layout.chunk(1, 1).unwrap()]),
            (0, vec![layout.chunk(2, 1).unwrap()])
        ]
    );
    assert_eq!(core.stats().staged_bytes, 16 * MIB);
    assert_eq!(core.stats().bytes_fetched_ahead, 16 * MIB);
}

#[test]
fn staged_bytes_serve_reads_and_are_released_once_taken() {
    let layout = layout(3, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert_eq!(core.stats().staged_bytes, 8 * MIB);

    // A page inside the prefetched chunk, then the rest of it.
    let chunk = layout.chunk(1, 1).unwrap();
    let page = chunk.start..chunk.start + 100;
    let plan = core.plan_read(0, std::slice::from_ref(&page));
    assert!(plan.demand.is_empty());
    assert!(matches!(
        plan.parts[0],
        Part::Staged {
            offset: 0,
            len: 100,
            ..
        }
    ));
    let rest = chunk.start + 100..chunk.end;
    let plan = core.plan_read(0, &[rest]);
    assert!(plan.demand.is_empty());
    assert!(matches!(plan.parts[0], Part::Staged { offset: 100, .. }));

    let stats = core.stats();
    assert_eq!(stats.bytes_served_from_prefetch, 8 * MIB);
    assert_eq!(stats.bytes_wasted, 0);
    // Fully taken and released. The decoder read pages, not chunks, so row
    // group 2 is not fetched ahead whole.
    assert_eq!(stats.staged_bytes, 0);
    assert!(fetched(&plan.actions).is_empty());
}

#[test]
fn skipped_row_groups_are_released_as_waste() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    // Row groups 1 and 2 are staged; the decoder jumps to 3 (1 and 2 pruned).
    let plan = core.plan_read(0, &[layout.chunk(3, 1).unwrap()]);
    assert_eq!(plan.demand, vec![layout.chunk(3, 1).unwrap()]);
    assert_eq!(core.stats().bytes_wasted, 8 * MIB);
    assert_eq!(core.stats().staged_bytes, 0);
    assert_eq!(
        plan.actions
            .iter()
            .filter(|a| matches!(a, Action::Release { abort: true, .. }))
            .count(),
        2
    );
    assert!(
        fetched(&plan.actions).is_empty(),
        "a pruned file is not read ahead further"
    );
}

#[test]
fn page_selective_reads_stop_read_ahead_in_that_file() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let chunk = layout.chunk(0, 1).unwrap();
    // One page of the chunk: the decoder has a row selection.
    let page = chunk.start..chunk.start + 4096;
    let plan = core.plan_read(0, std::slice::from_ref(&page));
    assert_eq!(plan.demand.len(), 1);
    assert!(fetched(&plan.actions).is_empty(), "{plan:?}");
    assert_eq!(core.stats().bytes_fetched_ahead, 0);
}

#[test]
fn descending_reads_fetch_earlier_row_groups() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 4 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    core.plan_read(0, &[layout.chunk(3, 1).unwrap()]);
    let plan = core.plan_read(0, &[layout.chunk(2, 1).unwrap()]);
    // Row group 3 → 2 reveals the direction; wrong guesses (none here) would be waste.
    let ahead = fetched(&plan.actions);
    assert_eq!(ahead, vec![(0, vec![layout.chunk(1, 1).unwrap()])]);
}

#[test]
fn batched_widens_the_demand_request_instead_of_fetching_in_the_background() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Batched, 2, 8 * MIB, 100 * MIB);
    assert!(core.reader_opened(0, 0).is_empty(), "no cross-file work");
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert!(plan.actions.is_empty());
    let (_, widened) = plan.widened.clone().expect("widened");
    assert_eq!(
        widened,
        vec![layout.chunk(1, 1).unwrap(), layout.chunk(2, 1).unwrap()]
    );
    let plan = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert!(plan.demand.is_empty());
    assert!(plan.widened.is_none(), "no demand request to widen");
}

#[test]
fn closing_the_last_reader_releases_the_file() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert_eq!(core.stats().staged_bytes, 8 * MIB);
    assert!(core.reader_closed(0).is_empty(), "another reader is open");
    let actions = core.reader_closed(0);
    assert!(
        matches!(
            actions[..],
            [
                Action::Release { abort: true, .. },
                Action::Release { abort: true, .. }
            ]
        ),
        "both fetches cancelled: {actions:?}"
    );
    assert_eq!(core.stats().staged_bytes, 0);
    assert_eq!(core.stats().bytes_wasted, 8 * MIB);
}

#[test]
fn a_failed_prefetch_falls_back_to_demand() {
    let layout = layout(3, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 4 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let Some(Action::Fetch { id, .. }) = plan.actions.first().cloned() else {
        panic!("expected a fetch: {plan:?}");
    };
    // The freed window goes to row group 2; row group 1 is left to the decoder.
    let actions = core.fetch_failed(id);
    assert_eq!(
        fetched(&actions),
        vec![(0, vec![layout.chunk(2, 1).unwrap()])]
    );
    assert_eq!(core.stats().failed_prefetches, 1);
    let plan = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert_eq!(plan.demand, vec![layout.chunk(1, 1).unwrap()]);
}

#[test]
fn a_refusing_memory_pool_pauses_read_ahead_until_bytes_are_released() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    for action in &plan.actions {
        if let Action::Fetch { id, .. } = action {
            core.pool_refused(*id);
        }
    }
    assert_eq!(core.stats().staged_bytes, 0);
    // Nothing staged, nothing released: still paused.
    let plan = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert!(fetched(&plan.actions).is_empty());
    assert_eq!(core.stats().failed_prefetches, 2);
}

#[test]
fn a_chunk_larger_than_the_window_is_never_fetched_ahead() {
    let layout = layout(3, 16 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(
        0,
        &[layout.chunk(0, 0).unwrap(), layout.chunk(0, 1).unwrap()],
    );
    // id chunks (1 MiB) of the next row groups still go ahead.
    let ahead = fetched(&plan.actions);
    assert_eq!(
        ahead,
        vec![
            (0, vec![layout.chunk(1, 0).unwrap()]),
            (0, vec![layout.chunk(2, 0).unwrap()])
        ]
    );
}

#[test]
fn shutdown_releases_everything() {
    let layout = layout(1, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 4, 32 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    for file in 0..4 {
        core.metadata_known(file, Arc::clone(&layout));
    }
    core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert!(core.stats().staged_bytes > 0);
    core.shutdown();
    assert_eq!(core.stats().staged_bytes, 0);
}

#[test]
fn off_never_reads_ahead() {
    let layout = layout(4, MIB);
    let mut core = core(PrefetchPolicy::Off, 2, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert!(plan.actions.is_empty() && plan.widened.is_none());
    assert_eq!(core.stats().bytes_fetched_ahead, 0);
}

/// A partition whose window is full (its decoder stalled on a request) must
/// not stop the read-ahead of the others: each has a window of its own.
#[test]
fn a_full_window_in_one_partition_does_not_stop_the_others_read_ahead() {
    let layout = layout(4, 8 * MIB);
    // Two partitions, one file each; a window of two payload chunks.
    let mut core = ScanCore::new(
        config(PrefetchPolicy::Pipelined, 18 * MIB, 100 * MIB),
        2,
        vec![vec![0], vec![1]],
    );
    for file in 0..2 {
        core.reader_opened(file, file);
        core.metadata_known(file, Arc::clone(&layout));
    }
    // Partition 0's decoder reads its first payload chunk: its window fills
    // with row groups 1 and 2, and row group 3, first in line after them,
    // does not fit. Partition 1's file (not started, its leading row groups)
    // is read ahead all the same, within its own window.
    let payload0 = layout.chunk(0, 1).unwrap();
    let plan = core.plan_read(0, std::slice::from_ref(&payload0));
    let ahead = fetched(&plan.actions);
    let chunk = |rg| vec![layout.chunk(rg, 1).unwrap()];
    assert_eq!(
        ahead,
        vec![(0, chunk(1)), (0, chunk(2)), (1, chunk(0)), (1, chunk(1))],
        "{:?}",
        plan.actions
    );
    assert_eq!(core.stats().staged_bytes, 32 * MIB);
}

/// Found by the `scan_core` fuzz target: a corrupt footer giving two column
/// chunks of a row group the same start made one admission stage both under
/// one key, so the staged-bytes count kept bytes nothing held (and never
/// returned to zero). The second is left to the decoder.
#[test]
fn chunks_that_start_at_the_same_byte_are_staged_once() {
    let shared = 4..1004;
    let layout = Arc::new(FileLayout::new(
        vec!["a".into(), "b".into()],
        vec![vec![4..104, 104..204], vec![shared.clone(), 4..504]],
    ));
    let mut core = core(PrefetchPolicy::Pipelined, 1, MIB, MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[4..104, 104..204]);
    let ahead = fetched(&plan.actions);
    assert_eq!(ahead, vec![(0, vec![shared])], "{:?}", plan.actions);
    assert_eq!(core.stats().staged_bytes, 1000);
    core.shutdown();
    assert_eq!(core.stats().staged_bytes, 0);
}
