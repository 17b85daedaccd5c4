//! The scan scheduler's decisions, as a deterministic state machine.
//!
//! [`ScanCore`] never performs I/O and never looks at a clock. The async driver
//! (`crate::io`) tells it what happened — a reader opened a file, a footer was
//! read, the decoder asked for byte ranges, a fetch failed, a reader closed — and
//! it answers with what to do: which ranges to serve from staged buffers, which to
//! fetch on demand, which to fetch ahead in the background, and which background
//! fetches to cancel. Every byte it stages is admitted against the per-stream
//! read-ahead window and the scan-wide memory budget first, so the budget is an
//! invariant of this type, checked by its unit tests without tokio or a store.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;

use std::time::Duration;

use super::auto::{AutoSnapshot, AutoTuner};
use super::layout::FileLayout;
use super::requests::{RequestPlan, plan_requests};
use super::slices::{SlicePlan, SliceSizing, plan_slices};
use crate::config::{FIXED_POLICY_FILE_OPEN_DEPTH, PrefetchPolicy};

/// Index of a scan unit (a file, or a byte range of one) in the scan's file list.
pub type FileId = usize;
/// A scan partition (one output stream of the `DataSourceExec`).
pub type PartitionId = usize;

/// Identifies one background fetch (one `get_ranges` call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FetchId(pub u64);

/// The limits the scheduler works within.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreConfig {
    /// The scan policy. `Off` never reaches the core.
    pub policy: PrefetchPolicy,
    /// Bytes one partition may hold fetched ahead of its decoder.
    pub read_ahead_window: u64,
    /// Bytes staged across all partitions of the scan.
    pub memory_budget: u64,
    /// How many upcoming files are opened ahead; under `auto`, the most it
    /// opens (it opens as many as its lead covers).
    pub file_open_depth: usize,
    /// `auto`: the most one stream may keep staged however far its measured
    /// lead reaches (the window when the user set one, else the stream's share
    /// of the budget). The other policies stage up to `read_ahead_window`.
    pub auto_stream_limit: u64,
    /// Bytes of an upcoming file's leading row groups fetched before it is opened.
    pub eager_first_read_cap: u64,
    /// `streaming`: about how many bytes of the projected columns one slice reads.
    pub slice_target_bytes: u64,
    /// `streaming`: the least one slice reads of each column
    /// ([`MIN_COLUMN_SLICE_BYTES`](super::MIN_COLUMN_SLICE_BYTES) outside tests).
    pub slice_min_column_bytes: u64,
}

impl CoreConfig {
    /// The slice size `streaming` aims for: an eighth of what one stream may
    /// stage, so several slices are in flight while one decodes, between
    /// 64 KiB (fewer, larger requests) and 16 MiB (a quick first batch).
    pub fn default_slice_target(read_ahead_window: u64, memory_budget: u64) -> u64 {
        (read_ahead_window.min(memory_budget) / 8).clamp(64 << 10, 16 << 20)
    }
}

/// Background work the driver must start (or stop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Read the footer of an upcoming file into the metadata cache.
    OpenAhead {
        /// The file to open.
        file: FileId,
        /// The partition that asked for it.
        partition: PartitionId,
    },
    /// Fetch `ranges` of `file` in one background request batch. The bytes are
    /// already admitted against the budget.
    Fetch {
        /// The fetch's identity; reads refer to its ranges by index.
        id: FetchId,
        /// The file to read.
        file: FileId,
        /// The ranges, one per column chunk.
        ranges: Vec<Range<u64>>,
    },
    /// The scheduler is done with this fetch: drop its buffers. When `abort`,
    /// nobody was served from it, so a request still in flight is stopped too;
    /// otherwise a reader may still be awaiting it and it must land.
    Release {
        /// The fetch to release.
        id: FetchId,
        /// Whether to stop the request if it is still in flight.
        abort: bool,
    },
}

/// Where the bytes for one requested range come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// A slice of range `index` of a staged fetch.
    Staged {
        /// The fetch holding the bytes.
        id: FetchId,
        /// Which of the fetch's ranges.
        index: usize,
        /// Offset of the requested range within that fetch range.
        offset: u64,
        /// Length of the requested range.
        len: u64,
    },
    /// Range `index` of the plan's demand fetch.
    Demand {
        /// Position in [`ReadPlan::demand`].
        index: usize,
    },
}

/// The answer to a decoder's request for byte ranges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadPlan {
    /// One part per requested range, in request order.
    pub parts: Vec<Part>,
    /// Ranges to fetch now because nothing staged covers them.
    pub demand: Vec<Range<u64>>,
    /// `batched` only: extra ranges to fetch in the same request as the demand,
    /// staged under the given id.
    pub widened: Option<(FetchId, Vec<Range<u64>>)>,
    /// `streaming`: demanded pages a later slice reads too (dictionary pages,
    /// pages cut by a slice boundary), kept staged under the given id once the
    /// demand read lands: `(id, positions in demand)`.
    pub retained: Option<(FetchId, Vec<usize>)>,
    /// Background work to start.
    pub actions: Vec<Action>,
}

/// Counters the scheduler keeps; the driver publishes them as metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreStats {
    /// Bytes currently staged (in flight or landed, not yet released).
    pub staged_bytes: u64,
    /// The most bytes ever staged at once.
    pub peak_staged_bytes: u64,
    /// Bytes admitted for fetching ahead of the decoder.
    pub bytes_fetched_ahead: u64,
    /// Bytes handed to the decoder from staged buffers.
    pub bytes_served_from_prefetch: u64,
    /// Staged bytes released without the decoder having used them.
    pub bytes_wasted: u64,
    /// Background fetches that failed or were refused memory.
    pub failed_prefetches: u64,
    /// Upcoming files whose footer was read ahead.
    pub files_opened_ahead: u64,
    /// Streams whose first file was opened when the stream was created,
    /// before it was polled (the files opened ahead of it are counted in
    /// `files_opened_ahead`).
    pub files_opened_at_start: u64,
    /// Files the decoder read at page granularity (`streaming`, offset index).
    pub files_page_granular: u64,
    /// Files the decoder read at row-group granularity.
    pub files_row_group_granular: u64,
    /// Bytes the decoder read from files at page granularity.
    pub bytes_page_granular: u64,
    /// Bytes the decoder read from files at row-group granularity.
    pub bytes_row_group_granular: u64,
    /// Slices planned over page-granular files.
    pub slices_planned: u64,
    /// Pages larger than the window or the budget: never fetched ahead, read
    /// alone by the decoder with nothing else fetched ahead behind them.
    pub oversized_pages: u64,
    /// `auto`: ranges that shared a request with a neighbour.
    pub requests_merged: u64,
    /// `auto`: requests added by splitting large ranges.
    pub requests_split: u64,
}

