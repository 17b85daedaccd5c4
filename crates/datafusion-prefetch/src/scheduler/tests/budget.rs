//! The budget and window hold whatever happens, in any order.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Step {
    Start(PartitionId),
    Open(FileId, PartitionId),
    Close(FileId),
    Metadata(FileId),
    Read(FileId, usize, bool),
    SliceStarted(FileId, usize),
    FailFirst,
    RefuseFirst,
}

fn event() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize).prop_map(Step::Start),
        (0..6usize, 0..3usize).prop_map(|(f, p)| Step::Open(f, p)),
        (0..6usize).prop_map(Step::Close),
        (0..6usize).prop_map(Step::Metadata),
        (0..6usize, 0..5usize, any::<bool>()).prop_map(|(f, rg, both)| Step::Read(f, rg, both)),
        (0..6usize, 0..8usize).prop_map(|(f, s)| Step::SliceStarted(f, s)),
        Just(Step::FailFirst),
        Just(Step::RefuseFirst),
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
        // The fetches of the last answer: the pool refuses a fetch in the
        // answer that admits it, before it is sent.
        let mut last: Vec<FetchId> = vec![];
        for event in events {
            let mut refusable = std::mem::take(&mut last);
            let actions = match event {
                Step::Start(p) => core.partition_started(p),
                Step::Open(f, p) => core.reader_opened(f, p),
                Step::Close(f) => core.reader_closed(f),
                Step::Metadata(f) => core.metadata_known(f, Arc::clone(&layout)),
                Step::SliceStarted(f, s) => core.slice_started(f, s),
                Step::Read(f, rg, both) => {
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
                        last.push(id);
                    }
                    plan.actions
                }
                Step::FailFirst => match live.pop() {
                    Some(id) => core.fetch_failed(id),
                    None => vec![],
                },
                Step::RefuseFirst => {
                    if let Some(id) = refusable.pop() {
                        live.retain(|l| *l != id);
                        core.pool_refused(id);
                    }
                    last = refusable;
                    vec![]
                }
            };
            for action in &actions {
                if let Action::Fetch { id, .. } = action {
                    live.push(*id);
                    last.push(*id);
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
        prop_assert_eq!(stats.bytes_requested, stats.bytes_used + stats.bytes_wasted);
    }
}
