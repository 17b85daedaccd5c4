//! Deterministic tests of the scheduler core: no tokio, no store.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::PrefetchPolicy;

const MIB: u64 = 1 << 20;

/// `row_groups` row groups of an `id` column (1 MiB chunks) and a `payload`
/// column (`payload` bytes per chunk), laid out back to back after the magic.
fn layout(row_groups: usize, payload: u64) -> Arc<FileLayout> {
    let mut offset = 4;
    let mut groups = vec![];
    for _ in 0..row_groups {
        let id = offset..offset + MIB;
        offset = id.end;
        let data = offset..offset + payload;
        offset = data.end;
        groups.push(vec![id, data]);
    }
    Arc::new(FileLayout::new(vec!["id".into(), "payload".into()], groups))
}

/// One row group of 800 rows: an `id` column of 8 pages of 100 KiB, and a
/// `payload` column with a dictionary page of `dictionary` bytes and 8 pages of
/// 300 KiB, each page 100 rows.
fn paged_layout(dictionary: u64) -> Arc<FileLayout> {
    const KIB: u64 = 1024;
    let mut offset = 4;
    let mut chunks = vec![];
    let mut pages = vec![];
    for (page_bytes, dict) in [(100 * KIB, 0), (300 * KIB, dictionary)] {
        let start = offset;
        let dictionary = (dict > 0).then(|| start..start + dict);
        offset += dict;
        let mut spans = vec![];
        for page in 0..8 {
            spans.push(PageSpan {
                bytes: offset..offset + page_bytes,
                first_row: page * 100,
            });
            offset += page_bytes;
        }
        chunks.push(start..offset);
        pages.push(ChunkPages {
            dictionary,
            pages: spans,
        });
    }
    Arc::new(
        FileLayout::new(vec!["id".into(), "payload".into()], vec![chunks])
            .with_pages(vec![800], vec![pages]),
    )
}

fn config(policy: PrefetchPolicy, window: u64, budget: u64) -> CoreConfig {
    CoreConfig {
        policy,
        read_ahead_window: window,
        memory_budget: budget,
        file_open_depth: 2,
        auto_stream_limit: window,
        eager_first_read_cap: 16 * MIB,
        slice_target_bytes: CoreConfig::default_slice_target(window, budget),
        slice_min_column_bytes: 0,
    }
}

/// One partition reading `files` files in order.
fn core(policy: PrefetchPolicy, files: usize, window: u64, budget: u64) -> ScanCore {
    ScanCore::new(
        config(policy, window, budget),
        files,
        vec![(0..files).collect()],
    )
}

fn fetched(actions: &[Action]) -> Vec<(FileId, Vec<Range<u64>>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Fetch { file, ranges, .. } => Some((*file, ranges.clone())),
            _ => None,
        })
        .collect()
}

fn released(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Release { .. }))
        .count()
}

fn opened_ahead(actions: &[Action]) -> Vec<FileId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::OpenAhead { file, .. } => Some(*file),
            _ => None,
        })
        .collect()
}

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
fn upcoming_files_are_opened_ahead_and_eagerly_read_once_the_projection_is_known() {
    let layout = layout(1, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 5, 32 * MIB, 100 * MIB);
    let actions = core.reader_opened(0, 0);
    assert_eq!(opened_ahead(&actions), vec![1, 2]);
    for file in 0..3 {
        assert!(fetched(&core.metadata_known(file, Arc::clone(&layout))).is_empty());
    }
    // The first demand read teaches the projection: payload only.
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let chunk = layout.chunk(0, 1).unwrap();
    assert_eq!(
        fetched(&plan.actions),
        vec![(1, vec![chunk.clone()]), (2, vec![chunk])]
    );

    // Opening file 1 opens file 3 ahead; file 2 is already requested.
    let actions = core.reader_opened(1, 0);
    assert_eq!(opened_ahead(&actions), vec![3]);
    assert_eq!(core.stats().files_opened_ahead, 3);
}

