//! [`ScanCore`]: one scan's scheduler state, and [`ScanCore::handle`], the one
//! door every change goes through.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::auto::{AutoSnapshot, AutoTuner};
#[cfg(test)]
use super::layout::FileLayout;
use super::protocol::{Action, CoreConfig, CoreStats, Event, FetchId, FileId, PartitionId};
use super::slices::SlicePlan;
use super::state::{
    AutoState, FileOrder, FileState, LiveFetch, OpenedAhead, PieceKey, PlanTrust, PoolState,
    Progress, SlicePlans, StagedPiece, Unsent,
};
use crate::config::PrefetchPolicy;

/// The scheduler state of one scan, shared by all its partitions.
///
/// It never performs I/O and never looks at a clock. The driver reports what
/// happened with [`ScanCore::handle`] and carries out the [`Action`]s it
/// gets back; every byte it stages is admitted against the per-stream
/// read-ahead window and the scan-wide memory budget first, so the budget is
/// an invariant of this type, checked by its unit tests without tokio or a
/// store. The read-only views below let the driver ask what was decided.
#[derive(Debug)]
pub(crate) struct ScanCore {
    pub(super) config: CoreConfig,
    pub(super) files: Vec<FileState>,
    /// For each partition, the order in which its work source hands out
    /// files (partitions that share one queue share one `FileOrder`).
    pub(super) order: Vec<Arc<FileOrder>>,
    /// Files a decoder is reading now.
    pub(super) open_files: BTreeSet<FileId>,
    /// Files opened ahead that no decoder has opened yet.
    pub(super) waiting_ahead: BTreeSet<FileId>,
    /// Column paths any decoder of this scan has asked for: the projection, as
    /// observed, used to predict an upcoming file's reads.
    pub(super) learned_paths: BTreeSet<String>,
    /// Partitions whose first file has been opened, early or by a decoder.
    pub(super) started_partitions: BTreeSet<PartitionId>,
    /// The file each started partition reads now (or will read first): what
    /// its files are opened ahead of.
    pub(super) current_files: BTreeMap<PartitionId, FileId>,
    /// The top-level columns the scan reads (`None`: all), which decide the
    /// pages of a file's slices and a started stream's first reads before
    /// any decoder has read.
    pub(super) projection: Option<Vec<String>>,
    /// The scan has a predicate: nothing is fetched on speculation.
    pub(super) filtered: bool,
    pub(super) staged: BTreeMap<PieceKey, StagedPiece>,
    /// Oversized pages already counted.
    pub(super) oversized: BTreeSet<PieceKey>,
    pub(super) slice_plans: SlicePlans,
    pub(super) live_fetches: BTreeMap<FetchId, LiveFetch>,
    /// Background fetches admitted whose requests have not gone out yet.
    pub(super) unsent: BTreeMap<FetchId, Unsent>,
    pub(super) partition_staged: BTreeMap<PartitionId, u64>,
    pub(super) next_fetch: u64,
    pub(super) pool: PoolState,
    /// `auto`: what the scan measured, and how that steers it.
    pub(super) auto: Option<AutoState>,
    pub(super) stats: CoreStats,
}

impl ScanCore {
    /// A scheduler for `file_count` scan units, where `order[p]` lists the files
    /// partition `p` will be handed, in order.
    pub(crate) fn new(config: CoreConfig, file_count: usize, order: Vec<Vec<FileId>>) -> Self {
        Self {
            files: (0..file_count)
                .map(|_| FileState {
                    size: u64::MAX,
                    ..FileState::default()
                })
                .collect(),
            order: share_equal_orders(order),
            open_files: BTreeSet::new(),
            waiting_ahead: BTreeSet::new(),
            learned_paths: BTreeSet::new(),
            started_partitions: BTreeSet::new(),
            current_files: BTreeMap::new(),
            projection: None,
            filtered: false,
            staged: BTreeMap::new(),
            oversized: BTreeSet::new(),
            slice_plans: SlicePlans::default(),
            live_fetches: BTreeMap::new(),
            unsent: BTreeMap::new(),
            partition_staged: BTreeMap::new(),
            next_fetch: 0,
            pool: PoolState::default(),
            auto: (config.policy == PrefetchPolicy::Auto).then(AutoState::default),
            stats: CoreStats::default(),
            config,
        }
    }

