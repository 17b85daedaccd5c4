//! `auto`: reading like `off` on a local store, and a lead, depth, requests
//! and granularity steered by what it measured.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use super::*;

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
fn auto_reads_ahead_to_its_limit_until_its_decoder_is_timed_then_by_its_pace() {
    let layout = layout(32, 8 * MIB);
    let mut core = auto_core(1, 64 * MIB, Some(Duration::from_millis(50)));
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    // Not timed yet: as far as the stream may stage, its 64 MiB window:
    // row groups 1-8.
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
fn auto_splits_nothing_while_its_store_throttles() {
    let mut core = auto_core(1, 64 * MIB, None);
    for bytes in [4096, 8 * MIB, 4096, 16 * MIB] {
        let took = Duration::from_millis(40)
            + Duration::from_secs_f64(bytes as f64 / (100.0 * MIB as f64));
        core.observe_request(bytes, took);
    }
    let ranges = [0..MIB, 6 * MIB..54 * MIB];
    assert!(
        core.handle(Event::StoreThrottled { throttled: true })
            .is_empty()
    );
    let whole = core.request_plan(&ranges).unwrap();
    assert_eq!(whole.requests, [0..MIB, 6 * MIB..54 * MIB]);
    assert_eq!(whole.split, 0);
    // The spell over, the 48 MiB span is split again.
    assert!(
        core.handle(Event::StoreThrottled { throttled: false })
            .is_empty()
    );
    assert!(core.request_plan(&ranges).unwrap().split >= 2);
}

#[test]
fn auto_splits_a_column_read_only_when_one_connection_would_take_longer_than_a_round_trip() {
    // Column chunks 2 MiB apart (beyond any merge gap), as a row group of a
    // wide table reads them: each is one request unless its transfer on one
    // connection takes longer than a round trip and it is larger than a piece.
    let chunks = [
        0..3 * MIB,                 // 30 ms at 100 MiB/s: one request
        5 * MIB..5 * MIB + 200_000, // one request
        8 * MIB..28 * MIB,          // 200 ms: split
    ];
    let check = |core: &mut ScanCore, rtt_ms: f64| {
        let plan = core.request_plan(&chunks).unwrap();
        // The two small chunks whole, the 20 MiB one in 3 pieces of ~6.7 MiB
        // (at most 8 MiB each), each still longer than a round trip to send.
        assert_eq!(&plan.requests[..2], &chunks[..2], "{plan:?}");
        assert_eq!(plan.requests.len(), 5, "{plan:?}");
        assert_eq!((plan.split, plan.merged), (2, 0), "{plan:?}");
        for piece in &plan.requests[2..] {
            let transfer_ms = (piece.end - piece.start) as f64 / (100.0 * MIB as f64) * 1e3;
            assert!(transfer_ms > rtt_ms, "{piece:?}: {plan:?}");
        }
    };
    // Measured: 32 ms round trips, 100 MiB/s per connection.
    let mut measured = auto_core(1, 64 * MIB, None);
    for bytes in [4096, 8 * MIB, 4096, 16 * MIB] {
        let took = Duration::from_millis(32)
            + Duration::from_secs_f64(bytes as f64 / (100.0 * MIB as f64));
        measured.observe_request(bytes, took);
    }
    check(&mut measured, 32.0);
    // Nothing measured yet (the first wave of a fresh process): the defaults
    // (30 ms, 100 MiB/s) decide the same.
    check(&mut auto_core(1, 64 * MIB, None), 30.0);
    // A fast connection (32 ms, 1 GiB/s): the 20 MiB chunk takes 20 ms to
    // send, less than its round trip, so it is one request too.
    let mut fast = auto_core(1, 64 * MIB, None);
    for bytes in [4096, 64 * MIB, 4096, 128 * MIB] {
        let took = Duration::from_millis(32)
            + Duration::from_secs_f64(bytes as f64 / (1024.0 * MIB as f64));
        fast.observe_request(bytes, took);
    }
    let plan = fast.request_plan(&chunks).unwrap();
    assert_eq!(plan.requests, chunks.to_vec(), "{plan:?}");
    assert_eq!(plan.split, 0);
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
fn auto_starts_streams_early_only_on_a_store_known_remote() {
    let layout = layout(2, 3 * MIB);
    for (rtt, unanswered_probe, starts) in [
        (None, false, false),
        (Some(Duration::from_micros(300)), false, false),
        (Some(Duration::from_millis(40)), false, true),
        // A probe unanswered for longer than a local store takes: remote.
        (None, true, true),
    ] {
        let mut core = auto_core(2, 64 * MIB, rtt);
        if unanswered_probe {
            assert!(core.handle(Event::ProbeUnanswered).is_empty());
        }
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

/// Carry out `actions` as if every footer asked for landed at once: each
/// `OpenAhead` is answered with `layout` (and so on, as that opens more),
/// the files opened noted in `opened`.
fn footers_land(
    core: &mut ScanCore,
    layout: &Arc<FileLayout>,
    actions: Vec<Action>,
    opened: &mut Vec<FileId>,
) -> Vec<(FileId, Vec<Range<u64>>)> {
    let mut pending: std::collections::VecDeque<Action> = actions.into();
    let mut fetches = vec![];
    while let Some(action) = pending.pop_front() {
        match action {
            Action::OpenAhead { file, .. } => {
                opened.push(file);
                pending.extend(core.metadata_known(file, Arc::clone(layout)));
            }
            Action::Fetch { file, ranges, .. } => fetches.push((file, ranges)),
            _ => {}
        }
    }
    fetches
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
        // Footers land as soon as they are asked for (the metadata cache).
        let mut opened = vec![];
        let actions = core.reader_opened(0, 0);
        footers_land(&mut core, &file, actions, &mut opened);
        let actions = core.metadata_known(0, Arc::clone(&file));
        footers_land(&mut core, &file, actions, &mut opened);
        core.plan_read(0, &[file.chunk(0, 0).unwrap(), file.chunk(0, 1).unwrap()]);
        decode(&mut core, 0, 9 * MIB, 1e9, Duration::ZERO);
        let actions = core.reader_opened(1, 0);
        footers_land(&mut core, &file, actions, &mut opened);
        opened.sort_unstable();
        (opened, core.stats().peak_staged_bytes)
    };
    let run =
        |stream_limit: u64, depth_cap: usize| run_with_eager_cap(stream_limit, depth_cap, 16 * MIB);
    // The user's window and depth: 8 files, 64 MiB.
    let (opened, peak) = run(64 * MIB, 8);
    assert_eq!(opened, (1..10).collect::<Vec<_>>());
    assert!(peak <= 64 * MIB, "{peak}");
    // Left to auto: its lead is the stream's 256 MiB share (before the
    // decoder is timed, and after, since 1 GB/s needs more): 16 files at the
    // eager cap's 16 MiB a file, then 29 once a footer says 9 MiB, 29 files
    // after file 1, and their leading row groups are fetched beyond the
    // 64 MiB window.
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

/// The first wave (issue: auto at the floor from the first round trip). A
/// stream started before it is polled, its store known remote and the
/// footers at hand, sends at once the first read of every upcoming file its
/// budget admits, in decode order — not only what a guessed decoder pace
/// would need — and the measured pace then bounds what follows.
#[test]
fn auto_sends_everything_the_budget_admits_in_the_first_wave() {
    let file = layout(1, 8 * MIB);
    let payload = file.chunk(0, 1).unwrap();
    // 20 files of 8 MiB of projected bytes: all fit 256 MiB, 12 fit 100 MiB.
    for (budget, reach) in [(256 * MIB, 20), (100 * MIB, 12)] {
        let mut config = config(PrefetchPolicy::Auto, 64 * MIB, budget);
        config.auto_stream_limit = budget;
        config.file_open_depth = crate::config::AUTO_MAX_FILE_OPEN_DEPTH;
        let mut core = ScanCore::new(config, 20, vec![(0..20).collect()])
            .with_projection(Some(vec!["payload".into()]));
        assert!(core.handle(Event::ProbeUnanswered).is_empty());
        let actions = core.partition_started(0);
        let mut opened = vec![];
        let fetches = footers_land(&mut core, &file, actions, &mut opened);
        let expected: Vec<_> = (0..reach).map(|f| (f, vec![payload.clone()])).collect();
        assert_eq!(fetches, expected, "budget {budget}");
        // As many files as the lead covers are opened (each reached at once).
        assert!(opened.len() >= reach, "{opened:?}");
        assert!(core.stats().peak_staged_bytes <= budget);
    }
    // A decoder timed slow (8 MiB in 2 s): once the first wave (20 files in
    // 160 MiB) is used up, only the next file is kept ahead, also with the
    // eager cap left to `auto`.
    let mut config = config(PrefetchPolicy::Auto, 64 * MIB, 160 * MIB);
    config.auto_stream_limit = 160 * MIB;
    config.eager_first_read_cap = u64::MAX;
    config.file_open_depth = crate::config::AUTO_MAX_FILE_OPEN_DEPTH;
    let mut core = ScanCore::new(config, 40, vec![(0..40).collect()])
        .with_projection(Some(vec!["payload".into()]));
    for _ in 0..4 {
        core.observe_request(4096, Duration::from_millis(50));
    }
    let actions = core.partition_started(0);
    footers_land(&mut core, &file, actions, &mut vec![]);
    assert_eq!(core.stats().staged_bytes, 160 * MIB, "the first wave");
    let mut at = Duration::ZERO;
    for f in 0..40 {
        let actions = core.reader_opened(f, 0);
        footers_land(&mut core, &file, actions, &mut vec![]);
        at = decode(&mut core, f, 8 * MIB, 4.0 * MIB as f64, at);
        core.plan_read(f, std::slice::from_ref(&payload));
        core.reader_closed(f);
        if f >= 20 {
            let staged = core.stats().staged_bytes;
            assert!(staged <= 8 * MIB, "file {f}: {staged} staged");
        }
    }
    assert_eq!(core.stats().peak_staged_bytes, 160 * MIB);
}

#[test]
fn auto_left_to_itself_sends_whole_files_in_the_first_wave() {
    // 5 files of two row groups of 12 MiB projected bytes each: more per file
    // than the fixed policies' 16 MiB cap. Left to `auto`, the first wave
    // takes every row group of every file (120 MiB of a 256 MiB budget);
    // with the cap set to 16 MiB, each file's first row group.
    let file = layout(2, 12 * MIB);
    let row_groups: Vec<_> = (0..2).map(|rg| file.chunk(rg, 1).unwrap()).collect();
    for (cap, per_file) in [
        (u64::MAX, row_groups.clone()),
        (16 * MIB, row_groups[..1].to_vec()),
    ] {
        let mut config = config(PrefetchPolicy::Auto, 64 * MIB, 256 * MIB);
        config.auto_stream_limit = 256 * MIB;
        config.file_open_depth = crate::config::AUTO_MAX_FILE_OPEN_DEPTH;
        config.eager_first_read_cap = cap;
        let mut core = ScanCore::new(config, 5, vec![(0..5).collect()])
            .with_projection(Some(vec!["payload".into()]));
        assert!(core.handle(Event::ProbeUnanswered).is_empty());
        let actions = core.partition_started(0);
        let fetches = footers_land(&mut core, &file, actions, &mut vec![]);
        for f in 0..5 {
            let ranges: Vec<_> = fetches
                .iter()
                .filter(|(file, _)| *file == f)
                .flat_map(|(_, ranges)| ranges.iter().cloned())
                .collect();
            assert_eq!(ranges, per_file, "cap {cap}, file {f}");
        }
        let staged = core.stats().staged_bytes;
        assert_eq!(staged, 5 * per_file.len() as u64 * 12 * MIB, "cap {cap}");
    }
}
