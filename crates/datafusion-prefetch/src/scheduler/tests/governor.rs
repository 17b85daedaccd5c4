//! The process-wide governor's side of the protocol: a refusal that waits
//! for room, room freed, an idle scan asked to give its share back; and
//! the planned requests of every background fetch, whose gap bytes are
//! counted as fetched ahead and wasted.

use std::sync::Arc;

use super::*;
use crate::scheduler::STORE_MERGE_GAP;

fn fetch_ids(actions: &[Action]) -> Vec<FetchId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Fetch { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

#[test]
fn a_refused_fetch_waits_for_room_and_is_fetched_again_when_it_comes() {
    let layout = layout(4, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 20 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let ids = fetch_ids(&plan.actions);
    assert_eq!(ids.len(), 2, "row groups 1 and 2");
    assert!(
        core.handle(Event::GovernorRefused { id: ids[1] })
            .is_empty()
    );
    assert_eq!(core.stats().staged_bytes, 8 * MIB);
    assert_eq!(core.stats().governor_waits, 1);
    assert_eq!(core.stats().failed_prefetches, 0, "not a failure");
    // Nothing more is fetched ahead until room is freed...
    assert!(fetched(&core.metadata_known(0, Arc::clone(&layout))).is_empty());
    // ...and then row group 2 (still worth fetching) goes out again.
    assert_eq!(
        fetched(&core.handle(Event::RoomFreed)),
        vec![(0, vec![layout.chunk(2, 1).unwrap()])]
    );
}

#[test]
fn a_scan_that_waits_for_room_tries_again_when_it_releases_bytes_itself() {
    let layout = layout(4, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 20 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let ids = fetch_ids(&plan.actions);
    core.handle(Event::GovernorRefused { id: ids[1] });
    // The decoder takes row group 1 whole: released, so the room it held
    // is the scan's to reuse.
    let read = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert_eq!(released(&read.actions), 1);
    assert_eq!(
        fetched(&read.actions),
        vec![
            (0, vec![layout.chunk(2, 1).unwrap()]),
            (0, vec![layout.chunk(3, 1).unwrap()])
        ]
    );
}

#[test]
fn room_freed_wakes_only_a_scan_that_waits_for_it() {
    let layout = layout(4, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 20 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    assert_eq!(fetch_ids(&plan.actions).len(), 2);
    assert!(core.handle(Event::RoomFreed).is_empty());
    // The memory pool's refusal is not lifted by the governor's room.
    let plan = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    let id = fetch_ids(&plan.actions)[0];
    core.pool_refused(id);
    assert!(core.handle(Event::RoomFreed).is_empty());
}

#[test]
fn an_idle_scan_sheds_its_upcoming_files_first_and_waits_for_a_read() {
    let layout = layout(2, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 3, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    for file in 0..3 {
        core.metadata_known(file, Arc::clone(&layout));
    }
    // Row group 1 of file 0 ahead, and files 1 and 2's first reads (both
    // row groups, within the eager cap).
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let files: Vec<FileId> = fetched(&plan.actions).iter().map(|f| f.0).collect();
    assert_eq!(files, vec![0, 1, 1, 2, 2], "one fetch per row group");
    assert_eq!(core.stats().staged_bytes, 40 * MIB);
    // Asked for 10 MiB: file 2's two 8 MiB fetches go, from its back.
    core.sent();
    let actions = core.handle(Event::ShedAsked { bytes: 10 * MIB });
    assert_eq!(released(&actions), 2);
    let stats = core.stats();
    assert_eq!(stats.staged_bytes, 24 * MIB);
    assert_eq!(stats.bytes_shed, 16 * MIB);
    assert_eq!(stats.bytes_wasted, 16 * MIB, "shed bytes were never used");
    // Footers and releases bring no read-ahead until a decoder reads...
    assert!(fetched(&core.metadata_known(2, Arc::clone(&layout))).is_empty());
    // ...and its read brings file 2's first read back.
    let plan = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert_eq!(
        fetched(&plan.actions),
        vec![
            (2, vec![layout.chunk(0, 1).unwrap()]),
            (2, vec![layout.chunk(1, 1).unwrap()])
        ]
    );
}

#[test]
fn shedding_never_takes_a_fetch_a_reader_was_served_from() {
    let layout = layout(3, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    // The decoder takes part of row group 1: served, so it stays.
    let chunk = layout.chunk(1, 1).unwrap();
    let part_of_chunk = chunk.start..chunk.start + 100;
    core.plan_read(0, std::slice::from_ref(&part_of_chunk));
    core.handle(Event::ShedAsked { bytes: 100 * MIB });
    assert_eq!(core.stats().staged_bytes, 8 * MIB);
    assert_eq!(core.stats().bytes_shed, 8 * MIB, "row group 2 only");
}

/// Three columns per row group, `a` and `c` of 2 MiB around a `b` of
/// `gap` bytes.
fn three_columns(row_groups: usize, gap: u64) -> Arc<FileLayout> {
    let mut offset = 4;
    let mut groups = vec![];
    for _ in 0..row_groups {
        let mut chunks = vec![];
        for len in [2 * MIB, gap, 2 * MIB] {
            chunks.push(offset..offset + len);
            offset += len;
        }
        groups.push(chunks);
    }
    Arc::new(FileLayout::new(
        vec!["a".into(), "b".into(), "c".into()],
        groups,
    ))
}

#[test]
fn a_merged_request_counts_its_gap_as_fetched_ahead_and_wasted() {
    let layout = three_columns(2, MIB / 2);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let (a, c) = (layout.chunk(0, 0).unwrap(), layout.chunk(0, 2).unwrap());
    let plan = core.plan_read(0, &[a, c]);
    let Some(Action::Fetch {
        ranges, requests, ..
    }) = plan
        .actions
        .iter()
        .find(|a| matches!(a, Action::Fetch { .. }))
    else {
        panic!("row group 1 is fetched ahead: {:?}", plan.actions);
    };
    let (a1, c1) = (layout.chunk(1, 0).unwrap(), layout.chunk(1, 2).unwrap());
    assert_eq!(ranges, &vec![a1.clone(), c1.clone()]);
    assert_eq!(
        requests.requests,
        vec![a1.start..c1.end],
        "one GET, as get_ranges"
    );
    core.sent();
    let stats = core.stats();
    assert_eq!(stats.bytes_fetched_ahead, 4 * MIB + MIB / 2);
    assert_eq!(stats.bytes_wasted, MIB / 2);
    assert_eq!(stats.requests_merged, 1);
    // The decoder takes both chunks: the gap stays the only waste.
    core.plan_read(0, &[a1, c1]);
    core.shutdown();
    assert_eq!(core.stats().bytes_wasted, MIB / 2);
}

#[test]
fn ranges_further_apart_than_the_store_merges_go_as_separate_requests() {
    let layout = three_columns(2, STORE_MERGE_GAP + 1);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(
        0,
        &[layout.chunk(0, 0).unwrap(), layout.chunk(0, 2).unwrap()],
    );
    let requests: Vec<usize> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Fetch { requests, .. } => Some(requests.requests.len()),
            _ => None,
        })
        .collect();
    assert_eq!(requests, vec![2]);
    assert_eq!(core.stats().bytes_wasted, 0);
}

#[test]
fn a_refused_fetch_takes_back_what_its_gap_counted() {
    let layout = three_columns(2, MIB / 2);
    for refuse in [
        (|id| Event::PoolRefused { id }) as fn(FetchId) -> Event,
        |id| Event::GovernorRefused { id },
    ] {
        let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
        core.reader_opened(0, 0);
        core.metadata_known(0, Arc::clone(&layout));
        let plan = core.plan_read(
            0,
            &[layout.chunk(0, 0).unwrap(), layout.chunk(0, 2).unwrap()],
        );
        let id = fetch_ids(&plan.actions)[0];
        core.handle(refuse(id));
        let stats = core.stats();
        assert_eq!(
            (stats.bytes_wasted, stats.bytes_fetched_ahead),
            (0, 0),
            "{stats:?}"
        );
    }
}

/// A failed fetch was sent: its bytes, gap and pieces, stay fetched ahead
/// and are all waste (no decoder got them).
#[test]
fn a_failed_fetch_was_sent_and_all_its_bytes_are_waste() {
    let layout = three_columns(2, MIB / 2);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(
        0,
        &[layout.chunk(0, 0).unwrap(), layout.chunk(0, 2).unwrap()],
    );
    let id = fetch_ids(&plan.actions)[0];
    core.fetch_failed(id);
    let stats = core.stats();
    // Row group 1's `a` and `c` (2 MiB each) and the `b` between them.
    let fetched = 4 * MIB + MIB / 2;
    assert_eq!(
        (stats.bytes_wasted, stats.bytes_fetched_ahead),
        (fetched, fetched)
    );
}

#[test]
fn a_governor_refusal_of_widened_ranges_waits_for_room_and_is_no_failure() {
    let layout = layout(4, 4 * MIB);
    let mut core = core(PrefetchPolicy::Batched, 1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let (id, _) = plan.widened.clone().expect("widened");
    assert_eq!(core.stats().staged_bytes, 8 * MIB);
    assert!(core.handle(Event::GovernorRefused { id }).is_empty());
    let stats = core.stats();
    assert_eq!(stats.staged_bytes, 0, "not kept");
    assert_eq!(stats.governor_waits, 1);
    assert_eq!(stats.failed_prefetches, 0, "waiting for room is no failure");
    // Told of room, the scan reads ahead again (it ignored it before: a
    // pool refusal does not lift with the governor's room).
    let plan = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert!(plan.widened.is_none(), "waits for room");
    core.handle(Event::RoomFreed);
    let plan = core.plan_read(0, &[layout.chunk(2, 1).unwrap()]);
    assert!(plan.widened.is_some(), "room came: widened again");
}

#[test]
fn a_fetch_already_released_is_not_failed_again() {
    let layout = layout(4, 8 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 20 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let ids = fetch_ids(&plan.actions);
    core.sent();
    // Row group 1 is read whole: its fetch is released.
    let read = core.plan_read(0, &[layout.chunk(1, 1).unwrap()]);
    assert_eq!(released(&read.actions), 1);
    let before = core.stats();
    // A reader that gave up on it reports it failed: nothing changes.
    assert!(core.fetch_failed(ids[0]).is_empty());
    let after = core.stats();
    assert_eq!(after.failed_prefetches, before.failed_prefetches);
    assert_eq!(after.staged_bytes, before.staged_bytes);
    assert_eq!(after.bytes_wasted, before.bytes_wasted);
}
