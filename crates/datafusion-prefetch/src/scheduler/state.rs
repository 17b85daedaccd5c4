//! What the scheduler remembers: per file, per staged piece and per fetch,
//! with the conditions that change over a scan as enums naming where each is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use super::auto::AutoTuner;
use super::layout::FileLayout;
use super::protocol::{FetchId, FileId, PartitionId};
use super::slices::SlicePlan;

/// Where a file is in the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Progress {
    /// No decoder has opened it yet.
    #[default]
    Upcoming,
    /// A decoder opened it; its readers come and go.
    Decoding,
    /// Its last reader closed, or the scan ended: nothing is staged for it.
    Done,
}

/// How a file came to be opened before a decoder got to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum OpenedAhead {
    /// It was not.
    #[default]
    No,
    /// Its footer was read ahead when an earlier file of its partition opened.
    Requested,
    /// Its footer was read ahead when its stream was created (the stream's
    /// first file, or one opened ahead of it), before any decoder of the scan
    /// read: its first read goes by the projection, not by what decoders
    /// were seen to read, and it gets a first slice even under a predicate.
    AtStreamStart,
}

/// How a file's decoders read it.
#[derive(Debug)]
pub(super) enum Reading {
    /// Whole column chunks, row group by row group.
    RowGroups(RowGroupTrack),
    /// Slice by slice (`streaming`, or `auto` on a remote store), with an
    /// offset index.
    Slices(SliceState),
}

impl Default for Reading {
    fn default() -> Self {
        Self::RowGroups(RowGroupTrack::default())
    }
}

/// The direction a decoder walks a file's row groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Direction {
    /// First row group first.
    #[default]
    Forward,
    /// Last row group first (a scan that reverses row groups).
    Backward,
}

/// Whether the chunks a decoder reads next can be predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Prediction {
    /// The decoder reads whole chunks of consecutive scanned row groups.
    #[default]
    Holds,
    /// The decoder reads only some pages of its chunks (a page-index row
    /// selection) or skipped row groups it was expected to read (pruning):
    /// whole chunks of later row groups would mostly be wasted, so none are
    /// fetched ahead in this file.
    Failed,
}

/// Where the decoder of a file read by row groups is.
#[derive(Debug, Default)]
pub(super) struct RowGroupTrack {
    /// The row group the decoder is on.
    pub cursor: Option<usize>,
    /// Which way it walks.
    pub direction: Direction,
    /// Leaf columns the decoder has asked for in this file.
    pub columns: BTreeSet<usize>,
    /// Chunks already demanded or served; never fetched ahead again.
    pub consumed: BTreeSet<(usize, usize)>,
    /// Whether its next reads can be predicted.
    pub prediction: Prediction,
}

/// How far a file's slice plan can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum PlanTrust {
    /// No decoder has yet asked for every page the plan gave its slice: only
    /// the first slice is fetched ahead, so a scan that reads pages
    /// selectively wastes one slice, not a window.
    #[default]
    Unconfirmed,
    /// A decoder asked for every page the plan gave its slice.
    Confirmed,
    /// A decoder left staged pages untaken (page-index pruning, a filter, a
    /// dynamic filter skipping row groups): the plan over-predicts what is
    /// read, so no more of this file is fetched ahead, and one decoder reads
    /// the rest of it.
    Mispredicted,
}

/// Where the decoders of a file read slice by slice are.
#[derive(Debug)]
pub(super) struct SliceState {
    /// The file's slices.
    pub plan: Arc<SlicePlan>,
    /// The slice being decoded.
    pub cursor: Option<usize>,
    /// Pages whose read-ahead failed: left to the decoder from then on.
    pub given_up: BTreeSet<u64>,
    /// How far the plan can be trusted.
    pub trust: PlanTrust,
    /// Planned pages of the current slice its decoder has asked for.
    pub requested: BTreeSet<u64>,
}

impl SliceState {
    pub(super) fn new(plan: SlicePlan) -> Self {
        Self {
            plan: Arc::new(plan),
            cursor: None,
            given_up: BTreeSet::new(),
            trust: PlanTrust::Unconfirmed,
            requested: BTreeSet::new(),
        }
    }
}

/// How far the slice plans of the scan as a whole can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum SlicePlans {
    /// No file's plan is confirmed yet.
    #[default]
    Unproven,
    /// Some decoder read every page planned for its slice: the plans of the
    /// scan's other files are trusted too (same query, same projection).
    Confirmed,
    /// Some file was read more selectively than planned: the scan's decoders
    /// skip pages, so upcoming files are not read eagerly. Final.
    PageSelective,
}