#[derive(Debug, Default)]
struct FileState {
    layout: Option<Arc<FileLayout>>,
    open_readers: usize,
    ever_opened: bool,
    finished: bool,
    open_ahead_requested: bool,
    /// Opened ahead when its stream was created (the stream's first file or
    /// one of the files opened ahead of it), before any decoder of the scan
    /// read: its first read goes by the projection, not by what decoders
    /// were seen to read.
    opened_at_start: bool,
    /// The partition whose window pays for this file's staged bytes.
    charged_to: PartitionId,
    /// The row group the decoder is on.
    cursor: Option<usize>,
    descending: bool,
    /// Leaf columns the decoder has asked for in this file.
    columns: BTreeSet<usize>,
    /// Chunks already demanded or served; never fetched ahead again.
    consumed: BTreeSet<(usize, usize)>,
    /// The decoder reads only some pages of its chunks (a page-index row
    /// selection) or skips row groups it was expected to read (pruning): whole
    /// chunks of later row groups would mostly be wasted, so none are fetched
    /// ahead in this file.
    unpredictable: bool,
    /// `streaming` with an offset index: the file is read slice by slice.
    slices: Option<SliceState>,
    /// Whether the file's granularity has been counted.
    counted: bool,
}

/// Where the decoders of a page-granular file are.
#[derive(Debug)]
struct SliceState {
    plan: Arc<SlicePlan>,
    /// The slice being decoded.
    cursor: Option<usize>,
    /// Pages whose read-ahead failed: left to the decoder from then on.
    given_up: BTreeSet<u64>,
    /// The decoder left staged pages untaken (page-index pruning, a filter,
    /// a dynamic filter skipping row groups): the plan over-predicts what is
    /// read, so no more of this file is fetched ahead.
    unpredictable: bool,
    /// A decoder asked for every page the plan gave its slice: the plan
    /// matches what is read. Until then only the first slice is fetched ahead,
    /// so a scan that reads pages selectively wastes one slice, not a window.
    confirmed: bool,
    /// Planned pages of the current slice its decoder has asked for.
    requested: BTreeSet<u64>,
}

/// Bytes fetched ahead for a decoder: a whole column chunk (row-group
/// granularity) or one page (`streaming`).
#[derive(Debug)]
struct StagedPiece {
    fetch: FetchId,
    index: usize,
    range: Range<u64>,
    taken: u64,
    partition: PartitionId,
    row_group: usize,
    column: usize,
    /// `streaming`: the last slice that reads these bytes.
    last_slice: Option<usize>,
}

impl StagedPiece {
    fn len(&self) -> u64 {
        self.range.end - self.range.start
    }
}

/// Something worth fetching ahead, in priority order.
#[derive(Debug, Clone)]
struct Candidate {
    file: FileId,
    /// Candidates of one file with the same group share a fetch: a row group
    /// (chunks) or a slice (pages).
    group: usize,
    range: Range<u64>,
    row_group: usize,
    column: usize,
    last_slice: Option<usize>,
    /// Read ahead for a file no decoder has opened yet.
    eager: bool,
}

/// How many of a fetch's chunks are still staged, and whether any was served.
#[derive(Debug, Default)]
struct LiveFetch {
    chunks: usize,
    served: bool,
}

/// Key of a staged piece: (file, first byte). Staged pieces never overlap.
type PieceKey = (FileId, u64);

/// The scheduler state of one scan, shared by all its partitions.
#[derive(Debug)]
pub struct ScanCore {
    config: CoreConfig,
    files: Vec<FileState>,
    /// For each partition, the order in which its work source hands out files.
    order: Vec<Vec<FileId>>,
    /// Column paths any decoder of this scan has asked for: the projection, as
    /// observed, used to predict an upcoming file's reads.
    learned_paths: BTreeSet<String>,
    /// Partitions whose first file has been opened, early or by a decoder.
    started_partitions: BTreeSet<PartitionId>,
    /// `streaming`: the top-level columns the scan reads (`None`: all), which
    /// decide the pages of a file's slices before its decoder starts.
    projection: Option<Vec<String>>,
    staged: BTreeMap<PieceKey, StagedPiece>,
    /// Oversized pages already counted.
    oversized: BTreeSet<PieceKey>,
    /// Some page-granular file was read more selectively than planned: the
    /// scan's decoders skip pages, so upcoming files are not read eagerly.
    page_selective: bool,
    /// Some decoder of this scan read every page planned for its slice: the
    /// plans of the scan's other files are trusted too (same query, same
    /// projection) until a file turns out page-selective.
    plans_confirmed: bool,
    /// The scan has a predicate: nothing is fetched on speculation.
    filtered: bool,
    live_fetches: BTreeMap<FetchId, LiveFetch>,
    partition_staged: BTreeMap<PartitionId, u64>,
    next_fetch: u64,
    /// Set when the memory pool refused a reservation; cleared when bytes are
    /// released, so read-ahead shrinks to what the pool grants.
    pool_backoff: bool,
    /// `auto`: what the scan measured, and the read-ahead it chose.
    auto: Option<AutoTuner>,
    /// `auto`: when each partition's decoder was last handed bytes, and how many.
    handed_back: BTreeMap<PartitionId, (Duration, u64)>,
    /// `auto`: the scan measured a local store (see `auto_remote`).
    auto_local: bool,
    stats: CoreStats,
}

impl ScanCore {
    /// A scheduler for `file_count` scan units, where `order[p]` lists the files
    /// partition `p` will be handed, in order.
    pub fn new(config: CoreConfig, file_count: usize, order: Vec<Vec<FileId>>) -> Self {
        Self {
            files: (0..file_count).map(|_| FileState::default()).collect(),
            order,
            learned_paths: BTreeSet::new(),
            started_partitions: BTreeSet::new(),
            projection: None,
            staged: BTreeMap::new(),
            oversized: BTreeSet::new(),
            page_selective: false,
            plans_confirmed: false,
            filtered: false,
            live_fetches: BTreeMap::new(),
            partition_staged: BTreeMap::new(),
            next_fetch: 0,
            pool_backoff: false,
            auto: (config.policy == PrefetchPolicy::Auto).then(AutoTuner::new),
            handed_back: BTreeMap::new(),
            auto_local: false,
            stats: CoreStats::default(),
            config,
        }
    }

