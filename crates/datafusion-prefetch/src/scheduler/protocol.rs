//! The conversation between the driver and the scheduler: the [`Event`]s the
//! driver reports and the [`Action`]s it is answered with, and the plain data
//! they carry. Nothing here decides anything.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use super::auto::AutoTuner;
use super::layout::FileLayout;
use super::requests::RequestPlan;
use crate::config::{HedgeAfter, PrefetchPolicy};

/// Index of a scan unit (a file, or a byte range of one) in the scan's file list.
pub(crate) type FileId = usize;
/// A scan partition (one output stream of the `DataSourceExec`).
pub(crate) type PartitionId = usize;

/// Identifies one background fetch (one batch of ranges of one file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FetchId(pub u64);

/// The limits the scheduler works within.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CoreConfig {
    /// The scan policy. `Off` never reaches the scheduler.
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
    /// Bytes of an upcoming file's leading row groups fetched before it is
    /// opened (`u64::MAX`: under `auto`, as much as its lead).
    pub eager_first_read_cap: u64,
    /// When a planned GET that has not answered is sent again beside itself.
    pub hedge_after: HedgeAfter,
    /// `streaming`: about how many bytes of the projected columns one slice reads.
    pub slice_target_bytes: u64,
    /// `streaming`: the least one slice reads of each column
    /// ([`MIN_COLUMN_SLICE_BYTES`](super::MIN_COLUMN_SLICE_BYTES) outside tests).
    pub slice_min_column_bytes: u64,
    /// Demand reads go to the store as planned here
    /// ([`ReadPlan::demand_requests`]: merged as object_store merges them,
    /// and under `auto` on a remote store split by what it measured), so every
    /// byte they fetch is known. Set when the scan reads through DataFusion's
    /// own reader factory, whose readers fetch data with plain store reads; a
    /// custom factory keeps its reads.
    pub owns_demand_reads: bool,
}

impl CoreConfig {
    /// The slice size `streaming` aims for: an eighth of what one stream may
    /// stage, so several slices are in flight while one decodes, between
    /// 64 KiB (fewer, larger requests) and 16 MiB (a quick first batch).
    pub(crate) fn default_slice_target(read_ahead_window: u64, memory_budget: u64) -> u64 {
        (read_ahead_window.min(memory_budget) / 8).clamp(64 << 10, 16 << 20)
    }
}

/// What happened, as the driver reports it to [`ScanCore::handle`](super::ScanCore::handle).
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// The stream of `partition` was created. DataFusion creates every stream
    /// of a plan before it polls any, so the partition's first files can be
    /// opened now rather than on its first poll.
    PartitionStarted {
        /// The partition whose stream was created.
        partition: PartitionId,
    },
    /// A decoder in `partition` opened `file` (once per reader; a file may
    /// have several readers at once).
    ReaderOpened {
        /// The file opened.
        file: FileId,
        /// The partition whose decoder opened it.
        partition: PartitionId,
    },
    /// A reader of `file` was dropped.
    ReaderClosed {
        /// The file whose reader went.
        file: FileId,
    },
    /// The footer of `file` is known.
    FooterKnown {
        /// The file.
        file: FileId,
        /// What the footer says of where its bytes are.
        layout: Arc<FileLayout>,
    },
    /// The decoders of `file` are about to start: its granularity is settled
    /// now (afterwards `ScanCore::slice_plan` says whether it is read in
    /// slices).
    DecodersStarting {
        /// The file.
        file: FileId,
    },
    /// The decoder of `file` moves on to slice `slice` of its plan.
    SliceStarted {
        /// The file.
        file: FileId,
        /// The slice's index in the file's plan.
        slice: usize,
    },
    /// The decoder of `file` came back for more bytes, `at` after the scan
    /// started: the time since it was last handed bytes went to decoding them.
    ReadStarted {
        /// The file.
        file: FileId,
        /// Time since the scan started.
        at: Duration,
    },
    /// The decoder of `file` asks for `ranges`. Answered with
    /// [`Action::Serve`] first.
    ReadAsked {
        /// The file.
        file: FileId,
        /// The byte ranges, in the decoder's order.
        ranges: Vec<Range<u64>>,
    },
    /// The decoder of `file` was handed `bytes`, `at` after the scan started.
    ReadFinished {
        /// The file.
        file: FileId,
        /// Bytes handed over.
        bytes: u64,
        /// Time since the scan started.
        at: Duration,
    },
    /// A background fetch (or the demand read a widened or retained fetch
    /// rode on) failed: its pieces are left to the decoder.
    FetchFailed {
        /// The fetch.
        id: FetchId,
    },
    /// The memory pool refused to reserve a fetch's bytes.
    PoolRefused {
        /// The fetch.
        id: FetchId,
    },
    /// The process-wide limit has no room for a fetch now: a fetch of its
    /// own stays worth fetching (ranges riding on a demand read are left to
    /// the decoder's reads), and read-ahead waits for [`Event::RoomFreed`].
    GovernorRefused {
        /// The fetch.
        id: FetchId,
    },
    /// Room was freed under the process-wide limit: read ahead again.
    RoomFreed,
    /// Other scans wait for room while this scan's consumer is idle: give
    /// back up to `bytes` of what is staged and nobody was served from,
    /// and fetch nothing more ahead until a decoder reads again.
    ShedAsked {
        /// How much is asked back.
        bytes: u64,
    },
    /// Fetch `id`'s requests went out to the store (its task started): from
    /// now its bytes count as requested, and what it wastes as waste.
    FetchSent {
        /// The fetch.
        id: FetchId,
    },
    /// A decoder's range that was to be served from fetch `id` was read on
    /// demand instead (the fetch failed, stalled or came back short): `bytes`
    /// more were fetched, and the fetch's bytes for that range never reached
    /// the decoder.
    FallbackRead {
        /// The fetch the range was planned from.
        id: FetchId,
        /// Bytes read on demand instead.
        bytes: u64,
    },
    /// A request whose largest range was `bytes` long took `took`.
    RequestTimed {
        /// Bytes of the request's largest range.
        bytes: u64,
        /// From issue to last byte.
        took: Duration,
    },
    /// A GET of `bytes` answered its first byte after `first_byte` and its
    /// last after `took`.
    TransferTimed {
        /// Bytes of the GET.
        bytes: u64,
        /// From issue to first byte.
        first_byte: Duration,
        /// From issue to last byte.
        took: Duration,
    },
    /// `auto`'s store probe has not been answered within the time any local
    /// store answers in: the store is remote.
    ProbeUnanswered,
    /// What other scans of the session have measured of the store (`auto`
    /// takes it while it has timed nothing of its own).
    StoreMeasured {
        /// Their measurements.
        measured: AutoTuner,
    },
    /// `auto`: whether its store's window of requests in flight is in a
    /// throttled spell (from a cut or a refusal until enough clean
    /// answers): requests, not bytes, are then what is scarce, so none is
    /// split.
    StoreThrottled {
        /// The spell began (`true`) or ended.
        throttled: bool,
    },
    /// The scan is over or was dropped: release everything.
    ScanEnded,
}

