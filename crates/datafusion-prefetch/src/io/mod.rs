//! The async side of the scheduler: it performs what the pure core decides.

mod driver;
mod morsel;
mod read_error;
mod reader;
mod requests;
mod slicing;

pub(crate) use driver::{ScanScheduler, SchedulerParts, scan_unit_id};
pub(crate) use morsel::ObservedMorselizer;
pub(crate) use reader::PrefetchingReaderFactory;
pub(crate) use slicing::SlicingMorselizer;