#[test]
fn upcoming_files_are_read_eagerly_in_decode_order_whatever_order_their_footers_land_in() {
    let layout = layout(1, 8 * MIB);
    // Room for two 8 MiB first reads: files 1 and 2, not 3.
    let mut config = config(PrefetchPolicy::Pipelined, 18 * MIB, 100 * MIB);
    config.file_open_depth = 3;
    let mut core = ScanCore::new(config, 4, vec![vec![0, 1, 2, 3]]);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    // File 3's footer lands first: its first read waits for files 1 and 2.
    assert!(fetched(&core.metadata_known(3, Arc::clone(&layout))).is_empty());
    assert!(fetched(&core.metadata_known(2, Arc::clone(&layout))).is_empty());
    let chunk = layout.chunk(0, 1).unwrap();
    assert_eq!(
        fetched(&core.metadata_known(1, Arc::clone(&layout))),
        vec![(1, vec![chunk.clone()]), (2, vec![chunk])]
    );
}

#[test]
fn eager_reads_cover_leading_row_groups_up_to_the_cap() {
    let layout = layout(4, 3 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 2, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    for file in 0..2 {
        core.metadata_known(file, Arc::clone(&layout));
    }
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    // 16 MiB cap: five 3 MiB payload chunks would not fit, four do.
    let of_file_1: Vec<_> = fetched(&plan.actions)
        .into_iter()
        .filter(|(f, _)| *f == 1)
        .collect();
    let chunks: Vec<_> = (0..4)
        .map(|rg| (1, vec![layout.chunk(rg, 1).unwrap()]))
        .collect();
    assert_eq!(of_file_1, chunks);
}

#[test]
fn eager_first_reads_respect_their_cap() {
    let layout = layout(1, 8 * MIB);
    let mut config = config(PrefetchPolicy::Pipelined, 64 * MIB, 100 * MIB);
    config.eager_first_read_cap = 4 * MIB;
    let mut core = ScanCore::new(config, 3, vec![vec![0, 1, 2]]);
    core.reader_opened(0, 0);
    for file in 0..3 {
        core.metadata_known(file, Arc::clone(&layout));
    }
    // id (1 MiB) and payload (8 MiB) were both read; only id fits in 4 MiB.
    let plan = core.plan_read(
        0,
        &[layout.chunk(0, 0).unwrap(), layout.chunk(0, 1).unwrap()],
    );
    let id = layout.chunk(0, 0).unwrap();
    assert_eq!(
        fetched(&plan.actions),
        vec![(1, vec![id.clone()]), (2, vec![id])]
    );
}

#[test]
fn a_started_stream_reads_its_first_files_by_the_projection_before_it_is_polled() {
    let layout = layout(6, 3 * MIB);
    let mut core = ScanCore::new(
        config(PrefetchPolicy::Pipelined, 64 * MIB, 100 * MIB),
        6,
        vec![vec![0, 1, 2], vec![3, 4, 5]],
    )
    .with_projection(Some(vec!["payload".into()]));
    // The first file, and the files its decoder would open ahead (depth 2).
    let actions = core.partition_started(0);
    assert_eq!(opened_ahead(&actions), vec![0, 1, 2]);
    assert!(fetched(&actions).is_empty(), "the footers come first");
    // No decoder has read yet: the projection says payload, and each file's
    // leading row groups go out up to the 16 MiB cap (five 3 MiB chunks).
    let payload = |file: FileId| -> Vec<(FileId, Vec<Range<u64>>)> {
        (0..5)
            .map(|rg| (file, vec![layout.chunk(rg, 1).unwrap()]))
            .collect()
    };
    for file in 0..3 {
        let actions = core.metadata_known(file, Arc::clone(&layout));
        assert_eq!(fetched(&actions), payload(file), "file {file}");
    }
    assert_eq!(core.stats().files_opened_at_start, 1);
    assert_eq!(core.stats().files_opened_ahead, 2);

    // Polled: the files are already open, and the decoder's first read is
    // served from what was staged.
    assert!(opened_ahead(&core.reader_opened(0, 0)).is_empty());
    let read = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert!(read.demand.is_empty(), "served from the early read");
    // Partition 1 was not started: nothing of it was opened.
    assert!(core.layout(3).is_none());
    assert_eq!(opened_ahead(&core.partition_started(1)), vec![3, 4, 5]);
}

#[test]
fn nothing_starts_early_without_read_ahead() {
    let mut off = core(PrefetchPolicy::Off, 2, 64 * MIB, 100 * MIB);
    assert!(off.partition_started(0).is_empty());
    let mut no_depth = config(PrefetchPolicy::Pipelined, 64 * MIB, 100 * MIB);
    no_depth.file_open_depth = 0;
    let mut shallow = ScanCore::new(no_depth, 2, vec![vec![0, 1]]);
    assert!(shallow.partition_started(0).is_empty());
    // A partition whose decoder got there first is under way: starting it
    // again would open a file beyond the depth.
    let mut under_way = core(PrefetchPolicy::Pipelined, 5, 64 * MIB, 100 * MIB);
    assert_eq!(opened_ahead(&under_way.reader_opened(0, 0)), vec![1, 2]);
    assert!(under_way.partition_started(0).is_empty());
}

#[test]
fn a_filtered_scan_started_early_fetches_only_its_first_slice() {
    let layout = paged_layout(0);
    let mut core = streaming_core(1, 16 * MIB, 100 * MIB).with_predicate(true);
    assert_eq!(opened_ahead(&core.partition_started(0)), vec![0]);
    let actions = core.metadata_known(0, Arc::clone(&layout));
    let plan = core.slice_plan(0).expect("sliced");
    let first: Vec<Range<u64>> = plan.pieces[0].iter().map(|p| p.bytes.clone()).collect();
    assert_eq!(fetched(&actions), vec![(0, first)]);
}

#[test]
fn batched_widens_the_demand_request_instead_of_fetching_in_the_background() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Batched, 2, 8 * MIB, 100 * MIB);
    assert!(core.reader_opened(0, 0).is_empty(), "no cross-file work");
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert!(plan.actions.is_empty());
    let (_, widened) = plan.widened.expect("widened");
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

