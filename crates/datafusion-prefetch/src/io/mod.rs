//! The async side of the scheduler: the driver that performs what the pure
//! scheduler (`crate::scheduler`) decides, and the adapters through which
//! DataFusion's Parquet decoder reaches it.
//!
//! - `driver.rs`: [`ScanDriver`], the one place the scheduler is changed:
//!   events in, actions carried out, counters published;
//! - `reads.rs`: serving the decoder's footers, slices and byte ranges;
//! - `start.rs`: streams starting early, and `auto`'s store probe;
//! - `fetches.rs`, `footers.rs`, `probe.rs`, `tasks.rs`: the background work
//!   and its slots; `fetch.rs`: the store requests themselves; `hedge.rs`:
//!   a request sent again beside itself when slow to answer;
//! - `reservation.rs`: the memory-pool reservation; `sink.rs`: how
//!   background work reports back; `units.rs`: the scan's files by id;
//!   `footer_layout.rs`: parquet metadata to the scheduler's plain data;
//!   `pruning.rs`: the row groups the opener will prune by statistics;
//! - `reader.rs`, `morsel.rs`, `slicing.rs`: the reader factory and morsel
//!   wrappers DataFusion calls; `factories.rs`: the factory they wrap;
//!   `read_error.rs`: errors of demand reads.

mod driver;
mod factories;
mod fetch;
mod fetches;
mod footer_layout;
mod footers;
mod hedge;
mod morsel;
mod probe;
mod pruning;
mod read_error;
mod reader;
mod reads;
mod reservation;
mod sink;
mod slicing;
mod start;
mod tasks;
mod units;

pub(crate) use driver::{DriverParts, ScanDriver};
pub(crate) use factories::{reads_plain_store, wrapped_reader_factory};
#[cfg(feature = "fuzzing")]
pub(crate) use footer_layout::{layout_from_metadata, offset_index_fits};
pub(crate) use hedge::first_of_two;
pub(crate) use morsel::ObservedMorselizer;
pub(crate) use pruning::StatisticsPruning;
pub(crate) use reader::PrefetchingReaderFactory;
pub(crate) use slicing::SlicingMorselizer;
pub(crate) use units::ScanUnits;
