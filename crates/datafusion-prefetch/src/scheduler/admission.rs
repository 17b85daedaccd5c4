//! The budget rule, in one place: what a partition may stage against its
//! window and the scan's budget, how admitted pieces are grouped into
//! fetches, and how staged bytes are released or forgotten.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::protocol::{Action, FetchId, FileId, PartitionId};
use super::scan::ScanCore;
use super::state::{
    Candidate, FetchOrigin, PieceKey, PoolState, Progress, Reading, StagedPiece, Taken, Unsent,
};

/// Pieces admitted together, to be fetched in one background fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Admitted {
    pub id: FetchId,
    pub file: FileId,
    pub ranges: Vec<Range<u64>>,
}

/// Whether more bytes fit a partition's staging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
    /// They fit both the stream's limit and the scan's budget.
    Fits,
    /// They would take the partition over its window (or `auto`'s ceiling).
    OverStream,
    /// They would take the scan over its memory budget.
    OverBudget,
}

impl ScanCore {
    /// The budget rule: whether `partition` may stage `bytes` more.
    pub(super) fn room(&self, partition: PartitionId, bytes: u64) -> Room {
        let partition_staged = self.partition_staged.get(&partition).copied().unwrap_or(0);
        if self.stats.staged_bytes + bytes > self.config.memory_budget {
            Room::OverBudget
        } else if partition_staged + bytes > self.stream_limit() {
            Room::OverStream
        } else {
            Room::Fits
        }
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
    pub(super) fn admit(
        &mut self,
        candidates: Vec<Candidate>,
        single_fetch: bool,
    ) -> Vec<Admitted> {
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
                eager,
            } = candidate;
            let len = range.end - range.start;
            let partition = self.files[file].charged_to;
            if full.contains(&partition) {
                continue;
            }
            // A corrupt footer can give two chunks the same or overlapping
            // bytes: staging both would count bytes the map no longer holds
            // (same start, found by the `scan_core` fuzz target), or count a
            // byte fetched once as taken or wasted twice.
            if self.overlaps_staged(file, &range) {
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
            match self.room(partition, wanted) {
                Room::OverBudget => break,
                Room::OverStream => {
                    full.insert(partition);
                    continue;
                }
                Room::Fits => {}
            }
            // Slices of files not opened yet get at most half the window, so
            // the file being decoded always has room to read ahead. `auto`
            // keeps only its measured lead ahead, but always the next unit: a
            // stream with nothing staged would otherwise wait a round trip per
            // unit.
            if (eager && last_slice.is_some() && partition_staged + wanted > stream_limit / 2)
                || (partition_staged > 0 && partition_staged + wanted > lead)
            {
                full.insert(partition);
                continue;
            }
            let id = match fetches.last() {
                Some((id, f, g, _)) if *f == file && (single_fetch || *g == group) => *id,
                _ => {
                    let id = self.new_fetch_id();
                    fetches.push((id, file, group, vec![]));
                    id
                }
            };
            let ranges = &mut fetches.last_mut().expect("just pushed").3;
            let piece = StagedPiece {
                fetch: id,
                index: ranges.len(),
                range: range.clone(),
                taken: Taken::default(),
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
            .map(|(id, file, _, ranges)| Admitted { id, file, ranges })
            .collect()
    }

    /// Admit candidates in order while they fit, each (file, group) as one
    /// background fetch with its store requests planned.
    pub(super) fn admit_fetches(&mut self, candidates: Vec<Candidate>) -> Vec<Action> {
        let admitted = self.admit(candidates, false);
        admitted.into_iter().map(|a| self.fetch(a)).collect()
    }

    /// The background fetch of `admitted`, its requests planned; what the
    /// requests read between its ranges is fetched ahead, and waste from
    /// the start.
    fn fetch(&mut self, admitted: Admitted) -> Action {
        let Admitted { id, file, ranges } = admitted;
        let requests = self.fetch_plan(&ranges);
        let gap = requests.bytes().saturating_sub(total(&ranges));
        self.stats.bytes_fetched_ahead += gap;
        self.unsent.insert(
            id,
            Unsent {
                requested: requests.bytes(),
                gap,
                ..Unsent::default()
            },
        );
        if let Some(live) = self.live_fetches.get_mut(&id) {
            live.merged = requests.merged;
            live.split = requests.split;
            live.gap = gap;
        }
        Action::Fetch {
            id,
            file,
            ranges,
            requests,
        }
    }

    /// Whether `range` of `file` shares a byte (or its start) with a staged
    /// piece.
    fn overlaps_staged(&self, file: FileId, range: &Range<u64>) -> bool {
        let before = self.staged.range(..=(file, range.start)).next_back();
        let after = self.staged.range((file, range.start)..).next();
        before.is_some_and(|(&(f, _), piece)| f == file && piece.range.end > range.start)
            || after.is_some_and(|(&(f, start), _)| {
                f == file && (start == range.start || start < range.end)
            })
    }

    pub(super) fn new_fetch_id(&mut self) -> FetchId {
        let id = FetchId(self.next_fetch);
        self.next_fetch += 1;
        id
    }

    /// Count `piece` (already admitted) as staged for `file`'s decoder.
    pub(super) fn stage(&mut self, file: FileId, piece: StagedPiece) {
        let len = piece.len();
        self.live_fetches.entry(piece.fetch).or_default().pieces += 1;
        *self.partition_staged.entry(piece.partition).or_default() += len;
        self.stats.staged_bytes += len;
        self.stats.bytes_fetched_ahead += len;
        self.stats.peak_staged_bytes = self.stats.peak_staged_bytes.max(self.stats.staged_bytes);
        self.staged.insert((file, piece.range.start), piece);
    }

    /// Release the staged pieces `predicate` picks, counting what the
    /// decoder did not take as waste; a fetch whose last piece goes is
    /// released (aborted when nobody was served from it).
    pub(super) fn release_where(
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
            let piece = self.staged.remove(&key).expect("key from staged");
            self.waste(piece.fetch, piece.len() - piece.taken.bytes());
            self.unstage(&piece);
            let live = self.live_fetches.get_mut(&piece.fetch).expect("live fetch");
            live.pieces -= 1;
            if live.pieces == 0 {
                let abort = !live.served;
                self.live_fetches.remove(&piece.fetch);
                actions.push(Action::Release {
                    id: piece.fetch,
                    abort,
                });
            }
        }
        actions
    }

    fn unstage(&mut self, piece: &StagedPiece) {
        let len = piece.len();
        self.stats.staged_bytes -= len;
        if let Some(p) = self.partition_staged.get_mut(&piece.partition) {
            *p -= len;
        }
        self.pool = PoolState::Granting;
    }

    /// Forget a fetch whose bytes will not reach the decoder.
    fn drop_fetch(&mut self, id: FetchId, why: Dropped) {
        let keys: Vec<PieceKey> = self
            .staged
            .iter()
            .filter(|(_, p)| p.fetch == id)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let piece = self.staged.remove(&key).expect("key from staged");
            self.unstage(&piece);
            match why {
                Dropped::Failed => self.waste(id, piece.len() - piece.taken.bytes()),
                Dropped::Refused | Dropped::Given | Dropped::Deferred => {
                    self.stats.bytes_fetched_ahead -= piece.len();
                }
            }
            if why == Dropped::Deferred {
                continue;
            }
            match &mut self.files[key.0].reading {
                Reading::Slices(slices) => {
                    slices.given_up.insert(piece.range.start);
                }
                Reading::RowGroups(track) => {
                    track.consumed.insert((piece.row_group, piece.column));
                }
            }
        }
        self.live_fetches.remove(&id);
    }