    /// `auto`: start from `tuner`'s measurements (a session's earlier scans
    /// of the same store). Ignored by the other policies.
    pub fn with_auto_tuner(mut self, tuner: AutoTuner) -> Self {
        if self.auto.is_some() {
            self.auto = Some(tuner);
            self.note_locality();
        }
        self
    }

    /// `auto`'s measurements so far, `None` for other policies.
    pub fn auto_tuner(&self) -> Option<&AutoTuner> {
        self.auto.as_ref()
    }

    /// `streaming`: the top-level columns the scan reads (`None`: all of them).
    pub fn with_projection(mut self, projection: Option<Vec<String>>) -> Self {
        self.projection = projection;
        self
    }

    /// `streaming`: whether the scan has a predicate (statistics, page index or
    /// a row filter may narrow what its decoders read). Such a scan fetches no
    /// slice before a decoder has confirmed the plan.
    pub fn with_predicate(mut self, filtered: bool) -> Self {
        self.filtered = filtered;
        self
    }

    /// The scheduler's limits.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The counters so far.
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// Bytes staged per partition, charged against each partition's window.
    pub fn partition_staged(&self) -> Vec<(PartitionId, u64)> {
        self.partition_staged
            .iter()
            .map(|(p, b)| (*p, *b))
            .collect()
    }

    /// The layout of a file, once its footer has been read.
    pub fn layout(&self, file: FileId) -> Option<&Arc<FileLayout>> {
        self.files.get(file)?.layout.as_ref()
    }

    /// A decoder in `partition` opened `file` (called once per reader; a file may
    /// have several readers at once).
    pub fn reader_opened(&mut self, file: FileId, partition: PartitionId) -> Vec<Action> {
        self.started_partitions.insert(partition);
        let state = &mut self.files[file];
        state.open_readers += 1;
        if state.ever_opened {
            return vec![];
        }
        state.ever_opened = true;
        state.charged_to = partition;
        let mut actions = self.open_ahead_after(file, partition);
        actions.extend(self.pump());
        actions
    }

    /// The stream of `partition` was created. DataFusion creates every stream
    /// of a plan before it polls any, and polls a join's probe side only
    /// once its build side is done, so the scans of a query would otherwise
    /// pay their first round trips one after another. Open the partition's
    /// first file now, and the files its decoder would open ahead on opening
    /// it, and fetch their first reads (up to the eager cap each, within the
    /// window and budget), so those round trips overlap whatever runs before
    /// the stream is polled.
    ///
    /// Only when the scan reads ahead: under `auto`, once the store has been
    /// measured remote (before that, a local store would stage bytes for
    /// nothing).
    pub fn partition_started(&mut self, partition: PartitionId) -> Vec<Action> {
        let measured = self.auto.as_ref().is_none_or(AutoTuner::has_measured);
        if !measured
            || !self.reads_ahead()
            || self.config.file_open_depth == 0
            || !self.started_partitions.insert(partition)
        {
            return vec![];
        }
        let Some(order) = self.order.get(partition) else {
            return vec![];
        };
        let Some(first) = order.iter().copied().find(|f| {
            let state = &self.files[*f];
            !state.ever_opened && !state.open_ahead_requested && !state.finished
        }) else {
            return vec![];
        };
        let state = &mut self.files[first];
        state.open_ahead_requested = true;
        state.opened_at_start = true;
        state.charged_to = partition;
        self.stats.files_opened_at_start += 1;
        let mut actions = vec![Action::OpenAhead {
            file: first,
            partition,
        }];
        // And the files its decoder would open ahead on opening it.
        let upcoming = self.open_ahead_after(first, partition);
        for action in &upcoming {
            if let Action::OpenAhead { file, .. } = action {
                self.files[*file].opened_at_start = true;
            }
        }
        actions.extend(upcoming);
        actions.extend(self.pump());
        actions
    }

    /// A reader of `file` was dropped. When the last one goes, the file is done
    /// and whatever is still staged for it is released as waste.
    pub fn reader_closed(&mut self, file: FileId) -> Vec<Action> {
        let state = &mut self.files[file];
        state.open_readers = state.open_readers.saturating_sub(1);
        if state.open_readers > 0 {
            return vec![];
        }
        state.finished = true;
        let mut actions = self.release_where(|key, _| key.0 == file);
        actions.extend(self.pump());
        actions
    }

    /// The footer of `file` is known. Under `streaming`, a layout with page
    /// locations is cut into slices; under `auto`, one whose row groups are
    /// too large to pipeline whole.
    pub fn metadata_known(&mut self, file: FileId, layout: Arc<FileLayout>) -> Vec<Action> {
        if self.files[file].layout.is_some() {
            return vec![];
        }
        let columns = self.projected_columns(&layout);
        let slice = match self.config.policy {
            PrefetchPolicy::Auto => {
                self.slices_files() && self.row_groups_outgrow_the_window(&layout, &columns)
            }
            _ => self.slices_files(),
        };
        if slice && layout.pages.is_some() {
            let sizing = SliceSizing {
                target_bytes: self.config.slice_target_bytes,
                stage_limit: self.config.read_ahead_window.min(self.config.memory_budget),
                min_column_bytes: self.config.slice_min_column_bytes,
            };
            if let Some(plan) = plan_slices(&layout, &columns, &sizing) {
                self.stats.slices_planned += plan.slices.len() as u64;
                self.files[file].slices = Some(SliceState {
                    plan: Arc::new(plan),
                    cursor: None,
                    given_up: BTreeSet::new(),
                    unpredictable: false,
                    confirmed: false,
                    requested: BTreeSet::new(),
                });
            }
        }
        self.files[file].layout = Some(layout);
        self.pump()
    }

    /// Whether the decoders of `file` read its pages more selectively than its
    /// slice plan says: the rest of the file is better read by one decoder.
    pub fn slices_mispredicted(&self, file: FileId) -> bool {
        self.files
            .get(file)
            .and_then(|f| f.slices.as_ref())
            .is_some_and(|s| s.unpredictable)
    }

    /// The slices `file` is read in, if it is read at page granularity.
    pub fn slice_plan(&self, file: FileId) -> Option<Arc<SlicePlan>> {
        let slices = self.files.get(file)?.slices.as_ref()?;
        Some(Arc::clone(&slices.plan))
    }