/// A streaming core over `paged_layout` files, slices of about two pages.
fn streaming_core(files: usize, window: u64, budget: u64) -> ScanCore {
    let mut config = config(PrefetchPolicy::Streaming, window, budget);
    config.slice_target_bytes = 800 * 1024;
    ScanCore::new(config, files, vec![(0..files).collect()])
}

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

    core.slice_started(0, 0);
    let read = core.plan_read(0, &pieces(0));
    assert!(read.demand.is_empty(), "slice 0 was staged");
    assert_eq!(released(&read.actions), 1, "taken whole: released");
    // Confirmed: the 2 MiB window now holds slices 1 and 2, one request per
    // slice, in decode order.
    let next: Vec<_> = fetched(&read.actions).into_iter().map(|(_, r)| r).collect();
    assert_eq!(next, vec![pieces(1), pieces(2)]);
    assert_eq!(core.stats().staged_bytes, 1600 * 1024);
    assert_eq!(core.stats().files_page_granular, 1);
    assert_eq!(core.stats().bytes_page_granular, 400 * 1024);

    core.slice_started(0, 1);
    let read = core.plan_read(0, &pieces(1));
    assert!(read.demand.is_empty());
    // Slices 3 and 4 take the room slice 1 left.
    let next: Vec<_> = fetched(&read.actions).into_iter().map(|(_, r)| r).collect();
    assert_eq!(next, vec![pieces(3), pieces(4)]);

    // Slice 2 is skipped by the decoder (pruned): moving to slice 3 releases
    // it, and the file is read ahead no further (the plan over-predicts).
    let actions = core.slice_started(0, 3);
    assert_eq!(released(&actions), 1);
    assert_eq!(core.stats().bytes_wasted, 800 * 1024);
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
    core.metadata_known(0, Arc::clone(&layout));
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
    }
    // Fetched once, served to every slice.
    assert_eq!(core.stats().bytes_fetched_ahead, 800 * 4 * 1024 + 50 * 1024);
    assert_eq!(core.stats().bytes_wasted, 0);
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
    let (_, kept) = read.retained.expect("the dictionary page is kept");
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

#[derive(Debug, Clone)]
enum Event {
    Start(PartitionId),
    Open(FileId, PartitionId),
    Close(FileId),
    Metadata(FileId),
    Read(FileId, usize, bool),
    SliceStarted(FileId, usize),
    FailFirst,
    RefuseFirst,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0..3usize).prop_map(Event::Start),
        (0..6usize, 0..3usize).prop_map(|(f, p)| Event::Open(f, p)),
        (0..6usize).prop_map(Event::Close),
        (0..6usize).prop_map(Event::Metadata),
        (0..6usize, 0..5usize, any::<bool>()).prop_map(|(f, rg, both)| Event::Read(f, rg, both)),
        (0..6usize, 0..8usize).prop_map(|(f, s)| Event::SliceStarted(f, s)),
        Just(Event::FailFirst),
        Just(Event::RefuseFirst),
    ]
}

