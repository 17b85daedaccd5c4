//! Every byte a scan requests is handed to a decoder or counted as waste,
//! once: the causes not covered beside their mechanism (a merged request's
//! gap in `governor.rs`, a pruned file and a skipped row group in
//! `cross_file.rs`, a skipped slice in `streaming.rs`), and the balance
//! `bytes_requested == bytes_used + bytes_wasted` once a scan is over.

use std::sync::Arc;

use super::*;

/// Once the scan is over, every requested byte was used or wasted.
fn assert_balanced(core: &ScanCore) {
    let stats = core.stats();
    assert_eq!(
        stats.bytes_requested,
        stats.bytes_used + stats.bytes_wasted,
        "{stats:?}"
    );
}

/// Three columns per row group, `a` and `c` of 2 MiB around a `b` of 512 KiB.
fn three_columns(row_groups: usize) -> Arc<FileLayout> {
    let mut offset = 4;
    let groups = (0..row_groups)
        .map(|_| {
            [2 * MIB, MIB / 2, 2 * MIB]
                .into_iter()
                .map(|len| {
                    offset += len;
                    offset - len..offset
                })
                .collect()
        })
        .collect();
    Arc::new(FileLayout::new(
        vec!["a".into(), "b".into(), "c".into()],
        groups,
    ))
}

/// A scan that owns its demand reads plans them as the store would merge
/// them: `b`, between the demanded `a` and `c`, is fetched and wasted.
#[test]
fn the_gap_of_a_demand_read_is_waste() {
    let layout = three_columns(1);
    let mut config = config(PrefetchPolicy::Pipelined, 64 * MIB, 100 * MIB);
    config.owns_demand_reads = true;
    let mut core = ScanCore::new(config, 1, vec![vec![0]]);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let (a, c) = (layout.chunk(0, 0).unwrap(), layout.chunk(0, 2).unwrap());
    let read = core.plan_read(0, &[a.clone(), c.clone()]);
    let requests = read.demand_requests.as_ref().expect("planned");
    assert_eq!(requests.requests, vec![a.start..c.end], "one request");
    let stats = core.stats();
    assert_eq!(stats.bytes_wasted, MIB / 2);
    assert_eq!(stats.bytes_used, 4 * MIB);
    core.shutdown();
    assert_balanced(&core);
}

/// Without owning them, a demand read asks the wrapped reader for each
/// range, and only what it asked for is counted.
#[test]
fn a_demand_read_through_the_wrapped_reader_counts_what_it_asks() {
    let layout = three_columns(1);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let (a, c) = (layout.chunk(0, 0).unwrap(), layout.chunk(0, 2).unwrap());
    let read = core.plan_read(0, &[a, c]);
    assert!(read.demand_requests.is_none());
    let stats = core.stats();
    assert_eq!(
        (stats.bytes_requested, stats.bytes_used),
        (4 * MIB, 4 * MIB)
    );
    assert_eq!(stats.bytes_wasted, 0);
}

/// A dictionary page every slice of its row group reads is fetched once and
/// counts as used once, however often it is served.
#[test]
fn a_page_several_slices_read_is_used_once() {
    let layout = paged_layout(50 * 1024);
    let mut core = streaming_core(1, 8 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let plan = core.slice_plan(0).unwrap();
    for slice in 0..plan.slices.len() {
        core.slice_started(0, slice);
        let ranges: Vec<_> = plan.pieces[slice].iter().map(|p| p.bytes.clone()).collect();
        core.plan_read(0, &ranges);
    }
    core.shutdown();
    let stats = core.stats();
    assert!(plan.slices.len() > 2);
    assert!(
        stats.bytes_served_from_prefetch > stats.bytes_used,
        "{stats:?}"
    );
    // Eight pages of 100 KiB and eight of 300 KiB, and the dictionary.
    assert_eq!(stats.bytes_used, 8 * 400 * 1024 + 50 * 1024);
    assert_balanced(&core);
}

/// A range served from a fetch that then failed is read again on demand:
/// the read is requested and used, the fetch's bytes are all waste.
#[test]
fn a_range_read_again_after_its_fetch_failed_is_counted_once_used() {
    let layout = layout(2, 4 * MIB);
    let mut core = core(PrefetchPolicy::Pipelined, 1, 64 * MIB, 100 * MIB);
    core.reader_opened(0, 0);
    core.metadata_known(0, Arc::clone(&layout));
    let read = core.plan_read(0, &[layout.chunk(0, 1).unwrap()]);
    let Some(Action::Fetch { id, .. }) = read.actions.first() else {
        panic!("row group 1 fetched ahead: {:?}", read.actions);
    };
    let id = *id;
    // The decoder is served half of row group 1 from the fetch...
    let chunk = layout.chunk(1, 1).unwrap();
    let half = chunk.start..chunk.start + 2 * MIB;
    let read = core.plan_read(0, std::slice::from_ref(&half));
    assert!(read.demand.is_empty());
    // ...which fails: the driver reads that half on demand instead.
    core.fetch_failed(id);
    core.handle(Event::FallbackRead { id, bytes: 2 * MIB });
    core.shutdown();
    let stats = core.stats();
    assert_eq!(
        stats.bytes_used,
        4 * MIB + 2 * MIB,
        "row group 0, half of 1"
    );
    assert_eq!(stats.bytes_wasted, 4 * MIB, "all of the failed fetch");
    assert_balanced(&core);
}