    /// The slices `file`'s decoders will read, decided now that they start:
    /// under `auto`, a file planned in slices while the store was assumed
    /// remote is read whole once it measured local — its slice plan and any
    /// pages staged for it are dropped, so the core predicts what the decoder
    /// really asks for.
    pub fn slices_for_reading(&mut self, file: FileId) -> (Option<Arc<SlicePlan>>, Vec<Action>) {
        if self.slices_files() {
            return (self.slice_plan(file), vec![]);
        }
        if self
            .files
            .get_mut(file)
            .and_then(|f| f.slices.take())
            .is_none()
        {
            return (None, vec![]);
        }
        let actions = self.release_where(|key, piece| key.0 == file && piece.last_slice.is_some());
        (None, actions)
    }

    /// The decoder of `file` moves on to slice `slice`: the pages no later slice
    /// reads are released, and read-ahead moves along.
    pub fn slice_started(&mut self, file: FileId, slice: usize) -> Vec<Action> {
        let Some(state) = self.files[file].slices.as_mut() else {
            return vec![];
        };
        state.cursor = Some(slice);
        state.requested.clear();
        let passed = |f: FileId, piece: &StagedPiece| {
            f == file && piece.last_slice.is_some_and(|last| last < slice)
        };
        let left_untaken = self
            .staged
            .iter()
            .any(|(&(f, _), piece)| passed(f, piece) && piece.taken < piece.len());
        if left_untaken {
            if let Some(state) = self.files[file].slices.as_mut() {
                state.unpredictable = true;
            }
            self.page_selective = true;
        }
        let mut actions = self.release_where(|&(f, _), piece| passed(f, piece));
        actions.extend(self.pump());
        actions
    }

    /// The decoder reading `file` asks for `ranges`: decide which staged buffers
    /// serve them, what must be fetched now, and what to fetch ahead.
    pub fn plan_read(&mut self, file: FileId, ranges: &[Range<u64>]) -> ReadPlan {
        let mut plan = ReadPlan::default();
        let layout = self.files[file].layout.clone();
        let page_granular = self.files[file].slices.is_some();
        let requested: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let state = &mut self.files[file];
        if !state.counted {
            state.counted = true;
            if page_granular {
                self.stats.files_page_granular += 1;
            } else {
                self.stats.files_row_group_granular += 1;
            }
        }
        if page_granular {
            self.stats.bytes_page_granular += requested;
        } else {
            self.stats.bytes_row_group_granular += requested;
        }
        for range in ranges {
            let located = layout.as_ref().and_then(|l| l.locate(range));
            if let (Some((row_group, column)), Some(layout)) = (located, layout.as_ref()) {
                self.learned_paths
                    .insert(layout.column_paths[column].clone());
                if !page_granular {
                    self.track_chunk_cursor(file, layout, range, row_group, column);
                }
            }
            let found = self.staged_containing(file, range);
            match found {
                Some(key) => {
                    let piece = self.staged.get_mut(&key).expect("key from staged");
                    let len = range.end - range.start;
                    piece.taken += len;
                    self.stats.bytes_served_from_prefetch += len;
                    if let Some(fetch) = self.live_fetches.get_mut(&piece.fetch) {
                        fetch.served = true;
                    }
                    plan.parts.push(Part::Staged {
                        id: piece.fetch,
                        index: piece.index,
                        offset: range.start - piece.range.start,
                        len,
                    });
                }
                None => {
                    plan.parts.push(Part::Demand {
                        index: plan.demand.len(),
                    });
                    plan.demand.push(range.clone());
                }
            }
        }

        if let Some(slices) = self.files[file].slices.as_mut()
            && let Some(cursor) = slices.cursor
            && !slices.confirmed
        {
            let planned = slices
                .plan
                .pieces
                .get(cursor)
                .map_or(&[][..], Vec::as_slice);
            for range in ranges {
                if planned.iter().any(|p| p.bytes == *range) {
                    slices.requested.insert(range.start);
                }
            }
            slices.confirmed = !planned.is_empty()
                && planned
                    .iter()
                    .all(|p| slices.requested.contains(&p.bytes.start));
            self.plans_confirmed |= slices.confirmed;
        }

        // Release what the decoder has fully taken or moved past.
        let state = &self.files[file];
        let (cursor, descending) = (state.cursor, state.descending);
        let slice_cursor = state.slices.as_ref().and_then(|s| s.cursor);
        plan.actions.extend(self.release_where(|&(f, _), piece| {
            if f != file {
                return false;
            }
            let taken = piece.taken >= piece.len();
            match piece.last_slice {
                Some(last) => taken && slice_cursor.is_some_and(|c| c >= last),
                None => {
                    taken
                        || cursor.is_some_and(|c| {
                            if descending {
                                piece.row_group > c
                            } else {
                                piece.row_group < c
                            }
                        })
                }
            }
        }));

        plan.retained = self.retain_shared_pages(file, &plan.demand);

        match self.config.policy {
            // Batched only widens a request that is being made anyway.
            PrefetchPolicy::Batched if !plan.demand.is_empty() => {
                let candidates = self.row_groups_ahead(file);
                if let Some(Action::Fetch { id, ranges, .. }) = self.admit(candidates, true).pop() {
                    plan.widened = Some((id, ranges));
                }
            }
            PrefetchPolicy::Pipelined | PrefetchPolicy::Streaming | PrefetchPolicy::Auto => {
                plan.actions.extend(self.pump())
            }
            PrefetchPolicy::Batched | PrefetchPolicy::Off => {}
        }
        plan
    }

