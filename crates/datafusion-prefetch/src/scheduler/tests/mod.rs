//! Deterministic tests of the scheduler: no tokio, no store, no clock. Every
//! test drives [`ScanCore`] through its one door, [`ScanCore::handle`], with
//! the events the driver would report ([`Drive`] names them).

mod auto;
mod budget;
mod cross_file;
mod governor;
mod pruning;
mod row_groups;
mod streaming;
mod waste;

use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::Duration;

use super::{
    Action, AutoTuner, ChunkPages, CoreConfig, Event, FetchId, FileId, FileLayout, PageSpan, Part,
    PartitionId, ReadPlan, ScanCore, SlicePlan,
};
use crate::config::PrefetchPolicy;

/// The events a driver reports, one method each, so a test reads as the
/// sequence of things that happen to a scan.
pub(super) trait Drive {
    fn partition_started(&mut self, partition: PartitionId) -> Vec<Action>;
    fn reader_opened(&mut self, file: FileId, partition: PartitionId) -> Vec<Action>;
    fn reader_closed(&mut self, file: FileId) -> Vec<Action>;
    fn metadata_known(&mut self, file: FileId, layout: Arc<FileLayout>) -> Vec<Action>;
    /// The decoders of `file` start: the slices they read in (if any), and
    /// what was released.
    fn slices_for_reading(&mut self, file: FileId) -> (Option<Arc<SlicePlan>>, Vec<Action>);
    fn slice_started(&mut self, file: FileId, slice: usize) -> Vec<Action>;
    fn read_started(&mut self, file: FileId, at: Duration);
    fn plan_read(&mut self, file: FileId, ranges: &[Range<u64>]) -> Read;
    fn read_finished(&mut self, file: FileId, bytes: u64, at: Duration);
    fn fetch_failed(&mut self, id: FetchId) -> Vec<Action>;
    fn pool_refused(&mut self, id: FetchId);
    fn observe_request(&mut self, bytes: u64, took: Duration);
    fn adopt_store_measurements(&mut self, measured: &AutoTuner);
    fn shutdown(&mut self) -> Vec<Action>;
    /// The fetches admitted so far went out ([`send_admitted`]).
    fn sent(&mut self);
}

/// The answer to a read: the plan ([`Action::Serve`]) and what followed it.
#[derive(Debug)]
pub(super) struct Read {
    pub plan: ReadPlan,
    pub actions: Vec<Action>,
}

impl Deref for Read {
    type Target = ReadPlan;

    fn deref(&self) -> &ReadPlan {
        &self.plan
    }
}

/// Report every fetch admitted so far as sent, as the driver does when its
/// task starts — after any refusal of the answer that admitted it.
pub(super) fn send_admitted(core: &mut ScanCore) {
    let unsent: Vec<FetchId> = core.unsent.keys().copied().collect();
    for id in unsent {
        assert!(core.handle(Event::FetchSent { id }).is_empty());
    }
}

/// Handle `event` as the driver would: the fetches of earlier answers have
/// gone out by now.
pub(super) fn act(core: &mut ScanCore, event: Event) -> Vec<Action> {
    send_admitted(core);
    core.handle(event)
}

impl Drive for ScanCore {
    fn partition_started(&mut self, partition: PartitionId) -> Vec<Action> {
        act(self, Event::PartitionStarted { partition })
    }

    fn reader_opened(&mut self, file: FileId, partition: PartitionId) -> Vec<Action> {
        act(self, Event::ReaderOpened { file, partition })
    }

    fn reader_closed(&mut self, file: FileId) -> Vec<Action> {
        act(self, Event::ReaderClosed { file })
    }

    fn metadata_known(&mut self, file: FileId, layout: Arc<FileLayout>) -> Vec<Action> {
        act(self, Event::FooterKnown { file, layout })
    }

    fn slices_for_reading(&mut self, file: FileId) -> (Option<Arc<SlicePlan>>, Vec<Action>) {
        let actions = act(self, Event::DecodersStarting { file });
        (self.slice_plan(file), actions)
    }

    fn slice_started(&mut self, file: FileId, slice: usize) -> Vec<Action> {
        act(self, Event::SliceStarted { file, slice })
    }

    fn read_started(&mut self, file: FileId, at: Duration) {
        assert!(act(self, Event::ReadStarted { file, at }).is_empty());
    }