    /// The size of each scan unit's file, by [`FileId`]: a range that starts
    /// past the end is refused ([`ReadPlan::refused`](super::ReadPlan::refused)).
    pub(crate) fn with_file_sizes(mut self, sizes: impl IntoIterator<Item = u64>) -> Self {
        for (state, size) in self.files.iter_mut().zip(sizes) {
            state.size = size;
        }
        self
    }

    /// `auto`: start from `tuner`'s measurements (a session's earlier scans
    /// of the same store). Ignored by the other policies.
    pub(crate) fn with_auto_tuner(mut self, tuner: AutoTuner) -> Self {
        if let Some(auto) = self.auto.as_mut() {
            auto.tuner = tuner;
            auto.note_locality();
        }
        self
    }

    /// The top-level columns the scan reads (`None`: all of them).
    pub(crate) fn with_projection(mut self, projection: Option<Vec<String>>) -> Self {
        self.projection = projection;
        self
    }

    /// Whether the scan has a predicate (statistics, page index or a row
    /// filter may narrow what its decoders read). Such a scan fetches no
    /// slice on speculation before a decoder has confirmed the plan, but for
    /// the first slice of a stream's first files.
    pub(crate) fn with_predicate(mut self, filtered: bool) -> Self {
        self.filtered = filtered;
        self
    }

    /// Keep the sets of open and waiting files in step with `file`'s state
    /// (after any change to its readers, progress or opening ahead).
    pub(super) fn file_changed(&mut self, file: FileId) {
        let state = &self.files[file];
        let open = state.is_open();
        let waiting = state.ahead != OpenedAhead::No && state.progress == Progress::Upcoming;
        if open {
            self.open_files.insert(file);
        } else {
            self.open_files.remove(&file);
        }
        if waiting {
            self.waiting_ahead.insert(file);
        } else {
            self.waiting_ahead.remove(&file);
        }
    }

    /// Take in what happened and answer with what to do, in order. A
    /// [`Event::ReadAsked`] is answered with [`Action::Serve`] first.
    pub(crate) fn handle(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::PartitionStarted { partition } => self.on_partition_started(partition),
            Event::ReaderOpened { file, partition } => self.on_reader_opened(file, partition),
            Event::ReaderClosed { file } => self.on_reader_closed(file),
            Event::FooterKnown { file, layout } => self.on_footer_known(file, layout),
            Event::DecodersStarting { file } => self.on_decoders_starting(file),
            Event::SliceStarted { file, slice } => self.on_slice_started(file, slice),
            Event::ReadStarted { file, at } => {
                self.on_read_started(file, at);
                vec![]
            }
            Event::ReadAsked { file, ranges } => self.on_read_asked(file, &ranges),
            Event::ReadFinished { file, bytes, at } => {
                self.on_read_finished(file, bytes, at);
                vec![]
            }
            Event::FetchFailed { id } => self.on_fetch_failed(id),
            Event::FetchSent { id } => {
                self.on_fetch_sent(id);
                vec![]
            }
            Event::FallbackRead { id, bytes } => {
                self.on_fallback_read(id, bytes);
                vec![]
            }
            Event::PoolRefused { id } => {
                self.on_pool_refused(id);
                vec![]
            }
            Event::GovernorRefused { id } => {
                self.on_governor_refused(id);
                vec![]
            }
            Event::RoomFreed => self.on_room_freed(),
            Event::ShedAsked { bytes } => self.on_shed_asked(bytes),
            Event::RequestTimed { bytes, took } => {
                self.on_request_timed(bytes, took);
                vec![]
            }
            Event::TransferTimed {
                bytes,
                first_byte,
                took,
            } => {
                self.on_transfer_timed(bytes, first_byte, took);
                vec![]
            }
            Event::ProbeUnanswered => {
                self.on_probe_unanswered();
                vec![]
            }
            Event::StoreMeasured { measured } => {
                self.on_store_measured(&measured);
                vec![]
            }
            Event::StoreThrottled { throttled } => {
                self.on_store_throttled(throttled);
                vec![]
            }
            Event::ScanEnded => self.on_scan_ended(),
        }
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> CoreStats {
        self.stats
    }