    /// A background fetch failed (or stalled, or the demand read widened or
    /// retained ranges rode on failed): forget its pieces (the decoder will
    /// demand them) and read ahead what now fits. Its bytes never reach a
    /// decoder: waste, but for ranges already served from it, whose reads
    /// instead are reported as [`Event::FallbackRead`](super::Event::FallbackRead).
    /// A fetch already released or forgotten is not failed again.
    pub(super) fn on_fetch_failed(&mut self, id: FetchId) -> Vec<Action> {
        if !self.live_fetches.contains_key(&id) {
            return vec![];
        }
        self.stats.failed_prefetches += 1;
        self.drop_fetch(id, Dropped::Failed);
        self.pump()
    }

    /// The memory pool refused to reserve a fetch's bytes: forget it and
    /// stop reading ahead until something is released.
    pub(super) fn on_pool_refused(&mut self, id: FetchId) {
        let why = self.refused(id);
        self.stats.failed_prefetches += 1;
        self.drop_fetch(id, why);
        self.pool = PoolState::RefusedUntilRelease;
    }

    /// The process-wide limit had no room for a fetch (its requests were
    /// never sent) or for ranges riding on a demand read: read-ahead waits
    /// until the governor frees room or this scan releases bytes. A fetch of
    /// its own stays worth fetching.
    pub(super) fn on_governor_refused(&mut self, id: FetchId) {
        let why = match self.refused(id) {
            Dropped::Refused => Dropped::Deferred,
            why => why,
        };
        self.stats.governor_waits += 1;
        self.drop_fetch(id, why);
        self.pool = PoolState::WaitingForRoom;
    }