    /// Demanded pages of the current slice that a later slice reads too: stage
    /// them from the demand read (within the window and budget) so the next
    /// slices do not fetch them again — or, via the store's range merging,
    /// everything between a dictionary page and their own pages.
    fn retain_shared_pages(
        &mut self,
        file: FileId,
        demand: &[Range<u64>],
    ) -> Option<(FetchId, Vec<usize>)> {
        let slices = self.files[file].slices.as_ref()?;
        let cursor = slices.cursor?;
        let planned = slices.plan.pieces.get(cursor)?;
        let row_group = slices.plan.slices[cursor].row_group;
        let shared: Vec<(usize, usize, usize)> = demand
            .iter()
            .enumerate()
            .filter_map(|(position, range)| {
                let piece = planned
                    .iter()
                    .find(|p| p.bytes == *range && p.last_slice > cursor)?;
                Some((position, piece.column, piece.last_slice))
            })
            .collect();
        if shared.is_empty() {
            return None;
        }
        let partition = self.files[file].charged_to;
        let id = FetchId(self.next_fetch);
        let mut kept = vec![];
        for (position, column, last_slice) in shared {
            let range = demand[position].clone();
            let len = range.end - range.start;
            let partition_staged = self.partition_staged.get(&partition).copied().unwrap_or(0);
            if self.staged.contains_key(&(file, range.start))
                || self.stats.staged_bytes + len > self.config.memory_budget
                || partition_staged + len > self.stream_limit()
            {
                continue;
            }
            let piece = StagedPiece {
                fetch: id,
                index: kept.len(),
                range: range.clone(),
                // The demand read that stages it also serves it.
                taken: len,
                partition,
                row_group,
                column,
                last_slice: Some(last_slice),
            };
            self.stage(file, piece);
            if let Some(fetch) = self.live_fetches.get_mut(&id) {
                fetch.served = true;
            }
            self.stats.bytes_served_from_prefetch += len;
            kept.push(position);
        }
        if kept.is_empty() {
            return None;
        }
        self.next_fetch += 1;
        Some((id, kept))
    }

    /// The staged piece of `file` that holds all of `range`, if any.
    fn staged_containing(&self, file: FileId, range: &Range<u64>) -> Option<PieceKey> {
        let (key, piece) = self.staged.range(..=(file, range.start)).next_back()?;
        (key.0 == file && piece.range.start <= range.start && range.end <= piece.range.end)
            .then_some(*key)
    }

    /// Row-group granularity: follow the decoder from chunk to chunk, and notice
    /// when it reads pages only or skips row groups (then stop predicting).
    fn track_chunk_cursor(
        &mut self,
        file: FileId,
        layout: &FileLayout,
        range: &Range<u64>,
        row_group: usize,
        column: usize,
    ) {
        let state = &mut self.files[file];
        if let Some(cursor) = state.cursor
            && cursor != row_group
        {
            let descending = row_group < cursor;
            let (low, high) = (cursor.min(row_group), cursor.max(row_group));
            state.unpredictable |= layout
                .scanned_row_groups
                .iter()
                .any(|rg| low < *rg && *rg < high);
            state.descending = descending;
        }
        if layout
            .chunk(row_group, column)
            .is_some_and(|chunk| *range != chunk)
        {
            state.unpredictable = true;
        }
        state.cursor = Some(row_group);
        state.columns.insert(column);
        state.consumed.insert((row_group, column));
    }

    /// A background fetch failed: forget its chunks (the decoder will demand them).
    pub fn fetch_failed(&mut self, id: FetchId) -> Vec<Action> {
        self.stats.failed_prefetches += 1;
        self.drop_fetch(id);
        self.pump()
    }

    /// The memory pool refused to reserve a fetch's bytes: forget it and stop
    /// reading ahead until something is released.
    pub fn pool_refused(&mut self, id: FetchId) {
        self.stats.failed_prefetches += 1;
        self.drop_fetch(id);
        self.pool_backoff = true;
    }

    /// `auto`: whether the largest scanned row group's projected chunks take
    /// more than a quarter of what one stream may stage. Smaller row groups
    /// pipeline whole — several are in flight while one decodes, and one
    /// decoder per row group costs less than one per slice; larger ones would
    /// leave the decoder waiting for a whole row group and hold it in memory.
    fn row_groups_outgrow_the_window(&self, layout: &FileLayout, columns: &[usize]) -> bool {
        let limit = self.config.read_ahead_window.min(self.config.memory_budget);
        let largest = layout
            .scanned_row_groups
            .iter()
            .map(|&rg| layout.row_group_bytes(rg, columns))
            .max()
            .unwrap_or(0);
        largest > limit / 4
    }

    /// Whether files with an offset index are read slice by slice: always
    /// under `streaming`; under `auto` when the store is remote, where slices
    /// let decoding start before a row group has landed (on a local store the
    /// per-slice decoder setup would cost more than it saves).
    pub fn slices_files(&self) -> bool {
        match self.config.policy {
            PrefetchPolicy::Streaming => true,
            PrefetchPolicy::Auto => self.auto_remote(),
            _ => false,
        }
    }

    /// Whether the scan fetches ahead and opens files ahead now.
    fn reads_ahead(&self) -> bool {
        match &self.auto {
            Some(_) => self.auto_remote(),
            None => self.config.policy.reads_ahead(),
        }
    }

    /// Bytes one partition may keep staged beyond its next unit: `auto`'s
    /// lead, the window for the other policies.
    fn lead_limit(&self) -> u64 {
        match &self.auto {
            Some(tuner) => tuner.lead_bytes().min(self.stream_limit()),
            None => u64::MAX,
        }
    }

    /// Bytes one partition may hold staged: `auto`'s ceiling, the window for
    /// the other policies. (Slices are still sized by the window.)
    fn stream_limit(&self) -> u64 {
        match &self.auto {
            Some(_) => self.config.auto_stream_limit,
            None => self.config.read_ahead_window,
        }
    }

    /// How many upcoming files to open ahead of `file`: the configured depth,
    /// or under `auto` as many as its lead covers at the size of the files
    /// seen so far, from the fixed policies' depth up to the configured one.
    fn open_depth(&self, file: FileId) -> usize {
        let cap = self.config.file_open_depth;
        if self.auto.is_none() {
            return cap;
        }
        let least = FIXED_POLICY_FILE_OPEN_DEPTH.min(cap);
        // Without eager reads an opened-ahead file holds only its footer:
        // nothing of the lead to cover.
        if self.config.eager_first_read_cap == 0 {
            return least;
        }
        let per_file = self
            .bytes_per_file(file)
            .unwrap_or(self.config.eager_first_read_cap)
            .max(1);
        let wanted = self.lead_limit().div_ceil(per_file);
        usize::try_from(wanted)
            .unwrap_or(usize::MAX)
            .clamp(least, cap)
    }

    /// What the decoder reads of `file` (its footer known), or else of the
    /// first file whose footer is: the projected bytes of its scanned row
    /// groups, at most what an upcoming file gets read eagerly.
    fn bytes_per_file(&self, file: FileId) -> Option<u64> {
        let known = std::iter::once(file)
            .chain(0..self.files.len())
            .find_map(|f| self.files[f].layout.as_ref())?;
        let columns = self.projected_columns(known);
        let bytes: u64 = known
            .scanned_row_groups
            .iter()
            .map(|&rg| known.row_group_bytes(rg, &columns))
            .sum();
        Some(bytes.min(self.config.eager_first_read_cap))
    }