    fn plan_read(&mut self, file: FileId, ranges: &[Range<u64>]) -> Read {
        let mut actions = act(
            self,
            Event::ReadAsked {
                file,
                ranges: ranges.to_vec(),
            },
        );
        let Action::Serve(plan) = actions.remove(0) else {
            panic!("a read is answered with Serve first: {actions:?}");
        };
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Serve(_))),
            "{actions:?}"
        );
        Read { plan, actions }
    }

    fn read_finished(&mut self, file: FileId, bytes: u64, at: Duration) {
        assert!(act(self, Event::ReadFinished { file, bytes, at }).is_empty());
    }

    fn fetch_failed(&mut self, id: FetchId) -> Vec<Action> {
        act(self, Event::FetchFailed { id })
    }

    fn pool_refused(&mut self, id: FetchId) {
        // In the answer that admitted it: before it is sent.
        assert!(self.handle(Event::PoolRefused { id }).is_empty());
    }

    fn observe_request(&mut self, bytes: u64, took: Duration) {
        assert!(act(self, Event::RequestTimed { bytes, took }).is_empty());
    }

    fn adopt_store_measurements(&mut self, measured: &AutoTuner) {
        let measured = measured.clone();
        assert!(act(self, Event::StoreMeasured { measured }).is_empty());
    }

    fn shutdown(&mut self) -> Vec<Action> {
        act(self, Event::ScanEnded)
    }

    fn sent(&mut self) {
        send_admitted(self);
    }
}

pub(super) const MIB: u64 = 1 << 20;

/// `row_groups` row groups of an `id` column (1 MiB chunks) and a `payload`
/// column (`payload` bytes per chunk), laid out back to back after the magic.
pub(super) fn layout(row_groups: usize, payload: u64) -> Arc<FileLayout> {
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
pub(super) fn paged_layout(dictionary: u64) -> Arc<FileLayout> {
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

pub(super) fn config(policy: PrefetchPolicy, window: u64, budget: u64) -> CoreConfig {
    CoreConfig {
        policy,
        read_ahead_window: window,
        memory_budget: budget,
        file_open_depth: 2,
        auto_stream_limit: window,
        eager_first_read_cap: 16 * MIB,
        hedge_after: crate::config::HedgeAfter::Auto,
        slice_target_bytes: CoreConfig::default_slice_target(window, budget),
        slice_min_column_bytes: 0,
        owns_demand_reads: false,
    }
}

/// One partition reading `files` files in order.
pub(super) fn core(policy: PrefetchPolicy, files: usize, window: u64, budget: u64) -> ScanCore {
    ScanCore::new(
        config(policy, window, budget),
        files,
        vec![(0..files).collect()],
    )
}

pub(super) fn fetched(actions: &[Action]) -> Vec<(FileId, Vec<Range<u64>>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Fetch { file, ranges, .. } => Some((*file, ranges.clone())),
            _ => None,
        })
        .collect()
}

/// Bytes the fetches of `actions` read between their ranges (a merged
/// request's gaps: fetched, never decoded).
pub(super) fn gap_bytes(actions: &[Action]) -> u64 {
    actions
        .iter()
        .map(|a| match a {
            Action::Fetch {
                ranges, requests, ..
            } => requests.bytes() - ranges.iter().map(|r| r.end - r.start).sum::<u64>(),
            _ => 0,
        })
        .sum()
}

pub(super) fn released(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Release { .. }))
        .count()
}

pub(super) fn opened_ahead(actions: &[Action]) -> Vec<FileId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::OpenAhead { file, .. } => Some(*file),
            _ => None,
        })
        .collect()
}

/// A streaming core over `paged_layout` files, slices of about two pages.
pub(super) fn streaming_core(files: usize, window: u64, budget: u64) -> ScanCore {
    let mut config = config(PrefetchPolicy::Streaming, window, budget);
    config.slice_target_bytes = 800 * 1024;
    ScanCore::new(config, files, vec![(0..files).collect()])
}

/// `auto` with a store answering every request in `rtt` (unlimited bandwidth).
pub(super) fn auto_core(files: usize, window: u64, rtt: Option<std::time::Duration>) -> ScanCore {
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
pub(super) fn decode(
    core: &mut ScanCore,
    file: FileId,
    bytes: u64,
    rate: f64,
    at: Duration,
) -> Duration {
    core.read_finished(file, bytes, at);
    let next = at + Duration::from_secs_f64(bytes as f64 / rate);
    core.read_started(file, next);
    next
}
