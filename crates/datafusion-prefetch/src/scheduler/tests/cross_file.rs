//! Across files: opening ahead, first reads in decode order, streams
//! started before they are polled.

use std::ops::Range;
use std::sync::Arc;

use super::*;

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

/// A table of 100,000 single-row-group files, read by two partitions that
/// share one queue: every file is opened ahead exactly once, each gets its
/// first read, and nothing stays staged. Each event looks only at the files
/// open or waiting (and a file's place in its order is a lookup), so this
/// runs in a second; walking every file on every event would take hours.
#[test]
fn a_scan_of_a_hundred_thousand_files_opens_each_ahead_once() {
    const FILES: usize = 100_000;
    let layout = layout(1, 64 << 10);
    let queue: Vec<FileId> = (0..FILES).collect();
    let mut core = ScanCore::new(
        config(PrefetchPolicy::Pipelined, 64 * MIB, 256 * MIB),
        FILES,
        vec![queue.clone(), queue],
    );
    let mut opened_ahead_total = 0;
    let mut served = 0;
    for file in 0..FILES {
        let partition = file % 2;
        let actions = core.reader_opened(file, partition);
        for opened in opened_ahead(&actions) {
            opened_ahead_total += 1;
            core.metadata_known(opened, Arc::clone(&layout));
        }
        core.metadata_known(file, Arc::clone(&layout));
        let read = core.plan_read(file, &[layout.chunk(0, 1).unwrap()]);
        served += usize::from(read.demand.is_empty());
        core.reader_closed(file);
    }
    // Depth 2: the first file opens two ahead, every later file one more;
    // the last two have nothing after them.
    assert_eq!(opened_ahead_total, FILES - 1);
    assert_eq!(core.stats().files_opened_ahead, (FILES - 1) as u64);
    // Once the projection is known, every file's chunk was read ahead.
    assert!(served >= FILES - 3, "{served}");
    core.shutdown();
    assert_eq!(core.stats().staged_bytes, 0);
}

/// What is fetched and never decoded is waste, whatever the cause: here a
/// file read eagerly and then pruned whole (its reader opens and closes
/// without reading), and a row group fetched ahead that the decoder skips.
#[test]
fn eager_reads_of_a_pruned_file_and_skipped_row_groups_are_waste() {
    let layout = layout(2, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 3, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    for file in 0..3 {
        core.metadata_known(file, Arc::clone(&layout));
    }
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let ahead: u64 = fetched(&plan.actions)
        .iter()
        .flat_map(|(_, ranges)| ranges.iter().map(|r| r.end - r.start))
        .sum();
    // File 0's row group 1, and both row groups of files 1 and 2 (one
    // request each: nothing is read between them).
    assert_eq!(ahead, 4 * MIB + 2 * 8 * MIB);
    assert_eq!(core.stats().bytes_wasted, 0);
    // File 1 is pruned by its statistics: opened, closed, never read.
    core.reader_closed(0);
    core.reader_opened(1, 0);
    core.reader_closed(1);
    assert_eq!(core.stats().bytes_wasted, 4 * MIB + 8 * MIB);
    // File 2's decoder skips its row group 0.
    core.reader_opened(2, 0);
    core.plan_read(2, &[layout.chunk(1, 1).unwrap()]);
    core.shutdown();
    let stats = core.stats();
    assert_eq!(stats.bytes_wasted, 4 * MIB + 8 * MIB + 4 * MIB);
    assert_eq!(
        stats.bytes_fetched_ahead - stats.bytes_wasted,
        stats.bytes_served_from_prefetch,
        "every byte fetched ahead was either served or wasted: {stats:?}"
    );
    assert_eq!(
        stats.bytes_requested,
        stats.bytes_used + stats.bytes_wasted,
        "{stats:?}"
    );
}
