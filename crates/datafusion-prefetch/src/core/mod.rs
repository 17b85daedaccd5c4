//! The pure, deterministic part of the I/O scheduler: what to fetch next, what
//! to release and what the budget allows. No tokio, no store, no clock.

mod layout;
mod scheduler;
#[cfg(test)]
mod tests;

pub use layout::FileLayout;
pub use scheduler::{
    Action, CoreConfig, CoreStats, FetchId, FileId, Part, PartitionId, ReadPlan, ScanCore,
};
