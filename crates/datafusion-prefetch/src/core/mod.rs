//! The pure, deterministic part of the I/O scheduler: what to fetch next, what
//! to release and what the budget allows. No tokio, no store, no clock.

mod auto;
mod layout;
mod requests;
mod scheduler;
mod slices;
#[cfg(test)]
mod tests;

pub use auto::{
    AutoSnapshot, AutoTuner, DEFAULT_BANDWIDTH, DEFAULT_DECODE_RATE, DEFAULT_RTT, LOCAL_RTT,
    StoreProfiles,
};
pub use layout::{ChunkPages, FileLayout, PageSpan, offset_index_fits};
pub use requests::{RangeSource, RequestPlan, plan_requests};
pub use scheduler::{
    Action, CoreConfig, CoreStats, FetchId, FileId, Part, PartitionId, ReadPlan, ScanCore,
};
pub use slices::{MIN_COLUMN_SLICE_BYTES, Slice, SlicePiece, SlicePlan, SliceSizing, plan_slices};
