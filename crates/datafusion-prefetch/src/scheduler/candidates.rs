//! What is worth fetching ahead, in the order the decoders will want it:
//! the open files' next row groups or slices first, then the first reads of
//! the files opened ahead, in each partition's decode order. Admission
//! (`admission.rs`) then takes them while they fit.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::layout::FileLayout;
use super::protocol::{Action, FileId};
use super::scan::ScanCore;
use super::state::{
    Candidate, Direction, OpenedAhead, PlanTrust, PoolState, Prediction, Progress, Reading,
    SlicePlans,
};

impl ScanCore {
    /// Everything worth fetching ahead now, in priority order, admitted against
    /// the window and the budget (`pipelined`, `streaming` and `auto`).
    pub(super) fn pump(&mut self) -> Vec<Action> {
        if !self.reads_ahead() || self.pool != PoolState::Granting {
            return vec![];
        }
        let mut candidates = vec![];
        // Open files first: their decoders will ask soonest.
        for &file in &self.open_files {
            let state = &self.files[file];
            match &state.reading {
                Reading::Slices(slices) => {
                    // The slice being decoded has asked for its pages already.
                    let next = slices.cursor.map_or(0, |c| c + 1);
                    candidates.extend(self.slices_ahead(file, next, u64::MAX));
                }
                Reading::RowGroups(track) if track.cursor.is_some() => {
                    candidates.extend(self.row_groups_ahead(file));
                }
                Reading::RowGroups(_) => {
                    candidates.extend(self.leading_row_groups(file, u64::MAX));
                }
            }
        }
        candidates.extend(self.first_reads_of_upcoming_files());
        self.admit_fetches(candidates)
    }

    /// The first reads of files opened ahead, in the order they were asked
    /// for — once every open file's footer is known, so they never take the
    /// window first.
    fn first_reads_of_upcoming_files(&self) -> Vec<Candidate> {
        let cap = self.eager_cap();
        let open_files_known = self
            .open_files
            .iter()
            .all(|&f| self.files[f].layout.is_some());
        if cap == 0 || !open_files_known {
            return vec![];
        }
        let mut candidates = vec![];
        // In each partition's decode order, and only up to the first file
        // whose footer is still unknown: footers land in any order, and a
        // later file admitted first would take the room of the file its
        // decoder needs next.
        // Only the files waiting to be opened, in each order's sequence: a
        // scan of many files must not walk them all on every event. (Files
        // not waiting were skipped anyway, and an order shared by several
        // partitions gives nothing new the second time.)
        let mut seen = BTreeSet::new();
        for (p, order) in self.order.iter().enumerate() {
            if self.order[..p].iter().any(|o| Arc::ptr_eq(o, order)) {
                continue;
            }
            let mut waiting: Vec<(usize, FileId)> = self
                .waiting_ahead
                .iter()
                .filter_map(|&f| Some((order.position(f)?, f)))
                .collect();
            waiting.sort_unstable();
            for (_, file) in waiting {
                let state = &self.files[file];
                if state.layout.is_none() {
                    break;
                }
                if !seen.insert(file) {
                    continue;
                }
                let first = match &state.reading {
                    Reading::Slices(slices) => {
                        if self.slice_plans == SlicePlans::PageSelective {
                            continue;
                        }
                        // The first slice: enough to start decoding at once;
                        // more, up to the cap, once the scan's plans proved right.
                        let first = if self.slice_plans.trusted() {
                            cap
                        } else {
                            slices.plan.slice_bytes(0).min(cap)
                        };
                        self.slices_ahead(file, 0, first)
                    }
                    Reading::RowGroups(_)
                        if !self.learned_paths.is_empty()
                            || state.ahead == OpenedAhead::AtStreamStart =>
                    {
                        self.leading_row_groups(file, cap)
                    }
                    Reading::RowGroups(_) => vec![],
                };
                candidates.extend(first.into_iter().map(|c| Candidate { eager: true, ..c }));
            }
        }
        candidates
    }

    /// Column chunks of the row groups after the cursor of an open `file`, in
    /// decode order, for the columns its decoder has read.
    pub(super) fn row_groups_ahead(&self, file: FileId) -> Vec<Candidate> {
        let state = &self.files[file];
        let Some(track) = state.row_groups() else {
            return vec![];
        };
        let (Some(layout), Some(cursor)) = (&state.layout, track.cursor) else {
            return vec![];
        };
        if track.prediction == Prediction::Failed {
            return vec![];
        }
        let backward = track.direction == Direction::Backward;
        let mut upcoming: Vec<usize> = layout
            .expected_row_groups()
            .filter(|&rg| if backward { rg < cursor } else { rg > cursor })
            .collect();
        if backward {
            upcoming.reverse();
        }
        let columns: Vec<usize> = track.columns.iter().copied().collect();
        self.chunks_of(file, layout, &upcoming, &columns, u64::MAX)
    }

    /// The leading row groups of a file the decoder has not started (those its
    /// statistics do not prune), for
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
        let by_projection = self.learned_paths.is_empty()
            && state.ahead == OpenedAhead::AtStreamStart
            && state.progress == Progress::Upcoming;
        let columns: Vec<usize> = if by_projection {
            self.projected_columns(layout)
        } else {
            self.learned_paths
                .iter()
                .filter_map(|p| layout.column_index(p))
                .collect()
        };
        let expected: Vec<usize> = layout.expected_row_groups().collect();
        self.chunks_of(file, layout, &expected, &columns, cap)
    }

    /// The chunks of `columns` in `row_groups`, in that order, not yet
    /// consumed, up to `cap` bytes (what is staged already counts).
    fn chunks_of(
        &self,
        file: FileId,
        layout: &FileLayout,
        row_groups: &[usize],
        columns: &[usize],
        cap: u64,
    ) -> Vec<Candidate> {
        let consumed = self.files[file].row_groups().map(|t| &t.consumed);
        let mut total = 0u64;
        let mut out = vec![];
        for &rg in row_groups {
            for &col in columns {
                if consumed.is_some_and(|c| c.contains(&(rg, col))) {
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
        let state = &self.files[file];
        let Some(slices) = state.slices() else {
            return vec![];
        };
        if slices.trust == PlanTrust::Mispredicted {
            return vec![];
        }
        let plan = &slices.plan;
        let trusted = slices.trust == PlanTrust::Confirmed || self.slice_plans.trusted();
        // A file opened at its stream's start gets its first slice even under
        // a predicate: one small slice of speculation hides the scan's first
        // round trip.
        let last = if trusted {
            plan.slices.len()
        } else if self.filtered && state.ahead != OpenedAhead::AtStreamStart {
            0
        } else {
            1.min(plan.slices.len())
        };
        let mut seen = BTreeSet::new();
        let mut total = 0u64;
        let mut out = vec![];
        let pruned = |row_group| {
            state
                .layout
                .as_ref()
                .is_some_and(|l| l.is_pruned(row_group))
        };
        for slice in first..last {
            let row_group = plan.slices[slice].row_group;
            // Its slices are opened, and pruned, without a read.
            if pruned(row_group) {
                continue;
            }
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

    /// The leaf columns of `layout` the scan projects (all without a projection).
    pub(super) fn projected_columns(&self, layout: &FileLayout) -> Vec<usize> {
        match &self.projection {
            Some(roots) => layout.leaves_of(roots),
            None => (0..layout.column_paths.len()).collect(),
        }
    }
}