/// What the driver is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// The answer to [`Event::ReadAsked`]: where each range's bytes come from.
    Serve(ReadPlan),
    /// Read the footer of an upcoming file into the metadata cache.
    OpenAhead {
        /// The file to open.
        file: FileId,
        /// The partition that asked for it.
        partition: PartitionId,
    },
    /// Fetch `ranges` of `file` in the background. The bytes are already
    /// admitted against the budget; the process-wide limit and the memory
    /// pool must agree too, or the driver reports [`Event::GovernorRefused`]
    /// or [`Event::PoolRefused`].
    Fetch {
        /// The fetch's identity; reads refer to its ranges by index.
        id: FetchId,
        /// The file to read.
        file: FileId,
        /// The ranges, one per staged piece.
        ranges: Vec<Range<u64>>,
        /// The store requests to send: under `auto` merged and split by what
        /// it measured, otherwise merged as object_store's `get_ranges`
        /// merges (ranges within [`STORE_MERGE_GAP`](super::STORE_MERGE_GAP)).
        /// Their gap bytes are fetched and never decoded: counted as waste.
        requests: RequestPlan,
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
pub(crate) enum Part {
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
pub(crate) struct ReadPlan {
    /// One part per requested range, in request order.
    pub parts: Vec<Part>,
    /// Ranges to fetch now because nothing staged covers them.
    pub demand: Vec<Range<u64>>,
    /// `batched` only: extra ranges to fetch in the same request as the demand,
    /// staged under the given id (to be reserved from the pool first).
    pub widened: Option<(FetchId, Vec<Range<u64>>)>,
    /// `streaming`: demanded pages a later slice reads too (dictionary pages,
    /// pages cut by a slice boundary), kept staged under the given id once the
    /// demand read lands: `(id, positions in demand)`.
    pub retained: Option<(FetchId, Vec<usize>)>,
    /// With [`CoreConfig::owns_demand_reads`]: the store requests for the
    /// demand (and the widened ranges), planned like a background fetch.
    /// `None`: the wrapped reader fetches them, as stock.
    pub demand_requests: Option<RequestPlan>,
    /// A demanded (or widened) range that starts past the end of the file (a
    /// corrupt footer): the read fails as a store refuses such a range,
    /// without asking the store.
    pub refused: Option<Range<u64>>,
}

/// The first of `ranges` that starts at or past `size`, the end of a file:
/// a store refuses such a range (object_store's range merging can panic on
/// the answer). A range that only ends past the end is asked for: stores
/// clamp it, and a short buffer is refused later, as the decoder would.
pub(crate) fn starts_past_the_end(size: u64, ranges: &[Range<u64>]) -> Option<Range<u64>> {
    ranges.iter().find(|r| r.start >= size).cloned()
}

/// Counters the scheduler keeps; the driver publishes them as metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CoreStats {
    /// Bytes currently staged (in flight or landed, not yet released).
    pub staged_bytes: u64,
    /// The most bytes ever staged at once.
    pub peak_staged_bytes: u64,
    /// Bytes admitted for fetching ahead of the decoder.
    pub bytes_fetched_ahead: u64,
    /// Bytes handed to the decoder from staged buffers.
    pub bytes_served_from_prefetch: u64,
    /// Bytes of the store requests the scheduler knows of: background
    /// fetches and planned demand reads, gap bytes included, demand reads
    /// through the wrapped reader and reads instead of failed fetches. Once
    /// the scan is over it equals `bytes_used + bytes_wasted`.
    pub bytes_requested: u64,
    /// Fetched bytes handed to a decoder, each byte of each request once
    /// (a page several slices read counts once).
    pub bytes_used: u64,
    /// Fetched bytes no decoder was handed: staged bytes released untaken
    /// (pruned row groups and files, untaken slices, shed read-ahead, failed
    /// fetches), and the gap bytes of merged requests, ahead or on demand.
    pub bytes_wasted: u64,
    /// Fetches the process-wide limit had no room for (read-ahead waited).
    pub governor_waits: u64,
    /// Staged bytes given back because the process-wide limit asked an idle
    /// scan to (a part of `bytes_wasted`).
    pub bytes_shed: u64,
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
    /// Ranges that shared a request with a neighbour.
    pub requests_merged: u64,
    /// `auto`: requests added by splitting large ranges.
    pub requests_split: u64,
}