impl SlicePlans {
    /// A decoder confirmed its file's plan.
    pub(super) fn confirm(&mut self) {
        if *self == Self::Unproven {
            *self = Self::Confirmed;
        }
    }

    /// Whether other files' plans are trusted on the strength of this scan's.
    pub(super) fn trusted(self) -> bool {
        self == Self::Confirmed
    }
}

/// Whether the memory pool and the process-wide limit grant what admission
/// admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum PoolState {
    /// Nothing refused since the last release.
    #[default]
    Granting,
    /// The pool refused a reservation: nothing more is fetched ahead until
    /// bytes are released, so read-ahead shrinks to what the pool grants.
    RefusedUntilRelease,
    /// The process-wide limit had no room: nothing more is fetched ahead
    /// until it frees some (or this scan releases bytes).
    WaitingForRoom,
    /// The scan gave its staged bytes back while its consumer was idle:
    /// nothing more is fetched ahead until a decoder reads again.
    ShedUntilRead,
}

/// The scheduler's knowledge of one scan unit.
#[derive(Debug, Default)]
pub(super) struct FileState {
    /// What its footer says, once known.
    pub layout: Option<Arc<FileLayout>>,
    /// Its size in bytes (`u64::MAX` when not given).
    pub size: u64,
    /// Readers open on it now.
    pub readers: usize,
    /// Where it is in the scan.
    pub progress: Progress,
    /// How it came to be opened ahead, if it was.
    pub ahead: OpenedAhead,
    /// The partition whose window pays for its staged bytes.
    pub charged_to: PartitionId,
    /// How its decoders read it.
    pub reading: Reading,
    /// Whether its granularity has been counted in the stats.
    pub granularity_counted: bool,
}

impl FileState {
    /// The slice state, when the file is read slice by slice.
    pub(super) fn slices(&self) -> Option<&SliceState> {
        match &self.reading {
            Reading::Slices(slices) => Some(slices),
            Reading::RowGroups(_) => None,
        }
    }

    pub(super) fn slices_mut(&mut self) -> Option<&mut SliceState> {
        match &mut self.reading {
            Reading::Slices(slices) => Some(slices),
            Reading::RowGroups(_) => None,
        }
    }

    /// The row-group track, when the file is read by row groups.
    pub(super) fn row_groups(&self) -> Option<&RowGroupTrack> {
        match &self.reading {
            Reading::RowGroups(track) => Some(track),
            Reading::Slices(_) => None,
        }
    }

    pub(super) fn row_groups_mut(&mut self) -> Option<&mut RowGroupTrack> {
        match &mut self.reading {
            Reading::RowGroups(track) => Some(track),
            Reading::Slices(_) => None,
        }
    }

    /// Whether a decoder is reading it now.
    pub(super) fn is_open(&self) -> bool {
        self.readers > 0 && self.progress != Progress::Done
    }
}

/// Bytes fetched ahead for a decoder: a whole column chunk (row-group
/// granularity) or one page (slices).
#[derive(Debug)]
pub(super) struct StagedPiece {
    /// The fetch holding the bytes.
    pub fetch: FetchId,
    /// Which of the fetch's ranges.
    pub index: usize,
    /// Where the bytes lie in the file.
    pub range: Range<u64>,
    /// The parts of it the decoder has taken, each byte once.
    pub taken: Taken,
    /// The partition whose window pays for it.
    pub partition: PartitionId,
    /// Its row group.
    pub row_group: usize,
    /// Its leaf column.
    pub column: usize,
    /// Slices: the last slice that reads these bytes.
    pub last_slice: Option<usize>,
}

impl StagedPiece {
    pub(super) fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    pub(super) fn fully_taken(&self) -> bool {
        self.taken.bytes() >= self.len()
    }
}

/// Byte ranges taken from a piece, relative to its start: sorted, disjoint,
/// so a byte the decoder takes twice (a dictionary page several slices read)
/// counts once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Taken(Vec<Range<u64>>);

impl Taken {
    /// All `len` bytes taken.
    pub(super) fn whole(len: u64) -> Self {
        Self((len > 0).then_some(0..len).into_iter().collect())
    }

    /// Note `range` taken; how many of its bytes were not taken before.
    pub(super) fn add(&mut self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let before = self.bytes();
        let mut merged = range;
        let mut kept = Vec::with_capacity(self.0.len() + 1);
        for r in self.0.drain(..) {
            if r.end < merged.start || merged.end < r.start {
                kept.push(r);
            } else {
                merged = merged.start.min(r.start)..merged.end.max(r.end);
            }
        }
        kept.push(merged);
        kept.sort_by_key(|r| r.start);
        self.0 = kept;
        self.bytes() - before
    }