    /// The leaf columns of `layout` the scan projects (all without a projection).
    fn projected_columns(&self, layout: &FileLayout) -> Vec<usize> {
        match &self.projection {
            Some(roots) => layout.leaves_of(roots),
            None => (0..layout.column_paths.len()).collect(),
        }
    }

    /// `auto` on a store it measured local: decoders read exactly as without
    /// prefetching, and the driver skips the core for their reads of `file` —
    /// unless something was fetched ahead for it before the store was
    /// measured, which is then served as usual rather than fetched again.
    pub fn reads_like_off(&self, file: FileId) -> bool {
        self.auto.is_some()
            && !self.auto_remote()
            && self
                .staged
                .range((file, 0)..=(file, u64::MAX))
                .next()
                .is_none()
    }

    /// `auto`: whether this scan treats its store as remote. Once it has
    /// measured a local store it stays local for the rest of the scan: reads
    /// that then queue behind a busy machine are not round trips, and reads
    /// the decoders made without the core must not be fetched again.
    fn auto_remote(&self) -> bool {
        !self.auto_local && self.auto.as_ref().is_some_and(AutoTuner::remote)
    }

    /// Latch a local measurement for the rest of the scan.
    fn note_locality(&mut self) {
        if let Some(tuner) = &self.auto
            && tuner.has_measured()
            && !tuner.remote()
        {
            self.auto_local = true;
        }
    }

    /// `auto` has timed no request yet: the driver should time one before
    /// deciding a file's granularity.
    pub fn wants_probe(&self) -> bool {
        self.auto.as_ref().is_some_and(|t| !t.has_measured())
    }

    /// `auto`, before this scan has timed a request: start from what other
    /// scans have measured of the store since this one was created (the scans
    /// of one query are all created before any of them reads), so it needs
    /// no probe of its own.
    pub fn adopt_store_measurements(&mut self, measured: &AutoTuner) {
        if let Some(tuner) = self.auto.as_mut() {
            tuner.adopt_store_measurements(measured);
            self.note_locality();
        }
    }

    /// `auto`: a request whose largest range was `bytes` long took `took`.
    pub fn observe_request(&mut self, bytes: u64, took: Duration) {
        if let Some(tuner) = self.auto.as_mut() {
            tuner.observe_request(bytes, took);
        }
        self.note_locality();
    }

    /// `auto`: a GET of `bytes` answered its first byte after `first_byte`
    /// and its last after `took`.
    pub fn observe_transfer(&mut self, bytes: u64, first_byte: Duration, took: Duration) {
        if let Some(tuner) = self.auto.as_mut() {
            tuner.observe_transfer(bytes, first_byte, took);
        }
        self.note_locality();
    }

    /// `auto`: the decoder of `file` asks for bytes at `at` (time since the
    /// scan started). The time since its partition was last handed bytes was
    /// spent decoding them and waiting for the consumer: a decode-rate sample.
    pub fn read_started(&mut self, file: FileId, at: Duration) {
        let partition = self.files[file].charged_to;
        if let (Some(tuner), Some((handed_at, bytes))) =
            (self.auto.as_mut(), self.handed_back.remove(&partition))
        {
            tuner.observe_decode(bytes, at.saturating_sub(handed_at));
        }
    }

    /// `auto`: the decoder of `file` was handed `bytes` at `at`.
    pub fn read_finished(&mut self, file: FileId, bytes: u64, at: Duration) {
        if self.auto.is_some() {
            let partition = self.files[file].charged_to;
            self.handed_back.insert(partition, (at, bytes));
        }
    }

    /// `auto`: what the scan has measured and chose, `None` for other policies.
    pub fn auto_snapshot(&self) -> Option<AutoSnapshot> {
        let mut snapshot = self.auto.as_ref()?.snapshot();
        snapshot.remote = self.auto_remote();
        if !snapshot.remote {
            snapshot.lead_bytes = 0;
        }
        Some(snapshot)
    }

    /// The store requests for a decoder's demand read of `ranges`: under
    /// `auto` on a remote store, planned like a background fetch; `None`
    /// (the wrapped reader fetches them, as stock) otherwise.
    pub fn demand_request_plan(&mut self, ranges: &[Range<u64>]) -> Option<RequestPlan> {
        if !self.auto_remote() {
            return None;
        }
        self.request_plan(ranges)
    }

    /// The store requests for a background fetch of `ranges`: under `auto`,
    /// merged and split by the measured round trip and bandwidth; otherwise
    /// `None` (the store's own `get_ranges` plans them).
    pub fn request_plan(&mut self, ranges: &[Range<u64>]) -> Option<RequestPlan> {
        let tuner = self.auto.as_ref()?;
        let plan = plan_requests(ranges, tuner.merge_gap(), |len| tuner.split_bytes(len));
        self.stats.requests_merged += plan.merged;
        self.stats.requests_split += plan.split;
        Some(plan)
    }

    /// Release everything (the scan is over or was dropped).
    pub fn shutdown(&mut self) -> Vec<Action> {
        for state in &mut self.files {
            state.finished = true;
        }
        self.release_where(|_, _| true)
    }