proptest! {
    /// Whatever happens, staged bytes never exceed the budget, a partition
    /// never holds more than its window, and shutdown returns staging to zero.
    #[test]
    fn the_budget_and_window_always_hold(
        policy in prop_oneof![
            Just(PrefetchPolicy::Batched),
            Just(PrefetchPolicy::Pipelined),
            Just(PrefetchPolicy::Streaming),
        ],
        window_mib in 1u64..24,
        extra_mib in 0u64..24,
        payload_kib in 1u64..6000,
        events in proptest::collection::vec(event(), 1..80),
    ) {
        let window = window_mib * MIB;
        let budget = window + extra_mib * MIB;
        let layout = if policy == PrefetchPolicy::Streaming {
            paged_layout(payload_kib * 100)
        } else {
            layout(5, payload_kib * 1024)
        };
        let order = vec![vec![0, 1, 2], vec![3, 4, 5], vec![0, 1, 2, 3, 4, 5]];
        let mut core = ScanCore::new(config(policy, window, budget), 6, order);
        let mut live: Vec<FetchId> = vec![];
        for event in events {
            let actions = match event {
                Event::Start(p) => core.partition_started(p),
                Event::Open(f, p) => core.reader_opened(f, p),
                Event::Close(f) => core.reader_closed(f),
                Event::Metadata(f) => core.metadata_known(f, Arc::clone(&layout)),
                Event::SliceStarted(f, s) => core.slice_started(f, s),
                Event::Read(f, rg, both) => {
                    let mut ranges = match &layout.pages {
                        // Streaming: a page of the payload column.
                        Some(pages) => vec![pages[0][1].pages[rg].bytes.clone()],
                        None => vec![layout.chunk(rg, 1).unwrap()],
                    };
                    if both {
                        ranges.push(layout.chunk(rg.min(layout.row_groups.len() - 1), 0).unwrap());
                    }
                    let plan = core.plan_read(f, &ranges);
                    prop_assert_eq!(plan.parts.len(), ranges.len());
                    if let Some((id, _)) = plan.widened {
                        live.push(id);
                    }
                    plan.actions
                }
                Event::FailFirst => match live.pop() {
                    Some(id) => core.fetch_failed(id),
                    None => vec![],
                },
                Event::RefuseFirst => {
                    if let Some(id) = live.pop() {
                        core.pool_refused(id);
                    }
                    vec![]
                }
            };
            for action in &actions {
                if let Action::Fetch { id, .. } = action {
                    live.push(*id);
                }
            }
            let stats = core.stats();
            prop_assert!(stats.staged_bytes <= budget, "{} > {}", stats.staged_bytes, budget);
            prop_assert!(stats.peak_staged_bytes <= budget);
            for (partition, staged) in &core.partition_staged() {
                prop_assert!(*staged <= window, "partition {} holds {}", partition, staged);
            }
        }
        core.shutdown();
        prop_assert_eq!(core.stats().staged_bytes, 0);
        let stats = core.stats();
        prop_assert!(stats.bytes_wasted <= stats.bytes_fetched_ahead);
    }
}

/// `auto` with a store answering every request in `rtt` (unlimited bandwidth).
fn auto_core(files: usize, window: u64, rtt: Option<std::time::Duration>) -> ScanCore {
    let mut core = core(PrefetchPolicy::Auto, files, window, 256 * MIB);
    if let Some(rtt) = rtt {
        for _ in 0..4 {
            core.observe_request(4096, rtt);
        }
    }
    core
}

/// Hand `file`'s decoder `bytes` and have it ask again after decoding them at
/// `rate` bytes/s; returns the time after.
fn decode(core: &mut ScanCore, file: FileId, bytes: u64, rate: f64, at: Duration) -> Duration {
    core.read_finished(file, bytes, at);
    let next = at + Duration::from_secs_f64(bytes as f64 / rate);
    core.read_started(file, next);
    next
}