    /// Bytes staged per partition, charged against each partition's window.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn partition_staged(&self) -> Vec<(PartitionId, u64)> {
        self.partition_staged
            .iter()
            .map(|(p, b)| (*p, *b))
            .collect()
    }

    /// The layout of a file, once its footer has been read.
    #[cfg(test)]
    pub(crate) fn layout(&self, file: FileId) -> Option<&Arc<FileLayout>> {
        self.files.get(file)?.layout.as_ref()
    }

    /// The slices `file` is read in, if it is read at page granularity.
    pub(crate) fn slice_plan(&self, file: FileId) -> Option<Arc<SlicePlan>> {
        let slices = self.files.get(file)?.slices()?;
        Some(Arc::clone(&slices.plan))
    }

    /// Whether the decoders of `file` read its pages more selectively than its
    /// slice plan says: the rest of the file is better read by one decoder.
    pub(crate) fn slices_mispredicted(&self, file: FileId) -> bool {
        self.files
            .get(file)
            .and_then(FileState::slices)
            .is_some_and(|s| s.trust == PlanTrust::Mispredicted)
    }

    /// `auto`: what it has measured of the store (not of the decoders), to
    /// keep for the session's later scans; `None` for other policies.
    pub(crate) fn store_measurements(&self) -> Option<AutoTuner> {
        Some(self.auto.as_ref()?.tuner.store_measurements())
    }

    /// `auto`: what the scan has measured and chose, `None` for other policies.
    pub(crate) fn auto_snapshot(&self) -> Option<AutoSnapshot> {
        let mut snapshot = self.auto.as_ref()?.tuner.snapshot();
        snapshot.remote = self.auto_remote();
        snapshot.lead_bytes = if snapshot.remote {
            self.lead_limit()
        } else {
            0
        };
        Some(snapshot)
    }

    /// `auto` has timed no request yet: the driver should time one (or take
    /// what sibling scans measured) before a file's granularity is decided.
    pub(crate) fn wants_probe(&self) -> bool {
        self.auto.as_ref().is_some_and(|a| !a.tuner.has_measured())
    }

    /// Whether the driver sends demand reads to the store itself
    /// ([`CoreConfig::owns_demand_reads`]).
    pub(crate) fn owns_demand_reads(&self) -> bool {
        self.config.owns_demand_reads
    }

    /// `auto` on a store it measured local: decoders read exactly as without
    /// prefetching, and the driver skips the scheduler for their reads of
    /// `file` (timing them only) — unless something was fetched ahead for it
    /// before the store was measured, which is then served as usual rather
    /// than fetched again.
    pub(crate) fn reads_like_off(&self, file: FileId) -> bool {
        self.auto.is_some()
            && !self.auto_remote()
            && self
                .staged
                .range((file, 0)..=(file, u64::MAX))
                .next()
                .is_none()
    }
}

/// One `FileOrder` per distinct order: partitions that share a queue (work
/// stealing) share its positions rather than each holding a copy.
fn share_equal_orders(orders: Vec<Vec<FileId>>) -> Vec<Arc<FileOrder>> {
    let mut shared: Vec<Arc<FileOrder>> = Vec::with_capacity(orders.len());
    for files in orders {
        let same = shared.iter().find(|o| o.files == files).cloned();
        shared.push(same.unwrap_or_else(|| Arc::new(FileOrder::new(files))));
    }
    shared
}
