//! Answering a decoder: which staged pieces serve the ranges it asks for,
//! what must be fetched now, what it has moved past (released), and where it
//! is in its file — the row group or slice that steers what comes next.

use std::ops::Range;

use super::admission::Room;
use super::layout::FileLayout;
use super::protocol::{Action, FetchId, FileId, Part, ReadPlan, starts_past_the_end};
use super::scan::ScanCore;
use super::state::{
    Direction, FetchOrigin, PieceKey, PlanTrust, PoolState, Prediction, SlicePlans, StagedPiece,
    Taken,
};
use crate::config::PrefetchPolicy;

impl ScanCore {
    /// The decoder reading `file` asks for `ranges`: answer with where each
    /// range's bytes come from ([`Action::Serve`], first), then the releases
    /// and read-ahead that follow.
    pub(super) fn on_read_asked(&mut self, file: FileId, ranges: &[Range<u64>]) -> Vec<Action> {
        let mut plan = ReadPlan::default();
        let mut actions = vec![];
        // A decoder reads: a scan that gave back its share while its
        // consumer was idle reads ahead again.
        if self.pool == PoolState::ShedUntilRead {
            self.pool = PoolState::Granting;
        }
        self.count_granularity(file, ranges);
        let layout = self.files[file].layout.clone();
        let page_granular = self.files[file].slices().is_some();
        for range in ranges {
            let located = layout.as_ref().and_then(|l| l.locate(range));
            if let (Some((row_group, column)), Some(layout)) = (located, layout.as_ref()) {
                self.learned_paths
                    .insert(layout.column_paths[column].clone());
                if !page_granular {
                    self.track_chunk_cursor(file, layout, range, row_group, column);
                }
            }
            match self.staged_containing(file, range) {
                Some(key) => {
                    let piece = self.staged.get_mut(&key).expect("key from staged");
                    let len = range.end - range.start;
                    let offset = range.start - piece.range.start;
                    let newly = piece.taken.add(offset..offset + len);
                    let (fetch, index) = (piece.fetch, piece.index);
                    self.use_bytes(fetch, newly);
                    self.stats.bytes_served_from_prefetch += len;
                    if let Some(live) = self.live_fetches.get_mut(&fetch) {
                        live.served = true;
                    }
                    plan.parts.push(Part::Staged {
                        id: fetch,
                        index,
                        offset,
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
        self.note_slice_requests(file, ranges);
        actions.extend(self.release_passed(file));
        plan.retained = self.retain_shared_pages(file, &plan.demand);

        match self.config.policy {
            // Batched only widens a request that is being made anyway, and
            // not while the governor has no room (it would refuse again).
            PrefetchPolicy::Batched
                if !plan.demand.is_empty() && self.pool != PoolState::WaitingForRoom =>
            {
                // Never a byte the read itself demands (a corrupt footer's
                // overlapping chunks): it would be fetched once, counted twice.
                let mut candidates = self.row_groups_ahead(file);
                candidates.retain(|c| {
                    !plan
                        .demand
                        .iter()
                        .any(|d| d.start < c.range.end && c.range.start < d.end)
                });
                if let Some(admitted) = self.admit(candidates, true).pop() {
                    if let Some(live) = self.live_fetches.get_mut(&admitted.id) {
                        live.origin = FetchOrigin::Widened;
                    }
                    plan.widened = Some((admitted.id, admitted.ranges));
                }
            }
            PrefetchPolicy::Pipelined | PrefetchPolicy::Streaming | PrefetchPolicy::Auto => {
                actions.extend(self.pump())
            }
            PrefetchPolicy::Batched | PrefetchPolicy::Off => {}
        }

        let mut asked = plan.demand.clone();
        if let Some((_, widened)) = &plan.widened {
            asked.extend(widened.iter().cloned());
        }
        plan.refused = starts_past_the_end(self.files[file].size, &asked);
        if plan.refused.is_none() && !asked.is_empty() {
            self.count_demand(&mut plan, &asked);
        }
        actions.insert(0, Action::Serve(plan));
        actions
    }

    /// Plan the store requests of a demand read (`asked`: the demand, then
    /// any widened ranges) when the scan owns its demand reads, and count
    /// them: the demanded bytes are handed to the decoder, the bytes the
    /// requests read between ranges are waste. Otherwise the wrapped reader
    /// asks for each range as it is.
    fn count_demand(&mut self, plan: &mut ReadPlan, asked: &[Range<u64>]) {
        let demanded = &plan.demand;
        if self.config.owns_demand_reads {
            let requests = self.fetch_plan(asked);
            self.stats.bytes_requested += requests.bytes();
            self.stats.bytes_wasted += requests.bytes() - covered(asked);
            self.stats.bytes_used += covered(demanded);
            plan.demand_requests = Some(requests);
        } else {
            self.stats.bytes_requested += asked.iter().map(|r| r.end - r.start).sum::<u64>();
            self.stats.bytes_used += demanded.iter().map(|r| r.end - r.start).sum::<u64>();
        }
    }

    /// Count the file's granularity once, and the bytes read at it.
    fn count_granularity(&mut self, file: FileId, ranges: &[Range<u64>]) {
        let requested: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let state = &mut self.files[file];
        let page_granular = state.slices().is_some();
        if !state.granularity_counted {
            state.granularity_counted = true;
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
    }

    /// Slices: note which planned pages of the current slice the decoder
    /// asked for; once it has asked for all of them, the plan is confirmed
    /// (and with it the scan's other plans).
    fn note_slice_requests(&mut self, file: FileId, ranges: &[Range<u64>]) {
        let Some(slices) = self.files[file].slices_mut() else {
            return;
        };
        let Some(cursor) = slices.cursor else {
            return;
        };
        if slices.trust == PlanTrust::Confirmed {
            return;
        }
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
        let confirmed = !planned.is_empty()
            && planned
                .iter()
                .all(|p| slices.requested.contains(&p.bytes.start));
        if confirmed {
            if slices.trust == PlanTrust::Unconfirmed {
                slices.trust = PlanTrust::Confirmed;
            }
            self.slice_plans.confirm();
        }
    }

    /// Release what the decoder of `file` has fully taken or moved past.
    fn release_passed(&mut self, file: FileId) -> Vec<Action> {
        let state = &self.files[file];
        let track = state.row_groups();
        let cursor = track.and_then(|t| t.cursor);
        let backward = track.is_some_and(|t| t.direction == Direction::Backward);
        let slice_cursor = state.slices().and_then(|s| s.cursor);
        self.release_where(|&(f, _), piece| {
            if f != file {
                return false;
            }
            let taken = piece.fully_taken();
            match piece.last_slice {
                Some(last) => taken && slice_cursor.is_some_and(|c| c >= last),
                None => {
                    taken
                        || cursor.is_some_and(|c| {
                            if backward {
                                piece.row_group > c
                            } else {
                                piece.row_group < c
                            }
                        })
                }
            }
        })
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
        let slices = self.files[file].slices()?;
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
        // Numbered only if something is kept.
        let id = FetchId(self.next_fetch);
        let mut kept = vec![];
        for (position, column, last_slice) in shared {
            let range = demand[position].clone();
            let len = range.end - range.start;
            if self.staged.contains_key(&(file, range.start))
                || self.room(partition, len) != Room::Fits
            {
                continue;
            }
            let piece = StagedPiece {
                fetch: id,
                index: kept.len(),
                range: range.clone(),
                // The demand read that stages it also serves it.
                taken: Taken::whole(len),
                partition,
                row_group,
                column,
                last_slice: Some(last_slice),
            };
            self.stage(file, piece);
            if let Some(fetch) = self.live_fetches.get_mut(&id) {
                fetch.served = true;
                fetch.origin = FetchOrigin::Retained;
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
        let Some(track) = self.files[file].row_groups_mut() else {
            return;
        };
        if let Some(cursor) = track.cursor
            && cursor != row_group
        {
            let (low, high) = (cursor.min(row_group), cursor.max(row_group));
            // Row groups pruned by their statistics are skipped as predicted.
            if layout.expected_row_groups().any(|rg| low < rg && rg < high) {
                track.prediction = Prediction::Failed;
            }
            track.direction = if row_group < cursor {
                Direction::Backward
            } else {
                Direction::Forward
            };
        }
        if layout
            .chunk(row_group, column)
            .is_some_and(|chunk| *range != chunk)
        {
            track.prediction = Prediction::Failed;
        }
        track.cursor = Some(row_group);
        track.columns.insert(column);
        track.consumed.insert((row_group, column));
    }

    /// The decoder of `file` moves on to slice `slice`: the pages no later slice
    /// reads are released, and read-ahead moves along.
    pub(super) fn on_slice_started(&mut self, file: FileId, slice: usize) -> Vec<Action> {
        let Some(state) = self.files[file].slices_mut() else {
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
            .any(|(&(f, _), piece)| passed(f, piece) && !piece.fully_taken());
        if left_untaken {
            if let Some(state) = self.files[file].slices_mut() {
                state.trust = PlanTrust::Mispredicted;
            }
            self.slice_plans = SlicePlans::PageSelective;
        }
        let mut actions = self.release_where(|&(f, _), piece| passed(f, piece));
        actions.extend(self.pump());
        actions
    }
}

/// Bytes `ranges` cover, each byte once.
fn covered(ranges: &[Range<u64>]) -> u64 {
    let mut sorted = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut bytes = 0;
    let mut end = 0;
    for r in sorted {
        let start = r.start.max(end);
        if r.end > start {
            bytes += r.end - start;
        }
        end = end.max(r.end);
    }
    bytes
}