#[test]
fn auto_on_a_local_store_reads_exactly_like_off() {
    let layout = layout(4, 8 * MIB);
    let mut core = auto_core(3, 64 * MIB, Some(Duration::from_micros(300)));
    let opened = core.reader_opened(0, 0);
    assert!(opened.is_empty(), "no file opened ahead: {opened:?}");
    core.metadata_known(0, Arc::clone(&layout));
    assert!(!core.slices_files());
    let mut at = Duration::ZERO;
    for rg in 0..4 {
        let chunk = layout.chunk(rg, 1).unwrap();
        at = decode(&mut core, 0, 8 * MIB, 500e6, at);
        let plan = core.plan_read(0, std::slice::from_ref(&chunk));
        assert_eq!(plan.demand, vec![chunk], "row group {rg} read on demand");
        assert!(fetched(&plan.actions).is_empty());
    }
    assert_eq!(core.stats().peak_staged_bytes, 0);
    assert!(core.request_plan(&[0..10, 11..20]).unwrap().requests.len() == 2);
}

#[test]
fn auto_reads_ahead_as_a_typical_decoder_needs_until_its_own_is_timed() {
    let layout = layout(32, 8 * MIB);
    let mut core = auto_core(1, 64 * MIB, Some(Duration::from_millis(50)));
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    // Not timed yet: a 200 MiB/s decoder at 50 ms needs 72 MiB ahead, more
    // than the 64 MiB window: row groups 1-8.
    let ahead: Vec<Range<u64>> = fetched(&plan.actions)
        .into_iter()
        .flat_map(|(_, r)| r)
        .collect();
    assert_eq!(
        ahead,
        (1..9)
            .map(|rg| layout.chunk(rg, 1).unwrap())
            .collect::<Vec<_>>()
    );
    // The decoder takes 8 MiB per 2 s (4 MiB/s): lead 4 MiB/s x (2 x 50 ms
    // + 80 ms) x 2 = 1.4 MiB. Once the row groups fetched at the start are
    // used up, only the next one is kept ahead.
    let mut at = Duration::ZERO;
    for rg in 1..24 {
        at = decode(&mut core, 0, 8 * MIB, 4.0 * MIB as f64, at);
        let plan = core.plan_read(0, &[layout.chunk(rg, 1).unwrap()]);
        if rg >= 8 {
            assert_eq!(
                fetched(&plan.actions),
                vec![(0, vec![layout.chunk(rg + 1, 1).unwrap()])],
                "row group {rg}"
            );
            assert!(core.stats().staged_bytes <= 8 * MIB);
        }
    }
    let lead = core.auto_snapshot().unwrap().lead_bytes;
    assert!(lead < 2 * MIB, "{lead}");
}

#[test]
fn auto_slices_files_with_an_offset_index_only_on_a_remote_store() {
    for (rtt, sliced) in [
        (Duration::from_micros(100), false),
        (Duration::from_millis(40), true),
    ] {
        let mut core = auto_core(1, 8 * MIB, Some(rtt));
        core.reader_opened(0, 0);
        core.metadata_known(0, paged_layout(0));
        assert_eq!(core.slice_plan(0).is_some(), sliced, "rtt {rtt:?}");
    }
    // A 3.2 MiB row group is a small part of a 64 MiB window: row groups
    // pipeline whole, one decoder each.
    let mut core = auto_core(1, 64 * MIB, Some(Duration::from_millis(40)));
    core.reader_opened(0, 0);
    core.metadata_known(0, paged_layout(0));
    assert!(core.slice_plan(0).is_none());
}

#[test]
fn auto_stops_reading_ahead_when_the_consumer_stops_pulling() {
    let layout = layout(64, 4 * MIB);
    let mut core = auto_core(1, 64 * MIB, Some(Duration::from_millis(50)));
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let mut at = Duration::ZERO;
    let mut staged_while_pulling = 0;
    for rg in 0..6 {
        at = decode(&mut core, 0, 4 * MIB, 400.0 * MIB as f64, at);
        core.plan_read(0, &[layout.chunk(rg, 1).unwrap()]);
        staged_while_pulling = staged_while_pulling.max(core.stats().staged_bytes);
    }
    assert!(staged_while_pulling >= 32 * MIB, "{staged_while_pulling}");
    // The consumer stalls: each row group now sits 20 s before the next ask.
    // Once most recent reads were stalled, only the next unit stays ahead,
    // in the middle of the file.
    for rg in 6..40 {
        at = decode(&mut core, 0, 4 * MIB, 4.0 * MIB as f64 / 20.0, at);
        let plan = core.plan_read(0, &[layout.chunk(rg, 1).unwrap()]);
        if rg >= 6 + 16 + 16 {
            let staged = core.stats().staged_bytes;
            assert!(staged <= 4 * MIB, "row group {rg}: {staged} staged");
            assert!(fetched(&plan.actions).len() <= 1);
        }
    }
}