    /// Bytes taken.
    pub(super) fn bytes(&self) -> u64 {
        self.0.iter().map(|r| r.end - r.start).sum()
    }
}

/// Key of a staged piece: (file, first byte). Staged pieces never overlap.
pub(super) type PieceKey = (FileId, u64);

/// Something worth fetching ahead, in priority order.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    /// The file it is in.
    pub file: FileId,
    /// Candidates of one file with the same group share a fetch: a row group
    /// (chunks) or a slice (pages).
    pub group: usize,
    /// Its bytes.
    pub range: Range<u64>,
    /// Its row group.
    pub row_group: usize,
    /// Its leaf column.
    pub column: usize,
    /// Slices: the last slice that reads it.
    pub last_slice: Option<usize>,
    /// Read ahead for a file no decoder has opened yet.
    pub eager: bool,
}

/// How many of a fetch's pieces are still staged, whether any was served,
/// and what its store requests counted (undone if the pool refuses it).
#[derive(Debug, Default)]
pub(super) struct LiveFetch {
    /// Its pieces still staged.
    pub pieces: usize,
    /// Whether a reader was served from it.
    pub served: bool,
    /// Ranges merged and requests split by its request plan.
    pub merged: u64,
    /// See `merged`.
    pub split: u64,
    /// Bytes its requests read between its ranges (counted as waste).
    pub gap: u64,
    /// How its bytes come.
    pub origin: FetchOrigin,
}

/// A background fetch whose requests have not gone out yet: what it will
/// have requested, used and wasted once the driver reports it sent
/// ([`Event::FetchSent`](super::Event::FetchSent)). A fetch stopped before
/// it was sent requested nothing.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Unsent {
    /// Bytes of its requests, gaps included.
    pub requested: u64,
    /// Bytes its requests read between its ranges.
    pub gap: u64,
    /// Bytes of its pieces handed to a decoder meanwhile.
    pub taken: u64,
    /// Bytes of its pieces released untaken meanwhile.
    pub wasted: u64,
}

/// How a fetch's bytes come from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum FetchOrigin {
    /// Requests of its own, in the background.
    #[default]
    Ahead,
    /// `batched`: ranges added to a demand read.
    Widened,
    /// `streaming`: demanded pages kept for later slices (already handed to
    /// the decoder by the demand read).
    Retained,
}

/// Whether `auto` treats its store as remote for the rest of the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Locality {
    /// As the tuner's measurements say (remote until measured).
    #[default]
    AsMeasured,
    /// The scan measured a local store and stays local to its end: reads
    /// that then queue behind a busy machine are not round trips, and reads
    /// the decoders made without the scheduler must not be fetched again.
    LocalForTheScan,
}

/// `auto`'s part of a scan's state.
#[derive(Debug, Default)]
pub(super) struct AutoState {
    /// What the scan measured, and the read-ahead it chooses from that.
    pub tuner: AutoTuner,
    /// When each partition's decoder was last handed bytes, and how many.
    pub handed_back: BTreeMap<PartitionId, (Duration, u64)>,
    /// Whether the store is latched local.
    pub locality: Locality,
    /// The store probe went unanswered for longer than a local store takes.
    pub slow_probe: bool,
    /// The store's window is in a throttled spell ([`Event::StoreThrottled`](super::Event::StoreThrottled)).
    pub store_throttled: bool,
}

impl AutoState {
    /// Latch a local measurement for the rest of the scan.
    pub(super) fn note_locality(&mut self) {
        if self.tuner.has_measured() && !self.tuner.remote() {
            self.locality = Locality::LocalForTheScan;
        }
    }
}

/// The order in which a partition's work source hands out files, with each
/// file's position in it (so finding a file's place is not a search: a scan
/// of many files must not cost the square of their number).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct FileOrder {
    pub files: Vec<FileId>,
    /// Each file's first position in `files`.
    position: HashMap<FileId, usize>,
}

impl FileOrder {
    pub(super) fn new(files: Vec<FileId>) -> Self {
        let mut position = HashMap::with_capacity(files.len());
        for (at, file) in files.iter().enumerate() {
            position.entry(*file).or_insert(at);
        }
        Self { files, position }
    }

    /// Where `file` first comes, if it does.
    pub(super) fn position(&self, file: FileId) -> Option<usize> {
        self.position.get(&file).copied()
    }
}
