//! `streaming`: hands DataFusion's Parquet morselizer one file at a time as a
//! sequence of slices — the same file with a `ParquetAccessPlan` that selects
//! one slice's rows — so each slice is decoded as soon as its pages land while
//! the scheduler fetches the next slices' pages.
//!
//! Every slice goes through the stock opener (pruning, filter pushdown, page
//! index, limits, schema adaptation), one after the other in row order, so the
//! output is the rows the whole file would give, in the same order.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion_datasource::PartitionedFile;
use datafusion_datasource::morsel::{MorselPlan, MorselPlanner, Morselizer};
use datafusion_datasource_parquet::{ParquetAccessPlan, RowGroupAccess};
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};

use super::driver::ScanDriver;
use crate::scheduler::{FileId, PartitionId, SlicePlan};

/// A [`Morselizer`] that reads files with an offset index slice by slice.
pub(crate) struct SlicingMorselizer {
    pub(crate) inner: Arc<dyn Morselizer>,
    pub(crate) driver: Arc<ScanDriver>,
    pub(crate) partition: PartitionId,
}

impl fmt::Debug for SlicingMorselizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlicingMorselizer")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Morselizer for SlicingMorselizer {
    fn plan_file(&self, file: PartitionedFile) -> Result<Box<dyn MorselPlanner>> {
        let Some(id) = self.driver.file_id(&file) else {
            return self.inner.plan_file(file);
        };
        // Held until the last slice is planned, so the file stays open (and its
        // staged pages staged) between one slice's decoder and the next.
        let hold = FileHold::new(&self.driver, id, self.partition);
        Ok(Box::new(SlicingPlanner {
            inner: Arc::clone(&self.inner),
            driver: Arc::clone(&self.driver),
            file,
            id,
            partition: self.partition,
            hold,
        }))
    }
}

/// Keeps a file open in the driver while its slices are being planned.
struct FileHold {
    driver: Arc<ScanDriver>,
    file: FileId,
}

impl FileHold {
    fn new(driver: &Arc<ScanDriver>, file: FileId, partition: PartitionId) -> Self {
        driver.reader_opened(file, partition);
        Self {
            driver: Arc::clone(driver),
            file,
        }
    }
}

impl Drop for FileHold {
    fn drop(&mut self) {
        self.driver.reader_closed(self.file);
    }
}

/// The first step for one file: learn its slices (footer and offset index,
/// read once and shared with the decoders), then plan them in order.
struct SlicingPlanner {
    inner: Arc<dyn Morselizer>,
    driver: Arc<ScanDriver>,
    file: PartitionedFile,
    id: FileId,
    partition: PartitionId,
    hold: FileHold,
}

impl fmt::Debug for SlicingPlanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlicingPlanner")
            .field("file", &self.file.object_meta.location)
            .finish_non_exhaustive()
    }
}

impl MorselPlanner for SlicingPlanner {
    fn plan(self: Box<Self>) -> Result<Option<MorselPlan>> {
        let this = *self;
        Ok(Some(MorselPlan::new().with_pending_planner(async move {
            let slices = this.driver.slices(this.id, this.partition).await;
            let planner: Box<dyn MorselPlanner> = match slices {
                Some(plan) => Box::new(SliceSequence {
                    inner: this.inner,
                    driver: this.driver,
                    id: this.id,
                    current: VecDeque::new(),
                    rest: slice_units(&plan),
                    row_counts: plan.row_counts.clone(),
                    file: this.file,
                    hold: Some(this.hold),
                }),
                // Row-group granularity: the stock planner on the whole file.
                _ => Box::new(SliceSequence {
                    current: VecDeque::from([this.inner.plan_file(this.file.clone())?]),
                    inner: this.inner,
                    driver: this.driver,
                    id: this.id,
                    rest: VecDeque::new(),
                    row_counts: vec![],
                    file: this.file,
                    hold: Some(this.hold),
                }),
            };
            Ok(planner)
        })))
    }
}

