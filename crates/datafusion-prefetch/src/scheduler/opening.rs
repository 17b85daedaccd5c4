//! Files coming and going: streams starting, readers opening and closing,
//! footers becoming known (and with them a file's granularity), and which
//! upcoming files are opened ahead.

use std::sync::Arc;

use super::layout::FileLayout;
use super::protocol::{Action, FileId, PartitionId};
use super::scan::ScanCore;
use super::slices::{SliceSizing, plan_slices};
use super::state::{OpenedAhead, Progress, Reading, SliceState};
use crate::config::{FIXED_POLICY_EAGER_FIRST_READ_CAP, FIXED_POLICY_FILE_OPEN_DEPTH};

impl ScanCore {
    /// The stream of `partition` was created. DataFusion creates every stream
    /// of a plan before it polls any, and polls a join's probe side only
    /// once its build side is done, so the scans of a query would otherwise
    /// pay their first round trips one after another. Open the partition's
    /// first file now, and the files its decoder would open ahead on opening
    /// it, and fetch their first reads (up to the eager cap each, within the
    /// window and budget), so those round trips overlap whatever runs before
    /// the stream is polled.
    ///
    /// Only when the scan reads ahead: under `auto`, once the store is known
    /// remote — measured, or slower to answer its probe than a local store
    /// (before that, a local store would stage bytes for nothing).
    pub(super) fn on_partition_started(&mut self, partition: PartitionId) -> Vec<Action> {
        if !self.store_known()
            || !self.reads_ahead()
            || self.config.file_open_depth == 0
            || !self.started_partitions.insert(partition)
        {
            return vec![];
        }
        let Some(order) = self.order.get(partition) else {
            return vec![];
        };
        let Some(first) = order.files.iter().copied().find(|f| {
            let state = &self.files[*f];
            state.progress == Progress::Upcoming && state.ahead == OpenedAhead::No
        }) else {
            return vec![];
        };
        let state = &mut self.files[first];
        state.ahead = OpenedAhead::AtStreamStart;
        state.charged_to = partition;
        self.file_changed(first);
        self.current_files.insert(partition, first);
        self.stats.files_opened_at_start += 1;
        let mut actions = vec![Action::OpenAhead {
            file: first,
            partition,
        }];
        // And the files its decoder would open ahead on opening it.
        actions.extend(self.open_ahead_after(first, partition));
        actions.extend(self.pump());
        actions
    }

    /// A decoder in `partition` opened `file`.
    pub(super) fn on_reader_opened(&mut self, file: FileId, partition: PartitionId) -> Vec<Action> {
        self.started_partitions.insert(partition);
        let state = &mut self.files[file];
        state.readers += 1;
        if state.progress != Progress::Upcoming {
            self.file_changed(file);
            return vec![];
        }
        state.progress = Progress::Decoding;
        state.charged_to = partition;
        self.file_changed(file);
        self.current_files.insert(partition, file);
        let mut actions = self.open_ahead_after(file, partition);
        actions.extend(self.pump());
        actions
    }

    /// A reader of `file` was dropped. When the last one goes, the file is done
    /// and whatever is still staged for it is released as waste.
    pub(super) fn on_reader_closed(&mut self, file: FileId) -> Vec<Action> {
        let state = &mut self.files[file];
        state.readers = state.readers.saturating_sub(1);
        if state.readers > 0 {
            return vec![];
        }
        state.progress = Progress::Done;
        self.file_changed(file);
        let mut actions = self.release_where(|key, _| key.0 == file);
        actions.extend(self.pump());
        actions
    }

    /// The footer of `file` is known: a layout with page locations is cut
    /// into slices when the scan slices files (under `auto`, only one whose
    /// row groups are too large to pipeline whole).
    pub(super) fn on_footer_known(&mut self, file: FileId, layout: Arc<FileLayout>) -> Vec<Action> {
        if self.files[file].layout.is_some() {
            return vec![];
        }
        let columns = self.projected_columns(&layout);
        if self.slices_layout(&layout, &columns) && layout.pages.is_some() {
            let sizing = SliceSizing {
                target_bytes: self.config.slice_target_bytes,
                stage_limit: self.config.read_ahead_window.min(self.config.memory_budget),
                min_column_bytes: self.config.slice_min_column_bytes,
            };
            if let Some(plan) = plan_slices(&layout, &columns, &sizing) {
                self.stats.slices_planned += plan.slices.len() as u64;
                self.files[file].reading = Reading::Slices(SliceState::new(plan));
            }
        }
        self.files[file].layout = Some(layout);
        let mut actions = self.open_further_ahead();
        actions.extend(self.pump());
        actions
    }

    /// `auto`: how many files its lead covers depends on their size, known
    /// only as footers land; open the files that now fall within it, so the
    /// first wave reaches as far as the budget allows without waiting for a
    /// decoder to move on.
    fn open_further_ahead(&mut self) -> Vec<Action> {
        if self.auto.is_none() {
            return vec![];
        }
        let current: Vec<(PartitionId, FileId)> =
            self.current_files.iter().map(|(p, f)| (*p, *f)).collect();
        current
            .into_iter()
            .flat_map(|(partition, file)| self.open_ahead_after(file, partition))
            .collect()
    }

    /// The decoders of `file` start: under `auto`, a file planned in slices
    /// while the store was assumed remote is read whole once it measured
    /// local — its slice plan and any pages staged for it are dropped, so the
    /// scheduler predicts what the decoder really asks for.
    pub(super) fn on_decoders_starting(&mut self, file: FileId) -> Vec<Action> {
        if self.slices_files() {
            return vec![];
        }
        let Some(state) = self.files.get_mut(file) else {
            return vec![];
        };
        if !matches!(state.reading, Reading::Slices(_)) {
            return vec![];
        }
        state.reading = Reading::default();
        self.release_where(|key, piece| key.0 == file && piece.last_slice.is_some())
    }

    /// Mark the files after `file` in `partition`'s order for opening ahead.
    fn open_ahead_after(&mut self, file: FileId, partition: PartitionId) -> Vec<Action> {
        if !self.reads_ahead() || self.config.file_open_depth == 0 {
            return vec![];
        }
        let Some(order) = self.order.get(partition).cloned() else {
            return vec![];
        };
        let Some(position) = order.position(file) else {
            return vec![];
        };
        let upcoming: Vec<FileId> = order.files[position + 1..]
            .iter()
            .copied()
            .filter(|f| self.files[*f].progress == Progress::Upcoming)
            .take(self.open_depth(file))
            .collect();
        // Files opened ahead of a stream no decoder has started on yet are
        // read by the projection, like the stream's first file.
        let anchor = &self.files[file];
        let how = if anchor.ahead == OpenedAhead::AtStreamStart
            && anchor.progress == Progress::Upcoming
        {
            OpenedAhead::AtStreamStart
        } else {
            OpenedAhead::Requested
        };
        let mut actions = vec![];
        for next in upcoming {
            let state = &mut self.files[next];
            if state.ahead == OpenedAhead::No {
                state.ahead = how;
                state.charged_to = partition;
                self.file_changed(next);
                self.stats.files_opened_ahead += 1;
                actions.push(Action::OpenAhead {
                    file: next,
                    partition,
                });
            }
        }
        actions
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
        // Until a footer is known, files are assumed the fixed policies' cap.
        let per_file = self
            .bytes_per_file(file)
            .unwrap_or(
                FIXED_POLICY_EAGER_FIRST_READ_CAP
                    .as_u64()
                    .min(self.eager_cap()),
            )
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
        Some(bytes.min(self.eager_cap()))
    }
}