    fn drop_fetch(&mut self, id: FetchId) {
        let keys: Vec<PieceKey> = self
            .staged
            .iter()
            .filter(|(_, c)| c.fetch == id)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let piece = self.staged.remove(&key).expect("key from staged");
            self.unstage(&piece);
            self.stats.bytes_fetched_ahead -= piece.len();
            // Let the decoder's demand read fetch it rather than trying again.
            let state = &mut self.files[key.0];
            match state.slices.as_mut() {
                Some(slices) => {
                    slices.given_up.insert(piece.range.start);
                }
                None => {
                    state.consumed.insert((piece.row_group, piece.column));
                }
            }
        }
        self.live_fetches.remove(&id);
    }

    /// Mark the `depth` files after `file` in `partition`'s order for opening ahead.
    fn open_ahead_after(&mut self, file: FileId, partition: PartitionId) -> Vec<Action> {
        if !self.reads_ahead() || self.config.file_open_depth == 0 {
            return vec![];
        }
        let Some(order) = self.order.get(partition) else {
            return vec![];
        };
        let Some(position) = order.iter().position(|f| *f == file) else {
            return vec![];
        };
        let upcoming: Vec<FileId> = order[position + 1..]
            .iter()
            .copied()
            .filter(|f| !self.files[*f].ever_opened)
            .take(self.open_depth(file))
            .collect();
        let mut actions = vec![];
        for next in upcoming {
            let state = &mut self.files[next];
            if !state.open_ahead_requested {
                state.open_ahead_requested = true;
                state.charged_to = partition;
                self.stats.files_opened_ahead += 1;
                actions.push(Action::OpenAhead {
                    file: next,
                    partition,
                });
            }
        }
        actions
    }

    /// Column chunks of the row groups after the cursor of an open `file`, in
    /// decode order, for the columns its decoder has read.
    fn row_groups_ahead(&self, file: FileId) -> Vec<Candidate> {
        let state = &self.files[file];
        let (Some(layout), Some(cursor)) = (&state.layout, state.cursor) else {
            return vec![];
        };
        if state.unpredictable {
            return vec![];
        }
        let mut upcoming: Vec<usize> = layout
            .scanned_row_groups
            .iter()
            .copied()
            .filter(|rg| {
                if state.descending {
                    *rg < cursor
                } else {
                    *rg > cursor
                }
            })
            .collect();
        if state.descending {
            upcoming.reverse();
        }
        let columns: Vec<usize> = state.columns.iter().copied().collect();
        self.chunks_of(file, layout, &upcoming, &columns, u64::MAX)
    }

    /// The leading scanned row groups of a file the decoder has not started, for
    /// the columns this scan has been seen to read (before any decoder has
    /// read, for a file opened at its stream's start: the projected ones), up
    /// to `cap` bytes: the first row group, and the next ones while they fit,
    /// so a file of several small row groups does not cost a round trip per
    /// row group once it opens.
    fn leading_row_groups(&self, file: FileId, cap: u64) -> Vec<Candidate> {
        let state = &self.files[file];
        let Some(layout) = &state.layout else {
            return vec![];
        };
        let columns: Vec<usize> =
            if self.learned_paths.is_empty() && state.opened_at_start && !state.ever_opened {
                self.projected_columns(layout)
            } else {
                self.learned_paths
                    .iter()
                    .filter_map(|p| layout.column_index(p))
                    .collect()
            };
        self.chunks_of(file, layout, &layout.scanned_row_groups, &columns, cap)
    }

    fn chunks_of(
        &self,
        file: FileId,
        layout: &FileLayout,
        row_groups: &[usize],
        columns: &[usize],
        cap: u64,
    ) -> Vec<Candidate> {
        let state = &self.files[file];
        let mut total = 0u64;
        let mut out = vec![];
        for &rg in row_groups {
            for &col in columns {
                if state.consumed.contains(&(rg, col)) {
                    continue;
                }
                let Some(range) = layout.chunk(rg, col) else {
                    continue;
                };
                let len = range.end - range.start;
                if let Some(chunk) = self.staged.get(&(file, range.start)) {
                    total += chunk.len();
                    continue;
                }
                if len == 0 {
                    continue;
                }
                if total + len > cap {
                    return out;
                }
                total += len;
                out.push(Candidate {
                    file,
                    group: rg,
                    range,
                    row_group: rg,
                    column: col,
                    last_slice: None,
                    eager: false,
                });
            }
        }
        out
    }

    /// The pages of `file`'s slices from `first` on, in decode order, up to
    /// `cap` bytes (what is staged already counts).
    fn slices_ahead(&self, file: FileId, first: usize, cap: u64) -> Vec<Candidate> {
        let Some(slices) = self.files[file].slices.as_ref() else {
            return vec![];
        };
        if slices.unpredictable {
            return vec![];
        }
        let plan = &slices.plan;
        let trusted = slices.confirmed || (self.plans_confirmed && !self.page_selective);
        // A file opened at its stream's start gets its first slice even under
        // a predicate: one small slice of speculation hides the scan's first
        // round trip.
        let last = if trusted {
            plan.slices.len()
        } else if self.filtered && !self.files[file].opened_at_start {
            0
        } else {
            1.min(plan.slices.len())
        };
        let mut seen = BTreeSet::new();
        let mut total = 0u64;
        let mut out = vec![];
        for slice in first..last {
            let row_group = plan.slices[slice].row_group;
            for piece in &plan.pieces[slice] {
                let start = piece.bytes.start;
                if !seen.insert(start) || slices.given_up.contains(&start) {
                    continue;
                }
                let len = piece.bytes.end - piece.bytes.start;
                if self.staged.contains_key(&(file, start)) {
                    total += len;
                    continue;
                }
                if total + len > cap {
                    return out;
                }
                total += len;
                out.push(Candidate {
                    file,
                    group: slice,
                    range: piece.bytes.clone(),
                    row_group,
                    column: piece.column,
                    last_slice: Some(piece.last_slice),
                    eager: false,
                });
            }
        }
        out
    }

    /// Everything worth fetching ahead now, in priority order, admitted against
    /// the window and the budget (`pipelined` and `streaming`).
    fn pump(&mut self) -> Vec<Action> {
        if !self.reads_ahead() || self.pool_backoff {
            return vec![];
        }
        let mut candidates = vec![];
        // Open files first: their decoders will ask soonest.
        for file in 0..self.files.len() {
            let state = &self.files[file];
            if state.open_readers == 0 || state.finished {
                continue;
            }
            if let Some(slices) = &state.slices {
                // The slice being decoded has asked for its pages already.
                let next = slices.cursor.map_or(0, |c| c + 1);
                candidates.extend(self.slices_ahead(file, next, u64::MAX));
            } else if state.cursor.is_some() {
                candidates.extend(self.row_groups_ahead(file));
            } else {
                candidates.extend(self.leading_row_groups(file, u64::MAX));
            }
        }
        // Then upcoming files, in the order they were asked for — once every
        // open file's footer is known, so they never take the window first.
        let open_files_known = self
            .files
            .iter()
            .all(|s| s.open_readers == 0 || s.finished || s.layout.is_some());
        if self.config.eager_first_read_cap > 0 && open_files_known {
            let cap = self.config.eager_first_read_cap;
            // In each partition's decode order, and only up to the first file
            // whose footer is still unknown: footers land in any order, and a
            // later file admitted first would take the room of the file its
            // decoder needs next.
            let mut seen = BTreeSet::new();
            for order in &self.order {
                for &file in order {
                    let state = &self.files[file];
                    if !state.open_ahead_requested || state.ever_opened || state.finished {
                        continue;
                    }
                    if state.layout.is_none() {
                        break;
                    }
                    if !seen.insert(file) {
                        continue;
                    }
                    let eager = if let Some(slices) = &state.slices {
                        if self.page_selective {
                            continue;
                        }
                        // The first slice: enough to start decoding at once;
                        // more, up to the cap, once the scan's plans proved right.
                        let first = if self.plans_confirmed {
                            cap
                        } else {
                            slices.plan.slice_bytes(0).min(cap)
                        };
                        self.slices_ahead(file, 0, first)
                    } else if !self.learned_paths.is_empty() || state.opened_at_start {
                        self.leading_row_groups(file, cap)
                    } else {
                        vec![]
                    };
                    candidates.extend(eager.into_iter().map(|c| Candidate { eager: true, ..c }));
                }
            }
        }
        self.admit(candidates, false)
    }

    /// Admit candidates in order while they fit, grouping each (file, group)
    /// into one fetch, or everything into one fetch when `single_fetch`. A
    /// partition's read-ahead stops at its first piece that does not fit its
    /// window now, so it stays in decode order — without holding up the other
    /// partitions, whose windows are their own (a partition stuck on a stalled
    /// request must not stop everyone's read-ahead). All of it stops at the
    /// first piece over the scan's budget. A chunk that can never fit is
    /// skipped (the decoder reads it); a page that can never fit stops its
    /// partition's read-ahead, so it is read alone.
    fn admit(&mut self, candidates: Vec<Candidate>, single_fetch: bool) -> Vec<Action> {
        let mut fetches: Vec<(FetchId, FileId, usize, Vec<Range<u64>>)> = vec![];
        let stream_limit = self.stream_limit();
        let limit = stream_limit.min(self.config.memory_budget);
        // A slice is admitted whole when it can ever fit, so it is one request.
        let mut slice_bytes: BTreeMap<(FileId, usize), u64> = BTreeMap::new();
        for c in candidates.iter().filter(|c| c.last_slice.is_some()) {
            *slice_bytes.entry((c.file, c.group)).or_default() += c.range.end - c.range.start;
        }
        let mut admitted_slice = None;
        let lead = self.lead_limit();
        let mut full: BTreeSet<PartitionId> = BTreeSet::new();
        for candidate in candidates {
            let Candidate {
                file,
                group,
                range,
                row_group,
                column,
                last_slice,
                eager: candidate_eager,
            } = candidate;
            let len = range.end - range.start;
            let partition = self.files[file].charged_to;
            if full.contains(&partition) {
                continue;
            }
            // Staged pieces are keyed by where they start: a corrupt footer can
            // give two chunks the same start, and staging both would count
            // bytes the map no longer holds (found by the `scan_core` fuzz target).
            if self.staged.contains_key(&(file, range.start)) {
                continue;
            }
            if len > limit {
                if last_slice.is_none() {
                    continue;
                }
                if self.oversized.insert((file, range.start)) {
                    self.stats.oversized_pages += 1;
                }
                full.insert(partition);
                continue;
            }
            let partition_staged = self.partition_staged.get(&partition).copied().unwrap_or(0);
            // The first piece of a slice stands for the whole slice.
            let wanted = match slice_bytes.get(&(file, group)) {
                Some(&total) if last_slice.is_some() && admitted_slice != Some((file, group)) => {
                    admitted_slice = Some((file, group));
                    if total <= limit { total } else { len }
                }
                _ => len,
            };
            // `wanted` is never less than `len`.
            if self.stats.staged_bytes + wanted > self.config.memory_budget {
                break;
            }
            // Slices of files not opened yet get at most half the window, so
            // the file being decoded always has room to read ahead.
            if (candidate_eager
                && last_slice.is_some()
                && partition_staged + wanted > stream_limit / 2)
                || partition_staged + wanted > stream_limit
                // `auto` keeps only its measured lead ahead, but always the
                // next unit: a stream with nothing staged would otherwise
                // wait a round trip per unit.
                || (partition_staged > 0 && partition_staged + wanted > lead)
            {
                full.insert(partition);
                continue;
            }
            let id = match fetches.last() {
                Some((id, f, g, _)) if *f == file && (single_fetch || *g == group) => *id,
                _ => {
                    let id = FetchId(self.next_fetch);
                    self.next_fetch += 1;
                    fetches.push((id, file, group, vec![]));
                    id
                }
            };
            let ranges = &mut fetches.last_mut().expect("just pushed").3;
            let piece = StagedPiece {
                fetch: id,
                index: ranges.len(),
                range: range.clone(),
                taken: 0,
                partition,
                row_group,
                column,
                last_slice,
            };
            ranges.push(range);
            self.stage(file, piece);
        }
        fetches
            .into_iter()
            .map(|(id, file, _, ranges)| Action::Fetch { id, file, ranges })
            .collect()
    }

    /// Count `piece` (already admitted) as staged for `file`'s decoder.
    fn stage(&mut self, file: FileId, piece: StagedPiece) {
        let len = piece.len();
        self.live_fetches.entry(piece.fetch).or_default().chunks += 1;
        *self.partition_staged.entry(piece.partition).or_default() += len;
        self.stats.staged_bytes += len;
        self.stats.bytes_fetched_ahead += len;
        self.stats.peak_staged_bytes = self.stats.peak_staged_bytes.max(self.stats.staged_bytes);
        self.staged.insert((file, piece.range.start), piece);
    }

    fn release_where(
        &mut self,
        mut predicate: impl FnMut(&PieceKey, &StagedPiece) -> bool,
    ) -> Vec<Action> {
        let keys: Vec<PieceKey> = self
            .staged
            .iter()
            .filter(|(k, piece)| predicate(k, piece))
            .map(|(k, _)| *k)
            .collect();
        let mut actions = vec![];
        for key in keys {
            let chunk = self.staged.remove(&key).expect("key from staged");
            self.stats.bytes_wasted += chunk.len().saturating_sub(chunk.taken);
            self.unstage(&chunk);
            let live = self.live_fetches.get_mut(&chunk.fetch).expect("live fetch");
            live.chunks -= 1;
            if live.chunks == 0 {
                let abort = !live.served;
                self.live_fetches.remove(&chunk.fetch);
                actions.push(Action::Release {
                    id: chunk.fetch,
                    abort,
                });
            }
        }
        actions
    }

    fn unstage(&mut self, chunk: &StagedPiece) {
        let len = chunk.len();
        self.stats.staged_bytes -= len;
        if let Some(p) = self.partition_staged.get_mut(&chunk.partition) {
            *p -= len;
        }
        self.pool_backoff = false;
    }
}