/// One slice as a scan unit: (slice index, row group, selected rows).
type SliceUnit = (usize, usize, Vec<Range<u64>>);

/// The slices of `plan`, as units a sequence can read one by one or merge.
fn slice_units(plan: &SlicePlan) -> VecDeque<SliceUnit> {
    plan.slices
        .iter()
        .enumerate()
        .map(|(index, slice)| (index, slice.row_group, slice.selected.clone()))
        .collect()
}

/// `file` with an access plan that reads `units`' rows: the selected rows of
/// their row groups, nothing of the others.
fn units_file(file: &PartitionedFile, row_counts: &[u64], units: &[SliceUnit]) -> PartitionedFile {
    // The opener checks that an access plan covers every row group.
    let mut access = ParquetAccessPlan::new_none(row_counts.len());
    let mut row_groups: Vec<usize> = units.iter().map(|u| u.1).collect();
    row_groups.dedup();
    for row_group in row_groups {
        let rows = row_counts[row_group];
        let mut selectors = vec![];
        let mut at = 0u64;
        for r in units.iter().filter(|u| u.1 == row_group).flat_map(|u| &u.2) {
            if r.start > at {
                selectors.push(RowSelector::skip((r.start - at) as usize));
            }
            selectors.push(RowSelector::select((r.end - r.start) as usize));
            at = r.end;
        }
        if rows > at {
            selectors.push(RowSelector::skip((rows - at) as usize));
        }
        access.set(
            row_group,
            RowGroupAccess::Selection(RowSelection::from(selectors)),
        );
    }
    file.clone().with_extension(access)
}

/// Plans a file's slices one after the other: slice *k+1* is planned only once
/// slice *k*'s morsels are handed out, which the file stream does after the
/// previous stream ends, so slices decode in order.
struct SliceSequence {
    inner: Arc<dyn Morselizer>,
    driver: Arc<ScanDriver>,
    id: FileId,
    /// Planners of the slice being opened, in the order the stream would run them.
    current: VecDeque<Box<dyn MorselPlanner>>,
    /// The slices still to read.
    rest: VecDeque<SliceUnit>,
    row_counts: Vec<u64>,
    file: PartitionedFile,
    hold: Option<FileHold>,
}

impl fmt::Debug for SliceSequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SliceSequence")
            .field("file", &self.id)
            .field("slices_left", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl MorselPlanner for SliceSequence {
    fn plan(self: Box<Self>) -> Result<Option<MorselPlan>> {
        let mut this = *self;
        loop {
            let planner = match this.current.pop_front() {
                Some(planner) => planner,
                None => {
                    let Some(unit) = this.rest.pop_front() else {
                        return Ok(None);
                    };
                    let index = unit.0;
                    // A plan that over-predicts (page-index pruning, a dynamic
                    // filter) is dropped: one decoder reads the rest, as stock.
                    let mut units = vec![unit];
                    if this.driver.slices_mispredicted(this.id) {
                        units.extend(this.rest.drain(..));
                    }
                    this.driver.slice_started(this.id, index);
                    let file = units_file(&this.file, &this.row_counts, &units);
                    this.inner.plan_file(file)?
                }
            };
            let Some(mut plan) = planner.plan()? else {
                continue;
            };
            let morsels = plan.take_morsels();
            this.current.extend(plan.take_ready_planners());
            let pending = plan.take_pending_planner();
            let done = this.current.is_empty() && this.rest.is_empty() && pending.is_none();
            if done {
                // The last slice is open: its reader keeps the file open now.
                this.hold = None;
                return Ok(Some(MorselPlan::new().with_morsels(morsels)));
            }
            let mut out = MorselPlan::new().with_morsels(morsels);
            match pending {
                Some(pending) => {
                    out.set_pending_planner(async move {
                        let resumed = pending.await?;
                        this.current.push_back(resumed);
                        Ok(Box::new(this) as Box<dyn MorselPlanner>)
                    });
                }
                None => {
                    out = out.with_planners(vec![Box::new(this)]);
                }
            }
            return Ok(Some(out));
        }
    }
}