    /// How refused fetch `id`'s pieces are dropped. A fetch of its own was
    /// never sent; ranges widening a demand read are fetched with it all the
    /// same when the scheduler planned its requests (then dropped: waste),
    /// else left out of it; retained pages were read, just not kept.
    fn refused(&mut self, id: FetchId) -> Dropped {
        match self.live_fetches.get(&id).map(|live| live.origin) {
            Some(FetchOrigin::Widened) if self.config.owns_demand_reads => Dropped::Failed,
            Some(FetchOrigin::Widened) => {
                let widened: u64 = self
                    .staged
                    .values()
                    .filter(|p| p.fetch == id)
                    .map(StagedPiece::len)
                    .sum();
                self.stats.bytes_requested -= widened;
                Dropped::Given
            }
            Some(FetchOrigin::Ahead) => {
                self.unsend(id);
                Dropped::Refused
            }
            Some(FetchOrigin::Retained) | None => Dropped::Given,
        }
    }

    /// Undo what a fetch's request plan counted: it was never sent. (A
    /// refusal comes in the same answer as the admission, before anything
    /// is published; a failed fetch was sent, and stays counted.)
    fn unsend(&mut self, id: FetchId) {
        if let Some(live) = self.live_fetches.get(&id) {
            self.stats.requests_merged -= live.merged;
            self.stats.requests_split -= live.split;
            self.stats.bytes_fetched_ahead -= live.gap;
        }
        self.unsent.remove(&id);
    }

    /// The governor freed room: read ahead again (unless the memory pool
    /// refused, or the scan shed its share while idle).
    pub(super) fn on_room_freed(&mut self) -> Vec<Action> {
        if self.pool != PoolState::WaitingForRoom {
            return vec![];
        }
        self.pool = PoolState::Granting;
        self.pump()
    }

    /// Others wait for room while this scan's consumer is idle: release
    /// whole fetches nobody was served from — upcoming files' first reads
    /// first, then the furthest ahead — until `bytes` are given back, and
    /// fetch nothing more until a decoder reads again.
    pub(super) fn on_shed_asked(&mut self, bytes: u64) -> Vec<Action> {
        let mut sizes: BTreeMap<FetchId, u64> = BTreeMap::new();
        let mut order: Vec<(bool, PieceKey, FetchId)> = vec![];
        for (key, piece) in &self.staged {
            if self
                .live_fetches
                .get(&piece.fetch)
                .is_some_and(|f| !f.served)
            {
                *sizes.entry(piece.fetch).or_default() += piece.len();
                order.push((self.open_files.contains(&key.0), *key, piece.fetch));
            }
        }
        // Not-open files first, then from the back of each file.
        order.sort_by_key(|(open, key, _)| (*open, std::cmp::Reverse(*key)));
        let mut chosen = BTreeSet::new();
        let mut freed = 0;
        for (_, _, fetch) in order {
            if freed >= bytes {
                break;
            }
            if chosen.insert(fetch) {
                freed += sizes[&fetch];
            }
        }
        let actions = self.release_where(|_, piece| chosen.contains(&piece.fetch));
        self.stats.bytes_shed += freed;
        self.pool = PoolState::ShedUntilRead;
        actions
    }

    /// Release everything (the scan is over or was dropped).
    pub(super) fn on_scan_ended(&mut self) -> Vec<Action> {
        for state in &mut self.files {
            state.progress = Progress::Done;
        }
        self.open_files.clear();
        self.waiting_ahead.clear();
        self.release_where(|_, _| true)
    }
}

fn total(ranges: &[Range<u64>]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}

/// Why a fetch's staged pieces are forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    /// Its requests went out and failed (or its bytes are dropped): what the
    /// decoder did not take is waste, and the decoder reads its pieces.
    Failed,
    /// A fetch of its own, never sent: the decoder reads its pieces.
    Refused,
    /// Ranges riding on a demand read, not kept: the decoder reads them.
    Given,
    /// Never sent, for now: its pieces stay worth fetching.
    Deferred,
}