#[test]
fn auto_merges_and_splits_requests_by_what_it_measured() {
    let mut core = auto_core(1, 64 * MIB, None);
    // 40 ms round trips, 100 MiB/s per connection.
    for bytes in [4096, 8 * MIB, 4096, 16 * MIB] {
        let took = Duration::from_millis(40)
            + Duration::from_secs_f64(bytes as f64 / (100.0 * MIB as f64));
        core.observe_request(bytes, took);
    }
    // Gap 40 ms x 100 MiB/s / 4 = 1 MiB: the 512 KiB gap is read through, the
    // 4 MiB one is not; the 48 MiB span is split into ~8-16 MiB pieces.
    let plan = core
        .request_plan(&[0..MIB, MIB + (512 << 10)..2 * MIB, 6 * MIB..54 * MIB])
        .unwrap();
    assert_eq!(plan.requests[0], 0..2 * MIB);
    assert_eq!(plan.merged, 1);
    assert!(plan.split >= 2, "{plan:?}");
    assert_eq!(core.stats().requests_merged, 1);
    assert_eq!(core.stats().requests_split, plan.split);
}

#[test]
fn auto_drops_a_slice_plan_made_before_the_store_measured_local() {
    // The file's footer is known while the store is still assumed remote: it
    // is planned in slices and its first slice fetched ahead.
    let mut core = auto_core(1, 8 * MIB, None);
    core.reader_opened(0, 0);
    core.metadata_known(0, paged_layout(0));
    assert!(core.slice_plan(0).is_some());
    assert!(core.stats().staged_bytes > 0);
    // The store answers in 100 us: local. The file's decoder will read whole
    // row groups, so the plan and its staged pages go.
    for _ in 0..4 {
        core.observe_request(4096, Duration::from_micros(100));
    }
    let (plan, released) = core.slices_for_reading(0);
    assert!(plan.is_none());
    assert!(core.slice_plan(0).is_none());
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(core.stats().staged_bytes, 0);
    // Read like off from here: the decoder's chunk is a demand read.
    let layout = paged_layout(0);
    let chunk = layout.chunk(0, 1).unwrap();
    let plan = core.plan_read(0, std::slice::from_ref(&chunk));
    assert_eq!(plan.demand, vec![chunk]);
    assert!(fetched(&plan.actions).is_empty());
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

#[test]
fn auto_stays_local_for_the_scan_once_it_measured_a_local_store() {
    // Later reads that queue behind a busy machine are not round trips, and
    // reads made past the core must not be fetched again by read-ahead.
    let layout = layout(4, 8 * MIB);
    let mut core = auto_core(2, 64 * MIB, Some(Duration::from_micros(300)));
    assert!(core.reads_like_off(0));
    for _ in 0..32 {
        core.observe_request(4096, Duration::from_millis(30));
    }
    assert!(core.reads_like_off(0));
    assert!(core.reader_opened(0, 0).is_empty());
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert!(fetched(&plan.actions).is_empty());
    assert!(!core.auto_snapshot().unwrap().remote);
}

#[test]
fn auto_starts_streams_early_only_on_a_store_it_measured_remote() {
    let layout = layout(2, 3 * MIB);
    for (rtt, starts) in [
        (None, false),
        (Some(Duration::from_micros(300)), false),
        (Some(Duration::from_millis(40)), true),
    ] {
        let mut core = auto_core(2, 64 * MIB, rtt);
        let actions = core.partition_started(0);
        assert_eq!(!opened_ahead(&actions).is_empty(), starts, "rtt {rtt:?}");
        if starts {
            let actions = core.metadata_known(0, Arc::clone(&layout));
            let expected: Vec<_> = (0..2)
                .map(|rg| {
                    (
                        0,
                        vec![layout.chunk(rg, 0).unwrap(), layout.chunk(rg, 1).unwrap()],
                    )
                })
                .collect();
            // No projection: every column of the leading row groups.
            assert_eq!(fetched(&actions), expected);
        }
    }
}

#[test]
fn auto_opens_as_many_files_ahead_as_its_lead_covers() {
    // 40 files of one 9 MiB row group, 100 ms per request, a decoder timed at
    // 1 GB/s: lead 1 GB/s x (2 x 100 ms + 80 ms) x 2, far beyond 256 MiB.
    let file = layout(1, 8 * MIB);
    let run_with_eager_cap = |stream_limit: u64, depth_cap: usize, eager_cap: u64| {
        let mut config = config(PrefetchPolicy::Auto, 64 * MIB, 256 * MIB);
        config.auto_stream_limit = stream_limit;
        config.file_open_depth = depth_cap;
        config.eager_first_read_cap = eager_cap;
        let mut core = ScanCore::new(config, 40, vec![(0..40).collect()]);
        for _ in 0..4 {
            core.observe_request(4096, Duration::from_millis(100));
        }
        let mut opened = opened_ahead(&core.reader_opened(0, 0));
        core.metadata_known(0, Arc::clone(&file));
        core.plan_read(0, &[file.chunk(0, 0).unwrap(), file.chunk(0, 1).unwrap()]);
        decode(&mut core, 0, 9 * MIB, 1e9, Duration::ZERO);
        opened.extend(opened_ahead(&core.reader_opened(1, 0)));
        for f in std::iter::once(1).chain(opened.clone()) {
            core.metadata_known(f, Arc::clone(&file));
        }
        opened.sort_unstable();
        (opened, core.stats().peak_staged_bytes)
    };
    let run =
        |stream_limit: u64, depth_cap: usize| run_with_eager_cap(stream_limit, depth_cap, 16 * MIB);
    // The user's window and depth: 8 files, 64 MiB.
    let (opened, peak) = run(64 * MIB, 8);
    assert_eq!(opened, (1..10).collect::<Vec<_>>());
    assert!(peak <= 64 * MIB, "{peak}");
    // Left to auto: before the decoder is timed, 8 files; after, the
    // stream's 256 MiB share at 9 MiB a file, 29 files after file 1, and
    // their leading row groups are fetched beyond the 64 MiB window.
    let (opened, peak) = run(256 * MIB, 64);
    assert_eq!(opened, (1..31).collect::<Vec<_>>());
    assert!(peak > 64 * MIB && peak <= 256 * MIB, "{peak}");
    // A small lead never opens fewer files than the fixed policies do.
    let (opened, _) = run(10 * MIB, 64);
    assert_eq!(opened, (1..10).collect::<Vec<_>>());
    // Without eager reads an opened-ahead file is only a footer: no deeper.
    let (opened, peak) = run_with_eager_cap(256 * MIB, 64, 0);
    assert_eq!(opened, (1..10).collect::<Vec<_>>());
    assert!(peak <= 64 * MIB, "{peak}");
}

#[test]
fn auto_adopts_what_a_sibling_scan_measured_and_needs_no_probe() {
    let mut measured = AutoTuner::default();
    measured.observe_request(4096, Duration::from_millis(40));
    // Created before anything was measured, as a query's scans are.
    let mut cold = auto_core(2, 64 * MIB, None);
    assert!(cold.wants_probe());
    cold.adopt_store_measurements(&measured);
    assert!(!cold.wants_probe());
    let rtt = cold.auto_snapshot().unwrap().rtt.unwrap();
    assert!(
        rtt.abs_diff(Duration::from_millis(40)) < Duration::from_millis(1),
        "{rtt:?}"
    );
    // A scan with timings of its own keeps them.
    let mut own = auto_core(2, 64 * MIB, Some(Duration::from_millis(100)));
    own.adopt_store_measurements(&measured);
    let rtt = own.auto_snapshot().unwrap().rtt.unwrap();
    assert!(rtt >= Duration::from_millis(99), "{rtt:?}");
    // A local store's measurements make the scan local at once.
    let mut local = AutoTuner::default();
    local.observe_request(4096, Duration::from_micros(300));
    let mut cold = auto_core(2, 64 * MIB, None);
    cold.adopt_store_measurements(&local);
    assert!(!cold.slices_files());
    assert!(cold.reader_opened(0, 0).is_empty());
}
